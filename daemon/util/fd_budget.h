/* SPDX-License-Identifier: MIT */
/*
 * fd_budget — how many file descriptors the daemon holds on each uid's
 * behalf, and the cap on it ([daemon] open_files_per_uid).
 *
 * A client makes the daemon hold descriptors it cannot otherwise bound:
 * every unfinished save keeps its rank's directories open and every shard
 * begun in it keeps its file open until the rank is on disk (or aborted);
 * a READ keeps the shard open while its window is read.  Without a cap one
 * uid could open tens of thousands (64 saves per connection, 65536 shards
 * per rank, 256 connections) and leave every other uid, and the listeners,
 * with EMFILE.  The cap is per uid because the harm is to other uids;
 * root is counted but never refused (it is held only to RLIMIT_NOFILE).
 *
 * A restore from the object store writes a rank the same way, with all
 * its shard files open at once.
 *
 * The server owns one; save.c, restore.c and the fetcher take before they
 * open and give back once the descriptors are closed.  It lives in util/
 * because it knows nothing of checkpoints and remote/ sits below server/.
 * Loop thread only.
 */
#pragma once

#include <stdint.h>

struct fd_budget_entry {
        uint32_t uid;
        uint32_t held;
};

struct fd_budget {
        uint32_t per_uid;               /* 0: no cap */
        struct fd_budget_entry *uids;   /* those holding any, unordered */
        uint32_t nuids, cap;
};

void fd_budget_init(struct fd_budget *b, uint32_t per_uid);
void fd_budget_clear(struct fd_budget *b);
/* Would fd_budget_take() refuse?  0, or -EMFILE; nothing changes. */
int fd_budget_check(const struct fd_budget *b, uint32_t uid, uint32_t n);
/* Take n descriptors for uid.  -EMFILE when uid (not root) would then hold
 * more than per_uid: nothing is taken, and the caller refuses the request
 * (fd_budget_held() says what uid holds, for the message).  -ENOMEM. */
int fd_budget_take(struct fd_budget *b, uint32_t uid, uint32_t n);
/* Give back n descriptors taken for uid (they are closed). */
void fd_budget_give(struct fd_budget *b, uint32_t uid, uint32_t n);
uint32_t fd_budget_held(const struct fd_budget *b, uint32_t uid);
