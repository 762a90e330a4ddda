/* SPDX-License-Identifier: MIT */
/*
 * CRC32C: published vectors, agreement of the SSE4.2 and table paths with a
 * bit-at-a-time reference on every length and alignment, continuation,
 * combine (including lengths past 4 GiB), and crc32c_copy.
 *
 * Every shard checksum in ckptd comes from here; a wrong CRC would either
 * reject good checkpoints or accept corrupt ones, so the fast paths are
 * checked against the slowest, most obviously correct implementation.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "crc32c-internal.h"

#include "check.h"

#define RNG_SEED 0x9e3779b97f4a7c15ull
#include "rng.h"

static void fill_random(unsigned char *p, size_t n) {
        for (size_t i = 0; i < n; i++)
                p[i] = (unsigned char)(rng() >> 56);
}

/* The definition, one bit at a time. */
static uint32_t crc_bitwise(uint32_t crc, const unsigned char *p, size_t n) {
        crc = ~crc;
        while (n--) {
                crc ^= *p++;
                for (int k = 0; k < 8; k++)
                        crc = crc & 1 ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
        }
        return ~crc;
}

static bool hw;

/* All implementations must agree; returns the common value or reports. */
static uint32_t crc_all(uint32_t seed, const unsigned char *p, size_t n, const char *what) {
        uint32_t dispatched = crc32c(seed, p, n);
        uint32_t table = crc32c_slice8(seed, p, n);

        CHECK(dispatched == table, "%s len %zu align %u: crc32c %08x slice8 %08x", what, n,
              (unsigned)((uintptr_t)p & 63), dispatched, table);
        if (hw) {
                uint32_t sse = crc32c_sse42(seed, p, n);
                CHECK(sse == table, "%s len %zu align %u: sse42 %08x slice8 %08x", what, n,
                      (unsigned)((uintptr_t)p & 63), sse, table);
        }
        return table;
}

static void test_vectors(void) {
        unsigned char buf[32];
        static const char check[] = "123456789";

        CHECK(crc_all(0, (const unsigned char *)check, 9, "check") == 0xe3069283u, "check value");
        CHECK(crc_bitwise(0, (const unsigned char *)check, 9) == 0xe3069283u, "reference broken");
        CHECK(crc_all(0, buf, 0, "empty") == 0, "empty");
        CHECK(crc32c(0x12345678u, NULL, 0) == 0x12345678u, "empty continuation keeps crc");

        /* RFC 3720 (iSCSI), appendix B.4. */
        memset(buf, 0, sizeof(buf));
        CHECK(crc_all(0, buf, 32, "zeros") == 0x8a9136aau, "32 zero bytes");
        memset(buf, 0xff, sizeof(buf));
        CHECK(crc_all(0, buf, 32, "ones") == 0x62a8ab43u, "32 0xff bytes");
        for (int i = 0; i < 32; i++)
                buf[i] = (unsigned char)i;
        CHECK(crc_all(0, buf, 32, "ascending") == 0x46dd794eu, "ascending");
        for (int i = 0; i < 32; i++)
                buf[i] = (unsigned char)(31 - i);
        CHECK(crc_all(0, buf, 32, "descending") == 0x113fdb5cu, "descending");

        /* Same vectors through the unaligned paths. */
        unsigned char shifted[64];
        for (int off = 1; off < 8; off++) {
                for (int i = 0; i < 32; i++)
                        shifted[off + i] = (unsigned char)i;
                CHECK(crc_all(0, shifted + off, 32, "ascending unaligned") == 0x46dd794eu,
                      "off %d", off);
        }
}

static void test_impl_name(void) {
        const char *impl = crc32c_impl();
        CHECK(strcmp(impl, hw ? "sse4.2" : "table") == 0, "impl %s with hw=%d", impl, hw);
}

/* Every length 0..2048 at every alignment mod 8, against the bit-at-a-time
 * reference (at alignment 0; the others against slice8). */
static void test_small_lengths(void) {
        enum { MAXLEN = 2048 };
        unsigned char *buf = malloc(MAXLEN + 64);
        CHECK(buf, "malloc");
        if (!buf)
                return;
        fill_random(buf, MAXLEN + 64);
        for (size_t len = 0; len <= MAXLEN; len++) {
                uint32_t seed = len % 3 == 0 ? 0 : (uint32_t)rng();
                uint32_t ref = crc_bitwise(seed, buf, len);
                CHECK(crc_all(seed, buf, len, "small") == ref, "len %zu vs bitwise", len);
                for (unsigned off = 1; off < 8; off++)
                        crc_all(seed, buf + off, len, "small unaligned");
        }
        free(buf);
}

