"""cuda_src/*.cu -> launchable kernels, compiled at run time with NVRTC, one template
instantiation at a time, reloaded when edited.

Decisions (measured or read in CuPy 14.2's source, see README "How the JIT works"):

* We compile with CuPy's NVRTC binding (``cupy.cuda.nvrtc``) and load the cubin with CuPy's
  ``cupy.cuda.function.Module``: the same pieces ``cupy.RawModule(code=..., name_expressions=...)``
  uses, minus two of its behaviours we cannot accept. RawModule's cache keys on the source text
  only, so an edited ``#include``d header silently runs the old binary; and it runs NVRTC once in
  every process (an empty-file preprocess) even when its disk cache is warm.
* One NVRTC program per name expression (instantiation), compiled when it is first launched: a
  file declaring 156 instantiations cost a minute after any header edit when they were one
  program; one instantiation costs 0.1-1 s. Its cache key (:meth:`CudaModule.cache_key`) is a
  digest of the ``.cu``, every header it includes (contents, not paths), the options, the
  expression, the NVRTC version and the arch, so a cache filled on one machine is warm on
  another; a warm disk cache loads the cubin with no NVRTC call at all.
* The same ``compile_cubin`` runs on a GPU-less machine (CI): NVRTC needs no device.
* ``#line 1 "cuda_src/<file>.cu"`` is prepended so NVRTC errors name the real file and line, and
  ``-I <dir of the file>`` (plus user include dirs) resolves quoted includes.
* Hot reload: :meth:`CudaModule.function` re-stats the file and its headers (1-3 us each) when
  its last check is more than ``RELOAD_CHECK_S`` (1 ms) old, or ``STAT_SHARE`` times that
  check's own cost if longer (fast_softmax.cu's 13 files: 23-37 us on an H100 machine: 2-4 ms),
  so any call that starts that long after a save runs the new code, and back-to-back calls pay
  at most 1 % of their time for it. A change of
  contents makes every loaded instantiation of the file stale; each recompiles when it is next
  launched, the others not at all. A failed compile raises :class:`KernelCompileError` with the
  NVRTC log, and an unchanged broken source raises again without another NVRTC run. The last
  good build of an instantiation stays reachable through ``fallback=True`` only, never silently.
* Thread-safe: one lock per instantiation; concurrent first calls compile once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from kernel_lab.base.errors import KernelCompileError

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
_ERROR_RE = re.compile(r"^(.*?\(\d+\)): (?:catastrophic )?error.*$", re.MULTILINE)
BASE_OPTIONS = ("-std=c++17", "-ftz=true")  # fp32 tolerances allow for flushed denormals
# Seconds between two re-stats of a module's files on the call path (env: milliseconds).
RELOAD_CHECK_S = float(os.environ.get("KERNEL_LAB_RELOAD_CHECK_MS", "1")) / 1000
STAT_SHARE = 100  # ... or this many times a re-check's cost, if longer (0 ms: every call checks)
# The clock that interval is measured on (tests put a fake one here)
clock = time.monotonic


def cuda_src_dir() -> Path:
    """The lab's own kernel folder (a checkout's ``cuda_src/`` or the installed package's)."""
    from kernel_lab import cuda_src

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


