/* SPDX-License-Identifier: MIT */
/*
 * peer/framemac and the frame keys of peer/auth: known answers computed
 * with the openssl command line (so the construction docs/peer-protocol.md
 * states is what is pinned, not this code's idea of it), and the
 * properties the link relies on: a tag streamed in pieces equals the tag of
 * the whole; a flipped byte, a frame out of order (replayed, dropped) or a
 * frame under the other direction's key (reflected) fails.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer/auth.h"
#include "peer/framemac.h"

#include "check.h"

/* The handshake inputs of test-peer-auth.c. */
#define KEY "0123456789abcdefghijklmnopqrstuvwxyzABCD"

/*
 *   KEY=0123456789abcdefghijklmnopqrstuvwxyzABCD
 *   NC=$(python3 -c "print(''.join('%02x'%i for i in range(0,32)))")
 *   NS=$(python3 -c "print(''.join('%02x'%i for i in range(0xa0,0xc0)))")
 *   HK=$(printf '%s' $KEY | xxd -p | tr -d '\n')
 *   INFO=$(printf 'ckptd-peer-frame-c2s' | xxd -p)0300000004030201
 *   openssl kdf -keylen 16 -kdfopt digest:SHA256 -kdfopt hexkey:$HK \
 *       -kdfopt hexsalt:$NC$NS -kdfopt hexinfo:$INFO HKDF
 *   -> 64:E7:88:FE:D4:B8:53:9A:62:66:E8:5E:C8:52:52:A3   (s2c: 41:C5:36:DA...)
 *   python3 -c "import sys;sys.stdout.buffer.write(bytes(range(64)))" > msg
 *   openssl mac -cipher AES-128-GCM -macopt hexkey:64E788FED4B8539A6266E85EC85252A3 \
 *       -macopt hexiv:000000000000000000000000 -in msg GMAC
 *   -> E4EFC2144D37CE1C86D78CAF13040B90  (frame 0)
 *   ... hexiv:050000000000000000000000 ...
 *   -> B0FE4B6AF2897BD9A4A4C9828B129838  (frame 5)
 */
#define C2S_HEX "64e788fed4b8539a6266e85ec85252a3"
#define S2C_HEX "41c536da67317131f4620c8be6bdf9bd"
#define TAG0_HEX "e4efc2144d37ce1c86d78caf13040b90"
#define TAG5_HEX "b0fe4b6af2897bd9a4a4c9828b129838"

static void from_hex(uint8_t *out, const char *hex, size_t n) {
        for (size_t i = 0; i < n; i++) {
                unsigned v;
                if (sscanf(hex + 2 * i, "%2x", &v) != 1)
                        abort();
                out[i] = (uint8_t)v;
        }
}

static uint8_t c2s[PEER_FRAME_KEY_SIZE], s2c[PEER_FRAME_KEY_SIZE];

static void test_keys(void) {
        uint8_t nc[PEER_NONCE_SIZE], ns[PEER_NONCE_SIZE], want[PEER_FRAME_KEY_SIZE];
        uint8_t other[PEER_FRAME_KEY_SIZE], other2[PEER_FRAME_KEY_SIZE];

        for (size_t i = 0; i < PEER_NONCE_SIZE; i++) {
                nc[i] = (uint8_t)i;
                ns[i] = (uint8_t)(0xa0 + i);
        }
        CHECK(peer_frame_keys((const uint8_t *)KEY, strlen(KEY), nc, ns, 3, 0x01020304, c2s,
                              s2c) == 0, "derive");
        from_hex(want, C2S_HEX, sizeof(want));
        CHECK(!memcmp(c2s, want, sizeof(want)), "c2s key differs from openssl kdf HKDF");
        from_hex(want, S2C_HEX, sizeof(want));
        CHECK(!memcmp(s2c, want, sizeof(want)), "s2c key differs from openssl kdf HKDF");
        /* every input matters: nonces swapped, another node index */
        CHECK(peer_frame_keys((const uint8_t *)KEY, strlen(KEY), ns, nc, 3, 0x01020304, other,
                              other2) == 0, "derive");
        CHECK(memcmp(other, c2s, sizeof(c2s)) && memcmp(other2, s2c, sizeof(s2c)),
              "swapped nonces give the same keys");
        CHECK(peer_frame_keys((const uint8_t *)KEY, strlen(KEY), nc, ns, 4, 0x01020304, other,
                              other2) == 0, "derive");
        CHECK(memcmp(other, c2s, sizeof(c2s)), "another client node gives the same key");
}

