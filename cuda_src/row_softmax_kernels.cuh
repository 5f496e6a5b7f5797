// The fast row-softmax kernel family, written once and instantiated per op with an EPILOGUE
// (row_epilogues.cuh): what to write for an element x once its row's (max, sum of exp(x - max))
// is known.
//
//   fast_softmax.cu:  KLAB_ROW_SOFTMAX_KERNELS(fast_softmax, klab::SoftmaxEpilogue)
//   fast_log_softmax.cu:   KLAB_ROW_SOFTMAX_KERNELS(log_softmax, klab::LogSoftmaxEpilogue)
//
// The macro defines thin __global__ templates named <prefix>_<symbol> (so that NVRTC name
// expressions such as "fast_softmax_block<float, 4>" work), each forwarding to one device body
// in klab::rowk. A kernel KIND is one body and its launch shape (FastConfig.kind in
// kernel_lab/cuda/rowkernels/forward_config.py, which picks kind and shape per (N, dtype)); the header
// of each body says which thread owns which data, the launch shape, shared memory,
// preconditions and bytes moved. cuda_src/README.md is the family's design document.
//
//   kind           symbol (CL = CTAs a row)             body                 header
//   warp           _warp<T, G, VPT>                     warp_rows            row_block.cuh
//   block          _block<T, VPT>                       block_row, CL = 1    row_block.cuh
//   cluster        _cluster<T, VPT, CL>                 block_row            row_block.cuh
//   block_slots    _block_slots<T, VPT>,                block_slots_row      row_block_slots.cuh
//                  _cluster_slots<T, VPT, CL>
//   persist_slots  _persist_slots<T, VPT>,              persist_slots_rows   row_block_slots.cuh
//                  _persist_cluster_slots<T, VPT, CL>
//   persist        _persist<T, VPT>,                    persist_rows         row_persist.cuh
//                  _persist_cluster<T, VPT, CL>
//   pipe           _persist_pipe<T, VPT, CL>            pipe_rows            row_persist.cuh
//   wide           _wide<T, CL>                         wide_rows            row_wide.cuh
//   chunks         _chunks<T, VPT>                      chunks_rows          row_chunks.cuh
//   chunks_reg     _chunks_reg<T, VPT>                  chunks_reg_rows      row_chunks.cuh
//
// Common to every kind:
//   Arguments: (y, x, rows, n, stride, vec, ...): input rows `stride` elements apart, the output
//             contiguous (rows, n); `vec` != 0 when input and output rows share their 16-byte
//             phase (the slot kinds need it; the others then load element by element).
//   Layout:   aligned windows (softmax_common.cuh, load_window / store_window): window v of a row
//             is one aligned 16-byte slot, so odd row lengths (50257) still move whole vectors;
//             only a row's first and last window are element-wise.
//   Math:     a local (max, sum) over registers, one merge of (max, sum) pairs across lanes /
//             warps / CTAs, then the epilogue; fp32 accumulation (fp64 for double).
//   Bytes:    2 * M * N * sizeof(T) (wide: plus the re-read of what its shared memory does not
//             keep; chunks: plus 16 B a chunk).
//   Precond:  rows < 2^31 CTAs' worth; n < 2^31 - 16.
#pragma once

#include "row_block.cuh"
#include "row_block_slots.cuh"
#include "row_chunks.cuh"
#include "row_persist.cuh"
#include "row_wide.cuh"

