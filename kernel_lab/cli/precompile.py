"""``python -m kernel_lab compile``: declared instantiations into the cubin cache, in parallel.

    python -m kernel_lab compile                        # what the launchers can pick, sm_90
    python -m kernel_lab compile --all                  # + tuning-only instantiations, probes
    python -m kernel_lab compile fast_softmax.cu -j 8 --arch sm_90
    KERNEL_LAB_CACHE_DIR=.klc python -m kernel_lab compile   # a cache to ship to a GPU machine

Each instantiation is its own NVRTC program (:mod:`kernel_lab.cuda.jit`), so they compile in
parallel: ``-j N`` processes (default: every CPU). By default only the instantiations the
launchers can pick (:func:`kernel_lab.cuda.rowkernels.reachable.launchable`); those that only tuners
and tests launch compile when asked (``--all``) or when first launched.

NVRTC needs no GPU, and the cache key (:meth:`kernel_lab.cuda.jit.CudaModule.cache_key`: the
sources' and headers' contents, the options, the expression, the NVRTC version and the arch) names
no path or machine, so a cache filled here is a warm cache on any GPU machine with the same NVRTC
version and arch: its first calls load cubins instead of compiling. Instantiations already
cached are only checked.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from kernel_lab.base.errors import KernelCompileError, KernelLabError


@dataclass(frozen=True)
class Job:
    """One instantiation to compile: the file, its include dirs and options, the expression."""

    path: str
    expr: str
    include_dirs: tuple[str, ...] = ()
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    job: Job
    compiled: bool  # False: the disk cache held it
    seconds: float
    error: str | None = None  # a KernelCompileError's message


def job_for(src, expr: str) -> Job:
    """The :class:`Job` for instantiation ``expr`` of a CudaSource."""
    return Job(str(src.path), expr, tuple(str(d) for d in src.include_dirs))


def _module(job: Job, expr: str | None = None):
    from kernel_lab.cuda import jit

    return jit.CudaModule(job.path, (expr or job.expr,), include_dirs=job.include_dirs,
                          options=job.options)


def _run(job: Job, arch: str, cache: str | None = None) -> Outcome:
    """Compile one job into the disk cache (a pool worker's task). ``cache``: the caller's
    cache dir (a fork server's workers have the environment it started with)."""
    from kernel_lab.cuda import jit

    if cache is not None:
        os.environ["KERNEL_LAB_CACHE_DIR"] = cache
    t0 = time.perf_counter()
    before = jit.CudaModule.compile_count
    try:
        _module(job).cubin(arch, job.expr)
    except KernelCompileError as e:
        return Outcome(job, True, time.perf_counter() - t0, str(e))
    except OSError as e:  # a source moved meanwhile: one failed job, not a failed pool
        return Outcome(job, False, time.perf_counter() - t0, f"{type(e).__name__}: {e}")
    return Outcome(job, jit.CudaModule.compile_count > before, time.perf_counter() - t0)


def _progress(total: int, label: str, enabled: bool):
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TextColumn("{task.fields[last]}"),
                   console=Console(stderr=True), disable=not enabled)
    task = bar.add_task(label, total=total, last="")
    return bar, task


def compile_jobs(jobs: Sequence[Job], arch: str = "sm_90", workers: int | None = None,
                 progress: bool = False, label: str = "compiling") -> list[Outcome]:
    """Compile every job the disk cache lacks, in ``workers`` processes (default: every CPU;
    1: in this process), with a rich progress bar on stderr if ``progress``. Outcomes in job
    order; a compile error is an outcome, not an exception."""
    workers = workers or os.cpu_count() or 1
    outcomes: dict[int, Outcome] = {}
    mods: dict[tuple, object] = {}  # one per file: its headers are read once
    todo = []
    for i, job in enumerate(jobs):
        mod = mods.get((job.path, job.include_dirs, job.options))
        if mod is None:
            mod = mods[(job.path, job.include_dirs, job.options)] = _module(job)
        if mod.is_cached(job.expr, arch):
            outcomes[i] = Outcome(job, False, 0.0)
        else:
            todo.append(i)
    bar, task = _progress(len(todo), label, progress and len(todo) > 1)
    if workers <= 1 or len(todo) <= 1:
        with bar:
            for i in todo:
                outcomes[i] = _run(jobs[i], arch)
                bar.update(task, advance=1, last=jobs[i].expr)
    else:
        from kernel_lab.cuda import jit

        ctx, cache = _pool_context(), str(jit.cache_dir())
        with ProcessPoolExecutor(min(workers, len(todo)), mp_context=ctx) as pool:
            futures = {pool.submit(_run, jobs[i], arch, cache): i for i in todo}
            with bar:
                for fut in as_completed(futures):
                    i = futures[fut]
                    outcomes[i] = fut.result()
                    bar.update(task, advance=1, last=jobs[i].expr)
    return [outcomes[i] for i in range(len(jobs))]


# Python 3.12+ warns that a fork of a process with threads (torch's, CuPy's) may deadlock
_FORK_WARNS = sys.version_info >= (3, 12)


def _pool_context():
    """fork where it is safe to: workers inherit the imported modules (a fresh interpreter pays
    seconds importing torch) and start at the first submit, before the progress bar's thread.
    Where a fork warns (``_FORK_WARNS``), a fork server that imported the compiler side once
    forks the workers."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and not _FORK_WARNS:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["kernel_lab.cli.precompile", "kernel_lab.cuda.jit"])
        return ctx
    return None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="*", metavar="FILE",
                   help="declared .cu files by name, e.g. fast_softmax.cu (default: all)")
    p.add_argument("--arch", default="sm_90", help="target architecture (default sm_90)")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                   help="compiler processes (default: every CPU, here %(default)s)")
    p.add_argument("--all", action="store_true",
                   help="every declared instantiation, the tuning-only ones too (on another "
                   "arch than sm_90, those that do not compile there are counted, not failed)")
    p.add_argument("--digests", metavar="FILE",
                   help="also write each instantiation's machine-code digest (sha256 of its "
                   "SASS, names aside) to FILE as JSON: two trees whose files match run the same "
                   "code")


def main(args: argparse.Namespace) -> int:
    from kernel_lab.core import registry
    from kernel_lab.cuda import archs, jit
    from kernel_lab.cuda import sources as cuda_common
    from kernel_lab.cuda.rowkernels import reachable
    from kernel_lab.cuda.rowkernels.forward_config import TUNED_ARCH

    registry.variants()  # imports every op module: declares every source
    sources = cuda_common.SOURCES
    if args.files:
        by_name = {s.path.name: s for s in sources}
        unknown = [f for f in args.files if f not in by_name]
        if unknown:
            raise KernelLabError(f"no declared source {unknown[0]!r}; declared: "
                                 f"{', '.join(sorted(by_name))}")
        sources = [by_name[f] for f in args.files]
    try:  # an unknown arch: one line here, not one NVRTC failure per instantiation
        arch = archs.get_arch(args.arch)
    except ValueError as e:
        raise KernelLabError(str(e)) from None
    t0 = time.perf_counter()
    picked = [list(s.name_expressions) if args.all else reachable.launchable(s, arch)
              for s in sources]
    jobs = [job_for(s, e) for s, exprs in zip(sources, picked) for e in exprs]
    left = sum(len(s.name_expressions) for s in sources) - len(jobs)
    which = "every instantiation" if args.all else (
        f"the launchable ones; --all adds {left} tuning-only")
    print(f"{len(sources)} sources, {len(jobs)} instantiations ({which}) -> {jit.cache_dir()} "
          f"({args.arch}, NVRTC {'.'.join(map(str, jit.nvrtc_version()))}, "
          f"{args.jobs} processes)", flush=True)
    outcomes = compile_jobs(jobs, args.arch, args.jobs, progress=True)
    launchable = None if not args.all or arch.name == TUNED_ARCH.name else {
        (str(s.path), e) for s in sources for e in reachable.launchable(s, arch)}
    errors, not_here = split_failures(outcomes, launchable)
    skipped = {id(o) for o in not_here}
    at = 0
    for i, (src, exprs) in enumerate(zip(sources, picked), 1):
        mine, at = outcomes[at:at + len(exprs)], at + len(exprs)
        done = sum(o.compiled and not o.error for o in mine)
        failed = sum(bool(o.error) and id(o) not in skipped for o in mine)
        other = sum(id(o) in skipped for o in mine)
        secs = sum(o.seconds for o in mine)
        print(f"[{i}/{len(sources)}] {src.path.name}: {len(exprs)} of "
              f"{len(src.name_expressions)} kernels, {done} compiled ({secs:.1f} s of "
              f"compiler time), {len(exprs) - done - failed - other} cached"
              + (f", {other} not for {arch.name}" if other else "")
              + (f", {failed} FAILED" if failed else ""), flush=True)
    for o in errors:
        print(f"error: {o.job.expr}: {o.error.splitlines()[0]}", file=sys.stderr)
    if not_here:
        print(f"{len(not_here)} tuning-only instantiations do not compile for {arch.name} (no "
              f"launcher picks them there; e.g. {not_here[0].job.expr}: "
              f"{not_here[0].error.splitlines()[0]})", flush=True)
    compiled = sum(o.compiled and not o.error for o in outcomes)
    print(f"{compiled} compiled, {len(outcomes) - compiled - len(errors) - len(not_here)} "
          f"cached, {len(errors)} failed in {time.perf_counter() - t0:.1f} s", flush=True)
    if args.digests and not errors:
        write_digests(args.digests, [o.job for o in outcomes if not o.error], args.arch)
    return 1 if errors else 0


def split_failures(outcomes: Sequence[Outcome], launchable: set[tuple[str, str]] | None,
                   ) -> tuple[list[Outcome], list[Outcome]]:
    """(errors, not for this arch): with ``launchable`` - the (file, expression) pairs a
    launcher can pick on an arch other than the rules' own (``--all --arch sm_80``) - a
    tuning-only instantiation that fails there (a cluster kernel before sm_90) is not an
    error; every launchable one, and on the rules' arch (``launchable`` None) every one, is."""
    failed = [o for o in outcomes if o.error]
    if launchable is None:
        return failed, []
    errors = [o for o in failed if (o.job.path, o.job.expr) in launchable]
    return errors, [o for o in failed if (o.job.path, o.job.expr) not in launchable]


def write_digests(path: str, jobs: Sequence[Job], arch: str) -> None:
    """{expression: machine-code digest} of ``jobs`` (compiled: read from the disk cache) as
    JSON at ``path``, keyed by file name and expression."""
    import json
    from pathlib import Path

    from kernel_lab.cuda.cubins import machine_code_digest

    out = {f"{Path(j.path).name}: {j.expr}":
           machine_code_digest(_module(j).cubin(arch, j.expr).cubin) for j in jobs}
    Path(path).write_text(json.dumps(out, indent=0, sort_keys=True) + "\n")
    print(f"{len(out)} machine-code digests -> {path}", flush=True)
