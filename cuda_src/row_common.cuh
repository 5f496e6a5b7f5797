// What several kinds of the row-softmax family share: the (max, sum) merge across a cluster
// (block / cluster, block_slots), the first wave in phases (block, cluster, block_slots), the
// shared-memory slots that cp.async fills (block_slots, persist_slots, persist, pipe, chunks,
// chunks_reg), the row store from registers, and the CTA size caps of the launch bounds.
//
// Slots: window v of a row is the aligned 16-byte slot v counted from the row's first 128-byte
// line (line heads, softmax_common.cuh: line_head), so each warp's 32 consecutive windows are 4
// whole lines; a row spans up to 7 more windows than with 16-byte heads. cp.async copies the
// windows inside the row whole; of the row's first and last windows (and the up to 7 before it)
// only the row's bytes (softmax_common.cuh: cp_async_edge), the rest of those slots replaced by
// -inf on read. Thread t's slot k sits at mine[k * blockDim.x] (consecutive threads, consecutive
// 16 B: conflict-free), and each thread reads back only the slots it copied (cp.async.wait_group,
// no barrier). Precondition of every slot kind: input and output rows in the same 16-byte phase
// (`vec` != 0; any phase, odd N fine). The dynamic shared memory is declared __align__(128):
// it starts where the static shared memory ends, and 16 bytes off a line every 32-byte sector
// was fetched twice from L2 (Nsight on H200: 2x the L2 read sectors, same DRAM bytes).
#pragma once

#include "chunk_sync.cuh"
#include "cluster.cuh"
#include "row_epilogues.cuh"
#include "slot_copies.cuh"
#include "softmax_common.cuh"

namespace klab {

namespace rowk {

// Merge the CL CTAs' pairs of a cluster: every warp reads slot `p` of each peer over DSMEM.
template <typename A, int CL>
__device__ __forceinline__ MaxSum<A> cluster_merge(const A* slot) {
  const int lane = threadIdx.x & 31;
  MaxSum<A> st = maxsum_identity<A>();
  if (lane < CL) {
    const unsigned a = dsmem_map(slot, lane);
    st = {dsmem_load(a, A()), dsmem_load(a + sizeof(A), A())};
  }
  return warp_allreduce(st, MergeOp{});
}

// A CTA's (max, sum) merged with its CL - 1 cluster peers' (one row a cluster: block_row,
// block_slots_row): thread 0 publishes it in `part`, one cluster barrier, every warp merges the
// peers' over DSMEM, then this CTA arrives (done reading peers). The caller calls cluster_wait()
// before it exits: peers may still be reading its `part`.
template <typename A, int CL>
__device__ __forceinline__ MaxSum<A> cluster_allreduce(MaxSum<A> st, A* part) {
  if (threadIdx.x == 0) {
    part[0] = st.m;
    part[1] = st.s;
  }
  cluster_sync();  // every CTA's pair is now visible cluster-wide
  st = cluster_merge<A, CL>(part);
  cluster_arrive();  // done reading peers
  return st;
}

// The first wave in phases (block, cluster, block_slots). A launch's first wave - rows
// [0, wave_rows), the CTAs (clusters) resident at once - would load, reduce and store together,
// DRAM idle in between: a fixed cost of ~12-15 us a call at 2-byte 128K-152K on block_slots
// clusters against the copy's 3-6 (bench/fixed_cost.py at 7992388^). Row r of it waits phase / 8 of wave_ns
// (the wave's load time at copy speed: the launcher's estimate), phase = r * 8 / wave_rows,
// before its first load (measured on H200: +2.0-2.5 % at 2-byte 131072 / 151936). wave_rows == 0:
// no wait. Every thread of the CTA (cluster) waits the same phase; later rows start as CTAs retire.
constexpr int kFirstWavePhases = 8;
__device__ __forceinline__ void stagger_first_wave(long long row, long long wave_rows,
                                                   long long wave_ns) {
  if (row >= wave_rows) return;
  const long long phase = row * kFirstWavePhases / wave_rows;
  if (phase == 0) return;
  const unsigned long long wait = (unsigned long long)(wave_ns * phase / kFirstWavePhases);
  const unsigned long long t0 = global_ns();
  while (global_ns() - t0 < wait) __nanosleep(256);
}

// One window of this thread's slots (slot k: window v = k * step + base), masked outside the row
// (block_slots, persist_slots, pipe).
template <typename T>
__device__ __forceinline__ Vec<T> slot_window(const uint4* mine, int k, bool inside, int v, int n,
                                              int h, int nwin) {
  Vec<T> r;
  if (v < nwin) {
    r.raw = mine[k * blockDim.x];
    if (!inside) mask_outside_row(v * Vec<T>::N - h, n, neg_inf<acc_t<T>>(), r);
  } else {
    r.fill(neg_inf_t<T>());
  }
  return r;
}

// The row's aligned 16-byte slots from its first 128-byte line: slot v is window v (line heads).
template <typename T> __device__ __forceinline__ const uint4* line_slots(const T* xr) {
  return reinterpret_cast<const uint4*>(reinterpret_cast<size_t>(xr) & ~size_t(kLineBytes - 1));
}

// This thread's slot windows of row xr in flight: slot j takes window first + j * step (line
// heads), one commit group. Whole windows are 16-byte copies; of the row's last window, when
// partial, only the row's bytes (cp_async16_first; `after`: row_followed); the rest of the slot
// is masked on every read. first >= 8: no slot window starts before the row (line heads put at
// most 7 windows there).
template <typename T>
__device__ __forceinline__ void copy_slots(unsigned dst, const T* xr, int first, int step,
                                           int slots, int n, bool after) {
  constexpr int W = Vec<T>::N;
  const int h = line_head(xr), nwin = (n + h + W - 1) / W, whole = (n + h) / W;
  const uint4* src = line_slots(xr);
  const unsigned dst_step = blockDim.x * sizeof(uint4);
  int j = 0, v = first;
  for (; j < slots && v < whole; ++j, v += step) cp_async16(dst + j * dst_step, src + v);
  if (j < slots && v < nwin)
    cp_async16_first<T>(dst + j * dst_step, src + v, (n + h - v * W) * sizeof(T), after);
  cp_async_commit();
}

// This thread's slots: slot k at mine[k * blockDim.x] (consecutive threads, consecutive 16 B:
// conflict-free). Window v = k * step + base of row xr; slot v covers bytes [16v, 16v + 16) from
// the start of the row's first 128-byte line. Windows wholly inside the row are 16-byte copies;
// the row's partial last window copies its first bytes (cp_async16_first), and window k = 0 when
// it starts before the row (step >= 32: no other can) goes through cp_async_edge (`before`: xr is
// not the tensor's first row; `after`: row_followed). The loop issues the whole windows; the two
// edges, after it.
template <typename T, int VPT>
__device__ __forceinline__ void prefetch_row(uint4* mine, const T* xr, int n, int base, int step,
                                             bool before, bool after) {
  constexpr int W = Vec<T>::N;
  const int h = line_head(xr), nwin = (n + h + W - 1) / W, whole = (n + h) / W;
  const bool head = base * W < h;  // window k = 0 starts before the row
  // One source pointer and one shared address per row, stepped per window (the per-window
  // 64-bit address and generic-to-shared conversion were ~9 instructions per copy).
  const uint4* src = line_slots(xr) + base;
  const unsigned dst = shared_addr(mine), dst_step = blockDim.x * sizeof(uint4);
  int tail = -1;  // k of window `whole` (the row's last, if partial), if this thread's
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int v = k * step + base;
    if (k == 0 && head) continue;
    if (v < whole) cp_async16(dst + k * dst_step, src + k * step);
    tail = v == whole ? k : tail;
  }
  if (head) cp_async_edge<T>(dst, src, base * W - h, n, before, after);
  if (tail >= 0 && whole < nwin)
    cp_async16_first<T>(dst + tail * dst_step, src + tail * step, (n + h - whole * W) * sizeof(T),
                        after);
}

// Back from the slots into registers; elements outside [0, n) of the row become -inf.
template <typename T, int VPT>
__device__ __forceinline__ void read_prefetched(Vec<T> (&r)[VPT], const uint4* mine, int n, int h,
                                                int nwin, int base, int step) {
  using A = acc_t<T>;
  constexpr int W = Vec<T>::N;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int v = k * step + base;
    const int e0 = v * W - h;
    if (v < nwin) {
      r[k].raw = mine[k * blockDim.x];
      mask_outside_row(e0, n, neg_inf<A>(), r[k]);
    } else {
      r[k].fill(neg_inf_t<T>());
    }
  }
}

