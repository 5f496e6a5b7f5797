// Kinds warp, block and cluster: a row held in registers by a lane group, a CTA or a cluster.
#pragma once

#include "row_common.cuh"

namespace klab {

namespace rowk {

// Kernel 1.
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

// What kernels 2 and 3 keep (Kept): fp32 / fp64 their raw values (two exps: see exp_scale);
// 2-byte softmax its fp32 exps up to 32 elements a thread (x 4). At 64 elements (2-byte x 8, 64
// registers at 1024 threads) the fp32 exps spilled 288-296 B and the exps rounded to T 24 B
// (bf16); the raw values with the epilogue applied vector by vector just before each store
// (kRowOnChipEachVector) spill nothing: 94-99 % of copy in softmax and log_softmax (NOTES).
template <typename T, int VPT>
constexpr bool kRowOnChipEachVector = sizeof(T) == 2 && VPT * Vec<T>::N >= 64;
template <template <typename> class E, typename T, int VPT>
constexpr int kRowOnChipKept = sizeof(T) == 2 && !kRowOnChipEachVector<T, VPT>
                                   ? kKeptFor<E, T, VPT * Vec<T>::N, 32>
                                   : kKeptValues;

// Kernels 2 and 3: a row held by one CTA (CL == 1) or one cluster (CL > 1).
template <template <typename> class E, typename T, int VPT, int CL>
__device__ __forceinline__ void row_on_chip(T* __restrict__ y, const T* __restrict__ x, int n,
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

  constexpr int kKept = kRowOnChipKept<E, T, VPT>;
  Vec<T> r[VPT];
  A e[kKept == kKeptExps ? VPT : 1][Vec<T>::N];
#pragma unroll
  for (int k = 0; k < VPT; ++k) r[k] = load_window(xr, k * step + base, n, h, vec, fill);
  MaxSum<A> st = kept_maxsum<kKept>(r, e);
  const A m_thread = st.m;
  st = block_allreduce(st, MergeOp{}, id<T>(), red);
  if constexpr (CL > 1) st = cluster_row_pair<A, CL>(st, part);
  write_row<E, kKept, kRowOnChipEachVector<T, VPT>>(r, e, m_thread, st,
                                                     [&](int k, const Vec<T>& v) {
    store_window(yr, k * step + base, n, h, vec, v);
  });
  if constexpr (CL > 1) cluster_wait();  // peers are done with our `part`
}

}  // namespace rowk
}  // namespace klab
