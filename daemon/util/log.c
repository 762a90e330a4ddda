/* SPDX-License-Identifier: MIT */
/*
 * Logging to stderr, shared by the event-loop thread and the worker threads.
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
#include <unistd.h>

#include "util/log.h"

#define LOG_LINE_MAX 2048
/* 512 bytes and the NUL: the limit of a text field of the STATUS reply */
#define LOG_LAST_ERROR_MAX (512 + 1)

static int log_level = LOG_INFO; /* read and written with __atomic builtins */
static unsigned long long log_errors;

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static bool log_to_journal;

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
        log_to_journal = (unsigned long long)st.st_dev == dev &&
                         (unsigned long long)st.st_ino == ino;
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

/* Thread-safe; never changes errno, so that "log, then return -errno" works. */
void log_msg(int level, const char *fmt, ...) {
        char line[LOG_LINE_MAX + 128];
        char msg[LOG_LINE_MAX];
        size_t pos = 0, len;
        int saved_errno = errno;
        va_list ap;
        int n;

        level = level < LOG_EMERG ? LOG_EMERG : level > LOG_DEBUG ? LOG_DEBUG : level;
        if (level > log_get_level())
                return;

        pthread_once(&log_once, log_detect_journal);

        va_start(ap, fmt);
        errno = saved_errno; /* for %m */
        n = vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (n < 0)
                n = snprintf(msg, sizeof(msg), "(unformattable log message: %s)", fmt);
        len = strnlen(msg, sizeof(msg) - 1);
        if ((size_t)n >= sizeof(msg) && len >= 3)
                memcpy(msg + len - 3, "...", 3);
        while (len > 0 && msg[len - 1] == '\n')
                msg[--len] = '\0';

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

        if (log_to_journal) {
                n = snprintf(line, sizeof(line), "<%d>", level);
        } else {
                struct timespec ts;
                struct tm tm;

                clock_gettime(CLOCK_REALTIME, &ts);
                localtime_r(&ts.tv_sec, &tm);
                n = snprintf(line, sizeof(line),
                             "%04d-%02d-%02d %02d:%02d:%02d.%03ld ckptd[%ld]: %s: ",
                             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                             tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
                             (long)getpid(), level_names[level]);
        }
        pos = (size_t)n;

        /* An embedded newline would start a line the journal files at the
         * default priority and a reader cannot attribute; keep one line. */
        for (size_t i = 0; i < len && pos < sizeof(line) - 1; i++)
                line[pos++] = msg[i] == '\n' ? ' ' : msg[i];
        line[pos++] = '\n';

        write_all(STDERR_FILENO, line, pos);
        errno = saved_errno;
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
