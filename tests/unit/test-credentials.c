/* SPDX-License-Identifier: MIT */
/*
 * credentials: which source wins, where the file is looked for, which
 * profile is read, what is refused (a credentials file other users can
 * read or write, half-given pairs, malformed values and lines) and that no
 * message ever carries a secret.
 *
 * Each case passes its own environment (struct credentials_config.envp),
 * so whatever AWS_* variables the machine running the test has cannot
 * change the outcome.  Files live in a fresh temporary directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "remote/credentials.h"

#include "check.h"

/* Every secret-looking value used below contains this, so one search
 * proves a message leaked none of them. */
#define SECRET_MARK "Zq9SECRET"
#define AK_FILE "AKIAFILE0000EXAMPLE"
#define SK_FILE "file/" SECRET_MARK "+key=="
#define TK_FILE "FILEtoken/" SECRET_MARK "+=="
#define AK_ENV "AKIAENV00000EXAMPLE"
#define SK_ENV "env/" SECRET_MARK "+key"
#define TK_ENV "ENVtoken" SECRET_MARK
#define AK_CFG "AKIACFG00000EXAMPLE"
#define SK_CFG "cfg/" SECRET_MARK "+key"

static char tmpdir[PATH_MAX / 2]; /* room for names below it */
static char paths[64][PATH_MAX];
static unsigned npaths;

static const char *tmp_path(const char *name) {
        static char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s/%s", tmpdir, name);
        return p;
}

/* Create tmpdir/name with exactly `mode` (umask aside) and contents. */
static const char *write_file(const char *name, unsigned mode, const char *text) {
        const char *p = tmp_path(name);
        int fd;
        unlink(p);
        fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text) ||
            fchmod(fd, mode) < 0) {
                fprintf(stderr, "cannot write %s: %m\n", p);
                exit(1);
        }
        close(fd);
        if (npaths < sizeof(paths) / sizeof(paths[0])) {
                bool known = false;
                for (unsigned i = 0; i < npaths; i++)
                        known |= strcmp(paths[i], p) == 0;
                if (!known)
                        snprintf(paths[npaths++], PATH_MAX, "%s", p);
        }
        return p;
}

static const char *const no_env[] = { NULL };

static const char good_file[] =
        "# test credentials\n"
        "[default]\n"
        "aws_access_key_id = " AK_FILE "\n"
        "aws_secret_access_key = " SK_FILE "\n"
        "aws_session_token = " TK_FILE "\n"
        "region = eu-central-1\n"
        "\n"
        "[other]\n"
        "aws_access_key_id=AKIAOTHER000EXAMPLE\n"
        "aws_secret_access_key=other" SECRET_MARK "\n";

/* Load, expecting failure `want`; the message must be non-empty, contain
 * each of the NULL-terminated words and no secret. */
static void expect_fail(const char *what, const struct credentials_config *cfg, int want, ...) {
        struct credentials *c = NULL;
        char err[512];
        va_list ap;
        int r;

        strcpy(err, "untouched");
        r = credentials_load(&c, cfg, err, sizeof(err));
        CHECK(r == want, "%s: got %d (%s), want %d", what, r, err, want);
        CHECK(!c, "%s: credentials returned on failure", what);
        CHECK(err[0] && strcmp(err, "untouched") != 0, "%s: no message", what);
        CHECK(!strstr(err, SECRET_MARK), "%s: message leaks a secret: %s", what, err);
        va_start(ap, want);
        for (const char *w; (w = va_arg(ap, const char *));)
                CHECK(strstr(err, w), "%s: message '%s' lacks '%s'", what, err, w);
        va_end(ap);
        credentials_free(c);
}

