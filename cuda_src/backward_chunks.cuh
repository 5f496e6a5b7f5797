// Kind chunks of the softmax-family backwards (body chunks_rows): rows longer than the
// persistent clusters hold (fp32 N > 163840, 2-byte N > 262144), read once where the stream kind
// reads twice. Templated
// on the gradient rule G as backward_persist.cuh (SoftmaxGrad in fused_softmax_backward.cu,
// LogSoftmaxGrad in fused_log_softmax_backward.cu; the .cu files hold the __global__ wrappers).
//
// The forward's chunks_reg kind (row_chunks.cuh) for two inputs and one row reduction (a sum,
// where the forward has a (max, sum) pair):
// Ownership: a row is cut into `chunks` chunks of blockDim.x * VPT windows (16-byte slots from
//            the row's head, as backward_persist.cuh: `line` = 1 measures it from the row's
//            128-byte line). Item i of rows * chunks is chunk i % chunks of row i / chunks; CTA
//            q of Q (the grid: only resident CTAs) owns items q, q + Q, ...; in a chunk, thread t
//            owns windows c * span + k * blockDim.x + t (k < VPT, span = blockDim.x * VPT) of y
//            and of dy.
// Step t:    phase 1 (item q + t Q): its y and dy slots have landed (cp.async, `ahead` steps
//            earlier) -> registers (`cur`) -> the chunk's partial sum of G::term, block
//            all-reduce -> one flagged word in `sums` (chunk_sync.cuh); the slots take the item
//            `ahead` steps on as soon as they are read. phase 2 (item q + (t - 1) Q, held in
//            registers since the last step): warp 0 waits until every chunk of its row has its
//            word, adds them in chunk order (the same sum on every CTA), then dx from registers.
// No CTA waits on one that waits on it while chunks <= Q + 1: every chunk of the row a CTA
//            waits for at step t is reduced in some CTA's phase 1 of step <= t (the launcher
//            checks it against the resident grid, `chunks_fit`; a wait of 10 s traps).
// Launch:    grid = min(rows * chunks, resident CTAs), blockDim.x <= 512 (two chunks' y and dy
//            in registers: 16 * VPT each), dynamic shared memory ahead * 2 * blockDim.x * VPT *
//            16 B, `sums` 8 B per chunk, none of its words carrying `epoch` (chunk_sync.cuh).
// Bytes:     3 * M * N * sizeof(T) + 8 B per chunk (the stream kernel: 5 * M * N, the second read
//            partly from L2).
// Preconds:  rows of y, dy and dx in the same 16-byte phase (any N); `line` = 1 only if every row
//            of y and dy starts at the same offset within 128 bytes (one h for both). fp32
//            accumulation (no fp64: the words hold fp32).
#pragma once
#include "backward_persist.cuh"
#include "chunk_sync.cuh"
#include "softmax_common.cuh"

