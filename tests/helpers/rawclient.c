/* SPDX-License-Identifier: MIT */
/*
 * ckpt-rawclient — speaks the wire protocol directly, so the bad-input tests
 * can send what libckpt never would: truncated, oversized, garbled packets,
 * wrong versions, hand-written invalid names, windows past a shard's end,
 * wrong CRCs, descriptors attached to requests.  libckpt validates before it
 * sends, so only a client below it can reach the daemon's own checks.
 *
 *   ckpt-rawclient [options] COMMAND ARGS...
 *
 *   send-hex HEX                one packet of arbitrary bytes (spaces allowed)
 *   valid TYPE                  a well-formed request of TYPE (sanity check)
 *   truncated TYPE LEN          a valid TYPE request cut to LEN bytes; with
 *                               --fix-length the header's length says LEN too
 *   garbage N                   N pseudo-random bytes (--seed S)
 *   oversize N                  a STATUS header followed by filler, N bytes
 *   bad-version V [TYPE]        a valid request (STATUS) with header version V
 *   bad-magic [TYPE]            a valid request (STATUS) with a wrong magic
 *   unknown-type T              a header of type T, length 16
 *   hello-range MIN MAX [V]     HELLO offering versions MIN..MAX, in a
 *                               header of version V (default: the newest)
 *   no-hello [TYPE...]          requests before HELLO (default SAVE_BEGIN)
 *   bad-name job|shard NAME     SAVE_BEGIN (or SHARD_BEGIN in a valid save)
 *                               carrying NAME, encoded by hand; NAME may
 *                               contain \xNN escapes (\x00 for a NUL)
 *   chunk-past-end JOB STEP SIZE   shard of SIZE (<= one slot): a CHUNK_PUT
 *                               longer than the window, then the right one,
 *                               then CHUNK_GET at offset SIZE, SAVE_FINISH
 *   wrong-crc JOB STEP SIZE     one window with a deliberately wrong CRC32C,
 *                               then SAVE_FINISH and COMMIT
 *   send-fd [TYPE]              a valid request (STATUS) with three fds
 *                               attached; reports whether the daemon closed
 *                               them ("FD CLOSED" / "FD LEAKED")
 *   empty                       one packet of 0 bytes (not a hang-up)
 *   empty-mid-save JOB STEP SIZE   as wrong-crc, but with the right CRC and
 *                               an empty packet (label EMPTY) between the
 *                               CHUNK_GET and its CHUNK_PUT
 *   many-shards JOB STEP N      SAVE_BEGIN, then N SHARD_BEGINs of empty
 *                               shards; prints "SHARD_BEGIN OK xK" for the K
 *                               that succeeded, then the first failure; with
 *                               --hold MS then "HOLDING K" and keeps the save
 *                               open like hold-windows (an open-file hog)
 *   many-saves JOB STEP N MODE  N saves of an empty rank: MODE finish (steps
 *                               STEP.. of JOB), jobs (JOB-0001.. at STEP), or
 *                               open (steps STEP.., never finished); prints
 *                               "SAVE OK xK", then the first failure
 *
 * send-hex takes several packets (one argument each; the replies are
 * labelled P1, P2, ...).  With --save JOB it first begins a save of JOB at
 * --step (and with --shard NAME:SIZE a shard in it) on the same connection,
 * and @SAVE@ / @SHARD@ in the hex become that save's / shard's id (u32 LE),
 * so a hand-encoded request can name them.
 *   hold-windows JOB STEP N SIZE MS
 *                               a slot hog: one save of N shards of SIZE
 *                               bytes, the first window of each taken
 *                               (CHUNK_GET, stopping at the first refusal)
 *                               and filled; prints "HOLDING k", keeps them
 *                               MS milliseconds (less if stdin has a line
 *                               or ends: keep it open) without committing,
 *                               then commits each (CHUNK_PUT), SAVE_FINISH
 *   hold-reads JOB STEP SHARD N MS RANK
 *                               READ N windows of one slot each of SHARD
 *                               (from offset 0), prints "HOLDING k", keeps
 *                               them like hold-windows, then READ_DONE each
 *
 * Options: --socket PATH (else $CKPT_SOCKET), --no-hello (do not say HELLO
 * first; the default says it so only the bad packet is bad), --then-ping
 * (afterwards send STATUS on the same connection), --fix-length, --seed S,
 * --world W, --rank R (for the save commands), --step S (the step bad-name
 * uses, 7 by default; its shard variant begins a real save of raw-job),
 * --hold MS (many-shards).
 *
 * Output, one line per reply, optionally prefixed by the request it answers:
 *   [LABEL ]OK <REPLY TYPE>[ DETAILS]   list replies add "total=T count=C",
 *                               slot replies "offset=O length=L"
 *   [LABEL ]ERROR <ENAME> <code> <daemon message>
 *   [LABEL ]CLOSED              the daemon closed the connection
 *   [LABEL ]TIMEOUT             no reply within 30 s
 *   [LABEL ]BADREPLY <ENAME>    the reply did not decode
 * after a raw packet also "SEQ OK" or "SEQ MISMATCH <got> <want>", and
 * with --then-ping "PING OK" / "PING <failure>".
 * Exit 0 when the exchange happened (whatever the daemon answered), 1 on a
 * local failure (cannot connect), 2 on a usage error; a packet the kernel
 * would not send prints "SENDFAIL <ENAME>".
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "ckpt-proto.h"
#include "conn.h"
#include "crc32c.h"

#define RAW_SEQ 0x5e97a11u
#define RECV_TIMEOUT_S 30

static struct {
        const char *socket;
        bool no_hello, then_ping, fix_length;
        uint64_t seed, step;
        uint32_t world, rank;
        const char *save_job, *shard; /* --save, --shard NAME:SIZE */
        uint64_t hold_ms;             /* --hold: many-shards keeps its save open */
} opt = { .seed = 1, .world = 1, .step = 7 };

static struct wire w = { .fd = -1 };
static struct ckpt_rep_hello hello;

static const char *ename(int err) {
        const char *n = strerrorname_np(err < 0 ? -err : err);
        return n ? n : "?";
}

/* ---- bytes ---------------------------------------------------------------- */

struct bytes {
        uint8_t *p;
        size_t len, cap;
};

