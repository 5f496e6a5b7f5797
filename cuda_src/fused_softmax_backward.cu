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
// Kernel 3, fused_softmax_backward_stream<T> (rows no other kernel takes: longer than a cluster
// holds with y, dy and dx in different 16-byte phases, fp64, or more chunks of kernel 5 than
// the GPU's resident CTAs + 1): a dot pass and an elementwise pass, both with vector loads:
// 5 * M * N * sizeof(T) bytes (L2 catches part).
//
// Kernel 4, fused_softmax_backward_persist<T, VPT, CL> (long rows, aligned tensors): persistent
// and prefetching, the forward's fast_softmax_persist_cluster (row_softmax_kernels.cuh) for two
// inputs. Its body is klab::bwd::persistent_rows (backward_persist.cuh), shared with
// log_softmax_backward_persist; this file gives it the softmax rule (SoftmaxGrad).
// Ownership: the grid holds only the clusters of CL CTAs (CL = 1: single CTAs) that are resident
//            at once; cluster q of Q owns rows q, q + Q, ...; inside a row, CTA rank c, thread t
//            holds windows k * CL * blockDim.x + c * blockDim.x + t (k < VPT) of y and dy.
// Pipeline:  the current row's y and dy sit in registers; the next row's windows of this thread
//            (`stages` = 2: the next two rows', in alternating slot sets) are in flight into
//            dynamic shared memory (cp.async.cg, 16 bytes each) while the CTA reduces the dot
//            product, exchanges it with its peers and stores dx. Each thread reads back only the
//            slots it copied (wait_group: no block barrier). The copies are issued once the dot
//            loop has consumed every value read from the slots.
// Cluster:   each CTA sends its partial dot to every peer as an st.async message counted by
//            the peer's mbarrier (cluster.cuh, ClusterInbox): no cluster barrier per row, whose
//            release (MEMBAR.ALL.GPU) waited for the previous row's dx stores.
// Launch:    grid = min(M, resident clusters) * CL, blockDim.x a multiple of 32 (<= 1024 for
//            fp32 x 4 vectors, <= 640 for fp16/bf16 and fp32 x 8: BackwardPersistThreads),
//            dynamic shared memory stages * 2 * blockDim.x * VPT * 16 B (per stage: y slots,
//            then dy); stages is 1 or 2.
// Bytes:     3 * M * N * sizeof(T), loads always in flight.
// Windows:   aligned 16-byte windows as in softmax_common.cuh: odd N such as 50257 still moves
//            whole slots; the copies of a row's first and last slot may hold bytes of the
//            neighbouring rows, zeroed on read. `line` = 0: h = the row's offset within its
//            first 16 bytes; `line` = 1 (line heads, as the forward's kernel 5): h = its offset
//            within its 128-byte line, so each warp's 32 windows are 4 whole lines instead of
//            straddling 5 (up to 7 windows before the row, all zero, belong to the first warp).
// Preconds:  every row of y, dy and dx starts at the same offset within 16 bytes (any N); the
//            launcher falls back to kernels 1-3 otherwise. `line` = 1 only if every row of y
//            and dy starts at the same offset within 128 bytes (the slots before a row then
//            share its first line: never an unmapped page) and the shape holds up to 7 more
//            windows. Threads: see BackwardPersistThreads (registers and spills per bound).
// Changed:   from kernel 2: one launch for all rows; the next row's loads overlap this row's
//            reduction, exchange and stores. Line heads (tenth H200 run): odd rows (50257)
//            had 2.6x the L2 read requests of rows on lines; with them the 15-CTA shapes run
//            odd rows at fp32 96 / bf16 94 % of copy (86 / 87 % before, bench/NOTES.md).
//
// Kernel 5, fused_softmax_backward_chunks<T, VPT> (rows past every persistent shape: fp32 N >
// 163840, 2-byte N > 262144; y, dy and dx rows in one 16-byte phase): rows cut into chunks of
// one CTA, each chunk's partial dot through a flagged word in global memory, the chunk held in
// registers until its row's last word is in. Ownership, steps, launch and preconditions:
// backward_chunks.cuh (klab::bwd::chunk_rows, shared with log_softmax_backward_chunks).
// Bytes:     3 * M * N * sizeof(T) + 8 B per chunk. Changed from kernel 3: read once, not twice.
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
// (kernels 4 and 5 above): backward_chunks.cuh's macro, with the rule above.
KLAB_BACKWARD_ROW_KERNELS(fused_softmax_backward, SoftmaxGrad)
