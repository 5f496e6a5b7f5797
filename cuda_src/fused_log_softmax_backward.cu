// log_softmax_backward: dx = dy - exp(y) * sum(dy) per row (y = log_softmax output).
//
// Reuses softmax_common.cuh: aligned windows, exp_acc, the block all-reduce (SumOp).
// Edge cases: y = -inf gives exp(y) = 0, so dx = dy exactly; a NaN row of y stays NaN.
//
// Four kernel kinds, the softmax backward's shapes (BackwardConfig in
// kernel_lab/cuda/rowkernels/backward_config.py) but for its cluster kind, whose rows stream here.
//
// block: log_softmax_backward<T, VPT> (rows that fit on one CTA)
// Ownership: block `blockIdx.x` owns row blockIdx.x; thread t holds windows t + k * blockDim.x
//            (k < VPT) of y AND of dy in registers (8 registers per window pair).
// Launch:    grid = M blocks of blockDim.x threads (32..512), VPT in {1, 2, 4, 8}, chosen so
//            blockDim.x * VPT covers the row's windows. Static shared memory: 32 accumulators.
// Algorithm: per-thread partial sum(dy) in fp32 (fp64 for double), one block all-reduce, then
//            dx = dy - exp(y) * sum from the registers.
// Bytes:     y and dy read once, dx written once: 3 * M * N * sizeof(T).
// Preconds:  `vec` != 0 only if the rows of y, dy and dx all start at the same offset within
//            16 bytes (else element-wise accesses, same layout).
//
// persist: log_softmax_backward_persist<T, VPT, CL> (longer rows, y, dy and dx rows in one
// 16-byte phase): the softmax backward's persistent, prefetching clusters with the log rule
// below; body klab::bwd::persist_rows (backward_persist.cuh: ownership, pipeline, message
// exchange, launch). Bytes: 3 * M * N * sizeof(T), loads always in flight.
//
// stream: log_softmax_backward_stream<T> (rows persist and chunks cannot take: fp64, rows of y,
// dy and dx in different 16-byte phases, rows too long for the resident grid's chunks): a
// sum(dy) pass, then an elementwise pass re-reading y and dy: 4 * M * N * sizeof(T) bytes (dy's
// second read partly from L2).
//
// chunks: log_softmax_backward_chunks<T, VPT> (rows past every persistent shape, y, dy and dx
// rows in one 16-byte phase): the softmax backward's rows in chunks with the log rule below;
// body klab::bwd::chunks_rows (backward_chunks.cuh).
// Bytes:     3 * M * N * sizeof(T) + 8 B per chunk: read once, where stream reads dy twice.
#include "backward_chunks.cuh"
#include "backward_persist.cuh"
#include "softmax_common.cuh"

// The log_softmax rule of the persistent backward: a row sums dy; dx = dy - exp(y) * sum.
struct LogSoftmaxGrad {
  template <typename A> static __device__ __forceinline__ A term(A, A dy) { return dy; }
  template <typename A> static __device__ __forceinline__ A dx(A y, A dy, A sum) {
    return dy - klab::exp_acc(y) * sum;
  }
};

// log_softmax_backward_persist<T, VPT, CL> and log_softmax_backward_chunks<T, VPT>
// (kinds persist and chunks): backward_chunks.cuh's macro, with the rule above.
KLAB_BACKWARD_ROW_KERNELS(log_softmax_backward, LogSoftmaxGrad)

template <typename T, int VPT>
__global__ void __launch_bounds__(512)
    log_softmax_backward(T* __restrict__ dx, const T* __restrict__ y, const T* __restrict__ dy,
                         long long rows, int n, long long y_stride, long long dy_stride,
                         int vec) {
  using A = klab::acc_t<T>;
  constexpr int W = klab::Vec<T>::N;
  __shared__ A red[32];
  const T* yr = y + blockIdx.x * y_stride;
  const T* dyr = dy + blockIdx.x * dy_stride;
  T* dxr = dx + blockIdx.x * (long long)n;
  const int h = klab::row_head(yr, vec);
  const T zero = klab::from_acc<T>(A(0));

  klab::Vec<T> ry[VPT], rd[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int v = k * blockDim.x + threadIdx.x;
    ry[k] = klab::load_window(yr, v, n, h, vec, zero);
    rd[k] = klab::load_window(dyr, v, n, h, vec, zero);
  }
  A sum = A(0);
#pragma unroll
  for (int k = 0; k < VPT; ++k)
#pragma unroll
    for (int i = 0; i < W; ++i) sum += rd[k].get(i);
  sum = klab::block_allreduce(sum, klab::SumOp{}, A(0), red);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    rd[k] = klab::vec_of<T>(
        [&](int i) { return rd[k].get(i) - klab::exp_acc(ry[k].get(i)) * sum; });
    klab::store_window(dxr, k * blockDim.x + threadIdx.x, n, h, vec, rd[k]);
  }
}

template <typename T>
__global__ void __launch_bounds__(1024)
    log_softmax_backward_stream(T* __restrict__ dx, const T* __restrict__ y,
                                const T* __restrict__ dy, long long rows, int n,
                                long long y_stride, long long dy_stride, int vec) {
  using A = klab::acc_t<T>;
  constexpr int W = klab::Vec<T>::N;
  __shared__ A red[32];
  const T* yr = y + blockIdx.x * y_stride;
  const T* dyr = dy + blockIdx.x * dy_stride;
  T* dxr = dx + blockIdx.x * (long long)n;
  const int h = klab::row_head(yr, vec);
  const int windows = (n + h + W - 1) / W;
  const T zero = klab::from_acc<T>(A(0));

  A sum = A(0);
  for (int v = threadIdx.x; v < windows; v += blockDim.x) {
    const klab::Vec<T> d = klab::load_window<T, false>(dyr, v, n, h, vec, zero);  // re-read
#pragma unroll
    for (int i = 0; i < W; ++i) sum += d.get(i);
  }
  sum = klab::block_allreduce(sum, klab::SumOp{}, A(0), red);
  for (int v = threadIdx.x; v < windows; v += blockDim.x) {
    const klab::Vec<T> r = klab::load_window(yr, v, n, h, vec, zero);
    klab::Vec<T> d = klab::load_window(dyr, v, n, h, vec, zero);
    d = klab::vec_of<T>([&](int i) { return d.get(i) - klab::exp_acc(r.get(i)) * sum; });
    klab::store_window(dxr, v, n, h, vec, d);
  }
}
