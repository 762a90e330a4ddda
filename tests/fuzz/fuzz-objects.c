/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the object-store documents and step keys
 * (daemon/remote/objects.h).  A node manifest and a commit object come back
 * from a bucket that others can write to, and whether they parse decides
 * whether a step can be restored from the store.  Beyond "does not crash"
 * this checks:
 *  - only the documented errors come back;
 *  - a parsed document formats back to exactly the bytes it was parsed from
 *    (the parser accepts only the formatter's spelling), and that text parses
 *    again to the same values;
 *  - commit_object_node_of() agrees with the parsed rank lists;
 *  - a node manifest that parses and covers a one-node world builds a commit
 *    object that round-trips too;
 *  - a listed step prefix that parses is exactly the key object_key_step_dir()
 *    builds for that step.
 * Every input goes to the parsers twice: as it is, and with its last line
 * replaced by a correct "crc32c <hex8>" line, so that mutations get past
 * the checksum to the line parsers behind it.  abort() on a violation.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "remote/objects.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void manifests_equal(const struct manifest *a, const struct manifest *b) {
        if (strcmp(a->job, b->job) != 0 || a->step != b->step || a->rank != b->rank ||
            a->world_size != b->world_size || a->uid != b->uid || a->block_size != b->block_size ||
            a->nshards != b->nshards)
                abort();
        for (uint32_t i = 0; i < a->nshards; i++) {
                const struct manifest_shard *x = &a->shards[i], *y = &b->shards[i];
                if (strcmp(x->name, y->name) != 0 || x->size != y->size || x->crc32c != y->crc32c ||
                    x->nblocks != y->nblocks)
                        abort();
                if (x->nblocks > 0 &&
                    memcmp(x->block_crcs, y->block_crcs, x->nblocks * sizeof(uint32_t)) != 0)
                        abort();
        }
}

static void commits_equal(const struct commit_object *a, const struct commit_object *b) {
        if (strcmp(a->job, b->job) != 0 || a->step != b->step || a->world_size != b->world_size ||
            a->node_count != b->node_count || a->committed_at != b->committed_at)
                abort();
        for (uint32_t k = 0; k < a->node_count; k++) {
                const struct commit_object_node *x = &a->nodes[k], *y = &b->nodes[k];
                if (x->node != y->node || x->manifest_size != y->manifest_size ||
                    x->manifest_crc32c != y->manifest_crc32c || x->nranks != y->nranks)
                        abort();
                if (x->nranks > 0 && memcmp(x->ranks, y->ranks, x->nranks * sizeof(uint32_t)) != 0)
                        abort();
        }
}

/* co parsed or built: format, compare with expect (if given), parse again. */
static void commit_round_trip(const struct commit_object *co, const uint8_t *expect,
                              size_t expect_len) {
        struct commit_object again = { 0 };
        char *text = NULL;
        size_t len = 0;

        if (commit_object_format(co, &text, &len) != 0)
                abort();
        if (expect && (len != expect_len || memcmp(text, expect, len) != 0))
                abort();
        int r = commit_object_parse(&again, text, len);
        if (r == -ENOMEM) {
                free(text);
                return;
        }
        if (r != 0)
                abort();
        commits_equal(co, &again);

        /* node_of agrees with the rank lists, which cover the world. */
        uint32_t total = 0;
        for (uint32_t k = 0; k < co->node_count; k++) {
                total += co->nodes[k].nranks;
                for (uint32_t i = 0; i < co->nodes[k].nranks; i++)
                        if (commit_object_node_of(co, co->nodes[k].ranks[i]) != (int)k)
                                abort();
        }
        if (total != co->world_size || commit_object_node_of(co, co->world_size) != -ENOENT)
                abort();
        free(text);
        commit_object_clear(&again);
}

