// cuda_cross_entropy: loss and lse of rows of C classes in one read of the logits; fused (the
// in-place mode), the gradient too: from registers where the row fits on chip
// (cross_entropy_row), else from L2 (the formulas: cross_entropy_common.cuh).
//
// cross_entropy_fwd<T, FUSED>: block b owns row b. Thread t reads the row's aligned 16-byte
//   windows t, t + blockDim.x, ... four at a time, the next four in flight while it folds the
//   current ones into its online (max, sum) (packed max for 2-byte types, one rescale per four
//   windows, ExpShifted); with smoothing also sum(w x) and sum(w). One block merge (static
//   shared memory: 32 pairs), then thread 0 writes the row's loss, lse (Lse<T>: max + log(sum) unrounded for
//   fp32) and w_t (a bad target: NaN, and the row flagged, flag_bad). FUSED: a second pass over
//   the same windows, last first (the ones read last are the likeliest still in L2), writes dx =
//   the gradient for the coefficients of cross_entropy_coefs (launched first,
//   cuda_cross_entropy_backward.cu); dx may be the logits themselves (each thread reads a
//   window before it writes it; x_t is read before the merge).
//   Launch: grid M blocks of 32-128 threads (forward_threads; fewer where that makes every row
//   resident in one wave: one_wave_threads), <= 85 registers. Bytes: M * C *
//   sizeof(T) read (fused: + the same written, and re-read from L2 when the rows in flight fit).
// cross_entropy_row<T> (block) / cross_entropy_row_cluster<T, CL> (CL CTAs a row, sm_90): the
//   in-place mode in two passes, the row held on chip: read the logits once, write dx over them
//   once. CTA rank c of row r's cluster, thread t holds windows k * CL * blockDim.x +
//   c * blockDim.x + t (k < 8) in registers; local (max, sum), one block merge, the cluster's
//   CTAs' through distributed shared memory, then every thread writes its windows' gradient from
//   its registers (two exps an element: the sum's and the gradient's). Smoothing's sums re-read
//   the row (from L2: unpacked twice, the registers spilled). Rank 0's thread 0 reads x_t before
//   the merge's barriers (no dx is written before them) and writes the row's loss, lse and w_t.
//   (wave_rows, wave_ns): the first wave in phases (stagger_first_wave), or (0, 0).
//   Launch: grid M * CL CTAs of 64-1024 threads (row_shape in cuda_variants.py), 64 registers a
//   thread (two CTAs of 512 an SM; fp32 and the 2-byte clusters spill 8-24 B: scalars stored and
//   loaded once a row). Static shared memory only. Bytes: M * C * sizeof(T) read + the same
//   written.
// cross_entropy_row_cluster_slots<T, CL> (sm_90): rows past one CTA's registers, the same two
//   passes with CL (2, 4, 8) CTAs of 512 threads: thread t holds 8 windows in registers and
//   `slots` (<= 12) more in dynamic shared memory (the softmax family's block_slots: windows
//   counted from the row's first 128-byte line, the slots' cp.async copies issued first, before
//   the register loads). Launch: grid M * CL, slots * 512 * 16 B of shared memory a CTA, two
//   CTAs an SM (slots_shape in cuda_variants.py). Bytes as cross_entropy_row.
//   cross_entropy_row_slots<T>: the same on one CTA (no cluster; any arch with cp.async), for
//   rows that would need one CTA of more than 512 threads (alone on its SM): two rows an SM.
// cross_entropy_reduce<T>: one block sums the per-row losses (and w_t for "mean") in a fixed
//   order: the reduced loss, deterministic. O(M), 8 rows' loads in flight a thread. Past
//   scan_blocks' rows, cross_entropy_reduce_parts<T> first: a block a chunk of rows, its two
//   sums a part; cross_entropy_reduce then sums the parts (<= 1024).
// Launched as programmatic dependents (cuda_variants.PROGRAMMATIC_LAUNCH, sm_90): the fused
//   forwards wait for the coefficients' kernel (grid_dependency_wait) before their first write,
//   the reductions before their first read; every forward CTA lets the next kernel launch as it
//   ends (launch_dependents). Without the launch attribute both are no-ops.
// Accumulates in fp32 (fp64 for double). Preconditions: C < 2^31; any row stride, alignment.
#include "cross_entropy_common.cuh"
#include "row_block_slots.cuh"
#include "row_common.cuh"

