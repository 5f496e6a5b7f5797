// The fast row-softmax kernel family, written once and instantiated per op with an EPILOGUE:
// what to write for an element x once its row's (max, sum of exp(x - max)) is known.
//
//   fast_softmax.cu:  KLAB_ROW_SOFTMAX_KERNELS(fast_softmax, klab::SoftmaxEpilogue)
//                     y = exp(x - max) * (1 / sum)
//   log_softmax.cu:   KLAB_ROW_SOFTMAX_KERNELS(log_softmax, klab::LogSoftmaxEpilogue)
//                     y = (x - max) - log(sum)
//
// The macro defines thin __global__ templates named <prefix>_warp, _block, _block_slots,
// _persist_slots, _persist_cluster_slots, _cluster, _cluster_slots, _persist, _persist_cluster,
// _persist_pipe, _wide, _chunks and _chunks_reg (so NVRTC name expressions such as
// "fast_softmax_block<float, 4>" or
// "log_softmax_persist_cluster<__nv_bfloat16, 8, 4>" work);
// each forwards to one device body below, templated on the epilogue. The launcher picks a kernel
// and its shape per (N, dtype): kernel_lab/ops/softmax/fast_config.py, fast_softmax_config.
//
// Common to all kernels here
//   Layout:   "aligned windows" (softmax_common.cuh: load_window/store_window): window v of a row
//             is one aligned 16-byte slot, so odd row lengths (50257) still move full vectors;
//             only a row's first and last window are element-wise. `vec` = 0 (input and output
//             rows misaligned differently, e.g. x = buf[1:].view(M, N) in fp32) loads the same
//             layout element by element: slower, never a fault.
//   Math:     local (max, sum) over registers (1 exp per element), one merge of (max, sum)
//             pairs across lanes / warps / CTAs, then the epilogue. Softmax in the persistent
//             and chunk-in-register kernels and in every fp16/bf16 kernel keeps the exps of the
//             sum loop and scales them (exp_maxsum / exp_scale: 1 exp per element in all; what
//             is kept: Kept) - in fp32 registers up to 64 per thread (7b: 32), past that
//             fp16/bf16 keep them rounded to T in the values' registers (exp_maxsum_in_t:
//             <= 1.5 ulp, not 0.5; kernel 3b's slots too; kernel 3b's fp32 keeps them in its
//             fp32 values' registers and slots, exact); elsewhere (fp32 and kernels 2 x 8,
//             2b, 2c / 3c) it recomputes exp(x - max) (2 per element);
//             log_softmax keeps x and writes (x - max) - log(sum).
//   Bytes:    2 * M * N * sizeof(T) for every kernel (the wide kernel: plus the re-read of
//             whatever its shared memory does not keep).
//   Precond:  rows < 2^31 blocks' worth; n < 2^31 - 16; fp32 accumulation (fp64 for double).
//   Slots:    the dynamic shared memory that cp.async fills (kernels 5, 5b, 6) is declared
//             __align__(128): dynamic shared memory starts where the static window ends, and
//             16 bytes off a line (static inbox of 8 or 16 CTAs) each warp's copies of whole
//             global lines straddle shared-memory lines and every 32-byte sector was fetched
//             twice from L2 (Nsight, eleventh H200 run: 2x the L2 read sectors, same DRAM bytes).
//
// 1. <p>_warp<T, G, VPT>: short rows. A group of G lanes (G | 32) owns one row; lane l holds
//    windows l, l + G, ..., l + (VPT - 1) * G. Reductions are G-wide shuffles: no shared memory,
//    no barrier. Launch: blockDim.x threads (128/256), blockDim.x / G rows per block.
//    Changed from warp_softmax: 16-byte accesses, several rows per warp, row length <= G*VPT*W.
// 2. <p>_block<T, VPT>: mid rows. Block b owns row b; thread t holds windows t + k * blockDim.x.
//    One block all-reduce (2 barriers, 32 (max, sum) pairs of static shared memory). Launch:
//    M blocks of 64..1024; (wave_rows, wave_ns): the first wave in phases, or (0, 0) (kernels
//    2, 3, 2b, 3b; stagger_first_wave). Changed from vec_softmax: aligned windows, split max/sum
//    merge.
//    fp16/bf16 x 8 (64 elements a thread in 64 registers at 1024 threads, rows of 16K-64K): the
//    raw packed values stay, the epilogue runs vector by vector just before each store (two
//    exps for softmax), spill-free: 94-99 % of copy where its CTAs share an SM or hold >= 112 KB.
// 2b. <p>_block_slots<T, VPT>: kernel 2 for rows longer than its registers hold, no cluster.
//    Ownership: block b owns row b; windows counted from the row's 128-byte line (line heads, as
//            kernel 5); thread t holds windows t + k * blockDim.x (k < VPT) in registers and
//            windows (VPT + j) * blockDim.x + t (j < `slots`) in its own shared-memory slots
//            (slot j at j * blockDim.x + t: consecutive threads, consecutive 16 B).
//    Steps:  the slots' cp.async copies go out first (no registers held), then the register
//            windows' plain loads: the whole row is in flight at once. Local (max, sum) of the
//            registers while the slots land, then each slot window folded in online as it is
//            read (one rescale a window; no barrier: each thread reads only what it copied),
//            one block all-reduce, epilogue on the registers (vector by vector for 2-byte x 8)
//            and on each slot read again. Raw values kept: two exps per element (+1 a slot
//            window), two shared-memory reads per slot window.
//    Why:    a fp16 / bf16 row of 36K-64K columns (72-128 KB) in registers alone needs 544-1024
//            threads x 8 vectors: one CTA an SM, 84-94 % of copy. With its last windows in
//            shared memory, CTAs of 512 threads x 8 hold it two to an SM, and 1024-thread CTAs
//            hold rows past their registers (2-byte 80000, fp32 50257): 95-97 % with up to
//            5-6 slots a thread, the persistent clusters' 92-95 there (H200, NOTES twenty-fifth
//            run). Slot windows still cost: from 8 slots a thread 3-5 points (twenty-sixth run:
//            the online fold read each slot twice, not three times: +0-2 points at 2-5 slots,
//            +1-4 at 8-11).
//    Launch: M blocks of blockDim.x, dynamic shared memory slots * blockDim.x * 16 B (> 48 KB
//            needs the attribute; the launcher sets it); the first wave in 8 phases of its load
//            time (stagger_first_wave: A/B +2.0-2.5 % at 2-byte 131072 / 151936 on kernel 3b,
//            twenty-ninth run). Precond: vec != 0 (input and output rows in the same 16-byte
//            phase; any phase), as kernel 5.
// 2c. <p>_persist_slots<T, VPT> (3c: <p>_persist_cluster_slots<T, VPT, CL>, CL = 2 or 4):
//    kernel 2b (3b) persistent, rows rolled through its registers and slots.
//    Ownership: the grid holds only the resident CTAs (clusters); CTA (cluster) q of Q owns rows
//            q, q + Q, ...; inside a row thread t owns the windows kernel 2b (3b) gives it.
//    Steps:  as kernel 2b, but in the epilogue each register window, once stored, is reloaded
//            with the same window of the CTA's next row, and each slot, once read and stored,
//            takes that row's window by cp.async (the thread's own slot: no barrier). So the
//            next row's loads are in flight while this row's exps and stores run, and no CTA
//            launch or load latency sits between rows; only the next row's local (max, sum)
//            and the block all-reduce run with nothing of this CTA in flight. 3c: the
//            CTAs' (max, sum) of each row as kernel 5's messages (ClusterInbox; no cluster
//            barrier per row).
//    Why:    kernel 2b at 1024 threads holds a 2-byte row of 128K-150K columns (256-300 KB) on
//            one SM, but one CTA an SM then idles its memory during every epilogue and launch
//            (90-91 % of copy, twenty-sixth run); kernel 5's clusters read 92-94 there. 3c:
//            the 512 KB rows no SM holds (fp32 131072, 2-byte 262144).
//    Launch: grid = min(M, resident CTAs (clusters)) x CL of blockDim.x, dynamic shared memory
//            as kernel 2b.
//            Precond: vec != 0, as kernel 2b. Bytes: 2 * M * N * sizeof(T); two exps an element.
// 3b. <p>_cluster_slots<T, VPT, CL>: kernel 2b on a cluster of CL CTAs a row (grid M * CL):
//            CTA rank c owns windows whose index is c * blockDim.x + t modulo CL * blockDim.x
//            (registers first, then slots, as 2b); the CTAs' (max, sum) merged through
//            distributed shared memory as kernel 3 (one cluster barrier, then arrive / wait).
//    Why:    rows too long for one SM's registers and shared memory together (fp32 131072,
//            2-byte 262144: 512 KB) or whose one-CTA form leaves one CTA an SM (2-byte 131072 on
//            1024 x 8 + 8: 90-91 %), on CTAs of <= 512 threads, two an SM (twenty-sixth run).
//    Math:   softmax keeps every exp in T (one exp an element; rounded in fp16 / bf16, exact in
//            fp32): the registers' relative to their max, the slots' relative to theirs, written
//            back into the slots (a max pass and an exp pass: four shared-memory accesses a slot
//            window). With two exps an element its 2-byte softmax read 90-92.5 % at 2 x 512 x 8
//            + 8-11, 93.8-94.6 with one (twenty-seventh run): fp16 / bf16 rows of ~106.5K-163.8K
//            run it. fp32 (twenty-eighth run): 2 x 1024 x 8 + 8 93.0 -> 94.0 at 131072; fp32
//            rows of ~53.2K-106.5K run it (95-96 % where kernel 5 read 92-94).
// 3. <p>_cluster<T, VPT, CL>: long rows. A cluster of CL CTAs (compile-time __cluster_dims__,
//    grid = M * CL blocks) owns one row; CTA rank c, thread t holds windows
//    k * CL * blockDim.x + c * blockDim.x + t. Each CTA reduces its (max, sum) to shared memory,
//    one cluster barrier publishes it, every warp reads the CL pairs through distributed shared
//    memory (mapa + ld.shared::cluster) and merges them. The CTA waits on a second, split
//    barrier before exiting so peers never read freed shared memory. Up to CL * 128 KB per row.
// 4. (removed: the split pair, two kernels with a (max, sum) round trip through global memory;
//    kernel 6 replaced it: 58-61 % of copy at 2^20 against 38-42 %, bench/NOTES.md.)
// 5. <p>_persist<T, VPT> (CL = 1) and <p>_persist_cluster<T, VPT, CL>: persistent, prefetching.
//    Ownership: the grid holds only as many CTAs (clusters) as are resident at once; CTA
//            (cluster) q of Q owns rows q, q + Q, q + 2Q, ...; inside a row the windows are
//            owned as in kernel 3 (CL = 1: as in kernel 2).
//    Pipeline: the current row's windows sit in registers; the NEXT row's windows of this thread
//            (`stages` = 2: the next two rows', in alternating slot sets) are in flight into
//            dynamic shared memory (cp.async.cg, 16 bytes each, one commit group per row) while
//            the CTA reduces, exchanges (max, sum) with its peers, normalizes and stores. Each
//            thread reads back only the slots it copied (wait_group: no barrier).
//            The prefetch is issued right after the local (max, sum), once every register value
//            read from those slots has been consumed.
//    Cluster: each CTA sends its (max, sum) to every peer's inbox as an st.async message
//            counted by the peer's mbarrier (cluster.cuh, ClusterInbox): no cluster barrier
//            per row. (The barrier's release compiled to MEMBAR.ALL.GPU, which made every
//            row wait for the previous row's stores to be acknowledged: bf16 151936 went from
//            57 % to 78 % of copy without it.) Inboxes alternate by row parity.
//            `late` != 0 (clusters only) issues the next row's copies between sending and
//            waiting instead of right after the local (max, sum).
//    Launch: grid = min(M, resident) CTAs (x CL), blockDim.x a multiple of 32 covering the row
//            (blockDim.x * VPT * CL windows), at most 512 where a thread keeps 64 or more
//            elements (PersistThreads: fp32 x 16, fp16/bf16 x 8 and x 16), else 1024; dynamic
//            shared memory = stages * blockDim.x * VPT * 16 B, stages 1 or 2 (> 48 KB needs
//            the attribute; the launcher sets it).
//            Static: 32 pairs + 2 inboxes.
//    Bytes:  2 * M * N * sizeof(T), with loads always in flight (no launch per row, no idle SM
//            while a row's barrier and stores drain).
//    Precond: vec != 0 (input and output rows in the same 16-byte phase; any phase: odd N is
//            fine). Windows start at the row's 128-byte line (line_head): the prefetch copies
//            whole aligned 16-byte slots, and the slots before and after the row's elements
//            may hold bytes of the neighbouring rows (never an unmapped page: each such slot
//            shares a 128-byte line with a byte of this row); those elements are replaced by
//            -inf on read. A row spans up to 7 more windows than with 16-byte heads.
//    Changed from 2/3: one launch for all rows, next row's loads overlap this row's reduction,
//            barrier and stores; 2-byte types keep their packed words opaque between loops
//            (opaque_2byte) so 8-16 vectors per thread fit without fp32 copies spilling.
//    Interior: warps whose windows in the row are all whole (all but the warps of the row's
//            first and last windows) read their slots and store with no per-window checks
//            (windows_inside, decided per warp: a warp split between the paths ran both).
// 5b. <p>_persist_pipe<T, VPT, CL>: kernel 5's clusters, pipelined across rows.
//    Ownership as kernel 5; `stages` (1 or 2) rows in flight in as many slot sets (dynamic
//            shared memory stages * blockDim.x * VPT * 16 B). Row j + 1's local (max, sum) is
//            computed from its slots and sent BEFORE waiting for row j's messages; then row j is
//            scaled and stored from registers, row j + 1 is loaded into registers and its slots
//            take row j + 1 + stages (with one stage, the next row's copies have only the
//            reduction of the row after to land in).
//    Why:    in kernel 5 the wait for the peers' (max, sum) was a third of the fp32 warp stall
//            samples (ncu, 65536); here it overlaps the next row's reduction.
//    Cost:   2 exps per element (softmax), 3 shared-memory reads per window, 4 inboxes, with
//            2 stages twice kernel 5's slots. Won only where 2 rows of slots stay <= 64 KB per
//            CTA (fp32 128 x 16: 65536 92 % of copy vs 88 %), and only while kernel 5's 8-CTA
//            slots sat off their lines (see "Slots"): since then kernel 5 wins there too (94.4
//            vs 91.7 %), so no launcher rule picks it; bench/tune_long_rows.py still times it.
// 6. <p>_wide<T, CL>: rows longer than any shape above holds (fp32 2^20 = 4 MB). Persistent.
//    Ownership: the grid holds only the resident clusters; cluster q of Q owns rows q, q + Q, ...
//            CTA rank c owns the contiguous windows [c * chunk, (c + 1) * chunk) of the row,
//            chunk = ceil(windows / CL); thread t of it owns windows c * chunk + j * blockDim.x
//            + t, j < per = ceil(chunk / blockDim.x) (consecutive threads, consecutive 16 B).
//    Passes: (1) the windows not kept stream through registers in batches of 4 (vec == 0: all
//            of them, the kept ones stored into shared memory), then the kept windows - the
//            first `kept` of each thread, up to 227 KB per CTA - are reduced from shared
//            memory batch by batch as their copies land; local (max, sum), block all-reduce,
//            (max, sum) messages to every peer (as kernel 5: no cluster barrier per row).
//            (2) batches of 4: kept windows from shared memory, the rest re-read (plain loads),
//            epilogue, store; then the batch's slots take the NEXT row's windows (cp.async, one
//            commit group per batch), so that row's loads overlap this row's stores.
//    Launch: grid = min(M, resident clusters) * CL, blockDim.x <= 1024, dynamic shared memory
//            kept * blockDim.x * 16 B (the launcher keeps as many windows as 227 KB hold).
//    Bytes:  2 * M * N * sizeof(T) to DRAM when every window is kept; each window not kept is
//            read twice (the second read sometimes from L2). Two exps per element.
//    Changed from the split pair (4): one kernel, no (max, sum) round trip through global
//            memory; from its first, one-row-per-cluster form: persistent, kept windows
//            prefetched during the previous row's stores, no cluster barrier per row.
// 7. <p>_chunks<T, VPT>: long rows without clusters. Persistent, one CTA per SM or more.
//    Ownership: a row is cut into `chunks` chunks of blockDim.x * VPT windows (line heads, as
//            kernel 5); item i of rows * chunks is chunk i % chunks of row i / chunks; CTA q of Q
//            owns items q, q + Q, ... (step t: item q + t * Q); thread t of it owns windows
//            c * blockDim.x * VPT + k * blockDim.x + t, k < VPT, copied into its own slots.
//    Steps:  phase 1 reduces the chunk of step t from its slots (block all-reduce) and
//            publishes its (max, sum) pair in global memory (`pairs`: each value in a 64-bit
//            word with the launch's `epoch`, no fence: chunk_sync.cuh); phase 2 takes the chunk
//            of step t - lag: waits until its row's pairs all carry the epoch, merges them in
//            chunk order,
//            applies the epilogue to the chunk's slots and stores; those slots then take the
//            chunk of step t - lag + bufs. bufs = lag + 1 + ahead slot sets, `ahead` chunks in
//            flight. No CTA waits on another that waits on it while chunks <= lag * Q + 1 (the
//            launcher checks it against the resident grid; a wait of 10 s traps).
//    Launch: grid = min(rows * chunks, resident CTAs), dynamic shared memory bufs * blockDim.x
//            * VPT * 16 B; `pairs` 16 B per chunk, none of its words carrying `epoch` (the
//            launcher's buffer of the stream, reused: flag_words.py; or zeroed, epoch 1).
//    Bytes:  2 * M * N * sizeof(T) + 16 B per chunk; two exps per element (phase 1 and 2).
//    Why:    the cluster kernels (5, 6) wait per row for the slowest of up to 16 CTAs and
//            leave the SM without loads in flight while they do; here every wait is `lag`
//            steps old and `ahead` chunks are always in flight.
// 7b. <p>_chunks_reg<T, VPT>: kernel 7 with lag 1 and the waiting chunk in registers (softmax:
//    its exps, fp32 up to 32 elements a thread, else fp16/bf16 rounded to T; log_softmax: the
//    raw values), so shared memory holds only the `ahead` chunks in flight. CTAs of <= 512
//    threads. Rows of <= 65 chunks of 512 x 8 (fp32 N <= 2^20, 2-byte <= 2^21) past the
//    persistent rules run it, the CTA sized down to the fewest threads that keep the chunk
//    count, so that every chunk is (nearly) full (200000 bf16: 7 x 448 x 8).
//    Why:    kernel 7's three 64 KB slot sets (reduced, waiting, in flight) fill shared memory,
//            so only one chunk is ever in flight; here the waiting one sits in registers.
//    Step:   warps whose windows are all whole read their slots with no per-window checks
//            (read_slots: the 8 shared loads issue back to back instead of one per branch) and
//            items advance as (row, chunk) cursors, not 64-bit divisions (seventeenth H200 run:
//            bf16 2^20 87.4 -> 92.0 % of copy, fp32 90.0 -> 91.3). Where the step still waits
//            (Nsight): warp 0 gathering the row's pairs behind a barrier (14 % of stall samples),
//            the block all-reduce's barriers (6 %), stores holding their registers (5-11 %).
#pragma once

