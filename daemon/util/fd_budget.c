/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>

#include "util/fd_budget.h"
#include "util/log.h"

void fd_budget_init(struct fd_budget *b, uint32_t per_uid) {
        *b = (struct fd_budget){ .per_uid = per_uid };
}

void fd_budget_clear(struct fd_budget *b) {
        free(b->uids);
        *b = (struct fd_budget){ .per_uid = b->per_uid };
}

/* A linear walk: the entries are the uids with saves or reads under way on
 * this node, a handful, and the walk is one per SAVE_BEGIN, SHARD_BEGIN or
 * READ, each of which costs a system call anyway. */
static struct fd_budget_entry *fd_budget_find(const struct fd_budget *b, uint32_t uid) {
        for (uint32_t i = 0; i < b->nuids; i++)
                if (b->uids[i].uid == uid)
                        return &b->uids[i];
        return NULL;
}

uint32_t fd_budget_held(const struct fd_budget *b, uint32_t uid) {
        const struct fd_budget_entry *e = fd_budget_find(b, uid);
        return e ? e->held : 0;
}

int fd_budget_check(const struct fd_budget *b, uint32_t uid, uint32_t n) {
        if (uid != 0 && b->per_uid && (uint64_t)fd_budget_held(b, uid) + n > b->per_uid)
                return -EMFILE;
        return 0;
}

int fd_budget_take(struct fd_budget *b, uint32_t uid, uint32_t n) {
        struct fd_budget_entry *e = fd_budget_find(b, uid);

        if (fd_budget_check(b, uid, n) < 0)
                return -EMFILE;
        if (!e) {
                if (b->nuids == b->cap) {
                        uint32_t cap = b->cap ? b->cap * 2 : 8;
                        struct fd_budget_entry *v = realloc(b->uids, cap * sizeof(*v));
                        if (!v)
                                return -ENOMEM;
                        b->uids = v;
                        b->cap = cap;
                }
                e = &b->uids[b->nuids++];
                *e = (struct fd_budget_entry){ .uid = uid };
        }
        e->held += n;
        return 0;
}

void fd_budget_give(struct fd_budget *b, uint32_t uid, uint32_t n) {
        struct fd_budget_entry *e = fd_budget_find(b, uid);

        if (!e || e->held < n) {
                /* a bookkeeping bug: say so, and do not wrap around */
                log_error("fd_budget: uid %u gives back %u descriptors but holds %u", uid, n,
                          e ? e->held : 0);
                if (e)
                        e->held = 0;
        } else {
                e->held -= n;
        }
        if (e && e->held == 0)
                *e = b->uids[--b->nuids];
}
