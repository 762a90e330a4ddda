/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the peer pre-shared key loader, peer_psk_load()
 * (daemon/peer/auth.h).  The key file decides who may join the cluster, so
 * the loader must accept exactly what auth.h documents and leak nothing.
 * Checked against an independent statement of the rule:
 *  - accepted exactly when the file is one line of PEER_PSK_MIN ..
 *    PEER_PSK_MAX bytes in 0x21..0x7e, optionally followed by one "\n", and
 *    the key fits the caller's capacity; then key and *len are that line;
 *  - otherwise -EINVAL, with a message, and key and *len untouched;
 *  - a file group or others may access is -EPERM whatever it holds;
 *  - the message never shows the key: the file with its letters and digits
 *    rotated gives the same result and the very same message.
 * The input is the file's content (written to a memfd, see fuzz-util.h).
 * abort() on a violation.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz-util.h"
#include "peer/auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SENTINEL 0x5a
#define SMALL_CAPACITY 40

/* The rule of auth.h, written out again: the key's length, or -1. */
static long expected_key_len(const uint8_t *data, size_t size) {
        size_t n = size;
        if (n > 0 && data[n - 1] == '\n')
                n--;
        if (n < PEER_PSK_MIN || n > PEER_PSK_MAX)
                return -1;
        for (size_t i = 0; i < n; i++)
                if (data[i] < 0x21 || data[i] > 0x7e)
                        return -1;
        return (long)n;
}

/* Load with the given capacity; check the outcome against want_len. */
static int load(const char *path, size_t capacity, long want_len, const uint8_t *data,
                char *err, size_t errsize) {
        uint8_t key[PEER_PSK_MAX + 8];
        size_t len = capacity;

        memset(key, SENTINEL, sizeof(key));
        memset(err, 0xAA, errsize);
        int r = peer_psk_load(path, key, &len, err, errsize);
        if (!memchr(err, 0, errsize))
                abort();
        for (size_t i = capacity; i < sizeof(key); i++)
                if (key[i] != SENTINEL)
                        abort(); /* written past the capacity */
        if (r == 0) {
                if (want_len < 0 || len != (size_t)want_len || memcmp(key, data, len) != 0)
                        abort();
                return 0;
        }
        if (!err[0] || len != capacity)
                abort();
        for (size_t i = 0; i < sizeof(key); i++)
                if (key[i] != SENTINEL)
                        abort(); /* a refused file left bytes behind */
        return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char err[1024], again[1024];
        long want = expected_key_len(data, size);

        const char *path = fuzz_file(data, size, 0600);
        int r = load(path, PEER_PSK_MAX, want, data, err, sizeof(err));
        if ((want >= 0) != (r == 0) || (r != 0 && r != -EINVAL))
                abort();

        int small = load(path, SMALL_CAPACITY, want <= SMALL_CAPACITY ? want : -1, data, again,
                         sizeof(again));
        if ((want >= 0 && want <= SMALL_CAPACITY) != (small == 0) ||
            (small != 0 && small != -EINVAL))
                abort();

        /* The same bytes with the key's letters and digits changed. */
        uint8_t *other = malloc(size ? size : 1);
        if (!other)
                return 0;
        for (size_t i = 0; i < size; i++)
                other[i] = (uint8_t)fuzz_rot13((char)data[i]);
        path = fuzz_file(other, size, 0600);
        if (load(path, PEER_PSK_MAX, want, other, again, sizeof(again)) != r ||
            strcmp(err, again) != 0)
                abort();

        /* Readable by the group: refused before the content matters. */
        path = fuzz_file(other, size, 0640);
        if (load(path, PEER_PSK_MAX, -1, other, again, sizeof(again)) != -EPERM)
                abort();
        free(other);
        return 0;
}