#include "chunk_sync.cuh"
#include "cluster.cuh"
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

// Where the one-exp path runs (measured on an H200, bench/NOTES.md): every persistent kernel,
// the warp / block / cluster kernels for fp16/bf16 only, up to 4 vectors a thread (block x 8
// keeps its raw values: kRowOnChipKept), and kernel 3b in every dtype (its fp32 exps in the
// values' own registers: no spill, +0.2-1.0 points). In fp32 the MUFU is half-loaded at copy
// speed, and the kept exps made block<float, 8> spill 24 bytes at 1024 threads (N = 16384: 91 %
// of copy vs 97 % with two exps).
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
// e that fp16 flushes is a y it flushes too). With fp32 T (kernel 3b) e is kept exactly, in
// the values' own registers: no rounding, no registers beside them.
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
// at once (fewer values live; ptxas otherwise unpacks far ahead: kernels 2 / 3's 2-byte x 8).
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

// A CTA's (max, sum) merged with its CL - 1 cluster peers' (kernels 3 and 3b): thread 0 publishes
// it in `part`, one cluster barrier, every warp merges the peers' over DSMEM, then this CTA
// arrives (done reading peers). The caller calls cluster_wait() before it exits: peers may still
// be reading its `part`.
template <typename A, int CL>
__device__ __forceinline__ MaxSum<A> cluster_row_pair(MaxSum<A> st, A* part) {
  if (threadIdx.x == 0) {
    part[0] = st.m;
    part[1] = st.s;
  }
  cluster_sync();  // every CTA's pair is now visible cluster-wide
  st = cluster_merge<A, CL>(part);
  cluster_arrive();  // done reading peers
  return st;
}

