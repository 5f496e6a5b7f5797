// Kind persist of the softmax-family backwards: the persistent, prefetching row kernel, written
// once (body persist_rows) and
// templated on the gradient rule G (one row reduction, then an elementwise dx):
//
//   fused_softmax_backward.cu: SoftmaxGrad     s = sum(y * dy),  dx = y * (dy - s)
//   fused_log_softmax_backward.cu:   LogSoftmaxGrad  s = sum(dy),      dx = dy - exp(y) * s
//
// G::term(y, dy) is what a row sums (fp32 accumulation, fp64 for double), G::dx(y, dy, s) the
// element written; both see a window's values outside the row as y = dy = 0, so term must be 0
// there (the window's dx is never stored). The .cu files hold the thin __global__ wrappers
// (KLAB_BACKWARD_ROW_KERNELS in backward_chunks.cuh), so that NVRTC name expressions such as
// "log_softmax_backward_persist<float, 4, 8>" work.
//
// Ownership: the grid holds only the clusters of CL CTAs (CL = 1: single CTAs) that are resident
//            at once; cluster q of Q owns rows q, q + Q, ...; inside a row, CTA rank c, thread t
//            holds windows k * CL * blockDim.x + c * blockDim.x + t (k < VPT) of y and dy.
// Pipeline:  the current row's y and dy sit in registers; the next row's windows of this thread
//            (`stages` = 2: the next two rows', in alternating slot sets) are in flight into
//            dynamic shared memory (cp.async, 16 bytes a whole window) while the CTA reduces,
//            exchanges its partial with its peers and stores dx. Each thread reads back only the
//            slots it copied (wait_group: no block barrier). The copies are issued once the
//            reduction loop has consumed every value read from the slots.
// Cluster:   each CTA sends its partial to every peer as an st.async message counted by the
//            peer's mbarrier (cluster.cuh, ClusterInbox): no cluster barrier per row, whose
//            release (MEMBAR.ALL.GPU) waited for the previous row's dx stores.
// Launch:    grid = min(M, resident clusters) * CL, blockDim.x a multiple of 32 (<= 1024 for
//            fp32 x 4 vectors, <= 640 for fp16/bf16 and fp32 x 8: BackwardPersistThreads),
//            dynamic shared memory stages * 2 * blockDim.x * VPT * 16 B (per stage: y slots,
//            then dy); stages is 1 or 2.
// Windows:   aligned 16-byte windows as in softmax_common.cuh: odd N such as 50257 still moves
//            whole slots inside the row; of its first and last window only the row's bytes are
//            copied (cp_async_edge), the rest zeroed on read. `line` = 0: h = the row's offset
//            within its first 16 bytes; `line` = 1 (line heads, as the forward's persist): h = its
//            offset within its 128-byte line, so each warp's 32 windows are 4 whole lines instead
//            of straddling 5 (up to 7 windows before the row, nothing copied, all zero, belong to
//            the first warp; measured on H200: odd rows (50257) had 2.6x the L2 read requests of
//            rows on lines).
// Preconds:  every row of y, dy and dx starts at the same offset within 16 bytes (any N); the
//            launcher takes another kind otherwise. `line` = 1 only if every row of y and dy
//            starts at the same offset within 128 bytes (one h for both) and the shape holds up
//            to 7 more windows.
// Bytes:     3 * M * N * sizeof(T), loads always in flight.
#pragma once
#include "cluster.cuh"
#include "slot_copies.cuh"
#include "softmax_common.cuh"

