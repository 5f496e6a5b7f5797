// Kinds warp, block and cluster of the row-softmax family: a row held in registers by a lane
// group, a CTA or a cluster of CTAs. Windows are the aligned 16-byte windows of
// softmax_common.cuh (load_window / store_window: 16-byte heads); `vec` = 0 (input and output
// rows in different 16-byte phases) loads and stores the same layout element by element.
#pragma once

#include "row_common.cuh"

namespace klab {

namespace rowk {

// ---- warp: short rows, a lane group a row ---------------------------------------------------
// Ownership: lane group g of the grid (G lanes, G | 32) owns row g; lane l holds windows
//            l + k * G (k < VPT) in registers. Reductions: G-wide shuffles, no shared memory, no
//            barrier; groups past the last row shuffle with their warp, then leave.
// Launch:    blockDim.x threads (<= 256; the launcher: 128), blockDim.x / G rows a CTA; a row
//            spans at most G * VPT windows (the launcher: <= 64, 1 KB).
// Precond:   none on alignment. fp16/bf16 softmax keeps its fp32 exps (one exp an element).
// Bytes:     2 * M * N * sizeof(T).
template <template <typename> class E, typename T, int G, int VPT>
__device__ __forceinline__ void warp_rows(T* __restrict__ y, const T* __restrict__ x,
                                          long long rows, int n, long long stride, int vec) {
  using A = acc_t<T>;
  const long long g = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / G;
  const int lane = threadIdx.x % G;
  const bool active = g < rows;  // inactive groups still shuffle (full-mask), then leave
  const long long row = active ? g : rows - 1;
  const T* xr = x + row * stride;
  T* yr = y + row * (long long)n;
  const int h = row_head(xr, vec);
  const T fill = neg_inf_t<T>();

  constexpr bool kExp = E<A>::kScalesExp && sizeof(T) == 2;  // see exp_scale
  Vec<T> r[VPT];
  A e[kExp ? VPT : 1][Vec<T>::N];
#pragma unroll
  for (int k = 0; k < VPT; ++k) r[k] = load_window(xr, k * G + lane, n, h, vec, fill);
  MaxSum<A> st;
  if constexpr (kExp) st = exp_maxsum(r, e); else st = row_maxsum(r);
  const A m_thread = st.m;
  st = warp_allreduce<G>(st, MergeOp{});
  if (!active) return;
  write_row<E, kExp>(r, e, m_thread, st, [&](int k, const Vec<T>& v) {
    store_window(yr, k * G + lane, n, h, vec, v);
  });
}

// What block and cluster keep (Kept): fp32 / fp64 their raw values (two exps: see exp_scale);
// 2-byte softmax its fp32 exps up to 32 elements a thread (x 4). At 64 elements (2-byte x 8, 64
// registers at 1024 threads) the fp32 exps spilled 288-296 B and the exps rounded to T 24 B
// (bf16); the raw values with the epilogue applied vector by vector just before each store
// (kBlockEachVector) spill nothing (measured on H200: 94-99 % of copy, softmax and log_softmax).
template <typename T, int VPT>
constexpr bool kBlockEachVector = sizeof(T) == 2 && VPT * Vec<T>::N >= 64;
template <template <typename> class E, typename T, int VPT>
constexpr int kBlockKept = sizeof(T) == 2 && !kBlockEachVector<T, VPT>
                               ? kKeptFor<E, T, VPT * Vec<T>::N, 32>
                               : kKeptValues;

// ---- block (CL = 1) and cluster (CL > 1): a row held by one CTA or one cluster -------------
// Ownership: CTA (cluster) `row` owns that row; CTA rank c, thread t holds windows
//            k * CL * blockDim.x + c * blockDim.x + t (k < VPT) in registers.
// Steps:     loads, local (max, sum), block all-reduce (2 barriers); cluster: the CTAs' pairs
//            through distributed shared memory (cluster_allreduce: one cluster barrier, then a
//            split barrier before exit so that no peer reads freed shared memory); epilogue,
//            stores (2-byte x 8: vector by vector, kBlockEachVector).
// Launch:    grid = M * CL CTAs of blockDim.x (a multiple of 32 covering the row, <= 1024, <= 512
//            at VPT 16: MaxThreads), compile-time __cluster_dims__(CL). Static shared memory: 32
//            (max, sum) pairs + one pair for the cluster; no dynamic. (wave_rows, wave_ns): the
//            first wave in phases (stagger_first_wave), or (0, 0).
// Precond:   none on alignment; a row spans at most CL * blockDim.x * VPT windows.
// Bytes:     2 * M * N * sizeof(T).
template <template <typename> class E, typename T, int VPT, int CL>
__device__ __forceinline__ void block_row(T* __restrict__ y, const T* __restrict__ x, int n,
                                          long long stride, int vec, long long row,
                                          unsigned rank, long long wave_rows,
                                          long long wave_ns) {
  using A = acc_t<T>;
  __shared__ MaxSum<A> red[32];
  __shared__ A part[2];
  const T* xr = x + row * stride;
  T* yr = y + row * (long long)n;
  const int h = row_head(xr, vec);
  const int base = rank * blockDim.x + threadIdx.x, step = CL * blockDim.x;
  const T fill = neg_inf_t<T>();
  stagger_first_wave(row, wave_rows, wave_ns);

  constexpr int kKept = kBlockKept<E, T, VPT>;
  Vec<T> r[VPT];
  A e[kKept == kKeptExps ? VPT : 1][Vec<T>::N];
#pragma unroll
  for (int k = 0; k < VPT; ++k) r[k] = load_window(xr, k * step + base, n, h, vec, fill);
  MaxSum<A> st = kept_maxsum<kKept>(r, e);
  const A m_thread = st.m;
  st = block_allreduce(st, MergeOp{}, id<T>(), red);
  if constexpr (CL > 1) st = cluster_allreduce<A, CL>(st, part);
  write_row<E, kKept, kBlockEachVector<T, VPT>>(r, e, m_thread, st,
                                                 [&](int k, const Vec<T>& v) {
    store_window(yr, k * step + base, n, h, vec, v);
  });
  if constexpr (CL > 1) cluster_wait();  // peers are done with our `part`
}

}  // namespace rowk
}  // namespace klab
