// Shared device helpers for the row-wise kernels in cuda_src/. Written once, used by every
// kernel family: type conversion, fp32 (fp64 for double) accumulators, exp, warp and block
// all-reductions, the online (max, sum) merge, 16-byte vector loads/stores.
//
// NVRTC-safe: no host code, no <cmath>/INFINITY; infinities come from math_constants.h.
//
// Conventions every kernel in this folder follows (kernel_lab/cuda/sources.py launches them):
//   kernel<T>(T* out, const T* in0, [const T* in1,] long long rows, int n,
//             long long in0_stride, [long long in1_stride,] ...)
//   Input rows are `stride` elements apart, columns contiguous; the output is contiguous (M, N).
//   Row offsets are 64-bit (row * stride can exceed 2^31); offsets inside a row are 32-bit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

namespace klab {

// ---- accumulator type: fp32 for float/half/bf16, fp64 for double ----------------------------
template <typename T> struct AccOf { using type = float; };
template <> struct AccOf<double> { using type = double; };
template <typename T> using acc_t = typename AccOf<T>::type;

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ double to_acc(double v) { return v; }

template <typename T> __device__ __forceinline__ T from_acc(acc_t<T> v);
template <> __device__ __forceinline__ float from_acc<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_acc<__half>(float v) {
  return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ double from_acc<double>(double v) { return v; }

template <typename A> __device__ __forceinline__ A neg_inf();
template <> __device__ __forceinline__ float neg_inf<float>() { return -CUDART_INF_F; }
template <> __device__ __forceinline__ double neg_inf<double>() { return -CUDART_INF; }

// max that ignores NaN (fmaxf): a NaN input still poisons its row through the sum of exps.
__device__ __forceinline__ float amax(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double amax(double a, double b) { return fmax(a, b); }

// e^d. fp32: exp2f of a pre-scaled argument (one FMUL + MUFU.EX2); fp64: exp (exactness).
__device__ __forceinline__ float exp_acc(float d) { return exp2f(d * CUDART_L2E_F); }
__device__ __forceinline__ double exp_acc(double d) { return exp(d); }

// The max to subtract: -inf (an all -inf prefix) becomes 0 so that exp(-inf - m) = 0 rather
// than exp(-inf - -inf) = NaN. An all -inf row still ends as NaN: its final normalisation
// computes exp(-inf - -inf) / 0 on purpose, like torch.softmax.
template <typename A> __device__ __forceinline__ A safe_max(A m) {
  return m == neg_inf<A>() ? A(0) : m;
}

// ---- online (max, sum) ----------------------------------------------------------------------
// s is the sum of exp(x - m) over the elements seen. Merging never forms -inf - -inf.
template <typename A> struct MaxSum {
  A m, s;
};

template <typename A> __device__ __forceinline__ MaxSum<A> maxsum_identity() {
  return {neg_inf<A>(), A(0)};
}

template <typename A> __device__ __forceinline__ MaxSum<A> merge(MaxSum<A> a, MaxSum<A> b) {
  A m = amax(a.m, b.m);
  A ms = safe_max(m);
  return {m, a.s * exp_acc(a.m - ms) + b.s * exp_acc(b.m - ms)};
}

// Fold K new values into a running state with ONE rescale (K exps + 1, not 2K).
template <typename A, int K>
__device__ __forceinline__ void online_update(MaxSum<A>& st, const A (&v)[K]) {
  A cm = v[0];
#pragma unroll
  for (int i = 1; i < K; ++i) cm = amax(cm, v[i]);
  A m = amax(st.m, cm);
  A ms = safe_max(m);
  A s = st.s * exp_acc(st.m - ms);
#pragma unroll
  for (int i = 0; i < K; ++i) s += exp_acc(v[i] - ms);
  st.m = m;
  st.s = s;
}

// ---- reductions -------------------------------------------------------------------------------
struct MaxOp {
  template <typename A> __device__ __forceinline__ A operator()(A a, A b) const {
    return amax(a, b);
  }
};
struct SumOp {
  template <typename A> __device__ __forceinline__ A operator()(A a, A b) const { return a + b; }
};
struct MergeOp {
  template <typename A>
  __device__ __forceinline__ MaxSum<A> operator()(MaxSum<A> a, MaxSum<A> b) const {
    return merge(a, b);
  }
};

constexpr unsigned FULL_MASK = 0xffffffffu;

__device__ __forceinline__ float shfl_xor(float v, int o) {
  return __shfl_xor_sync(FULL_MASK, v, o);
}
__device__ __forceinline__ double shfl_xor(double v, int o) {
  return __shfl_xor_sync(FULL_MASK, v, o);
}
template <typename A> __device__ __forceinline__ MaxSum<A> shfl_xor(MaxSum<A> v, int o) {
  return {shfl_xor(v.m, o), shfl_xor(v.s, o)};
}

// All-reduce across groups of WIDTH lanes (a power of two <= 32); every lane gets the result.
template <int WIDTH = 32, typename V, typename Op>
__device__ __forceinline__ V warp_allreduce(V v, Op op) {
#pragma unroll
  for (int o = WIDTH / 2; o > 0; o >>= 1) v = op(v, shfl_xor(v, o));
  return v;
}

// (max, sum) pairs: the max first (shuffles of one value), then each lane rescales its sum to
// that max once and the sums are added: one exp per lane instead of two per shuffle step.
// Same edge cases as merge(): -inf pairs add 0; a +inf max or a NaN sum makes the sum NaN.
template <int WIDTH = 32, typename A>
__device__ __forceinline__ MaxSum<A> warp_allreduce(MaxSum<A> v, MergeOp) {
  A m = v.m;
#pragma unroll
  for (int o = WIDTH / 2; o > 0; o >>= 1) m = amax(m, shfl_xor(m, o));
  A s = v.s * exp_acc(v.m - safe_max(m));
#pragma unroll
  for (int o = WIDTH / 2; o > 0; o >>= 1) s += shfl_xor(s, o);
  return {m, s};
}

// All-reduce across the block (blockDim.x a multiple of 32). `smem` holds >= 32 V.
// Two barriers: the first keeps a previous call's readers safe, the second publishes.
template <typename V, typename Op>
__device__ __forceinline__ V block_allreduce(V v, Op op, V identity, V* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_allreduce(v, op);
  if (nwarps == 1) return v;
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = lane < nwarps ? smem[lane] : identity;
  return warp_allreduce(v, op);  // every warp reduces the partials: no third barrier
}

// ---- 16-byte vectors ------------------------------------------------------------------------
// A Vec holds 16 bytes of T (4 float, 8 half/bf16, 2 double) as raw bits: registers stay at 4
// per vector whatever the dtype, and conversion to the accumulator happens at use. Elements are
// read and written with shifts on the 32-bit words (never through a pointer to the registers,
// which can push the whole array to local memory: measured as a 3x slowdown for bf16).
__device__ __forceinline__ unsigned word(const uint4& r, int k) {
  return k == 0 ? r.x : k == 1 ? r.y : k == 2 ? r.z : r.w;
}
__device__ __forceinline__ void set_word(uint4& r, int k, unsigned v) {
  if (k == 0) r.x = v;
  else if (k == 1) r.y = v;
  else if (k == 2) r.z = v;
  else r.w = v;
}
__device__ __forceinline__ unsigned half_bits(const uint4& r, int i) {
  return (word(r, i >> 1) >> ((i & 1) * 16)) & 0xffffu;
}
__device__ __forceinline__ void set_half_bits(uint4& r, int i, unsigned b) {
  const int sh = (i & 1) * 16;
  set_word(r, i >> 1, (word(r, i >> 1) & ~(0xffffu << sh)) | (b << sh));
}

// Two packed 2-byte values as the CUDA pair type (__half2 / __nv_bfloat162), for packed math:
// `of` reads a register word as a pair, `fill` broadcasts one value, `lo` / `hi` take one half.
template <typename P> struct PairBits {  // what both pair types share: a word as a pair
  using type = P;
  static __device__ __forceinline__ type of(unsigned w) {
    type p;
    memcpy(&p, &w, sizeof w);
    return p;
  }
};
template <typename T> struct Pair;
template <> struct Pair<__half> : PairBits<__half2> {
  static __device__ __forceinline__ type fill(__half v) { return __half2half2(v); }
  static __device__ __forceinline__ __half lo(type p) { return __low2half(p); }
  static __device__ __forceinline__ __half hi(type p) { return __high2half(p); }
};
template <> struct Pair<__nv_bfloat16> : PairBits<__nv_bfloat162> {
  static __device__ __forceinline__ type fill(__nv_bfloat16 v) { return __bfloat162bfloat162(v); }
  static __device__ __forceinline__ __nv_bfloat16 lo(type p) { return __low2bfloat16(p); }
  static __device__ __forceinline__ __nv_bfloat16 hi(type p) { return __high2bfloat16(p); }
};

template <typename T> struct Bits;
template <> struct Bits<float> {
  static __device__ __forceinline__ float get(const uint4& r, int i) {
    return __uint_as_float(word(r, i));
  }
  static __device__ __forceinline__ void set(uint4& r, int i, float v) {
    set_word(r, i, __float_as_uint(v));
  }
};
template <> struct Bits<__half> {
  static __device__ __forceinline__ float get(const uint4& r, int i) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(half_bits(r, i))));
  }
  static __device__ __forceinline__ float get_again(const uint4& r, int i) {  // see Vec
    const unsigned b = __byte_perm(word(r, i >> 1), 0u, (i & 1) ? 0x4432u : 0x4410u);
    return __half2float(__ushort_as_half(static_cast<unsigned short>(b)));
  }
  static __device__ __forceinline__ void set(uint4& r, int i, float v) {
    set_half_bits(r, i, __half_as_ushort(__float2half_rn(v)));
  }
  static __device__ __forceinline__ unsigned pack(float lo, float hi) {  // one F2FP
    const __half2 p = __floats2half2_rn(lo, hi);
    unsigned u;
    memcpy(&u, &p, sizeof u);
    return u;
  }
};
template <> struct Bits<__nv_bfloat16> {
  static __device__ __forceinline__ float get(const uint4& r, int i) {
    return __uint_as_float(half_bits(r, i) << 16);  // bf16 is the top half of an fp32
  }
  static __device__ __forceinline__ float get_again(const uint4& r, int i) {  // see Vec
    return __uint_as_float(__byte_perm(word(r, i >> 1), 0u, (i & 1) ? 0x3244u : 0x1044u));
  }
  static __device__ __forceinline__ void set(uint4& r, int i, float v) {
    set_half_bits(r, i, __bfloat16_as_ushort(__float2bfloat16_rn(v)));
  }
  static __device__ __forceinline__ unsigned pack(float lo, float hi) {  // one F2FP
    const __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
    unsigned u;
    memcpy(&u, &p, sizeof u);
    return u;
  }
};
template <> struct Bits<double> {
  static __device__ __forceinline__ double get(const uint4& r, int i) {
    return __hiloint2double(static_cast<int>(word(r, 2 * i + 1)), static_cast<int>(word(r, 2 * i)));
  }
  static __device__ __forceinline__ void set(uint4& r, int i, double v) {
    set_word(r, 2 * i, static_cast<unsigned>(__double2loint(v)));
    set_word(r, 2 * i + 1, static_cast<unsigned>(__double2hiint(v)));
  }
};

