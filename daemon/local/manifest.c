/* SPDX-License-Identifier: MIT */
/*
 * Manifest and commit-record text: render and strict parse.
 *
 * A rank directory exists for readers exactly when its MANIFEST parses, so
 * the parser is the gate between whatever is on disk (torn writes, bit rot,
 * a hostile user with write access to a backup) and the catalog.  It accepts
 * exactly one spelling of each value — the one manifest_format() writes — and
 * answers -EBADMSG for anything else, so "parses" really means "we wrote it
 * and nothing touched it since".  The format is specified in docs/on-disk.md.
 *
 * The end line's CRC32C is checked first: nearly every corruption stops
 * there, before any count from the file drives an allocation.  Counts are
 * still bounded by what the remaining text could possibly hold, so a
 * well-checksummed but hostile file cannot make us allocate much more than
 * its own size.
 *
 * The formatter checks the same invariants the parser does and returns
 * -EINVAL rather than write a file it would later refuse to read.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt-proto.h"
#include "crc32c.h"
#include "local/manifest.h"
#include "util/cleanup.h"
#include "util/textfmt.h"

#define MANIFEST_MAGIC "ckptd-manifest 1"
#define COMMIT_MAGIC "ckptd-commit 1"
/* Longest line a manifest may hold: "shard" + a 255-byte name + a 20-digit
 * size + a CRC is under 300; blocks lines are shorter. */
#define LINE_MAX_BYTES TEXT_LINE_MAX
/* The last line is "end <crc32c>" (text_finish(), body_verify()). */
#define CRC_KEY "end"
/* Block CRCs per "blocks" line, so lines stay short for any shard size. */
#define BLOCKS_PER_LINE 16
#define BLOCK_SIZE_MIN 4096u
#define BLOCK_SIZE_MAX (1u << 30)
/* Fewest bytes a shard entry ("shard a 0 00000000\n") or one block CRC
 * (" 00000000") can take; bounds allocations by the text's length. */
#define SHARD_TEXT_MIN 19
#define BLOCK_TEXT_MIN 9

/* ---- shared helpers ---------------------------------------------------- */

static bool name_ok(const char *name, size_t cap) {
        size_t len = strnlen(name, cap);
        return len < cap && ckpt_name_validate(name, len) == 0;
}

/* A shard file lives next to the MANIFEST, so that one name is taken. */
static bool shard_name_ok(const char *name, size_t cap) {
        return name_ok(name, cap) && strcmp(name, MANIFEST_FILE) != 0;
}

static bool block_size_ok(uint64_t bs) {
        return bs >= BLOCK_SIZE_MIN && bs <= BLOCK_SIZE_MAX && (bs & (bs - 1)) == 0;
}

static uint64_t blocks_for(uint64_t size, uint64_t block_size) {
        return size == 0 ? 0 : (size - 1) / block_size + 1;
}

/* Do the per-block CRCs (block i covering [i*bs, min((i+1)*bs, size)))
 * combine to the whole shard's CRC? */
static bool blocks_match(const uint32_t *crcs, uint64_t nblocks, uint64_t size,
                         uint64_t block_size, uint32_t crc) {
        uint32_t acc = 0;

        for (uint64_t i = 0; i < nblocks; i++) {
                uint64_t len = i + 1 < nblocks ? block_size : size - i * block_size;
                acc = crc32c_combine(acc, crcs[i], len);
        }
        return acc == crc;
}

/* ---- name tokens -------------------------------------------------------- */

/* n is what tok_str()/line_str() returned for out: 0 if it read a name
 * ckpt_name_validate() accepts, else -EBADMSG (or their error). */
static int name_token(const char *out, int n) {
        if (n < 0)
                return n;
        return ckpt_name_validate(out, (size_t)n) < 0 ? -EBADMSG : 0;
}

static int tok_name(struct cursor *l, char out[static CKPT_NAME_MAX + 1]) {
        return name_token(out, tok_str(l, out, CKPT_NAME_MAX + 1));
}

/* A "<key> <name>" line. */
static int line_name(struct cursor *c, const char *key, char out[static CKPT_NAME_MAX + 1]) {
        return name_token(out, line_str(c, key, out, CKPT_NAME_MAX + 1));
}

/* ---- manifest ---------------------------------------------------------- */

/* The shards array grows in powers of two (at least 8); parse allocates the
 * same way so add_shard works on a parsed manifest too. */
