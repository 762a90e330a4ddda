/* SPDX-License-Identifier: MIT */
/*
 * The byte-level reader and writer behind both wire protocols: the client
 * protocol (proto.c) and the peer protocol (peer.c).  They encode integers
 * the same way (little-endian, no padding), names and strings the same way
 * (u16 length + bytes) and rank their errors the same way (-EBADMSG beats
 * -EINVAL), so one copy here means a fix to a bounds check or an error rule
 * reaches both decoders of untrusted bytes at once.  What differs between
 * the two formats (framing, message layouts, per-message checks) stays in
 * their own files.
 *
 * Internal to proto/: not installed, not for client/ or daemon/.  The names
 * are short because they are read in long field-by-field sequences; none
 * of them is exported from the library's public headers.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt-proto.h"

/* Largest errno a message may carry: the kernel's MAX_ERRNO. */
#define ERRNO_MAX 4095

/* ---- writer ------------------------------------------------------------ */

struct wbuf {
        uint8_t *p;
        size_t cap, len;
        bool overflow; /* sticky: once set, nothing more is written */
};

void w_bytes(struct wbuf *w, const void *src, size_t n);
void w_u8(struct wbuf *w, uint8_t v);
void w_u16(struct wbuf *w, uint16_t v);
void w_u32(struct wbuf *w, uint32_t v);
void w_u64(struct wbuf *w, uint64_t v);
void w_i32(struct wbuf *w, int32_t v);
void w_i64(struct wbuf *w, int64_t v);
/* check_name() must have bounded n->len by CKPT_NAME_MAX. */
void w_name(struct wbuf *w, const struct ckpt_name *n);
/* A NUL-terminated char array; check_cstr() must have bounded its length. */
void w_cstr(struct wbuf *w, const char *s, size_t max);

/* ---- reader ------------------------------------------------------------ */

struct rbuf {
        const uint8_t *p;
        size_t len, pos;
        int err; /* 0, or the worst problem so far: -EBADMSG beats -EINVAL */
};

void r_fail(struct rbuf *r, int err);
/* The next n bytes in place, or NULL (and -EBADMSG) past the end. */
const uint8_t *r_take(struct rbuf *r, size_t n);
void r_bytes(struct rbuf *r, void *dst, size_t n);
uint8_t r_u8(struct rbuf *r);
uint16_t r_u16(struct rbuf *r);
uint32_t r_u32(struct rbuf *r);
uint64_t r_u64(struct rbuf *r);
int32_t r_i32(struct rbuf *r);
int64_t r_i64(struct rbuf *r);
void r_name(struct rbuf *r, struct ckpt_name *n);
void r_cstr(struct rbuf *r, char *dst, size_t max);

/* Combine what the reader saw (and whether it consumed every byte) with
 * what the value check says: 0, -EBADMSG or -EINVAL. */
int r_verdict(const struct rbuf *r, int check);

/* Fixed-offset header fields, read before there is a cursor. */
uint16_t get_le16(const uint8_t *p);
uint32_t get_le32(const uint8_t *p);
uint64_t get_le64(const uint8_t *p);

/* ---- value checks (shared by encoder and decoder) ---------------------- */

struct check {
        int err; /* as in struct rbuf */
};

/* Malformed: always wins. */
void check_bad(struct check *c, bool cond);
/* Well-formed but invalid: only if nothing worse was found. */
void check_inval(struct check *c, bool cond);
void check_name(struct check *c, const struct ckpt_name *n);
void check_cstr(struct check *c, const char *s, size_t max);
void check_step(struct check *c, uint64_t step);
void check_world(struct check *c, uint32_t world_size);
void check_rank(struct check *c, uint32_t rank);
void check_range(struct check *c, uint64_t offset, uint64_t length);
void check_bool(struct check *c, uint8_t v);
