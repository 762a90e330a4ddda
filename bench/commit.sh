#!/bin/bash
# SPDX-License-Identifier: MIT
#
# commit.sh — ckptd's commit-latency benchmark (issue 10): the time from
# the last rank of a step on local disk (its save finished, ckpt_wait(LOCAL)
# returned) to every node reporting the step committed, for 1, 2, 4 and 8
# daemons on this machine (loopback, one daemon per "node", RANKS_PER_NODE
# ranks each, small shards: it measures the protocol and the fsyncs, not
# bandwidth), as median and p90 of STEPS steps per size.  And the
# single-node commit of this build against a base build (today's, before
# the cluster commit), both daemons running side by side and measured in
# turns, step by step; the target is new <= 1.1 x base.
#
# One process (bench/ckpt-bench commit) holds every rank's connection and
# one waiter per node blocked in ckpt_wait(COMMITTED) from before the
# commit, so every timestamp is on one CLOCK_MONOTONIC and no poll interval
# is in the numbers; rank 0 on node 0 commits as soon as the last rank's
# wait for LOCAL returned.  With daemons from before the cluster commit,
# node 0's commit never reaches the other nodes: ckpt-bench then commits on
# every node (commit mode "per-node" in the table), which measures today's
# protocol, not the cluster's.
#
#   bench/commit.sh           (no arguments; settings from the environment)
#
#   BUILD=dir                 meson build dir, release (default: build-bench);
#                             its targets are built first unless
#                             COMMIT_BENCH_NO_BUILD=1
#   BASE_BUILD=dir            a release build of the base (e.g. today's main:
#                             /work/base-289f465/build-bench) whose
#                             daemon/ckptd is compared on one node; unset: no
#                             comparison.  The client (ckpt-bench, libckpt)
#                             is BUILD's for both daemons
#   COMMIT_BENCH_NODES=".."   daemon counts (default "1 2 4 8")
#   COMMIT_BENCH_STEPS=N      timed steps per daemon count (default 50)
#   COMMIT_BENCH_COMPARE_STEPS=N  timed steps per build in the single-node
#                             comparison (default 200)
#   COMMIT_BENCH_WARMUP=W     untimed steps before each measurement (default 2)
#   COMMIT_BENCH_RANKS_PER_NODE=R   (default 2)
#   COMMIT_BENCH_SHARDS=K     shards per rank (default 2)
#   COMMIT_BENCH_SHARD_SIZE=S bytes per shard (default 16K)
#   COMMIT_BENCH_DIR=dir      where the scratch dir is made (default /var/tmp;
#                             the daemons' fsyncs land on its filesystem)
#   COMMIT_BENCH_KEEP=1       keep the scratch dir
#   COMMIT_BENCH_DOCS=0       print the tables only; leave docs/BENCHMARKS.md
#                             alone (default: rewrite its bench/commit.sh block)
#
# Raw output, daemon logs and the tables go to bench/results/commit-DATE/
# (git-ignored).
set -euo pipefail

SRC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$SRC_ROOT"

BUILD=${BUILD:-build-bench}
BASE_BUILD=${BASE_BUILD:-}
NODES=${COMMIT_BENCH_NODES:-1 2 4 8}
STEPS=${COMMIT_BENCH_STEPS:-50}
COMPARE_STEPS=${COMMIT_BENCH_COMPARE_STEPS:-200}
WARMUP=${COMMIT_BENCH_WARMUP:-2}
RPN=${COMMIT_BENCH_RANKS_PER_NODE:-2}
SHARDS=${COMMIT_BENCH_SHARDS:-2}
SHARD_SIZE=${COMMIT_BENCH_SHARD_SIZE:-16K}
KEEP=${COMMIT_BENCH_KEEP:-0}
DOCS=${COMMIT_BENCH_DOCS:-1}
POOL_SIZE=32M   # a step needs RPN x SHARDS slots of 1 MiB per daemon
SLOT_SIZE=1M
JOB=cbench
CMDLINE="$(env | { grep -E '^(BUILD|BASE_BUILD|COMMIT_BENCH_[A-Z_]*)=' || true; } | sort | tr '\n' ' ')bench/commit.sh"

die() { echo "commit.sh: $*" >&2; exit 1; }
log() { echo "commit.sh: $*" >&2; }

