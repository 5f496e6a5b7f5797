// fused_softmax_backward: dx = y * (dy - sum(dy * y)) with y and dy read once, dx written once.
// Five kernel kinds (BackwardConfig.kind; kernel_lab/cuda/rowkernels/backward_config.py picks kind and
// shape per (N, dtype)); fused_log_softmax_backward.cu has the same kinds but cluster.
//
// block: fused_softmax_backward<T, VPT> (rows that fit on one CTA)
// Ownership: block `blockIdx.x` owns row blockIdx.x; thread t holds VPT 16-byte vectors of y
//            AND of dy in registers (8 registers per vector pair): vector k covers columns
//            [(k * blockDim.x + t) * W, ... + W), W = 16 / sizeof(T).
// Launch:    grid = M blocks of blockDim.x threads (32..512); VPT in {1, 2, 4, 8}, chosen so
//            blockDim.x * VPT * W >= N. Static shared memory: 32 accumulators.
// Algorithm: per-thread partial dot(dy, y) in fp32 (fp64 for double), one block all-reduce,
//            then dx = y * (dy - dot) from the registers.
// Bytes:     y and dy read once, dx written once: 3 * M * N * sizeof(T) (a textbook backward,
//            a dot pass then an elementwise pass re-reading y and dy, moves 5).
// Preconds:  `vec_ok` != 0 only if y, dy, both row strides and N * sizeof(T) are 16-byte
//            aligned; otherwise the same layout is loaded element by element (never a fault).
//
// cluster: fused_softmax_backward_cluster<T, VPT, CL> (long rows persist cannot take: fp64, or
// y, dy and dx rows in different 16-byte phases)
// Ownership: a cluster of CL CTAs (compile-time __cluster_dims__, grid = M * CL blocks) owns one
//            row; CTA rank c, thread t holds windows k * CL * blockDim.x + c * blockDim.x + t of
//            y and dy. Each CTA's partial dot goes to its shared memory; after one cluster
//            barrier every warp reads the CL partials through distributed shared memory.
// Launch:    blockDim.x <= 512 (a multiple of 32), VPT = 8 (4 for fp16/bf16: 2 x 32 elements a
//            thread, no spills): up to CL * 64 KB of each tensor.
// Bytes:     3 * M * N * sizeof(T), like block: the row spans CL SMs' registers.
//
// stream: fused_softmax_backward_stream<T> (rows no other kind takes: longer than a cluster
// holds with y, dy and dx in different 16-byte phases, fp64, or more chunks than the GPU's
// resident CTAs + 1): a dot pass and an elementwise pass, both with vector loads:
// 5 * M * N * sizeof(T) bytes (L2 catches part).
//
// persist: fused_softmax_backward_persist<T, VPT, CL> (long rows, y, dy and dx rows in one
// 16-byte phase): persistent, prefetching clusters, the forward's persist kind for two inputs.
// Body klab::bwd::persist_rows in backward_persist.cuh (ownership, pipeline, launch,
// preconditions there), shared with log_softmax_backward_persist; this file gives it the
// softmax rule (SoftmaxGrad). Bytes: 3 * M * N * sizeof(T), loads always in flight.
//
// chunks: fused_softmax_backward_chunks<T, VPT> (rows past every persistent shape: fp32 N >
// 163840, 2-byte N > 262144; y, dy and dx rows in one 16-byte phase): rows cut into chunks of
// one CTA, each chunk's partial dot through a flagged word in global memory, the chunk held in
// registers until its row's last word is in. Body klab::bwd::chunks_rows in backward_chunks.cuh
// (ownership, steps, launch and preconditions there), shared with log_softmax_backward_chunks.
// Bytes:     3 * M * N * sizeof(T) + 8 B per chunk: read once, where stream reads twice.
#include "backward_chunks.cuh"
#include "backward_persist.cuh"
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
      ry[k] = klab::load_vec_once(yr + e);
      rd[k] = klab::load_vec_once(dyr + e);
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
    ry[k] = klab::vec_of<T>([&](int i) { return ry[k].get(i) * (rd[k].get(i) - dot); });
    if (vec_ok) klab::store_vec(dxr + e, ry[k]);
    else klab::store_vec_scalar(dxr + e, ry[k], n - e);
  }
}

template <typename T, int VPT, int CL>
__global__ void KLAB_CLUSTER_DIMS(CL) __launch_bounds__(512)
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
    ry[k] = klab::vec_of<T>([&](int i) { return ry[k].get(i) * (rd[k].get(i) - dot); });
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
    a = klab::vec_of<T>([&](int i) { return a.get(i) * (b.get(i) - dot); });
    if (vec_ok) klab::store_vec(dxr + e, a);
    else klab::store_vec_scalar(dxr + e, a, n - e);
  }
}

// The softmax rule of the persistent backward (backward_persist.cuh).
struct SoftmaxGrad {
  template <typename A> static __device__ __forceinline__ A term(A y, A dy) { return y * dy; }
  template <typename A> static __device__ __forceinline__ A dx(A y, A dy, A dot) {
    return y * (dy - dot);
  }
};

// fused_softmax_backward_persist<T, VPT, CL> and fused_softmax_backward_chunks<T, VPT>
// (kinds persist and chunks): backward_chunks.cuh's macro, with the rule above.
KLAB_BACKWARD_ROW_KERNELS(fused_softmax_backward, SoftmaxGrad)
