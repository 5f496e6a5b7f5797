"""Host-side launch helpers of the CUDA variants (pure pointer/stride logic: runs on CPU)."""

import torch

from kernel_lab.checking.checker import run_checked
from kernel_lab.core.registry import Variant
from kernel_lab.cuda.sources import same_vector_phase, vec_width


def test_vec_width_is_elements_per_16_bytes():
    assert [vec_width(d) for d in (torch.float64, torch.float32, torch.bfloat16)] == [2, 4, 8]


def test_same_vector_phase():
    out = torch.empty(3, 8)
    assert same_vector_phase(out, torch.empty(3, 8)) == 1  # both 16-byte aligned
    flat = torch.empty(3 * 8 + 1)
    assert same_vector_phase(out, flat[1:].view(3, 8)) == 0  # input shifted by 4 bytes
    shifted_out = torch.empty(3 * 8 + 1)[1:].view(3, 8)
    assert shifted_out.data_ptr() % 16 == flat[1:].data_ptr() % 16 == 4  # torch aligns to 64
    assert same_vector_phase(shifted_out, flat[1:].view(3, 8)) == 1  # same 4-byte phase
    assert same_vector_phase(out, torch.empty(3, 9)[:, :8]) == 0  # row step 36 bytes vs 32
    assert same_vector_phase(out, torch.empty(3, 12)[:, :8]) == 1  # row step 48: same phase
    assert same_vector_phase(out[:1], torch.empty(1, 9)[:, :8]) == 1  # one row: step irrelevant


def test_checker_catches_a_variant_that_writes_its_input():
    def scribbles(x, dim=-1):
        y = torch.softmax(x, dim)
        x.zero_()
        return y

    v = Variant(name="scribbles", op="softmax", backend="torch", fn=scribbles,
                dtypes=(torch.float32,), description="writes its input")
    result, _ = run_checked(v, (torch.randn(2, 16),), {})
    assert not result.ok and "modified its input" in result.message
