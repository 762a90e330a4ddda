/* SPDX-License-Identifier: MIT */
/*
 * Manifests and commit records: round trips, the exact documented text, and
 * rejection of every kind of damage — flipped bytes, truncation, and
 * structurally wrong files with a correct end-line CRC (so the strict
 * parser, not just the checksum, is what says no).
 *
 * A rank directory is readable exactly when its MANIFEST parses, so a parser
 * that accepted a damaged file would let a corrupt checkpoint be restored.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt-proto.h"
#include "crc32c.h"
#include "local/manifest.h"

#include "check.h"

#define RNG_SEED 0x2545f4914f6cdd1dull
#include "rng.h"

static char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xasprintf(const char *fmt, ...) {
        va_list ap;
        char *s;
        va_start(ap, fmt);
        if (vasprintf(&s, fmt, ap) < 0) {
                fprintf(stderr, "out of memory\n");
                exit(1);
        }
        va_end(ap);
        return s;
}

/* Real data: CRC and per-block CRCs of `size` random bytes. */
static uint32_t shard_crcs(uint64_t size, uint32_t block_size, uint32_t **blocks) {
        unsigned char *data = malloc(size ? size : 1);
        uint64_t nblocks = size ? (size - 1) / block_size + 1 : 0;
        *blocks = calloc(nblocks ? nblocks : 1, sizeof(uint32_t));
        if (!data || !*blocks) {
                fprintf(stderr, "out of memory\n");
                exit(1);
        }
        for (uint64_t i = 0; i < size; i++)
                data[i] = (unsigned char)(rng() >> 56);
        for (uint64_t b = 0; b < nblocks; b++) {
                uint64_t off = b * block_size;
                uint64_t len = size - off < block_size ? size - off : block_size;
                (*blocks)[b] = crc32c(0, data + off, len);
        }
        uint32_t crc = crc32c(0, data, size);
        free(data);
        return crc;
}

/* Synthetic block CRCs for shards too large to hold; the shard CRC is what
 * they combine to. */
static uint32_t shard_crcs_synthetic(uint64_t size, uint32_t block_size, uint32_t **blocks) {
        uint64_t nblocks = size ? (size - 1) / block_size + 1 : 0;
        uint32_t crc = 0;
        *blocks = calloc(nblocks ? nblocks : 1, sizeof(uint32_t));
        if (!*blocks)
                exit(1);
        for (uint64_t b = 0; b < nblocks; b++) {
                uint64_t len = b + 1 < nblocks ? block_size : size - b * block_size;
                (*blocks)[b] = (uint32_t)rng();
                crc = crc32c_combine(crc, (*blocks)[b], len);
        }
        return crc;
}

static bool manifests_equal(const struct manifest *a, const struct manifest *b) {
        if (strcmp(a->job, b->job) || a->step != b->step || a->rank != b->rank ||
            a->world_size != b->world_size || a->uid != b->uid ||
            a->block_size != b->block_size || a->nshards != b->nshards)
                return false;
        for (uint32_t i = 0; i < a->nshards; i++) {
                const struct manifest_shard *x = &a->shards[i], *y = &b->shards[i];
                if (strcmp(x->name, y->name) || x->size != y->size || x->crc32c != y->crc32c ||
                    x->nblocks != y->nblocks)
                        return false;
                if (x->nblocks &&
                    memcmp(x->block_crcs, y->block_crcs, x->nblocks * sizeof(uint32_t)))
                        return false;
        }
        return true;
}

/* Format, parse, compare, format again: the text must be a fixed point. */
static void round_trip(const struct manifest *m, const char *what) {
        char *text = NULL, *text2 = NULL;
        size_t len = 0, len2 = 0;
        struct manifest *back = NULL;

        int r = manifest_format(m, &text, &len);
        CHECK(r == 0, "%s: format %d", what, r);
        if (r < 0)
                return;
        CHECK(strlen(text) == len, "%s: length", what);
        r = manifest_parse(&back, text, len);
        CHECK(r == 0, "%s: parse %d", what, r);
        if (r == 0) {
                CHECK(manifests_equal(m, back), "%s: differs after round trip", what);
                r = manifest_format(back, &text2, &len2);
                CHECK(r == 0 && len2 == len && memcmp(text, text2, len) == 0,
                      "%s: second format differs", what);
                free(text2);
        }
        manifest_free(back);
        free(text);
}

static struct manifest *new_manifest(uint32_t block_size) {
        struct manifest *m = NULL;
        int r = manifest_new(&m, "llama-405b", 1000, 3, 8, 1000);
        CHECK(r == 0, "manifest_new %d", r);
        if (r < 0)
                exit(1);
        CHECK(m->block_size == MANIFEST_BLOCK_SIZE, "default block size %u", m->block_size);
        CHECK(m->nshards == 0 && manifest_bytes(m) == 0, "new manifest not empty");
        m->block_size = block_size;
        return m;
}

static void add_real(struct manifest *m, const char *name, uint64_t size) {
        uint32_t *blocks;
        uint32_t crc = shard_crcs(size, m->block_size, &blocks);
        int r = manifest_add_shard(m, name, size, crc, blocks);
        CHECK(r == 0, "add %s size %" PRIu64 ": %d", name, size, r);
        free(blocks);
}

static void test_exact_text(void) {
        struct manifest *m = new_manifest(4096);
        uint32_t *blocks;
        uint32_t crc = shard_crcs(5000, 4096, &blocks);
        CHECK(manifest_add_shard(m, "model.pt", 5000, crc, blocks) == 0, "add");
        CHECK(manifest_add_shard(m, "empty", 0, 0, NULL) == 0, "add empty");

        char *body = xasprintf("ckptd-manifest 1\n"
                               "job llama-405b\n"
                               "step 1000\n"
                               "rank 3\n"
                               "world_size 8\n"
                               "uid 1000\n"
                               "block_size 4096\n"
                               "shards 2\n"
                               "shard model.pt 5000 %08x\n"
                               "blocks %08x %08x\n"
                               "shard empty 0 00000000\n",
                               crc, blocks[0], blocks[1]);
        char *expect = xasprintf("%send %08x\n", body, crc32c(0, body, strlen(body)));
        char *text = NULL;
        size_t len = 0;
        CHECK(manifest_format(m, &text, &len) == 0, "format");
        CHECK(text && len == strlen(expect) && memcmp(text, expect, len) == 0,
              "text differs:\n%s\nexpected:\n%s", text ? text : "(null)", expect);
        free(text);
        free(expect);
        free(body);
        free(blocks);
        manifest_free(m);
}