static void test_tags(void) {
        uint8_t msg[64], tag[PEER_TAG_SIZE], want[PEER_TAG_SIZE];
        struct frame_mac *tx = NULL, *rx = NULL, *wrong = NULL;

        for (size_t i = 0; i < sizeof(msg); i++)
                msg[i] = (uint8_t)i;
        CHECK(frame_mac_new(&tx, c2s) == 0 && frame_mac_new(&rx, c2s) == 0 &&
              frame_mac_new(&wrong, s2c) == 0, "new");
        if (!tx || !rx || !wrong)
                return;

        /* frame 0, whole */
        CHECK(frame_mac_count(tx) == 0, "counter starts at 0");
        CHECK(frame_mac_seal(tx, msg, sizeof(msg), tag) == 0, "seal");
        from_hex(want, TAG0_HEX, sizeof(want));
        CHECK(!memcmp(tag, want, sizeof(want)), "frame 0 tag differs from openssl mac GMAC");
        CHECK(frame_mac_open(rx, msg, sizeof(msg), tag) == 0, "receiver accepts frame 0");
        /* reflected: the other direction's key */
        CHECK(frame_mac_open(wrong, msg, sizeof(msg), tag) == -EBADMSG, "reflected frame passes");

        /* frames 1..4, then 5 in pieces (a DATA frame's headers, then its
         * payload as it arrives) */
        for (int i = 1; i < 5; i++) {
                CHECK(frame_mac_seal(tx, msg, sizeof(msg), tag) == 0, "seal");
                CHECK(frame_mac_open(rx, msg, sizeof(msg), tag) == 0, "frame %d", i);
        }
        CHECK(frame_mac_begin(tx) == 0, "begin");
        frame_mac_update(tx, msg, 48);
        frame_mac_update(tx, msg + 48, 1);
        frame_mac_update(tx, msg + 49, 15);
        frame_mac_end(tx, tag);
        from_hex(want, TAG5_HEX, sizeof(want));
        CHECK(!memcmp(tag, want, sizeof(want)), "frame 5 tag (streamed) differs from openssl");

        /* the receiver: a flipped byte fails; the frame is then gone (the
         * link closes in ckptd), so a second try with the right bytes is a
         * replay at the wrong counter and fails too */
        msg[50] ^= 1;
        CHECK(frame_mac_open(rx, msg, sizeof(msg), tag) == -EBADMSG, "flipped byte passes");
        msg[50] ^= 1;
        CHECK(frame_mac_open(rx, msg, sizeof(msg), tag) == -EBADMSG,
              "frame 5 accepted as frame 6 (replay)");

        /* dropped frame: a fresh receiver at counter 0 refuses frame 1 */
        struct frame_mac *rx2 = NULL;
        CHECK(frame_mac_new(&rx2, c2s) == 0, "new");
        struct frame_mac *tx2 = NULL;
        CHECK(frame_mac_new(&tx2, c2s) == 0, "new");
        if (rx2 && tx2) {
                CHECK(frame_mac_seal(tx2, msg, sizeof(msg), tag) == 0, "seal");
                CHECK(frame_mac_seal(tx2, msg, sizeof(msg), tag) == 0, "seal");
                CHECK(frame_mac_open(rx2, msg, sizeof(msg), tag) == -EBADMSG,
                      "frame 1 accepted as frame 0 (a frame dropped)");
        }
        /* a check without a begun frame is false, never a pass */
        CHECK(!frame_mac_check(rx2, tag), "check outside a frame passes");
        frame_mac_free(rx2);
        frame_mac_free(tx2);
        CHECK(frame_mac_free(tx) == NULL && frame_mac_free(NULL) == NULL, "free");
        frame_mac_free(rx);
        frame_mac_free(wrong);
}

int main(void) {
        test_keys();
        test_tags();
        return check_exit_code();
}
