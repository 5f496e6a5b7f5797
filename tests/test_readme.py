"""README.md's code blocks do what the README says they do.

* ```python blocks run as written, each in a fresh interpreter (a temporary folder as its working
  directory, ``TRITON_INTERPRET`` left unset: ``import kernel_lab`` must turn the interpreter on
  by itself, as the README says). A block whose first line is ``# needs a CUDA GPU`` runs only on
  a GPU machine and is skipped with that reason elsewhere. A block whose first line is
  ``# FILE.py; run: torchrun ARGS FILE.py`` is saved as FILE.py and run under torchrun.
  A comment ``# -> TEXT`` promises that the block prints the line TEXT.
* ```bash blocks: a block with ``pip install`` is the set-up (each of its commands must be one
  that ``.ci/run`` runs). Every ``python -m kernel_lab ...`` command must parse with the CLI's
  parser and name registered variants; every ``python SCRIPT ...`` must exist and take its flags
  (``--help``). Commands of a block not marked ``# needs a CUDA GPU`` (other than the set-up)
  run for real, here, and must exit 0.
* Every file path the README names exists; the versions it states match pyproject.toml and
  ``.ci/run``; what it says runs on a CPU is what the registry says runs on a CPU.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TEXT = README.read_text()
PROSE = re.sub(r"^```.*?^```[ \t]*$", "", TEXT, flags=re.M | re.S)  # fenced blocks left out
GPU_MARK = "# needs a CUDA GPU"
HAS_CUDA = torch.cuda.is_available()
TIMEOUT_S = 300  # a block or a command; each takes seconds on 2 idle cores


@dataclass(frozen=True)
class Block:
    lang: str
    line: int  # of the opening fence
    code: str

    @property
    def gpu_only(self) -> bool:
        return self.code.startswith(GPU_MARK)

    @property
    def id(self) -> str:
        return f"{self.lang or 'text'}-L{self.line}"


def blocks(text: str = TEXT) -> list[Block]:
    out = []
    for m in re.finditer(r"^```([\w-]*)\n(.*?)^```\s*$", text, re.M | re.S):
        out.append(Block(m.group(1), text.count("\n", 0, m.start()) + 1, m.group(2)))
    return out


BLOCKS = blocks()
PYTHON = [b for b in BLOCKS if b.lang == "python"]
BASH = [b for b in BLOCKS if b.lang in ("bash", "sh", "console")]


def commands(block: Block) -> list[list[str]]:
    """The block's commands as argv lists (comments dropped, ``a && b`` split)."""
    out = []
    for line in block.code.splitlines():
        words = shlex.split(line.removeprefix("$ "), comments=True)
        cmd: list[str] = []
        for w in [*words, "&&"]:
            if w == "&&":
                if cmd:
                    out.append(cmd)
                cmd = []
            else:
                cmd.append(w)
    return out


def block_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=block_env(), capture_output=True, text=True,
                          timeout=TIMEOUT_S)


def explain(what: str, p: subprocess.CompletedProcess) -> str:
    return f"{what}: exit {p.returncode}\n--- stdout\n{p.stdout[-3000:]}\n--- stderr\n" \
           f"{p.stderr[-3000:]}"


# ---------------------------------------------------------------------------------- python

@pytest.mark.parametrize("block", PYTHON, ids=[b.id for b in PYTHON])
def test_python_block_runs(block: Block, tmp_path):
    if block.gpu_only and not HAS_CUDA:
        pytest.skip(f"README line {block.line}: needs a CUDA GPU")
    first = block.code.splitlines()[0]
    m = re.match(r"# (\w+\.py); run: torchrun (.*)$", first)
    if m:  # a script for torchrun, saved under the name it gives
        script, args = m.group(1), shlex.split(m.group(2))
        assert args[-1] == script, first
        (tmp_path / script).write_text(block.code)
        argv = [sys.executable, "-m", "torch.distributed.run", *args]
    else:
        (tmp_path / "block.py").write_text(block.code)
        argv = [sys.executable, "block.py"]
    p = run(argv, tmp_path)
    assert p.returncode == 0, explain(f"README line {block.line}", p)
    printed = {line.strip() for line in p.stdout.splitlines()}
    for promise in re.findall(r"# -> (.+)$", block.code, re.M):
        assert promise.strip() in printed, (
            f"README line {block.line} promises the line {promise.strip()!r}; it printed:\n"
            f"{p.stdout[-3000:]}")


