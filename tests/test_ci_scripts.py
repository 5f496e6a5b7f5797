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
