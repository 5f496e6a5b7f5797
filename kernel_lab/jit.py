"""cuda_src/*.cu -> launchable kernels, compiled at run time with NVRTC, reloaded when edited.

Decisions (measured or read in CuPy 14.2's source, see README "How the JIT works"):

* We compile with CuPy's NVRTC binding (``cupy.cuda.nvrtc``) and load the cubin with CuPy's
  ``cupy.cuda.function.Module``: the same pieces ``cupy.RawModule(code=..., name_expressions=...)``
  uses, minus two of its behaviours we cannot accept. RawModule's cache keys on the source text
  only, so an edited ``#include``d header silently runs the old binary; and it runs NVRTC once in
  every process (an empty-file preprocess) even when its disk cache is warm. Here the cache key is
  a digest of the ``.cu``, every header it includes, the options, the NVRTC version and the arch;
  a warm disk cache loads the cubin with no NVRTC call at all.
* The same ``compile_cubin`` runs on a GPU-less machine (CI): NVRTC needs no device.
* ``#line 1 "cuda_src/<file>.cu"`` is prepended so NVRTC errors name the real file and line, and
  ``-I <dir of the file>`` (plus user include dirs) resolves quoted includes.
* Hot reload: :meth:`CudaModule.function` re-stats the file and its headers (1-3 us each) when
  its last check is more than ``RELOAD_CHECK_S`` (1 ms) old, so any call that starts more than
  1 ms after a save runs the new code, and back-to-back calls do not pay a stat each. A change of
  contents recompiles; a failed compile raises :class:`KernelCompileError` with the NVRTC log.
  The last good module stays reachable through ``fallback=True`` only, never silently.
* Thread-safe: one lock per module; concurrent first calls compile once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import KernelCompileError

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
_ERROR_RE = re.compile(r"^(.*?\(\d+\)): (?:catastrophic )?error.*$", re.MULTILINE)
BASE_OPTIONS = ("-std=c++17", "-ftz=true")  # fp32 tolerances allow for flushed denormals
# Seconds between two re-stats of a module's files on the call path (env: milliseconds).
RELOAD_CHECK_S = float(os.environ.get("KERNEL_LAB_RELOAD_CHECK_MS", "1")) / 1000


def cuda_src_dir() -> Path:
    """The lab's own kernel folder (a checkout's ``cuda_src/`` or the installed package's)."""
    from . import cuda_src

    return Path(next(iter(cuda_src.__path__))).resolve()


def display_name(path: Path) -> str:
    """``cuda_src/x.cu`` for the lab's own files, the absolute path for anybody else's."""
    path = Path(path).resolve()
    root = cuda_src_dir()
    try:
        return f"cuda_src/{path.relative_to(root).as_posix()}"
    except ValueError:
        return str(path)


def cuda_include_dirs() -> list[str]:
    """Where the CUDA headers (cuda_fp16.h, cuda_bf16.h, ...) are, for NVRTC's -I."""
    found: list[str] = []
    candidates: list[Path] = []
    try:
        import nvidia  # pip wheels: nvidia-cuda-runtime / nvidia-cuda-nvrtc

        for base in nvidia.__path__:
            base = Path(base)
            candidates += [base / "cu13" / "include", base / "cu12" / "include"]
            candidates += [base / "cuda_runtime" / "include", base / "cuda_nvrtc" / "include"]
    except ImportError:
        pass
    for env in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(env):
            candidates.append(Path(os.environ[env]) / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    try:
        import cupy.cuda

        path = cupy.cuda.get_cuda_path()
        if path:
            candidates.append(Path(path) / "include")
    except Exception:  # noqa: BLE001 - CuPy absent or without a toolkit: keep looking
        pass
    for c in candidates:
        if (c / "cuda_fp16.h").is_file() and str(c) not in found:
            found.append(str(c))
    return found


def source_files(path: Path, include_dirs: Sequence[Path] = ()) -> list[Path]:
    """The ``.cu`` and every quoted ``#include`` it reaches (recursively), in a fixed order."""
    seen: list[Path] = []
    todo = [Path(path).resolve()]
    while todo:
        f = todo.pop(0)
        if f in seen:
            continue
        seen.append(f)
        for name in _INCLUDE_RE.findall(f.read_text()):
            for d in (f.parent, *include_dirs):
                cand = (Path(d) / name).resolve()
                if cand.is_file():
                    todo.append(cand)
                    break
    return seen


def digest(files: Iterable[Path], options: Sequence[str] = ()) -> str:
    """sha256 over the contents of every file and the options: the cache key's heart."""
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.name).encode() + b"\0" + Path(f).read_bytes() + b"\0")
    h.update("\0".join(options).encode())
    return h.hexdigest()[:32]


