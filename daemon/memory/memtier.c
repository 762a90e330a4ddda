/* SPDX-License-Identifier: MIT */
/*
 * memtier — pool extents kept after a save, per rank and shard; given back
 * oldest first when the pool runs short.  See memtier.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt-proto.h"
#include "memory/memtier.h"
#include "util/cleanup.h"
#include "util/log.h"

/* drop_ranks(): of any source (no node has this id: LINK_NODES_MAX is small) */
#define MEMTIER_ANY (UINT32_MAX - 1)

/* Bytes [offset, offset + length) of a shard, in extent ext. */
struct piece {
        uint64_t offset, length;
        struct pool_extent ext;
};

struct memtier_rank;

struct memtier_shard {
        struct list link; /* on rank->shards */
        struct memtier_rank *rank;
        char name[CKPT_NAME_MAX + 1];
        uint64_t size;
        uint64_t held;    /* bytes in pieces */
        struct piece *pieces; /* by offset once the rank landed */
        uint32_t npieces, cap;
        /* landed: the MANIFEST's checksums (block_crcs owned) */
        struct manifest_shard sums;
        bool dropped;     /* given back (or never whole): nothing more is kept */
        bool exposed;     /* a client may look at it for as long as it likes */
        uint32_t pins;    /* READ replies pointing at it, not yet done */
        bool orphan;      /* its rank is gone; freed at the last unpin */
};

struct memtier_rank {
        struct list link; /* on mt->ranks, oldest first */
        uint32_t src;     /* MEMTIER_OWN, or the node a replica is of */
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint32_t rank, uid;
        bool landed, committed;
        struct list shards;
};

struct memtier {
        struct pool *pool;
        struct list ranks;
        uint64_t bytes;   /* pool bytes of every kept extent */
};

static bool memtier_evict(void *data);

int memtier_new(struct memtier **out, struct pool *p) {
        struct memtier *mt = calloc(1, sizeof(*mt));
        if (!mt)
                return -ENOMEM;
        mt->pool = p;
        list_init(&mt->ranks);
        pool_set_evictor(p, memtier_evict, mt);
        *out = mt;
        return 0;
}

/* Give back sh's extents: revoked while a client may still look at them,
 * so that the slot gets new memory before it is lent again. */
static void shard_give_back(struct memtier *mt, struct memtier_shard *sh) {
        bool revoke = sh->exposed || sh->pins > 0;
        struct piece *pieces = sh->pieces;
        uint32_t n = sh->npieces;

        /* Detached first: a release serves waiters, and one that finds no
         * memory has memtier_evict() walk the shards again. */
        sh->pieces = NULL;
        sh->npieces = sh->cap = 0;
        sh->held = 0;
        sh->dropped = true;
        for (uint32_t i = 0; i < n; i++) {
                mt->bytes -= pool_extent_bytes(&pieces[i].ext);
                if (revoke)
                        pool_revoke(mt->pool, &pieces[i].ext);
                else
                        pool_release(mt->pool, &pieces[i].ext);
        }
        free(pieces);
}

static void shard_free(struct memtier_shard *sh) {
        free(sh->sums.block_crcs);
        free(sh);
}

static void rank_free(struct memtier *mt, struct memtier_rank *r) {
        struct list *pos, *tmp;

        list_for_each_safe(pos, tmp, &r->shards) {
                struct memtier_shard *sh = list_entry(pos, struct memtier_shard, link);
                shard_give_back(mt, sh);
                list_unlink(&sh->link);
                if (sh->pins > 0)
                        sh->orphan = true; /* memtier_unpin frees it */
                else
                        shard_free(sh);
        }
        list_unlink(&r->link);
        free(r);
}

struct memtier *memtier_free(struct memtier *mt) {
        if (!mt)
                return NULL;
        struct list *pos, *tmp;
        pool_set_evictor(mt->pool, NULL, NULL);
        list_for_each_safe(pos, tmp, &mt->ranks)
                rank_free(mt, list_entry(pos, struct memtier_rank, link));
        free(mt);
        return NULL;
}

static struct memtier_rank *rank_find(const struct memtier *mt, uint32_t src, const char *job,
                                      uint64_t step, uint32_t rank) {
        struct list *pos;

        /* newest first: a save keeps its windows in the newest rank */
        for (pos = mt->ranks.prev; pos != &mt->ranks; pos = pos->prev) {
                struct memtier_rank *r = list_entry(pos, struct memtier_rank, link);
                if (r->step == step && r->rank == rank && r->src == src && !strcmp(r->job, job))
                        return r;
        }
        return NULL;
}

