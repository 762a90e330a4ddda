/* SPDX-License-Identifier: MIT */
/*
 * Object-store keys, node manifests and commit objects: the exact keys, the
 * exact documented text, round trips, and rejection of every kind of damage —
 * truncation, trailing bytes, a wrong CRC, and structurally wrong documents
 * with a correct CRC line (so the strict parser, not the checksum, says no).
 *
 * A restore from the store trusts a step exactly when its commit object
 * parses and its node manifests do, so a parser that accepted a damaged or
 * inconsistent document would restore the wrong bytes, or a partial step.
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
#include "remote/objects.h"

#include "check.h"

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

/* body + a correct "crc32c" line: for structurally wrong documents that must
 * be refused by the parser itself. */
static char *resign(const char *body) {
        return xasprintf("%scrc32c %08x\n", body, crc32c(0, body, strlen(body)));
}

/* ---- keys -------------------------------------------------------------- */

static void test_keys(void) {
        char k[OBJECT_KEY_MAX + 1];
        int r;

        r = object_key_shard(k, sizeof(k), "", "llama-405b", 1000, 3, "model.pt");
        CHECK(r == 0 && strcmp(k, "jobs/llama-405b/steps/00000000000000001000/ranks/3/model.pt") == 0,
              "shard key %d '%s'", r, k);
        r = object_key_shard(k, sizeof(k), "a/b", "llama-405b", 1000, 3, "model.pt");
        CHECK(r == 0 &&
                      strcmp(k, "a/b/jobs/llama-405b/steps/00000000000000001000/ranks/3/model.pt") == 0,
              "prefixed shard key %d '%s'", r, k);
        r = object_key_shard(k, sizeof(k), NULL, "j", 0, 0, "s");
        CHECK(r == 0 && strcmp(k, "jobs/j/steps/00000000000000000000/ranks/0/s") == 0,
              "NULL prefix %d '%s'", r, k);
        /* Names travel verbatim: the signer percent-encodes, not the key. */
        r = object_key_shard(k, sizeof(k), "ckpt", "a+b=c@d:e", 42, 1048575, "optim=state@0+x:y");
        CHECK(r == 0 &&
                      strcmp(k, "ckpt/jobs/a+b=c@d:e/steps/00000000000000000042/ranks/1048575/"
                                "optim=state@0+x:y") == 0,
              "special characters %d '%s'", r, k);
        r = object_key_shard(k, sizeof(k), "", "j", INT64_MAX, 7, "s");
        CHECK(r == 0 && strcmp(k, "jobs/j/steps/09223372036854775807/ranks/7/s") == 0,
              "largest step %d '%s'", r, k);

        r = object_key_node_manifest(k, sizeof(k), "", "j", 1000, 2);
        CHECK(r == 0 && strcmp(k, "jobs/j/steps/00000000000000001000/nodes/2.manifest") == 0,
              "node manifest key %d '%s'", r, k);
        r = object_key_node_manifest(k, sizeof(k), "a/b", "j", 1000, 65535);
        CHECK(r == 0 && strcmp(k, "a/b/jobs/j/steps/00000000000000001000/nodes/65535.manifest") == 0,
              "prefixed node manifest key %d '%s'", r, k);
        r = object_key_commit(k, sizeof(k), "", "j", 1000);
        CHECK(r == 0 && strcmp(k, "jobs/j/steps/00000000000000001000/COMMIT") == 0,
              "commit key %d '%s'", r, k);
        r = object_key_commit(k, sizeof(k), "a/b", "j", 1000);
        CHECK(r == 0 && strcmp(k, "a/b/jobs/j/steps/00000000000000001000/COMMIT") == 0,
              "prefixed commit key %d '%s'", r, k);
        r = object_key_step_dir(k, sizeof(k), "", "j", 1000);
        CHECK(r == 0 && strcmp(k, "jobs/j/steps/00000000000000001000/") == 0, "step dir %d '%s'",
              r, k);
        r = object_key_step_dir(k, sizeof(k), "a/b", "j", 1000);
        CHECK(r == 0 && strcmp(k, "a/b/jobs/j/steps/00000000000000001000/") == 0,
              "prefixed step dir %d '%s'", r, k);
        r = object_key_steps_dir(k, sizeof(k), "", "j");
        CHECK(r == 0 && strcmp(k, "jobs/j/steps/") == 0, "steps dir %d '%s'", r, k);
        r = object_key_steps_dir(k, sizeof(k), "a/b", "j");
        CHECK(r == 0 && strcmp(k, "a/b/jobs/j/steps/") == 0, "prefixed steps dir %d '%s'", r, k);

        /* Bad names and values: -EINVAL, and out left empty. */
        static const char *const bad_names[] = { "", ".hidden", "-dash", "a/b", "..", "a b", "é" };
        for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
                strcpy(k, "junk");
                r = object_key_shard(k, sizeof(k), "", bad_names[i], 1, 0, "s");
                CHECK(r == -EINVAL && k[0] == '\0', "job '%s': %d", bad_names[i], r);
                r = object_key_shard(k, sizeof(k), "", "j", 1, 0, bad_names[i]);
                CHECK(r == -EINVAL && k[0] == '\0', "shard '%s': %d", bad_names[i], r);
                CHECK(object_key_steps_dir(k, sizeof(k), "", bad_names[i]) == -EINVAL,
                      "steps dir of job '%s'", bad_names[i]);
                CHECK(object_key_commit(k, sizeof(k), "", bad_names[i], 1) == -EINVAL,
                      "commit of job '%s'", bad_names[i]);
        }
        char name256[257], name255[256];
        memset(name256, 'n', 256);
        name256[256] = '\0';
        memset(name255, 'n', 255);
        name255[255] = '\0';
        CHECK(object_key_shard(k, sizeof(k), "", name256, 1, 0, "s") == -EINVAL, "256-byte job");
        CHECK(object_key_shard(k, sizeof(k), "", "j", 1, 0, name256) == -EINVAL, "256-byte shard");
        CHECK(object_key_shard(k, sizeof(k), "", name255, 1, 0, name255) == 0,
              "255-byte job and shard");
        CHECK(object_key_shard(k, sizeof(k), "", "j", (uint64_t)INT64_MAX + 1, 0, "s") == -EINVAL,
              "step > INT64_MAX");
        CHECK(object_key_step_dir(k, sizeof(k), "", "j", UINT64_MAX) == -EINVAL, "step UINT64_MAX");
        CHECK(object_key_shard(k, sizeof(k), "", "j", 1, CKPT_WORLD_MAX, "s") == -EINVAL,
              "rank CKPT_WORLD_MAX");
        CHECK(object_key_node_manifest(k, sizeof(k), "", "j", 1, OBJECT_NODE_COUNT_MAX) == -EINVAL,
              "node OBJECT_NODE_COUNT_MAX");
        CHECK(object_key_commit(NULL, 10, "", "j", 1) == -EINVAL, "NULL out");

        /* Too long: the buffer, then OBJECT_KEY_MAX itself. */
        const char *want = "jobs/j/steps/00000000000000000001/COMMIT";
        size_t n = strlen(want);
        CHECK(object_key_commit(k, n + 1, "", "j", 1) == 0 && strcmp(k, want) == 0,
              "exactly fitting buffer");
        strcpy(k, "junk");
        r = object_key_commit(k, n, "", "j", 1);
        CHECK(r == -ENAMETOOLONG && k[0] == '\0', "buffer one byte short: %d", r);
        CHECK(object_key_commit(k, 0, "", "j", 1) == -ENAMETOOLONG, "empty buffer");

        char big[4096], prefix[OBJECT_KEY_MAX + 1];
        /* prefix + "/" + want is exactly OBJECT_KEY_MAX bytes: allowed. */
        size_t plen = OBJECT_KEY_MAX - 1 - n;
        memset(prefix, 'p', plen);
        prefix[plen] = '\0';
        r = object_key_commit(big, sizeof(big), prefix, "j", 1);
        CHECK(r == 0 && strlen(big) == OBJECT_KEY_MAX, "key of OBJECT_KEY_MAX bytes: %d", r);
        prefix[plen] = 'p';
        prefix[plen + 1] = '\0';
        strcpy(big, "junk");
        r = object_key_commit(big, sizeof(big), prefix, "j", 1);
        CHECK(r == -ENAMETOOLONG && big[0] == '\0', "key of OBJECT_KEY_MAX + 1 bytes: %d", r);
        r = object_key_shard(big, sizeof(big), "", name255, 1, 0, name255);
        CHECK(r == 0, "long names fit: %d", r);
        r = object_key_shard(big, sizeof(big), prefix, name255, 1, 0, name255);
        CHECK(r == -ENAMETOOLONG, "long prefix and names: %d", r);
}

