/* SPDX-License-Identifier: MIT */
/*
 * CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum every
 * shard carries from the trainer's copy to the disk and back.
 *
 * Uses the SSE4.2 crc32 instruction with three interleaved streams when the
 * CPU has it (checked once, at first use), and a slicing-by-8 table
 * otherwise, so results are identical everywhere.
 *
 * Thread-safety: all functions are reentrant.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Continue a CRC: crc32c(0, a, n) is the CRC of a; crc32c(crc32c(0, a, n), b,
 * m) is the CRC of a||b.  The standard check value crc32c(0, "123456789", 9)
 * is 0xE3069283. */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

/* CRC of a||b given crc1 = CRC(a), crc2 = CRC(b) and len2 = |b|.
 * O(log len2) time; no table of its own beyond a static 64-entry one. */
uint32_t crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);

/* Copy len bytes from src to dst and return crc32c(crc, src, len), in one
 * pass: each piece is checksummed while it is still in cache, so the cost
 * over a plain memcpy is small.  dst and src must not overlap. */
uint32_t crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len);

/* Name of the implementation in use ("sse4.2" or "table"), for status. */
const char *crc32c_impl(void);
