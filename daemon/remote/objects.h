/* SPDX-License-Identifier: MIT */
/*
 * The object-store layout: the keys a checkpoint is stored under, and the two
 * small documents that make a step exist there (docs/object-layout.md).
 *
 *   PREFIX/jobs/<job>/steps/<step:020>/ranks/<rank>/<shard>   shard bytes
 *   PREFIX/jobs/<job>/steps/<step:020>/nodes/<node>.manifest  node manifest
 *   PREFIX/jobs/<job>/steps/<step:020>/COMMIT                 commit object
 *
 * Keys name ranks, never nodes, so a cluster of another size can restore
 * from the store alone.  A node manifest says what one node uploaded: the
 * local MANIFEST of every rank it holds, embedded verbatim, so a reader
 * learns every shard's key, size and CRCs.  The commit object, written once
 * by the coordinator after all node manifests exist, lists those manifests
 * (with their size and CRC32C, so a reader can tell it got the ones the
 * coordinator checked) and which ranks each holds; a restore trusts only
 * steps that have one.
 *
 * Both documents are line-oriented text in the style of MANIFEST
 * (docs/on-disk.md): written by one function, read by a strict parser that
 * accepts exactly what it writes, ending with a CRC32C line.  They come from
 * a shared bucket, so the parsers treat them as hostile: bounded
 * allocations, -EBADMSG for anything odd.
 *
 * Thread-safety: none needed; values are plain data.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "local/manifest.h"

/* Longest key we build (S3's limit, in bytes, without the NUL): a buffer of
 * OBJECT_KEY_MAX + 1 bytes always suffices. */
#define OBJECT_KEY_MAX 1024
/* Most nodes a step may span. */
#define OBJECT_NODE_COUNT_MAX 65536

/* ---- keys -------------------------------------------------------------- */

/* Each writes a NUL-terminated key into out (size bytes).  prefix is "" or a
 * config-validated "a/b" (no leading or trailing '/'); NULL means "".
 * 0, -ENAMETOOLONG (out too small, or the key longer than OBJECT_KEY_MAX),
 * -EINVAL (job or shard not a ckpt_name_validate() name, step >
 * CKPT_STEP_MAX, rank >= CKPT_WORLD_MAX, node >= OBJECT_NODE_COUNT_MAX).
 * On failure out holds "" (if size > 0). */
int object_key_shard(char *out, size_t size, const char *prefix, const char *job, uint64_t step,
                     uint32_t rank, const char *shard);
int object_key_node_manifest(char *out, size_t size, const char *prefix, const char *job,
                             uint64_t step, uint32_t node);
int object_key_commit(char *out, size_t size, const char *prefix, const char *job, uint64_t step);
/* ".../jobs/<job>/steps/<step:020>/" */
int object_key_step_dir(char *out, size_t size, const char *prefix, const char *job,
                        uint64_t step);
/* ".../jobs/<job>/steps/": list it with delimiter "/" to find the steps. */
int object_key_steps_dir(char *out, size_t size, const char *prefix, const char *job);

/* Parse a common prefix from listing steps_dir with delimiter "/": exactly
 * "<steps_dir><20 digits>/" -> *step.  0, or -EINVAL for anything else
 * (another prefix, other characters, a step > CKPT_STEP_MAX). */
int object_key_parse_step_dir(const char *steps_dir, const char *key, uint64_t *step);

/* ---- node manifest ----------------------------------------------------- */

/* What one node holds of a step: the manifests of its ranks.  Owns them. */
struct node_manifest {
        char job[256];
        uint64_t step;
        uint32_t node, node_count, world_size;
        uint32_t nranks;
        struct manifest **ranks; /* nranks entries, sorted by rank, owned */
};

/* An empty node manifest.  0, -ENOMEM, -EINVAL (bad job name, step >
 * CKPT_STEP_MAX, node_count 0 or > OBJECT_NODE_COUNT_MAX, node >=
 * node_count, world_size 0 or > CKPT_WORLD_MAX). */
int node_manifest_new(struct node_manifest **out, const char *job, uint64_t step, uint32_t node,
                      uint32_t node_count, uint32_t world_size);
/* Frees nm and the rank manifests it owns; accepts NULL; returns NULL. */
struct node_manifest *node_manifest_free(struct node_manifest *nm);

/* Add a rank's manifest, keeping ranks sorted.  Takes ownership of m on
 * success only.  0, -EINVAL (m's job, step or world_size differ from nm's, or
 * its rank >= world_size), -EEXIST (nm already has that rank), -ENOMEM. */
int node_manifest_add_rank(struct node_manifest *nm, struct manifest *m);

/* The manifest of rank, or NULL if nm does not hold it.  O(log n). */
const struct manifest *node_manifest_find(const struct node_manifest *nm, uint32_t rank);

/* Render as text (malloc'd into *out, length *len).  0, -ENOMEM, or -EINVAL
 * if nm breaks an invariant the parser enforces (a rank manifest that
 * manifest_format() refuses or that names another job, step or world size,
 * unsorted or duplicated ranks: only possible if edited by hand). */
int node_manifest_format(const struct node_manifest *nm, char **out, size_t *len);

/* Parse text; strict, including every embedded rank manifest.  0, -EBADMSG,
 * -ENOMEM.  *out is set on success only. */
int node_manifest_parse(struct node_manifest **out, const char *text, size_t len);

/* ---- commit object ----------------------------------------------------- */

/* Which node manifests make up a step, and which ranks each holds. */
struct commit_object_node {
        uint32_t node;
        uint64_t manifest_size;   /* bytes of its node manifest object */
        uint32_t manifest_crc32c; /* CRC32C of those bytes */
        uint32_t nranks;
        uint32_t *ranks; /* sorted ascending, owned */
};

struct commit_object {
        char job[256];
        uint64_t step;
        uint32_t world_size, node_count;
        int64_t committed_at; /* unix seconds, >= 0 */
        struct commit_object_node *nodes; /* node_count entries, index = node, owned */
};

/* Frees what co owns and zeroes it; accepts NULL. */
void commit_object_clear(struct commit_object *co);

/* Build *co (overwritten without freeing; zeroed on failure) from all n node
 * manifests of a step and their formatted texts texts[i] of lens[i] bytes
 * (what was uploaded, so the recorded size and CRC match the objects).
 * Checks that all name the same job, step, world size and node count, that
 * nodes 0..node_count-1 appear exactly once each, and that their ranks are
 * disjoint and cover 0..world_size-1.  0, -ENOMEM, or -EINVAL with a message
 * for a person in err (e.g. "rank 3 is in no node manifest", "rank 2 is in
 * node 0 and node 1"). */
int commit_object_build(struct commit_object *co, const struct node_manifest *const *nms,
                        const char *const *texts, const size_t *lens, size_t n,
                        int64_t committed_at, char *err, size_t errsize);

/* Render as text (malloc'd into *out, length *len).  0, -ENOMEM, or -EINVAL
 * if co is not something commit_object_parse() would accept. */
int commit_object_format(const struct commit_object *co, char **out, size_t *len);

/* Parse text into *co (overwritten without freeing; zeroed on failure).
 * Strict, with the same coverage checks as commit_object_build().
 * 0, -EBADMSG, -ENOMEM. */
int commit_object_parse(struct commit_object *co, const char *text, size_t len);

/* Which node holds rank: an index into co->nodes, or -ENOENT. */
int commit_object_node_of(const struct commit_object *co, uint32_t rank);