// The kernel family under one prefix P and one epilogue EPI (the table above).
#define KLAB_ROW_SOFTMAX_KERNELS(P, EPI)                                                         \
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
    klab::rowk::block_row<EPI, T, VPT, 1>(y, x, n, stride, vec, blockIdx.x, 0, wave_rows,        \
                                          wave_ns);                                              \
  }                                                                                              \
  template <typename T, int VPT>                                                                 \
  __global__ void __launch_bounds__(klab::rowk::MaxThreads<VPT>::value)                          \
      P##_block_slots(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,         \
                      long long stride, int vec, int slots, long long wave_rows,                 \
                      long long wave_ns) {                                                       \
    klab::rowk::block_slots_row<EPI, T, VPT, 1>(y, x, rows, n, stride, blockIdx.x, slots, 0,     \
                                                wave_rows, wave_ns);                             \
  }                                                                                              \
  template <typename T, int VPT>                                                                 \
  __global__ void __launch_bounds__(klab::rowk::MaxThreads<VPT>::value)                          \
      P##_persist_slots(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,       \
                        long long stride, int vec, int slots) {                                  \
    klab::rowk::persist_slots_rows<EPI, T, VPT, 1>(y, x, rows, n, stride, slots);                \
  }                                                                                              \
  template <typename T, int VPT, int CL>                                                         \
  __global__ void KLAB_CLUSTER_DIMS(CL) __launch_bounds__(klab::rowk::MaxThreads<VPT>::value)     \
      P##_persist_cluster_slots(T* __restrict__ y, const T* __restrict__ x, long long rows,      \
                                int n, long long stride, int vec, int slots) {                   \
    klab::rowk::persist_slots_rows<EPI, T, VPT, CL>(y, x, rows, n, stride, slots);               \
  }                                                                                              \
  template <typename T, int VPT, int CL>                                                         \
  __global__ void KLAB_CLUSTER_DIMS(CL) __launch_bounds__(klab::rowk::MaxThreads<VPT>::value)     \
      P##_cluster_slots(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,       \
                        long long stride, int vec, int slots, long long wave_rows,               \
                        long long wave_ns) {                                                     \
    klab::rowk::block_slots_row<EPI, T, VPT, CL>(y, x, rows, n, stride, blockIdx.x / CL, slots,  \
                                                 klab::cluster_rank(), wave_rows, wave_ns);      \
  }                                                                                              \
  template <typename T, int VPT, int CL>                                                         \
  __global__ void KLAB_CLUSTER_DIMS(CL) __launch_bounds__(klab::rowk::MaxThreads<VPT>::value)     \
      P##_cluster(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,             \
                  long long stride, int vec, long long wave_rows, long long wave_ns) {           \
    klab::rowk::block_row<EPI, T, VPT, CL>(y, x, n, stride, vec, blockIdx.x / CL,                \
                                           klab::cluster_rank(), wave_rows, wave_ns);            \
  }                                                                                              \
  template <typename T, int VPT>                                                                 \
  __global__ void __launch_bounds__(klab::rowk::PersistThreads<T, VPT>::value)                   \
      P##_persist(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,             \
                  long long stride, int vec, int late, int stages) {                             \
    klab::rowk::persist_rows<EPI, T, VPT, 1>(y, x, rows, n, stride, late, stages);               \
  }                                                                                              \
  template <typename T, int VPT, int CL>                                                         \
  __global__ void KLAB_CLUSTER_DIMS(CL) __launch_bounds__(klab::rowk::PersistThreads<T, VPT>::value)     \
      P##_persist_cluster(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,     \
                          long long stride, int vec, int late, int stages) {                     \
    klab::rowk::persist_rows<EPI, T, VPT, CL>(y, x, rows, n, stride, late, stages);              \
  }                                                                                              \
  template <typename T, int VPT, int CL>                                                         \
  __global__ void KLAB_CLUSTER_DIMS(CL) __launch_bounds__(klab::rowk::PersistThreads<T, VPT>::value)     \
      P##_persist_pipe(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,        \
                       long long stride, int vec, int stages) {                                  \
    klab::rowk::pipe_rows<EPI, T, VPT, CL>(y, x, rows, n, stride, stages);                       \
  }                                                                                              \
  template <typename T, int VPT>                                                                 \
  __global__ void __launch_bounds__(1024)                                                        \
      P##_chunks(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,              \
                 long long stride, int vec, int chunks, unsigned long long* pairs,               \
                 unsigned epoch, int lag, int ahead) {                                           \
    klab::rowk::chunks_rows<EPI, T, VPT>(y, x, rows, n, stride, chunks, pairs, epoch, lag,       \
                                         ahead);                                                 \
  }                                                                                              \
  template <typename T, int VPT>                                                                 \
  __global__ void __launch_bounds__(512)                                                         \
      P##_chunks_reg(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,          \
                     long long stride, int vec, int chunks, unsigned long long* pairs,           \
                     unsigned epoch, int ahead) {                                                \
    klab::rowk::chunks_reg_rows<EPI, T, VPT>(y, x, rows, n, stride, chunks, pairs, epoch,        \
                                             ahead);                                             \
  }                                                                                              \
  template <typename T, int CL>                                                                  \
  __global__ void KLAB_CLUSTER_DIMS(CL) __launch_bounds__(1024)                                 \
      P##_wide(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,                \
               long long stride, int vec, int kept) {                                            \
    klab::rowk::wide_rows<EPI, T, CL>(y, x, rows, n, stride, vec, kept);                         \
  }
