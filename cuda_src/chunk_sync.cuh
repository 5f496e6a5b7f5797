// What the chunk kernels (rows cut into chunks of one CTA each, a row's partial results meeting
// in global memory) share: flagged 64-bit words, the wait for a row's words (retry_until_in)
// and a cursor over the grid's items. Users: row_chunks.cuh (kinds chunks and chunks_reg: a
// (max, sum) pair per chunk) and backward_chunks.cuh (a sum per chunk).
//
// A chunk's value is a 64-bit word: its fp32 bits with the launch's epoch in the high half,
// stored relaxed at gpu scope. The epoch is a nonzero 32-bit number the launcher gives each
// launch (kernel_lab/cuda/flag_words.py): the buffer is reused from launch to launch on a
// stream, and a word written by an earlier launch carries an earlier epoch, so it reads as not
// yet in - no zeroing kernel before each launch (a zeroed buffer and epoch 1 work as well). A
// reader that sees its epoch has the value (64-bit accesses are single-copy atomic), so neither
// side needs a fence. (A release add to an arrival count compiled to a fence that waited for the
// thread's earlier stores to be acknowledged: ~2 us a chunk, H200.)
#pragma once

namespace klab {

__device__ __forceinline__ void store_flagged(unsigned long long* p, float v, unsigned epoch) {
  const unsigned long long w = (static_cast<unsigned long long>(epoch) << 32) | __float_as_uint(v);
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}
__device__ __forceinline__ unsigned long long load_flagged(const unsigned long long* p) {
  unsigned long long w;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(w) : "l"(p) : "memory");
  return w;
}
__device__ __forceinline__ bool flagged(unsigned long long w, unsigned epoch) {
  return static_cast<unsigned>(w >> 32) == epoch;
}
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

// Warp 0's wait for a row's words: `gather(attempt)` reads them all and returns true (after
// publishing the result) once every word was in. Attempt 0 may use words loaded a step early;
// a miss there retries at once (they were stale), later misses 100 ns apart, and a row still
// not in after kChunkWaitNs traps.
template <typename Gather> __device__ __forceinline__ void retry_until_in(Gather&& gather) {
  unsigned long long t0 = 0;
  for (int attempt = 0;; ++attempt) {
    if (gather(attempt)) return;
    if (attempt == 0) continue;  // the early words were stale: load them now
    if (t0 == 0) t0 = global_ns();
    else if (global_ns() - t0 > kChunkWaitNs) __trap();
    __nanosleep(100);
  }
}

// Item i of rows * chunks as (row, chunk c), moved on by the grid's Q items a step without a
// 64-bit division (chunks_reg did five a step, ~20 instructions each, Nsight).
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
