/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the request decoder, the first code in the daemon that touches
 * bytes from an untrusted local process.
 *
 * Beyond "does not crash", it checks the properties the rest of ckptd leans
 * on (ckpt-proto.h):
 *  - only the documented errors come back, and -EPROTONOSUPPORT still fills
 *    in the header (the daemon answers with that seq);
 *  - whatever decodes re-encodes to the very same bytes (one encoding per
 *    message) and decodes again to the same struct: a decode -> encode ->
 *    decode round trip is stable;
 *  - the other way round, any struct the encoder accepts (here: the input
 *    bytes taken as a raw struct) decodes again, so the encoder never emits
 *    what a decoder rejects.
 * A violation abort()s, which libFuzzer and the corpus replay report.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt-proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Static: the reply struct alone is ~40 KiB, and it keeps runs fast. */
static struct ckpt_request first, second, raw;
static struct ckpt_reply as_reply;
static uint8_t out[CKPT_MSG_MAX], out2[CKPT_MSG_MAX];

static uint32_t le32(const uint8_t *p) {
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void check_decode(const uint8_t *data, size_t size) {
        struct ckpt_hdr hdr;
        int r = ckpt_request_decode(&first, data, size);

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
        /* Request and reply types are disjoint. */
        if (ckpt_reply_decode(&as_reply, data, size) != -EBADMSG)
                abort();

        int n = ckpt_request_encode(&first, out, sizeof(out));
        if (n < 0 || (size_t)n != size || memcmp(out, data, size) != 0)
                abort();
        if (ckpt_request_decode(&second, out, (size_t)n) != 0)
                abort();
        if (memcmp(&first, &second, sizeof(first)) != 0)
                abort();
}

static void check_encode(const uint8_t *data, size_t size) {
        memset(&raw, 0, sizeof(raw));
        memcpy(&raw, data, size < sizeof(raw) ? size : sizeof(raw));

        int n = ckpt_request_encode(&raw, out, sizeof(out));
        if (n == -EINVAL)
                return;
        if (n < CKPT_HDR_SIZE)
                abort(); /* -EMSGSIZE cannot happen with CKPT_MSG_MAX room */
        if (ckpt_request_decode(&first, out, (size_t)n) != 0)
                abort();
        int n2 = ckpt_request_encode(&first, out2, sizeof(out2));
        if (n2 != n || memcmp(out, out2, (size_t)n) != 0)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        check_decode(data, size);
        check_encode(data, size);
        return 0;
}
