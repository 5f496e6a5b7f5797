// log_softmax: y = (x - max) - log(sum(exp(x - max))) per row, the lab's second op.
//
// Runs the SAME kernels as fast_softmax (row_softmax_kernels.cuh: lane groups / CTA / cluster /
// persistent prefetching / wide, 16-byte aligned windows, one read of x and one write of y);
// only the epilogue differs (klab::LogSoftmaxEpilogue): subtract log(sum) instead of multiplying
// by 1 / sum, in the order (x - max) - log(sum) - never x - (max + log(sum)), which rounds to
// ulp(max) (1e-3 for a row near 1e4 in fp32) and would wipe out log-probabilities near 0.
// Edge cases, as torch.log_softmax: -inf gives -inf; an all -inf row gives NaN (max = -inf,
// sum = 0: (-inf - -inf) - log(0)); NaN reaches the sum and so the whole row.
//
// Kernels (same shapes, configs and preconditions as fast_softmax's; the launcher reuses
// fast_softmax_config / fast_launch):
//   log_softmax_warp<T, G, VPT>, log_softmax_block<T, VPT>, log_softmax_block_slots<T, VPT>,
//   log_softmax_cluster_slots<T, VPT, CL>, log_softmax_persist_slots<T, VPT>,
//   log_softmax_persist_cluster_slots<T, VPT, CL>, log_softmax_cluster<T, VPT, CL>,
//   log_softmax_persist<T, VPT>, log_softmax_persist_cluster<T, VPT, CL>,
//   log_softmax_persist_pipe<T, VPT, CL>, log_softmax_wide<T, CL>, log_softmax_chunks<T, VPT>,
//   log_softmax_chunks_reg<T, VPT>.
// Bytes: 2 * M * N * sizeof(T) (wide: plus the re-read of what shared memory does not keep).
// Changed: from a vec_softmax-like CTA-per-row kernel plus a streaming two-pass kernel (3
// passes past 128 KB rows) to fast_softmax's family: short rows no longer waste a CTA, long rows
// no longer re-read x.
#include "row_softmax_kernels.cuh"

KLAB_ROW_SOFTMAX_KERNELS(log_softmax, klab::LogSoftmaxEpilogue)