static struct memtier_shard *shard_find(const struct memtier_rank *r, const char *name) {
        struct list *pos;

        list_for_each(pos, &r->shards) {
                struct memtier_shard *sh = list_entry(pos, struct memtier_shard, link);
                if (!strcmp(sh->name, name))
                        return sh;
        }
        return NULL;
}

bool memtier_keep(struct memtier *mt, uint32_t src, const char *job, uint64_t step,
                  uint32_t rank, uint32_t uid, const char *shard, uint64_t size, uint64_t offset,
                  uint64_t length, const struct pool_extent *e) {
        struct memtier_rank *r = rank_find(mt, src, job, step, rank);
        if (r && (r->landed || r->committed))
                return false; /* a rank on disk gains nothing after the fact */
        if (!r) {
                r = calloc(1, sizeof(*r));
                if (!r)
                        return false;
                r->src = src;
                snprintf(r->job, sizeof(r->job), "%s", job);
                r->step = step;
                r->rank = rank;
                r->uid = uid;
                list_init(&r->shards);
                list_add_tail(&mt->ranks, &r->link);
        }
        struct memtier_shard *sh = shard_find(r, shard);
        if (!sh) {
                sh = calloc(1, sizeof(*sh));
                if (!sh)
                        return false;
                sh->rank = r;
                snprintf(sh->name, sizeof(sh->name), "%s", shard);
                sh->size = size;
                list_add_tail(&r->shards, &sh->link);
        }
        if (sh->dropped)
                return false;
        if (sh->npieces == sh->cap) {
                uint32_t cap = sh->cap ? sh->cap * 2 : 4;
                struct piece *n = realloc(sh->pieces, cap * sizeof(*n));
                if (!n) {
                        /* the shard cannot be whole any more */
                        shard_give_back(mt, sh);
                        return false;
                }
                sh->pieces = n;
                sh->cap = cap;
        }
        sh->pieces[sh->npieces++] = (struct piece){ .offset = offset, .length = length, .ext = *e };
        sh->held += length;
        mt->bytes += pool_extent_bytes(e);
        return true;
}

static int piece_cmp(const void *a, const void *b) {
        const struct piece *x = a, *y = b;
        return x->offset < y->offset ? -1 : x->offset > y->offset;
}

void memtier_rank_landed(struct memtier *mt, uint32_t src, const struct manifest *m) {
        struct memtier_rank *r = rank_find(mt, src, m->job, m->step, m->rank);
        struct list *pos;

        if (!r)
                return;
        r->landed = true;
        list_for_each(pos, &r->shards) {
                struct memtier_shard *sh = list_entry(pos, struct memtier_shard, link);
                const struct manifest_shard *ms = manifest_find(m, sh->name);
                if (sh->dropped)
                        continue;
                if (!ms || ms->size != sh->size || sh->held != sh->size) {
                        shard_give_back(mt, sh);
                        continue;
                }
                sh->sums = *ms;
                sh->sums.block_crcs = NULL;
                if (ms->nblocks) {
                        sh->sums.block_crcs = malloc(ms->nblocks * sizeof(uint32_t));
                        if (!sh->sums.block_crcs) {
                                shard_give_back(mt, sh);
                                continue;
                        }
                        memcpy(sh->sums.block_crcs, ms->block_crcs,
                               ms->nblocks * sizeof(uint32_t));
                }
                /* windows are written (and so kept) in any order */
                qsort(sh->pieces, sh->npieces, sizeof(*sh->pieces), piece_cmp);
        }
}

void memtier_drop_rank(struct memtier *mt, uint32_t src, const char *job, uint64_t step,
                       uint32_t rank) {
        struct memtier_rank *r;

        while ((r = rank_find(mt, src, job, step, rank)))
                rank_free(mt, r);
}

/* Drop the ranks of job that pred(r, step) picks (of src only, unless
 * src is MEMTIER_ANY). */
static void drop_ranks(struct memtier *mt, uint32_t src, const char *job, uint64_t step,
                       bool (*pred)(const struct memtier_rank *r, uint64_t step)) {
        struct list *pos, *tmp;

        list_for_each_safe(pos, tmp, &mt->ranks) {
                struct memtier_rank *r = list_entry(pos, struct memtier_rank, link);
                if ((src == MEMTIER_ANY || r->src == src) && !strcmp(r->job, job) && pred(r, step))
                        rank_free(mt, r);
        }
}