/* The examples in docs/on-disk.md, byte for byte: the on-disk format must
 * not drift from its specification (or from files already on disks). */
static void test_documented_examples(void) {
        static const char manifest_doc[] = "ckptd-manifest 1\n"
                                           "job llama-405b\n"
                                           "step 1000\n"
                                           "rank 3\n"
                                           "world_size 8\n"
                                           "uid 1000\n"
                                           "block_size 4096\n"
                                           "shards 2\n"
                                           "shard model.pt 5000 83f68e3a\n"
                                           "blocks 719077fc 42c2a978\n"
                                           "shard empty 0 00000000\n"
                                           "end 73df8fce\n";
        static const char commit_doc[] = "ckptd-commit 1\n"
                                         "job llama-405b\n"
                                         "step 1000\n"
                                         "world_size 8\n"
                                         "ranks 4 0 1 5 7\n"
                                         "committed_at 1700000000\n"
                                         "end 75e1de89\n";
        unsigned char data[5000];
        for (int i = 0; i < 5000; i++)
                data[i] = (unsigned char)(i % 251);
        uint32_t blocks[2] = { crc32c(0, data, 4096), crc32c(0, data + 4096, 904) };
        struct manifest *m = new_manifest(4096);
        CHECK(manifest_add_shard(m, "model.pt", 5000, crc32c(0, data, 5000), blocks) == 0, "add");
        CHECK(manifest_add_shard(m, "empty", 0, 0, NULL) == 0, "add empty");
        char *text = NULL;
        size_t len = 0;
        CHECK(manifest_format(m, &text, &len) == 0 && len == strlen(manifest_doc) &&
                      memcmp(text, manifest_doc, len) == 0,
              "documented manifest example differs:\n%s", text ? text : "(null)");
        free(text);
        manifest_free(m);
        m = NULL;
        CHECK(manifest_parse(&m, manifest_doc, strlen(manifest_doc)) == 0 && m &&
                      m->nshards == 2 && m->shards[0].crc32c == 0x83f68e3au &&
                      m->shards[0].block_crcs[1] == 0x42c2a978u,
              "documented manifest example does not parse");
        manifest_free(m);

        uint32_t ranks[] = { 0, 1, 5, 7 };
        struct commit_record r = { .step = 1000, .world_size = 8, .nranks = 4, .ranks = ranks,
                                   .committed_at = 1700000000 };
        strcpy(r.job, "llama-405b");
        text = NULL;
        CHECK(commit_record_format(&r, &text, &len) == 0 && len == strlen(commit_doc) &&
                      memcmp(text, commit_doc, len) == 0,
              "documented commit example differs:\n%s", text ? text : "(null)");
        free(text);
        struct commit_record back;
        CHECK(commit_record_parse(&back, commit_doc, strlen(commit_doc)) == 0 &&
                      back.nranks == 4 && back.ranks[2] == 5 && back.committed_at == 1700000000,
              "documented commit example does not parse");
        commit_record_clear(&back);
}

static void test_round_trips(void) {
        /* Real data, 4 KiB blocks: empty, 1 byte, not a block multiple,
         * exact multiples, many blocks (more than one blocks line). */
        struct manifest *m = new_manifest(4096);
        static const uint64_t sizes[] = { 0, 1, 4095, 4096, 4097, 3 * 4096 + 5, 16 * 4096,
                                          16 * 4096 + 1, 100000, 33 * 4096 };
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
                char name[32];
                snprintf(name, sizeof(name), "shard-%zu.bin", i);
                add_real(m, name, sizes[i]);
                round_trip(m, name);
        }
        CHECK(m->nshards == sizeof(sizes) / sizeof(sizes[0]), "nshards %u", m->nshards);
        uint64_t total = 0;
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
                total += sizes[i];
        CHECK(manifest_bytes(m) == total, "bytes %" PRIu64, manifest_bytes(m));
        const struct manifest_shard *s = manifest_find(m, "shard-4.bin");
        CHECK(s && s->size == 4097 && s->nblocks == 2, "find shard-4.bin");
        CHECK(!manifest_find(m, "shard-99.bin"), "find missing");
        manifest_free(m);

        /* Default 1 MiB blocks with synthetic CRCs for big shards: 5 GiB is
         * 5120 blocks, 320 full blocks lines. */
        m = new_manifest(MANIFEST_BLOCK_SIZE);
        static const uint64_t big[] = { UINT64_C(5) << 30, 1, (UINT64_C(16) << 20),
                                        (UINT64_C(16) << 20) + 1, (UINT64_C(1) << 32) + 3 };
        for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
                uint32_t *blocks;
                char name[32];
                snprintf(name, sizeof(name), "big%zu", i);
                uint32_t crc = shard_crcs_synthetic(big[i], MANIFEST_BLOCK_SIZE, &blocks);
                CHECK(manifest_add_shard(m, name, big[i], crc, blocks) == 0, "add %s", name);
                free(blocks);
        }
        round_trip(m, "1 MiB blocks");
        char *text;
        size_t len;
        if (manifest_format(m, &text, &len) == 0) {
                size_t lines = 0, longest = 0, cur = 0;
                for (size_t i = 0; i < len; i++) {
                        cur++;
                        if (text[i] == '\n') {
                                lines++;
                                longest = cur > longest ? cur : longest;
                                cur = 0;
                        }
                }
                /* 9 fixed + 5 shard lines + blocks lines: 320 + 1 + 1 + 2 + 257. */
                CHECK(lines == 9 + 5 + 320 + 1 + 1 + 2 + 257, "lines %zu", lines);
                CHECK(longest <= 7 + 16 * 9, "longest line %zu", longest);
                free(text);
        }
        manifest_free(m);

        /* Many shards; order is kept. */
        m = new_manifest(4096);
        for (int i = 0; i < 2000; i++) {
                char name[32];
                snprintf(name, sizeof(name), "t%04d", 1999 - i);
                add_real(m, name, rng() % 9000);
        }
        round_trip(m, "2000 shards");
        CHECK(strcmp(m->shards[0].name, "t1999") == 0 && strcmp(m->shards[1999].name, "t0000") == 0,
              "order");
        for (int i = 0; i < 2000; i += 97) {
                char name[32];
                snprintf(name, sizeof(name), "t%04d", i);
                const struct manifest_shard *f = manifest_find(m, name);
                CHECK(f && f == &m->shards[1999 - i], "find %s", name);
        }
        manifest_free(m);

        /* Extremes of the identity fields; zero shards. */
        struct manifest *e = NULL;
        CHECK(manifest_new(&e, "a", CKPT_STEP_MAX, CKPT_WORLD_MAX - 1, CKPT_WORLD_MAX,
                           UINT32_MAX) == 0,
              "new extremes");
        if (e) {
                round_trip(e, "extremes, no shards");
                e->block_size = 1u << 30;
                round_trip(e, "1 GiB blocks");
                e->step = 0;
                e->rank = 0;
                e->world_size = 1;
                e->uid = 0;
                e->block_size = 4096;
                round_trip(e, "zeros");
                manifest_free(e);
        }
}

