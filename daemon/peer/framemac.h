/* SPDX-License-Identifier: MIT */
/*
 * peer/framemac — the MAC that authenticates every peer frame after the
 * handshake (docs/peer-protocol.md, "Frame authentication").
 *
 * The PSK handshake (peer/auth.h) proves who is on the other end of a
 * connection, but without more an on-path attacker could still change
 * replica bytes and recompute the CRCs, or insert, drop, replay or reorder
 * frames.  So, once both sides are authenticated, each direction of a link
 * has its own key (peer_frame_keys()) and a frame counter, and every frame
 * is followed by a 16-byte tag:
 *
 *   tag = GMAC(AES-128-GCM, key of the direction,
 *              IV = le64(counter) || 00 00 00 00,
 *              AAD = the frame's bytes: header, body, and a DATA's payload)
 *
 * The counter is not sent: it is the number of frames sent before in that
 * direction, so the receiver's own count must match, and a frame dropped,
 * repeated, reordered or reflected fails.  The counter never repeats under
 * one key (the keys are new on every connection), which GCM requires.
 * GMAC runs at well over 10 GB/s on a CPU with AES-NI and PCLMULQDQ (see
 * docs/BENCHMARKS.md), a few percent of a 4 MiB frame's transfer time.
 *
 * The MAC is streamed: frame_mac_update() may be called any number of
 * times between frame_mac_begin() and the end, so the sender MACs a DATA
 * payload where it lies (a mapping of the shard file, before sendfile
 * sends it) and the receiver as the bytes arrive, neither copying them.
 *
 * One struct frame_mac is one direction of one link.  Not thread-safe:
 * owned by the link, used on the loop thread.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "peer-proto.h" /* PEER_TAG_SIZE, PEER_FRAME_KEY_SIZE */

struct frame_mac;

/* A MAC state for one direction, keyed with key (copied), counter 0.
 * 0, -ENOMEM, or -EIO (OpenSSL refused the key). */
int frame_mac_new(struct frame_mac **out, const uint8_t key[PEER_FRAME_KEY_SIZE]);
/* Accepts NULL; returns NULL.  Wipes the key. */
struct frame_mac *frame_mac_free(struct frame_mac *fm);

/* Start the next frame (its counter is frame_mac_count() before the call).
 * 0, or -EOVERFLOW once 2^64 - 1 frames went one way (a link must be
 * reconnected then), or -EIO. */
int frame_mac_begin(struct frame_mac *fm);
/* Add n bytes of the frame.  A failure inside OpenSSL is remembered and
 * makes the frame's tag one that matches nothing. */
void frame_mac_update(struct frame_mac *fm, const void *p, size_t n);
/* The sender: the frame's tag. */
void frame_mac_end(struct frame_mac *fm, uint8_t tag[PEER_TAG_SIZE]);
/* The receiver: true if tag is the frame's (compared in constant time). */
bool frame_mac_check(struct frame_mac *fm, const uint8_t tag[PEER_TAG_SIZE]);

/* Frames begun so far in this direction: the counter of the next one. */
uint64_t frame_mac_count(const struct frame_mac *fm);

/* begin + update + end over one buffer (a whole small frame). */
int frame_mac_seal(struct frame_mac *fm, const void *frame, size_t len,
                   uint8_t tag[PEER_TAG_SIZE]);
/* begin + update + check over one buffer.  0, -EBADMSG (the tag does not
 * match), or the errors of frame_mac_begin(). */
int frame_mac_open(struct frame_mac *fm, const void *frame, size_t len,
                   const uint8_t tag[PEER_TAG_SIZE]);