// What kernels 2 and 3 keep (Kept): fp32 / fp64 their raw values (two exps: see exp_scale);
// 2-byte softmax its fp32 exps up to 32 elements a thread (x 4). At 64 elements (2-byte x 8, 64
// registers at 1024 threads) the fp32 exps spilled 288-296 B and the exps rounded to T 24 B
// (bf16); the raw values with the epilogue applied vector by vector just before each store
// (kRowOnChipEachVector) spill nothing: 94-99 % of copy in softmax and log_softmax (NOTES).
template <typename T, int VPT>
constexpr bool kRowOnChipEachVector = sizeof(T) == 2 && VPT * Vec<T>::N >= 64;
template <template <typename> class E, typename T, int VPT>
constexpr int kRowOnChipKept = sizeof(T) == 2 && !kRowOnChipEachVector<T, VPT>
                                   ? kKeptFor<E, T, VPT * Vec<T>::N, 32>
                                   : kKeptValues;

// Kernels 2, 3, 2b, 3b: the first wave in phases (twenty-ninth run). A launch's first wave -
// rows [0, wave_rows), the CTAs (clusters) resident at once - would load together, reduce
// together and store together, DRAM idle in between: a fixed cost of ~12-15 us a call at 2-byte
// 128K-152K on kernel 3b against the copy's 3-6 (bench/fixed_cost.py). Row r of it waits
// phase / 8 of wave_ns (the wave's load time at the copy's speed: the launcher's estimate),
// phase = r * 8 / wave_rows, before its first load: A/B +2.0-2.5 % at 2-byte 131072 / 151936
// (kernel 3b). wave_rows == 0: no wait (the launcher's choice per kind). Every thread of the
// CTA (cluster) waits the same phase; the rows after the first wave start as CTAs retire.
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

