"""Comparing runs: ``--benchmark-compare-fail`` by group (the ``host`` group's cells get their own
threshold), and the compared run's timing methods.

A device cell's figure (device time per call, CUDA events) holds to a few percent between runs;
a host cell's (``bench/test_host.py``: host time per call as a multiple of its op's torch call,
both timed in the same rounds) moves more, with the process's own layout and the machine's
load, so one 5 % threshold for both cries wolf on the host rows. ``pytest bench --host-fail
SPEC`` (default :data:`DEFAULT_HOST_FAIL`; the syntax of ``--benchmark-compare-fail``, or
``same``) judges the host cells; every other cell keeps ``--benchmark-compare-fail``. The
project's bench plugin (``bench/conftest.py``) wraps pytest-benchmark's checks with
:func:`by_group` when the session starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

HOST_GROUP = "host"
DEFAULT_HOST_FAIL = "median:10%"


def parse_host_fail(spec: str) -> Any:
    """``--host-fail``'s value as a pytest-benchmark check, or None for ``same``; ValueError
    naming the option on a bad spec."""
    import argparse

    from pytest_benchmark.utils import parse_compare_fail

    if spec == "same":
        return None
    try:
        return parse_compare_fail(spec)
    except argparse.ArgumentTypeError:
        raise ValueError(f"--host-fail {spec!r}: give FIELD:N% or FIELD:DIFF as "
                         "--benchmark-compare-fail takes (e.g. median:10%), or 'same'") from None


def _group(current: Any, compared: Any) -> str | None:
    group = getattr(current, "group", None)
    if group is None and isinstance(compared, dict):
        group = compared.get("group")
    return group


class ByGroup:
    """One compare-fail check: cells of ``group`` are judged by ``other`` (None: not by this
    one), every other cell by ``check``. pytest-benchmark calls ``fails(current, compared)``."""

    def __init__(self, check: Any, other: Any, group: str = HOST_GROUP) -> None:
        self.check, self.other, self.group = check, other, group

    def fails(self, current: Any, compared: Any) -> str | None:
        if _group(current, compared) == self.group:
            return None if self.other is None else self.other.fails(current, compared)
        return self.check.fails(current, compared)

    def __repr__(self) -> str:
        return f"ByGroup({self.check!r}, {self.group}: {self.other!r})"


def by_group(checks: Sequence[Any], host: Any) -> list[Any]:
    """``checks`` (``--benchmark-compare-fail``'s) with the host group judged once, by
    ``host`` instead (None: ``checks`` as they are)."""
    if host is None or not checks:
        return list(checks)
    return [ByGroup(c, host if i == 0 else None) for i, c in enumerate(checks)]


def timing_methods(saved: Iterable[dict]) -> dict[str, tuple[str, int]]:
    """The device cells of a saved pytest-benchmark run (its ``benchmarks`` entries): test id ->
    (method, K) from ``extra_info`` (``events`` or ``graph``; host and CPU cells have no method
    to repeat)."""
    out = {}
    for bench in saved:
        info = bench.get("extra_info") or {}
        if info.get("method") in ("events", "graph"):
            out[bench["fullname"]] = (info["method"], int(info.get("k") or 1))
    return out
