/* SPDX-License-Identifier: MIT */
/*
 * rank_check — a rank's copy re-read against its manifest (see rank_check.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "local/manifest.h"
#include "local/rank_check.h"
#include "util/cleanup.h"

DEFINE_CLEANUP(struct manifest *, manifest_free)

/* O_DIRECT needs an aligned buffer; 4 KiB covers every logical block size. */
#define CHECK_ALIGN 4096

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

/* Check one shard of m, read through fd into buf (MANIFEST_BLOCK_SIZE bytes). */
static int shard_check(int fd, const struct manifest_shard *sh, uint8_t *buf,
                       struct rank_fault *f) {
        struct stat st;
        if (fstat(fd, &st) < 0)
                return fault_set(f, sh->name, -1, -errno, "cannot be examined: %s",
                                 strerror(errno));
        /* a file of another size is not the copy that was saved */
        if ((uint64_t)st.st_size != sh->size)
                return fault_set(f, sh->name, (int64_t)MIN((uint64_t)st.st_size, sh->size) /
                                                      MANIFEST_BLOCK_SIZE,
                                 -EBADMSG, "is %" PRIu64 " bytes, its manifest says %" PRIu64,
                                 (uint64_t)st.st_size, sh->size);
        for (uint64_t b = 0; b < sh->nblocks; b++) {
                uint64_t off = b * MANIFEST_BLOCK_SIZE;
                size_t want = (size_t)MIN((uint64_t)MANIFEST_BLOCK_SIZE, sh->size - off);
                size_t got = 0;
                while (got < want) {
                        /* O_DIRECT reads whole aligned units: ask for the
                         * block rounded up, the file's end stops it short */
                        ssize_t n = pread(fd, buf + got, ALIGN_UP(want, CHECK_ALIGN) - got,
                                          (off_t)(off + got));
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n < 0)
                                return fault_set(f, sh->name, (int64_t)b, -errno,
                                                 "cannot be read: %s", strerror(errno));
                        if (n == 0)
                                return fault_set(f, sh->name, (int64_t)b, -EBADMSG,
                                                 "is short: the file ends at %" PRIu64
                                                 " bytes, the manifest says %" PRIu64,
                                                 off + got, sh->size);
                        got += (size_t)n;
                }
                if (crc32c(0, buf, want) != sh->block_crcs[b])
                        return fault_set(f, sh->name, (int64_t)b, -EBADMSG, "failed its CRC32C");
        }
        return 0;
}

int rank_check(struct store *s, const char *job, uint64_t step, uint32_t rank,
               struct rank_fault *f) {
        _cleanup_(manifest_freep) struct manifest *m = NULL;
        _cleanup_free_ uint8_t *buf = NULL;

        memset(f, 0, sizeof(*f));
        f->block = -1;
        int r = store_rank_manifest(s, job, step, rank, &m);
        if (r == -ENOENT)
                return fault_set(f, "", -1, r, "the rank is not on this node");
        if (r < 0)
                return fault_set(f, "", -1, r == -EBADMSG ? -EBADMSG : r,
                                 "its MANIFEST cannot be read: %s", strerror(-r));
        if (posix_memalign((void **)&buf, CHECK_ALIGN,
                           ALIGN_UP((size_t)MANIFEST_BLOCK_SIZE, CHECK_ALIGN)) != 0)
                return fault_set(f, "", -1, -ENOMEM, "out of memory");
        for (uint32_t i = 0; i < m->nshards; i++) {
                const struct manifest_shard *sh = &m->shards[i];
                _cleanup_close_ int fd = -1;
                r = store_shard_open_buffered(s, job, step, rank, sh->name, &fd);
                if (r < 0)
                        return fault_set(f, sh->name, -1, r == -ENOENT ? -EBADMSG : r,
                                         "cannot be opened: %s", strerror(-r));
                /* the medium, not the page cache (which sendfile sent from);
                 * a file system without O_DIRECT (tmpfs) is read buffered */
                int fl = fcntl(fd, F_GETFL);
                if (fl >= 0)
                        (void)fcntl(fd, F_SETFL, fl | O_DIRECT);
                r = shard_check(fd, sh, buf, f);
                if (r < 0)
                        return r;
        }
        return 0;
}
