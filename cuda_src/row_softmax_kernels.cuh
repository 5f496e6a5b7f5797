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

#include "row_block.cuh"
#include "row_block_slots.cuh"
#include "row_chunks.cuh"
#include "row_persist.cuh"
#include "row_wide.cuh"

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