// Kernels 2 and 3: a row held by one CTA (CL == 1) or one cluster (CL > 1).
template <template <typename> class E, typename T, int VPT, int CL>
__device__ __forceinline__ void row_on_chip(T* __restrict__ y, const T* __restrict__ x, int n,
                                            long long stride, int vec, long long row,
                                            unsigned rank, long long wave_rows,
                                            long long wave_ns) {
  using A = acc_t<T>;
  __shared__ MaxSum<A> red[32];
  __shared__ A part[2];
  const T* xr = x + row * stride;
  T* yr = y + row * (long long)n;
  const int h = row_head(xr, vec);
  const int base = rank * blockDim.x + threadIdx.x, step = CL * blockDim.x;
  const T fill = neg_inf_t<T>();
  stagger_first_wave(row, wave_rows, wave_ns);

  constexpr int kKept = kRowOnChipKept<E, T, VPT>;
  Vec<T> r[VPT];
  A e[kKept == kKeptExps ? VPT : 1][Vec<T>::N];
#pragma unroll
  for (int k = 0; k < VPT; ++k) r[k] = load_window(xr, k * step + base, n, h, vec, fill);
  MaxSum<A> st = kept_maxsum<kKept>(r, e);
  const A m_thread = st.m;
  st = block_allreduce(st, MergeOp{}, id<T>(), red);
  if constexpr (CL > 1) st = cluster_row_pair<A, CL>(st, part);
  write_row<E, kKept, kRowOnChipEachVector<T, VPT>>(r, e, m_thread, st,
                                                     [&](int k, const Vec<T>& v) {
    store_window(yr, k * step + base, n, h, vec, v);
  });
  if constexpr (CL > 1) cluster_wait();  // peers are done with our `part`
}

// One window of this thread's slots (slot k: window v = k * step + base), masked outside the row
// (kernels 2b and 5b).
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

// This thread's slot windows of a row in flight: slot j takes window first + j * step (whole
// aligned 16-byte slots from the row's first line, masked on every read), one commit group.
__device__ __forceinline__ void copy_slots(unsigned dst, const uint4* src, int first, int step,
                                           int slots, int nwin) {
  const unsigned dst_step = blockDim.x * sizeof(uint4);
  for (int j = 0, v = first; j < slots && v < nwin; ++j, v += step)
    cp_async16(dst + j * dst_step, src + v);
  cp_async_commit();
}

// This thread's (max, sum) of a row held in registers r and `slots` slot windows (slot(j)):
// registers first (their exps while the slots' copies still land), then each slot window folded
// in as it is read (online: one rescale a window), one shared-memory read a slot.
template <typename T, int VPT, typename Slot>
__device__ __forceinline__ MaxSum<acc_t<T>> regs_then_slots_maxsum(Vec<T> (&r)[VPT], Slot slot,
                                                                   int slots) {
  using A = acc_t<T>;
  constexpr int W = Vec<T>::N;
  MaxSum<A> st = row_maxsum(r);
  cp_async_wait_all();
#pragma unroll 4
  for (int j = 0; j < slots; ++j) {
    const Vec<T> w = slot(j);
    A v[W];
#pragma unroll
    for (int i = 0; i < W; ++i) v[i] = w.get(i);
    online_update(st, v);
  }
  return st;
}

// Kernels 2b / 3b: kernel 2's (3's) row with its last windows in shared memory (see the header
// comment). CTA `rank` of CL, thread t: base = rank * blockDim.x + t, step = CL * blockDim.x;
// window v of the row (line heads): registers for v = k * step + base, k < VPT; slot j of this
// thread (mine[j * blockDim.x]) for v = (VPT + j) * step + base, j < slots.
template <template <typename> class E, typename T, int VPT, int CL>
__device__ __forceinline__ void row_on_chip_slots(T* __restrict__ y, const T* __restrict__ x,
                                                  int n, long long stride, long long row,
                                                  int slots, unsigned rank, long long wave_rows,
                                                  long long wave_ns) {
  using A = acc_t<T>;
  constexpr int W = Vec<T>::N;
  __shared__ MaxSum<A> red[32];
  __shared__ A part[2];
  extern __shared__ __align__(128) uint4 row_slots[];  // slots * blockDim.x, on 128-byte lines
  const T* xr = x + row * stride;
  T* yr = y + row * (long long)n;
  const int h = line_head(xr), nwin = (n + h + W - 1) / W;
  const int t = threadIdx.x, base = rank * blockDim.x + t, step = CL * blockDim.x;
  const int first = VPT * step + base;
  uint4* mine = row_slots + t;
  stagger_first_wave(row, wave_rows, wave_ns);

  // 1. The slot windows' copies in flight (whole aligned slots; masked on every read).
  copy_slots(shared_addr(mine), line_slots(xr), first, step, slots, nwin);
  auto slot = [&](int j) { return slot_window<T>(mine, j, false, first + j * step, n, h, nwin); };
  // 2. The register windows, plain 16-byte loads.
  Vec<T> r[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) r[k] = load_window(xr, k * step + base, n, h, 1, neg_inf_t<T>());

  // 3. This thread's (max, sum), then the CTA's (the cluster's). Kernel 3b's softmax keeps
  // every exp in T (one exp an element; 2-byte: rounded, <= 1.5 ulp as kernel 5 x 16): the
  // registers' relative to their max (in r), the slots' relative to the slots' max, written
  // back into the slots (a max pass, an exp pass: four shared-memory accesses a slot window, not
  // two). Twenty-seventh run, A/B: 2 x 512 x 8 + 8-11 at 128256-151936 +2.6-3.8 points; kernel
  // 2b level (+-0.4), so it keeps its raw values. Twenty-eighth run: fp32 (exact) +0.2-1.0.
  constexpr bool kKeep = E<A>::kScalesExp && sizeof(T) <= 4 && CL > 1;
  MaxSum<A> mine_ms, reg_ms, slot_ms;
  if constexpr (kKeep) {
    reg_ms = exp_maxsum_in_t(r);
    cp_async_wait_all();
    A ms = neg_inf<A>();
#pragma unroll 4
    for (int j = 0; j < slots; ++j) {
      const Vec<T> w = slot(j);
#pragma unroll
      for (int i = 0; i < W; ++i) ms = amax(ms, w.get(i));
    }
    const A mss = safe_max(ms);
    A ss = A(0);
#pragma unroll 4
    for (int j = 0; j < slots; ++j) {
      const Vec<T> w = slot(j);
      A e[W];
#pragma unroll
      for (int i = 0; i < W; ++i) {
        e[i] = exp_acc(w.get(i) - mss);
        ss += e[i];
      }
      mine[j * blockDim.x] = vec_of<T>([&](int i) { return e[i]; }).raw;
    }
    slot_ms = {ms, ss};
    mine_ms = merge(reg_ms, slot_ms);
  } else {
    mine_ms = regs_then_slots_maxsum(r, slot, slots);
  }
  const A m = mine_ms.m;
  MaxSum<A> st = block_allreduce(mine_ms, MergeOp{}, id<T>(), red);
  if constexpr (CL > 1) st = cluster_row_pair<A, CL>(st, part);

  // 4. The epilogue, registers then slots: the kept exps scaled (2-byte softmax), else the raw
  // values (two exps per element).
  const A unused[1][W] = {};
  if constexpr (kKeep) {
    write_row<E, kKeptExpsInT>(r, unused, reg_ms.m, st, [&](int k, const Vec<T>& v) {
      store_window(yr, k * step + base, n, h, 1, v);
    });
    const A f = exp_scale(slot_ms.m, st);
#pragma unroll 4
    for (int j = 0; j < slots; ++j) {
      Vec<T> w;
      w.raw = mine[j * blockDim.x];
      w = vec_of<T>([&](int i) { return w.get(i) * f; });
      store_window(yr, first + j * step, n, h, 1, w);
    }
  } else {
    write_row<E, kKeptValues, kRowOnChipEachVector<T, VPT>>(r, unused, m, st,
                                                            [&](int k, const Vec<T>& v) {
      store_window(yr, k * step + base, n, h, 1, v);
    });
    const E<A> epi(st);
#pragma unroll 4
    for (int j = 0; j < slots; ++j) {
      Vec<T> w = slot(j);
      apply_epilogue(w, epi);
      store_window(yr, first + j * step, n, h, 1, w);
    }
  }
  if constexpr (CL > 1) cluster_wait();  // peers are done with our `part`
}

