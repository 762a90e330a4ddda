/* SPDX-License-Identifier: MIT */
/*
 * credentials — see credentials.h for the lookup order and the rules.
 *
 * Values are copied out of whatever held them (environment, file buffer)
 * into the struct and nowhere else; the file buffer is wiped once parsed.
 * Messages name sources, never values: a message may end up in a log, a
 * journal or a bug report.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "remote/credentials.h"
#include "util/cleanup.h"
#include "util/errbuf.h"

#define ACCESS_KEY_ID_MAX 128
#define SECRET_MAX 1024
#define SESSION_TOKEN_MAX 16384
#define REGION_MAX 63
#define DEFAULT_PROFILE "default"


static void wipe_free(char *s) {
        if (s) {
                explicit_bzero(s, strlen(s));
                free(s);
        }
}

struct credentials *credentials_free(struct credentials *c) {
        if (!c)
                return NULL;
        wipe_free(c->access_key_id);
        wipe_free(c->secret_access_key);
        wipe_free(c->session_token);
        wipe_free(c->region);
        free(c->origin);
        explicit_bzero(c, sizeof(*c));
        free(c);
        return NULL;
}

DEFINE_CLEANUP(struct credentials *, credentials_free)

const char *credentials_source_name(enum credentials_source s) {
        switch (s) {
        case CREDENTIALS_FROM_CONFIG:
                return "config";
        case CREDENTIALS_FROM_ENV:
                return "environment";
        case CREDENTIALS_FROM_FILE:
                return "file";
        }
        return "unknown";
}

/* An empty value counts as unset, in the config and the environment alike
 * (systemd's Environment=FOO= is how one unsets a variable). */
static const char *nonempty(const char *s) {
        return s && *s ? s : NULL;
}

static const char *env_get(const struct credentials_config *cfg, const char *name) {
        size_t n = strlen(name);
        if (!cfg->envp)
                return nonempty(getenv(name));
        for (const char *const *e = cfg->envp; *e; e++)
                if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
                        return nonempty(*e + n + 1);
        return NULL;
}

/* ---- shapes ---- */

static int check_access_key_id(const char *v, const char *where, char *err, size_t errsize) {
        size_t n = v ? strlen(v) : 0;
        if (n == 0)
                return errbuf_fail(-EINVAL, err, errsize, "%s: the access key id is empty", where);
        if (n > ACCESS_KEY_ID_MAX)
                return errbuf_fail(-EINVAL, err, errsize, "%s: the access key id is longer than %d characters",
                            where, ACCESS_KEY_ID_MAX);
        for (const char *c = v; *c; c++)
                /* '/' and ',' would corrupt the Credential= field it is sent in. */
                if (*c < 0x21 || *c > 0x7e || *c == '/' || *c == ',')
                        return errbuf_fail(-EINVAL, err, errsize,
                                    "%s: the access key id contains a space, '/', ',' or a "
                                    "non-printable character",
                                    where);
        return 0;
}

static int check_secret(const char *v, const char *where, char *err, size_t errsize) {
        size_t n = v ? strlen(v) : 0;
        if (n == 0)
                return errbuf_fail(-EINVAL, err, errsize, "%s: the secret access key is empty", where);
        if (n > SECRET_MAX)
                return errbuf_fail(-EINVAL, err, errsize, "%s: the secret access key is too long", where);
        for (const char *c = v; *c; c++)
                /* Typically a trailing newline pasted into a config value:
                 * it would sign with a different key and fail far away. */
                if ((unsigned char)*c < 0x20 || *c == 0x7f)
                        return errbuf_fail(-EINVAL, err, errsize,
                                    "%s: the secret access key contains a control character", where);
        return 0;
}

static int check_token(const char *v, const char *where, char *err, size_t errsize) {
        size_t n = strlen(v);
        if (n > SESSION_TOKEN_MAX)
                return errbuf_fail(-EINVAL, err, errsize, "%s: the session token is too long", where);
        for (const char *c = v; *c; c++)
                if (*c < 0x21 || *c > 0x7e)
                        return errbuf_fail(-EINVAL, err, errsize,
                                    "%s: the session token contains a space or a non-printable "
                                    "character",
                                    where);
        return 0;
}

static int check_region(const char *v, const char *where, char *err, size_t errsize) {
        size_t n = strlen(v);
        if (n > REGION_MAX)
                return errbuf_fail(-EINVAL, err, errsize, "%s: the region is too long", where);
        for (const char *c = v; *c; c++)
                if (!isalnum((unsigned char)*c) && *c != '-' && *c != '_')
                        return errbuf_fail(-EINVAL, err, errsize,
                                    "%s: the region '%s' may only contain letters, digits, '-' "
                                    "and '_'",
                                    where, v);
        return 0;
}

