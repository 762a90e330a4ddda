/* SPDX-License-Identifier: MIT */
/*
 * scrub — the background scrub: re-read and verify every committed copy
 * this node holds, on a schedule, at a bounded rate (docs/integrity.md
 * would be its page; docs/ckptd.conf.5 [scrub] and docs/catalog.md
 * "Schema version 6" say what an operator needs).
 *
 * What it walks: the targets daemon.c hands it — the local tier and each
 * replica area, each a store and its catalog — and in each, every rank of
 * every committed step, in (job, step, rank) order.  For a rank it checks
 * that the MANIFEST parses, names that very job, step and rank, and agrees
 * with the catalog's shard rows; that every shard file is there with the
 * manifest's size; and that every block's CRC32C matches.  What it finds
 * goes to ops->bad_copy (one call per bad shard, or per bad manifest or
 * missing rank directory); the scrub itself repairs nothing.
 *
 * How it reads: on a thread of its own (a one-thread worker pool, so the
 * event loop never waits for the disk and the save path's checksum
 * workers are never taken), at I/O class idle (ioprio_set; an option,
 * since on a disk that is never idle it gets less than its rate), with O_DIRECT
 * into one fixed SCRUB_BUFFER_SIZE buffer of its own: it never takes pool
 * memory, so a scrub can never make a save wait for a slot.  One read is
 * in flight at a time, and a token bucket on the loop thread spaces them
 * to `rate` bytes/s.
 *
 * When: a pass starts `interval` after the previous one started (at once
 * when there was none, or when a pass took longer); scrub_pause() holds it
 * while saves are open (the read in flight finishes, no other starts).
 * Progress — the pass, its position (target, job, step, rank, shard, the
 * offset of the first block not verified), bytes and copies verified and
 * bad — is written to the local tier's catalog at most once a second and
 * at every finding, so a pass resumes after a restart, a SIGKILL too, from
 * where it was (at most a second's reading is done again).
 *
 * Ownership: struct scrub is created and freed by daemon.c.  It borrows
 * the loop, the catalogs and the stores (all outlive it) and owns its
 * thread, its buffer, the manifest of the rank it is in and that rank's
 * open shard file.  Loop thread only, except for what its own thread
 * touches (one struct scrub_io at a time, documented in scrub.c).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "ckpt-proto.h"
#include "io/loop.h"
#include "local/store.h"

/* The scrub's read buffer: the most it reads at once, and all the memory
 * it holds for data. */
#define SCRUB_BUFFER_SIZE (4u << 20)
/* Findings kept for STATUS, newest first. */
#define SCRUB_FINDINGS_KEPT 4

struct scrub;

/* One tier the scrub walks. */
struct scrub_target {
        int32_t area;            /* -1: the local tier; else the replica area's source node */
        struct store *store;     /* borrowed */
        struct catalog *catalog; /* borrowed: what that store holds */
};

struct scrub_options {
        bool enabled;
        uint64_t rate;        /* bytes per second; 0: no limit */
        uint64_t interval_ms; /* from the start of one pass to the start of the next */
        bool idle_priority;   /* read at I/O class idle (else the default class) */
};

struct scrub_ops {
        /* A bad copy of (job, step, rank) in target `area` (-1: the local
         * tier).  shard NULL: the rank as a whole (its directory is gone,
         * or its MANIFEST is missing, does not parse or does not belong
         * there); else that shard, and block the index of the first block
         * whose CRC32C did not match (-1: the file is missing or has the
         * wrong size, or could not be read).  detail says what was found,
         * in words, for logs and STATUS.  Runs on the loop thread; the
         * strings are valid only during the call.  May call back into
         * anything but scrub_free(). */
        void (*bad_copy)(void *userdata, const char *job, uint64_t step, uint32_t rank,
                         int32_t area, const char *shard, int64_t block, const char *detail);
};

/* Create the scrub over targets[0..ntargets) (copied; what they point to
 * is borrowed), keeping its progress in `progress` (the local tier's
 * catalog).  Starts (or resumes) a pass when opts->enabled.  0, -ENOMEM,
 * or a thread's -errno. */
int scrub_new(struct scrub **out, struct loop *loop, struct catalog *progress,
              const struct scrub_target *targets, size_t ntargets,
              const struct scrub_options *opts, const struct scrub_ops *ops, void *userdata);
/* Waits for the read in flight, records the position, frees.  Accepts
 * NULL; returns NULL. */
struct scrub *scrub_free(struct scrub *s);

/* Apply reloaded options: a new rate takes effect at the next read, a new
 * interval at the next pass; disabling stops after the read in flight
 * (the position is kept, and enabling resumes from it). */
void scrub_set_options(struct scrub *s, const struct scrub_options *opts);

/* Hold (true) or go on (false): daemon.c holds the scrub while saves are
 * open. */
void scrub_pause(struct scrub *s, bool paused);

/* The scrub's part of the STATUS reply (the scrub_* fields).  Findings
 * name jobs, so uid >= 0 keeps only those of that uid's jobs (root and
 * the daemon's own callers pass -1: all). */
void scrub_status(const struct scrub *s, int64_t uid, struct ckpt_rep_status *st);
