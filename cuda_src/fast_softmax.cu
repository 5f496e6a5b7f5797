// fast_softmax: the speed-of-light family. One read of x and one write of y per element, rows
// held on chip in 16-byte vectors, and a launch shape picked per (N, dtype) by the launcher
// (kernel_lab/ops/softmax/cuda_variants.py: fast_softmax_config, which records its choice).
//
// Common to all kernels here
//   Layout:   "aligned windows" (softmax_common.cuh: load_window/store_window): window v of a row
//             is one aligned 16-byte slot, so odd row lengths (50257) still move full vectors;
//             only a row's first and last window are element-wise. `vec` = 0 (input and output
//             rows misaligned differently, e.g. x = buf[1:].view(M, N) in fp32) loads the same
//             layout element by element: slower, never a fault.
//   Math:     local (max, sum) over registers (1 exp per element), one merge of (max, sum)
//             pairs across lanes / warps / CTAs, then y = exp(x - max) / sum (1 more exp).
//   Bytes:    2 * M * N * sizeof(T) for every kernel except the split pair (3 * M * N, part
//             of the second read served by L2).
//   Precond:  rows < 2^31 blocks' worth; n < 2^31 - 16; fp32 accumulation (fp64 for double).
//
// 1. fast_softmax_warp<T, G, VPT>: short rows. A group of G lanes (G | 32) owns one row; lane l
//    holds windows l, l + G, ..., l + (VPT - 1) * G. Reductions are G-wide shuffles: no shared
//    memory, no barrier. Launch: blockDim.x threads (128/256), blockDim.x / G rows per block.
//    Changed from warp_softmax: 16-byte accesses, several rows per warp, row length <= G*VPT*W.
// 2. fast_softmax_block<T, VPT>: mid rows. Block b owns row b; thread t holds windows
//    t + k * blockDim.x. One block all-reduce (2 barriers). Launch: M blocks of 64..1024.
//    Changed from vec_softmax: aligned windows (odd N stays vectorized), split max/sum merge.
// 3. fast_softmax_cluster<T, VPT, CL>: long rows. A cluster of CL CTAs (compile-time
//    __cluster_dims__, grid = M * CL blocks) owns one row; CTA rank c, thread t holds windows
//    k * CL * blockDim.x + c * blockDim.x + t. Each CTA reduces its (max, sum) to shared memory,
//    one cluster barrier publishes it, every warp reads the CL pairs through distributed shared
//    memory (mapa + ld.shared::cluster) and merges them. The CTA waits on a second, split
//    barrier before exiting so peers never read freed shared memory. Up to CL * 128 KB per row.
// 4. fast_softmax_split_stats / _apply<T, VPT>: rows too long for a cluster. Kernel A: block
//    (row, chunk) writes the chunk's (max, sum) to `part` (M x P pairs). Kernel B: block
//    (row, chunk) loads its chunk again, merges the row's P pairs, writes y. The launcher runs
//    both on groups of rows small enough for L2 to serve kernel B's re-read.
#include "cluster.cuh"
#include "softmax_common.cuh"

namespace {

template <typename T> __device__ __forceinline__ klab::MaxSum<klab::acc_t<T>> id() {
  return klab::maxsum_identity<klab::acc_t<T>>();
}

// Rows held by one CTA (CL == 1) or one cluster (CL > 1).
template <typename T, int VPT, int CL>
__device__ __forceinline__ void row_on_chip(T* __restrict__ y, const T* __restrict__ x, int n,
                                            long long stride, int vec, long long row,
                                            unsigned rank) {
  using A = klab::acc_t<T>;
  __shared__ klab::MaxSum<A> red[32];
  __shared__ A part[2];
  const T* xr = x + row * stride;
  T* yr = y + row * (long long)n;
  const int h = klab::row_head(xr, vec);
  const int base = rank * blockDim.x + threadIdx.x, step = CL * blockDim.x;
  const T fill = klab::neg_inf_t<T>();

  klab::Vec<T> r[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) r[k] = klab::load_window(xr, k * step + base, n, h, vec, fill);
  klab::MaxSum<A> st = klab::local_maxsum(r);
  st = klab::block_allreduce(st, klab::MergeOp{}, id<T>(), red);
  if constexpr (CL > 1) {
    if (threadIdx.x == 0) {
      part[0] = st.m;
      part[1] = st.s;
    }
    klab::cluster_sync();  // every CTA's pair is now visible cluster-wide
    const int lane = threadIdx.x & 31;
    st = id<T>();
    if (lane < CL) {
      const unsigned a = klab::dsmem_map(part, lane);
      st = {klab::dsmem_load(a, A()), klab::dsmem_load(a + sizeof(A), A())};
    }
    st = klab::warp_allreduce(st, klab::MergeOp{});
    klab::cluster_arrive();  // done reading peers
  }
  klab::normalize(r, st.m, A(1) / st.s);
#pragma unroll
  for (int k = 0; k < VPT; ++k) klab::store_window(yr, k * step + base, n, h, vec, r[k]);
  if constexpr (CL > 1) klab::cluster_wait();  // peers are done with our `part`
}

}  // namespace