using klab::ce::Acc;

template <typename T, bool FUSED>
__global__ void __launch_bounds__(256, 3)
    cross_entropy_fwd(T* loss_none, Acc<T>* loss_rows, klab::ce::Lse<T>* lse_out, Acc<T>* wt_out, T* dx,
                      const Acc<T>* coefs, const T* x, long long rows, int n, long long stride,
                      int vec, const long long* target, long long ignore_index, const T* weight,
                      double eps, long long* bad_first, int* bad_flag) {
  using A = Acc<T>;
  using klab::Vec;
  constexpr int W = Vec<T>::N;
  constexpr int K = 4;  // windows folded at once; K more in flight
  __shared__ klab::MaxSum<A> red[32];
  __shared__ klab::ce::Sums<A> red_sums[32];
  const long long r = blockIdx.x;
  const T* row = x + r * stride;
  const long long t = target[r];
  const bool ignored = t == ignore_index;
  const bool bad = !ignored && (t < 0 || t >= n);
  const bool smooth = eps != 0.0;
  const int h = klab::row_head(row, vec);
  const int nwin = (n + h + W - 1) / W;
  const int step = blockDim.x;

  A xt = A(0);
  if (threadIdx.x == 0 && !ignored && !bad) xt = klab::to_acc(row[t]);  // before any dx write

  klab::MaxSum<A> st = klab::maxsum_identity<A>();
  klab::ce::Sums<A> sums = {A(0), A(0)};
  Vec<T> cur[K];
  klab::ce::load_windows(cur, row, threadIdx.x, step, nwin, n, h, vec);
  for (int v0 = threadIdx.x; v0 < nwin; v0 += K * step) {
    Vec<T> next[K];
    if (v0 + K * step < nwin) klab::ce::load_windows(next, row, v0 + K * step, step, nwin, n, h, vec);
    const A m = klab::amax(st.m, klab::rowk::vec_max(cur));
    const A ms = klab::safe_max(m);
    A s = st.s * klab::exp_acc(st.m - ms);
    const klab::ce::ExpShifted<T> ex(ms);
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int i = 0; i < W; ++i) s += ex(cur[k].get(i));
    st = {m, s};
    if (smooth) {  // -inf logits make sum(w x) -inf and the loss +inf, like PyTorch
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int i = 0; i < W; ++i) {
          const int e = (v0 + k * step) * W - h + i;
          const A wj = klab::ce::weight_at(weight, e, n);
          if (wj != A(0)) sums.wx += wj * cur[k].get(i);
          sums.w += wj;
        }
    }
#pragma unroll
    for (int k = 0; k < K; ++k) cur[k] = next[k];
  }
  st = klab::block_allreduce(st, klab::MergeOp{}, klab::maxsum_identity<A>(), red);
  if (smooth)
    sums = klab::block_allreduce(sums, klab::ce::SumsOp{}, klab::ce::Sums<A>{A(0), A(0)}, red_sums);
  const A log_sum = log(st.s);
  const A lse = st.m + log_sum;

  // a programmatic launch (FUSED): the kernel before (the coefficients') has ended before this
  // writes
  if constexpr (FUSED) klab::grid_dependency_wait();
  if (threadIdx.x == 0) {
    const A wt = ignored || bad ? A(0) : klab::ce::weight_at(weight, int(t), n);
    // fp32: exact to ulp(lse - x_t); 2-byte rows: lse - x_t, finite for rows near bf16's max
    A loss = (A(1) - A(eps)) * wt * (sizeof(T) == 2 ? lse - xt : (st.m - xt) + log_sum);
    if (smooth) loss += A(eps) / A(n) * (lse * sums.w - sums.wx);
    if (ignored) loss = A(0);
    if (bad) {
      loss = A(CUDART_NAN);
      klab::ce::flag_bad(bad_first, bad_flag, r, t);
    }
    if (loss_none) loss_none[r] = klab::from_acc<T>(loss);
    if (loss_rows) loss_rows[r] = loss;
    lse_out[r] = klab::ce::Lse<T>(st.m) + klab::ce::Lse<T>(log_sum);  // unrounded for fp32
    wt_out[r] = wt;
  }
  if constexpr (FUSED)  // p = exp((x - max) - log(sum)) (2-byte rows: exp(x - lse))
    klab::ce::grad_windows<T, true>(dx + r * stride, row, threadIdx.x, nwin, n, h, vec, t,
                                    weight, sizeof(T) == 2 ? lse : st.m, log_sum, coefs + 3 * r);
  klab::launch_dependents();  // the reduction may launch (it waits for this grid's end)
}