/* Lengths around the three-stream block boundaries (3*8192 and 3*256) and
 * random large ones, at random alignments. */
static void test_large_lengths(void) {
        enum { MAXLEN = 1 << 20 };
        unsigned char *buf = malloc(MAXLEN + 64);
        CHECK(buf, "malloc");
        if (!buf)
                return;
        fill_random(buf, MAXLEN + 64);

        static const size_t bases[] = { 768, 1536, 24576, 24576 + 768, 49152, 49152 + 24 * 768,
                                        65536, 3 * 32768, 262144 };
        for (size_t b = 0; b < sizeof(bases) / sizeof(bases[0]); b++)
                for (size_t d = 0; d < 24; d++)
                        for (unsigned off = 0; off < 8; off++) {
                                size_t len = bases[b] + d - 12;
                                crc_all((uint32_t)rng(), buf + off, len, "boundary");
                        }

        for (int i = 0; i < 200; i++) {
                size_t len = rng() % MAXLEN;
                unsigned off = rng() % 64;
                crc_all((uint32_t)rng(), buf + off, len, "random large");
        }
        /* One full check against the definition for a large, odd buffer. */
        CHECK(crc_all(0, buf + 3, MAXLEN - 5, "1MiB") == crc_bitwise(0, buf + 3, MAXLEN - 5),
              "1 MiB vs bitwise");
        free(buf);
}

static void test_continuation(void) {
        enum { LEN = 3 * 24576 + 1000 };
        unsigned char *buf = malloc(LEN);
        CHECK(buf, "malloc");
        if (!buf)
                return;
        fill_random(buf, LEN);
        uint32_t whole = crc32c(0, buf, LEN);

        for (size_t split = 0; split <= 2048; split++) {
                uint32_t c = crc32c(crc32c(0, buf, split), buf + split, LEN - split);
                CHECK(c == whole, "split at %zu", split);
        }
        for (int i = 0; i < 500; i++) {
                size_t a = rng() % (LEN + 1);
                size_t b = a + rng() % (LEN - a + 1);
                uint32_t c = crc32c(0, buf, a);
                c = crc32c(c, buf + a, b - a);
                c = crc32c(c, buf + b, LEN - b);
                CHECK(c == whole, "three pieces %zu %zu", a, b);
                uint32_t t = crc32c_slice8(crc32c_slice8(0, buf, a), buf + a, LEN - a);
                CHECK(t == whole, "slice8 split at %zu", a);
        }
        free(buf);
}

