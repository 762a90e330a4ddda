#!/bin/bash
# SPDX-License-Identifier: MIT
#
# replication.sh — ckptd's neighbour-replication benchmark: two daemons on
# this machine, node 0 and node 1 of a two-node clique (J=1, F=2) talking
# over loopback, each with its state dir on a device of its own where the
# machine allows (REPL_BENCH_DEVICES=loop: an ext4 image per node on a loop
# device with direct I/O, which O_DIRECT works on, unlike a tmpfs), else
# both on the scratch dir's filesystem (shared).  It measures, as medians
# of R runs:
#
#   1. replication: a step of RANKS x SHARDS x SHARD_SIZE saved on node 0
#      (every rank to tier local, in parallel), then commit -> tier
#      "replicated" (node 1 holds every rank, checked, fsynced, acked);
#      then (REPL_BENCH_SEPARATE=1) the same with node 0's state dir on a
#      tmpfs, so that the sender's reads of what its memory tier does not
#      hold no longer share node 1's disk (1s);
#   2. restore of a lost node: node 0 stopped, its state dir wiped, started
#      again: start -> the step back in its local tier (pulled from node 1);
#      then the same restore with node 1's state dir copied onto a tmpfs
#      (REPL_BENCH_SEPARATE=1, the default), so that node 1's reads no longer
#      share node 0's disk, as on two machines: the disk then does what the
#      limit's fio write does, and nothing else;
#   3. what a running replication costs a trainer: staging a step B right
#      after step A's commit, while A is on its way to node 1, against the
#      same staging with the daemons idle (ckpt-bench flush-stage; its wait
#      for tier remote fails on these daemons, which is expected), with
#      `ckptctl status` polled every 50 ms to show copies of A still owed
#      when B's staging ended, A's replication timed from node 0's log
#      (bench/replication-overlap.py), and a control on a lone daemon
#      without replication;
#
# each next to the physical limit measured in the same run: min(iperf3
# over loopback, one stream for 10 s; fio O_DIRECT sequential write of the
# step's size on the receiver's device: node 1's for part 1, which node 0's
# is like for part 2).  For information, fio's write on the scratch dir's
# own filesystem (the shared-disk setup), and fio's write with a
# concurrent read of the same size on that disk: loop images live on it
# too, so node 0's reads of the step and node 1's writes still share the
# physical disk.  Also the daemons' CPU (utime+stime, /proc/PID/stat) per
# GB replicated and restored, sender and receiver, from the moment both
# daemons are up with their pools set up (a daemon prefaults and clears its
# pool at start): the restoring node's start-up (start -> socket up) is
# reported apart.
#
#   bench/replication.sh      (no arguments; settings from the environment)
#
#   BUILD=dir                 meson build dir (default: build); its targets are
#                             built first unless REPL_BENCH_NO_BUILD=1
#   REPL_BENCH_RUNS=R         runs (default 3); medians are reported
#   REPL_BENCH_RANKS=N        rank processes per step (default 4)
#   REPL_BENCH_SHARDS=K       shards per rank (default 4)
#   REPL_BENCH_SHARD_SIZE=S   bytes per shard (default 128M): 4 x 4 x 128M = 2 GiB
#   REPL_BENCH_POOL_SIZE=P    each daemon's --pool-size (default 1G)
#   REPL_BENCH_SLOT_SIZE=S    --pool-slot-size (default 64M)
#   REPL_BENCH_STAGE_SIZE=S   bytes staged in part 3 (default: half the pool, so
#                             that A and B fit in it together)
#   REPL_BENCH_IPERF_S=T      iperf3 duration (default 10)
#   REPL_BENCH_CONTROL=0      skip part 3's control on a lone daemon
#   REPL_BENCH_SEPARATE=0     skip part 1s (a sender on tmpfs) and part 2's
#                             restore from a holder on tmpfs
#   REPL_BENCH_SHM=dir        the tmpfs for it (default /dev/shm)
#   REPL_BENCH_DEVICES=loop|shared  each node's state dir on an ext4 loop
#                             image of its own (needs root, losetup, mkfs.ext4),
#                             or both on the scratch dir's filesystem; default
#                             loop where possible, else shared
#   REPL_BENCH_PROFILE=1      perf record -e cpu-clock -g on both daemons during
#                             parts 1, 1s and 2 of the last run (perf-*.txt in the
#                             results dir; the CPU numbers of that run include perf)
#   REPL_BENCH_SHMEM_HUGE=P   set the kernel's shmem huge-page policy to P
#                             (never, advise, ...) for the run and put it back
#                             afterwards (needs root); default: leave it as it
#                             is.  With advise the pools take huge pages
#                             (docs/design-decisions.md "Huge pages for the pool")
#   REPL_BENCH_DIR=dir        where the scratch dir is made (default /var/tmp)
#   REPL_BENCH_KEEP=1         keep the scratch dir
#   REPL_BENCH_PEER_FLAGS=..  more flags for both clustered daemons, e.g.
#                             --cluster-peer-frame-mac=no (the MACs' cost)
#
# Raw per-run output, daemon logs and the summary line go to
# bench/results/repl-DATE/ (git-ignored).
set -euo pipefail

