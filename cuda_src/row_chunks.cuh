// Kinds chunks and chunks_reg of the row-softmax family: long rows without clusters. A row is
// cut into chunks of one CTA each; each chunk's (max, sum) pair goes through global memory as two
// flagged 64-bit words (chunk_sync.cuh: store_flagged / load_flagged, the launch's epoch in the
// high half), and a chunk waits on chip until its row's pairs are all in. Persistent CTAs: every
// wait is `lag` steps old and `ahead` chunks are always in flight, where the cluster kinds wait
// per row for the slowest of up to 16 CTAs with no loads in flight.
#pragma once

#include "chunk_sync.cuh"
#include "row_common.cuh"

namespace klab {

namespace rowk {

// A lane's first pairs of a row, loaded at the start of a step so that their L2 round trip
// (behind this SM's copies in flight) overlaps phase 1: chunks lane + 32 e, e < K (chunks:
// K = kEarlyPairs, rows of up to 128 chunks; chunks_reg: 2, its registers hold two chunks).
constexpr int kEarlyPairs = 4;
template <int K = kEarlyPairs> struct RowPairs {
  unsigned long long w[2 * K];
};
template <int K>
__device__ __forceinline__ void load_row_pairs(RowPairs<K>& rp, const unsigned long long* p,
                                               int chunks) {
#pragma unroll
  for (int e = 0; e < K; ++e) {
    const int c = (threadIdx.x & 31) + 32 * e;
    rp.w[2 * e] = c < chunks ? load_flagged(p + 2 * c) : 0;
    rp.w[2 * e + 1] = c < chunks ? load_flagged(p + 2 * c + 1) : 0;
  }
}

// Warp 0 of the CTA: wait until all `chunks` pairs of row `row` are in, merge them (lane l takes
// chunks l, l + 32, ...: the same result on every CTA) and publish the row's (max, sum) in `fin`.
// The first try reads the early pairs `rp`; retries load everything again.
template <int K>
__device__ __forceinline__ void chunk_row_stats(const unsigned long long* pairs, unsigned epoch,
                                                long long row, int chunks, MaxSum<float>* fin,
                                                const RowPairs<K>& rp) {
  if (threadIdx.x < 32) {
    const unsigned long long* p = pairs + 2 * row * chunks;
    const int lane = threadIdx.x & 31;
    retry_until_in([&](int attempt) {
      MaxSum<float> st = maxsum_identity<float>();
      bool in = true;
      auto take = [&](unsigned long long a, unsigned long long b) {
        in = in && flagged(a, epoch) && flagged(b, epoch);
        st = merge(st, MaxSum<float>{flagged_value(a), flagged_value(b)});
      };
#pragma unroll
      for (int e = 0; e < K; ++e) {  // registers, not local memory: unrolled
        const int c = lane + 32 * e;
        if (c >= chunks) break;
        if (attempt == 0) take(rp.w[2 * e], rp.w[2 * e + 1]);
        else take(load_flagged(p + 2 * c), load_flagged(p + 2 * c + 1));
      }
      for (int c = lane + 32 * K; c < chunks; c += 32)
        take(load_flagged(p + 2 * c), load_flagged(p + 2 * c + 1));
      if (!__all_sync(0xffffffffu, in)) return false;
      st = warp_allreduce(st, MergeOp{});
      if (threadIdx.x == 0) *fin = st;
      return true;
    });
  }
  __syncthreads();
}

// request(i, b): item i of rows * chunks into slot set b - this thread's slots of windows
// c * span + k * step + threadIdx.x (k < VPT) of the item's row, c = i % chunks - as one commit
// group (an empty one past the last item, so that the waits count one group per step).
template <typename T, int VPT> struct ChunkRequests {
  uint4* slots;
  const T* x;
  long long stride, items;
  int n, chunks, set_slots, span, step;
  __device__ __forceinline__ void operator()(long long i, int b) const {
    if (i < items) {
      const long long row = i / chunks;
      fetch(row, static_cast<int>(i - row * chunks), b);
    }
    cp_async_commit();
  }
  // Chunk c of row `row` into slot set b, with no commit.
  __device__ __forceinline__ void fetch(long long row, int c, int b) const {
    const T* xr = x + row * stride;
    prefetch_row<T, VPT>(slots + b * set_slots + threadIdx.x, xr, n, c * span + threadIdx.x, step,
                         xr != x, row_followed(xr, x + (items / chunks - 1) * stride, n));
  }
};

// ---- chunks: each chunk waits in shared memory for its row's pairs ---------------------------
// Ownership: item i of rows * chunks is chunk c = i % chunks of row i / chunks; CTA q of Q (the
//            grid: only resident CTAs) owns items q, q + Q, ...; step t of this CTA is item
//            q + t * Q; thread t owns windows c * blockDim.x * VPT + k * blockDim.x + t (k < VPT,
//            line heads), copied into its own slots. Per step t:
//   phase 1 (item of step t): its slots landed (cp.async, requested `ahead` steps earlier or in
//           the prologue) -> local (max, sum) -> block all-reduce -> flagged pair to `pairs`.
//   phase 2 (item of step t - lag): wait until its row's pairs are all in, merge them,
//           epilogue from the same slots, store; the slots then take the item of step
//           t - lag + bufs (bufs = lag + 1 + ahead slot sets).
// A chunk's row has all its pairs once every CTA has run phase 1 up to step t when
// chunks <= lag * Q + 1 (the launcher checks it against the resident grid; a wait of 10 s
// traps), so no CTA waits on one that waits on it.
// Launch:    grid = min(rows * chunks, resident CTAs) of blockDim.x <= 1024, dynamic shared
//            memory bufs * blockDim.x * VPT * 16 B; `pairs` 16 B a chunk, none of its words
//            carrying `epoch` (the launcher's per-stream buffer, kernel_lab/cuda/flag_words.py; or
//            zeroed, epoch 1). Static: 32 pairs + 2.
// Precond:   vec != 0 (input and output rows in one 16-byte phase); fp32 accumulation.
// Bytes:     2 * M * N * sizeof(T) + 16 B a chunk; two exps an element.
template <template <typename> class E, typename T, int VPT>
__device__ __forceinline__ void chunks_rows(T* __restrict__ y, const T* __restrict__ x,
                                            long long rows, int n, long long stride, int chunks,
                                            unsigned long long* __restrict__ pairs,
                                            unsigned epoch, int lag, int ahead) {
  using A = acc_t<T>;
  static_assert(sizeof(A) == 4, "pairs hold fp32 (max, sum)");
  constexpr int W = Vec<T>::N;
  __shared__ MaxSum<A> red[32];
  __shared__ MaxSum<A> fin[2];  // by step parity: a slow warp may still read the last one
  extern __shared__ __align__(128) uint4 chunk_slots[];  // bufs * blockDim.x * VPT
  const long long q = blockIdx.x, Q = gridDim.x, items = rows * chunks;
  const int bufs = lag + 1 + ahead, set_slots = blockDim.x * VPT, step = blockDim.x;
  const int span = blockDim.x * VPT;  // windows per chunk

  const ChunkRequests<T, VPT> request{chunk_slots, x, stride, items, n, chunks, set_slots, span,
                                      step};
  for (int b = 0; b < bufs; ++b) request(q + b * Q, b);

  for (long long t = 0;; ++t) {
    const long long i1 = q + t * Q, i2 = i1 - lag * Q;
    if (i2 >= items) break;
    RowPairs<> rp;  // phase 2's pairs, loaded before phase 1 (warp 0)
    if (i2 >= 0 && threadIdx.x < 32)
      load_row_pairs(rp, pairs + 2 * (i2 / chunks) * chunks, chunks);
    if (i1 < items) {  // phase 1
      const long long row = i1 / chunks;
      const T* xr = x + row * stride;
      const int h = line_head(xr), nwin = (n + h + W - 1) / W;
      const int base = static_cast<int>(i1 - row * chunks) * span + threadIdx.x;
      const bool inside = windows_inside<T, VPT>(base, step, n, h);
      cp_async_wait_pending(ahead);  // this thread's copies of item i1 have landed
      Vec<T> r[VPT];
      read_slots(r, chunk_slots + (t % bufs) * set_slots + threadIdx.x, inside, n, h, nwin,
                 base, step);
      MaxSum<A> st = row_maxsum(r);
      st = block_allreduce(st, MergeOp{}, id<T>(), red);
      if (threadIdx.x == 0) {
        store_flagged(pairs + 2 * i1, st.m, epoch);
        store_flagged(pairs + 2 * i1 + 1, st.s, epoch);
      }
    }
    if (i2 >= 0) {  // phase 2
      const long long row = i2 / chunks;
      const T* xr = x + row * stride;
      T* yr = y + row * (long long)n;
      const int h = line_head(xr), nwin = (n + h + W - 1) / W;
      const int base = static_cast<int>(i2 - row * chunks) * span + threadIdx.x;
      const int b = (t - lag) % bufs;
      chunk_row_stats(pairs, epoch, row, chunks, &fin[t & 1], rp);
      const E<A> epi(fin[t & 1]);
      const uint4* mine = chunk_slots + b * set_slots + threadIdx.x;
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int v = k * step + base;
        if (v < nwin) {  // store_window writes only the row's own elements
          Vec<T> r;
          r.raw = mine[k * blockDim.x];
          apply_epilogue(r, epi);
          store_window(yr, v, n, h, 1, r);
        }
      }
      request(i2 + bufs * Q, b);  // this thread's slots just read: the item bufs steps on
    }
  }
  cp_async_wait_all();
}

// ---- chunks_reg: chunks with lag 1, the waiting chunk in registers ----------------------------
// Ownership: as chunks. Phase 1 moves the chunk of step t from its slots into registers
//            (softmax: the exps e = exp(x - m_thread), fp32 with VPT * W <= 32, else rounded to
//            fp16/bf16, so phase 2 scales them, one exp an element; log_softmax: the raw values)
//            and its slots take the chunk of step t + ahead at once; phase 2 stores the chunk of
//            step t - 1 from registers. Items advance as (row, chunk) cursors (ChunkCursor).
// Why:       chunks' three 64 KB slot sets (reduced, waiting, in flight) fill shared memory, so
//            only one chunk is ever in flight; here only the `ahead` chunks in flight are.
// Launch:    grid = min(rows * chunks, resident CTAs) of blockDim.x <= 512 (two chunks' values a
//            thread: this step's and the waiting one), dynamic shared memory ahead * blockDim.x
//            * VPT * 16 B; `pairs` as chunks.
// Precond:   as chunks, with lag 1: chunks <= Q + 1.
// Bytes:     2 * M * N * sizeof(T) + 16 B a chunk.
template <typename T, int VPT, int KEPT> struct HeldChunk {
  Vec<T> r[VPT];
  acc_t<T> e[KEPT == kKeptExps ? VPT : 1][Vec<T>::N];
  acc_t<T> m_thread;
};

template <template <typename> class E, typename T, int VPT>
__device__ __forceinline__ void chunks_reg_rows(T* __restrict__ y, const T* __restrict__ x,
                                                long long rows, int n, long long stride,
                                                int chunks, unsigned long long* __restrict__ pairs,
                                                unsigned epoch, int ahead) {
  using A = acc_t<T>;
  static_assert(sizeof(A) == 4, "pairs hold fp32 (max, sum)");
  constexpr int W = Vec<T>::N;
  constexpr int kKept = kKeptFor<E, T, VPT * W, 32>;
  using Held = HeldChunk<T, VPT, kKept>;
  __shared__ MaxSum<A> red[32];
  __shared__ MaxSum<A> fin[2];  // by step parity: a slow warp may still read the last one
  extern __shared__ __align__(128) uint4 chunk_slots[];  // ahead * blockDim.x * VPT
  const long long q = blockIdx.x, Q = gridDim.x;
  const int set_slots = blockDim.x * VPT, step = blockDim.x, span = blockDim.x * VPT;
  const long long dr = Q / chunks;  // a step moves every cursor on by Q items
  const int dc = static_cast<int>(Q - dr * chunks);

  const ChunkRequests<T, VPT> request{chunk_slots, x,         stride, rows * chunks, n,
                                      chunks,      set_slots, span,   step};
  for (int b = 0; b < ahead; ++b) request(q + b * Q, b);

  // Step t: phase 1 takes item q + t Q (cursor `now`), phase 2 item q + (t - 1) Q (`held`'s
  // chunk, cursor `last`), the slots just read take item q + (t + ahead) Q (`next`).
  ChunkCursor now(q, chunks), last = now, next(q + ahead * Q, chunks);
  int b = 0;  // slot set of item `now`: t % ahead
  // One step; false once there is nothing left. `cur` takes this step's chunk, `held` holds
  // the last one's. (Two sets alternating roles instead of the copy `held = cur`, 32 moves a
  // step, spilled 48 B in bf16 and lost 0.3 %. The same body written inline in the loop, not
  // as this lambda, compiles to 24 B of spills in 2-byte x 8.)
  auto one_step = [&](long long t, Held& cur, Held& held) -> bool {
    if (t > 0 && last.row >= rows) return false;
    RowPairs<2> rp;  // phase 2's pairs, loaded before phase 1 (warp 0)
    if (t > 0 && threadIdx.x < 32) load_row_pairs(rp, pairs + 2 * last.row * chunks, chunks);
    if (now.row < rows) {  // phase 1
      const T* xr = x + now.row * stride;
      const int h = line_head(xr), nwin = (n + h + W - 1) / W;
      const int base = now.c * span + threadIdx.x;
      const bool inside = windows_inside<T, VPT>(base, step, n, h);
      cp_async_wait_pending(ahead - 1);  // this thread's copies of item `now` have landed
      read_slots(cur.r, chunk_slots + b * set_slots + threadIdx.x, inside, n, h, nwin, base,
                 step);
      MaxSum<A> st = kept_maxsum<kKept>(cur.r, cur.e);  // consumes every value read from the
      cur.m_thread = st.m;
      if (next.row < rows) request.fetch(next.row, next.c, b);  // slots, so they can take
      cp_async_commit();                                          // the chunk `ahead` steps on
      st = block_allreduce(st, MergeOp{}, id<T>(), red);
      if (threadIdx.x == 0) {
        const long long i = now.row * chunks + now.c;
        store_flagged(pairs + 2 * i, st.m, epoch);
        store_flagged(pairs + 2 * i + 1, st.s, epoch);
      }
    } else {
      cp_async_commit();  // one group per step, as the waits count them
    }
    if (t > 0) {  // phase 2
      const T* xr = x + last.row * stride;
      T* yr = y + last.row * (long long)n;
      const int h = line_head(xr), nwin = (n + h + W - 1) / W;
      const int base = last.c * span + threadIdx.x;
      chunk_row_stats(pairs, epoch, last.row, chunks, &fin[t & 1], rp);
      const bool inside = windows_inside<T, VPT>(base, step, n, h);
      store_row<E, kKept>(yr, held.r, held.e, held.m_thread, fin[t & 1], inside, opaque(base),
                         step, n, h, nwin);
    }
    last = now;
    now.advance(dr, dc, chunks);
    next.advance(dr, dc, chunks);
    b = b + 1 == ahead ? 0 : b + 1;
    return true;
  };
  Held cur, held;
  for (long long t = 0; one_step(t, cur, held); ++t) held = cur;  // register moves
  cp_async_wait_all();
}

}  // namespace rowk
}  // namespace klab
