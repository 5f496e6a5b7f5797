// What the chunk kernels (rows cut into chunks of one CTA each, a row's partial results meeting
// in global memory) share: flagged 64-bit words, the wait limit, and a cursor over the grid's
// items. Users: row_softmax_kernels.cuh (kernels 7 and 7b: a (max, sum) pair per chunk) and
// backward_chunks.cuh (a sum per chunk).
//
// A chunk's value is a 64-bit word: its fp32 bits with a flag of 1 in the high half, stored
// relaxed at gpu scope into a zeroed buffer. A reader that sees the flag has the value (64-bit
// accesses are single-copy atomic), so neither side needs a fence. (A release add to an arrival
// count compiled to a fence that waited for the thread's earlier stores to be acknowledged:
// ~2 us a chunk, H200.)
#pragma once

namespace klab {

__device__ __forceinline__ void store_flagged(unsigned long long* p, float v) {
  const unsigned long long w = (1ull << 32) | __float_as_uint(v);
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}
__device__ __forceinline__ unsigned long long load_flagged(const unsigned long long* p) {
  unsigned long long w;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(w) : "l"(p) : "memory");
  return w;
}
__device__ __forceinline__ bool flagged(unsigned long long w) { return (w >> 32) != 0; }
__device__ __forceinline__ float flagged_value(unsigned long long w) {
  return __uint_as_float(static_cast<unsigned>(w));
}
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// A row's words are awaited this long before the kernel traps: a grid larger than what is
// resident at once (the launchers size it by the occupancy API) would otherwise hang.
constexpr unsigned long long kChunkWaitNs = 10ull * 1000 * 1000 * 1000;

// Item i of rows * chunks as (row, chunk c), moved on by the grid's Q items a step without a
// 64-bit division (kernel 7b did five a step, ~20 instructions each; Nsight, seventeenth run).
struct ChunkCursor {
  long long row;
  int c;
  __device__ __forceinline__ ChunkCursor(long long i, int chunks)
      : row(i / chunks), c(static_cast<int>(i - row * chunks)) {}
  // dr * chunks + dc items on (0 <= dc < chunks).
  __device__ __forceinline__ void advance(long long dr, int dc, int chunks) {
    row += dr;
    c += dc;
    if (c >= chunks) {
      c -= chunks;
      ++row;
    }
  }
};

}  // namespace klab