template <typename T> struct Vec {
  static constexpr int N = 16 / sizeof(T);
  uint4 raw;
  __device__ __forceinline__ acc_t<T> get(int i) const { return Bits<T>::get(raw, i); }
  // Element i again through another instruction (a byte permute, 2-byte types) that ptxas does
  // not merge with get()'s: a loop that re-reads the packed words after an earlier loop unpacked
  // them then unpacks anew, instead of ptxas keeping the earlier unpacked values alive (the
  // opaque_2byte barriers bind NVVM, not ptxas). fp32 / fp64: get.
  __device__ __forceinline__ acc_t<T> get_again(int i) const {
    if constexpr (sizeof(T) == 2) return Bits<T>::get_again(raw, i);
    else return get(i);
  }
  __device__ __forceinline__ void set(int i, acc_t<T> v) { Bits<T>::set(raw, i, v); }
  __device__ __forceinline__ void fill(T v) {
#pragma unroll
    for (int i = 0; i < N; ++i) set(i, to_acc(v));
  }
};

// A whole vector from element values f(0) ... f(N - 1) (accumulator type). 2-byte types round
// pairs straight into words, one F2FP per pair; set(i, v) per element costs a conversion on the
// quarter-rate pipe plus a shift and a merge each, which made bf16 rows issue-bound.
template <typename T, typename F> __device__ __forceinline__ Vec<T> vec_of(F f) {
  Vec<T> o;
  if constexpr (sizeof(T) == 2) {
#pragma unroll
    for (int j = 0; j < Vec<T>::N / 2; ++j)
      set_word(o.raw, j, Bits<T>::pack(f(2 * j), f(2 * j + 1)));
  } else {
#pragma unroll
    for (int i = 0; i < Vec<T>::N; ++i) o.set(i, f(i));
  }
  return o;
}

