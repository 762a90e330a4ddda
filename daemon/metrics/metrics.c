/* SPDX-License-Identifier: MIT */
/*
 * metrics — the counter and histogram registry and the exposition-format
 * writer (metrics.h).
 *
 * A histogram keeps its buckets non-cumulative, each an atomic count, and
 * turns them cumulative while rendering: _count is then the sum of the
 * buckets the same rendering printed, so the +Inf bucket and _count always
 * agree (promtool checks that) even while another thread observes.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "metrics/metrics.h"

static _Atomic uint64_t counters[METRIC_COUNTER_MAX_];

struct histogram {
        uint64_t bounds_us[METRICS_BUCKETS_MAX]; /* ascending, 0-terminated */
        _Atomic uint64_t buckets[METRICS_BUCKETS_MAX + 1]; /* the last: above every bound */
        _Atomic uint64_t sum_us;
};

#define MS(x) ((uint64_t)(x) * 1000)
#define S(x) ((uint64_t)(x) * 1000000)

/* Staging a rank takes from milliseconds (small shards on tmpfs) to
 * minutes (hundreds of GB); a commit is an fsync or a cluster round;
 * a READ moves at most one slot. */
static struct histogram histograms[METRIC_HISTOGRAM_MAX_] = {
        [METRIC_SAVE_STAGING_SECONDS] = { .bounds_us = { MS(10), MS(50), MS(100), MS(250),
                                                         MS(500), S(1), S(2), S(5), S(10),
                                                         S(30), S(60), S(120), S(300),
                                                         S(600) } },
        [METRIC_COMMIT_SECONDS] = { .bounds_us = { MS(1), MS(5), MS(10), MS(25), MS(50),
                                                   MS(100), MS(250), MS(500), S(1), S(2),
                                                   S(5), S(10), S(30) } },
        [METRIC_READ_SECONDS] = { .bounds_us = { 100, 500, MS(1), MS(5), MS(10), MS(25),
                                                 MS(50), MS(100), MS(250), MS(500), S(1),
                                                 S(5), S(10) } },
};

void metrics_count(enum metrics_counter c, uint64_t n) {
        if ((unsigned)c < METRIC_COUNTER_MAX_)
                atomic_fetch_add_explicit(&counters[c], n, memory_order_relaxed);
}

uint64_t metrics_counter(enum metrics_counter c) {
        if ((unsigned)c >= METRIC_COUNTER_MAX_)
                return 0;
        return atomic_load_explicit(&counters[c], memory_order_relaxed);
}

void metrics_observe_us(enum metrics_histogram h, uint64_t us) {
        if ((unsigned)h >= METRIC_HISTOGRAM_MAX_)
                return;
        struct histogram *hg = &histograms[h];
        size_t i = 0;
        while (i < METRICS_BUCKETS_MAX && hg->bounds_us[i] && us > hg->bounds_us[i])
                i++;
        if (i < METRICS_BUCKETS_MAX && !hg->bounds_us[i])
                i = METRICS_BUCKETS_MAX; /* above the last bound: +Inf */
        atomic_fetch_add_explicit(&hg->buckets[i], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&hg->sum_us, us, memory_order_relaxed);
}

uint64_t metrics_now_us(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

void metrics_reset(void) {
        for (size_t i = 0; i < METRIC_COUNTER_MAX_; i++)
                atomic_store(&counters[i], 0);
        for (size_t h = 0; h < METRIC_HISTOGRAM_MAX_; h++) {
                for (size_t i = 0; i <= METRICS_BUCKETS_MAX; i++)
                        atomic_store(&histograms[h].buckets[i], 0);
                atomic_store(&histograms[h].sum_us, 0);
        }
}

/* ---- the renderer ------------------------------------------------------ */

void metrics_family(struct text *t, const char *name, const char *type, const char *help) {
        text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void metrics_sample(struct text *t, const char *name, const char *labels, uint64_t value) {
        if (labels && *labels)
                text_printf(t, "%s{%s} %" PRIu64 "\n", name, labels, value);
        else
                text_printf(t, "%s %" PRIu64 "\n", name, value);
}

void metrics_sample_double(struct text *t, const char *name, const char *labels, double value) {
        if (labels && *labels)
                text_printf(t, "%s{%s} %.9g\n", name, labels, value);
        else
                text_printf(t, "%s %.9g\n", name, value);
}

char *metrics_label(char *buf, size_t cap, const char *key, const char *value) {
        size_t off = 0;
        int n = snprintf(buf, cap, "%s=\"", key);

        if (n < 0 || (size_t)n + 2 > cap) {
                if (cap)
                        buf[0] = '\0';
                return buf;
        }
        off = (size_t)n;
        size_t boundary = off; /* where the character being copied starts */
        for (const char *p = value; *p; p++) {
                const char *esc = *p == '\\' ? "\\\\" : *p == '"' ? "\\\"" : *p == '\n' ? "\\n" : NULL;
                size_t need = esc ? 2 : 1;
                bool continuation = ((unsigned char)*p & 0xc0) == 0x80;

                if (!continuation)
                        boundary = off;
                /* room for it, the closing quote and the NUL */
                if (off + need + 2 > cap) {
                        if (continuation)
                                off = boundary; /* never cut a UTF-8 sequence */
                        break;
                }
                if (esc)
                        memcpy(buf + off, esc, 2);
                else
                        buf[off] = *p;
                off += need;
        }
        buf[off++] = '"';
        buf[off] = '\0';
        return buf;
}

void metrics_render_histogram(struct text *t, enum metrics_histogram h, const char *name,
                              const char *help) {
        if ((unsigned)h >= METRIC_HISTOGRAM_MAX_)
                return;
        struct histogram *hg = &histograms[h];
        uint64_t cumulative = 0;

        metrics_family(t, name, "histogram", help);
        for (size_t i = 0; i < METRICS_BUCKETS_MAX && hg->bounds_us[i]; i++) {
                cumulative += atomic_load_explicit(&hg->buckets[i], memory_order_relaxed);
                text_printf(t, "%s_bucket{le=\"%.6g\"} %" PRIu64 "\n", name,
                            (double)hg->bounds_us[i] / 1e6, cumulative);
        }
        cumulative += atomic_load_explicit(&hg->buckets[METRICS_BUCKETS_MAX], memory_order_relaxed);
        text_printf(t, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, cumulative);
        text_printf(t, "%s_sum %.6f\n", name,
                    (double)atomic_load_explicit(&hg->sum_us, memory_order_relaxed) / 1e6);
        text_printf(t, "%s_count %" PRIu64 "\n", name, cumulative);
}
