#!/bin/bash
# SPDX-License-Identifier: MIT
# README's first command: set up, build, start a real ckptd with its
# embedded defaults, save a 4-rank checkpoint through it, restore it and
# check every byte, show `ckptctl status`, then stop the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh
[ -d build ] || meson setup build -Dbuildtype=release >/dev/null
ninja -C build daemon/ckptd daemon/ckptctl client/ckpt-example-trainer >/dev/null

# Embedded defaults: as a normal user the state lives in
# ~/.local/state/ckptd and the socket in $XDG_RUNTIME_DIR (or the state
# dir); as root in /var/lib/ckptd and /run/ckptd.
./build/daemon/ckptd &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon 2>/dev/null || true' EXIT

# wait until it answers
for _ in $(seq 100); do
        ./build/daemon/ckptctl status >/dev/null 2>&1 && break
        kill -0 $daemon 2>/dev/null || { echo "ckptd failed to start" >&2; exit 1; }
        sleep 0.1
done

echo
./build/client/ckpt-example-trainer --ranks 4 --steps 3 --mib 64
echo
./build/daemon/ckptctl status
echo
./build/daemon/ckptctl list example-job
