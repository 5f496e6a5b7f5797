"""Test setup. On a machine without a CUDA GPU, Triton kernels run in Triton's interpreter.

TRITON_INTERPRET must be set before anything imports triton, so it is decided here, first.
"""

import contextlib
import os
import sys

import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    assert "triton" not in sys.modules, "triton was imported before tests/conftest.py"
    os.environ["TRITON_INTERPRET"] = "1"

if os.environ.get("PYTEST_XDIST_WORKER"):
    # torch.compile compiles in the worker's own process: by default each xdist worker starts a
    # pool of a compile process a core at its first compile (13 workers x 16 on an H100 machine)
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import gc  # noqa: E402
import json  # noqa: E402

import pytest  # noqa: E402  (after TRITON_INTERPRET is decided)
from gpu_share import KEEP_BYTES, GpuShare, auto_workers, budget_gib, card_gib, is_oom  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402 (its only home)

DEVICE = "cuda" if HAS_CUDA else "cpu"
if not HAS_CUDA:  # the CPU simulations of launches (a fake device 0) plan for an H100 / H200
    from kernel_lab.cuda.archs import ARCHS, assume_device_arch  # noqa: E402

    assume_device_arch(0, ARCHS["sm_90"])
SHARE: GpuShare | None = None  # this xdist worker's GPU locks (None: CPU, or one process)
RAN_ALONE = "gpu_ran_alone_after_oom"  # user_properties keys a worker reports to the controller
PEAK = "gpu_peak_gib"
_reported: dict[str, dict] = {}  # the controller's collection of them, by test id


def pytest_report_header(config):
    mode = torch.cuda.get_device_name() if HAS_CUDA else "no CUDA GPU: Triton runs interpreted"
    return f"kernel_lab tests on {DEVICE} ({mode})"


