"""The test files of the named variants' ops (tests/test_*<op>*.py, a backward op's forward's
too), one a line: `.ci/gpu quick` runs them whole, as what a launch rule picks (cross-entropy's
on-chip kinds, its plans) is reached by tests whose ids name no variant."""

import sys
from pathlib import Path

import kernel_lab

tests = Path(__file__).resolve().parent.parent / "tests"
ops = {kernel_lab.get(name).op.removesuffix("_backward") for name in sys.argv[1:]}
files = sorted({f for op in ops for f in tests.glob(f"test_*{op}*.py")})
for f in files:
    print(f.relative_to(tests.parent))