static void put(struct bytes *b, const void *src, size_t n) {
        if (b->len + n > b->cap) {
                size_t cap = b->cap ? b->cap : 64;
                while (cap < b->len + n)
                        cap *= 2;
                b->p = realloc(b->p, cap);
                if (!b->p) {
                        perror("realloc");
                        exit(1);
                }
                b->cap = cap;
        }
        memcpy(b->p + b->len, src, n);
        b->len += n;
}

static void put_le(struct bytes *b, uint64_t v, size_t width) {
        uint8_t tmp[8];
        for (size_t i = 0; i < width; i++)
                tmp[i] = (uint8_t)(v >> (8 * i));
        put(b, tmp, width);
}

static void set_le(uint8_t *p, uint64_t v, size_t width) {
        for (size_t i = 0; i < width; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

/* A header whose length field is patched by finish_packet(). */
static void put_hdr(struct bytes *b, uint16_t version, uint16_t type, uint32_t seq) {
        put_le(b, CKPT_PROTO_MAGIC, 4);
        put_le(b, version, 2);
        put_le(b, type, 2);
        put_le(b, 0, 4);
        put_le(b, seq, 4);
}

static void finish_packet(struct bytes *b) {
        set_le(b->p + 8, b->len, 4);
}

/* "a\x00b" -> bytes; returns the length. */
static size_t unescape(const char *in, char *out) {
        size_t n = 0;
        while (*in) {
                if (in[0] == '\\' && in[1] == 'x' && in[2] && in[3]) {
                        char hex[3] = { in[2], in[3], 0 };
                        out[n++] = (char)strtoul(hex, NULL, 16);
                        in += 4;
                } else {
                        out[n++] = *in++;
                }
        }
        return n;
}

static int parse_hex(const char *in, struct bytes *b) {
        while (*in) {
                if (*in == ' ' || *in == ':' || *in == '\n') {
                        in++;
                        continue;
                }
                if (!in[1])
                        return -EINVAL;
                char hex[3] = { in[0], in[1], 0 }, *end;
                uint8_t v = (uint8_t)strtoul(hex, &end, 16);
                if (*end)
                        return -EINVAL;
                put(b, &v, 1);
                in += 2;
        }
        return 0;
}

/* ---- transport ------------------------------------------------------------ */

static int raw_connect(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char def[sizeof(sa.sun_path)];
        const char *path = opt.socket ? opt.socket : wire_default_path(def, sizeof(def));

        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

static void set_timeouts(int fd) {
        struct timeval tv = { .tv_sec = RECV_TIMEOUT_S };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        /* big enough for the oversize packets; FORCE works as root only */
        int sz = 1 << 20;
        if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) < 0)
                setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
}

static int open_conn(void) {
        int r;

        if (opt.no_hello) {
                r = raw_connect();
                if (r < 0) {
                        fprintf(stderr, "cannot connect: %s\n", strerror(-r));
                        return r;
                }
                memset(&w, 0, sizeof(w));
                w.fd = r;
        } else {
                r = wire_open(&w, opt.socket, &hello);
                if (r < 0) {
                        fprintf(stderr, "cannot connect and say HELLO: %s %d: %s\n", ename(r), r,
                                w.errmsg);
                        return r;
                }
        }
        set_timeouts(w.fd);
        return 0;
}

/* Send one packet, with fds attached if nfds > 0. */
static int send_packet(const void *data, size_t len, const int *fds, int nfds) {
        struct iovec iov = { .iov_base = (void *)data, .iov_len = len };
        union {
                char buf[CMSG_SPACE(sizeof(int) * 8)];
                struct cmsghdr align;
        } ctrl;
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

        if (nfds > 0) {
                memset(&ctrl, 0, sizeof(ctrl));
                msg.msg_control = ctrl.buf;
                msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
                struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
                cm->cmsg_level = SOL_SOCKET;
                cm->cmsg_type = SCM_RIGHTS;
                cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
                memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
        }
        ssize_t n;
        do
                n = sendmsg(w.fd, &msg, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        if (n < 0) {
                int r = -errno;
                printf("SENDFAIL %s %zu bytes\n", ename(r), len);
                return r;
        }
        return 0;
}

/* What a limit test wants to see of a success reply: how full a list page
 * is, how long a window. */
static const char *reply_details(const struct ckpt_reply *rep) {
        static char buf[96];
        uint32_t total = 0, count = 0;

        switch (rep->hdr.type & ~CKPT_MSG_REPLY) {
        case CKPT_MSG_SHARD_LIST:
                total = rep->shard_list.total;
                count = rep->shard_list.count;
                break;
        case CKPT_MSG_JOB_LIST:
                total = rep->job_list.total;
                count = rep->job_list.count;
                break;
        case CKPT_MSG_CKPT_LIST:
                total = rep->ckpt_list.total;
                count = rep->ckpt_list.count;
                break;
        case CKPT_MSG_CHUNK_GET:
        case CKPT_MSG_READ:
                snprintf(buf, sizeof(buf), " offset=%" PRIu64 " length=%" PRIu64, rep->slot.offset,
                         rep->slot.length);
                return buf;
        case CKPT_MSG_HELLO:
                /* the version chosen, and the one the reply came in */
                snprintf(buf, sizeof(buf), " proto=%u version=%u", rep->hello.proto,
                         rep->hdr.version);
                return buf;
        default:
                return "";
        }
        snprintf(buf, sizeof(buf), " total=%u count=%u", total, count);
        return buf;
}

/* Receive one reply and print it.  Returns the decoded error (<0), 0 for a
 * success reply, or 1 when there was no usable reply. */
static int recv_print(const char *label, uint32_t want_seq, bool check_seq,
                      struct ckpt_reply *rep_out) {
        static uint8_t buf[CKPT_MSG_MAX + 1];
        static struct ckpt_reply rep;
        union {
                char buf[CMSG_SPACE(sizeof(int) * 8)];
                struct cmsghdr align;
        } ctrl;
        struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
        struct msghdr msg = {
                .msg_iov = &iov,
                .msg_iovlen = 1,
                .msg_control = ctrl.buf,
                .msg_controllen = sizeof(ctrl.buf),
        };
        const char *sep = label ? " " : "";
        label = label ? label : "";

        ssize_t n;
        do
                n = recvmsg(w.fd, &msg, MSG_CMSG_CLOEXEC);
        while (n < 0 && errno == EINTR);
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); n > 0 && cm; cm = CMSG_NXTHDR(&msg, cm))
                if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                        int nfds = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
                        for (int i = 0; i < nfds; i++) {
                                int fd;
                                memcpy(&fd, CMSG_DATA(cm) + (size_t)i * sizeof(int), sizeof(int));
                                close(fd);
                        }
                }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                printf("%s%sTIMEOUT\n", label, sep);
                return 1;
        }
        if (n < 0 && errno != ECONNRESET) {
                printf("%s%sCLOSED %s\n", label, sep, ename(errno));
                return 1;
        }
        if (n <= 0) {
                printf("%s%sCLOSED\n", label, sep);
                return 1;
        }
        int r = ckpt_reply_decode(&rep, buf, (size_t)n);
        if (r < 0) {
                printf("%s%sBADREPLY %s\n", label, sep, ename(r));
                return 1;
        }
        if (rep.hdr.type == CKPT_MSG_ERROR)
                printf("%s%sERROR %s %d %s\n", label, sep, ename(rep.error.error), rep.error.error,
                       rep.error.message);
        else
                printf("%s%sOK %s%s\n", label, sep, ckpt_msg_type_name(rep.hdr.type),
                       reply_details(&rep));
        if (check_seq) {
                if (rep.hdr.seq == want_seq)
                        printf("SEQ OK\n");
                else
                        printf("SEQ MISMATCH %u %u\n", rep.hdr.seq, want_seq);
        }
        if (rep_out)
                *rep_out = rep;
        fflush(stdout);
        return rep.hdr.type == CKPT_MSG_ERROR ? rep.error.error : 0;
}

