/* SPDX-License-Identifier: MIT */
/*
 * metrics — the registry of the daemon's event counters and histograms, and
 * the small renderer of the Prometheus text exposition format (0.0.4).
 *
 * What the daemon exposes (docs/ckptd.8, METRICS) comes from two kinds of
 * source.  Most of it is state some module owns already and STATUS reads
 * too (the pool's slots, the store's byte counts, the flusher's requests,
 * the catalog's rows): server/exposition.c reads those at scrape time and
 * nothing is kept twice.  What no module counted before — how long a
 * save's staging took, how many requests were refused, how many bytes
 * restores read — is counted here, through the narrow API below, and
 * only here.
 *
 * The registry is one process-wide table (like log.c's error count): a
 * module counts an event with one call and needs no pointer to thread
 * through.  Its labels are fixed at compile time, so no event can grow
 * the label set.
 *
 * Thread-safety: metrics_count() and metrics_observe_us() may be called
 * from any thread (relaxed atomics: workers count too); a scrape may see
 * two counters from slightly different instants, which Prometheus
 * tolerates.  The renderer functions write into the caller's struct text
 * and are as thread-safe as that buffer.
 */
#pragma once

#include <stdint.h>

#include "util/textfmt.h"

enum metrics_counter {
        METRIC_SAVES_FINISHED,      /* SAVE_FINISH accepted: a rank fully staged */
        METRIC_SAVED_BYTES,         /* bytes of those ranks */
        METRIC_SAVES_FAILED,        /* saves failed or aborted */
        METRIC_STEPS_COMMITTED,     /* commit records written on this node */
        METRIC_READS,               /* READ requests served (restores) */
        METRIC_RESTORED_BYTES,      /* bytes those READs delivered */
        METRIC_ERRORS_JOB,          /* a job's save or read failed (server_job_error) */
        METRIC_ERRORS_REQUEST,      /* a client request refused with an error reply */
        METRIC_HTTP_REQUESTS_OK,    /* GET /metrics answered */
        METRIC_HTTP_REQUESTS_BAD,   /* 400/404/405/413 answers */
        METRIC_HTTP_TIMEOUTS,       /* HTTP connections closed at their deadline */
        METRIC_HTTP_REFUSED,        /* HTTP connections over the cap */
        METRIC_COUNTER_MAX_,
};

enum metrics_histogram {
        METRIC_SAVE_STAGING_SECONDS, /* SAVE_BEGIN -> SAVE_FINISH of one rank */
        METRIC_COMMIT_SECONDS,       /* commit record started -> committed */
        METRIC_READ_SECONDS,         /* READ request -> data in the slot */
        METRIC_HISTOGRAM_MAX_,
};

/* Upper bounds of the buckets, in microseconds (+Inf is implicit). */
#define METRICS_BUCKETS_MAX 16

/* Add n to a counter.  Any thread. */
void metrics_count(enum metrics_counter c, uint64_t n);
uint64_t metrics_counter(enum metrics_counter c);

/* Record one observation of us microseconds.  Any thread. */
void metrics_observe_us(enum metrics_histogram h, uint64_t us);

/* CLOCK_MONOTONIC in microseconds, for the spans the histograms time. */
uint64_t metrics_now_us(void);

/* Forget every count (unit tests, which run many daemons in one process). */
void metrics_reset(void);

/* ---- the renderer ------------------------------------------------------ */

/* "# HELP name help\n# TYPE name type\n"; type is "counter", "gauge" or
 * "histogram".  help must not hold '\n' or '\\' (they are static texts). */
void metrics_family(struct text *t, const char *name, const char *type, const char *help);

/* One sample "name{labels} value\n"; labels is NULL or the inside of the
 * braces, already escaped (metrics_label()). */
void metrics_sample(struct text *t, const char *name, const char *labels, uint64_t value);
void metrics_sample_double(struct text *t, const char *name, const char *labels, double value);

/* Format key="value" into buf (cap bytes), escaping '\\', '"' and '\n' as
 * the format requires; cut (at a character boundary) when it does not fit.
 * Returns buf. */
char *metrics_label(char *buf, size_t cap, const char *key, const char *value);

/* One registry histogram as a whole family: HELP, TYPE, cumulative
 * _bucket{le=...} lines, _sum (seconds) and _count. */
void metrics_render_histogram(struct text *t, enum metrics_histogram h, const char *name,
                              const char *help);
