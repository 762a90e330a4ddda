#!/bin/bash
# SPDX-License-Identifier: MIT
# README's second command (and what CI runs): install, build with warnings
# as errors, run every suite; then an ASan/UBSan build runs the unit and
# integration suites, and a clang build gives each fuzz target a short
# bounded run.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh --test
# The torch.distributed.checkpoint tests (suite torch) need PyTorch: exactly
# 2.13.0, the CPU build (a plain `torch` could pull a multi-GB CUDA build).
scripts/pydeps.sh
# The object-store tests need a real S3 server (Ceph radosgw); without the
# packages they skip, saying so, rather than fail.
scripts/deps.sh --remote || echo "radosgw packages unavailable: the remote suite will skip"

log=$(mktemp)
trap 'rm -f "$log"' EXIT

echo "=== build (werror) and all suites ==="
[ -d build-ci ] || meson setup build-ci -Dwerror=true >/dev/null
ninja -C build-ci
meson test -C build-ci --print-errorlogs --num-processes 1 | tee -a "$log"

echo "=== ASan/UBSan: unit and integration suites ==="
[ -d build-asan ] || meson setup build-asan -Dwerror=true -Db_sanitize=address,undefined \
        -Db_lundef=false -Dbuildtype=debug >/dev/null
ninja -C build-asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        meson test -C build-asan --print-errorlogs --num-processes 1 \
        --suite unit --suite integration --suite remote --suite fuzz --timeout-multiplier 3 \
        | tee -a "$log"

echo "=== fuzz: short bounded libFuzzer runs ==="
[ -d build-fuzz ] || CC=clang meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined \
        -Db_lundef=false >/dev/null
ninja -C build-fuzz
tests/fuzz/run-fuzz.sh build-fuzz "${FUZZ_SECONDS:-20}"
sum() { awk -v k="$1" '$1 == k { n += $2 } END { print n + 0 }' "$log"; }
echo "=== all suites passed ==="
echo "$(sum Ok:) passed, $(sum Fail:) failed, $(sum Skipped:) skipped"