/* Send raw bytes (with fds), print the reply.  Returns 0 when a reply
 * came back (success or error), 1 when none did. */
static int raw_exchange(const char *label, const void *data, size_t len, const int *fds, int nfds) {
        const uint8_t *p = data;
        uint32_t seq = 0;
        bool check_seq = len >= CKPT_HDR_SIZE;
        if (check_seq)
                seq = (uint32_t)p[12] | (uint32_t)p[13] << 8 | (uint32_t)p[14] << 16 |
                      (uint32_t)p[15] << 24;
        if (send_packet(data, len, fds, nfds) < 0)
                return 1;
        return recv_print(label, seq, check_seq, NULL) == 1 ? 1 : 0;
}

/* A well-formed request through the wire layer: prints its outcome. */
static int call_print(const char *label, struct ckpt_request *req, struct ckpt_reply *rep,
                      int *fd_out) {
        const char *sep = label ? " " : "";
        int r = wire_call(&w, req, rep, fd_out);
        if (r == 0)
                printf("%s%sOK %s\n", label ? label : "", sep,
                       ckpt_msg_type_name(req->hdr.type | CKPT_MSG_REPLY));
        else
                printf("%s%sERROR %s %d %s\n", label ? label : "", sep, ename(r), r, w.errmsg);
        fflush(stdout);
        return r;
}

/* ---- valid requests ------------------------------------------------------- */

static int type_parse(const char *s) {
        char *end;
        unsigned long v = strtoul(s, &end, 0);
        if (!*end && end != s)
                return (int)v;
        for (int t = 1; t < CKPT_MSG_REQUEST_MAX_; t++) {
                const char *n = ckpt_msg_type_name((uint16_t)t);
                size_t i;
                for (i = 0; n[i] && s[i]; i++) {
                        char c = s[i] == '-' ? '_' : s[i];
                        if (c >= 'a' && c <= 'z')
                                c = (char)(c - 'a' + 'A');
                        if (c != n[i])
                                break;
                }
                if (!n[i] && !s[i])
                        return t;
        }
        return -EINVAL;
}

/* Fill a valid request of type t with plausible values. */
static void request_fill(struct ckpt_request *req, uint16_t t) {
        memset(req, 0, sizeof(*req));
        req->hdr.type = t;
        req->hdr.seq = RAW_SEQ;
        switch (t) {
        case CKPT_MSG_HELLO:
                req->hello.proto_min = CKPT_PROTO_VERSION;
                req->hello.proto_max = CKPT_PROTO_VERSION;
                break;
        case CKPT_MSG_SAVE_BEGIN:
                ckpt_name_set(&req->save_begin.job, "raw-job");
                req->save_begin.step = 7;
                req->save_begin.rank = 0;
                req->save_begin.world_size = 1;
                break;
        case CKPT_MSG_SHARD_BEGIN:
                req->shard_begin.save_id = 12345;
                ckpt_name_set(&req->shard_begin.shard, "weights");
                req->shard_begin.size = 4096;
                break;
        case CKPT_MSG_CHUNK_GET:
                req->chunk_get.shard_id = 12345;
                req->chunk_get.offset = 0;
                break;
        case CKPT_MSG_CHUNK_PUT:
                req->chunk_put.shard_id = 12345;
                req->chunk_put.slot_id = 0;
                req->chunk_put.offset = 0;
                req->chunk_put.length = 4096;
                req->chunk_put.crc32c = 0xdeadbeef;
                break;
        case CKPT_MSG_SAVE_FINISH:
        case CKPT_MSG_SAVE_ABORT:
                req->save.save_id = 12345;
                break;
        case CKPT_MSG_WAIT:
                ckpt_name_set(&req->wait.job, "raw-job");
                req->wait.step = 7;
                req->wait.tier = CKPT_TIER_LOCAL;
                req->wait.timeout_ms = 0;
                break;
        case CKPT_MSG_COMMIT:
        case CKPT_MSG_LATEST:
                ckpt_name_set(&req->job_step.job, "raw-job");
                req->job_step.step = 7;
                req->job_step.timeout_ms = 10;
                break;
        case CKPT_MSG_SHARD_LIST:
                ckpt_name_set(&req->shard_list.job, "raw-job");
                req->shard_list.step = 7;
                break;
        case CKPT_MSG_READ:
        case CKPT_MSG_MAP:
                ckpt_name_set(&req->read.job, "raw-job");
                req->read.step = 7;
                ckpt_name_set(&req->read.shard, "weights");
                req->read.offset = 0;
                req->read.length = t == CKPT_MSG_READ ? 4096 : 0;
                break;
        case CKPT_MSG_READ_DONE:
                req->read_done.slot_id = 0;
                break;
        case CKPT_MSG_CKPT_LIST:
                ckpt_name_set(&req->list.job, "raw-job");
                break;
        default: /* STATUS, JOB_LIST: empty / reserved-empty */
                break;
        }
}

