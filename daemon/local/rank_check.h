/* SPDX-License-Identifier: MIT */
/*
 * rank_check — re-read one rank's copy in a store and compare every block
 * with its MANIFEST's CRC32C: the answer to "is this node's copy of the
 * rank still good?", asked when a neighbour refused the copy this node
 * sent it (docs/replication.md, "A refused replica").
 *
 * It reads the rank's whole data, so it blocks: call it on a worker thread
 * (io/worker.h), never on the loop.  It touches only the store's immutable
 * root (rank directories are opened by path under it), so it may run while
 * the loop uses the same store.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "ckpt-proto.h"
#include "local/store.h"

/* Where a copy went bad. */
struct rank_fault {
        char shard[CKPT_NAME_MAX + 1]; /* "" when the MANIFEST itself is bad */
        int64_t block;                 /* block index within the shard; -1: the whole file */
        char why[160];                 /* e.g. "failed its CRC32C", "is 3 bytes short" */
};

/*
 * Re-read every block of (job, step, rank) in s, bypassing the page cache
 * where the file system allows it (so the medium is what is checked, not a
 * cached page), and check each against the manifest on disk.
 *
 * 0: every block matches.  -EBADMSG: the copy is bad; *fault says where
 * (the first bad block found).  -ENOENT: the rank is not there (retention
 * removed it).  Other -errno: it could not be read (then *fault->why says
 * what failed).  Blocking; thread-safe as described above.
 */
int rank_check(struct store *s, const char *job, uint64_t step, uint32_t rank,
               struct rank_fault *fault);
