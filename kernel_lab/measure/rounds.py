"""Interleaved rounds for the side races (``bench/loss_step.py``, ``bench/lm_head.py``): each
mode timed once a round, the order reversed every other round, so that a GPU's clocks or a
host's speed drifting during a run reach every mode alike; a ratio to a reference taken within
its round cancels that drift outright."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def one_line(e: BaseException, width: int = 100) -> str:
    """``Type: message`` in one line of at most ``width`` characters of message: terminal colour
    codes dropped, the first non-blank line kept (a DSL's compile errors span many)."""
    lines = [ln.strip() for ln in _ANSI.sub("", str(e)).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {(lines[0] if lines else '')[:width]}"


def interleaved(timers: dict[str, Callable[[], float]], rounds: int,
                errors: dict[str, str] | None = None) -> dict[str, list[float]]:
    """Each timer's result in ``rounds`` rounds: every timer once a round, in the given order,
    then reversed the next round. A timer that raises is dropped, its error printed (and kept
    in ``errors`` by name, in :func:`one_line`'s form)."""
    out: dict[str, list[float]] = {name: [] for name in timers}
    names = list(timers)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            if name not in out:
                continue
            try:
                out[name].append(timers[name]())
            except Exception as e:  # noqa: BLE001 - a peer's limit is a cell, not a stop
                said = one_line(e)
                print(f"  {name}: {said}")
                if errors is not None:
                    errors[name] = said
                del out[name]
    return out


def stats(samples: list[float]) -> dict[str, float]:
    """min, median, max and spread ((max - min) / median) of one mode's rounds."""
    med = statistics.median(samples)
    return {"min": min(samples), "median": med, "max": max(samples),
            "spread": (max(samples) - min(samples)) / med if med else 0.0}


def within_rounds(samples: dict[str, list[float]],
                  reference: str | Callable[[str], str]) -> dict[str, dict[str, float]]:
    """Per mode of :func:`interleaved`'s ``samples``: its times' :func:`stats`, ``ratio``, the
    median of its round-by-round ratios to its reference (``reference``: one mode's name, or a
    mode's name -> its reference's; a reference's rounds must all be there), and
    ``ratio_spread``, theirs."""
    ref_of = reference if callable(reference) else (lambda _name: reference)
    out = {}
    for name, s in samples.items():
        r = stats([a / b for a, b in zip(s, samples[ref_of(name)])])
        out[name] = {**stats(s), "ratio": r["median"], "ratio_spread": r["spread"]}
    return out


def pick_modes(modes: dict, spec: str) -> tuple[dict, list[str]]:
    """The modes a comma-separated ``spec`` names, in its order (all of them for an empty one),
    and the names it gives that are not among them (the caller refuses those)."""
    wanted = [m.strip() for m in spec.split(",") if m.strip()]
    if not wanted:
        return dict(modes), []
    return {m: modes[m] for m in wanted if m in modes}, [m for m in wanted if m not in modes]
