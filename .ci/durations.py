"""Where a pytest run's time went: its ``--durations`` lines summed by test file and by the
variant (or first parameter) a test names, largest first (``.ci/gpu`` prints it).

    python3 .ci/durations.py tests.log [--top 12]
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict

# "12.34s call     tests/test_x.py::test_y[a-b-c]"
LINE = re.compile(r"^\s*([0-9.]+)s (setup|call|teardown)\s+(\S+?)::(\S+)$")


def groups(lines: list[str]) -> tuple[dict, dict, float, int]:
    """(seconds by file, seconds by file::test[first parameter], total, tests)."""
    by_file: dict[str, float] = defaultdict(float)
    by_test: dict[str, float] = defaultdict(float)
    total, seen = 0.0, set()
    for line in lines:
        m = LINE.match(line)
        if not m:
            continue
        secs, _, path, test = float(m[1]), m[2], m[3], m[4]
        name, _, params = test.partition("[")
        first = params.rstrip("]").split("-", 1)[0] if params else ""
        by_file[path] += secs
        by_test[f"{path}::{name}" + (f"[{first}-...]" if first else "")] += secs
        total += secs
        seen.add((path, test))
    return by_file, by_test, total, len(seen)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("log")
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args(argv)
    with open(args.log, errors="replace") as f:
        by_file, by_test, total, n = groups(f.read().splitlines())
    if not n:
        print("no --durations lines in", args.log)
        return 0
    print(f"{total:.0f} test-seconds over {n} tests listed (each phase >= --durations-min)")
    for title, table in (("by file", by_file), ("by test and first parameter", by_test)):
        print(f"  {title}:")
        for key, secs in sorted(table.items(), key=lambda kv: -kv[1])[:args.top]:
            print(f"    {secs:7.0f} s  {secs / total:4.0%}  {key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
