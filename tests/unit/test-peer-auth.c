/* SPDX-License-Identifier: MIT */
/*
 * peer/auth: the handshake MACs against values computed independently with
 * the openssl command line (so the spec's byte string, not just this code's
 * idea of it, is what is pinned), the properties the handshake's safety
 * rests on (role labels, nonce order, node indexes all change the MAC), and
 * the PSK file rules on real files: permissions, owner, length, one line,
 * printable, and that no message ever carries the key.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "peer/auth.h"

#include "check.h"

#define CHECK_RC(got, want, what)                                                          \
        do {                                                                               \
                int got_ = (got), want_ = (want);                                          \
                CHECK(got_ == want_, "%s: got %d (%s), want %d (%s)", what, got_,          \
                      strerror(got_ < 0 ? -got_ : 0), want_, strerror(want_ < 0 ? -want_ : 0)); \
        } while (0)

/* 40 characters; also the HMAC key of the known answers below. */
#define KEY "0123456789abcdefghijklmnopqrstuvwxyzABCD"
/* Part of every key-like text written below, so one search proves that no
 * message leaked one. */
#define MARK "Zq9SECRET"

static char tmpdir[PATH_MAX / 2];
static char paths[32][PATH_MAX];
static unsigned npaths;

static void from_hex(uint8_t *out, const char *hex, size_t n) {
        for (size_t i = 0; i < n; i++) {
                unsigned v;
                if (sscanf(hex + 2 * i, "%2x", &v) != 1) {
                        fprintf(stderr, "test bug: bad hex\n");
                        exit(1);
                }
                out[i] = (uint8_t)v;
        }
}

/* ---- MACs -------------------------------------------------------------- */

/*
 * nonce_c = 00 01 .. 1f, nonce_s = a0 a1 .. bf, client node 3, server node
 * 0x01020304, key KEY.  Expected values computed when this test was written:
 *
 *   KEY=0123456789abcdefghijklmnopqrstuvwxyzABCD
 *   NC=$(python3 -c "print(''.join('%02x'%i for i in range(0,32)))")
 *   NS=$(python3 -c "print(''.join('%02x'%i for i in range(0xa0,0xc0)))")
 *   { printf 'ckptd-peer-server'; printf '%s' "$NC$NS" | xxd -r -p;
 *     printf '\x03\x00\x00\x00\x04\x03\x02\x01'; } |
 *     openssl dgst -sha256 -mac HMAC -macopt key:$KEY
 *   -> 392c43e9c61ccdb9cbfa0b2169c37fed44c04020a3437bfbcca4b2b75243fe68
 *   { printf 'ckptd-peer-client'; printf '%s' "$NS$NC" | xxd -r -p;
 *     printf '\x03\x00\x00\x00\x04\x03\x02\x01'; } |
 *     openssl dgst -sha256 -mac HMAC -macopt key:$KEY
 *   -> 7ef38bcf8b84bf4c4bb90c4b2dc59ee1501e3fe505b2695a2041b2701c899c0d
 */
#define SERVER_MAC_HEX "392c43e9c61ccdb9cbfa0b2169c37fed44c04020a3437bfbcca4b2b75243fe68"
#define CLIENT_MAC_HEX "7ef38bcf8b84bf4c4bb90c4b2dc59ee1501e3fe505b2695a2041b2701c899c0d"
/* The same with "frames-unsealed" appended ([cluster] peer_frame_mac = no),
 * from Python's hmac module over the bytes docs/peer-protocol.md gives. */
#define SERVER_UNSEALED_HEX "f9e6c1a5416f44cd99ecbce8f167e8a46fa7711aadb2586ede1fadf9081e367e"
#define CLIENT_UNSEALED_HEX "c685172dea72173badcffa573b393160ce6fd50941603847cbc2611b93392bc2"

