/* SPDX-License-Identifier: MIT */
/*
 * errbuf — hand a caller-supplied message buffer the reason for a failure
 * and return the error, in one expression:
 *
 *     return errbuf_fail(-EINVAL, err, errsize, "bad bucket name '%s'", b);
 *
 * For modules whose errors reach a user through their caller (config,
 * credentials, the S3 client) rather than the log.
 */
#pragma once

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

static inline int errbuf_fail(int r, char *err, size_t errsize, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static inline int errbuf_fail(int r, char *err, size_t errsize, const char *fmt, ...) {
        if (err && errsize) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err, errsize, fmt, ap);
                va_end(ap);
        }
        return r;
}