static int request_bytes(uint16_t t, struct bytes *b) {
        struct ckpt_request req;
        uint8_t buf[CKPT_MSG_MAX];

        request_fill(&req, t);
        int n = ckpt_request_encode(&req, buf, sizeof(buf));
        if (n < 0) {
                fprintf(stderr, "cannot encode a %s request: %s\n", ckpt_msg_type_name(t),
                        strerror(-n));
                return n;
        }
        b->len = 0;
        put(b, buf, (size_t)n);
        return 0;
}

static int arg_type(const char *s) {
        int t = type_parse(s);
        if (t <= 0 || t >= CKPT_MSG_REQUEST_MAX_) {
                fprintf(stderr, "unknown request type '%s'\n", s);
                exit(2);
        }
        return t;
}

/* ---- commands --------------------------------------------------------------- */

static int64_t save_begin(const char *job, uint64_t step);
static int call_print(const char *label, struct ckpt_request *req, struct ckpt_reply *rep,
                      int *fd_out);

static uint32_t hex_save_id = UINT32_MAX, hex_shard_id = UINT32_MAX; /* --save, --shard */

/* "@SAVE@" and "@SHARD@" -> the ids as 8 hex digits, little-endian. */
static char *substitute_ids(const char *in) {
        /* 6 or 7 characters become 8 */
        char *out = malloc(2 * strlen(in) + 1), *o = out;
        if (!out)
                return NULL;
        while (*in) {
                uint32_t id;
                size_t skip = 0;
                if (!strncmp(in, "@SAVE@", 6)) {
                        id = hex_save_id;
                        skip = 6;
                } else if (!strncmp(in, "@SHARD@", 7)) {
                        id = hex_shard_id;
                        skip = 7;
                }
                if (!skip) {
                        *o++ = *in++;
                        continue;
                }
                for (int i = 0; i < 4; i++)
                        o += sprintf(o, "%02x", (unsigned)(id >> (8 * i)) & 0xff);
                in += skip;
        }
        *o = 0;
        return out;
}

static int cmd_send_hex(int argc, char **argv) {
        int r = 0;
        if (argc < 1) {
                fprintf(stderr, "send-hex wants one or more packets of hex digits\n");
                return 2;
        }
        for (int i = 0; i < argc && r == 0; i++) {
                struct bytes b = { 0 };
                char *hex = substitute_ids(argv[i]), label[16];
                if (!hex || parse_hex(hex, &b) < 0 || b.len == 0) {
                        fprintf(stderr, "send-hex wants a non-empty even number of hex digits\n");
                        free(hex);
                        return 2;
                }
                snprintf(label, sizeof(label), "P%d", i + 1);
                r = raw_exchange(argc > 1 ? label : NULL, b.p, b.len, NULL, 0);
                free(b.p);
                free(hex);
        }
        return r;
}

/* --save / --shard: a save (and a shard) for the hand-encoded packets to name. */
static int begin_save_for_hex(void) {
        int64_t id = save_begin(opt.save_job, opt.step);
        if (id < 0)
                return (int)id;
        hex_save_id = (uint32_t)id;
        if (!opt.shard)
                return 0;
        struct ckpt_request req = { .hdr.type = CKPT_MSG_SHARD_BEGIN };
        struct ckpt_reply rep;
        char name[CKPT_NAME_MAX + 1];
        const char *colon = strrchr(opt.shard, ':');
        size_t n = colon ? (size_t)(colon - opt.shard) : 0;
        if (!colon || n == 0 || n > CKPT_NAME_MAX) {
                fprintf(stderr, "--shard wants NAME:SIZE\n");
                return -EINVAL;
        }
        memcpy(name, opt.shard, n);
        name[n] = 0;
        req.shard_begin.save_id = hex_save_id;
        req.shard_begin.size = strtoull(colon + 1, NULL, 0);
        if (ckpt_name_set(&req.shard_begin.shard, name) < 0) {
                fprintf(stderr, "invalid shard name %s\n", name);
                return -EINVAL;
        }
        int r = call_print("SHARD_BEGIN", &req, &rep, NULL);
        if (r < 0)
                return r;
        hex_shard_id = rep.id.id;
        return 0;
}

static int cmd_valid(int argc, char **argv) {
        struct bytes b = { 0 };
        if (argc < 1)
                return 2;
        if (request_bytes((uint16_t)arg_type(argv[0]), &b) < 0)
                return 1;
        int r = raw_exchange(NULL, b.p, b.len, NULL, 0);
        free(b.p);
        return r;
}

static int cmd_truncated(int argc, char **argv) {
        struct bytes b = { 0 };
        if (argc < 2)
                return 2;
        int t = arg_type(argv[0]);
        size_t len = strtoul(argv[1], NULL, 0);
        if (request_bytes((uint16_t)t, &b) < 0)
                return 1;
        if (len == 0 || len >= b.len) {
                fprintf(stderr, "a %s request is %zu bytes; LEN must be 1..%zu\n",
                        ckpt_msg_type_name((uint16_t)t), b.len, b.len - 1);
                return 2;
        }
        b.len = len;
        if (opt.fix_length && len >= CKPT_HDR_SIZE)
                finish_packet(&b);
        int r = raw_exchange(NULL, b.p, b.len, NULL, 0);
        free(b.p);
        return r;
}

static int cmd_garbage(int argc, char **argv) {
        if (argc < 1)
                return 2;
        size_t n = strtoul(argv[0], NULL, 0);
        if (n == 0 || n > CKPT_MSG_MAX)
                return 2;
        uint8_t *buf = malloc(n);
        uint64_t x = opt.seed * 0x9e3779b97f4a7c15ull + 1;
        for (size_t i = 0; i < n; i++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                buf[i] = (uint8_t)x;
        }
        /* never a real magic by accident */
        if (n >= 4 && !memcmp(buf, "CKPT", 4))
                buf[0] ^= 0xff;
        int r = raw_exchange(NULL, buf, n, NULL, 0);
        free(buf);
        return r;
}

