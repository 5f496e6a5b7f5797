// Epilogues of the row-softmax kernel family, and what a thread keeps of its elements from the
// sum loop to its stores. An epilogue is built once per row from the row's merged (max, sum) and
// applied to every element:
//   SoftmaxEpilogue     y = exp(x - max) * (1 / sum)    (fast_softmax.cu)
//   LogSoftmaxEpilogue  y = (x - max) - log(sum)        (fast_log_softmax.cu)
// Softmax may skip the epilogue's exp: the sum loop's e = exp(x - m_thread) is kept (Kept) and
// scaled by exp(m_thread - max) / sum (exp_scale), one exp per element instead of two. Each
// kernel picks what it keeps at compile time (kKeptFor, kBlockKept), by registers per thread.
#pragma once

#include "softmax_common.cuh"

namespace klab {

// ---- epilogues -------------------------------------------------------------------------------
// Constructed once per row from the row's merged (max, sum); applied to every element.

// y = exp(x - m) * (1 / s). An all -inf row (m = -inf, s = 0) gives exp(NaN) * inf = NaN, like
// torch.softmax; -inf entries of other rows give exact zeros.
template <typename A> struct SoftmaxEpilogue {
  // The kernels keep e = exp(x - m_thread) from the sum loop and scale it (exp_scale): one exp
  // per element instead of two. bf16 at copy speed needs 8 elements/clk/SM; two exps each would
  // be the SM's whole MUFU rate (16/clk).
  static constexpr bool kScalesExp = true;
  A m, inv;
  __device__ __forceinline__ explicit SoftmaxEpilogue(MaxSum<A> st) : m(st.m), inv(A(1) / st.s) {}
  __device__ __forceinline__ A operator()(A x) const { return exp_acc(x - m) * inv; }
};

__device__ __forceinline__ float log_acc(float v) { return logf(v); }
__device__ __forceinline__ double log_acc(double v) { return log(v); }

// y = (x - m) - log(s), in that order - never x - (m + log(s)), which rounds to ulp(m) (1e-3 for
// a row near 1e4 in fp32) and would wipe out log-probabilities near 0.
// Edge cases, as torch.log_softmax: -inf gives -inf; an all -inf row gives NaN (m = -inf,
// s = 0: (-inf - -inf) - log(0)); NaN reaches the sum and so the whole row.
template <typename A> struct LogSoftmaxEpilogue {
  static constexpr bool kScalesExp = false;
  A m, log_sum;
  __device__ __forceinline__ explicit LogSoftmaxEpilogue(MaxSum<A> st)
      : m(st.m), log_sum(log_acc(st.s)) {}
  __device__ __forceinline__ A operator()(A x) const { return (x - m) - log_sum; }
};

namespace rowk {

// An opaque copy of v: index math derived from it is redone where used instead of being kept
// live (VPT offsets or addresses per thread) across the persistent loop.
__device__ __forceinline__ int opaque(int v) {
  asm volatile("" : "+r"(v));
  return v;
}

template <typename T> __device__ __forceinline__ MaxSum<acc_t<T>> id() {
  return maxsum_identity<acc_t<T>>();
}

// The max of K register vectors. fp16 / bf16: on the packed pairs (HMNMX2, two elements per
// instruction, nothing unpacked - ptxas kept every unpacked fp32 value of the max loop alive for
// the sum loop, 128 of them with 16 vectors); NaN is ignored like fmaxf (the sum carries it);
// the conversion to fp32 is exact, so the result equals the unpacked max.
template <typename T, int K> __device__ __forceinline__ acc_t<T> vec_max(const Vec<T> (&r)[K]) {
  using A = acc_t<T>;
  if constexpr (sizeof(T) == 2) {
    using P = typename Pair<T>::type;
    P m = Pair<T>::fill(neg_inf_t<T>());
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int w = 0; w < 4; ++w) m = __hmax2(m, Pair<T>::of(word(r[k].raw, w)));
    return amax(to_acc(Pair<T>::lo(m)), to_acc(Pair<T>::hi(m)));
  } else {
    A m = neg_inf<A>();
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int i = 0; i < Vec<T>::N; ++i) m = amax(m, r[k].get(i));
    return m;
  }
}

