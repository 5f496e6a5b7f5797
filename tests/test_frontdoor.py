"""The CPU front door: `check`'s case sets and output, `list --here`, the memory caps of
`bench --device cpu`, one-line errors for bad arguments, Triton on CPU tensors without any
variable to export, and `check --sanitize` (its refusals, arguments and verdicts, with a fake
compute-sanitizer on PATH)."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import HAS_CUDA

import kernel_lab
from kernel_lab import cli
from kernel_lab.checking import sanitize
from kernel_lab.checking.checker import cases_for
from kernel_lab.core.rows import normalize_dim
from kernel_lab.cuda.archs import ARCHS, get_arch
from kernel_lab.measure import benchmarking as bm
from kernel_lab.measure.memory_caps import CPU_PRESET_ELEMENTS, cap_rows, fit_cpu

REPO = Path(__file__).parents[1]


# -- check: case sets, table, warnings ----------------------------------------------------------

def test_core_cases_are_a_representative_subset():
    core, every = cases_for("cpu", None, "core"), cases_for("cpu")
    assert set(core) < set(every) and len(core) <= len(every) // 2 + 1
    layouts = {c.layout for c in core}
    assert {"contiguous", "transposed", "misaligned"} <= layouts
    assert any(c.shape == () for c in core) and any(0 in c.shape for c in core)
    assert any(c.dim != -1 for c in core) and any(len(c.shape) == 3 for c in core)
    assert not any("only" in c.tags for c in cases_for("cuda"))  # the sanitizers' own cases
    with pytest.raises(ValueError, match="selection"):
        cases_for("cpu", None, "most")


def test_check_prints_no_skip_rows_and_counts_hidden_warnings(capsys):
    rc = cli.main(["check", "torch_eager", "fast_softmax", "--dtype", "fp32", "--seed", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "torch_eager" in out and "pass" in out
    if not HAS_CUDA:  # fast_softmax runs nothing here: no row of its own, counted in the summary
        rows = [line for line in out.splitlines() if "fast_softmax" in line]
        assert rows == [], out
        assert "1 ran nothing here" in out and "needs a CUDA tensor" in out
    assert "core cases" in out


def test_check_all_runs_more_cases_than_the_default(capsys):
    def cases_run(*extra):
        assert cli.main(["check", "torch_naive", "--dtype", "fp32", "--seed", "2", *extra]) == 0
        out = capsys.readouterr().out
        row = next(line for line in out.splitlines() if "torch_naive" in line)
        return int(row.split("│")[3].strip().split("/")[1])

    assert cases_run("--all") > cases_run()


def test_check_case_times_prints_a_line_per_case_run(capsys):
    assert cli.main(["check", "torch_naive", "--dtype", "fp32", "--seed", "2",
                     "--case-times"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "torch_naive" in line and "│" in line)
    ran = int(row.split("│")[3].strip().split("/")[1])
    times = [ln for ln in out.splitlines() if ln.startswith("case torch_naive fp32 ")]
    assert len(times) == ran and all(ln.endswith(" s") for ln in times)
    assert cli.main(["check", "torch_naive", "--dtype", "fp32", "--seed", "2"]) == 0
    assert "case torch_naive" not in capsys.readouterr().out


def test_check_hides_warnings_unless_asked(capsys, monkeypatch):
    import warnings

    from kernel_lab.cli import check as check_cli

    real = check_cli.run_checked

    def noisy(*a, **k):
        warnings.warn("interpreter noise", RuntimeWarning, stacklevel=1)
        return real(*a, **k)

    monkeypatch.setattr(check_cli, "run_checked", noisy)
    assert cli.main(["check", "torch_eager", "--dtype", "fp32"]) == 0
    out = capsys.readouterr().out
    assert "interpreter noise" not in out
    assert "1 distinct warnings hidden (--warnings shows them)" in out
    assert cli.main(["check", "torch_eager", "--dtype", "fp32", "--warnings"]) == 0
    assert "warning: RuntimeWarning: interpreter noise" in capsys.readouterr().out


# -- list --here, runs_here ---------------------------------------------------------------------

def test_list_here_and_runs_here(capsys):
    assert cli.main(["list", "--here", "--op", "softmax"]) == 0
    out = capsys.readouterr().out
    assert "torch_eager" in out and "triton_fused" in out
    assert kernel_lab.runs_here("torch_eager") and kernel_lab.why_not_here("torch_eager") is None
    assert all(isinstance(v, kernel_lab.Variant) for v in kernel_lab.variants("softmax"))
    if not HAS_CUDA:
        assert "fast_softmax" not in out
        assert not kernel_lab.runs_here("fast_softmax")
        assert "CUDA" in kernel_lab.why_not_here(kernel_lab.get("fast_softmax"))
        assert kernel_lab.runs_here("triton_fused")  # interpreted


# -- memory caps --------------------------------------------------------------------------------

def test_cpu_presets_are_capped_and_keep_their_row_lengths():
    for preset in bm.PRESETS:
        pairs = bm.select(preset)
        capped, note = fit_cpu(pairs, shapes_given=False)
        assert all(c.shape[0] * c.shape[1] <= max(CPU_PRESET_ELEMENTS, c.shape[1])
                   for c, _ in capped)
        assert [c.shape[1] for c, _ in capped] == [c.shape[1] for c, _ in pairs]
        if any(c.shape[0] * c.shape[1] > CPU_PRESET_ELEMENTS for c, _ in pairs):
            assert note and "--shape" in note
    assert cap_rows((2**21, 128)) == (2048, 128) and cap_rows((1, 2**21)) == (1, 2**21)


def test_cpu_shape_that_does_not_fit_is_refused_in_one_line(capsys):
    rc = cli.main(["bench", "--device", "cpu", "--shape", "100000x1000000"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "--shape 100000x1000000" in err and "GiB" in err


def test_no_gpu_hint_points_at_a_command_that_fits(capsys):
    if HAS_CUDA:
        pytest.skip("checks the GPU-less message")
    assert cli.main(["bench"]) == 2
    err = capsys.readouterr().err
    assert "--device cpu" in err and "CPU-sized" in err and "nothing timed" in err


# -- one-line errors ----------------------------------------------------------------------------

@pytest.mark.parametrize("dim", ["a", 1.5, None, True])
def test_a_dim_that_is_not_an_int_is_refused_by_name(dim):
    x = torch.randn(3, 5)
    with pytest.raises((TypeError, ValueError), match="dim must be an int"):
        kernel_lab.softmax(x, dim=dim)
    with pytest.raises(ValueError, match="dim must be an int"):
        kernel_lab.run("triton_fused", x, dim=dim)
    with pytest.raises(ValueError, match="dim must be an int"):
        kernel_lab.log_softmax(x, dim=dim)
    with pytest.raises(TypeError, match="dim must be an int"):
        normalize_dim(dim, 2)


def test_integer_like_dims_still_work():
    import numpy as np

    x = torch.randn(3, 5)
    torch.testing.assert_close(kernel_lab.softmax(x, dim=np.int64(0)), torch.softmax(x, 0))
    assert normalize_dim(np.int32(-1), 2) == 1


@pytest.mark.parametrize("argv, needle", [
    (["check", "--dtype", "float8"], "unknown dtype 'float8'"),
    (["check", "no_such_variant"], "no variant named"),
    (["bench", "--device", "cpu", "--shape", "12x"], "bad shape '12x'"),
    (["check", "--sanitize", "memcheck", "torch_eager"], ""),
])
def test_bad_arguments_get_one_line_and_exit_2(argv, needle, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err


# -- Triton on CPU tensors ----------------------------------------------------------------------

_TRITON_ON_CPU = """
import os, torch, kernel_lab
x = torch.randn(5, 37)
torch.testing.assert_close(kernel_lab.run("triton_fused", x), torch.softmax(x, -1))
torch.testing.assert_close(kernel_lab.softmax(x, variant="triton_online"), torch.softmax(x, -1))
print("ran", os.environ.get("TRITON_INTERPRET"))
"""

_TRITON_IMPORTED_FIRST = """
import triton, torch, kernel_lab
try:
    kernel_lab.run("triton_fused", torch.randn(2, 8))