static void test_mac(void) {
        const uint8_t *key = (const uint8_t *)KEY;
        const size_t key_len = strlen(KEY);
        uint8_t nc[PEER_NONCE_SIZE], ns[PEER_NONCE_SIZE];
        uint8_t want_server[PEER_MAC_SIZE], want_client[PEER_MAC_SIZE];
        uint8_t server[PEER_MAC_SIZE], client[PEER_MAC_SIZE], other[PEER_MAC_SIZE];

        for (size_t i = 0; i < PEER_NONCE_SIZE; i++) {
                nc[i] = (uint8_t)i;
                ns[i] = (uint8_t)(0xa0 + i);
        }
        from_hex(want_server, SERVER_MAC_HEX, PEER_MAC_SIZE);
        from_hex(want_client, CLIENT_MAC_HEX, PEER_MAC_SIZE);

        peer_mac(key, key_len, true, nc, ns, 3, 0x01020304, server);
        CHECK(memcmp(server, want_server, PEER_MAC_SIZE) == 0, "server MAC known answer");
        peer_mac(key, key_len, false, nc, ns, 3, 0x01020304, client);
        CHECK(memcmp(client, want_client, PEER_MAC_SIZE) == 0, "client MAC known answer");
        CHECK(peer_mac_equal(server, want_server) && peer_mac_equal(client, want_client),
              "peer_mac_equal on equal MACs");

        /* The roles never share a MAC: a server's cannot be replayed as a
         * client's. */
        CHECK(!peer_mac_equal(server, client), "server and client MACs differ");

        /* Swapping the nonces (a reflected handshake) changes both. */
        peer_mac(key, key_len, true, ns, nc, 3, 0x01020304, other);
        CHECK(!peer_mac_equal(other, server), "server MAC with nonces swapped");
        peer_mac(key, key_len, false, ns, nc, 3, 0x01020304, other);
        CHECK(!peer_mac_equal(other, client), "client MAC with nonces swapped");
        /* ... and so does swapping the node indexes, or changing a nonce bit,
         * or the key. */
        peer_mac(key, key_len, true, nc, ns, 0x01020304, 3, other);
        CHECK(!peer_mac_equal(other, server), "server MAC with nodes swapped");
        peer_mac(key, key_len, true, nc, ns, 4, 0x01020304, other);
        CHECK(!peer_mac_equal(other, server), "server MAC with another client node");
        nc[31] ^= 0x80;
        peer_mac(key, key_len, false, nc, ns, 3, 0x01020304, other);
        CHECK(!peer_mac_equal(other, client), "client MAC with a nonce bit flipped");
        nc[31] ^= 0x80;
        peer_mac(key, key_len - 1, true, nc, ns, 3, 0x01020304, other);
        CHECK(!peer_mac_equal(other, server), "server MAC with a shorter key");
        /* Deterministic. */
        peer_mac(key, key_len, true, nc, ns, 3, 0x01020304, other);
        CHECK(peer_mac_equal(other, server), "same inputs, same MAC");

        /* A node without frame MACs computes other MACs, so a link between
         * nodes that disagree fails the handshake. */
        uint8_t want[PEER_MAC_SIZE];
        peer_mac_sealed(key, key_len, true, nc, ns, 3, 0x01020304, true, other);
        CHECK(peer_mac_equal(other, server), "peer_mac is peer_mac_sealed(..., true, ...)");
        from_hex(want, SERVER_UNSEALED_HEX, PEER_MAC_SIZE);
        peer_mac_sealed(key, key_len, true, nc, ns, 3, 0x01020304, false, other);
        CHECK(peer_mac_equal(other, want), "unsealed server MAC known answer");
        CHECK(!peer_mac_equal(other, server), "unsealed and sealed server MACs differ");
        from_hex(want, CLIENT_UNSEALED_HEX, PEER_MAC_SIZE);
        peer_mac_sealed(key, key_len, false, nc, ns, 3, 0x01020304, false, other);
        CHECK(peer_mac_equal(other, want), "unsealed client MAC known answer");
        CHECK(!peer_mac_equal(other, client), "unsealed and sealed client MACs differ");

        /* peer_mac_equal looks at every byte. */
        for (size_t i = 0; i < PEER_MAC_SIZE; i++) {
                memcpy(other, server, PEER_MAC_SIZE);
                other[i] ^= 1;
                CHECK(!peer_mac_equal(other, server), "MACs differing in byte %zu", i);
        }
}

static void test_nonce(void) {
        uint8_t a[PEER_NONCE_SIZE], b[PEER_NONCE_SIZE], zero[PEER_NONCE_SIZE] = { 0 };

        memset(a, 0, sizeof(a));
        memset(b, 0, sizeof(b));
        CHECK_RC(peer_nonce(a), 0, "nonce a");
        CHECK_RC(peer_nonce(b), 0, "nonce b");
        /* 2^-256 chance of a false failure. */
        CHECK(memcmp(a, b, sizeof(a)) != 0, "two nonces are equal");
        CHECK(memcmp(a, zero, sizeof(a)) != 0, "nonce left zero");
}

