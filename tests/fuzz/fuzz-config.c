/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the ckptd.conf parser, config_load_file() (daemon/config.h).
 * An operator writes the file by hand, and it carries the object store's
 * secret.  Beyond "does not crash" this checks:
 *  - only the documented errors come back, and every message names the
 *    file ("PATH:LINE: ..." or "PATH: ...");
 *  - a file that loads gives values within their documented bounds
 *    (config_check_keys(): the range, multiple and form of every key), and
 *    config_validate() on it answers 0 or -EINVAL;
 *  - a file that does not load changes nothing (config_equal() with the
 *    defaults);
 *  - the secret never ends up in a message: the same file with the letters
 *    and digits of every secret_access_key value rotated gives the same
 *    result, the very same messages, and the same configuration but for
 *    the rotated secret;
 *  - a file that group or others may read never yields a secret.
 * The input is the file's content (written to a memfd, see fuzz-util.h).
 * abort() on a violation.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "fuzz-util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct outcome {
        struct config c;
        int r;
        char *err;
        size_t err_len;
};

static void outcome_clear(struct outcome *o) {
        config_clear(&o->c);
        free(o->err);
}

/* Load the input from a file of the given mode over the defaults. */
static void load(struct outcome *o, const uint8_t *data, size_t size, mode_t mode) {
        struct config defaults;
        const char *path = fuzz_file(data, size, mode);

        *o = (struct outcome){ 0 };
        if (config_init(&o->c) < 0 || config_init(&defaults) < 0) {
                fprintf(stderr, "fuzz-config: out of memory\n");
                exit(1);
        }
        FILE *err = open_memstream(&o->err, &o->err_len);
        if (!err) {
                fprintf(stderr, "fuzz-config: out of memory\n");
                exit(1);
        }
        o->r = config_load_file(&o->c, path, err);
        fclose(err);

        if (o->r != 0 && o->r != -EINVAL && o->r != -EPERM && o->r != -ENOMEM)
                abort();
        if (o->r != 0 && (o->err_len == 0 || !config_equal(&o->c, &defaults)))
                abort(); /* a refusal says why and applies nothing */
        if (o->r == 0 && o->err_len != 0)
                abort();
        /* Every message line starts with the file's name. */
        size_t plen = strlen(path);
        for (const char *line = o->err; *line;) {
                if (strncmp(line, path, plen) != 0 || line[plen] != ':')
                        abort();
                const char *nl = strchr(line, '\n');
                if (!nl)
                        abort(); /* each message ends its line */
                line = nl + 1;
        }
        if (o->r == 0) {
                FILE *null = fopen("/dev/null", "w");
                if (!null)
                        exit(1);
                if (config_check_keys(&o->c, null) != 0)
                        abort(); /* parsed, yet out of its documented bounds */
                int v = config_validate(&o->c, null);
                if (v != 0 && v != -EINVAL)
                        abort();
                fclose(null);
        }
        config_clear(&defaults);
}

/* The line that sets the secret; other names' values may show in messages
 * (case does not matter here: an unknown key's value is never shown). */
static bool name_is_secret(const uint8_t *name, size_t len) {
        static const char secret[] = "secret_access_key";
        return len == sizeof(secret) - 1 && strncasecmp((const char *)name, secret, len) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct outcome a, b;

        load(&a, data, size, 0600);

        uint8_t *other = malloc(size ? size : 1);
        if (!other) {
                outcome_clear(&a);
                return 0;
        }
        memcpy(other, data, size);
        fuzz_rotate_values(other, size, true, name_is_secret);
        load(&b, other, size, 0600);
        if (a.r != b.r || a.err_len != b.err_len || memcmp(a.err, b.err, a.err_len) != 0)
                abort(); /* a message depends on the secret's text */
        if (a.r == 0) {
                char *s = b.c.remote_secret_access_key;
                for (char *p = s; p && *p; p++)
                        *p = fuzz_rot13(*p);
                if (!config_equal(&a.c, &b.c))
                        abort();
        }
        outcome_clear(&b);

        /* Group-readable: whatever loads, it holds no secret. */
        load(&b, data, size, 0640);
        if (b.r == 0 && b.c.remote_secret_access_key && b.c.remote_secret_access_key[0])
                abort();
        outcome_clear(&b);
        outcome_clear(&a);
        free(other);
        return 0;
}
