/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the credentials file parser behind credentials_load()
 * (daemon/remote/credentials.h), the AWS INI file that holds the object
 * store's secret.  Beyond "does not crash" this checks:
 *  - only the documented errors come back, a refusal has a message, and a
 *    file group or others may read is -EPERM whatever it holds;
 *  - what loads has the documented shape: an access key of printable
 *    characters without space, '/' or ','; a non-empty secret without
 *    control characters; a token, if any, printable without spaces; a
 *    region of letters, digits, '-' and '_'; origin "file PATH [default]";
 *    and the secret is text of the file;
 *  - secrets never end up in messages: the same file with the letters and
 *    digits of every aws_secret_access_key and aws_session_token value
 *    rotated gives the same result, the very same message and origin, and
 *    the rotated secret.
 * The input is the file's content (written to a memfd, see fuzz-util.h);
 * it is read for profile [default] with an environment of HOME only.
 * abort() on a violation.
 */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuzz-util.h"
#include "remote/credentials.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const env[] = { "HOME=/nonexistent", NULL };

static int load(struct credentials **c, const char *path, char *err, size_t errsize) {
        struct credentials_config cfg = { .credentials_file = path, .envp = env };

        memset(err, 0xAA, errsize);
        *c = NULL;
        int r = credentials_load(c, &cfg, err, errsize);
        if (!memchr(err, 0, errsize))
                abort();
        if (r == 0) {
                if (!*c)
                        abort();
                return 0;
        }
        if (*c)
                abort();
        if (r != -ENOENT && r != -EINVAL && r != -EPERM && r != -EFBIG && r != -ENOMEM)
                abort();
        if (r != -ENOMEM && !err[0])
                abort();
        return r;
}

static void check_shape(const struct credentials *c, const char *path, const uint8_t *data,
                        size_t size) {
        char origin[128];

        if (c->source != CREDENTIALS_FROM_FILE || !c->access_key_id || !c->secret_access_key)
                abort();
        if (!c->access_key_id[0] || !c->secret_access_key[0])
                abort();
        for (const char *p = c->access_key_id; *p; p++)
                if (*p < 0x21 || *p > 0x7e || *p == '/' || *p == ',')
                        abort();
        for (const char *p = c->secret_access_key; *p; p++)
                if ((unsigned char)*p < 0x20 || *p == 0x7f)
                        abort();
        if (c->session_token) {
                if (!c->session_token[0])
                        abort();
                for (const char *p = c->session_token; *p; p++)
                        if (*p < 0x21 || *p > 0x7e)
                                abort();
        }
        if (c->region) {
                if (!c->region[0])
                        abort();
                for (const char *p = c->region; *p; p++)
                        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_')
                                abort();
        }
        snprintf(origin, sizeof(origin), "file %s [default]", path);
        if (!c->origin || strcmp(c->origin, origin) != 0)
                abort();
        if (!memmem(data, size, c->secret_access_key, strlen(c->secret_access_key)))
                abort();
}

static bool name_is_secret(const uint8_t *name, size_t len) {
        static const char *const secrets[] = { "aws_secret_access_key", "aws_session_token" };
        for (size_t i = 0; i < 2; i++)
                if (len == strlen(secrets[i]) && strncasecmp((const char *)name, secrets[i], len) == 0)
                        return true;
        return false;
}

static bool same_rotated(const char *a, const char *b) {
        if (!a || !b)
                return a == b;
        if (strlen(a) != strlen(b))
                return false;
        for (; *a; a++, b++)
                if (fuzz_rot13(*a) != *b)
                        return false;
        return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct credentials *c = NULL, *c2 = NULL;
        char err[1024], again[1024];

        const char *path = fuzz_file(data, size, 0600);
        int r = load(&c, path, err, sizeof(err));
        if (r == 0)
                check_shape(c, path, data, size);

        uint8_t *other = malloc(size ? size : 1);
        if (!other) {
                credentials_free(c);
                return 0;
        }
        memcpy(other, data, size);
        fuzz_rotate_values(other, size, false, name_is_secret);
        path = fuzz_file(other, size, 0600);
        int r2 = load(&c2, path, again, sizeof(again));
        if (r2 != r && r != -ENOMEM && r2 != -ENOMEM)
                abort();
        if (r == 0 && r2 == 0) {
                if (strcmp(c->origin, c2->origin) != 0 ||
                    strcmp(c->access_key_id, c2->access_key_id) != 0 ||
                    !same_rotated(c->secret_access_key, c2->secret_access_key) ||
                    !same_rotated(c->session_token, c2->session_token) ||
                    (c->region == NULL) != (c2->region == NULL) ||
                    (c->region && strcmp(c->region, c2->region) != 0))
                        abort();
        } else if (r == r2 && strcmp(err, again) != 0) {
                abort(); /* the message depends on a secret's text */
        }
        c = credentials_free(c);
        c2 = credentials_free(c2);

        path = fuzz_file(other, size, 0644);
        if (load(&c2, path, again, sizeof(again)) != -EPERM)
                abort();
        free(other);
        return 0;
}
