// warp_softmax: one WARP per row, the whole row held in registers. Short rows only.
//
// Ownership: warp w of block b owns row b * (blockDim.x / 32) + w; lane l holds columns
//            l, l + 32, ..., l + 32 * (EPT - 1) in registers (EPT = elements per lane).
// Launch:    grid = ceil(M / (blockDim.x / 32)) blocks of blockDim.x (128) threads; no shared
//            memory: both reductions are warp shuffles.
// Template:  EPT in {1, 2, 4, 8, 16, 32}: the launcher picks the smallest with 32 * EPT >= N,
//            so N <= 1024 (the variant's check rejects longer rows with that reason).
// Bytes:     x read once, y written once: the minimum 2 * M * N * sizeof(T).
// Preconds:  N <= 32 * EPT, any M, row stride, alignment (scalar, coalesced loads).
// Changed:   from block_softmax: one read instead of three (the row stays in registers) and no
//            shared memory or __syncthreads; the price is a hard limit on the row length.
#include "softmax_common.cuh"

template <typename T, int EPT>
__global__ void __launch_bounds__(1024)
    warp_softmax(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,
                 long long stride) {
  using A = klab::acc_t<T>;
  const int lane = threadIdx.x & 31;
  const long long row = blockIdx.x * (long long)(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= rows) return;  // whole warps exit together: the shuffles below stay full-mask
  const T* xr = x + row * stride;
  T* yr = y + row * (long long)n;

  A v[EPT];
  A m = klab::neg_inf<A>();
#pragma unroll
  for (int i = 0; i < EPT; ++i) {
    const int j = i * 32 + lane;
    v[i] = j < n ? klab::to_acc(xr[j]) : klab::neg_inf<A>();
    m = klab::amax(m, v[i]);
  }
  m = klab::warp_allreduce(m, klab::MaxOp{});

  const A ms = klab::safe_max(m);
  A s = A(0);
#pragma unroll
  for (int i = 0; i < EPT; ++i) s += klab::exp_acc(v[i] - ms);
  s = klab::warp_allreduce(s, klab::SumOp{});

  const A inv = A(1) / s;
#pragma unroll
  for (int i = 0; i < EPT; ++i) {
    const int j = i * 32 + lane;
    if (j < n) yr[j] = klab::from_acc<T>(klab::exp_acc(v[i] - m) * inv);
  }
}
