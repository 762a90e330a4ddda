/* SPDX-License-Identifier: MIT */
/*
 * delete — the DELETE request (`ckptctl delete JOB [STEP] [--force]`):
 * a step, or every step of a job, removed from the local tier and from
 * the replica areas this node holds (docs/design-decisions.md, "Delete").
 *
 * Only the job's owner or root may delete.  The job's newest committed
 * step and pinned steps are refused without force; a step being saved,
 * committed, waited on or uploaded is refused with -EBUSY, force or not.
 * The reply comes once the steps are no longer listed or restorable (their
 * directories renamed into the trash, their catalog rows gone); the bytes
 * are unlinked in the background.  On the coordinator (node 0) with an
 * object store the step's objects are deleted too, in the background,
 * and a delete a crash interrupted is finished at the next start.  Loop
 * thread only.
 */
#pragma once

#include "ckpt-proto.h"

struct conn;

void delete_handle(struct conn *c, const struct ckpt_req_delete *req);

struct server;
/* At start, after the reconcile and before retention: finish every
 * delete a crash interrupted (see delete.c). */
void delete_resume(struct server *srv);
