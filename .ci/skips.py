"""Why a pytest run skipped what it skipped: its ``-ra`` SKIPPED lines summed by reason, largest
first, each with the files it came from (``.ci/gpu`` prints it: on a GPU a skip is a check that
did not run, so each reason should be one the machine explains, such as a second GPU).

    python3 .ci/skips.py tests.log [--top 15]
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict

# "SKIPPED [12] tests/test_x.py:88: needs 2 CUDA GPUs"
LINE = re.compile(r"^SKIPPED \[(\d+)\] ([^:]+):\d+: (.*)$")


def reasons(lines: list[str]) -> dict[str, tuple[int, set[str]]]:
    """{reason: (tests, files)} of the SKIPPED lines."""
    out: dict[str, tuple[int, set[str]]] = defaultdict(lambda: (0, set()))
    for line in lines:
        m = LINE.match(line.strip())
        if m:
            count, files = out[m[3]]
            out[m[3]] = (count + int(m[1]), files | {m[2]})
    return dict(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("log")
    p.add_argument("--top", type=int, default=15)
    args = p.parse_args(argv)
    with open(args.log, errors="replace") as f:
        table = reasons(f.read().splitlines())
    if not table:
        print("no SKIPPED lines in", args.log)
        return 0
    total = sum(n for n, _ in table.values())
    print(f"{total} skipped, {len(table)} reasons:")
    for reason, (n, files) in sorted(table.items(), key=lambda kv: -kv[1][0])[:args.top]:
        where = ", ".join(sorted(f.removeprefix("tests/") for f in files)[:3])
        more = f" +{len(files) - 3}" if len(files) > 3 else ""
        print(f"  {n:5d}  {reason[:110]}  ({where}{more})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