static size_t shards_capacity(size_t n) {
        size_t cap = 8;
        if (n == 0)
                return 0;
        while (cap < n)
                cap *= 2;
        return cap;
}

int manifest_new(struct manifest **out, const char *job, uint64_t step, uint32_t rank,
                 uint32_t world_size, uint32_t uid) {
        struct manifest *m;

        if (!out || !job || !name_ok(job, sizeof(m->job)))
                return -EINVAL;
        if (step > CKPT_STEP_MAX || world_size == 0 || world_size > CKPT_WORLD_MAX ||
            rank >= world_size)
                return -EINVAL;
        m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        strcpy(m->job, job);
        m->step = step;
        m->rank = rank;
        m->world_size = world_size;
        m->uid = uid;
        m->block_size = MANIFEST_BLOCK_SIZE;
        *out = m;
        return 0;
}

struct manifest *manifest_free(struct manifest *m) {
        if (!m)
                return NULL;
        for (uint32_t i = 0; i < m->nshards; i++)
                free(m->shards[i].block_crcs);
        free(m->shards);
        free(m);
        return NULL;
}

DEFINE_CLEANUP(struct manifest *, manifest_free)

const struct manifest_shard *manifest_find(const struct manifest *m, const char *name) {
        if (!m || !name)
                return NULL;
        for (uint32_t i = 0; i < m->nshards; i++)
                if (strcmp(m->shards[i].name, name) == 0)
                        return &m->shards[i];
        return NULL;
}

uint64_t manifest_bytes(const struct manifest *m) {
        uint64_t total = 0;

        if (!m)
                return 0;
        for (uint32_t i = 0; i < m->nshards; i++)
                total = m->shards[i].size > UINT64_MAX - total ? UINT64_MAX
                                                               : total + m->shards[i].size;
        return total;
}

/* Make room for one more shard. */
static int shards_grow(struct manifest *m) {
        size_t cap = shards_capacity(m->nshards);

        if (m->nshards < cap)
                return 0;
        cap = cap ? cap * 2 : 8;
        struct manifest_shard *s = realloc(m->shards, cap * sizeof(*s));
        if (!s)
                return -ENOMEM;
        m->shards = s;
        return 0;
}

/* Adding a shard whose block CRCs do not combine to its CRC is -EINVAL: such
 * a manifest could never be read back, so refuse it while the caller can
 * still say which shard was wrong.  So is a shard named MANIFEST_FILE, whose
 * file would collide with the manifest's. */
int manifest_add_shard(struct manifest *m, const char *name, uint64_t size, uint32_t crc32c,
                       const uint32_t *block_crcs) {
        if (m && name && manifest_find(m, name))
                return -EEXIST;
        return manifest_add_unique_shard(m, name, size, crc32c, block_crcs);
}

int manifest_add_unique_shard(struct manifest *m, const char *name, uint64_t size,
                              uint32_t crc32c, const uint32_t *block_crcs) {
        if (!m || !name || !shard_name_ok(name, sizeof(m->shards[0].name)))
                return -EINVAL;
        if (m->nshards >= MANIFEST_SHARDS_MAX)
                return -E2BIG;
        if (!block_size_ok(m->block_size) || size > CKPT_SHARD_SIZE_MAX)
                return -EINVAL;

        uint64_t nblocks = blocks_for(size, m->block_size);
        if (nblocks > 0 && !block_crcs)
                return -EINVAL;
        if (nblocks > SIZE_MAX / sizeof(uint32_t))
                return -ENOMEM;
        if (!blocks_match(block_crcs, nblocks, size, m->block_size, crc32c))
                return -EINVAL;

        _cleanup_free_ uint32_t *crcs = NULL;
        if (nblocks > 0) {
                crcs = malloc((size_t)nblocks * sizeof(uint32_t));
                if (!crcs)
                        return -ENOMEM;
                memcpy(crcs, block_crcs, (size_t)nblocks * sizeof(uint32_t));
        }
        int r = shards_grow(m);
        if (r < 0)
                return r;

        struct manifest_shard *s = &m->shards[m->nshards];
        memset(s, 0, sizeof(*s));
        strcpy(s->name, name);
        s->size = size;
        s->crc32c = crc32c;
        s->nblocks = nblocks;
        s->block_crcs = TAKE_PTR(crcs);
        m->nshards++;
        return 0;
}

