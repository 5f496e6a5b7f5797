"""Registers, spills and machine-code digests of a ``.cu`` file's kernels - no GPU needed.

    python -m kernel_lab resources fast_softmax --n 50257 --dtype bf16   # what that launches
    python -m kernel_lab resources fast_softmax                # every instantiation
    python -m kernel_lab resources fast_softmax -k persist     # names containing "persist"
    python -m kernel_lab resources fused_softmax_backward --arch sm_90 --digests

    python -m kernel_lab resources fast_softmax -k "wide<float, 16>" --opcodes   # SASS mix
    python -m kernel_lab resources fast_softmax -k "wide<float, 16>" --sass > wide.sass

NVRTC compiles each instantiation asked for on its own (the JIT's programs, through its disk
cache; several at once in a process pool: ``-j``) - with ``--n`` / ``--dtype`` only the one the
variant's launch shape for that row length. This module reads the cubins' ELF directly:
per kernel the register count (``EIATTR_REGCOUNT``), the stack frame, which is where spilled
registers go (``EIATTR_FRAME_SIZE``), its static shared memory (the size of its
``.nv.shared.<kernel>`` section: the 1 KB the hardware reserves plus the kernel's own; dynamic
shared memory starts where it ends) and a digest of its ``.text`` section. Compiled alone, a
kernel without shared memory of its own has no such section (0 B), and the window of one with
some is not padded to the 128-byte alignment another kernel of a whole-file program asked for
(cluster kernels: 1288 B, not 1408 B); the machine code is byte-identical either way.
Digests answer "did my refactor change the machine code?" (equal digests: byte-identical SASS).
``--sass`` / ``--opcodes`` disassemble with ``cuobjdump -sass`` (the CUDA toolkit's, or the
``nvidia-cuda-cuobjdump`` / ``nvidia-cuda-nvdisasm`` wheels of the ``nvrtc`` extra): the listing,
or static instruction counts per opcode - where a kernel's instructions go (address and bounds
arithmetic, exps, loads) without a GPU.

The numbers are those of *this* machine's NVRTC: the GPU machine's CUDA version may allocate
registers differently (seen here: 0 vs 24 spill bytes for one kernel), so read them as a lead
and confirm with ``jit.function_attributes`` on the GPU.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import hashlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

_SVAL = 0x04  # EIFMT_SVAL: u16 size, then payload (u32 symbol index, u32 value, ...)
_FRAME_SIZE, _REGCOUNT = 0x11, 0x2F  # EIATTR_FRAME_SIZE, EIATTR_REGCOUNT


@dataclasses.dataclass(frozen=True)
class KernelResources:
    name: str  # the name expression (e.g. "fast_softmax_block<float, 8>") or mangled symbol
    registers: int
    frame_bytes: int  # per-thread stack frame: spilled registers live here
    text_digest: str  # sha256 prefix of the kernel's machine code
    # Static shared memory window (1 KB reserved + the kernel's own), where dynamic shared
    # memory begins: cp.async into slots that start off a 128-byte line fetches every 32-byte
    # sector twice (Nsight on the H200: 2x the L2 read sectors of the same kernel on lines).
    static_shared: int = 0

    @property
    def spills(self) -> bool:
        return self.frame_bytes > 0


def _sections(data: bytes) -> list[tuple[str, int, int, int]]:
    """(name, offset, size, info) of every ELF64 section (NOBITS ones such as shared memory
    have a size but no bytes at ``offset``)."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not an ELF64 cubin")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = raw[shstrndx][4]

    def cstr(off: int) -> str:
        return data[strtab + off:data.index(b"\0", strtab + off)].decode()

    return [(cstr(r[0]), r[4], r[5], r[7]) for r in raw]