/* Load, expecting success from `source` with the given values. */
static void expect_ok(const char *what, const struct credentials_config *cfg,
                      enum credentials_source source, const char *ak, const char *sk,
                      const char *token, const char *region) {
        struct credentials *c = NULL;
        char err[512] = "";
        int r = credentials_load(&c, cfg, err, sizeof(err));

        CHECK(r == 0 && c, "%s: %d (%s)", what, r, err);
        if (!c)
                return;
        CHECK(c->source == source, "%s: source %s, want %s", what,
              credentials_source_name(c->source), credentials_source_name(source));
        CHECK(c->access_key_id && strcmp(c->access_key_id, ak) == 0, "%s: access key %s", what,
              c->access_key_id);
        CHECK(c->secret_access_key && strcmp(c->secret_access_key, sk) == 0, "%s: wrong secret",
              what);
        CHECK(token ? c->session_token && strcmp(c->session_token, token) == 0 : !c->session_token,
              "%s: session token %s, want %s", what, c->session_token ? "(set)" : "NULL",
              token ? token : "NULL");
        CHECK(region ? c->region && strcmp(c->region, region) == 0 : !c->region,
              "%s: region %s, want %s", what, c->region ? c->region : "NULL",
              region ? region : "NULL");
        CHECK(c->origin && !strstr(c->origin, SECRET_MARK), "%s: origin %s", what, c->origin);
        CHECK(credentials_free(c) == NULL, "free returns NULL");
}

static void test_precedence(void) {
        const char *file = write_file("creds", 0600, good_file);
        const char *env[] = {
                "AWS_ACCESS_KEY_ID=" AK_ENV, "AWS_SECRET_ACCESS_KEY=" SK_ENV,
                "AWS_SESSION_TOKEN=" TK_ENV, NULL,
        };
        const char *env_no_token[] = {
                "AWS_ACCESS_KEY_ID=" AK_ENV, "AWS_SECRET_ACCESS_KEY=" SK_ENV, NULL,
        };
        struct credentials_config cfg = {
                .access_key_id = AK_CFG, .secret_access_key = SK_CFG,
                .credentials_file = file, .envp = env,
        };

        /* Config beats environment beats file; the token never comes from
         * another source than the key. */
        expect_ok("config first", &cfg, CREDENTIALS_FROM_CONFIG, AK_CFG, SK_CFG, NULL, NULL);
        cfg.session_token = "CFGtoken";
        expect_ok("config with token", &cfg, CREDENTIALS_FROM_CONFIG, AK_CFG, SK_CFG, "CFGtoken",
                  NULL);
        cfg.access_key_id = cfg.secret_access_key = cfg.session_token = NULL;
        expect_ok("environment second", &cfg, CREDENTIALS_FROM_ENV, AK_ENV, SK_ENV, TK_ENV, NULL);
        cfg.envp = env_no_token;
        expect_ok("no token from the file with env keys", &cfg, CREDENTIALS_FROM_ENV, AK_ENV,
                  SK_ENV, NULL, NULL);
        cfg.envp = no_env;
        expect_ok("file last", &cfg, CREDENTIALS_FROM_FILE, AK_FILE, SK_FILE, TK_FILE,
                  "eu-central-1");

        /* Empty values count as unset: falls through to the next source. */
        cfg.access_key_id = "";
        cfg.secret_access_key = "";
        const char *empty_env[] = { "AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", NULL };
        cfg.envp = empty_env;
        expect_ok("empty values are unset", &cfg, CREDENTIALS_FROM_FILE, AK_FILE, SK_FILE, TK_FILE,
                  "eu-central-1");
        cfg.access_key_id = cfg.secret_access_key = NULL;

        /* A profile named in the config outranks ambient environment keys. */
        cfg.envp = env;
        cfg.profile = "other";
        expect_ok("configured profile beats env keys", &cfg, CREDENTIALS_FROM_FILE,
                  "AKIAOTHER000EXAMPLE", "other" SECRET_MARK, NULL, NULL);

        /* origin says where, not what. */
        struct credentials *c = NULL;
        char err[256];
        cfg.profile = NULL;
        cfg.envp = no_env;
        CHECK(credentials_load(&c, &cfg, err, sizeof(err)) == 0 && c, "%s", err);
        if (c) {
                char want[PATH_MAX + 32];
                snprintf(want, sizeof(want), "file %s [default]", file);
                CHECK(strcmp(c->origin, want) == 0, "origin '%s', want '%s'", c->origin, want);
                CHECK(strcmp(credentials_source_name(c->source), "file") == 0, "source name");
                credentials_free(c);
        }
        CHECK(credentials_free(NULL) == NULL, "free(NULL)");
}

