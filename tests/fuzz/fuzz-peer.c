/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the peer protocol decoder, which reads bytes from other
 * machines on the network (proto/peer-proto.h).
 *
 * Beyond "does not crash", it checks the properties the peer code leans on:
 *  - only the documented errors come back, and -EPROTONOSUPPORT still fills
 *    in the header;
 *  - peer_hdr_decode() accepts the header of every message the full decoder
 *    accepts and reports the same fields, and a body length within the
 *    type's bound (a stream reader sizes its read on it);
 *  - whatever decodes re-encodes to the very same bytes (one encoding per
 *    message) and decodes again to the same struct (the RANK_BEGIN manifest
 *    pointer aside, which points into each buffer);
 *  - the other way round, any struct the encoder accepts (the input bytes
 *    taken as a raw struct, the manifest pointer aimed at the input) decodes
 *    again, so the encoder never emits what a decoder rejects.
 * A violation abort()s, which libFuzzer and the corpus replay report.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "peer-proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Static: a struct peer_msg is ~70 KiB. */
static struct peer_msg first, second, raw;
/* Inputs are far below RANK_BEGIN's bound in practice (run-fuzz.sh caps
 * them); the encoder's -EMSGSIZE is tolerated only beyond this. */
#define OUT_MAX (PEER_HDR_SIZE + PEER_MSG_MAX + 4096)
static uint8_t out[OUT_MAX], out2[OUT_MAX];

static uint64_t le(const uint8_t *p, size_t n) {
        uint64_t v = 0;
        for (size_t i = 0; i < n; i++)
                v |= (uint64_t)p[i] << (8 * i);
        return v;
}

static void check_decode(const uint8_t *data, size_t size) {
        struct peer_hdr hdr;
        int r = peer_msg_decode(&first, data, size);

        if (r == -EPROTONOSUPPORT) {
                if (size < PEER_HDR_SIZE || first.hdr.version == PEER_PROTO_VERSION ||
                    first.hdr.stream != le(data + 12, 4) || first.hdr.seq != le(data + 16, 8))
                        abort();
                return;
        }
        if (r == -EBADMSG || r == -EINVAL)
                return;
        if (r != 0)
                abort();

        if (peer_hdr_decode(&hdr, data, size) != 0 || hdr.version != first.hdr.version ||
            hdr.type != first.hdr.type || hdr.length != first.hdr.length ||
            hdr.stream != first.hdr.stream || hdr.seq != first.hdr.seq)
                abort();
        if (first.hdr.type == PEER_MSG_DATA) {
                if (size != PEER_HDR_SIZE + PEER_DATA_HDR_SIZE || first.data.length == 0 ||
                    first.data.length > PEER_DATA_MAX ||
                    first.hdr.length != PEER_DATA_HDR_SIZE + first.data.length)
                        abort();
        } else if (first.hdr.length != size - PEER_HDR_SIZE ||
                   (first.hdr.type != PEER_MSG_RANK_BEGIN && first.hdr.length > PEER_MSG_MAX)) {
                abort();
        }
        if (first.hdr.type == PEER_MSG_RANK_BEGIN) {
                const struct peer_rank_begin *b = &first.rank_begin;
                /* In place, at the very end of the message. */
                if (b->manifest_len == 0 || b->manifest_len > PEER_MANIFEST_MAX ||
                    b->manifest != (const char *)data + size - b->manifest_len)
                        abort();
        }

        int n = peer_msg_encode(&first, out, sizeof(out));
        if (n == -EMSGSIZE && size > sizeof(out))
                return;
        if (n < 0 || (size_t)n != size || memcmp(out, data, size) != 0)
                abort();
        if (peer_msg_decode(&second, out, (size_t)n) != 0)
                abort();
        if (first.hdr.type == PEER_MSG_RANK_BEGIN)
                second.rank_begin.manifest = first.rank_begin.manifest;
        if (memcmp(&first, &second, sizeof(first)) != 0)
                abort();
}

static void check_encode(const uint8_t *data, size_t size) {
        memset(&raw, 0, sizeof(raw));
        memcpy(&raw, data, size < sizeof(raw) ? size : sizeof(raw));
        /* The only pointer in the struct: aim it at real bytes. */
        if (raw.hdr.type == PEER_MSG_RANK_BEGIN) {
                raw.rank_begin.manifest = (const char *)data;
                if (raw.rank_begin.manifest_len > size)
                        raw.rank_begin.manifest_len = (uint32_t)size;
                if (raw.rank_begin.manifest_len > PEER_MSG_MAX)
                        raw.rank_begin.manifest_len = PEER_MSG_MAX;
        }

        int n = peer_msg_encode(&raw, out, sizeof(out));
        if (n == -EINVAL)
                return;
        if (n == -EMSGSIZE) {
                /* Only a LIST_REP page of long names may outgrow its bound;
                 * everything else fits out. */
                if (raw.hdr.type != PEER_MSG_LIST_REP ||
                    peer_list_rep_size(&raw.list_rep, raw.list_rep.count) <= PEER_MSG_MAX)
                        abort();
                return;
        }
        if (n < PEER_HDR_SIZE)
                abort();
        if (peer_msg_decode(&first, out, (size_t)n) != 0)
                abort();
        int n2 = peer_msg_encode(&first, out2, sizeof(out2));
        if (n2 != n || memcmp(out, out2, (size_t)n) != 0)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        check_decode(data, size);
        check_encode(data, size);
        return 0;
}
