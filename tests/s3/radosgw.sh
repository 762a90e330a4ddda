#!/bin/bash
# SPDX-License-Identifier: MIT
#
# A throw-away single-node Ceph radosgw for the object-store tier's tests.
#
# Why radosgw: the tests must talk to a real S3 implementation that verifies
# SigV4 signatures, and the only one in Debian 12's archive (CI reaches
# nothing else) is Ceph's.  Why this shape: one ceph-mon, one ceph-osd on
# memstore (RAM, no disk image to create or clean up) and one radosgw, all
# of them configured through DIR/ceph.conf and keeping every file (data,
# logs, sockets, pid files) under DIR, bound to 127.0.0.1 on free ports, so
# that several test runs can coexist and cleanup is `stop DIR; rm -rf DIR`.
# Nothing under /etc/ceph or /var/lib/ceph is read or written.
#
#   radosgw.sh install            apt packages (exit 77 if impossible)
#   radosgw.sh start DIR [PORT]   bootstrap under DIR; prints endpoint=,
#                                 access_key=, secret_key=, region= lines
#                                 and writes them to DIR/env
#   radosgw.sh stop DIR           stop the daemons started there, and wait
#   radosgw.sh status DIR         exit 0 when all three run and S3 answers
#
# Settings from the environment: RADOSGW_MEMSTORE_BYTES (capacity of the
# in-memory OSD, default 8 GiB; its RSS is about twice the bytes stored),
# RADOSGW_START_TIMEOUT (seconds, default 180),
# RADOSGW_ACCESS_KEY, RADOSGW_SECRET_KEY, RADOSGW_REGION.
# See docs/object-store.md, "Test object store: radosgw", for the reasons
# behind each setting in ceph.conf.

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
S3CHECK="$HERE/s3check.py"
PACKAGES=(radosgw ceph-mon ceph-osd)
BINARIES=(ceph ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph-authtool)
MARKER=.radosgw-sh
DAEMONS=(rgw osd mon)   # stop order

MEMSTORE_BYTES=${RADOSGW_MEMSTORE_BYTES:-$((8 << 30))}
START_TIMEOUT=${RADOSGW_START_TIMEOUT:-180}
ACCESS_KEY=${RADOSGW_ACCESS_KEY:-CKPTDTESTACCESSKEY01}
SECRET_KEY=${RADOSGW_SECRET_KEY:-ckptdTestSecretKey0123456789abcdefghijKL}
REGION=${RADOSGW_REGION:-default}
RGW_NAME=client.rgw.gw

# a ceph client reads these before its -c option; an outer setting must not
# point our tools at another cluster
unset CEPH_ARGS CEPH_CONF

log() { echo "radosgw.sh: $*" >&2; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

have_binaries() {
    local b
    for b in "${BINARIES[@]}"; do
        command -v "$b" >/dev/null 2>&1 || return 1
    done
    command -v python3 >/dev/null 2>&1
}

cmd_install() {
    if have_binaries; then
        log "packages already installed ($(ceph-mon --version 2>/dev/null | cut -d' ' -f1-3))"
        return 0
    fi
    if [ "$(id -u)" -ne 0 ]; then
        log "SKIP: ${PACKAGES[*]} are not installed and installing needs root"
        exit 77
    fi
    local t0 apt_opts=(-o DPkg::Lock::Timeout=300 -q)
    t0=$(now)
    export DEBIAN_FRONTEND=noninteractive
    # (not piped into grep -q: with pipefail, apt-cache's SIGPIPE would fail it)
    if [[ "$(apt-cache policy radosgw 2>/dev/null)" != *"Candidate: "[0-9]* ]]; then
        log "apt-get update"
        apt-get "${apt_opts[@]}" update >&2 || {
            log "SKIP: apt-get update failed (no package archive reachable?)"
            exit 77
        }
    fi
    log "apt-get install ${PACKAGES[*]}"
    # recommends would add ceph-mgr, ceph-mds, smartmontools... none needed
    if ! apt-get "${apt_opts[@]}" install -y --no-install-recommends \
            "${PACKAGES[@]}" >&2; then
        log "SKIP: apt-get install ${PACKAGES[*]} failed"
        exit 77
    fi
    have_binaries || { log "SKIP: installed, but ${BINARIES[*]} not all found"; exit 77; }
    log "installed in $(elapsed "$t0") s"
}

free_port() {
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

port_in_use() {
    python3 -c 'import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(0)
sys.exit(1)' "$1"
}

# whether process $1 is a ceph daemon started with -c $DIR/ceph.conf
is_dir_daemon() {
    local args
    mapfile -d '' args 2>/dev/null </proc/"$1"/cmdline || return 1
    case "${args[0]:-}" in
    ceph-mon | ceph-osd | radosgw | */ceph-mon | */ceph-osd | */radosgw) ;;
    *) return 1 ;;
    esac
    [ "${args[1]:-}" = -c ] && [ "${args[2]:-}" = "$DIR/ceph.conf" ]
}