def nvrtc_version() -> tuple[int, int]:
    from cupy.cuda import nvrtc

    return tuple(nvrtc.getVersion())


@dataclass
class Compiled:
    cubin: bytes
    lowered: dict[str, str]  # name expression -> mangled name
    log: str


def compile_cubin(
    path: Path,
    name_expressions: Sequence[str],
    *,
    arch: str = "sm_90",
    include_dirs: Sequence[Path] = (),
    options: Sequence[str] = (),
    key: str = "",
) -> Compiled:
    """Compile ``path`` with NVRTC into a cubin. Needs no GPU. Raises KernelCompileError."""
    from cupy.cuda import nvrtc

    path = Path(path).resolve()
    shown = display_name(path)
    code = f'#line 1 "{shown}"\n' + path.read_text()
    opts = [
        *BASE_OPTIONS,
        f"-arch={arch}",
        f"-I{path.parent}",
        *(f"-I{d}" for d in include_dirs),
        *(f"-I{d}" for d in cuda_include_dirs()),
        *options,
    ]
    if key:
        opts.append(f"-DKLAB_SRC_HASH=0x{key[:16]}")
    prog = nvrtc.createProgram(code, shown, [], [])
    try:
        for expr in name_expressions:
            nvrtc.addNameExpression(prog, expr)
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError as e:
            log = nvrtc.getProgramLog(prog)
            first = _ERROR_RE.search(log)
            head = first.group(0) if first else f"{shown}: {e}"
            raise KernelCompileError(
                f"{head}\n--- NVRTC log for {shown} ({arch}) ---\n{log}", log=log, source=shown
            ) from None
        log = nvrtc.getProgramLog(prog)
        lowered = {expr: nvrtc.getLoweredName(prog, expr) for expr in name_expressions}
        return Compiled(nvrtc.getCUBIN(prog), lowered, log)
    finally:
        nvrtc.destroyProgram(prog)


def cache_dir() -> Path:
    """Disk cache of cubins: $KERNEL_LAB_CACHE_DIR, else ~/.cache/kernel_lab."""
    base = os.environ.get("KERNEL_LAB_CACHE_DIR") or Path.home() / ".cache" / "kernel_lab"
    return Path(base)


