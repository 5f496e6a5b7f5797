"""Timing, benchmarking, sweeps, presets and peak memory (imports checking, ops, core, cuda)."""