template <typename T, int G, int VPT>
__global__ void __launch_bounds__(256)
    fast_softmax_warp(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,
                      long long stride, int vec) {
  using A = klab::acc_t<T>;
  const long long g = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / G;
  const int lane = threadIdx.x % G;
  const bool active = g < rows;  // inactive groups still shuffle (full-mask), then leave
  const long long row = active ? g : rows - 1;
  const T* xr = x + row * stride;
  T* yr = y + row * (long long)n;
  const int h = klab::row_head(xr, vec);
  const T fill = klab::neg_inf_t<T>();

  klab::Vec<T> r[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) r[k] = klab::load_window(xr, k * G + lane, n, h, vec, fill);
  klab::MaxSum<A> st = klab::local_maxsum(r);
  st = klab::warp_allreduce<G>(st, klab::MergeOp{});
  if (!active) return;
  klab::normalize(r, st.m, A(1) / st.s);
#pragma unroll
  for (int k = 0; k < VPT; ++k) klab::store_window(yr, k * G + lane, n, h, vec, r[k]);
}

// 16 vectors per thread need > 64 registers: such blocks are capped at 512 threads.
template <int VPT> struct MaxThreads {
  static constexpr int value = VPT >= 16 ? 512 : 1024;
};

template <typename T, int VPT>
__global__ void __launch_bounds__(MaxThreads<VPT>::value)
    fast_softmax_block(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,
                       long long stride, int vec) {
  row_on_chip<T, VPT, 1>(y, x, n, stride, vec, blockIdx.x, 0);
}

template <typename T, int VPT, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(MaxThreads<VPT>::value)
    fast_softmax_cluster(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,
                         long long stride, int vec) {
  row_on_chip<T, VPT, CL>(y, x, n, stride, vec, blockIdx.x / CL, klab::cluster_rank());
}

// part: (rows x chunks) (max, sum) pairs of the accumulator type, chunk = blockDim.x*VPT windows.
template <typename T, int VPT>
__global__ void __launch_bounds__(1024)
    fast_softmax_split_stats(klab::acc_t<T>* __restrict__ part, const T* __restrict__ x,
                             long long rows, int n, long long stride, int vec, int chunks) {
  using A = klab::acc_t<T>;
  __shared__ klab::MaxSum<A> red[32];
  const long long row = blockIdx.x / chunks;
  const int c = blockIdx.x % chunks;
  const T* xr = x + row * stride;
  const int h = klab::row_head(xr, vec);
  const int base = c * blockDim.x * VPT + threadIdx.x;
  klab::Vec<T> r[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k)
    r[k] = klab::load_window<T, false>(xr, base + k * blockDim.x, n, h, vec,
                                       klab::neg_inf_t<T>());
  klab::MaxSum<A> st = klab::local_maxsum(r);
  st = klab::block_allreduce(st, klab::MergeOp{}, id<T>(), red);
  if (threadIdx.x == 0) {
    part[2 * blockIdx.x] = st.m;
    part[2 * blockIdx.x + 1] = st.s;
  }
}

template <typename T, int VPT>
__global__ void __launch_bounds__(1024)
    fast_softmax_split_apply(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,
                             long long stride, int vec, const klab::acc_t<T>* __restrict__ part,
                             int chunks) {
  using A = klab::acc_t<T>;
  const long long row = blockIdx.x / chunks;
  const int c = blockIdx.x % chunks;
  const T* xr = x + row * stride;
  T* yr = y + row * (long long)n;
  const int h = klab::row_head(xr, vec);
  const int base = c * blockDim.x * VPT + threadIdx.x;
  klab::Vec<T> r[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k)
    r[k] = klab::load_window(xr, base + k * blockDim.x, n, h, vec, klab::neg_inf_t<T>());
  klab::MaxSum<A> st = id<T>();  // every warp merges the row's pairs itself: no barrier
  const A* pr = part + 2 * row * chunks;
  for (int i = threadIdx.x & 31; i < chunks; i += 32)
    st = klab::merge(st, klab::MaxSum<A>{pr[2 * i], pr[2 * i + 1]});
  st = klab::warp_allreduce(st, klab::MergeOp{});
  klab::normalize(r, st.m, A(1) / st.s);
#pragma unroll
  for (int k = 0; k < VPT; ++k) klab::store_window(yr, base + k * blockDim.x, n, h, vec, r[k]);
}
