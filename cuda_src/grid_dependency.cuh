// Programmatic dependent launch (sm_90): a kernel launched with it (kernel_lab.cuda.interop's
// launch(..., programmatic=True)) may start while the kernel before it in the stream still runs,
// once every CTA of that one has called launch_dependents() or ended.
//   grid_dependency_wait()  returns once the kernel before has ended and its writes are visible;
//                           a dependent calls it before it reads what that kernel writes. At once
//                           in a kernel launched without the attribute (and before sm_90).
//   launch_dependents()     this CTA lets the next kernel start early (no effect when that one is
//                           launched without the attribute)
// Costs: one instruction each; the overlap is the next kernel's launch and its work up to its
// wait.
#pragma once

namespace klab {

__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace klab