case "${1:-}" in
-h|--help) sed -n '/^#   bench\/commit.sh/,/^# (git-ignored)/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
"") ;;
*) die "no arguments are taken; settings come from the environment (see --help)" ;;
esac

. "$SRC_ROOT/bench/lib.sh"

for v in STEPS COMPARE_STEPS RPN SHARDS; do
        [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer"
done
[[ "$WARMUP" =~ ^[1-9][0-9]*$ ]] || die "COMMIT_BENCH_WARMUP must be at least 1 (the first step finds out how the daemons commit)"
for n in $NODES; do
        [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "COMMIT_BENCH_NODES: '$n' is not a daemon count"
done
SHARD_B=$(to_bytes "$SHARD_SIZE")
[ $((SHARD_B % 8)) = 0 ] && [ "$SHARD_B" -le $((1 << 20)) ] ||
        die "COMMIT_BENCH_SHARD_SIZE must be a multiple of 8 bytes, at most 1M (one slot)"
RANK_B=$((SHARDS * SHARD_B))

# ---- build (release) ----------------------------------------------------------------
buildtype() { # build dir -> its buildtype
        meson introspect --buildoptions "$1" 2>/dev/null |
                python3 -c 'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "buildtype"))' 2>/dev/null ||
                echo "?"
}
if [ "${COMMIT_BENCH_NO_BUILD:-0}" != 1 ]; then
        if [ ! -f "$BUILD/build.ninja" ]; then
                meson setup "$BUILD" -Dbuildtype=release >&2
        fi
        ninja -C "$BUILD" daemon/ckptd bench/ckpt-bench >&2
        if [ -n "$BASE_BUILD" ]; then
                [ -f "$BASE_BUILD/build.ninja" ] ||
                        die "BASE_BUILD=$BASE_BUILD is not a meson build dir (meson setup DIR -Dbuildtype=release in the base's tree)"
                ninja -C "$BASE_BUILD" daemon/ckptd >&2
        fi
fi
CKPTD=$SRC_ROOT/$BUILD/daemon/ckptd
BENCH=$SRC_ROOT/$BUILD/bench/ckpt-bench
[ -x "$CKPTD" ] && [ -x "$BENCH" ] || die "$BUILD: ckptd or ckpt-bench not built"
BUILDTYPE=$(buildtype "$BUILD")
[ "$BUILDTYPE" = release ] || log "warning: $BUILD is a '$BUILDTYPE' build, not release"
BASE_CKPTD=
BASE_DESC=
if [ -n "$BASE_BUILD" ]; then
        BASE_BUILD=$(cd "$BASE_BUILD" && pwd)
        BASE_CKPTD=$BASE_BUILD/daemon/ckptd
        [ -x "$BASE_CKPTD" ] || die "$BASE_CKPTD not built"
        BASE_BUILDTYPE=$(buildtype "$BASE_BUILD")
        [ "$BASE_BUILDTYPE" = release ] || log "warning: $BASE_BUILD is a '$BASE_BUILDTYPE' build, not release"
        # (a build dir inside its source tree, as meson makes them, is inside its git tree)
        BASE_DESC="$(git -C "$BASE_BUILD" log -1 --format='%h %s' 2>/dev/null | cut -c1-60 || echo "?") ($BASE_BUILDTYPE)"
fi
NEW_DESC="$(git log -1 --format='%h %s' | cut -c1-60)$(git diff --quiet HEAD -- daemon proto client 2>/dev/null || echo ' + local changes') ($BUILDTYPE)"

# ---- scratch dir, results, cleanup ------------------------------------------------------
WORK=$(mktemp -d "${COMMIT_BENCH_DIR:-/var/tmp}/ckptd-commit.XXXXXX")
RESULTS=$SRC_ROOT/bench/results/commit-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS"
PSK=$WORK/psk
(umask 077; head -c 36 /dev/urandom | base64 | tr -d '\n' >"$PSK")
[ "$(wc -c <"$PSK")" = 48 ] || die "could not write a 48-character key"

PIDS=()
stop_all() {
        local p
        for p in "${PIDS[@]}"; do
                if kill -0 "$p" 2>/dev/null; then
                        kill -TERM "$p" 2>/dev/null || true
                        wait "$p" 2>/dev/null || true
                fi
        done
        PIDS=()
}
cleanup() {
        stop_all
        if [ "$KEEP" = 1 ]; then
                log "kept $WORK"
        else
                rm -rf "$WORK"
        fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_daemon NAME CKPTD [cluster flags...]: state dir and socket under
# WORK/NAME, log in RESULTS/NAME.log; waits for the socket
start_daemon() {
        local name=$1 bin=$2 sock=$WORK/$1.sock
        shift 2
        mkdir -p "$WORK/$name"
        echo "== $(date -u +%T.%N) $bin $*" >>"$RESULTS/$name.log"
        "$bin" --state-dir "$WORK/$name" --socket "$sock" --pool-size "$POOL_SIZE" \
                --pool-slot-size "$SLOT_SIZE" --local-keep 2 --log-level notice "$@" \
                >>"$RESULTS/$name.log" 2>&1 &
        PIDS+=($!)
        local pid=$!
        for _ in $(seq 1200); do
                [ -S "$sock" ] && return 0
                kill -0 "$pid" 2>/dev/null || { tail -20 "$RESULTS/$name.log" >&2; die "$name's ckptd exited at start"; }
                sleep 0.05
        done
        die "$name's ckptd did not create its socket within 60 s"
}

# bench OUTPUT STEPS [ckpt-bench options...]: one ckpt-bench commit run
bench() {
        local out=$1 steps=$2
        shift 2
        "$BENCH" --job "$JOB" --size "$RANK_B" --tensors "$SHARDS" --ranks-per-node "$RPN" \
                --steps "$steps" --warmup "$WARMUP" "$@" commit \
                >"$out" 2>>"$RESULTS/ckpt-bench.err" ||
                { tail -5 "$RESULTS/ckpt-bench.err" >&2; die "ckpt-bench commit failed (see $RESULTS)"; }
}

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(date +%s)

# ---- 1. one node: this build against the base, side by side ------------------------------
log "1 daemon: $COMPARE_STEPS steps${BASE_CKPTD:+ per build, in turns with the base}"
start_daemon single-new "$CKPTD"
single=(--sockets "$WORK/single-new.sock")
if [ -n "$BASE_CKPTD" ]; then
        start_daemon single-base "$BASE_CKPTD"
        single+=(--base-sockets "$WORK/single-base.sock")
fi
bench "$RESULTS/single.txt" "$COMPARE_STEPS" "${single[@]}"
stop_all

# ---- 2. N daemons, one cluster on loopback ----------------------------------------------
for nodes in $NODES; do
        [ "$nodes" -gt 1 ] || continue
        log "$nodes daemons: $STEPS steps"
        peers=$(free_ports "$nodes" | sed 's/[0-9][0-9]*/127.0.0.1:&/g; s/ /,/g')
        socks=
        for i in $(seq 0 $((nodes - 1))); do
                start_daemon "n$nodes-node$i" "$CKPTD" --cluster-node-count "$nodes" \
                        --cluster-node-index "$i" --cluster-peers "$peers" \
                        --cluster-replication-factor 1 --cluster-psk-file "$PSK"
                socks+=${socks:+,}$WORK/n$nodes-node$i.sock
        done
        bench "$RESULTS/nodes-$nodes.txt" "$STEPS" --sockets "$socks"
        stop_all
        rm -rf "$WORK"/n"$nodes"-node*
done
T_END=$(date +%s)
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- tables, docs ----------------------------------------------------------------------
FSTYPE=$(findmnt -n -o FSTYPE -T "$WORK" 2>/dev/null || echo "?")
FSSRC=$(findmnt -n -o SOURCE -T "$WORK" 2>/dev/null || echo "?")
export RESULTS NODES STEPS COMPARE_STEPS WARMUP RPN SHARDS SHARD_B CMDLINE FSTYPE FSSRC
export LOAD_START LOAD_END NEW_DESC BASE_DESC DOCS
export DURATION=$((T_END - T_START)) NPROC=$(nproc) KERNEL=$(uname -r)
export CPU=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
export DATE=$(date -u '+%Y-%m-%d %H:%M UTC') DOCS_FILE=$SRC_ROOT/docs/BENCHMARKS.md
export COST_TABLE=$(python3 "$SRC_ROOT/bench/commit-cost.py")
python3 "$SRC_ROOT/bench/commit-report.py"