static void test_region(void) {
        const char *file = write_file("creds", 0600, good_file);
        const char *both[] = { "AWS_REGION=ap-south-1", "AWS_DEFAULT_REGION=us-west-2", NULL };
        const char *dflt[] = { "AWS_DEFAULT_REGION=us-west-2", NULL };
        const char *bad[] = { "AWS_REGION=us east/1", NULL };
        struct credentials_config cfg = { .credentials_file = file, .envp = both };

        expect_ok("AWS_REGION", &cfg, CREDENTIALS_FROM_FILE, AK_FILE, SK_FILE, TK_FILE,
                  "ap-south-1");
        cfg.region = "garage";
        expect_ok("config region", &cfg, CREDENTIALS_FROM_FILE, AK_FILE, SK_FILE, TK_FILE,
                  "garage");
        cfg.region = NULL;
        cfg.envp = dflt;
        expect_ok("AWS_DEFAULT_REGION", &cfg, CREDENTIALS_FROM_FILE, AK_FILE, SK_FILE, TK_FILE,
                  "us-west-2");
        cfg.envp = no_env;
        expect_ok("profile region", &cfg, CREDENTIALS_FROM_FILE, AK_FILE, SK_FILE, TK_FILE,
                  "eu-central-1");
        cfg.profile = "other";
        expect_ok("no region anywhere", &cfg, CREDENTIALS_FROM_FILE, "AKIAOTHER000EXAMPLE",
                  "other" SECRET_MARK, NULL, NULL);
        cfg.envp = bad;
        expect_fail("bad region", &cfg, -EINVAL, "AWS_REGION", NULL);
}

static void test_locations(void) {
        char home_env[PATH_MAX + 8], shared_env[PATH_MAX + 40], aws_dir[PATH_MAX];
        const char *file = write_file("shared", 0600, good_file);
        struct credentials_config cfg = { 0 };

        /* $AWS_SHARED_CREDENTIALS_FILE */
        snprintf(shared_env, sizeof(shared_env), "AWS_SHARED_CREDENTIALS_FILE=%s", file);
        const char *env_shared[] = { shared_env, "HOME=/nonexistent", NULL };
        cfg.envp = env_shared;
        expect_ok("AWS_SHARED_CREDENTIALS_FILE", &cfg, CREDENTIALS_FROM_FILE, AK_FILE, SK_FILE,
                  TK_FILE, "eu-central-1");

        /* $HOME/.aws/credentials */
        snprintf(aws_dir, sizeof(aws_dir), "%s/.aws", tmpdir);
        mkdir(aws_dir, 0700);
        write_file(".aws/credentials", 0600, good_file);
        snprintf(home_env, sizeof(home_env), "HOME=%s", tmpdir);
        const char *env_home[] = { home_env, NULL };
        cfg.envp = env_home;
        expect_ok("HOME/.aws/credentials", &cfg, CREDENTIALS_FROM_FILE, AK_FILE, SK_FILE, TK_FILE,
                  "eu-central-1");

        /* Nothing anywhere. */
        unlink(tmp_path(".aws/credentials"));
        expect_fail("no default file", &cfg, -ENOENT, "/.aws/credentials", "does not exist",
                    "AWS_ACCESS_KEY_ID", NULL);
        cfg.envp = no_env;
        expect_fail("no HOME", &cfg, -ENOENT, "HOME", NULL);

        /* An explicitly named file that is missing is named in the error. */
        cfg.credentials_file = tmp_path("missing");
        expect_fail("missing configured file", &cfg, -ENOENT, tmp_path("missing"), NULL);
        const char *env_missing[] = { "AWS_SHARED_CREDENTIALS_FILE=/nonexistent/creds", NULL };
        cfg.credentials_file = NULL;
        cfg.envp = env_missing;
        expect_fail("missing env file", &cfg, -ENOENT, "/nonexistent/creds", NULL);

        /* A directory is not a credentials file. */
        cfg.credentials_file = aws_dir;
        cfg.envp = no_env;
        expect_fail("directory", &cfg, -EINVAL, aws_dir, "regular file", NULL);
}