static int cmd_oversize(int argc, char **argv) {
        struct bytes b = { 0 };
        if (argc < 1)
                return 2;
        size_t n = strtoul(argv[0], NULL, 0);
        if (n < CKPT_HDR_SIZE)
                return 2;
        put_hdr(&b, CKPT_PROTO_VERSION, CKPT_MSG_STATUS, RAW_SEQ);
        while (b.len < n) {
                uint8_t fill = 0xa5;
                put(&b, &fill, 1);
        }
        finish_packet(&b); /* the length field says what was sent: > 65536 */
        int r = raw_exchange(NULL, b.p, b.len, NULL, 0);
        free(b.p);
        return r;
}

static int cmd_bad_version(int argc, char **argv) {
        struct bytes b = { 0 };
        if (argc < 1)
                return 2;
        uint16_t version = (uint16_t)strtoul(argv[0], NULL, 0);
        int t = argc > 1 ? arg_type(argv[1]) : CKPT_MSG_STATUS;
        if (request_bytes((uint16_t)t, &b) < 0)
                return 1;
        set_le(b.p + 4, version, 2);
        int r = raw_exchange(NULL, b.p, b.len, NULL, 0);
        free(b.p);
        return r;
}

static int cmd_bad_magic(int argc, char **argv) {
        struct bytes b = { 0 };
        int t = argc > 0 ? arg_type(argv[0]) : CKPT_MSG_STATUS;
        if (request_bytes((uint16_t)t, &b) < 0)
                return 1;
        memcpy(b.p, "KCPT", 4);
        int r = raw_exchange(NULL, b.p, b.len, NULL, 0);
        free(b.p);
        return r;
}

static int cmd_unknown_type(int argc, char **argv) {
        struct bytes b = { 0 };
        if (argc < 1)
                return 2;
        put_hdr(&b, CKPT_PROTO_VERSION, (uint16_t)strtoul(argv[0], NULL, 0), RAW_SEQ);
        finish_packet(&b);
        int r = raw_exchange(NULL, b.p, b.len, NULL, 0);
        free(b.p);
        return r;
}

static int cmd_hello_range(int argc, char **argv) {
        struct bytes b = { 0 };
        if (argc < 2)
                return 2;
        put_hdr(&b, argc > 2 ? (uint16_t)strtoul(argv[2], NULL, 0) : CKPT_PROTO_VERSION,
                CKPT_MSG_HELLO, RAW_SEQ);
        put_le(&b, strtoul(argv[0], NULL, 0), 2);
        put_le(&b, strtoul(argv[1], NULL, 0), 2);
        finish_packet(&b);
        int r = raw_exchange(NULL, b.p, b.len, NULL, 0);
        free(b.p);
        return r;
}

static int cmd_no_hello(int argc, char **argv) {
        struct bytes b = { 0 };
        int r = 0;

        if (argc == 0) {
                static char *def[] = { (char *)"save-begin" };
                argv = def;
                argc = 1;
        }
        for (int i = 0; i < argc; i++) {
                int t = arg_type(argv[i]);
                if (request_bytes((uint16_t)t, &b) < 0)
                        return 1;
                r = raw_exchange(ckpt_msg_type_name((uint16_t)t), b.p, b.len, NULL, 0);
                if (r > 0)
                        break;
        }
        free(b.p);
        return r;
}

/* SAVE_BEGIN with a valid job; returns the save id or <0. */
static int64_t save_begin(const char *job, uint64_t step) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_SAVE_BEGIN };
        struct ckpt_reply rep;
        if (ckpt_name_set(&req.save_begin.job, job) < 0) {
                fprintf(stderr, "invalid job name %s\n", job);
                exit(2);
        }
        req.save_begin.step = step;
        req.save_begin.rank = opt.rank;
        req.save_begin.world_size = opt.world;
        int r = call_print("SAVE_BEGIN", &req, &rep, NULL);
        return r < 0 ? (int64_t)r : (int64_t)rep.id.id;
}

static int cmd_bad_name(int argc, char **argv) {
        struct bytes b = { 0 };
        if (argc < 2)
                return 2;
        char *name = malloc(strlen(argv[1]) + 1);
        size_t len = unescape(argv[1], name);
        bool shard = !strcmp(argv[0], "shard");
        if (!shard && strcmp(argv[0], "job"))
                return 2;

        if (shard) {
                int64_t id = save_begin("raw-job", opt.step);
                if (id < 0)
                        return (int)id;
                /* SHARD_BEGIN: u32 save_id, name, u64 size */
                put_hdr(&b, CKPT_PROTO_VERSION, CKPT_MSG_SHARD_BEGIN, RAW_SEQ);
                put_le(&b, (uint64_t)id, 4);
                put_le(&b, len, 2);
                put(&b, name, len);
                put_le(&b, 4096, 8);
        } else {
                /* SAVE_BEGIN: name job, u64 step, u32 rank, u32 world_size */
                put_hdr(&b, CKPT_PROTO_VERSION, CKPT_MSG_SAVE_BEGIN, RAW_SEQ);
                put_le(&b, len, 2);
                put(&b, name, len);
                put_le(&b, opt.step, 8);
                put_le(&b, 0, 4);
                put_le(&b, 1, 4);
        }
        finish_packet(&b);
        int r = raw_exchange(shard ? "SHARD_BEGIN" : "SAVE_BEGIN", b.p, b.len, NULL, 0);
        free(b.p);
        free(name);
        return r;
}

struct window {
        void *map;
        uint32_t slot_id;
        uint64_t slot_offset, offset, length;
};

static int chunk_get(const char *label, uint32_t shard_id, uint64_t offset, struct window *win) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_CHUNK_GET };
        struct ckpt_reply rep;
        int fd = -1;

        req.chunk_get.shard_id = shard_id;
        req.chunk_get.offset = offset;
        int r = call_print(label, &req, &rep, &fd);
        if (r < 0 || !win) {
                if (fd >= 0)
                        close(fd);
                return r;
        }
        /* a slot's memfd comes once per generation: keep its mapping */
        static void *maps[1024];
        uint32_t id = rep.slot.slot_id;
        if (id >= sizeof(maps) / sizeof(maps[0]) || (!rep.slot.has_fd && !maps[id]) ||
            (rep.slot.has_fd && fd < 0)) {
                fprintf(stderr, "CHUNK_GET reply for slot %u without the slot's memfd\n", id);
                if (fd >= 0)
                        close(fd);
                return -EBADMSG;
        }
        if (rep.slot.has_fd) {
                if (maps[id])
                        munmap(maps[id], hello.slot_size);
                maps[id] = mmap(NULL, hello.slot_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                close(fd);
                if (maps[id] == MAP_FAILED) {
                        maps[id] = NULL;
                        perror("mmap");
                        return -errno;
                }
        }
        win->map = maps[id];
        win->slot_id = rep.slot.slot_id;
        win->slot_offset = rep.slot.slot_offset;
        win->offset = rep.slot.offset;
        win->length = rep.slot.length;
        return 0;
}

