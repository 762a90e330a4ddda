#!/bin/bash
# SPDX-License-Identifier: MIT
# Install what ckptd needs to build and test, from Debian's packages only.
# Usage: scripts/deps.sh [--test] [--remote]
#   --test    adds what the test suites use
#   --remote  adds Ceph's radosgw, the real S3 server the object-store tests
#             start (tests/s3/radosgw.sh)
set -euo pipefail

pkgs=(gcc meson ninja-build pkg-config liburing-dev libcurl4-openssl-dev libssl-dev
      libsqlite3-dev libsystemd-dev python3)
for arg in "$@"; do
        case $arg in
        --test)
                # systemd: systemd-analyze and systemd-socket-activate for the
                # unit tests; clang + libclang-rt: libFuzzer; e2fsprogs and
                # util-linux: the loop-mounted ext4 of the disk-full test;
                # prometheus: promtool, which validates the metrics.
                pkgs+=(systemd clang libclang-rt-14-dev e2fsprogs util-linux procps sqlite3
                       prometheus) ;;
        --remote)
                pkgs+=(radosgw ceph-mon ceph-osd) ;;
        *)
                echo "usage: $0 [--test] [--remote]" >&2
                exit 2 ;;
        esac
done

missing=()
for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=
[ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "installing: ${missing[*]}"
$SUDO apt-get update -q
$SUDO apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "${missing[@]}"
