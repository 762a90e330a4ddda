/* SPDX-License-Identifier: MIT */
/*
 * rank_check — a rank's copy re-read against its manifest (see rank_check.h):
 * the MANIFEST and the shard files opened here, each shard checked by
 * store_shard_verify() (the check VERIFY and the audit use too), and its
 * finding put in the words the peers log for a refusal.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "local/manifest.h"
#include "local/rank_check.h"
#include "util/cleanup.h"

DEFINE_CLEANUP(struct manifest *, manifest_free)

static int fault_set(struct rank_fault *f, const char *shard, int64_t block, int error,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int fault_set(struct rank_fault *f, const char *shard, int64_t block, int error,
                     const char *fmt, ...) {
        va_list ap;
        snprintf(f->shard, sizeof(f->shard), "%s", shard);
        f->block = block;
        va_start(ap, fmt);
        vsnprintf(f->why, sizeof(f->why), fmt, ap);
        va_end(ap);
        return error;
}

/* store_shard_verify()'s finding in a refusal's words (the peers log it). */
static int shard_fault(struct rank_fault *f, const struct manifest_shard *sh, int r,
                       const struct store_shard_fault *sf) {
        switch (sf->bad) {
        case STORE_SHARD_GOOD:
                return 0;
        case STORE_SHARD_SIZE:
                return fault_set(f, sh->name, sf->block, -EBADMSG,
                                 "is %" PRIu64 " bytes, its manifest says %" PRIu64, sf->size,
                                 sh->size);
        case STORE_SHARD_SHORT:
                return fault_set(f, sh->name, sf->block, -EBADMSG,
                                 "is short: the file ends at %" PRIu64
                                 " bytes, the manifest says %" PRIu64,
                                 sf->size, sh->size);
        case STORE_SHARD_CRC:
                return fault_set(f, sh->name, sf->block, -EBADMSG, "failed its CRC32C");
        case STORE_SHARD_MISSING: /* store_shard_verify() has the file open */
        case STORE_SHARD_IO:
                break;
        }
        if (r == -ENOMEM && sf->block < 0)
                return fault_set(f, "", -1, -ENOMEM, "out of memory");
        if (sf->block < 0)
                return fault_set(f, sh->name, -1, r, "cannot be examined: %s", strerror(-r));
        return fault_set(f, sh->name, sf->block, r, "cannot be read: %s", strerror(-r));
}

int rank_check(struct store *s, const char *job, uint64_t step, uint32_t rank,
               struct rank_fault *f) {
        _cleanup_(manifest_freep) struct manifest *m = NULL;

        memset(f, 0, sizeof(*f));
        f->block = -1;
        int r = store_rank_manifest(s, job, step, rank, &m);
        if (r == -ENOENT)
                return fault_set(f, "", -1, r, "the rank is not on this node");
        if (r < 0)
                return fault_set(f, "", -1, r == -EBADMSG ? -EBADMSG : r,
                                 "its MANIFEST cannot be read: %s", strerror(-r));
        for (uint32_t i = 0; i < m->nshards; i++) {
                const struct manifest_shard *sh = &m->shards[i];
                _cleanup_close_ int fd = -1;
                r = store_shard_open_buffered(s, job, step, rank, sh->name, &fd);
                if (r < 0)
                        return fault_set(f, sh->name, -1, r == -ENOENT ? -EBADMSG : r,
                                         "cannot be opened: %s", strerror(-r));
                /* the medium, not the page cache (which sendfile sent from) */
                struct store_shard_fault sf;
                r = shard_fault(f, sh, store_shard_verify(fd, m, sh, STORE_VERIFY_DIRECT, &sf), &sf);
                if (r < 0)
                        return r;
        }
        return 0;
}
