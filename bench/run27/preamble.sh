# Sourced by the twenty-seventh run's device calls (gpu_call.sh, ab_call.sh, stagger_call.sh,
# ncu_call.sh, expsint_call.sh): the repository root, $OUT, the carried cubin cache (.klc: python
# -m kernel_lab compile), the project installed without network, and ab: one bench/ab_kernels.py
# A/B with its per-shape lines only (AB_TIMEOUT seconds, default 150).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT="${OUT:-/tmp/kernel_lab_gpu}"; mkdir -p "$OUT"
[ -d .klc ] && export KERNEL_LAB_CACHE_DIR="$PWD/.klc"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
ab() { timeout "${AB_TIMEOUT:-150}" python3 bench/ab_kernels.py "$@" 2>&1 | grep -vE "^(check|  )"; }
