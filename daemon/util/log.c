/* SPDX-License-Identifier: MIT */
/*
 * Logging to stderr or the journal, shared by the event-loop thread and the
 * worker threads.
 *
 * Each line is formatted into a stack buffer and handed to the kernel with a
 * single write(2), so lines from different threads never interleave and no
 * stdio lock is involved.  Under systemd the journal adds its own timestamp
 * and reads the "<N>" prefix as the syslog priority (sd-daemon(3)); anywhere
 * else a human reads the line, so it carries a local timestamp and the pid.
 *
 * The journal is detected the way systemd.exec(5) recommends: JOURNAL_STREAM
 * holds "DEV:INODE" of the stream it connected to stderr, and it only counts
 * if stderr still is that stream — a child started with stderr redirected to
 * a file inherits the variable but must not write "<3>" into the file.
 *
 * Under the journal, records are sent in its native protocol instead
 * (sd_journal_sendv(), one datagram each, thread-safe): the stream would
 * only carry the text and the priority, while log_event()'s fields
 * (CKPT_JOB=, MESSAGE_ID=, ...) are what `journalctl CKPT_JOB=llama` and
 * a monitor's MESSAGE_ID filter need.  If the journal's socket refuses a
 * record (journald restarting), the line goes to stderr as before, so
 * nothing is lost.  [daemon] log_target forces either way.
 *
 * The last error-level message and the number of them are kept for
 * `ckptctl status`, so that an operator sees what went wrong without
 * digging through the journal.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/uio.h>
#include <unistd.h>

/* the CODE_FILE=/CODE_LINE= of log_event()'s caller, not of this file */
#define SD_JOURNAL_SUPPRESS_LOCATION 1
#include <systemd/sd-journal.h>

#include "util/log.h"

#define LOG_LINE_MAX 2048
/* 512 bytes and the NUL: the limit of a text field of the STATUS reply */
#define LOG_LAST_ERROR_MAX (512 + 1)

static int log_level = LOG_INFO; /* read and written with __atomic builtins */
static unsigned long long log_errors;

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
/* stderr is the journal's stream (JOURNAL_STREAM): "<N>" prefixes */
static bool log_stderr_is_journal;
static int log_target = LOG_TARGET_AUTO; /* __atomic, enum log_target */
static int32_t log_node = -1;            /* __atomic; CKPT_NODE, -1: none */

static pthread_mutex_t last_error_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_error[LOG_LAST_ERROR_MAX];
static bool have_last_error;

static const char *const level_names[] = {
        [LOG_EMERG] = "emerg",
        [LOG_ALERT] = "alert",
        [LOG_CRIT] = "crit",
        [LOG_ERR] = "error",
        [LOG_WARNING] = "warning",
        [LOG_NOTICE] = "notice",
        [LOG_INFO] = "info",
        [LOG_DEBUG] = "debug",
};

static void log_detect_journal(void) {
        const char *e = getenv("JOURNAL_STREAM");
        unsigned long long dev, ino;
        struct stat st;
        int n = 0;

        if (!e || sscanf(e, "%llu:%llu%n", &dev, &ino, &n) != 2 || e[n] != '\0')
                return;
        if (fstat(STDERR_FILENO, &st) < 0)
                return;
        log_stderr_is_journal = (unsigned long long)st.st_dev == dev &&
                                (unsigned long long)st.st_ino == ino;
}

void log_set_target(enum log_target target) {
        __atomic_store_n(&log_target, (int)target, __ATOMIC_RELAXED);
}

bool log_to_journal_now(void) {
        int t = __atomic_load_n(&log_target, __ATOMIC_RELAXED);
        if (t == LOG_TARGET_JOURNAL)
                return true;
        if (t == LOG_TARGET_STDERR)
                return false;
        pthread_once(&log_once, log_detect_journal);
        return log_stderr_is_journal;
}

void log_set_node(int32_t node) {
        __atomic_store_n(&log_node, node, __ATOMIC_RELAXED);
}