static int chunk_put(const char *label, uint32_t shard_id, const struct window *win,
                     uint64_t length, uint32_t crc) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_CHUNK_PUT };
        struct ckpt_reply rep;

        req.chunk_put.shard_id = shard_id;
        req.chunk_put.slot_id = win->slot_id;
        req.chunk_put.offset = win->offset;
        req.chunk_put.length = length;
        req.chunk_put.crc32c = crc;
        return call_print(label, &req, &rep, NULL);
}

/* SAVE_BEGIN + SHARD_BEGIN "weights" of size + CHUNK_GET 0, window filled
 * with a pattern. */
static int one_window_save(const char *job, uint64_t step, uint64_t size, uint32_t *save_id,
                           uint32_t *shard_id, struct window *win) {
        if (size == 0 || size > hello.slot_size) {
                fprintf(stderr, "SIZE must be 1..%" PRIu64 " (one slot)\n", hello.slot_size);
                return -EINVAL;
        }
        int64_t id = save_begin(job, step);
        if (id < 0)
                return (int)id;
        *save_id = (uint32_t)id;

        struct ckpt_request req = { .hdr.type = CKPT_MSG_SHARD_BEGIN };
        struct ckpt_reply rep;
        req.shard_begin.save_id = *save_id;
        ckpt_name_set(&req.shard_begin.shard, "weights");
        req.shard_begin.size = size;
        int r = call_print("SHARD_BEGIN", &req, &rep, NULL);
        if (r < 0)
                return r;
        *shard_id = rep.id.id;

        r = chunk_get("CHUNK_GET", *shard_id, 0, win);
        if (r < 0)
                return r;
        if (win->length != size) {
                fprintf(stderr, "window of %" PRIu64 " bytes for a %" PRIu64 " byte shard\n",
                        win->length, size);
                return -EBADMSG;
        }
        uint8_t *p = (uint8_t *)win->map + win->slot_offset;
        for (uint64_t i = 0; i < win->length; i++)
                p[i] = (uint8_t)(i * 7 + step);
        return 0;
}

static int save_id_call(const char *label, uint16_t type, uint32_t save_id) {
        struct ckpt_request req = { .hdr.type = type };
        struct ckpt_reply rep;
        req.save.save_id = save_id;
        return call_print(label, &req, &rep, NULL);
}

static int cmd_chunk_past_end(int argc, char **argv) {
        uint32_t save_id, shard_id;
        struct window win;
        if (argc < 3)
                return 2;
        const char *job = argv[0];
        uint64_t step = strtoull(argv[1], NULL, 10), size = strtoull(argv[2], NULL, 10);

        int r = one_window_save(job, step, size, &save_id, &shard_id, &win);
        if (r < 0)
                return r == -EINVAL ? 2 : 0;
        const uint8_t *p = (const uint8_t *)win.map + win.slot_offset;
        uint32_t crc = crc32c(0, p, win.length);
        /* more bytes than the window (and the shard) holds */
        chunk_put("CHUNK_PUT_LONG", shard_id, &win, win.length + 1, crc);
        chunk_put("CHUNK_PUT_HUGE", shard_id, &win, win.length + hello.slot_size, crc);
        /* the honest window still goes in afterwards */
        chunk_put("CHUNK_PUT", shard_id, &win, win.length, crc);
        /* a window past the declared end */
        chunk_get("CHUNK_GET_END", shard_id, size, NULL);
        chunk_get("CHUNK_GET_PAST", shard_id, size + 4096, NULL);
        save_id_call("SAVE_FINISH", CKPT_MSG_SAVE_FINISH, save_id);
        return 0;
}

/* A 0-byte packet: on SOCK_SEQPACKET it is a message, not the end of the
 * connection.  The reply can only carry seq 0 (there is no header). */
static int send_empty(const char *label) {
        if (send_packet("", 0, NULL, 0) < 0)
                return 1;
        return recv_print(label, 0, true, NULL) == 1 ? 1 : 0;
}

/* One window of JOB STEP SIZE, handed back (with a wrong CRC32C if asked,
 * after an empty packet if asked), then SAVE_FINISH and COMMIT. */
static int one_window_commit(int argc, char **argv, bool wrong_crc, bool empty_first) {
        uint32_t save_id, shard_id;
        struct window win;
        if (argc < 3)
                return 2;
        const char *job = argv[0];
        uint64_t step = strtoull(argv[1], NULL, 10), size = strtoull(argv[2], NULL, 10);

        int r = one_window_save(job, step, size, &save_id, &shard_id, &win);
        if (r < 0)
                return r == -EINVAL ? 2 : 0;
        const uint8_t *p = (const uint8_t *)win.map + win.slot_offset;
        uint32_t crc = crc32c(0, p, win.length) ^ (wrong_crc ? 0x00010000u : 0);
        if (!empty_first || send_empty("EMPTY") == 0) {
                chunk_put("CHUNK_PUT", shard_id, &win, win.length, crc);
                save_id_call("SAVE_FINISH", CKPT_MSG_SAVE_FINISH, save_id);

                struct ckpt_request req = { .hdr.type = CKPT_MSG_COMMIT };
                struct ckpt_reply rep;
                ckpt_name_set(&req.job_step.job, job);
                req.job_step.step = step;
                req.job_step.timeout_ms = empty_first ? 10000 : 5000;
                call_print("COMMIT", &req, &rep, NULL);
        }
        return 0;
}

static int cmd_wrong_crc(int argc, char **argv) {
        return one_window_commit(argc, argv, true, false);
}