static void test_parse_step_dir(void) {
        char dir[OBJECT_KEY_MAX + 1], k[OBJECT_KEY_MAX + 1];
        uint64_t step;
        int r;

        CHECK(object_key_steps_dir(dir, sizeof(dir), "a/b", "j") == 0, "steps dir");
        static const uint64_t steps[] = { 0, 1, 1000, 123456789012345678ull, INT64_MAX };
        for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
                CHECK(object_key_step_dir(k, sizeof(k), "a/b", "j", steps[i]) == 0, "step dir");
                step = 77;
                r = object_key_parse_step_dir(dir, k, &step);
                CHECK(r == 0 && step == steps[i], "parse '%s': %d %" PRIu64, k, r, step);
        }
        r = object_key_parse_step_dir("jobs/j/steps/", "jobs/j/steps/00000000000000001000/", &step);
        CHECK(r == 0 && step == 1000, "no prefix: %d %" PRIu64, r, step);

        static const char *const bad[] = {
                "a/b/jobs/j/steps/0000000000000001000/",   /* 19 digits */
                "a/b/jobs/j/steps/000000000000000001000/", /* 21 digits */
                "a/b/jobs/j/steps/00000000000000001000",   /* no '/' */
                "a/b/jobs/j/steps/00000000000000001000/x", /* more after it */
                "a/b/jobs/j/steps/00000000000000001000//",
                "a/b/jobs/j/steps/0000000000000000100a/",
                "a/b/jobs/j/steps/-0000000000000001000/",
                "a/b/jobs/j/steps/+0000000000000001000/",
                "a/b/jobs/j/steps/ 0000000000000001000/",
                "a/b/jobs/j/steps/09223372036854775808/", /* INT64_MAX + 1 */
                "a/b/jobs/j/steps/18446744073709551616/", /* UINT64_MAX + 1 */
                "a/b/jobs/j/steps/99999999999999999999/",
                "a/b/jobs/j/steps/",
                "a/b/jobs/j/steps",
                "a/b/jobs/k/steps/00000000000000001000/", /* another job */
                "jobs/j/steps/00000000000000001000/",     /* no prefix */
                "",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                step = 77;
                r = object_key_parse_step_dir(dir, bad[i], &step);
                CHECK(r == -EINVAL && step == 77, "'%s' parsed: %d", bad[i], r);
        }
        CHECK(object_key_parse_step_dir(NULL, "x", &step) == -EINVAL, "NULL steps_dir");
        CHECK(object_key_parse_step_dir(dir, NULL, &step) == -EINVAL, "NULL key");
}

/* ---- manifests to put in node manifests -------------------------------- */

/* A rank manifest with real CRCs of synthetic bytes: an empty shard, a
 * one-block shard and a shard of 21 blocks (two "blocks" lines). */
static struct manifest *rank_manifest(const char *job, uint64_t step, uint32_t rank,
                                      uint32_t world_size, int nshards) {
        static const struct {
                const char *name;
                uint64_t size;
        } shards[] = {
                { "model.pt", 5000 },
                { "empty", 0 },
                { "optim=state@0", 20 * 4096 + 17 },
        };
        struct manifest *m = NULL;
        int r = manifest_new(&m, job, step, rank, world_size, 1000);
        if (r < 0) {
                fprintf(stderr, "manifest_new: %d\n", r);
                exit(1);
        }
        m->block_size = 4096;
        for (int i = 0; i < nshards && i < 3; i++) {
                static unsigned char data[21 * 4096];
                uint32_t blocks[21];
                uint64_t size = shards[i].size, nb = size ? (size - 1) / 4096 + 1 : 0;
                for (uint64_t b = 0; b < size; b++)
                        data[b] = (unsigned char)(b * 31 + rank * 7 + (uint64_t)i);
                for (uint64_t b = 0; b < nb; b++)
                        blocks[b] = crc32c(0, data + b * 4096, b + 1 < nb ? 4096 : size - b * 4096);
                r = manifest_add_shard(m, shards[i].name, size, crc32c(0, data, size), blocks);
                if (r < 0) {
                        fprintf(stderr, "manifest_add_shard: %d\n", r);
                        exit(1);
                }
        }
        return m;
}

static char *manifest_text(const struct manifest *m) {
        char *t = NULL;
        size_t len;
        if (manifest_format(m, &t, &len) < 0)
                exit(1);
        return t;
}

static bool manifests_equal(const struct manifest *a, const struct manifest *b) {
        char *x = manifest_text(a), *y = manifest_text(b);
        bool eq = strcmp(x, y) == 0;
        free(x);
        free(y);
        return eq;
}

static bool node_manifests_equal(const struct node_manifest *a, const struct node_manifest *b) {
        if (strcmp(a->job, b->job) || a->step != b->step || a->node != b->node ||
            a->node_count != b->node_count || a->world_size != b->world_size ||
            a->nranks != b->nranks)
                return false;
        for (uint32_t i = 0; i < a->nranks; i++)
                if (!manifests_equal(a->ranks[i], b->ranks[i]))
                        return false;
        return true;
}

static struct node_manifest *new_node(const char *job, uint64_t step, uint32_t node,
                                      uint32_t node_count, uint32_t world_size) {
        struct node_manifest *nm = NULL;
        int r = node_manifest_new(&nm, job, step, node, node_count, world_size);
        if (r < 0) {
                fprintf(stderr, "node_manifest_new: %d\n", r);
                exit(1);
        }
        return nm;
}

static void add(struct node_manifest *nm, uint32_t rank, int nshards) {
        struct manifest *m = rank_manifest(nm->job, nm->step, rank, nm->world_size, nshards);
        int r = node_manifest_add_rank(nm, m);
        CHECK(r == 0, "add rank %u: %d", rank, r);
        if (r < 0)
                manifest_free(m);
}

/* ---- node manifest ----------------------------------------------------- */

static void test_node_manifest_new(void) {
        struct node_manifest *nm = NULL;

        CHECK(node_manifest_new(&nm, "j", 1, 0, 1, 1) == 0 && nm && nm->nranks == 0, "minimal");
        nm = node_manifest_free(nm);
        CHECK(nm == NULL && node_manifest_free(NULL) == NULL, "free returns NULL");
        CHECK(node_manifest_new(&nm, "j", INT64_MAX, 65535, 65536, CKPT_WORLD_MAX) == 0, "largest");
        nm = node_manifest_free(nm);
        CHECK(node_manifest_new(&nm, "../j", 1, 0, 1, 1) == -EINVAL, "bad job");
        CHECK(node_manifest_new(&nm, NULL, 1, 0, 1, 1) == -EINVAL, "NULL job");
        CHECK(node_manifest_new(&nm, "j", (uint64_t)INT64_MAX + 1, 0, 1, 1) == -EINVAL, "step");
        CHECK(node_manifest_new(&nm, "j", 1, 1, 1, 1) == -EINVAL, "node == node_count");
        CHECK(node_manifest_new(&nm, "j", 1, 0, 0, 1) == -EINVAL, "node_count 0");
        CHECK(node_manifest_new(&nm, "j", 1, 0, 65537, 1) == -EINVAL, "node_count > max");
        CHECK(node_manifest_new(&nm, "j", 1, 0, 1, 0) == -EINVAL, "world_size 0");
        CHECK(node_manifest_new(&nm, "j", 1, 0, 1, CKPT_WORLD_MAX + 1) == -EINVAL, "world > max");
        CHECK(node_manifest_new(NULL, "j", 1, 0, 1, 1) == -EINVAL, "NULL out");
        CHECK(nm == NULL, "out untouched on failure");
}