/* A valid manifest text for the damage tests: every line kind present. */
static char *valid_text(size_t *len) {
        struct manifest *m = new_manifest(4096);
        add_real(m, "model.pt", 17 * 4096 + 100); /* two blocks lines */
        add_real(m, "optim.pt", 1);
        add_real(m, "empty", 0);
        add_real(m, "rng-state", 4096);
        char *text = NULL;
        CHECK(manifest_format(m, &text, len) == 0, "format");
        manifest_free(m);
        if (!text)
                exit(1);
        return text;
}

static void expect_badmsg(const char *text, size_t len, const char *what) {
        struct manifest *m = NULL;
        int r = manifest_parse(&m, text, len);
        CHECK(r == -EBADMSG, "%s: parse returned %d", what, r);
        CHECK(!m || r == 0, "%s: output set on failure", what);
        manifest_free(m);
}

static void test_flips_and_truncation(void) {
        size_t len;
        char *text = valid_text(&len);
        char *buf = malloc(len + 2);
        static const unsigned char masks[] = { 0x01, 0x02, 0x04, 0x08, 0x10,
                                               0x20, 0x40, 0x80, 0xff };

        for (size_t i = 0; i < len; i++)
                for (size_t k = 0; k < sizeof(masks); k++) {
                        memcpy(buf, text, len);
                        buf[i] ^= (char)masks[k];
                        struct manifest *m = NULL;
                        int r = manifest_parse(&m, buf, len);
                        if (r == 0) {
                                /* Only acceptable if it is an equally valid
                                 * manifest, i.e. what we would write. */
                                char *again = NULL;
                                size_t alen = 0;
                                CHECK(manifest_format(m, &again, &alen) == 0 && alen == len &&
                                              memcmp(again, buf, len) == 0,
                                      "flip at %zu ^%02x accepted", i, masks[k]);
                                free(again);
                        } else {
                                CHECK(r == -EBADMSG, "flip at %zu ^%02x: %d", i, masks[k], r);
                        }
                        manifest_free(m);
                }

        for (size_t n = 0; n < len; n++)
                expect_badmsg(text, n, "truncated");
        /* Truncating just the newline, or a whole line and reattaching the
         * end line, also fails (the second by CRC). */
        memcpy(buf, text, len);
        buf[len] = '\n';
        expect_badmsg(buf, len + 1, "extra newline after end");
        buf[len] = 'x';
        expect_badmsg(buf, len + 1, "byte after end");
        memcpy(buf + len, "\0", 1);
        expect_badmsg(buf, len + 1, "NUL after end");
        /* Deleting or inserting a byte anywhere. */
        for (size_t i = 0; i < len; i++) {
                memcpy(buf, text, i);
                memcpy(buf + i, text + i + 1, len - i - 1);
                expect_badmsg(buf, len - 1, "deleted byte");
                memcpy(buf, text, i);
                buf[i] = i % 2 ? ' ' : '0';
                memcpy(buf + i + 1, text + i, len - i);
                expect_badmsg(buf, len + 1, "inserted byte");
        }
        expect_badmsg(NULL, 0, "NULL");
        free(buf);
        free(text);
}

/* Damage with a correct end line: replace the first `old` in the body of a
 * valid text by `new`, recompute the end line, and expect -EBADMSG. */
static void expect_bad_edit(const char *text, size_t len, const char *old, const char *new) {
        size_t body_len = len - 13;
        char *body = strndup(text, body_len);
        char *at = body ? strstr(body, old) : NULL;
        CHECK(at, "edit '%s' does not apply", old);
        if (!at) {
                free(body);
                return;
        }
        *at = '\0';
        char *edited = xasprintf("%s%s%s", body, new, at + strlen(old));
        char *sealed = xasprintf("%send %08x\n", edited, crc32c(0, edited, strlen(edited)));
        struct manifest *m = NULL;
        int r = manifest_parse(&m, sealed, strlen(sealed));
        CHECK(r == -EBADMSG, "edit '%s' -> '%s': parse %d", old, new, r);
        manifest_free(m);
        free(sealed);
        free(edited);
        free(body);
}

/* Same, but the edit must still parse (controls that the edit mechanism
 * itself is not what breaks the text). */