# pid of daemon $1 under $DIR if it is still the process we started: the pid
# file could be stale and the number reused by now
daemon_pid() {
    local pidfile="$DIR/run/$1.pid" pid
    [ -r "$pidfile" ] || return 1
    pid=$(cat "$pidfile" 2>/dev/null) || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] && is_dir_daemon "$pid" || return 1
    echo "$pid"
}

# every daemon of this DIR, pid files or not (a DIR deleted without `stop`
# leaves its daemons running)
dir_pids() {
    local p
    for p in /proc/[0-9]*; do
        is_dir_daemon "${p#/proc/}" && echo "${p#/proc/}"
    done
    return 0
}

wait_gone() {  # pid seconds
    local deadline=$((SECONDS + $2))
    while kill -0 "$1" 2>/dev/null; do
        # a zombie child of ours counts as gone
        [ "$(awk '{print $3}' /proc/"$1"/stat 2>/dev/null)" = Z ] && return 0
        [ $SECONDS -ge $deadline ] && return 1
        sleep 0.1
    done
}

stop_daemons() {
    local name pid
    for name in "${DAEMONS[@]}"; do
        pid=$(daemon_pid "$name") || { rm -f "$DIR/run/$name.pid"; continue; }
        if [ "$name" = osd ]; then
            # memstore writes its whole content to osd data on a clean
            # shutdown (seconds per GiB, for data nobody reads again):
            # the next start makes a new store anyway
            kill -KILL "$pid" 2>/dev/null
        else
            kill -TERM "$pid" 2>/dev/null
        fi
        # radosgw with requests stuck on a full OSD never finishes its
        # shutdown; nothing it holds is worth waiting long for
        if ! wait_gone "$pid" 10; then
            log "$name ($pid) ignored SIGTERM for 10 s, killing it"
            kill -KILL "$pid" 2>/dev/null
            wait_gone "$pid" 10 || log "$name ($pid) did not exit"
        fi
        rm -f "$DIR/run/$name.pid"
    done
    for pid in $(dir_pids); do
        log "stray process $pid ($(tr '\0' ' ' 2>/dev/null </proc/"$pid"/cmdline | cut -c1-80)), killing it"
        kill -KILL "$pid" 2>/dev/null
        wait_gone "$pid" 10
    done
}

set_dir() {
    [ -n "${1:-}" ] || { log "usage: $0 ${CMD} DIR"; exit 2; }
    [ "$CMD" = start ] && { mkdir -p "$1" || exit 1; }
    # the daemons are found by this exact path in their command lines
    DIR=$(realpath -m "$1")
    CONF="$DIR/ceph.conf"
}

cmd_stop() {
    set_dir "${1:-}"
    stop_daemons
}