static void test_profiles(void) {
        const char *file = write_file("creds", 0600,
                                      "[prod]\n"
                                      "aws_access_key_id = AKIAPROD0000EXAMPLE\n"
                                      "aws_secret_access_key = prod" SECRET_MARK "\n"
                                      "[ staging ]\n"
                                      "aws_access_key_id = AKIASTAGE000EXAMPLE\n"
                                      "aws_secret_access_key = stage" SECRET_MARK "\n");
        const char *env_profile[] = { "AWS_PROFILE=staging", NULL };
        struct credentials_config cfg = { .credentials_file = file, .envp = no_env };

        expect_fail("no [default]", &cfg, -ENOENT, "[default]", file, NULL);
        cfg.profile = "prod";
        expect_ok("profile from config", &cfg, CREDENTIALS_FROM_FILE, "AKIAPROD0000EXAMPLE",
                  "prod" SECRET_MARK, NULL, NULL);
        cfg.envp = env_profile;
        expect_ok("config profile beats AWS_PROFILE", &cfg, CREDENTIALS_FROM_FILE,
                  "AKIAPROD0000EXAMPLE", "prod" SECRET_MARK, NULL, NULL);
        cfg.profile = NULL;
        expect_ok("AWS_PROFILE (section name trimmed)", &cfg, CREDENTIALS_FROM_FILE,
                  "AKIASTAGE000EXAMPLE", "stage" SECRET_MARK, NULL, NULL);
        cfg.profile = "Prod";
        expect_fail("profile names are case-sensitive", &cfg, -ENOENT, "[Prod]", file, NULL);
}

static void test_permissions(void) {
        static const unsigned refused[] = { 0644, 0640, 0604, 0620, 0602, 0660, 0666, 0610, 0601 };
        static const unsigned accepted[] = { 0600, 0400, 0700, 0500 };
        struct credentials_config cfg = { .envp = no_env };
        char mode[8];

        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
                cfg.credentials_file = write_file("perm", refused[i], good_file);
                snprintf(mode, sizeof(mode), "%04o", refused[i]);
                expect_fail(mode, &cfg, -EPERM, cfg.credentials_file, mode, "chmod 600", NULL);
        }
        for (size_t i = 0; i < sizeof(accepted) / sizeof(accepted[0]); i++) {
                cfg.credentials_file = write_file("perm", accepted[i], good_file);
                snprintf(mode, sizeof(mode), "%04o", accepted[i]);
                expect_ok(mode, &cfg, CREDENTIALS_FROM_FILE, AK_FILE, SK_FILE, TK_FILE,
                          "eu-central-1");
        }

        /* A file owned by someone else (not root) is refused even at 0600:
         * its owner can rewrite it. */
        cfg.credentials_file = write_file("foreign", 0600, good_file);
        if (geteuid() == 0) {
                CHECK(chown(cfg.credentials_file, 65534, 65534) == 0, "chown: %m");
                expect_fail("foreign owner", &cfg, -EPERM, cfg.credentials_file, "uid 65534",
                            NULL);
                CHECK(chown(cfg.credentials_file, 0, 0) == 0, "chown: %m");
                expect_ok("root owner", &cfg, CREDENTIALS_FROM_FILE, AK_FILE, SK_FILE, TK_FILE,
                          "eu-central-1");
        } else {
                /* Cannot hand a file to another uid without root; the
                 * other cases still ran. */
                fprintf(stderr, "test-credentials: not root, foreign-owner case not run\n");
        }
}

