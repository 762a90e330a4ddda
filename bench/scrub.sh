#!/bin/bash
# SPDX-License-Identifier: MIT
#
# scrub.sh — the background scrub's benchmark (issue 12): what a running
# scrub costs a trainer's staging, and how fast the scrub reads at its
# default rate and unlimited against fio's O_DIRECT read of the same disk;
# medians of R runs, written into docs/BENCHMARKS.md.
#
#   bench/scrub.sh [--runs R] [--size N] [--dir DIR] [--build-dir DIR] [--no-docs]
#
#   --runs R        runs (default 3); medians are reported
#   --size N        bytes per checkpoint (default 1G); two committed steps
#                   of it are what the scrub reads
#   --dir DIR       scratch directory for ckptd's state and fio's file
#                   (default /var/tmp/ckptd-bench; also $CKPT_BENCH_DIR)
#   --build-dir D   meson build directory (default build-bench, release)
#   --no-docs       print the table only; leave docs/BENCHMARKS.md alone
#
# Each run, against one daemon (--local-keep 2, the scrub switched by
# rewriting its config file and SIGHUP):
#   1. staging N bytes (ckpt-bench stage) with the scrub off;
#   2. the same with a scrub pass running (rate unlimited, so it reads as
#      hard as it can until the save opens and pauses it);
#   3. scrub throughput at the default rate (50M), bytes verified over 4 s
#      from `ckptctl --json status`;
#   4. the same unlimited, over 1.5 s;
#   5. fio sequential O_DIRECT read (io_uring, 1M, depth 16) of N bytes
#      laid out just before, as bench/run.sh measures it.
# Raw per-run output lands in bench/results/ (git-ignored).
set -euo pipefail

SRC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=3
SIZE=1G
DIR=${CKPT_BENCH_DIR:-/var/tmp/ckptd-bench}
BUILD=build-bench
DOCS=1
CMDLINE="bench/scrub.sh${*:+ $*}"

die() { echo "scrub.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
        case "$1" in
        --runs) RUNS=$2; shift 2 ;;
        --size) SIZE=$2; shift 2 ;;
        --dir) DIR=$2; shift 2 ;;
        --build-dir) BUILD=$2; shift 2 ;;
        --no-docs) DOCS=0; shift ;;
        -h|--help) sed -n '/^#   bench\/scrub.sh/,/^# Raw/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
        esac
done
. "$SRC_ROOT/bench/lib.sh"
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "--runs must be a positive integer"
SIZE_B=$(to_bytes "$SIZE")
command -v fio >/dev/null || die "fio is needed (apt-get install fio)"

cd "$SRC_ROOT"
if [ ! -f "$BUILD/build.ninja" ]; then
        meson setup "$BUILD" -Dbuildtype=release >&2
fi
ninja -C "$BUILD" daemon/ckptd daemon/ckptctl bench/ckpt-bench >&2

mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
WORK=$(mktemp -d "$DIR/scrub.XXXXXX")
RESULTS=$SRC_ROOT/bench/results/scrub-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS"
trap 'rm -rf "$WORK"' EXIT

export SRC_ROOT RUNS SIZE_B WORK RESULTS DOCS CMDLINE
export CKPTD=$SRC_ROOT/$BUILD/daemon/ckptd CKPTCTL=$SRC_ROOT/$BUILD/daemon/ckptctl
export BENCH=$SRC_ROOT/$BUILD/bench/ckpt-bench
export BUILD_TYPE=$(meson introspect --buildoptions "$BUILD" |
        python3 -c 'import json, sys; print([o["value"] for o in json.load(sys.stdin) if o["name"] == "buildtype"][0])')
export FSTYPE=$(findmnt -n -o FSTYPE -T "$WORK" 2>/dev/null || echo "?")
export FSSRC=$(findmnt -n -o SOURCE -T "$WORK" 2>/dev/null || echo "?")
export SCHED=$(cat "/sys/block/$(basename "$(findmnt -n -o SOURCE -T "$WORK" 2>/dev/null || echo none)" | sed 's/[0-9]*$//')/queue/scheduler" 2>/dev/null || echo "?")
export NPROC=$(nproc) KERNEL=$(uname -r) FIO_VERSION=$(fio --version)
export CPU=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
export DOCS_FILE=$SRC_ROOT/docs/BENCHMARKS.md
python3 "$SRC_ROOT/bench/scrub.py"
