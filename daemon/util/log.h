/* SPDX-License-Identifier: MIT */
/*
 * Logging: to stderr, or under journald as native journal records.
 *
 * Under systemd (JOURNAL_STREAM names stderr, or [daemon] log_target =
 * journal) each record goes through sd_journal_sendv() with MESSAGE=,
 * PRIORITY= and, for log_event(), the structured fields CKPT_JOB=,
 * CKPT_STEP=, CKPT_RANK=, CKPT_PEER=, MESSAGE_ID= (util/msgid.h), plus
 * CKPT_NODE= (this node) on every record; docs/ckptd.8 "JOURNAL FIELDS".
 * Anywhere else a line on stderr with a timestamp, the same as ever.  The
 * first place an error is detected logs it with context; callers pass the
 * -errno up without logging again (STYLE.md).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <syslog.h>

/* Where records go: LOG_TARGET_AUTO asks JOURNAL_STREAM (systemd.exec(5)). */
enum log_target {
        LOG_TARGET_AUTO = 0,
        LOG_TARGET_JOURNAL = 1,
        LOG_TARGET_STDERR = 2,
};

void log_set_level(int level);          /* LOG_ERR .. LOG_DEBUG */
int log_get_level(void);
int log_level_parse(const char *s);     /* "error".."debug" -> level, -EINVAL */
void log_set_target(enum log_target target);
/* Whether records go to the journal now (after the target is decided). */
bool log_to_journal_now(void);
/* This node's index in the cluster, carried as CKPT_NODE= (-1: none). */
void log_set_node(int32_t node);
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Remember the last error-level message (for `ckptctl status`). */
const char *log_last_error(void);
unsigned long long log_error_count(void);

#define log_error(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARNING, __VA_ARGS__)
#define log_notice(...) log_msg(LOG_NOTICE, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

/*
 * An event: a record with the fields a journal reader filters on.  Built at
 * the call site as a compound literal, the numbers through the macros below
 * (0 is a valid step, rank and node, so each says that it is set):
 *
 *   log_event(LOG_INFO, LOG_CTX(.id = LOG_ID_STEP_COMMITTED, .job = job,
 *                               LOG_STEP(step)), "job %s step %" PRIu64 ": committed", ...);
 *
 * The message text is the same one log_msg() would write, so stderr logging
 * does not change; the fields only reach the journal.  Strings are borrowed
 * for the call.
 */
struct log_ctx {
        const char *id;  /* MESSAGE_ID, one of util/msgid.h; NULL: none */
        const char *job; /* CKPT_JOB; NULL: none */
        uint64_t step;   /* CKPT_STEP, if has_step */
        uint32_t rank;   /* CKPT_RANK, if has_rank */
        uint32_t peer;   /* CKPT_PEER: the other node's index, if has_peer */
        bool has_step, has_rank, has_peer;
};

#define LOG_CTX(...) (&(const struct log_ctx){ __VA_ARGS__ })
#define LOG_STEP(s) .step = (s), .has_step = true
#define LOG_RANK(r) .rank = (r), .has_rank = true
#define LOG_PEER(p) .peer = (p), .has_peer = true

/* Thread-safe; never changes errno.  file/line/func become CODE_FILE= etc.
 * (the caller's, not this file's); ctx may be NULL. */
void log_event_at(const char *file, int line, const char *func, int level,
                  const struct log_ctx *ctx, const char *fmt, ...)
        __attribute__((format(printf, 6, 7)));
#define log_event(level, ctx, ...) \
        log_event_at(__FILE__, __LINE__, __func__, level, ctx, __VA_ARGS__)
