/* SPDX-License-Identifier: MIT */
/*
 * retention_request — the RETENTION request (`ckptctl retention [JOB]
 * [--dry-run]`): per job and tier (the local tier, each replica area, the
 * object store on the coordinator), what retention keeps and what goes,
 * and why.  The verdicts are retention_decide's, on the same lists and
 * policies the tiers' own passes use (step_retention_policy,
 * replica_area_policy, flush_retention_policy), so a dry run shows what a
 * pass would remove; without dry_run the passes run now and each step
 * that was to go is reported removed, or busy (left for a later pass), or
 * queued (the store's pass runs in the background).
 *
 * The store's rows are the steps this node's catalog records as in the
 * store (remote_state done); the store's own pass lists the bucket, which
 * may hold older steps this node no longer indexes.  Loop thread only.
 */
#pragma once

#include "ckpt-proto.h"

struct conn;

void retention_request_handle(struct conn *c, const struct ckpt_req_retention *req);