// The max of K register vectors with their 2-byte words opaque on both sides of the max loop,
// so the loop after it unpacks them anew (opaque_2byte).
template <typename T, int K> __device__ __forceinline__ acc_t<T> opaque_max(Vec<T> (&r)[K]) {
  opaque_2byte(r);
  const acc_t<T> m = vec_max(r);
  opaque_2byte(r);
  return m;
}

// Local (max, sum) of K register vectors, 2-byte words re-unpacked per loop (opaque_2byte).
template <typename T, int K>
__device__ __forceinline__ MaxSum<acc_t<T>> row_maxsum(Vec<T> (&r)[K]) {
  using A = acc_t<T>;
  const A m = opaque_max(r);
  const A ms = safe_max(m);
  A s = A(0);
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int i = 0; i < Vec<T>::N; ++i) s += exp_acc(r[k].get(i) - ms);
  opaque_2byte(r);
  return {m, s};
}

// Softmax with one exp per element. exp_maxsum: this thread's max m_t, then e = exp(x - m_t)
// kept in fp32 registers (they replace the raw values: same count for fp32, the fp32 copies
// 2-byte types would hold anyway) and summed. After the merge into the row's (M, S), every e is
// scaled by exp(m_t - M) / S (one exp per thread). Edge cases as torch.softmax: S = 0 (all -inf
// row) or NaN (a NaN or +inf in the row) makes the whole row NaN; a thread whose elements are
// all -inf writes zeros.
template <typename T, int K>
__device__ __forceinline__ MaxSum<acc_t<T>> exp_maxsum(Vec<T> (&r)[K],
                                                       acc_t<T> (&e)[K][Vec<T>::N]) {
  using A = acc_t<T>;
  const A m = vec_max(r);
  const A ms = safe_max(m);
  A s = A(0);
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int i = 0; i < Vec<T>::N; ++i) {
      e[k][i] = exp_acc(r[k].get(i) - ms);
      s += e[k][i];
    }
  return {m, s};
}

__device__ __forceinline__ float quiet_nan(float) { return CUDART_NAN_F; }
__device__ __forceinline__ double quiet_nan(double) { return CUDART_NAN; }

// Where the one-exp path runs: the persistent kinds (persist, pipe up to 64 elements a thread,
// chunks_reg), warp / block / cluster for fp16/bf16 up to 4 vectors a thread (block x 8 keeps its
// raw values: kBlockKept), and block_slots on clusters in every dtype (fp32 exps in the values'
// own registers: no spill). Elsewhere fp32 computes the exp twice: its MUFU is half-loaded at
// copy speed, and kept exps made block<float, 8> spill 24 B at 1024 threads (measured on H200,
// N = 16384: 91 % of copy vs 97 % with two exps).
template <typename A> __device__ __forceinline__ A exp_scale(A m_thread, MaxSum<A> row) {
  if (!(row.s > A(0))) return quiet_nan(A());  // S = 0 or NaN
  if (m_thread == neg_inf<A>()) return A(0);
  return exp_acc(m_thread - row.m) * (A(1) / row.s);
}

template <typename T>
__device__ __forceinline__ Vec<T> scaled(const acc_t<T> (&e)[Vec<T>::N], acc_t<T> f) {
  return vec_of<T>([&](int i) { return e[i] * f; });
}

// The log epilogue unpacks with get_again: with get, ptxas merged its unpacks with the sum
// loop's and kept up to 256 unpacked values alive (fp16 / bf16 x 16 spilled 320-408 B, x 8 took
// 128 registers). Softmax's keeps get (measured on the GPU as it is).
template <typename T, typename Epi>
__device__ __forceinline__ void apply_epilogue(Vec<T>& r, const Epi& epi) {
  if constexpr (Epi::kScalesExp) r = vec_of<T>([&](int i) { return epi(r.get(i)); });
  else r = vec_of<T>([&](int i) { return epi(r.get_again(i)); });
}

// What a thread keeps of its elements from the sum loop to the store (write_row / store_row):
enum Kept : int {
  kKeptValues = 0,    // the raw values; the epilogue computes exp(x - max) again (two exps)
  kKeptExps = 1,      // e = exp(x - m_thread) in fp32 registers (exp_maxsum: one exp)
  kKeptExpsInT = 2,   // e in T, in the values' own registers (rounded for 2-byte T, exact fp32)
};                    // (exp_maxsum_in_t: one exp, no more registers; <= 1.5 ulp of 2-byte T)