except ValueError as e:
    print("refused:", e)
"""


def _plain_python(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", code], env=env, text=True, capture_output=True,
                          timeout=300, cwd=REPO)


@pytest.mark.skipif(HAS_CUDA, reason="checks the GPU-less machine: Triton interpreted there")
def test_triton_runs_on_cpu_tensors_with_nothing_exported():
    r = _plain_python(_TRITON_ON_CPU)
    assert r.returncode == 0 and "ran 1" in r.stdout, r.stderr[-2000:]


@pytest.mark.skipif(HAS_CUDA, reason="checks the GPU-less machine")
def test_triton_imported_before_the_lab_refuses_in_one_line_naming_the_variable():
    r = _plain_python(_TRITON_IMPORTED_FIRST)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "refused:" in r.stdout and "TRITON_INTERPRET=1" in r.stdout, r.stdout


# -- check --sanitize ---------------------------------------------------------------------------

FAKE = """#!/bin/sh
# a fake compute-sanitizer: records its arguments, prints a summary, exits as told
echo "$@" >> "{log}"
case "$*" in
  *fast_softmax*) echo "========= Uninitialized __global__ memory read of size 16 bytes"
                  echo "========= ERROR SUMMARY: 4 errors"; exit 86 ;;
  *) echo "2 variant x dtype checked over 40 cases: 2 passed, 0 failed, 0 ran nothing here"
     echo "========= ERROR SUMMARY: 0 errors"; exit 0 ;;
