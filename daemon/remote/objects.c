/* SPDX-License-Identifier: MIT */
/*
 * Object-store keys, node manifests and the commit object: build, render,
 * strict parse.  The formats are specified in docs/object-layout.md.
 *
 * A restore from the store has nothing else to go on: the commit object
 * decides whether a step exists there, and the node manifests say what its
 * shards are.  Both are read from a bucket others may write to, so, like
 * MANIFEST (daemon/local/manifest.c), each is accepted only in the exact
 * spelling its formatter writes, its last line's CRC32C is checked before any
 * field is read, and every count that drives an allocation is bounded first
 * by what the remaining text could hold (node manifests) or by the world
 * size (the commit object's compact rank ranges).
 *
 * A node manifest embeds each rank's MANIFEST text verbatim behind a line
 * giving its length, so the reader splits it without guessing and checks
 * each piece with manifest_parse() — the same gate as the local tier.
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
#include "remote/objects.h"
#include "util/cleanup.h"
#include "util/errbuf.h"
#include "util/textfmt.h"

#define NODE_MANIFEST_MAGIC "ckptd-node-manifest 1"
/* Not "ckptd-commit 1": that names the local COMMITTED record, a different
 * format, and a file's first line should say which one it is. */
#define COMMIT_OBJECT_MAGIC "ckptd-global-commit 1"
/* Header and "rank" lines are short; only a commit object's "node" lines
 * can be long (bounded by the world size through their rank count). */
#define LINE_MAX_BYTES TEXT_LINE_MAX
/* The last line is "crc32c <crc32c>" (text_finish(), body_verify()). */
#define CRC_KEY "crc32c"
/* Fewer bytes than any rank entry of a node manifest (a "rank" line plus a
 * MANIFEST) or any "node" line of a commit object ("node 0 0 00000000 0\n")
 * can take: bounds allocations by the text's length. */
#define RANK_ENTRY_MIN 16
#define NODE_LINE_MIN 20

static bool name_ok(const char *name, size_t cap) {
        if (!name)
                return false;
        size_t len = strnlen(name, cap);
        return len < cap && ckpt_name_validate(name, len) == 0;
}

/* ---- keys -------------------------------------------------------------- */