SRC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$SRC_ROOT"

BUILD=${BUILD:-build}
RUNS=${REPL_BENCH_RUNS:-3}
RANKS=${REPL_BENCH_RANKS:-4}
SHARDS=${REPL_BENCH_SHARDS:-4}
SHARD_SIZE=${REPL_BENCH_SHARD_SIZE:-128M}
POOL_SIZE=${REPL_BENCH_POOL_SIZE:-1G}
SLOT_SIZE=${REPL_BENCH_SLOT_SIZE:-64M}
IPERF_S=${REPL_BENCH_IPERF_S:-10}
CONTROL=${REPL_BENCH_CONTROL:-1}
SEPARATE=${REPL_BENCH_SEPARATE:-1}
SHM=${REPL_BENCH_SHM:-/dev/shm}
PROFILE=${REPL_BENCH_PROFILE:-0}
KEEP=${REPL_BENCH_KEEP:-0}
DEVICES=${REPL_BENCH_DEVICES:-auto}
SHMEM_HUGE=${REPL_BENCH_SHMEM_HUGE:-}
SHMEM_BEFORE=
JOB=rbench
CMDLINE="$(env | { grep -E '^(BUILD|REPL_BENCH_[A-Z_]*)=' || true; } | sort | tr '\n' ' ')bench/replication.sh"

die() { echo "replication.sh: $*" >&2; exit 1; }
log() { echo "replication.sh: $*" >&2; }

case "${1:-}" in
-h|--help) sed -n '/^#   bench\/replication/,/^# bench\/results/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
"") ;;
*) die "no arguments are taken; settings come from the environment (see --help)" ;;
esac

. "$SRC_ROOT/bench/lib.sh"

for v in RUNS RANKS SHARDS IPERF_S; do
        [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer"
done
if [ -n "$SHMEM_HUGE" ]; then
        [[ "$SHMEM_HUGE" =~ ^[a-z_]+$ ]] && grep -qw -- "$SHMEM_HUGE" "$SHMEM_KNOB" 2>/dev/null ||
                die "REPL_BENCH_SHMEM_HUGE=$SHMEM_HUGE: not one of $(cat "$SHMEM_KNOB" 2>/dev/null || echo "? ($SHMEM_KNOB unreadable)")"
fi
SHARD_B=$(to_bytes "$SHARD_SIZE")
POOL_B=$(to_bytes "$POOL_SIZE")
SLOT_B=$(to_bytes "$SLOT_SIZE")
STEP_B=$((RANKS * SHARDS * SHARD_B))
STAGE_B=$(to_bytes "${REPL_BENCH_STAGE_SIZE:-$((POOL_B / 2))}")
# part 3's shards: the step's shard size where it divides, else one shard
if [ $((STAGE_B % SHARD_B)) = 0 ]; then
        STAGE_TENSORS=$((STAGE_B / SHARD_B))
else
        STAGE_TENSORS=1
fi

# ---- tools, build ---------------------------------------------------------------------
IPERF3=${IPERF3:-/usr/bin/iperf3}
[ -x "$IPERF3" ] || die "$IPERF3 not found (apt-get install iperf3)"
command -v fio >/dev/null || die "fio not found (apt-get install fio)"
fio --enghelp 2>/dev/null | grep -qw io_uring || die "this fio has no io_uring engine"
if [ "$SEPARATE" = 1 ]; then
        [ "$(stat -f -c %T "$SHM" 2>/dev/null)" = tmpfs ] || die "$SHM is not a tmpfs (REPL_BENCH_SHM)"
        shm_kb=$(df -Pk "$SHM" | awk 'NR == 2 { print $4 }')
        [ "$shm_kb" -ge $(( (STEP_B >> 10) + (1 << 18) )) ] ||
                die "$SHM: need $(( (STEP_B >> 20) + 256 )) MiB free for REPL_BENCH_SEPARATE=1"
fi
if [ "$PROFILE" = 1 ]; then
        command -v perf >/dev/null || die "REPL_BENCH_PROFILE=1 needs perf"
fi
loop_ok() { [ "$(id -u)" = 0 ] && command -v losetup >/dev/null && command -v mkfs.ext4 >/dev/null &&
            [ -e /dev/loop-control ]; }
case "$DEVICES" in
auto) if loop_ok; then DEVICES=loop; else DEVICES=shared; fi ;;
loop) loop_ok || die "REPL_BENCH_DEVICES=loop needs root, losetup, mkfs.ext4 and /dev/loop-control" ;;
shared) ;;
*) die "REPL_BENCH_DEVICES must be loop or shared" ;;
esac

