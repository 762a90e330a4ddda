/* SPDX-License-Identifier: MIT */
/*
 * exposition — the daemon's metrics as one Prometheus text document
 * (docs/ckptd.8, METRICS), served by the HTTP endpoint (metrics/endpoint.h)
 * and by the METRICS request (`ckptctl metrics`).
 *
 * Nothing here keeps state: at each scrape it reads what STATUS reads
 * (server_status_gather()), the catalog's per-job tier sums and row
 * counts, the replication targets, and the event counters and histograms
 * of metrics/metrics.h.
 *
 * Label sets stay bounded: per job only the steps and bytes per tier,
 * for at most EXPOSITION_JOBS_MAX jobs of the catalog (by name); the
 * others are summed under ckpt_job="/other", a value no job name can
 * take (names hold no '/').  Per target node only the configured
 * replication targets; kinds, tiers, tables and states are fixed lists.
 *
 * Not thread-safe: loop thread only (it reads server state).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define EXPOSITION_JOBS_MAX 32

struct server;

/* Render the document into a malloc'd buffer (*out, *len, not
 * NUL-terminated; free() it).  uid -1: every job; else only that uid's
 * jobs get per-job series (what JOB_LIST would show it); the node-wide
 * series are everyone's.  0 or -ENOMEM. */
int exposition_render(struct server *srv, int64_t uid, char **out, size_t *len);
