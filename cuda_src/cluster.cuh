// Thread-block-cluster helpers in raw PTX (sm_90): cooperative_groups would need the CCCL
// headers, which the CPU CI's NVRTC wheel does not ship. Used by fast_softmax.cu.
//   cluster_rank()        this CTA's rank in its cluster (%cluster_ctarank)
//   cluster_arrive/wait   split cluster barrier (release / acquire): arrive early, wait late
//   dsmem_map(p, rank)    the address of shared variable p in CTA `rank` of the cluster
//   dsmem_load(addr)      read it (ld.shared::cluster)
#pragma once

namespace klab {

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}
__device__ __forceinline__ unsigned dsmem_map(const void* p, unsigned rank) {
  unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(p)), remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
__device__ __forceinline__ float dsmem_load(unsigned addr, float) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ double dsmem_load(unsigned addr, double) {
  double v;
  asm volatile("ld.shared::cluster.f64 %0, [%1];" : "=d"(v) : "r"(addr) : "memory");
  return v;
}

}  // namespace klab