static int clamp_level(int level) {
        if (level < LOG_ERR)
                return LOG_ERR;
        if (level > LOG_DEBUG)
                return LOG_DEBUG;
        return level;
}

void log_set_level(int level) {
        __atomic_store_n(&log_level, clamp_level(level), __ATOMIC_RELAXED);
}

int log_get_level(void) {
        return __atomic_load_n(&log_level, __ATOMIC_RELAXED);
}

/* Accepts the names syslog and systemd use ("err", "warn" as well), any
 * case.  Returns the LOG_* value or -EINVAL. */
int log_level_parse(const char *s) {
        static const struct {
                const char *name;
                int level;
        } names[] = {
                { "error", LOG_ERR },   { "err", LOG_ERR },
                { "warning", LOG_WARNING }, { "warn", LOG_WARNING },
                { "notice", LOG_NOTICE }, { "info", LOG_INFO },
                { "debug", LOG_DEBUG },
        };

        if (!s)
                return -EINVAL;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
                if (strcasecmp(s, names[i].name) == 0)
                        return names[i].level;
        return -EINVAL;
}

static void write_all(int fd, const char *buf, size_t len) {
        while (len > 0) {
                ssize_t n = write(fd, buf, len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return; /* nowhere left to report it */
                }
                buf += n;
                len -= (size_t)n;
        }
}

/* snprintf() into a field buffer and point the next iovec at it; a field
 * that does not fit is left out rather than cut. */
#define FIELD_ADD(iov, n, buf, ...)                                                 \
        do {                                                                        \
                int m_ = snprintf(buf, sizeof(buf), __VA_ARGS__);                   \
                if (m_ > 0 && (size_t)m_ < sizeof(buf))                             \
                        (iov)[(n)++] = (struct iovec){ .iov_base = buf,             \
                                                       .iov_len = (size_t)m_ };     \
        } while (0)

/* One native journal record: 0, or -errno when the journal's socket did
 * not take it (the caller then writes the line to stderr). */
static int journal_send(const char *file, int line, const char *func, int level,
                        const struct log_ctx *ctx, const char *msg, size_t len) {
        char message[LOG_LINE_MAX + 16], prio[16], ident[64], node[32], id[64];
        char job[16 + 256], step[48], rank[32], peer[32];
        char code_file[16 + 256], code_line[32], code_func[16 + 128];
        int32_t self = __atomic_load_n(&log_node, __ATOMIC_RELAXED);
        struct iovec iov[16];
        int n = 0;

        /* a field is one iovec for sd_journal_sendv(): "MESSAGE=" and the
         * text together */
        memcpy(message, "MESSAGE=", 8);
        memcpy(message + 8, msg, len);
        iov[n++] = (struct iovec){ .iov_base = message, .iov_len = 8 + len };
        FIELD_ADD(iov, n, prio, "PRIORITY=%d", level);
        FIELD_ADD(iov, n, ident, "SYSLOG_IDENTIFIER=%s", program_invocation_short_name);
        if (self >= 0)
                FIELD_ADD(iov, n, node, "CKPT_NODE=%d", (int)self);
        if (ctx && ctx->id)
                FIELD_ADD(iov, n, id, "MESSAGE_ID=%s", ctx->id);
        if (ctx && ctx->job)
                FIELD_ADD(iov, n, job, "CKPT_JOB=%s", ctx->job);
        if (ctx && ctx->has_step)
                FIELD_ADD(iov, n, step, "CKPT_STEP=%llu", (unsigned long long)ctx->step);
        if (ctx && ctx->has_rank)
                FIELD_ADD(iov, n, rank, "CKPT_RANK=%u", (unsigned)ctx->rank);
        if (ctx && ctx->has_peer)
                FIELD_ADD(iov, n, peer, "CKPT_PEER=%u", (unsigned)ctx->peer);
        if (file) {
                FIELD_ADD(iov, n, code_file, "CODE_FILE=%s", file);
                FIELD_ADD(iov, n, code_line, "CODE_LINE=%d", line);
                FIELD_ADD(iov, n, code_func, "CODE_FUNC=%s", func);
        }
        return sd_journal_sendv(iov, n);
}

