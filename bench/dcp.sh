#!/bin/bash
# SPDX-License-Identifier: MIT
#
# dcp.sh — issue 11's benchmark: torch.distributed.checkpoint (torch 2.13)
# through ckptd (ckptd.dcp.CkptdWriter / CkptdReader) against DCP's own
# FileSystemWriter with its best staging options, a memcpy, dcp.save,
# torch.save + fsync and the other checkpoint libraries users pick
# (torchsnapshot, ml-flashpoint, nvidia-resiliency-ext), 2 ranks of about
# 1 GiB each, medians of interleaved runs (bench/dcp.py does the measuring;
# see its header for what each number is).
#
#   bench/dcp.sh [--runs N] [--size-mb M] [--tensors K] [--small-tensors S]
#                [--methods a,b,...] [--dir DIR] [--no-install]
#                [--retry-install] [--keep]
#
#   BUILD=dir        meson build dir holding daemon/ckptd and
#                    client/libckpt.so (default build-bench; release is
#                    best).  Nothing is built here
#   --runs N         interleaved runs (default 3); medians are reported
#   --size-mb M      MiB of state per rank (default 1024)
#   --tensors K      tensors in the state (default 200)
#   --small-tensors S  tensors in the small-tensor save (default 5000)
#   --methods LIST   a subset of bench/dcp.py's methods (default all)
#   --dir DIR        scratch dir: ckptd's state dir and DCP's files, on one
#                    filesystem (default /var/tmp/ckptd-bench-dcp)
#   --no-install     do not pip install the other libraries; those missing
#                    are reported as not installed
#   --retry-install  try again to install a library that failed before (a
#                    failure is remembered in bench/results/install-failures/)
#   --keep           keep DIR afterwards
#
# The other libraries are installed with their exact pins and --no-deps
# (a dependency that asks for another torch would pull a multi-GB CUDA
# build), together with the pinned pure-Python dependencies they import;
# one that cannot be installed is reported with pip's error instead of a
# number.  Loads drop the page cache first (root only; otherwise said in
# the output).  Worker logs and the tables go to bench/results/dcp-DATE/.
set -euo pipefail

SRC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$SRC_ROOT"
BUILD=${BUILD:-build-bench}
RUNS=3
SIZE_MB=1024
TENSORS=200
SMALL=5000
METHODS=
DIR=/var/tmp/ckptd-bench-dcp
INSTALL=1
RETRY=0
KEEP=0
RANKS=2
SLOT=64M
CMDLINE="$( [ -n "${BUILD:-}" ] && echo "BUILD=$BUILD ")bench/dcp.sh${*:+ $*}"

die() { echo "dcp.sh: $*" >&2; exit 1; }
log() { echo "dcp.sh: $*" >&2; }
. "$SRC_ROOT/bench/lib.sh"

while [ $# -gt 0 ]; do
        case "$1" in
        --runs) RUNS=$2; shift 2 ;;
        --size-mb) SIZE_MB=$2; shift 2 ;;
        --tensors) TENSORS=$2; shift 2 ;;
        --small-tensors) SMALL=$2; shift 2 ;;
        --methods) METHODS=$2; shift 2 ;;
        --dir) DIR=$2; shift 2 ;;
        --no-install) INSTALL=0; shift ;;
        --retry-install) RETRY=1; shift ;;
        --keep) KEEP=1; shift ;;
        -h|--help) sed -n '/^#   bench\/dcp.sh/,/^# number/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option '$1' (see --help)" ;;
        esac