static bool is_step(const struct memtier_rank *r, uint64_t step) {
        return r->step == step;
}

static bool older_than(const struct memtier_rank *r, uint64_t step) {
        return r->step < step;
}

void memtier_drop_step(struct memtier *mt, uint32_t src, const char *job, uint64_t step) {
        drop_ranks(mt, src, job, step, is_step);
}

void memtier_step_committed(struct memtier *mt, uint32_t src, const char *job, uint64_t step) {
        struct list *pos;
        bool newer = false;

        list_for_each(pos, &mt->ranks) {
                struct memtier_rank *r = list_entry(pos, struct memtier_rank, link);
                if (strcmp(r->job, job))
                        continue;
                if (r->step == step && r->src == src)
                        r->committed = true;
                else if (r->committed && r->step > step)
                        newer = true;
        }
        /* only the newest committed step of a job is worth memory, whoever
         * saved it: steps are the job's, cluster-wide */
        drop_ranks(mt, MEMTIER_ANY, job, newer ? step + 1 : step, older_than);
        if (newer)
                log_debug("memtier: job %s step %" PRIu64 " committed after a newer one; not kept",
                          job, step);
}

/* Give back the oldest shard kept of a replica (replicas), or of any rank. */
static bool evict_one(struct memtier *mt, bool replicas) {
        struct list *pos, *p2;

        list_for_each(pos, &mt->ranks) {
                struct memtier_rank *r = list_entry(pos, struct memtier_rank, link);
                if (replicas && r->src == MEMTIER_OWN)
                        continue;
                list_for_each(p2, &r->shards) {
                        struct memtier_shard *sh = list_entry(p2, struct memtier_shard, link);
                        if (sh->npieces == 0)
                                continue;
                        log_debug("memtier: job %s step %" PRIu64 " rank %u shard %s given back "
                                  "to the pool (%s)", r->job, r->step, r->rank, sh->name,
                                  sh->exposed || sh->pins ? "revoked: a client saw it"
                                                          : "released");
                        shard_give_back(mt, sh);
                        return true;
                }
        }
        return false;
}

/* The pool's hook: give back the oldest shard kept, replicas before this
 * node's own ranks — a trainer restarted here (the most common failure)
 * reads its own; a neighbour's replica is read only when a node is lost. */
static bool memtier_evict(void *data) {
        struct memtier *mt = data;

        return evict_one(mt, true) || evict_one(mt, false);
}

struct memtier_shard *memtier_find(struct memtier *mt, uint32_t src, const char *job,
                                   uint64_t step, uint32_t rank, const char *shard) {
        struct memtier_rank *r = rank_find(mt, src, job, step, rank);
        if (!r || !r->landed || !r->committed)
                return NULL;
        struct memtier_shard *sh = shard_find(r, shard);
        if (!sh || sh->dropped || sh->held != sh->size)
                return NULL;
        return sh;
}

uint64_t memtier_shard_size(const struct memtier_shard *sh) {
        return sh->size;
}

uint32_t memtier_shard_crc32c(const struct memtier_shard *sh) {
        return sh->sums.crc32c;
}

uint64_t memtier_locate(const struct memtier_shard *sh, uint64_t offset, uint64_t max,
                        struct pool_extent *e, uint64_t *in_extent) {
        for (uint32_t i = 0; i < sh->npieces; i++) {
                const struct piece *pc = &sh->pieces[i];
                if (offset < pc->offset || offset >= pc->offset + pc->length)
                        continue;
                *e = pc->ext;
                *in_extent = offset - pc->offset;
                return MIN(max, pc->offset + pc->length - offset);
        }
        return 0;
}

int memtier_verify(const struct memtier_shard *sh, uint64_t offset, uint64_t length,
                   uint64_t *bad) {
        struct pool_extent e;
        uint64_t in;
        /* whole blocks: from the one offset is in to the one the range ends in */
        uint64_t start = ALIGN_DOWN(offset, (uint64_t)MANIFEST_BLOCK_SIZE);
        uint64_t end = MIN(ALIGN_UP(offset + length, (uint64_t)MANIFEST_BLOCK_SIZE), sh->size);

        if (memtier_locate(sh, start, end - start, &e, &in) != end - start) {
                *bad = start / MANIFEST_BLOCK_SIZE;
                return -EBADMSG;
        }
        int64_t b = manifest_shard_check(&sh->sums, start, (const char *)pool_extent_addr(&e) + in,
                                         end - start);
        if (b >= 0) {
                *bad = (uint64_t)b;
                return -EBADMSG;
        }
        return 0;
}