static void expect_good_edit(const char *text, size_t len, const char *old, const char *new) {
        char *body = strndup(text, len - 13);
        char *at = body ? strstr(body, old) : NULL;
        CHECK(at, "edit '%s' does not apply", old);
        if (!at) {
                free(body);
                return;
        }
        *at = '\0';
        char *edited = xasprintf("%s%s%s", body, new, at + strlen(old));
        char *sealed = xasprintf("%send %08x\n", edited, crc32c(0, edited, strlen(edited)));
        struct manifest *m = NULL;
        int r = manifest_parse(&m, sealed, strlen(sealed));
        CHECK(r == 0, "control edit '%s' -> '%s': parse %d", old, new, r);
        manifest_free(m);
        free(sealed);
        free(edited);
        free(body);
}

static void test_structural(void) {
        size_t len;
        char *t = valid_text(&len);

        expect_good_edit(t, len, "step 1000\n", "step 0\n");
        expect_good_edit(t, len, "uid 1000\n", "uid 4294967295\n");
        expect_good_edit(t, len, "step 1000\n", "step 9223372036854775807\n");
        expect_good_edit(t, len, "rank 3\n", "rank 7\n");
        expect_good_edit(t, len, "job llama-405b\n", "job a\n");

        /* Header lines. */
        expect_bad_edit(t, len, "ckptd-manifest 1\n", "ckptd-manifest 2\n");
        expect_bad_edit(t, len, "ckptd-manifest 1\n", "ckptd-manifest 1 \n");
        expect_bad_edit(t, len, "ckptd-manifest 1\n", "ckptd-commit 1\n");
        expect_bad_edit(t, len, "ckptd-manifest 1\n", "");
        expect_bad_edit(t, len, "job llama-405b\n", "job ..\n");
        expect_bad_edit(t, len, "job llama-405b\n", "job .\n");
        expect_bad_edit(t, len, "job llama-405b\n", "job a/b\n");
        expect_bad_edit(t, len, "job llama-405b\n", "job .hidden\n");
        expect_bad_edit(t, len, "job llama-405b\n", "job -x\n");
        expect_bad_edit(t, len, "job llama-405b\n", "job \n");
        expect_bad_edit(t, len, "job llama-405b\n", "job\n");
        expect_bad_edit(t, len, "job llama-405b\n", "job a b\n");
        expect_bad_edit(t, len, "job llama-405b\n", "job  llama-405b\n");
        expect_bad_edit(t, len, "job llama-405b\n", "job llama-405b \n");
        expect_bad_edit(t, len, "job llama-405b\n", "job\tllama-405b\n");
        expect_bad_edit(t, len, "job llama-405b\n", "job llama-405b\r\n");
        expect_bad_edit(t, len, "job llama-405b\n", "Job llama-405b\n");
        expect_bad_edit(t, len, "job llama-405b\n", " job llama-405b\n");
        expect_bad_edit(t, len, "job llama-405b\n", "job llama-405b\n\n");
        {
                char longname[300];
                memset(longname, 'n', 256);
                longname[256] = '\0';
                char *line = xasprintf("job %s\n", longname);
                expect_bad_edit(t, len, "job llama-405b\n", line);
                free(line);
                longname[255] = '\0';
                line = xasprintf("job %s\n", longname);
                expect_good_edit(t, len, "job llama-405b\n", line);
                free(line);
        }
        expect_bad_edit(t, len, "step 1000\n", "step 01000\n");
        expect_bad_edit(t, len, "step 1000\n", "step 00\n");
        expect_bad_edit(t, len, "step 1000\n", "step +1000\n");
        expect_bad_edit(t, len, "step 1000\n", "step -1\n");
        expect_bad_edit(t, len, "step 1000\n", "step 1e3\n");
        expect_bad_edit(t, len, "step 1000\n", "step 0x10\n");
        expect_bad_edit(t, len, "step 1000\n", "step \n");
        expect_bad_edit(t, len, "step 1000\n", "step 9223372036854775808\n");
        expect_bad_edit(t, len, "step 1000\n", "step 18446744073709551615\n");
        expect_bad_edit(t, len, "step 1000\n", "step 18446744073709551616\n");
        expect_bad_edit(t, len, "step 1000\n", "step 99999999999999999999999\n");
        expect_bad_edit(t, len, "step 1000\nrank 3\n", "rank 3\nstep 1000\n");
        expect_bad_edit(t, len, "rank 3\n", "rank 8\n");
        expect_bad_edit(t, len, "rank 3\n", "rank 03\n");
        expect_bad_edit(t, len, "rank 3\n", "rank 4294967296\n");
        expect_bad_edit(t, len, "world_size 8\n", "world_size 0\n");
        expect_bad_edit(t, len, "world_size 8\n", "world_size 2\n");
        expect_bad_edit(t, len, "world_size 8\n", "world_size 1048577\n");
        expect_bad_edit(t, len, "world_size 8\n", "worldsize 8\n");
        expect_bad_edit(t, len, "uid 1000\n", "uid 4294967296\n");
        expect_bad_edit(t, len, "uid 1000\n", "uid -1\n");
        expect_bad_edit(t, len, "uid 1000\n", "");
        expect_bad_edit(t, len, "uid 1000\n", "uid 1000\nuid 1000\n");
        expect_bad_edit(t, len, "uid 1000\n", "uid 1000\nextra 1\n");
        expect_bad_edit(t, len, "block_size 4096\n", "block_size 2048\n");
        expect_bad_edit(t, len, "block_size 4096\n", "block_size 4097\n");
        expect_bad_edit(t, len, "block_size 4096\n", "block_size 0\n");
        expect_bad_edit(t, len, "block_size 4096\n", "block_size 2147483648\n");
        expect_bad_edit(t, len, "block_size 4096\n", "block_size 8192\n"); /* blocks no longer fit */
        expect_bad_edit(t, len, "shards 4\n", "shards 3\n");
        expect_bad_edit(t, len, "shards 4\n", "shards 5\n");
        expect_bad_edit(t, len, "shards 4\n", "shards 04\n");
        expect_bad_edit(t, len, "shards 4\n", "shards 65537\n");
        expect_bad_edit(t, len, "shards 4\n", "shards 4294967300\n");

        /* Shard lines. */
        expect_bad_edit(t, len, "shard optim.pt", "shard model.pt"); /* duplicate */
        expect_bad_edit(t, len, "shard optim.pt", "shard ..");
        expect_bad_edit(t, len, "shard optim.pt", "shard a/b");
        expect_bad_edit(t, len, "shard optim.pt", "shard .optim.pt");
        expect_bad_edit(t, len, "shard optim.pt", "shard MANIFEST");
        expect_bad_edit(t, len, "shard optim.pt", "shard optim\\pt");
        expect_bad_edit(t, len, "shard optim.pt", "shard optim pt");
        expect_bad_edit(t, len, "shard optim.pt", "shard  optim.pt");
        expect_bad_edit(t, len, "shard optim.pt", "shards optim.pt");
        expect_bad_edit(t, len, "shard empty 0 00000000\n", "shard empty 00 00000000\n");
        expect_bad_edit(t, len, "shard empty 0 00000000\n", "shard empty 0 0000000\n");
        expect_bad_edit(t, len, "shard empty 0 00000000\n", "shard empty 0 000000000\n");
        expect_bad_edit(t, len, "shard empty 0 00000000\n", "shard empty 0 00000001\n");
        expect_bad_edit(t, len, "shard empty 0 00000000\n", "shard empty 0 0000000g\n");
        expect_bad_edit(t, len, "shard empty 0 00000000\n", "shard empty 0\n");
        expect_bad_edit(t, len, "shard empty 0 00000000\n", "shard empty 0 00000000 x\n");
        expect_bad_edit(t, len, "shard empty 0 00000000\n", "shard empty 0 00000000\nblocks\n");
        expect_bad_edit(t, len, "shard empty 0 00000000\n",
                        "shard empty 0 00000000\nblocks 00000000\n");
        expect_bad_edit(t, len, "shard empty 0 00000000\n", "shard empty 1 00000000\n");
        /* A size the file cannot back with block CRCs: must fail fast,
         * not allocate 1 GiB of block CRCs. */
        expect_bad_edit(t, len, "shard empty 0 00000000\n", "shard empty 1125899906842624 00000000\n");
        expect_bad_edit(t, len, "shard empty 0 00000000\n", "shard empty 1125899906842625 00000000\n");
        expect_bad_edit(t, len, "shard empty 0 00000000\n",
                        "shard empty 18446744073709551616 00000000\n");

        free(t);

        /* Edits that need the real CRC values: build the text again and
         * change block CRCs and counts line by line. */
        struct manifest *m = new_manifest(4096);
        add_real(m, "one", 100);
        add_real(m, "multi", 17 * 4096 + 100);
        char *text = NULL;
        size_t tlen = 0;
        CHECK(manifest_format(m, &text, &tlen) == 0, "format");
        const struct manifest_shard *one = manifest_find(m, "one");
        const struct manifest_shard *multi = manifest_find(m, "multi");
        char old[200], new[256];

        /* Wrong block CRC (one bit), wrong shard CRC, upper-case hex. */
        snprintf(old, sizeof(old), "blocks %08x\n", one->block_crcs[0]);
        snprintf(new, sizeof(new), "blocks %08x\n", one->block_crcs[0] ^ 1);
        expect_bad_edit(text, tlen, old, new);
        snprintf(new, sizeof(new), "blocks %08X\n", one->block_crcs[0]);
        if (strcmp(old, new) != 0)
                expect_bad_edit(text, tlen, old, new);
        snprintf(new, sizeof(new), "blocks  %08x\n", one->block_crcs[0]);
        expect_bad_edit(text, tlen, old, new);
        snprintf(new, sizeof(new), "blocks %08x \n", one->block_crcs[0]);
        expect_bad_edit(text, tlen, old, new);
        snprintf(new, sizeof(new), "blocks %08x %08x\n", one->block_crcs[0], one->block_crcs[0]);
        expect_bad_edit(text, tlen, old, new);
        snprintf(new, sizeof(new), "block %08x\n", one->block_crcs[0]);
        expect_bad_edit(text, tlen, old, new);
        expect_bad_edit(text, tlen, old, "");
        snprintf(old, sizeof(old), "shard one 100 %08x\n", one->crc32c);
        snprintf(new, sizeof(new), "shard one 100 %08x\n", one->crc32c ^ 0x80000000u);
        expect_bad_edit(text, tlen, old, new);
        /* (A size change within the last block keeps every CRC consistent;
         * only the end line catches that, so change the block count.) */
        snprintf(new, sizeof(new), "shard one 4097 %08x\n", one->crc32c);
        expect_bad_edit(text, tlen, old, new);
        snprintf(new, sizeof(new), "shard one 0100 %08x\n", one->crc32c);
        expect_bad_edit(text, tlen, old, new);

        /* Block lines of the 18-block shard: 16 then 2.  Moving one CRC from
         * the first line to the second keeps every value but breaks the
         * layout. */
        snprintf(old, sizeof(old), " %08x\nblocks %08x", multi->block_crcs[15], multi->block_crcs[16]);
        snprintf(new, sizeof(new), "\nblocks %08x %08x", multi->block_crcs[15], multi->block_crcs[16]);
        expect_bad_edit(text, tlen, old, new);
        snprintf(new, sizeof(new), " %08x %08x\nblocks", multi->block_crcs[15], multi->block_crcs[16]);
        expect_bad_edit(text, tlen, old, new);
        /* Swapping two blocks: same multiset, wrong combine. */
        snprintf(old, sizeof(old), "%08x %08x\n", multi->block_crcs[16], multi->block_crcs[17]);
        snprintf(new, sizeof(new), "%08x %08x\n", multi->block_crcs[17], multi->block_crcs[16]);
        if (multi->block_crcs[16] != multi->block_crcs[17])
                expect_bad_edit(text, tlen, old, new);
        /* Dropping the last block line, and adding one too many. */
        snprintf(old, sizeof(old), "blocks %08x %08x\n", multi->block_crcs[16], multi->block_crcs[17]);
        expect_bad_edit(text, tlen, old, "");
        snprintf(new, sizeof(new), "%sblocks 00000000\n", old);
        expect_bad_edit(text, tlen, old, new);

        free(text);
        manifest_free(m);
}

