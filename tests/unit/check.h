/* SPDX-License-Identifier: MIT */
/*
 * check.h — the failure counter and CHECK() the unit tests share: a failed
 * check prints where and why and the test goes on, so one run shows every
 * failure (the first CHECK_MAX_REPORTS of them); main() returns
 * check_exit_code() at the end.
 */
#pragma once

#include <stdio.h>

#ifndef CHECK_MAX_REPORTS
#define CHECK_MAX_REPORTS 60
#endif

static unsigned failures;

#define CHECK(cond, ...)                                                        \
        do {                                                                    \
                if (!(cond)) {                                                  \
                        if (failures++ < CHECK_MAX_REPORTS) {                   \
                                fprintf(stderr, "%s:%d: FAIL %s: ", __FILE__,   \
                                        __LINE__, #cond);                       \
                                fprintf(stderr, __VA_ARGS__);                   \
                                fputc('\n', stderr);                            \
                        }                                                       \
                }                                                               \
        } while (0)

/* 0 if every check passed, else 1 after saying how many failed. */
static inline int check_exit_code(void) {
        if (failures) {
                fprintf(stderr, "%u check(s) failed\n", failures);
                return 1;
        }
        return 0;
}
