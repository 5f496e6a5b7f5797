"""Triton kernels (``@triton.jit`` only).

Their launchers live in ``kernel_lab/ops/*/triton_variants.py``.
"""
