// log_softmax: y = (x - max) - log(sum(exp(x - max))) per row, the lab's second op.
//
// Reuses softmax_common.cuh whole: aligned windows (load_window/store_window), the local
// (max, sum) of register vectors, the online update, the (max, sum) block all-reduce. Only the
// last step differs from softmax: subtract log(sum) instead of multiplying by 1 / sum, in the
// order (x - max) - log(sum) - never x - (max + log(sum)), which rounds to ulp(max) (1e-3 for
// a row near 1e4 in fp32) and would wipe out log-probabilities near 0.
// Edge cases, as torch.log_softmax: -inf gives -inf; an all -inf row gives NaN (max = -inf,
// sum = 0: (-inf - -inf) - log(0)); NaN reaches the sum and so the whole row.
//
// Kernel 1, log_softmax<T, VPT> (rows that fit on chip)
// Ownership: block `blockIdx.x` owns row blockIdx.x; thread t holds windows t + k * blockDim.x
//            (k < VPT), each one aligned 16-byte slot of the row (W = 16 / sizeof(T) elements).
// Launch:    grid = M blocks of blockDim.x threads (32..1024), VPT in {1, 2, 4, 8}, chosen by
//            the launcher so blockDim.x * VPT covers the row's windows. Static shared memory:
//            32 (max, sum) pairs.
// Bytes:     x read once, y written once: 2 * M * N * sizeof(T).
// Preconds:  `vec` != 0 only if every input row starts at the same offset within 16 bytes as
//            its output row (else element-wise accesses, same layout: slower, never a fault).
// Changed:   from vec_softmax: aligned windows (odd N stays vectorized) and the log epilogue.
//
// Kernel 2, log_softmax_stream<T> (rows longer than a block holds): an online (max, sum) pass,
// then a pass re-reading x to write y: 3 * M * N * sizeof(T) bytes (L2 catches part).
#include "softmax_common.cuh"

namespace {

__device__ __forceinline__ float log_acc(float v) { return logf(v); }
__device__ __forceinline__ double log_acc(double v) { return log(v); }

// y = (x - m) - log_sum in place, for one register vector.
template <typename T>
__device__ __forceinline__ void log_normalize(klab::Vec<T>& r, klab::acc_t<T> m,
                                              klab::acc_t<T> log_sum) {
#pragma unroll
  for (int i = 0; i < klab::Vec<T>::N; ++i) r.set(i, (r.get(i) - m) - log_sum);
}

}  // namespace

template <typename T, int VPT>
__global__ void __launch_bounds__(1024)
    log_softmax(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,
                long long stride, int vec) {
  using A = klab::acc_t<T>;
  __shared__ klab::MaxSum<A> red[32];
  const T* xr = x + blockIdx.x * stride;
  T* yr = y + blockIdx.x * (long long)n;
  const int h = klab::row_head(xr, vec);

  klab::Vec<T> r[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k)
    r[k] = klab::load_window(xr, k * blockDim.x + threadIdx.x, n, h, vec, klab::neg_inf_t<T>());
  klab::MaxSum<A> st = klab::local_maxsum(r);
  st = klab::block_allreduce(st, klab::MergeOp{}, klab::maxsum_identity<A>(), red);
  const A log_sum = log_acc(st.s);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    log_normalize(r[k], st.m, log_sum);
    klab::store_window(yr, k * blockDim.x + threadIdx.x, n, h, vec, r[k]);
  }
}

template <typename T>
__global__ void __launch_bounds__(1024)
    log_softmax_stream(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,
                       long long stride, int vec) {
  using A = klab::acc_t<T>;
  constexpr int W = klab::Vec<T>::N;
  __shared__ klab::MaxSum<A> red[32];
  const T* xr = x + blockIdx.x * stride;
  T* yr = y + blockIdx.x * (long long)n;
  const int h = klab::row_head(xr, vec);
  const int windows = (n + h + W - 1) / W;
  const T fill = klab::neg_inf_t<T>();

  klab::MaxSum<A> st = klab::maxsum_identity<A>();
  for (int v = threadIdx.x; v < windows; v += blockDim.x) {
    const klab::Vec<T> r = klab::load_window<T, false>(xr, v, n, h, vec, fill);  // re-read soon
    A a[W];
#pragma unroll
    for (int i = 0; i < W; ++i) a[i] = r.get(i);
    klab::online_update(st, a);
  }
  st = klab::block_allreduce(st, klab::MergeOp{}, klab::maxsum_identity<A>(), red);
  const A log_sum = log_acc(st.s);
  for (int v = threadIdx.x; v < windows; v += blockDim.x) {
    klab::Vec<T> r = klab::load_window(xr, v, n, h, vec, fill);
    log_normalize(r, st.m, log_sum);
    klab::store_window(yr, v, n, h, vec, r);
  }
}
