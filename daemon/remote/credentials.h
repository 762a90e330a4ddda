/* SPDX-License-Identifier: MIT */
/*
 * credentials — where the object-store tier gets its access key, secret,
 * optional session token and region from.
 *
 * Order (the first source that has an access key wins; the key, secret and
 * token always come from the same source, never mixed):
 *   1. explicit values the caller passes (from ckptd.conf);
 *   2. the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
 *      AWS_SESSION_TOKEN — skipped when the caller names a profile, since
 *      an explicitly chosen profile must not be overridden by whatever
 *      happens to be in the service's environment;
 *   3. a credentials file in the AWS INI format: the caller's path, else
 *      $AWS_SHARED_CREDENTIALS_FILE, else $HOME/.aws/credentials; section
 *      [profile] where profile is the caller's, else $AWS_PROFILE, else
 *      "default"; keys aws_access_key_id, aws_secret_access_key,
 *      aws_session_token (and region).
 * The region is looked up on its own: the caller's value, else
 * $AWS_REGION, else $AWS_DEFAULT_REGION, else — when the keys came from
 * the file — the profile's `region`, else NULL (the caller picks its
 * default).  The file is never opened when it is not the key's source.
 *
 * The file holds a secret, so it is refused (-EPERM) unless it is owned by
 * the daemon's effective uid or root and has no group/other permission
 * bits: a secret readable by other users is already leaked, and one
 * writable by them can be replaced.
 *
 * Errors come with a message in the caller's buffer naming the source
 * (variable, file, line, profile) — never a value.  Thread-safety: the
 * functions touch no global state except reading the environment when
 * the caller passes no envp; struct credentials belongs to its caller.
 */
#pragma once

#include <stddef.h>

/* Upper bound on the credentials file: it is a few lines. */
#define CREDENTIALS_FILE_MAX (64 * 1024)

/* What the caller knows (any field may be NULL).  Borrowed for the call. */
struct credentials_config {
        const char *access_key_id;     /* with secret_access_key: source 1 */
        const char *secret_access_key;
        const char *session_token;     /* only used with the two above */
        const char *region;
        const char *profile;           /* file section to use */
        const char *credentials_file;  /* path of the INI file */
        /* Environment to read, NULL-terminated "NAME=value" strings; NULL
         * means the process's own (getenv).  Tests pass their own. */
        const char *const *envp;
};

enum credentials_source {
        CREDENTIALS_FROM_CONFIG,
        CREDENTIALS_FROM_ENV,
        CREDENTIALS_FROM_FILE,
};

struct credentials {
        char *access_key_id;
        char *secret_access_key;
        char *session_token; /* NULL when none */
        char *region;        /* NULL when no source names one */
        enum credentials_source source;
        /* Where they came from, for a log line: "ckptd.conf",
         * "environment", "file /path [profile]".  Holds no secret. */
        char *origin;
};

/* Load credentials per the order above into a new *out.
 * Returns 0, or -errno with a message in err (always NUL-terminated when
 * errsize > 0):
 *   -ENOENT  no source has credentials, or the file or profile named
 *            explicitly does not exist (the message says where it looked);
 *   -EPERM   the credentials file has group/other permissions or a
 *            foreign owner;
 *   -EINVAL  a half-given pair (key without secret or the reverse), a
 *            malformed value (access key empty, not printable or with
 *            spaces; secret empty or with control characters), a malformed
 *            file line, a repeated key in the profile, a file that is not a
 *            regular file;
 *   -EFBIG   a file over CREDENTIALS_FILE_MAX;
 *   -ENOMEM, or the -errno of open/read. */
int credentials_load(struct credentials **out, const struct credentials_config *cfg, char *err,
                     size_t errsize);

/* Wipe (explicit_bzero) every string, then free c; accepts NULL; returns NULL. */
struct credentials *credentials_free(struct credentials *c);

/* "config", "environment" or "file". */
const char *credentials_source_name(enum credentials_source s);
