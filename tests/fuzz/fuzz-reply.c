/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the reply decoder, which libckpt and ckptctl run on whatever
 * comes back from the socket (a buggy or impostor daemon must not be able to
 * crash a trainer).
 *
 * Same properties as fuzz-request.c: only the documented errors; the header
 * filled on -EPROTONOSUPPORT; decode -> encode gives the same bytes and
 * decode again the same struct; and any struct the encoder accepts (the
 * input taken as a raw struct) decodes again.  abort() on a violation.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt-proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct ckpt_reply first, second, raw;
static struct ckpt_request as_request;
static uint8_t out[CKPT_MSG_MAX], out2[CKPT_MSG_MAX];

static uint32_t le32(const uint8_t *p) {
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void check_decode(const uint8_t *data, size_t size) {
        struct ckpt_hdr hdr;
        int r = ckpt_reply_decode(&first, data, size);

        if (r == -EPROTONOSUPPORT) {
                if (size < CKPT_HDR_SIZE || (first.hdr.version >= CKPT_PROTO_VERSION_MIN &&
                                              first.hdr.version <= CKPT_PROTO_VERSION) ||
                    first.hdr.seq != le32(data + 12))
                        abort();
                return;
        }
        if (r == -EBADMSG || r == -EINVAL)
                return;
        if (r != 0)
                abort();

        if (ckpt_hdr_decode(&hdr, data, size) != 0 || memcmp(&hdr, &first.hdr, sizeof(hdr)) != 0)
                abort();
        if (ckpt_request_decode(&as_request, data, size) != -EBADMSG)
                abort();
        /* What callers print must be terminated. */
        if (first.hdr.type == CKPT_MSG_ERROR &&
            (first.error.error >= 0 || strlen(first.error.message) > CKPT_ERRMSG_MAX))
                abort();

        int n = ckpt_reply_encode(&first, out, sizeof(out));
        if (n < 0 || (size_t)n != size || memcmp(out, data, size) != 0)
                abort();
        if (ckpt_reply_decode(&second, out, (size_t)n) != 0)
                abort();
        if (memcmp(&first, &second, sizeof(first)) != 0)
                abort();
}

static void check_encode(const uint8_t *data, size_t size) {
        memset(&raw, 0, sizeof(raw));
        memcpy(&raw, data, size < sizeof(raw) ? size : sizeof(raw));

        int n = ckpt_reply_encode(&raw, out, sizeof(out));
        if (n == -EINVAL)
                return;
        if (n < CKPT_HDR_SIZE)
                abort();
        if (ckpt_reply_decode(&first, out, (size_t)n) != 0)
                abort();
        int n2 = ckpt_reply_encode(&first, out2, sizeof(out2));
        if (n2 != n || memcmp(out, out2, (size_t)n) != 0)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        check_decode(data, size);
        check_encode(data, size);
        return 0;
}
