/* SPDX-License-Identifier: MIT */
/*
 * Scope-based cleanup (gcc/clang cleanup attribute), so that every early
 * return frees what the function owns.  Idiom (dbus-broker):
 *
 *     _cleanup_(foo_freep) struct foo *foo = NULL;
 *     ...
 *     *out = foo; foo = NULL; return 0;
 */
#pragma once

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/mman.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)
#define _cleanup_fclose_ _cleanup_(fclosep)
#define _cleanup_closedir_ _cleanup_(closedirp)

#define _unused_ __attribute__((unused))
#define _likely_(x) __builtin_expect(!!(x), 1)
#define _unlikely_(x) __builtin_expect(!!(x), 0)

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define ALIGN_UP(x, a) (((x) + (a)-1) / (a) * (a))
#define ALIGN_DOWN(x, a) ((x) / (a) * (a))
#define container_of(ptr, type, member) \
        ((type *)((char *)(ptr)-offsetof(type, member)))

static inline void freep(void *p) {
        free(*(void **)p);
}

/* Close an fd, keeping errno: cleanup must not clobber the error a caller
 * is about to inspect. */
static inline int safe_close(int fd) {
        if (fd >= 0) {
                int saved = errno;
                close(fd);
                errno = saved;
        }
        return -1;
}

static inline void closep(int *fd) {
        safe_close(*fd);
}

static inline void fclosep(FILE **f) {
        if (*f)
                fclose(*f);
}

static inline void closedirp(DIR **d) {
        if (*d)
                closedir(*d);
}

/* Define foo_freep() for a foo_free() that accepts NULL. */
#define DEFINE_CLEANUP(type, func)                  \
        static inline void func##p(type *p) {       \
                if (*p)                             \
                        func(*p);                   \
        }

/* Take the value out of a cleanup-managed variable. */
#define TAKE_PTR(p)                          \
        ({                                   \
                __typeof__(p) _tmp_ = (p);   \
                (p) = NULL;                  \
                _tmp_;                       \
        })
#define TAKE_FD(fd)                  \
        ({                           \
                int _tmp_ = (fd);    \
                (fd) = -1;           \
                _tmp_;               \
        })
