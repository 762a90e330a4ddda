/* SPDX-License-Identifier: MIT */
/*
 * test-metrics — the registry and the exposition-format writer: label
 * values escaped as the format requires and cut only at a character
 * boundary, histogram buckets cumulative with +Inf equal to _count and a
 * value on a bound counted in that bucket, counters adding up from
 * several threads.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/metrics.h"

#include "check.h"

static char *render(void (*fn)(struct text *t)) {
        struct text t;
        CHECK(text_init(&t, 16) == 0, "text_init");
        fn(&t);
        CHECK(!t.failed, "render failed");
        text_append(&t, "", 1); /* NUL */
        return t.buf;
}

static void hist(struct text *t) {
        metrics_render_histogram(t, METRIC_COMMIT_SECONDS, "x_seconds", "help");
}

static void *count_many(void *arg) {
        (void)arg;
        for (int i = 0; i < 100000; i++)
                metrics_count(METRIC_SAVED_BYTES, 3);
        return NULL;
}

int main(void) {
        char buf[64];

        CHECK(strcmp(metrics_label(buf, sizeof(buf), "ckpt_job", "a\"b\\c\nd"),
                     "ckpt_job=\"a\\\"b\\\\c\\nd\"") == 0, "escaped: %s", buf);
        /* too long: cut, still quoted */
        char longv[200];
        memset(longv, 'x', sizeof(longv) - 1);
        longv[sizeof(longv) - 1] = '\0';
        metrics_label(buf, sizeof(buf), "k", longv);
        CHECK(strlen(buf) == sizeof(buf) - 1 && buf[strlen(buf) - 1] == '"', "cut: %s", buf);
        /* a cut never splits a UTF-8 character (é is 2 bytes) */
        char utf[200] = "";
        for (int i = 0; i < 40; i++)
                strcat(utf, "\xc3\xa9");
        metrics_label(buf, 12, "k", utf); /* room for k=" 3.5 characters " NUL */
        CHECK(strcmp(buf, "k=\"\xc3\xa9\xc3\xa9\xc3\xa9\"") == 0, "utf-8 cut: %s", buf);

        metrics_reset();
        metrics_observe_us(METRIC_COMMIT_SECONDS, 1000);     /* on the 1 ms bound */
        metrics_observe_us(METRIC_COMMIT_SECONDS, 1001);     /* just above: 5 ms */
        metrics_observe_us(METRIC_COMMIT_SECONDS, 60000000); /* above every bound */
        char *text = render(hist);
        CHECK(strstr(text, "# HELP x_seconds help\n# TYPE x_seconds histogram\n") == text,
              "family lines: %s", text);
        CHECK(strstr(text, "x_seconds_bucket{le=\"0.001\"} 1\n"), "1 ms bucket: %s", text);
        CHECK(strstr(text, "x_seconds_bucket{le=\"0.005\"} 2\n"), "5 ms cumulative: %s", text);
        CHECK(strstr(text, "x_seconds_bucket{le=\"30\"} 2\n"), "30 s: %s", text);
        CHECK(strstr(text, "x_seconds_bucket{le=\"+Inf\"} 3\n"), "+Inf: %s", text);
        CHECK(strstr(text, "x_seconds_sum 60.002001\n"), "sum: %s", text);
        CHECK(strstr(text, "x_seconds_count 3\n"), "count: %s", text);
        free(text);

        pthread_t th[4];
        for (int i = 0; i < 4; i++)
                pthread_create(&th[i], NULL, count_many, NULL);
        for (int i = 0; i < 4; i++)
                pthread_join(th[i], NULL);
        CHECK(metrics_counter(METRIC_SAVED_BYTES) == 4 * 100000 * 3, "threads: %llu",
              (unsigned long long)metrics_counter(METRIC_SAVED_BYTES));
        return check_exit_code();
}