# "used/total MiB" of the memstore OSD, from its admin socket
osd_usage() {
    timeout 10 ceph --admin-daemon "$DIR/run/osd.0.asok" perf dump 2>/dev/null |
        python3 -c 'import json, sys
o = json.load(sys.stdin)["osd"]
used, total = o["stat_bytes_used"], o["stat_bytes"]
print("%d of %d MiB (%.0f%%)%s" % (used >> 20, total >> 20, 100.0 * used / max(total, 1),
      ", FULL: writes and deletes time out" if used >= 0.95 * total else ""))'
}

cmd_status() {
    set_dir "${1:-}"
    local name pid rc=0
    for name in mon osd rgw; do
        if pid=$(daemon_pid "$name"); then
            echo "$name: running, pid $pid, rss $(awk '/^VmRSS/ {print int($2 / 1024)}' \
                /proc/"$pid"/status 2>/dev/null) MiB"
            [ "$name" = osd ] && echo "osd: memstore holds $(osd_usage)"
        else
            echo "$name: not running"
            rc=3
        fi
    done
    if [ -r "$DIR/env" ]; then
        cat "$DIR/env"
        if [ $rc -eq 0 ] && ! python3 "$S3CHECK" --env "$DIR/env" ls >/dev/null; then
            echo "rgw: does not answer signed requests"
            rc=3
        fi
    fi
    return $rc
}

