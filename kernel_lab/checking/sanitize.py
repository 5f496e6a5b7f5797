"""``python -m kernel_lab check --sanitize [TOOL] [NAMES]``: CUDA variants under compute-sanitizer.

Each variant runs in its own process, ``compute-sanitizer --tool TOOL --error-exitcode 86
python -m kernel_lab check NAME --device cuda --cases CASES``, so a report names the variant
that caused it; several such processes run at once (``--jobs``) because the start of a process
(torch, a CUDA context under the sanitizer) dominates. CASES is the tool's case set
(:data:`TOOL_CASES`, ``--cases`` overrides it): ``sanitize`` for memcheck and initcheck (the
CPU-sized shapes and every edge case, plus GPU rows at odd N and misaligned bases that reach
every kernel kind each variant can pick), ``race`` for racecheck and synccheck (per kind about
the smallest rows that pick it, odd N, aligned and misaligned: racecheck pays per shared-memory
access). tests/test_sanitize_cover.py proves on a CPU that both sets reach every kind
(:mod:`kernel_lab.checking.sanitize_cover`). PyTorch's caching allocator is turned off in the child
(``PYTORCH_NO_CUDA_MEMORY_CACHING=1``): a read past a tensor that lands inside a larger cached
block would be invisible to memcheck and initcheck.

One line per variant, with its seconds; clean only when the sanitizer printed its summary with no
report and the check passed with every dtype asked run. The exit code is 0 when every variant is
clean, 1 on any report, failed or unrun check, or timeout, 2 when this machine has no
compute-sanitizer or no CUDA GPU.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kernel_lab.base.errors import KernelLabError
from kernel_lab.core import registry

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
# each tool's case set (kernel_lab.checking.checker.SELECTIONS): bounds and uninitialized reads
# depend on rows, strides, tails and layouts; races and barriers on the kernel kind and the row's
# tail, which the small race rows reach for every kind (odd N, misaligned bases) at a fraction of
# the cost (racecheck pays per shared-memory access)
TOOL_CASES = {"memcheck": "sanitize", "initcheck": "sanitize", "synccheck": "race",
              "racecheck": "race"}
REPORT_EXIT = 86  # --error-exitcode: the child's code when the sanitizer reported anything
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error|RACECHECK SUMMARY: (\d+) hazard")
_FIRST = re.compile(r"^=+ +((?:Invalid|Uninitialized|Race|Error|Program hit|Barrier|Warning)"
                    r".*)$", re.M)


class NoSanitizerError(KernelLabError):
    """This machine cannot run the sanitizer (no compute-sanitizer, or no CUDA GPU)."""


def find_sanitizer() -> str | None:
    """compute-sanitizer on PATH, else under $CUDA_HOME / $CUDA_PATH / /usr/local/cuda."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            cand = Path(root) / "bin" / "compute-sanitizer"
            if cand.is_file() and os.access(cand, os.X_OK):
                return str(cand)
    return None


def shared_memory_variants() -> list[str]:
    """CUDA variants whose kernel file, or a header it includes, uses shared memory or thread
    block clusters: the ones racecheck has something to check in."""
    from kernel_lab.cuda.jit import cuda_src_dir, source_files

    names = []
    for v in registry.variants():
        if v.backend != "cuda" or not v.source:
            continue
        path = Path(v.source)
        if not path.is_absolute():
            path = cuda_src_dir().parent / path
        text = "".join(f.read_text() for f in source_files(path))
        if "__shared__" in text or "__cluster_dims__" in text or "cluster.cuh" in text:
            names.append(v.name)
    return names


def default_variants(tool: str, op: str | None = None) -> list[str]:
    """Every CUDA variant (of ``op``); racecheck: those with shared memory or clusters."""
    cuda = [v.name for v in registry.variants(op) if v.backend == "cuda"]
    if tool != "racecheck":
        return cuda
    shared = set(shared_memory_variants())
    return [n for n in cuda if n in shared]


