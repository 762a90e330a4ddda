/* SPDX-License-Identifier: MIT */
/*
 * heal — replacing a corrupt copy of a rank on this node with a good one
 * (docs/replication.md, "Corrupt copies").
 *
 * A copy is what this node holds of (job, step, rank): in its local tier,
 * or in the replica area of the node that saved it.  heal_rank() finds a
 * good copy elsewhere and swaps it in:
 *
 *   - a local-tier copy: from the neighbours (GET_RANK, peers_fetch_rank),
 *     then from the object store (fetch_start with `replace`);
 *   - a replica-area copy: from the neighbours (the targets of this node,
 *     which in a clique include the node that saved the rank), into that
 *     replica area (peers_fetch_rank_into), then from the object store
 *     into that area (fetch_start with `replace` and `into_store`: the
 *     objects its source node flushed).
 *
 * Every path lands the rank like any received one: into a tmp directory,
 * every block checked against the sender's MANIFEST, fsynced, renamed over
 * the bad copy with RENAME_EXCHANGE (the bad one goes to trash), so at no
 * instant is there no copy.  The result is then verified in full on a
 * worker (store_rank_verify) before it counts as repaired.
 *
 * Each event is recorded in the node's catalog (catalog_copy_fault_set,
 * schema 5: bad -> repaired / unrepairable) and logged naming this node
 * and the copy.  A copy recorded unrepairable is not offered any more:
 * LATEST_RANK passes over the step for that rank, MAP refuses it, a
 * neighbour's GET_RANK is refused.  A READ heals and serves again
 * (restore.c).
 *
 * Loop thread only.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct server;

/* heal_rank's answer: error 0 when the copy was replaced by a verified
 * good one (msg names the source), -EIO when no good copy was found (msg
 * names every copy tried and what was wrong with it), another -errno for
 * a local fault.  msg is valid during the call only. */
typedef void heal_done_fn(void *userdata, int error, const char *msg);

/*
 * Replace this node's copy of (job, step, rank) — the local tier's if it
 * holds one, else the replica area's — with a good copy from elsewhere.
 * why: what was found wrong ("shard w block 2 failed its CRC32C"), for
 * the catalog and the log.  Heals of one copy coalesce: a call while one
 * runs waits for it and gets its answer.  done() runs later, exactly
 * once, never from inside this call.
 * Returns 0 (done() will run) or -ENOENT (this node holds no copy of
 * the rank; done() will not run), -ENOMEM.
 */
int heal_rank(struct server *srv, const char *job, uint64_t step, uint32_t rank, const char *why,
              heal_done_fn *done, void *userdata);

/* The same for one named copy: area CATALOG_COPY_LOCAL (the local tier)
 * or the source node of the replica area that holds it (a node may hold
 * a rank in both: ckptctl verify and the scrub name the copy they found
 * bad).  -ENOENT: no such copy here. */
int heal_copy(struct server *srv, const char *job, uint64_t step, uint32_t rank, uint32_t area,
              const char *why, heal_done_fn *done, void *userdata);

/* Whether a heal of a copy of (job, step, rank) is under way. */
bool heal_running(const struct server *srv, const char *job, uint64_t step, uint32_t rank);

/* A caller that no longer wants its answer (its client left): done() is
 * not called for (done, userdata); the heal goes on. */
void heal_forget(struct server *srv, heal_done_fn *done, void *userdata);

/* Whether (job, step, rank) is recorded unrepairable on this node (a
 * corrupt copy and no good one found): LATEST_RANK and MAP consult it. */
bool heal_unrepairable(struct server *srv, const char *job, uint64_t step, uint32_t rank);
/* Whether any rank of (job, step) is, in any copy here: the job-wide
 * LATEST consults it. */
bool heal_step_unrepairable(struct server *srv, const char *job, uint64_t step);

/* End every heal, answering -ECANCELED (the server is being freed; its
 * connections are closed already). */
void heal_free_all(struct server *srv);
