/* SPDX-License-Identifier: MIT */
/*
 * textfmt — see textfmt.h.  The readers take exactly one spelling of each
 * value because the formats' parsers promise "parses" means "we wrote it
 * and nothing touched it since": a second accepted spelling would let a
 * changed file through unnoticed.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "util/textfmt.h"

/* ---- strict line and token readers ------------------------------------- */

int line_next(struct cursor *c, struct cursor *l, size_t max) {
        size_t avail = (size_t)(c->end - c->p);
        const char *nl = memchr(c->p, '\n', avail < max + 1 ? avail : max + 1);

        if (!nl)
                return -EBADMSG;
        *l = (struct cursor){ c->p, nl };
        c->p = nl + 1;
        return 0;
}

int tok_next(struct cursor *l, const char **tok, size_t *len) {
        if (l->p >= l->end)
                return -EBADMSG;
        const char *sp = memchr(l->p, ' ', (size_t)(l->end - l->p));
        const char *e = sp ? sp : l->end;
        if (e == l->p)
                return -EBADMSG;
        *tok = l->p;
        *len = (size_t)(e - l->p);
        l->p = sp ? sp + 1 : l->end;
        if (sp && l->p == l->end)
                return -EBADMSG;
        return 0;
}

int line_done(const struct cursor *l) {
        return l->p == l->end ? 0 : -EBADMSG;
}

int tok_word(struct cursor *l, const char *word) {
        const char *t;
        size_t n;
        int r = tok_next(l, &t, &n);
        if (r < 0)
                return r;
        return n == strlen(word) && memcmp(t, word, n) == 0 ? 0 : -EBADMSG;
}

int dec_parse(const char **p, const char *end, uint64_t max, uint64_t *out) {
        const char *s = *p;
        uint64_t v = 0;

        if (s >= end || *s < '0' || *s > '9')
                return -EBADMSG;
        if (*s == '0' && s + 1 < end && s[1] >= '0' && s[1] <= '9')
                return -EBADMSG;
        for (; s < end && *s >= '0' && *s <= '9'; s++) {
                unsigned d = (unsigned)(*s - '0');
                if (d > max || v > (max - d) / 10)
                        return -EBADMSG;
                v = v * 10 + d;
        }
        *p = s;
        *out = v;
        return 0;
}

int tok_u64(struct cursor *l, uint64_t max, uint64_t *out) {
        const char *t;
        size_t n;
        int r = tok_next(l, &t, &n);
        if (r < 0)
                return r;
        const char *e = t + n;
        r = dec_parse(&t, e, max, out);
        if (r < 0)
                return r;
        return t == e ? 0 : -EBADMSG;
}

int tok_u32(struct cursor *l, uint32_t max, uint32_t *out) {
        uint64_t v;
        int r = tok_u64(l, max, &v);
        if (r >= 0)
                *out = (uint32_t)v;
        return r;
}

int tok_hex32(struct cursor *l, uint32_t *out) {
        const char *t;
        size_t n;
        uint32_t v = 0;
        int r = tok_next(l, &t, &n);
        if (r < 0)
                return r;
        if (n != 8)
                return -EBADMSG;
        for (size_t i = 0; i < n; i++) {
                unsigned d;
                if (t[i] >= '0' && t[i] <= '9')
                        d = (unsigned)(t[i] - '0');
                else if (t[i] >= 'a' && t[i] <= 'f')
                        d = (unsigned)(t[i] - 'a' + 10);
                else
                        return -EBADMSG;
                v = v << 4 | d;
        }
        *out = v;
        return 0;
}

int tok_str(struct cursor *l, char *out, size_t cap) {
        const char *t;
        size_t n;
        int r = tok_next(l, &t, &n);
        if (r < 0)
                return r;
        /* The INT_MAX bound keeps the length representable as the result;
         * no line is anywhere near that long. */
        if (n >= cap || n > INT_MAX)
                return -EBADMSG;
        memcpy(out, t, n);
        out[n] = '\0';
        return (int)n;
}

/* Reads "<key> " of a "<key> <value>" line into l, leaving the value. */
static int line_key(struct cursor *c, struct cursor *l, const char *key) {
        int r = line_next(c, l, TEXT_LINE_MAX);
        return r < 0 ? r : tok_word(l, key);
}

