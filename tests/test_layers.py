"""The package's layers (DESIGN.md, "Layout"): each package imports only the ones below it, the
package root holds only the public API, and nothing inside imports the root back. The same
contract as ``lint-imports`` (pyproject.toml's [tool.importlinter], run by .ci/run), read by
grimp here so the suite says which edge broke it."""

import pytest

# import-linter (the [dev] extra, which .ci/run installs) brings grimp; the GPU machine's Python
# has only the runtime packages, and the layering is the same there
grimp = pytest.importorskip("grimp", reason="needs grimp: pip install -e '.[dev]'")

LAYERS = (  # top to bottom; packages on one line are siblings that must not import each other
    ("kernel_lab.cli", "kernel_lab.distributed"),
    ("kernel_lab.measure",),
    ("kernel_lab.checking",),
    ("kernel_lab.ops",),
    ("kernel_lab.core",),
    ("kernel_lab.cuda",),
    ("kernel_lab.base", "kernel_lab.cuda_src", "kernel_lab.triton_src"),
)
PUBLIC = {"kernel_lab", "kernel_lab.__main__", "kernel_lab.nn"}  # the root's modules


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("kernel_lab", include_external_packages=False)


def _layer(module: str) -> tuple[int, str] | None:
    for rank, siblings in enumerate(LAYERS):
        for top in siblings:
            if module == top or module.startswith(top + "."):
                return rank, top
    return None


def test_no_import_runs_up_or_sideways(graph):
    wrong = []
    for m in sorted(graph.modules):
        here = _layer(m)
        if here is None:
            continue
        for imported in graph.find_modules_directly_imported_by(m):
            there = _layer(imported)
            if there is None:
                wrong.append(f"{m} -> {imported} (the public API)")
            elif there[0] < here[0] or there[0] == here[0] and there[1] != here[1]:
                wrong.append(f"{m} -> {imported}")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_the_root_holds_the_public_api_and_the_layers(graph):
    root = {m for m in graph.modules if m.count(".") <= 1}
    packages = {top for siblings in LAYERS for top in siblings}
    assert root - packages - {"kernel_lab.examples"} == PUBLIC


def test_no_cycle_between_modules(graph):
    cycles = []
    for m in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(m):
            if graph.chain_exists(imported, m):
                cycles.append(f"{m} <-> {imported}")
    assert not cycles, cycles
