"""The lab's exceptions: one type per way a call can go wrong, all raised before any launch."""

from __future__ import annotations


class KernelLabError(Exception):
    """Base class of every error the lab raises on purpose."""


class UnknownVariantError(KernelLabError, KeyError):
    """No variant (or op) of that name; the message lists close matches."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UnsupportedInputError(KernelLabError, ValueError):
    """A variant cannot run this input (dtype, device, shape limit). Raised before launch."""


class KernelCompileError(KernelLabError, RuntimeError):
    """NVRTC rejected a .cu file; the message names the real file(line) and holds the log."""

    def __init__(self, message: str, log: str = "", source: str = "") -> None:
        super().__init__(message)
        self.log = log
        self.source = source


class DuplicateVariantError(KernelLabError, ValueError):
    """Two variants (or a variant and an alias) registered under one name."""


class DuplicateOpError(KernelLabError, ValueError):
    """Two ops registered under one name."""
