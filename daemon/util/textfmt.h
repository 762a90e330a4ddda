/* SPDX-License-Identifier: MIT */
/*
 * textfmt — the strict line/token readers and the growing text builder
 * behind the daemon's checksummed text formats (MANIFEST and the commit
 * record, docs/on-disk.md; node manifests and the commit object,
 * docs/object-layout.md).
 *
 * Those formats share one set of spelling rules: lines end in '\n' and are
 * bounded in length, tokens are separated by exactly one space with none
 * leading or trailing, numbers are plain decimal without a leading zero or
 * exactly 8 lowercase hex digits, and the last line is "<key> <crc32c>" over
 * everything before it.  Keeping those rules in one place keeps the formats
 * from drifting apart; what a file means stays with its module.
 *
 * Every reader answers -EBADMSG for anything but the one accepted spelling
 * and never reads outside its cursor, so the input need not be
 * NUL-terminated.  Nothing here allocates but the builder.
 *
 * Thread-safety: no shared state; a cursor or a builder belongs to its
 * caller.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest line the "<key> <value>" readers (line_u64(), line_str(), ...)
 * and line_magic() accept, without its '\n'. */
#define TEXT_LINE_MAX 512

/* ---- strict line and token readers ------------------------------------- */

/* The unread part [p, end) of a text, or of one line of it. */
struct cursor {
        const char *p, *end;
};

/* Take the next line (without its '\n') from c into l and advance c past
 * it.  A line longer than max bytes, or one without a newline, is
 * -EBADMSG. */
int line_next(struct cursor *c, struct cursor *l, size_t max);

/* Next token of line l into tok/len (pointing into the line).  -EBADMSG at
 * the end of the line, for an empty token (two spaces, a leading space) and
 * for a space that ends the line. */
int tok_next(struct cursor *l, const char **tok, size_t *len);

/* 0 if all of l has been read, else -EBADMSG. */
int line_done(const struct cursor *l);

/* Next token must be exactly word.  0 or -EBADMSG. */
int tok_word(struct cursor *l, const char *word);

/* Plain decimal at *p, before end, advanced past it: digits only, no sign,
 * no leading zero except "0", value <= max.  Stops at the first non-digit,
 * which the caller judges.  0 or -EBADMSG (no digit at *p, a leading zero,
 * a value above max); *p and *out are unchanged on failure. */
int dec_parse(const char **p, const char *end, uint64_t max, uint64_t *out);

/* A token that is a plain decimal (as dec_parse()) <= max, and nothing
 * else.  0 or -EBADMSG. */
int tok_u64(struct cursor *l, uint64_t max, uint64_t *out);
int tok_u32(struct cursor *l, uint32_t max, uint32_t *out);

/* A token of exactly 8 lowercase hex digits.  0 or -EBADMSG. */
int tok_hex32(struct cursor *l, uint32_t *out);

/* Copy the next token into out (cap bytes, NUL-terminated).  Its length,
 * or -EBADMSG (also if it does not fit).  The token may hold any byte but
 * ' ' and '\n', NUL included: the caller validates out with the length
 * returned, not strlen(). */
int tok_str(struct cursor *l, char *out, size_t cap);

/* Whole lines of the form "<key> <value>" of at most TEXT_LINE_MAX bytes,
 * the value read as tok_u64(), tok_u32() or tok_str() read it (line_str()
 * returns the value's length).  -EBADMSG for anything else on the line. */
int line_u64(struct cursor *c, const char *key, uint64_t max, uint64_t *out);
int line_u32(struct cursor *c, const char *key, uint32_t max, uint32_t *out);
int line_str(struct cursor *c, const char *key, char *out, size_t cap);

/* A line that is exactly magic.  0 or -EBADMSG. */
int line_magic(struct cursor *c, const char *magic);

/* Check that text[0, len) ends in the line "<crc_key> <crc>\n", crc being
 * 8 hex digits of the CRC32C of everything before that line (which must
 * itself end in '\n' or be empty).  On success c covers just that body.
 * 0 or -EBADMSG (also for text NULL). */
int body_verify(struct cursor *c, const char *text, size_t len, const char *crc_key);

/* ---- a growing text buffer for the formatters -------------------------- */

/* Appends never fail on their own: the first allocation failure sets failed
 * and turns every later append into a no-op, so a formatter writes its
 * whole document and checks once, in text_finish(). */
struct text {
        char *buf;
        size_t len, cap;
        bool failed;
};

/* Start an empty builder with cap (> 0) bytes reserved.  0 or -ENOMEM. */
int text_init(struct text *t, size_t cap);

/* Append n bytes of data / printf-formatted text (without a NUL). */
void text_append(struct text *t, const char *data, size_t n);
void text_printf(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Append the line "<crc_key> <crc>\n" that body_verify() checks and hand the
 * buffer to the caller in *out and *len (free() it; not NUL-terminated).  0, or
 * -ENOMEM if any append failed, in which case the buffer is freed.  Either
 * way t is spent. */
int text_finish(struct text *t, const char *crc_key, char **out, size_t *len);
