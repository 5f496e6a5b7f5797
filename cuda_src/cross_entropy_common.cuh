// Shared by the cross-entropy kernels (cuda_cross_entropy.cu, cuda_cross_entropy_backward.cu).
//
// Per row i of C classes, t = target[i], eps = label smoothing, w the class weights (1 without):
//   lse    = max + log(sum_j exp(x_j - max))
//   loss_i = (1 - eps) * w_t * (lse - x_t) + eps / C * (lse * sum_j w_j - sum_j w_j x_j)
//   dx_j   = A_i * exp(x_j - lse) - B_i * [j == t] - D_i * w_j
// with A_i = s_i * ((1 - eps) * w_t + eps / C * sum(w)), B_i = s_i * (1 - eps) * w_t,
// D_i = s_i * eps / C, s_i the row's upstream gradient (cross_entropy_coefs: 0 for ignored rows).
// A row whose target is ignore_index has loss 0 (its lse is still computed); a target outside
// [0, C) gives loss NaN and a NaN gradient row and is never read; the forward flags it
// (flag_bad), and the host raises at its next call (kernel_lab/ops/cross_entropy/deferred.py).
// Rows are read in aligned 16-byte windows (softmax_common.cuh: any stride, any alignment).
#pragma once

#include "grid_dependency.cuh"
#include "row_epilogues.cuh"

namespace klab::ce {

template <typename T> using Acc = acc_t<T>;

// The saved lse's type: double for fp32 / fp64 rows (max + log(sum) summed unrounded), float for
// 2-byte rows. The backward splits it into an Acc pair (hi, lo) and takes exp((x - hi) - lo):
// exact to the rounding of x - lse, not of |lse| (fp32 gradients as exact as PyTorch's).
template <typename T> struct LseOf { using type = double; };
template <> struct LseOf<__half> { using type = float; };
template <> struct LseOf<__nv_bfloat16> { using type = float; };
template <typename T> using Lse = typename LseOf<T>::type;

// Record bad row r (target t) for the host: atomicMin of the packed key (row << 32 | t + 2^31,
// both saturated: the first bad row of every launch wins) in device memory, then 1 into the
// mapped pinned host word the host polls. Null pointers: nothing recorded.
__device__ __forceinline__ void flag_bad(long long* first, int* flag, long long r, long long t) {
  const long long row = r < 0x7fffffffLL ? r : 0x7fffffffLL;
  const long long v = t < -0x80000000LL ? -0x80000000LL : (t > 0x7fffffffLL ? 0x7fffffffLL : t);
  if (first) atomicMin(first, (row << 32) | (v + 0x80000000LL));
  if (flag) *(volatile int*)flag = 1;
}

// Window v of the row, or -inf past its ends (vec: 16-byte loads for the whole windows).
template <typename T>
__device__ __forceinline__ Vec<T> window(const T* row, int v, int n, int h, int vec) {
  return load_window<T>(row, v, n, h, vec, neg_inf_t<T>());
}

// The weight of element e of the row (1 without weights; 0 outside the row).
template <typename T> __device__ __forceinline__ Acc<T> weight_at(const T* w, int e, int n) {
  if (e < 0 || e >= n) return Acc<T>(0);
  return w ? to_acc(w[e]) : Acc<T>(1);
}

// The row scans of the small kernels (cross_entropy_reduce and _reduce_parts,
// cross_entropy_coefs and _den_parts): a block sums rows [lo, hi), thread t rows lo + t,
// lo + t + blockDim.x, ... in that order (the fixed summation order), kScanBatch of them loaded
// before any is added, so a block waits (hi - lo) / (blockDim.x kScanBatch) DRAM round trips,
// not (hi - lo) / blockDim.x (a plain loop is not unrolled: one load a trip, ~0.6 us each).
// Past scan_blocks' rows (cuda_variants.py) a grid of blocks takes a chunk each, and one block
// sums their parts.
constexpr int kScanBatch = 8;

// sa += a[r], sb += b[r] over this thread's rows of [lo, hi).
template <typename A>
__device__ __forceinline__ void scan_pair(const A* __restrict__ a, const A* __restrict__ b,
                                          long long lo, long long hi, A& sa, A& sb) {
  const long long step = blockDim.x;
  for (long long r0 = lo + threadIdx.x; r0 < hi; r0 += kScanBatch * step) {
    A av[kScanBatch], bv[kScanBatch];
#pragma unroll
    for (int k = 0; k < kScanBatch; ++k) {
      const long long r = r0 + k * step;
      av[k] = r < hi ? a[r] : A(0);  // past the end: + 0, the sums those of a plain loop
      bv[k] = r < hi ? b[r] : A(0);
    }
#pragma unroll
    for (int k = 0; k < kScanBatch; ++k) {
      sa += av[k];
      sb += bv[k];
    }
  }
}

// The sum of w_t over this thread's rows of [lo, hi) whose target is kept (not ignore_index,
// inside [0, n)): the mean's denominator. B rows a batch (fp64 callers take fewer).
template <typename T, int B>
__device__ __forceinline__ Acc<T> scan_kept_weight(const long long* __restrict__ target,
                                                   long long lo, long long hi, int n,
                                                   long long ignore_index, const T* weight) {
  using A = Acc<T>;
  A den = A(0);
  const long long step = blockDim.x;
  for (long long r0 = lo + threadIdx.x; r0 < hi; r0 += B * step) {
    long long tv[B];
    A wv[B];
#pragma unroll
    for (int k = 0; k < B; ++k) {
      const long long r = r0 + k * step;
      tv[k] = r < hi ? target[r] : ignore_index;  // past the end: adds nothing
    }
#pragma unroll
    for (int k = 0; k < B; ++k)
      wv[k] = tv[k] != ignore_index && tv[k] >= 0 && tv[k] < n
                  ? weight_at(weight, int(tv[k]), n) : A(0);
#pragma unroll
    for (int k = 0; k < B; ++k) den += wv[k];  // a row not kept adds +0: the plain loop's sum
  }
  return den;
}

// exp(x - m) for the sum loop. 2-byte rows: exp2(x * log2(e) - m * log2(e)), one FFMA and the
// MUFU (bf16 at copy speed is issue-bound, 8 elements a clock an SM). x * log2(e) is exact inside
// the FFMA; the error is m * log2(e)'s rounding, ulp(|m|) / 2 in the exponent: 2.4e-4 at
// |m| < 2^12 (below bf16's own rounding of such logits). Past that it grows with |m| (3e29 at
// 1e37: exp of the row's max became inf, and inf * 0 a NaN lse), so larger |m| take the exact
// difference. fp32 / fp64: always the exact difference (|x| up to 1e4 would cost 1e-3 there).
template <typename T> struct ExpShifted {
  static constexpr float kFmaMax = 4096.0f;  // 2^12: m * log2(e)'s rounding <= 2.4e-4
  Acc<T> m, ml2e;
  bool fma;
  __device__ __forceinline__ explicit ExpShifted(Acc<T> m_)
      : m(m_), ml2e(m_ * Acc<T>(CUDART_L2E)), fma(sizeof(T) == 2 && fabs(m_) < Acc<T>(kFmaMax)) {}
  __device__ __forceinline__ Acc<T> operator()(Acc<T> x) const {
    if constexpr (sizeof(T) == 2) {
      if (fma) return exp2f(fmaf(x, CUDART_L2E_F, -ml2e));
    }
    return exp_acc(x - m);
  }
};

// The K windows v0 + k * step of a row (-inf past its end).
template <typename T, int K>
__device__ __forceinline__ void load_windows(Vec<T> (&r)[K], const T* row, int v0, int step,
                                             int nwin, int n, int h, int vec) {
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (v0 + k * step < nwin) r[k] = window(row, v0 + k * step, n, h, vec);
    else r[k].fill(neg_inf_t<T>());
  }
}