if [ "${REPL_BENCH_NO_BUILD:-0}" != 1 ]; then
        [ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" --buildtype=release >&2
        ninja -C "$BUILD" daemon/ckptd daemon/ckptctl tests/ckpt-testrank bench/ckpt-bench >&2
fi
CKPTD=$SRC_ROOT/$BUILD/daemon/ckptd
CKPTCTL=$SRC_ROOT/$BUILD/daemon/ckptctl
TESTRANK=$SRC_ROOT/$BUILD/tests/ckpt-testrank
BENCH=$SRC_ROOT/$BUILD/bench/ckpt-bench
for f in "$CKPTD" "$CKPTCTL" "$TESTRANK" "$BENCH"; do
        [ -x "$f" ] || die "$f not built"
done
BUILDTYPE=$(meson introspect --buildoptions "$BUILD" 2>/dev/null |
        python3 -c 'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "buildtype"))' 2>/dev/null || echo "?")
CKPTD_HELP=$("$CKPTD" --help 2>&1 || true)
[[ "$CKPTD_HELP" == *--cluster-replication-factor=* ]] || die "$CKPTD has no replication"

# ---- scratch dir, results, cleanup ------------------------------------------------------
WORK=$(mktemp -d "${REPL_BENCH_DIR:-/var/tmp}/ckptd-repl.XXXXXX")
# the step on node 0, its replica on node 1, part 3's steps, fio's file, margin
need_kb=$(( (3 * STEP_B + 6 * STAGE_B) / 1024 + (1 << 20) ))
# a loop image per node: its step or replica, part 3's, fio's file, margin
# (sparse: blocks are taken as written)
IMG_B=$(( 2 * STEP_B + 4 * STAGE_B + (1 << 30) ))
[ "$DEVICES" = shared ] || need_kb=$(( need_kb + STEP_B / 1024 ))
avail_kb=$(df -Pk "$WORK" | awk 'NR == 2 { print $4 }')
[ "$avail_kb" -ge "$need_kb" ] || { rm -rf "$WORK"; die "$WORK: need $((need_kb >> 20)) GiB free"; }
RESULTS=$SRC_ROOT/bench/results/repl-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS"
RAW=$RESULTS/raw.txt
: >"$RAW"

PSK=$WORK/psk
(umask 077; head -c 36 /dev/urandom | base64 | tr -d '\n' >"$PSK")
[ "$(wc -c <"$PSK")" = 48 ] || die "could not write a 48-character key"

PIDS=("" "")        # ckptd of node 0, node 1
LOOPS=()            # loop devices attached here
MOUNTS=()           # their mount points
HOLDER=             # node 1's state dir while it is on the tmpfs
SENDER=             # node 0's state dir while it is on the tmpfs (part 1s)
PERF_PIDS=()
IPERF_SRV=
POLL_PID=
stop_pid() { # pid: TERM, wait
        local p=$1
        [ -n "$p" ] || return 0
        if kill -0 "$p" 2>/dev/null; then
                kill -TERM "$p" 2>/dev/null || true
                wait "$p" 2>/dev/null || true
        fi
}
cleanup() {
        local p
        for p in "$POLL_PID" "${PERF_PIDS[@]}" "${PIDS[@]}" "$IPERF_SRV"; do
                stop_pid "$p"
        done
        [ -z "$HOLDER" ] || rm -rf "$HOLDER"
        [ -z "$SENDER" ] || rm -rf "$SENDER"
        [ -z "$SHMEM_BEFORE" ] || [ "$SHMEM_BEFORE" = unknown ] || echo "$SHMEM_BEFORE" >"$SHMEM_KNOB" ||
                log "could not put $SHMEM_KNOB back to $SHMEM_BEFORE"
        for p in "${MOUNTS[@]}"; do umount "$p" 2>/dev/null || log "could not unmount $p"; done
        for p in "${LOOPS[@]}"; do losetup -d "$p" 2>/dev/null || log "could not detach $p"; done
        if [ "$KEEP" = 1 ]; then
                log "kept $WORK"
        else
                rm -rf "$WORK"
        fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# each node's device: an ext4 image on a loop device with direct I/O (the
# daemon's O_DIRECT then reaches the image file's blocks without the page
# cache in between), mounted at $WORK/devN
if [ "$DEVICES" = loop ]; then
        for i in 0 1; do
                truncate -s "$IMG_B" "$WORK/node$i.img"
                # inode tables and journal written now, not by ext4lazyinit
                # in the background of the measurements
                mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$WORK/node$i.img" ||
                        die "mkfs.ext4 of $WORK/node$i.img failed"
                dev=$(losetup --direct-io=on -f --show "$WORK/node$i.img") ||
                        die "losetup of $WORK/node$i.img failed"
                LOOPS+=("$dev")
                mkdir -p "$WORK/dev$i"
                mount "$dev" "$WORK/dev$i" || die "mount $dev $WORK/dev$i failed"
                MOUNTS+=("$WORK/dev$i")
                mkdir -p "$WORK/dev$i/fio"
        done
        DEVICE_DESC="node 0 on $(basename "${LOOPS[0]}"), node 1 on $(basename "${LOOPS[1]}") (ext4 images, loop --direct-io=on)"
else
        DEVICE_DESC="both on the scratch dir's filesystem"
fi
log "state dirs: $DEVICE_DESC"
if [ -n "$SHMEM_HUGE" ]; then
        SHMEM_BEFORE=$(shmem_huge_policy)
        echo "$SHMEM_HUGE" >"$SHMEM_KNOB" || die "cannot set $SHMEM_KNOB to $SHMEM_HUGE (root?)"
fi
SHMEM_POLICY=$(shmem_huge_policy)
log "shmem huge pages: $SHMEM_POLICY"

read -r P0 P1 PI < <(free_ports 3)
PEERS=127.0.0.1:$P0,127.0.0.1:$P1

now() { date +%s.%N; }
cpu_s() { # utime+stime of pids, seconds
        local p
        for p in "$@"; do cat "/proc/$p/stat"; done |
                awk -v tck="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); n += $12 + $13 } END { print n / tck }'
}

# REPL_BENCH_PROFILE=1: perf record on a daemon, last run only
profile_start() { # pid output-name
        [ "$PROFILE" = 1 ] && [ "$run" = "$RUNS" ] || return 0
        perf record -e cpu-clock -g -F 999 -p "$1" -o "$RESULTS/perf-$2.data" >/dev/null 2>&1 &
        PERF_PIDS+=($!)
}
profile_stop() {
        local p
        for p in "${PERF_PIDS[@]}"; do
                kill -INT "$p" 2>/dev/null || true
                wait "$p" 2>/dev/null || true
        done
        PERF_PIDS=()
}

sock_of() { echo "$WORK/node$1.sock"; }
state_of() { # index: node 1's is on the tmpfs while HOLDER is set, node 0's while SENDER is
        if [ "$1" = 1 ] && [ -n "$HOLDER" ]; then
                echo "$HOLDER"
        elif [ "$1" = 0 ] && [ -n "$SENDER" ]; then
                echo "$SENDER"
        elif [ "$DEVICES" = loop ]; then
                echo "$WORK/dev$1/node$1"
        else
                echo "$WORK/node$1"
        fi
}
# where fio measures node i's device
fio_dir_of() { if [ "$DEVICES" = loop ]; then echo "$WORK/dev$1/fio"; else echo "$WORK/fio"; fi; }

start_node() { # index [lone: without peers]; sets PIDS[index]
        local i=$1 args
        args=(--state-dir "$(state_of "$i")" --socket "$(sock_of "$i")" --pool-size "$POOL_B"
              --pool-slot-size "$SLOT_B" --local-keep 2 --log-level info)
        if [ "${2:-}" != lone ]; then
                args+=(--cluster-node-count 2 --cluster-node-index "$i" --cluster-peers "$PEERS"
                       --cluster-replication-jump 1 --cluster-replication-factor 2
                       --cluster-psk-file "$PSK")
                # shellcheck disable=SC2206  # a list of flags, split on purpose
                [ -z "${REPL_BENCH_PEER_FLAGS:-}" ] || args+=($REPL_BENCH_PEER_FLAGS)
        fi
        mkdir -p "$(state_of "$i")"
        echo "== $(date -u +%T.%N) start: ckptd ${args[*]}" >>"$RESULTS/node$i.log"
        "$CKPTD" "${args[@]}" >>"$RESULTS/node$i.log" 2>&1 &
        PIDS[$i]=$!
}
wait_socket() { # index
        local i=$1
        for _ in $(seq 1200); do
                [ -S "$(sock_of "$i")" ] && return 0
                kill -0 "${PIDS[$i]}" 2>/dev/null || { tail -20 "$RESULTS/node$i.log" >&2; die "node $i's ckptd exited at start"; }
                sleep 0.05
        done
        die "node $i's ckptd did not create its socket within 60 s"
}
# The pool of node i (started last) is touched: its CPU from here on is the
# data path's, not the start-up's.  A pool touched at once logs no "all ...
# ready" line: its "N slots of" line then has no "in the background".
wait_pool() { # index
        local i=$1 start
        start=$(grep -n "^== .* start: ckptd" "$RESULTS/node$i.log" | tail -1 | cut -d: -f1)
        for _ in $(seq 1200); do
                tail -n +"$start" "$RESULTS/node$i.log" |
                        grep -qE "pool: all [0-9]+ slots ready|pool: [0-9]+ slots of [0-9]+ MiB \([a-z_ ;:]+\)$" &&
                        return 0
                kill -0 "${PIDS[$i]}" 2>/dev/null || die "node $i's ckptd exited at start"
                sleep 0.05
        done
        die "node $i's pool was not ready within 60 s"
}
stop_node() { # index
        stop_pid "${PIDS[$1]}"
        PIDS[$1]=""
        rm -f "$(sock_of "$1")"
}
ctl() { # index args...
        local i=$1
        shift
        "$CKPTCTL" --socket "$(sock_of "$i")" "$@"
}
# both links up: each daemon's status says 1 of 1 targets up
wait_linked() {
        local i
        for _ in $(seq 600); do
                for i in 0 1; do
                        ctl "$i" --json status 2>/dev/null |
                                python3 -c 'import json, sys
r = json.load(sys.stdin)["replication"]
sys.exit(0 if r and r["peers_up"] == r["peers_total"] else 1)' 2>/dev/null || continue 2
                done
                return 0
        done
        die "the two daemons did not connect to each other within 60 s (see $RESULTS/node*.log)"
}
# the step committed on node $1 with all its ranks local
step_restored() { # index job step world
        ctl "$1" --json list "$2" 2>/dev/null | python3 -c 'import json, sys
step, world = int(sys.argv[1]), int(sys.argv[2])
ok = any(c["step"] == step and c["state"] == "committed" and c["ranks_local"] == world
         for c in json.load(sys.stdin))
sys.exit(0 if ok else 1)' "$3" "$4" 2>/dev/null
}
# `ckptctl --json status` every 50 ms, each line "EPOCH JSON", for part 3
# (the same poller runs in the control, so both carry its load)
poll_status() { # index file
        while :; do
                printf '%s ' "$EPOCHREALTIME"
                ctl "$1" --json status 2>/dev/null || echo
                sleep 0.05
        done >"$2"
}

SHARD_SPEC=$(for i in $(seq 0 $((SHARDS - 1))); do printf 's%d:%d,' "$i" "$SHARD_B"; done)
SHARD_SPEC=${SHARD_SPEC%,}

FIO_COMMON=(--ioengine=io_uring --direct=1 --bs=1M --iodepth=16 --size="$STEP_B"
            --output-format=json)
mkdir -p "$WORK/fio"

# Part 2: stop node 0, wipe it, start it and time start -> the step back
# from node 1, then check every byte (untimed).  Keys PREFIX_s, _mbps, ...
restore_node0() { # prefix; uses run, step, out
        local pre=$1 restored=0 t_ready= c_ready= t0 t1 c0s c1s c1r n_before n_now r p pids
        stop_node 0
        rm -rf "$(state_of 0)"
        profile_start "${PIDS[1]}" "$pre-sender"
        c0s=$(cpu_s "${PIDS[1]}")
        t0=$(now)
        start_node 0
        profile_start "${PIDS[0]}" "$pre-receiver"
        # done when node 0 logs the restore's end, then confirmed with ckptctl
        # list (polling ckptctl + python would take a core of these 2 CPUs)
        n_before=$(grep -c "peers: restored [0-9]* ranks from neighbours" "$RESULTS/node0.log" || true)
        for _ in $(seq 12000); do
                # socket up: start-up done, pool prefaulted and cleared
                if [ -z "$t_ready" ] && [ -S "$(sock_of 0)" ]; then
                        t_ready=$(now)
                        c_ready=$(cpu_s "${PIDS[0]}")
                fi
                n_now=$(grep -c "peers: restored [0-9]* ranks from neighbours" "$RESULTS/node0.log" || true)
                if [ "$n_now" -gt "$n_before" ]; then
                        t1=$(now)
                        if step_restored 0 "$JOB" "$step" "$RANKS"; then
                                restored=1
                                break
                        fi
                fi
                kill -0 "${PIDS[0]}" 2>/dev/null || { tail -20 "$RESULTS/node0.log" >&2; die "node 0 exited during the restore"; }
                sleep 0.05
        done
        [ "$restored" = 1 ] || die "node 0 did not get step $step back from node 1 within 10 min"
        c1s=$(cpu_s "${PIDS[1]}")
        c1r=$(cpu_s "${PIDS[0]}")   # node 0's whole life: start and restore
        profile_stop
        [ -n "$t_ready" ] || { t_ready=$t1; c_ready=$c1r; }
        awk -v p="$pre" -v b="$STEP_B" -v t0="$t0" -v t1="$t1" -v tr="$t_ready" -v c0s="$c0s" \
            -v c1s="$c1s" -v c1r="$c1r" -v cr="$c_ready" 'BEGIN {
                printf "%s_s=%.3f\n%s_mbps=%.1f\n%s_start_to_socket_s=%.3f\n", p, t1 - t0, p, b / (t1 - t0) / 1e6, p, tr - t0
                printf "%s_sender_cpu_s_per_gb=%.4f\n%s_receiver_cpu_s_per_gb=%.4f\n",
                       p, (c1s - c0s) / (b / 1e9), p, (c1r - cr) / (b / 1e9)
                printf "%s_receiver_startup_cpu_s=%.4f\n%s_receiver_life_cpu_s_per_gb=%.4f\n",
                       p, cr, p, c1r / (b / 1e9) }' >>"$out"
        # the bytes came back (untimed): every rank against the generator
        pids=()
        for r in $(seq 0 $((RANKS - 1))); do
                "$TESTRANK" verify --job "$JOB" --step "$step" --rank "$r" --shards "$SHARD_SPEC" \
                        --seed "$run" --timeout 600000 &
                pids+=($!)
        done
        for p in "${pids[@]}"; do wait "$p" || die "a restored rank does not verify"; done
        echo "${pre}_verified=1" >>"$out"
}

# both nodes started and linked, with their pools touched: the save and the
# CPU figures of a replication start there (issue 13: start-up is reported
# apart, part 2)
start_pair() {
        start_node 0
        start_node 1
        wait_socket 0
        wait_socket 1
        wait_pool 0
        wait_pool 1
        wait_linked
}

replicate_step() { # prefix; both nodes up and linked; uses run, step, out
        local pre=$1 r p pids c0s c0r c1s c1r t0 t_commit t1 rdir got
        export CKPT_SOCKET
        CKPT_SOCKET=$(sock_of 0)
        pids=()
        for r in $(seq 0 $((RANKS - 1))); do
                "$TESTRANK" save --job "$JOB" --step "$step" --rank "$r" --world "$RANKS" \
                        --shards "$SHARD_SPEC" --seed "$run" --wait-local --timeout 600000 &
                pids+=($!)
        done
        for p in "${pids[@]}"; do wait "$p" || die "a rank's save failed"; done
        # nothing committed yet, so nothing replicates yet: both idle here
        if [ "$PROFILE" = 1 ] && [ "$run" = "$RUNS" ]; then
                profile_start "${PIDS[0]}" "$pre-sender"
                profile_start "${PIDS[1]}" "$pre-receiver"
                sleep 0.5
        fi
        c0s=$(cpu_s "${PIDS[0]}")
        c0r=$(cpu_s "${PIDS[1]}")
        t0=$(now)
        "$TESTRANK" commit --job "$JOB" --step "$step" --timeout 600000
        t_commit=$(now)
        "$TESTRANK" wait --job "$JOB" --step "$step" --tier replicated --timeout 600000 ||
                die "wait --tier replicated failed (see $RESULTS/node*.log)"
        t1=$(now)
        c1s=$(cpu_s "${PIDS[0]}")
        c1r=$(cpu_s "${PIDS[1]}")
        profile_stop
        ctl 0 --json status >"$RESULTS/status-$pre-node0-$run.json" 2>&1 || true
        ctl 1 --json status >"$RESULTS/status-$pre-node1-$run.json" 2>&1 || true
        # node 1's replica area holds the step's bytes (checked outside the daemon)
        rdir=$(state_of 1)/replica/node-0/jobs/$JOB/$(printf '%020d' "$step")
        got=$(find "$rdir" -type f -path '*/rank-*/*' ! -name MANIFEST -printf '%s\n' 2>/dev/null |
                awk '{ n += $1 } END { printf "%.0f", n }')
        [ "$got" = "$STEP_B" ] || die "node 1's replica of step $step holds $got shard bytes, want $STEP_B ($rdir)"
        awk -v p="$pre" -v b="$STEP_B" -v t0="$t0" -v tc="$t_commit" -v t1="$t1" -v c0s="$c0s" \
            -v c1s="$c1s" -v c0r="$c0r" -v c1r="$c1r" 'BEGIN {
                printf "%s_s=%.3f\n%s_commit_s=%.3f\n%s_mbps=%.1f\n", p, t1 - t0, p, tc - t0, p, b / (t1 - t0) / 1e6
                printf "%s_sender_cpu_s_per_gb=%.4f\n%s_receiver_cpu_s_per_gb=%.4f\n",
                       p, (c1s - c0s) / (b / 1e9), p, (c1r - c0r) / (b / 1e9) }' >>"$out"
}

