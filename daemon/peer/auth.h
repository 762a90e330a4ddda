/* SPDX-License-Identifier: MIT */
/*
 * peer/auth — the pre-shared key and the MACs of the peer handshake.
 *
 * Daemons of one cluster share a secret ([cluster] psk_file) and prove to
 * each other that they know it without sending it: each side sends a fresh
 * random nonce, then a MAC (HMAC-SHA256 keyed with the PSK) over both nonces
 * and both node indexes.  The handshake (docs/peer-protocol.md):
 *
 *   client -> server  HELLO        client node, nonce_c
 *   server -> client  HELLO_REPLY  server node, nonce_s,
 *                                  server mac = peer_mac(server = true)
 *   client -> server  AUTH         client mac = peer_mac(server = false)
 *   server -> client  AUTH_OK
 *
 * The server proves itself first (a client never sends its MAC to a server
 * that does not know the key); the labels differ per role, so a server's
 * MAC can never be replayed as a client's, and the fresh nonces mean no MAC
 * is valid on another connection.  The node indexes are inside the MAC so
 * a node cannot claim another's index.
 *
 * The key itself is the bytes of the file's one line (printable ASCII, no
 * newline), never hashed or decoded, so `openssl rand -base64 48 > file` on
 * one node and copying the file makes a working cluster, and the tests can
 * check the MAC against `openssl dgst -sha256 -mac HMAC`.
 *
 * Thread-safety: every function is reentrant (no state of its own).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "peer-proto.h" /* PEER_NONCE_SIZE, PEER_MAC_SIZE */

#define PEER_PSK_MIN 32
#define PEER_PSK_MAX 1024

/*
 * Read the PSK from path into key.  *len: on entry the capacity of key
 * (PEER_PSK_MAX takes any valid file), on success the key's length.
 *
 * The file holds one line: PEER_PSK_MIN .. PEER_PSK_MAX characters of
 * printable ASCII without spaces (0x21 .. 0x7e), optionally followed by
 * one "\n".
 * Returns 0, or -errno with a message in err (always NUL-terminated when
 * errsize > 0) that names the file and the problem, never the key:
 *   -EPERM   group or other permission bits set, or owned by neither the
 *            effective uid nor root (a secret others can read is leaked,
 *            one they can write can be replaced);
 *   -EINVAL  shorter than PEER_PSK_MIN, longer than PEER_PSK_MAX or than
 *            *len, a second line, a space or control character, or not a
 *            regular file;
 *   -ENOENT, -EACCES, ...  from open/read.
 * On failure key holds nothing of the file.
 */
int peer_psk_load(const char *path, uint8_t *key, size_t *len, char *err, size_t errsize);

/*
 * The handshake MAC, HMAC-SHA256 keyed with psk:
 *   server = true:  HMAC(psk, "ckptd-peer-server" || nonce_client || nonce_server
 *                             || le32(client_node) || le32(server_node))
 *   server = false: HMAC(psk, "ckptd-peer-client" || nonce_server || nonce_client
 *                             || le32(client_node) || le32(server_node))
 * The labels are the 17 ASCII bytes without a NUL.  `server` says whose MAC
 * it is, not who computes it: the server computes the server MAC to send
 * it and the client MAC to check AUTH; the client the other way round.  The
 * nonces are named by role, so both sides pass the same arguments in the
 * same order for the same MAC: nonce_client is the one in HELLO,
 * nonce_server the one in HELLO_REPLY.
 * Never fails in a way that could authenticate: should OpenSSL fail (no
 * memory), out is filled with random bytes, which match no MAC.
 */
void peer_mac(const uint8_t *psk, size_t psk_len, bool server,
              const uint8_t nonce_client[PEER_NONCE_SIZE],
              const uint8_t nonce_server[PEER_NONCE_SIZE], uint32_t client_node,
              uint32_t server_node, uint8_t out[PEER_MAC_SIZE]);
/*
 * The same for a node whose frames after the handshake carry no MAC
 * ([cluster] peer_frame_mac = no, trusted networks only): the message MACed
 * ends in the 15 ASCII bytes "frames-unsealed" as well.  Two nodes that
 * disagree on the setting therefore fail the handshake (as with different
 * keys) instead of misreading each other's frames, and without the key
 * nobody can talk a link into going without MACs.  peer_mac() is
 * peer_mac_sealed(..., true, ...).
 */
void peer_mac_sealed(const uint8_t *psk, size_t psk_len, bool server,
                     const uint8_t nonce_client[PEER_NONCE_SIZE],
                     const uint8_t nonce_server[PEER_NONCE_SIZE], uint32_t client_node,
                     uint32_t server_node, bool frames_sealed, uint8_t out[PEER_MAC_SIZE]);

/*
 * The per-direction keys of the frame MACs (peer/framemac.h) of one link,
 * derived once the handshake succeeded:
 *   key_c2s = HKDF-SHA256(ikm = psk, salt = nonce_client || nonce_server,
 *                         info = "ckptd-peer-frame-c2s" || le32(client_node)
 *                                || le32(server_node), 16 bytes)
 *   key_s2c = the same with info "ckptd-peer-frame-s2c"
 * (labels are the 20 ASCII bytes without a NUL).  Fresh nonces make the
 * keys of every connection new, so frame counters restart at 0 without
 * ever reusing a GMAC nonce under one key; the two directions have
 * different keys, so a frame reflected back to its sender fails.
 * Returns 0, or -EIO if OpenSSL fails (the link must not go on).
 */
int peer_frame_keys(const uint8_t *psk, size_t psk_len,
                    const uint8_t nonce_client[PEER_NONCE_SIZE],
                    const uint8_t nonce_server[PEER_NONCE_SIZE], uint32_t client_node,
                    uint32_t server_node, uint8_t key_c2s[PEER_FRAME_KEY_SIZE],
                    uint8_t key_s2c[PEER_FRAME_KEY_SIZE]);

/* Compare two MACs in constant time (CRYPTO_memcmp), so a forger learns
 * nothing from how long a rejection takes. */
bool peer_mac_equal(const uint8_t a[PEER_MAC_SIZE], const uint8_t b[PEER_MAC_SIZE]);

/* Fill out with PEER_NONCE_SIZE bytes from the kernel's CSPRNG
 * (getrandom).  0 or -errno. */
int peer_nonce(uint8_t out[PEER_NONCE_SIZE]);
