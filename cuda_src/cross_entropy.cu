// cross_entropy over (rows, classes): loss and lse in one read of the logits; the gradient in
// one read and one write, or - fused - in the same kernel as the loss, from L2.
//
// Per row i, t = target[i], eps = label smoothing, w the class weights (1 without):
//   lse    = max + log(sum_j exp(x_j - max))
//   loss_i = (1 - eps) * w_t * (lse - x_t) + eps / C * (lse * sum_j w_j - sum_j w_j x_j)
//   dx_j   = A_i * exp(x_j - lse) - B_i * [j == t] - D_i * w_j
// with A_i = s_i * ((1 - eps) * w_t + eps / C * sum(w)), B_i = s_i * (1 - eps) * w_t,
// D_i = s_i * eps / C, s_i the row's upstream gradient (cross_entropy_coefs: 0 for ignored rows).
// A row whose target is ignore_index has loss 0 (its lse is still computed); a target outside
// [0, C) gives loss NaN and a NaN gradient row and is never read (the launcher refuses such
// targets before launch; only a CUDA-graph capture, which cannot read them back, gets here).
//
// Kernels (all accumulate in fp32, fp64 for double):
//   cross_entropy_fwd<T, FUSED>   block b owns row b: thread t reads the row's aligned 16-byte
//       windows t, t + blockDim.x, ... (4 in flight), keeping an online (max, sum), and with
//       smoothing sum(w x) and sum(w); one block merge (32 pairs of static shared memory), then
//       thread 0 writes the row's loss, lse and w_t. FUSED: a second pass over the same windows
//       (from L2 when the rows in flight fit it) writes dx (which may be x itself: each thread
//       reads a window before it writes it, and x_t is read before the merge).
//       Bytes: M * C * sizeof(T) read (+ M * C * sizeof(T) written and re-read from L2 fused).
//   cross_entropy_bwd<T>          block (b, r) owns columns [b * span, (b + 1) * span) of row r:
//       dx from x, lse and the row's coefficients (A, B, D). Bytes: read + write M * C * T.
//   cross_entropy_coefs<T>        one block: sum(w) and the mean's denominator sum(w_t) in a
//       fixed order (deterministic), then (A, B, D) of every row. O(M + C).
//   cross_entropy_reduce<T>       one block: the reduced loss from the per-row losses and w_t,
//       summed in a fixed order. O(M).
// Preconditions: C < 2^31, any row stride, any alignment (vec = 0: element-wise windows).
#include "softmax_common.cuh"

namespace {

using klab::Vec;
template <typename T> using Acc = klab::acc_t<T>;

// Window v of the row, or -inf past its ends (vec: 16-byte loads for the whole windows).
template <typename T>
__device__ __forceinline__ Vec<T> window(const T* row, int v, int n, int h, int vec) {
  return klab::load_window<T>(row, v, n, h, vec, klab::neg_inf_t<T>());
}

// The weight of element e of the row (1 without weights; 0 outside the row).
template <typename T> __device__ __forceinline__ Acc<T> weight_at(const T* w, int e, int n) {
  if (e < 0 || e >= n) return Acc<T>(0);
  return w ? klab::to_acc(w[e]) : Acc<T>(1);
}

template <typename A> struct Sums {
  A wx, w;  // sum of w_j * x_j and of w_j over the row (smoothing only)
};
struct SumsOp {
  template <typename A> __device__ __forceinline__ Sums<A> operator()(Sums<A> a, Sums<A> b) const {
    return {a.wx + b.wx, a.w + b.w};
  }
};
template <typename A> __device__ __forceinline__ Sums<A> shfl_xor(Sums<A> v, int o) {
  return {klab::shfl_xor(v.wx, o), klab::shfl_xor(v.w, o)};
}

}  // namespace

