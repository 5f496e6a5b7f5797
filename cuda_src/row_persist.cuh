// Kinds persist and pipe of the row-softmax family: persistent CTAs (clusters) that loop over
// rows with the next row's windows in flight into shared-memory slots (row_common.cuh, "Slots").
#pragma once

#include "row_common.cuh"

namespace klab {

namespace rowk {

// ---- persist: persistent CTAs / clusters, the next row prefetched -----------------------------
// Ownership: the grid holds only the CTAs (clusters of CL) resident at once; CTA (cluster) q of Q
//            owns rows q, q + Q, q + 2Q, ...; inside a row CTA rank c, thread t holds windows
//            k * CL * blockDim.x + c * blockDim.x + t (k < VPT; line heads).
// Pipeline:  the current row's windows sit in registers; this thread's windows of the NEXT row
//            (`stages` = 2: the next two rows', in alternating slot sets) are in flight into its
//            slots (cp.async.cg, one commit group a row) while the CTA reduces, exchanges
//            (max, sum) with its peers, normalizes and stores. The copies are issued right after
//            the local (max, sum) has consumed every value read from those slots; `late` != 0
//            (clusters only) issues them between sending and waiting instead.
// Cluster:   each CTA sends its (max, sum) to every peer's inbox as an st.async message counted
//            by the peer's mbarrier (cluster.cuh, ClusterInbox): no cluster barrier per row,
//            whose release (MEMBAR.ALL.GPU) waited for the previous row's stores (measured on
//            H200: bf16 151936 57 % -> 78 % of copy without it).
// Kept:      softmax keeps its fp32 exps up to 64 elements a thread (fp32 x 16, fp16/bf16 x 8),
//            fp16/bf16 x 16 its exps rounded to T in the values' registers (kKeptFor).
// Interior:  warps whose windows in the row are all whole read their slots and store with no
//            per-window checks (windows_inside, decided per warp).
// Launch:    grid = min(M, resident CTAs (clusters)) * CL, blockDim.x a multiple of 32 covering
//            blockDim.x * VPT * CL windows, <= 512 where a thread keeps 64 or more elements
//            (PersistThreads), else <= 1024; dynamic shared memory stages * blockDim.x * VPT *
//            16 B (stages 1 or 2; > 48 KB needs the attribute: the launcher sets it); static: 32
//            pairs + 2 inboxes.
// Precond:   vec != 0 (input and output rows in one 16-byte phase, any phase).
// Bytes:     2 * M * N * sizeof(T), loads always in flight (no launch per row).
template <template <typename> class E, typename T, int VPT, int CL>
__device__ __forceinline__ void persist_rows(T* __restrict__ y, const T* __restrict__ x,
                                             long long rows, int n, long long stride,
                                             int late, int stages) {
  using A = acc_t<T>;
  constexpr int W = Vec<T>::N;
  __shared__ MaxSum<A> red[32];
  __shared__ ClusterInbox<A, CL> inbox;  // CL > 1: every CTA's (max, sum) of each row
  // stages * blockDim.x * VPT slots, on 128-byte lines (row_common.cuh, "Slots")
  extern __shared__ __align__(128) uint4 prefetch_slots[];
  const unsigned rank = CL > 1 ? cluster_rank() : 0u;
  const long long q = blockIdx.x / CL, Q = gridDim.x / CL;
  const int base = rank * blockDim.x + threadIdx.x, step = CL * blockDim.x;
  const int stage_slots = blockDim.x * VPT;
  if constexpr (CL > 1) {
    if (threadIdx.x == 0) inbox.init();
    cluster_sync();  // every peer's inbox exists before the first message
  }

  // Prologue: rows q, q + Q, ... (one per stage) in flight, one commit group each.
  for (int s = 0; s < stages; ++s) {
    const long long r = q + s * Q;
    if (r < rows) {
      const T* xr = x + r * stride;
      prefetch_row<T, VPT>(prefetch_slots + s * stage_slots + threadIdx.x, xr, n, base, step,
                           xr != x, row_followed(xr, x + (rows - 1) * stride, n));
    }
    cp_async_commit();
  }
  long long row = q;
  for (int it = 0; row < rows; ++it, row += Q) {
    const T* xr = x + row * stride;
    T* yr = y + row * (long long)n;
    const int h = line_head(xr);
    uint4* mine = prefetch_slots + (stages > 1 ? (it & 1) : 0) * stage_slots + threadIdx.x;
    cp_async_wait_stage(stages);  // this thread's copies of `row` have landed
    constexpr int kKept = kKeptFor<E, T, VPT * W, 64>;
    Vec<T> r[VPT];
    A e[kKept == kKeptExps ? VPT : 1][W];
    const bool inside = windows_inside<T, VPT>(base, step, n, h);
    const int nwin = (n + h + W - 1) / W;
    read_slots(r, mine, inside, n, h, nwin, base, step);
    auto prefetch_next = [&]() {  // the row `stages` ahead, into the slots just read
      const long long rn = row + stages * Q;
      if (rn < rows) {
        const T* xn = x + rn * stride;
        prefetch_row<T, VPT>(mine, xn, n, opaque(base), step, xn != x,
                             row_followed(xn, x + (rows - 1) * stride, n));
      }
      cp_async_commit();
    };
    MaxSum<A> st = kept_maxsum<kKept>(r, e);  // consumes every value read from the slots ...
    const A m_thread = st.m;
    if (CL == 1 || !late) prefetch_next();  // ... so the slots can take the next row now
    st = block_allreduce(st, MergeOp{}, id<T>(), red);
    if constexpr (CL > 1) {
      if (threadIdx.x < 32) inbox.send(it, rank, st.m, st.s);
      if (late) prefetch_next();  // issue the next row's copies while the messages fly
      inbox.wait(it);
      const int lane = threadIdx.x & 31;
      st = warp_allreduce(lane < CL ? MaxSum<A>{inbox.a(it, lane), inbox.b(it, lane)} : id<T>(),
                          MergeOp{});
    }
    store_row<E, kKept>(yr, r, e, m_thread, st, inside, opaque(base), step, n, h, nwin);
  }
  cp_async_wait_all();
}

// This thread's (max, sum of exp(x - max)) of a row from its slots, one window at a time: the
// registers hold the previous row meanwhile. Two reads of each slot (max, then sum).
template <typename T, int VPT>
__device__ __forceinline__ MaxSum<acc_t<T>> slots_maxsum(const uint4* mine, bool inside, int base,
                                                         int step, int n, int h) {
  using A = acc_t<T>;
  const int nwin = (n + h + Vec<T>::N - 1) / Vec<T>::N;
  A m = neg_inf<A>();
#pragma unroll 4
  for (int k = 0; k < VPT; ++k) {
    const Vec<T> r = slot_window<T>(mine, k, inside, k * step + base, n, h, nwin);
#pragma unroll
    for (int i = 0; i < Vec<T>::N; ++i) m = amax(m, r.get(i));
  }
  const A ms = safe_max(m);
  A s = A(0);
#pragma unroll 4
  for (int k = 0; k < VPT; ++k) {
    const Vec<T> r = slot_window<T>(mine, k, inside, k * step + base, n, h, nwin);
#pragma unroll
    for (int i = 0; i < Vec<T>::N; ++i) s += exp_acc(r.get(i) - ms);
  }
  return {m, s};
}

// ---- pipe: persistent clusters, each row's (max, sum) exchange behind the next row ------------
// Ownership: as persist (cluster q of Q owns rows q, q + Q, ...; CTA rank c, thread t: windows
//            k * CL * blockDim.x + c * blockDim.x + t), `stages` rows in flight into as many slot
//            sets. Row j of the cluster goes through:
//   announce  its local (max, sum) from the slots (2 reads, 1 exp per element), block all-reduce,
//             sent to every peer (ClusterInbox with 4 inboxes, since row j + 1 is sent before
//             row j is received);
//   load      (once row j - 1 is stored) the slots into registers: e = exp(x - m_thread) for
//             softmax, the raw values for log_softmax; the slots then take row j + stages;
//   store     after announcing row j + 1: wait for row j's messages, scale, 16-byte stores.
// So each row's exchange overlaps the next row's reduction instead of idling every warp (in
// persist the wait for the peers' messages was a third of all warp stall samples, ncu, fp32
// 65536). Cost: 2 exps per element for softmax, 3 shared-memory reads per window, 4 inboxes.
// Launch:    as persist, clusters only (symbol <p>_persist_pipe); dynamic shared memory stages *
//            blockDim.x * VPT * 16 B. Precond: as persist. Bytes: 2 * M * N * sizeof(T).
// No launcher rule picks it: persist with its slots on 128-byte lines wins where it had won
// (measured on H200: fp32 65536 persist 8x128x16 94.4 % of copy vs pipe 91.7 %).
template <template <typename> class E, typename T, int VPT, int CL>
__device__ __forceinline__ void pipe_rows(T* __restrict__ y, const T* __restrict__ x,
                                          long long rows, int n, long long stride,
                                          int stages) {
  using A = acc_t<T>;
  constexpr int W = Vec<T>::N;
  constexpr bool kExp = kKeptFor<E, T, VPT * W, 64> == kKeptExps;  // else the raw values
  __shared__ MaxSum<A> red[32];
  __shared__ ClusterInbox<A, CL, 4> inbox;
  extern __shared__ __align__(128) uint4 prefetch_slots[];  // stages * blockDim.x * VPT
  const unsigned rank = cluster_rank();
  const long long q = blockIdx.x / CL, Q = gridDim.x / CL;
  const int base = rank * blockDim.x + threadIdx.x, step = CL * blockDim.x;
  if (threadIdx.x == 0) inbox.init();
  cluster_sync();  // every peer's inbox exists before the first message

  auto slots = [&](int j) {  // slot set of row j: j % stages
    return prefetch_slots + (stages > 1 ? (j & 1) : 0) * (blockDim.x * VPT) + threadIdx.x;
  };
  auto request = [&](int j) {  // row j of this cluster into its slot set: one commit group
    const long long r = q + j * Q;
    if (r < rows) {
      const T* xr = x + r * stride;
      prefetch_row<T, VPT>(slots(j), xr, n, opaque(base), step, xr != x,
                           row_followed(xr, x + (rows - 1) * stride, n));
    }
    cp_async_commit();
  };
  auto announce = [&](int j, bool inside, int h) {  // returns this thread's max of row j
    MaxSum<A> st = slots_maxsum<T, VPT>(slots(j), inside, opaque(base), step, n, h);
    const A m_thread = st.m;
    st = block_allreduce(st, MergeOp{}, id<T>(), red);
    if (threadIdx.x < 32) inbox.send(j, rank, st.m, st.s);
    return m_thread;
  };
  Vec<T> r[VPT];
  A e[kExp ? VPT : 1][W];
  auto load = [&](int j, bool inside, int h, A m_thread) {  // row j: slots -> registers
    const uint4* mine = slots(j);
    const int nwin = (n + h + W - 1) / W, b = opaque(base);
#pragma unroll
    for (int k = 0; k < VPT; ++k) r[k] = slot_window<T>(mine, k, inside, k * step + b, n, h, nwin);
    if constexpr (kExp) {
      const A ms = safe_max(m_thread);
#pragma unroll
      for (int k = 0; k < VPT; ++k)
#pragma unroll
        for (int i = 0; i < W; ++i) e[k][i] = exp_acc(r[k].get(i) - ms);
    }
  };

  if (q >= rows) return;  // the whole cluster: every CTA of it has the same q
  for (int j = 0; j < stages; ++j) request(j);
  cp_async_wait_stage(stages);  // row 0 has landed
  int h = line_head(x + q * stride);
  bool inside = windows_inside<T, VPT>(base, step, n, h);
  A m_thread = announce(0, inside, h);
  load(0, inside, h, m_thread);
  request(stages);
  for (int j = 0; q + j * Q < rows; ++j) {
    const long long row = q + j * Q;
    const bool more = row + Q < rows;
    int h_next = 0;
    bool inside_next = false;
    A m_next = A(0);
    if (more) {  // row j + 1: its reduction and messages, while row j's messages fly
      cp_async_wait_stage(stages);  // row j + 1 has landed (stages 2: j + 2 may be in flight)
      h_next = line_head(x + (row + Q) * stride);
      inside_next = windows_inside<T, VPT>(base, step, n, h_next);
      m_next = announce(j + 1, inside_next, h_next);
    }
    inbox.wait(j);
    const int lane = threadIdx.x & 31;
    const MaxSum<A> st = warp_allreduce(
        lane < CL ? MaxSum<A>{inbox.a(j, lane), inbox.b(j, lane)} : id<T>(), MergeOp{});
    T* yr = y + row * (long long)n;
    const int nwin = (n + h + W - 1) / W;
    store_row<E, kExp>(yr, r, e, m_thread, st, inside, opaque(base), step, n, h, nwin);
    if (more) {
      load(j + 1, inside_next, h_next, m_next);
      request(j + 1 + stages);  // into the slots just read
    }
    h = h_next;
    inside = inside_next;
    m_thread = m_next;
  }
  cp_async_wait_all();
}

}  // namespace rowk
}  // namespace klab
