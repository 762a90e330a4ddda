/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by fuzz targets.  Header-only; each target includes it
 * once.
 *
 * fuzz_file(): for decoders that read a file by path (the config,
 * credentials and peer key parsers take a path and check the file's owner
 * and mode themselves).  The input becomes the content of one memfd per
 * process, rewritten for each run and opened by the decoder as
 * /proc/self/fd/N: no temporary files, nothing left behind, and the decoder
 * runs its real open/fstat/read path.
 *
 * fuzz_rot13(), fuzz_rotate_values(): for the "a secret never shows in a
 * message" properties.
 */
#pragma once

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The path of a file holding data[0..size) with permission bits mode
 * (owned by us).  Borrowed until the next call.  Exits when the memfd
 * cannot be made or written (the machine, not the input, is at fault). */
static inline const char *fuzz_file(const uint8_t *data, size_t size, mode_t mode) {
        static int fd = -1;
        static char path[64];

        if (fd < 0) {
                fd = memfd_create("fuzz-input", MFD_CLOEXEC);
                if (fd < 0) {
                        perror("fuzz: memfd_create");
                        exit(1);
                }
                snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        }
        if (ftruncate(fd, 0) < 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size) ||
            fchmod(fd, mode) < 0) {
                perror("fuzz: writing the input file");
                exit(1);
        }
        return path;
}

/* A stand-in for a secret that keeps everything a parser may look at
 * (length, spaces, punctuation, control characters): letters and digits
 * rotated.  A message that does not repeat the secret is the same with the
 * original and with the stand-in, so comparing the two finds any leak
 * without guessing what a message may legitimately contain. */
static inline char fuzz_rot13(char c) {
        if (c >= 'a' && c <= 'z')
                return (char)('a' + (c - 'a' + 13) % 26);
        if (c >= 'A' && c <= 'Z')
                return (char)('A' + (c - 'A' + 13) % 26);
        if (c >= '0' && c <= '9')
                return (char)('0' + (c - '0' + 5) % 10);
        return c;
}

/* Rotate (fuzz_rot13) the value of every "name = value" line of an INI-style
 * buf whose name is_secret() picks, finding lines as the ckptd parsers do:
 * split at '\n', trimmed (isspace), comments ('#', ';') and section
 * headers ('[') skipped, the name trimmed before the first '='.  skip_bom:
 * the parser skips a UTF-8 byte-order mark at the start (config.c does,
 * credentials.c does not). */
static inline void fuzz_rotate_values(uint8_t *buf, size_t size, bool skip_bom,
                                      bool (*is_secret)(const uint8_t *name, size_t len)) {
        uint8_t *line = buf, *end = buf + size;

        if (skip_bom && size >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0)
                line += 3;
        while (line < end) {
                uint8_t *nl = memchr(line, '\n', (size_t)(end - line));
                uint8_t *s = line, *e = nl ? nl : end, *eq, *ke;
                line = nl ? nl + 1 : end;
                while (s < e && isspace(*s))
                        s++;
                while (e > s && isspace(e[-1]))
                        e--;
                if (s == e || *s == '#' || *s == ';' || *s == '[')
                        continue;
                eq = memchr(s, '=', (size_t)(e - s));
                if (!eq)
                        continue;
                for (ke = eq; ke > s && isspace(ke[-1]); ke--)
                        ;
                if (!is_secret(s, (size_t)(ke - s)))
                        continue;
                for (uint8_t *p = eq + 1; p < e; p++)
                        *p = (uint8_t)fuzz_rot13((char)*p);
        }
}