@functools.lru_cache(maxsize=1)
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
    """Compile ``path`` with NVRTC into a cubin holding ``name_expressions`` (the loader passes
    one). Needs no GPU. Raises KernelCompileError naming ``file(line)``."""
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
            what = ", ".join(name_expressions)
            raise KernelCompileError(
                f"{head}\n--- NVRTC log for {shown} ({arch}: {what}) ---\n{log}",
                log=log, source=shown,
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


def _read_cached(full: str) -> Compiled | None:
    cdir = cache_dir()
    bin_path, meta_path = cdir / f"{full}.cubin", cdir / f"{full}.json"
    if not (bin_path.is_file() and meta_path.is_file()):
        return None
    try:
        meta = json.loads(meta_path.read_text())
        return Compiled(bin_path.read_bytes(), meta["lowered"], meta.get("log", ""))
    except (OSError, ValueError, KeyError):
        return None  # a torn cache entry: rebuild it


def _write_cached(full: str, out: Compiled, source: str) -> None:
    cdir = cache_dir()
    try:
        cdir.mkdir(parents=True, exist_ok=True)
        tmp = cdir / f"{full}.tmp{os.getpid()}-{threading.get_ident()}"
        tmp.write_bytes(out.cubin)
        os.replace(tmp, cdir / f"{full}.cubin")
        tmp.write_text(json.dumps({"lowered": out.lowered, "log": out.log, "source": source}))
        os.replace(tmp, cdir / f"{full}.json")  # written last: readers need both
    except OSError:
        pass  # read-only home: still works, just without the disk cache


def _device_arch(device_index: int) -> str:
    """``sm_XY`` of a CUDA device (the loader compiles for the device it loads on)."""
    import cupy

    return f"sm_{cupy.cuda.Device(device_index).compute_capability}"


def _load_function(cubin: bytes, symbol: str, device_index: int):
    """Load ``cubin`` on ``device_index``; its kernel ``symbol`` (mangled) as a CuPy Function."""
    import cupy
    from cupy.cuda import function

    with cupy.cuda.Device(device_index):
        mod = function.Module()
        mod.load(cubin)
        return mod.get_function(symbol)  # the Function keeps its Module loaded


class CudaModule:
    """One ``.cu`` file and its declared instantiations, each compiled on first use per device
    and recompiled when the file or a header it includes changes.

    ``function(expr, device_index)`` returns a CuPy ``Function`` ready to launch; the caller passes
    the stream (see :func:`kernel_lab.cuda.interop.launch`).
    """

    compile_count: ClassVar[int] = 0  # NVRTC invocations in this process (tests read it)
    # (file shown as in errors, name expression) of each of those invocations, in order
    compile_log: ClassVar[list[tuple[str, str]]] = []

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
        self._declared = frozenset(self.name_expressions)
        self.include_dirs = tuple(Path(d).resolve() for d in include_dirs)
        self.options = tuple(options)
        self._lock = threading.Lock()
        self._expr_locks: dict[str, threading.Lock] = {}
        self._stamp: tuple | None = None  # (mtime_ns, size) of every file at last check
        # clock() time the files are next re-stat'd (function(); a replayed launch reads it too)
        self.due_at = float("-inf")
        self._recheck_s = 0.0  # seconds to the next re-stat (see top), set by each re-stat
        self._files: list[Path] = []
        self._file_strs: list[str] = []
        self.key = ""  # the sources' digest at the last re-stat ("" before the first)
        # (device, expr) -> (source key, Function) of the loaded build, and of the last good one
        self._loaded: dict[tuple[int, str], tuple[str, Any]] = {}
        self._last_good: dict[tuple[int, str], tuple[str, Any]] = {}
        # (device, expr) -> (source key, error) of its last failed compile: an unchanged broken
        # source raises again without another NVRTC run (a loop would recompile on every call)
        self._failed: dict[tuple[int, str], tuple[str, KernelCompileError]] = {}
        # cubins compiled in this process for the current source key: (expr, arch) -> Compiled
        self._memo: tuple[str, dict[tuple[str, str], Compiled]] = ("", {})

    @property
    def display_name(self) -> str:
        return display_name(self.path)

    # -- change detection -------------------------------------------------------------------
    def _stat(self) -> tuple:
        # The per-call hot path: plain-string os.stat, mtime and size only (~0.5 us a file).
        stat = os.stat
        return tuple((st.st_mtime_ns, st.st_size) for st in map(stat, self._file_strs))

    def source_key(self) -> str:
        """Digest of the file, its headers and options; re-read only when a stat changed. Every
        instantiation of the file includes the same files, so they share it."""
        t0 = clock()
        stamp = self._stat() if self._files else None
        self._recheck_s = RELOAD_CHECK_S and max(RELOAD_CHECK_S, STAT_SHARE * (clock() - t0))
        if stamp is None or stamp != self._stamp:
            files = source_files(self.path, self.include_dirs)
            key = digest(files, self.options)
            self._files, self.key = files, key
            self._file_strs = [str(f) for f in files]
            self._stamp = self._stat()
        return self.key

    @property
    def files(self) -> list[Path]:
        self.source_key()
        return list(self._files)

    def cache_key(self, expr: str, arch: str, source_key: str | None = None) -> str:
        """The disk cache's name for ``expr`` compiled for ``arch``: the sources' digest, the
        expression, the NVRTC version and the arch - no path, no machine."""
        key = self.source_key() if source_key is None else source_key
        ver = ".".join(map(str, nvrtc_version()))
        return hashlib.sha256(f"{key}|{expr}|{arch}|nvrtc{ver}".encode()).hexdigest()[:40]

    def is_cached(self, expr: str, arch: str) -> bool:
        """Whether the disk cache holds ``expr`` for ``arch`` at the current sources."""
        full = self.cache_key(expr, arch)
        return all((cache_dir() / f"{full}{ext}").is_file() for ext in (".cubin", ".json"))

    # -- compile / load ---------------------------------------------------------------------
    def _one(self, expr: str | None) -> str:
        if expr is None:
            if len(self.name_expressions) != 1:
                raise TypeError(f"{self.display_name} declares {len(self.name_expressions)} "
                                "instantiations: name the one to compile (expr=...)")
            return self.name_expressions[0]
        if expr not in self._declared:
            raise KeyError(f"{self.display_name} has no name expression {expr!r}")
        return expr

    def _expr_lock(self, expr: str) -> threading.Lock:
        lock = self._expr_locks.get(expr)
        if lock is None:
            with self._lock:
                lock = self._expr_locks.setdefault(expr, threading.Lock())
        return lock

    def cubin(self, arch: str, expr: str | None = None) -> Compiled:
        """The cubin of instantiation ``expr`` (may be omitted when the module declares one)
        for ``arch``: from this process, else the disk cache, else NVRTC (then cached)."""
        expr = self._one(expr)
        return self._cubin(arch, expr, self.source_key())

    def _cubin(self, arch: str, expr: str, key: str) -> Compiled:
        memo_key, memo = self._memo
        if memo_key == key and (expr, arch) in memo:
            return memo[(expr, arch)]
        full = self.cache_key(expr, arch, key)
        out = _read_cached(full)
        if out is None or expr not in out.lowered:
            type(self).compile_count += 1
            type(self).compile_log.append((self.display_name, expr))
            out = compile_cubin(self.path, [expr], arch=arch, include_dirs=self.include_dirs,
                                options=self.options, key=key)
            _write_cached(full, out, self.display_name)
        with self._lock:
            if self._memo[0] != key:
                self._memo = (key, {})  # an edit: earlier builds are not wanted again
            self._memo[1][(expr, arch)] = out
        return out

    def function(self, expr: str, device_index: int, *, fallback: bool = False):
        """CuPy Function for ``expr`` on ``device_index``, compiling only that instantiation, and
        recompiling it if the source changed since it was loaded.

        With ``fallback=True`` a failing edit returns the last good build instead of raising.
        Files are re-checked when the last check is over :attr:`recheck_s` old (see top).
        """
        now = clock()  # (before the stat: a save during it is caught next time)
        if now >= self.due_at or not self.key:
            key = self.source_key()
            self.due_at = now + self._recheck_s
        else:
            key = self.key
        slot = (device_index, expr)
        entry = self._loaded.get(slot)
        if entry is None or entry[0] != key:
            entry = self._refresh(slot, key, fallback)
        return entry[1]

    @property
    def recheck_s(self) -> float:
        """Seconds between two re-stats of the files on the call path (see top)."""
        return self._recheck_s

    def _refresh(self, slot: tuple[int, str], key: str, fallback: bool) -> tuple[str, Any]:
        device_index, expr = slot
        self._one(expr)  # KeyError for an undeclared expression
        with self._expr_lock(expr):
            entry = self._loaded.get(slot)
            if entry is not None and entry[0] == key:
                return entry  # another thread loaded it meanwhile
            try:
                failed = self._failed.get(slot)
                if failed is not None and failed[0] == key:
                    e = failed[1]
                    raise KernelCompileError(str(e), e.log, e.source)
                return self._load(device_index, expr, key)
            except KernelCompileError as e:
                self._failed[slot] = (key, e)
                if fallback and slot in self._last_good:
                    return self._last_good[slot]
                raise

    def _load(self, device_index: int, expr: str, key: str) -> tuple[str, Any]:
        out = self._cubin(_device_arch(device_index), expr, key)
        fn = _load_function(out.cubin, out.lowered[expr], device_index)
        slot = (device_index, expr)
        old = self._last_good.get(slot)
        if old is not None and old[1] is not fn:
            _names.pop(id(old[1]), None)
        _names[id(fn)] = expr  # fn lives while it is the slot's build: its id is not reused
        entry = self._loaded[slot] = self._last_good[slot] = (key, fn)
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