namespace klab {
namespace bwd {

// A lane's first words of a row (chunks lane + 32 e, e < kEarlySums), loaded at the start of a
// step so that their L2 round trip overlaps phase 1; longer rows load the rest when they wait.
constexpr int kEarlySums = 2;
struct RowSums {
  unsigned long long w[kEarlySums];
};
__device__ __forceinline__ void load_row_sums(RowSums& rs, const unsigned long long* p,
                                              int chunks) {
#pragma unroll
  for (int e = 0; e < kEarlySums; ++e) {
    const int c = (threadIdx.x & 31) + 32 * e;
    rs.w[e] = c < chunks ? load_flagged(p + c) : 0;
  }
}

// Warp 0: wait until the `chunks` words of a row (p) are all in, add them (lane l: chunks l,
// l + 32, ..., then a warp all-reduce: the same sum on every CTA, so every chunk of a row scales
// by the same value) and publish the sum in *fin; then a CTA barrier. The first try reads the
// early words `rs`, retries load everything again.
__device__ __forceinline__ void chunk_row_sum(const unsigned long long* p, unsigned epoch,
                                              int chunks, float* fin, const RowSums& rs) {
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x & 31;
    retry_until_in([&](int attempt) {
      float s = 0.0f;
      bool in = true;
      auto take = [&](unsigned long long w) {
        in = in && flagged(w, epoch);
        s += flagged_value(w);
      };
#pragma unroll
      for (int e = 0; e < kEarlySums; ++e) {  // registers, not local memory: unrolled
        const int c = lane + 32 * e;
        if (c >= chunks) break;
        take(attempt == 0 ? rs.w[e] : load_flagged(p + c));
      }
      for (int c = lane + 32 * kEarlySums; c < chunks; c += 32) take(load_flagged(p + c));
      if (!__all_sync(0xffffffffu, in)) return false;
      s = warp_allreduce(s, SumOp{});
      if (lane == 0) *fin = s;
      return true;
    });
  }
  __syncthreads();
}

// One chunk's windows of y and dy, this thread's share.
template <typename T, int VPT> struct ChunkPair {
  Vec<T> y[VPT], dy[VPT];
};

template <typename G, typename T, int VPT>
__device__ __forceinline__ void chunks_rows(T* __restrict__ dx, const T* __restrict__ y,
                                            const T* __restrict__ dy, long long rows, int n,
                                            long long y_stride, long long dy_stride, int line,
                                            int chunks, unsigned long long* __restrict__ sums,
                                            unsigned epoch, int ahead) {
  using A = acc_t<T>;
  static_assert(sizeof(A) == 4, "the chunks' words hold fp32 sums");
  constexpr int W = Vec<T>::N;
  __shared__ A red[32];
  __shared__ A fin[2];  // by step parity: a slow warp may still read the last one
  // `ahead` slot sets, each VPT * blockDim.x slots of y then as many of dy, on 128-byte lines
  extern __shared__ __align__(128) uint4 slots[];
  const long long q = blockIdx.x, Q = gridDim.x;
  const int set_slots = 2 * VPT * blockDim.x, step = blockDim.x, span = blockDim.x * VPT;
  const long long dr = Q / chunks;  // a step moves every cursor on by Q items
  const int dc = static_cast<int>(Q - dr * chunks);
  auto fetch = [&](const ChunkCursor& it, int b) {  // item `it` into slot set b, no commit
    uint4* my_y = slots + b * set_slots + threadIdx.x;
    prefetch_pair<T, VPT>(my_y, my_y + VPT * blockDim.x, y + it.row * y_stride,
                          dy + it.row * dy_stride, n, it.c * span + threadIdx.x, step, line,
                          it.row * y_stride > 0 && it.row * dy_stride > 0,
                          pair_followed<T>(it.row, rows, n, y_stride, dy_stride));
  };
  {  // prologue: the first `ahead` items in flight, one commit group each
    ChunkCursor p(q, chunks);
    for (int b = 0; b < ahead; ++b) {
      if (p.row < rows) fetch(p, b);
      cp_async_commit();
      p.advance(dr, dc, chunks);
    }
  }

  // Step t: phase 1 takes item q + t Q (cursor `now`), phase 2 item q + (t - 1) Q (`held`,
  // cursor `last`); the slots just read take item q + (t + ahead) Q (`next`).
  ChunkCursor now(q, chunks), last = now, next(q + ahead * Q, chunks);
  int b = 0;  // slot set of item `now`: t % ahead
  auto one_step = [&](long long t, ChunkPair<T, VPT>& cur, ChunkPair<T, VPT>& held) -> bool {
    if (t > 0 && last.row >= rows) return false;
    RowSums rs;  // phase 2's words, loaded before phase 1 (warp 0)
    if (t > 0 && threadIdx.x < 32) load_row_sums(rs, sums + last.row * chunks, chunks);
    if (now.row < rows) {  // phase 1
      const T* yr = y + now.row * y_stride;
      const int h = head_of(yr, line), nwin = (n + h + W - 1) / W;
      const int base = now.c * span + threadIdx.x;
      const bool inside = windows_inside<T, VPT>(base, step, n, h);
      cp_async_wait_pending(ahead - 1);  // this thread's copies of item `now` have landed
      const uint4* my_y = slots + b * set_slots + threadIdx.x;
      const uint4* my_dy = my_y + VPT * blockDim.x;
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int v = k * step + base;
        if (v < nwin) {
          cur.y[k].raw = my_y[k * blockDim.x];
          cur.dy[k].raw = my_dy[k * blockDim.x];
          if (!inside) mask_outside_row(v * W - h, n, A(0), cur.y[k], cur.dy[k]);
        } else {
          cur.y[k].fill(T(0.0f));
          cur.dy[k].fill(T(0.0f));
        }
      }
      A s = A(0);
#pragma unroll
      for (int k = 0; k < VPT; ++k)
#pragma unroll
        for (int i = 0; i < W; ++i) s += G::term(cur.y[k].get(i), cur.dy[k].get(i));
      if (next.row < rows) fetch(next, b);  // every value read from the slots is consumed
      cp_async_commit();
      s = block_allreduce(s, SumOp{}, A(0), red);
      if (threadIdx.x == 0) store_flagged(sums + now.row * chunks + now.c, s, epoch);
    } else {
      cp_async_commit();  // one group per step, as the waits count them
    }
    if (t > 0) {  // phase 2
      chunk_row_sum(sums + last.row * chunks, epoch, chunks, &fin[t & 1], rs);
      const A s = fin[t & 1];
      const T* yr = y + last.row * y_stride;
      T* dxr = dx + last.row * (long long)n;
      const int h = head_of(yr, line), nwin = (n + h + W - 1) / W;
      const int base = last.c * span + threadIdx.x;
      auto dx_of = [&](int k) {
        return vec_of<T>([&](int i) { return G::dx(held.y[k].get(i), held.dy[k].get(i), s); });
      };
      if (windows_inside<T, VPT>(base, step, n, h)) {  // plain 16-byte stores, fixed stride
        T* p = dxr + (base * W - h);
#pragma unroll
        for (int k = 0; k < VPT; ++k)
          if (k * step + base < nwin) store_vec(p + k * (step * W), dx_of(k));
      } else {
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
          const int v = k * step + base;
          if (v < nwin) store_window(dxr, v, n, h, 1, dx_of(k));
        }
      }
    }
    last = now;
    now.advance(dr, dc, chunks);
    next.advance(dr, dc, chunks);
    b = b + 1 == ahead ? 0 : b + 1;
    return true;
  };
  ChunkPair<T, VPT> cur, held;
  for (long long t = 0; one_step(t, cur, held); ++t) held = cur;  // register moves
  cp_async_wait_all();
}

}  // namespace bwd
}  // namespace klab

