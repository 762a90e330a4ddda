#!/bin/bash
# SPDX-License-Identifier: MIT
#
# run.sh — ckptd's benchmark: what a trainer pays to stage a checkpoint and
# what the disk gets, each next to the reference it claims to match (memcpy,
# torch.save, fio), as medians of R interleaved runs, written into
# docs/BENCHMARKS.md.
#
# Why interleaved: the machines this runs on are shared and noisy; running
# ckptd and its reference one after the other inside each run keeps a burst
# of someone else's load from landing on one side of a ratio only.
#
#   bench/run.sh [--runs R] [--size N] [--tensors K] [--dir DIR]
#                [--build-dir DIR] [--slot-size S] [--pool-size P]
#                [--settle S] [--no-install] [--no-docs] [--keep] [--no-scrub]
#
#   --runs R        runs per measurement (default 5); medians are reported
#   --size N        bytes per checkpoint, >= 1G (default 1G), K/M/G suffixes
#   --tensors K     tensors (shards) per checkpoint (default 64)
#   --dir DIR       scratch directory for ckptd's state, fio's files and
#                   torch's files, all on one filesystem (default
#                   /var/tmp/ckptd-bench; also $CKPT_BENCH_DIR)
#   --build-dir D   meson build directory, release (default build-bench)
#   --slot-size S   ckptd --pool-slot-size (default 64M)
#   --pool-size P   ckptd --pool-size (default 2 x N, rounded up to slots)
#   --settle S      seconds of quiet (after a sync) before ckptd's restore
#                   and before fio's read, each of bytes written just before
#                   (default 5; 0: read at once).  The saves right before
#                   ckptd's restore make retention delete steps, and ext4's
#                   online discard of them (and the saves' write-back) runs
#                   beside a read started at once (docs/BENCHMARKS.md); a
#                   restore after a crash comes after the restart, and both
#                   sides get the same pause
#   --no-install    do not apt-get install fio / python3-torch when missing
#   --no-docs       print the table only; leave docs/BENCHMARKS.md alone
#   --keep          keep DIR afterwards (default: remove what was created)
#   --no-scrub      skip the background scrub's part (bench/scrub.sh, run last
#                   with the same --runs, --size, --dir and --build-dir)
#
# Raw per-run output lands in bench/results/ (git-ignored).
set -euo pipefail

SRC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export SRC_ROOT
RUNS=5
SIZE=1G
TENSORS=64
DIR=${CKPT_BENCH_DIR:-/var/tmp/ckptd-bench}
BUILD=build-bench
SLOT=64M
POOL=
INSTALL=1
DOCS=1
KEEP=0
SCRUB=1
SETTLE=5
CMDLINE="bench/run.sh${*:+ $*}"
# Debian's python3-torch lives in /usr/bin/python3, not in pyenv's python;
# a machine with torch installed for the python3 on PATH instead uses that
# one ($TORCH_PY overrides both)
if [ -z "${TORCH_PY:-}" ]; then
        TORCH_PY=/usr/bin/python3
        if ! "$TORCH_PY" -c 'import torch' 2>/dev/null &&
           command -v python3 >/dev/null && python3 -c 'import torch' 2>/dev/null; then
                TORCH_PY=$(command -v python3)
        fi
fi

die() { echo "run.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
        case "$1" in
        --runs) RUNS=$2; shift 2 ;;
        --size) SIZE=$2; shift 2 ;;
        --tensors) TENSORS=$2; shift 2 ;;
        --dir) DIR=$2; shift 2 ;;
        --build-dir) BUILD=$2; shift 2 ;;
        --slot-size) SLOT=$2; shift 2 ;;
        --pool-size) POOL=$2; shift 2 ;;
        --settle) SETTLE=$2; shift 2 ;;
        --no-install) INSTALL=0; shift ;;
        --no-docs) DOCS=0; shift ;;
        --keep) KEEP=1; shift ;;
        --no-scrub) SCRUB=0; shift ;;
        -h|--help) sed -n '/^#   bench/,/^# Raw/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option '$1' (see --help)" ;;
        esac
done

. "$SRC_ROOT/bench/lib.sh"

