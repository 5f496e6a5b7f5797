// fused_softmax_backward: dx = y * (dy - sum(dy * y)) with y and dy read once, dx written once.
//
// Kernel 1, fused_softmax_backward<T, VPT> (rows that fit on chip)
// Ownership: block `blockIdx.x` owns row blockIdx.x; thread t holds VPT 16-byte vectors of y
//            AND of dy in registers (8 registers per vector pair): vector k covers columns
//            [(k * blockDim.x + t) * W, ... + W), W = 16 / sizeof(T).
// Launch:    grid = M blocks of blockDim.x threads (32..512); VPT in {1, 2, 4, 8}, chosen so
//            blockDim.x * VPT * W >= N. Static shared memory: 32 accumulators.
// Algorithm: per-thread partial dot(dy, y) in fp32 (fp64 for double), one block all-reduce,
//            then dx = y * (dy - dot) from the registers.
// Bytes:     y and dy read once, dx written once: 3 * M * N * sizeof(T).
// Preconds:  `vec_ok` != 0 only if y, dy, both row strides and N * sizeof(T) are 16-byte
//            aligned; otherwise the same layout is loaded element by element (never a fault).
// Changed:   from a textbook backward (dot pass, then an elementwise pass re-reading y and dy):
//            5 tensors of traffic become 3.
//
// Kernel 2, fused_softmax_backward_cluster<T, VPT, CL> (long rows, still read once)
// Ownership: a cluster of CL CTAs (compile-time __cluster_dims__, grid = M * CL blocks) owns one
//            row; CTA rank c, thread t holds windows k * CL * blockDim.x + c * blockDim.x + t of
//            y and dy. Each CTA's partial dot goes to its shared memory; after one cluster
//            barrier every warp reads the CL partials through distributed shared memory.
// Launch:    blockDim.x <= 512 (a multiple of 32), VPT = 8: up to CL * 64 KB of each tensor.
// Bytes:     3 * M * N * sizeof(T), like kernel 1. Changed: the row spans CL SMs' registers.
//
// Kernel 3, fused_softmax_backward_stream<T> (rows longer than a cluster holds): a dot pass and
// an elementwise pass, both with vector loads: 5 * M * N * sizeof(T) bytes (L2 catches part).
#include "cluster.cuh"
#include "softmax_common.cuh"

template <typename T>
__device__ __forceinline__ klab::Vec<T> load_any(const T* p, int valid, int vec_ok) {
  return vec_ok ? klab::load_vec(p) : klab::load_vec_scalar(p, valid, T(0.0f));
}

template <typename T, int VPT>
__global__ void __launch_bounds__(512)
    fused_softmax_backward(T* __restrict__ dx, const T* __restrict__ y,
                           const T* __restrict__ dy, long long rows, int n,
                           long long y_stride, long long dy_stride, int vec_ok) {
  using A = klab::acc_t<T>;
  using V = klab::Vec<T>;
  constexpr int W = V::N;
  __shared__ A red[32];
  const T* yr = y + blockIdx.x * y_stride;
  const T* dyr = dy + blockIdx.x * dy_stride;
  T* dxr = dx + blockIdx.x * (long long)n;

  V ry[VPT], rd[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int e = (k * blockDim.x + threadIdx.x) * W;
    if (e >= n) {
      ry[k].fill(T(0.0f));
      rd[k].fill(T(0.0f));
    } else if (vec_ok) {
      ry[k] = klab::load_vec_cs(yr + e);
      rd[k] = klab::load_vec_cs(dyr + e);
    } else {
      ry[k] = klab::load_vec_scalar(yr + e, n - e, T(0.0f));
      rd[k] = klab::load_vec_scalar(dyr + e, n - e, T(0.0f));
    }
  }
  A dot = A(0);
#pragma unroll
  for (int k = 0; k < VPT; ++k)
#pragma unroll
    for (int i = 0; i < W; ++i) dot += ry[k].get(i) * rd[k].get(i);
  dot = klab::block_allreduce(dot, klab::SumOp{}, A(0), red);

#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int e = (k * blockDim.x + threadIdx.x) * W;
    if (e >= n) continue;
#pragma unroll
    for (int i = 0; i < W; ++i) ry[k].set(i, ry[k].get(i) * (rd[k].get(i) - dot));
    if (vec_ok) klab::store_vec(dxr + e, ry[k]);
    else klab::store_vec_scalar(dxr + e, ry[k], n - e);
  }
}

