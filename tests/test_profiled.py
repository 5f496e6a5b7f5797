"""kernel_lab.measure.profiled: the benches' --profile table, and the device's idle time between
a call's kernels (busy counts overlapping kernels once; the largest gaps name what ended them)."""

import torch

from kernel_lab.measure.profiled import device_gaps, gaps_line, kernel_table


def test_the_table_lists_the_calls_ops():
    """One call under torch.profiler, its ops by time (kernels on a GPU)."""
    a, b = torch.randn(64, 32), torch.randn(32, 48)
    table = kernel_table(lambda: (a @ b).softmax(-1))
    assert "aten::mm" in table and "aten::softmax" in table


def test_gaps_between_kernels():
    got = device_gaps([(0, 10, "a"), (12, 30, "b"), (15, 20, "c"), (130, 150, "d"),
                       (150, 160, "e")])
    assert got["span"] == 160 and got["busy"] == 10 + 18 + 30 and got["idle"] == 102
    assert got["gaps"] == [(100, "d"), (2, "b")]  # largest first, each named by what followed
    line = gaps_line(got)
    assert line.startswith("device busy 0.06 of 0.16 ms (idle 64%)")
    assert "0.10 ms before d" in line


def test_no_gaps_and_no_kernels():
    assert device_gaps([(5, 9, "a"), (0, 6, "b")]) == {"span": 9, "busy": 9, "idle": 0,
                                                       "gaps": []}
    assert gaps_line(device_gaps([])) == "device: no kernels"
    assert gaps_line(device_gaps([(0, 1000, "a")])) == "device busy 1.00 of 1.00 ms (idle 0%)"
