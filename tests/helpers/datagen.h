/* SPDX-License-Identifier: MIT */
/*
 * Deterministic test bytes: the content of (job, step, rank, shard, seed)
 * at any offset, so a save in one process can be verified in another
 * without storing the expected bytes anywhere.
 */
#pragma once

#include <stdint.h>
#include <string.h>

static inline uint64_t datagen_mix(uint64_t x) {
        x ^= x >> 30;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 27;
        x *= 0x94d049bb133111ebull;
        x ^= x >> 31;
        return x;
}

static inline uint64_t datagen_key(const char *job, uint64_t step, uint32_t rank,
                                   const char *shard, uint64_t seed) {
        uint64_t h = 0xcbf29ce484222325ull ^ seed;
        for (const char *p = job; *p; p++)
                h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
        h = (h ^ 0xff) * 0x100000001b3ull;
        for (const char *p = shard; *p; p++)
                h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
        return datagen_mix(h ^ datagen_mix(step) ^ datagen_mix((uint64_t)rank << 32 | 7));
}

/* Fill buf with the bytes at [offset, offset+len) of the stream `key`. */
static inline void datagen_fill(uint64_t key, uint64_t offset, void *buf, uint64_t len) {
        uint8_t *out = buf;
        uint64_t word = offset / 8;
        uint64_t skip = offset % 8;
        while (len > 0) {
                uint64_t v = datagen_mix(key + word);
                uint8_t bytes[8];
                memcpy(bytes, &v, 8);
                uint64_t n = 8 - skip;
                if (n > len)
                        n = len;
                memcpy(out, bytes + skip, n);
                out += n;
                len -= n;
                skip = 0;
                word++;
        }
}