# ---- runs ---------------------------------------------------------------------------
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(date +%s)
for run in $(seq "$RUNS"); do
        log "run $run/$RUNS"
        out=$RESULTS/run-$run.txt
        echo "run=$run" >"$out"

        # ---- the limit: fio write on the receiver's device, iperf3 on loopback
        rfio=$(fio_dir_of 1)
        rm -f "$rfio/write.dat"
        fio --name=write --filename="$rfio/write.dat" --rw=write --end_fsync=1 \
                "${FIO_COMMON[@]}" >"$RESULTS/fio-write-$run.json"
        # (information) the same on the scratch dir's own filesystem, what
        # the shared-disk setup's limit was (the mixed run below reads it)
        if [ "$DEVICES" = loop ]; then
                rm -f "$rfio/write.dat"
                fio --name=write --filename="$WORK/fio/write.dat" --rw=write --end_fsync=1 \
                        "${FIO_COMMON[@]}" >"$RESULTS/fio-write-shared-$run.json"
        fi
        # (information) what this one-disk setup asks of the disk: node 0
        # reads the step while node 1 writes it, so also a write of the same
        # size with a concurrent read of the file just written
        rm -f "$WORK/fio/write2.dat"
        fio "${FIO_COMMON[@]}" --name=read --filename="$WORK/fio/write.dat" --rw=read \
                --name=write --filename="$WORK/fio/write2.dat" --rw=write --end_fsync=1 \
                >"$RESULTS/fio-mixed-$run.json"
        rm -f "$WORK/fio/write.dat" "$WORK/fio/write2.dat"
        python3 - "$RESULTS/fio-write-$run.json" "$RESULTS/fio-mixed-$run.json" \
                "$RESULTS/fio-write-shared-$run.json" >>"$out" <<'PYEOF'