template <typename T, bool FUSED>
__global__ void __launch_bounds__(1024)
    cross_entropy_fwd(T* loss_none, Acc<T>* loss_rows, Acc<T>* lse_out, Acc<T>* wt_out, T* dx,
                      const Acc<T>* coefs, const T* x, long long rows, int n, long long stride,
                      int vec, const long long* target, long long ignore_index, const T* weight,
                      float eps) {
  using A = Acc<T>;
  constexpr int W = Vec<T>::N;
  constexpr int K = 4;  // windows in flight per thread
  __shared__ klab::MaxSum<A> red[32];
  __shared__ Sums<A> red_sums[32];
  const long long r = blockIdx.x;
  const T* row = x + r * stride;
  const long long t = target[r];
  const bool ignored = t == ignore_index;
  const bool bad = !ignored && (t < 0 || t >= n);
  const bool smooth = eps != 0.0f;
  const int h = klab::row_head(row, vec);
  const int nwin = (n + h + W - 1) / W;
  const int step = blockDim.x;

  A xt = A(0);
  if (threadIdx.x == 0 && !ignored && !bad) xt = klab::to_acc(row[t]);  // before any dx write

  klab::MaxSum<A> st = klab::maxsum_identity<A>();
  Sums<A> sums = {A(0), A(0)};
  for (int v0 = threadIdx.x; v0 < nwin; v0 += K * step) {
    Vec<T> win[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int v = v0 + k * step;
      if (v < nwin) win[k] = window(row, v, n, h, vec);
      else win[k].fill(klab::neg_inf_t<T>());
    }
    A vals[K * W];
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int i = 0; i < W; ++i) vals[k * W + i] = win[k].get(i);
    klab::online_update(st, vals);
    if (smooth) {  // -inf logits make sum(w x) -inf and the loss +inf, like PyTorch
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int i = 0; i < W; ++i) {
          const int e = (v0 + k * step) * W - h + i;
          const A wj = weight_at(weight, e, n);
          if (wj != A(0)) sums.wx += wj * vals[k * W + i];
          sums.w += wj;
        }
    }
  }
  st = klab::block_allreduce(st, klab::MergeOp{}, klab::maxsum_identity<A>(), red);
  if (smooth) sums = klab::block_allreduce(sums, SumsOp{}, Sums<A>{A(0), A(0)}, red_sums);
  const A lse = st.m + log(st.s);

  if (threadIdx.x == 0) {
    const A wt = ignored || bad ? A(0) : weight_at(weight, int(t), n);
    A loss = (A(1) - A(eps)) * wt * (lse - xt);
    if (smooth) loss += A(eps) / A(n) * (lse * sums.w - sums.wx);
    if (ignored) loss = A(0);
    if (bad) loss = A(CUDART_NAN);
    if (loss_none) loss_none[r] = klab::from_acc<T>(loss);
    if (loss_rows) loss_rows[r] = loss;
    lse_out[r] = lse;
    wt_out[r] = wt;
  }
  if constexpr (FUSED) {
    const A ca = coefs[3 * r], cb = coefs[3 * r + 1], cd = coefs[3 * r + 2];
    T* out = dx + r * stride;
    for (int v = threadIdx.x; v < nwin; v += step) {
      const Vec<T> in = window(row, v, n, h, vec);
      const int e0 = v * W - h;
      const Vec<T> o = klab::vec_of<T>([&](int i) {
        const int e = e0 + i;
        A d = ca * klab::exp_acc(in.get(i) - lse) - (e == t ? cb : A(0));
        if (cd != A(0)) d -= cd * weight_at(weight, e, n);
        return d;
      });
      klab::store_window(out, v, n, h, vec, o);
    }
  }
}

// dx of rows of C classes: blockIdx.x owns row r, blockIdx.y a span of its windows.
template <typename T>
__global__ void __launch_bounds__(256)
    cross_entropy_bwd(T* dx, const T* x, long long rows, int n, long long stride, int vec,
                      int span, const long long* target, const T* weight, const Acc<T>* lse,
                      const Acc<T>* coefs) {
  using A = Acc<T>;
  constexpr int W = Vec<T>::N;
  const long long r = blockIdx.x;
  const T* row = x + r * stride;
  T* out = dx + r * (long long)n;
  const int h = klab::row_head(row, vec);
  const int nwin = (n + h + W - 1) / W;
  const long long t = target[r];
  const A l = lse[r];
  const A ca = coefs[3 * r], cb = coefs[3 * r + 1], cd = coefs[3 * r + 2];
  const int end = min(nwin, int(blockIdx.y + 1) * span);
  for (int v = blockIdx.y * span + threadIdx.x; v < end; v += blockDim.x) {
    const Vec<T> in = window(row, v, n, h, vec);
    const int e0 = v * W - h;
    const Vec<T> o = klab::vec_of<T>([&](int i) {
      const int e = e0 + i;
      A d = ca * klab::exp_acc(in.get(i) - l) - (e == t ? cb : A(0));
      if (cd != A(0)) d -= cd * weight_at(weight, e, n);
      return d;
    });
    klab::store_window(out, v, n, h, vec, o);
  }
}

// Per row (A, B, D) into coefs[3 r .. 3 r + 2] for an upstream gradient `grad` (one value, or
// one per row when grad_per_row), divided by the denominator sum(w_t) when mean.
template <typename T>
__global__ void __launch_bounds__(1024)
    cross_entropy_coefs(Acc<T>* coefs, const long long* target, long long rows, int n,
                        long long ignore_index, const T* weight, float eps, const Acc<T>* grad,
                        int grad_per_row, int mean) {
  using A = Acc<T>;
  __shared__ A red[32];
  A den = A(0), wsum = A(0);
  if (mean) {
    for (long long r = threadIdx.x; r < rows; r += blockDim.x) {
      const long long t = target[r];
      if (t != ignore_index && t >= 0 && t < n) den += weight_at(weight, int(t), n);
    }
    den = klab::block_allreduce(den, klab::SumOp{}, A(0), red);
  }
  if (eps != 0.0f) {
    if (weight) {
      for (int j = threadIdx.x; j < n; j += blockDim.x) wsum += klab::to_acc(weight[j]);
      wsum = klab::block_allreduce(wsum, klab::SumOp{}, A(0), red);
    } else {
      wsum = A(n);
    }
  }
  for (long long r = threadIdx.x; r < rows; r += blockDim.x) {
    const long long t = target[r];
    A s = grad[grad_per_row ? r : 0];
    if (mean) s /= den;
    A a = A(0), b = A(0), d = A(0);
    if (t != ignore_index) {
      if (t < 0 || t >= n) {
        a = b = d = A(CUDART_NAN);
      } else {
        const A wt = weight_at(weight, int(t), n);
        b = s * (A(1) - A(eps)) * wt;
        d = s * A(eps) / A(n);
        a = b + d * wsum;
      }
    }
    coefs[3 * r] = a;
    coefs[3 * r + 1] = b;
    coefs[3 * r + 2] = d;
  }
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