class CudaModule:
    """One ``.cu`` file, compiled per device on first use, recompiled when it or a header changes.

    ``function(expr, device_index)`` returns a CuPy ``Function`` ready to launch; the caller passes
    the stream (see :func:`kernel_lab.interop.launch`).
    """

    compile_count = 0  # NVRTC invocations in this process (tests read it)

    def __init__(
        self,
        path: str | Path,
        name_expressions: Sequence[str],
        *,
        include_dirs: Sequence[str | Path] = (),
        options: Sequence[str] = (),
    ) -> None:
        p = Path(path)
        if not p.is_absolute() and not p.exists():
            p = cuda_src_dir() / p
        self.path = p.resolve()
        if not self.path.is_file():
            raise FileNotFoundError(f"CUDA source not found: {path}")
        self.name_expressions = tuple(name_expressions)
        self.include_dirs = tuple(Path(d).resolve() for d in include_dirs)
        self.options = tuple(options)
        self._lock = threading.Lock()
        self._stamp: tuple | None = None  # (mtime_ns, size) of every file at last check
        self._checked_at = float("-inf")  # time.monotonic() of the last check by function()
        self._files: list[Path] = []
        self._file_strs: list[str] = []
        self._key = ""
        self._loaded: dict[int, tuple[str, object, dict]] = {}  # device -> (key, Module, funcs)
        self._last_good: dict[int, tuple[str, object, dict]] = {}
        # device -> (source key, error) of its last failed compile: an unchanged broken file
        # raises again without another NVRTC run (a loop over a broken kernel recompiled each call)
        self._failed: dict[int, tuple[str, KernelCompileError]] = {}

    @property
    def display_name(self) -> str:
        return display_name(self.path)

    # -- change detection -------------------------------------------------------------------
    def _stat(self) -> tuple:
        # The per-call hot path: plain-string os.stat, mtime and size only (~0.5 us a file).
        stat = os.stat
        return tuple((st.st_mtime_ns, st.st_size) for st in map(stat, self._file_strs))

    def source_key(self) -> str:
        """Digest of the file, its headers and options; re-read only when a stat changed."""
        stamp = self._stat() if self._files else None
        if stamp is None or stamp != self._stamp:
            files = source_files(self.path, self.include_dirs)
            key = digest(files, self.options + self.name_expressions)
            self._files, self._key = files, key
            self._file_strs = [str(f) for f in files]
            self._stamp = self._stat()
        return self._key

    @property
    def files(self) -> list[Path]:
        self.source_key()
        return list(self._files)

    # -- compile / load ---------------------------------------------------------------------
    def cubin(self, arch: str) -> Compiled:
        """Compiled cubin for ``arch``: from the disk cache, else NVRTC (then cached)."""
        key = self.source_key()
        ver = ".".join(map(str, nvrtc_version()))
        full = hashlib.sha256(f"{key}|{arch}|nvrtc{ver}".encode()).hexdigest()[:40]
        cdir = cache_dir()
        bin_path, meta_path = cdir / f"{full}.cubin", cdir / f"{full}.json"
        if bin_path.is_file() and meta_path.is_file():
            try:
                meta = json.loads(meta_path.read_text())
                return Compiled(bin_path.read_bytes(), meta["lowered"], meta.get("log", ""))
            except (OSError, ValueError, KeyError):
                pass  # a torn cache entry: rebuild it
        type(self).compile_count += 1
        out = compile_cubin(
            self.path,
            self.name_expressions,
            arch=arch,
            include_dirs=self.include_dirs,
            options=self.options,
            key=key,
        )
        try:
            cdir.mkdir(parents=True, exist_ok=True)
            tmp = bin_path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(out.cubin)
            os.replace(tmp, bin_path)
            meta = {"lowered": out.lowered, "log": out.log, "source": self.display_name}
            tmp.write_text(json.dumps(meta))
            os.replace(tmp, meta_path)
        except OSError:
            pass  # read-only home: still works, just without the disk cache
        return out

    def function(self, expr: str, device_index: int, *, fallback: bool = False):
        """CuPy Function for ``expr`` on ``device_index``, recompiling if the source changed.

        With ``fallback=True`` a failing edit returns the last good build instead of raising.
        Files are re-checked when the last check is over ``RELOAD_CHECK_S`` old (see top).
        """
        now = time.monotonic()
        if now - self._checked_at >= RELOAD_CHECK_S or not self._key:
            self._checked_at = now  # before the stat: a save during it is caught next time
            key = self.source_key()
        else:
            key = self._key
        entry = self._loaded.get(device_index)
        if entry is None or entry[0] != key:
            with self._lock:
                entry = self._loaded.get(device_index)
                if entry is None or entry[0] != key:
                    try:
                        failed = self._failed.get(device_index)
                        if failed is not None and failed[0] == key:
                            e = failed[1]
                            raise KernelCompileError(str(e), e.log, e.source)
                        entry = self._load(device_index, key)
                    except KernelCompileError as e:
                        self._failed[device_index] = (key, e)
                        if fallback and device_index in self._last_good:
                            entry = self._last_good[device_index]
                        else:
                            raise
        funcs = entry[2]
        fn = funcs.get(expr)
        if fn is None:
            lowered = entry[1].mapping  # type: ignore[attr-defined]
            if expr not in lowered:
                raise KeyError(f"{self.display_name} has no name expression {expr!r}")
            # CuPy's low-level Module.get_function takes the mangled symbol, not the expression.
            fn = funcs[expr] = entry[1].get_function(lowered[expr])  # type: ignore[attr-defined]
            _names[id(fn)] = expr  # fn lives as long as its module entry (kept): id is stable
        return fn

    def _load(self, device_index: int, key: str):
        import cupy
        from cupy.cuda import function

        with cupy.cuda.Device(device_index) as dev:
            arch = f"sm_{dev.compute_capability}"
            out = self.cubin(arch)
            mod = function.Module()
            mod.load(out.cubin)
            mod._set_mapping(dict(out.lowered))
        entry = (key, mod, {})
        self._loaded[device_index] = entry
        self._last_good[device_index] = entry
        return entry


