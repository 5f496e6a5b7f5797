// log_softmax: y = (x - max) - log(sum(exp(x - max))) per row, the lab's second op.
//
// Runs the SAME kernels as fast_softmax (row_softmax_kernels.cuh: every kind, 16-byte aligned
// windows, one read of x and one write of y); only the epilogue differs
// (klab::LogSoftmaxEpilogue, row_epilogues.cuh): subtract log(sum) instead of multiplying by
// 1 / sum, in the order (x - max) - log(sum) - never x - (max + log(sum)), which rounds to
// ulp(max) (1e-3 for a row near 1e4 in fp32) and would wipe out log-probabilities near 0.
// Edge cases, as torch.log_softmax: -inf gives -inf; an all -inf row gives NaN (max = -inf,
// sum = 0: (-inf - -inf) - log(0)); NaN reaches the sum and so the whole row.
//
// Kernels: fast_softmax.cu's list under the prefix log_softmax (same shapes, configs and
// preconditions; the launcher reuses fast_softmax_config). Softmax keeps exps where registers
// allow (one exp an element); log_softmax keeps x and never needs a second exp.
// Bytes: 2 * M * N * sizeof(T) (wide: plus the re-read of what shared memory does not keep).
#include "row_softmax_kernels.cuh"

KLAB_ROW_SOFTMAX_KERNELS(log_softmax, klab::LogSoftmaxEpilogue)