// Kernels 2c / 3c: kernel 2b (3b) persistent, each window's storage refilled with the next
// row's window as soon as it is stored (see the header comment). CTA (cluster) q of Q owns rows
// q, q + Q, ...; inside a row windows are owned as in kernel 2b (3b): base = rank * blockDim.x
// + t, step = CL * blockDim.x. Clusters exchange each row's (max, sum) as kernel 5 does
// (ClusterInbox messages, no cluster barrier per row).
template <template <typename> class E, typename T, int VPT, int CL>
__device__ __forceinline__ void rolling_rows(T* __restrict__ y, const T* __restrict__ x,
                                             long long rows, int n, long long stride,
                                             int slots) {
  using A = acc_t<T>;
  constexpr int W = Vec<T>::N;
  __shared__ MaxSum<A> red[32];
  __shared__ ClusterInbox<A, CL> inbox;  // CL > 1: every CTA's (max, sum) of each row
  extern __shared__ __align__(128) uint4 row_slots[];  // slots * blockDim.x, on 128-byte lines
  const unsigned rank = CL > 1 ? cluster_rank() : 0u;
  const int t = threadIdx.x, base = rank * blockDim.x + t, step = CL * blockDim.x;
  const int first = VPT * step + base;
  uint4* mine = row_slots + t;
  const unsigned dst = shared_addr(mine), dst_step = blockDim.x * sizeof(uint4);
  const long long q_step = gridDim.x / CL;
  long long row = blockIdx.x / CL;
  if constexpr (CL > 1) {
    if (threadIdx.x == 0) inbox.init();
    cluster_sync();  // every peer's inbox exists before the first message
  }

  // Prologue: the first row in flight, slots first, then registers (as kernel 2b).
  Vec<T> r[VPT];
  {
    const T* xr = x + row * stride;
    const int h = line_head(xr);
    copy_slots(dst, line_slots(xr), first, step, slots, (n + h + W - 1) / W);
#pragma unroll
    for (int k = 0; k < VPT; ++k)
      r[k] = load_window(xr, k * step + base, n, h, 1, neg_inf_t<T>());
  }
  for (int it = 0; row < rows; ++it, row += q_step) {
    const T* xr = x + row * stride;
    T* yr = y + row * (long long)n;
    const int h = line_head(xr), nwin = (n + h + W - 1) / W;
    const bool more = row + q_step < rows;  // the row this CTA takes next
    const T* xn = more ? x + (row + q_step) * stride : xr;
    const int hn = line_head(xn), nwin_next = (n + hn + W - 1) / W;
    auto slot = [&](int j) { return slot_window<T>(mine, j, false, first + j * step, n, h, nwin); };

    const MaxSum<A> mine_ms = regs_then_slots_maxsum(r, slot, slots);
    const A m = mine_ms.m;
    MaxSum<A> st = block_allreduce(mine_ms, MergeOp{}, id<T>(), red);
    if constexpr (CL > 1) {  // inbox reuse: block_allreduce's first barrier orders the reads
      if (threadIdx.x < 32) inbox.send(it, rank, st.m, st.s);
      inbox.wait(it);
      const int lane = threadIdx.x & 31;
      st = warp_allreduce(lane < CL ? MaxSum<A>{inbox.a(it, lane), inbox.b(it, lane)} : id<T>(),
                          MergeOp{});
    }

    // The epilogue, registers then slots; each window, once stored, takes the next row's:
    // register window k - kReloadLag after window k is stored (kReloadLast: all of them after
    // the slots), each slot right after it is stored.
    constexpr int kReloadLag = 0;
    constexpr bool kReloadLast = false;
    auto reload = [&](int k) {
      if (more) r[k] = load_window(xn, k * step + base, n, hn, 1, neg_inf_t<T>());
    };
    const A unused[1][W] = {};
    write_row<E, kKeptValues, kRowOnChipEachVector<T, VPT>>(r, unused, m, st,
                                                            [&](int k, const Vec<T>& v) {
      store_window(yr, k * step + base, n, h, 1, v);
      if (!kReloadLast && k >= kReloadLag) reload(k - kReloadLag);
    });
    if constexpr (!kReloadLast) {
#pragma unroll
      for (int k = VPT - kReloadLag; k < VPT; ++k) reload(k);
    }
    const E<A> epi(st);
    const uint4* src = line_slots(xn);
#pragma unroll 4
    for (int j = 0; j < slots; ++j) {
      Vec<T> w = slot(j);
      apply_epilogue(w, epi);
      const int v = first + j * step;
      store_window(yr, v, n, h, 1, w);
      // the slot's value is in registers and used: its copy of the next row may land now
      if (more && v < nwin_next) cp_async16(dst + j * dst_step, src + v);
    }
    cp_async_commit();
    if constexpr (kReloadLast) {
#pragma unroll
      for (int k = 0; k < VPT; ++k) reload(k);
    }
  }
}

// Kernel 1.
template <template <typename> class E, typename T, int G, int VPT>
__device__ __forceinline__ void warp_rows(T* __restrict__ y, const T* __restrict__ x,
                                          long long rows, int n, long long stride, int vec) {
  using A = acc_t<T>;
  const long long g = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / G;
  const int lane = threadIdx.x % G;
  const bool active = g < rows;  // inactive groups still shuffle (full-mask), then leave
  const long long row = active ? g : rows - 1;
  const T* xr = x + row * stride;
  T* yr = y + row * (long long)n;
  const int h = row_head(xr, vec);
  const T fill = neg_inf_t<T>();

  constexpr bool kExp = E<A>::kScalesExp && sizeof(T) == 2;  // see exp_scale
  Vec<T> r[VPT];
  A e[kExp ? VPT : 1][Vec<T>::N];
#pragma unroll
  for (int k = 0; k < VPT; ++k) r[k] = load_window(xr, k * G + lane, n, h, vec, fill);
  MaxSum<A> st;
  if constexpr (kExp) st = exp_maxsum(r, e); else st = row_maxsum(r);
  const A m_thread = st.m;
  st = warp_allreduce<G>(st, MergeOp{});
  if (!active) return;
  write_row<E, kExp>(r, e, m_thread, st, [&](int k, const Vec<T>& v) {
    store_window(yr, k * G + lane, n, h, vec, v);
  });
}