static void test_shapes(void) {
        struct credentials_config cfg = { .envp = no_env };
        const char *env_half_ak[] = { "AWS_ACCESS_KEY_ID=" AK_ENV, NULL };
        const char *env_half_sk[] = { "AWS_SECRET_ACCESS_KEY=" SK_ENV, NULL };

        /* Half-given pairs are an error, not a silent fall-through to
         * another source with other credentials. */
        cfg.access_key_id = AK_CFG;
        expect_fail("config key without secret", &cfg, -EINVAL, "secret_access_key", NULL);
        cfg.access_key_id = NULL;
        cfg.secret_access_key = SK_CFG;
        expect_fail("config secret without key", &cfg, -EINVAL, "access_key_id", NULL);
        cfg.secret_access_key = NULL;
        cfg.session_token = "tok";
        expect_fail("config token alone", &cfg, -EINVAL, "session_token", NULL);
        cfg.session_token = NULL;
        cfg.envp = env_half_ak;
        expect_fail("env key without secret", &cfg, -EINVAL, "AWS_SECRET_ACCESS_KEY", NULL);
        cfg.envp = env_half_sk;
        expect_fail("env secret without key", &cfg, -EINVAL, "AWS_ACCESS_KEY_ID", NULL);

        /* Value shapes. */
        cfg.envp = no_env;
        cfg.secret_access_key = SK_CFG;
        cfg.access_key_id = "AKIA CFG";
        expect_fail("space in access key", &cfg, -EINVAL, "access key id", NULL);
        cfg.access_key_id = "AKIA\tCFG";
        expect_fail("tab in access key", &cfg, -EINVAL, "access key id", NULL);
        cfg.access_key_id = "AKIA/CFG";
        expect_fail("slash in access key", &cfg, -EINVAL, "access key id", NULL);
        cfg.access_key_id = "AKIA\xc3\xa9";
        expect_fail("non-ASCII access key", &cfg, -EINVAL, "access key id", NULL);
        cfg.access_key_id = AK_CFG;
        cfg.secret_access_key = SK_CFG "\n";
        expect_fail("newline in secret", &cfg, -EINVAL, "secret access key", "control", NULL);
        cfg.secret_access_key = SK_CFG;
        cfg.session_token = "tok en" SECRET_MARK;
        expect_fail("space in token", &cfg, -EINVAL, "session token", NULL);
        cfg.session_token = NULL;
        const char *env_sp[] = { "AWS_ACCESS_KEY_ID=AKIA ENV", "AWS_SECRET_ACCESS_KEY=" SK_ENV,
                                 NULL };
        cfg.access_key_id = cfg.secret_access_key = NULL;
        cfg.envp = env_sp;
        expect_fail("space in env access key", &cfg, -EINVAL, "environment", NULL);

        /* Missing or empty keys in the profile. */
        cfg.envp = no_env;
        cfg.credentials_file = write_file("creds", 0600,
                                          "[default]\naws_access_key_id = " AK_FILE "\n");
        expect_fail("no secret in file", &cfg, -EINVAL, "aws_secret_access_key",
                    cfg.credentials_file, NULL);
        cfg.credentials_file = write_file("creds", 0600,
                                          "[default]\naws_secret_access_key = " SK_FILE "\n");
        expect_fail("no key id in file", &cfg, -EINVAL, "aws_access_key_id",
                    cfg.credentials_file, NULL);
        cfg.credentials_file = write_file("creds", 0600,
                                          "[default]\naws_access_key_id = " AK_FILE "\n"
                                          "aws_secret_access_key =\n");
        expect_fail("empty secret in file", &cfg, -EINVAL, "secret access key", "empty",
                    cfg.credentials_file, NULL);
        cfg.credentials_file = write_file("creds", 0600,
                                          "[default]\naws_access_key_id = AKIA FILE\n"
                                          "aws_secret_access_key = " SK_FILE "\n");
        expect_fail("space in file access key", &cfg, -EINVAL, "access key id",
                    cfg.credentials_file, NULL);
        cfg.credentials_file = write_file("creds", 0600, "[default]\n[other]\n");
        expect_fail("empty profile", &cfg, -EINVAL, "aws_access_key_id", NULL);
}

