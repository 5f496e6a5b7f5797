"""x *= s in place, with the scalar s read from device memory: scaling a gradient by its upstream
gradient (a 0-d CUDA tensor) needs no host sync. PyTorch's own ``x.mul_(s)`` with a 0-d CUDA
``s`` broadcasts it as a tensor operand and takes its unvectorized elementwise path: 2.0 ms for a
128256 x 4096 bf16 tensor on an H100, against 0.70 ms for ``x.mul_(0.5)``.

scale_kernel: program p owns elements [p * BLOCK, (p + 1) * BLOCK) of the flat contiguous x (64-bit
offsets: x may pass 2^31 elements); the product is taken in the promoted type of x and s (fp32 for
bf16 / fp16 x) and rounded once (bf16's mul_ rounds s to bf16 first). One read and one write of
x: a copy's cost; none when s is 1 (each program reads s alone).
"""

import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, s_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    s = tl.load(s_ptr)
    if s != 1:
        x = tl.load(x_ptr + offs, mask=mask)
        tl.store(x_ptr + offs, (x * s).to(x_ptr.dtype.element_ty, fp_downcast_rounding="rtne"),
                 mask=mask)
