// cluster_probe<CL>: where the CTAs of a grid of CL-CTA clusters run, and when - do all the
// clusters that the occupancy API calls resident really run at once?
// Ownership: every thread of a CTA spins on %globaltimer for `spin_ns` (the CTA holds its SM
//            meanwhile; the launcher's dynamic shared memory decides how many fit per SM); then
//            thread 0 writes record blockIdx.x: (SM id, cluster index blockIdx.x / CL, rank in
//            the cluster, start ns, end ns).
// Launch:    grid = clusters * CL CTAs of any size, non-portable sizes (> 8) opted in.
// Cost:      spin_ns per CTA; 40 bytes written per CTA, nothing read.
// Used by kernel_lab/cuda/occupancy.py (cluster_placement) and tests/test_forward_kernels_gpu.py.
#include "cluster.cuh"

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned sm_id() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

template <int CL>
__global__ void KLAB_CLUSTER_DIMS(CL)
    cluster_probe(unsigned long long* __restrict__ out, long long spin_ns) {
  const unsigned long long start = global_ns();
  while (static_cast<long long>(global_ns() - start) < spin_ns) {
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long* r = out + 5ull * blockIdx.x;
    r[0] = sm_id();
    r[1] = blockIdx.x / CL;
    r[2] = CL > 1 ? klab::cluster_rank() : 0u;
    r[3] = start;
    r[4] = global_ns();
  }
}