static void check_node_manifest(const uint8_t *data, size_t size) {
        struct node_manifest *nm = NULL, *again = NULL;
        char *text = NULL;
        size_t len = 0;

        int r = node_manifest_parse(&nm, (const char *)data, size);
        if (r == -EBADMSG || r == -ENOMEM)
                return;
        if (r != 0 || !nm)
                abort();
        if (node_manifest_format(nm, &text, &len) != 0)
                abort();
        if (len != size || memcmp(text, data, size) != 0)
                abort();
        if (node_manifest_parse(&again, text, len) != 0)
                abort();
        if (strcmp(nm->job, again->job) != 0 || nm->step != again->step ||
            nm->node != again->node || nm->node_count != again->node_count ||
            nm->world_size != again->world_size || nm->nranks != again->nranks)
                abort();
        for (uint32_t i = 0; i < nm->nranks; i++) {
                manifests_equal(nm->ranks[i], again->ranks[i]);
                if (node_manifest_find(nm, nm->ranks[i]->rank) != nm->ranks[i])
                        abort();
        }

        /* Alone, it is the whole step exactly when it covers a one-node world. */
        const struct node_manifest *nms[] = { nm };
        const char *texts[] = { text };
        struct commit_object co = { 0 };
        char err[256];
        r = commit_object_build(&co, nms, texts, &len, 1, 1700000000, err, sizeof(err));
        if (r == 0) {
                if (nm->node_count != 1 || nm->nranks != nm->world_size ||
                    co.nodes[0].manifest_size != len ||
                    co.nodes[0].manifest_crc32c != crc32c(0, text, len))
                        abort();
                commit_round_trip(&co, NULL, 0);
        } else if (r != -EINVAL && r != -ENOMEM) {
                abort();
        } else if (r == -EINVAL && nm->node_count == 1 && nm->nranks == nm->world_size) {
                abort();
        }
        commit_object_clear(&co);
        free(text);
        node_manifest_free(again);
        node_manifest_free(nm);
}

static void check_commit(const uint8_t *data, size_t size) {
        struct commit_object co = { 0 };

        int r = commit_object_parse(&co, (const char *)data, size);
        if (r == -EBADMSG || r == -ENOMEM) {
                if (co.nodes || co.node_count)
                        abort(); /* zeroed on failure */
                return;
        }
        if (r != 0)
                abort();
        commit_round_trip(&co, data, size);
        commit_object_clear(&co);
}

static void check_step_dir(const uint8_t *data, size_t size) {
        static const char steps_dir[] = "ckpt/jobs/j/steps/";
        char key[OBJECT_KEY_MAX + 1], built[OBJECT_KEY_MAX + 1];
        uint64_t step;

        if (size > OBJECT_KEY_MAX - sizeof(steps_dir))
                return;
        memcpy(key, steps_dir, sizeof(steps_dir) - 1);
        memcpy(key + sizeof(steps_dir) - 1, data, size);
        key[sizeof(steps_dir) - 1 + size] = '\0';
        int r = object_key_parse_step_dir(steps_dir, key, &step);
        if (r == -EINVAL)
                return;
        if (r != 0 || object_key_step_dir(built, sizeof(built), "ckpt", "j", step) != 0 ||
            strcmp(built, key) != 0)
                abort();
}

/* "crc32c " + 8 hex digits + "\n" */
#define CRC_LINE_LEN 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        check_node_manifest(data, size);
        check_commit(data, size);
        check_step_dir(data, size);

        size_t body = size;
        if (size >= CRC_LINE_LEN && memcmp(data + size - CRC_LINE_LEN, "crc32c ", 7) == 0 &&
            data[size - 1] == '\n')
                body = size - CRC_LINE_LEN;
        uint8_t *fixed = malloc(body + CRC_LINE_LEN + 1);
        if (!fixed)
                return 0;
        memcpy(fixed, data, body);
        snprintf((char *)fixed + body, CRC_LINE_LEN + 1, "crc32c %08x\n",
                 (unsigned)crc32c(0, data, body));
        check_node_manifest(fixed, body + CRC_LINE_LEN);
        check_commit(fixed, body + CRC_LINE_LEN);
        free(fixed);
        return 0;
}
