// Asynchronous 16-byte copies global -> shared (cp.async, sm_80+) and a row's windows copied
// into 16-byte slots: the whole ones as one copy, the row's edge windows as only the row's own
// bytes (never outside the tensor: memcheck-clean at any N, base and row count), masked on read.
// Used by the kinds that prefetch rows into shared memory (row_common.cuh, backward_persist.cuh).
#pragma once

#include "softmax_common.cuh"

namespace klab {

// ---- asynchronous 16-byte copies global -> shared (sm_80+) ---------------------------------
// cp.async.cg: L2 only (bypasses L1), completes in the background; the issuing thread sees the
// data after cp_async_wait_all(). Used by the persistent kernels to prefetch the next row.
// `smem` is a shared-state-space address (shared_addr); loops take it once and step it.
__device__ __forceinline__ unsigned shared_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(unsigned smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  cp_async16(shared_addr(smem), gmem);
}
// 4 or 8 bytes, both addresses aligned to that size (.ca: .cg copies only 16).
template <int Bytes>
__device__ __forceinline__ void cp_async_small(unsigned smem, const void* gmem) {
  static_assert(Bytes == 4 || Bytes == 8, "cp.async copies 4, 8 or 16 bytes");
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(smem), "l"(gmem), "n"(Bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;" ::: "memory");
}
// Wait for all but the newest committed group (two-stage prefetch: the next row stays in flight).
__device__ __forceinline__ void cp_async_wait_all_but_newest() {
  asm volatile("cp.async.wait_group 1;" ::: "memory");
}
// Wait until at most `n` of this thread's committed groups are still in flight (n >= 7: at most
// 7, which waits longer than asked, never shorter). wait_group takes an immediate.
__device__ __forceinline__ void cp_async_wait_pending(int n) {
  switch (n) {
    case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 7;" ::: "memory"); break;
  }
}
// Stages of a prefetch ring (1 or 2): wait until the oldest stage's copies have landed.
__device__ __forceinline__ void cp_async_wait_stage(int stages) {
  if (stages > 1) cp_async_wait_all_but_newest();
  else cp_async_wait_all();
}

// ---- a row's windows copied into 16-byte slots (cp.async) --------------------------------------
// Only windows wholly inside the row are copied whole: a row's first window (and, with line
// heads, the up to 7 before it) and its last one run past the row, for the tensor's first and last
// rows past its allocation. Of those only the row's own bytes are copied (cp_async16_first,
// cp_async_edge).

// One element (a plain load) into shared memory at `smem`.
template <typename T>
__device__ __forceinline__ void st_shared_elem(unsigned smem, const void* g) {
  if constexpr (sizeof(T) == 2) {
    const unsigned short b = *static_cast<const unsigned short*>(g);
    asm volatile("st.shared.u16 [%0], %1;" ::"r"(smem), "h"(b) : "memory");
  } else if constexpr (sizeof(T) == 4) {
    const unsigned b = *static_cast<const unsigned*>(g);
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(smem), "r"(b) : "memory");
  } else {
    const unsigned long long b = *static_cast<const unsigned long long*>(g);
    asm volatile("st.shared.u64 [%0], %1;" ::"r"(smem), "l"(b) : "memory");
  }
}

// True when the 16 bytes after row xr's end are its tensor's own: a later row of at least one
// window (n >= W, 16 bytes) follows it. x_last: the tensor's last row (rows at rising addresses).
template <typename T>
__device__ __forceinline__ bool row_followed(const T* xr, const T* x_last, int n) {
  return xr < x_last && n >= Vec<T>::N;
}

// A row's last window, partial: its first `bytes` (< 16) into the 16-byte slot `smem`, the rest
// of the slot zeroed. `after` (row_followed): the slot's bytes past the row are the tensor's own,
// so one 16-byte copy reads them (src-size zero-fills); else only the row's bytes are read (8-
// and 4-byte copies, a 2-byte element by a plain load: the tensor's last row only), for the
// slot's end may lie past the allocation.
template <typename T>
__device__ __forceinline__ void cp_async16_first(unsigned smem, const void* gmem, int bytes,
                                                 bool after) {
  if (after) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem), "l"(gmem),
                 "r"(bytes) : "memory");
    return;
  }
  const char* g = static_cast<const char*>(gmem);
  int c = 0;
  if (bytes >= 8) {
    cp_async_small<8>(smem, g);
    c = 8;
  }
  if (bytes - c >= 4) {
    cp_async_small<4>(smem + c, g + c);
    c += 4;
  }
  if (sizeof(T) == 2 && c < bytes) {
    st_shared_elem<T>(smem + c, g + c);
    c += 2;
  }
  if (c & 2) {  // the rest zeroed: 2 bytes to a 4-byte boundary, then words
    asm volatile("st.shared.u16 [%0], %1;" ::"r"(smem + c), "h"((unsigned short)0) : "memory");
    c += 2;
  }
