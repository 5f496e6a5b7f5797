"""The sanitizers' case sets reach every kernel kind each CUDA variant can pick (fp32, bf16), on a
CPU: each variant's own launcher runs on meta tensors with its launches recorded
(kernel_lab.checking.sanitize_cover), over `check --cases sanitize` (memcheck, initcheck) and
`--cases
race` (racecheck, synccheck); and every race case is needed."""

import re

import pytest
import torch

import kernel_lab
from kernel_lab.checking.checker import CASES, cases_for
from kernel_lab.checking.sanitize import TOOL_CASES
from kernel_lab.checking.sanitize_cover import (
    case_kinds,
    kind_of,
    possible_kinds,
    reached_kinds,
    simulated_launches,
)
from kernel_lab.core import registry

DTYPES = (torch.float32, torch.bfloat16)  # what .ci/gpu sanitizes
CUDA = [v.name for v in kernel_lab.variants() if v.backend == "cuda"]
# Kinds a variant's source declares that only the drop-in's in-place mode launches
# (kernel_lab.cross_entropy(..., inplace_backward=True)): no registered variant, so no
# `check --sanitize` run, reaches them (`.ci/gpu sanitize` memchecks them through
# tests/test_cross_entropy_on_chip.py). test_in_place_kinds_are_launched_by_the_in_place_mode.
IN_PLACE_ONLY = {"cuda_cross_entropy": {"cross_entropy_fwd<true>", "cross_entropy_row",
                                        "cross_entropy_row_cluster", "cross_entropy_row_slots",
                                        "cross_entropy_row_cluster_slots"},
                 "cuda_cross_entropy_backward": {"cross_entropy_scale"}}
# Kinds only many rows reach (cross-entropy's row scans in parts, past SCAN_ONE_BLOCK rows): the
# sanitize set has such a case, the race set keeps to 1-2 rows; `.ci/gpu sanitize` runs the race
# tools on them through tests/test_plans_cross_entropy.py (the thresholds lowered).
MANY_ROWS_ONLY = {"cuda_cross_entropy": {"cross_entropy_reduce_parts"},
                  "cuda_cross_entropy_backward": {"cross_entropy_den_parts"}}


def test_kind_of_drops_types_and_sizes_and_keeps_switches():
    assert kind_of("fast_softmax_persist_cluster<float, 16, 8>") == "fast_softmax_persist_cluster"
    assert kind_of("cross_entropy_fwd<__nv_bfloat16, true>") == "cross_entropy_fwd<true>"
    assert kind_of("naive_softmax<double>") == "naive_softmax"


def test_every_tool_has_a_case_set_and_every_set_its_tools():
    assert set(TOOL_CASES.values()) == {"sanitize", "race"}
    assert TOOL_CASES["racecheck"] == "race"


@pytest.mark.parametrize("selection", ["sanitize", "race"])
@pytest.mark.parametrize("name", CUDA)
def test_the_case_set_reaches_every_kind_the_variant_can_pick(name, selection):
    v = registry.get(name)
    for dtype in DTYPES:
        can = possible_kinds(v, dtype)
        assert can, f"{name} {dtype}: no launchable kind"
        reached = reached_kinds(v, dtype, selection)
        assert reached <= can, f"{name} {dtype}: launched kinds it cannot pick: {reached - can}"
        missing = can - reached - IN_PLACE_ONLY.get(name, set())
        if selection == "race":
            missing -= MANY_ROWS_ONLY.get(name, set())
        assert not missing, f"{name} {dtype} --cases {selection}: never launches {missing}"


