"""Shared plumbing for CUDA C++ row-wise kernels: sources, dtypes, alignment, launches.

Every ``.cu`` the lab (or a user) launches is declared once as a :class:`CudaSource` - the file
plus the template instantiations (NVRTC "name expressions") it must provide. The declarations
land in :data:`SOURCES`, which the CPU test suite and ``python -m kernel_lab compile`` read:
there is no second hand-written list. Each instantiation is compiled on its own, when first
launched (:mod:`kernel_lab.cuda.jit`); which of them users can launch at all (the rest serve tuners
and tests) is :func:`kernel_lab.cuda.rowkernels.reachable.launchable`.

Kernel calling convention (see ``cuda_src/softmax_common.cuh``)::

    kernel<T, ...>(T* out, const T* in0, [const T* in1, ...] long long rows, int n,
                   long long in0_stride, [long long in1_stride, ...] [extra args...])

Inputs are (M, N) row views with unit column stride (``rows.rowwise`` makes them); the output
is a fresh contiguous (M, N) tensor.

Your own kernels, from your own folder, in a few lines
(:mod:`kernel_lab.core.user_kernels`)::

    from kernel_lab.core.user_kernels import register_row_kernel
    register_row_kernel("~/kernels/my_softmax.cu", op="softmax")   # kernel my_softmax<T>
    kernel_lab.run("my_softmax", x)

The file's folder and the lab's ``cuda_src/`` are include paths, so ``#include
"softmax_common.cuh"`` gives you the lab's reductions and vector loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch

from kernel_lab.base.inputs import ALL_DTYPES, FLOAT_DTYPES  # noqa: F401  (the lab's one dtype table)
from kernel_lab.cuda import interop, jit

CTYPES: dict[torch.dtype, str] = {
    torch.float32: "float",
    torch.float16: "__half",
    torch.bfloat16: "__nv_bfloat16",
    torch.float64: "double",
}


def ctype(dtype: torch.dtype) -> str:
    """C++ element type of a torch dtype (``torch.float16`` -> ``__half``)."""
    try:
        return CTYPES[dtype]
    except KeyError:
        raise TypeError(f"no CUDA element type for {dtype}") from None


def vec_width(dtype: torch.dtype) -> int:
    """Elements per 16-byte vector."""
    return 16 // dtype.itemsize  # no tensor allocation: this runs on every launch


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for positive ``b``, in integers (blocks to cover ``a`` items)."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def vec_aligned(*tensors2d: torch.Tensor) -> bool:
    """True if 16-byte vector access is safe for every row of every (M, N) view.

    Needs: base pointer 16-byte aligned, row stride a multiple of 16 bytes, and N * itemsize a
    multiple of 16 (so the contiguous output's rows are aligned too). A sliced input such as
    ``torch.randn(M * N + 1)[1:].view(M, N)`` fails this and takes the scalar path.
    """
    for t in tensors2d:
        es = t.element_size()
        m, n = t.shape
        if t.data_ptr() % 16 or (n * es) % 16 or (m > 1 and (t.stride(0) * es) % 16):
            return False
    return True


def same_vector_phase(out: torch.Tensor, *inputs2d: torch.Tensor) -> int:
    """1 if every row of every input starts at the same offset within 16 bytes as its row of
    the contiguous (M, N) ``out`` - then kernels using aligned 16-byte windows can vectorize even
    when the base pointer is not 16-byte aligned - else 0 (element-wise accesses)."""
    es, (m, n) = out.element_size(), out.shape
    for t in inputs2d:
        if (t.data_ptr() - out.data_ptr()) % 16 or (m > 1 and (t.stride(0) - n) * es % 16):
            return 0
    return 1


@dataclass
class CudaSource:
    """A ``.cu`` file and the name expressions (template instantiations) it must provide.

    ``launchable``: optional, ``launchable(arch)`` returns the instantiations a launcher can
    pick on that :class:`~kernel_lab.cuda.archs.Arch` (the default ``compile`` builds those
    only); None leaves it to :mod:`kernel_lab.cuda.rowkernels.reachable`, which derives it for
    the lab's own files and takes every instantiation of any other."""

    path: Path
    name_expressions: tuple[str, ...]
    include_dirs: tuple[Path, ...] = ()
    launchable: Callable[..., Iterable[str]] | None = field(default=None, repr=False,
                                                          compare=False)

    _module: jit.CudaModule | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def module(self) -> jit.CudaModule:
        if self._module is None:  # the process-wide module (it re-stats its files, rate-limited)
            self._module = jit.module(
                self.path, self.name_expressions, include_dirs=self.include_dirs
            )
        return self._module

    def function(self, expr: str, device_index: int):
        """The loaded kernel ``expr`` on ``device_index`` (compiled or reloaded as needed)."""
        return self.module.function(expr, device_index)


SOURCES: list[CudaSource] = []


def cuda_source(
    path: str | Path, name_expressions: Sequence[str], include_dirs: Sequence[str | Path] = (),
    launchable: Callable[..., Iterable[str]] | None = None,
) -> CudaSource:
    """Declare (and record in :data:`SOURCES`) a .cu file; relative paths are in cuda_src/."""
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = jit.cuda_src_dir() / p
    src = CudaSource(p.resolve(), tuple(name_expressions), tuple(Path(d) for d in include_dirs),
                     launchable)
    SOURCES.append(src)
    return src


def compile_targets() -> list[tuple[Path, tuple[str, ...]]]:
    """(file, name_expressions) of every declared source: what CI compiles for sm_90."""
    return [(s.path, s.name_expressions) for s in SOURCES]


def device_index(t: torch.Tensor) -> int:
    """The CUDA device ordinal of ``t`` (``get_device()``: no torch.device object per call)."""
    idx = t.get_device()
    return torch.cuda.current_device() if idx < 0 else idx


def launch_rows(
    src: CudaSource,
    expr: str,
    out2d: torch.Tensor,
    inputs2d: Sequence[torch.Tensor],
    *,
    grid: int,
    block: int,
    extra: tuple = (),
    shared_mem: int = 0,
) -> None:
    """Launch ``expr`` with the row-kernel convention: (out, inputs, M, N, strides, *extra).

    ``shared_mem`` bytes of dynamic shared memory: the kernel's limit is raised first for any
    amount (remembered per loaded function: no driver call on repeats), since dynamic plus static
    shared memory past 48 KB needs it - 48 KB of dynamic alone already fails
    (CUDA_ERROR_INVALID_VALUE on the H200: block_slots 1024 x 8 + 3)."""
    dev = device_index(out2d)
    fn = src.function(expr, dev)
    if shared_mem:
        jit.set_max_dynamic_shared(fn, shared_mem)
    m, n = out2d.shape
    k = len(inputs2d)
    signature = _ROW_SIGNATURES.get((k, *map(type, extra)))
    if signature is None:
        signature = _ROW_SIGNATURES[(k, *map(type, extra))] = (
            "Q" * (1 + k) + "q" + "i4x" + "q" * k + interop.slot_format(map(type, extra)))
    if k == 1:  # the common case, without generators (per-call hot path)
        x = inputs2d[0]
        args = (out2d.data_ptr(), x.data_ptr(), m, n, x.stride(0), *extra)
    else:
        args = (out2d.data_ptr(), *[t.data_ptr() for t in inputs2d], m, n,
                *[t.stride(0) for t in inputs2d], *extra)
    interop.launch(fn, (grid,), (block,), args, device_index=dev, shared_mem=shared_mem,
                   signature=signature, source=(src, expr))


# (number of inputs, *types of the extra arguments) -> pack_args signature of a row launch
_ROW_SIGNATURES: dict[tuple, str] = {}
