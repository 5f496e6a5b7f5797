"""Runnable examples: ``python -m kernel_lab.examples.<name>``."""
