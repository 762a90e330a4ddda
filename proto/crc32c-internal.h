/* SPDX-License-Identifier: MIT */
/*
 * The two CRC32C implementations behind crc32c(), exposed separately so the
 * unit test can check that they agree bit for bit on every length and
 * alignment.  Nothing outside proto/ and tests/ should include this.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Portable slicing-by-8 path; always available, same contract as crc32c(). */
uint32_t crc32c_slice8(uint32_t crc, const void *buf, size_t len);

/* Whether this CPU has the SSE4.2 crc32 instruction (and the build is x86-64). */
bool crc32c_sse42_available(void);

/* Three-stream crc32q path.  Only call it when crc32c_sse42_available(). */
uint32_t crc32c_sse42(uint32_t crc, const void *buf, size_t len);

/* Size of the pieces crc32c_copy() copies and then checksums while hot. */
#define CRC32C_COPY_PIECE (32u * 1024)

/* From this length on (with SSE4.2 and AVX2), crc32c_copy() uses streaming
 * stores with the CRC pipelined behind the copy: the destination would not
 * stay in cache for its reader anyway, as with memcpy's own threshold. */
#define CRC32C_COPY_NT_MIN (4u << 20)

/* Whether crc32c_copy() has its streaming path on this CPU. */
bool crc32c_copy_nt_available(void);
