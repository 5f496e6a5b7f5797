"""The helpers .ci/gpu runs on the GPU machine, checked here where a mistake costs nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

LOG = """\
============================= slowest durations ==============================
23.50s call     tests/test_correctness.py::test_matches_reference[compile_log_softmax-f64-3x5]
2.00s setup    tests/test_correctness.py::test_matches_reference[compile_log_softmax-f32-3x5]
17.10s call     tests/test_bench_tools.py::test_tune_long_rows
0.50s call     tests/test_x.py::test_plain
(12 durations < 0.5s hidden.  Use -vv to show these durations.)
=========== 5806 passed, 785 skipped in 297.22s (0:04:57) ===========
"""


def _script(name: str, log: str, tmp_path: Path) -> str:
    """What ``.ci/<name>`` prints for a pytest log holding ``log``."""
    path = tmp_path / "tests.log"
    path.write_text(log)
    return subprocess.run([sys.executable, str(REPO / ".ci" / name), str(path)],
                          capture_output=True, text=True, check=True).stdout


def _durations(log: str, tmp_path: Path) -> str:
    return _script("durations.py", log, tmp_path)


def test_durations_sums_by_file_and_by_variant(tmp_path):
    out = _durations(LOG, tmp_path).splitlines()
    assert out[0] == "43 test-seconds over 4 tests listed (each phase >= --durations-min)"
    by_file = out[out.index("  by file:") + 1]
    assert by_file.split() == ["26", "s", "59%", "tests/test_correctness.py"]
    by_test = out[out.index("  by test and first parameter:") + 1]
    assert by_test.endswith("tests/test_correctness.py::test_matches_reference"
                            "[compile_log_softmax-...]") and by_test.split()[0] == "26"
    assert any(line.endswith("tests/test_bench_tools.py::test_tune_long_rows") for line in out)


def test_durations_says_when_the_log_has_none(tmp_path):
    assert _durations("5 passed in 1.0s\n", tmp_path).startswith("no --durations lines")


SKIPS = """\
SKIPPED [4] tests/test_distributed.py:425: needs 2 CUDA GPUs
SKIPPED [2] tests/test_peers.py:40: QuACK is not installed
SKIPPED [1] tests/test_peers.py:90: QuACK is not installed
SKIPPED [3] tests/test_cuda_jit.py:12: needs 2 CUDA GPUs
=========== 5806 passed, 10 skipped in 297.22s (0:04:57) ===========
"""


def _skips(log: str, tmp_path: Path) -> str:
    return _script("skips.py", log, tmp_path)


def test_skips_sums_by_reason_with_their_files(tmp_path):
    out = _skips(SKIPS, tmp_path).splitlines()
    assert out[0] == "10 skipped, 2 reasons:"
    assert out[1].split()[:4] == ["7", "needs", "2", "CUDA"]
    assert out[1].endswith("(test_cuda_jit.py, test_distributed.py)")
    assert out[2].split()[0] == "3" and out[2].endswith("(test_peers.py)")
    assert _skips("5 passed\n", tmp_path).startswith("no SKIPPED lines")


def _wheel(path: Path, payload: bytes) -> None:
    """A minimal wheel of package ``toypeer`` (one module holding ``payload``'s length)."""
    import base64
    import hashlib
    import zipfile

    info = "toypeer-1.0.dist-info"
    files = {"toypeer/__init__.py": f"SIZE = {len(payload)}\n".encode(),
             "toypeer/blob.bin": payload,
             f"{info}/METADATA": b"Metadata-Version: 2.1\nName: toypeer\nVersion: 1.0\n",
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}

    def digest(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = "".join(f"{k},sha256={digest(v)},{len(v)}\n" for k, v in files.items())
    with zipfile.ZipFile(path, "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
        z.writestr(f"{info}/RECORD", record + f"{info}/RECORD,,\n")


def test_install_peers_packs_stages_joins_and_installs_a_split_wheel(tmp_path):
    """install_peers.sh's offline path without network: a wheel over the part size is
    recompressed and split (--pack), one part staged as a first device call would (--stage), the
    rest installed with it: the joined wheel installs and imports; the three real peers are
    missing here, so it exits 1 and peers.env is written all the same."""
    import os
    import random

    script = str(REPO / "bench" / "install_peers.sh")
    wheels, parts, first = tmp_path / "wheels", tmp_path / "parts", tmp_path / "p1"
    for d in (wheels, parts, first):
        d.mkdir()
    payload = random.Random(0).randbytes(300_000)  # incompressible: LZMA keeps it ~300 KB
    _wheel(wheels / "toypeer-1.0-py3-none-any.whl", payload)
    env = {**os.environ, "PEER_STAGE": str(tmp_path / "stage"), "PYTHON": sys.executable}

    def run(*args):
        return subprocess.run(["bash", script, *args], capture_output=True, text=True, env=env)

    assert run("--pack", str(wheels), str(parts), "100K").returncode == 0
    split = sorted(parts.iterdir())
    assert [p.name[-8:] for p in split] == [".part-aa", ".part-ab", ".part-ac"]
    assert not list(wheels.iterdir())  # the whole wheel left WHEEL_DIR
    split[0].rename(first / split[0].name)
    assert run("--stage", str(first)).returncode == 0
    target = tmp_path / "peers"
    done = run(str(parts), str(target))
    assert done.returncode == 1, done.stderr  # quack / liger / cce do not import here
    assert "toypeer" not in done.stderr  # joined whole: nothing reported incomplete
    sys.path.insert(0, str(target))
    try:
        import toypeer
        assert toypeer.SIZE == len(payload)
        assert (target / "toypeer" / "blob.bin").read_bytes() == payload
    finally:
        sys.path.remove(str(target))
        sys.modules.pop("toypeer", None)
    assert (target / "peers.env").read_text().startswith(f"export PYTHONPATH={target}")
    # a part missing: the wheel is reported incomplete and left out
    (tmp_path / "stage" / split[0].name).unlink()
    assert "incomplete" in run(str(parts), str(tmp_path / "again")).stderr


def test_install_peers_fetch_refuses_without_a_folder():
    out = subprocess.run(["bash", str(REPO / "bench" / "install_peers.sh"), "--fetch"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "usage: --fetch DIR" in out.stderr


def _op_tests(*names: str) -> list[str]:
    return subprocess.run([sys.executable, str(REPO / ".ci" / "op_tests.py"), *names],
                          capture_output=True, text=True, check=True, cwd=REPO).stdout.split()


def test_op_tests_name_the_files_of_the_variants_ops():
    """`.ci/gpu quick cuda_cross_entropy` runs the cross-entropy files whole (the on-chip test
    among them), a backward variant its forward op's; no names, no files."""
    files = _op_tests("cuda_cross_entropy_backward")
    assert "tests/test_cross_entropy_on_chip.py" in files
    assert "tests/test_plans_cross_entropy.py" in files
    assert all((REPO / f).is_file() and "cross_entropy" in f for f in files)
    assert _op_tests("online_softmax") == ["tests/test_log_softmax.py"]
    assert _op_tests() == []