import json, os, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
print("fio_write_mbps=%.1f" % (j["write"]["bw_bytes"] / 1e6))
if os.path.exists(sys.argv[3]):
    sh = json.load(open(sys.argv[3]))["jobs"][0]
    print("fio_write_shared_mbps=%.1f" % (sh["write"]["bw_bytes"] / 1e6))
cpu = (j["usr_cpu"] + j["sys_cpu"]) / 100 * j["job_runtime"] / 1000
print("fio_write_cpu_s_per_gb=%.4f" % (cpu / (j["write"]["io_bytes"] / 1e9)))
m = {x["jobname"]: x for x in json.load(open(sys.argv[2]))["jobs"]}
print("fio_mixed_write_mbps=%.1f" % (m["write"]["write"]["bw_bytes"] / 1e6))
print("fio_mixed_read_mbps=%.1f" % (m["read"]["read"]["bw_bytes"] / 1e6))
PYEOF
        "$IPERF3" -s -1 -B 127.0.0.1 -p "$PI" >/dev/null 2>&1 &
        IPERF_SRV=$!
        sleep 0.3
        "$IPERF3" -c 127.0.0.1 -p "$PI" -t "$IPERF_S" -J >"$RESULTS/iperf3-$run.json" ||
                die "iperf3 failed (see $RESULTS/iperf3-$run.json)"
        wait "$IPERF_SRV" 2>/dev/null || true
        IPERF_SRV=
        python3 - "$RESULTS/iperf3-$run.json" >>"$out" <<'PYEOF'