def command(sanitizer: str, tool: str, name: str, dtypes: list[str] | None = None,
            seed: int | None = None, cases: str | None = None) -> list[str]:
    """The child's command line: ``check NAME`` on the GPU over ``cases`` (default: the tool's
    case set, :data:`TOOL_CASES`)."""
    cmd = [sanitizer, "--tool", tool, "--error-exitcode", str(REPORT_EXIT),
           "--print-limit", "20"]
    if tool == "racecheck":
        cmd += ["--racecheck-report", "hazard"]
    cmd += [sys.executable, "-m", "kernel_lab", "check", name, "--device", "cuda",
            "--case-times", "--cases", cases or TOOL_CASES[tool]]
    for d in dtypes or []:
        cmd += ["--dtype", d]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    return cmd


@dataclass
class Outcome:
    name: str
    ok: bool
    line: str
    seconds: float = 0.0
    checked: int = 0  # (variant, dtype) pairs a clean child checked
    cases: str = ""  # how many cases they ran over ("" when the child did not say)
    refused: str = ""  # the cases the variant refuses by its own limits


def merge(parts: list[Outcome], tool: str) -> Outcome:
    """One variant's line from its children (one a dtype when cores were spare): clean when all
    are, with their checked pairs summed and the slowest child's seconds; else the bad lines."""
    if len(parts) == 1:
        return parts[0]
    name = parts[0].name
    bad = [p.line for p in parts if not p.ok]
    if bad:
        return Outcome(name, False, "\n".join(bad))
    took = max(p.seconds for p in parts)
    over = f" over {parts[0].cases} cases" if parts[0].cases else ""
    refused = "; ".join(dict.fromkeys(p.refused for p in parts if p.refused))
    refused = f"; cases it refuses: {refused[:120]}" if refused else ""
    checked = sum(p.checked for p in parts)
    return Outcome(name, True, f"{tool} {name}: clean ({took:.0f} s, {checked} variant x dtype "
                   f"checked{over}{refused}; a process a dtype)", took, checked,
                   parts[0].cases, refused)


# the child's summary line (check_cli.check_main)
_CHECKED = re.compile(r"(\d+) variant x dtype checked(?: over (\d+) cases)?: (\d+) passed, "
                      r"(\d+) failed(?:, (\d+) ran nothing here)?(?:; cases skipped: (.*))?")


# a case's end, from the child's --case-times (check.py's _case_done)
_CASE_TIME = re.compile(r"^case (\S+ \S+ .*): ([0-9.]+) s$", re.M)


def _progress(log: str) -> str:
    """How far a timed-out child got: the cases it finished and the slowest of them."""
    times = [(float(t), what) for what, t in _CASE_TIME.findall(log)]
    if not times:
        return "; no case finished"
    slow = ", ".join(f"{what} {t:.0f} s" for t, what in sorted(times, reverse=True)[:3])
    return f"; {len(times)} cases finished, last {times[-1][1]}; slowest: {slow}"


def _last_line(log: str) -> str:
    lines = [ln.strip() for ln in log.splitlines() if ln.strip() and not ln.startswith("=====")]
    return lines[-1][:160] if lines else "no output"


def summarize(name: str, tool: str, rc: int | None, log: str, seconds: float) -> Outcome:
    """One line for one variant from its child's exit code and output (rc None: timed out).
    Clean only with the sanitizer's summary, no report, exit 0 and the check's own summary
    saying every (variant, dtype) ran and passed; cases the variant refuses by its own limits
    (``supports``: warp_softmax's rows past 1024) are named in the line."""
    counts = [int(a or b) for a, b in _SUMMARY.findall(log)]
    reports = max(counts, default=0)  # racecheck prints its hazards and the errors
    first = _FIRST.search(log)
    where = f"; first: {first.group(1).strip()[:160]}" if first else ""
    took = f"{seconds:.0f} s"
    if rc is None:
        return Outcome(name, False, f"{tool} {name}: TIMED OUT after {took}{_progress(log)}")
    if rc == REPORT_EXIT or reports:
        return Outcome(name, False, f"{tool} {name}: {reports or 'some'} reports{where} ({took})")
    if rc == 1:
        bad = re.search(r"^.*\bFAIL\b.*$", log, re.M)
        why = bad.group(0).strip()[:160] if bad else _last_line(log)
        return Outcome(name, False, f"{tool} {name}: check failed: {why} ({took})")
    if rc == 2:  # check ran no case of it here
        return Outcome(name, False, f"{tool} {name}: ran no case: {_last_line(log)} ({took})")
    if rc != 0:
        return Outcome(name, False, f"{tool} {name}: exit {rc}: {_last_line(log)} ({took})")
    if not counts:  # exit 0 and no summary: the sanitizer did not run the child
        return Outcome(name, False, f"{tool} {name}: no sanitizer summary in the output ({took})")
    found = _CHECKED.findall(log)
    if not found:
        return Outcome(name, False, f"{tool} {name}: no check summary in the output ({took})")
    checked, cases, passed, failed, nothing, skipped = found[-1]
    if int(failed) or int(nothing or 0) or not int(passed):
        return Outcome(name, False, f"{tool} {name}: {passed} of {checked} variant x dtype "
                       f"passed, {nothing or 0} ran nothing ({took})")
    over = f" over {cases} cases" if cases else ""
    refused = f"; cases it refuses: {skipped.strip()[:120]}" if skipped.strip() else ""
    return Outcome(name, True, f"{tool} {name}: clean ({took}, {checked} variant x dtype "
                   f"checked{over}{refused})", seconds, int(checked), cases,
                   skipped.strip()[:120])


