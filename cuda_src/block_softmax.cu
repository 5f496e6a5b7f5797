// block_softmax: one BLOCK per row, threads stride the row, reductions through shared memory.
//
// Ownership: block `blockIdx.x` owns row blockIdx.x; thread t handles columns t, t + blockDim.x,
//            t + 2 * blockDim.x, ... (consecutive threads read consecutive addresses: coalesced).
// Launch:    grid = M blocks of blockDim.x threads (a multiple of 32, up to 1024, chosen from N);
//            static shared memory: 32 accumulators for the block reduction.
// Passes:    (1) max (block all-reduce), (2) sum of exp (block all-reduce), (3) write y.
// Bytes:     x is read three times from the memory system (passes 2 and 3 mostly hit L2/L1 for
//            rows of a few KB, not for long rows), y written once.
// Preconds:  any M < 2^31, N >= 1, any row stride, any alignment (scalar loads).
// Changed:   from naive_softmax: a block per row instead of a thread per row, so loads coalesce
//            and a long row is spread over up to 1024 threads; the reductions move to
//            warp shuffles + shared memory (softmax_common.cuh: block_allreduce).
#include "softmax_common.cuh"

template <typename T>
__global__ void __launch_bounds__(1024)
    block_softmax(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,
                  long long stride) {
  using A = klab::acc_t<T>;
  __shared__ A red[32];
  const T* xr = x + blockIdx.x * stride;
  T* yr = y + blockIdx.x * (long long)n;

  A m = klab::neg_inf<A>();
  for (int j = threadIdx.x; j < n; j += blockDim.x) m = klab::amax(m, klab::to_acc(xr[j]));
  m = klab::block_allreduce(m, klab::MaxOp{}, klab::neg_inf<A>(), red);

  const A ms = klab::safe_max(m);
  A s = A(0);
  for (int j = threadIdx.x; j < n; j += blockDim.x) s += klab::exp_acc(klab::to_acc(xr[j]) - ms);
  s = klab::block_allreduce(s, klab::SumOp{}, A(0), red);

  const A inv = A(1) / s;
  for (int j = threadIdx.x; j < n; j += blockDim.x)
    yr[j] = klab::from_acc<T>(klab::exp_acc(klab::to_acc(xr[j]) - m) * inv);
}
