// Kinds block_slots and persist_slots of the row-softmax family: a row held by one CTA (or a
// cluster of CL CTAs) in registers AND in shared-memory slots, for rows longer than the
// registers of one CTA hold. Windows and slots: line heads (row_common.cuh, "Slots").
#pragma once

#include "row_block.cuh"
#include "row_common.cuh"

namespace klab {

namespace rowk {

// This thread's (max, sum) of a row held in registers r and `slots` slot windows (slot(j)):
// registers first (their exps while the slots' copies still land), then each slot window folded
// in as it is read (online: one rescale a window), one shared-memory read a slot.
template <typename T, int VPT, typename Slot>
__device__ __forceinline__ MaxSum<acc_t<T>> regs_then_slots_maxsum(Vec<T> (&r)[VPT], Slot slot,
                                                                   int slots) {
  using A = acc_t<T>;
  constexpr int W = Vec<T>::N;
  MaxSum<A> st = row_maxsum(r);
  cp_async_wait_all();
#pragma unroll 4
  for (int j = 0; j < slots; ++j) {
    const Vec<T> w = slot(j);
    A v[W];
#pragma unroll
    for (int i = 0; i < W; ++i) v[i] = w.get(i);
    online_update(st, v);
  }
  return st;
}

// ---- block_slots: block_row with the row's last windows in shared-memory slots ---------------
// Ownership: CTA (cluster of CL CTAs: symbol <p>_cluster_slots) `row` owns that row; CTA rank c,
//            thread t: base = c * blockDim.x + t, step = CL * blockDim.x; window v (line heads)
//            in registers for v = k * step + base (k < VPT), in this thread's slot j
//            (mine[j * blockDim.x]) for v = (VPT + j) * step + base (j < slots).
// Steps:     the slots' cp.async copies go out first (no registers held), then the register
//            windows' plain loads: the whole row is in flight at once. Local (max, sum) of the
//            registers while the slots land, each slot window folded in online as it is read (no
//            barrier: a thread reads only what it copied); block all-reduce (clusters:
//            cluster_allreduce); epilogue on the registers, then on each slot read again.
//            Softmax on clusters keeps every exp in T (one exp an element; fp32 exact, 2-byte
//            <= 1.5 ulp): the registers' relative to their max, the slots' relative to theirs,
//            written back into the slots (four shared-memory accesses a slot window, not two).
//            One CTA a row keeps its raw values (two exps an element): there the kept exps were
//            level (+-0.4 points), on clusters +2.6-3.8 (2-byte) and +0.2-1.0 (fp32).
// Launch:    grid = M * CL CTAs of blockDim.x (<= 1024; the launcher: 256, 512 or 1024, VPT 8),
//            compile-time __cluster_dims__(CL) (CL 2 or 4); dynamic shared memory slots *
//            blockDim.x * 16 B (> 48 KB needs the attribute: the launcher sets it); static: 32
//            pairs + one. (wave_rows, wave_ns): the first wave in phases, or (0, 0).
// Precond:   vec != 0 (input and output rows in one 16-byte phase, any phase); a row spans at
//            most CL * blockDim.x * (VPT + slots) line windows.
// Bytes:     2 * M * N * sizeof(T). Slots cost: from ~8 slots a thread 3-5 points of copy.
template <template <typename> class E, typename T, int VPT, int CL>
__device__ __forceinline__ void block_slots_row(T* __restrict__ y, const T* __restrict__ x,
                                                long long rows, int n, long long stride,
                                                long long row,
                                                int slots, unsigned rank, long long wave_rows,
                                                long long wave_ns) {
  using A = acc_t<T>;
  constexpr int W = Vec<T>::N;
  __shared__ MaxSum<A> red[32];
  __shared__ A part[2];
  extern __shared__ __align__(128) uint4 row_slots[];  // slots * blockDim.x, on 128-byte lines
  const T* xr = x + row * stride;
  T* yr = y + row * (long long)n;
  const int h = line_head(xr), nwin = (n + h + W - 1) / W;
  const int t = threadIdx.x, base = rank * blockDim.x + t, step = CL * blockDim.x;
  const int first = VPT * step + base;
  uint4* mine = row_slots + t;
  stagger_first_wave(row, wave_rows, wave_ns);

  // 1. The slot windows' copies in flight (the row's bytes only; masked on every read).
  copy_slots(shared_addr(mine), xr, first, step, slots, n,
             row_followed(xr, x + (rows - 1) * stride, n));
  auto slot = [&](int j) { return slot_window<T>(mine, j, false, first + j * step, n, h, nwin); };
  // 2. The register windows, plain 16-byte loads.
  Vec<T> r[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) r[k] = load_window(xr, k * step + base, n, h, 1, neg_inf_t<T>());

  // 3. This thread's (max, sum), then the CTA's (the cluster's). Softmax on clusters keeps
  // every exp in T (see above): the registers' relative to their max (in r), the slots'
  // relative to the slots' max, written back into the slots (a max pass, then an exp pass).
  constexpr bool kKeep = E<A>::kScalesExp && sizeof(T) <= 4 && CL > 1;
  MaxSum<A> mine_ms, reg_ms, slot_ms;
  if constexpr (kKeep) {
    reg_ms = exp_maxsum_in_t(r);
    cp_async_wait_all();
    A ms = neg_inf<A>();
#pragma unroll 4
    for (int j = 0; j < slots; ++j) {
      const Vec<T> w = slot(j);
#pragma unroll
      for (int i = 0; i < W; ++i) ms = amax(ms, w.get(i));
    }
    const A mss = safe_max(ms);
    A ss = A(0);
#pragma unroll 4
    for (int j = 0; j < slots; ++j) {
      const Vec<T> w = slot(j);
      A e[W];
#pragma unroll
      for (int i = 0; i < W; ++i) {
        e[i] = exp_acc(w.get(i) - mss);
        ss += e[i];
      }
      mine[j * blockDim.x] = vec_of<T>([&](int i) { return e[i]; }).raw;
    }
    slot_ms = {ms, ss};
    mine_ms = merge(reg_ms, slot_ms);
  } else {
    mine_ms = regs_then_slots_maxsum(r, slot, slots);
  }
  const A m = mine_ms.m;
  MaxSum<A> st = block_allreduce(mine_ms, MergeOp{}, id<T>(), red);
  if constexpr (CL > 1) st = cluster_allreduce<A, CL>(st, part);

  // 4. The epilogue, registers then slots: the kept exps scaled (2-byte softmax), else the raw
  // values (two exps per element).
  const A unused[1][W] = {};
  if constexpr (kKeep) {
    write_row<E, kKeptExpsInT>(r, unused, reg_ms.m, st, [&](int k, const Vec<T>& v) {
      store_window(yr, k * step + base, n, h, 1, v);
    });
    const A f = exp_scale(slot_ms.m, st);
#pragma unroll 4
    for (int j = 0; j < slots; ++j) {
      Vec<T> w;
      w.raw = mine[j * blockDim.x];
      w = vec_of<T>([&](int i) { return w.get(i) * f; });
      store_window(yr, first + j * step, n, h, 1, w);
    }
  } else {
    write_row<E, kKeptValues, kBlockEachVector<T, VPT>>(r, unused, m, st,
                                                        [&](int k, const Vec<T>& v) {
      store_window(yr, k * step + base, n, h, 1, v);
    });
    const E<A> epi(st);
#pragma unroll 4
    for (int j = 0; j < slots; ++j) {
      Vec<T> w = slot(j);
      apply_epilogue(w, epi);
      store_window(yr, first + j * step, n, h, 1, w);
    }
  }
  if constexpr (CL > 1) cluster_wait();  // peers are done with our `part`
}

// ---- persist_slots: block_slots on resident CTAs (clusters) that roll through rows ------------
// Ownership: the grid holds only resident CTAs (clusters of CL: symbol
//            <p>_persist_cluster_slots); CTA (cluster) q of Q owns rows q, q + Q, ...; inside a
//            row thread t owns the windows block_slots gives it (registers, then slots).
// Steps:     as block_slots (raw values kept, two exps an element), but in the epilogue each
//            register window, once stored, is reloaded with the same window of the CTA's next
//            row, and each slot, once read and stored, takes that row's window by cp.async (its
//            own slot: no barrier). So the next row's loads are in flight during this row's exps
//            and stores, and no launch sits between rows. Clusters exchange each row's
//            (max, sum) as persist does (ClusterInbox messages, no cluster barrier per row).
// Launch:    grid = min(M, resident CTAs (clusters)) * CL of blockDim.x, dynamic shared memory
//            slots * blockDim.x * 16 B; static: 32 pairs + the inbox.
// Precond:   as block_slots. No launcher rule picks it (measured on H200: 90-91 % of copy at
//            2-byte 131072 on one CTA an SM, against persist's 92-94).
// Bytes:     2 * M * N * sizeof(T).
template <template <typename> class E, typename T, int VPT, int CL>
__device__ __forceinline__ void persist_slots_rows(T* __restrict__ y, const T* __restrict__ x,
                                                   long long rows, int n, long long stride,
                                                   int slots) {
  using A = acc_t<T>;
  constexpr int W = Vec<T>::N;
  __shared__ MaxSum<A> red[32];
  __shared__ ClusterInbox<A, CL> inbox;  // CL > 1: every CTA's (max, sum) of each row
  extern __shared__ __align__(128) uint4 row_slots[];  // slots * blockDim.x, on 128-byte lines
  const unsigned rank = CL > 1 ? cluster_rank() : 0u;
  const int t = threadIdx.x, base = rank * blockDim.x + t, step = CL * blockDim.x;
  const int first = VPT * step + base;
  uint4* mine = row_slots + t;
  const unsigned dst = shared_addr(mine), dst_step = blockDim.x * sizeof(uint4);
  const long long q_step = gridDim.x / CL;
  long long row = blockIdx.x / CL;
  const T* x_last = x + (rows - 1) * stride;
  if constexpr (CL > 1) {
    if (threadIdx.x == 0) inbox.init();
    cluster_sync();  // every peer's inbox exists before the first message
  }

  // Prologue: the first row in flight, slots first, then registers (as block_slots).
  Vec<T> r[VPT];
  {
    const T* xr = x + row * stride;
    const int h = line_head(xr);
    copy_slots(dst, xr, first, step, slots, n, row_followed(xr, x_last, n));
#pragma unroll
    for (int k = 0; k < VPT; ++k)
      r[k] = load_window(xr, k * step + base, n, h, 1, neg_inf_t<T>());
  }
  for (int it = 0; row < rows; ++it, row += q_step) {
    const T* xr = x + row * stride;
    T* yr = y + row * (long long)n;
    const int h = line_head(xr), nwin = (n + h + W - 1) / W;
    const bool more = row + q_step < rows;  // the row this CTA takes next
    const T* xn = more ? x + (row + q_step) * stride : xr;
    const int hn = line_head(xn), nwin_next = (n + hn + W - 1) / W, whole_next = (n + hn) / W;
    auto slot = [&](int j) { return slot_window<T>(mine, j, false, first + j * step, n, h, nwin); };

    const MaxSum<A> mine_ms = regs_then_slots_maxsum(r, slot, slots);
    const A m = mine_ms.m;
    MaxSum<A> st = block_allreduce(mine_ms, MergeOp{}, id<T>(), red);
    if constexpr (CL > 1) {  // inbox reuse: block_allreduce's first barrier orders the reads
      if (threadIdx.x < 32) inbox.send(it, rank, st.m, st.s);
      inbox.wait(it);
      const int lane = threadIdx.x & 31;
      st = warp_allreduce(lane < CL ? MaxSum<A>{inbox.a(it, lane), inbox.b(it, lane)} : id<T>(),
                          MergeOp{});
    }

    // The epilogue, registers then slots; each window, once stored, takes the next row's:
    // register window k - kReloadLag after window k is stored (kReloadLast: all of them after
    // the slots), each slot right after it is stored.
    constexpr int kReloadLag = 0;
    constexpr bool kReloadLast = false;
    auto reload = [&](int k) {
      if (more) r[k] = load_window(xn, k * step + base, n, hn, 1, neg_inf_t<T>());
    };
    const A unused[1][W] = {};
    write_row<E, kKeptValues, kBlockEachVector<T, VPT>>(r, unused, m, st,
                                                        [&](int k, const Vec<T>& v) {
      store_window(yr, k * step + base, n, h, 1, v);
      if (!kReloadLast && k >= kReloadLag) reload(k - kReloadLag);
    });
    if constexpr (!kReloadLast) {
#pragma unroll
      for (int k = VPT - kReloadLag; k < VPT; ++k) reload(k);
    }
    const E<A> epi(st);
    const uint4* src = line_slots(xn);
    int tail = -1;  // slot of the next row's partial last window, if this thread's
#pragma unroll 4
    for (int j = 0; j < slots; ++j) {
      Vec<T> w = slot(j);
      apply_epilogue(w, epi);
      const int v = first + j * step;
      store_window(yr, v, n, h, 1, w);
      // the slot's value is in registers and used: its copy of the next row may land now (whole
      // windows; slots never start before the row, as copy_slots)
      if (more && v < whole_next) cp_async16(dst + j * dst_step, src + v);
      else if (more && v < nwin_next) tail = j;
    }
    if (tail >= 0)  // its first bytes only
      cp_async16_first<T>(dst + tail * dst_step, src + whole_next,
                          (n + hn - whole_next * W) * sizeof(T), row_followed(xn, x_last, n));
    cp_async_commit();
    if constexpr (kReloadLast) {
#pragma unroll
      for (int k = 0; k < VPT; ++k) reload(k);
    }
  }
}

}  // namespace rowk
}  // namespace klab