def _run_one(cmd: list[str], name: str, tool: str, log_dir: Path, timeout: float,
             part: str = "") -> Outcome:
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1", PYTHONUNBUFFERED="1",
               COLUMNS="160")
    start = time.monotonic()
    # its own session: on a timeout the sanitizer and the python under it are killed together
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        log, _ = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        log, _ = p.communicate()
        rc = None
    (log_dir / f"{tool}-{name}{part}.log").write_text(log)
    return summarize(name, tool, rc, log, time.monotonic() - start)


def sanitize_main(tool: str, names: list[str], op: str | None = None,
                  dtypes: list[str] | None = None, seed: int | None = None, jobs: int = 4,
                  timeout: float = 600.0, log_dir: str | None = None,
                  cases: str | None = None) -> int:
    """Run ``tool`` over ``names`` (default: :func:`default_variants`) on ``cases`` (default:
    the tool's, :data:`TOOL_CASES`); one line per variant."""
    import torch

    from kernel_lab.checking.checker import SELECTIONS

    if tool not in TOOLS:
        raise KernelLabError(f"unknown sanitizer tool {tool!r}; use one of {', '.join(TOOLS)}")
    cases = cases or TOOL_CASES[tool]
    if cases not in SELECTIONS:
        raise KernelLabError(f"unknown case set {cases!r}; use one of {', '.join(SELECTIONS)}")
    sanitizer = find_sanitizer()
    if sanitizer is None:
        raise NoSanitizerError("compute-sanitizer not found (PATH, $CUDA_HOME/bin, "
                               "/usr/local/cuda/bin): install the CUDA toolkit's sanitizer")
    if not torch.cuda.is_available():
        raise NoSanitizerError("no CUDA GPU is usable on this machine: the sanitizer runs "
                               "kernels on one")
    chosen = [registry.get(n).name for n in names] if names else default_variants(tool, op)
    not_cuda = [n for n in chosen if registry.get(n).backend != "cuda"]
    if not_cuda:
        raise KernelLabError(f"--sanitize checks CUDA variants; not CUDA: {', '.join(not_cuda)}")
    if not chosen:
        raise KernelLabError(f"no CUDA variant to run under {tool}")
    out = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="kernel_lab_sanitize_"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"{tool}: {len(chosen)} variants over the {cases} cases, {jobs} at a time; logs in "
          f"{out}", flush=True)
    # cores to spare: a child per (variant, dtype), so the slowest variant is not the wall time
    split = dtypes is not None and len(dtypes) > 1 and jobs > len(chosen)
    parts = [[d] for d in dtypes] if split else [dtypes]
    bad = 0
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {n: [pool.submit(_run_one, command(sanitizer, tool, n, ds, seed, cases), n,
                                   tool, out, timeout, f"-{ds[0]}" if split else "")
                       for ds in parts] for n in chosen}
        for n in chosen:  # in the order asked, each as soon as it and those before are done
            o = merge([f.result() for f in futures[n]], tool)
            bad += not o.ok
            print(o.line, flush=True)
    print(f"{tool}: {len(chosen) - bad} of {len(chosen)} variants clean", flush=True)
    return 1 if bad else 0