import json, sys
e = json.load(open(sys.argv[1]))["end"]
print("iperf3_mbps=%.1f" % (e["sum_received"]["bits_per_second"] / 8 / 1e6))
PYEOF

        # ---- 1. replication: fresh state dirs, fresh daemons each run
        rm -rf "$(state_of 0)" "$(state_of 1)"
        start_pair
        step=$run
        replicate_step repl

        # ---- 2. restore of a lost node from node 1
        restore_node0 restore
        # 2s. the same with node 1's state on the tmpfs: its reads off the
        # disk node 0 writes to (untimed: the copy and node 1's restart)
        if [ "$SEPARATE" = 1 ]; then
                stop_node 1
                own=$(state_of 1)
                HOLDER=$(mktemp -d "$SHM/ckptd-repl-holder.XXXXXX")
                cp -a "$own/." "$HOLDER/"
                start_node 1
                wait_socket 1
                # the holder is a running daemon: its pool touched (it holds
                # nothing in memory after the restart: the files are read)
                wait_pool 1
                restore_node0 restore_sep
                stop_node 1
                rm -rf "$HOLDER"
                HOLDER=
                start_node 1
                wait_socket 1
                wait_pool 1
        fi

        # ---- 3. staging while a replication runs, against staging with the daemons idle
        wait_linked
        fs=$RESULTS/stage-$run.txt
        sjob=stage$run
        poll_status 0 "$RESULTS/poll-stage-$run.txt" &
        POLL_PID=$!
        "$BENCH" --socket "$(sock_of 0)" --job "$sjob" --size "$STAGE_B" \
                --tensors "$STAGE_TENSORS" flush-stage >"$fs" 2>"$RESULTS/stage-$run.err" || true
        # (its wait for tier remote fails: no object store here)
        stop_pid "$POLL_PID"
        POLL_PID=
        grep -q '^stage_busy_s=' "$fs" || { cat "$fs" "$RESULTS/stage-$run.err" >&2; die "ckpt-bench flush-stage failed"; }
        grep -E '^(stage_|commit_s)' "$fs" >>"$out"
        read -r step_a _ < <(CKPT_SOCKET=$(sock_of 0) "$TESTRANK" latest --job "$sjob")
        CKPT_SOCKET=$(sock_of 0) "$TESTRANK" wait --job "$sjob" --step "$step_a" --tier replicated \
                --timeout 600000 || die "step A of part 3 did not replicate"
        python3 "$SRC_ROOT/bench/replication-overlap.py" "$RESULTS/node0.log" "$sjob" "$fs" \
                "$RESULTS/poll-stage-$run.txt" >>"$out"
        stop_node 0
        stop_node 1

        # ---- 1s. part 1 again with node 0's state on the tmpfs: the sender's
        # reads (the part of the step its memory tier does not hold) off the
        # disk node 1 writes to, as on two machines; fresh state dirs
        if [ "$SEPARATE" = 1 ]; then
                SENDER=$(mktemp -d "$SHM/ckptd-repl-sender.XXXXXX")
                rm -rf "$(state_of 1)"
                start_pair
                replicate_step repl_sep
                stop_node 0
                stop_node 1
                rm -rf "$SENDER"
                SENDER=
        fi

        # the control: the same sequence on a lone daemon without replication,
        # so what the commit itself and this machine's noise cost is not laid
        # on the replication
        if [ "$CONTROL" = 1 ]; then
                rm -rf "$(state_of 0)"
                start_node 0 lone
                wait_socket 0
                poll_status 0 "$RESULTS/poll-control-$run.txt" &
                POLL_PID=$!
                "$BENCH" --socket "$(sock_of 0)" --job "ctl$run" --size "$STAGE_B" \
                        --tensors "$STAGE_TENSORS" flush-stage >"$RESULTS/control-$run.txt" 2>&1 || true
                stop_pid "$POLL_PID"
                POLL_PID=
                sed -n 's/^stage_\(idle\|busy\)_s=/control_stage_\1_s=/p' "$RESULTS/control-$run.txt" >>"$out"
                stop_node 0
        fi
        rm -rf "$(state_of 0)" "$(state_of 1)"
        cat "$out" >>"$RAW"