@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown when xdist is off
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` on a GPU machine: a worker a core, at most one per 6 GiB of the card."""
    if not HAS_CUDA:
        return None  # xdist's default: the cores
    return auto_workers(os.cpu_count() or 1, card_gib())


def pytest_configure(config):
    global SHARE
    config.addinivalue_line("markers", "gpu_exclusive: runs with no other test on the GPU "
                            "(it times the GPU, or needs most of its memory)")
    config.addinivalue_line("markers", "slow: over 30 s on a busy GPU machine, or many such in "
                            "bulk (torch.compile's shape cases); only the full tier of .ci/gpu "
                            "and the plain pytest run take it")
    config.addinivalue_line("markers", "gpu_memory(gib): holds up to gib GiB of GPU memory; "
                            "waits until the shared budget has that much free")
    run_id, workers = os.environ.get("PYTEST_XDIST_TESTRUNUID"), os.environ.get(
        "PYTEST_XDIST_WORKER_COUNT")
    if HAS_CUDA and run_id and workers:  # an xdist worker on a GPU machine
        card = card_gib()  # nvidia-smi: no CUDA context before a test needs one
        if card is None:
            card = torch.cuda.get_device_properties(0).total_memory / 2**30
        SHARE = GpuShare.for_run(run_id, budget_gib(card, int(workers)))


def _hold(item):
    """The locks an item runs under: exclusive, or its memory then shared."""
    if item.get_closest_marker("gpu_exclusive"):
        return SHARE.exclusive()
    mem = item.get_closest_marker("gpu_memory")
    if mem is None:
        return SHARE.shared()
    stack = contextlib.ExitStack()
    stack.enter_context(SHARE.memory(mem.args[0] if mem.args else mem.kwargs["gib"]))
    stack.enter_context(SHARE.shared())
    return stack


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Setup, call and teardown under the item's GPU locks; then give back a big cache and
    report the test's peak reserved memory."""
    if not HAS_CUDA:
        return (yield)
    if torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()
    with _hold(item) if SHARE else contextlib.nullcontext():
        result = yield
    if torch.cuda.is_initialized():
        if torch.cuda.memory_reserved() > KEEP_BYTES:
            gc.collect()
            torch.cuda.empty_cache()
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A test that ran out of GPU memory beside others runs once more, alone on the card (the
    summary lists it: mark it gpu_memory). Out of memory alone is a failure. The peak reserved
    memory of setup and call goes into the call's report (made right after this hook)."""
    try:
        try:
            return (yield)
        except Exception as exc:  # noqa: BLE001  (re-raised unless it is an OOM beside others)
            if SHARE is None or item.get_closest_marker("gpu_exclusive") or not is_oom(exc):
                raise
        gc.collect()  # the failed call's frames and tensors are gone: give their memory back
        torch.cuda.empty_cache()
        with SHARE.alone_from_shared():
            torch.cuda.empty_cache()
            item.runtest()
        item.user_properties.append((RAN_ALONE, True))
        return None
    finally:
        if HAS_CUDA and torch.cuda.is_initialized():
            item.user_properties.append((PEAK, torch.cuda.max_memory_reserved() / 2**30))


def pytest_runtest_logreport(report):
    if report.when == "call":
        props = dict(report.user_properties)
        if props:
            _reported[report.nodeid] = props


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The GPU, the tests that needed the card alone, and the largest peaks (GPU runs)."""
    if not HAS_CUDA:
        return
    tr = terminalreporter
    alone = sorted(k for k, p in _reported.items() if p.get(RAN_ALONE))
    peaks = sorted(((p.get(PEAK, 0.0), k) for k, p in _reported.items()), reverse=True)
    tr.write_sep("-", f"GPU: {torch.cuda.get_device_name()}")
    tr.write_line(f"{len(alone)} test(s) ran out of GPU memory beside others and passed or failed "
                  "alone (mark them gpu_memory):")
    for k in alone:
        tr.write_line(f"  {k}")
    tr.write_line("largest peak reserved GPU memory per test (GiB):")
    for gib, k in peaks[:12]:
        tr.write_line(f"  {gib:6.2f}  {k}")
    path = os.environ.get("KLAB_GPU_MEMORY_LOG")
    if path:  # every test's peak, for sizing gpu_memory marks
        with open(path, "w") as f:
            json.dump({k: p.get(PEAK) for k, p in _reported.items()}, f, indent=0)


@pytest.fixture
def device() -> str:
    return DEVICE


@pytest.fixture(autouse=True)
def _no_index_flag_left():
    """A bad class index that a test's kernel flagged on purpose (validate="async", trusted
    inputs) is forgotten when the test ends: left pending, it would fail the first
    cross-entropy call of whichever test this xdist worker runs next."""
    yield
    deferred = sys.modules.get("kernel_lab.cuda.deferred")
    if deferred is not None:  # not imported: no kernel can have flagged
        deferred.clear()


needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")


def stand_in_launches(monkeypatch, *modules) -> list:
    """``interop.launch`` (and the name in each of ``modules`` that imported it) replaced for
    one test: each launch is recorded as the :class:`interop.Launch` a real one would be, into
    the returned list and into the recording in progress, and nothing runs (no GPU needed)."""
    from kernel_lab.core import plans
    from kernel_lab.cuda import interop

    seen: list = []

    def fake_launch(fn, grid, block, args, *, device_index, shared_mem=0, signature=None,
                    source=None, programmatic=False):
        seen.append(interop.Launch(fn, grid, block, shared_mem, args, signature, source,
                                   device_index, programmatic))
        if interop.recording():
            interop.current_recording().append(seen[-1])

    for module in (interop, *modules):
        monkeypatch.setattr(module, "launch", fake_launch)
    # a thread that launched for real (a GPU run) would take the replay's driver path: its
    # replays made from now on call launch, and none made before is found
    monkeypatch.setattr(interop.THREAD, "ready", False, raising=False)
    plans.clear()
    return seen


class Recorder(TorchDispatchMode):
    """A dispatch mode (``with Recorder() as rec``) that passes every op through and names it in
    ``rec.seen`` (``str(func)``): what a tracer sees of a call."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def stagger_only(monkeypatch, kinds) -> None:
    """For one test: the forward kinds named in ``kinds`` start their first wave in phases
    (``Kind.staggered``), no other kind does."""
    import dataclasses

    from kernel_lab.cuda.rowkernels.kinds import KINDS

    for name, kind in list(KINDS.items()):
        monkeypatch.setitem(KINDS, name, dataclasses.replace(kind, staggered=name in kinds))


def bench_script(name: str):
    """A script of bench/ as a module (bench/ is a folder of scripts, not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