static void test_node_manifest_add(void) {
        struct node_manifest *nm = new_node("llama-405b", 1000, 1, 2, 8);

        /* Out of order: kept sorted. */
        add(nm, 5, 3);
        add(nm, 1, 0);
        add(nm, 3, 2);
        add(nm, 7, 1);
        CHECK(nm->nranks == 4 && nm->ranks[0]->rank == 1 && nm->ranks[1]->rank == 3 &&
                      nm->ranks[2]->rank == 5 && nm->ranks[3]->rank == 7,
              "ranks not sorted");
        CHECK(node_manifest_find(nm, 3) == nm->ranks[1] && node_manifest_find(nm, 7) == nm->ranks[3] &&
                      node_manifest_find(nm, 1) == nm->ranks[0],
              "find");
        CHECK(!node_manifest_find(nm, 0) && !node_manifest_find(nm, 2) &&
                      !node_manifest_find(nm, 8) && !node_manifest_find(NULL, 1),
              "find absent");

        struct manifest *m = rank_manifest("llama-405b", 1000, 3, 8, 0);
        CHECK(node_manifest_add_rank(nm, m) == -EEXIST, "duplicate rank");
        manifest_free(m); /* still ours: not taken on failure */
        m = rank_manifest("other", 1000, 2, 8, 0);
        CHECK(node_manifest_add_rank(nm, m) == -EINVAL, "other job");
        manifest_free(m);
        m = rank_manifest("llama-405b", 1001, 2, 8, 0);
        CHECK(node_manifest_add_rank(nm, m) == -EINVAL, "other step");
        manifest_free(m);
        m = rank_manifest("llama-405b", 1000, 2, 16, 0);
        CHECK(node_manifest_add_rank(nm, m) == -EINVAL, "other world size");
        manifest_free(m);
        m = rank_manifest("llama-405b", 1000, 2, 8, 0);
        m->rank = 8; /* edited by hand */
        CHECK(node_manifest_add_rank(nm, m) == -EINVAL, "rank >= world_size");
        CHECK(node_manifest_add_rank(NULL, m) == -EINVAL, "NULL node manifest");
        CHECK(node_manifest_add_rank(nm, NULL) == -EINVAL, "NULL manifest");
        manifest_free(m);
        CHECK(nm->nranks == 4, "failed adds changed the rank count");

        /* Many ranks: growth past the initial capacity, every order. */
        struct node_manifest *big = new_node("j", 1, 0, 1, 1000);
        for (uint32_t i = 0; i < 1000; i++)
                add(big, (i * 379) % 1000, 0);
        bool sorted = big->nranks == 1000;
        for (uint32_t i = 0; sorted && i < 1000; i++)
                sorted = big->ranks[i]->rank == i && node_manifest_find(big, i) == big->ranks[i];
        CHECK(sorted, "1000 ranks not sorted or not found");
        node_manifest_free(big);
        node_manifest_free(nm); /* frees the rank manifests (asan checks) */
}

/* The exact text, built independently of the formatter. */
static void test_node_manifest_text(void) {
        struct node_manifest *nm = new_node("llama-405b", 1000, 1, 2, 8);
        add(nm, 7, 0);
        add(nm, 3, 3);
        char *m3 = manifest_text(nm->ranks[0]), *m7 = manifest_text(nm->ranks[1]);
        char *body = xasprintf("ckptd-node-manifest 1\n"
                               "job llama-405b\n"
                               "step 1000\n"
                               "node 1\n"
                               "node_count 2\n"
                               "world_size 8\n"
                               "ranks 2\n"
                               "rank 3 %zu\n%s"
                               "rank 7 %zu\n%s",
                               strlen(m3), m3, strlen(m7), m7);
        char *expect = resign(body);
        char *text = NULL;
        size_t len = 0;
        CHECK(node_manifest_format(nm, &text, &len) == 0, "format");
        CHECK(text && len == strlen(expect) && memcmp(text, expect, len) == 0,
              "text differs:\n%s\nexpected:\n%s", text ? text : "(null)", expect);
        free(text);
        free(expect);
        free(body);
        free(m3);
        free(m7);
        node_manifest_free(nm);

        /* A node holding no rank (more nodes than ranks) is a valid document. */
        nm = new_node("j", 0, 2, 3, 2);
        expect = resign("ckptd-node-manifest 1\njob j\nstep 0\nnode 2\nnode_count 3\n"
                        "world_size 2\nranks 0\n");
        CHECK(node_manifest_format(nm, &text, &len) == 0 && len == strlen(expect) &&
                      memcmp(text, expect, len) == 0,
              "empty node manifest:\n%s", text ? text : "(null)");
        free(text);
        free(expect);
        node_manifest_free(nm);
}

static void node_round_trip(const struct node_manifest *nm, const char *what) {
        char *text = NULL, *text2 = NULL;
        size_t len = 0, len2 = 0;
        struct node_manifest *back = NULL;

        int r = node_manifest_format(nm, &text, &len);
        CHECK(r == 0 && strlen(text) == len, "%s: format %d", what, r);
        if (r < 0)
                return;
        r = node_manifest_parse(&back, text, len);
        CHECK(r == 0, "%s: parse %d", what, r);
        if (r == 0) {
                CHECK(node_manifests_equal(nm, back), "%s: differs after round trip", what);
                r = node_manifest_format(back, &text2, &len2);
                CHECK(r == 0 && len2 == len && memcmp(text, text2, len) == 0,
                      "%s: second format differs", what);
                free(text2);
                /* add_rank works on a parsed one (capacity as if built). */
                if (back->nranks < back->world_size) {
                        uint32_t free_rank = 0;
                        while (node_manifest_find(back, free_rank))
                                free_rank++;
                        add(back, free_rank, 1);
                        CHECK(node_manifest_find(back, free_rank) != NULL, "%s: add after parse",
                              what);
                }
        }
        node_manifest_free(back);
        free(text);
}

static void test_node_manifest_round_trip(void) {
        struct node_manifest *nm = new_node("llama-405b", 1000, 1, 2, 8);
        node_round_trip(nm, "no ranks");
        add(nm, 5, 3);
        node_round_trip(nm, "one rank");
        add(nm, 0, 0);
        add(nm, 2, 1);
        add(nm, 7, 2);
        node_round_trip(nm, "four ranks");
        node_manifest_free(nm);

        nm = new_node("a+b=c@d:e", INT64_MAX, 65535, 65536, CKPT_WORLD_MAX);
        add(nm, CKPT_WORLD_MAX - 1, 3);
        add(nm, 0, 3);
        node_round_trip(nm, "extremes");
        node_manifest_free(nm);

        nm = new_node("j", 1, 0, 1, 100);
        for (uint32_t i = 0; i < 100; i += 3)
                add(nm, i, (int)(i % 4));
        node_round_trip(nm, "34 ranks");
        node_manifest_free(nm);
}

static void test_node_manifest_format_errors(void) {
        struct node_manifest *nm = new_node("j", 1, 0, 1, 8);
        char *text = NULL;
        size_t len;

        add(nm, 1, 1);
        add(nm, 4, 1);
        nm->ranks[0]->rank = 4; /* duplicate, by hand */
        CHECK(node_manifest_format(nm, &text, &len) == -EINVAL, "duplicate rank formatted");
        nm->ranks[0]->rank = 5; /* out of order */
        CHECK(node_manifest_format(nm, &text, &len) == -EINVAL, "unsorted ranks formatted");
        nm->ranks[0]->rank = 1;
        strcpy(nm->ranks[1]->job, "k");
        CHECK(node_manifest_format(nm, &text, &len) == -EINVAL, "other job formatted");
        strcpy(nm->ranks[1]->job, "j");
        nm->ranks[1]->block_size = 3; /* manifest_format() refuses it */
        CHECK(node_manifest_format(nm, &text, &len) == -EINVAL, "bad rank manifest formatted");
        nm->ranks[1]->block_size = 4096;
        nm->node = 1;
        CHECK(node_manifest_format(nm, &text, &len) == -EINVAL, "node >= node_count formatted");
        nm->node = 0;
        CHECK(node_manifest_format(nm, &text, &len) == 0, "restored");
        free(text);
        CHECK(node_manifest_format(NULL, &text, &len) == -EINVAL, "NULL");
        node_manifest_free(nm);
}

