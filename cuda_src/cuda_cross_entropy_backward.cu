// cuda_cross_entropy_backward: dlogits of cross-entropy in one read of the logits and one
// write (the formulas: cross_entropy_common.cuh).
//
// cross_entropy_coefs<T>: blocks of 1024 threads (one up to scan_blocks' rows): sum(w) and
//   the mean's denominator sum(w_t) in a fixed order (deterministic; past one block's rows from
//   cross_entropy_den_parts<T>, a block a chunk), then each row's (A, B, D) for the upstream
//   gradient. O(M + C), kScanBatch rows' (classes') loads in flight a thread; run before the
//   backward and before the fused forward.
// cross_entropy_bwd<T>: block (r, b) owns windows [b * span, (b + 1) * span) of row r; each of
//   its 256 threads loads four 16-byte windows, then computes and stores them (grad_windows).
//   Launch: grid (M, ceil(windows / span)), span = 2048 windows. Bytes: M * C * sizeof(T) read
//   + the same written. dx is contiguous; its rows share the logits' 16-byte phase (vec) or
//   are written element-wise.
// cross_entropy_scale<T>: the in-place mode's backward, dx *= g with g read on the device; a
//   no-op (one load of g a thread) when g == 1. Grid-stride, 256 threads.
// Accumulates in fp32 (fp64 for double).
#include "cross_entropy_common.cuh"

using klab::ce::Acc;

// dx of rows of C classes: blockIdx.x owns row r, blockIdx.y a span of its windows.
template <typename T>
__global__ void __launch_bounds__(256)
    cross_entropy_bwd(T* dx, const T* x, long long rows, int n, long long stride, int vec,
                      int span, const long long* target, const T* weight,
                      const klab::ce::Lse<T>* lse, const Acc<T>* coefs) {
  using A = Acc<T>;
  constexpr int W = klab::Vec<T>::N;
  const long long r = blockIdx.x;
  const T* row = x + r * stride;
  T* out = dx + r * (long long)n;
  const int h = klab::row_head(row, vec);
  const int nwin = (n + h + W - 1) / W;
  const long long t = target[r];
  const klab::ce::Lse<T> l = lse[r];
  const A hi = A(l), lo = A(l - klab::ce::Lse<T>(hi));  // hi + lo = lse
  klab::ce::grad_windows(out, row, blockIdx.y * span + threadIdx.x, min(nwin, int(blockIdx.y + 1) * span),
                         n, h, vec, t, weight, hi, lo, coefs + 3 * r);
}