/* Whole bodies written by hand, sealed with a correct end line. */
static int parse_body(const char *body) {
        char *sealed = xasprintf("%send %08x\n", body, crc32c(0, body, strlen(body)));
        struct manifest *m = NULL;
        int r = manifest_parse(&m, sealed, strlen(sealed));
        manifest_free(m);
        free(sealed);
        return r;
}

static void test_block_sizes(void) {
        static const struct {
                const char *value;
                int expect;
        } cases[] = {
                { "4096", 0 },        { "8192", 0 },         { "1048576", 0 },
                { "1073741824", 0 },  { "2048", -EBADMSG },  { "12288", -EBADMSG },
                { "1048577", -EBADMSG }, { "2147483648", -EBADMSG }, { "0", -EBADMSG },
                { "3221225472", -EBADMSG }, { "04096", -EBADMSG },
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char *body = xasprintf("ckptd-manifest 1\njob j\nstep 1\nrank 0\nworld_size 1\n"
                                       "uid 0\nblock_size %s\nshards 1\nshard e 0 00000000\n",
                                       cases[i].value);
                int r = parse_body(body);
                CHECK(r == cases[i].expect, "block_size %s: %d", cases[i].value, r);
                free(body);
        }
        CHECK(parse_body("") == -EBADMSG, "empty body");
        CHECK(parse_body("ckptd-manifest 1\n") == -EBADMSG, "magic only");
}