// The two row-kernel entry points of a backward under one prefix and one gradient rule G (each
// .cu needs its own __global__ templates for NVRTC's name expressions, as the forward family's
// KLAB_ROW_SOFTMAX_KERNELS): P##_persist<T, VPT, CL> (backward_persist.cuh) and
// P##_chunks<T, VPT> (above).
#define KLAB_BACKWARD_ROW_KERNELS(P, G)                                                         \
  template <typename T, int VPT, int CL>                                                        \
  __global__ void KLAB_CLUSTER_DIMS(CL)                                                        \
      __launch_bounds__(klab::bwd::BackwardPersistThreads<T, VPT>::value)                       \
      P##_persist(T* __restrict__ dx, const T* __restrict__ y, const T* __restrict__ dy,        \
                  long long rows, int n, long long y_stride, long long dy_stride, int line,     \
                  int stages) {                                                                 \
    klab::bwd::persist_rows<G, T, VPT, CL>(dx, y, dy, rows, n, y_stride, dy_stride, line,       \
                                           stages);                                             \
  }                                                                                             \
  template <typename T, int VPT>                                                                \
  __global__ void __launch_bounds__(512)                                                        \
      P##_chunks(T* __restrict__ dx, const T* __restrict__ y, const T* __restrict__ dy,         \
                 long long rows, int n, long long y_stride, long long dy_stride, int line,      \
                 int chunks, unsigned long long* __restrict__ sums, unsigned epoch,             \
                 int ahead) {                                                                   \
    klab::bwd::chunks_rows<G, T, VPT>(dx, y, dy, rows, n, y_stride, dy_stride, line, chunks,    \
                                      sums, epoch, ahead);                                      \
  }
