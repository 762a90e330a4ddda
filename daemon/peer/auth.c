/* SPDX-License-Identifier: MIT */
/*
 * peer/auth — see auth.h for the handshake and the file rules.
 *
 * The key is read into a stack buffer that is wiped before returning and
 * copied to the caller only once it passed every check, so a refused file
 * leaves nothing behind.  Messages name the file and the rule it broke,
 * never its content: they go to the journal.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include "peer/auth.h"
#include "util/cleanup.h"
#include "util/errbuf.h"

#define LABEL_SERVER "ckptd-peer-server"
#define LABEL_CLIENT "ckptd-peer-client"
#define LABEL_LEN 17

/* Open path and check that only its owner (us, or root) can touch it. */
static int open_key_file(const char *path, int *fd_out, char *err, size_t errsize) {
        _cleanup_close_ int fd = -1;
        struct stat st;

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return errbuf_fail(-errno, err, errsize, "cannot open peer key file %s: %m", path);
        /* fstat the descriptor we will read: no window for a swap. */
        if (fstat(fd, &st) < 0)
                return errbuf_fail(-errno, err, errsize, "cannot stat peer key file %s: %m", path);
        if (!S_ISREG(st.st_mode))
                return errbuf_fail(-EINVAL, err, errsize, "peer key file %s is not a regular file", path);
        if (st.st_uid != geteuid() && st.st_uid != 0)
                return errbuf_fail(-EPERM, err, errsize,
                                   "peer key file %s is owned by uid %u, not by the daemon's uid %u "
                                   "or root; refusing to use it",
                                   path, (unsigned)st.st_uid, (unsigned)geteuid());
        if (st.st_mode & 077)
                return errbuf_fail(-EPERM, err, errsize,
                                   "peer key file %s has mode %04o, so other users can read or "
                                   "change it; refusing to use it (run: chmod 600 %s)",
                                   path, (unsigned)(st.st_mode & 07777), path);
        *fd_out = TAKE_FD(fd);
        return 0;
}

/* Read up to cap bytes (to EOF or cap, whichever first).  0 or -errno. */
static int read_upto(int fd, char *buf, size_t cap, size_t *len_out) {
        size_t len = 0;

        while (len < cap) {
                ssize_t n = read(fd, buf + len, cap - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                len += (size_t)n;
        }
        *len_out = len;
        return 0;
}

/* The rules of auth.h on buf[0..len), the file's content. */
static int check_key_text(const char *path, const char *buf, size_t len, size_t *key_len,
                          char *err, size_t errsize) {
        if (len > PEER_PSK_MAX + 1)
                return errbuf_fail(-EINVAL, err, errsize,
                                   "peer key file %s is longer than %d characters", path,
                                   PEER_PSK_MAX);
        if (len > 0 && buf[len - 1] == '\n')
                len--;
        if (len > 0 && buf[len - 1] == '\r')
                return errbuf_fail(-EINVAL, err, errsize,
                                   "peer key file %s ends with a CR LF line end; the key must be "
                                   "one line ending in a plain newline (or none)",
                                   path);
        if (memchr(buf, '\n', len))
                return errbuf_fail(-EINVAL, err, errsize,
                                   "peer key file %s has more than one line; it must hold the key "
                                   "alone, on one line",
                                   path);
        for (size_t i = 0; i < len; i++)
                if (buf[i] < 0x21 || buf[i] > 0x7e)
                        return errbuf_fail(-EINVAL, err, errsize,
                                           "peer key file %s: character %zu is a space or not "
                                           "printable ASCII; the key must be printable ASCII "
                                           "without spaces (e.g. from: openssl rand -base64 48)",
                                           path, i + 1);
        if (len < PEER_PSK_MIN)
                return errbuf_fail(-EINVAL, err, errsize,
                                   "peer key file %s holds a key of %zu characters; it needs at "
                                   "least %d (generate one with: openssl rand -base64 48 > %s)",
                                   path, len, PEER_PSK_MIN, path);
        if (len > PEER_PSK_MAX)
                return errbuf_fail(-EINVAL, err, errsize,
                                   "peer key file %s is longer than %d characters", path,
                                   PEER_PSK_MAX);
        *key_len = len;
        return 0;
}

int peer_psk_load(const char *path, uint8_t *key, size_t *len, char *err, size_t errsize) {
        _cleanup_close_ int fd = -1;
        /* Room for the longest key, its newline, and one byte to notice a
         * longer file without reading all of it. */
        char buf[PEER_PSK_MAX + 2];
        size_t got = 0, key_len = 0;
        int r;

        if (err && errsize)
                err[0] = '\0';
        if (!path || !key || !len)
                return errbuf_fail(-EINVAL, err, errsize, "no peer key file given");
        r = open_key_file(path, &fd, err, errsize);
        if (r < 0)
                return r;
        r = read_upto(fd, buf, sizeof(buf), &got);
        if (r < 0) {
                errno = -r;
                r = errbuf_fail(r, err, errsize, "cannot read peer key file %s: %m", path);
        }
        if (r >= 0)
                r = check_key_text(path, buf, got, &key_len, err, errsize);
        if (r >= 0 && key_len > *len)
                r = errbuf_fail(-EINVAL, err, errsize,
                                "peer key file %s holds a key longer than %zu characters", path,
                                *len);
        if (r >= 0) {
                memcpy(key, buf, key_len);
                *len = key_len;
        }
        explicit_bzero(buf, sizeof(buf));
        return r;
}

static void put_le32(uint8_t *p, uint32_t v) {
        for (size_t i = 0; i < 4; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

#define LABEL_UNSEALED "frames-unsealed"
#define LABEL_UNSEALED_LEN (sizeof(LABEL_UNSEALED) - 1)

void peer_mac(const uint8_t *psk, size_t psk_len, bool server,
              const uint8_t nonce_client[PEER_NONCE_SIZE],
              const uint8_t nonce_server[PEER_NONCE_SIZE], uint32_t client_node,
              uint32_t server_node, uint8_t out[PEER_MAC_SIZE]) {
        peer_mac_sealed(psk, psk_len, server, nonce_client, nonce_server, client_node, server_node,
                        true, out);
}

void peer_mac_sealed(const uint8_t *psk, size_t psk_len, bool server,
                     const uint8_t nonce_client[PEER_NONCE_SIZE],
                     const uint8_t nonce_server[PEER_NONCE_SIZE], uint32_t client_node,
                     uint32_t server_node, bool frames_sealed, uint8_t out[PEER_MAC_SIZE]) {
        /* Each role MACs the other side's nonce first, then its own: the
         * labels alone already separate the roles, the order is the spec's. */
        const uint8_t *first = server ? nonce_client : nonce_server;
        const uint8_t *second = server ? nonce_server : nonce_client;
        uint8_t msg[LABEL_LEN + 2 * PEER_NONCE_SIZE + 8 + LABEL_UNSEALED_LEN], *p = msg;
        size_t out_len = 0, msg_len = LABEL_LEN + 2 * PEER_NONCE_SIZE + 8;

        memcpy(p, server ? LABEL_SERVER : LABEL_CLIENT, LABEL_LEN);
        p += LABEL_LEN;
        memcpy(p, first, PEER_NONCE_SIZE);
        p += PEER_NONCE_SIZE;
        memcpy(p, second, PEER_NONCE_SIZE);
        p += PEER_NONCE_SIZE;
        put_le32(p, client_node);
        put_le32(p + 4, server_node);
        if (!frames_sealed) {
                memcpy(p + 8, LABEL_UNSEALED, LABEL_UNSEALED_LEN);
                msg_len += LABEL_UNSEALED_LEN;
        }

        if (EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, psk, psk_len, msg, msg_len, out,
                      PEER_MAC_SIZE, &out_len) &&
            out_len == PEER_MAC_SIZE)
                return;
        /* Out of memory inside OpenSSL.  A predictable value (zeros) could
         * be matched by a forger's MAC; random bytes match nothing. */
        if (peer_nonce(out) < 0)
                abort();
}

#define LABEL_FRAME_C2S "ckptd-peer-frame-c2s"
#define LABEL_FRAME_S2C "ckptd-peer-frame-s2c"
#define LABEL_FRAME_LEN 20

/* One HKDF-SHA256 output of PEER_FRAME_KEY_SIZE bytes. */
static int frame_key(EVP_KDF *kdf, const uint8_t *psk, size_t psk_len, const uint8_t *salt,
                     size_t salt_len, const char *label, uint32_t client_node,
                     uint32_t server_node, uint8_t out[PEER_FRAME_KEY_SIZE]) {
        uint8_t info[LABEL_FRAME_LEN + 8];
        char digest[] = "SHA256";
        EVP_KDF_CTX *ctx = EVP_KDF_CTX_new(kdf);
        int ok;

        memcpy(info, label, LABEL_FRAME_LEN);
        put_le32(info + LABEL_FRAME_LEN, client_node);
        put_le32(info + LABEL_FRAME_LEN + 4, server_node);
        OSSL_PARAM params[] = {
                OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
                OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)psk, psk_len),
                OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)salt, salt_len),
                OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, sizeof(info)),
                OSSL_PARAM_construct_end(),
        };
        ok = ctx && EVP_KDF_derive(ctx, out, PEER_FRAME_KEY_SIZE, params) == 1;
        EVP_KDF_CTX_free(ctx);
        return ok ? 0 : -EIO;
}