static int name_cmp(const void *a, const void *b) {
        const struct manifest_shard *const *x = a, *const *y = b;
        return strcmp((*x)->name, (*y)->name);
}

/* Shard names must be unique; sorting keeps this O(n log n) for the largest
 * manifests we accept. */
static int names_unique(const struct manifest *m) {
        if (m->nshards < 2)
                return 1;
        _cleanup_free_ const struct manifest_shard **v = malloc(m->nshards * sizeof(*v));
        if (!v)
                return -ENOMEM;
        for (uint32_t i = 0; i < m->nshards; i++)
                v[i] = &m->shards[i];
        qsort(v, m->nshards, sizeof(*v), name_cmp);
        for (uint32_t i = 1; i < m->nshards; i++)
                if (strcmp(v[i - 1]->name, v[i]->name) == 0)
                        return 0;
        return 1;
}

/* Everything manifest_parse() would check, for a struct built (or edited) in
 * memory.  0, -EINVAL or -ENOMEM. */
static int manifest_check(const struct manifest *m) {
        if (!name_ok(m->job, sizeof(m->job)) || m->step > CKPT_STEP_MAX ||
            m->world_size == 0 || m->world_size > CKPT_WORLD_MAX || m->rank >= m->world_size ||
            !block_size_ok(m->block_size) || m->nshards > MANIFEST_SHARDS_MAX ||
            (m->nshards > 0 && !m->shards))
                return -EINVAL;
        for (uint32_t i = 0; i < m->nshards; i++) {
                const struct manifest_shard *s = &m->shards[i];
                if (!shard_name_ok(s->name, sizeof(s->name)) || s->size > CKPT_SHARD_SIZE_MAX ||
                    s->nblocks != blocks_for(s->size, m->block_size) ||
                    (s->nblocks > 0 && !s->block_crcs) ||
                    !blocks_match(s->block_crcs, s->nblocks, s->size, m->block_size, s->crc32c))
                        return -EINVAL;
        }
        int r = names_unique(m);
        if (r < 0)
                return r;
        return r ? 0 : -EINVAL;
}

/* Renders m.  0, -ENOMEM, or -EINVAL if m breaks an invariant the parser
 * enforces (only possible if the caller edited the struct by hand). */
int manifest_format(const struct manifest *m, char **out, size_t *len) {
        struct text t;
        int r;

        if (!m || !out || !len)
                return -EINVAL;
        r = manifest_check(m);
        if (r < 0)
                return r;
        r = text_init(&t, 4096);
        if (r < 0)
                return r;
        text_printf(&t,
                    MANIFEST_MAGIC "\n"
                                   "job %s\n"
                                   "step %" PRIu64 "\n"
                                   "rank %" PRIu32 "\n"
                                   "world_size %" PRIu32 "\n"
                                   "uid %" PRIu32 "\n"
                                   "block_size %" PRIu32 "\n"
                                   "shards %" PRIu32 "\n",
                    m->job, m->step, m->rank, m->world_size, m->uid, m->block_size, m->nshards);
        for (uint32_t i = 0; i < m->nshards && !t.failed; i++) {
                const struct manifest_shard *s = &m->shards[i];
                text_printf(&t, "shard %s %" PRIu64 " %08" PRIx32 "\n", s->name, s->size,
                            s->crc32c);
                for (uint64_t b = 0; b < s->nblocks && !t.failed; b++)
                        text_printf(&t, "%s%08" PRIx32 "%s", b % BLOCKS_PER_LINE ? " " : "blocks ",
                                    s->block_crcs[b],
                                    b % BLOCKS_PER_LINE == BLOCKS_PER_LINE - 1 ||
                                                    b + 1 == s->nblocks
                                            ? "\n"
                                            : "");
        }
        return text_finish(&t, CRC_KEY, out, len);
}

