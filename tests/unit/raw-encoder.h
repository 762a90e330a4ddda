/* SPDX-License-Identifier: MIT */
/*
 * raw-encoder.h — a little-endian byte writer for the protocol unit tests,
 * written independently of proto/codec.c so the golden bytes and the
 * malformed messages they build do not share the code under test.
 *
 * The including file defines RAW_CAP (buffer bytes) first; the buffer is
 * the file's one `raw`.
 */
#ifndef CKPT_TEST_RAW_ENCODER_H
#define CKPT_TEST_RAW_ENCODER_H

#include <stdint.h>
#include <string.h>

static struct {
        uint8_t b[RAW_CAP];
        size_t n;
} raw;

static inline void raw_u8(uint8_t v) {
        raw.b[raw.n++] = v;
}
static inline void raw_u16(uint16_t v) {
        raw_u8((uint8_t)v);
        raw_u8((uint8_t)(v >> 8));
}
static inline void raw_u32(uint32_t v) {
        for (int i = 0; i < 4; i++)
                raw_u8((uint8_t)(v >> (8 * i)));
}
static inline void raw_u64(uint64_t v) {
        for (int i = 0; i < 8; i++)
                raw_u8((uint8_t)(v >> (8 * i)));
}
static inline void raw_bytes(const void *p, size_t len) {
        memcpy(raw.b + raw.n, p, len);
        raw.n += len;
}
/* A u16 length, then the bytes. */
static inline void raw_str(const void *s, size_t len) {
        raw_u16((uint16_t)len);
        raw_bytes(s, len);
}

#endif