// ---- kernel 5: persistent, next row prefetched into shared memory ---------------------------
// The persistent kernels keep the sum loop's exps (one exp per element) in fp32 for up to 64
// elements a thread (fp32 x 16, fp16/bf16 x 8: <= 128 registers at <= 512 threads); fp16/bf16
// x 16 keep them rounded to T in the packed values' registers (kKeptFor, exp_maxsum_in_t: 64
// registers of data where fp32 exps would need 128). The pipelined kernel (5b) keeps fp32 exps
// up to 64 too, and the packed values past that (two exps).

// This thread's slots: slot k at mine[k * blockDim.x] (consecutive threads, consecutive 16 B:
// conflict-free). Window v = k * step + base of the row; slot v covers bytes [16v, 16v + 16) from
// the start of the row's first 128-byte line.
template <typename T, int VPT>
__device__ __forceinline__ void prefetch_row(uint4* mine, const T* xr, int nwin, int base,
                                             int step) {
  // One source pointer and one shared address per row, stepped per window (the per-window
  // 64-bit address and generic-to-shared conversion were ~9 instructions per copy).
  const uint4* src = line_slots(xr) + base;
  const unsigned dst = shared_addr(mine), dst_step = blockDim.x * sizeof(uint4);
#pragma unroll
  for (int k = 0; k < VPT; ++k)
    if (k * step + base < nwin) cp_async16(dst + k * dst_step, src + k * step);
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
// window in kernel 7b: Nsight, seventeenth H200 run).
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

template <template <typename> class E, typename T, int VPT, int CL>
__device__ __forceinline__ void persistent_rows(T* __restrict__ y, const T* __restrict__ x,
                                                long long rows, int n, long long stride,
                                                int late, int stages) {
  using A = acc_t<T>;
  constexpr int W = Vec<T>::N;
  __shared__ MaxSum<A> red[32];
  __shared__ ClusterInbox<A, CL> inbox;  // CL > 1: every CTA's (max, sum) of each row
  // stages * blockDim.x * VPT slots, on 128-byte lines (see "Slots" above)
  extern __shared__ __align__(128) uint4 prefetch_slots[];
  const unsigned rank = CL > 1 ? cluster_rank() : 0u;
  const long long q = blockIdx.x / CL, Q = gridDim.x / CL;
  const int base = rank * blockDim.x + threadIdx.x, step = CL * blockDim.x;
  const int stage_slots = blockDim.x * VPT;
  if constexpr (CL > 1) {
    if (threadIdx.x == 0) inbox.init();
    cluster_sync();  // every peer's inbox exists before the first message
  }

  // Prologue: rows q, q + Q, ... (one per stage) in flight, one commit group each.
  for (int s = 0; s < stages; ++s) {
    const long long r = q + s * Q;
    if (r < rows) {
      const T* xr = x + r * stride;
      prefetch_row<T, VPT>(prefetch_slots + s * stage_slots + threadIdx.x, xr,
                           (n + line_head(xr) + W - 1) / W, base, step);
    }
    cp_async_commit();
  }
  long long row = q;
  for (int it = 0; row < rows; ++it, row += Q) {
    const T* xr = x + row * stride;
    T* yr = y + row * (long long)n;
    const int h = line_head(xr);
    uint4* mine = prefetch_slots + (stages > 1 ? (it & 1) : 0) * stage_slots + threadIdx.x;
    cp_async_wait_stage(stages);  // this thread's copies of `row` have landed
    constexpr int kKept = kKeptFor<E, T, VPT * W, 64>;
    Vec<T> r[VPT];
    A e[kKept == kKeptExps ? VPT : 1][W];
    const bool inside = windows_inside<T, VPT>(base, step, n, h);
    const int nwin = (n + h + W - 1) / W;
    read_slots(r, mine, inside, n, h, nwin, base, step);
    auto prefetch_next = [&]() {  // the row `stages` ahead, into the slots just read
      const long long rn = row + stages * Q;
      if (rn < rows) {
        const T* xn = x + rn * stride;
        prefetch_row<T, VPT>(mine, xn, (n + line_head(xn) + W - 1) / W, opaque(base), step);
      }
      cp_async_commit();
    };
    MaxSum<A> st = kept_maxsum<kKept>(r, e);  // consumes every value read from the slots ...
    const A m_thread = st.m;
    if (CL == 1 || !late) prefetch_next();  // ... so the slots can take the next row now
    st = block_allreduce(st, MergeOp{}, id<T>(), red);
    if constexpr (CL > 1) {
      if (threadIdx.x < 32) inbox.send(it, rank, st.m, st.s);
      if (late) prefetch_next();  // issue the next row's copies while the messages fly
      inbox.wait(it);
      const int lane = threadIdx.x & 31;
      st = warp_allreduce(lane < CL ? MaxSum<A>{inbox.a(it, lane), inbox.b(it, lane)} : id<T>(),
                          MergeOp{});
    }
    store_row<E, kKept>(yr, r, e, m_thread, st, inside, opaque(base), step, n, h, nwin);
  }
  cp_async_wait_all();
}

// ---- kernel 5b: persistent clusters, the (max, sum) exchange hidden behind the next row -------
// This thread's (max, sum of exp(x - max)) of a row from its slots, one window at a time: the
// registers hold the previous row meanwhile. Two reads of each slot (max, then sum).
template <typename T, int VPT>
__device__ __forceinline__ MaxSum<acc_t<T>> slots_maxsum(const uint4* mine, bool inside, int base,
                                                         int step, int n, int h) {
  using A = acc_t<T>;
  const int nwin = (n + h + Vec<T>::N - 1) / Vec<T>::N;
  A m = neg_inf<A>();
#pragma unroll 4
  for (int k = 0; k < VPT; ++k) {
    const Vec<T> r = slot_window<T>(mine, k, inside, k * step + base, n, h, nwin);
#pragma unroll
    for (int i = 0; i < Vec<T>::N; ++i) m = amax(m, r.get(i));
  }
  const A ms = safe_max(m);
  A s = A(0);
#pragma unroll 4
  for (int k = 0; k < VPT; ++k) {
    const Vec<T> r = slot_window<T>(mine, k, inside, k * step + base, n, h, nwin);
#pragma unroll
    for (int i = 0; i < Vec<T>::N; ++i) s += exp_acc(r.get(i) - ms);
  }
  return {m, s};
}

// Ownership as kernel 5 (cluster q of Q owns rows q, q + Q, ...; CTA rank c, thread t: windows
// k * CL * blockDim.x + c * blockDim.x + t), `stages` rows in flight into as many slot sets.
// Row j of the cluster goes through:
//   announce  its local (max, sum) from the slots (2 reads, 1 exp per element), block all-reduce,
//             sent to every peer (ClusterInbox with 4 inboxes, since row j + 1 is sent before
//             row j is received);
//   load      (once row j - 1 is stored) the slots into registers: e = exp(x - m_thread) for
//             softmax, the raw values for log_softmax; the slots then take row j + stages;
//   store     after announcing row j + 1: wait for row j's messages, scale, 16-byte stores.
// So each row's exchange overlaps the next row's reduction instead of idling every warp (in
// kernel 5 the wait for the peers' messages was a third of all warp stall samples, ncu, fp32
// 65536). Cost: 2 exps per element for softmax, 3 shared-memory reads per window.
template <template <typename> class E, typename T, int VPT, int CL>
__device__ __forceinline__ void pipelined_rows(T* __restrict__ y, const T* __restrict__ x,
                                               long long rows, int n, long long stride,
                                               int stages) {
  using A = acc_t<T>;
  constexpr int W = Vec<T>::N;
  constexpr bool kExp = kKeptFor<E, T, VPT * W, 64> == kKeptExps;  // else the raw values
  __shared__ MaxSum<A> red[32];
  __shared__ ClusterInbox<A, CL, 4> inbox;
  extern __shared__ __align__(128) uint4 prefetch_slots[];  // stages * blockDim.x * VPT
  const unsigned rank = cluster_rank();
  const long long q = blockIdx.x / CL, Q = gridDim.x / CL;
  const int base = rank * blockDim.x + threadIdx.x, step = CL * blockDim.x;
  if (threadIdx.x == 0) inbox.init();
  cluster_sync();  // every peer's inbox exists before the first message

  auto slots = [&](int j) {  // slot set of row j: j % stages
    return prefetch_slots + (stages > 1 ? (j & 1) : 0) * (blockDim.x * VPT) + threadIdx.x;
  };
  auto request = [&](int j) {  // row j of this cluster into its slot set: one commit group
    const long long r = q + j * Q;
    if (r < rows) {
      const T* xr = x + r * stride;
      prefetch_row<T, VPT>(slots(j), xr, (n + line_head(xr) + W - 1) / W, opaque(base), step);
    }
    cp_async_commit();
  };
  auto announce = [&](int j, bool inside, int h) {  // returns this thread's max of row j
    MaxSum<A> st = slots_maxsum<T, VPT>(slots(j), inside, opaque(base), step, n, h);
    const A m_thread = st.m;
    st = block_allreduce(st, MergeOp{}, id<T>(), red);
    if (threadIdx.x < 32) inbox.send(j, rank, st.m, st.s);
    return m_thread;
  };
  Vec<T> r[VPT];
  A e[kExp ? VPT : 1][W];
  auto load = [&](int j, bool inside, int h, A m_thread) {  // row j: slots -> registers
    const uint4* mine = slots(j);
    const int nwin = (n + h + W - 1) / W, b = opaque(base);
#pragma unroll
    for (int k = 0; k < VPT; ++k) r[k] = slot_window<T>(mine, k, inside, k * step + b, n, h, nwin);
    if constexpr (kExp) {
      const A ms = safe_max(m_thread);
#pragma unroll
      for (int k = 0; k < VPT; ++k)
#pragma unroll
        for (int i = 0; i < W; ++i) e[k][i] = exp_acc(r[k].get(i) - ms);
    }
  };

  if (q >= rows) return;  // the whole cluster: every CTA of it has the same q
  for (int j = 0; j < stages; ++j) request(j);
  cp_async_wait_stage(stages);  // row 0 has landed
  int h = line_head(x + q * stride);
  bool inside = windows_inside<T, VPT>(base, step, n, h);
  A m_thread = announce(0, inside, h);
  load(0, inside, h, m_thread);
  request(stages);
  for (int j = 0; q + j * Q < rows; ++j) {
    const long long row = q + j * Q;
    const bool more = row + Q < rows;
    int h_next = 0;
    bool inside_next = false;
    A m_next = A(0);
    if (more) {  // row j + 1: its reduction and messages, while row j's messages fly
      cp_async_wait_stage(stages);  // row j + 1 has landed (stages 2: j + 2 may be in flight)
      h_next = line_head(x + (row + Q) * stride);
      inside_next = windows_inside<T, VPT>(base, step, n, h_next);
      m_next = announce(j + 1, inside_next, h_next);
    }
    inbox.wait(j);
    const int lane = threadIdx.x & 31;
    const MaxSum<A> st = warp_allreduce(
        lane < CL ? MaxSum<A>{inbox.a(j, lane), inbox.b(j, lane)} : id<T>(), MergeOp{});
    T* yr = y + row * (long long)n;
    const int nwin = (n + h + W - 1) / W;
    store_row<E, kExp>(yr, r, e, m_thread, st, inside, opaque(base), step, n, h, nwin);
    if (more) {
      load(j + 1, inside_next, h_next, m_next);
      request(j + 1 + stages);  // into the slots just read
    }
    h = h_next;
    inside = inside_next;
    m_thread = m_next;
  }
  cp_async_wait_all();
}

// ---- kernel 6: rows longer than any on-chip shape, read twice at most ---------------------------
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
// whole aligned 16-byte slots; bytes outside the row are masked on read).
template <typename T, int U>
__device__ __forceinline__ void wide_request(uint4* mine, const T* xr, const WideSpan& s,
                                             int j0) {
  const char* a = reinterpret_cast<const char*>(xr) - s.h * sizeof(T);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int j = j0 + u, v = s.c0 + j * static_cast<int>(blockDim.x) + threadIdx.x;
    if (j < s.keep && v < s.c1) cp_async16(mine + j * blockDim.x, a + 16 * static_cast<size_t>(v));
  }
}