template <typename T, int VPT, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(512)
    fused_softmax_backward_cluster(T* __restrict__ dx, const T* __restrict__ y,
                                   const T* __restrict__ dy, long long rows, int n,
                                   long long y_stride, long long dy_stride, int vec_ok) {
  using A = klab::acc_t<T>;
  __shared__ A red[32];
  __shared__ A part;
  const unsigned rank = klab::cluster_rank();
  const long long row = blockIdx.x / CL;
  const T* yr = y + row * y_stride;
  const T* dyr = dy + row * dy_stride;
  T* dxr = dx + row * (long long)n;
  const int base = rank * blockDim.x + threadIdx.x, step = CL * blockDim.x;
  const T zero = T(0.0f);

  klab::Vec<T> ry[VPT], rd[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    ry[k] = klab::load_window(yr, k * step + base, n, 0, vec_ok, zero);
    rd[k] = klab::load_window(dyr, k * step + base, n, 0, vec_ok, zero);
  }
  A dot = A(0);
#pragma unroll
  for (int k = 0; k < VPT; ++k)
#pragma unroll
    for (int i = 0; i < klab::Vec<T>::N; ++i) dot += ry[k].get(i) * rd[k].get(i);
  dot = klab::block_allreduce(dot, klab::SumOp{}, A(0), red);
  if (threadIdx.x == 0) part = dot;
  klab::cluster_sync();
  const int lane = threadIdx.x & 31;
  dot = lane < CL ? klab::dsmem_load(klab::dsmem_map(&part, lane), A()) : A(0);
  dot = klab::warp_allreduce(dot, klab::SumOp{});
  klab::cluster_arrive();
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
#pragma unroll
    for (int i = 0; i < klab::Vec<T>::N; ++i)
      ry[k].set(i, ry[k].get(i) * (rd[k].get(i) - dot));
    klab::store_window(dxr, k * step + base, n, 0, vec_ok, ry[k]);
  }
  klab::cluster_wait();
}

template <typename T>
__global__ void __launch_bounds__(1024)
    fused_softmax_backward_stream(T* __restrict__ dx, const T* __restrict__ y,
                                  const T* __restrict__ dy, long long rows, int n,
                                  long long y_stride, long long dy_stride,
                                  int vec_ok) {
  using A = klab::acc_t<T>;
  using V = klab::Vec<T>;
  constexpr int W = V::N;
  __shared__ A red[32];
  const T* yr = y + blockIdx.x * y_stride;
  const T* dyr = dy + blockIdx.x * dy_stride;
  T* dxr = dx + blockIdx.x * (long long)n;
  const int step = blockDim.x * W;

  A dot = A(0);
#pragma unroll 4
  for (int e = threadIdx.x * W; e < n; e += step) {
    const V a = load_any(yr + e, n - e, vec_ok), b = load_any(dyr + e, n - e, vec_ok);
#pragma unroll
    for (int i = 0; i < W; ++i) dot += a.get(i) * b.get(i);
  }
  dot = klab::block_allreduce(dot, klab::SumOp{}, A(0), red);

#pragma unroll 4
  for (int e = threadIdx.x * W; e < n; e += step) {
    V a = load_any(yr + e, n - e, vec_ok);
    const V b = load_any(dyr + e, n - e, vec_ok);
#pragma unroll
    for (int i = 0; i < W; ++i) a.set(i, a.get(i) * (b.get(i) - dot));
    if (vec_ok) klab::store_vec(dxr + e, a);
    else klab::store_vec_scalar(dxr + e, a, n - e);
  }
}
