// Kind wide of the row-softmax family: rows longer than any on-chip shape holds, on persistent
// clusters, each window read at most twice (the fallback of fp64 and of rows whose input and
// output sit in different 16-byte phases; rows of more chunks than the resident grid holds).
#pragma once

#include "row_common.cuh"

namespace klab {

namespace rowk {

// This CTA's part of one row (it depends on the row's head h, so it is worked out per row):
// windows [c0, c1), `per` per thread (thread t: c0 + j * blockDim.x + t, j < per), the first
// `keep` of them kept in shared memory (slot j * blockDim.x + t).
struct WideSpan {
  int h, c0, c1, per, keep;
};
template <typename T, int CL>
__device__ __forceinline__ WideSpan wide_span(const T* xr, int n, int vec, unsigned rank,
                                              int kept) {
  constexpr int W = Vec<T>::N;
  WideSpan s;
  s.h = row_head(xr, vec);
  const int nwin = (n + s.h + W - 1) / W;
  const int chunk = (nwin + CL - 1) / CL;
  s.c0 = rank * chunk;
  s.c1 = min(s.c0 + chunk, nwin);
  s.per = (chunk + blockDim.x - 1) / blockDim.x;
  s.keep = min(kept, s.per);
  return s;
}

// Copies of this thread's kept windows j0 .. j0 + U - 1 of row xr into its slots (vec != 0:
// aligned 16-byte slots, 16-byte heads). Whole windows are 16-byte copies; of the row's first
// window, when it starts before the row, and of its partial last one only the row's bytes
// (cp_async_edge, cp_async16_first; `before`: xr is not the tensor's first row; `after`:
// row_followed). The rest of those slots is masked on read.
template <typename T, int U>
__device__ __forceinline__ void wide_request(uint4* mine, const T* xr, const WideSpan& s, int j0,
                                             int n, bool before, bool after) {
  constexpr int W = Vec<T>::N;
  const char* a = reinterpret_cast<const char*>(xr) - s.h * sizeof(T);
  const int whole = (n + s.h) / W;  // windows 1 (0 if h == 0) .. whole - 1 are whole
  int tail = -1;  // u of the row's partial last window, if this thread's
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int j = j0 + u, v = s.c0 + j * static_cast<int>(blockDim.x) + threadIdx.x;
    if (j < s.keep && v < s.c1 && v * W >= s.h) {
      if (v < whole) cp_async16(mine + j * blockDim.x, a + 16 * static_cast<size_t>(v));
      else tail = u;
    }
  }
  if (j0 == 0 && s.h > 0 && s.c0 + threadIdx.x == 0)  // window 0 (kept slot 0) starts before
    cp_async_edge<T>(shared_addr(mine), a, -s.h, n, before, after);
  if (tail >= 0)
    cp_async16_first<T>(shared_addr(mine + (j0 + tail) * blockDim.x),
                        a + 16 * static_cast<size_t>(whole), (n + s.h - whole * W) * sizeof(T),
                        after);
}

// ---- wide: persistent clusters, two passes over the row ------------------------------------
// Ownership: the grid holds only resident clusters; cluster q of Q owns rows q, q + Q, ...; CTA
//            rank c owns the contiguous windows [c * chunk, (c + 1) * chunk) of the row (16-byte
//            heads), chunk = ceil(windows / CL); its thread t owns windows c * chunk +
//            j * blockDim.x + t, j < per = ceil(chunk / blockDim.x), the first `kept` of them
//            in its shared-memory slots (up to 227 KB a CTA).
// Launch:    grid = min(M, resident clusters) * CL, blockDim.x <= 1024 (the launcher: 1024, CL 8
//            or 16), dynamic shared memory kept * blockDim.x * 16 B; static: 32 pairs + 2 inboxes.
// Precond:   none on alignment (vec = 0: element-wise loads, nothing prefetched).
// Bytes:     2 * M * N * sizeof(T) when every window is kept; each window not kept is read twice
//            (the second read sometimes from L2). Two exps an element.
// For each row:
//   pass 1  the windows not kept stream through registers (batches of U); then the kept batches,
//           each as soon as its commit group has landed (requested during the previous row's
//           pass 2); local (max, sum). Block all-reduce, (max, sum) messages to every peer
//           (ClusterInbox: no cluster barrier, so no wait for the previous row's stores).
//   pass 2  batches of U: kept windows from shared memory, the rest re-read (plain loads: last
//           use), epilogue, store; then the same batch's slots take the NEXT row's windows
//           (cp.async, one commit group per batch), so its loads overlap this row's stores.
// vec == 0 (input and output rows in different 16-byte phases): pass 1 loads every window and
// stores the kept ones into the slots itself; nothing is prefetched.
template <template <typename> class E, typename T, int CL>
__device__ __forceinline__ void wide_rows(T* __restrict__ y, const T* __restrict__ x,
                                          long long rows, int n, long long stride, int vec,
                                          int kept) {
  using A = acc_t<T>;
  constexpr int U = 4;
  __shared__ MaxSum<A> red[32];
  __shared__ ClusterInbox<A, CL> inbox;
  extern __shared__ __align__(128) uint4 kept_slots[];  // kept * blockDim.x: j * blockDim.x + t
  const unsigned rank = cluster_rank();
  const long long q = blockIdx.x / CL, Q = gridDim.x / CL;
  const T fill = neg_inf_t<T>();
  uint4* mine = kept_slots + threadIdx.x;
  if (threadIdx.x == 0) inbox.init();
  cluster_sync();  // every peer's inbox exists before the first message

  int groups = 0;  // commit groups in flight with the current row's kept windows
  if (vec && q < rows) {
    const T* xr = x + q * stride;
    const WideSpan s = wide_span<T, CL>(xr, n, vec, rank, kept);
    for (int j0 = 0; j0 < s.keep; j0 += U, ++groups) {
      wide_request<T, U>(mine, xr, s, j0, n, xr != x,
                         row_followed(xr, x + (rows - 1) * stride, n));
      cp_async_commit();
    }
  }
  int it = 0;
  for (long long row = q; row < rows; row += Q, ++it) {
    const T* xr = x + row * stride;
    T* yr = y + row * (long long)n;
    const WideSpan s = wide_span<T, CL>(xr, n, vec, rank, kept);
    auto window = [&](int j) { return s.c0 + j * static_cast<int>(blockDim.x) + threadIdx.x; };

    MaxSum<A> st = id<T>();
    // The windows not kept (vec == 0: all; the kept ones are stored into the slots here).
    for (int j0 = vec ? s.keep : 0; j0 < s.per; j0 += U) {
      Vec<T> r[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = j0 + u, v = window(j);
        if (j < s.per && v < s.c1) r[u] = load_window<T, false>(xr, v, n, s.h, vec, fill);
        else r[u].fill(fill);
        if (j < s.keep) mine[j * blockDim.x] = r[u].raw;
      }
      st = merge(st, row_maxsum(r));
    }
    if (vec) {
      for (int j0 = 0, g = 0; j0 < s.keep; j0 += U, ++g) {
        cp_async_wait_pending(groups - 1 - g);  // batch g's copies have landed
        Vec<T> r[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int j = j0 + u, v = window(j), e0 = v * Vec<T>::N - s.h;
          if (j < s.keep && v < s.c1) {
            r[u].raw = mine[j * blockDim.x];
            mask_outside_row(e0, n, neg_inf<A>(), r[u]);
          } else {
            r[u].fill(fill);
          }
        }
        st = merge(st, row_maxsum(r));
      }
    }
    st = block_allreduce(st, MergeOp{}, id<T>(), red);
    if constexpr (CL > 1) {
      if (threadIdx.x < 32) inbox.send(it, rank, st.m, st.s);
      inbox.wait(it);
      const int lane = threadIdx.x & 31;
      st = warp_allreduce(lane < CL ? MaxSum<A>{inbox.a(it, lane), inbox.b(it, lane)} : id<T>(),
                          MergeOp{});
    }
    const E<A> epi(st);

    const long long rn = row + Q;  // the next row of this cluster, requested batch by batch
    const bool refill = vec && rn < rows;
    const T* xn = x + (refill ? rn : row) * stride;
    const WideSpan sn = wide_span<T, CL>(xn, n, vec, rank, refill ? kept : 0);
    groups = 0;
    for (int j0 = 0; j0 < max(s.per, sn.keep); j0 += U) {
      Vec<T> r[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = j0 + u, v = window(j);
        if (j < s.keep) r[u].raw = mine[j * blockDim.x];
        else if (j < s.per && v < s.c1) r[u] = load_window<T, true>(xr, v, n, s.h, vec, fill);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = j0 + u, v = window(j);
        if (j < s.per && v < s.c1) {  // store_window writes only the row's own elements
          apply_epilogue(r[u], epi);
          store_window(yr, v, n, s.h, vec, r[u]);
        }
      }
      if (j0 < sn.keep) {  // these slots' values are consumed (stored): reuse them
        wide_request<T, U>(mine, xn, sn, j0, n, xn != x,
                           row_followed(xn, x + (rows - 1) * stride, n));
        cp_async_commit();
        ++groups;
      }
    }
  }
}

}  // namespace rowk
}  // namespace klab