/* 65536 shards is the limit: parse accepts it and add_shard then says
 * -E2BIG; 65537 is rejected.  Texts are built directly (fast). */
static void test_shard_limit(void) {
        for (uint32_t n = MANIFEST_SHARDS_MAX; n <= MANIFEST_SHARDS_MAX + 1; n++) {
                size_t cap = 256 + (size_t)n * 40, len;
                char *body = malloc(cap);
                if (!body)
                        exit(1);
                len = (size_t)snprintf(body, cap,
                                       "ckptd-manifest 1\njob j\nstep 1\nrank 0\nworld_size 1\n"
                                       "uid 0\nblock_size 1048576\nshards %u\n",
                                       n);
                for (uint32_t i = 0; i < n; i++)
                        len += (size_t)snprintf(body + len, cap - len, "shard s%u 0 00000000\n", i);
                len += (size_t)snprintf(body + len, cap - len, "end %08x\n", crc32c(0, body, len));
                struct manifest *m = NULL;
                int r = manifest_parse(&m, body, len);
                if (n == MANIFEST_SHARDS_MAX) {
                        CHECK(r == 0, "parse %u shards: %d", n, r);
                        if (m) {
                                CHECK(m->nshards == n, "nshards");
                                r = manifest_add_shard(m, "one-more", 0, 0, NULL);
                                CHECK(r == -E2BIG, "add past limit: %d", r);
                                r = manifest_add_shard(m, "s65535", 0, 0, NULL);
                                CHECK(r == -EEXIST, "duplicate of last: %d", r);
                        }
                } else {
                        CHECK(r == -EBADMSG, "parse %u shards: %d", n, r);
                }
                manifest_free(m);
                free(body);
        }
}

