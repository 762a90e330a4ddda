#!/bin/bash
# SPDX-License-Identifier: MIT
#
# remote.sh — ckptd's object-store upload benchmark, against a private
# radosgw on this machine: how fast the daemon flushes a committed step
# (next to `aws s3 cp --recursive` and `rclone copy` of the same files), what
# that costs the daemon in CPU, and what a running flush costs a trainer
# that stages its next step meanwhile.  Medians of R runs.
#
# Why a private radosgw: it is the one S3 server in Debian's archive
# (tests/s3/radosgw.sh, docs/object-store.md), and loopback takes the
# network out of the numbers, so what is left is each client's own work,
# and radosgw's, on the same CPUs.
#
#   bench/remote.sh            (no arguments; settings from the environment)
#
#   BUILD=dir                  meson build dir to use (default: build); its
#                              targets are built first unless REMOTE_BENCH_NO_BUILD=1
#   REMOTE_BENCH_RUNS=R        runs (default 3); medians are reported
#   REMOTE_BENCH_RANKS=N       rank processes per step (default 8)
#   REMOTE_BENCH_SHARDS=K      shards per rank (default 4)
#   REMOTE_BENCH_SHARD_SIZE=S  bytes per shard (default 64M): 8 x 4 x 64M = 2 GiB
#   REMOTE_BENCH_STAGE_SIZE=S  bytes the trainer stages in part 3 (default: the step's)
#   REMOTE_CONCURRENCY=C       ckptd --remote-concurrency, aws max_concurrent_requests,
#                              rclone --transfers (default 8)
#   REMOTE_PART_SIZE=P         ckptd --remote-part-size (default 64M)
#   RADOSGW_MEMSTORE_BYTES     radosgw's in-RAM capacity (default: 2 x step + 2 GiB;
#                              objects are deleted and garbage-collected after
#                              every upload, so one step at a time is stored)
#   REMOTE_BENCH_CONTROL=0     skip the control (part 3 on a daemon without the
#                              object store; about 40 s a run at 2 GiB)
#   REMOTE_BENCH_DIR=dir       where the scratch dir is made (default /var/tmp)
#
# Exit 77 (skip) when radosgw, /usr/bin/aws or rclone is missing.  When the
# ckptd in BUILD has no --remote-* flags yet, the awscli and rclone parts
# still run and ckptd's are reported as "unsupported".
#
# Raw per-run output and the summary line go to bench/results/ (git-ignored).
set -euo pipefail

SRC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export SRC_ROOT
cd "$SRC_ROOT"

BUILD=${BUILD:-build}
RUNS=${REMOTE_BENCH_RUNS:-3}
CONTROL=${REMOTE_BENCH_CONTROL:-1}
RANKS=${REMOTE_BENCH_RANKS:-8}
SHARDS=${REMOTE_BENCH_SHARDS:-4}
SHARD_SIZE=${REMOTE_BENCH_SHARD_SIZE:-64M}
CONC=${REMOTE_CONCURRENCY:-8}
PART=${REMOTE_PART_SIZE:-64M}
AWS=${AWS_BIN:-/usr/bin/aws}   # Debian's awscli 2; a pyenv aws 1.x may come first in PATH
JOB=rbench
BUCKET=ckptd-bench

die() { echo "remote.sh: $*" >&2; exit 1; }
skip() { echo "remote.sh: SKIP: $*" >&2; exit 77; }
log() { echo "remote.sh: $*" >&2; }

case "${1:-}" in
-h|--help) sed -n '/^#   bench\/remote/,/^# Raw/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
"") ;;
*) die "no arguments are taken; settings come from the environment (see --help)" ;;
esac

. "$SRC_ROOT/bench/lib.sh"

