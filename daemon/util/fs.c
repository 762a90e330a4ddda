/* SPDX-License-Identifier: MIT */
/*
 * fs — see fs.h.  Everything here blocks; callers run it at start-up or on
 * a worker thread.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/fs.h"

int fs_mkdir_p(const char *path, unsigned mode) {
        _cleanup_free_ char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        for (char *s = p + 1; *s; s++) {
                if (*s != '/')
                        continue;
                *s = 0;
                if (mkdir(p, mode) < 0 && errno != EEXIST)
                        return -errno;
                *s = '/';
        }
        if (mkdir(p, mode) < 0 && errno != EEXIST)
                return -errno;
        struct stat st;
        if (stat(p, &st) < 0)
                return -errno;
        return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int fs_rm_rf_at(int dirfd, const char *name) {
        if (unlinkat(dirfd, name, 0) == 0)
                return 0;
        if (errno == ENOENT)
                return 0;
        if (errno != EISDIR && errno != EPERM)
                return -errno;

        int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? 0 : -errno;
        _cleanup_closedir_ DIR *d = fdopendir(fd);
        if (!d) {
                int r = -errno;
                close(fd);
                return r;
        }
        int first = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                int r = fs_rm_rf_at(fd, de->d_name);
                if (r < 0 && !first)
                        first = r;
        }
        if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && !first)
                first = -errno;
        return first;
}

int fs_fsync_dir_at(int dirfd, const char *name) {
        _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        return fsync(fd) < 0 ? -errno : 0;
}

int fs_write_all(int fd, const void *buf, size_t len) {
        const char *p = buf;
        while (len > 0) {
                ssize_t n = write(fd, p, len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

int fs_write_atomic_at(int dirfd, const char *name, const void *data, size_t len, unsigned mode) {
        char tmp[512];
        int r;

        if (snprintf(tmp, sizeof(tmp), "%s.tmp", name) >= (int)sizeof(tmp))
                return -ENAMETOOLONG;
        _cleanup_close_ int fd =
                openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
        if (fd < 0)
                return -errno;
        r = fs_write_all(fd, data, len);
        if (r == 0 && fsync(fd) < 0)
                r = -errno;
        if (r == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
                r = -errno;
        if (r < 0) {
                unlinkat(dirfd, tmp, 0);
                return r;
        }
        return fsync(dirfd) < 0 ? -errno : 0;
}

int fs_read_at(int dirfd, const char *name, size_t max, char **out, size_t *len_out) {
        _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -errno;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EBADMSG;
        if ((uint64_t)st.st_size > max)
                return -EFBIG;
        _cleanup_free_ char *buf = malloc((size_t)st.st_size + 1);
        if (!buf)
                return -ENOMEM;
        size_t got = 0;
        while (got < (size_t)st.st_size) {
                ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        break;
                got += (size_t)n;
        }
        buf[got] = 0;
        *len_out = got;
        *out = TAKE_PTR(buf);
        return 0;
}

DIR *fs_opendir_at(int dirfd, const char *name) {
        int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return NULL;
        DIR *d = fdopendir(fd);
        if (!d)
                safe_close(fd);
        return d;
}
