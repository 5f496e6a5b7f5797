"""The CUDA variants whose kernel file, or a header it includes, differs from a git revision
(one name a line; every CUDA variant when git cannot tell): `.ci/gpu quick`'s sanitizer list."""

import subprocess
import sys
from pathlib import Path

import kernel_lab
from kernel_lab.cuda.jit import cuda_src_dir, source_files

base = sys.argv[1] if len(sys.argv) > 1 else "origin/main"
cuda = [v for v in kernel_lab.variants() if v.backend == "cuda" and v.source]
try:
    out = subprocess.run(["git", "diff", "--name-only", base, "--", "cuda_src"], text=True,
                         capture_output=True, check=True).stdout
    changed = {Path(p).resolve() for p in out.split()}
except (OSError, subprocess.CalledProcessError):
    changed = None
root = cuda_src_dir().parent
for v in cuda:
    files = {f.resolve() for f in source_files(root / v.source)}
    if changed is None or files & changed:
        print(v.name)
