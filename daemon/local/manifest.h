/* SPDX-License-Identifier: MIT */
/*
 * Manifests: the on-disk record that makes a rank's checkpoint exist.
 *
 * A rank directory jobs/<job>/<step>/rank-<r>/ holds one file per shard and a
 * MANIFEST listing every shard's name, size, CRC32C, and the CRC32C of each
 * MANIFEST_BLOCK_SIZE block (so a ranged read can be verified without reading
 * the whole shard).  The manifest is written and fsynced before the directory
 * is renamed into place, so a rank directory without a valid manifest never
 * exists for readers.  The format is line-oriented text (docs/on-disk.md),
 * ends with a line carrying the CRC32C of everything before it, and is parsed
 * strictly: anything unexpected is -EBADMSG, never a guess.
 *
 * A step directory becomes committed when its COMMITTED record (same style,
 * struct commit_record) is renamed into place.
 *
 * Thread-safety: none needed; values are plain data.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define MANIFEST_BLOCK_SIZE (1u << 20)
#define MANIFEST_FILE "MANIFEST"
#define COMMIT_FILE "COMMITTED"
/* Upper bound on shards per rank, so a hostile or corrupt manifest cannot
 * make the parser allocate without limit. */
#define MANIFEST_SHARDS_MAX 65536

struct manifest_shard {
        char name[256];
        uint64_t size;
        uint32_t crc32c;      /* of the whole shard */
        uint64_t nblocks;     /* ceil(size / block_size); 0 for an empty shard */
        uint32_t *block_crcs; /* nblocks entries, owned */
};

struct manifest {
        char job[256];
        uint64_t step;
        uint32_t rank, world_size;
        uint32_t uid;        /* owner of the job */
        uint32_t block_size; /* MANIFEST_BLOCK_SIZE for manifests we write */
        uint32_t nshards;
        struct manifest_shard *shards; /* owned */
};

/* Allocate an empty manifest with the given identity (names validated with
 * ckpt_name_validate: -EINVAL). */
int manifest_new(struct manifest **out, const char *job, uint64_t step, uint32_t rank,
                 uint32_t world_size, uint32_t uid);
/* Frees m and everything it owns; accepts NULL; returns NULL. */
struct manifest *manifest_free(struct manifest *m);

/* Append a shard; copies name and block_crcs (nblocks derived from size).
 * -EINVAL bad name, -EEXIST duplicate name, -E2BIG too many shards, -ENOMEM. */
int manifest_add_shard(struct manifest *m, const char *name, uint64_t size, uint32_t crc32c,
                       const uint32_t *block_crcs);

/* The same, for a caller that guarantees name is not in m yet: skips the
 * linear duplicate search (O(n^2) over a rank with thousands of shards). */
int manifest_add_unique_shard(struct manifest *m, const char *name, uint64_t size,
                              uint32_t crc32c, const uint32_t *block_crcs);

/* Find a shard by name, or NULL. */
const struct manifest_shard *manifest_find(const struct manifest *m, const char *name);

/* Check bytes [offset, offset + len) of shard sh, held at p, against the
 * manifest's block CRC32Cs: offset is a multiple of the block size, and
 * len a multiple too unless the range ends at the shard's end.  Returns -1
 * when every block matches, else the index of the first that does not (or
 * lies past the shard).  Pure: workers call it. */
int64_t manifest_shard_check(const struct manifest_shard *sh, uint64_t offset, const void *p,
                             uint64_t len);

/* Sum of shard sizes. */
uint64_t manifest_bytes(const struct manifest *m);

/* Render as text (malloc'd into *out, length *len).  0 or -ENOMEM. */
int manifest_format(const struct manifest *m, char **out, size_t *len);

/* Parse text; strict.  0, -EBADMSG (malformed, checksum line wrong, block
 * CRCs that do not combine to the shard CRC), -ENOMEM. */
int manifest_parse(struct manifest **out, const char *text, size_t len);

struct commit_record {
        char job[256];
        uint64_t step;
        uint32_t world_size;
        uint32_t nranks;    /* ranks of this step held on this node */
        uint32_t *ranks;    /* sorted ascending, owned */
        int64_t committed_at; /* unix seconds */
};

void commit_record_clear(struct commit_record *r); /* frees ranks */
int commit_record_format(const struct commit_record *r, char **out, size_t *len);
int commit_record_parse(struct commit_record *r, const char *text, size_t len);
