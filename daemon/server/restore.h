/* SPDX-License-Identifier: MIT */
/*
 * restore — the read side of the IPC protocol: LATEST, LATEST_RANK,
 * SHARD_LIST, READ/READ_DONE, MAP and FETCH, falling back from the local
 * tier to replicas, neighbours and the object store (docs/replication.md).
 * restore.c owns struct read_op and struct conn_fetch and server.read_ops.
 */
#pragma once

#include "ckpt-proto.h"

struct server;
struct conn;

void restore_handle_latest(struct conn *c, const struct ckpt_req_job_step *req);
/* LATEST_RANK: the newest committed step the rank can be restored from,
 * falling back to older steps (docs/replication.md). */
void restore_handle_latest_rank(struct conn *c, const struct ckpt_req_latest_rank *req);
void restore_handle_shard_list(struct conn *c, const struct ckpt_req_shard_list *req);
void restore_handle_read(struct conn *c, const struct ckpt_req_read *req);
void restore_handle_read_done(struct conn *c, const struct ckpt_req_read_done *req);
void restore_handle_map(struct conn *c, const struct ckpt_req_read *req);
void restore_handle_fetch(struct conn *c, const struct ckpt_req_fetch *req);
void restore_conn_closed(struct conn *c);
/* Give back memory read ahead for restores (when someone waits for it). */
void restore_drop_prefetches(struct server *srv);
void restore_drop_prefetches_of(struct conn *c);
