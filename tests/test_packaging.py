"""A non-editable install must ship the kernel sources, not only a checkout."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_ships_cuda_and_triton_sources(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         str(ROOT), "-w", str(tmp_path)],
        check=True, capture_output=True, text=True,
    )
    (wheel,) = tmp_path.glob("kernel_lab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for cu in (ROOT / "cuda_src").glob("*.cu*"):
        assert f"kernel_lab/cuda_src/{cu.name}" in names
    for py in (ROOT / "triton_src").glob("*.py"):
        assert f"kernel_lab/triton_src/{py.name}" in names
    # shipped inside the package, never as top-level import packages
    assert not any(n.startswith(("cuda_src/", "triton_src/")) for n in names)
    assert "kernel_lab/ops/softmax/op.py" in names


def test_cuda_src_is_found_from_the_package():
    from kernel_lab.cuda.jit import cuda_src_dir

    assert (cuda_src_dir() / "online_softmax.cu").is_file() or any(cuda_src_dir().glob("*.cu"))
