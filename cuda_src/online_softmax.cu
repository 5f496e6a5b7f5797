// online_softmax: a single online pass computes (max, sum) together, then one write pass.
//
// Ownership: block `blockIdx.x` owns row blockIdx.x; thread t reads columns t + k * blockDim.x,
//            four at a time (4 independent loads in flight, one rescale per 4 elements).
// Launch:    grid = M blocks of blockDim.x threads (multiple of 32, <= 1024, chosen from N);
//            static shared memory: 32 (max, sum) pairs for the block merge.
// Algorithm: each thread keeps a running (m, s) with s = sum exp(x - m); a new chunk with a
//            larger max rescales s by exp(m_old - m_new). States merge with warp shuffles, then
//            across warps through shared memory (softmax_common.cuh: merge, block_allreduce).
//            -inf - -inf is never formed (safe_max); NaN reaches s and so the whole row.
// Bytes:     x read twice (online pass + write pass), y written once: 3 * M * N * sizeof(T).
// Preconds:  none: any M < 2^31, any N >= 1, any row stride, any alignment, every dtype.
// Changed:   from block_softmax: max and sum fused into one pass (3 reads -> 2); unlike
//            warp_softmax, no row-length limit.
#include "softmax_common.cuh"

template <typename T>
__global__ void __launch_bounds__(1024)
    online_softmax(T* __restrict__ y, const T* __restrict__ x, long long rows, int n,
                   long long stride) {
  using A = klab::acc_t<T>;
  __shared__ klab::MaxSum<A> red[32];
  const T* xr = x + blockIdx.x * stride;
  T* yr = y + blockIdx.x * (long long)n;
  const int step = blockDim.x;

  klab::MaxSum<A> st = klab::maxsum_identity<A>();
  int j = threadIdx.x;
  for (; j + 3 * step < n; j += 4 * step) {
    const A v[4] = {klab::to_acc(xr[j]), klab::to_acc(xr[j + step]),
                    klab::to_acc(xr[j + 2 * step]), klab::to_acc(xr[j + 3 * step])};
    klab::online_update(st, v);
  }
  for (; j < n; j += step) {
    const A v[1] = {klab::to_acc(xr[j])};
    klab::online_update(st, v);
  }
  st = klab::block_allreduce(st, klab::MergeOp{}, klab::maxsum_identity<A>(), red);

  const A inv = A(1) / st.s;
  for (int k = threadIdx.x; k < n; k += step)
    yr[k] = klab::from_acc<T>(klab::exp_acc(klab::to_acc(xr[k]) - st.m) * inv);
}