// Per row (A, B, D) into coefs[3 r .. 3 r + 2] for an upstream gradient `grad` (one value, or
// one per row when grad_per_row; in the loss's dtype T, as autograd hands it: no cast kernel),
// divided by the denominator sum(w_t) when mean: this block's own scan of every row, or, past
// scan_blocks' rows (nparts > 0), the sum of cross_entropy_den_parts' parts, which every block
// of the grid takes in the same order (one denominator). The rows grid-strided, 8 (fp64: 4) a
// thread's batch of loads.
template <typename T>
__global__ void __launch_bounds__(1024)
    cross_entropy_coefs(Acc<T>* coefs, const long long* target, long long rows, int n,
                        long long ignore_index, const T* weight, double eps, const T* grad,
                        int grad_per_row, int mean, const Acc<T>* den_parts, int nparts) {
  using A = Acc<T>;
  // rows' loads in flight a thread, in row order (fp64: half, or 64 registers spill)
  constexpr int B = sizeof(A) == 8 ? klab::ce::kScanBatch / 2 : klab::ce::kScanBatch;
  __shared__ A red[32];
  klab::launch_dependents();  // the fused forward may start reading its rows (it waits for us)
  A den = A(0), wsum = A(0);
  if (mean) {
    den = nparts ? (threadIdx.x < nparts ? den_parts[threadIdx.x] : A(0))
                 : klab::ce::scan_kept_weight<T, B>(target, 0, rows, n, ignore_index, weight);
    den = klab::block_allreduce(den, klab::SumOp{}, A(0), red);
  }
  if (eps != 0.0f) {
    if (weight) {
      for (int j0 = threadIdx.x; j0 < n; j0 += B * blockDim.x) {  // sum(w): C / 1024 loads
        A wj[B];
#pragma unroll
        for (int k = 0; k < B; ++k) {
          const int j = j0 + k * blockDim.x;
          wj[k] = j < n ? klab::to_acc(weight[j]) : A(0);
        }
#pragma unroll
        for (int k = 0; k < B; ++k) wsum += wj[k];
      }
      wsum = klab::block_allreduce(wsum, klab::SumOp{}, A(0), red);
    } else {
      wsum = A(n);
    }
  }
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long r0 = blockIdx.x * (long long)blockDim.x + threadIdx.x; r0 < rows;
       r0 += B * step) {
    long long tv[B];
    A sv[B], wv[B];
#pragma unroll
    for (int k = 0; k < B; ++k) {  // every load of the batch before any store
      const long long r = r0 + k * step;
      tv[k] = r < rows ? target[r] : ignore_index;
      sv[k] = r < rows ? klab::to_acc(grad[grad_per_row ? r : 0]) : A(0);
    }
#pragma unroll
    for (int k = 0; k < B; ++k)
      wv[k] = tv[k] >= 0 && tv[k] < n ? klab::ce::weight_at(weight, int(tv[k]), n) : A(0);
#pragma unroll
    for (int k = 0; k < B; ++k) {
      const long long r = r0 + k * step, t = tv[k];
      if (r >= rows) break;
      A s = sv[k];
      if (mean) s /= den;
      A a = A(0), b = A(0), d = A(0);
      if (t != ignore_index) {
        if (t < 0 || t >= n) {
          a = b = d = A(CUDART_NAN);
        } else {
          b = s * (A(1) - A(eps)) * wv[k];
          d = s * A(eps) / A(n);
          a = b + d * wsum;
        }
      }
      coefs[3 * r] = a;
      coefs[3 * r + 1] = b;
      coefs[3 * r + 2] = d;
    }
  }
}


// The mean's denominator over many rows (cuda_variants.scan_blocks): block b sums w_t over rows
// [b chunk, (b + 1) chunk) (scan_kept_weight's order) into parts[b]; cross_entropy_coefs sums
// the parts. Grid: the parts, <= 1024.
template <typename T>
__global__ void __launch_bounds__(1024)
    cross_entropy_den_parts(Acc<T>* parts, const long long* target, long long rows,
                            long long chunk, int n, long long ignore_index, const T* weight) {
  using A = Acc<T>;
  constexpr int B = sizeof(A) == 8 ? klab::ce::kScanBatch / 2 : klab::ce::kScanBatch;
  __shared__ A red[32];
  const long long lo = blockIdx.x * chunk, hi = lo + chunk < rows ? lo + chunk : rows;
  A den = klab::ce::scan_kept_weight<T, B>(target, lo, hi, n, ignore_index, weight);
  den = klab::block_allreduce(den, klab::SumOp{}, A(0), red);
  if (threadIdx.x == 0) parts[blockIdx.x] = den;
}

// The in-place mode's backward: dx *= g for one upstream gradient g read on the device (no host
// sync). Every thread reads g first and returns when it is 1 (loss.backward()): no pass over dx
// then. Else a grid-stride loop over the rows x n elements of dx (row stride `stride`).
template <typename T>
__global__ void __launch_bounds__(256)
    cross_entropy_scale(T* dx, long long rows, int n, long long stride, const T* g) {
  using A = Acc<T>;
  const A s = klab::to_acc(g[0]);
  if (s == A(1)) return;
  const long long count = rows * n;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x) {
    const long long r = i / n, j = i - r * n;
    dx[r * stride + j] = klab::from_acc<T>(klab::to_acc(dx[r * stride + j]) * s);
  }
}
