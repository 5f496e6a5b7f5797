// cuda_cross_entropy: loss and lse of rows of C classes in one read of the logits; fused, the
// gradient too, in the same block, from L2 (the formulas: cross_entropy_common.cuh).
//
// cross_entropy_fwd<T, FUSED>: block b owns row b. Thread t reads the row's aligned 16-byte
//   windows t, t + blockDim.x, ... four at a time, the next four in flight while it folds the
//   current ones into its online (max, sum) (packed max for 2-byte types, one rescale per four
//   windows, ExpShifted); with smoothing also sum(w x) and sum(w). One block merge (static shared memory:
//   32 pairs), then thread 0 writes the row's loss, lse (Lse<T>: max + log(sum) unrounded for
//   fp32) and w_t (a bad target: NaN, and the row flagged, flag_bad). FUSED: a second pass over
//   the same windows, last first (the ones read last are the likeliest still in L2), writes dx =
//   the gradient for the coefficients of cross_entropy_coefs (launched first,
//   cuda_cross_entropy_backward.cu); dx may be the logits themselves (each thread reads a
//   window before it writes it; x_t is read before the merge).
//   Launch: grid M blocks of 32-256 threads (forward_threads), 3 blocks an SM (<= 85 registers). Bytes: M * C * sizeof(T) read
//   (fused: + the same written, and re-read from L2 when the rows in flight fit it).
// cross_entropy_reduce<T>: one block sums the per-row losses (and w_t for "mean") in a fixed
//   order: the reduced loss, deterministic. O(M).
// Accumulates in fp32 (fp64 for double). Preconditions: C < 2^31; any row stride, alignment.
#include "cross_entropy_common.cuh"

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
}

// The reduced loss: sum of the rows' losses, divided by sum(w_t) when mean (0 / 0 = NaN when
// every row is ignored, as PyTorch). One block; fixed summation order.
template <typename T>
__global__ void __launch_bounds__(1024)
    cross_entropy_reduce(T* out, const Acc<T>* loss_rows, const Acc<T>* wt, long long rows,
                         int mean) {
  using A = Acc<T>;
  __shared__ A red[32];
  A l = A(0), d = A(0);
  for (long long r = threadIdx.x; r < rows; r += blockDim.x) {
    l += loss_rows[r];
    d += wt[r];
  }
  l = klab::block_allreduce(l, klab::SumOp{}, A(0), red);
  if (mean) d = klab::block_allreduce(d, klab::SumOp{}, A(0), red);
  if (threadIdx.x == 0) out[0] = klab::from_acc<T>(mean ? l / d : l);
}