static void test_add_shard_errors(void) {
        struct manifest *m = new_manifest(4096);
        uint32_t *blocks;
        uint32_t crc = shard_crcs(10000, 4096, &blocks); /* 3 blocks */
        char longname[300];

        memset(longname, 'x', 256);
        longname[256] = '\0';
        CHECK(manifest_add_shard(m, "..", 10000, crc, blocks) == -EINVAL, "..");
        CHECK(manifest_add_shard(m, ".", 10000, crc, blocks) == -EINVAL, ".");
        CHECK(manifest_add_shard(m, "a/b", 10000, crc, blocks) == -EINVAL, "a/b");
        CHECK(manifest_add_shard(m, "", 10000, crc, blocks) == -EINVAL, "empty name");
        CHECK(manifest_add_shard(m, NULL, 10000, crc, blocks) == -EINVAL, "NULL name");
        CHECK(manifest_add_shard(m, "a b", 10000, crc, blocks) == -EINVAL, "space");
        CHECK(manifest_add_shard(m, "a\nb", 10000, crc, blocks) == -EINVAL, "newline");
        CHECK(manifest_add_shard(m, MANIFEST_FILE, 10000, crc, blocks) == -EINVAL, "MANIFEST");
        CHECK(manifest_add_shard(m, "manifest", 0, 0, NULL) == 0, "manifest (lower case)");
        CHECK(manifest_add_shard(m, longname, 10000, crc, blocks) == -EINVAL, "256 chars");
        longname[255] = '\0';
        CHECK(manifest_add_shard(m, longname, 10000, crc, blocks) == 0, "255 chars");
        CHECK(manifest_add_shard(m, "w", 10000, crc, blocks) == 0, "add w");
        CHECK(manifest_add_shard(m, "w", 10000, crc, blocks) == -EEXIST, "duplicate");
        CHECK(manifest_add_shard(m, "w", 0, 0, NULL) == -EEXIST, "duplicate, other size");
        /* Block CRCs that do not combine to the CRC, or are missing. */
        CHECK(manifest_add_shard(m, "x", 10000, crc ^ 1, blocks) == -EINVAL, "wrong crc");
        CHECK(manifest_add_shard(m, "x", 10001, crc, blocks) == -EINVAL, "wrong size");
        CHECK(manifest_add_shard(m, "x", 10000, crc, NULL) == -EINVAL, "no block crcs");
        CHECK(manifest_add_shard(m, "x", 0, 1, NULL) == -EINVAL, "empty shard, crc 1");
        CHECK(manifest_add_shard(m, "x", CKPT_SHARD_SIZE_MAX + 1, 0, NULL) == -EINVAL,
              "too large");
        CHECK(m->nshards == 3, "failed adds changed the manifest: %u", m->nshards);
        CHECK(!manifest_find(m, "x"), "x added");
        CHECK(manifest_add_shard(m, "x", 10000, crc, blocks) == 0, "x");
        CHECK(m->nshards == 4 && manifest_bytes(m) == 30000, "four shards");
        round_trip(m, "after errors");

        /* manifest_new validation. */
        struct manifest *n = NULL;
        CHECK(manifest_new(&n, "..", 1, 0, 1, 0) == -EINVAL && !n, "job ..");
        CHECK(manifest_new(&n, "a/b", 1, 0, 1, 0) == -EINVAL && !n, "job a/b");
        CHECK(manifest_new(&n, "", 1, 0, 1, 0) == -EINVAL && !n, "job empty");
        CHECK(manifest_new(&n, NULL, 1, 0, 1, 0) == -EINVAL && !n, "job NULL");
        CHECK(manifest_new(&n, longname, 1, 0, 1, 0) == 0 && n, "job 255 chars");
        n = manifest_free(n);
        CHECK(manifest_new(&n, "j", 1, 1, 1, 0) == -EINVAL && !n, "rank == world_size");
        CHECK(manifest_new(&n, "j", 1, 0, 0, 0) == -EINVAL && !n, "world_size 0");
        CHECK(manifest_new(&n, "j", (uint64_t)CKPT_STEP_MAX + 1, 0, 1, 0) == -EINVAL && !n,
              "step too large");
        CHECK(manifest_free(NULL) == NULL, "free NULL");

        /* A struct edited by hand into something unreadable is refused by
         * format instead of being written. */
        char *text = NULL;
        size_t len = 0;
        strcpy(m->shards[3].name, "w");
        CHECK(manifest_format(m, &text, &len) == -EINVAL && !text, "format duplicate");
        strcpy(m->shards[3].name, MANIFEST_FILE);
        CHECK(manifest_format(m, &text, &len) == -EINVAL && !text, "format MANIFEST");
        strcpy(m->shards[3].name, "x");
        m->shards[3].nblocks = 2;
        CHECK(manifest_format(m, &text, &len) == -EINVAL && !text, "format nblocks");
        m->shards[3].nblocks = 3;
        m->block_size = 3000;
        CHECK(manifest_format(m, &text, &len) == -EINVAL && !text, "format block_size");
        m->block_size = 4096;
        CHECK(manifest_format(m, &text, &len) == 0, "format restored");
        free(text);

        free(blocks);
        manifest_free(m);
}

/* ---- commit records ---------------------------------------------------- */

static void commit_round_trip(const struct commit_record *r, const char *what) {
        char *text = NULL;
        size_t len = 0;
        int ret = commit_record_format(r, &text, &len);
        CHECK(ret == 0, "%s: format %d", what, ret);
        if (ret < 0)
                return;
        struct commit_record back;
        ret = commit_record_parse(&back, text, len);
        CHECK(ret == 0, "%s: parse %d", what, ret);
        if (ret == 0) {
                CHECK(strcmp(back.job, r->job) == 0 && back.step == r->step &&
                              back.world_size == r->world_size && back.nranks == r->nranks &&
                              back.committed_at == r->committed_at &&
                              (r->nranks == 0 ||
                               memcmp(back.ranks, r->ranks, r->nranks * sizeof(uint32_t)) == 0),
                      "%s: differs", what);
                commit_record_clear(&back);
                CHECK(back.ranks == NULL && back.nranks == 0, "clear");
        }
        free(text);
}

static void commit_expect_bad(const char *body, const char *what) {
        char *sealed = xasprintf("%send %08x\n", body, crc32c(0, body, strlen(body)));
        struct commit_record r;
        int ret = commit_record_parse(&r, sealed, strlen(sealed));
        CHECK(ret == -EBADMSG, "%s: parse %d", what, ret);
        CHECK(r.ranks == NULL && r.nranks == 0, "%s: ranks left on failure", what);
        if (ret == 0)
                commit_record_clear(&r);
        free(sealed);
}

static void commit_expect_good(const char *body, const char *what) {
        char *sealed = xasprintf("%send %08x\n", body, crc32c(0, body, strlen(body)));
        struct commit_record r;
        int ret = commit_record_parse(&r, sealed, strlen(sealed));
        CHECK(ret == 0, "%s: parse %d", what, ret);
        commit_record_clear(&r);
        free(sealed);
}