// Windows a thread of cross_entropy_row holds (16 bytes each: 32 registers).
constexpr int kRowVectors = 8;

// The row's (max, sum) and smoothing sums merged over the CL CTAs of its cluster: thread 0
// publishes this CTA's in `part`, one cluster barrier, every warp reads its peers' over DSMEM,
// then this CTA arrives (done reading). The caller waits (cluster_wait) before it exits.
template <typename A, int CL>
__device__ __forceinline__ void ce_cluster_merge(klab::MaxSum<A>& st, klab::ce::Sums<A>& sums,
                                                 A* part, bool smooth) {
  if (threadIdx.x == 0) {
    part[0] = st.m;
    part[1] = st.s;
    part[2] = sums.wx;
    part[3] = sums.w;
  }
  klab::cluster_sync();
  st = klab::rowk::cluster_merge<A, CL>(part);
  if (smooth) {
    const int lane = threadIdx.x & 31;
    sums = {A(0), A(0)};
    if (lane < CL) {
      const unsigned a = klab::dsmem_map(part + 2, lane);
      sums = {klab::dsmem_load(a, A()), klab::dsmem_load(a + sizeof(A), A())};
    }
    sums = klab::warp_allreduce(sums, klab::ce::SumsOp{});
  }
  klab::cluster_arrive();
}