static void test_combine(void) {
        enum { LEN = 300000 };
        unsigned char *buf = malloc(LEN);
        unsigned char *zeros = calloc(1, LEN);
        CHECK(buf && zeros, "malloc");
        if (!buf || !zeros) {
                free(buf);
                free(zeros);
                return;
        }
        fill_random(buf, LEN);

        /* Against real data: every split of the first 1100 bytes and random
         * splits of the rest. */
        for (size_t n = 0; n < 1100; n++) {
                size_t a = n / 2, b = n - a;
                uint32_t c1 = crc32c(0, buf, a), c2 = crc32c(0, buf + a, b);
                CHECK(crc32c_combine(c1, c2, b) == crc32c(0, buf, n), "combine %zu + %zu", a, b);
        }
        for (int i = 0; i < 300; i++) {
                size_t a = rng() % LEN;
                size_t b = rng() % (LEN - a + 1);
                uint32_t c1 = crc32c(0, buf, a), c2 = crc32c(0, buf + a, b);
                CHECK(crc32c_combine(c1, c2, b) == crc32c(0, buf, a + b), "combine %zu + %zu", a,
                      b);
        }

        /* Appending zeros: a || 0^n. */
        uint32_t ca = crc32c(0, buf, 777);
        for (size_t n = 0; n <= 4096; n++) {
                uint32_t expect = crc32c(ca, zeros, n);
                CHECK(crc32c_combine(ca, crc32c(0, zeros, n), n) == expect, "zeros %zu", n);
        }
        for (int i = 0; i < 100; i++) {
                size_t n = rng() % LEN;
                uint32_t expect = crc32c(ca, zeros, n);
                CHECK(crc32c_combine(ca, crc32c(0, zeros, n), n) == expect, "zeros %zu", n);
        }

        /* Length 0: combining an empty b is the identity. */
        CHECK(crc32c_combine(0xdeadbeefu, 0, 0) == 0xdeadbeefu, "len 0");
        CHECK(crc32c_combine(0, 0, 0) == 0, "len 0, zero crc");

        /* Past 4 GiB, against real data: 4 GiB + 1 MiB of zeros, checksummed
         * piecewise, must equal the combine of the pieces' CRCs. */
        {
                const size_t piece = 1 << 20;
                const uint64_t total = (UINT64_C(1) << 32) + piece;
                uint32_t whole = crc32c(0, buf, 100);
                unsigned char *big = calloc(1, piece);
                CHECK(big, "calloc");
                if (big) {
                        for (uint64_t done = 0; done < total; done += piece)
                                whole = crc32c(whole, big, piece);
                        uint32_t zcrc = 0;
                        uint32_t zp = crc32c(0, big, piece);
                        for (uint64_t done = 0; done < total; done += piece)
                                zcrc = crc32c_combine(zcrc, zp, piece);
                        CHECK(crc32c_combine(crc32c(0, buf, 100), zcrc, total) == whole,
                              "4 GiB + 1 MiB of zeros");
                        free(big);
                }
        }

        /* Huge lengths: algebraic consistency.  Combining is associative, and
         * shifting by a then by b is shifting by a + b. */
        for (int i = 0; i < 2000; i++) {
                uint32_t a = (uint32_t)rng(), b = (uint32_t)rng(), c = (uint32_t)rng();
                uint64_t lb, lc;
                switch (i % 4) {
                case 0: /* around 4 GiB */
                        lb = (UINT64_C(1) << 32) + rng() % 4096 - 2048;
                        lc = (UINT64_C(1) << 32) + rng() % 4096 - 2048;
                        break;
                case 1: /* anything, sum fits in 64 bits */
                        lb = rng() >> 1;
                        lc = rng() >> 1;
                        break;
                case 2: /* up to the top */
                        lb = rng();
                        lc = UINT64_MAX - lb;
                        break;
                default:
                        lb = rng() % 100000;
                        lc = rng() >> (rng() % 64);
                        if (lc > UINT64_MAX - lb)
                                lc = UINT64_MAX - lb;
                        break;
                }
                uint32_t left = crc32c_combine(crc32c_combine(a, b, lb), c, lc);
                uint32_t right = crc32c_combine(a, crc32c_combine(b, c, lc), lb + lc);
                CHECK(left == right, "assoc lb=%" PRIu64 " lc=%" PRIu64, lb, lc);
                uint32_t twostep = crc32c_combine(crc32c_combine(a, 0, lb), c, lc);
                CHECK(twostep == crc32c_combine(a, c, lb + lc), "shift lb=%" PRIu64
                      " lc=%" PRIu64, lb, lc);
                /* Linearity in crc1: the shift of a XOR b is the XOR of shifts. */
                CHECK((crc32c_combine(a ^ b, 0, lb) ==
                       (crc32c_combine(a, 0, lb) ^ crc32c_combine(b, 0, lb))),
                      "linear lb=%" PRIu64, lb);
        }
        /* The shift is invertible (x is a unit mod P), so a nonzero crc1 never
         * maps to zero, whatever the length. */
        for (int i = 0; i < 64; i++) {
                uint64_t len = UINT64_C(1) << i;
                CHECK(crc32c_combine(1, 0, len) != 0, "shift by 2^%d", i);
                CHECK(crc32c_combine(0, 0x1234u, len) == 0x1234u, "zero crc1, 2^%d", i);
        }
        free(buf);
        free(zeros);
}