def test_some_python_block_runs_on_a_cpu():
    """The skips above must leave something that runs on any machine."""
    assert any(not b.gpu_only for b in PYTHON)
    assert any(b.gpu_only for b in PYTHON + BASH), f"no block is marked {GPU_MARK!r}"


# ------------------------------------------------------------------------------------ bash

def is_setup(block: Block) -> bool:
    return "pip install" in block.code


def lab_args(cmd: list[str]) -> list[str] | None:
    """The arguments of ``[VAR=value ...] python -m kernel_lab ARGS`` (None: another command)."""
    while cmd and re.match(r"^\w+=", cmd[0]):
        cmd = cmd[1:]
    if cmd[:3] == ["python", "-m", "kernel_lab"] or cmd[:1] == ["kernel-lab"]:
        return cmd[3:] if cmd[0] == "python" else cmd[1:]
    return None


def check_lab_command(args: list[str], where: str) -> None:
    """Parse with the CLI's own parser (nothing runs) and look up the variants named."""
    from kernel_lab.cli import build_parser
    from kernel_lab.core import registry

    try:
        ns = build_parser().parse_args(args)
    except SystemExit as e:  # argparse printed why to stderr
        pytest.fail(f"{where}: `python -m kernel_lab {shlex.join(args)}` does not parse "
                    f"(exit {e.code})")
    names = list(getattr(ns, "names", None) or []) + [getattr(ns, "name", None)]
    for name in filter(None, names):
        registry.get(name)  # UnknownVariantError names it


def check_script(cmd: list[str], where: str) -> None:
    """``python SCRIPT ARGS``: the script exists; ``--help`` works and lists each flag used."""
    script = ROOT / cmd[1]
    assert script.is_file(), f"{where}: {cmd[1]} does not exist"
    p = run([sys.executable, str(script), "--help"], ROOT)
    assert p.returncode == 0, explain(f"{where}: {cmd[1]} --help", p)
    for flag in (w.split("=")[0] for w in cmd[2:] if w.startswith("--")):
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", p.stdout), \
            f"{where}: {cmd[1]} takes no {flag}:\n{p.stdout}"


def ci_commands() -> list[list[str]]:
    """.ci/run's command lines as argv lists (lines shlex cannot split are not commands)."""
    out = []
    for line in (ROOT / ".ci/run").read_text().splitlines():
        try:
            out.append(shlex.split(line, comments=True))
        except ValueError:
            pass
    return [c for c in out if c]


def in_order(needle: list[str], hay: list[str]) -> bool:
    """Each word of ``needle`` appears in ``hay``, in order (extra flags allowed)."""
    it = iter(hay)
    return all(w in it for w in needle)


@pytest.mark.parametrize("block", BASH, ids=[b.id for b in BASH])
def test_bash_block(block: Block, tmp_path):
    where = f"README line {block.line}"
    cmds = commands(block)
    assert cmds, f"{where}: an empty block"
    ci = ci_commands()
    to_run = []
    for cmd in cmds:
        args = lab_args(cmd)
        if args is not None:
            check_lab_command(args, where)
        elif cmd[0] == "python" and cmd[1:2] != ["-m"]:
            check_script(cmd, where)
        elif not is_setup(block):
            pytest.fail(f"{where}: no check for the command {shlex.join(cmd)!r}")
        if is_setup(block):  # what CI (a fresh CPU machine) runs
            assert any(in_order(cmd, c) for c in ci), \
                f"{where}: .ci/run does not run {shlex.join(cmd)!r}"
        elif not block.gpu_only:
            to_run.append(cmd)
    for cmd in to_run:  # "no GPU needed": they run here
        p = run([sys.executable, *cmd[1:]] if cmd[0] == "python" else cmd, tmp_path)
        assert p.returncode == 0, explain(f"{where}: {shlex.join(cmd)}", p)