def test_in_place_kinds_are_launched_by_the_in_place_mode(monkeypatch):
    from kernel_lab.ops.cross_entropy import cuda_variants as ce

    # its kept 1 asks whether a CUDA graph is being captured: no CUDA here
    monkeypatch.setattr(ce, "unit", lambda device, dtype: torch.ones((), dtype=dtype,
                                                                      device=device))
    for dtype in DTYPES:
        kinds = set()
        for on_chip, slots, n in ((False, True, 781), (True, True, 781), (True, True, 262144),
                                  (True, False, 262144), (True, True, 32000),
                                  (True, True, 50257)):
            monkeypatch.setattr(ce, "ON_CHIP_IN_PLACE", on_chip)
            monkeypatch.setattr(ce, "ON_CHIP_SLOTS", slots)
            logits = torch.empty(3, n, dtype=dtype, device="meta")
            target = torch.zeros(3, dtype=torch.int64, device="meta")
            with simulated_launches() as launched:
                ce.fused_forward(logits, target, None, -100, "mean", 0.0)
                ce.scale(logits, torch.empty((), dtype=dtype, device="meta"))
            kinds |= {kind_of(e) for e in launched}
        for name, left_out in IN_PLACE_ONLY.items():
            assert left_out <= possible_kinds(registry.get(name), dtype) & kinds


def _race_shapes() -> list[str]:
    return [c.label for c in cases_for("cuda", None, "race")]


def test_race_cases_are_small_rows_with_a_misaligned_base():
    race = cases_for("cuda", None, "race")
    assert race and all(len(c.shape) == 2 and c.shape[0] <= 2 for c in race)
    assert any(c.layout == "misaligned" for c in race)
    assert not set(race) & set(cases_for("cuda")), "race cases are racecheck's own, not in all"


def test_every_race_case_reaches_a_kind_no_other_case_does():
    """Per case, the (variant, dtype, kind) it alone reaches: none means it only costs time."""
    alone: dict[str, set] = {label: set() for label in _race_shapes()}
    seen: dict[tuple, set[str]] = {}
    for name in CUDA:
        v = registry.get(name)
        for dtype in DTYPES:
            for label, kinds in case_kinds(v, dtype, "race").items():
                for k in kinds:
                    seen.setdefault((name, dtype, k), set()).add(label)
    for key, labels in seen.items():
        if len(labels) == 1 and (label := next(iter(labels))) in alone:
            alone[label].add(key)
    assert all(alone.values()), {label for label, keys in alone.items() if not keys}


def test_sanitize_cases_hold_every_small_case_odd_rows_and_misaligned_bases():
    cases = cases_for("cuda", None, "sanitize")
    assert {c for c in CASES if not c.gpu_only} <= set(cases)
    lengths = {c.shape[-1] for c in cases if c.shape}
    assert {1, 127, 781, 50257, 262145} <= lengths
    misaligned = {c.shape[-1] for c in cases if c.layout == "misaligned"}
    assert {781, 50257, 262145, 524289} <= misaligned


@pytest.mark.parametrize("selection", ["core", "all", "sanitize", "race"])
def test_case_labels_are_unique_in_each_set(selection):
    labels = [c.label for c in cases_for("cuda", None, selection)]
    assert len(labels) == len(set(labels))


_EXPR = re.compile(r"\b\w+<[^<>]*>")


@pytest.mark.parametrize("n", [127, 4097, 50257, 58001, 151937, 262145, 1048577])
def test_the_simulated_launch_is_what_picks_shows(n):
    """The simulated launch of contiguous rows agrees with `python -m kernel_lab picks`
    (each launcher's launch_shape, a pure function of N and dtype)."""
    for name in CUDA:
        v = registry.get(name)
        shape = getattr(v.fn, "launch_shape", None)
        if shape is None:
            continue
        for dtype in DTYPES:
            shown = {kind_of(e) for e in _EXPR.findall(shape(n, dtype))}
            inputs, kw = _rows(v, n, dtype)
            with simulated_launches() as launched:
                v.fn(*inputs, **kw)
            assert shown and shown <= {kind_of(e) for e in launched}, (name, dtype, n)


def _rows(v, n: int, dtype: torch.dtype):
    from kernel_lab.checking.checker import Case, make_case_inputs

    return make_case_inputs(registry.get_op(v.op), Case((2, n)), dtype, "meta", None)
