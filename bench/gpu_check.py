"""The GPU check of bench/'s scripts: on a machine without a usable CUDA GPU, a script that
needs one says so in one line and exits 2, before it loads torch; ``--help`` still works.

    if __name__ == "__main__":  # at the top of a script, before its heavy imports
        from gpu_check import require_gpu  # bench/ is sys.path[0] when a script runs

        require_gpu("it times ...")

Standard library only. No NVIDIA driver (no ``libcuda``) is answered without importing torch;
where a driver is, torch decides (a CPU-only torch build, ``CUDA_VISIBLE_DEVICES=""``).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Sequence
from pathlib import Path

EXIT_CODE = 2
_DRIVERS = ("libcuda.so.1", "libcuda.so", "nvcuda.dll")


def _driver_present() -> bool:
    for name in _DRIVERS:
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


def why_no_gpu() -> str | None:
    """Why no CUDA GPU is usable here (a few words), or None when one is."""
    driver = _driver_present()
    if not driver and "torch" not in sys.modules:
        return "none here"
    import torch

    if torch.cuda.is_available():
        return None
    if not driver:
        return "none here"
    if torch.version.cuda is None:
        return f"none usable here: torch {torch.__version__} is built without CUDA"
    return "none usable here"


def refuse(what: str, why: str = "none here", hint: str = "", script: str | None = None,
           ) -> None:
    """Print ``bench/<script> needs a CUDA GPU (<why>): <what>[; <hint>]`` to stderr and exit 2.
    ``script``: its file (default: the running script, ``sys.argv[0]``)."""
    name = f"bench/{Path(script or sys.argv[0]).name}"
    print(f"{name} needs a CUDA GPU ({why}): {what}" + (f"; {hint}" if hint else ""),
          file=sys.stderr)
    raise SystemExit(EXIT_CODE)


def _asks_for(argv: Sequence[str], option: str, value: str) -> bool:
    return any(a == f"{option}={value}" or a == option and b == value
               for a, b in zip(argv, [*argv[1:], ""]))


def require_gpu(what: str, argv: Sequence[str] | None = None, cpu_option: str | None = None,
                script: str | None = None) -> None:
    """Return if a CUDA GPU is usable, or the command line (``argv``, default
    ``sys.argv[1:]``) asks for help (``-h``, ``--help``) or for the CPU (``cpu_option cpu``,
    e.g. ``--device cpu``); else :func:`refuse` with ``what`` (what the script does that needs
    the GPU)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if "-h" in argv or "--help" in argv:
        return
    if cpu_option is not None and _asks_for(argv, cpu_option, "cpu"):
        return
    why = why_no_gpu()
    if why is not None:
        refuse(what, why, f"{cpu_option} cpu runs it on the CPU" if cpu_option else "", script)