diagnose() {
    local f
    log "---- diagnostics for $DIR ----"
    for f in "$DIR"/log/*; do
        [ -s "$f" ] || continue
        echo "==== tail $f" >&2
        tail -n 40 "$f" >&2
    done
    if [ -n "$(daemon_pid osd)" ]; then
        echo "==== osd memstore: $(osd_usage)" >&2
    fi
    if [ -n "$(daemon_pid mon)" ]; then
        echo "==== ceph status" >&2
        timeout 15 ceph -c "$CONF" --connect-timeout 10 status >&2 2>&1
    fi
    free -m >&2 2>/dev/null || head -3 /proc/meminfo >&2
}

fail() {
    log "start failed: $*"
    diagnose
    stop_daemons
    exit 1
}

check_deadline() {
    [ $SECONDS -lt $DEADLINE ] ||
        fail "timed out after ${START_TIMEOUT} s (RADOSGW_START_TIMEOUT) $*"
}

# seconds until the deadline, at least 1 and at most $1
secs_left() {
    local r=$((DEADLINE - SECONDS))
    [ $r -ge 1 ] || r=1
    [ $r -le "$1" ] || r=$1
    echo "$r"
}

# ceph CLI with bounded waiting: it retries forever when the mon is away
ceph_cmd() {
    timeout "$(secs_left 30)" ceph -c "$CONF" --connect-timeout 20 "$@"
}

launch() {  # name command...
    local name=$1
    shift
    # no setsid: the daemons stay in the caller's process group, so a test
    # runner that kills a timed-out test's group takes them down as well.
    # stdio goes to files: a caller reading our stdout to EOF must not wait
    # for the daemons.
    "$@" -f </dev/null >>"$DIR/log/$name.out" 2>&1 &
    echo $! >"$DIR/run/$name.pid"
}

alive_or_fail() {
    local name
    for name in "$@"; do
        daemon_pid "$name" >/dev/null || fail "$name exited during startup"
    done
}

write_conf() {
    cat >"$CONF" <<EOF
# written by tests/s3/radosgw.sh; see docs/object-store.md
[global]
fsid = $FSID
mon host = [v1:127.0.0.1:$MON_PORT]
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
# v1 only: one port per daemon, no v2 address to agree on
ms bind msgr2 = false
ms bind ipv6 = false
# the cluster trusts loopback; S3 requests are still signed and checked by
# radosgw against the user's secret
auth cluster required = none
auth service required = none
auth client required = none
keyring = $DIR/keyring
# one OSD: one copy, and placement may not need a second host
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon max pg per osd = 1000
# no mgr here to act on these
mon warn on pool no app = false
# HEALTH_WARN noise only (no cephx here), hiding real warnings in "status"
mon warn on insecure global id reclaim = false
mon warn on insecure global id reclaim allowed = false
# a test machine's disk may be nearly full; the mon must not stop for that
mon data avail crit = 0
mon data avail warn = 0
run dir = $DIR/run
crash dir = $DIR/crash
log file = $DIR/log/\$name.log
mon cluster log file = $DIR/log/cluster.log
log to syslog = false
err to syslog = false
clog to syslog = false
log to stderr = false
err to stderr = true
pid file =
debug ms = 0/0
# pool creation at the first radosgw start is a chain of map updates;
# proposing each at once instead of after 1 s cuts seconds off the start
paxos propose interval = 0.05
paxos min wait = 0.01

[mon]
mon data = $DIR/mon/\$id
admin socket = $DIR/run/\$name.asok
debug mon = 1/5

[osd]
osd data = $DIR/osd/\$id
admin socket = $DIR/run/\$name.asok
osd objectstore = memstore
# the capacity memstore reports; RAM is used only as data arrives, about
# twice the bytes stored.  At 95% the OSD is marked full and from then on
# every write and delete blocks (408 after "rados osd op timeout") until
# the next start, so size this for all bytes a run keeps at once (deleted
# objects count until garbage collection frees them)
memstore device bytes = $MEMSTORE_BYTES
# the OSD would otherwise place itself in the crush map and set its device
# class by mon commands sent early in its start, which the mon sometimes
# rejects ("wrong fsid", the OSD then exits); start adds it to the map
osd crush update on start = false
osd class update on start = false
debug osd = 1/5

[client]
# radosgw-admin reads these too, so both agree about the zone and gc
rgw data = $DIR/rgw
# deleted and overwritten objects free their tail (all but the first
# 4 MiB) only when garbage collection runs, by default after 2 h: a test
# run would fill memstore long before that
rgw gc obj min wait = 30
rgw gc processor period = 30
rgw gc processor max time = 30
rgw enable usage log = false
# a full OSD blocks writes and deletes forever; with this, radosgw
# answers 408 RequestTimeout instead, and a test fails visibly
rados osd op timeout = 30
debug rgw = 1/5

[$RGW_NAME]
rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT
admin socket = $DIR/run/\$name.asok
rgw thread pool size = 64
EOF
}

cmd_start() {
    set_dir "${1:-}"
    RGW_PORT=${2:-}
    local t0 tries=0
    t0=$(now)
    DEADLINE=$((SECONDS + START_TIMEOUT))
    have_binaries || { log "SKIP: ceph is not installed; run '$0 install' first"; exit 77; }
    if [ $(( ${#DIR} + 30 )) -gt 107 ]; then
        log "DIR path too long for the daemons' unix sockets (${#DIR} chars): $DIR"
        exit 2
    fi

    # a previous run in the same DIR: stop what it left running (also when
    # DIR was deleted under it), then wipe
    if [ ! -e "$DIR/$MARKER" ] && [ -n "$(ls -A "$DIR")" ]; then
        log "$DIR is not empty and was not made by $0; refusing to use it"
        exit 2
    fi
    stop_daemons
    find "$DIR" -mindepth 1 -delete || { log "cannot clean $DIR"; exit 1; }
    mkdir -p "$DIR"/{run,log,mon,osd,rgw,crash} && touch "$DIR/$MARKER" || exit 1

    if [ -n "$RGW_PORT" ]; then
        [[ "$RGW_PORT" =~ ^[0-9]+$ ]] || { log "bad port: $RGW_PORT"; exit 2; }
        if port_in_use "$RGW_PORT"; then
            log "port $RGW_PORT on 127.0.0.1 is in use"
            exit 1
        fi
    else
        RGW_PORT=$(free_port)
    fi
    MON_PORT=$(free_port)
    while [ "$MON_PORT" = "$RGW_PORT" ]; do MON_PORT=$(free_port); done
    FSID=$(cat /proc/sys/kernel/random/uuid)
    write_conf

    # ---- mon
    ceph-authtool "$DIR/keyring" --create-keyring --gen-key -n mon. \
        --cap mon 'allow *' >>"$DIR/log/setup.out" 2>&1 || fail "ceph-authtool"
    monmaptool --create --fsid "$FSID" --addv a "[v1:127.0.0.1:$MON_PORT]" \
        "$DIR/monmap" >>"$DIR/log/setup.out" 2>&1 || fail "monmaptool"
    ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" --keyring "$DIR/keyring" \
        >>"$DIR/log/setup.out" 2>&1 || fail "ceph-mon --mkfs"
    launch mon ceph-mon -c "$CONF" -i a
    until ceph_cmd mon stat >/dev/null 2>>"$DIR/log/setup.out"; do
        alive_or_fail mon
        check_deadline "waiting for the mon"
        sleep 0.5
    done
    check_deadline
    log "mon up on 127.0.0.1:$MON_PORT after $(elapsed "$t0") s"

    # ---- osd (memstore)
    local osd_uuid osd_id
    osd_uuid=$(cat /proc/sys/kernel/random/uuid)
    osd_id=$(ceph_cmd osd new "$osd_uuid" 2>>"$DIR/log/setup.out") || fail "ceph osd new"
    [ "$osd_id" = 0 ] || fail "ceph osd new gave id '$osd_id', expected 0"
    ceph_cmd osd crush add osd.0 1.0 root=default >>"$DIR/log/setup.out" 2>&1 ||
        fail "ceph osd crush add"
    mkdir -p "$DIR/osd/0"
    ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$osd_uuid" \
        >>"$DIR/log/setup.out" 2>&1 || fail "ceph-osd --mkfs"
    launch osd ceph-osd -c "$CONF" -i 0
    # (grep without -q: it must read all, or pipefail sees ceph's SIGPIPE)
    until ceph_cmd osd dump 2>>"$DIR/log/setup.out" | grep '^osd\.0 up' >/dev/null; do
        alive_or_fail mon osd
        check_deadline "waiting for the osd to be up"
        sleep 0.5
    done
    check_deadline
    log "osd up after $(elapsed "$t0") s"

    # ---- radosgw; it creates its pools and the default zone on first start
    launch rgw radosgw -c "$CONF" -n "$RGW_NAME"
    local endpoint="http://127.0.0.1:$RGW_PORT"
    until python3 "$S3CHECK" --endpoint "$endpoint" wait 1 >/dev/null 2>&1; do
        alive_or_fail mon osd rgw
        check_deadline "waiting for radosgw to answer HTTP"
    done
    log "radosgw answers on $endpoint after $(elapsed "$t0") s"

    # ---- the test user, and proof that signatures are checked
    timeout "$(secs_left 120)" radosgw-admin -c "$CONF" user create --uid=ckptd-test \
        --display-name="ckptd test" --access-key="$ACCESS_KEY" --secret="$SECRET_KEY" \
        >>"$DIR/log/setup.out" 2>&1 || fail "radosgw-admin user create"
    cat >"$DIR/env" <<EOF
endpoint=$endpoint
access_key=$ACCESS_KEY
secret_key=$SECRET_KEY
region=$REGION
EOF
    # the user cache of a just-started gateway may need a moment; a gateway
    # that still answers wrongly after that is broken, not slow
    until python3 "$S3CHECK" --env "$DIR/env" check-auth >>"$DIR/log/setup.out" 2>&1; do
        alive_or_fail mon osd rgw
        check_deadline "waiting for a signed request to succeed"
        tries=$((tries + 1))
        [ $tries -lt 20 ] || fail "signature check failed 20 times (see setup.out)"
        sleep 0.5
    done
    log "signed requests checked (wrong secret: 403) after $(elapsed "$t0") s"
    cat "$DIR/env"
}

CMD=${1:-}
shift || true
case "$CMD" in
install) cmd_install ;;
start) cmd_start "$@" ;;
stop) cmd_stop "$@" ;;
status) cmd_status "$@" ;;
*)
    echo "usage: $0 install | start DIR [PORT] | stop DIR | status DIR" >&2
    exit 2
    ;;
esac