// SLOTS: the row's windows past the registers' in `slots` shared-memory slots a thread (the
// softmax family's block_slots: line heads, cp.async copies first); rows = the tensor's rows.
template <typename T, int CL, bool SLOTS = false>
__device__ __forceinline__ void ce_row(T* loss_none, Acc<T>* loss_rows, klab::ce::Lse<T>* lse_out,
                                       Acc<T>* wt_out, T* dx, const Acc<T>* coefs, const T* x,
                                       int n, long long stride, int vec, long long r,
                                       unsigned rank, const long long* target,
                                       long long ignore_index, const T* weight, double eps,
                                       long long* bad_first, int* bad_flag, long long wave_rows,
                                       long long wave_ns, long long rows = 0, int slots = 0) {
  using A = Acc<T>;
  using klab::Vec;
  constexpr int W = Vec<T>::N, K = kRowVectors;
  klab::rowk::stagger_first_wave(r, wave_rows, wave_ns);
  __shared__ klab::MaxSum<A> red[32];
  __shared__ klab::ce::Sums<A> red_sums[32];
  __shared__ A part[4];
  extern __shared__ __align__(128) uint4 row_slots[];  // SLOTS: slots * blockDim.x, on lines
  const T* row = x + r * stride;
  const long long t = target[r];
  const bool ignored = t == ignore_index;
  const bool bad = !ignored && (t < 0 || t >= n);
  const bool smooth = eps != 0.0;
  const bool writer = rank == 0 && threadIdx.x == 0;
  const int h = SLOTS ? klab::line_head(row) : klab::row_head(row, vec);
  const int nwin = (n + h + W - 1) / W;
  const int base = rank * blockDim.x + threadIdx.x, step = CL * blockDim.x;
  const int first = K * step + base;  // SLOTS: this thread's slot j holds window first + j step
  uint4* mine = row_slots + threadIdx.x;
  auto slot = [&](int j) {
    return klab::rowk::slot_window<T>(mine, j, false, first + j * step, n, h, nwin);
  };

  A xt = A(0);
  if (writer && !ignored && !bad) xt = klab::to_acc(row[t]);  // before the merge's barriers
  if constexpr (SLOTS)  // the slots' copies in flight first (the row's bytes only)
    klab::rowk::copy_slots(klab::shared_addr(mine), row, first, step, slots, n,
                           klab::row_followed(row, x + (rows - 1) * stride, n));
  Vec<T> v[K];
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = klab::ce::window(row, k * step + base, n, h, vec);
  klab::MaxSum<A> st;
  if constexpr (SLOTS) st = klab::rowk::regs_then_slots_maxsum(v, slot, slots);
  else st = klab::rowk::row_maxsum(v);
  klab::ce::Sums<A> sums = {A(0), A(0)};
  if (smooth) {  // re-read from L2, not from the registers (unpacked twice, they spilled)
#pragma unroll 1
    for (int k = 0; k < K + (SLOTS ? slots : 0); ++k) {
      const int w = k * step + base;
      const Vec<T> u = klab::ce::window(row, w, n, h, vec);
#pragma unroll
      for (int i = 0; i < W; ++i) {  // -inf logits make sum(w x) -inf, the loss +inf (PyTorch)
        const A wj = klab::ce::weight_at(weight, w * W - h + i, n);
        if (wj != A(0)) sums.wx += wj * u.get(i);
        sums.w += wj;
      }
    }
  }
  st = klab::block_allreduce(st, klab::MergeOp{}, klab::maxsum_identity<A>(), red);
  if (smooth)
    sums = klab::block_allreduce(sums, klab::ce::SumsOp{}, klab::ce::Sums<A>{A(0), A(0)}, red_sums);
  if constexpr (CL > 1) ce_cluster_merge<A, CL>(st, sums, part, smooth);
  const A log_sum = log(st.s);
  const A lse = st.m + log_sum;

  // a programmatic launch: the kernel before (the coefficients') has ended before this writes
  klab::grid_dependency_wait();
  if (writer) {  // as cross_entropy_fwd
    const A wt = ignored || bad ? A(0) : klab::ce::weight_at(weight, int(t), n);
    A loss = (A(1) - A(eps)) * wt * (sizeof(T) == 2 ? lse - xt : (st.m - xt) + log_sum);
    if (smooth) loss += A(eps) / A(n) * (lse * sums.w - sums.wx);
    if (ignored) loss = A(0);
    if (bad) {
      loss = A(CUDART_NAN);
      klab::ce::flag_bad(bad_first, bad_flag, r, t);
    }
    if (loss_none) loss_none[r] = klab::from_acc<T>(loss);
    if (loss_rows) loss_rows[r] = loss;
    lse_out[r] = klab::ce::Lse<T>(st.m) + klab::ce::Lse<T>(log_sum);
    wt_out[r] = wt;
  }
  {  // dx = A exp(x - lse) - B [j = t] - D w_j (2-byte rows: lo not subtracted)
    const A* c = coefs + 3 * r;
    const A ca = c[0], cb = c[1], cd = c[2];
    const A hi = sizeof(T) == 2 ? lse : st.m, lo = log_sum;
    const int tc = bad ? -1 : int(t);  // an ignored row's B is 0
    T* out = dx + r * stride;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int w = k * step + base;
      if (w >= nwin) break;
      const int e0 = w * W - h;
      const Vec<T> o = klab::vec_of<T>([&](int i) {
        A z = v[k].get_again(i) - hi;
        if constexpr (sizeof(T) != 2) z -= lo;
        A d = ca * klab::exp_acc(z) - (e0 + i == tc ? cb : A(0));
        if (cd != A(0)) d -= cd * klab::ce::weight_at(weight, e0 + i, n);
        return d;
      });
      klab::store_window(out, w, n, h, vec, o);
    }
    if constexpr (SLOTS) {
#pragma unroll 4
      for (int j = 0; j < slots; ++j) {
        const int w = first + j * step;
        if (w >= nwin) break;
        const int e0 = w * W - h;
        const Vec<T> u = slot(j);
        const Vec<T> o = klab::vec_of<T>([&](int i) {
          A z = u.get(i) - hi;
          if constexpr (sizeof(T) != 2) z -= lo;
          A d = ca * klab::exp_acc(z) - (e0 + i == tc ? cb : A(0));
          if (cd != A(0)) d -= cd * klab::ce::weight_at(weight, e0 + i, n);
          return d;
        });
        klab::store_window(out, w, n, h, 1, o);
      }
    }
  }
  if constexpr (CL > 1) klab::cluster_wait();  // peers are done with our `part`
  klab::launch_dependents();  // the reduction may launch (it waits for this grid's end)
}

#define KLAB_CE_ROW_ARGS                                                                        \
  T *loss_none, Acc<T>*loss_rows, klab::ce::Lse<T>*lse_out, Acc<T>*wt_out, T*dx,                \
      const Acc<T>*coefs, const T*x, long long rows, int n, long long stride, int vec,          \
      const long long*target, long long ignore_index, const T*weight, double eps,               \
      long long*bad_first, int*bad_flag, long long wave_rows, long long wave_ns