static void log_vevent(const char *file, int line, const char *func, int level,
                       const struct log_ctx *ctx, const char *fmt, va_list ap) {
        char text[LOG_LINE_MAX + 128];
        char msg[LOG_LINE_MAX];
        size_t pos = 0, len;
        int saved_errno = errno;
        int n;

        level = level < LOG_EMERG ? LOG_EMERG : level > LOG_DEBUG ? LOG_DEBUG : level;
        if (level > log_get_level())
                return;

        errno = saved_errno; /* for %m */
        n = vsnprintf(msg, sizeof(msg), fmt, ap);
        if (n < 0)
                n = snprintf(msg, sizeof(msg), "(unformattable log message: %s)", fmt);
        len = strnlen(msg, sizeof(msg) - 1);
        if ((size_t)n >= sizeof(msg) && len >= 3)
                memcpy(msg + len - 3, "...", 3);
        while (len > 0 && msg[len - 1] == '\n')
                msg[--len] = '\0';
        /* An embedded newline would start a line the journal files at the
         * default priority and a reader cannot attribute; keep one line
         * (in the native record as well, so both read the same). */
        for (size_t i = 0; i < len; i++)
                if (msg[i] == '\n')
                        msg[i] = ' ';

        if (level <= LOG_ERR) {
                __atomic_add_fetch(&log_errors, 1, __ATOMIC_RELAXED);
                pthread_mutex_lock(&last_error_lock);
                size_t keep = len < sizeof(last_error) ? len : sizeof(last_error) - 1;
                /* Cut at a character boundary: the copy ends up in JSON. */
                while (keep < len && keep > 0 && ((unsigned char)msg[keep] & 0xc0) == 0x80)
                        keep--;
                memcpy(last_error, msg, keep);
                last_error[keep] = '\0';
                have_last_error = true;
                pthread_mutex_unlock(&last_error_lock);
        }

        bool journal = log_to_journal_now();
        if (journal && journal_send(file, line, func, level, ctx, msg, len) >= 0) {
                errno = saved_errno;
                return;
        }
        pthread_once(&log_once, log_detect_journal);
        if (log_stderr_is_journal) {
                n = snprintf(text, sizeof(text), "<%d>", level);
        } else {
                struct timespec ts;
                struct tm tm;

                clock_gettime(CLOCK_REALTIME, &ts);
                localtime_r(&ts.tv_sec, &tm);
                n = snprintf(text, sizeof(text),
                             "%04d-%02d-%02d %02d:%02d:%02d.%03ld ckptd[%ld]: %s: ",
                             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                             tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
                             (long)getpid(), level_names[level]);
        }
        pos = (size_t)n;
        memcpy(text + pos, msg, len);
        pos += len;
        text[pos++] = '\n';

        write_all(STDERR_FILENO, text, pos);
        errno = saved_errno;
}

/* Thread-safe; never changes errno, so that "log, then return -errno" works. */
void log_msg(int level, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        log_vevent(NULL, 0, NULL, level, NULL, fmt, ap);
        va_end(ap);
}

void log_event_at(const char *file, int line, const char *func, int level,
                  const struct log_ctx *ctx, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        log_vevent(file, line, func, level, ctx, fmt, ap);
        va_end(ap);
}

/* The last error-level message, without prefix, or NULL if none was logged
 * yet.  The string is a copy private to the calling thread, valid until that
 * thread's next call. */
const char *log_last_error(void) {
        static __thread char copy[LOG_LAST_ERROR_MAX];
        bool have;

        pthread_mutex_lock(&last_error_lock);
        have = have_last_error;
        memcpy(copy, last_error, sizeof(copy));
        pthread_mutex_unlock(&last_error_lock);
        return have ? copy : NULL;
}

unsigned long long log_error_count(void) {
        return __atomic_load_n(&log_errors, __ATOMIC_RELAXED);
}