/* One shard entry: the shard line and its blocks lines. */
static int shard_parse(struct cursor *c, const struct manifest *m, struct manifest_shard *s) {
        struct cursor l;
        uint64_t nblocks;
        int r;

        r = line_next(c, &l, LINE_MAX_BYTES);
        if (r >= 0)
                r = tok_word(&l, "shard");
        if (r >= 0)
                r = tok_name(&l, s->name);
        if (r >= 0 && strcmp(s->name, MANIFEST_FILE) == 0)
                r = -EBADMSG;
        if (r >= 0)
                r = tok_u64(&l, CKPT_SHARD_SIZE_MAX, &s->size);
        if (r >= 0)
                r = tok_hex32(&l, &s->crc32c);
        if (r >= 0)
                r = line_done(&l);
        if (r < 0)
                return r;

        nblocks = blocks_for(s->size, m->block_size);
        if (nblocks > (uint64_t)(c->end - c->p) / BLOCK_TEXT_MIN)
                return -EBADMSG;
        if (nblocks > 0) {
                s->block_crcs = malloc((size_t)nblocks * sizeof(uint32_t));
                if (!s->block_crcs)
                        return -ENOMEM;
        }
        s->nblocks = nblocks;

        for (uint64_t b = 0; b < nblocks; b += BLOCKS_PER_LINE) {
                uint64_t n = nblocks - b < BLOCKS_PER_LINE ? nblocks - b : BLOCKS_PER_LINE;
                r = line_next(c, &l, LINE_MAX_BYTES);
                if (r >= 0)
                        r = tok_word(&l, "blocks");
                for (uint64_t i = 0; i < n && r >= 0; i++)
                        r = tok_hex32(&l, &s->block_crcs[b + i]);
                if (r >= 0)
                        r = line_done(&l);
                if (r < 0)
                        return r;
        }
        if (!blocks_match(s->block_crcs, nblocks, s->size, m->block_size, s->crc32c))
                return -EBADMSG;
        return 0;
}

int manifest_parse(struct manifest **out, const char *text, size_t len) {
        _cleanup_(manifest_freep) struct manifest *m = NULL;
        struct cursor c;
        uint32_t nshards;
        int r;

        if (!out)
                return -EINVAL;
        r = body_verify(&c, text, len, CRC_KEY);
        if (r < 0)
                return r;

        m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        r = line_magic(&c, MANIFEST_MAGIC);
        if (r >= 0)
                r = line_name(&c, "job", m->job);
        if (r >= 0)
                r = line_u64(&c, "step", CKPT_STEP_MAX, &m->step);
        if (r >= 0)
                r = line_u32(&c, "rank", CKPT_WORLD_MAX - 1, &m->rank);
        if (r >= 0)
                r = line_u32(&c, "world_size", CKPT_WORLD_MAX, &m->world_size);
        if (r >= 0)
                r = line_u32(&c, "uid", UINT32_MAX, &m->uid);
        if (r >= 0)
                r = line_u32(&c, "block_size", BLOCK_SIZE_MAX, &m->block_size);
        if (r >= 0)
                r = line_u32(&c, "shards", MANIFEST_SHARDS_MAX, &nshards);
        if (r < 0)
                return r;
        if (m->world_size == 0 || m->rank >= m->world_size || !block_size_ok(m->block_size))
                return -EBADMSG;
        if (nshards > (size_t)(c.end - c.p) / SHARD_TEXT_MIN)
                return -EBADMSG;

        if (nshards > 0) {
                m->shards = calloc(shards_capacity(nshards), sizeof(*m->shards));
                if (!m->shards)
                        return -ENOMEM;
        }
        for (uint32_t i = 0; i < nshards; i++) {
                /* Counted before parsing so manifest_free() sees its blocks. */
                m->nshards = i + 1;
                r = shard_parse(&c, m, &m->shards[i]);
                if (r < 0)
                        return r;
        }
        if (c.p != c.end)
                return -EBADMSG;
        r = names_unique(m);
        if (r < 0)
                return r;
        if (r == 0)
                return -EBADMSG;

        *out = TAKE_PTR(m);
        return 0;
}

/* ---- commit record ----------------------------------------------------- */

/* "ranks <n>" and up to CKPT_WORLD_MAX ranks of at most 7 digits each. */
#define RANKS_LINE_MAX (16 + 8 * (size_t)CKPT_WORLD_MAX)

void commit_record_clear(struct commit_record *r) {
        if (!r)
                return;
        free(r->ranks);
        r->ranks = NULL;
        r->nranks = 0;
}

static int commit_record_check(const struct commit_record *r) {
        if (!name_ok(r->job, sizeof(r->job)) || r->step > CKPT_STEP_MAX || r->world_size == 0 ||
            r->world_size > CKPT_WORLD_MAX || r->nranks > r->world_size ||
            (r->nranks > 0 && !r->ranks) || r->committed_at < 0)
                return -EINVAL;
        for (uint32_t i = 0; i < r->nranks; i++)
                if (r->ranks[i] >= r->world_size || (i > 0 && r->ranks[i] <= r->ranks[i - 1]))
                        return -EINVAL;
        return 0;
}