// dx over windows v0, v0 + blockDim.x, ... < end of one row: 4 windows loaded before any is
// computed and stored (4 loads in flight a thread; out may alias row: each thread reads its
// windows before it writes them). c = the row's (A, B, D); p = exp((x - hi) - lo) with
// hi + lo = lse (2-byte rows: lo is 0 and not subtracted, an instruction fewer an element).
// LAST_FIRST: the groups of 4 in reverse order, for a second pass over windows this thread has
// just read: what it read last is the likeliest to be still in L2 (rows in flight exceed it).
template <typename T, bool LAST_FIRST = false>
__device__ __forceinline__ void grad_windows(T* out, const T* row, int v0, int end, int n, int h,
                                             int vec, long long t, const T* weight, Acc<T> hi,
                                             Acc<T> lo, const Acc<T>* c) {
  using A = Acc<T>;
  constexpr int W = Vec<T>::N, K = 4;
  const A ca = c[0], cb = c[1], cd = c[2];
  const int step = blockDim.x;
  const int first = v0, span = LAST_FIRST ? -K * step : K * step;
  if constexpr (LAST_FIRST) {
    if (v0 >= end) return;
    v0 += (end - 1 - v0) / (K * step) * (K * step);  // this thread's last group
  }
  for (; LAST_FIRST ? v0 >= first : v0 < end; v0 += span) {
    Vec<T> in[K];
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (v0 + k * step < end) in[k] = window(row, v0 + k * step, n, h, vec);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int v = v0 + k * step;
      if (v >= end) break;
      const int e0 = v * W - h;
      const Vec<T> o = vec_of<T>([&](int i) {
        const int e = e0 + i;
        A z = in[k].get(i) - hi;
        if constexpr (sizeof(T) != 2) z -= lo;
        A d = ca * exp_acc(z) - (e == t ? cb : A(0));
        if (cd != A(0)) d -= cd * weight_at(weight, e, n);
        return d;
      });
      store_window(out, v, n, h, vec, o);
    }
  }
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

}  // namespace klab::ce