static int cmd_send_fd(int argc, char **argv) {
        struct bytes b = { 0 };
        int pipes[3][2], fds[3];
        int t = argc > 0 ? arg_type(argv[0]) : CKPT_MSG_STATUS;

        if (request_bytes((uint16_t)t, &b) < 0)
                return 1;
        for (int i = 0; i < 3; i++) {
                if (pipe2(pipes[i], O_CLOEXEC) < 0) {
                        perror("pipe2");
                        return 1;
                }
                fds[i] = pipes[i][1];
        }
        int r = raw_exchange(NULL, b.p, b.len, fds, 3);
        if (r > 0) {
                free(b.p);
                return 0;
        }
        /* Our write ends go; if the daemon kept its copies, the read ends
         * never see EOF.  It closes them as it reads the packet, before it
         * answers, so EOF is due at once; allow a moment anyway. */
        for (int i = 0; i < 3; i++)
                close(pipes[i][1]);
        bool leaked = false;
        for (int i = 0; i < 3; i++) {
                struct pollfd pfd = { .fd = pipes[i][0], .events = POLLIN };
                char c;
                if (poll(&pfd, 1, 2000) <= 0 || read(pipes[i][0], &c, 1) != 0)
                        leaked = true;
                close(pipes[i][0]);
        }
        printf("FD %s\n", leaked ? "LEAKED" : "CLOSED");
        free(b.p);
        return 0;
}

static int cmd_empty(int argc, char **argv) {
        (void)argc;
        (void)argv;
        return send_empty(NULL);
}

static int cmd_empty_mid_save(int argc, char **argv) {
        return one_window_commit(argc, argv, false, true);
}

static void hold(uint32_t held, uint64_t ms);

static int cmd_many_shards(int argc, char **argv) {
        if (argc < 3)
                return 2;
        uint64_t step = strtoull(argv[1], NULL, 10);
        unsigned long n = strtoul(argv[2], NULL, 10), ok = 0;
        int64_t id = save_begin(argv[0], step);
        if (id < 0)
                return 0;
        for (unsigned long i = 0; i < n; i++) {
                struct ckpt_request req = { .hdr.type = CKPT_MSG_SHARD_BEGIN };
                struct ckpt_reply rep;
                char name[32], label[48];
                snprintf(name, sizeof(name), "s%07lu", i);
                req.shard_begin.save_id = (uint32_t)id;
                ckpt_name_set(&req.shard_begin.shard, name);
                int r = wire_call(&w, &req, &rep, NULL);
                if (r == 0) {
                        ok++;
                        continue;
                }
                printf("SHARD_BEGIN OK x%lu\n", ok);
                snprintf(label, sizeof(label), "SHARD_BEGIN_%lu", i + 1);
                printf("%s ERROR %s %d %s\n", label, ename(r), r, w.errmsg);
                break;
        }
        if (ok == n)
                printf("SHARD_BEGIN OK x%lu\n", ok);
        if (opt.hold_ms)
                hold((uint32_t)ok, opt.hold_ms);
        return 0;
}

/* N saves of empty ranks on one connection: MODE finish (steps STEP..,
 * each finished), jobs (JOB-0001.. at STEP, finished) or open (steps
 * STEP.., left unfinished). */
static int cmd_many_saves(int argc, char **argv) {
        if (argc < 4)
                return 2;
        const char *job = argv[0], *mode = argv[3];
        uint64_t step = strtoull(argv[1], NULL, 10);
        unsigned long n = strtoul(argv[2], NULL, 10), ok = 0;
        bool jobs = !strcmp(mode, "jobs"), finish = jobs || !strcmp(mode, "finish");
        if (!jobs && !finish && strcmp(mode, "open"))
                return 2;
        for (unsigned long i = 0; i < n; i++) {
                struct ckpt_request req = { .hdr.type = CKPT_MSG_SAVE_BEGIN };
                struct ckpt_reply rep;
                char name[CKPT_NAME_MAX + 1];
                snprintf(name, sizeof(name), jobs ? "%.200s-%04lu" : "%.200s", job, i + 1);
                ckpt_name_set(&req.save_begin.job, name);
                req.save_begin.step = jobs ? step : step + i;
                req.save_begin.world_size = 1;
                int r = wire_call(&w, &req, &rep, NULL);
                if (r == 0 && finish) {
                        req = (struct ckpt_request){ .hdr.type = CKPT_MSG_SAVE_FINISH };
                        req.save.save_id = rep.id.id;
                        r = wire_call(&w, &req, &rep, NULL);
                }
                if (r < 0) {
                        printf("SAVE OK x%lu\n", ok);
                        printf("SAVE_%lu ERROR %s %d %s\n", i + 1, ename(r), r, w.errmsg);
                        return 0;
                }
                ok++;
        }
        printf("SAVE OK x%lu\n", ok);
        return 0;
}

/* Say how many windows are held, then keep them ms milliseconds or until
 * stdin has a line or ends (the test that started us is gone). */
static void hold(uint32_t held, uint64_t ms) {
        struct pollfd pfd = { .fd = 0, .events = POLLIN };
        int ready;

        printf("HOLDING %u\n", held);
        fflush(stdout);
        do
                ready = poll(&pfd, 1, ms > INT32_MAX ? INT32_MAX : (int)ms);
        while (ready < 0 && errno == EINTR);
}

/* READ n windows of one slot each of a shard, keep them, then READ_DONE. */
static int cmd_hold_reads(int argc, char **argv) {
        if (argc < 6)
                return 2;
        struct ckpt_request req = { .hdr.type = CKPT_MSG_READ };
        struct ckpt_reply rep;
        uint32_t n = (uint32_t)strtoul(argv[3], NULL, 10), slots[64];
        uint64_t hold_ms = strtoull(argv[4], NULL, 10);
        if (n == 0 || n > 64 || ckpt_name_set(&req.read.job, argv[0]) < 0 ||
            ckpt_name_set(&req.read.shard, argv[2]) < 0)
                return 2;
        req.read.step = strtoull(argv[1], NULL, 10);
        req.read.rank = (uint32_t)strtoul(argv[5], NULL, 10);
        uint32_t held = 0;
        for (; held < n; held++) {
                int fd = -1;
                req.read.offset = held * hello.slot_size;
                req.read.length = hello.slot_size;
                int r = call_print("READ", &req, &rep, &fd);
                if (fd >= 0)
                        close(fd);
                if (r < 0 || rep.slot.length == 0)
                        break;
                slots[held] = rep.slot.slot_id;
        }
        hold(held, hold_ms);
        for (uint32_t i = 0; i < held; i++) {
                struct ckpt_request done = { .hdr.type = CKPT_MSG_READ_DONE };
                done.read_done.slot_id = slots[i];
                call_print("READ_DONE", &done, &rep, NULL);
        }
        return 0;
}