// Persistent: cluster q of Q owns rows q, q + Q, ... For each row:
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
      wide_request<T, U>(mine, xr, s, j0);
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
        wide_request<T, U>(mine, xn, sn, j0);
        cp_async_commit();
        ++groups;
      }
    }
  }
}

// ---- kernel 7: rows in chunks, (max, sum) through global memory ------------------------------
// A chunk's pair is two flagged 64-bit words (chunk_sync.cuh: store_flagged / load_flagged).

// A lane's first pairs of a row, loaded at the start of a step so that their L2 round trip
// (behind this SM's copies in flight) overlaps phase 1: chunks lane + 32 e, e < K (kernel 7:
// K = kEarlyPairs, rows of up to 128 chunks; 7b: 2, its registers are two chunks' values).
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
    constexpr int W = Vec<T>::N;
    const T* xr = x + row * stride;
    prefetch_row<T, VPT>(slots + b * set_slots + threadIdx.x, xr, (n + line_head(xr) + W - 1) / W,
                         c * span + threadIdx.x, step);
  }
};

// Item i of rows * chunks is chunk i % chunks of row i / chunks. CTA q of Q owns items q, q + Q,
// ...; step t of this CTA is item q + t * Q. Per step t:
//   phase 1 (item of step t): its slots landed (cp.async, requested `ahead` steps earlier or in
//           the prologue) -> local (max, sum) -> block all-reduce -> flagged pair to `pairs`.
//   phase 2 (item of step t - lag): wait until its row's pairs are all in, merge them,
//           epilogue from the same slots, store; the slots then take the item of step
//           t - lag + bufs (bufs = lag + 1 + ahead slot sets).
// A chunk's row has all its pairs once every CTA has run phase 1 up to step t when
// chunks <= lag * Q + 1 (the launcher checks), so no CTA waits on one that waits on it.
template <template <typename> class E, typename T, int VPT>
__device__ __forceinline__ void chunk_rows(T* __restrict__ y, const T* __restrict__ x,
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

// ---- kernel 7b: rows in chunks, the waiting chunk in registers -------------------------------
// Kernel 7 with lag 1 and the chunk that waits for its row's pairs held in registers instead of
// shared memory: phase 1 moves the chunk of step t from its slots into registers (softmax: the
// exps e = exp(x - m_thread), fp32 with VPT * W <= 32, else rounded to fp16/bf16, so phase 2
// scales them, one exp per element; log_softmax: the raw values) and its slots take the chunk
// of step t + ahead at once.
// Shared memory holds only chunks in flight (`ahead` sets), so 64 KB chunks can have 2-3 in
// flight where kernel 7 fits one. Registers: two chunks' values per thread (this step's and the
// one waiting, copied over at the end of a step), so CTAs of <= 512 threads.
template <typename T, int VPT, int KEPT> struct HeldChunk {
  Vec<T> r[VPT];
  acc_t<T> e[KEPT == kKeptExps ? VPT : 1][Vec<T>::N];
  acc_t<T> m_thread;
};

template <template <typename> class E, typename T, int VPT>
__device__ __forceinline__ void chunk_rows_reg(T* __restrict__ y, const T* __restrict__ x,
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
  // step, spilled 48 B in bf16 and lost 0.3 % - seventeenth H200 run. The same body written
  // inline in the loop, not as this lambda, compiles to 24 B of spills in 2-byte x 8.)
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

// 16 vectors per thread need > 64 registers: such blocks are capped at 512 threads.
template <int VPT> struct MaxThreads {
  static constexpr int value = VPT >= 16 ? 512 : 1024;
};
// The persistent kernels keep 64 or more elements per thread (fp32 x 16, fp16/bf16 x 8) in
// fp32 registers: capped at 512 threads (128 registers).
template <typename T, int VPT> struct PersistThreads {
  static constexpr int value = VPT * Vec<T>::N >= 64 ? 512 : 1024;
};

}  // namespace rowk
}  // namespace klab