#define NM_HEADER "ckptd-node-manifest 1\njob j\nstep 5\nnode 0\nnode_count 2\nworld_size 4\n"

static void expect_bad_node(const char *text, size_t len, const char *what) {
        struct node_manifest *nm = NULL;
        int r = node_manifest_parse(&nm, text, len);
        CHECK(r == -EBADMSG && nm == NULL, "%s: parsed (%d)", what, r);
        node_manifest_free(nm);
}

/* A correctly signed node manifest whose body is fmt: the parser must refuse
 * it on structure alone. */
static void bad_node_body(const char *what, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bad_node_body(const char *what, const char *fmt, ...) {
        va_list ap;
        char *body;
        va_start(ap, fmt);
        if (vasprintf(&body, fmt, ap) < 0)
                exit(1);
        va_end(ap);
        char *text = resign(body);
        expect_bad_node(text, strlen(text), what);
        free(text);
        free(body);
}

static void test_node_manifest_rejects(void) {
        struct node_manifest *nm = new_node("j", 5, 0, 2, 4);
        add(nm, 1, 3);
        add(nm, 2, 0);
        char *text = NULL;
        size_t len = 0;
        CHECK(node_manifest_format(nm, &text, &len) == 0, "format");
        struct node_manifest *ok = NULL;
        CHECK(node_manifest_parse(&ok, text, len) == 0, "valid text refused");
        node_manifest_free(ok);

        /* Every truncation, and a byte more. */
        for (size_t n = 0; n < len; n++)
                expect_bad_node(text, n, "truncated");
        char *longer = malloc(len + 1);
        memcpy(longer, text, len);
        longer[len] = '\n';
        expect_bad_node(longer, len + 1, "trailing byte");
        free(longer);
        /* A flipped bit anywhere: the CRC line (or a parser) catches it. */
        for (size_t i = 0; i < len; i++) {
                text[i] ^= 0x20;
                expect_bad_node(text, len, "flipped bit");
                text[i] ^= 0x20;
        }
        /* The CRC line itself: wrong value, upper case, wrong keyword. */
        char *copy = strdup(text);
        copy[len - 2] = copy[len - 2] == '0' ? '1' : '0';
        expect_bad_node(copy, len, "wrong CRC");
        memcpy(copy, text, len);
        memcpy(copy + len - 16, "end     ", 8);
        expect_bad_node(copy, len, "end instead of crc32c");
        free(copy);
        expect_bad_node(NULL, 0, "NULL");
        CHECK(node_manifest_parse(NULL, text, len) == -EINVAL, "NULL out");

        char *m1 = manifest_text(nm->ranks[0]), *m2 = manifest_text(nm->ranks[1]);
        size_t l1 = strlen(m1), l2 = strlen(m2);
        struct manifest *om = rank_manifest("other", 5, 2, 4, 1);
        char *mo = manifest_text(om);
        manifest_free(om);
        om = rank_manifest("j", 6, 2, 4, 1);
        char *ms = manifest_text(om);
        manifest_free(om);
        om = rank_manifest("j", 5, 2, 8, 1);
        char *mw = manifest_text(om);
        manifest_free(om);

        /* The well-formed body these variants break (sanity: it parses). */
        char *body = xasprintf(NM_HEADER "ranks 2\nrank 1 %zu\n%srank 2 %zu\n%s", l1, m1, l2, m2);
        char *good = resign(body);
        CHECK(strcmp(good, text) == 0, "hand-built text differs from the formatter's");
        free(good);
        free(body);

        bad_node_body("duplicate rank", NM_HEADER "ranks 2\nrank 1 %zu\n%srank 1 %zu\n%s", l1, m1,
                      l1, m1);
        bad_node_body("ranks descending", NM_HEADER "ranks 2\nrank 2 %zu\n%srank 1 %zu\n%s", l2,
                      m2, l1, m1);
        bad_node_body("rank >= world_size",
                      "ckptd-node-manifest 1\njob j\nstep 5\nnode 0\nnode_count 2\nworld_size 2\n"
                      "ranks 1\nrank 2 %zu\n%s",
                      l2, m2);
        bad_node_body("embedded manifest of another job", NM_HEADER "ranks 1\nrank 2 %zu\n%s",
                      strlen(mo), mo);
        bad_node_body("embedded manifest of another step", NM_HEADER "ranks 1\nrank 2 %zu\n%s",
                      strlen(ms), ms);
        bad_node_body("embedded manifest of another world size",
                      NM_HEADER "ranks 1\nrank 2 %zu\n%s", strlen(mw), mw);
        bad_node_body("rank line names another rank", NM_HEADER "ranks 1\nrank 3 %zu\n%s", l2, m2);
        bad_node_body("length one short", NM_HEADER "ranks 1\nrank 2 %zu\n%s", l2 - 1, m2);
        bad_node_body("length one long", NM_HEADER "ranks 1\nrank 2 %zu\n%s\n", l2 + 1, m2);
        bad_node_body("length past the end", NM_HEADER "ranks 1\nrank 2 %zu\n%s", l2 + 100, m2);
        bad_node_body("length leading zero", NM_HEADER "ranks 1\nrank 2 0%zu\n%s", l2, m2);
        bad_node_body("length 0", NM_HEADER "ranks 1\nrank 2 0\n");
        bad_node_body("more ranks announced", NM_HEADER "ranks 2\nrank 2 %zu\n%s", l2, m2);
        bad_node_body("fewer ranks announced", NM_HEADER "ranks 1\nrank 1 %zu\n%srank 2 %zu\n%s",
                      l1, m1, l2, m2);
        bad_node_body("ranks > world_size", NM_HEADER "ranks 5\n");
        bad_node_body("ranks bounded by the text", NM_HEADER "ranks 4\nrank 0 1\n");
        bad_node_body("huge rank count", NM_HEADER "ranks 4294967296\n");
        bad_node_body("extra line", NM_HEADER "ranks 0\nextra\n");
        bad_node_body("damaged embedded manifest", NM_HEADER "ranks 1\nrank 2 %zu\n%.*sX\n", l2,
                      (int)l2 - 2, m2);
        bad_node_body("node >= node_count",
                      "ckptd-node-manifest 1\njob j\nstep 5\nnode 2\nnode_count 2\nworld_size 4\n"
                      "ranks 0\n");
        bad_node_body("node_count 0",
                      "ckptd-node-manifest 1\njob j\nstep 5\nnode 0\nnode_count 0\nworld_size 4\n"
                      "ranks 0\n");
        bad_node_body("node_count > max",
                      "ckptd-node-manifest 1\njob j\nstep 5\nnode 0\nnode_count 65537\n"
                      "world_size 4\nranks 0\n");
        bad_node_body("world_size 0",
                      "ckptd-node-manifest 1\njob j\nstep 5\nnode 0\nnode_count 2\nworld_size 0\n"
                      "ranks 0\n");
        bad_node_body("world_size > max",
                      "ckptd-node-manifest 1\njob j\nstep 5\nnode 0\nnode_count 2\n"
                      "world_size 1048577\nranks 0\n");
        bad_node_body("step > INT64_MAX",
                      "ckptd-node-manifest 1\njob j\nstep 9223372036854775808\nnode 0\n"
                      "node_count 2\nworld_size 4\nranks 0\n");
        bad_node_body("bad job name",
                      "ckptd-node-manifest 1\njob .j\nstep 5\nnode 0\nnode_count 2\nworld_size 4\n"
                      "ranks 0\n");
        bad_node_body("lines swapped",
                      "ckptd-node-manifest 1\njob j\nnode 0\nstep 5\nnode_count 2\nworld_size 4\n"
                      "ranks 0\n");
        bad_node_body("version 2",
                      "ckptd-node-manifest 2\njob j\nstep 5\nnode 0\nnode_count 2\nworld_size 4\n"
                      "ranks 0\n");
        bad_node_body("double space", NM_HEADER "ranks  0\n");
        bad_node_body("trailing space", NM_HEADER "ranks 0 \n");
        bad_node_body("CR", NM_HEADER "ranks 0\r\n");
        bad_node_body("a bare MANIFEST", "%s", m1);
        {
                /* Signed with the wrong trailer name. */
                char *b = xasprintf(NM_HEADER "ranks 0\n");
                char *t = xasprintf("%send %08x\n", b, crc32c(0, b, strlen(b)));
                expect_bad_node(t, strlen(t), "end line instead of crc32c");
                free(t);
                free(b);
        }
        /* The valid minimal document for contrast. */
        {
                char *t = resign(NM_HEADER "ranks 0\n");
                struct node_manifest *e = NULL;
                CHECK(node_manifest_parse(&e, t, strlen(t)) == 0 && e && e->nranks == 0,
                      "empty node manifest refused");
                node_manifest_free(e);
                free(t);
        }
        free(m1);
        free(m2);
        free(mo);
        free(ms);
        free(mw);
        free(text);
        node_manifest_free(nm);
}

/* ---- commit object ----------------------------------------------------- */

struct step_fixture {
        size_t n;
        struct node_manifest *nms[8];
        char *texts[8];
        size_t lens[8];
};

static void fixture_add(struct step_fixture *f, struct node_manifest *nm) {
        f->nms[f->n] = nm;
        if (node_manifest_format(nm, &f->texts[f->n], &f->lens[f->n]) < 0)
                exit(1);
        f->n++;
}

static void fixture_free(struct step_fixture *f) {
        for (size_t i = 0; i < f->n; i++) {
                node_manifest_free(f->nms[i]);
                free(f->texts[i]);
        }
        f->n = 0;
}

/* A node manifest of job j step 7 holding the ranks listed (-1 ends). */
static struct node_manifest *node_with(const char *job, uint64_t step, uint32_t node,
                                       uint32_t node_count, uint32_t world_size, const int *ranks) {
        struct node_manifest *nm = new_node(job, step, node, node_count, world_size);
        for (; *ranks >= 0; ranks++)
                add(nm, (uint32_t)*ranks, *ranks % 3);
        return nm;
}

static int build(struct commit_object *co, struct step_fixture *f, char *err, size_t errsize) {
        return commit_object_build(co, (const struct node_manifest *const *)f->nms,
                                   (const char *const *)f->texts, f->lens, f->n, 1700000000, err,
                                   errsize);
}

static void expect_build_error(struct step_fixture *f, const char *want) {
        struct commit_object co;
        char err[256] = "";
        memset(&co, 0xa5, sizeof(co));
        int r = build(&co, f, err, sizeof(err));
        CHECK(r == -EINVAL && strcmp(err, want) == 0, "build: %d '%s', want '%s'", r, err, want);
        CHECK(co.nodes == NULL && co.node_count == 0 && co.job[0] == '\0',
              "not zeroed after failure");
        fixture_free(f);
}

static const int R012[] = { 0, 1, 2, -1 }, R3457[] = { 3, 4, 5, 7, -1 }, R6[] = { 6, -1 },
                 R2345[] = { 2, 3, 4, 5, -1 }, R457[] = { 4, 5, 7, -1 }, NONE[] = { -1 },
                 R34567[] = { 3, 4, 5, 6, 7, -1 };

static void test_commit_build(void) {
        struct step_fixture f = { 0 };
        struct commit_object co;
        char err[256];
        int r;

        /* Given out of node order; rank lists not contiguous. */
        fixture_add(&f, node_with("j", 7, 2, 3, 8, R6));
        fixture_add(&f, node_with("j", 7, 0, 3, 8, R012));
        fixture_add(&f, node_with("j", 7, 1, 3, 8, R3457));
        r = build(&co, &f, err, sizeof(err));
        CHECK(r == 0, "build: %d %s", r, err);
        if (r == 0) {
                CHECK(strcmp(co.job, "j") == 0 && co.step == 7 && co.world_size == 8 &&
                              co.node_count == 3 && co.committed_at == 1700000000,
                      "header");
                /* nodes[k] is node k; f.nms[i] is node (i + 2) % 3. */
                for (uint32_t k = 0; k < 3; k++) {
                        size_t i = (k + 1) % 3;
                        const struct commit_object_node *cn = &co.nodes[k];
                        CHECK(cn->node == k && cn->manifest_size == f.lens[i] &&
                                      cn->manifest_crc32c == crc32c(0, f.texts[i], f.lens[i]),
                              "node %u: size or CRC", k);
                        CHECK(cn->nranks == f.nms[i]->nranks, "node %u: rank count", k);
                        for (uint32_t j = 0; j < cn->nranks && j < f.nms[i]->nranks; j++)
                                CHECK(cn->ranks[j] == f.nms[i]->ranks[j]->rank, "node %u rank %u",
                                      k, j);
                }
                static const int owner[8] = { 0, 0, 0, 1, 1, 1, 2, 1 };
                for (uint32_t rk = 0; rk < 8; rk++)
                        CHECK(commit_object_node_of(&co, rk) == owner[rk], "node_of(%u) = %d", rk,
                              commit_object_node_of(&co, rk));
                CHECK(commit_object_node_of(&co, 8) == -ENOENT, "node_of(world_size)");
                CHECK(commit_object_node_of(&co, UINT32_MAX) == -ENOENT, "node_of(UINT32_MAX)");
                CHECK(commit_object_node_of(NULL, 0) == -ENOENT, "node_of(NULL)");
        }
        commit_object_clear(&co);
        CHECK(co.nodes == NULL && co.node_count == 0, "clear");
        commit_object_clear(&co); /* twice is fine */
        commit_object_clear(NULL);
        CHECK(commit_object_node_of(&co, 0) == -ENOENT, "node_of after clear");
        fixture_free(&f);

        /* A node may hold nothing. */
        fixture_add(&f, node_with("j", 7, 0, 2, 3, (const int[]){ 0, 1, 2, -1 }));
        fixture_add(&f, node_with("j", 7, 1, 2, 3, NONE));
        r = build(&co, &f, err, sizeof(err));
        CHECK(r == 0 && co.nodes[1].nranks == 0 && co.nodes[1].ranks == NULL,
              "empty node: %d %s", r, err);
        commit_object_clear(&co);
        fixture_free(&f);

        /* Coverage errors, with the exact message a person will read. */
        fixture_add(&f, node_with("j", 7, 0, 2, 8, R012));
        fixture_add(&f, node_with("j", 7, 1, 2, 8, R457));
        expect_build_error(&f, "rank 3 is in no node manifest");

        fixture_add(&f, node_with("j", 7, 0, 3, 8, R012));
        fixture_add(&f, node_with("j", 7, 2, 3, 8, R6));
        fixture_add(&f, node_with("j", 7, 1, 3, 8, R2345));
        expect_build_error(&f, "rank 2 is in node 0 and node 1");

        fixture_add(&f, node_with("j", 7, 1, 2, 8, R34567));
        fixture_add(&f, node_with("j", 7, 0, 2, 8, (const int[]){ 0, 1, 2, 3, -1 }));
        expect_build_error(&f, "rank 3 is in node 0 and node 1");

        fixture_add(&f, node_with("j", 7, 0, 3, 8, R012));
        fixture_add(&f, node_with("j", 7, 2, 3, 8, R6));
        expect_build_error(&f, "node 1 has no manifest");

        fixture_add(&f, node_with("j", 7, 0, 2, 8, R012));
        fixture_add(&f, node_with("j", 7, 1, 2, 8, R34567));
        fixture_add(&f, node_with("j", 7, 1, 2, 8, NONE));
        expect_build_error(&f, "node 1 has two manifests");

        fixture_add(&f, node_with("j", 7, 0, 2, 8, R012));
        fixture_add(&f, node_with("other", 7, 1, 2, 8, R34567));
        expect_build_error(&f, "node 1's manifest is of job other, not j");

        fixture_add(&f, node_with("j", 7, 0, 2, 8, R012));
        fixture_add(&f, node_with("j", 8, 1, 2, 8, R34567));
        expect_build_error(&f, "node 1's manifest is of step 8, not 7");

        fixture_add(&f, node_with("j", 7, 0, 2, 8, R012));
        fixture_add(&f, node_with("j", 7, 1, 2, 16, R34567));
        expect_build_error(&f, "node 1's manifest says world size 16, not 8");

        fixture_add(&f, node_with("j", 7, 0, 3, 8, R012));
        fixture_add(&f, node_with("j", 7, 1, 2, 8, R34567));
        expect_build_error(&f, "node 1's manifest says 2 nodes, not 3");

        expect_build_error(&f, "no node manifests");

        fixture_add(&f, node_with("j", 7, 0, 1, 3, R012));
        {
                char e[256] = "";
                r = commit_object_build(&co, (const struct node_manifest *const *)f.nms,
                                        (const char *const *)f.texts, f.lens, 1, -1, e, sizeof(e));
                CHECK(r == -EINVAL && strcmp(e, "commit time -1 is negative") == 0,
                      "negative time: %d '%s'", r, e);
                /* A small err buffer is truncated, not overrun; NULL is fine. */
                r = commit_object_build(&co, (const struct node_manifest *const *)f.nms,
                                        (const char *const *)f.texts, f.lens, 1, -1, e, 5);
                CHECK(r == -EINVAL && strcmp(e, "comm") == 0, "short err buffer '%s'", e);
                r = commit_object_build(&co, (const struct node_manifest *const *)f.nms,
                                        (const char *const *)f.texts, f.lens, 1, -1, NULL, 0);
                CHECK(r == -EINVAL, "NULL err buffer");
                r = commit_object_build(&co, (const struct node_manifest *const *)f.nms,
                                        (const char *const *)f.texts, f.lens, 1, 0, NULL, 0);
                CHECK(r == 0 && co.committed_at == 0, "committed_at 0");
                commit_object_clear(&co);
        }
        fixture_free(&f);
}

static void co_round_trip(const struct commit_object *co, const char *what) {
        char *text = NULL, *text2 = NULL;
        size_t len = 0, len2 = 0;
        struct commit_object back;

        int r = commit_object_format(co, &text, &len);
        CHECK(r == 0 && strlen(text) == len, "%s: format %d", what, r);
        if (r < 0)
                return;
        r = commit_object_parse(&back, text, len);
        CHECK(r == 0, "%s: parse %d", what, r);
        if (r == 0) {
                bool eq = strcmp(co->job, back.job) == 0 && co->step == back.step &&
                          co->world_size == back.world_size && co->node_count == back.node_count &&
                          co->committed_at == back.committed_at;
                for (uint32_t k = 0; eq && k < co->node_count; k++) {
                        const struct commit_object_node *x = &co->nodes[k], *y = &back.nodes[k];
                        eq = x->node == y->node && x->manifest_size == y->manifest_size &&
                             x->manifest_crc32c == y->manifest_crc32c && x->nranks == y->nranks &&
                             (x->nranks == 0 ||
                              memcmp(x->ranks, y->ranks, x->nranks * sizeof(uint32_t)) == 0);
                }
                CHECK(eq, "%s: differs after round trip", what);
                r = commit_object_format(&back, &text2, &len2);
                CHECK(r == 0 && len2 == len && memcmp(text, text2, len) == 0,
                      "%s: second format differs", what);
                free(text2);
                commit_object_clear(&back);
        }
        free(text);
}

/* A commit object over world_size ranks, rank r held by node owner(r). */
static void co_init(struct commit_object *co, uint32_t world_size, uint32_t node_count,
                    uint32_t (*owner)(uint32_t)) {
        memset(co, 0, sizeof(*co));
        strcpy(co->job, "llama-405b");
        co->step = 1000;
        co->world_size = world_size;
        co->node_count = node_count;
        co->committed_at = 1700000000;
        co->nodes = calloc(node_count, sizeof(*co->nodes));
        for (uint32_t k = 0; k < node_count; k++) {
                co->nodes[k].node = k;
                co->nodes[k].manifest_size = 1000 + k;
                co->nodes[k].manifest_crc32c = 0xdeadbeef ^ k;
                co->nodes[k].ranks = malloc(world_size * sizeof(uint32_t));
        }
        for (uint32_t r = 0; r < world_size; r++) {
                struct commit_object_node *n = &co->nodes[owner(r)];
                n->ranks[n->nranks++] = r;
        }
}

static uint32_t owner_text(uint32_t r) {
        /* 0-3,5,7-8 | 4,6,9 | none */
        return r == 4 || r == 6 || r == 9 ? 1 : 0;
}
static uint32_t owner_parity(uint32_t r) {
        return r & 1;
}
static uint32_t owner_block(uint32_t r) {
        return r / 1000;
}

static void test_commit_text(void) {
        struct commit_object co;
        co_init(&co, 10, 3, owner_text);
        char *expect = resign("ckptd-global-commit 1\n"
                              "job llama-405b\n"
                              "step 1000\n"
                              "world_size 10\n"
                              "node_count 3\n"
                              "committed_at 1700000000\n"
                              "node 0 1000 deadbeef 7 0-3,5,7-8\n"
                              "node 1 1001 deadbeee 3 4,6,9\n"
                              "node 2 1002 deadbeed 0\n");
        char *text = NULL;
        size_t len = 0;
        CHECK(commit_object_format(&co, &text, &len) == 0 && len == strlen(expect) &&
                      memcmp(text, expect, len) == 0,
              "text differs:\n%s\nexpected:\n%s", text ? text : "(null)", expect);
        free(text);
        free(expect);
        co_round_trip(&co, "text example");
        commit_object_clear(&co);

        co_init(&co, 1, 1, owner_parity);
        co_round_trip(&co, "world of one");
        commit_object_clear(&co);
        co_init(&co, 5000, 5, owner_block);
        co_round_trip(&co, "contiguous blocks");
        CHECK(commit_object_node_of(&co, 4999) == 4 && commit_object_node_of(&co, 1000) == 1,
              "node_of contiguous");
        commit_object_clear(&co);
        /* The longest rank lists: every other rank of the largest world. */
        co_init(&co, CKPT_WORLD_MAX, 2, owner_parity);
        co_round_trip(&co, "largest world, alternating");
        CHECK(commit_object_node_of(&co, CKPT_WORLD_MAX - 1) == 1 &&
                      commit_object_node_of(&co, 12346) == 0,
              "node_of alternating");
        commit_object_clear(&co);
}

static void test_commit_format_errors(void) {
        struct commit_object co;
        char *text = NULL;
        size_t len;

        co_init(&co, 10, 3, owner_text);
        co.nodes[1].ranks[0] = 3; /* now in node 0 and node 1 */
        CHECK(commit_object_format(&co, &text, &len) == -EINVAL, "overlap formatted");
        co.nodes[1].ranks[0] = 4;
        co.nodes[0].nranks--; /* rank 8 in no node */
        CHECK(commit_object_format(&co, &text, &len) == -EINVAL, "gap formatted");
        co.nodes[0].nranks++;
        co.nodes[2].node = 5;
        CHECK(commit_object_format(&co, &text, &len) == -EINVAL, "wrong node index formatted");
        co.nodes[2].node = 2;
        co.committed_at = -1;
        CHECK(commit_object_format(&co, &text, &len) == -EINVAL, "negative time formatted");
        co.committed_at = 0;
        co.nodes[1].ranks[1] = 10;
        CHECK(commit_object_format(&co, &text, &len) == -EINVAL, "rank >= world formatted");
        co.nodes[1].ranks[1] = 6;
        CHECK(commit_object_format(&co, &text, &len) == 0, "restored");
        free(text);
        CHECK(commit_object_format(NULL, &text, &len) == -EINVAL, "NULL");
        commit_object_clear(&co);
}

#define CO_HEADER                                                                                  \
        "ckptd-global-commit 1\njob j\nstep 5\nworld_size 4\nnode_count 2\ncommitted_at 0\n"

static void expect_bad_commit(const char *text, size_t len, const char *what) {
        struct commit_object co;
        memset(&co, 0xa5, sizeof(co));
        int r = commit_object_parse(&co, text, len);
        CHECK(r == -EBADMSG, "%s: parsed (%d)", what, r);
        CHECK(co.nodes == NULL && co.node_count == 0, "%s: not zeroed", what);
        if (r == 0)
                commit_object_clear(&co);
}

static void bad_commit_body(const char *what, const char *body) {
        char *text = resign(body);
        expect_bad_commit(text, strlen(text), what);
        free(text);
}

static void test_commit_rejects(void) {
        const char *good_body = CO_HEADER "node 0 100 0000abcd 3 0-1,3\nnode 1 7 ffffffff 1 2\n";
        char *good = resign(good_body);
        size_t len = strlen(good);
        struct commit_object co;
        CHECK(commit_object_parse(&co, good, len) == 0 && co.nodes[0].nranks == 3 &&
                      co.nodes[0].ranks[2] == 3 && co.nodes[1].ranks[0] == 2 &&
                      co.nodes[0].manifest_crc32c == 0xabcd && co.nodes[1].manifest_size == 7,
              "valid text refused");
        commit_object_clear(&co);

        for (size_t n = 0; n < len; n++)
                expect_bad_commit(good, n, "truncated");
        char *longer = xasprintf("%s\n", good);
        expect_bad_commit(longer, len + 1, "trailing byte");
        free(longer);
        for (size_t i = 0; i < len; i++) {
                good[i] ^= 0x20;
                expect_bad_commit(good, len, "flipped bit");
                good[i] ^= 0x20;
        }
        good[len - 2] = good[len - 2] == '0' ? '1' : '0';
        expect_bad_commit(good, len, "wrong CRC");
        free(good);
        expect_bad_commit(NULL, 0, "NULL");
        CHECK(commit_object_parse(NULL, "x", 1) == -EINVAL, "NULL out");

        bad_commit_body("rank in two nodes", CO_HEADER "node 0 1 00000000 3 0-1,3\nnode 1 1 00000000 2 2-3\n");
        bad_commit_body("rank in no node", CO_HEADER "node 0 1 00000000 2 0-1\nnode 1 1 00000000 1 2\n");
        bad_commit_body("rank >= world", CO_HEADER "node 0 1 00000000 3 0-2\nnode 1 1 00000000 1 4\n");
        bad_commit_body("range past world", CO_HEADER "node 0 1 00000000 3 0-2\nnode 1 1 00000000 2 3-4\n");
        bad_commit_body("more ranks than world", CO_HEADER "node 0 1 00000000 4 0-3\nnode 1 1 00000000 1 0\n");
        bad_commit_body("count says more", CO_HEADER "node 0 1 00000000 4 0-1,3\nnode 1 1 00000000 1 2\n");
        bad_commit_body("count says fewer", CO_HEADER "node 0 1 00000000 2 0-1,3\nnode 1 1 00000000 1 2\n");
        bad_commit_body("run not maximal (0-1,2)", CO_HEADER "node 0 1 00000000 3 0-1,2\nnode 1 1 00000000 1 3\n");
        bad_commit_body("run not maximal (0,1)", CO_HEADER "node 0 1 00000000 2 0,1\nnode 1 1 00000000 2 2-3\n");
        bad_commit_body("run of one as a-a", CO_HEADER "node 0 1 00000000 1 0-0\nnode 1 1 00000000 3 1-3\n");
        bad_commit_body("descending run", CO_HEADER "node 0 1 00000000 2 1-0\nnode 1 1 00000000 2 2-3\n");
        bad_commit_body("descending list", CO_HEADER "node 0 1 00000000 2 3,1\nnode 1 1 00000000 2 0,2\n");
        bad_commit_body("repeated rank", CO_HEADER "node 0 1 00000000 2 1,1\nnode 1 1 00000000 3 0,2-3\n");
        bad_commit_body("leading zero rank", CO_HEADER "node 0 1 00000000 2 00,2\nnode 1 1 00000000 2 1,3\n");
        bad_commit_body("empty list element", CO_HEADER "node 0 1 00000000 2 0,,2\nnode 1 1 00000000 2 1,3\n");
        bad_commit_body("trailing comma", CO_HEADER "node 0 1 00000000 2 0,2,\nnode 1 1 00000000 2 1,3\n");
        bad_commit_body("open range", CO_HEADER "node 0 1 00000000 2 0-\nnode 1 1 00000000 2 1,3\n");
        bad_commit_body("list without count", CO_HEADER "node 0 1 00000000 0-1\nnode 1 1 00000000 2 2-3\n");
        bad_commit_body("count 0 with list", CO_HEADER "node 0 1 00000000 4 0-3\nnode 1 1 00000000 0 0\n");
        bad_commit_body("count without list", CO_HEADER "node 0 1 00000000 4\nnode 1 1 00000000 0\n");
        bad_commit_body("space in list", CO_HEADER "node 0 1 00000000 4 0-1, 2-3\nnode 1 1 00000000 0\n");
        bad_commit_body("trailing space", CO_HEADER "node 0 1 00000000 4 0-3 \nnode 1 1 00000000 0\n");
        bad_commit_body("nodes out of order", CO_HEADER "node 1 1 00000000 4 0-3\nnode 0 1 00000000 0\n");
        bad_commit_body("node missing", CO_HEADER "node 0 1 00000000 4 0-3\n");
        bad_commit_body("extra node", CO_HEADER "node 0 1 00000000 4 0-3\nnode 1 1 00000000 0\nnode 2 1 00000000 0\n");
        bad_commit_body("upper-case CRC", CO_HEADER "node 0 1 0000ABCD 4 0-3\nnode 1 1 00000000 0\n");
        bad_commit_body("short CRC", CO_HEADER "node 0 1 abcd 4 0-3\nnode 1 1 00000000 0\n");
        bad_commit_body("size leading zero", CO_HEADER "node 0 01 00000000 4 0-3\nnode 1 1 00000000 0\n");
        bad_commit_body("size > INT64_MAX", CO_HEADER "node 0 9223372036854775808 00000000 4 0-3\nnode 1 1 00000000 0\n");
        bad_commit_body("node_count 0",
                        "ckptd-global-commit 1\njob j\nstep 5\nworld_size 4\nnode_count 0\ncommitted_at 0\n");
        bad_commit_body("node_count bounded by the text",
                        "ckptd-global-commit 1\njob j\nstep 5\nworld_size 4\nnode_count 65536\ncommitted_at 0\n"
                        "node 0 1 00000000 4 0-3\n");
        bad_commit_body("node_count > max",
                        "ckptd-global-commit 1\njob j\nstep 5\nworld_size 4\nnode_count 65537\ncommitted_at 0\n"
                        "node 0 1 00000000 4 0-3\n");
        bad_commit_body("world_size 0",
                        "ckptd-global-commit 1\njob j\nstep 5\nworld_size 0\nnode_count 1\ncommitted_at 0\n"
                        "node 0 1 00000000 0\n");
        bad_commit_body("world_size > max",
                        "ckptd-global-commit 1\njob j\nstep 5\nworld_size 1048577\nnode_count 1\ncommitted_at 0\n"
                        "node 0 1 00000000 1048577 0-1048576\n");
        bad_commit_body("committed_at negative",
                        "ckptd-global-commit 1\njob j\nstep 5\nworld_size 1\nnode_count 1\ncommitted_at -1\n"
                        "node 0 1 00000000 1 0\n");
        bad_commit_body("committed_at > INT64_MAX",
                        "ckptd-global-commit 1\njob j\nstep 5\nworld_size 1\nnode_count 1\n"
                        "committed_at 9223372036854775808\nnode 0 1 00000000 1 0\n");
        bad_commit_body("lines swapped",
                        "ckptd-global-commit 1\njob j\nstep 5\nnode_count 1\nworld_size 1\ncommitted_at 0\n"
                        "node 0 1 00000000 1 0\n");
        bad_commit_body("bad job",
                        "ckptd-global-commit 1\njob a/b\nstep 5\nworld_size 1\nnode_count 1\ncommitted_at 0\n"
                        "node 0 1 00000000 1 0\n");
        bad_commit_body("the local record's magic",
                        "ckptd-commit 1\njob j\nstep 5\nworld_size 1\nnode_count 1\ncommitted_at 0\n"
                        "node 0 1 00000000 1 0\n");
        bad_commit_body("CR", CO_HEADER "node 0 1 00000000 4 0-3\r\nnode 1 1 00000000 0\n");
        bad_commit_body("blank line", CO_HEADER "node 0 1 00000000 4 0-3\n\nnode 1 1 00000000 0\n");

        /* A compact list of the whole largest world parses (4 MiB of ranks
         * from a short text: bounded by the world size, by design). */
        {
                char *t = resign("ckptd-global-commit 1\njob j\nstep 5\nworld_size 1048576\n"
                                 "node_count 1\ncommitted_at 0\nnode 0 1 00000000 1048576 0-1048575\n");
                CHECK(commit_object_parse(&co, t, strlen(t)) == 0 && co.nodes[0].nranks == CKPT_WORLD_MAX &&
                              commit_object_node_of(&co, 777777) == 0,
                      "largest compact world refused");
                commit_object_clear(&co);
                free(t);
        }

        /* Each document is refused by the other parsers, and the local
         * COMMITTED record by this one. */
        struct commit_record rec = { .step = 5, .world_size = 4, .nranks = 0 };
        strcpy(rec.job, "j");
        char *local = NULL;
        size_t llen;
        CHECK(commit_record_format(&rec, &local, &llen) == 0, "local record");
        expect_bad_commit(local, llen, "local COMMITTED record");
        free(local);
        char *nmt = resign(NM_HEADER "ranks 0\n");
        expect_bad_commit(nmt, strlen(nmt), "node manifest as commit");
        free(nmt);
        char *cot = resign(CO_HEADER "node 0 1 00000000 4 0-3\nnode 1 1 00000000 0\n");
        expect_bad_node(cot, strlen(cot), "commit as node manifest");
        struct commit_record lr;
        CHECK(commit_record_parse(&lr, cot, strlen(cot)) == -EBADMSG, "commit as local record");
        struct manifest *m = NULL;
        CHECK(manifest_parse(&m, cot, strlen(cot)) == -EBADMSG, "commit as MANIFEST");
        free(cot);
}

/* The examples in docs/object-layout.md, byte for byte.  The commit example
 * is built from the node manifest example (node 1) and node 0 holding empty
 * manifests of ranks 0-2 and 4-6, so every size and CRC in it is real. */
static void test_documented_examples(void) {
        /* The MANIFEST example of docs/on-disk.md, as rank 3 of node 1. */
        static const char node_doc[] = "ckptd-node-manifest 1\n"
                                       "job llama-405b\n"
                                       "step 1000\n"
                                       "node 1\n"
                                       "node_count 2\n"
                                       "world_size 8\n"
                                       "ranks 2\n"
                                       "rank 3 186\n"
                                       "ckptd-manifest 1\n"
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
                                       "end 73df8fce\n"
                                       "rank 7 112\n"
                                       "ckptd-manifest 1\n"
                                       "job llama-405b\n"
                                       "step 1000\n"
                                       "rank 7\n"
                                       "world_size 8\n"
                                       "uid 1000\n"
                                       "block_size 1048576\n"
                                       "shards 0\n"
                                       "end 91740555\n"
                                       "crc32c f7dff862\n";
        static const char commit_doc[] = "ckptd-global-commit 1\n"
                                         "job llama-405b\n"
                                         "step 1000\n"
                                         "world_size 8\n"
                                         "node_count 2\n"
                                         "committed_at 1700000000\n"
                                         "node 0 842 e79ef678 6 0-2,4-6\n"
                                         "node 1 424 4293f918 2 3,7\n"
                                         "crc32c f87948bc\n";
        struct step_fixture f = { 0 };
        struct node_manifest *nm = NULL;
        struct commit_object co;
        char *text = NULL, err[256] = "";
        size_t len = 0;

        /* Node 1 from its own bytes: the manifest example, built. */
        unsigned char data[5000];
        for (int i = 0; i < 5000; i++)
                data[i] = (unsigned char)(i % 251);
        nm = new_node("llama-405b", 1000, 1, 2, 8);
        struct manifest *m3 = NULL, *m7 = NULL;
        uint32_t blocks[2] = { crc32c(0, data, 4096), crc32c(0, data + 4096, 904) };
        CHECK(manifest_new(&m3, "llama-405b", 1000, 3, 8, 1000) == 0, "rank 3");
        m3->block_size = 4096;
        CHECK(manifest_add_shard(m3, "model.pt", 5000, crc32c(0, data, 5000), blocks) == 0 &&
                      manifest_add_shard(m3, "empty", 0, 0, NULL) == 0,
              "rank 3 shards");
        CHECK(manifest_new(&m7, "llama-405b", 1000, 7, 8, 1000) == 0, "rank 7");
        CHECK(node_manifest_add_rank(nm, m7) == 0 && node_manifest_add_rank(nm, m3) == 0, "add");
        CHECK(node_manifest_format(nm, &text, &len) == 0 && len == strlen(node_doc) &&
                      memcmp(text, node_doc, len) == 0,
              "documented node manifest differs:\n%s", text ? text : "(null)");
        free(text);
        node_manifest_free(nm);

        nm = NULL;
        int r = node_manifest_parse(&nm, node_doc, strlen(node_doc));
        CHECK(r == 0 && nm->nranks == 2 && nm->ranks[0]->rank == 3 &&
                      nm->ranks[0]->nshards == 2 && nm->ranks[1]->rank == 7 &&
                      nm->ranks[1]->nshards == 0,
              "documented node manifest does not parse: %d", r);
        if (r < 0)
                return;

        struct node_manifest *nm0 = new_node("llama-405b", 1000, 0, 2, 8);
        static const uint32_t ranks0[] = { 0, 1, 2, 4, 5, 6 };
        for (int i = 0; i < 6; i++) {
                struct manifest *m = NULL;
                CHECK(manifest_new(&m, "llama-405b", 1000, ranks0[i], 8, 1000) == 0 &&
                              node_manifest_add_rank(nm0, m) == 0,
                      "node 0 rank %u", ranks0[i]);
        }
        fixture_add(&f, nm0);
        fixture_add(&f, nm);
        r = build(&co, &f, err, sizeof(err));
        CHECK(r == 0, "build the documented commit object: %d %s", r, err);
        if (r == 0) {
                text = NULL;
                CHECK(commit_object_format(&co, &text, &len) == 0 && len == strlen(commit_doc) &&
                              memcmp(text, commit_doc, len) == 0,
                      "documented commit object differs:\n%s", text ? text : "(null)");
                free(text);
        }
        commit_object_clear(&co);
        fixture_free(&f);

        r = commit_object_parse(&co, commit_doc, strlen(commit_doc));
        CHECK(r == 0 && commit_object_node_of(&co, 3) == 1 && commit_object_node_of(&co, 4) == 0,
              "documented commit object does not parse: %d", r);
        commit_object_clear(&co);
}

int main(void) {
        test_keys();
        test_parse_step_dir();
        test_node_manifest_new();
        test_node_manifest_add();
        test_node_manifest_text();
        test_node_manifest_round_trip();
        test_node_manifest_format_errors();
        test_node_manifest_rejects();
        test_commit_build();
        test_commit_text();
        test_commit_format_errors();
        test_commit_rejects();
        test_documented_examples();

        if (failures) {
                fprintf(stderr, "%u check(s) failed\n", failures);
                return 1;
        }
        printf("all object tests passed\n");
        return 0;
}
