/* SPDX-License-Identifier: MIT */
/*
 * copy — memcpy for large copies whose destination is not read again soon.
 *
 * libckpt's ckpt_read copies a restore out of the daemon's slot into the
 * trainer's buffer in pieces of a few MiB (one per READ). glibc's memcpy
 * switches to streaming stores only above a threshold derived from the
 * last-level cache (hundreds of MiB on big servers), so each piece is
 * copied with ordinary stores, which read every destination line before
 * writing it: 145 ms per GiB here against 86 ms for one 1 GiB memcpy
 * (docs/BENCHMARKS.md, "The memory tier"). copy_large() gives every large
 * piece the streaming path.
 */
#pragma once

#include <stddef.h>

/* From this length on copy_large() streams (with AVX2); below it, memcpy. */
#define COPY_LARGE_MIN (1u << 20)

/*
 * Copy len bytes from src to dst (which must not overlap), like memcpy.
 * From COPY_LARGE_MIN bytes on, with AVX2, the stores bypass the cache and
 * are fenced before the return, so another thread or process told of the
 * bytes afterwards sees them. Thread-safe; no alignment needed.
 */
void copy_large(void *dst, const void *src, size_t len);
