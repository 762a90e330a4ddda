# SPDX-License-Identifier: MIT
#
# lib.sh — what the bench scripts share; sourced after they define die().

# "64M", "1GiB", "4096" -> bytes (binary suffixes).
to_bytes() {
        local v=${1%iB} m=1
        v=${v%B}
        case "$v" in
        *[kK]) m=1024; v=${v%?} ;;
        *[mM]) m=$((1024 * 1024)); v=${v%?} ;;
        *[gG]) m=$((1024 * 1024 * 1024)); v=${v%?} ;;
        esac
        [[ "$v" =~ ^[0-9]+$ ]] || die "not a size: '$1'"
        echo $((v * m))
}

# The kernel's shmem huge-page policy (the pool's slots take huge pages
# when it is advise, docs/design-decisions.md): the bracketed word of
# shmem_enabled, or "unknown"
SHMEM_KNOB=/sys/kernel/mm/transparent_hugepage/shmem_enabled
shmem_huge_policy() {
        local p
        p=$(sed -n 's/.*\[\([a-z_]*\)\].*/\1/p' "$SHMEM_KNOB" 2>/dev/null || true)
        echo "${p:-unknown}"
}

# free_ports N: N TCP ports free on loopback right now, space-separated
# (bound together, then released: another process could take one before
# the daemon binds it; the daemon then fails to start, loudly)
free_ports() {
        python3 - "$1" <<'PYEOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PYEOF
}

# wait_for_socket SOCK PID LOG: waits up to 60 s for the daemon PID to create
# its socket SOCK; dies with the daemon's LOG when it exits first
wait_for_socket() {
        local _
        for _ in $(seq 600); do
                [ -S "$1" ] && return 0
                kill -0 "$2" 2>/dev/null || { cat "$3" >&2; die "ckptd exited at start"; }
                sleep 0.1
        done
        die "ckptd did not create its socket within 60 s"
}