/* ---- PSK file ---------------------------------------------------------- */

static const char *tmp_path(const char *name) {
        static char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s/%s", tmpdir, name);
        return p;
}

/* Create tmpdir/name with exactly `mode` and contents (len bytes). */
static const char *write_file(const char *name, unsigned mode, const char *text, size_t len) {
        const char *p = tmp_path(name);
        int fd;
        unlink(p);
        fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || write(fd, text, len) != (ssize_t)len || fchmod(fd, mode) < 0) {
                fprintf(stderr, "cannot write %s: %m\n", p);
                exit(1);
        }
        close(fd);
        bool known = false;
        for (unsigned i = 0; i < npaths; i++)
                known |= strcmp(paths[i], p) == 0;
        if (!known && npaths < sizeof(paths) / sizeof(paths[0]))
                snprintf(paths[npaths++], PATH_MAX, "%s", p);
        return p;
}

static const char *write_str(const char *name, unsigned mode, const char *text) {
        return write_file(name, mode, text, strlen(text));
}

static void expect_key(const char *what, const char *path, const char *want) {
        uint8_t key[PEER_PSK_MAX];
        size_t len = sizeof(key);
        char err[512] = "untouched";
        int r = peer_psk_load(path, key, &len, err, sizeof(err));
        CHECK_RC(r, 0, what);
        if (r == 0) {
                CHECK(len == strlen(want) && memcmp(key, want, len) == 0, "%s: key of %zu bytes",
                      what, len);
                CHECK(err[0] == '\0', "%s: message on success: %s", what, err);
        }
}

/* Fails with `want`; the message names the file (and `word`, if given)
 * and contains no key text. */
static void expect_refused(const char *what, const char *path, int want, const char *word) {
        uint8_t key[PEER_PSK_MAX];
        size_t len = sizeof(key);
        char err[512] = "";
        memset(key, 0x5a, sizeof(key));
        CHECK_RC(peer_psk_load(path, key, &len, err, sizeof(err)), want, what);
        CHECK(strstr(err, path) != NULL, "%s: message does not name the file: %s", what, err);
        CHECK(!word || strstr(err, word), "%s: message lacks \"%s\": %s", what, word, err);
        CHECK(!strstr(err, MARK) && !strstr(err, KEY), "%s: message leaks the key: %s", what, err);
        CHECK(len == sizeof(key), "%s: *len changed on failure", what);
        bool untouched = true;
        for (size_t i = 0; i < sizeof(key); i++)
                untouched &= key[i] == 0x5a;
        CHECK(untouched, "%s: key buffer written on failure", what);
}