done
for v in RUNS SIZE_MB TENSORS SMALL; do
        [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer"
done

CKPTD=$SRC_ROOT/$BUILD/daemon/ckptd
LIBCKPT=$SRC_ROOT/$BUILD/client/libckpt.so
[ -x "$CKPTD" ] || die "$CKPTD not built (ninja -C $BUILD daemon/ckptd and client/libckpt.so.0.x.y)"
[ -e "$LIBCKPT" ] || die "$LIBCKPT not built"
python3 -c 'import torch; assert torch.__version__.startswith("2.13.")' 2>/dev/null ||
        die "python3 has no torch 2.13 (DEVELOPERS.md: pip install torch==2.13.0)"

RESULTS=$SRC_ROOT/bench/results/dcp-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS"

# ---- the other libraries, pinned, --no-deps ------------------------------------------------
# name==version of each library, then the pure-Python modules it imports
# (torchsnapshot 0.1.0: psutil, aiofiles, nest-asyncio, importlib-metadata
# of the 8.x line, whose 10.x pulls further packages)
OTHERS=(torchsnapshot==0.1.0 ml-flashpoint==0.0.10 nvidia-resiliency-ext==0.7.0)
TS_DEPS=(psutil==7.2.2 aiofiles==25.1.0 nest-asyncio==1.6.0 importlib-metadata==8.7.0 zipp==3.23.0)
installed_version() { # dist name -> version or nothing
        python3 -c 'import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass' "$1"
}
: >"$RESULTS/install.txt"
# pip_reason SPEC LOG: why pip could not install SPEC, in one line
pip_reason() {
        local spec=$1 log=$2 ver=${1#*==} tags
        if grep -q "No matching distribution" "$log"; then
                # which files the release has, and why pip passed each by
                tags=$(python3 -m pip download --no-deps -d "$WORK_PIP" "$spec" -vvv 2>&1 |
                        sed -n "s/.*Skipping link: none of the wheel's tags (\([^)]*\)).*-$ver-.*/\1/p" |
                        sort -u | tr '\n' ' ')
                echo "no file of $spec installs here (Python $(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])'), $(ldd --version | head -1 | awk '{ print "glibc " $NF }')): its wheels are for ${tags:-?}and it has no sdist"
        elif grep -q "Failed to clone repository" "$log"; then
                echo "its build (CMake FetchContent) clones sources from the network, which this machine cannot reach: $(grep -o "Failed to clone repository: '[^']*'" "$log" | head -1)"
        else
                grep -E "ERROR|Error" "$log" | head -3 | tr '\n' ' '
        fi
}
WORK_PIP=$(mktemp -d)
if [ "$INSTALL" = 1 ]; then
        for spec in "${OTHERS[@]}"; do
                name=${spec%%==*}; ver=${spec#*==}
                [ "$(installed_version "$name")" = "$ver" ] && continue
                # a failure is remembered (bench/results is git-ignored): trying
                # ml-flashpoint's build again costs a minute and ends the same
                failed=$SRC_ROOT/bench/results/install-failures/$spec
                if [ -s "$failed" ] && [ "$RETRY" = 0 ]; then
                        log "$spec: not installable here, as found on $(date -r "$failed" -u '+%F %H:%M UTC') (--retry-install tries again)"
                        cat "$failed" >>"$RESULTS/install.txt"
                        continue
                fi
                deps=()
                [ "$name" = torchsnapshot ] && deps=("${TS_DEPS[@]}")
                log "pip install --no-deps $spec ${deps[*]}"
                if ! python3 -m pip install --no-deps "$spec" "${deps[@]}" \
                        >"$RESULTS/pip-$name.log" 2>&1; then
                        why=$(pip_reason "$spec" "$RESULTS/pip-$name.log")
                        echo "$spec: pip install --no-deps failed: $why" >>"$RESULTS/install.txt"
                        mkdir -p "${failed%/*}"
                        tail -1 "$RESULTS/install.txt" >"$failed"
                        log "$spec could not be installed (see $RESULTS/pip-$name.log)"
                fi
        done
fi
rm -rf "$WORK_PIP"
python3 -c 'import torch; assert torch.__version__ == "2.13.0+cpu" or torch.__version__.startswith("2.13.0")' ||
        die "torch is no longer 2.13.0 after the installs"
for spec in "${OTHERS[@]}"; do
        name=${spec%%==*}
        [ -n "$(installed_version "$name")" ] ||
                grep -q "^$spec:" "$RESULTS/install.txt" ||
                echo "$spec: not installed (--no-install)" >>"$RESULTS/install.txt"
done

# ---- scratch space, daemon ------------------------------------------------------------------
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
WORK=$(mktemp -d "$DIR/run.XXXXXX")
STATE=$WORK/state
SOCK=$WORK/ckptd.sock
mkdir -p "$STATE" "$WORK/files"
need_kb=$(( SIZE_MB * 1024 * RANKS * 6 ))
avail_kb=$(df -Pk "$WORK" | awk 'NR == 2 { print $4 }')
[ "$avail_kb" -ge "$need_kb" ] || die "$WORK: need $((need_kb >> 20)) GiB free, have $((avail_kb >> 20)) GiB"

CKPTD_PID=
cleanup() {
        if [ -n "$CKPTD_PID" ] && kill -0 "$CKPTD_PID" 2>/dev/null; then
                kill -TERM "$CKPTD_PID" 2>/dev/null || true
                wait "$CKPTD_PID" 2>/dev/null || true
        fi
        [ "$KEEP" = 1 ] && log "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# the pool holds one whole step of every rank twice over (a save may begin
# while the previous one is still going to disk), in 64 MiB slots
SLOT_MB=64
POOL_MB=$(( (2 * RANKS * SIZE_MB + SLOT_MB - 1) / SLOT_MB * SLOT_MB ))
[ "$POOL_MB" -ge 256 ] || POOL_MB=256
"$CKPTD" --state-dir "$STATE" --socket "$SOCK" --pool-size "${POOL_MB}M" \
        --pool-slot-size "$SLOT" --local-keep 2 --log-level notice >"$RESULTS/ckptd.log" 2>&1 &
CKPTD_PID=$!
wait_for_socket "$SOCK" "$CKPTD_PID" "$RESULTS/ckptd.log"

export CKPT_SOCKET=$SOCK CKPT_LIBRARY=$LIBCKPT DCP_BENCH_INSTALL_NOTES=$RESULTS/install.txt
export PYTHONPATH=$SRC_ROOT/client/python${PYTHONPATH:+:$PYTHONPATH}
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(date +%s)
python3 "$SRC_ROOT/bench/dcp.py" --runs "$RUNS" --size-mb "$SIZE_MB" --tensors "$TENSORS" \
        --small-tensors "$SMALL" --ranks "$RANKS" --dir "$WORK/files" --socket "$SOCK" \
        --results "$RESULTS" ${METHODS:+--methods "$METHODS"} >"$RESULTS/dcp.txt"
T_END=$(date +%s)
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

{
        echo "Command: \`$CMDLINE\` — $(date -u '+%Y-%m-%d %H:%M UTC'), $RUNS runs, medians, $((T_END - T_START)) s."
        echo
        echo "State: $RANKS ranks × $SIZE_MB MiB in $TENSORS tensors (DTensors sharded on dim 0, fp32 and bf16);"
        echo "ckptd --pool-size ${POOL_MB}M --pool-slot-size $SLOT --local-keep 2 ($(git -C "$SRC_ROOT" log -1 --format=%h));"
        echo "torch $(python3 -c 'import torch; print(torch.__version__)'); $(nproc) CPUs, state dir and DCP's files on"
        echo "$(findmnt -n -o FSTYPE -T "$WORK" 2>/dev/null) ($(findmnt -n -o SOURCE -T "$WORK" 2>/dev/null)); load $LOAD_START at the start, $LOAD_END at the end."
        echo
        cat "$RESULTS/dcp.txt"
        if [ -s "$RESULTS/install.txt" ]; then
                echo
                echo "Not installed here:"
                sed 's/^/- /' "$RESULTS/install.txt"
        fi
} | tee "$RESULTS/summary.md"
