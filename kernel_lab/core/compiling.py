"""``torch.compile`` for benchmarks that must never be secretly eager.

Not a plan (:mod:`kernel_lab.core.plans`): a plan says which variant a lab call runs; this is
the compile variants' own inside, what a compiled graph is per signature, and a variant called
directly (the benchmark, ``check``) must get it too."""

from __future__ import annotations

import threading

import torch


class CompiledPerSignature:
    """``torch.compile`` of a function, one compiled artefact per input signature.

    Why: dynamo keeps its compiled graphs on the *code object* and, with ``dynamic=False``, stops
    recompiling after ``recompile_limit`` (8) shapes and silently runs the eager code from then on.
    A benchmark of "compile" that is secretly eager is a lie. So each signature (shape, strides,
    dtype, device, kwargs) gets its own copy of the code object - its own dynamo cache holding
    exactly one graph - and every call runs under ``error_on_recompile=True``: a guard failure
    raises instead of falling back. ``compiled_signatures`` counts what was built.
    """

    def __init__(self, fn, **compile_kwargs) -> None:
        self.fn = fn
        self.compile_kwargs = {"fullgraph": True, "dynamic": False, **compile_kwargs}
        self._cache: dict[tuple, object] = {}
        self._lock = threading.Lock()

    @property
    def compiled_signatures(self) -> int:
        return len(self._cache)

    def _compiled_for(self, key: tuple):
        c = self._cache.get(key)
        if c is None:
            with self._lock:
                c = self._cache.get(key)
                if c is None:
                    name = f"{self.fn.__name__}_{len(self._cache)}"
                    code = self.fn.__code__.replace(co_name=name)
                    clone = type(self.fn)(code, self.fn.__globals__, code.co_name,
                                          self.fn.__defaults__, self.fn.__closure__)
                    c = self._cache[key] = torch.compile(clone, **self.compile_kwargs)
        return c

    def __call__(self, *tensors: torch.Tensor, **kw):
        key = tuple(
            None if t is None else (tuple(t.shape), t.stride(), t.dtype, t.device,
                                    t.requires_grad) for t in tensors
        ) + tuple(sorted(kw.items()))
        compiled = self._compiled_for(key)
        with torch._dynamo.config.patch(error_on_recompile=True):
            return compiled(*tensors, **kw)