// The kernel family under one prefix and one epilogue (see the header comment for each kernel).
#define KLAB_ROW_SOFTMAX_KERNELS(P, EPI)                                                          \
  template <typename T, int G, int VPT>                                                          \
  __global__ void __launch_bounds__(256)                                                         \
      P##_warp(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,                \
               long long stride, int vec) {                                                      \
    klab::rowk::warp_rows<EPI, T, G, VPT>(y, x, rows, n, stride, vec);                           \
  }                                                                                              \
  template <typename T, int VPT>                                                                 \
  __global__ void __launch_bounds__(klab::rowk::MaxThreads<VPT>::value)                          \
      P##_block(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,               \
                long long stride, int vec, long long wave_rows, long long wave_ns) {             \
    klab::rowk::row_on_chip<EPI, T, VPT, 1>(y, x, n, stride, vec, blockIdx.x, 0, wave_rows,      \
                                            wave_ns);                                            \
  }                                                                                              \
  template <typename T, int VPT>                                                                 \
  __global__ void __launch_bounds__(klab::rowk::MaxThreads<VPT>::value)                          \
      P##_block_slots(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,         \
                      long long stride, int vec, int slots, long long wave_rows,                 \
                      long long wave_ns) {                                                       \
    klab::rowk::row_on_chip_slots<EPI, T, VPT, 1>(y, x, n, stride, blockIdx.x, slots, 0,         \
                                                  wave_rows, wave_ns);                           \
  }                                                                                              \
  template <typename T, int VPT>                                                                 \
  __global__ void __launch_bounds__(klab::rowk::MaxThreads<VPT>::value)                          \
      P##_persist_slots(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,       \
                        long long stride, int vec, int slots) {                                  \
    klab::rowk::rolling_rows<EPI, T, VPT, 1>(y, x, rows, n, stride, slots);                      \
  }                                                                                              \
  template <typename T, int VPT, int CL>                                                         \
  __global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(klab::rowk::MaxThreads<VPT>::value) \
      P##_persist_cluster_slots(T* __restrict__ y, const T* __restrict__ x, long long rows,      \
                                int n, long long stride, int vec, int slots) {                   \
    klab::rowk::rolling_rows<EPI, T, VPT, CL>(y, x, rows, n, stride, slots);                     \
  }                                                                                              \
  template <typename T, int VPT, int CL>                                                         \
  __global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(klab::rowk::MaxThreads<VPT>::value) \
      P##_cluster_slots(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,       \
                        long long stride, int vec, int slots, long long wave_rows,               \
                        long long wave_ns) {                                                     \
    klab::rowk::row_on_chip_slots<EPI, T, VPT, CL>(y, x, n, stride, blockIdx.x / CL, slots,      \
                                                   klab::cluster_rank(), wave_rows, wave_ns);    \
  }                                                                                              \
  template <typename T, int VPT, int CL>                                                         \
  __global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(klab::rowk::MaxThreads<VPT>::value) \
      P##_cluster(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,             \
                  long long stride, int vec, long long wave_rows, long long wave_ns) {           \
    klab::rowk::row_on_chip<EPI, T, VPT, CL>(y, x, n, stride, vec, blockIdx.x / CL,              \
                                             klab::cluster_rank(), wave_rows, wave_ns);          \
  }                                                                                              \
  template <typename T, int VPT>                                                                 \
  __global__ void __launch_bounds__(klab::rowk::PersistThreads<T, VPT>::value)                          \
      P##_persist(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,             \
                  long long stride, int vec, int late, int stages) {                             \
    klab::rowk::persistent_rows<EPI, T, VPT, 1>(y, x, rows, n, stride, late, stages);            \
  }                                                                                              \
  template <typename T, int VPT, int CL>                                                         \
  __global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(klab::rowk::PersistThreads<T, VPT>::value) \
      P##_persist_cluster(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,     \
                          long long stride, int vec, int late, int stages) {                     \
    klab::rowk::persistent_rows<EPI, T, VPT, CL>(y, x, rows, n, stride, late, stages);           \
  }                                                                                              \
  template <typename T, int VPT, int CL>                                                         \
  __global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(klab::rowk::PersistThreads<T, VPT>::value) \
      P##_persist_pipe(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,        \
                       long long stride, int vec, int stages) {                                  \
    klab::rowk::pipelined_rows<EPI, T, VPT, CL>(y, x, rows, n, stride, stages);                  \
  }                                                                                              \
  template <typename T, int VPT>                                                                 \
  __global__ void __launch_bounds__(1024)                                                        \
      P##_chunks(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,              \
                 long long stride, int vec, int chunks, unsigned long long* pairs,           \
                 unsigned epoch, int lag, int ahead) {                                           \
    klab::rowk::chunk_rows<EPI, T, VPT>(y, x, rows, n, stride, chunks, pairs, epoch, lag,       \
                                        ahead);                                                  \
  }                                                                                              \
  template <typename T, int VPT>                                                                 \
  __global__ void __launch_bounds__(512)                                                         \
      P##_chunks_reg(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,          \
                     long long stride, int vec, int chunks, unsigned long long* pairs,           \
                     unsigned epoch, int ahead) {                                                \
    klab::rowk::chunk_rows_reg<EPI, T, VPT>(y, x, rows, n, stride, chunks, pairs, epoch,        \
                                            ahead);                                              \
  }                                                                                              \
  template <typename T, int CL>                                                                  \
  __global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(1024)                             \
      P##_wide(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,                \
               long long stride, int vec, int kept) {                                            \
    klab::rowk::wide_rows<EPI, T, CL>(y, x, rows, n, stride, vec, kept);               \
  }