// 16-byte load through the read-only path: for data read again soon (a second pass).
template <typename T> __device__ __forceinline__ Vec<T> load_vec(const T* p) {
  Vec<T> v;
  v.raw = __ldg(reinterpret_cast<const uint4*>(p));
  return v;
}
// Plain ("weak") 16-byte load / store: ld / st.global.v4.b32 with no cache hint, SASS LDG.E.128
// / STG.E.128 - what Triton emits for triton_fused. For bytes touched once: the rows of the
// warp, block and cluster kernels (load_window / store_window) and the backward's. Measured on
// H200 against evict-first (__ldcs / __stcs, LDG / STG.E.EF.128): 3-5 % faster for block rows
// in the benchmark (fp32 2048 - 32768 94 -> 98 % of copy, bf16 4096 / 8192 93 -> 98 %) and
// 2.6-3.2 % at fp32 32000 / 32768 in a one-process A/B; never more than 0.4 % slower there
// (the A/B's policy copies are in git history, cuda_src/README.md).
template <typename T> __device__ __forceinline__ Vec<T> load_vec_once(const T* p) {
  Vec<T> v;
  asm volatile("ld.global.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.raw.x), "=r"(v.raw.y), "=r"(v.raw.z), "=r"(v.raw.w)
               : "l"(p));
  return v;
}
template <typename T> __device__ __forceinline__ void store_vec(T* p, const Vec<T>& v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.raw.x), "r"(v.raw.y),
               "r"(v.raw.z), "r"(v.raw.w)
               : "memory");
}
// 16-byte store at L2's normal priority (st.global.cg): the persistent and chunk kernels' rows
// (store_row), which read through cp.async.cg. Measured on H200: 0.4-1.2 % faster than
// evict-first .cs (bf16 32768 / 65536 93.4 -> 94.6 %), the same as a plain store (x0.999-1.001).
template <typename T> __device__ __forceinline__ void store_vec_cg(T* p, const Vec<T>& v) {
  __stcg(reinterpret_cast<uint4*>(p), v.raw);
}

