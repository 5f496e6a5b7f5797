// vec_softmax: the row kept on chip, moved with 16-byte vector loads and stores.
//
// vec_softmax<T, VPT> (rows that fit on chip, the fast path)
// Ownership: block `blockIdx.x` owns row blockIdx.x; thread t holds VPT 16-byte vectors in
//            registers (raw bits, 4 registers each whatever T): vector k covers columns
//            [(k * blockDim.x + t) * W, ... + W) with W = 16 / sizeof(T) (4 fp32, 8 fp16/bf16,
//            2 fp64). All VPT loads are issued before the first use (VPT * 16 B in flight).
// Launch:    grid = M blocks of blockDim.x threads (32..1024); VPT in {1, 2, 4, 8}; the launcher
//            picks them so that blockDim.x * VPT * W >= N (up to 128 KB of row per block).
//            Static shared memory: 32 (max, sum) pairs.
// Algorithm: local max and sum over the registers, ONE block all-reduce of (max, sum) pairs,
//            then y = exp(x - max) / sum from the same registers.
// Bytes:     x read once, y written once (2 * M * N * sizeof(T)), with streaming cache hints.
// Preconds:  `vec_ok` != 0 only if x, the row stride (bytes) and N * sizeof(T) are 16-byte
//            aligned (the launcher checks). Otherwise the SAME layout is loaded element by
//            element (scalar path): a sliced, misaligned tensor is slower, never a fault.
// Changed:   from online_softmax: one read instead of two (the row never leaves the chip) and
//            16-byte instead of 2/4-byte accesses (4-8x fewer load instructions).
//
// vec_softmax_stream<T> (rows longer than one block can hold)
// Ownership: as above but the row is streamed: an online (max, sum) pass with vector loads,
//            then a write pass that re-reads x (3 * M * N * sizeof(T) bytes; L2 catches part).
// Launch:    grid = M blocks of blockDim.x (1024) threads. Preconds: as vec_softmax.
#include "softmax_common.cuh"

template <typename T, int VPT>
__global__ void __launch_bounds__(1024)
    vec_softmax(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,
                long long stride, int vec_ok) {
  using A = klab::acc_t<T>;
  using V = klab::Vec<T>;
  constexpr int W = V::N;
  __shared__ klab::MaxSum<A> red[32];
  const T* xr = x + blockIdx.x * stride;
  T* yr = y + blockIdx.x * (long long)n;
  const T fill = klab::neg_inf_t<T>();

  V r[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int e = (k * blockDim.x + threadIdx.x) * W;
    if (e >= n) r[k].fill(fill);
    else if (vec_ok) r[k] = klab::load_vec_once(xr + e);
    else r[k] = klab::load_vec_scalar(xr + e, n - e, fill);
  }

  A m = klab::neg_inf<A>();
#pragma unroll
  for (int k = 0; k < VPT; ++k)
#pragma unroll
    for (int i = 0; i < W; ++i) m = klab::amax(m, r[k].get(i));
  const A ms = klab::safe_max(m);
  A s = A(0);
#pragma unroll
  for (int k = 0; k < VPT; ++k)
#pragma unroll
    for (int i = 0; i < W; ++i) s += klab::exp_acc(r[k].get(i) - ms);

  klab::MaxSum<A> st = {m, s};
  st = klab::block_allreduce(st, klab::MergeOp{}, klab::maxsum_identity<A>(), red);
  const A inv = A(1) / st.s;

#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int e = (k * blockDim.x + threadIdx.x) * W;
    if (e >= n) continue;
#pragma unroll
    for (int i = 0; i < W; ++i) r[k].set(i, klab::exp_acc(r[k].get(i) - st.m) * inv);
    if (vec_ok) klab::store_vec(yr + e, r[k]);
    else klab::store_vec_scalar(yr + e, r[k], n - e);
  }
}

template <typename T>
__global__ void __launch_bounds__(1024)
    vec_softmax_stream(T* __restrict__ y, const T* __restrict__ x, long long rows,
                       int n, long long stride, int vec_ok) {
  using A = klab::acc_t<T>;
  using V = klab::Vec<T>;
  constexpr int W = V::N;
  __shared__ klab::MaxSum<A> red[32];
  const T* xr = x + blockIdx.x * stride;
  T* yr = y + blockIdx.x * (long long)n;
  const T fill = klab::neg_inf_t<T>();
  const int step = blockDim.x * W;

  klab::MaxSum<A> st = klab::maxsum_identity<A>();
#pragma unroll 4
  for (int e = threadIdx.x * W; e < n; e += step) {
    const V v = vec_ok ? klab::load_vec(xr + e) : klab::load_vec_scalar(xr + e, n - e, fill);
    A a[W];
#pragma unroll
    for (int i = 0; i < W; ++i) a[i] = v.get(i);
    klab::online_update(st, a);
  }
  st = klab::block_allreduce(st, klab::MergeOp{}, klab::maxsum_identity<A>(), red);
  const A inv = A(1) / st.s;

#pragma unroll 4
  for (int e = threadIdx.x * W; e < n; e += step) {
    V v = vec_ok ? klab::load_vec_once(xr + e) : klab::load_vec_scalar(xr + e, n - e, fill);
#pragma unroll
    for (int i = 0; i < W; ++i) v.set(i, klab::exp_acc(v.get(i) - st.m) * inv);
    if (vec_ok) klab::store_vec(yr + e, v);
    else klab::store_vec_scalar(yr + e, v, n - e);
  }
}
