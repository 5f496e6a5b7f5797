// naive_softmax: the newcomer's baseline. One THREAD per row, three passes over global memory.
//
// Ownership: thread `blockIdx.x * blockDim.x + threadIdx.x` owns row `row` entirely.
// Launch:    grid = ceil(M / blockDim.x) blocks of blockDim.x (128) threads; no shared memory.
// Passes:    (1) max over the row, (2) sum of exp(x - max), (3) y = exp(x - max) / sum.
// Bytes:     reads x three times, writes y once: 4 * M * N * sizeof(T) of traffic (the caches
//            catch some re-reads), and neighbouring threads touch addresses N elements apart,
//            so no load is coalesced: expect a small fraction of copy bandwidth.
// Preconds:  any M, N >= 1, any row stride, any alignment (scalar loads only).
// Changed:   nothing: this is the first rung of the ladder.
#include "softmax_common.cuh"

template <typename T>
__global__ void __launch_bounds__(1024)
    naive_softmax(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,
                  long long stride) {
  using A = klab::acc_t<T>;
  const long long row = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const T* xr = x + row * stride;
  T* yr = y + row * (long long)n;

  A m = klab::neg_inf<A>();
  for (int j = 0; j < n; ++j) m = klab::amax(m, klab::to_acc(xr[j]));
  // Blocked sum: a plain running fp32 sum over 2^20 terms drifts by ~1e-3 (relative); summing
  // blocks of 1024 first keeps the rounding error near 1e-5.
  A s = A(0);
  const A ms = klab::safe_max(m);
  for (int j0 = 0; j0 < n; j0 += 1024) {
    A part = A(0);
    for (int j = j0; j < n && j < j0 + 1024; ++j) part += klab::exp_acc(klab::to_acc(xr[j]) - ms);
    s += part;
  }
  const A inv = A(1) / s;
  for (int j = 0; j < n; ++j)
    yr[j] = klab::from_acc<T>(klab::exp_acc(klab::to_acc(xr[j]) - m) * inv);
}
