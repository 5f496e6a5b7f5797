"""Mistakes get one line: bench/'s GPU scripts on a CPU ("needs a CUDA GPU", exit 2, before torch
loads), every bench script's ``--help`` (the whole docstring), the CLI's lab errors (one line
on stderr, exit 2; ``--traceback`` / KERNEL_LAB_TRACEBACK=1 for the traceback), and from
Python one built-in type per kind of mistake: a wrong type is a TypeError, a wrong value a
ValueError (dim out of range: also an IndexError, as PyTorch raises), each naming the
function, the argument and what was given."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import HAS_CUDA

import kernel_lab
from kernel_lab import cli
from kernel_lab.base.errors import DimRangeError, InputTypeError, KernelLabError

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"

# the scripts that time CUDA kernels: no way to run them without a GPU
GPU_SCRIPTS = ("overhead.py", "loss_step.py", "lm_head.py", "compare_gate.py", "edit_loop.py",
               "profile_config.py", "tune_backward.py", "tune_long_rows.py",
               "tune_short_rows.py", "vocab_parallel_step.py")
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py")
                 if not p.name.startswith("test_") and p.name not in ("conftest.py",
                                                                      "gpu_check.py"))


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=REPO, text=True, capture_output=True,
                          timeout=120)


# -- bench/: the GPU check and --help -----------------------------------------------------------

def test_every_script_that_times_cuda_is_listed():
    """A new bench script that needs a GPU joins GPU_SCRIPTS (it calls gpu_check's
    require_gpu); the others (stdlib tables, CPU-capable tools) are on this list's other side."""
    checked = {p.name for p in BENCH.glob("*.py") if "require_gpu(" in p.read_text()}
    assert set(GPU_SCRIPTS) <= checked, set(GPU_SCRIPTS) - checked
    assert checked - set(GPU_SCRIPTS) <= {"gpu_check.py", "auto_check.py", "call_path.py"}


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal on a machine without a GPU")
@pytest.mark.parametrize("script", GPU_SCRIPTS)
def test_gpu_script_on_a_cpu_says_so_in_one_line(script):
    r = _run(f"bench/{script}")
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, (r.returncode, r.stdout, r.stderr)
    assert lines[0].startswith(f"bench/{script} needs a CUDA GPU ("), lines
    assert "Traceback" not in r.stderr


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal on a machine without a GPU")
def test_asking_a_cpu_capable_tool_for_cuda_says_so_in_one_line(monkeypatch, capsys):
    auto_check = _load("auto_check.py", monkeypatch)
    with pytest.raises(SystemExit) as e:
        auto_check.parse_args(["--device", "cuda"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith("bench/auto_check.py needs a CUDA GPU (") and "--device cpu" in err


def test_the_gpu_check_lets_help_and_the_cpu_through(monkeypatch, capsys):
    gpu_check = _load("gpu_check.py", monkeypatch)
    gpu_check.require_gpu("it times", argv=["--shape", "8x8", "--help"])
    gpu_check.require_gpu("it times", argv=["-h"])
    gpu_check.require_gpu("it times", argv=["--device", "cpu"], cpu_option="--device")
    gpu_check.require_gpu("it times", argv=["--device=cpu"], cpu_option="--device")
    if HAS_CUDA:
        assert gpu_check.why_no_gpu() is None
        return
    assert gpu_check.why_no_gpu() is not None
    with pytest.raises(SystemExit) as e:  # --device cuda, or nothing, on a CPU: refused
        gpu_check.require_gpu("it times", argv=["--device", "cuda"], cpu_option="--device",
                              script="bench/x.py")
    assert e.value.code == 2
    assert capsys.readouterr().err.startswith("bench/x.py needs a CUDA GPU (")


def _load(script: str, monkeypatch):
    """bench/<script> as a module (not __main__: its GPU check does not run), with bench/ first
    on sys.path as when it runs as a script (the tune scripts import each other by name)."""
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location(f"_bench_{Path(script).stem}", BENCH / script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_prints_the_whole_docstring(script, monkeypatch, capsys):
    mod = _load(script, monkeypatch)
    with pytest.raises(SystemExit) as e:
        mod.main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert mod.__doc__.strip() in out, out


# -- the CLI: one line, exit 2 ------------------------------------------------------------------

def test_cli_lab_error_is_one_line_with_a_suggestion():
    r = _run("-m", "kernel_lab", "check", "onlin_softmax")
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("kernel_lab check: no variant named 'onlin_softmax'; did you "
                               "mean 'online_softmax'"), r.stderr


@pytest.mark.parametrize("argv, needle", [
    (["check", "no_such_variant"], "no variant named 'no_such_variant'"),
    (["check", "--op", "sofmax"], "no op named 'sofmax'; did you mean 'softmax'"),
    (["list", "--op", "nope"], "no op named 'nope'"),
])
def test_cli_errors_are_one_line_on_stderr(argv, needle, capsys):
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and needle in err, err


def test_cli_traceback_switch(monkeypatch, capsys):
    argv = ["check", "onlin_softmax"]
    with pytest.raises(kernel_lab.UnknownVariantError):
        cli.main(["--traceback", *argv])
    with pytest.raises(kernel_lab.UnknownVariantError):
        cli.main([*argv, "--traceback"])  # after the command too
    monkeypatch.setenv(cli.TRACEBACK_ENV, "1")
    with pytest.raises(kernel_lab.UnknownVariantError):
        cli.main(argv)
    monkeypatch.setenv(cli.TRACEBACK_ENV, "0")
    assert cli.main(argv) == 2


@pytest.mark.parametrize("raised, rc, needle", [
    (FileNotFoundError(2, "No such file or directory", "runs/x.json"), 2, "runs/x.json"),
    (KeyboardInterrupt(), 130, "interrupted"),
])
def test_cli_environment_errors_and_ctrl_c_are_one_line(raised, rc, needle, monkeypatch,
                                                        capsys):
    def dispatch(args):
        raise raised

    monkeypatch.setattr(cli, "_dispatch", dispatch)
    assert cli.main(["list"]) == rc
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kernel_lab list: ") and needle in err, err


def test_cli_bug_keeps_its_traceback(monkeypatch):
    """An exception that is not the lab's refusal is a bug: it is not hidden."""
    def dispatch(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "_dispatch", dispatch)
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["list"])


# -- Python: one type per kind of mistake, one line naming function, argument and value -------

X = torch.randn(3, 5)
T = torch.tensor([0, 1, 2])
W = torch.randn(4, 5)

TYPE_MISTAKES = {
    "softmax(list)": (lambda: kernel_lab.softmax([1.0, 2.0]),
                      "kernel_lab.softmax: x must be a torch.Tensor, got list [1.0, 2.0]"),
    "softmax(None)": (lambda: kernel_lab.softmax(None),
                      "kernel_lab.softmax: x must be a torch.Tensor, got None"),
    "Softmax()(list)": (lambda: kernel_lab.Softmax()([1.0]),
                        "kernel_lab.softmax: x must be a torch.Tensor, got list [1.0]"),
    "log_softmax(list)": (lambda: kernel_lab.log_softmax([1.0, 2.0]),
                          "kernel_lab.log_softmax: x must be a torch.Tensor, got list"),
    "cross_entropy(list, t)": (lambda: kernel_lab.cross_entropy([1.0, 2.0], T),
                               "kernel_lab.cross_entropy: logits must be a torch.Tensor, got "
                               "list [1.0, 2.0]"),
    "cross_entropy(x, list)": (lambda: kernel_lab.cross_entropy(X, [0, 1, 2]),
                               "kernel_lab.cross_entropy: target must be a torch.Tensor, got "
                               "list [0, 1, 2]"),
    "cross_entropy(weight=list)": (lambda: kernel_lab.cross_entropy(X, T, [1.0] * 5),
                                   "kernel_lab.cross_entropy: weight must be a torch.Tensor"),
    "cross_entropy(reduction=1)": (lambda: kernel_lab.cross_entropy(X, T, reduction=1),
                                   "kernel_lab.cross_entropy: reduction must be 'mean', 'sum' "
                                   "or 'none', got int 1"),
    "cross_entropy(label_smoothing='a')": (
        lambda: kernel_lab.cross_entropy(X, T, label_smoothing="a"),
        "kernel_lab.cross_entropy: label_smoothing must be a float, got str 'a'"),
    "cross_entropy(ignore_index=1.5)": (
        lambda: kernel_lab.cross_entropy(X, T, ignore_index=1.5),
        "kernel_lab.cross_entropy: ignore_index must be an int, got float 1.5"),
    "linear_cross_entropy(list, w, t)": (
        lambda: kernel_lab.linear_cross_entropy([1.0], W, T),
        "kernel_lab.linear_cross_entropy: hidden must be a torch.Tensor, got list [1.0]"),
    "linear_cross_entropy(h, list, t)": (
        lambda: kernel_lab.linear_cross_entropy(X, [[1.0]], T),
        "kernel_lab.linear_cross_entropy: weight must be a torch.Tensor, got list [[1.0]]"),
    "run(name, list)": (lambda: kernel_lab.run("online_softmax", [1, 2]),
                        "online_softmax: x must be a torch.Tensor or a DLPack array"),
    "run(torch variant, list)": (lambda: kernel_lab.run("torch_eager", [1, 2]),
                                 "torch_eager: x must be a torch.Tensor or a DLPack array "
                                 "(CuPy, ...), got list [1, 2]"),
    "run(3, x)": (lambda: kernel_lab.run(3, X), "a variant name is a str, got int 3"),
    "softmax(dim='a')": (lambda: kernel_lab.softmax(X, dim="a"),
                         "kernel_lab.softmax: dim must be an int, got str 'a'"),
    "softmax(dim=1.5)": (lambda: kernel_lab.softmax(X, dim=1.5),
                         "kernel_lab.softmax: dim must be an int, got float 1.5"),
    "log_softmax(dim=1.5)": (lambda: kernel_lab.log_softmax(X, dim=1.5),
                             "kernel_lab.log_softmax: dim must be an int, got float 1.5"),
    "softmax(variant='triton_fused', dim='a')": (
        lambda: kernel_lab.softmax(X, dim="a", variant="triton_fused"),
        "kernel_lab.softmax: dim must be an int, got str 'a'"),
    "run(dim='a')": (lambda: kernel_lab.run("torch_eager", X, dim="a"),
                     "torch_eager: dim must be an int, got str 'a'"),
    "softmax(variant=3)": (lambda: kernel_lab.softmax(X, variant=3),
                           "kernel_lab.softmax: variant must be a variant name (str) or None, "
                           "got int 3"),
}


@pytest.mark.parametrize("case", TYPE_MISTAKES)
def test_a_wrong_type_is_the_labs_type_error(case):
    call, message = TYPE_MISTAKES[case]
    with pytest.raises(TypeError) as e:
        call()
    assert isinstance(e.value, InputTypeError), type(e.value)
    # written before InputTypeError: `except UnsupportedInputError` / ValueError still catch it
    assert isinstance(e.value, (kernel_lab.UnsupportedInputError, ValueError))
    assert str(e.value).startswith(message) and "\n" not in str(e.value), str(e.value)


VALUE_MISTAKES = {
    "softmax(dim=5)": (lambda: kernel_lab.softmax(X, dim=5), DimRangeError,
                       r"kernel_lab\.softmax: Dimension out of range \(expected to be in range "
                       r"of \[-2, 1\], but got 5\)"),
    "softmax(0-d, dim=1)": (lambda: kernel_lab.softmax(torch.tensor(1.0), dim=1), DimRangeError,
                            r"kernel_lab\.softmax: Dimension out of range"),
    "log_softmax(variant, dim=-3)": (
        lambda: kernel_lab.log_softmax(X, dim=-3, variant="triton_log_softmax"), DimRangeError,
        r"kernel_lab\.log_softmax: Dimension out of range"),
    "run(dim=2)": (lambda: kernel_lab.run("torch_naive", X, dim=2), DimRangeError,
                   r"torch_naive: Dimension out of range"),
    "softmax(int32)": (lambda: kernel_lab.softmax(torch.ones(3, 5, dtype=torch.int32)),
                       kernel_lab.UnsupportedInputError, r"dtype int32 not supported"),
    "cross_entropy(reduction='avg')": (lambda: kernel_lab.cross_entropy(X, T, reduction="avg"),
                                       ValueError, r"avg is not a valid value for reduction"),
    "cross_entropy(label_smoothing=2)": (
        lambda: kernel_lab.cross_entropy(X, T, label_smoothing=2.0), ValueError,
        r"label_smoothing must be between 0.0 and 1.0"),
    "cross_entropy(0-d logits)": (
        lambda: kernel_lab.cross_entropy(torch.tensor(1.0), torch.tensor(0)),
        kernel_lab.UnsupportedInputError, r"kernel_lab\.cross_entropy takes logits"),
    "linear_cross_entropy(reduction='avg')": (
        lambda: kernel_lab.linear_cross_entropy(X, W, T, reduction="avg"), ValueError,
        r"avg is not a valid value for reduction"),
}


@pytest.mark.parametrize("case", VALUE_MISTAKES)
def test_a_wrong_value_is_a_value_error_and_not_a_type_error(case):
    call, kind, match = VALUE_MISTAKES[case]
    with pytest.raises(ValueError, match=match) as e:
        call()
    assert isinstance(e.value, kind) and not isinstance(e.value, TypeError), type(e.value)
    assert "\n" not in str(e.value)
    if kind is DimRangeError:  # PyTorch raises IndexError: code written for it still catches
        assert isinstance(e.value, (IndexError, KernelLabError))


def test_right_calls_still_run():
    """The checks do not refuse what PyTorch takes: integer-like dims, a 0-d tensor's dim 0 /
    -1, keywords of the types F.cross_entropy takes."""
    import numpy as np

    torch.testing.assert_close(kernel_lab.softmax(X, dim=np.int64(0)), torch.softmax(X, 0))
    torch.testing.assert_close(kernel_lab.softmax(X, -2, "torch_eager"), torch.softmax(X, -2))
    assert kernel_lab.softmax(torch.tensor(2.0), dim=-1).item() == 1.0
    torch.testing.assert_close(
        kernel_lab.cross_entropy(X, T, ignore_index=np.int64(1), label_smoothing=0),
        torch.nn.functional.cross_entropy(X, T, ignore_index=1))