def test_inline_lab_commands_parse():
    """Complete commands quoted in the prose (`python -m kernel_lab ...`) parse too."""
    spans = [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", PROSE)]
    found = 0
    for span in spans:
        if "[" in span or "python -m kernel_lab" not in span:
            continue  # a synopsis (`check [NAMES] ...`) or another command
        args = lab_args(shlex.split(span))
        if args:
            check_lab_command(args, f"README `{span}`")
            found += 1
    assert found


# ------------------------------------------------------------------------- paths, versions

PATH_EXT = r"(py|cu|cuh|md|toml|png|json|sh|txt)"


def named_paths() -> set[str]:
    """Paths in backticks, links and the Layout block's first column, plus script tokens of
    the bash blocks. Placeholders (<op>), home-relative and URL paths are left out."""
    words: list[str] = []
    for span in re.findall(r"`([^`]+)`", PROSE):
        words += re.findall(r"[\w./*<>~-]+", span)
    words += re.findall(r"\]\(([^)\s]+)\)", TEXT)
    for b in BLOCKS:
        if b.lang == "":  # the Layout block: "path[, path]   what it is"
            for line in b.code.splitlines():
                words += [w.strip() for w in re.split(r"\s{2,}", line)[0].split(",")]
        elif b in BASH:
            words += [w for cmd in commands(b) for w in cmd if "/" in w]
    out = set()
    for w in (w.rstrip(".,:;") for w in words):
        if "<" in w or w.startswith(("~", "http", "-")) or "://" in w or w.startswith(".["):
            continue
        if "/" in w or re.fullmatch(rf"[\w*-]+\.{PATH_EXT}", w) or w in ("LICENSE",):
            out.add(w)
    return out


def tree_files() -> list[Path]:
    out = []
    for d, dirs, files in os.walk(ROOT):
        dirs[:] = [x for x in dirs if not x.startswith(".") and x != "__pycache__"
                   and not x.endswith(".egg-info")]
        out += [Path(d) / f for f in files]
    return out


def test_named_paths_exist():
    paths = named_paths()
    assert {"bench/overhead.py", ".ci/run", "cuda_src/*.cu"} <= paths, sorted(paths)
    files = None
    missing = []
    for p in sorted(paths):
        if "/" in p:
            ok = any(ROOT.glob(p)) if "*" in p else (ROOT / p).exists()
        else:  # a bare file name: somewhere in the tree
            files = files if files is not None else tree_files()
            ok = any(f.match(p) for f in files)
        if not ok:
            missing.append(p)
    assert not missing, f"README names paths that do not exist: {missing}"


def pyproject_bound(package: str) -> str:
    m = re.search(rf'"{re.escape(package)}>=([\d.]+)', (ROOT / "pyproject.toml").read_text())
    assert m, f"pyproject.toml has no lower bound for {package}"
    return m.group(1)


def test_versions_are_the_tested_ones():
    """One statement: the README's "Tested:" versions are pyproject's lower bounds, and the
    set-up command pins the torch CI tests (the same pin as .ci/run)."""
    software = re.search(r"\*\*Software\.\*\*(.*?)\n- ", TEXT, re.S).group(1)
    assert "Tested:" in software
    torches = re.findall(r"PyTorch (\d+\.\d+)", software)
    assert len(torches) >= 2, software
    lowest = min(torches, key=lambda v: tuple(map(int, v.split("."))))
    assert pyproject_bound("torch") == lowest
    assert pyproject_bound("triton") == re.search(r"Triton (\d+\.\d+)", software).group(1)
    assert pyproject_bound("cupy-cuda13x") == re.search(r"CuPy (\d+\.\d+)", software).group(1)
    (pin,) = set(re.findall(r'"torch==([\d.]+)"', TEXT))
    assert ".".join(pin.split(".")[:2]) in torches
    assert f'"torch=={pin}"' in (ROOT / ".ci/run").read_text()


@pytest.mark.skipif(HAS_CUDA, reason="the README's CPU claim, checked on a CPU")
def test_what_runs_on_a_cpu():
    """"On a CPU the torch and Triton variants of every op run ..., and so do the torch.compile
    ones of softmax, log-softmax and cross-entropy (linear cross-entropy's need CUDA)"."""
    import kernel_lab

    seen = {}
    for v in kernel_lab.variants():
        if not v.fn.__module__.startswith("kernel_lab.ops."):
            continue  # a test module's toy op
        expected = {"torch": True, "triton": True, "cuda": False, "peer": False,
                    "compile": not v.op.startswith("linear_cross_entropy")}[v.backend]
        seen[v.name] = kernel_lab.runs_here(v)
        assert seen[v.name] == expected, (v.name, v.backend, kernel_lab.why_not_here(v))
    assert len(seen) > 20


def test_readme_size():
    """docs: user documentation, 8-12 KB."""
    assert 8_000 <= len(README.read_bytes()) <= 12_800
    assert not re.search(r"\b\d+(st|nd|rd|th) run\b", TEXT)

