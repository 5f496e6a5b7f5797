"""The lab's exceptions: one type per way a call can go wrong, all raised before any launch.

Which built-in type each mistake is, so ``except TypeError`` / ``except ValueError`` work as
they do for PyTorch's own functions:

* an argument of the wrong type (a list where a tensor goes, ``dim="a"``): :class:`InputTypeError`,
  a ``TypeError``;
* a value the lab cannot take (a dtype, device or shape a variant refuses, a class index out of
  range): :class:`UnsupportedInputError`, a ``ValueError``; ``dim`` out of range:
  :class:`DimRangeError`, an ``IndexError`` as PyTorch raises and a ``ValueError``;
* a name that is not registered: :class:`UnknownVariantError`, a ``KeyError``.

Every one is a :class:`KernelLabError`, whose message is one line: ``python -m kernel_lab``
prints it alone (no traceback) and exits 2.
"""

from __future__ import annotations

from typing import Any


class KernelLabError(Exception):
    """Base class of every error the lab raises on purpose."""


class UnknownVariantError(KernelLabError, KeyError):
    """No variant (or op) of that name; the message lists close matches."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UnsupportedInputError(KernelLabError, ValueError):
    """A variant cannot run this input (dtype, device, shape limit). Raised before launch."""


class InputTypeError(UnsupportedInputError, TypeError):
    """An argument of the wrong type: not a tensor (``kernel_lab.softmax([1.0, 2.0])``), or a
    ``dim`` that is not an int. A ``TypeError``; also an :class:`UnsupportedInputError` (so a
    ``ValueError``), which code written before this class existed catches."""


class DimRangeError(UnsupportedInputError, IndexError):
    """``dim`` outside ``[-ndim, ndim)``: an ``IndexError``, as PyTorch raises, and a
    ``ValueError`` (an :class:`UnsupportedInputError`)."""


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


def given(value: Any, limit: int = 40) -> str:
    """What a caller passed, for a message: its type and a short one-line repr
    (``list [1.0, 2.0]``, ``str 'a'``, ``None``)."""
    if value is None:
        return "None"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the real mistake
        text = ""
    text = " ".join(text.split())  # one line
    if len(text) > limit:
        text = text[:limit - 3] + "..."
    name = type(value).__name__
    return f"{name} {text}" if text and text != name else name


def wrong_type(where: str, arg: str, value: Any, expected: str) -> InputTypeError:
    """``<where>: <arg> must be <expected>, got <type> <repr>`` as an :class:`InputTypeError`."""
    return InputTypeError(f"{where}: {arg} must be {expected}, got {given(value)}")


def not_a_tensor(where: str, arg: str, value: Any, dlpack: bool = False) -> InputTypeError:
    """The lab's refusal of a non-tensor argument: ``kernel_lab.softmax: x must be a
    torch.Tensor, got list [1.0, 2.0]``. ``dlpack``: DLPack arrays are taken too (``run``)."""
    what = "a torch.Tensor or a DLPack array (CuPy, ...)" if dlpack else "a torch.Tensor"
    return wrong_type(where, arg, value, what)