// Softmax with one exp per element where fp32 exps do not fit: e = exp(x - m_t) rounded to the
// 2-byte T replaces the packed values (the same registers), summed unrounded. The output
// y = round(round(e) * exp(m_t - M) / S) rounds twice: relative error <= 2u (2^-7 bf16, 2^-10
// fp16; the checks allow 1.2e-2 / 2e-3), within 1.5 ulp of T instead of 0.5. T keeps e's
// range: bf16 in bf16 (fp32's exponents: no probability flushed), fp16 in fp16 (y <= e, so an
// e that fp16 flushes is a y it flushes too). With fp32 T (block_slots on clusters) e is kept
// exactly, in the values' own registers: no rounding, no registers beside them.
template <typename T, int K>
__device__ __forceinline__ MaxSum<acc_t<T>> exp_maxsum_in_t(Vec<T> (&r)[K]) {
  static_assert(sizeof(T) <= 4, "fp64 rows never take a kept-exps path");
  using A = acc_t<T>;
  const A m = opaque_max(r);
  const A ms = safe_max(m);
  A s = A(0);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    A e[Vec<T>::N];
#pragma unroll
    for (int i = 0; i < Vec<T>::N; ++i) {
      e[i] = exp_acc(r[k].get(i) - ms);
      s += e[i];
    }
    r[k] = vec_of<T>([&](int i) { return e[i]; });
  }
  opaque_2byte(r);
  return {m, s};
}

// Write a row's K windows through store(k, vector), from what the thread kept (Kept): the raw
// values r through the epilogue, or the exps - e (fp32) or r (rounded to T) - scaled by
// exp_scale(m_thread, st). EACH_VECTOR: the raw values' epilogue vector by vector, each stored
// at once (fewer values live; ptxas otherwise unpacks far ahead: block / cluster at 2-byte x 8).
template <template <typename> class E, int KEPT, bool EACH_VECTOR = false, typename T, int K,
          int KE, typename Store>
__device__ __forceinline__ void write_row(Vec<T> (&r)[K], const acc_t<T> (&e)[KE][Vec<T>::N],
                                          acc_t<T> m_thread, MaxSum<acc_t<T>> st, Store store) {
  if constexpr (KEPT == kKeptExps) {
    const acc_t<T> f = exp_scale(m_thread, st);
#pragma unroll
    for (int k = 0; k < K; ++k) store(k, scaled<T>(e[k], f));
  } else if constexpr (KEPT == kKeptExpsInT) {
    const acc_t<T> f = exp_scale(m_thread, st);
#pragma unroll
    for (int k = 0; k < K; ++k) store(k, vec_of<T>([&](int i) { return r[k].get(i) * f; }));
  } else {
    const E<acc_t<T>> epi(st);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      apply_epilogue(r[k], epi);
      if constexpr (EACH_VECTOR) store(k, r[k]);
    }
    if constexpr (!EACH_VECTOR) {
#pragma unroll
      for (int k = 0; k < K; ++k) store(k, r[k]);
    }
  }
}

// What a kernel keeps (Kept): fp32 exps where a thread's ELEMS elements fit in MAX_EXPS
// fp32 registers, else the exps rounded to T for 2-byte softmax, else the raw values.
template <template <typename> class E, typename T, int ELEMS, int MAX_EXPS>
constexpr int kKeptFor = !E<acc_t<T>>::kScalesExp ? kKeptValues
                         : ELEMS <= MAX_EXPS      ? kKeptExps
                         : sizeof(T) == 2         ? kKeptExpsInT
                                                  : kKeptValues;

// This thread's local (max, sum) of r, keeping what KEPT says (e: the fp32 exps).
template <int KEPT, typename T, int K, int KE>
__device__ __forceinline__ MaxSum<acc_t<T>> kept_maxsum(Vec<T> (&r)[K],
                                                        acc_t<T> (&e)[KE][Vec<T>::N]) {
  if constexpr (KEPT == kKeptExps) return exp_maxsum(r, e);
  else if constexpr (KEPT == kKeptExpsInT) return exp_maxsum_in_t(r);
  else return row_maxsum(r);
}

}  // namespace rowk
}  // namespace klab
