/* SPDX-License-Identifier: MIT */
/*
 * peer/framemac — see framemac.h for the construction.
 *
 * AES-GCM with additional data only and no plaintext is GMAC.  The cipher
 * context is keyed once per direction; each frame only sets a new IV,
 * which skips the key schedule.  EVP_EncryptUpdate() with a NULL output
 * takes additional data, in as many pieces as the caller has; GCM allows
 * that as long as no plaintext came first, and none ever does.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "peer/auth.h"
#include "peer/framemac.h"

#define IV_SIZE 12

struct frame_mac {
        EVP_CIPHER_CTX *ctx;
        uint64_t count;   /* frames begun */
        bool in_frame;
        bool failed;      /* OpenSSL failed during this frame */
};

int frame_mac_new(struct frame_mac **out, const uint8_t key[PEER_FRAME_KEY_SIZE]) {
        struct frame_mac *fm = calloc(1, sizeof(*fm));

        if (!fm)
                return -ENOMEM;
        fm->ctx = EVP_CIPHER_CTX_new();
        if (!fm->ctx) {
                free(fm);
                return -ENOMEM;
        }
        if (EVP_EncryptInit_ex(fm->ctx, EVP_aes_128_gcm(), NULL, NULL, NULL) != 1 ||
            EVP_CIPHER_CTX_ctrl(fm->ctx, EVP_CTRL_GCM_SET_IVLEN, IV_SIZE, NULL) != 1 ||
            EVP_EncryptInit_ex(fm->ctx, NULL, NULL, key, NULL) != 1) {
                frame_mac_free(fm);
                return -EIO;
        }
        *out = fm;
        return 0;
}

struct frame_mac *frame_mac_free(struct frame_mac *fm) {
        if (!fm)
                return NULL;
        EVP_CIPHER_CTX_free(fm->ctx); /* clears the key schedule */
        free(fm);
        return NULL;
}

int frame_mac_begin(struct frame_mac *fm) {
        uint8_t iv[IV_SIZE] = { 0 };

        if (fm->count == UINT64_MAX)
                return -EOVERFLOW;
        for (size_t i = 0; i < 8; i++)
                iv[i] = (uint8_t)(fm->count >> (8 * i));
        fm->count++;
        fm->in_frame = true;
        fm->failed = EVP_EncryptInit_ex(fm->ctx, NULL, NULL, NULL, iv) != 1;
        return fm->failed ? -EIO : 0;
}

void frame_mac_update(struct frame_mac *fm, const void *p, size_t n) {
        const uint8_t *b = p;

        /* EVP lengths are int: feed big pieces in slices */
        while (n > 0 && !fm->failed) {
                int len = n > (1u << 30) ? 1 << 30 : (int)n, out = 0;
                if (EVP_EncryptUpdate(fm->ctx, NULL, &out, b, len) != 1)
                        fm->failed = true;
                b += len;
                n -= (size_t)len;
        }
}

/* The tag, or false if none can be trusted. */
static bool frame_tag(struct frame_mac *fm, uint8_t tag[PEER_TAG_SIZE]) {
        uint8_t none[16];
        int out = 0;

        if (!fm->in_frame || fm->failed)
                return false;
        fm->in_frame = false;
        return EVP_EncryptFinal_ex(fm->ctx, none, &out) == 1 &&
               EVP_CIPHER_CTX_ctrl(fm->ctx, EVP_CTRL_GCM_GET_TAG, PEER_TAG_SIZE, tag) == 1;
}

void frame_mac_end(struct frame_mac *fm, uint8_t tag[PEER_TAG_SIZE]) {
        if (frame_tag(fm, tag))
                return;
        /* A tag of zeros could be matched by a forger; random bytes match
         * nothing, so the receiver refuses the frame. */
        uint8_t nonce[PEER_NONCE_SIZE];
        if (peer_nonce(nonce) < 0)
                abort();
        memcpy(tag, nonce, PEER_TAG_SIZE);
}

bool frame_mac_check(struct frame_mac *fm, const uint8_t tag[PEER_TAG_SIZE]) {
        uint8_t want[PEER_TAG_SIZE];

        if (!frame_tag(fm, want))
                return false;
        return CRYPTO_memcmp(want, tag, PEER_TAG_SIZE) == 0;
}

uint64_t frame_mac_count(const struct frame_mac *fm) {
        return fm->count;
}

int frame_mac_seal(struct frame_mac *fm, const void *frame, size_t len,
                   uint8_t tag[PEER_TAG_SIZE]) {
        int r = frame_mac_begin(fm);
        if (r < 0)
                return r;
        frame_mac_update(fm, frame, len);
        frame_mac_end(fm, tag);
        return 0;
}

int frame_mac_open(struct frame_mac *fm, const void *frame, size_t len,
                   const uint8_t tag[PEER_TAG_SIZE]) {
        int r = frame_mac_begin(fm);
        if (r < 0)
                return r;
        frame_mac_update(fm, frame, len);
        return frame_mac_check(fm, tag) ? 0 : -EBADMSG;
}