static void test_commit_record(void) {
        uint32_t ranks[] = { 0, 1, 5, 7 };
        struct commit_record r = { .step = 1000, .world_size = 8, .nranks = 4,
                                   .ranks = ranks, .committed_at = 1700000000 };
        strcpy(r.job, "llama-405b");

        /* Exact text. */
        char *text = NULL;
        size_t len = 0;
        CHECK(commit_record_format(&r, &text, &len) == 0, "format");
        const char *body = "ckptd-commit 1\n"
                           "job llama-405b\n"
                           "step 1000\n"
                           "world_size 8\n"
                           "ranks 4 0 1 5 7\n"
                           "committed_at 1700000000\n";
        char *expect = xasprintf("%send %08x\n", body, crc32c(0, body, strlen(body)));
        CHECK(text && len == strlen(expect) && memcmp(text, expect, len) == 0,
              "commit text:\n%s\nexpected:\n%s", text ? text : "(null)", expect);
        free(expect);

        commit_round_trip(&r, "basic");
        /* Flips and truncation. */
        char *buf = malloc(len);
        for (size_t i = 0; i < len; i++)
                for (int bit = 0; bit < 8; bit++) {
                        memcpy(buf, text, len);
                        buf[i] ^= (char)(1 << bit);
                        struct commit_record b;
                        int ret = commit_record_parse(&b, buf, len);
                        CHECK(ret == -EBADMSG, "commit flip %zu bit %d: %d", i, bit, ret);
                        if (ret == 0)
                                commit_record_clear(&b);
                }
        for (size_t n = 0; n < len; n++) {
                struct commit_record b;
                int ret = commit_record_parse(&b, text, n);
                CHECK(ret == -EBADMSG, "commit truncated to %zu: %d", n, ret);
                if (ret == 0)
                        commit_record_clear(&b);
        }
        free(buf);
        free(text);

        /* No ranks; one rank; a full large world. */
        r.nranks = 0;
        r.ranks = NULL;
        commit_round_trip(&r, "no ranks");
        r.nranks = 1;
        r.ranks = &ranks[3];
        commit_round_trip(&r, "one rank");
        uint32_t *all = malloc(CKPT_WORLD_MAX * sizeof(uint32_t));
        for (uint32_t i = 0; i < CKPT_WORLD_MAX; i++)
                all[i] = i;
        r.world_size = CKPT_WORLD_MAX;
        r.nranks = CKPT_WORLD_MAX;
        r.ranks = all;
        r.step = CKPT_STEP_MAX;
        r.committed_at = INT64_MAX;
        commit_round_trip(&r, "every rank of the largest world");
        free(all);

        /* Format refuses what parse would refuse. */
        uint32_t unsorted[] = { 3, 1 }, dup[] = { 1, 1 }, big[] = { 1, 8 };
        struct commit_record bad = { .step = 1, .world_size = 8, .nranks = 2, .ranks = unsorted };
        strcpy(bad.job, "j");
        CHECK(commit_record_format(&bad, &text, &len) == -EINVAL, "unsorted");
        bad.ranks = dup;
        CHECK(commit_record_format(&bad, &text, &len) == -EINVAL, "duplicate rank");
        bad.ranks = big;
        CHECK(commit_record_format(&bad, &text, &len) == -EINVAL, "rank >= world_size");
        bad.ranks = ranks;
        bad.committed_at = -1;
        CHECK(commit_record_format(&bad, &text, &len) == -EINVAL, "negative time");
        bad.committed_at = 0;
        bad.world_size = 0;
        CHECK(commit_record_format(&bad, &text, &len) == -EINVAL, "world_size 0");
        bad.world_size = 8;
        strcpy(bad.job, "a/b");
        CHECK(commit_record_format(&bad, &text, &len) == -EINVAL, "bad job");
        strcpy(bad.job, "j");
        CHECK(commit_record_format(&bad, &text, &len) == 0, "control");
        free(text);

        /* Parse rejections with a correct end line. */
        const char *h = "ckptd-commit 1\njob j\nstep 5\nworld_size 8\n";
        char *s;
#define BAD(...)                                    \
        s = xasprintf(__VA_ARGS__);                 \
        commit_expect_bad(s, s);                    \
        free(s)
        s = xasprintf("%sranks 2 0 7\ncommitted_at 0\n", h);
        commit_expect_good(s, "control");
        free(s);
        BAD("%sranks 2 7 0\ncommitted_at 0\n", h);
        BAD("%sranks 2 3 3\ncommitted_at 0\n", h);
        BAD("%sranks 2 0 8\ncommitted_at 0\n", h);
        BAD("%sranks 3 0 7\ncommitted_at 0\n", h);
        BAD("%sranks 1 0 7\ncommitted_at 0\n", h);
        BAD("%sranks 9 0 1 2 3 4 5 6 7 7\ncommitted_at 0\n", h);
        BAD("%sranks 2 0 07\ncommitted_at 0\n", h);
        BAD("%sranks 02 0 7\ncommitted_at 0\n", h);
        BAD("%sranks 2 0  7\ncommitted_at 0\n", h);
        BAD("%sranks 2 0 7 \ncommitted_at 0\n", h);
        BAD("%sranks 2 0 -7\ncommitted_at 0\n", h);
        BAD("%sranks 0 \ncommitted_at 0\n", h);
        BAD("%sranks\ncommitted_at 0\n", h);
        BAD("%sranks 4294967297 0\ncommitted_at 0\n", h);
        BAD("%sranks 2 0 7\ncommitted_at -1\n", h);
        BAD("%sranks 2 0 7\ncommitted_at 9223372036854775808\n", h);
        BAD("%sranks 2 0 7\ncommitted_at 01\n", h);
        BAD("%sranks 2 0 7\ncommitted_at 0\nextra 1\n", h);
        BAD("%scommitted_at 0\nranks 2 0 7\n", h);
        BAD("ckptd-commit 2\njob j\nstep 5\nworld_size 8\nranks 0\ncommitted_at 0\n");
        BAD("ckptd-manifest 1\njob j\nstep 5\nworld_size 8\nranks 0\ncommitted_at 0\n");
        BAD("ckptd-commit 1\njob ..\nstep 5\nworld_size 8\nranks 0\ncommitted_at 0\n");
        BAD("ckptd-commit 1\njob j\nstep 05\nworld_size 8\nranks 0\ncommitted_at 0\n");
        BAD("ckptd-commit 1\njob j\nstep 5\nworld_size 0\nranks 0\ncommitted_at 0\n");
        BAD("ckptd-commit 1\njob j\nstep 5\nworld_size 1048577\nranks 0\ncommitted_at 0\n");
        BAD("ckptd-commit 1\njob j\nworld_size 8\nstep 5\nranks 0\ncommitted_at 0\n");
#undef BAD
        struct commit_record z;
        CHECK(commit_record_parse(&z, NULL, 0) == -EBADMSG, "NULL text");
        commit_record_clear(NULL);
}

int main(void) {
        test_exact_text();
        test_documented_examples();
        test_round_trips();
        test_flips_and_truncation();
        test_structural();
        test_block_sizes();
        test_shard_limit();
        test_add_shard_errors();
        test_commit_record();

        if (failures) {
                fprintf(stderr, "%u check(s) failed\n", failures);
                return 1;
        }
        printf("all manifest tests passed\n");
        return 0;
}