static int cmd_hold_windows(int argc, char **argv) {
        if (argc < 5)
                return 2;
        const char *job = argv[0];
        uint64_t step = strtoull(argv[1], NULL, 10);
        uint32_t n = (uint32_t)strtoul(argv[2], NULL, 10);
        uint64_t size = strtoull(argv[3], NULL, 10), hold_ms = strtoull(argv[4], NULL, 10);
        if (n == 0 || n > 4096 || size == 0)
                return 2;
        struct window *wins = calloc(n, sizeof(*wins));
        uint32_t *shards = calloc(n, sizeof(*shards));
        if (!wins || !shards)
                return 1;

        int64_t save_id = save_begin(job, step);
        if (save_id < 0)
                return 0;
        uint32_t held = 0;
        for (uint32_t i = 0; i < n; i++) {
                struct ckpt_request req = { .hdr.type = CKPT_MSG_SHARD_BEGIN };
                struct ckpt_reply rep;
                char name[32];
                snprintf(name, sizeof(name), "w%u", i);
                req.shard_begin.save_id = (uint32_t)save_id;
                ckpt_name_set(&req.shard_begin.shard, name);
                req.shard_begin.size = size;
                if (call_print("SHARD_BEGIN", &req, &rep, NULL) < 0)
                        break;
                shards[held] = rep.id.id;
                if (chunk_get("CHUNK_GET", shards[held], 0, &wins[held]) < 0)
                        break;
                memset((uint8_t *)wins[held].map + wins[held].slot_offset, 0x40 + (int)(i % 64),
                       wins[held].length);
                held++;
        }
        hold(held, hold_ms);
        for (uint32_t i = 0; i < held; i++) {
                const uint8_t *p = (const uint8_t *)wins[i].map + wins[i].slot_offset;
                chunk_put("CHUNK_PUT", shards[i], &wins[i], wins[i].length,
                          crc32c(0, p, wins[i].length));
        }
        save_id_call("SAVE_FINISH", CKPT_MSG_SAVE_FINISH, (uint32_t)save_id);
        free(wins);
        free(shards);
        return 0;
}

static int ping(void) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_STATUS };
        struct ckpt_reply rep;
        int r = wire_call(&w, &req, &rep, NULL);
        if (r == 0)
                printf("PING OK %s clients=%u\n", rep.status.daemon_version, rep.status.clients);
        else
                printf("PING ERROR %s %d %s\n", ename(r), r, w.errmsg);
        return r;
}

int main(int argc, char **argv) {
        static const struct option longopts[] = {
                { "socket", required_argument, NULL, 'S' },
                { "no-hello", no_argument, NULL, 'n' },
                { "then-ping", no_argument, NULL, 'p' },
                { "fix-length", no_argument, NULL, 'f' },
                { "seed", required_argument, NULL, 's' },
                { "world", required_argument, NULL, 'w' },
                { "rank", required_argument, NULL, 'r' },
                { "step", required_argument, NULL, 't' },
                { "save", required_argument, NULL, 'j' },
                { "shard", required_argument, NULL, 'd' },
                { "hold", required_argument, NULL, 'H' },
                {}
        };
        static const struct {
                const char *name;
                int (*fn)(int argc, char **argv);
        } cmds[] = {
                { "send-hex", cmd_send_hex },
                { "valid", cmd_valid },
                { "truncated", cmd_truncated },
                { "garbage", cmd_garbage },
                { "oversize", cmd_oversize },
                { "bad-version", cmd_bad_version },
                { "bad-magic", cmd_bad_magic },
                { "unknown-type", cmd_unknown_type },
                { "hello-range", cmd_hello_range },
                { "no-hello", cmd_no_hello },
                { "bad-name", cmd_bad_name },
                { "chunk-past-end", cmd_chunk_past_end },
                { "wrong-crc", cmd_wrong_crc },
                { "send-fd", cmd_send_fd },
                { "empty", cmd_empty },
                { "empty-mid-save", cmd_empty_mid_save },
                { "many-shards", cmd_many_shards },
                { "many-saves", cmd_many_saves },
                { "hold-windows", cmd_hold_windows },
                { "hold-reads", cmd_hold_reads },
        };
        int c;

        while ((c = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
                switch (c) {
                case 'S': opt.socket = optarg; break;
                case 'n': opt.no_hello = true; break;
                case 'p': opt.then_ping = true; break;
                case 'f': opt.fix_length = true; break;
                case 's': opt.seed = strtoull(optarg, NULL, 0); break;
                case 'w': opt.world = (uint32_t)strtoul(optarg, NULL, 0); break;
                case 'r': opt.rank = (uint32_t)strtoul(optarg, NULL, 0); break;
                case 't': opt.step = strtoull(optarg, NULL, 0); break;
                case 'j': opt.save_job = optarg; break;
                case 'd': opt.shard = optarg; break;
                case 'H': opt.hold_ms = strtoull(optarg, NULL, 0); break;
                default: return 2;
                }
        }
        if (optind >= argc) {
                fprintf(stderr, "usage: ckpt-rawclient [--socket P] [--no-hello] [--then-ping] "
                                "COMMAND ARGS (see the top of rawclient.c)\n");
                return 2;
        }
        const char *cmd = argv[optind];
        int (*fn)(int, char **) = NULL;
        for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
                if (!strcmp(cmds[i].name, cmd))
                        fn = cmds[i].fn;
        if (!fn) {
                fprintf(stderr, "unknown command '%s'\n", cmd);
                return 2;
        }
        /* no-hello is the point of that command */
        if (!strcmp(cmd, "no-hello"))
                opt.no_hello = true;
        if (open_conn() < 0)
                return 1;
        if (opt.save_job && begin_save_for_hex() < 0) {
                wire_close(&w);
                return 1;
        }

        /* Whatever the daemon answered was printed; only usage errors
         * change the exit status from here on. */
        int r = fn(argc - optind - 1, argv + optind + 1);
        fflush(stdout);
        if (r == 2) {
                wire_close(&w);
                return r;
        }
        if (opt.then_ping)
                ping();
        fflush(stdout);
        wire_close(&w);
        return 0;
}