esac
"""


@pytest.fixture
def fake_sanitizer(tmp_path, monkeypatch):
    log = tmp_path / "calls.txt"
    exe = tmp_path / "bin" / "compute-sanitizer"
    exe.parent.mkdir()
    exe.write_text(FAKE.format(log=log))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    return log


def test_sanitize_without_a_sanitizer_says_so_in_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: None)
    assert cli.main(["check", "--sanitize"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "compute-sanitizer not found" in err


@pytest.mark.skipif(HAS_CUDA, reason="checks the GPU-less refusal")
def test_sanitize_without_a_gpu_says_so_in_one_line(fake_sanitizer, capsys):
    assert cli.main(["check", "--sanitize", "initcheck"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no CUDA GPU" in err
    assert not fake_sanitizer.exists()  # nothing was started


def test_sanitize_runs_one_process_a_variant_and_fails_on_a_report(fake_sanitizer, capsys,
                                                                    monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    rc = cli.main(["check", "--sanitize", "initcheck", "online_softmax", "fast_softmax",
                   "--dtype", "bf16", "--seed", "7", "--jobs", "2",
                   "--logs", str(tmp_path / "logs")])
    out = capsys.readouterr().out
    assert rc == 1, out
    lines = [ln for ln in out.splitlines() if ln.startswith("initcheck ")]
    assert lines[0].startswith("initcheck online_softmax: clean")
    assert "fast_softmax: 4 reports; first: Uninitialized __global__ memory read" in lines[1]
    assert "1 of 2 variants clean" in out
    calls = fake_sanitizer.read_text().splitlines()
    assert len(calls) == 2
    for call in calls:
        assert call.startswith("--tool initcheck --error-exitcode 86")
        assert "-m kernel_lab check" in call
        assert "--device cuda --case-times --cases sanitize" in call
        assert "--dtype bf16 --seed 7" in call
    assert (tmp_path / "logs" / "initcheck-fast_softmax.log").is_file()


def test_sanitize_runs_a_process_a_dtype_when_cores_are_spare(fake_sanitizer, capsys,
                                                               monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    rc = cli.main(["check", "--sanitize", "memcheck", "online_softmax", "--dtype", "fp32",
                   "--dtype", "bf16", "--jobs", "4", "--logs", str(tmp_path / "logs")])
    out = capsys.readouterr().out
    assert rc == 0, out
    calls = sorted(c.split("--dtype ")[1] for c in fake_sanitizer.read_text().splitlines())
    assert calls == ["bf16", "fp32"]  # one child each, one dtype each
    assert ("memcheck online_softmax: clean" in out and "4 variant x dtype checked over 40 "
            "cases; a process a dtype" in out)  # (the fake child says 2 each)
    assert {p.name for p in (tmp_path / "logs").iterdir()} == {
        "memcheck-online_softmax-fp32.log", "memcheck-online_softmax-bf16.log"}


def test_sanitize_all_clean_exits_0(fake_sanitizer, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cli.main(["check", "--sanitize", "memcheck", "naive_softmax", "warp_softmax"]) == 0
    assert "2 of 2 variants clean" in capsys.readouterr().out


def test_sanitize_kills_a_variant_past_its_timeout(fake_sanitizer, capsys, monkeypatch):
    import time

    exe = Path(fake_sanitizer).parent / "bin" / "compute-sanitizer"
    exe.write_text("#!/bin/sh\nsleep 60 & wait\n")  # the sleep is a grandchild: killed too
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    start = time.monotonic()
    assert cli.main(["check", "--sanitize", "synccheck", "naive_softmax", "--timeout", "1"]) == 1
    assert time.monotonic() - start < 20
    assert "synccheck naive_softmax: TIMED OUT after 1 s" in capsys.readouterr().out


def test_sanitize_defaults_cover_every_cuda_variant_and_racecheck_the_shared_ones():
    cuda = [v.name for v in kernel_lab.variants() if v.backend == "cuda"]
    assert sanitize.default_variants("memcheck") == cuda
    race = sanitize.default_variants("racecheck")
    assert set(race) < set(cuda)
    for name in ("fast_softmax", "fused_softmax_backward", "fast_log_softmax",
                 "fused_log_softmax_backward", "block_softmax", "cuda_cross_entropy"):
        assert name in race
    assert "naive_softmax" not in race  # no shared memory: nothing for racecheck
    assert set(sanitize.default_variants("initcheck", op="cross_entropy")) == {
        "cuda_cross_entropy"}


def test_sanitize_verdicts():
    s = sanitize.summarize
    checked = "2 variant x dtype checked over 31 cases: 2 passed, 0 failed, 0 ran nothing here"
    clean = s("v", "memcheck", 0, f"{checked}\n========= ERROR SUMMARY: 0 errors", 3.0)
    assert clean.ok and clean.line == ("memcheck v: clean (3 s, 2 variant x dtype checked over "
                                       "31 cases)")
    skipped = s("v", "memcheck", 0, f"{checked}; cases skipped: 4 x row length 4097 > 1024\n"
                "========= ERROR SUMMARY: 0 errors", 3.0)
    assert skipped.ok and "cases it refuses: 4 x row length 4097 > 1024" in skipped.line
    assert not s("v", "memcheck", 0, "no summary", 3.0).ok  # the child never ran under it
    # the sanitizer ran, but the check did not say what it ran
    unsaid = s("v", "memcheck", 0, "========= ERROR SUMMARY: 0 errors", 3.0)
    assert not unsaid.ok and "no check summary" in unsaid.line
    # a dtype that ran nothing is not a clean pass
    nothing = s("v", "memcheck", 0, "2 variant x dtype checked over 9 cases: 1 passed, 0 failed, "
                "1 ran nothing here\n========= ERROR SUMMARY: 0 errors", 3.0)
    assert not nothing.ok and "1 of 2 variant x dtype passed, 1 ran nothing" in nothing.line
    assert "TIMED OUT after 300 s; no case finished" in s("v", "memcheck", None, "", 300.0).line
    # a timed-out child's --case-times lines say how far it got and what was slow
    slow = s("v", "racecheck", None, "case v fp32 1x127: 2.50 s\ncase v fp32 1x33001: "
             "40.00 s\ncase v bf16 1x127: 1.00 s\n", 120.0)
    assert slow.line == ("racecheck v: TIMED OUT after 120 s; 3 cases finished, last v bf16 "
                         "1x127; slowest: v fp32 1x33001 40 s, v fp32 1x127 2 s, "
                         "v bf16 1x127 1 s")
    assert "check failed: │ v │ FAIL │" in s("v", "memcheck", 1, "│ v │ FAIL │\n========= ERROR "
                                             "SUMMARY: 0 errors", 3.0).line
    crashed = s("v", "memcheck", 1, "Traceback (most recent call last):\nRuntimeError: CUDA "
                "error: an illegal memory access\n========= ERROR SUMMARY: 0 errors", 3.0)
    assert not crashed.ok and "RuntimeError: CUDA error: an illegal memory access" in crashed.line
    none_ran = s("v", "memcheck", 2, "kernel_lab check: v ran no case here: no dtype\n", 3.0)
    assert not none_ran.ok and "ran no case" in none_ran.line
    race = s("v", "racecheck", 86, "========= Error: Race reported between Write access\n"
             "========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)\n"
             "========= ERROR SUMMARY: 2 errors", 3.0)
    assert not race.ok and "2 reports" in race.line and "Race reported" in race.line


def test_sanitize_merges_a_variants_children_one_a_dtype():
    s = sanitize.summarize
    log = ("1 variant x dtype checked over 31 cases: 1 passed, 0 failed{}\n"
           "========= ERROR SUMMARY: 0 errors")
    fp32 = s("v", "memcheck", 0, log.format("; cases skipped: 4 x row length 4097 > 1024"), 40.0)
    bf16 = s("v", "memcheck", 0, log.format(""), 25.0)
    both = sanitize.merge([fp32, bf16], "memcheck")
    assert both.ok and both.line == ("memcheck v: clean (40 s, 2 variant x dtype checked over 31 "
                                     "cases; cases it refuses: 4 x row length 4097 > 1024; a "
                                     "process a dtype)")
    reported = s("v", "memcheck", 86, "========= Invalid __global__ read of size 16 bytes\n"
                 "========= ERROR SUMMARY: 3 errors", 30.0)
    bad = sanitize.merge([fp32, reported], "memcheck")
    assert not bad.ok and bad.line == reported.line  # only the child that failed speaks
    assert sanitize.merge([bf16], "memcheck") is bf16


def test_sanitize_command_line():
    cmd = sanitize.command("/x/compute-sanitizer", "racecheck", "fast_softmax", ["fp32"], 3)
    assert cmd[:5] == ["/x/compute-sanitizer", "--tool", "racecheck", "--error-exitcode", "86"]
    assert "--racecheck-report" in cmd
    i = cmd.index(sys.executable)
    assert cmd[i:] == [sys.executable, "-m", "kernel_lab", "check", "fast_softmax", "--device",
                       "cuda", "--case-times", "--cases", "race", "--dtype", "fp32", "--seed",
                       "3"]
    for tool in ("memcheck", "initcheck"):
        assert sanitize.command("cs", tool, "v")[-2:] == ["--cases", "sanitize"]
    assert sanitize.command("cs", "synccheck", "v")[-2:] == ["--cases", "race"]
    assert sanitize.command("cs", "racecheck", "v", cases="sanitize")[-2:] == ["--cases",
                                                                              "sanitize"]


def test_sanitize_racecheck_runs_the_race_cases_unless_told(fake_sanitizer, capsys,
                                                            monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cli.main(["check", "--sanitize", "racecheck", "block_softmax"]) == 0
    assert cli.main(["check", "--sanitize", "racecheck", "block_softmax", "--cases",
                     "sanitize"]) == 0
    out = capsys.readouterr().out
    assert "over the race cases" in out and "over the sanitize cases" in out
    first, second = fake_sanitizer.read_text().splitlines()
    assert "--cases race" in first and "--cases sanitize" in second


# -- arch limits --------------------------------------------------------------------------------

def test_arch_limits_table():
    assert list(ARCHS) == ["sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]
    assert get_arch("sm_80").smem_per_block_optin == 163 * 1024
    assert get_arch("8.6").smem_per_block_optin == get_arch("89").smem_per_block_optin == 99 * 1024
    assert get_arch("sm_90a").smem_per_block_optin == 227 * 1024
    assert [a.name for a in ARCHS.values() if a.cluster] == ["sm_90", "sm_100", "sm_120"]
    assert all(a.max_threads_per_block == 1024 and a.max_registers_per_thread == 255
               for a in ARCHS.values())
    with pytest.raises(ValueError, match="known: sm_80"):
        get_arch("sm_70")


_HAS_SANITIZER = sanitize.find_sanitizer() is not None


@pytest.mark.skipif(not (HAS_CUDA and _HAS_SANITIZER), reason="needs a CUDA GPU and "
                    "compute-sanitizer")
@pytest.mark.slow  # ~60 s: two sanitizer children; .ci/gpu runs the sanitizer itself
def test_memcheck_runs_the_cases_of_simple_kernels_cleanly(tmp_path):
    """The real thing: each child runs its variant's cases under memcheck and says so."""
    r = subprocess.run([sys.executable, "-m", "kernel_lab", "check", "--sanitize", "memcheck",
                        "naive_softmax", "warp_softmax", "--dtype", "fp32", "--logs",
                        str(tmp_path)], text=True, capture_output=True, timeout=900, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("memcheck ")]
    assert len(lines) == 2 and all(": clean (" in ln for ln in lines), r.stdout
    assert all("1 variant x dtype checked" in ln for ln in lines), r.stdout
    for name in ("naive_softmax", "warp_softmax"):
        log = (tmp_path / f"memcheck-{name}.log").read_text()
        assert "ERROR SUMMARY: 0 errors" in log and "sanitize cases" in log


def test_the_parser_offers_what_the_modules_define():
    from kernel_lab.checking.checker import SELECTIONS

    check = cli.build_parser()._subparsers._group_actions[0].choices["check"]
    options = {a.dest: a for a in check._actions}
    assert tuple(options["sanitize"].choices) == sanitize.TOOLS
    assert tuple(options["cases"].choices) == SELECTIONS
