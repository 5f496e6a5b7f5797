#!/usr/bin/env bash
# install_peers.sh: install the peers (QuACK, Liger, Cut Cross-Entropy) from wheels on an offline
# machine.
#
#   bash bench/install_peers.sh --fetch DIR           (here, with network) download every wheel
#                                                    the peers need for the GPU machine's Python
#                                                    (PEER_PY, default 3.12; manylinux x86_64)
#                                                    and pack them into DIR/p1 and DIR/p2, each
#                                                    small enough for one device call
#   bash bench/install_peers.sh --stage DIR...       copy the wheels and parts in DIRs to the
#                                                    stage ($PEER_STAGE, default /tmp/peer_stage)
#   bash bench/install_peers.sh WHEEL_DIR [TARGET]   install what WHEEL_DIR and the stage hold
#                                                    into TARGET (default /tmp/peers), write
#                                                    TARGET/peers.env; then `. TARGET/peers.env`
#   bash bench/install_peers.sh --pack WHEEL_DIR PARTS_DIR [SIZE]     (what --fetch runs)
#
# DIR inside the repo and ignored by git (.whl/: `--fetch .whl`, ~3 min), then the device
# tool's two calls on one warm machine, the second at once (the stage lives in its /tmp):
#   carry [".whl/p1"]: bash bench/install_peers.sh --stage .whl/p1
#   carry [".whl/p2"]: bash bench/install_peers.sh .whl/p2 /tmp/peers && . /tmp/peers/peers.env
#
# The wheels (--fetch): quack-kernels 0.6.5 needs nvidia-cutlass-dsl (4.8.1: its -libs-base,
# -libs-core and, for CUDA 13, -libs-cu13 parts), apache-tvm-ffi, torch-c-dlpack-ext and einops;
# liger-kernel 0.8.5 and cut-cross-entropy 25.1.1 need nothing the machine lacks.
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

PURE=(quack-kernels==0.6.5 liger-kernel==0.8.5 cut-cross-entropy==25.1.1 einops
      nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1)
BINARY=(nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1
        "apache-tvm-ffi>=0.1.6,<0.2" torch-c-dlpack-ext)

if [[ "${1:-}" == "--fetch" ]]; then
    (( $# == 2 )) || die "usage: --fetch DIR"
    dir="$2" wheels="$2/wheels"
    mkdir -p "$wheels" "$dir/p1" "$dir/p2"
    "$py" -m pip download -q --no-deps -d "$wheels" "${PURE[@]}"
    "$py" -m pip download -q --no-deps -d "$wheels" --only-binary=:all: \
        --python-version "${PEER_PY:-3.12}" --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_24_x86_64 --platform manylinux2014_x86_64 "${BINARY[@]}"
    bash "$0" --pack "$wheels" "$dir/parts" >/dev/null
    parts=("$dir"/parts/*.part-*)
    mv "${parts[0]}" "$dir/p1/"  # one 30 MiB part; the rest and the whole wheels (~43 MiB)
    mv "${parts[@]:1}" "$wheels"/*.whl "$dir/p2/"
    rmdir "$dir/parts" "$wheels"
    du -sh "$dir/p1" "$dir/p2"
    exit 0
fi

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

(( $# >= 1 )) && [[ -d "$1" ]] || die "usage: WHEEL_DIR [TARGET] | --fetch DIR | --stage DIR... | --pack ..."
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
