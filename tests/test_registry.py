"""Registry behaviour: lookup, suggestions, errors before launch, semantics of run()."""

import numpy as np
import pytest
import torch
from conftest import DEVICE

import kernel_lab
from kernel_lab.core.registry import Variant, add_variant


def test_ops_and_variants_are_listed():
    assert "softmax" in kernel_lab.op_names() and "softmax_backward" in kernel_lab.op_names()
    names = [v.name for v in kernel_lab.variants("softmax")]
    for expected in ("torch_eager", "torch_naive", "compile_naive", "triton_fused",
                     "triton_online"):
        assert expected in names
    assert all(v.op == "softmax" for v in kernel_lab.variants("softmax"))
    assert len({v.name for v in kernel_lab.variants()}) == len(kernel_lab.variants())


def test_every_variant_is_data():
    for v in kernel_lab.variants():
        assert v.backend in ("torch", "compile", "triton", "cuda", "peer")
        assert v.dtypes and v.description and callable(v.fn)
        if v.backend == "cuda":
            assert v.source and v.source.startswith("cuda_src/") and v.source.endswith(".cu")
            assert v.source == f"cuda_src/{v.name}.cu", "CUDA variants are named after their file"


def test_unknown_variant_suggests_close_names():
    with pytest.raises(kernel_lab.UnknownVariantError, match="triton_online"):
        kernel_lab.get("triton_onlin")
    with pytest.raises(KeyError):  # also a KeyError, for dict-like callers
        kernel_lab.run("no_such_variant", torch.randn(2, 2))


def test_unknown_op():
    with pytest.raises(kernel_lab.UnknownVariantError, match="softmax"):
        kernel_lab.variants("sofmax")


def test_duplicate_name_raises():
    v = kernel_lab.get("torch_eager")
    with pytest.raises(kernel_lab.DuplicateVariantError):
        add_variant(Variant(name="torch_eager", op="softmax", backend="torch", fn=v.fn,
                            dtypes=v.dtypes, description="dup"))


def test_registrar_fixes_keywords_a_variant_may_replace(monkeypatch):
    from kernel_lab.core import registry

    made = []  # the Variants register would add (the registry itself stays as it is)
    monkeypatch.setattr(registry, "add_variant", made.append)
    variant = registry.registrar(op="softmax", backend="torch", dtypes=(torch.float32,),
                                 source="here.py")

    @variant("test_registrar_fixed", description="fixed keywords")
    def fixed(x, dim=-1):
        return torch.softmax(x, dim)

    @variant("test_registrar_replaced", op="softmax_backward", dtypes=(torch.float64,),
             description="two replaced")
    def replaced(y, dy, dim=-1):
        return dy

    a, b = made
    assert (a.name, a.op, a.backend, a.dtypes, a.source, a.fn) == (
        "test_registrar_fixed", "softmax", "torch", (torch.float32,), "here.py", fixed)
    assert (b.name, b.op, b.backend, b.dtypes, b.source, b.fn) == (
        "test_registrar_replaced", "softmax_backward", "torch", (torch.float64,), "here.py",
        replaced)


def test_unsupported_dtype_raises_value_error_before_launch():
    calls = []
    v = Variant(name="probe", op="softmax", backend="torch", fn=lambda x, dim=-1: calls.append(1),
                dtypes=(torch.float32,), description="probe")
    reason = v.supports(torch.zeros(2, 2, dtype=torch.int64))
    assert "int64" in reason
    with pytest.raises(ValueError, match="triton_fused.*int32"):
        kernel_lab.run("triton_fused", torch.zeros(2, 2, dtype=torch.int32))
    assert calls == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal")
def test_cpu_tensor_refused_by_gpu_only_variant():
    gpu_only = [v for v in kernel_lab.variants() if v.backend == "cuda"]
    assert gpu_only, "no CUDA variants registered"
    v = gpu_only[0]
    with pytest.raises(kernel_lab.UnsupportedInputError, match=f"{v.name}.*CUDA"):
        kernel_lab.run(v.name, torch.randn(2, 8))


