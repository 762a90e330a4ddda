#!/bin/bash
# SPDX-License-Identifier: MIT
#
# memtier.sh — the memory tier's restore (issue 13) next to its limits: one
# shard of SIZE saved and committed, then restored R times by ckpt_read and
# ckpt_map from a daemon with [pool] memory_tier on, and again after a
# restart with it off (from disk), interleaved with a memcpy of the same
# bytes (bench/memtier-bench.c).  Prints medians and the ratios:
#
#   read_memory / memcpy   target >= 0.8 (as speeds: memcpy time / read time)
#   ckpt_map (memory)      target <= 10 ms for 1 GiB
#   read_disk              for comparison
#
#   bench/memtier.sh [--runs R] [--size N] [--dir DIR] [--build-dir DIR]
#
#   --runs R        runs per measurement (default 5)
#   --size N        bytes of the shard (default 1G), K/M/G suffixes
#   --dir DIR       scratch directory for ckptd's state (default
#                   /var/tmp/ckptd-bench-memtier; also $CKPT_BENCH_DIR)
#   --build-dir D   meson build directory, release (default build-bench;
#                   set up with `meson setup build-bench --buildtype=release`)
set -euo pipefail

SRC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=5
SIZE=1G
DIR=${CKPT_BENCH_DIR:-/var/tmp/ckptd-bench-memtier}
BUILD=build-bench

die() { echo "memtier.sh: $*" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. "$SRC_ROOT/bench/lib.sh"

while [ $# -gt 0 ]; do
        case "$1" in
        --runs) RUNS=$2; shift 2 ;;
        --size) SIZE=$2; shift 2 ;;
        --dir) DIR=$2; shift 2 ;;
        --build-dir) BUILD=$2; shift 2 ;;
        -h|--help) sed -n '3,21p' "$0"; exit 0 ;;
        *) die "unknown option '$1'" ;;
        esac
done
BYTES=$(to_bytes "$SIZE")
# one slot holds the whole shard, so that ckpt_map can map it from memory
SLOT_MIB=$(( (BYTES + 1048575) / 1048576 ))
POOL_MIB=$(( 2 * SLOT_MIB ))

cd "$SRC_ROOT"
[ -d "$BUILD" ] || meson setup "$BUILD" --buildtype=release >/dev/null
ninja -C "$BUILD" -j1 daemon/ckptd bench/memtier-bench >/dev/null
CKPTD=$BUILD/daemon/ckptd
TOOL=$BUILD/bench/memtier-bench

rm -rf "$DIR"
mkdir -p "$DIR"
export CKPT_SOCKET=$DIR/ckptd.sock
PID=
stop() { [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; PID=; }
trap 'stop; rm -rf "$DIR"' EXIT

start() {
        "$CKPTD" --state-dir "$DIR/state" --socket "$CKPT_SOCKET" --pool-size "${POOL_MIB}M" \
                --pool-slot-size "${SLOT_MIB}M" --scrub-enabled=no "$@" >>"$DIR/ckptd.log" 2>&1 &
        PID=$!
        wait_for_socket "$CKPT_SOCKET" "$PID" "$DIR/ckptd.log"
}

start
"$TOOL" save --size "$BYTES" --step 1
MEM=$("$TOOL" measure --size "$BYTES" --step 1 --runs "$RUNS")
stop
rm -f "$CKPT_SOCKET"
start --pool-memory-tier=no
DISK=$("$TOOL" measure --size "$BYTES" --step 1 --runs "$RUNS")
stop

val() { echo "$1" | sed -n "s/^$2=//p"; }
python3 - "$BYTES" "$RUNS" "$(val "$MEM" memcpy)" "$(val "$MEM" read)" "$(val "$MEM" map)" \
        "$(val "$MEM" map_touch)" "$(val "$DISK" memcpy)" "$(val "$DISK" read)" \
        "$(val "$DISK" map)" <<'PYEOF'
import sys
b, runs = int(sys.argv[1]), int(sys.argv[2])
memcpy, read, mp, touch, memcpy2, dread, dmap = map(float, sys.argv[3:])
gb = b / 1e9
print("memory tier, %d MiB shard, medians of %d runs" % (b >> 20, runs))
print("  memcpy of the same bytes     %8.1f ms  %6.2f GB/s" % (memcpy * 1e3, gb / memcpy))
print("  ckpt_read from memory        %8.1f ms  %6.2f GB/s  ratio %.2f (target >= 0.80)"
      % (read * 1e3, gb / read, memcpy / read))
print("  ckpt_map from memory         %8.3f ms  (target <= 10 ms); with a touch per page %.1f ms"
      % (mp * 1e3, touch * 1e3))
print("  ckpt_read from disk (tier off) %6.1f ms  %6.2f GB/s  ratio to memcpy %.2f"
      % (dread * 1e3, gb / dread, memcpy2 / dread))
print("  ckpt_map from disk (tier off) %7.1f ms  (MAP_POPULATE + whole-shard CRC32C)"
      % (dmap * 1e3))
PYEOF