#define KLAB_CE_ROW_PASS                                                                        \
  loss_none, loss_rows, lse_out, wt_out, dx, coefs, x, n, stride, vec

template <typename T>
__global__ void __launch_bounds__(1024) cross_entropy_row(KLAB_CE_ROW_ARGS) {
  ce_row<T, 1>(KLAB_CE_ROW_PASS, blockIdx.x, 0, target, ignore_index, weight, eps, bad_first,
               bad_flag, wave_rows, wave_ns);
}

template <typename T, int CL>
__global__ void KLAB_CLUSTER_DIMS(CL) __launch_bounds__(512, 2)
    cross_entropy_row_cluster_slots(KLAB_CE_ROW_ARGS, int slots) {
  ce_row<T, CL, true>(KLAB_CE_ROW_PASS, blockIdx.x / CL, klab::cluster_rank(), target,
                      ignore_index, weight, eps, bad_first, bad_flag, wave_rows, wave_ns, rows,
                      slots);
}

template <typename T>
__global__ void __launch_bounds__(512, 2) cross_entropy_row_slots(KLAB_CE_ROW_ARGS, int slots) {
  ce_row<T, 1, true>(KLAB_CE_ROW_PASS, blockIdx.x, 0, target, ignore_index, weight, eps,
                     bad_first, bad_flag, wave_rows, wave_ns, rows, slots);
}

template <typename T, int CL>
__global__ void KLAB_CLUSTER_DIMS(CL) __launch_bounds__(1024)
    cross_entropy_row_cluster(KLAB_CE_ROW_ARGS) {
  ce_row<T, CL>(KLAB_CE_ROW_PASS, blockIdx.x / CL, klab::cluster_rank(), target, ignore_index,
                weight, eps, bad_first, bad_flag, wave_rows, wave_ns);
}

// The reduced loss: sum of the rows' losses, divided by sum(w_t) when mean (0 / 0 = NaN when
// every row is ignored, as PyTorch). One block, a fixed summation order (scan_pair); past
// scan_blocks' rows it sums cross_entropy_reduce_parts' parts instead of the rows.
template <typename T>
__global__ void __launch_bounds__(1024)
    cross_entropy_reduce(T* out, const Acc<T>* __restrict__ loss_rows,
                         const Acc<T>* __restrict__ wt, long long rows, int mean) {
  using A = Acc<T>;
  __shared__ A red[32];
  klab::grid_dependency_wait();  // the forward (or the parts) has ended: a programmatic launch
  A l = A(0), d = A(0);
  klab::ce::scan_pair(loss_rows, wt, 0, rows, l, d);
  l = klab::block_allreduce(l, klab::SumOp{}, A(0), red);
  if (mean) d = klab::block_allreduce(d, klab::SumOp{}, A(0), red);
  if (threadIdx.x == 0) out[0] = klab::from_acc<T>(mean ? l / d : l);
}

// Many rows' losses (cuda_variants.scan_blocks): block b sums rows [b chunk, (b + 1) chunk)
// into part_l[b] and their w_t into part_d[b] (scan_pair's order); cross_entropy_reduce sums
// the parts. Grid: the parts, <= 1024 (one a thread of the final block).
template <typename T>
__global__ void __launch_bounds__(1024)
    cross_entropy_reduce_parts(Acc<T>* part_l, Acc<T>* part_d,
                               const Acc<T>* __restrict__ loss_rows,
                               const Acc<T>* __restrict__ wt, long long rows, long long chunk) {
  using A = Acc<T>;
  __shared__ A red[32];
  klab::grid_dependency_wait();  // the forward has ended: a programmatic launch
  const long long lo = blockIdx.x * chunk, hi = lo + chunk < rows ? lo + chunk : rows;
  A l = A(0), d = A(0);
  klab::ce::scan_pair(loss_rows, wt, lo, hi, l, d);
  l = klab::block_allreduce(l, klab::SumOp{}, A(0), red);
  d = klab::block_allreduce(d, klab::SumOp{}, A(0), red);
  if (threadIdx.x == 0) {
    part_l[blockIdx.x] = l;
    part_d[blockIdx.x] = d;
  }
}