int line_u64(struct cursor *c, const char *key, uint64_t max, uint64_t *out) {
        struct cursor l;
        int r = line_key(c, &l, key);
        if (r >= 0)
                r = tok_u64(&l, max, out);
        return r < 0 ? r : line_done(&l);
}

int line_u32(struct cursor *c, const char *key, uint32_t max, uint32_t *out) {
        uint64_t v;
        int r = line_u64(c, key, max, &v);
        if (r >= 0)
                *out = (uint32_t)v;
        return r;
}

int line_str(struct cursor *c, const char *key, char *out, size_t cap) {
        struct cursor l;
        int n, r = line_key(c, &l, key);
        if (r < 0)
                return r;
        n = tok_str(&l, out, cap);
        if (n < 0)
                return n;
        r = line_done(&l);
        return r < 0 ? r : n;
}

int line_magic(struct cursor *c, const char *magic) {
        struct cursor l;
        int r = line_next(c, &l, TEXT_LINE_MAX);
        if (r < 0)
                return r;
        size_t n = (size_t)(l.end - l.p);
        return n == strlen(magic) && memcmp(l.p, magic, n) == 0 ? 0 : -EBADMSG;
}

int body_verify(struct cursor *c, const char *text, size_t len, const char *crc_key) {
        /* "<crc_key> " + 8 hex digits + "\n" */
        size_t crc_line = strlen(crc_key) + 10;
        struct cursor l;
        uint32_t crc;

        if (!text || len < crc_line || text[len - 1] != '\n')
                return -EBADMSG;
        if (len > crc_line && text[len - crc_line - 1] != '\n')
                return -EBADMSG;
        l = (struct cursor){ text + len - crc_line, text + len - 1 };
        if (tok_word(&l, crc_key) < 0 || tok_hex32(&l, &crc) < 0 || line_done(&l) < 0)
                return -EBADMSG;
        if (crc32c(0, text, len - crc_line) != crc)
                return -EBADMSG;
        *c = (struct cursor){ text, text + len - crc_line };
        return 0;
}

/* ---- a growing text buffer for the formatters -------------------------- */

int text_init(struct text *t, size_t cap) {
        *t = (struct text){ .buf = malloc(cap), .cap = cap };
        return t->buf ? 0 : -ENOMEM;
}

/* Room for n more bytes, growing by at least doubling.  false (and failed
 * set) if there is none. */
static bool text_reserve(struct text *t, size_t n) {
        if (t->failed)
                return false;
        if (n <= t->cap - t->len)
                return true;
        if (n > SIZE_MAX / 2 - t->len) {
                t->failed = true;
                return false;
        }
        size_t cap = t->cap * 2 > t->len + n ? t->cap * 2 : t->len + n;
        char *b = realloc(t->buf, cap);
        if (!b) {
                t->failed = true;
                return false;
        }
        t->buf = b;
        t->cap = cap;
        return true;
}

void text_append(struct text *t, const char *data, size_t n) {
        if (!text_reserve(t, n))
                return;
        memcpy(t->buf + t->len, data, n);
        t->len += n;
}

void text_printf(struct text *t, const char *fmt, ...) {
        va_list ap;

        if (t->failed)
                return;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
                t->failed = true;
                return;
        }
        /* Too little room: vsnprintf() said how much it needs (plus its NUL). */
        if ((size_t)n >= t->cap - t->len) {
                if (!text_reserve(t, (size_t)n + 1))
                        return;
                va_start(ap, fmt);
                vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
                va_end(ap);
        }
        t->len += (size_t)n;
}

int text_finish(struct text *t, const char *crc_key, char **out, size_t *len) {
        if (!t->failed)
                text_printf(t, "%s %08" PRIx32 "\n", crc_key, crc32c(0, t->buf, t->len));
        if (t->failed) {
                free(t->buf);
                *t = (struct text){ .failed = true };
                return -ENOMEM;
        }
        *out = t->buf;
        *len = t->len;
        *t = (struct text){ .failed = true };
        return 0;
}