static void test_psk_file(void) {
        const char *p;
        char big[PEER_PSK_MAX + 16];

        /* Accepted: with and without the newline, the minimum and maximum
         * lengths, every printable character. */
        expect_key("key + newline", write_str("psk", 0600, KEY MARK "\n"), KEY MARK);
        expect_key("key, no newline", write_str("psk", 0600, KEY MARK), KEY MARK);
        expect_key("mode 0400", write_str("psk", 0400, KEY MARK "\n"), KEY MARK);
        expect_key("32 characters", write_str("psk", 0600, "0123456789abcdef0123456789abcdef\n"),
                   "0123456789abcdef0123456789abcdef");
        expect_key("punctuation", write_str("psk", 0600, "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~" MARK),
                   "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~" MARK);
        memset(big, 'k', PEER_PSK_MAX);
        big[PEER_PSK_MAX] = '\n';
        big[PEER_PSK_MAX + 1] = '\0';
        p = write_file("psk", 0600, big, PEER_PSK_MAX + 1);
        {
                uint8_t key[PEER_PSK_MAX];
                size_t len = sizeof(key);
                CHECK_RC(peer_psk_load(p, key, &len, NULL, 0), 0, "PEER_PSK_MAX characters");
                CHECK(len == PEER_PSK_MAX && key[0] == 'k' && key[PEER_PSK_MAX - 1] == 'k',
                      "PEER_PSK_MAX key: %zu bytes", len);
        }

        /* Permissions: any group or other bit refuses the file. */
        const unsigned modes[] = { 0640, 0604, 0660, 0644, 0602, 0620, 0610, 0601, 0700 | 0001 };
        for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
                char what[64];
                snprintf(what, sizeof(what), "mode %04o", modes[i]);
                expect_refused(what, write_str("psk", modes[i], KEY MARK "\n"), -EPERM, "chmod 600");
        }

        /* Owner: another uid's file is refused even with mode 0600.  Only
         * root can make one; as anyone else this part cannot run. */
        if (geteuid() == 0) {
                p = write_str("psk", 0600, KEY MARK "\n");
                if (chown(p, 4242, (gid_t)-1) < 0) {
                        fprintf(stderr, "chown %s: %m\n", p);
                        failures++;
                } else {
                        expect_refused("owned by uid 4242", p, -EPERM, "uid 4242");
                }
        } else {
                printf("test-peer-auth: not root, foreign-owner case not run\n");
        }

        /* Length. */
        expect_refused("empty file", write_str("psk", 0600, ""), -EINVAL, "at least 32");
        expect_refused("newline only", write_str("psk", 0600, "\n"), -EINVAL, "at least 32");
        expect_refused("31 characters", write_str("psk", 0600, "0123456789abcdef012345" MARK "\n"),
                       -EINVAL, "31 characters");
        memset(big, 'k', sizeof(big));
        expect_refused("PEER_PSK_MAX + 1 characters", write_file("psk", 0600, big, PEER_PSK_MAX + 1),
                       -EINVAL, "longer than");
        expect_refused("much longer", write_file("psk", 0600, big, sizeof(big)), -EINVAL,
                       "longer than");
        {
                uint8_t key[40];
                size_t len = 39;
                char err[256];
                p = write_str("psk", 0600, KEY MARK "\n");
                CHECK_RC(peer_psk_load(p, key, &len, err, sizeof(err)), -EINVAL,
                         "key longer than the caller's buffer");
                CHECK(len == 39 && !strstr(err, MARK), "small buffer: len %zu, message %s", len, err);
        }

        /* Shape: one line of printable ASCII without spaces. */
        expect_refused("two lines", write_str("psk", 0600, KEY MARK "\n" KEY MARK "\n"), -EINVAL,
                       "more than one line");
        expect_refused("empty second line", write_str("psk", 0600, KEY MARK "\n\n"), -EINVAL,
                       "more than one line");
        expect_refused("CRLF", write_str("psk", 0600, KEY MARK "\r\n"), -EINVAL, "CR LF");
        expect_refused("space inside", write_str("psk", 0600, KEY " " MARK "\n"), -EINVAL,
                       "character 41");
        expect_refused("trailing space", write_str("psk", 0600, KEY MARK " \n"), -EINVAL, "space");
        expect_refused("tab", write_str("psk", 0600, "\t" KEY MARK "\n"), -EINVAL, "character 1");
        expect_refused("NUL byte", write_file("psk", 0600, KEY "\0" MARK "\n", sizeof(KEY MARK) + 1),
                       -EINVAL, "character 41");
        expect_refused("UTF-8", write_str("psk", 0600, KEY "\xc3\xa9" MARK "\n"), -EINVAL,
                       "printable ASCII");
        expect_refused("DEL", write_str("psk", 0600, KEY "\x7f" MARK "\n"), -EINVAL, NULL);

        /* Not a file we can use. */
        expect_refused("missing", tmp_path("no-such-file"), -ENOENT, NULL);
        p = tmp_path("a-dir");
        if (mkdir(p, 0700) == 0) {
                expect_refused("a directory", p, -EINVAL, "not a regular file");
                rmdir(p);
        }
        {
                uint8_t key[PEER_PSK_MAX];
                size_t len = sizeof(key);
                CHECK_RC(peer_psk_load(NULL, key, &len, NULL, 0), -EINVAL, "NULL path");
                char err[8];
                p = write_str("psk", 0640, KEY MARK "\n");
                CHECK_RC(peer_psk_load(p, key, &len, err, sizeof(err)), -EPERM, "small err buffer");
                CHECK(strlen(err) == sizeof(err) - 1, "err truncated and terminated");
        }
}

int main(void) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof(tmpdir), "%s/test-peer-auth.XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) {
                fprintf(stderr, "mkdtemp %s: %m\n", tmpdir);
                return 1;
        }

        test_mac();
        test_nonce();
        test_psk_file();

        for (unsigned i = 0; i < npaths; i++)
                unlink(paths[i]);
        rmdir(tmpdir);
        if (failures) {
                fprintf(stderr, "test-peer-auth: %u failure(s)\n", failures);
                return 1;
        }
        printf("test-peer-auth: ok\n");
        return 0;
}