/* ---- the INI file ---- */

struct profile_values {
        char *access_key_id, *secret_access_key, *session_token, *region;
        bool found; /* the section exists */
};

static void profile_values_wipe(struct profile_values *p) {
        wipe_free(p->access_key_id);
        wipe_free(p->secret_access_key);
        wipe_free(p->session_token);
        wipe_free(p->region);
        *p = (struct profile_values){ 0 };
}

static void trim(const char **s, const char **e) {
        while (*s < *e && isspace((unsigned char)**s))
                (*s)++;
        while (*e > *s && isspace((unsigned char)(*e)[-1]))
                (*e)--;
}

static bool span_eq(const char *s, const char *e, const char *word, bool nocase) {
        size_t n = strlen(word);
        if ((size_t)(e - s) != n)
                return false;
        return nocase ? strncasecmp(s, word, n) == 0 : strncmp(s, word, n) == 0;
}

/* Parse buf[0..len) and collect the keys of section [profile].  Lines:
 * blank, comments ('#' or ';'), "[section]", "key = value".  Only the
 * line number of a bad line is reported — its text may be a secret. */
static int parse_credentials_file(struct profile_values *pv, const char *buf, size_t len,
                                  const char *path, const char *profile, char *err,
                                  size_t errsize) {
        const char *line = buf, *end = buf + len;
        bool in_section = false, in_profile = false;
        unsigned lineno = 0;

        while (line < end) {
                const char *nl = memchr(line, '\n', (size_t)(end - line));
                const char *s = line, *e = nl ? nl : end;
                line = nl ? nl + 1 : end;
                lineno++;

                if (memchr(s, 0, (size_t)(e - s)))
                        return errbuf_fail(-EINVAL, err, errsize, "%s:%u: NUL byte in the line", path,
                                    lineno);
                trim(&s, &e);
                if (s == e || *s == '#' || *s == ';')
                        continue;
                if (*s == '[') {
                        const char *ns = s + 1, *ne = e - 1;
                        if (e - s < 2 || *ne != ']')
                                return errbuf_fail(-EINVAL, err, errsize,
                                            "%s:%u: a section header must look like [name]", path,
                                            lineno);
                        trim(&ns, &ne);
                        in_section = true;
                        in_profile = span_eq(ns, ne, profile, false);
                        if (in_profile)
                                pv->found = true;
                        continue;
                }

                const char *eq = memchr(s, '=', (size_t)(e - s));
                if (!eq || eq == s)
                        return errbuf_fail(-EINVAL, err, errsize,
                                    "%s:%u: expected \"key = value\" or \"[profile]\"", path,
                                    lineno);
                if (!in_section)
                        return errbuf_fail(-EINVAL, err, errsize,
                                    "%s:%u: \"key = value\" before any [profile] section", path,
                                    lineno);
                if (!in_profile)
                        continue;

                const char *ks = s, *ke = eq, *vs = eq + 1, *ve = e;
                char **slot = NULL;
                trim(&ks, &ke);
                trim(&vs, &ve);
                if (span_eq(ks, ke, "aws_access_key_id", true))
                        slot = &pv->access_key_id;
                else if (span_eq(ks, ke, "aws_secret_access_key", true))
                        slot = &pv->secret_access_key;
                else if (span_eq(ks, ke, "aws_session_token", true))
                        slot = &pv->session_token;
                else if (span_eq(ks, ke, "region", true))
                        slot = &pv->region;
                if (!slot)
                        continue; /* other tools' settings are not our business */
                if (*slot)
                        return errbuf_fail(-EINVAL, err, errsize, "%s:%u: %.*s given twice in [%s]", path,
                                    lineno, (int)(ke - ks), ks, profile);
                *slot = strndup(vs, (size_t)(ve - vs));
                if (!*slot)
                        return -ENOMEM;
        }
        return 0;
}

