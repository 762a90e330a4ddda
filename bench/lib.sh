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