#pragma unroll 1
  for (; c < 16; c += 4)
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(smem + c), "r"(0u) : "memory");
}

// A window that is not whole (e0 < 0 or e0 + W > n; e0 = v * W - h, its first element in the
// row) from its aligned 16-byte slot `window` into the 16-byte slot `smem`, reading the row's
// bytes only. The slot's other bytes are left (zero or stale): every read masks them
// (mask_outside_row). By case:
//   no element of the row: nothing;
//   the row's last window: its first bytes, the rest zeroed (cp_async16_first, `after`);
//   the row's first window: its last bytes, aligned 4- and 8-byte copies. A 2-byte row that
//     starts 2 bytes into a 4-byte word (cp.async copies no 2-byte unit): with `before` (the row
//     is not the tensor's first, so the 2 bytes before it are the tensor's own) the word is
//     copied whole, else that element is a plain load (a stall: row 0 only, once a launch);
//   the row inside one window: element by element, plain loads.
template <typename T>
__device__ __forceinline__ void cp_async_edge(unsigned smem, const void* window, int e0, int n,
                                              bool before, bool after) {
  constexpr int W = Vec<T>::N, S = sizeof(T);
  const int lo = max(-e0, 0) * S, hi = min(n - e0, W) * S;  // the row's bytes: [lo, hi)
  const char* g = static_cast<const char*>(window);
  if (lo >= hi) return;
  if (lo == 0) {
    cp_async16_first<T>(smem, g, hi, after);
    return;
  }
  if (hi < 16) {
#pragma unroll 1
    for (int b = lo; b < hi; b += S) st_shared_elem<T>(smem + b, g + b);
    return;
  }
  int c = lo;  // copy [c, 16)
  if constexpr (S == 2) {
    if (c & 2) {
      if (before) {
        c -= 2;
      } else {
        st_shared_elem<T>(smem + c, g + c);
        c += 2;
      }
    }
  }
  if (c & 4) {
    cp_async_small<4>(smem + c, g + c);
    c += 4;
  }
  if (c == 0) {
    cp_async_small<8>(smem, g);
    c = 8;
  }
  if (c == 8) cp_async_small<8>(smem + 8, g + 8);
}

// A window read back from its slot (the copies above): the elements outside [0, n) - bytes that
// were not copied, or (2-byte rows, see cp_async_edge) the tensor's 2 bytes before the row -
// become `fill`. e0 = v * W - h is the window's first element in the row.
// Any number of windows of the same row position (y and dy in the backward) in one pass.
template <typename T, typename... More>
__device__ __forceinline__ void mask_outside_row(int e0, int n, acc_t<T> fill, Vec<T>& r,
                                                 More&... more) {
  constexpr int W = Vec<T>::N;
  if (e0 < 0 || e0 + W > n) {
#pragma unroll
    for (int i = 0; i < W; ++i)
      if (e0 + i < 0 || e0 + i >= n) {
        r.set(i, fill);
        (more.set(i, fill), ...);
      }
  }
}

}  // namespace klab