namespace klab {
namespace bwd {

// Rows of y and dy in the same 16-byte phase: h elements of the first aligned 16-byte slot
// precede each row; slot v of the row is bytes [16v, 16v + 16) from there.
template <typename T> __device__ __forceinline__ const uint4* slots_of(const T* row, int h) {
  return reinterpret_cast<const uint4*>(row - h);
}

// Elements of the row's first slot before the row: within 16 bytes, or (line) 128 bytes.
template <typename T> __device__ __forceinline__ int head_of(const T* row, int line) {
  return line ? klab::line_head(row) : klab::row_head(row, 1);
}

// This thread's windows k * step + base of rows yr and dyr into its slots (my_y, my_dy: slot k at
// [k * blockDim.x]), as rowk::prefetch_row: windows wholly inside the row are 16-byte copies, the
// row's partial last window copies its first bytes, and window k = 0 when it starts before the
// row goes through klab::cp_async_edge (`before`: neither row is its tensor's first; `after`:
// both rows are followed by a later one, klab::row_followed).
// Row r of y and of dy are both followed by a later row of at least a window (klab::row_followed).
template <typename T>
__device__ __forceinline__ bool pair_followed(long long r, long long rows, int n,
                                              long long y_stride, long long dy_stride) {
  return r + 1 < rows && y_stride > 0 && dy_stride > 0 && n >= klab::Vec<T>::N;
}

template <typename T, int VPT>
__device__ __forceinline__ void prefetch_pair(uint4* my_y, uint4* my_dy, const T* yr,
                                              const T* dyr, int n, int base, int step, int line,
                                              bool before, bool after) {
  constexpr int W = klab::Vec<T>::N;
  const int h = head_of(yr, line), nwin = (n + h + W - 1) / W, whole = (n + h) / W;
  const bool head = base * W < h;  // window k = 0 starts before the row (step >= 32)
  const uint4* y4 = slots_of(yr, h) + base;  // stepped per window, as rowk::prefetch_row
  const uint4* dy4 = slots_of(dyr, h) + base;
  const unsigned sy = klab::shared_addr(my_y), sdy = klab::shared_addr(my_dy);
  const unsigned jump = blockDim.x * sizeof(uint4);
  int tail = -1;  // k of window `whole` (the row's last, if partial), if this thread's
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int v = k * step + base;
    if (k == 0 && head) continue;
    if (v < whole) {
      klab::cp_async16(sy + k * jump, y4 + k * step);
      klab::cp_async16(sdy + k * jump, dy4 + k * step);
    }
    tail = v == whole ? k : tail;
  }
  if (head) {
    klab::cp_async_edge<T>(sy, y4, base * W - h, n, before, after);
    klab::cp_async_edge<T>(sdy, dy4, base * W - h, n, before, after);
  }
  if (tail >= 0 && whole < nwin) {  // the row's last window, partial: its first bytes
    const int bytes = (n + h - whole * W) * sizeof(T);
    klab::cp_async16_first<T>(sy + tail * jump, y4 + tail * step, bytes, after);
    klab::cp_async16_first<T>(sdy + tail * jump, dy4 + tail * step, bytes, after);
  }
}

// fp32 x 4 vectors: <= 1024 threads (52-54 registers). fp16/bf16, and fp32 with more than 4
// vectors: <= 640 threads, which caps them at 90-91 registers with no spills (2-byte types at
// the 1024-thread cap of 64 spilled 64-72 bytes, at 768's 80 spilled 8-16; a 512-thread bound
// let ptxas take 107, so CTAs of >= 320 threads were one per SM; fp32 x 8 at 1024 spilled
// 88-104). NVRTC 13.0, sm_90.
template <typename T, int VPT> struct BackwardPersistThreads {
  static constexpr int value = sizeof(T) == 2 || VPT > 4 ? 640 : 1024;
};

template <typename G, typename T, int VPT, int CL>
__device__ __forceinline__ void persist_rows(T* __restrict__ dx, const T* __restrict__ y,
                                             const T* __restrict__ dy, long long rows, int n,
                                             long long y_stride, long long dy_stride,
                                             int line, int stages) {
  using A = klab::acc_t<T>;
  using V = klab::Vec<T>;
  constexpr int W = V::N;
  __shared__ A red[32];
  __shared__ klab::ClusterInbox<A, CL> inbox;  // CL > 1: every CTA's partial sum of each row
  // Per stage: VPT * blockDim.x slots for y, then as many for dy; on 128-byte lines, like the
  // rows they copy (row_softmax_kernels.cuh, "Slots": off a line every sector is read twice).
  extern __shared__ __align__(128) uint4 slots[];
  const unsigned rank = CL > 1 ? klab::cluster_rank() : 0u;
  const long long q = blockIdx.x / CL, Q = gridDim.x / CL;
  const int base = rank * blockDim.x + threadIdx.x, step = CL * blockDim.x;
  const int stage_slots = 2 * VPT * blockDim.x;
  if constexpr (CL > 1) {
    if (threadIdx.x == 0) inbox.init();
    klab::cluster_sync();  // every peer's inbox exists before the first message
  }

  // Prologue: rows q, q + Q, ... (one per stage) in flight, one commit group each.
  for (int s = 0; s < stages; ++s) {
    const long long r = q + s * Q;
    uint4* my_y = slots + s * stage_slots + threadIdx.x;
    if (r < rows)
      prefetch_pair<T, VPT>(my_y, my_y + VPT * blockDim.x, y + r * y_stride, dy + r * dy_stride, n,
                            base, step, line, r * y_stride > 0 && r * dy_stride > 0,
                            pair_followed<T>(r, rows, n, y_stride, dy_stride));
    klab::cp_async_commit();
  }
  for (long long row = q, it = 0; row < rows; row += Q, ++it) {
    uint4* my_y = slots + (stages > 1 ? (it & 1) : 0) * stage_slots + threadIdx.x;
    uint4* my_dy = my_y + VPT * blockDim.x;
    klab::cp_async_wait_stage(stages);  // this thread's copies of `row` have landed
    const int h = head_of(y + row * y_stride, line), nwin = (n + h + W - 1) / W;
    V ry[VPT], rd[VPT];
    // All but the row's first and last threads: every window in the row whole, no masks.
    const bool inside = klab::windows_inside<T, VPT>(base, step, n, h);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int v = k * step + base, e0 = v * W - h;
      if (v < nwin) {
        ry[k].raw = my_y[k * blockDim.x];
        rd[k].raw = my_dy[k * blockDim.x];
        if (!inside) klab::mask_outside_row(e0, n, A(0), ry[k], rd[k]);  // neighbours: 0
      } else {
        ry[k].fill(T(0.0f));
        rd[k].fill(T(0.0f));
      }
    }
    A s = A(0);
#pragma unroll
    for (int k = 0; k < VPT; ++k)
#pragma unroll
      for (int i = 0; i < W; ++i) s += G::term(ry[k].get(i), rd[k].get(i));
    // Every value read from the slots is consumed: they take the row `stages` ahead now.
    const long long rn = row + stages * Q;
    if (rn < rows)
      prefetch_pair<T, VPT>(my_y, my_dy, y + rn * y_stride, dy + rn * dy_stride, n, base, step,
                            line, rn * y_stride > 0 && rn * dy_stride > 0,
                            pair_followed<T>(rn, rows, n, y_stride, dy_stride));
    klab::cp_async_commit();
    s = klab::block_allreduce(s, klab::SumOp{}, A(0), red);
    if constexpr (CL > 1) {  // no cluster barrier per row: messages (klab::ClusterInbox)
      if (threadIdx.x < 32) inbox.send(static_cast<int>(it), rank, s, A(0));
      inbox.wait(static_cast<int>(it));
      const int lane = threadIdx.x & 31;
      s = klab::warp_allreduce(lane < CL ? inbox.a(static_cast<int>(it), lane) : A(0),
                               klab::SumOp{});
    }
    T* dxr = dx + row * (long long)n;
    auto dx_of = [&](int k) {
      return klab::vec_of<T>([&](int i) { return G::dx(ry[k].get(i), rd[k].get(i), s); });
    };
    if (inside) {  // plain 16-byte stores from one pointer, fixed stride
      T* p = dxr + (base * W - h);
#pragma unroll
      for (int k = 0; k < VPT; ++k)
        if (k * step + base < nwin) klab::store_vec(p + k * (step * W), dx_of(k));
    } else {
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int v = k * step + base;
        if (v < nwin) klab::store_window(dxr, v, n, h, 1, dx_of(k));
      }
    }
  }
  klab::cp_async_wait_all();
}

}  // namespace bwd
}  // namespace klab