// read_prefetched for a warp whose windows are all whole where `inside` (windows_inside): one
// 16-byte shared load per window, no per-window mask (the masked path was ~20 instructions a
// window in chunks_reg, Nsight).
template <typename T, int VPT>
__device__ __forceinline__ void read_slots(Vec<T> (&r)[VPT], const uint4* mine, bool inside,
                                           int n, int h, int nwin, int base, int step) {
  if (inside) {
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      if (k * step + base < nwin) r[k].raw = mine[k * blockDim.x];
      else r[k].fill(neg_inf_t<T>());
    }
  } else {
    read_prefetched(r, mine, n, h, nwin, opaque(base), step);
  }
}

// Store a row's VPT windows (k * step + b) from registers (write_row): threads `inside` the row
// use 16-byte stores (store_vec_cg: normal L2 priority, as the rows' cp.async reads) from one
// pointer with a fixed stride, skipping windows past the row;
// the others go through store_window (the row's partial first and last windows).
template <template <typename> class E, int KEPT, typename T, int VPT, int KE>
__device__ __forceinline__ void store_row(T* yr, Vec<T> (&r)[VPT],
                                          const acc_t<T> (&e)[KE][Vec<T>::N], acc_t<T> m_thread,
                                          MaxSum<acc_t<T>> st, bool inside, int b, int step,
                                          int n, int h, int nwin) {
  constexpr int W = Vec<T>::N;
  if (inside) {
    T* p = yr + (b * W - h);
    const int jump = step * W;
    write_row<E, KEPT>(r, e, m_thread, st, [&](int k, const Vec<T>& v) {
      if (k * step + b < nwin) store_vec_cg(p + k * jump, v);
    });
  } else {
    write_row<E, KEPT>(r, e, m_thread, st, [&](int k, const Vec<T>& v) {
      store_window(yr, k * step + b, n, h, 1, v);
    });
  }
}

// Launch bounds. warp / block / cluster / block_slots / persist_slots: 16 vectors per thread
// need > 64 registers, so such CTAs are capped at 512 threads.
template <int VPT> struct MaxThreads {
  static constexpr int value = VPT >= 16 ? 512 : 1024;
};
// persist / pipe keep 64 or more elements per thread (fp32 x 16, fp16/bf16 x 8) in fp32
// registers: capped at 512 threads (128 registers).
template <typename T, int VPT> struct PersistThreads {
  static constexpr int value = VPT * Vec<T>::N >= 64 ? 512 : 1024;
};

}  // namespace rowk
}  // namespace klab
