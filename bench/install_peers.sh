#!/usr/bin/env bash
# install_peers.sh: install the peers (QuACK, Liger, Cut Cross-Entropy) from wheels on an offline
# machine. WHEEL_DIR from: pip download --no-deps quack-kernels==0.6.5 liger-kernel==0.8.5
# cut-cross-entropy==25.1.1 (plus nvidia-cutlass-dsl's wheels for QuACK).
#
#   bash bench/install_peers.sh WHEEL_DIR [TARGET]   install what WHEEL_DIR and the stage hold
#                                                    into TARGET (default /tmp/peers), write
#                                                    TARGET/peers.env; then `. TARGET/peers.env`
#   bash bench/install_peers.sh --stage DIR...       copy the wheels and parts in DIRs to the
#                                                    stage ($PEER_STAGE, default /tmp/peer_stage)
#   bash bench/install_peers.sh --pack WHEEL_DIR PARTS_DIR [SIZE]     (here, after pip download)
#
# Why parts: the device tool carries at most 64 MiB a call (repo included), and the CuTe DSL's
# compiled library (nvidia_cutlass_dsl_libs_cu13, 92 MB) is larger. --pack recompresses every
# wheel over SIZE (default 30M) as a zip of LZMA members (the same files and RECORD; pip reads
# them) and splits it into PARTS_DIR/NAME.whl.part-aa, -ab, ... (`split -b SIZE`), removing it
# from WHEEL_DIR. A first device call carries some parts and runs --stage, which leaves them in
# /tmp of the warm machine; the next call, carrying the rest, installs: parts from WHEEL_DIR and
# the stage are joined in suffix order; a joined wheel that is not a whole zip (a part missing)
# is reported and left out, so the other peers still install.
#
# Install: pip --no-index --no-deps --target (the machine already has torch, triton, numpy,
# cuda-bindings, typing-extensions, protobuf); nvidia_cutlass_dsl's .pth file
# (`sys.path.insert(0, <nvidia_cutlass_dsl>/dsl_packages)`) is not run for a --target folder, so
# peers.env puts that folder on PYTHONPATH too. Exit 0 when quack, liger_kernel and
# cut_cross_entropy all import,
# 1 otherwise (peers.env is written either way; the missing peer shows as a skip reason).
set -euo pipefail

stage="${PEER_STAGE:-/tmp/peer_stage}"
py="${PYTHON:-python3}"

die() { echo "install_peers: $*" >&2; exit 2; }

if [[ "${1:-}" == "--pack" ]]; then
    (( $# >= 3 )) || die "usage: --pack WHEEL_DIR PARTS_DIR [SIZE]"
    src="$2" parts="$3" size="${4:-30M}"
    limit=$(numfmt --from=iec "$size")
    mkdir -p "$parts"
    for whl in "$src"/*.whl; do
        (( $(stat -c %s "$whl") > limit )) || continue
        name=$(basename "$whl")
        echo "packing $name (LZMA, parts of $size)"
        "$py" - "$whl" "$parts/$name" <<'EOF'
import sys, zipfile
src, dst = sys.argv[1:3]
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_LZMA) as zout:
    for info in zin.infolist():
        data = zin.read(info)  # before the type changes: read() decompresses by it
        info.compress_type = zipfile.ZIP_LZMA
        zout.writestr(info, data)
EOF
        rm -f "$parts/$name".part-*
        split -b "$size" "$parts/$name" "$parts/$name.part-"
        rm "$parts/$name" "$whl"
    done
    ls -l "$parts"
    exit 0
fi

if [[ "${1:-}" == "--stage" ]]; then
    shift
    (( $# >= 1 )) || die "usage: --stage DIR..."
    mkdir -p "$stage"
    for dir in "$@"; do
        find "$dir" -maxdepth 1 -type f \( -name '*.whl' -o -name '*.whl.part-*' \) \
            -exec cp -v {} "$stage/" \;
    done
    exit 0
fi

(( $# >= 1 )) && [[ -d "$1" ]] || die "usage: WHEEL_DIR [TARGET] | --stage DIR... | --pack ..."
wheels="$1" target="${2:-/tmp/peers}"
work="$target.wheels"  # joined / gathered wheels, beside TARGET so pip never sees them inside it
rm -rf "$work" && mkdir -p "$work" "$target"

# Gather whole wheels (the stage first: WHEEL_DIR's copy wins) and join the parts of each.
for dir in "$stage" "$wheels"; do
    [[ -d "$dir" ]] || continue
    find "$dir" -maxdepth 1 -type f -name '*.whl' -exec cp {} "$work/" \;
done
declare -A seen=()
for part in "$stage"/*.whl.part-* "$wheels"/*.whl.part-*; do
    if [[ -e "$part" ]]; then seen["$(basename "$part")"]="$part"; fi
done
for name in $(printf '%s\n' "${!seen[@]}" | sed 's/\.part-[a-z]*$//' | sort -u); do
    for key in $(printf '%s\n' "${!seen[@]}" | grep -F "$name.part-" | sort); do
        cat "${seen[$key]}"
    done > "$work/$name"
    if ! "$py" -c 'import sys, zipfile; sys.exit(zipfile.ZipFile(sys.argv[1]).testzip())' \
            "$work/$name" 2>/dev/null; then
        echo "install_peers: $name is incomplete (a part is missing): left out" >&2
        rm "$work/$name"
    fi
done
[[ -n "$(ls "$work")" ]] || die "no wheels in $wheels or $stage"

"$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$target" "$work"/*.whl

pypath="$target"
if [[ -d "$target/nvidia_cutlass_dsl/dsl_packages" ]]; then
    pypath="$pypath:$target/nvidia_cutlass_dsl/dsl_packages"
fi
echo "export PYTHONPATH=$pypath\${PYTHONPATH:+:\$PYTHONPATH}" > "$target/peers.env"
cat "$target/peers.env"

# Each peer on its own, so one broken import names itself and the other still reports.
status=0
for pair in quack:quack-kernels liger_kernel:liger-kernel cut_cross_entropy:cut-cross-entropy; do
    PYTHONPATH="$pypath${PYTHONPATH:+:$PYTHONPATH}" "$py" - "${pair%%:*}" "${pair#*:}" <<'EOF' \
        || status=1
import importlib, importlib.metadata as md, sys
mod, dist = sys.argv[1:3]
try:
    importlib.import_module(mod)
except Exception as e:
    sys.exit(f"install_peers: {mod} does not import: {type(e).__name__}: {e}")
extra = f", nvidia-cutlass-dsl {md.version('nvidia-cutlass-dsl')}" if mod == "quack" else ""
print(f"{mod}: {dist} {md.version(dist)}{extra}")
EOF
done
exit "$status"
