/* SPDX-License-Identifier: MIT */
/*
 * Logging to stderr.  Under systemd (JOURNAL_STREAM set) lines carry the
 * "<N>" syslog priority prefix the journal understands; otherwise a
 * timestamp.  The first place an error is detected logs it with context;
 * callers pass the -errno up without logging again (STYLE.md).
 */
#pragma once

#include <syslog.h>

void log_set_level(int level);          /* LOG_ERR .. LOG_DEBUG */
int log_get_level(void);
int log_level_parse(const char *s);     /* "error".."debug" -> level, -EINVAL */
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Remember the last error-level message (for `ckptctl status`). */
const char *log_last_error(void);
unsigned long long log_error_count(void);

#define log_error(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARNING, __VA_ARGS__)
#define log_notice(...) log_msg(LOG_NOTICE, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