done
T_END=$(date +%s)
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

if [ "$PROFILE" = 1 ]; then
        for f in "$RESULTS"/perf-*.data; do
                [ -f "$f" ] || continue
                perf report -i "$f" --no-children --stdio --sort sym -g none \
                        --percent-limit 0.5 2>/dev/null | grep -v '^$' | head -60 >"${f%.data}.txt" || true
        done
fi

# ---- medians, table, summary line -------------------------------------------------------
FSTYPE=$(findmnt -n -o FSTYPE -T "$WORK" 2>/dev/null || echo "?")
FSSRC=$(findmnt -n -o SOURCE -T "$WORK" 2>/dev/null || echo "?")
export RESULTS RAW RUNS STEP_B STAGE_B RANKS SHARDS SHARD_B POOL_B SLOT_B BUILD BUILDTYPE IPERF_S
export LOAD_START LOAD_END CMDLINE FSTYPE FSSRC PROFILE DEVICES DEVICE_DESC SHMEM_POLICY
export DURATION=$((T_END - T_START)) NPROC=$(nproc) KERNEL=$(uname -r)
export FIO_VERSION=$(fio --version) IPERF_VERSION=$("$IPERF3" --version | head -1 | cut -d' ' -f1-2)
python3 "$SRC_ROOT/bench/replication-report.py"
