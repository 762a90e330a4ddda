#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Run every libFuzzer target for a bounded time, starting from its seed
# corpus.  CI calls this with a clang build configured with -Dfuzz=true
# (see tests/fuzz/meson.build); a developer can run it for longer.
#
#   tests/fuzz/run-fuzz.sh BUILDDIR SECONDS
#
# The corpus is copied to a temporary directory first, so inputs that
# libFuzzer finds do not land in the repository; crash reproducers are left
# in that directory (its path is printed) and the script exits 1.
set -eu

if [ $# -ne 2 ]; then
        echo "usage: $0 BUILDDIR SECONDS" >&2
        exit 2
fi
builddir=$1
seconds=$2
case $seconds in
''|*[!0-9]*) echo "$0: SECONDS must be a number" >&2; exit 2 ;;
esac

srcdir=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-fuzz.XXXXXX")
failed=

# One target per corpus directory (tests/fuzz/meson.build builds fuzz-NAME
# for each); a directory without its target is an error, not a skip.
targets=$(cd "$srcdir/corpus" && for d in */; do printf '%s ' "${d%/}"; done)
for name in $targets; do
        bin=$builddir/tests/fuzz/fuzz-$name
        if [ ! -x "$bin" ]; then
                echo "$0: $bin missing: configure $builddir with CC=clang -Dfuzz=true" >&2
                exit 1
        fi
        mkdir -p "$work/$name/corpus" "$work/$name/artifacts"
        cp "$srcdir/corpus/$name"/* "$work/$name/corpus/"
        # README notes are not inputs.
        rm -f "$work/$name/corpus/README" "$work/$name/corpus/README.md"
        echo "== fuzz-$name for ${seconds}s"
        # -max_len: a message is at most CKPT_MSG_MAX (65536) bytes; a
        # manifest is text of similar scale for fuzzing purposes; so is a
        # peer message (a RANK_BEGIN may be bigger, but its manifest is
        # only scanned, so longer inputs find nothing new); and so are the
        # text files (a credentials file is refused past 64 KiB, a key file
        # past 1 KiB, an S3 answer the reader is given is at most 64 KiB
        # but for list pages, which hold nothing deeper).
        if ! "$bin" -max_total_time="$seconds" -max_len=65600 -timeout=30 \
                -rss_limit_mb=4096 -print_final_stats=1 \
                -artifact_prefix="$work/$name/artifacts/" \
                "$work/$name/corpus" >"$work/$name/log" 2>&1; then
                echo "fuzz-$name FAILED; log and reproducers in $work/$name/" >&2
                tail -n 40 "$work/$name/log" >&2
                failed=1
        else
                grep -E '^stat::number_of_executed_units|^stat::new_units_added' "$work/$name/log" || true
        fi
done

if [ -n "$failed" ]; then
        exit 1
fi
rm -rf "$work"
echo "all fuzz targets ran ${seconds}s without a finding"
