// Thread-block-cluster helpers in raw PTX (sm_90): cooperative_groups would need the CCCL
// headers, which the CPU CI's NVRTC wheel does not ship. Used by fast_softmax.cu.
//   cluster_rank()        this CTA's rank in its cluster (%cluster_ctarank)
//   cluster_arrive/wait   split cluster barrier (release / acquire): arrive early, wait late
//   dsmem_map(p, rank)    the address of shared variable p in CTA `rank` of the cluster
//   dsmem_load(addr)      read it (ld.shared::cluster)
//   mbar_init / fence_mbar_init / mbar_arrive_expect_tx / mbar_wait: a shared-memory mbarrier
//                         whose phase completes after one arrive and a byte count
//   dsmem_send(dst, bar, rank, a, b)  write the pair (a, b) into CTA `rank`'s `dst` and count
//                         its bytes on that CTA's mbarrier `bar` (st.async): no fence
//
// Why messages: barrier.cluster.arrive.release (and fence.acq_rel.cluster) compile to
// MEMBAR.ALL.GPU, which waits until every earlier store of the thread is acknowledged. In a
// persistent kernel those are the previous row's stores, so each row's cluster exchange stalled
// on them. st.async + mbarrier orders only the message itself.
#pragma once

// A kernel's compile-time cluster of CL CTAs. Clusters exist from sm_90: compiled for an older
// arch the attribute is left out, and the launchers never pick (nor compile) a cluster kernel
// there (its body's cluster PTX would not assemble).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define KLAB_CLUSTER_DIMS(CL) __cluster_dims__(CL, 1, 1)
#else
#define KLAB_CLUSTER_DIMS(CL)
#endif

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

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
}
// Makes mbarrier.init visible to the cluster (peers may signal it); then a cluster barrier.
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// This phase completes after this arrive and `bytes` more bytes of complete_tx (which may land
// before the arrive: the transaction count may go negative meanwhile).
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
// Wait until the phase with this parity has completed (acquire: its bytes are visible).
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
  asm volatile(
      "{\n"
      "  .reg .pred done;\n"
      "WAIT_%=:\n"
      "  mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "  @!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void dsmem_send(const void* dst, unsigned long long* bar,
                                           unsigned rank, float a, float b) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];"
      ::"r"(dsmem_map(dst, rank)), "f"(a), "f"(b), "r"(dsmem_map(bar, rank))
      : "memory");
}
__device__ __forceinline__ void dsmem_send(const void* dst, unsigned long long* bar,
                                           unsigned rank, double a, double b) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f64 [%0], {%1, %2}, [%3];"
      ::"r"(dsmem_map(dst, rank)), "d"(a), "d"(b), "r"(dsmem_map(bar, rank))
      : "memory");
}

// One pair (a, b) per CTA and row, all-to-all across a cluster of CL CTAs, without a cluster
// barrier per row (see "Why messages" above). Rows take NB inboxes in turn (row it: it % NB).
//   init()               one thread, once; then a cluster barrier before the first send
//   send(it, rank, a, b) warp 0, all lanes: lane c < CL sends this CTA's pair for row `it`
//                        into CTA c's inbox (lane 0 first announces the bytes this CTA expects)
//   wait(it)             every thread: all CL pairs of row `it` are here; then a(it, c), b(it, c)
// Safe reuse, NB = 2 (send(it) then wait(it) each row): the caller's block barrier between
// wait(it) and send(it + 1) means every thread has read inbox it % 2 before this CTA sends row
// it + 1, and a peer can only send row it + 2 after receiving that message. NB = 4 (the
// pipe kind sends row it + 1 BEFORE waiting for row it): a peer's send(it + 4) follows its
// wait(it + 2), which needs this CTA's send(it + 2), which follows a block barrier after every
// thread here read inbox it % 4. (With 3, a peer could send row it + 3 while this CTA still
// reads row it.) The last row's wait also means that no message to this CTA is in flight when it
// exits.
template <typename A, int CL, int NB = 2> struct ClusterInbox {
  A box[NB][CL][2];             // [row % NB][sender rank][a, b]
  unsigned long long full[NB];  // [row % NB]: completes once all CL pairs have landed

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int i = 0; i < NB; ++i) mbar_init(&full[i], 1);
    fence_mbar_init();
  }
  static __device__ __forceinline__ unsigned slot(int it) { return unsigned(it) % NB; }
  __device__ __forceinline__ void send(int it, unsigned rank, A a, A b) {
    const unsigned p = slot(it);
    const int lane = threadIdx.x & 31;
    if (lane == 0) mbar_arrive_expect_tx(&full[p], CL * 2 * sizeof(A));
    if (lane < CL) dsmem_send(&box[p][rank][0], &full[p], lane, a, b);
  }
  __device__ __forceinline__ void wait(int it) { mbar_wait(&full[slot(it)], (unsigned(it) / NB) & 1); }
  __device__ __forceinline__ A a(int it, int c) const { return box[slot(it)][c][0]; }
  __device__ __forceinline__ A b(int it, int c) const { return box[slot(it)][c][1]; }
};

}  // namespace klab