// Scalar fallback with the same layout: elements past `valid` get `fill`.
template <typename T>
__device__ __forceinline__ Vec<T> load_vec_scalar(const T* p, int valid, T fill) {
  Vec<T> v;
#pragma unroll
  for (int i = 0; i < Vec<T>::N; ++i) v.set(i, to_acc(i < valid ? p[i] : fill));
  return v;
}
template <typename T>
__device__ __forceinline__ void store_vec_scalar(T* p, const Vec<T>& v, int valid) {
#pragma unroll
  for (int i = 0; i < Vec<T>::N; ++i)
    if (i < valid) p[i] = from_acc<T>(v.get(i));
}

// ---- aligned windows over a row ----------------------------------------------------------------
// A row may start mid-vector (odd N such as 50257 puts row r at r * N elements). Window v covers
// elements [v * W - h, v * W - h + W) of the row, h = (row address % 16) / sizeof(T): every
// window is one aligned 16-byte slot, so full windows are single vector accesses and only the
// first and last window of a row are partial (element accesses). With vec == 0 (input and
// output rows misaligned differently, or any pointer off) h is 0 and every access is scalar:
// same layout, never a fault. A row needs at most ceil((n + W - 1) / W) windows.
// Elements between the start of the Bytes-aligned block holding `row` and `row` itself.
template <int Bytes, typename T> __device__ __forceinline__ int head_in(const T* row) {
  return int((reinterpret_cast<size_t>(row) & (Bytes - 1)) / sizeof(T));
}
template <typename T> __device__ __forceinline__ int row_head(const T* row, int vec) {
  return vec ? head_in<16>(row) : 0;
}
// Line heads (the persistent kernels): h measured from the row's 128-byte line, so window v
// starts v * 16 bytes after that line and each warp's 32 consecutive windows are 4 whole lines.
// With 16-byte heads, rows not on a line (N = 50257 or 151940 in fp32) made every warp's 512
// bytes straddle 5 lines: H200, fp32 151936 vs 151940 (same shape) 91.9 vs 84.9 % of copy.
// The windows before the row (up to 7) belong to the threads of the first warp, which take the
// checked paths; a row spans at most ceil((n + 128 / sizeof(T) - 1) / W) windows.
constexpr int kLineBytes = 128;
template <typename T> __device__ __forceinline__ int line_head(const T* row) {
  return head_in<kLineBytes>(row);
}