[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "REMOTE_BENCH_RUNS must be a positive integer"
[[ "$RANKS" =~ ^[1-9][0-9]*$ ]] || die "REMOTE_BENCH_RANKS must be a positive integer"
[[ "$SHARDS" =~ ^[1-9][0-9]*$ ]] || die "REMOTE_BENCH_SHARDS must be a positive integer"
SHARD_B=$(to_bytes "$SHARD_SIZE")
STEP_B=$((RANKS * SHARDS * SHARD_B))
STAGE_B=$(to_bytes "${REMOTE_BENCH_STAGE_SIZE:-$STEP_B}")
STAGE_TENSORS=$(( STAGE_B / SHARD_B > 0 ? STAGE_B / SHARD_B : 1 ))
SLOT_B=$((64 << 20))
# the ranks' step, or part 3's two sets of slots, whichever is larger, + a slot
POOL_B=$(( STEP_B > 2 * STAGE_B ? STEP_B : 2 * STAGE_B ))
POOL_B=$(( (POOL_B + SLOT_B - 1) / SLOT_B * SLOT_B + SLOT_B ))
export RADOSGW_MEMSTORE_BYTES=${RADOSGW_MEMSTORE_BYTES:-$(( 2 * (STEP_B > STAGE_B ? STEP_B : STAGE_B) + (2 << 30) ))}

# ---- tools (skip, not fail, when the machine lacks them) ------------------------
[ -x "$AWS" ] || skip "$AWS not found (apt-get install awscli)"
command -v rclone >/dev/null || skip "rclone not found (apt-get install rclone)"
for b in radosgw ceph-mon ceph-osd radosgw-admin; do
        command -v "$b" >/dev/null || skip "$b not found (tests/s3/radosgw.sh install)"
done

if [ "${REMOTE_BENCH_NO_BUILD:-0}" != 1 ]; then
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
# (not piped into grep -q: with pipefail, ckptd's SIGPIPE would fail the test)
CKPTD_HELP=$("$CKPTD" --help 2>&1 || true)
if [[ "$CKPTD_HELP" == *--remote-endpoint=* ]]; then
        REMOTE=1
else
        REMOTE=0
        log "$CKPTD has no --remote-* flags yet: measuring awscli and rclone only"
fi

# ---- scratch dir, cleanup -----------------------------------------------------------
WORK=$(mktemp -d "${REMOTE_BENCH_DIR:-/var/tmp}/ckptd-rbench.XXXXXX")
RGW=$WORK/rgw
STATE=$WORK/state
SOCK=$WORK/ckptd.sock
export CKPT_SOCKET=$SOCK
avail_kb=$(df -Pk "$WORK" | awk 'NR == 2 { print $4 }')
need_kb=$(( (STEP_B + 6 * STAGE_B) / 1024 + (1 << 20) ))
[ "$avail_kb" -ge "$need_kb" ] || { rm -rf "$WORK"; die "$WORK: need $((need_kb >> 20)) GiB free"; }
RESULTS=$SRC_ROOT/bench/results
mkdir -p "$RESULTS"
RAW=$RESULTS/remote-$(date +%Y%m%d-%H%M%S).txt
: >"$RAW"

CKPTD_PID=
RGW_STARTED=0
stop_ckptd() {
        if [ -n "$CKPTD_PID" ] && kill -0 "$CKPTD_PID" 2>/dev/null; then
                kill -TERM "$CKPTD_PID" 2>/dev/null || true
                wait "$CKPTD_PID" 2>/dev/null || true
        fi
        CKPTD_PID=
}
cleanup() {
        stop_ckptd
        [ "$RGW_STARTED" = 1 ] && tests/s3/radosgw.sh stop "$RGW" >/dev/null 2>&1
        rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- radosgw ----------------------------------------------------------------------
RGW_STARTED=1
rc=0
tests/s3/radosgw.sh start "$RGW" >"$WORK/rgw-start.out" 2>&1 || rc=$?
[ $rc = 77 ] && skip "radosgw.sh: $(tail -1 "$WORK/rgw-start.out")"
[ $rc = 0 ] || { cat "$WORK/rgw-start.out" >&2; die "radosgw did not start"; }
# shellcheck disable=SC1091
. "$RGW/env"   # endpoint, access_key, secret_key, region

export AWS_ACCESS_KEY_ID=$access_key AWS_SECRET_ACCESS_KEY=$secret_key
export AWS_CONFIG_FILE=$WORK/aws-config AWS_SHARED_CREDENTIALS_FILE=/dev/null
unset AWS_PROFILE AWS_DEFAULT_PROFILE AWS_SESSION_TOKEN
# defaults but for the concurrency, which is ckptd's (awscli's default: 10)
cat >"$AWS_CONFIG_FILE" <<EOF
[default]
region = $region
s3 =
    addressing_style = path
    max_concurrent_requests = $CONC
EOF
export RCLONE_CONFIG=/dev/null RCLONE_CONFIG_RGW_TYPE=s3 RCLONE_CONFIG_RGW_PROVIDER=Ceph
export RCLONE_CONFIG_RGW_ENDPOINT=$endpoint RCLONE_CONFIG_RGW_ACCESS_KEY_ID=$access_key
export RCLONE_CONFIG_RGW_SECRET_ACCESS_KEY=$secret_key RCLONE_CONFIG_RGW_REGION=$region
export RCLONE_CONFIG_RGW_FORCE_PATH_STYLE=true

aws_s3() { "$AWS" --endpoint-url "$endpoint" s3 "$@"; }

# bytes stored under s3://$1/$2, and whether a key ending in $3 is there
bucket_bytes() {
        aws_s3 ls --recursive "s3://$1/$2" | awk -v want="${3:-}" '
                { n += $3; if (want != "" && substr($4, length($4) - length(want) + 1) == want) seen = 1 }
                END { printf "%.0f %d\n", n, (want == "" || seen) }'
}

memstore_used_mib() {
        tests/s3/radosgw.sh status "$RGW" 2>/dev/null | sed -n 's/^osd: memstore holds \([0-9]*\) of.*/\1/p'
}

# delete what the last upload stored and have radosgw's garbage collector
# free it now (not in 30-60 s), so memstore holds one step at most
empty_bucket() { # bucket [remove-bucket]
        if [ "${2:-}" = rb ]; then
                aws_s3 rb --force "s3://$1" >/dev/null
        else
                aws_s3 rm --recursive --only-show-errors "s3://$1"
        fi
        radosgw-admin -c "$RGW/ceph.conf" gc process --include-all >/dev/null 2>&1 || true
        local used
        for _ in $(seq 60); do
                used=$(memstore_used_mib)
                [ -n "$used" ] && [ "$used" -lt 256 ] && return 0
                sleep 1
        done
        log "warning: memstore still holds ${used:-?} MiB after deleting s3://$1"
}

evict() { # drop the files' pages from the page cache: every client reads cold
        python3 - "$@" <<'PYEOF'
import os, sys
for top in sys.argv[1:]:
    for d, _, files in os.walk(top):
        for f in files:
            fd = os.open(os.path.join(d, f), os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
PYEOF
}

now() { date +%s.%N; }
cpu_s() { # utime+stime of pids, seconds
        local p
        for p in "$@"; do cat "/proc/$p/stat"; done |
                awk -v tck="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); n += $12 + $13 } END { print n / tck }'
}

aws_s3 mb "s3://$BUCKET" >/dev/null
# the store's own CPU (radosgw and the OSD), on the same CPUs as the clients
STORE_PIDS=("$(cat "$RGW/run/rgw.pid")" "$(cat "$RGW/run/osd.pid")")

start_ckptd() { # [local: without the object-store tier]
        rm -rf "$STATE"
        local args=(--state-dir "$STATE" --socket "$SOCK" --pool-size "$POOL_B"
                    --pool-slot-size "$SLOT_B" --local-keep 2 --log-level notice)
        if [ "$REMOTE" = 1 ] && [ "${1:-}" != local ]; then
                args+=(--remote-endpoint="$endpoint" --remote-bucket="$BUCKET"
                       --remote-region="$region" --remote-part-size="$PART"
                       --remote-concurrency="$CONC" --remote-keep=64)
        fi
        "$CKPTD" "${args[@]}" >>"$WORK/ckptd.log" 2>&1 &
        CKPTD_PID=$!
        for _ in $(seq 1200); do
                [ -S "$SOCK" ] && return 0
                kill -0 "$CKPTD_PID" 2>/dev/null || { tail -20 "$WORK/ckptd.log" >&2; die "ckptd exited at start"; }
                sleep 0.1
        done
        die "ckptd did not create its socket within 120 s"
}

SHARD_SPEC=$(for i in $(seq 0 $((SHARDS - 1))); do printf 's%d:%d,' "$i" "$SHARD_B"; done)
SHARD_SPEC=${SHARD_SPEC%,}

# ---- runs ---------------------------------------------------------------------------
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(date +%s)
for run in $(seq "$RUNS"); do
        log "run $run/$RUNS"
        out=$WORK/run-$run.txt
        echo "run=$run" >"$out"
        # a fresh daemon and state dir each run: nothing left from the last
        # run (retention, trash) works during this one's measurements
        start_ckptd
        step=$run
        step20=$(printf '%020d' "$step")

        # the step: RANKS processes in parallel, each to tier local
        pids=()
        for r in $(seq 0 $((RANKS - 1))); do
                "$TESTRANK" save --job "$JOB" --step "$step" --rank "$r" --world "$RANKS" \
                        --shards "$SHARD_SPEC" --wait-local --timeout 600000 &
                pids+=($!)
        done
        for p in "${pids[@]}"; do wait "$p" || die "a rank's save failed"; done

        # 1. ckptd: commit -> tier remote
        if [ "$REMOTE" = 1 ]; then
                c0=$(cpu_s "$CKPTD_PID")
                s0=$(cpu_s "${STORE_PIDS[@]}")
                t0=$(now)
                "$TESTRANK" commit --job "$JOB" --step "$step" --timeout 600000
                "$TESTRANK" wait --job "$JOB" --step "$step" --tier remote --timeout 600000
                t1=$(now)
                c1=$(cpu_s "$CKPTD_PID")
                s1=$(cpu_s "${STORE_PIDS[@]}")
                "$CKPTCTL" --json status >"$WORK/status-$run.json" 2>&1 || true
                # what is in the store, checked independently of the daemon
                read -r got commit_seen < <(bucket_bytes "$BUCKET" "jobs/$JOB/steps/$step20/" COMMIT)
                shard_got=$(aws_s3 ls --recursive "s3://$BUCKET/jobs/$JOB/steps/$step20/ranks/" |
                        awk '{ n += $3 } END { printf "%.0f", n }')
                [ "$commit_seen" = 1 ] || die "tier remote reached but no COMMIT object for step $step"
                [ "$shard_got" = "$STEP_B" ] || die "store holds $shard_got shard bytes of step $step, want $STEP_B"
                awk -v b="$STEP_B" -v t0="$t0" -v t1="$t1" -v c0="$c0" -v c1="$c1" \
                    -v s0="$s0" -v s1="$s1" 'BEGIN {
                        printf "ckptd_s=%.3f\nckptd_gbps=%.4f\nckptd_cpu_s=%.2f\nckptd_cpu_s_per_gb=%.4f\n",
                               t1 - t0, b / (t1 - t0) / 1e9, c1 - c0, (c1 - c0) / (b / 1e9)
                        printf "ckptd_store_cpu_s_per_gb=%.4f\n", (s1 - s0) / (b / 1e9) }' >>"$out"
                empty_bucket "$BUCKET"
        else
                "$TESTRANK" commit --job "$JOB" --step "$step" --timeout 600000
        fi

        # 2. the same files with awscli and with rclone, alternating which goes first
        dir=$STATE/jobs/$JOB/$step20
        [ -d "$dir" ] || die "no step directory $dir"
        tools=(aws rclone)
        [ $((run % 2)) = 0 ] && tools=(rclone aws)
        for tool in "${tools[@]}"; do
                b=bench-$tool-$run
                aws_s3 mb "s3://$b" >/dev/null
                evict "$dir"
                s0=$(cpu_s "${STORE_PIDS[@]}")
                t0=$(now)
                if [ "$tool" = aws ]; then
                        /usr/bin/time -f '%U %S' -o "$WORK/time" \
                                "$AWS" --endpoint-url "$endpoint" s3 cp --recursive --only-show-errors \
                                "$dir" "s3://$b/jobs/$JOB/$step20/"
                else
                        /usr/bin/time -f '%U %S' -o "$WORK/time" env -u AWS_CA_BUNDLE \
                                rclone copy --transfers "$CONC" "$dir" "rgw:$b/jobs/$JOB/$step20/"
                fi
                t1=$(now)
                s1=$(cpu_s "${STORE_PIDS[@]}")
                read -r got _ < <(bucket_bytes "$b" "")
                want=$(find "$dir" -type f -printf '%s\n' | awk '{ n += $1 } END { printf "%.0f", n }')
                [ "$got" = "$want" ] || die "$tool stored $got bytes, the step directory has $want"
                read -r u s <"$WORK/time"
                awk -v n="$tool" -v b="$STEP_B" -v t0="$t0" -v t1="$t1" -v u="$u" -v s="$s" \
                    -v s0="$s0" -v s1="$s1" 'BEGIN {
                        printf "%s_s=%.3f\n%s_gbps=%.4f\n%s_cpu_s_per_gb=%.4f\n",
                               n, t1 - t0, n, b / (t1 - t0) / 1e9, n, (u + s) / (b / 1e9)
                        printf "%s_store_cpu_s_per_gb=%.4f\n", n, (s1 - s0) / (b / 1e9) }' >>"$out"
                empty_bucket "$b" rb
        done

        # 3. a trainer's staging while a flush runs, against staging with the daemon idle
        if [ "$REMOTE" = 1 ]; then
                fs=$WORK/flush-stage-$run.txt
                "$BENCH" --socket "$SOCK" --job "stage$run" --size "$STAGE_B" \
                        --tensors "$STAGE_TENSORS" flush-stage >"$fs" &
                bench_pid=$!
                # ckpt-bench prints the staging times as soon as B's staging
                # is over, before it waits for A's flush: ask the daemon then
                # whether it is still uploading (ckpt-bench's own check is
                # flush_overlapped, from the time A reached tier remote)
                while kill -0 "$bench_pid" 2>/dev/null && ! grep -q '^commit_s=' "$fs"; do
                        sleep 0.05
                done
                "$CKPTCTL" --json status >"$WORK/status-stage-$run.json" 2>&1 || true
                wait "$bench_pid" || { cat "$fs" >&2; die "ckpt-bench flush-stage failed"; }
                grep -E '^(stage_|flush_)' "$fs" >>"$out"
                python3 - "$WORK/status-stage-$run.json" >>"$out" <<'PYEOF' || true
import json, sys
# the daemon's count of uploads on the wire, whatever the key's exact name
def find(o):
    if isinstance(o, dict):
        for k, v in o.items():
            if isinstance(v, (int, float)) and "active" in k and "upload" in k:
                return v
            r = find(v)
            if r is not None:
                return r
    return None
n = find(json.load(open(sys.argv[1])))
if n is not None:
    print("status_uploads_active_after_stage=%d" % n)
PYEOF
                empty_bucket "$BUCKET"
        fi
        stop_ckptd
        # the control: the same sequence on a daemon without the object
        # store, whose "busy" staging follows a commit that starts no flush
        # (its wait for tier remote then fails, as expected), so what the
        # commit itself and this machine's noise cost is not laid on the flush
        if [ "$REMOTE" = 0 ] || [ "$CONTROL" = 1 ]; then
                start_ckptd local
                "$BENCH" --socket "$SOCK" --job "ctl$run" --size "$STAGE_B" \
                        --tensors "$STAGE_TENSORS" flush-stage >"$WORK/control-$run.txt" 2>&1 || true
                sed -n 's/^stage_\(idle\|busy\)_s=/control_stage_\1_s=/p' "$WORK/control-$run.txt" >>"$out"
                stop_ckptd
        fi
        cat "$out" >>"$RAW"
done
T_END=$(date +%s)
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- medians, table, summary line ---------------------------------------------------------
export WORK RUNS RAW STEP_B STAGE_B RANKS SHARDS SHARD_B CONC PART REMOTE BUILD BUILDTYPE
DURATION=$((T_END - T_START))
NPROC=$(nproc)
RGW_VERSION=$(radosgw --version 2>/dev/null | cut -d' ' -f3)
AWS_VERSION=$("$AWS" --version 2>&1 | cut -d' ' -f1)
RCLONE_VERSION=$(rclone version 2>/dev/null | head -1)
export LOAD_START LOAD_END DURATION NPROC RGW_VERSION AWS_VERSION RCLONE_VERSION
python3 - <<'PYEOF'
import os, statistics, sys

sys.path.insert(0, os.path.join(os.environ["SRC_ROOT"], "bench"))
from runs import load_runs

env = os.environ
runs = load_runs(env["WORK"])

def med(k):
    vals = [r[k] for r in runs if k in r]
    return statistics.median(vals) if vals else None

remote = env["REMOTE"] == "1"
gib = int(env["STEP_B"]) / (1 << 30)
ck, aw, rc = med("ckptd_gbps"), med("aws_gbps"), med("rclone_gbps")
best_name, best = max((("aws", aw), ("rclone", rc)), key=lambda t: t[1])
rows = []
def row(*cells):
    rows.append(cells)
fmt = lambda v, f: "n/a" if v is None else f % v
ratio = ck / best if ck is not None else None
row(f"1. upload {gib:g} GiB ({env['RANKS']} ranks x {env['SHARDS']} shards), ckptd commit -> tier remote",
    fmt(ck, "%.3f GB/s"), f"{best:.3f} GB/s ({best_name})", fmt(ratio, "%.2f"), "≥ 1.0",
    "—" if ratio is None else ("yes" if ratio >= 1.0 else "**no**"))
row("1a. aws s3 cp --recursive / rclone copy", "—", f"{aw:.3f} / {rc:.3f} GB/s", "—", "(info)", "—")
row("1b. CPU s per GB uploaded: ckptd / aws / rclone (client process only)",
    f"{fmt(med('ckptd_cpu_s_per_gb'), '%.3f')} / {med('aws_cpu_s_per_gb'):.3f} / "
    f"{med('rclone_cpu_s_per_gb'):.3f}", "—", "—", "(info)", "—")
row("1c. the store's CPU s per GB meanwhile (radosgw + ceph-osd): ckptd / aws / rclone",
    f"{fmt(med('ckptd_store_cpu_s_per_gb'), '%.3f')} / {med('aws_store_cpu_s_per_gb'):.3f} / "
    f"{med('rclone_store_cpu_s_per_gb'):.3f}", "—", "—", "(info)", "—")
si, sb = med("stage_idle_s"), med("stage_busy_s")
r2 = sb / si if si and sb else None
ov = [int(r["flush_overlapped"]) for r in runs if "flush_overlapped" in r]
row(f"2. staging {int(env['STAGE_B']) / (1 << 30):g} GiB during a flush ÷ idle",
    fmt(sb, "%.3f s"), fmt(si, "%.3f s"), fmt(r2, "%.2f"), "≤ 1.10",
    "—" if r2 is None else ("yes" if r2 <= 1.10 else "**no**"))
if ov:
    row("2a. flush still running when the staging ended (runs)", f"{sum(ov)} of {len(ov)}",
        "—", "—", "all", "yes" if all(ov) else "**no**")

ua = [int(r["status_uploads_active_after_stage"]) for r in runs
      if "status_uploads_active_after_stage" in r]
if ua:
    row("2b. ckptctl status right after the staging: uploads active (per run)",
        " / ".join(map(str, ua)), "—", "—", "> 0", "yes" if all(ua) else "**no**")
ci, cb = med("control_stage_idle_s"), med("control_stage_busy_s")
if ci and cb:
    row("2c. control, daemon without object store: staging right after a commit ÷ idle",
        f"{cb:.3f} s", f"{ci:.3f} s", f"{cb / ci:.2f}", "(info)", "—")
hdr = ("measurement", "ckptd", "reference", "ratio", "target", "met?")
table = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
table += ["| " + " | ".join(r) + " |" for r in rows]
keys = sorted({k for r in runs for k in r if k != "run"})
per_run = ["| run | " + " | ".join(keys) + " |", "|" + "---|" * (len(keys) + 1)]
for i, r in enumerate(runs, 1):
    per_run.append(f"| {i} | " + " | ".join(f"{r[k]:.4g}" if k in r else "—" for k in keys) + " |")

print()
print(f"bench/remote.sh: {env['RUNS']} runs, medians; {gib:g} GiB step; concurrency "
      f"{env['CONC']}, part size {env['PART']}; {env['NPROC']} CPUs; build {env['BUILD']} "
      f"({env['BUILDTYPE']}); radosgw {env['RGW_VERSION']}, {env['AWS_VERSION']}, "
      f"{env['RCLONE_VERSION']}; load {env['LOAD_START']} -> {env['LOAD_END']}; {env['DURATION']} s")
if not remote:
    print("ckptd: unsupported (no --remote-* flags in this build): parts 1 (ckptd) and 2 not measured")
print()
print("\n".join(table))
print()
print("\n".join(per_run))
summary = {"runs": env["RUNS"], "step_bytes": env["STEP_B"], "concurrency": env["CONC"],
           "ckptd_remote": "yes" if remote else "unsupported"}
for k in ("ckptd_gbps", "aws_gbps", "rclone_gbps", "ckptd_cpu_s_per_gb", "aws_cpu_s_per_gb",
          "rclone_cpu_s_per_gb", "stage_idle_s", "stage_busy_s", "control_stage_idle_s",
          "control_stage_busy_s"):
    v = med(k)
    summary[k] = "na" if v is None else "%.4f" % v
summary["upload_ratio"] = "na" if ratio is None else "%.3f" % ratio
summary["stage_ratio"] = "na" if r2 is None else "%.3f" % r2
summary["flush_overlapped"] = "na" if not ov else "%d/%d" % (sum(ov), len(ov))
line = "REMOTE_BENCH " + " ".join(f"{k}={v}" for k, v in summary.items())
print()
print(line)
with open(env["RAW"], "a") as f:
    f.write(line + "\n")
print(f"raw results: {env['RAW']}")
PYEOF
