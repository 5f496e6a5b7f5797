"""kernel_lab.measure.rounds: the side races' interleaved rounds (bench/loss_step.py,
bench/lm_head.py), their statistics, ratios within a round and the modes a race picks."""

from __future__ import annotations

import pytest

from kernel_lab.measure import rounds


def test_rounds_interleave_reverse_and_drop_a_failing_mode(capsys):
    """bench/loss_step.py's modes: each once a round, the order reversed the next; a mode that
    raises is dropped and said."""
    calls = []

    def timer(name, value):
        def run():
            calls.append(name)
            return value
        return run

    def broken():
        calls.append("peer")
        raise RuntimeError("row too long for this peer")

    errors = {}
    got = rounds.interleaved({"torch": timer("torch", 2.0), "lab": timer("lab", 1.0),
                              "peer": broken}, rounds=3, errors=errors)
    assert calls == ["torch", "lab", "peer", "lab", "torch", "torch", "lab"]
    assert got == {"torch": [2.0, 2.0, 2.0], "lab": [1.0, 1.0, 1.0]}
    assert "peer: RuntimeError: row too long" in capsys.readouterr().out
    assert errors == {"peer": "RuntimeError: row too long for this peer"}
    assert rounds.stats([3.0, 1.0, 2.0]) == {"min": 1.0, "median": 2.0, "max": 3.0, "spread": 1.0}


def test_an_error_is_one_line_without_terminal_colours():
    """A DSL's compile error (QuACK's, bf16 rows of 50257): colour codes and many lines; the
    race's line and its JSON keep the first line of text."""
    e = RuntimeError("\n\x1b[91m\x1b[1merror[INTERNAL]:\x1b[0m The compiler could not build "
                     "valid IR for this code.\n  \x1b[91merror:\x1b[0m more")
    assert rounds.one_line(e) == ("RuntimeError: error[INTERNAL]: The compiler could not build "
                                  "valid IR for this code.")
    assert rounds.one_line(ValueError()) == "ValueError: "
    assert rounds.one_line(ValueError("x" * 300), width=5) == "ValueError: xxxxx"


def test_ratios_taken_within_rounds_cancel_a_drifting_machine():
    """within_rounds (bench/lm_head.py's x cuBLAS): a machine whose speed halves from one round
    to the next still gets each mode's exact ratio to the reference, its spread 0, while the
    times themselves spread 8x."""
    cost = {"cuBLAS": 10.0, "chunked": 12.0, "torch": 25.0}
    speed, calls = [1.0], []

    def timer(name):
        def run():
            calls.append(name)
            took = cost[name] * speed[0]
            if len(calls) % 3 == 0:
                speed[0] *= 2  # each round twice as slow as the one before
            return took
        return run

    got = rounds.within_rounds(rounds.interleaved({n: timer(n) for n in cost}, rounds=4), "cuBLAS")
    assert calls == ["cuBLAS", "chunked", "torch", "torch", "chunked", "cuBLAS"] * 2
    assert {n: g["ratio"] for n, g in got.items()} == {"cuBLAS": 1.0, "chunked": 1.2,
                                                       "torch": 2.5}
    assert all(g["ratio_spread"] == 0 for g in got.values())
    assert got["chunked"]["median"] == 12.0 * (2 + 4) / 2  # rounds at speeds 1, 2, 4, 8
    assert got["chunked"]["spread"] == pytest.approx((96 - 12) / 36)


def test_pick_modes_keeps_the_order_asked_and_names_the_unknown():
    table = {"torch": 1, "lab": 2, "lab fused": 3}
    assert rounds.pick_modes(table, "") == (table, [])
    assert rounds.pick_modes(table, "")[0] is not table  # a copy: the caller may add rows
    assert rounds.pick_modes(table, " lab fused, torch") == ({"lab fused": 3, "torch": 1}, [])
    assert rounds.pick_modes(table, "lab,nope,,") == ({"lab": 2}, ["nope"])
