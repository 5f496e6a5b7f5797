// fast_softmax: the speed-of-light family. One read of x and one write of y per element, rows
// held on chip in 16-byte vectors, and a kernel kind and launch shape picked per (N, dtype) by
// kernel_lab/cuda/rowkernels/forward_config.py (fast_softmax_config; the launcher records the choice).
//
// The kernels live in row_softmax_kernels.cuh (shared with fast_log_softmax.cu, which instantiates
// the same bodies with another epilogue); its table maps each kind to its symbols, body and
// header, where each kernel's ownership, launch shape, shared memory, preconditions and bytes
// are written:
//   fast_softmax_warp<T, G, VPT>               warp: short rows, a lane group a row
//   fast_softmax_block<T, VPT>                 block: a CTA a row
//   fast_softmax_cluster<T, VPT, CL>           cluster: a cluster a row (DSMEM merge)
//   fast_softmax_block_slots<T, VPT>           block_slots: a CTA a row, its last windows in
//   fast_softmax_cluster_slots<T, VPT, CL>       shared memory; on a cluster of CL CTAs a row
//   fast_softmax_persist_slots<T, VPT>         persist_slots: block_slots on resident CTAs /
//   fast_softmax_persist_cluster_slots<...>      clusters (no rule picks it)
//   fast_softmax_persist<T, VPT>               persist: resident CTAs / clusters, the next row
//   fast_softmax_persist_cluster<T, VPT, CL>     prefetched (cp.async)
//   fast_softmax_persist_pipe<T, VPT, CL>      pipe: persist clusters, each row's exchange behind
//                                                the next row (no rule picks it)
//   fast_softmax_wide<T, CL>                   wide: rows beyond all of these, two passes
//   fast_softmax_chunks<T, VPT>                chunks: long rows in chunks of one CTA, (max, sum)
//                                                pairs through global memory (no cluster)
//   fast_softmax_chunks_reg<T, VPT>            chunks_reg: the same, the waiting chunk in
//                                                registers
//
// Epilogue: y = exp(x - max) * (1 / sum); the persistent kinds and the fp16/bf16 kernels compute
// it as e * (exp(max_thread - max) / sum) from the exps e kept from the sum loop (one exp per
// element: exp_scale in row_epilogues.cuh). An all -inf row gives NaN, like torch.softmax; -inf
// entries of other rows give exact zeros; NaN reaches its whole row.
#include "row_softmax_kernels.cuh"

KLAB_ROW_SOFTMAX_KERNELS(fast_softmax, klab::SoftmaxEpilogue)
