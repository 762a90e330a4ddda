/* SPDX-License-Identifier: MIT */
/*
 * fs — small blocking filesystem helpers (used at start-up and from worker
 * threads, never on the loop thread's hot path).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* mkdir -p with mode for created components.  0 or -errno. */
int fs_mkdir_p(const char *path, unsigned mode);
/* Remove a tree below dirfd/name (name may be a file).  0, or the first
 * -errno; keeps going past errors.  -ENOENT is not an error. */
int fs_rm_rf_at(int dirfd, const char *name);
/* fsync a directory by path or fd. */
int fs_fsync_dir_at(int dirfd, const char *name);
/* Write data to dirfd/name durably and atomically: write name.tmp, fsync,
 * rename over name, fsync dirfd. */
int fs_write_atomic_at(int dirfd, const char *name, const void *data, size_t len, unsigned mode);
/* Read a whole file (at most max bytes: -EFBIG beyond) into a malloc'd,
 * NUL-terminated buffer. */
int fs_read_at(int dirfd, const char *name, size_t max, char **out, size_t *len_out);
/* opendir() of dirfd/name ("." for dirfd itself), with a file description
 * of its own so the caller's fd offset is untouched.  NULL + errno. */
#include <dirent.h>
DIR *fs_opendir_at(int dirfd, const char *name);
/* Write all of buf (retrying short writes). */
int fs_write_all(int fd, const void *buf, size_t len);