int peer_frame_keys(const uint8_t *psk, size_t psk_len,
                    const uint8_t nonce_client[PEER_NONCE_SIZE],
                    const uint8_t nonce_server[PEER_NONCE_SIZE], uint32_t client_node,
                    uint32_t server_node, uint8_t key_c2s[PEER_FRAME_KEY_SIZE],
                    uint8_t key_s2c[PEER_FRAME_KEY_SIZE]) {
        uint8_t salt[2 * PEER_NONCE_SIZE];
        EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
        int r = kdf ? 0 : -EIO;

        memcpy(salt, nonce_client, PEER_NONCE_SIZE);
        memcpy(salt + PEER_NONCE_SIZE, nonce_server, PEER_NONCE_SIZE);
        if (r == 0)
                r = frame_key(kdf, psk, psk_len, salt, sizeof(salt), LABEL_FRAME_C2S,
                              client_node, server_node, key_c2s);
        if (r == 0)
                r = frame_key(kdf, psk, psk_len, salt, sizeof(salt), LABEL_FRAME_S2C,
                              client_node, server_node, key_s2c);
        EVP_KDF_free(kdf);
        if (r < 0) {
                explicit_bzero(key_c2s, PEER_FRAME_KEY_SIZE);
                explicit_bzero(key_s2c, PEER_FRAME_KEY_SIZE);
        }
        return r;
}

bool peer_mac_equal(const uint8_t a[PEER_MAC_SIZE], const uint8_t b[PEER_MAC_SIZE]) {
        return CRYPTO_memcmp(a, b, PEER_MAC_SIZE) == 0;
}

int peer_nonce(uint8_t out[PEER_NONCE_SIZE]) {
        size_t got = 0;

        /* getrandom() never returns short for <= 256 bytes once the pool is
         * initialised, but a signal while it is still waiting for entropy
         * (early boot) is possible. */
        while (got < PEER_NONCE_SIZE) {
                ssize_t n = getrandom(out + got, PEER_NONCE_SIZE - got, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                got += (size_t)n;
        }
        return 0;
}
