/* SPDX-License-Identifier: MIT */
/*
 * memtier — the memory tier: the newest committed step of each job kept in
 * the slot pool after it is on disk, so that a trainer restarted on the same
 * node (the most common failure) restores at memory speed.
 *
 * What it keeps are the pool extents a save staged its shards in, and the
 * ones a peer transfer received a rank into (a replica pushed here, or a
 * rank restored from a neighbour): instead of going back to the pool once
 * a window is on disk, the extent is handed here (memtier_keep) with the
 * part of the shard it holds.  A peer link sends a rank from here when it
 * is kept, so neither replication nor a neighbour's restore reads the
 * disk for the newest step (peer/transfer.c, memtier_copy).  A rank's shards
 * become readable once the rank is on disk (memtier_rank_landed: the block
 * CRC32Cs are known) and its step is committed (memtier_step_committed);
 * committing a step lets go of every older step of the job.  A shard is
 * resident when every byte of it is in kept extents; one whose extents did
 * not all arrive (a window's write failed, one was evicted) is dropped as a
 * whole, but the rank's other shards stay.
 *
 * Bounded by the pool and never in the way of a transfer: the tier is the
 * pool's evictor (pool_set_evictor), and a request that finds no memory has
 * the oldest shard kept here given back, then the next, until it is served
 * (replicas first, then this node's own).
 * Nothing is read from disk to fill the tier, and a restart of the daemon
 * starts it empty (the restore falls back to the disk).
 *
 * What a client was given of a shard: a READ reply points the client at the
 * extent itself (memtier_pin until READ_DONE), and MAP maps it read-only
 * (memtier_expose, for as long as the client likes).  A shard given back
 * while a client may still look at it goes back with pool_revoke(), so the
 * slot gets new memory before it is lent again: the client keeps the
 * committed bytes and never silently sees a later save's
 * (docs/design-decisions.md, "The memory tier").
 *
 * The bytes stay in memory the job's trainers can map (the slot's memfd is
 * theirs too), so a READ checks every block it serves against the
 * MANIFEST's CRC32C first (memtier_verify), and a peer link sends a copy
 * it checked (memtier_copy); a shard that fails is dropped and the reader
 * goes to the disk.  MAP does not check: see the design note.
 *
 * Ownership: memtier.c owns every struct here and every extent handed to
 * it, until it gives the extent back to the pool.  Loop thread only.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "local/manifest.h"
#include "pool/pool.h"
#include "util/list.h"

struct memtier;
struct memtier_shard;

/* Whose rank a kept shard is, part of its key: this node's own (saved
 * here, or restored into the local tier from a neighbour) or a replica
 * this node holds of another node's (its node id: the replica area it
 * landed in).  The local client paths ask for MEMTIER_OWN only, so a
 * replica is never served to a local trainer. */
#define MEMTIER_OWN UINT32_MAX

/* Registers itself as p's evictor.  -ENOMEM. */
int memtier_new(struct memtier **out, struct pool *p);
/* Gives every extent back (revoked where a client may still look). */
struct memtier *memtier_free(struct memtier *mt);

/* ---- saving ---- */

/* Keep extent e, holding bytes [offset, offset + length) of shard `shard`
 * (size bytes) of (job, step, rank) of src, saved by uid.  true: the extent is
 * the tier's now; false: not wanted (the shard was dropped already, or out
 * of memory), the caller releases it. */
bool memtier_keep(struct memtier *mt, uint32_t src, const char *job, uint64_t step,
                  uint32_t rank, uint32_t uid, const char *shard, uint64_t size, uint64_t offset,
                  uint64_t length, const struct pool_extent *e);
/* The rank is on disk with manifest m: its shards' CRC32Cs are known, and
 * a shard not wholly kept is dropped. */
void memtier_rank_landed(struct memtier *mt, uint32_t src, const struct manifest *m);
/* Give back what is kept of a rank (its save failed, or it is saved again). */
void memtier_drop_rank(struct memtier *mt, uint32_t src, const char *job, uint64_t step,
                       uint32_t rank);
/* src's step is gone from its tier (DELETE, retention). */
void memtier_drop_step(struct memtier *mt, uint32_t src, const char *job, uint64_t step);
/* (job, step) committed in src's tier: its kept ranks of src become
 * readable, and every older step of the job is given back, whoever's it
 * is (and this one, when a newer one is). */
void memtier_step_committed(struct memtier *mt, uint32_t src, const char *job, uint64_t step);

/* ---- restoring ---- */

/* The resident shard: committed, on disk, every byte kept; else NULL. */
struct memtier_shard *memtier_find(struct memtier *mt, uint32_t src, const char *job,
                                   uint64_t step, uint32_t rank, const char *shard);
uint64_t memtier_shard_size(const struct memtier_shard *sh);
uint32_t memtier_shard_crc32c(const struct memtier_shard *sh);
/* Where bytes from offset (< size) are: *e and *in_extent (the offset of
 * byte `offset` in it); returns how many of them, from offset on, are
 * there in one run (at most max). */
uint64_t memtier_locate(const struct memtier_shard *sh, uint64_t offset, uint64_t max,
                        struct pool_extent *e, uint64_t *in_extent);
/* Check bytes [offset, offset + length) (located in one run) against the
 * MANIFEST's block CRC32Cs: 0, or -EBADMSG naming the block in *bad. */
int memtier_verify(const struct memtier_shard *sh, uint64_t offset, uint64_t length,
                   uint64_t *bad);
/* Copy bytes [offset, offset + length) into dst (which the caller owns:
 * nobody else can write it) and check the copy against the MANIFEST's
 * block CRC32Cs.  offset on a block boundary, length whole blocks or up to
 * the shard's end; the range may span pieces.  0; -EBADMSG naming the
 * block in *bad; -ENODATA (a byte not kept); -EINVAL. */
int memtier_copy(const struct memtier_shard *sh, uint64_t offset, uint64_t length, void *dst,
                 uint64_t *bad);
/* The whole shard in one run of one slot (a MAP can hand it over): true
 * with the slot and the shard's offset in it. */
bool memtier_contiguous(const struct memtier_shard *sh, struct slot **slot, uint64_t *offset);
/* A READ reply points a client at sh: kept (revoked if given back) until
 * memtier_unpin.  expose: the client may look for as long as it likes (a
 * MAP, or a READ whose READ_DONE never came). */
void memtier_pin(struct memtier_shard *sh);
void memtier_unpin(struct memtier *mt, struct memtier_shard *sh, bool expose);
void memtier_expose(struct memtier_shard *sh);
/* A client's memory of the shard failed its check: drop it. */
void memtier_drop_shard(struct memtier *mt, struct memtier_shard *sh);

/* ---- what it holds (STATUS, list) ---- */

/* Pool bytes held (every kept extent, committed or not). */
uint64_t memtier_bytes(const struct memtier *mt);
/* This node's own committed steps with at least one resident shard. */
uint32_t memtier_steps(const struct memtier *mt);
/* (job, step) is committed here and every shard of it kept as this
 * node's own is resident. */
bool memtier_step_resident(const struct memtier *mt, const char *job, uint64_t step);
