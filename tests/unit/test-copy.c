/* SPDX-License-Identifier: MIT */
/*
 * copy_large: every byte of every length around the streaming threshold and
 * the 16 KiB block of pages walked together, at every destination and source
 * alignment that matters, lands where memcpy would put it, and not one byte
 * beside the destination is touched. ckpt_read copies every restored byte
 * with it.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "copy.h"

#include "check.h"

#define GUARD 256

#define RNG_SEED 0x243f6a8885a308d3ull
#include "rng.h"

static void one(unsigned char *src_base, unsigned char *dst_base, size_t len, size_t sa,
                size_t da) {
        unsigned char *src = src_base + sa, *dst = dst_base + GUARD + da;

        memset(dst_base, 0xa5, GUARD + da + len + GUARD);
        copy_large(dst, src, len);
        CHECK(memcmp(dst, src, len) == 0, "len %zu src+%zu dst+%zu: bytes differ", len, sa, da);
        for (size_t i = 0; i < GUARD + da; i++)
                if (dst_base[i] != 0xa5) {
                        CHECK(false, "len %zu dst+%zu: byte %zu before dst written", len, da,
                              GUARD + da - i);
                        break;
                }
        for (size_t i = 0; i < GUARD; i++)
                if (dst[len + i] != 0xa5) {
                        CHECK(false, "len %zu dst+%zu: byte %zu after dst written", len, da, i);
                        break;
                }
}

int main(void) {
        const size_t max = COPY_LARGE_MIN + 3 * 16384 + 4096;
        unsigned char *src = malloc(max + 128), *dst = malloc(max + 2 * GUARD + 128);
        if (!src || !dst)
                return 77;
        for (size_t i = 0; i < max + 128; i++)
                src[i] = (unsigned char)(rng() >> 56);

        const size_t lens[] = { 0, 1, 31, 4096, COPY_LARGE_MIN - 1, COPY_LARGE_MIN,
                                COPY_LARGE_MIN + 1, COPY_LARGE_MIN + 31, COPY_LARGE_MIN + 16383,
                                COPY_LARGE_MIN + 16384, COPY_LARGE_MIN + 3 * 16384 + 4095, max };
        const size_t aligns[] = { 0, 1, 7, 31, 32, 33, 63 };
        for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
                for (size_t s = 0; s < sizeof(aligns) / sizeof(aligns[0]); s++)
                        for (size_t d = 0; d < sizeof(aligns) / sizeof(aligns[0]); d++)
                                one(src, dst, lens[l], aligns[s], aligns[d]);
        /* random lengths in the streaming range */
        for (int i = 0; i < 20; i++)
                one(src, dst, COPY_LARGE_MIN + rng() % (max - COPY_LARGE_MIN), rng() % 64,
                    rng() % 64);
        free(src);
        free(dst);
        return check_exit_code();
}