[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "--runs must be a positive integer"
[[ "$SETTLE" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--settle must be a number of seconds"
SIZE_B=$(to_bytes "$SIZE")
SLOT_B=$(to_bytes "$SLOT")
[ "$SIZE_B" -ge $((1 << 30)) ] || die "--size must be at least 1G (the targets are for GB-sized saves)"
if [ -z "$POOL" ]; then
        POOL_B=$(( (2 * SIZE_B + SLOT_B - 1) / SLOT_B * SLOT_B ))
else
        POOL_B=$(to_bytes "$POOL")
fi

# ---- tools ------------------------------------------------------------------
need_install=()
command -v fio >/dev/null || need_install+=(fio)
"$TORCH_PY" -c 'import torch' 2>/dev/null || need_install+=(python3-torch)
if [ ${#need_install[@]} -gt 0 ]; then
        [ "$INSTALL" = 1 ] || die "missing: ${need_install[*]} (and --no-install given)"
        sudo=
        [ "$(id -u)" = 0 ] || sudo=sudo
        echo "run.sh: installing ${need_install[*]}" >&2
        $sudo apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends \
                "${need_install[@]}" >&2
fi
fio --enghelp 2>/dev/null | grep -qw io_uring || die "this fio has no io_uring engine"

# ---- build (release) --------------------------------------------------------
cd "$SRC_ROOT"
if [ ! -f "$BUILD/build.ninja" ]; then
        meson setup "$BUILD" -Dbuildtype=release >&2
else
        meson configure "$BUILD" -Dbuildtype=release >&2
fi
ninja -C "$BUILD" daemon/ckptd bench/ckpt-bench >&2
CKPTD=$SRC_ROOT/$BUILD/daemon/ckptd
BENCH=$SRC_ROOT/$BUILD/bench/ckpt-bench

# ---- scratch space ------------------------------------------------------------
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
WORK=$(mktemp -d "$DIR/run.XXXXXX")
STATE=$WORK/state
SOCK=$WORK/ckptd.sock
mkdir -p "$STATE" "$WORK/fio" "$WORK/torch"
# keep 2 committed steps of N, fio's two files, torch's two files, margin
need_kb=$(( SIZE_B * 8 / 1024 ))
avail_kb=$(df -Pk "$WORK" | awk 'NR == 2 { print $4 }')
[ "$avail_kb" -ge "$need_kb" ] || die "$WORK: need $((need_kb >> 20)) GiB free, have $((avail_kb >> 20)) GiB"
RESULTS=$SRC_ROOT/bench/results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS"

CKPTD_PID=
cleanup() {
        if [ -n "$CKPTD_PID" ] && kill -0 "$CKPTD_PID" 2>/dev/null; then
                kill -TERM "$CKPTD_PID" 2>/dev/null || true
                wait "$CKPTD_PID" 2>/dev/null || true
        fi
        if [ "$KEEP" = 0 ]; then
                rm -rf "$WORK"
        fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- daemon -------------------------------------------------------------------
DAEMON_ARGS=(--state-dir "$STATE" --socket "$SOCK" --pool-size "$POOL_B"
             --pool-slot-size "$SLOT_B" --local-keep 2 --log-level notice)
# Restore (4.) and the random reads (4c.) measure the disk: a daemon with a
# memory tier ([pool] memory_tier, issue 13) would serve the step just saved
# from its slots instead.  Off where this ckptd has it (its --help lists
# every key as a flag); bench/memtier.sh measures the tier itself.
# (captured first: with pipefail, grep -q leaving early could fail the test)
CKPTD_HELP=$("$CKPTD" --help 2>&1 || true)
if [[ "$CKPTD_HELP" == *--pool-memory-tier=* ]]; then
        DAEMON_ARGS+=(--pool-memory-tier=no)
        MEMORY_TIER="off (--pool-memory-tier=no)"
else
        MEMORY_TIER="none in this build"
fi
"$CKPTD" "${DAEMON_ARGS[@]}" >"$RESULTS/ckptd.log" 2>&1 &
CKPTD_PID=$!
wait_for_socket "$SOCK" "$CKPTD_PID" "$RESULTS/ckptd.log"
[ "$(cat /proc/$CKPTD_PID/comm)" = ckptd ] || die "pid $CKPTD_PID is not ckptd"
if grep -q "fixed buffers unavailable" "$RESULTS/ckptd.log"; then
        FIXED=no
else
        FIXED=yes
fi

FIO_COMMON=(--ioengine=io_uring --direct=1 --bs=1M --iodepth=16 --size="$SIZE_B"
            --output-format=json)

# fio's bandwidth: bytes over the job's runtime, which includes the
# end_fsync (fio's do_io() runs it before the runtime is taken).
fio_mbps() { # json file, rw -> MB/s (10^6)
        "$TORCH_PY" -c 'import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0][sys.argv[2]]
print("%.1f" % (j["bw_bytes"] / 1e6))' "$1" "$2"
}
fio_cpu_per_gb() { # json file, rw -> fio's own usr+sys CPU seconds per 10^9 bytes
        "$TORCH_PY" -c 'import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
cpu = (j["usr_cpu"] + j["sys_cpu"]) / 100 * j["job_runtime"] / 1000
print("%.4f" % (cpu / (j[sys.argv[2]]["io_bytes"] / 1e9)))' "$1" "$2"
}

# the pause before a read (--settle): what ckpt-bench --settle does too
settle() {
        if [ "$SETTLE" != 0 ]; then
                sync
                sleep "$SETTLE"
        fi
}

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(date +%s)
for run in $(seq "$RUNS"); do
        out=$RESULTS/run-$run.txt
        echo "run=$run" >"$out"
        echo "run.sh: run $run/$RUNS" >&2

        # 1, 3, 4, 5: ckptd (warm-up save, memcpy, stage, zero-copy, restore)
        "$BENCH" --socket "$SOCK" --daemon-pid "$CKPTD_PID" --size "$SIZE_B" \
                --tensors "$TENSORS" --restore-streams 2 --settle "$SETTLE" all >>"$out"
        # the protocol's share of staging: the same K shards of 4 KiB each
        "$BENCH" --socket "$SOCK" --job bench-small --size $((TENSORS * 4096)) \
                --tensors "$TENSORS" stage | sed -n 's/^staging_s=/small_staging_s=/p' >>"$out"

        # 3: fio sequential O_DIRECT write to a fresh file, fsync at end
        rm -f "$WORK/fio/write.dat"
        fio --name=write --filename="$WORK/fio/write.dat" --rw=write --end_fsync=1 \
                "${FIO_COMMON[@]}" >"$RESULTS/fio-write-$run.json"
        echo "fio_write_mbps=$(fio_mbps "$RESULTS/fio-write-$run.json" write)" >>"$out"
        echo "fio_write_cpu_s_per_gb=$(fio_cpu_per_gb "$RESULTS/fio-write-$run.json" write)" >>"$out"
        rm -f "$WORK/fio/write.dat"

        # 4: fio sequential O_DIRECT read of a file laid out just before,
        # as ckptd reads a step it has just written: on a virtual disk the
        # host may cache either, and a file read again every run would be
        # cached more than ckptd's fresh step
        rm -f "$WORK/fio/read.dat"
        fio --name=layout --filename="$WORK/fio/read.dat" --rw=write --end_fsync=1 \
                "${FIO_COMMON[@]}" >/dev/null
        settle
        fio --name=read --filename="$WORK/fio/read.dat" --rw=read \
                "${FIO_COMMON[@]}" >"$RESULTS/fio-read-$run.json"
        echo "fio_read_mbps=$(fio_mbps "$RESULTS/fio-read-$run.json" read)" >>"$out"

        # 2: torch.save + fsync, and clone (+ background save); a fresh
        # process each run, so the clone really goes to fresh memory
        "$TORCH_PY" "$SRC_ROOT/bench/torch_save.py" --dir "$WORK/torch" --size "$SIZE_B" \
                --tensors "$TENSORS" --runs 1 | tr ' ' '\n' | grep -v '^run=' >>"$out"
done
T_END=$(date +%s)
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- medians, table, docs -------------------------------------------------------
FSTYPE=$(findmnt -n -o FSTYPE -T "$WORK" 2>/dev/null || df -PT "$WORK" | awk 'NR == 2 { print $2 }')
FSSRC=$(findmnt -n -o SOURCE -T "$WORK" 2>/dev/null || echo "?")
CPU=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
MEM_GIB=$(awk '/^MemTotal/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)

export RESULTS RUNS SIZE_B TENSORS CMDLINE FSTYPE FSSRC CPU MEM_GIB FIXED LOAD_START LOAD_END
export POOL_B SLOT_B TORCH_PY MEMORY_TIER SETTLE
export DURATION=$((T_END - T_START))
export NPROC=$(nproc) KERNEL=$(uname -r) DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
SHMEM_POLICY=$(shmem_huge_policy)
export SHMEM_POLICY
export TORCH_VERSION=$(grep -h '^torch_version=' "$RESULTS"/run-*.txt | head -1 | cut -d= -f2)
export FIO_VERSION=$(fio --version)
export DOCS_FILE=$SRC_ROOT/docs/BENCHMARKS.md DOCS

"$TORCH_PY" - <<'PYEOF'
import os, statistics, sys

sys.path.insert(0, os.path.join(os.environ["SRC_ROOT"], "bench"))
from runs import load_runs

env = os.environ
runs = load_runs(env["RESULTS"])

keys = ["memcpy_s", "staging_s", "staging_copy_s", "staging_finish_s", "small_staging_s",
        "zerocopy_s", "torch_save_s", "clone_s", "bg_save_s",
        "local_mbps", "local_from_begin_s", "local_after_finish_s", "fio_write_mbps",
        "restore_mbps", "restore_parallel_mbps", "fio_read_mbps", "daemon_cpu_s_per_gb",
        "fio_write_cpu_s_per_gb", "random_reads", "random_read_s", "random_read_disk_bytes"]
missing = [k for k in keys if any(k not in r for r in runs)]
if missing:
    raise SystemExit("run.sh: runs lack " + ", ".join(missing))
med = {k: statistics.median(r[k] for r in runs) for k in keys}
span = {k: (min(r[k] for r in runs), max(r[k] for r in runs)) for k in keys}
gb = int(env["SIZE_B"]) / 1e9
gib = int(env["SIZE_B"]) / (1 << 30)

def s(v):
    return f"{v:.3f} s"

def mbps(v):
    return f"{v:.0f} MB/s"

rows = []
def row(name, ckpt, ref, ratio, target, met):
    rows.append((name, ckpt, ref, "—" if ratio is None else f"{ratio:.2f}", target,
                 "—" if met is None else ("yes" if met else "**no**")))

r = med["staging_s"] / med["memcpy_s"]
row(f"1. staging {gib:g} GiB, blocking time (ckpt_save_write) ÷ memcpy",
    s(med["staging_s"]), s(med["memcpy_s"]), r, "≤ 1.15", r <= 1.15)
row(f"1a. of which: copy loop / finish / the protocol alone ({env['TENSORS']} shards of 4 KiB)",
    f'{med["staging_copy_s"]:.3f} s / {med["staging_finish_s"]:.3f} s / '
    f'{med["small_staging_s"]:.3f} s', "—", None, "(info)", None)
r = med["zerocopy_s"] / med["memcpy_s"]
row("1b. zero-copy staging (buffer + memcpy + commit) ÷ memcpy",
    s(med["zerocopy_s"]), s(med["memcpy_s"]), r, "(info)", None)
r = med["torch_save_s"] / med["staging_s"]
row("2a. torch.save + fsync ÷ ckptd staging",
    s(med["staging_s"]), s(med["torch_save_s"]), r, "≥ 5", r >= 5)
r = med["clone_s"] / med["staging_s"]
row("2b. async save's clone ÷ ckptd staging",
    s(med["staging_s"]), s(med["clone_s"]), r, "≥ 15", r >= 15)
r = med["local_mbps"] / med["fio_write_mbps"]
row("3. local tier write (first byte → tier local) ÷ fio write",
    mbps(med["local_mbps"]), mbps(med["fio_write_mbps"]), r, "≥ 0.90", r >= 0.90)
row("3b. wall time begin → tier local / finish → tier local",
    f'{med["local_from_begin_s"]:.3f} s / {med["local_after_finish_s"]:.3f} s', "—", None,
    "(info)", None)
r = med["restore_mbps"] / med["fio_read_mbps"]
row("4. restore (ckpt_read of the step) ÷ fio read",
    mbps(med["restore_mbps"]), mbps(med["fio_read_mbps"]), r, "≥ 0.90", r >= 0.90)
r = med["restore_parallel_mbps"] / med["fio_read_mbps"]
row("4b. restore with 2 connections in parallel ÷ fio read",
    mbps(med["restore_parallel_mbps"]), mbps(med["fio_read_mbps"]), r, "(info)", None)
# issue 13: a random small read costs a few 1 MiB blocks, not a window
nreads = int(med["random_reads"])
worst = max(rr["random_read_disk_bytes"] for rr in runs)
if min(rr["random_read_disk_bytes"] for rr in runs) < 0:
    row(f"4c. disk bytes read for {nreads:,} random 4 KiB ckpt_reads of the step "
        "(÷ 1 MiB blocks per read)", "unreadable (/proc/PID/io)", f"{nreads:,} × 1 MiB", None,
        "≤ 4", None)
else:
    v = med["random_read_disk_bytes"]
    r = v / (nreads * (1 << 20))
    row(f"4c. disk bytes read for {nreads:,} random 4 KiB ckpt_reads of the step "
        "(÷ 1 MiB blocks per read)",
        f"{v / (1 << 20):.0f} MiB (worst run {worst / (1 << 20):.0f})",
        f"{nreads:,} × 1 MiB", r, "≤ 4", worst <= 4 * nreads * (1 << 20))
v = med["daemon_cpu_s_per_gb"]
row("5. daemon CPU (utime+stime) per GB written (reference: fio's own CPU per GB)",
    f"{v:.3f} s/GB", f'{med["fio_write_cpu_s_per_gb"]:.3f} s/GB', None, "≤ 0.05", v <= 0.05)

hdr = ("measurement", "ckptd", "reference", "ratio", "target", "met?")
table = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
table += ["| " + " | ".join(r) + " |" for r in rows]

per_run_keys = ["memcpy_s", "staging_s", "zerocopy_s", "torch_save_s", "clone_s",
                "local_mbps", "fio_write_mbps", "restore_mbps", "restore_parallel_mbps",
                "fio_read_mbps", "random_read_disk_mib", "daemon_cpu_s_per_gb"]
for rr in runs:
    rr["random_read_disk_mib"] = rr["random_read_disk_bytes"] / (1 << 20)
per_run = ["| run | " + " | ".join(per_run_keys) + " |", "|" + "---|" * (len(per_run_keys) + 1)]
for i, rr in enumerate(runs, 1):
    per_run.append(f"| {i} | " + " | ".join(f"{rr[k]:.3f}" if k.endswith("_s") or "cpu" in k
                                              else f"{rr[k]:.0f}" for k in per_run_keys) + " |")

mib = lambda b: f"{int(b) >> 20} MiB"
section = f"""<!-- BEGIN bench/run.sh results (generated; edit bench/run.sh, not this block) -->
## Results

Command: `{env["CMDLINE"]}` — {env["DATE"]}, {env["RUNS"]} runs, medians
(ratios are of the medians), {env["DURATION"]} s for all runs.

Saved per checkpoint: {gib:g} GiB = {env["TENSORS"]} float32 tensors of
{mib(int(env["SIZE_B"]) // int(env["TENSORS"]))}; ckptd `--pool-size {mib(env["POOL_B"])}
--pool-slot-size {mib(env["SLOT_B"])} --local-keep 2` (fixed buffers: {env["FIXED"]};
memory tier: {env["MEMORY_TIER"]}), release build.  Restore (4.) and fio's read
each start after a `sync` and {env["SETTLE"]} s of quiet (`--settle`).

Machine: {env["NPROC"]} CPUs ({env["CPU"]}), {env["MEM_GIB"]} GiB RAM, kernel
{env["KERNEL"]} (shmem huge pages: {env["SHMEM_POLICY"]}); state dir, fio and torch files on {env["FSTYPE"]} ({env["FSSRC"]});
{env["FIO_VERSION"]}, torch {env["TORCH_VERSION"]} ({env["TORCH_PY"]}). Load average
{env["LOAD_START"]} at the start, {env["LOAD_END"]} at the end: **this machine is
shared with other jobs and noisy**, so single numbers move by tens of percent
between runs; each ratio compares measurements taken seconds apart in the
same runs.

{chr(10).join(table)}

MB/s are 10^6 bytes per second; CPU per GB is per 10^9 bytes.

Per run:

{chr(10).join(per_run)}
<!-- END bench/run.sh results -->"""

print()
print("\n".join(table))
print()
print(f"raw results: {env['RESULTS']}")

if env["DOCS"] == "1":
    path = env["DOCS_FILE"]
    begin = "<!-- BEGIN bench/run.sh results"
    end = "<!-- END bench/run.sh results -->"
    if os.path.exists(path):
        text = open(path).read()
    else:
        text = ("# ckptd benchmarks\n\n"
                "How to run: `bench/run.sh` (see `bench/run.sh --help`).  It builds a release\n"
                "ckptd, starts it on a scratch state dir, and compares each of its costs with\n"
                "the reference it is meant to match.\n\n")
    if begin in text and end in text:
        a = text.index(begin)
        b = text.index(end) + len(end)
        text = text[:a] + section + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    print(f"updated {path}")
PYEOF

# ---- the background scrub (issue 12): its own daemon and config, so that
# switching the scrub on and off by SIGHUP touches nothing measured above
if [ "$SCRUB" = 1 ]; then
        kill -TERM "$CKPTD_PID" 2>/dev/null || true
        wait "$CKPTD_PID" 2>/dev/null || true
        CKPTD_PID=
        scrub_args=(--runs "$RUNS" --size "$SIZE" --dir "$DIR" --build-dir "$BUILD")
        [ "$DOCS" = 1 ] || scrub_args+=(--no-docs)
        "$SRC_ROOT/bench/scrub.sh" "${scrub_args[@]}"
fi