static void test_copy(void) {
        const size_t maxlen = 3 * CRC32C_COPY_PIECE + 5000;
        unsigned char *src = malloc(maxlen + 64), *dst = malloc(maxlen + 128);
        CHECK(src && dst, "malloc");
        if (!src || !dst) {
                free(src);
                free(dst);
                return;
        }
        fill_random(src, maxlen + 64);

        size_t lens[4200];
        size_t nlens = 0;
        for (size_t len = 0; len <= 2048; len++)
                lens[nlens++] = len;
        for (size_t k = 1; k <= 3; k++)
                for (size_t d = 0; d < 16; d++)
                        lens[nlens++] = k * CRC32C_COPY_PIECE + d - 8;
        for (int i = 0; i < 100; i++)
                lens[nlens++] = rng() % maxlen;
        lens[nlens++] = maxlen;

        for (size_t i = 0; i < nlens; i++) {
                size_t len = lens[i];
                /* A few alignment pairs per length; all 64 for short ones. */
                unsigned pairs = len < 64 ? 64 : 4;
                for (unsigned j = 0; j < pairs; j++) {
                        unsigned so = len < 64 ? j % 8 : rng() % 64;
                        unsigned dof = len < 64 ? j / 8 : rng() % 64;
                        uint32_t seed = j % 2 ? (uint32_t)rng() : 0;
                        size_t span = len + 128 < maxlen + 128 ? len + 128 : maxlen + 128;
                        memset(dst, 0xa5, span);
                        uint32_t c = crc32c_copy(seed, dst + dof, src + so, len);
                        CHECK(c == crc32c_slice8(seed, src + so, len),
                              "copy crc len %zu src+%u dst+%u", len, so, dof);
                        CHECK(memcmp(dst + dof, src + so, len) == 0, "copy bytes len %zu", len);
                        bool guard_ok = true;
                        for (size_t g = 0; g < dof; g++)
                                guard_ok &= dst[g] == 0xa5;
                        for (size_t g = dof + len; g < span && g < dof + len + 64; g++)
                                guard_ok &= dst[g] == 0xa5;
                        CHECK(guard_ok, "copy wrote outside dst, len %zu", len);
                }
        }
        free(src);
        free(dst);
}

/* The streaming path: lengths around its threshold and well past it, every
 * destination alignment class, with guard bytes around the destination. */
static void test_copy_large(void) {
        const size_t maxlen = CRC32C_COPY_NT_MIN + 5 * 24576 + 4096;
        unsigned char *src = malloc(maxlen + 64), *dst = malloc(maxlen + 192);
        CHECK(src && dst, "malloc");
        if (!src || !dst) {
                free(src);
                free(dst);
                return;
        }
        fill_random(src, maxlen + 64);
        const size_t lens[] = { CRC32C_COPY_NT_MIN - 1, CRC32C_COPY_NT_MIN,
                                CRC32C_COPY_NT_MIN + 1, CRC32C_COPY_NT_MIN + 24576 - 31,
                                CRC32C_COPY_NT_MIN + 3 * 24576 + 63, maxlen };
        for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
                for (unsigned j = 0; j < 6; j++) {
                        size_t len = lens[i];
                        unsigned dof = j < 2 ? j * 32 : 1 + rng() % 127, so = rng() % 64;
                        uint32_t seed = (uint32_t)rng();
                        memset(dst, 0x5a, maxlen + 192);
                        uint32_t c = crc32c_copy(seed, dst + dof, src + so, len);
                        CHECK(c == crc32c_slice8(seed, src + so, len),
                              "large copy crc len %zu src+%u dst+%u", len, so, dof);
                        CHECK(memcmp(dst + dof, src + so, len) == 0, "large copy bytes len %zu",
                              len);
                        bool guard_ok = true;
                        for (size_t g = 0; g < dof; g++)
                                guard_ok &= dst[g] == 0x5a;
                        for (size_t g = dof + len; g < maxlen + 192; g++)
                                guard_ok &= dst[g] == 0x5a;
                        CHECK(guard_ok, "large copy wrote outside dst, len %zu dst+%u", len, dof);
                }
        free(src);
        free(dst);
}

int main(void) {
        hw = crc32c_sse42_available();
        printf("crc32c implementation: %s; streaming copy: %s\n", crc32c_impl(),
               crc32c_copy_nt_available() ? "yes" : "no");
        if (!hw)
                printf("note: no SSE4.2 on this machine; only the table path is tested\n");

        test_vectors();
        test_impl_name();
        test_small_lengths();
        test_large_lengths();
        test_continuation();
        test_combine();
        test_copy();
        test_copy_large();

        if (failures) {
                fprintf(stderr, "%u check(s) failed\n", failures);
                return 1;
        }
        printf("all crc32c tests passed\n");
        return 0;
}