_names: dict[int, str] = {}  # id(CuPy Function) -> its name expression (kernel_name)


def kernel_name(fn: Any) -> str | None:
    """The name expression (e.g. ``fast_softmax_block<float, 4>``) of a Function that
    :meth:`CudaModule.function` returned, else None."""
    return _names.get(id(fn))


_modules: dict[tuple, CudaModule] = {}
_modules_lock = threading.Lock()


def module(path: str | Path, name_expressions: Sequence[str], **kw) -> CudaModule:
    """The process-wide :class:`CudaModule` for ``path`` (created on first use, then reused)."""
    key = (str(path), tuple(name_expressions), tuple(sorted((k, str(v)) for k, v in kw.items())))
    m = _modules.get(key)
    if m is None:
        with _modules_lock:
            m = _modules.get(key)
            if m is None:
                m = _modules[key] = CudaModule(path, name_expressions, **kw)
    return m


def function_attributes(fn) -> dict[str, int]:
    """Registers, spill (local) bytes, static shared memory and max threads of a loaded kernel."""
    from cupy.cuda import driver

    attrs = {
        "num_regs": driver.CU_FUNC_ATTRIBUTE_NUM_REGS,
        "local_size_bytes": driver.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
        "shared_size_bytes": driver.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
        "max_threads_per_block": driver.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
    }
    return {name: driver.funcGetAttribute(a, fn.ptr) for name, a in attrs.items()}


# loaded function's handle -> (the function, kept alive so the handle is not reused; its limit)
_shared_limits: dict[int, tuple[object, int]] = {}


def set_max_dynamic_shared(fn, nbytes: int) -> None:
    """Allow at least ``nbytes`` of dynamic shared memory (needed above 48 KB).

    The limit only ever rises: it is one attribute of the loaded function, shared by every
    launch of it, so lowering it for a small CTA would make a cached larger launch of the same
    kernel fail with CUDA_ERROR_INVALID_VALUE (seen on the H200: persist bf16 1024 threads after
    64 threads). Remembered per loaded function, so a launch path may call it every time without
    a driver call (a hot reload loads a new function, which asks again).
    """
    known = _shared_limits.get(fn.ptr)
    if known is not None and known[0] is fn and known[1] >= nbytes:
        return
    from cupy.cuda import driver

    attr = driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    limit = driver.funcGetAttribute(attr, fn.ptr)
    if limit < nbytes:
        driver.funcSetAttribute(fn.ptr, attr, int(nbytes))
        limit = int(nbytes)
    _shared_limits[fn.ptr] = (fn, limit)
