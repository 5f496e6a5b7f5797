// fast_softmax: the speed-of-light family. One read of x and one write of y per element, rows
// held on chip in 16-byte vectors, and a launch shape picked per (N, dtype) by the launcher
// (kernel_lab/ops/softmax/fast_config.py: fast_softmax_config; cuda_variants.py records the choice).
//
// The kernels live in row_softmax_kernels.cuh (shared with log_softmax.cu, which instantiates
// the same bodies with another epilogue); see its header for each kernel's ownership, launch
// shape, shared memory, bytes and preconditions:
//   fast_softmax_warp<T, G, VPT>              short rows, a lane group per row
//   fast_softmax_block<T, VPT>                mid rows, a CTA per row
//   fast_softmax_block_slots<T, VPT>          a CTA per row, its last windows in shared memory
//   fast_softmax_cluster_slots<T, VPT, CL>    the same on a cluster of CL CTAs a row
//   fast_softmax_persist_slots<T, VPT>        block_slots on resident CTAs (no rule picks it)
//   fast_softmax_persist_cluster_slots<...>   cluster_slots on resident clusters (likewise)
//   fast_softmax_cluster<T, VPT, CL>          long rows, a cluster per row (DSMEM merge)
//   fast_softmax_persist<T, VPT>              persistent CTAs, next row prefetched (cp.async)
//   fast_softmax_persist_cluster<T, VPT, CL>  persistent clusters, next row prefetched
//   fast_softmax_persist_pipe<T, VPT, CL>     the same, each row's exchange behind the next row
//   fast_softmax_wide<T, CL>                  rows beyond all of these: a cluster, two passes
//   fast_softmax_chunks<T, VPT>               long rows in chunks of one CTA, (max, sum) pairs
//                                             through global memory (no cluster)
//   fast_softmax_chunks_reg<T, VPT>           the same, the waiting chunk in registers
//
// Epilogue: y = exp(x - max) * (1 / sum); the persistent kernels and every fp16/bf16 kernel
// compute it as e * (exp(max_thread - max) / sum) from the exps e kept from the sum loop (one exp
// per element: exp_scale in the header). An all -inf row gives NaN, like torch.softmax; -inf
// entries of other rows give exact zeros; NaN reaches its whole row.
#include "row_softmax_kernels.cuh"

KLAB_ROW_SOFTMAX_KERNELS(fast_softmax, klab::SoftmaxEpilogue)
