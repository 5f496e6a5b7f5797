"""Test setup. On a machine without a CUDA GPU, Triton kernels run in Triton's interpreter.

TRITON_INTERPRET must be set before anything imports triton, so it is decided here, first.
"""

import os
import sys

import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    assert "triton" not in sys.modules, "triton was imported before tests/conftest.py"
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402  (after TRITON_INTERPRET is decided)

DEVICE = "cuda" if HAS_CUDA else "cpu"


def pytest_report_header(config):
    mode = torch.cuda.get_device_name() if HAS_CUDA else "no CUDA GPU: Triton runs interpreted"
    return f"kernel_lab tests on {DEVICE} ({mode})"


@pytest.fixture
def device() -> str:
    return DEVICE


needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