def cubin_resources(data: bytes) -> dict[str, KernelResources]:
    """Mangled kernel symbol -> its resources, from a cubin's bytes."""
    secs = {name: (off, size, info) for name, off, size, info in _sections(data)}
    sym_off, sym_size, _ = secs[".symtab"]
    str_off = secs[".strtab"][0]
    symbols = []
    for i in range(sym_size // 24):
        name_off = struct.unpack_from("<I", data, sym_off + i * 24)[0]
        symbols.append(data[str_off + name_off:data.index(b"\0", str_off + name_off)].decode())
    attrs: dict[str, dict[int, int]] = {}
    off, size, _ = secs.get(".nv.info", (0, 0, 0))
    i = 0
    while i + 4 <= size:
        fmt, attr, length = data[off + i], data[off + i + 1], struct.unpack_from(
            "<H", data, off + i + 2)[0]
        if fmt == _SVAL and attr in (_FRAME_SIZE, _REGCOUNT) and length >= 8:
            sym, value = struct.unpack_from("<II", data, off + i + 4)
            attrs.setdefault(symbols[sym], {})[attr] = value
        i += 4 + (length if fmt == _SVAL else 0)
    shared = {name[len(".nv.shared."):]: size for name, (_, size, _) in secs.items()
              if name.startswith(".nv.shared.")}
    out = {}
    for name, (t_off, t_size, info) in secs.items():
        if not name.startswith(".text."):
            continue
        sym = name[len(".text."):]
        a = attrs.get(sym, {})
        digest = hashlib.sha256(data[t_off:t_off + t_size]).hexdigest()[:16]
        out[sym] = KernelResources(sym, a.get(_REGCOUNT, info >> 24), a.get(_FRAME_SIZE, 0),
                                   digest, shared.get(sym, 0))
    return out


def elf_size(data: bytes) -> int:
    """The file size an ELF64 image's headers call for: the end of its program header table,
    section header table and furthest section with file contents. NVRTC cubins fetched through
    CuPy come out one byte short of it (the last program header's last byte); the driver loads
    them, cuobjdump refuses them ("does not contain device code")."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not an ELF64 cubin")
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    end = max(phoff + phentsize * phnum, shoff + shentsize * shnum)
    for i in range(shnum):
        sh_type, = struct.unpack_from("<I", data, shoff + i * shentsize + 4)
        off, size = struct.unpack_from("<QQ", data, shoff + i * shentsize + 0x18)
        if sh_type != 8:  # SHT_NOBITS (shared memory, .bss) takes no file bytes
            end = max(end, off + size)
    return end


def _tool(name: str) -> str | None:
    """A CUDA binary tool: on PATH (a CUDA toolkit), else from the nvidia-cuda-* wheels."""
    found = shutil.which(name)
    if found:
        return found
    try:
        import nvidia  # namespace package of the NVIDIA wheels
    except ImportError:
        return None
    for base in nvidia.__path__:
        for cand in sorted(Path(base).glob(f"cu*/bin/{name}"), reverse=True):
            return str(cand)
    return None


SASS_TOOLS_MISSING = ("cuobjdump / nvdisasm not found: install a CUDA toolkit or "
                      "pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")


def sass_tools() -> tuple[str, str] | None:
    """(cuobjdump, nvdisasm) as :func:`kernel_sass` runs them, or None where either is missing
    (then it raises ``SASS_TOOLS_MISSING``; tests skip with that reason)."""
    cuobjdump, nvdisasm = _tool("cuobjdump"), _tool("nvdisasm")
    return (cuobjdump, nvdisasm) if cuobjdump and nvdisasm else None


def kernel_sass(cubin: bytes, symbol: str) -> str:
    """``cuobjdump -sass`` of one kernel (mangled ``symbol``) of a cubin."""
    tools = sass_tools()
    if tools is None:
        raise RuntimeError(SASS_TOOLS_MISSING)
    cuobjdump, nvdisasm = tools
    path_var = str(Path(nvdisasm).parent) + os.pathsep + os.environ.get("PATH", "")
    env = dict(os.environ, PATH=path_var)  # cuobjdump runs nvdisasm from PATH
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernels.cubin"
        path.write_bytes(cubin + b"\0" * max(0, elf_size(cubin) - len(cubin)))
        res = subprocess.run([cuobjdump, "-sass", "-fun", symbol, str(path)], env=env,
                             capture_output=True, text=True, timeout=300)
    if res.returncode != 0 or "Function :" not in res.stdout:
        raise RuntimeError(f"cuobjdump -sass failed for {symbol}: "
                           f"{(res.stderr or res.stdout).strip()[:500]}")
    return res.stdout


_INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z][A-Z0-9_]*)", re.M)


def opcode_counts(sass: str) -> collections.Counter:
    """Static count of each opcode (IMAD, MUFU, LDG, ...: modifiers dropped) in a listing."""
    return collections.Counter(_INSTRUCTION.findall(sass))


def compiled_instantiations(src, exprs, arch: str = "sm_90", jobs: int | None = None,
                            progress: bool = False) -> dict:
    """name expression -> jit.Compiled for each of ``exprs`` of a CudaSource, each its own NVRTC
    program through the disk cache (the JIT's builds); what the cache lacks compiles in ``jobs``
    processes. Raises KernelCompileError for the first that fails."""
    from kernel_lab.base.errors import KernelCompileError
    from kernel_lab.cli import precompile
    from kernel_lab.cuda import jit

    exprs = list(exprs)
    jobs_ = [precompile.job_for(src, e) for e in exprs]
    for o in precompile.compile_jobs(jobs_, arch, jobs, progress, label=src.path.name):
        if o.error:
            raise KernelCompileError(o.error)
    mod = jit.CudaModule(src.path, exprs, include_dirs=src.include_dirs)
    return {e: mod.cubin(arch, e) for e in exprs}


def _selected(src, contains: str | None, exprs=None) -> list[str]:
    names = src.name_expressions if exprs is None else exprs
    return [e for e in names if contains is None or contains in e]


def source_sass(src, arch: str = "sm_90", contains: str | None = None, exprs=None,
                jobs: int | None = None) -> list[tuple[str, str]]:
    """(name expression, SASS listing) of a source's instantiations (``exprs``, default all)
    whose name contains ``contains`` (all if None), in declaration order."""
    built = compiled_instantiations(src, _selected(src, contains, exprs), arch, jobs)
    return [(e, kernel_sass(out.cubin, out.lowered[e])) for e, out in built.items()]


def source_resources(src, arch: str = "sm_90", contains: str | None = None, exprs=None,
                     jobs: int | None = None, progress: bool = False) -> list[KernelResources]:
    """Resources of a :class:`~kernel_lab.cuda.sources.CudaSource`'s instantiations (``exprs``,
    default all) whose name contains ``contains`` (all if None): only those are compiled, each
    on its own; under their name expressions, in declaration order."""
    rows = []
    built = compiled_instantiations(src, _selected(src, contains, exprs), arch, jobs, progress)
    for e, out in built.items():
        by_symbol = cubin_resources(out.cubin)
        if out.lowered.get(e, "") in by_symbol:
            rows.append(dataclasses.replace(by_symbol[out.lowered[e]], name=e))
    return rows


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="a CUDA variant (its .cu file's instantiations are compiled)")
    p.add_argument("--n", type=int, default=None,
                   help="only what rows of N elements launch (the variant's launch shape for "
                        "contiguous rows; without one, every alignment's pick)")
    p.add_argument("--dtype", default=None,
                   help="with --n: the element type (default float32): fp32/float32, "
                        "fp16/float16, bf16/bfloat16, fp64/float64; alone: only its kernels")
    p.add_argument("-k", dest="contains", default=None,
                   help="only instantiations whose name contains this text")
    p.add_argument("--arch", default="sm_90", help="NVRTC target (default sm_90)")
    p.add_argument("--digests", action="store_true", help="print machine-code digests too")
    p.add_argument("--sass", action="store_true",
                   help="print each kernel's SASS (cuobjdump -sass) and its opcode counts")
    p.add_argument("--opcodes", action="store_true",
                   help="print each kernel's static opcode counts (most frequent first)")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                   help="compiler processes for many instantiations (default: every CPU)")


def _shaped(variant, src, n: int | None, dtype) -> tuple[list[str], str]:
    """(instantiations, the line saying why) for ``--n`` / ``--dtype``."""
    from kernel_lab.cuda.rowkernels import reachable
    from kernel_lab.cuda.sources import ctype

    if n is None:
        if dtype is None:
            return list(src.name_expressions), ""
        t = ctype(dtype)
        return [e for e in src.name_expressions if f"<{t}>" in e or f"<{t}," in e], ""
    shape = getattr(variant.fn, "launch_shape", None)
    if shape is None:
        exprs = reachable.launched(src, n, dtype)
        return exprs, f"launches (any alignment): {', '.join(exprs) or 'nothing'}"
    text = shape(n, dtype)
    found = [e for e in src.name_expressions if e in text]
    return sorted(found, key=len)[-1:], f"launches (contiguous rows) {text}"


def main(args: argparse.Namespace) -> int:
    from kernel_lab.base.errors import KernelLabError
    from kernel_lab.core import registry
    from kernel_lab.cuda import archs, jit
    from kernel_lab.cuda import sources as cuda_common

    try:  # an unknown arch: one line, before any compile
        archs.get_arch(args.arch)
    except ValueError as e:
        raise KernelLabError(str(e)) from None
    variant = registry.get(args.name)
    if variant.backend != "cuda" or not variant.source:
        print(f"kernel_lab resources: {variant.name} is a {variant.backend} variant; "
              "resources reads CUDA variants' .cu files")
        return 2
    sources = [s for s in cuda_common.SOURCES if jit.display_name(s.path) == variant.source]
    if not sources:
        print(f"kernel_lab resources: no declared source {variant.source} for {variant.name}")
        return 2
    dtype = None
    if args.dtype is not None or args.n is not None:
        from kernel_lab.measure.benchmarking import parse_dtype

        try:
            dtype = parse_dtype(args.dtype or "float32")
        except ValueError as e:
            raise KernelLabError(str(e)) from None
        if dtype not in variant.dtypes:
            raise KernelLabError(f"{variant.name} does not take {dtype}")
    picked = {}
    for s in sources:
        exprs, why = _shaped(variant, s, args.n, dtype)
        if why:
            print(f"{variant.name}, rows of {args.n} {str(dtype)[6:]}: {why}", flush=True)
        picked[id(s)] = _selected(s, args.contains, exprs)
    rows = [r for s in sources for r in source_resources(
        s, args.arch, exprs=picked[id(s)], jobs=args.jobs, progress=True)]
    width = max((len(r.name) for r in rows), default=10)
    nvrtc = ".".join(map(str, jit.nvrtc_version()))
    print(f"{variant.source} ({args.arch}, this machine's NVRTC {nvrtc}): registers, stack frame"
          " (spills) per thread, static shared memory (incl. 1 KB reserved if any) per CTA")
    for r in rows:
        flag = "  SPILLS" if r.spills else ""
        digest = f"  {r.text_digest}" if args.digests else ""
        print(f"  {r.name:<{width}}  {r.registers:3d} regs  {r.frame_bytes:4d} B"
              f"  {r.static_shared:5d} B shared{digest}{flag}")
    spilling = sum(r.spills for r in rows)
    print(f"{len(rows)} kernels, {spilling} with a stack frame")
    if args.sass or args.opcodes:
        try:
            listings = [x for s in sources
                        for x in source_sass(s, args.arch, exprs=picked[id(s)], jobs=args.jobs)]
        except RuntimeError as exc:
            print(f"kernel_lab resources: {exc}")
            return 2
        for name, sass in listings:
            counts = opcode_counts(sass)
            if args.sass:
                print(f"\n== {name}\n{sass.rstrip()}")
            top = ", ".join(f"{op} {k}" for op, k in counts.most_common(16))
            print(f"{name}: {sum(counts.values())} instructions (static): {top}")
    return 0
