/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the MANIFEST and COMMITTED parsers (daemon/local/manifest.h).
 * Those files are read back after crashes, from disks with bit rot, and from
 * backups a user could have edited, and whether one parses decides whether a
 * checkpoint exists.  So beyond "does not crash" this checks:
 *  - only the documented errors come back;
 *  - a parsed file formats back to exactly the bytes it was parsed from (the
 *    parser accepts only the spelling the formatter writes), and that text
 *    parses again to the same values.
 * Every input goes to both parsers twice: as it is, and with its last line
 * replaced by a correct "end <crc32c>" line.  Without the second pass almost
 * every mutation would stop at the checksum and the fuzzer would never reach
 * the line parsers behind it.  abort() on a violation.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "local/manifest.h"

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

static void check_manifest(const uint8_t *data, size_t size) {
        struct manifest *m = NULL, *again = NULL;
        char *text = NULL;
        size_t len = 0;

        int r = manifest_parse(&m, (const char *)data, size);
        if (r == -EBADMSG || r == -ENOMEM)
                return;
        if (r != 0 || !m)
                abort();
        if (manifest_format(m, &text, &len) != 0)
                abort();
        if (len != size || memcmp(text, data, size) != 0)
                abort();
        if (manifest_parse(&again, text, len) != 0)
                abort();
        manifests_equal(m, again);
        for (uint32_t i = 0; i < m->nshards; i++)
                if (manifest_find(m, m->shards[i].name) != &m->shards[i])
                        abort();
        free(text);
        manifest_free(again);
        manifest_free(m);
}

static void check_commit(const uint8_t *data, size_t size) {
        struct commit_record rec = { 0 }, again = { 0 };
        char *text = NULL;
        size_t len = 0;

        int r = commit_record_parse(&rec, (const char *)data, size);
        if (r == -EBADMSG || r == -ENOMEM) {
                commit_record_clear(&rec);
                return;
        }
        if (r != 0)
                abort();
        if (commit_record_format(&rec, &text, &len) != 0)
                abort();
        if (len != size || memcmp(text, data, size) != 0)
                abort();
        if (commit_record_parse(&again, text, len) != 0)
                abort();
        if (strcmp(rec.job, again.job) != 0 || rec.step != again.step ||
            rec.world_size != again.world_size || rec.nranks != again.nranks ||
            rec.committed_at != again.committed_at)
                abort();
        if (rec.nranks > 0 && memcmp(rec.ranks, again.ranks, rec.nranks * sizeof(uint32_t)) != 0)
                abort();
        free(text);
        commit_record_clear(&again);
        commit_record_clear(&rec);
}

/* "end " + 8 hex digits + "\n" */
#define END_LINE_LEN 13

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        check_manifest(data, size);
        check_commit(data, size);

        size_t body = size;
        if (size >= END_LINE_LEN && memcmp(data + size - END_LINE_LEN, "end ", 4) == 0 &&
            data[size - 1] == '\n')
                body = size - END_LINE_LEN;
        uint8_t *fixed = malloc(body + END_LINE_LEN + 1);
        if (!fixed)
                return 0;
        memcpy(fixed, data, body);
        snprintf((char *)fixed + body, END_LINE_LEN + 1, "end %08x\n", (unsigned)crc32c(0, data, body));
        check_manifest(fixed, body + END_LINE_LEN);
        check_commit(fixed, body + END_LINE_LEN);
        free(fixed);
        return 0;
}