static int key_printf(char *out, size_t size, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static int key_printf(char *out, size_t size, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        int n = vsnprintf(out, size, fmt, ap);
        va_end(ap);
        if (n < 0) {
                out[0] = '\0';
                return -EINVAL;
        }
        if ((size_t)n >= size || n > OBJECT_KEY_MAX) {
                out[0] = '\0';
                return -ENAMETOOLONG;
        }
        return 0;
}

/* Validates what every key has in common; clears out on failure. */
static int key_check(char *out, size_t size, const char **prefix, const char *job,
                     uint64_t step) {
        if (!out || size == 0)
                return out ? -ENAMETOOLONG : -EINVAL;
        out[0] = '\0';
        if (!*prefix)
                *prefix = "";
        if (!name_ok(job, CKPT_NAME_MAX + 1) || step > CKPT_STEP_MAX)
                return -EINVAL;
        return 0;
}

/* "<prefix>/" (or "" for no prefix) "jobs/<job>/steps/<step:020>/" */
#define STEP_DIR_FMT "%s%sjobs/%s/steps/%020" PRIu64 "/"
#define STEP_DIR_ARGS(prefix, job, step) prefix, *prefix ? "/" : "", job, step

int object_key_shard(char *out, size_t size, const char *prefix, const char *job, uint64_t step,
                     uint32_t rank, const char *shard) {
        int r = key_check(out, size, &prefix, job, step);
        if (r < 0)
                return r;
        if (rank >= CKPT_WORLD_MAX || !name_ok(shard, CKPT_NAME_MAX + 1))
                return -EINVAL;
        return key_printf(out, size, STEP_DIR_FMT "ranks/%" PRIu32 "/%s",
                          STEP_DIR_ARGS(prefix, job, step), rank, shard);
}

int object_key_node_manifest(char *out, size_t size, const char *prefix, const char *job,
                             uint64_t step, uint32_t node) {
        int r = key_check(out, size, &prefix, job, step);
        if (r < 0)
                return r;
        if (node >= OBJECT_NODE_COUNT_MAX)
                return -EINVAL;
        return key_printf(out, size, STEP_DIR_FMT "nodes/%" PRIu32 ".manifest",
                          STEP_DIR_ARGS(prefix, job, step), node);
}

int object_key_commit(char *out, size_t size, const char *prefix, const char *job, uint64_t step) {
        int r = key_check(out, size, &prefix, job, step);
        if (r < 0)
                return r;
        return key_printf(out, size, STEP_DIR_FMT "COMMIT", STEP_DIR_ARGS(prefix, job, step));
}

int object_key_step_dir(char *out, size_t size, const char *prefix, const char *job,
                        uint64_t step) {
        int r = key_check(out, size, &prefix, job, step);
        if (r < 0)
                return r;
        return key_printf(out, size, STEP_DIR_FMT, STEP_DIR_ARGS(prefix, job, step));
}

int object_key_steps_dir(char *out, size_t size, const char *prefix, const char *job) {
        int r = key_check(out, size, &prefix, job, 0);
        if (r < 0)
                return r;
        return key_printf(out, size, "%s%sjobs/%s/steps/", prefix, *prefix ? "/" : "", job);
}

int object_key_parse_step_dir(const char *steps_dir, const char *key, uint64_t *step) {
        uint64_t v = 0;

        if (!steps_dir || !key || !step)
                return -EINVAL;
        size_t n = strlen(steps_dir);
        if (strncmp(key, steps_dir, n) != 0)
                return -EINVAL;
        const char *p = key + n;
        /* Stops at the NUL of a short key, so nothing past it is read. */
        for (int i = 0; i < 20; i++) {
                if (p[i] < '0' || p[i] > '9')
                        return -EINVAL;
                unsigned d = (unsigned)(p[i] - '0');
                if (v > ((uint64_t)CKPT_STEP_MAX - d) / 10)
                        return -EINVAL;
                v = v * 10 + d;
        }
        if (p[20] != '/' || p[21] != '\0')
                return -EINVAL;
        *step = v;
        return 0;
}

/* ---- name tokens -------------------------------------------------------- */

/* A "<key> <name>" line, the name one ckpt_name_validate() accepts. */
static int line_name(struct cursor *c, const char *key, char out[static CKPT_NAME_MAX + 1]) {
        int n = line_str(c, key, out, CKPT_NAME_MAX + 1);
        if (n < 0)
                return n;
        return ckpt_name_validate(out, (size_t)n) < 0 ? -EBADMSG : 0;
}

/* ---- node manifest ----------------------------------------------------- */

/* The ranks array grows in powers of two (at least 8); parse allocates the
 * same way so add_rank works on a parsed node manifest too. */
static size_t ranks_capacity(size_t n) {
        size_t cap = 8;
        if (n == 0)
                return 0;
        while (cap < n)
                cap *= 2;
        return cap;
}

int node_manifest_new(struct node_manifest **out, const char *job, uint64_t step, uint32_t node,
                      uint32_t node_count, uint32_t world_size) {
        struct node_manifest *nm;

        if (!out || !name_ok(job, sizeof(nm->job)) || step > CKPT_STEP_MAX || node_count == 0 ||
            node_count > OBJECT_NODE_COUNT_MAX || node >= node_count || world_size == 0 ||
            world_size > CKPT_WORLD_MAX)
                return -EINVAL;
        nm = calloc(1, sizeof(*nm));
        if (!nm)
                return -ENOMEM;
        strcpy(nm->job, job);
        nm->step = step;
        nm->node = node;
        nm->node_count = node_count;
        nm->world_size = world_size;
        *out = nm;
        return 0;
}

struct node_manifest *node_manifest_free(struct node_manifest *nm) {
        if (!nm)
                return NULL;
        for (uint32_t i = 0; i < nm->nranks; i++)
                manifest_free(nm->ranks[i]);
        free(nm->ranks);
        free(nm);
        return NULL;
}

DEFINE_CLEANUP(struct node_manifest *, node_manifest_free)
DEFINE_CLEANUP(struct manifest *, manifest_free)

/* Index of the first rank manifest whose rank is >= rank. */
static uint32_t rank_lower_bound(const struct node_manifest *nm, uint32_t rank) {
        uint32_t lo = 0, hi = nm->nranks;

        while (lo < hi) {
                uint32_t mid = lo + (hi - lo) / 2;
                if (nm->ranks[mid]->rank < rank)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

/* Does m belong in nm (same job, step and world size; rank in range)? */
static bool rank_fits(const struct node_manifest *nm, const struct manifest *m) {
        return strcmp(m->job, nm->job) == 0 && m->step == nm->step &&
               m->world_size == nm->world_size && m->rank < nm->world_size;
}

int node_manifest_add_rank(struct node_manifest *nm, struct manifest *m) {
        if (!nm || !m || !rank_fits(nm, m))
                return -EINVAL;
        uint32_t i = rank_lower_bound(nm, m->rank);
        if (i < nm->nranks && nm->ranks[i]->rank == m->rank)
                return -EEXIST;

        size_t cap = ranks_capacity(nm->nranks);
        if (nm->nranks == cap) {
                cap = cap ? cap * 2 : 8;
                struct manifest **v = realloc(nm->ranks, cap * sizeof(*v));
                if (!v)
                        return -ENOMEM;
                nm->ranks = v;
        }
        memmove(&nm->ranks[i + 1], &nm->ranks[i], (nm->nranks - i) * sizeof(nm->ranks[0]));
        nm->ranks[i] = m;
        nm->nranks++;
        return 0;
}

const struct manifest *node_manifest_find(const struct node_manifest *nm, uint32_t rank) {
        if (!nm)
                return NULL;
        uint32_t i = rank_lower_bound(nm, rank);
        return i < nm->nranks && nm->ranks[i]->rank == rank ? nm->ranks[i] : NULL;
}

/* What node_manifest_parse() would check of the header and the rank list
 * (each rank manifest is checked by manifest_format()). */
static int node_manifest_check(const struct node_manifest *nm) {
        if (!name_ok(nm->job, sizeof(nm->job)) || nm->step > CKPT_STEP_MAX ||
            nm->node_count == 0 || nm->node_count > OBJECT_NODE_COUNT_MAX ||
            nm->node >= nm->node_count || nm->world_size == 0 ||
            nm->world_size > CKPT_WORLD_MAX || nm->nranks > nm->world_size ||
            (nm->nranks > 0 && !nm->ranks))
                return -EINVAL;
        for (uint32_t i = 0; i < nm->nranks; i++)
                if (!nm->ranks[i] || !rank_fits(nm, nm->ranks[i]) ||
                    (i > 0 && nm->ranks[i]->rank <= nm->ranks[i - 1]->rank))
                        return -EINVAL;
        return 0;
}

int node_manifest_format(const struct node_manifest *nm, char **out, size_t *len) {
        struct text t;
        int r;

        if (!nm || !out || !len)
                return -EINVAL;
        r = node_manifest_check(nm);
        if (r < 0)
                return r;
        r = text_init(&t, 4096);
        if (r < 0)
                return r;
        text_printf(&t,
                    NODE_MANIFEST_MAGIC "\n"
                                        "job %s\n"
                                        "step %" PRIu64 "\n"
                                        "node %" PRIu32 "\n"
                                        "node_count %" PRIu32 "\n"
                                        "world_size %" PRIu32 "\n"
                                        "ranks %" PRIu32 "\n",
                    nm->job, nm->step, nm->node, nm->node_count, nm->world_size, nm->nranks);
        for (uint32_t i = 0; i < nm->nranks && !t.failed; i++) {
                _cleanup_free_ char *mt = NULL;
                size_t ml;
                r = manifest_format(nm->ranks[i], &mt, &ml);
                if (r < 0) {
                        free(t.buf);
                        return r;
                }
                text_printf(&t, "rank %" PRIu32 " %zu\n", nm->ranks[i]->rank, ml);
                text_append(&t, mt, ml);
        }
        return text_finish(&t, CRC_KEY, out, len);
}

int node_manifest_parse(struct node_manifest **out, const char *text, size_t len) {
        _cleanup_(node_manifest_freep) struct node_manifest *nm = NULL;
        struct cursor c, l;
        uint32_t nranks;
        int r;

        if (!out)
                return -EINVAL;
        r = body_verify(&c, text, len, CRC_KEY);
        if (r < 0)
                return r;
        nm = calloc(1, sizeof(*nm));
        if (!nm)
                return -ENOMEM;

        r = line_magic(&c, NODE_MANIFEST_MAGIC);
        if (r >= 0)
                r = line_name(&c, "job", nm->job);
        if (r >= 0)
                r = line_u64(&c, "step", CKPT_STEP_MAX, &nm->step);
        if (r >= 0)
                r = line_u32(&c, "node", OBJECT_NODE_COUNT_MAX - 1, &nm->node);
        if (r >= 0)
                r = line_u32(&c, "node_count", OBJECT_NODE_COUNT_MAX, &nm->node_count);
        if (r >= 0)
                r = line_u32(&c, "world_size", CKPT_WORLD_MAX, &nm->world_size);
        if (r >= 0)
                r = line_u32(&c, "ranks", CKPT_WORLD_MAX, &nranks);
        if (r < 0)
                return r;
        if (nm->node >= nm->node_count || nm->world_size == 0 || nranks > nm->world_size ||
            nranks > (size_t)(c.end - c.p) / RANK_ENTRY_MIN)
                return -EBADMSG;
        if (nranks > 0) {
                nm->ranks = calloc(ranks_capacity(nranks), sizeof(*nm->ranks));
                if (!nm->ranks)
                        return -ENOMEM;
        }

        for (uint32_t i = 0; i < nranks; i++) {
                _cleanup_(manifest_freep) struct manifest *m = NULL;
                uint32_t rank;
                uint64_t bytes;

                r = line_next(&c, &l, LINE_MAX_BYTES);
                if (r >= 0)
                        r = tok_word(&l, "rank");
                if (r >= 0)
                        r = tok_u32(&l, nm->world_size - 1, &rank);
                if (r >= 0)
                        r = tok_u64(&l, (uint64_t)(c.end - c.p), &bytes);
                if (r >= 0)
                        r = line_done(&l);
                if (r < 0)
                        return r;
                if (i > 0 && rank <= nm->ranks[i - 1]->rank)
                        return -EBADMSG;
                r = manifest_parse(&m, c.p, (size_t)bytes);
                if (r == -ENOMEM)
                        return r;
                if (r < 0 || m->rank != rank || !rank_fits(nm, m))
                        return -EBADMSG;
                c.p += bytes;
                nm->ranks[i] = TAKE_PTR(m);
                nm->nranks = i + 1;
        }
        if (c.p != c.end)
                return -EBADMSG;

        *out = TAKE_PTR(nm);
        return 0;
}

/* ---- commit object ----------------------------------------------------- */

void commit_object_clear(struct commit_object *co) {
        if (!co)
                return;
        if (co->nodes)
                for (uint32_t i = 0; i < co->node_count; i++)
                        free(co->nodes[i].ranks);
        free(co->nodes);
        memset(co, 0, sizeof(*co));
}

/* Ranks in range, ascending within each node, in exactly one node, and every
 * rank in some node.  0, -ENOMEM, or -EINVAL with the first problem (in node
 * order, then rank order) in err. */
static int coverage_check(const struct commit_object *co, char *err, size_t errsize) {
        /* owner[r] = 1 + the node holding rank r, 0 for none yet. */
        _cleanup_free_ uint32_t *owner = calloc(co->world_size, sizeof(uint32_t));

        if (!owner)
                return -ENOMEM;
        for (uint32_t k = 0; k < co->node_count; k++) {
                const struct commit_object_node *n = &co->nodes[k];
                if (n->nranks > 0 && !n->ranks)
                        return errbuf_fail(-EINVAL, err, errsize, "node %" PRIu32 " has no rank list",
                                           k);
                for (uint32_t i = 0; i < n->nranks; i++) {
                        uint32_t r = n->ranks[i];
                        if (r >= co->world_size)
                                return errbuf_fail(-EINVAL, err, errsize,
                                                   "rank %" PRIu32 " of node %" PRIu32
                                                   " is not below the world size %" PRIu32,
                                                   r, k, co->world_size);
                        if (i > 0 && r <= n->ranks[i - 1])
                                return errbuf_fail(-EINVAL, err, errsize,
                                                   "the ranks of node %" PRIu32
                                                   " are not in ascending order",
                                                   k);
                        if (owner[r])
                                return errbuf_fail(-EINVAL, err, errsize,
                                                   "rank %" PRIu32 " is in node %" PRIu32
                                                   " and node %" PRIu32,
                                                   r, owner[r] - 1, k);
                        owner[r] = k + 1;
                }
        }
        for (uint32_t r = 0; r < co->world_size; r++)
                if (!owner[r])
                        return errbuf_fail(-EINVAL, err, errsize,
                                           "rank %" PRIu32 " is in no node manifest", r);
        return 0;
}

int commit_object_build(struct commit_object *co, const struct node_manifest *const *nms,
                        const char *const *texts, const size_t *lens, size_t n,
                        int64_t committed_at, char *err, size_t errsize) {
        _cleanup_(commit_object_clear) struct commit_object rec = { 0 };
        _cleanup_free_ const struct node_manifest **by_node = NULL;
        int r;

        if (!co)
                return -EINVAL;
        memset(co, 0, sizeof(*co));
        if (n > 0 && (!nms || !texts || !lens))
                return errbuf_fail(-EINVAL, err, errsize, "invalid arguments");
        if (n == 0)
                return errbuf_fail(-EINVAL, err, errsize, "no node manifests");
        if (committed_at < 0)
                return errbuf_fail(-EINVAL, err, errsize, "commit time %" PRId64 " is negative",
                                   committed_at);

        /* The first is the reference; the loop checks it before using it. */
        const struct node_manifest *first = nms[0];
        for (size_t i = 0; i < n; i++) {
                const struct node_manifest *nm = nms[i];
                if (!nm || node_manifest_check(nm) < 0)
                        return errbuf_fail(-EINVAL, err, errsize,
                                           "node manifest %zu of %zu is invalid", i, n);
                if (strcmp(nm->job, first->job) != 0)
                        return errbuf_fail(-EINVAL, err, errsize,
                                           "node %" PRIu32 "'s manifest is of job %s, not %s",
                                           nm->node, nm->job, first->job);
                if (nm->step != first->step)
                        return errbuf_fail(-EINVAL, err, errsize,
                                           "node %" PRIu32 "'s manifest is of step %" PRIu64
                                           ", not %" PRIu64,
                                           nm->node, nm->step, first->step);
                if (nm->world_size != first->world_size)
                        return errbuf_fail(-EINVAL, err, errsize,
                                           "node %" PRIu32 "'s manifest says world size %" PRIu32
                                           ", not %" PRIu32,
                                           nm->node, nm->world_size, first->world_size);
                if (nm->node_count != first->node_count)
                        return errbuf_fail(-EINVAL, err, errsize,
                                           "node %" PRIu32 "'s manifest says %" PRIu32
                                           " nodes, not %" PRIu32,
                                           nm->node, nm->node_count, first->node_count);
                if ((lens[i] > 0 && !texts[i]) || (uint64_t)lens[i] > INT64_MAX)
                        return errbuf_fail(-EINVAL, err, errsize,
                                           "node %" PRIu32 "'s manifest text is missing",
                                           nm->node);
        }

        snprintf(rec.job, sizeof(rec.job), "%s", first->job);
        rec.step = first->step;
        rec.world_size = first->world_size;
        rec.committed_at = committed_at;
        by_node = calloc(first->node_count, sizeof(*by_node));
        rec.nodes = calloc(first->node_count, sizeof(*rec.nodes));
        if (!by_node || !rec.nodes)
                return -ENOMEM;
        rec.node_count = first->node_count;

        for (size_t i = 0; i < n; i++) {
                const struct node_manifest *nm = nms[i];
                struct commit_object_node *cn = &rec.nodes[nm->node];
                if (by_node[nm->node])
                        return errbuf_fail(-EINVAL, err, errsize,
                                           "node %" PRIu32 " has two manifests", nm->node);
                by_node[nm->node] = nm;
                cn->node = nm->node;
                cn->manifest_size = lens[i];
                cn->manifest_crc32c = lens[i] > 0 ? crc32c(0, texts[i], lens[i]) : 0;
                if (nm->nranks > 0) {
                        cn->ranks = malloc(nm->nranks * sizeof(uint32_t));
                        if (!cn->ranks)
                                return -ENOMEM;
                        for (uint32_t j = 0; j < nm->nranks; j++)
                                cn->ranks[j] = nm->ranks[j]->rank;
                        cn->nranks = nm->nranks;
                }
        }
        /* A missing node is the likelier cause of missing ranks: say so. */
        for (uint32_t k = 0; k < rec.node_count; k++)
                if (!by_node[k])
                        return errbuf_fail(-EINVAL, err, errsize, "node %" PRIu32 " has no manifest",
                                           k);
        r = coverage_check(&rec, err, errsize);
        if (r < 0)
                return r;

        *co = rec;
        rec = (struct commit_object){ 0 };
        return 0;
}

static int commit_object_check(const struct commit_object *co) {
        if (!name_ok(co->job, sizeof(co->job)) || co->step > CKPT_STEP_MAX ||
            co->world_size == 0 || co->world_size > CKPT_WORLD_MAX || co->node_count == 0 ||
            co->node_count > OBJECT_NODE_COUNT_MAX || co->committed_at < 0 || !co->nodes)
                return -EINVAL;
        for (uint32_t k = 0; k < co->node_count; k++)
                if (co->nodes[k].node != k || co->nodes[k].manifest_size > INT64_MAX)
                        return -EINVAL;
        return coverage_check(co, NULL, 0);
}

/* Ranks as maximal runs: "0-3,5,7-8". */
static void ranks_printf(struct text *t, const uint32_t *ranks, uint32_t n) {
        for (uint32_t i = 0; i < n && !t->failed;) {
                uint32_t j = i;
                while (j + 1 < n && ranks[j + 1] == ranks[j] + 1)
                        j++;
                if (j == i)
                        text_printf(t, "%s%" PRIu32, i ? "," : "", ranks[i]);
                else
                        text_printf(t, "%s%" PRIu32 "-%" PRIu32, i ? "," : "", ranks[i], ranks[j]);
                i = j + 1;
        }
}

int commit_object_format(const struct commit_object *co, char **out, size_t *len) {
        struct text t;
        int r;

        if (!co || !out || !len)
                return -EINVAL;
        r = commit_object_check(co);
        if (r < 0)
                return r;
        r = text_init(&t, 512 + 32 * (size_t)co->node_count);
        if (r < 0)
                return r;
        text_printf(&t,
                    COMMIT_OBJECT_MAGIC "\n"
                                        "job %s\n"
                                        "step %" PRIu64 "\n"
                                        "world_size %" PRIu32 "\n"
                                        "node_count %" PRIu32 "\n"
                                        "committed_at %" PRId64 "\n",
                    co->job, co->step, co->world_size, co->node_count, co->committed_at);
        for (uint32_t k = 0; k < co->node_count && !t.failed; k++) {
                const struct commit_object_node *n = &co->nodes[k];
                text_printf(&t, "node %" PRIu32 " %" PRIu64 " %08" PRIx32 " %" PRIu32, n->node,
                            n->manifest_size, n->manifest_crc32c, n->nranks);
                if (n->nranks > 0) {
                        text_append(&t, " ", 1);
                        ranks_printf(&t, n->ranks, n->nranks);
                }
                text_append(&t, "\n", 1);
        }
        return text_finish(&t, CRC_KEY, out, len);
}

/* The rank list of a "node" line: exactly n ranks < world_size, written as
 * commit_object_format() writes them (maximal runs, ascending). */
static int ranks_parse(const char *p, const char *end, uint32_t world_size, uint32_t n,
                       uint32_t *ranks) {
        uint32_t count = 0;

        for (;;) {
                uint64_t a, b;
                int r = dec_parse(&p, end, world_size - 1, &a);
                if (r < 0)
                        return r;
                /* Adjacent to the previous run: that run was not maximal. */
                if (count > 0 && a <= (uint64_t)ranks[count - 1] + 1)
                        return -EBADMSG;
                b = a;
                if (p < end && *p == '-') {
                        p++;
                        r = dec_parse(&p, end, world_size - 1, &b);
                        if (r < 0)
                                return r;
                        if (b <= a)
                                return -EBADMSG;
                }
                if (b - a >= n - count)
                        return -EBADMSG;
                for (uint64_t v = a; v <= b; v++)
                        ranks[count++] = (uint32_t)v;
                if (p == end)
                        break;
                if (*p != ',')
                        return -EBADMSG;
                p++;
        }
        return count == n ? 0 : -EBADMSG;
}

static int node_line_parse(struct cursor *c, uint32_t k, uint32_t world_size, uint32_t *left,
                           struct commit_object_node *n) {
        struct cursor l;
        uint32_t idx;
        int r;

        r = line_next(c, &l, (size_t)(c->end - c->p));
        if (r >= 0)
                r = tok_word(&l, "node");
        if (r >= 0)
                r = tok_u32(&l, OBJECT_NODE_COUNT_MAX - 1, &idx);
        if (r >= 0 && idx != k)
                r = -EBADMSG;
        if (r >= 0)
                r = tok_u64(&l, INT64_MAX, &n->manifest_size);
        if (r >= 0)
                r = tok_hex32(&l, &n->manifest_crc32c);
        if (r >= 0)
                r = tok_u32(&l, world_size, &n->nranks);
        if (r < 0)
                return r;
        n->node = idx;
        /* The rank lists cannot hold more than world_size ranks in all, so
         * that bounds what they make us allocate. */
        if (n->nranks > *left)
                return -EBADMSG;
        *left -= n->nranks;
        if (n->nranks == 0)
                return line_done(&l);

        const char *t;
        size_t tn;
        r = tok_next(&l, &t, &tn);
        if (r >= 0)
                r = line_done(&l);
        if (r < 0)
                return r;
        n->ranks = malloc(n->nranks * sizeof(uint32_t));
        if (!n->ranks)
                return -ENOMEM;
        return ranks_parse(t, t + tn, world_size, n->nranks, n->ranks);
}

int commit_object_parse(struct commit_object *co, const char *text, size_t len) {
        _cleanup_(commit_object_clear) struct commit_object rec = { 0 };
        struct cursor c;
        uint64_t committed_at;
        uint32_t node_count, left;
        int r;

        if (!co)
                return -EINVAL;
        memset(co, 0, sizeof(*co));
        r = body_verify(&c, text, len, CRC_KEY);
        if (r < 0)
                return r;

        r = line_magic(&c, COMMIT_OBJECT_MAGIC);
        if (r >= 0)
                r = line_name(&c, "job", rec.job);
        if (r >= 0)
                r = line_u64(&c, "step", CKPT_STEP_MAX, &rec.step);
        if (r >= 0)
                r = line_u32(&c, "world_size", CKPT_WORLD_MAX, &rec.world_size);
        if (r >= 0)
                r = line_u32(&c, "node_count", OBJECT_NODE_COUNT_MAX, &node_count);
        if (r >= 0)
                r = line_u64(&c, "committed_at", INT64_MAX, &committed_at);
        if (r < 0)
                return r;
        if (rec.world_size == 0 || node_count == 0 ||
            node_count > (size_t)(c.end - c.p) / NODE_LINE_MIN)
                return -EBADMSG;
        rec.committed_at = (int64_t)committed_at;
        rec.nodes = calloc(node_count, sizeof(*rec.nodes));
        if (!rec.nodes)
                return -ENOMEM;
        rec.node_count = node_count;

        left = rec.world_size;
        for (uint32_t k = 0; k < node_count; k++) {
                r = node_line_parse(&c, k, rec.world_size, &left, &rec.nodes[k]);
                if (r < 0)
                        return r;
        }
        if (c.p != c.end || left != 0)
                return -EBADMSG;
        r = coverage_check(&rec, NULL, 0);
        if (r < 0)
                return r == -ENOMEM ? r : -EBADMSG;

        *co = rec;
        rec = (struct commit_object){ 0 };
        return 0;
}

int commit_object_node_of(const struct commit_object *co, uint32_t rank) {
        if (!co || !co->nodes || rank >= co->world_size)
                return -ENOENT;
        for (uint32_t k = 0; k < co->node_count; k++) {
                const struct commit_object_node *n = &co->nodes[k];
                uint32_t lo = 0, hi = n->nranks;
                if (n->nranks == 0 || rank < n->ranks[0] || rank > n->ranks[n->nranks - 1])
                        continue;
                while (lo < hi) {
                        uint32_t mid = lo + (hi - lo) / 2;
                        if (n->ranks[mid] < rank)
                                lo = mid + 1;
                        else
                                hi = mid;
                }
                if (lo < n->nranks && n->ranks[lo] == rank)
                        return (int)k;
        }
        return -ENOENT;
}