def test_shape_limit_refused_with_reason():
    x = torch.empty(1, 70000)
    with pytest.raises(kernel_lab.UnsupportedInputError, match="70000"):
        kernel_lab.run("triton_fused", x)


def test_bad_dim_raises_index_error():
    with pytest.raises(IndexError):
        kernel_lab.run("torch_naive", torch.randn(2, 3), dim=2)


@pytest.mark.parametrize("name", ["torch_eager", "torch_naive", "triton_online", "triton_fused"])
def test_empty_tensors(name):
    for shape in [(0,), (0, 5), (5, 0), (2, 0, 3)]:
        x = torch.randn(shape, device=DEVICE)
        y = kernel_lab.run(name, x)
        assert y.shape == x.shape and y.dtype == x.dtype


def test_numpy_input_comes_back_as_numpy():
    x = np.random.default_rng().standard_normal((3, 10)).astype(np.float32)
    y = kernel_lab.run("torch_naive", x)
    assert isinstance(y, np.ndarray) and y.shape == x.shape
    np.testing.assert_allclose(y.sum(-1), 1.0, rtol=1e-5)


def test_requires_grad_input_runs():
    x = torch.randn(3, 33, device=DEVICE, requires_grad=True)
    for name in ("torch_naive", "triton_online"):
        y = kernel_lab.run(name, x)
        torch.testing.assert_close(y.detach(), torch.softmax(x.detach(), -1))


@pytest.mark.slow  # 45-78 s on a GPU machine's busy cores: the full tier
def test_compile_never_silently_falls_back_to_eager():
    """Dynamo's recompile limit (8) must not turn compile_naive into eager code after 8 shapes."""
    from torch._dynamo.utils import counters

    from kernel_lab.ops.softmax.torch_variants import _compiled_naive

    before = _compiled_naive.compiled_signatures
    graphs_before = counters["stats"]["unique_graphs"]
    shapes = [(2, n) for n in range(3, 3 + 11)]
    for s in shapes:
        x = torch.randn(s)
        torch.testing.assert_close(kernel_lab.run("compile_naive", x), torch.softmax(x, -1))
    assert _compiled_naive.compiled_signatures - before == len(shapes)
    # every one of the 11 shapes produced a real dynamo graph (an eager fallback makes none)
    assert counters["stats"]["unique_graphs"] - graphs_before == len(shapes)
    from torch import _dynamo

    assert _dynamo.config.error_on_recompile is False  # the user's global config is untouched


def test_every_launcher_names_where_its_code_is():
    """``kernel_lab list`` shows ``module.qualname`` of each variant's function: for the lab's
    variants a module of kernel_lab/ops/ that defines it, never a wrapper's (rows.row_op,
    per_row, the linear loss's checks): one hop from a variant's name to its code."""
    import importlib

    for v in kernel_lab.variants():
        mod, qual = v.fn.__module__, v.fn.__qualname__
        assert mod.startswith("kernel_lab.ops.") and "<locals>" not in qual, (v.name, mod, qual)
        assert hasattr(importlib.import_module(mod), qual.split(".")[0]), (v.name, mod, qual)


def test_the_lab_marks_a_constant_result_as_torch_compiler_does():
    """registry.assume_constant_result sets the mark torch.compiler.assume_constant_result sets
    (Dynamo runs the function, not traces it), without importing torch._dynamo: a change of
    torch's mark fails here, not silently under torch.compile (the op loader carries it:
    tests/test_torch_ops.py's first call inside a compiled function)."""
    from kernel_lab.core import registry

    def f():
        return None

    def g():
        return None

    assert registry.assume_constant_result(f) is f
    assert vars(f) == vars(torch.compiler.assume_constant_result(g)) != {}


def test_importing_the_lab_and_its_ops_imports_no_dynamo():
    """``import kernel_lab`` and its ops' first use add no ``torch._dynamo`` import to torch's own
    (seconds of every CLI command on a CPU)."""
    import subprocess
    import sys

    code = ("import sys, torch; before = 'torch._dynamo' in sys.modules; import kernel_lab; "
            "from kernel_lab.core import registry; registry.get('online_softmax'); "
            "print(before, 'torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = out.stdout.split()
    assert after == before
