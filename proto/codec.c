/* SPDX-License-Identifier: MIT */
/*
 * One byte-level reader and writer for both wire protocols (codec.h), so a
 * fix to a bounds check or an error rule applies to the client and the peer
 * decoder alike.  Both cursors bound every access in one place, which lets
 * the per-message code in proto.c and peer.c read like the layout tables in
 * docs/protocol.md and docs/peer-protocol.md.
 */
#include <errno.h>
#include <string.h>

#include "codec.h"

/* ---- writer ------------------------------------------------------------ */

void w_bytes(struct wbuf *w, const void *src, size_t n) {
        if (w->overflow || n > w->cap - w->len) {
                w->overflow = true;
                return;
        }
        if (n > 0)
                memcpy(w->p + w->len, src, n);
        w->len += n;
}

void w_u8(struct wbuf *w, uint8_t v) {
        w_bytes(w, &v, 1);
}

void w_u16(struct wbuf *w, uint16_t v) {
        uint8_t b[2] = { (uint8_t)v, (uint8_t)(v >> 8) };
        w_bytes(w, b, sizeof(b));
}

void w_u32(struct wbuf *w, uint32_t v) {
        uint8_t b[4];
        for (size_t i = 0; i < sizeof(b); i++)
                b[i] = (uint8_t)(v >> (8 * i));
        w_bytes(w, b, sizeof(b));
}

void w_u64(struct wbuf *w, uint64_t v) {
        uint8_t b[8];
        for (size_t i = 0; i < sizeof(b); i++)
                b[i] = (uint8_t)(v >> (8 * i));
        w_bytes(w, b, sizeof(b));
}

void w_i32(struct wbuf *w, int32_t v) {
        w_u32(w, (uint32_t)v);
}

void w_i64(struct wbuf *w, int64_t v) {
        w_u64(w, (uint64_t)v);
}

void w_name(struct wbuf *w, const struct ckpt_name *n) {
        w_u16(w, n->len);
        w_bytes(w, n->str, n->len);
}

void w_cstr(struct wbuf *w, const char *s, size_t max) {
        size_t n = strnlen(s, max);
        w_u16(w, (uint16_t)n);
        w_bytes(w, s, n);
}

/* ---- reader ------------------------------------------------------------ */

void r_fail(struct rbuf *r, int err) {
        if (r->err != -EBADMSG)
                r->err = err;
}

const uint8_t *r_take(struct rbuf *r, size_t n) {
        if (r->err == -EBADMSG || n > r->len - r->pos) {
                r_fail(r, -EBADMSG);
                return NULL;
        }
        const uint8_t *q = r->p + r->pos;
        r->pos += n;
        return q;
}

void r_bytes(struct rbuf *r, void *dst, size_t n) {
        const uint8_t *q = r_take(r, n);
        if (q)
                memcpy(dst, q, n);
}

uint8_t r_u8(struct rbuf *r) {
        const uint8_t *q = r_take(r, 1);
        return q ? q[0] : 0;
}

uint16_t r_u16(struct rbuf *r) {
        const uint8_t *q = r_take(r, 2);
        return q ? (uint16_t)(q[0] | q[1] << 8) : 0;
}

uint32_t r_u32(struct rbuf *r) {
        const uint8_t *q = r_take(r, 4);
        uint32_t v = 0;
        if (q)
                for (size_t i = 0; i < 4; i++)
                        v |= (uint32_t)q[i] << (8 * i);
        return v;
}

uint64_t r_u64(struct rbuf *r) {
        const uint8_t *q = r_take(r, 8);
        uint64_t v = 0;
        if (q)
                for (size_t i = 0; i < 8; i++)
                        v |= (uint64_t)q[i] << (8 * i);
        return v;
}

int32_t r_i32(struct rbuf *r) {
        return (int32_t)r_u32(r);
}

int64_t r_i64(struct rbuf *r) {
        return (int64_t)r_u64(r);
}

/* A name longer than CKPT_NAME_MAX is well-formed (the length prefix says
 * where it ends) but invalid, so it is -EINVAL like any other bad name. */
void r_name(struct rbuf *r, struct ckpt_name *n) {
        uint16_t len = r_u16(r);
        const uint8_t *q = r_take(r, len);
        if (!q)
                return;
        if (len > CKPT_NAME_MAX) {
                r_fail(r, -EINVAL);
                return;
        }
        memcpy(n->str, q, len);
        n->str[len] = '\0';
        n->len = len;
}

/* Free text (messages, versions, paths): over `max` or with an embedded NUL
 * it could not round-trip through a C string, so it is malformed. */
void r_cstr(struct rbuf *r, char *dst, size_t max) {
        uint16_t len = r_u16(r);
        const uint8_t *q = r_take(r, len);
        if (!q)
                return;
        if (len > max || memchr(q, '\0', len)) {
                r_fail(r, -EBADMSG);
                return;
        }
        memcpy(dst, q, len);
        dst[len] = '\0';
}

int r_verdict(const struct rbuf *r, int check) {
        if (r->err == -EBADMSG || r->pos != r->len || check == -EBADMSG)
                return -EBADMSG;
        if (r->err < 0 || check < 0)
                return -EINVAL;
        return 0;
}

uint16_t get_le16(const uint8_t *p) {
        return (uint16_t)(p[0] | p[1] << 8);
}

uint32_t get_le32(const uint8_t *p) {
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t get_le64(const uint8_t *p) {
        return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

/* ---- value checks ------------------------------------------------------ */

void check_bad(struct check *c, bool cond) {
        if (cond)
                c->err = -EBADMSG;
}

void check_inval(struct check *c, bool cond) {
        if (cond && c->err == 0)
                c->err = -EINVAL;
}

void check_name(struct check *c, const struct ckpt_name *n) {
        check_inval(c, ckpt_name_validate(n->str, n->len) < 0);
}

void check_cstr(struct check *c, const char *s, size_t max) {
        /* A decoded string is always terminated; an unterminated array handed
         * to the encoder is the caller's bug. */
        check_bad(c, strnlen(s, max + 1) > max);
}

void check_step(struct check *c, uint64_t step) {
        check_inval(c, step > (uint64_t)CKPT_STEP_MAX);
}

void check_world(struct check *c, uint32_t world_size) {
        check_inval(c, world_size < 1 || world_size > CKPT_WORLD_MAX);
}

void check_rank(struct check *c, uint32_t rank) {
        check_inval(c, rank >= CKPT_WORLD_MAX);
}

/* [offset, offset + length) must lie within the largest shard we accept,
 * which also rules out u64 overflow of the sum. */
void check_range(struct check *c, uint64_t offset, uint64_t length) {
        check_inval(c, offset > CKPT_SHARD_SIZE_MAX || length > CKPT_SHARD_SIZE_MAX - offset);
}

void check_bool(struct check *c, uint8_t v) {
        check_bad(c, v > 1);
}