static void test_parse(void) {
        struct credentials_config cfg = { .envp = no_env };
        char big[CREDENTIALS_FILE_MAX + 64];

        /* Comments, blank lines, CRLF, spacing, key case, other keys and
         * other profiles ignored, '=' inside a value kept. */
        cfg.credentials_file = write_file("creds", 0600,
                                          "; a comment\r\n"
                                          "\r\n"
                                          "[other]\r\n"
                                          "aws_access_key_id = AKIAWRONG000EXAMPLE\r\n"
                                          "  [default]  \r\n"
                                          "\tAWS_ACCESS_KEY_ID\t=\t" AK_FILE "  \r\n"
                                          "# another comment\r\n"
                                          "output = json\r\n"
                                          "Aws_Secret_Access_Key=a=b/c+" SECRET_MARK "==\r\n"
                                          "aws_session_token =\r\n"
                                          "[third]\r\n"
                                          "aws_secret_access_key = wrong" SECRET_MARK "\r\n");
        expect_ok("tolerant parse", &cfg, CREDENTIALS_FROM_FILE, AK_FILE, "a=b/c+" SECRET_MARK "==",
                  NULL, NULL);
        cfg.credentials_file = write_file("creds", 0600,
                                          "[default]\n"
                                          "aws_access_key_id = " AK_FILE "\n"
                                          "aws_secret_access_key = " SK_FILE);
        expect_ok("no final newline", &cfg, CREDENTIALS_FROM_FILE, AK_FILE, SK_FILE, NULL, NULL);

        /* Damage: reported by line number, never by content. */
        cfg.credentials_file = write_file("creds", 0600,
                                          "[default]\n"
                                          "aws_access_key_id = " AK_FILE "\n"
                                          "aws_secret_access_key = " SK_FILE "\n"
                                          "aws_secret_access_key = second" SECRET_MARK "\n");
        expect_fail("duplicate key", &cfg, -EINVAL, ":4:", "twice", NULL);
        cfg.credentials_file = write_file("creds", 0600,
                                          "[default]\n"
                                          "aws_access_key_id = " AK_FILE "\n"
                                          "wJalr" SECRET_MARK "bare-secret-line\n");
        expect_fail("line without =", &cfg, -EINVAL, ":3:", NULL);
        cfg.credentials_file = write_file("creds", 0600, "aws_access_key_id = " AK_FILE "\n");
        expect_fail("key before any section", &cfg, -EINVAL, ":1:", NULL);
        cfg.credentials_file = write_file("creds", 0600, "\n[default\naws_access_key_id = x\n");
        expect_fail("unclosed section", &cfg, -EINVAL, ":2:", NULL);
        cfg.credentials_file = write_file("creds", 0600, "[default]\n= " SECRET_MARK "\n");
        expect_fail("empty key", &cfg, -EINVAL, ":2:", NULL);

        /* Bounded. */
        memset(big, '#', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        cfg.credentials_file = write_file("big", 0600, big);
        expect_fail("over the size limit", &cfg, -EFBIG, cfg.credentials_file, NULL);

        struct credentials *c = NULL;
        CHECK(credentials_load(NULL, &cfg, NULL, 0) == -EINVAL, "NULL out");
        CHECK(credentials_load(&c, &cfg, NULL, 0) == -EFBIG && !c, "NULL err buffer");
}

int main(void) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof(tmpdir), "%s/test-credentials.XXXXXX",
                 base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) {
                fprintf(stderr, "mkdtemp %s: %m\n", tmpdir);
                return 1;
        }

        test_precedence();
        test_region();
        test_locations();
        test_profiles();
        test_permissions();
        test_shapes();
        test_parse();

        for (unsigned i = 0; i < npaths; i++)
                unlink(paths[i]);
        rmdir(tmp_path(".aws"));
        rmdir(tmpdir);
        if (failures) {
                fprintf(stderr, "test-credentials: %u failure(s)\n", failures);
                return 1;
        }
        printf("test-credentials: ok\n");
        return 0;
}