int memtier_copy(const struct memtier_shard *sh, uint64_t offset, uint64_t length, void *dst,
                 uint64_t *bad) {
        if (offset % MANIFEST_BLOCK_SIZE || offset > sh->size || length > sh->size - offset ||
            (length % MANIFEST_BLOCK_SIZE && offset + length != sh->size))
                return -EINVAL;
        for (uint64_t done = 0; done < length;) {
                struct pool_extent e;
                uint64_t in;
                uint64_t n = memtier_locate(sh, offset + done, length - done, &e, &in);
                if (n == 0)
                        return -ENODATA;
                memcpy((char *)dst + done, (const char *)pool_extent_addr(&e) + in, n);
                done += n;
        }
        /* the copy is checked, not the kept memory: the bytes the caller
         * goes on with are the ones that passed */
        int64_t b = manifest_shard_check(&sh->sums, offset, dst, length);
        if (b >= 0) {
                *bad = (uint64_t)b;
                return -EBADMSG;
        }
        return 0;
}

bool memtier_contiguous(const struct memtier_shard *sh, struct slot **slot, uint64_t *offset) {
        if (sh->npieces == 0)
                return false;
        const struct pool_extent *first = &sh->pieces[0].ext;
        for (uint32_t i = 0; i < sh->npieces; i++) {
                const struct piece *pc = &sh->pieces[i];
                if (pc->ext.slot != first->slot ||
                    pool_extent_offset(&pc->ext) != pool_extent_offset(first) + pc->offset)
                        return false;
        }
        *slot = first->slot;
        *offset = pool_extent_offset(first);
        return true;
}

void memtier_pin(struct memtier_shard *sh) {
        sh->pins++;
}

void memtier_unpin(struct memtier *mt, struct memtier_shard *sh, bool expose) {
        (void)mt;
        if (expose)
                sh->exposed = true;
        if (sh->pins > 0)
                sh->pins--;
        if (sh->orphan && sh->pins == 0)
                shard_free(sh);
}

void memtier_expose(struct memtier_shard *sh) {
        sh->exposed = true;
}

void memtier_drop_shard(struct memtier *mt, struct memtier_shard *sh) {
        /* the rank keeps the entry, so nothing more is kept of it */
        shard_give_back(mt, sh);
}

uint64_t memtier_bytes(const struct memtier *mt) {
        return mt->bytes;
}

/* Does r hold a resident shard? */
static bool rank_resident(const struct memtier_rank *r) {
        struct list *pos;

        if (!r->landed || !r->committed || r->src != MEMTIER_OWN)
                return false;
        list_for_each(pos, &r->shards) {
                const struct memtier_shard *sh = list_entry(pos, struct memtier_shard, link);
                if (!sh->dropped && sh->held == sh->size)
                        return true;
        }
        return false;
}

uint32_t memtier_steps(const struct memtier *mt) {
        struct list *pos, *p2;
        uint32_t n = 0;

        list_for_each(pos, &mt->ranks) {
                const struct memtier_rank *r = list_entry(pos, struct memtier_rank, link);
                if (!rank_resident(r))
                        continue;
                /* counted at its first resident rank in the list */
                bool seen = false;
                list_for_each(p2, &mt->ranks) {
                        const struct memtier_rank *o = list_entry(p2, struct memtier_rank, link);
                        if (o == r)
                                break;
                        if (o->step == r->step && !strcmp(o->job, r->job) && rank_resident(o)) {
                                seen = true;
                                break;
                        }
                }
                n += !seen;
        }
        return n;
}

bool memtier_step_resident(const struct memtier *mt, const char *job, uint64_t step) {
        struct list *pos, *p2;
        bool any = false;

        list_for_each(pos, &mt->ranks) {
                const struct memtier_rank *r = list_entry(pos, struct memtier_rank, link);
                if (r->step != step || r->src != MEMTIER_OWN || strcmp(r->job, job))
                        continue;
                if (!r->landed || !r->committed)
                        return false;
                list_for_each(p2, &r->shards) {
                        const struct memtier_shard *sh = list_entry(p2, struct memtier_shard, link);
                        if (sh->dropped || sh->held != sh->size)
                                return false;
                }
                any = true;
        }
        return any;
}