/* 0, -ENOMEM, or -EINVAL if r is not something commit_record_parse() would
 * accept (bad name, ranks unsorted, duplicated or >= world_size, ...). */
int commit_record_format(const struct commit_record *r, char **out, size_t *len) {
        struct text t;
        int ret;

        if (!r || !out || !len)
                return -EINVAL;
        ret = commit_record_check(r);
        if (ret < 0)
                return ret;
        ret = text_init(&t, 512 + 8 * (size_t)r->nranks);
        if (ret < 0)
                return ret;
        text_printf(&t,
                    COMMIT_MAGIC "\n"
                                 "job %s\n"
                                 "step %" PRIu64 "\n"
                                 "world_size %" PRIu32 "\n"
                                 "ranks %" PRIu32,
                    r->job, r->step, r->world_size, r->nranks);
        for (uint32_t i = 0; i < r->nranks; i++)
                text_printf(&t, " %" PRIu32, r->ranks[i]);
        text_printf(&t, "\ncommitted_at %" PRId64 "\n", r->committed_at);
        return text_finish(&t, CRC_KEY, out, len);
}

/* Fills *r, overwriting it without freeing (clear it first if it holds
 * ranks).  On failure *r is left zeroed.  0, -EBADMSG, -ENOMEM. */
int commit_record_parse(struct commit_record *r, const char *text, size_t len) {
        struct commit_record rec = { 0 };
        _cleanup_free_ uint32_t *ranks = NULL;
        struct cursor c, l;
        uint64_t committed_at;
        int ret;

        if (!r)
                return -EINVAL;
        memset(r, 0, sizeof(*r));
        ret = body_verify(&c, text, len, CRC_KEY);
        if (ret < 0)
                return ret;

        ret = line_magic(&c, COMMIT_MAGIC);
        if (ret >= 0)
                ret = line_name(&c, "job", rec.job);
        if (ret >= 0)
                ret = line_u64(&c, "step", CKPT_STEP_MAX, &rec.step);
        if (ret >= 0)
                ret = line_u32(&c, "world_size", CKPT_WORLD_MAX, &rec.world_size);
        if (ret >= 0)
                ret = line_next(&c, &l, RANKS_LINE_MAX);
        if (ret >= 0)
                ret = tok_word(&l, "ranks");
        if (ret >= 0)
                ret = tok_u32(&l, CKPT_WORLD_MAX, &rec.nranks);
        if (ret < 0)
                return ret;
        if (rec.world_size == 0 || rec.nranks > rec.world_size ||
            rec.nranks > (size_t)(l.end - l.p + 1) / 2)
                return -EBADMSG;
        if (rec.nranks > 0) {
                ranks = malloc(rec.nranks * sizeof(uint32_t));
                if (!ranks)
                        return -ENOMEM;
        }
        for (uint32_t i = 0; i < rec.nranks; i++) {
                ret = tok_u32(&l, rec.world_size - 1, &ranks[i]);
                if (ret < 0)
                        return ret;
                if (i > 0 && ranks[i] <= ranks[i - 1])
                        return -EBADMSG;
        }
        ret = line_done(&l);
        if (ret >= 0)
                ret = line_u64(&c, "committed_at", INT64_MAX, &committed_at);
        if (ret < 0)
                return ret;
        if (c.p != c.end)
                return -EBADMSG;

        rec.committed_at = (int64_t)committed_at;
        rec.ranks = TAKE_PTR(ranks);
        *r = rec;
        return 0;
}

int64_t manifest_shard_check(const struct manifest_shard *sh, uint64_t offset, const void *p,
                             uint64_t len) {
        const uint8_t *b = p;

        for (uint64_t off = 0; off < len; off += MANIFEST_BLOCK_SIZE) {
                uint64_t block = (offset + off) / MANIFEST_BLOCK_SIZE;
                uint64_t n = len - off < MANIFEST_BLOCK_SIZE ? len - off : MANIFEST_BLOCK_SIZE;
                if (block >= sh->nblocks || crc32c(0, b + off, n) != sh->block_crcs[block])
                        return (int64_t)block;
        }
        return -1;
}
