"""CUDA C++ sources (.cu kernel families, .cuh device helpers), JIT-compiled by kernel_lab.cuda.jit.

This file only makes the folder an importable package so it ships in the wheel.
"""