// STREAM: the row's bytes are read once (plain load_vec_once), else again soon (read-only path).
template <typename T, bool STREAM = true>
__device__ __forceinline__ Vec<T> load_window(const T* row, int v, int n, int h, int vec, T fill) {
  constexpr int W = Vec<T>::N;
  const int e0 = v * W - h;
  if (vec && e0 >= 0 && e0 + W <= n)
    return STREAM ? load_vec_once(row + e0) : load_vec(row + e0);
  Vec<T> r;
#pragma unroll
  for (int i = 0; i < W; ++i) {
    const int e = e0 + i;
    r.set(i, to_acc((e >= 0 && e < n) ? row[e] : fill));
  }
  return r;
}

// True when each of this thread's windows k * step + base (k < VPT) that starts inside the row
// (v < nwin, nwin = ceil((n + h) / W)) is whole: no element outside [0, n). Windows past the row
// (v >= nwin: shapes larger than the row) are skipped by a v < nwin test, which is all the
// checking these threads need; only the row's first and last windows are partial, so all threads
// but two or so take the unchecked paths. The checks per window (bounds, masks, element-wise
// edges) were about a quarter of the persistent kernels' instructions.
// Warp-uniform: called by whole warps, true only if it holds for every lane. A warp split between
// the two paths runs both, one after the other - on rows off their 128-byte line, the row's first
// warp (up to 7 windows before the row) and the warp of its last window did, every row - and the
// CTA's (max, sum) barrier waits for that warp.
template <typename T, int VPT>
__device__ __forceinline__ bool windows_inside(int base, int step, int n, int h) {
  constexpr int W = Vec<T>::N;
  const int nwin = (n + h + W - 1) / W;
  const int last = min(VPT - 1, (nwin - 1 - base) / step) * step + base;
  // base >= nwin (no window in the row): the checked path, which skips them all
  const bool whole = base < nwin && base * W - h >= 0 && (last + 1) * W - h <= n;
  return __all_sync(0xffffffffu, whole);
}

template <typename T>
__device__ __forceinline__ void store_window(T* row, int v, int n, int h, int vec,
                                             const Vec<T>& r) {
  constexpr int W = Vec<T>::N;
  const int e0 = v * W - h;
  if (vec && e0 >= 0 && e0 + W <= n) {
    store_vec(row + e0, r);
    return;
  }
#pragma unroll
  for (int i = 0; i < W; ++i) {
    const int e = e0 + i;
    if (e >= 0 && e < n) row[e] = from_acc<T>(r.get(i));
  }
}

// Make the packed words of 2-byte vectors opaque to the compiler: values unpacked to fp32 before
// this point cannot be reused after it, so it re-unpacks (a shift) instead of keeping an fp32
// copy of every element alive across loops (which doubles registers and spills). No-op for
// 4/8-byte types, whose "unpacking" is free.
template <typename T, int K> __device__ __forceinline__ void opaque_2byte(Vec<T> (&r)[K]) {
  if constexpr (sizeof(T) == 2) {
#pragma unroll
    for (int k = 0; k < K; ++k)
      asm volatile("" : "+r"(r[k].raw.x), "+r"(r[k].raw.y), "+r"(r[k].raw.z), "+r"(r[k].raw.w));
  }
}

template <typename T> __device__ __forceinline__ T neg_inf_t() {
  return from_acc<T>(neg_inf<acc_t<T>>());
}

}  // namespace klab
