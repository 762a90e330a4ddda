/* SPDX-License-Identifier: MIT */
/*
 * verify — the VERIFY request (`ckptctl verify`): every copy this node
 * holds of a job's ranks (local tier, replica areas), read and checked in
 * full on the worker pool one copy at a time (store_rank_verify: MANIFEST,
 * shard files and sizes, every block's CRC32C), and with `repair` each bad
 * copy replaced by a good one (heal_copy).  verify.c owns struct
 * verify_op and conn.verify.
 */
#pragma once

#include "ckpt-proto.h"

struct conn;

void verify_handle(struct conn *c, const struct ckpt_req_verify *req);
/* The client left: the copies being checked or repaired finish quietly. */
void verify_conn_closed(struct conn *c);