/* Open path and check that only its owner (us, or root) can touch it. */
static int open_private_file(const char *path, int *fd_out, off_t *size_out, char *err,
                             size_t errsize) {
        _cleanup_close_ int fd = -1;
        struct stat st;

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return errbuf_fail(-errno, err, errsize, "cannot open credentials file %s: %m", path);
        /* fstat the descriptor we will read: no window for a swap. */
        if (fstat(fd, &st) < 0)
                return errbuf_fail(-errno, err, errsize, "cannot stat credentials file %s: %m", path);
        if (!S_ISREG(st.st_mode))
                return errbuf_fail(-EINVAL, err, errsize, "credentials file %s is not a regular file", path);
        if (st.st_uid != geteuid() && st.st_uid != 0)
                return errbuf_fail(-EPERM, err, errsize,
                            "credentials file %s is owned by uid %u, not by the daemon's uid %u "
                            "or root; refusing to use it",
                            path, (unsigned)st.st_uid, (unsigned)geteuid());
        if (st.st_mode & 077)
                return errbuf_fail(-EPERM, err, errsize,
                            "credentials file %s has mode %04o, so other users can read or "
                            "change it; refusing to use it (run: chmod 600 %s)",
                            path, (unsigned)(st.st_mode & 07777), path);
        if (st.st_size > CREDENTIALS_FILE_MAX)
                return errbuf_fail(-EFBIG, err, errsize, "credentials file %s is larger than %d bytes",
                            path, CREDENTIALS_FILE_MAX);
        *size_out = st.st_size;
        *fd_out = TAKE_FD(fd);
        return 0;
}

static int read_credentials_file(struct profile_values *pv, const char *path,
                                 const char *profile, char *err, size_t errsize) {
        _cleanup_close_ int fd = -1;
        char *buf;
        size_t len = 0;
        off_t size;
        int r;

        r = open_private_file(path, &fd, &size, err, errsize);
        if (r < 0)
                return r;
        buf = malloc(CREDENTIALS_FILE_MAX + 1);
        if (!buf)
                return -ENOMEM;
        /* Read to EOF rather than trusting st_size: the file may change. */
        for (;;) {
                ssize_t n = read(fd, buf + len, CREDENTIALS_FILE_MAX + 1 - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r = errbuf_fail(-errno, err, errsize, "cannot read credentials file %s: %m", path);
                        break;
                }
                if (n == 0)
                        break;
                len += (size_t)n;
                if (len > CREDENTIALS_FILE_MAX) {
                        r = errbuf_fail(-EFBIG, err, errsize, "credentials file %s is larger than %d bytes",
                                 path, CREDENTIALS_FILE_MAX);
                        break;
                }
        }
        if (r == 0)
                r = parse_credentials_file(pv, buf, len, path, profile, err, errsize);
        explicit_bzero(buf, CREDENTIALS_FILE_MAX + 1);
        free(buf);
        return r;
}

static int strdup_to(char **dst, const char *src) {
        if (!src)
                return 0;
        *dst = strdup(src);
        return *dst ? 0 : -ENOMEM;
}

/* Source 3.  Fills c's key, secret, token and origin; *file_region gets
 * the profile's region, if any (owned by the caller). */
static int load_from_file(struct credentials *c, char **file_region,
                          const struct credentials_config *cfg, char *err, size_t errsize) {
        _cleanup_free_ char *default_path = NULL;
        struct profile_values pv = { 0 };
        const char *path, *profile, *home;
        bool explicit_path;
        int r;

        path = nonempty(cfg->credentials_file);
        if (!path)
                path = env_get(cfg, "AWS_SHARED_CREDENTIALS_FILE");
        explicit_path = path != NULL;
        if (!path) {
                home = env_get(cfg, "HOME");
                if (!home)
                        return errbuf_fail(-ENOENT, err, errsize,
                                    "no object-store credentials: none configured, "
                                    "AWS_ACCESS_KEY_ID is not set, and there is no credentials "
                                    "file (no credentials file configured and HOME is not set)");
                if (asprintf(&default_path, "%s/.aws/credentials", home) < 0) {
                        default_path = NULL;
                        return -ENOMEM;
                }
                path = default_path;
        }
        profile = nonempty(cfg->profile);
        if (!profile)
                profile = env_get(cfg, "AWS_PROFILE");
        if (!profile)
                profile = DEFAULT_PROFILE;

        if (!explicit_path && access(path, F_OK) < 0 && errno == ENOENT)
                return errbuf_fail(-ENOENT, err, errsize,
                            "no object-store credentials: none configured, AWS_ACCESS_KEY_ID "
                            "is not set, and %s does not exist",
                            path);

        r = read_credentials_file(&pv, path, profile, err, errsize);
        if (r >= 0 && !pv.found)
                r = errbuf_fail(-ENOENT, err, errsize, "credentials file %s has no [%s] profile", path,
                         profile);
        if (r >= 0 && !pv.access_key_id)
                r = errbuf_fail(-EINVAL, err, errsize, "credentials file %s: [%s] has no aws_access_key_id",
                         path, profile);
        if (r >= 0 && !pv.secret_access_key)
                r = errbuf_fail(-EINVAL, err, errsize,
                         "credentials file %s: [%s] has no aws_secret_access_key", path, profile);
        if (r >= 0 && asprintf(&c->origin, "file %s [%s]", path, profile) < 0) {
                c->origin = NULL;
                r = -ENOMEM;
        }
        if (r >= 0) {
                c->source = CREDENTIALS_FROM_FILE;
                c->access_key_id = TAKE_PTR(pv.access_key_id);
                c->secret_access_key = TAKE_PTR(pv.secret_access_key);
                /* An empty token line means "no token", as elsewhere. */
                if (pv.session_token && *pv.session_token)
                        c->session_token = TAKE_PTR(pv.session_token);
                if (pv.region && *pv.region)
                        *file_region = TAKE_PTR(pv.region);
        }
        profile_values_wipe(&pv);
        return r;
}

