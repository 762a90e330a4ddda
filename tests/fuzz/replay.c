/* SPDX-License-Identifier: MIT */
/*
 * Corpus replay: a main() for a fuzz target, so its seed corpus runs as an
 * ordinary test in every build, with any compiler (libFuzzer needs clang).
 *
 * Usage: fuzz-NAME-replay PATH...   (files, or directories of files)
 *
 * Each input is fed to LLVMFuzzerTestOneInput() in a buffer of exactly its
 * size (so a sanitizer build catches any over-read), then every truncation
 * and a few byte mutations of it: a small deterministic fuzz, so the
 * decoders' error paths are exercised even without libFuzzer.  The target
 * abort()s on a violated property; finding no input at all is a failure too,
 * since a missing corpus must not pass silently.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Mutate at most this many positions per input; spread over the input. */
#define POSITIONS_MAX 512

static unsigned long runs;

static void run_one(const uint8_t *data, size_t size) {
        uint8_t *copy = malloc(size ? size : 1);
        if (!copy) {
                fprintf(stderr, "replay: out of memory\n");
                exit(1);
        }
        memcpy(copy, data, size);
        LLVMFuzzerTestOneInput(copy, size);
        free(copy);
        runs++;
}

static void run_input(const uint8_t *data, size_t size) {
        static const uint8_t masks[] = { 0x01, 0x80, 0xff };
        size_t step = size / POSITIONS_MAX + 1;
        uint8_t *mut = malloc(size ? size : 1);

        if (!mut) {
                fprintf(stderr, "replay: out of memory\n");
                exit(1);
        }
        run_one(data, size);
        for (size_t i = 0; i < size; i += step) {
                run_one(data, i); /* truncated */
                memcpy(mut, data, size);
                for (size_t k = 0; k < sizeof(masks); k++) {
                        mut[i] = data[i] ^ masks[k];
                        run_one(mut, size);
                }
                mut[i] = 0;
                run_one(mut, size);
        }
        free(mut);
}

static int run_file(const char *path) {
        FILE *f = fopen(path, "rb");
        if (!f) {
                fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
                return -1;
        }
        size_t cap = 4096, len = 0;
        uint8_t *buf = malloc(cap);
        while (buf) {
                len += fread(buf + len, 1, cap - len, f);
                if (len < cap)
                        break;
                uint8_t *b = realloc(buf, cap * 2);
                if (!b) {
                        free(buf);
                        buf = NULL;
                        break;
                }
                buf = b;
                cap *= 2;
        }
        int err = ferror(f);
        fclose(f);
        if (!buf || err) {
                fprintf(stderr, "replay: %s: read failed\n", path);
                free(buf);
                return -1;
        }
        run_input(buf, len);
        free(buf);
        return 1;
}

/* Returns the number of files run, or -1. */
static int run_path(const char *path) {
        struct stat st;
        if (stat(path, &st) < 0) {
                fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
                return -1;
        }
        if (!S_ISDIR(st.st_mode))
                return run_file(path);

        struct dirent **ents;
        int n = scandir(path, &ents, NULL, alphasort), files = 0;
        if (n < 0) {
                fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
                return -1;
        }
        for (int i = 0; i < n; i++) {
                char sub[4096];
                const char *name = ents[i]->d_name;
                /* Skip dot files and notes that are not inputs. */
                if (name[0] != '.' && strcmp(name, "README") != 0 && strcmp(name, "README.md") != 0 &&
                    files >= 0) {
                        snprintf(sub, sizeof(sub), "%s/%s", path, name);
                        if (stat(sub, &st) == 0 && S_ISREG(st.st_mode)) {
                                int r = run_file(sub);
                                files = r < 0 ? -1 : files + r;
                        }
                }
                free(ents[i]);
        }
        free(ents);
        return files;
}

int main(int argc, char **argv) {
        int files = 0;

        if (argc < 2) {
                fprintf(stderr, "usage: %s CORPUS-DIR-OR-FILE...\n", argv[0]);
                return 2;
        }
        for (int i = 1; i < argc; i++) {
                int r = run_path(argv[i]);
                if (r < 0)
                        return 1;
                files += r;
        }
        if (files == 0) {
                fprintf(stderr, "replay: no inputs found\n");
                return 1;
        }
        printf("replay: %d files, %lu runs, no property violated\n", files, runs);
        return 0;
}