int credentials_load(struct credentials **out, const struct credentials_config *cfg, char *err,
                     size_t errsize) {
        static const struct credentials_config none = { 0 };
        _cleanup_(credentials_freep) struct credentials *c = NULL;
        _cleanup_free_ char *file_region = NULL;
        const char *ak, *sk, *region, *region_where;
        int r;

        if (err && errsize)
                err[0] = 0;
        if (!out)
                return -EINVAL;
        if (!cfg)
                cfg = &none;
        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;

        ak = nonempty(cfg->access_key_id);
        sk = nonempty(cfg->secret_access_key);
        if (ak || sk || nonempty(cfg->session_token)) {
                if (!ak || !sk)
                        return errbuf_fail(-EINVAL, err, errsize,
                                    "configuration: %s is set but %s is not; give both (or "
                                    "neither, to use the environment or a credentials file)",
                                    ak ? "access_key_id" : sk ? "secret_access_key" : "session_token",
                                    ak ? "secret_access_key" : "access_key_id");
                c->source = CREDENTIALS_FROM_CONFIG;
                if ((r = strdup_to(&c->origin, "configuration")) < 0 ||
                    (r = strdup_to(&c->access_key_id, ak)) < 0 ||
                    (r = strdup_to(&c->secret_access_key, sk)) < 0 ||
                    (r = strdup_to(&c->session_token, nonempty(cfg->session_token))) < 0)
                        return r;
        } else {
                const char *eak = env_get(cfg, "AWS_ACCESS_KEY_ID");
                const char *esk = env_get(cfg, "AWS_SECRET_ACCESS_KEY");
                if (!nonempty(cfg->profile) && (eak || esk)) {
                        if (!eak || !esk)
                                return errbuf_fail(-EINVAL, err, errsize,
                                            "environment: %s is set but %s is not",
                                            eak ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
                                            eak ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
                        c->source = CREDENTIALS_FROM_ENV;
                        if ((r = strdup_to(&c->origin, "environment")) < 0 ||
                            (r = strdup_to(&c->access_key_id, eak)) < 0 ||
                            (r = strdup_to(&c->secret_access_key, esk)) < 0 ||
                            (r = strdup_to(&c->session_token,
                                           env_get(cfg, "AWS_SESSION_TOKEN"))) < 0)
                                return r;
                } else {
                        r = load_from_file(c, &file_region, cfg, err, errsize);
                        if (r < 0)
                                return r;
                }
        }

        if ((r = check_access_key_id(c->access_key_id, c->origin, err, errsize)) < 0 ||
            (r = check_secret(c->secret_access_key, c->origin, err, errsize)) < 0 ||
            (c->session_token && (r = check_token(c->session_token, c->origin, err, errsize)) < 0))
                return r;

        region = nonempty(cfg->region);
        region_where = "configuration";
        if (!region) {
                region = env_get(cfg, "AWS_REGION");
                region_where = "AWS_REGION";
        }
        if (!region) {
                region = env_get(cfg, "AWS_DEFAULT_REGION");
                region_where = "AWS_DEFAULT_REGION";
        }
        if (!region) {
                region = file_region;
                region_where = c->origin;
        }
        if (region) {
                if ((r = check_region(region, region_where, err, errsize)) < 0)
                        return r;
                if ((r = strdup_to(&c->region, region)) < 0)
                        return r;
        }

        *out = TAKE_PTR(c);
        return 0;
}
