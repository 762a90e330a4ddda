/* SPDX-License-Identifier: MIT */
/*
 * s3 — see s3.h for the model.
 *
 * A request (struct s3_transfer, private) moves through lists of the
 * client: hash_wait → hashing (Content-MD5 on the worker pool; bounded so
 * a flush of a thousand parts neither floods the pool nor holds a
 * thousand dup'd fds) → queue (FIFO, waiting for one of max_concurrent
 * slots) → active (its easy handle in the multi) → done, or → backoff (a
 * loop timer) → queue again.  Each attempt is signed afresh (x-amz-date
 * moves) on the same easy handle after curl_easy_reset().
 *
 * libcurl meets the loop in three places: the socket callback keeps one
 * small struct s3_socket per curl socket, registered with loop_watch_*;
 * the timer callback arms one loop_timer; after every
 * curl_multi_socket_action() the finished transfers are drained from
 * curl_multi_info_read().  User done() callbacks run only from there (or
 * from the worker hand-off, cancel and free), never inside a libcurl
 * callback, so they may start or cancel requests freely.
 *
 * The XML the store sends is read by the strict reader of remote/xml.h;
 * the documents it makes of the elements (which fields an error, a
 * multipart result or a list page has) are at the end of this file.
 */
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "remote/s3.h"
#include "remote/xml.h"
#include "util/cleanup.h"
#include "util/errbuf.h"
#include "util/log.h"

#define DEFAULT_REGION "us-east-1"
#define DEFAULT_MAX_CONCURRENT 8
#define DEFAULT_CONNECT_TIMEOUT_MS 10000
#define DEFAULT_LOW_SPEED_BYTES 1
#define DEFAULT_LOW_SPEED_TIME_S 60
#define DEFAULT_RETRY_MAX_ATTEMPTS 5
#define DEFAULT_RETRY_BASE_MS 100
#define DEFAULT_RETRY_CAP_MS 20000

/* Answers we keep: error and small success documents, and list pages (1000
 * keys of up to 1024 bytes, XML-escaped, plus their metadata). */
#define RESPONSE_SMALL_MAX (64u * 1024)
#define RESPONSE_LIST_MAX (8u << 20)
/* Bodies from this size on ask "Expect: 100-continue", so that a request
 * the store refuses (a bad signature, a missing bucket) is answered before
 * megabytes go out; smaller ones are sent at once. */
#define EXPECT_CONTINUE_MIN (1u << 20)
#define UPLOAD_BUFFER_SIZE (256L * 1024)
#define DOWNLOAD_BUFFER_SIZE (256L * 1024)
#define HASH_CHUNK (1u << 20)
#define MD5_LEN 16
#define MD5_BASE64_LEN 24

/* ---- small helpers ---- */

static void wipe_free(char *s) {
        if (s) {
                explicit_bzero(s, strlen(s));
                free(s);
        }
}

static int copy_bounded(char *dst, size_t cap, const char *src, size_t len) {
        if (len >= cap)
                return -EPROTO;
        memcpy(dst, src, len);
        dst[len] = 0;
        return 0;
}

/* Copy text from the store for a log line or a result: truncated, with
 * control characters replaced, so it cannot forge log lines. */
static void copy_printable(char *dst, size_t cap, const char *src, size_t len) {
        size_t n = len < cap - 1 ? len : cap - 1;
        for (size_t i = 0; i < n; i++) {
                unsigned char ch = (unsigned char)src[i];
                dst[i] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
        }
        dst[n] = 0;
}

static int parse_u64(const char *s, size_t len, uint64_t *out) {
        uint64_t v = 0;

        if (len == 0 || len > 20)
                return -EPROTO;
        for (size_t i = 0; i < len; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -EPROTO;
                unsigned d = (unsigned)(s[i] - '0');
                if (v > (UINT64_MAX - d) / 10)
                        return -EPROTO;
                v = v * 10 + d;
        }
        *out = v;
        return 0;
}

const char *s3_op_name(enum s3_op op) {
        static const char *const names[S3_OP_COUNT] = {
                [S3_OP_PUT_OBJECT] = "PutObject",
                [S3_OP_GET_OBJECT] = "GetObject",
                [S3_OP_HEAD_OBJECT] = "HeadObject",
                [S3_OP_DELETE_OBJECT] = "DeleteObject",
                [S3_OP_CREATE_BUCKET] = "CreateBucket",
                [S3_OP_CREATE_MULTIPART_UPLOAD] = "CreateMultipartUpload",
                [S3_OP_UPLOAD_PART] = "UploadPart",
                [S3_OP_COMPLETE_MULTIPART_UPLOAD] = "CompleteMultipartUpload",
                [S3_OP_ABORT_MULTIPART_UPLOAD] = "AbortMultipartUpload",
                [S3_OP_LIST_PARTS] = "ListParts",
                [S3_OP_LIST_OBJECTS] = "ListObjectsV2",
        };
        return (unsigned)op < S3_OP_COUNT ? names[op] : "unknown";
}

/* ---- classification ---- */

struct code_class {
        const char *code;
        int error;
        bool permanent;
};

/* The code decides before the status: S3 sends RequestTimeout as a 400,
 * SlowDown as a 503, and a 200 whose body is an <Error>. */
static const struct code_class code_classes[] = {
        { "SlowDown", -EAGAIN, false },
        { "Throttling", -EAGAIN, false },
        { "ThrottlingException", -EAGAIN, false },
        { "RequestLimitExceeded", -EAGAIN, false },
        { "TooManyRequests", -EAGAIN, false },
        { "ServiceUnavailable", -EAGAIN, false },
        { "OperationAborted", -EAGAIN, false },
        { "ConditionalRequestConflict", -EAGAIN, false },
        { "RequestTimeout", -ETIMEDOUT, false },
        { "InternalError", -EIO, false },
        { "BadDigest", -EBADMSG, true },
        { "InvalidDigest", -EBADMSG, true },
        { "XAmzContentSHA256Mismatch", -EBADMSG, true },
        { "NoSuchKey", -ENOENT, true },
        { "NoSuchBucket", -ENOENT, true },
        { "NoSuchUpload", -ENOENT, true },
        { "PreconditionFailed", -EEXIST, true },
        { "BucketAlreadyOwnedByYou", -EEXIST, true },
        { "BucketAlreadyExists", -EEXIST, true },
        { "AccessDenied", -EACCES, true },
        { "SignatureDoesNotMatch", -EACCES, true },
        { "InvalidAccessKeyId", -EACCES, true },
        { "RequestTimeTooSkewed", -EACCES, true },
        { "ExpiredToken", -EACCES, true },
        { "InvalidToken", -EACCES, true },
        { "InvalidRange", -ERANGE, true },
        { "EntityTooLarge", -EFBIG, true },
        { "NotImplemented", -EOPNOTSUPP, true },
};

int s3_classify(long status, const char *code, bool *permanent) {
        bool perm_dummy;

        if (!permanent)
                permanent = &perm_dummy;
        if (code && *code)
                for (size_t i = 0; i < ARRAY_SIZE(code_classes); i++)
                        if (strcmp(code, code_classes[i].code) == 0) {
                                *permanent = code_classes[i].permanent;
                                return code_classes[i].error;
                        }

        *permanent = true;
        if (status == 0) {
                *permanent = false;
                return -EIO;
        }
        if (status >= 200 && status < 300) {
                /* a 2xx carrying an <Error> we do not know: InternalError-like */
                *permanent = false;
                return -EIO;
        }
        switch (status) {
        case 401:
        case 403:
                return -EACCES;
        case 404:
                return -ENOENT;
        case 405:
        case 501:
                return -EOPNOTSUPP;
        case 409:
                return -EBUSY;
        case 412:
                return -EEXIST;
        case 416:
                return -ERANGE;
        case 408:
                *permanent = false;
                return -ETIMEDOUT;
        case 429:
        case 503:
                *permanent = false;
                return -EAGAIN;
        }
        if (status >= 500) {
                *permanent = false;
                return -EIO;
        }
        /* other 4xx, and 3xx: we never follow redirects — a redirect means
         * the wrong endpoint or region, which a retry does not fix */
        return status >= 300 && status < 400 ? -EPROTO : -EINVAL;
}

static int curl_to_errno(CURLcode rc, bool *permanent) {
        *permanent = false;
        switch (rc) {
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY:
                return -EHOSTUNREACH;
        case CURLE_COULDNT_CONNECT:
                return -ECONNREFUSED;
        case CURLE_OPERATION_TIMEDOUT:
                return -ETIMEDOUT;
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_SSL_CONNECT_ERROR:
                return -ECONNRESET;
        case CURLE_PARTIAL_FILE:
        case CURLE_SEND_FAIL_REWIND:
        case CURLE_WEIRD_SERVER_REPLY:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
                return -EIO;
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_ISSUER_ERROR:
        case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
        case CURLE_SSL_INVALIDCERTSTATUS:
                *permanent = true;
                return -EPERM;
        case CURLE_OUT_OF_MEMORY:
                *permanent = true;
                return -ENOMEM;
        case CURLE_UNSUPPORTED_PROTOCOL:
        case CURLE_URL_MALFORMAT:
        case CURLE_BAD_FUNCTION_ARGUMENT:
        case CURLE_ABORTED_BY_CALLBACK:
        case CURLE_READ_ERROR:
        case CURLE_WRITE_ERROR:
                *permanent = true;
                return -EINVAL;
        default:
                return -EIO;
        }
}

/* ---- the client ---- */

enum transfer_state {
        T_HASH_WAIT,
        T_HASHING,
        T_QUEUED,
        T_ACTIVE,
        T_BACKOFF,
};

struct s3_socket {
        struct list link;
        struct loop_watch watch;
        struct s3_client *client;
        curl_socket_t fd;
};

/* Content-MD5 of an fd range, computed on a worker thread.  It owns a dup
 * of the fd, so a request cancelled meanwhile leaves it reading a file
 * that is still the right one; the work item then frees itself. */
struct hash_work {
        struct work work;
        struct s3_transfer *transfer; /* NULL once orphaned */
        int fd;
        uint64_t offset;
        uint64_t length;
        int error;
        unsigned char md5[MD5_LEN];
};

struct s3_transfer {
        struct list link;
        struct s3_client *client;
        struct s3_request *req;
        enum s3_op op;
        enum transfer_state state;
        const char *method;

        char *bucket;
        char *key;
        char *upload_id;
        char *prefix;
        char *token;
        char *delimiter;
        char part_number[16];
        char max_items[16];
        char marker[16];
        struct sigv4_param params[5];
        size_t nparams;
        char *url;     /* with the query string: never logged */
        char *log_url; /* scheme://host/path */
        struct sigv4_address addr;
        unsigned flags;
        const char *content_type;

        /* request body */
        bool has_body;
        int body_fd;
        uint64_t body_offset;
        uint64_t body_length;
        const unsigned char *body_mem; /* caller's, or owned_body */
        char *owned_body;
        uint64_t body_pos;
        char payload_hash[SIGV4_HEX_LEN + 1];
        bool has_md5;
        char content_md5[MD5_BASE64_LEN + 1];
        struct hash_work *work;

        /* GET into the caller's buffer */
        unsigned char *get_buf;
        size_t get_len;
        bool ranged;
        uint64_t range_offset;
        size_t received;

        struct s3_part_list *parts_out;
        struct s3_object_list *objects_out;

        /* answer, per attempt */
        char *resp;
        size_t resp_len;
        size_t resp_cap;
        uint64_t content_length;
        bool have_content_length;
        bool etag_too_long;
        int local_error; /* set by a callback that stopped the transfer */
        const char *why; /* what went wrong, when not the store's verdict */

        CURL *easy;
        struct curl_slist *headers;
        char errbuf[CURL_ERROR_SIZE];
        struct loop_timer retry_timer;
};

struct s3_client {
        struct loop *loop;
        struct worker_pool *workers;
        CURLM *multi;
        CURLSH *share;
        struct loop_timer timer; /* libcurl's timeout */
        struct loop_timer kick;  /* start queued work on the next turn */
        struct list sockets;

        struct sigv4_endpoint ep;
        enum s3_addressing addressing;
        bool endpoint_is_localhost;
        char *bucket;
        char *region;
        char *access_key_id;
        char *secret_access_key;
        char *session_token;
        char *ca_file;

        unsigned max_concurrent;
        uint64_t max_send_bytes_per_sec;
        unsigned connect_timeout_ms;
        unsigned low_speed_bytes_per_sec;
        unsigned low_speed_time_s;
        unsigned retry_max_attempts;
        unsigned retry_base_ms;
        unsigned retry_cap_ms;

        struct list hash_wait;
        struct list hashing;
        struct list queue;
        struct list active;
        struct list backoff;
        unsigned nhashing;
        unsigned nactive;
        struct s3_stats stats;
        uint64_t rng;
        bool closing;
        bool paused;      /* s3_client_pause(): nothing moves, nothing starts */
};

static pthread_mutex_t curl_global_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned curl_global_users;

static int curl_global_ref(void) {
        int r = 0;

        pthread_mutex_lock(&curl_global_lock);
        if (curl_global_users == 0 && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
                r = -EIO;
        else
                curl_global_users++;
        pthread_mutex_unlock(&curl_global_lock);
        return r;
}

static void curl_global_unref(void) {
        pthread_mutex_lock(&curl_global_lock);
        if (curl_global_users > 0 && --curl_global_users == 0)
                curl_global_cleanup();
        pthread_mutex_unlock(&curl_global_lock);
}

static uint64_t client_random(struct s3_client *c) {
        /* xorshift64*: the jitter only has to decorrelate clients */
        uint64_t x = c->rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        c->rng = x;
        return x * 0x2545F4914F6CDD1Dull;
}

static void pump(struct s3_client *c);
static void hash_pump(struct s3_client *c);
static void process_messages(struct s3_client *c);

/* ---- libcurl ↔ loop ---- */

static void on_socket(struct loop_watch *w, uint32_t events) {
        struct s3_socket *s = container_of(w, struct s3_socket, watch);
        struct s3_client *c = s->client;
        int flags = 0, running;

        if (events & EPOLLIN)
                flags |= CURL_CSELECT_IN;
        if (events & EPOLLOUT)
                flags |= CURL_CSELECT_OUT;
        if (events & (EPOLLERR | EPOLLHUP))
                flags |= CURL_CSELECT_ERR;
        /* s may be freed inside (CURL_POLL_REMOVE): not touched after */
        curl_multi_socket_action(c->multi, s->fd, flags, &running);
        process_messages(c);
}

static void socket_free(struct s3_client *c, struct s3_socket *s) {
        loop_watch_del(c->loop, &s->watch);
        list_unlink(&s->link);
        free(s);
}

static int socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
        struct s3_client *c = userp;
        struct s3_socket *s = socketp;
        uint32_t events = 0;
        int r;

        (void)easy;
        if (what == CURL_POLL_REMOVE) {
                if (s) {
                        curl_multi_assign(c->multi, fd, NULL);
                        socket_free(c, s);
                }
                return 0;
        }
        if (what & CURL_POLL_IN)
                events |= EPOLLIN;
        if (what & CURL_POLL_OUT)
                events |= EPOLLOUT;
        if (s)
                r = loop_watch_mod(c->loop, &s->watch, events);
        else {
                s = calloc(1, sizeof(*s));
                if (!s)
                        return -1;
                s->client = c;
                s->fd = fd;
                list_init(&s->link);
                r = loop_watch_add(c->loop, &s->watch, fd, events, on_socket);
                if (r < 0) {
                        free(s);
                        s = NULL;
                } else {
                        list_add_tail(&c->sockets, &s->link);
                        curl_multi_assign(c->multi, fd, s);
                }
        }
        if (r < 0) {
                log_error("s3: cannot watch socket %d: %s", (int)fd, strerror(-r));
                return -1;
        }
        return 0;
}

static void on_timer(struct loop_timer *t) {
        struct s3_client *c = container_of(t, struct s3_client, timer);
        int running;

        curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        process_messages(c);
}

static int timer_cb(CURLM *multi, long timeout_ms, void *userp) {
        struct s3_client *c = userp;

        (void)multi;
        if (timeout_ms < 0)
                loop_timer_cancel(&c->timer);
        else
                loop_timer_start(c->loop, &c->timer, (uint64_t)timeout_ms, on_timer);
        return 0;
}

/* ---- transfer lifetime ---- */

static void transfer_move(struct s3_transfer *t, struct list *to, enum transfer_state state) {
        list_unlink(&t->link);
        list_add_tail(to, &t->link);
        t->state = state;
}

static void wipe_slist(struct curl_slist *l) {
        for (struct curl_slist *i = l; i; i = i->next)
                explicit_bzero(i->data, strlen(i->data));
        curl_slist_free_all(l);
}

static struct s3_transfer *transfer_free(struct s3_transfer *t) {
        if (!t)
                return NULL;
        list_unlink(&t->link);
        loop_timer_cancel(&t->retry_timer);
        if (t->work)
                t->work->transfer = NULL; /* the work frees itself */
        if (t->easy)
                curl_easy_cleanup(t->easy);
        wipe_slist(t->headers);
        free(t->bucket);
        free(t->key);
        free(t->upload_id);
        free(t->prefix);
        free(t->token);
        free(t->delimiter);
        free(t->url);
        free(t->log_url);
        free(t->owned_body);
        free(t->resp);
        free(t);
        return NULL;
}

DEFINE_CLEANUP(struct s3_transfer *, transfer_free)

static bool expected_outcome(const struct s3_transfer *t, int error) {
        if (error == -EEXIST && (t->flags & S3_PUT_IF_NONE_MATCH))
                return true;
        return error == -ENOENT && (t->op == S3_OP_HEAD_OBJECT || t->op == S3_OP_LIST_PARTS);
}

static void describe_failure(const struct s3_transfer *t, char *buf, size_t size) {
        const struct s3_result *res = &t->req->result;
        char what[192];

        if (t->why)
                snprintf(what, sizeof(what), "%s: %s", t->why, strerror(-res->error));
        else
                snprintf(what, sizeof(what), "%s", strerror(-res->error));

        if (res->code[0])
                snprintf(buf, size, "%s (HTTP %ld %s%s%s)", what, res->status, res->code,
                         res->message[0] ? ": " : "", res->message);
        else if (t->errbuf[0] && !t->why)
                snprintf(buf, size, "%s (%s)", what, t->errbuf);
        else if (res->status)
                snprintf(buf, size, "%s (HTTP %ld)", what, res->status);
        else
                snprintf(buf, size, "%s", what);
}

/* Hand the request back: free the transfer first, so that done() may
 * reuse the request at once. */
static void transfer_finish(struct s3_transfer *t, int error, bool permanent) {
        struct s3_client *c = t->client;
        struct s3_request *req = t->req;

        req->result.error = error;
        req->result.permanent = error ? permanent : false;
        if (error) {
                c->stats.failed[t->op]++;
                if (error != -ECANCELED) {
                        char why[1024];
                        describe_failure(t, why, sizeof(why));
                        log_msg(expected_outcome(t, error) ? LOG_DEBUG : LOG_WARNING,
                                "s3: %s %s %s failed after %u attempt(s): %s (%s%s%s)",
                                s3_op_name(t->op), t->method, t->log_url, req->result.attempts,
                                why, permanent ? "permanent" : "retryable",
                                req->result.request_id[0] ? ", request id " : "",
                                req->result.request_id);
                }
        } else {
                c->stats.completed[t->op]++;
        }
        transfer_free(t);
        req->transfer = NULL;
        req->done(req, error);
}

/* ---- curl callbacks of one transfer ---- */

static size_t read_cb(char *dst, size_t size, size_t nitems, void *userp) {
        struct s3_transfer *t = userp;
        size_t want = size * nitems;
        uint64_t left = t->body_length - t->body_pos;
        ssize_t n;

        if (want > left)
                want = (size_t)left;
        if (want == 0)
                return 0;
        if (t->body_fd >= 0) {
                do
                        n = pread(t->body_fd, dst, want, (off_t)(t->body_offset + t->body_pos));
                while (n < 0 && errno == EINTR);
                if (n < 0) {
                        t->local_error = -errno;
                        t->why = "cannot read the body's file";
                        return CURL_READFUNC_ABORT;
                }
                if (n == 0) {
                        t->local_error = -EIO;
                        t->why = "the body's file ended inside its range";
                        return CURL_READFUNC_ABORT;
                }
        } else {
                memcpy(dst, t->body_mem + t->body_pos, want);
                n = (ssize_t)want;
        }
        t->body_pos += (uint64_t)n;
        t->client->stats.bytes_sent += (uint64_t)n;
        return (size_t)n;
}

/* libcurl rewinds when it must send the body again on its own (a reused
 * connection that turned out dead). */
static int seek_cb(void *userp, curl_off_t offset, int origin) {
        struct s3_transfer *t = userp;

        if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > t->body_length)
                return CURL_SEEKFUNC_CANTSEEK;
        t->body_pos = (uint64_t)offset;
        return CURL_SEEKFUNC_OK;
}

static bool header_is(const char *line, size_t len, const char *name, const char **value,
                      size_t *vlen) {
        size_t n = strlen(name);

        if (len <= n || line[n] != ':' || strncasecmp(line, name, n) != 0)
                return false;
        const char *v = line + n + 1, *end = line + len;
        while (v < end && (*v == ' ' || *v == '\t'))
                v++;
        while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
                end--;
        *value = v;
        *vlen = (size_t)(end - v);
        return true;
}

static size_t header_cb(char *line, size_t size, size_t nitems, void *userp) {
        struct s3_transfer *t = userp;
        struct s3_result *res = &t->req->result;
        size_t len = size * nitems;
        const char *v;
        size_t vlen;

        if (len >= 5 && memcmp(line, "HTTP/", 5) == 0) {
                /* a new response (after "100 Continue"): forget the last */
                res->etag[0] = 0;
                res->request_id[0] = 0;
                t->have_content_length = false;
                t->etag_too_long = false;
        } else if (header_is(line, len, "ETag", &v, &vlen)) {
                if (copy_bounded(res->etag, sizeof(res->etag), v, vlen) < 0) {
                        res->etag[0] = 0;
                        t->etag_too_long = true;
                }
        } else if (header_is(line, len, "x-amz-request-id", &v, &vlen)) {
                copy_printable(res->request_id, sizeof(res->request_id), v, vlen);
        } else if (header_is(line, len, "Content-Length", &v, &vlen)) {
                t->have_content_length = parse_u64(v, vlen, &t->content_length) == 0;
        }
        return len;
}

static size_t write_cb(char *data, size_t size, size_t nitems, void *userp) {
        struct s3_transfer *t = userp;
        size_t len = size * nitems;
        long status = 0;

        curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
        bool success = status >= 200 && status < 300;

        if (t->op == S3_OP_GET_OBJECT && success) {
                if (t->ranged && status != 206) {
                        t->local_error = -EPROTO;
                        t->why = "the store ignored the Range header";
                        return 0;
                }
                if (len > t->get_len - t->received) {
                        t->local_error = -EFBIG;
                        t->why = "the object is larger than the buffer";
                        return 0;
                }
                memcpy(t->get_buf + t->received, data, len);
                t->received += len;
                t->client->stats.bytes_received += len;
                return len;
        }

        size_t max = success && (t->op == S3_OP_LIST_OBJECTS || t->op == S3_OP_LIST_PARTS)
                             ? RESPONSE_LIST_MAX
                             : RESPONSE_SMALL_MAX;
        if (len > max - t->resp_len) {
                if (!success)
                        return len; /* an error body: what we have names the error */
                t->local_error = -EPROTO;
                t->why = "the answer is over its size bound";
                return 0;
        }
        if (t->resp_len + len + 1 > t->resp_cap) {
                size_t cap = t->resp_cap ? t->resp_cap : 4096;
                while (cap < t->resp_len + len + 1)
                        cap *= 2;
                char *p = realloc(t->resp, cap);
                if (!p) {
                        t->local_error = -ENOMEM;
                        return 0;
                }
                t->resp = p;
                t->resp_cap = cap;
        }
        memcpy(t->resp + t->resp_len, data, len);
        t->resp_len += len;
        t->resp[t->resp_len] = 0;
        return len;
}

/* ---- attempts ---- */

static void bandwidth_update(struct s3_client *c) {
        struct list *pos, *tmp;
        unsigned uploads = 0;

        if (!c->max_send_bytes_per_sec)
                return;
        list_for_each_safe(pos, tmp, &c->active) {
                struct s3_transfer *t = list_entry(pos, struct s3_transfer, link);
                uploads += t->has_body && t->body_length > 0;
        }
        if (!uploads)
                return;
        curl_off_t each = (curl_off_t)(c->max_send_bytes_per_sec / uploads);
        if (each < 1)
                each = 1;
        list_for_each_safe(pos, tmp, &c->active) {
                struct s3_transfer *t = list_entry(pos, struct s3_transfer, link);
                if (t->has_body && t->body_length > 0)
                        curl_easy_setopt(t->easy, CURLOPT_MAX_SEND_SPEED_LARGE, each);
        }
}

void s3_result_describe(const struct s3_result *res, int error, char *out, size_t size) {
        if (res->status && res->code[0])
                snprintf(out, size, "%ld %s%s%s", res->status, res->code,
                         res->message[0] ? ": " : "", res->message);
        else if (res->status)
                snprintf(out, size, "HTTP %ld (%s)", res->status, strerror(-error));
        else
                snprintf(out, size, "%s", strerror(-error));
}

void s3_client_pause(struct s3_client *c, bool paused) {
        struct list *pos, *tmp;

        if (c->paused == paused)
                return;
        c->paused = paused;
        list_for_each_safe(pos, tmp, &c->active) {
                struct s3_transfer *t = list_entry(pos, struct s3_transfer, link);
                curl_easy_pause(t->easy, paused ? CURLPAUSE_ALL : CURLPAUSE_CONT);
        }
        if (!paused) {
                pump(c);
                hash_pump(c);
        }
}

void s3_client_set_bandwidth(struct s3_client *c, uint64_t bytes_per_sec) {
        struct list *pos, *tmp;

        c->max_send_bytes_per_sec = bytes_per_sec;
        if (bytes_per_sec) {
                bandwidth_update(c);
                return;
        }
        list_for_each_safe(pos, tmp, &c->active) {
                struct s3_transfer *t = list_entry(pos, struct s3_transfer, link);
                if (t->has_body && t->body_length > 0)
                        curl_easy_setopt(t->easy, CURLOPT_MAX_SEND_SPEED_LARGE, (curl_off_t)0);
        }
}

static bool use_path_style(const struct s3_client *c, const char *bucket) {
        switch (c->addressing) {
        case S3_ADDRESSING_PATH:
                return true;
        case S3_ADDRESSING_VIRTUAL:
                return false;
        default:
                return c->ep.host_is_ip || c->endpoint_is_localhost ||
                       (c->ep.tls && strchr(bucket, '.'));
        }
}

static int slist_add(struct curl_slist **l, const char *name, const char *value) {
        _cleanup_free_ char *line = NULL;

        if (asprintf(&line, "%s: %s", name, value) < 0)
                return -ENOMEM;
        struct curl_slist *n = curl_slist_append(*l, line);
        explicit_bzero(line, strlen(line));
        if (!n)
                return -ENOMEM;
        *l = n;
        return 0;
}

/* Sign this attempt and build the header list libcurl sends. */
static int attempt_headers(struct s3_transfer *t) {
        struct s3_client *c = t->client;
        struct sigv4_header extra[6];
        size_t nextra = 0;
        char range[64], amz_date[SIGV4_AMZ_DATE_LEN + 1];
        struct sigv4_auth *auth = NULL;
        struct curl_slist *l = NULL;
        int r;

        if (t->has_md5)
                extra[nextra++] = (struct sigv4_header){ "Content-MD5", t->content_md5 };
        if (t->content_type)
                extra[nextra++] = (struct sigv4_header){ "Content-Type", t->content_type };
        if (t->flags & S3_PUT_IF_NONE_MATCH)
                extra[nextra++] = (struct sigv4_header){ "If-None-Match", "*" };
        if (t->ranged) {
                snprintf(range, sizeof(range), "bytes=%" PRIu64 "-%" PRIu64, t->range_offset,
                         t->range_offset + t->get_len - 1);
                extra[nextra++] = (struct sigv4_header){ "Range", range };
        }

        r = sigv4_amz_date(time(NULL), amz_date);
        if (r < 0)
                return r;
        struct sigv4_request sreq = {
                .method = t->method,
                .host = t->addr.host,
                .path = t->addr.path,
                .params = t->params,
                .nparams = t->nparams,
                .headers = extra,
                .nheaders = nextra,
                .payload_hash = t->payload_hash,
                .amz_date = amz_date,
        };
        struct sigv4_key key = {
                .access_key_id = c->access_key_id,
                .secret_access_key = c->secret_access_key,
                .session_token = c->session_token,
                .region = c->region,
                .service = "s3",
        };
        r = sigv4_sign(&auth, &sreq, &key);
        if (r < 0)
                return r;

        for (size_t i = 0; i < auth->nheaders && r >= 0; i++)
                r = slist_add(&l, auth->headers[i].name, auth->headers[i].value);
        if (r >= 0)
                r = slist_add(&l, "Authorization", auth->authorization);
        for (size_t i = 0; i < nextra && r >= 0; i++)
                r = slist_add(&l, extra[i].name, extra[i].value);
        /* an empty value removes a header libcurl would add */
        if (r >= 0 && !(t->has_body && t->body_length >= EXPECT_CONTINUE_MIN))
                r = slist_add(&l, "Expect", "");
        if (r >= 0)
                r = slist_add(&l, "Accept", "");
        sigv4_auth_free(auth);
        if (r < 0) {
                wipe_slist(l);
                return r;
        }
        wipe_slist(t->headers);
        t->headers = l;
        return 0;
}

static int attempt_setup(struct s3_transfer *t) {
        struct s3_client *c = t->client;
        int r;

        /* made at the first attempt: a long queue holds no easy handles */
        if (!t->easy && !(t->easy = curl_easy_init()))
                return -ENOMEM;
        CURL *e = t->easy;
        r = attempt_headers(t);
        if (r < 0)
                return r;
        curl_easy_reset(e);
        t->errbuf[0] = 0;
#define SET(opt, val)                                         \
        do {                                                  \
                if (curl_easy_setopt(e, opt, val) != CURLE_OK) \
                        return -EINVAL;                       \
        } while (0)
        SET(CURLOPT_URL, t->url);
        SET(CURLOPT_PRIVATE, (void *)t);
        SET(CURLOPT_SHARE, c->share);
        SET(CURLOPT_NOSIGNAL, 1L);
        SET(CURLOPT_ERRORBUFFER, t->errbuf);
        SET(CURLOPT_HTTPHEADER, t->headers);
        SET(CURLOPT_PROTOCOLS_STR, "http,https");
        SET(CURLOPT_FOLLOWLOCATION, 0L);
        SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
        SET(CURLOPT_CONNECTTIMEOUT_MS, (long)c->connect_timeout_ms);
        SET(CURLOPT_LOW_SPEED_LIMIT, (long)c->low_speed_bytes_per_sec);
        SET(CURLOPT_LOW_SPEED_TIME, (long)c->low_speed_time_s);
        SET(CURLOPT_TCP_KEEPALIVE, 1L);
        SET(CURLOPT_SSL_VERIFYPEER, 1L);
        SET(CURLOPT_SSL_VERIFYHOST, 2L);
        if (c->ca_file)
                SET(CURLOPT_CAINFO, c->ca_file);
        SET(CURLOPT_HEADERFUNCTION, header_cb);
        SET(CURLOPT_HEADERDATA, (void *)t);
        SET(CURLOPT_WRITEFUNCTION, write_cb);
        SET(CURLOPT_WRITEDATA, (void *)t);

        if (strcmp(t->method, "HEAD") == 0) {
                SET(CURLOPT_NOBODY, 1L);
        } else if (strcmp(t->method, "DELETE") == 0) {
                SET(CURLOPT_CUSTOMREQUEST, "DELETE");
        } else if (strcmp(t->method, "PUT") == 0) {
                SET(CURLOPT_UPLOAD, 1L);
                SET(CURLOPT_INFILESIZE_LARGE, (curl_off_t)t->body_length);
        } else if (strcmp(t->method, "POST") == 0) {
                SET(CURLOPT_POST, 1L);
                SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)t->body_length);
        } else {
                SET(CURLOPT_HTTPGET, 1L);
                SET(CURLOPT_BUFFERSIZE, DOWNLOAD_BUFFER_SIZE);
        }
        if (t->has_body) {
                SET(CURLOPT_READFUNCTION, read_cb);
                SET(CURLOPT_READDATA, (void *)t);
                SET(CURLOPT_SEEKFUNCTION, seek_cb);
                SET(CURLOPT_SEEKDATA, (void *)t);
                SET(CURLOPT_UPLOAD_BUFFERSIZE, UPLOAD_BUFFER_SIZE);
        }
#undef SET
        return 0;
}

static int attempt_start(struct s3_transfer *t) {
        struct s3_client *c = t->client;
        struct s3_result *res = &t->req->result;
        int r;

        /* a retry starts from a clean slate: body from its first byte,
         * buffer from its start, nothing left of the last answer */
        t->body_pos = 0;
        t->received = 0;
        t->resp_len = 0;
        t->local_error = 0;
        t->why = NULL;
        t->have_content_length = false;
        t->etag_too_long = false;
        res->status = 0;
        res->bytes = 0;
        res->etag[0] = 0;
        res->code[0] = 0;
        res->message[0] = 0;
        res->request_id[0] = 0;
        if (t->parts_out) {
                t->parts_out->count = 0;
                t->parts_out->truncated = false;
                t->parts_out->next_marker = 0;
        }
        if (t->objects_out) {
                t->objects_out->count = 0;
                t->objects_out->prefix_count = 0;
                t->objects_out->truncated = false;
                t->objects_out->next_token[0] = 0;
        }

        r = attempt_setup(t);
        if (r < 0)
                return r;
        if (curl_multi_add_handle(c->multi, t->easy) != CURLM_OK)
                return -ENOMEM;
        res->attempts++;
        c->stats.requests[t->op]++;
        transfer_move(t, &c->active, T_ACTIVE);
        c->nactive++;
        if (c->nactive > c->stats.max_active)
                c->stats.max_active = c->nactive;
        bandwidth_update(c);
        return 0;
}

static void pump(struct s3_client *c) {
        while (!c->closing && !c->paused && c->nactive < c->max_concurrent &&
               !list_empty(&c->queue)) {
                struct s3_transfer *t = list_first_entry(&c->queue, struct s3_transfer, link);
                int r = attempt_start(t);
                if (r < 0) {
                        t->why = "cannot set the request up";
                        transfer_finish(t, r, true);
                }
        }
}

static void on_retry_timer(struct loop_timer *timer) {
        struct s3_transfer *t = container_of(timer, struct s3_transfer, retry_timer);
        struct s3_client *c = t->client;

        /* a retry goes ahead of requests that have not started yet */
        list_unlink(&t->link);
        list_add_tail(c->queue.next, &t->link);
        t->state = T_QUEUED;
        pump(c);
}

/* What the finished attempt amounts to: 0 or -errno, with *permanent. */
static int attempt_result(struct s3_transfer *t, CURLcode rc, bool *permanent) {
        struct s3_result *res = &t->req->result;
        long status = 0;
        int r;

        curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
        res->status = status;
        *permanent = true;

        if (t->local_error)
                return t->local_error;
        bool success = status >= 200 && status < 300;

        if (!success && status >= 300 && t->resp_len > 0 &&
            s3_parse_response(t->op, t->resp, t->resp_len, res, NULL) == -EREMOTEIO)
                /* an answer with an S3 error (even if the connection then
                 * broke): the store's verdict decides */
                return s3_classify(status, res->code, permanent);
        if (rc != CURLE_OK)
                return curl_to_errno(rc, permanent);
        if (!success) {
                res->code[0] = 0;
                return s3_classify(status, NULL, permanent);
        }
        if (t->etag_too_long) {
                t->why = "the ETag header is too long";
                return -EPROTO;
        }

        switch (t->op) {
        case S3_OP_GET_OBJECT:
                if (t->ranged && t->received < t->get_len) {
                        t->why = "the object ends before the range does";
                        return -ERANGE;
                }
                if (t->have_content_length && t->content_length != t->received) {
                        t->why = "the body is shorter than its Content-Length";
                        *permanent = false;
                        return -EIO;
                }
                res->bytes = t->received;
                return 0;
        case S3_OP_HEAD_OBJECT:
                if (!t->have_content_length) {
                        t->why = "no Content-Length in the answer";
                        return -EPROTO;
                }
                res->bytes = t->content_length;
                return 0;
        case S3_OP_PUT_OBJECT:
        case S3_OP_UPLOAD_PART:
                if (!res->etag[0]) {
                        t->why = "no ETag in the answer";
                        return -EPROTO;
                }
                res->bytes = t->body_length;
                return 0;
        case S3_OP_CREATE_MULTIPART_UPLOAD:
        case S3_OP_COMPLETE_MULTIPART_UPLOAD:
        case S3_OP_LIST_PARTS:
        case S3_OP_LIST_OBJECTS:
                r = s3_parse_response(t->op, t->resp ? t->resp : "", t->resp_len, res,
                                      t->op == S3_OP_LIST_PARTS ? (void *)t->parts_out
                                                                : (void *)t->objects_out);
                if (r == -EREMOTEIO)
                        return s3_classify(status, res->code, permanent);
                if (r < 0)
                        t->why = "malformed XML in the answer";
                return r;
        default:
                return 0;
        }
}

static void attempt_end(struct s3_transfer *t, CURLcode rc) {
        struct s3_client *c = t->client;
        struct s3_result *res = &t->req->result;
        bool permanent;

        curl_multi_remove_handle(c->multi, t->easy);
        c->nactive--;
        int error = attempt_result(t, rc, &permanent);

        if (error && !permanent && res->attempts < c->retry_max_attempts && !c->closing) {
                unsigned shift = res->attempts - 1;
                uint64_t window = shift >= 32 ? c->retry_cap_ms
                                              : (uint64_t)c->retry_base_ms << shift;
                if (window > c->retry_cap_ms)
                        window = c->retry_cap_ms;
                uint64_t delay = client_random(c) % (window + 1);
                char why[1024];

                res->error = error;
                describe_failure(t, why, sizeof(why));
                log_info("s3: %s %s %s: %s, attempt %u of %u, retrying in %" PRIu64 " ms",
                         s3_op_name(t->op), t->method, t->log_url, why, res->attempts,
                         c->retry_max_attempts, delay);
                c->stats.retries[t->op]++;
                transfer_move(t, &c->backoff, T_BACKOFF);
                loop_timer_start(c->loop, &t->retry_timer, delay, on_retry_timer);
        } else {
                transfer_finish(t, error, permanent);
        }
        bandwidth_update(c);
        pump(c);
}

static void process_messages(struct s3_client *c) {
        CURLMsg *m;
        int left;

        while ((m = curl_multi_info_read(c->multi, &left))) {
                if (m->msg != CURLMSG_DONE)
                        continue;
                CURL *easy = m->easy_handle;
                CURLcode rc = m->data.result;
                char *priv = NULL;
                curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
                if (priv)
                        attempt_end((struct s3_transfer *)(void *)priv, rc);
        }
}

/* ---- hashing on the worker pool ---- */

static int md5_base64(const unsigned char md5[MD5_LEN], char out[MD5_BASE64_LEN + 1]) {
        return EVP_EncodeBlock((unsigned char *)out, md5, MD5_LEN) == MD5_BASE64_LEN ? 0 : -EIO;
}

static void hash_run(struct work *w) {
        struct hash_work *h = container_of(w, struct hash_work, work);
        EVP_MD_CTX *ctx = EVP_MD_CTX_new();
        unsigned char *buf = malloc(HASH_CHUNK);
        uint64_t done = 0;

        h->error = 0;
        if (!ctx || !buf) {
                h->error = -ENOMEM;
                goto out;
        }
        if (EVP_DigestInit_ex(ctx, EVP_md5(), NULL) != 1) {
                h->error = -EIO;
                goto out;
        }
        while (done < h->length) {
                size_t want = h->length - done < HASH_CHUNK ? (size_t)(h->length - done) : HASH_CHUNK;
                ssize_t n = pread(h->fd, buf, want, (off_t)(h->offset + done));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        h->error = -errno;
                        goto out;
                }
                if (n == 0) {
                        h->error = -EIO; /* the range runs past the end of the file */
                        goto out;
                }
                if (EVP_DigestUpdate(ctx, buf, (size_t)n) != 1) {
                        h->error = -EIO;
                        goto out;
                }
                done += (uint64_t)n;
        }
        if (EVP_DigestFinal_ex(ctx, h->md5, NULL) != 1)
                h->error = -EIO;
out:
        free(buf);
        EVP_MD_CTX_free(ctx);
}

static void queue_add(struct s3_transfer *t) {
        transfer_move(t, &t->client->queue, T_QUEUED);
}

static void hash_done(struct work *w) {
        struct hash_work *h = container_of(w, struct hash_work, work);
        struct s3_transfer *t = h->transfer;

        safe_close(h->fd);
        if (!t) {
                free(h);
                return;
        }
        struct s3_client *c = t->client;
        int error = h->error;
        t->work = NULL;
        c->nhashing--;
        if (!error) {
                error = md5_base64(h->md5, t->content_md5);
                t->has_md5 = error == 0;
                c->stats.bytes_hashed += h->length;
        }
        free(h);
        if (error < 0) {
                t->why = error == -EIO ? "the body's range runs past the end of its file"
                                       : "cannot read the body's file to hash it";
                transfer_finish(t, error, true);
        } else {
                queue_add(t);
                pump(c);
        }
        hash_pump(c);
}

/*
 * Content-MD5 jobs on the worker pool at once.  One MD5 pass runs at
 * ~0.6 GB/s per core, several times an upload's rate, so two keep the wire
 * fed; more only take cores from the trainer and from the save path's own
 * checksum jobs queued behind them on the same workers (a pause cannot
 * stop a hash already running).
 */
#define S3_HASHING_MAX 2

static void hash_pump(struct s3_client *c) {
        while (!c->closing && !c->paused && c->nhashing < S3_HASHING_MAX &&
               !list_empty(&c->hash_wait)) {
                struct s3_transfer *t = list_first_entry(&c->hash_wait, struct s3_transfer, link);
                struct hash_work *h = calloc(1, sizeof(*h));
                int fd = h ? fcntl(t->body_fd, F_DUPFD_CLOEXEC, 3) : -1;
                if (fd < 0) {
                        int r = h ? -errno : -ENOMEM;
                        free(h);
                        t->why = "cannot duplicate the body's fd";
                        transfer_finish(t, r, true);
                        continue;
                }
                h->work.run = hash_run;
                h->work.done = hash_done;
                h->transfer = t;
                h->fd = fd;
                h->offset = t->body_offset;
                h->length = t->body_length;
                t->work = h;
                c->nhashing++;
                transfer_move(t, &c->hashing, T_HASHING);
                worker_pool_submit(c->workers, &h->work);
        }
}

/* ---- starting requests ---- */

static int transfer_new(struct s3_transfer **out, struct s3_client *c, struct s3_request *req,
                        enum s3_op op, const char *method, const char *key, bool need_key) {
        _cleanup_(transfer_freep) struct s3_transfer *t = NULL;
        const char *bucket;
        int r;

        if (!c || !req || !req->done || req->transfer)
                return -EINVAL;
        if (c->closing)
                return -ESHUTDOWN;
        if (need_key && (!key || !*key))
                return -EINVAL;
        bucket = req->bucket ? req->bucket : c->bucket;
        if (!bucket)
                return -EINVAL;

        t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        list_init(&t->link);
        t->client = c;
        t->req = req;
        t->op = op;
        t->method = method;
        t->body_fd = -1;
        t->bucket = strdup(bucket);
        t->key = key ? strdup(key) : NULL;
        if (!t->bucket || (key && !t->key))
                return -ENOMEM;
        r = sigv4_address_build(&t->addr, &c->ep,
                                use_path_style(c, bucket) ? SIGV4_PATH_STYLE : SIGV4_VIRTUAL_HOSTED,
                                t->bucket, t->key);
        if (r < 0)
                return r;
        memcpy(t->payload_hash, SIGV4_EMPTY_SHA256, sizeof(t->payload_hash));
        *out = TAKE_PTR(t);
        return 0;
}

static int param_add(struct s3_transfer *t, const char *k, const char *v) {
        if (t->nparams >= ARRAY_SIZE(t->params))
                return -EINVAL;
        t->params[t->nparams++] = (struct sigv4_param){ k, v };
        return 0;
}

static int body_set(struct s3_transfer *t, const struct s3_body *body) {
        if (!body || body->length > S3_OBJECT_PUT_MAX)
                return -EINVAL;
        t->has_body = true;
        t->body_length = body->length;
        t->content_type = "application/octet-stream";
        if (body->fd >= 0) {
                if (body->offset > (uint64_t)INT64_MAX - body->length)
                        return -EINVAL;
                t->body_fd = body->fd;
                t->body_offset = body->offset;
                /* the signature cannot cover a body we have not read yet;
                 * Content-MD5 does, and the store checks it */
                memcpy(t->payload_hash, SIGV4_UNSIGNED_PAYLOAD, sizeof(SIGV4_UNSIGNED_PAYLOAD));
        } else {
                if (body->length > S3_MEMORY_BODY_MAX || (!body->data && body->length))
                        return -EINVAL;
                t->body_mem = body->data;
                if (sigv4_sha256_hex(body->length ? body->data : "", body->length,
                                     t->payload_hash) < 0)
                        return -EIO;
                if (!body->md5) {
                        unsigned char md5[MD5_LEN];
                        if (EVP_Digest(body->length ? body->data : "", body->length, md5, NULL,
                                       EVP_md5(), NULL) != 1)
                                return -EIO;
                        if (md5_base64(md5, t->content_md5) < 0)
                                return -EIO;
                        t->has_md5 = true;
                }
        }
        if (body->md5) {
                if (md5_base64(body->md5, t->content_md5) < 0)
                        return -EIO;
                t->has_md5 = true;
        }
        return 0;
}

static void on_kick(struct loop_timer *timer) {
        struct s3_client *c = container_of(timer, struct s3_client, kick);

        hash_pump(c);
        pump(c);
}

/* Start what can start, on the next turn of the loop rather than now: a
 * start call must never run done() (a request failing to start) inside
 * itself. */
static void kick(struct s3_client *c) {
        if (!loop_timer_armed(&c->kick))
                loop_timer_start(c->loop, &c->kick, 0, on_kick);
}

static int transfer_submit(struct s3_transfer *t) {
        struct s3_client *c = t->client;
        _cleanup_free_ char *url = NULL;
        int r;

        r = sigv4_url(&url, &c->ep, &t->addr, t->params, t->nparams);
        if (r < 0)
                return r;
        t->log_url = strndup(url, strcspn(url, "?"));
        if (!t->log_url)
                return -ENOMEM;
        t->url = TAKE_PTR(url);

        memset(&t->req->result, 0, sizeof(t->req->result));
        t->req->transfer = t;
        if (t->body_fd >= 0 && !t->has_md5)
                transfer_move(t, &c->hash_wait, T_HASH_WAIT);
        else
                queue_add(t);
        kick(c);
        return 0;
}

/* transfer_submit() and the hand-over to the client, in one place: after
 * a successful submit the request belongs to the client. */
#define SUBMIT(t)                                 \
        do {                                      \
                int _r = transfer_submit(t);      \
                if (_r < 0)                       \
                        return _r;                \
                (t) = NULL;                       \
                return 0;                         \
        } while (0)

int s3_put_object(struct s3_client *c, struct s3_request *req, const char *key,
                  const struct s3_body *body, unsigned flags) {
        _cleanup_(transfer_freep) struct s3_transfer *t = NULL;
        int r;

        if (flags & ~S3_PUT_IF_NONE_MATCH)
                return -EINVAL;
        r = transfer_new(&t, c, req, S3_OP_PUT_OBJECT, "PUT", key, true);
        if (r < 0)
                return r;
        t->flags = flags;
        r = body_set(t, body);
        if (r < 0)
                return r;
        SUBMIT(t);
}

static int get_start(struct s3_client *c, struct s3_request *req, const char *key, bool ranged,
                     uint64_t offset, void *buf, size_t len) {
        _cleanup_(transfer_freep) struct s3_transfer *t = NULL;
        int r;

        if ((!buf && len) || (ranged && (len == 0 || offset > UINT64_MAX - len)))
                return -EINVAL;
        r = transfer_new(&t, c, req, S3_OP_GET_OBJECT, "GET", key, true);
        if (r < 0)
                return r;
        t->get_buf = buf;
        t->get_len = len;
        t->ranged = ranged;
        t->range_offset = offset;
        SUBMIT(t);
}

int s3_get_object(struct s3_client *c, struct s3_request *req, const char *key, void *buf,
                  size_t len) {
        return get_start(c, req, key, false, 0, buf, len);
}

int s3_get_object_range(struct s3_client *c, struct s3_request *req, const char *key,
                        uint64_t offset, void *buf, size_t len) {
        return get_start(c, req, key, true, offset, buf, len);
}

int s3_head_object(struct s3_client *c, struct s3_request *req, const char *key) {
        _cleanup_(transfer_freep) struct s3_transfer *t = NULL;
        int r = transfer_new(&t, c, req, S3_OP_HEAD_OBJECT, "HEAD", key, true);
        if (r < 0)
                return r;
        SUBMIT(t);
}

int s3_delete_object(struct s3_client *c, struct s3_request *req, const char *key) {
        _cleanup_(transfer_freep) struct s3_transfer *t = NULL;
        int r = transfer_new(&t, c, req, S3_OP_DELETE_OBJECT, "DELETE", key, true);
        if (r < 0)
                return r;
        SUBMIT(t);
}

int s3_create_bucket(struct s3_client *c, struct s3_request *req) {
        _cleanup_(transfer_freep) struct s3_transfer *t = NULL;
        int r = transfer_new(&t, c, req, S3_OP_CREATE_BUCKET, "PUT", NULL, false);
        if (r < 0)
                return r;
        /* an empty PUT: no CreateBucketConfiguration, the store's default
         * location (radosgw refuses any name but its zonegroup's) */
        t->has_body = true;
        SUBMIT(t);
}

int s3_create_multipart_upload(struct s3_client *c, struct s3_request *req, const char *key) {
        _cleanup_(transfer_freep) struct s3_transfer *t = NULL;
        int r = transfer_new(&t, c, req, S3_OP_CREATE_MULTIPART_UPLOAD, "POST", key, true);
        if (r < 0)
                return r;
        t->has_body = true; /* empty, but POST sends a Content-Length */
        t->content_type = "application/octet-stream"; /* the object's type */
        r = param_add(t, "uploads", NULL);
        if (r < 0)
                return r;
        SUBMIT(t);
}

static int upload_id_set(struct s3_transfer *t, const char *upload_id) {
        if (!upload_id || !*upload_id || strlen(upload_id) > S3_UPLOAD_ID_MAX)
                return -EINVAL;
        t->upload_id = strdup(upload_id);
        if (!t->upload_id)
                return -ENOMEM;
        return param_add(t, "uploadId", t->upload_id);
}

int s3_upload_part(struct s3_client *c, struct s3_request *req, const char *key,
                   const char *upload_id, unsigned part_number, const struct s3_body *body) {
        _cleanup_(transfer_freep) struct s3_transfer *t = NULL;
        int r;

        if (part_number < 1 || part_number > S3_PART_NUMBER_MAX)
                return -EINVAL;
        r = transfer_new(&t, c, req, S3_OP_UPLOAD_PART, "PUT", key, true);
        if (r < 0)
                return r;
        r = upload_id_set(t, upload_id);
        if (r < 0)
                return r;
        snprintf(t->part_number, sizeof(t->part_number), "%u", part_number);
        r = param_add(t, "partNumber", t->part_number);
        if (r < 0)
                return r;
        r = body_set(t, body);
        if (r < 0)
                return r;
        SUBMIT(t);
}

/* Append s with the XML escapes S3's parser understands. */
static void xml_escape_to(FILE *f, const char *s) {
        for (; *s; s++) {
                switch (*s) {
                case '&':
                        fputs("&amp;", f);
                        break;
                case '<':
                        fputs("&lt;", f);
                        break;
                case '>':
                        fputs("&gt;", f);
                        break;
                case '"':
                        fputs("&quot;", f);
                        break;
                case '\'':
                        fputs("&apos;", f);
                        break;
                default:
                        fputc(*s, f);
                }
        }
}

int s3_complete_multipart_upload(struct s3_client *c, struct s3_request *req, const char *key,
                                 const char *upload_id, const struct s3_part *parts,
                                 size_t nparts) {
        _cleanup_(transfer_freep) struct s3_transfer *t = NULL;
        char *xml = NULL;
        size_t xml_len = 0;
        int r;

        if (!parts || nparts == 0 || nparts > S3_PART_NUMBER_MAX)
                return -EINVAL;
        for (size_t i = 0; i < nparts; i++) {
                if (parts[i].number < 1 || parts[i].number > S3_PART_NUMBER_MAX ||
                    (i > 0 && parts[i].number <= parts[i - 1].number) || !parts[i].etag[0] ||
                    !memchr(parts[i].etag, 0, sizeof(parts[i].etag)))
                        return -EINVAL;
        }
        r = transfer_new(&t, c, req, S3_OP_COMPLETE_MULTIPART_UPLOAD, "POST", key, true);
        if (r < 0)
                return r;
        r = upload_id_set(t, upload_id);
        if (r < 0)
                return r;

        FILE *f = open_memstream(&xml, &xml_len);
        if (!f)
                return -ENOMEM;
        fputs("<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">", f);
        for (size_t i = 0; i < nparts; i++) {
                fprintf(f, "<Part><PartNumber>%u</PartNumber><ETag>", parts[i].number);
                xml_escape_to(f, parts[i].etag);
                fputs("</ETag></Part>", f);
        }
        fputs("</CompleteMultipartUpload>", f);
        bool failed = ferror(f);
        if (fclose(f) != 0 || failed) {
                free(xml);
                return -ENOMEM;
        }
        t->owned_body = xml;
        t->body_mem = (const unsigned char *)xml;
        t->body_length = xml_len;
        t->has_body = true;
        t->content_type = "application/xml";
        /* small and ours: sign the real hash */
        if (sigv4_sha256_hex(xml, xml_len, t->payload_hash) < 0)
                return -EIO;
        SUBMIT(t);
}

int s3_abort_multipart_upload(struct s3_client *c, struct s3_request *req, const char *key,
                              const char *upload_id) {
        _cleanup_(transfer_freep) struct s3_transfer *t = NULL;
        int r = transfer_new(&t, c, req, S3_OP_ABORT_MULTIPART_UPLOAD, "DELETE", key, true);
        if (r < 0)
                return r;
        r = upload_id_set(t, upload_id);
        if (r < 0)
                return r;
        SUBMIT(t);
}

int s3_list_parts(struct s3_client *c, struct s3_request *req, const char *key,
                  const char *upload_id, unsigned marker, struct s3_part_list *out) {
        _cleanup_(transfer_freep) struct s3_transfer *t = NULL;
        int r;

        if (!out || !out->parts || out->capacity < 1 || out->capacity > S3_LIST_MAX)
                return -EINVAL;
        r = transfer_new(&t, c, req, S3_OP_LIST_PARTS, "GET", key, true);
        if (r < 0)
                return r;
        r = upload_id_set(t, upload_id);
        if (r < 0)
                return r;
        snprintf(t->max_items, sizeof(t->max_items), "%zu", out->capacity);
        r = param_add(t, "max-parts", t->max_items);
        if (r >= 0 && marker > 0) {
                snprintf(t->marker, sizeof(t->marker), "%u", marker);
                r = param_add(t, "part-number-marker", t->marker);
        }
        if (r < 0)
                return r;
        t->parts_out = out;
        SUBMIT(t);
}

int s3_list_objects(struct s3_client *c, struct s3_request *req, const char *prefix,
                    const char *delimiter, const char *token, struct s3_object_list *out) {
        _cleanup_(transfer_freep) struct s3_transfer *t = NULL;
        int r;

        if (!out || !out->objects || out->capacity < 1 || out->capacity > S3_LIST_MAX)
                return -EINVAL;
        if (delimiter && (!*delimiter || !out->prefixes))
                return -EINVAL;
        if ((prefix && strlen(prefix) > S3_KEY_MAX) || (token && strlen(token) > S3_TOKEN_MAX) ||
            (delimiter && strlen(delimiter) > S3_KEY_MAX))
                return -ENAMETOOLONG;
        r = transfer_new(&t, c, req, S3_OP_LIST_OBJECTS, "GET", NULL, false);
        if (r < 0)
                return r;
        snprintf(t->max_items, sizeof(t->max_items), "%zu", out->capacity);
        r = param_add(t, "list-type", "2");
        if (r >= 0)
                r = param_add(t, "max-keys", t->max_items);
        if (r >= 0 && prefix && *prefix) {
                t->prefix = strdup(prefix);
                r = t->prefix ? param_add(t, "prefix", t->prefix) : -ENOMEM;
        }
        if (r >= 0 && token && *token) {
                t->token = strdup(token);
                r = t->token ? param_add(t, "continuation-token", t->token) : -ENOMEM;
        }
        if (r >= 0 && delimiter) {
                t->delimiter = strdup(delimiter);
                r = t->delimiter ? param_add(t, "delimiter", t->delimiter) : -ENOMEM;
        }
        if (r < 0)
                return r;
        t->objects_out = out;
        SUBMIT(t);
}

static void transfer_cancel(struct s3_transfer *t) {
        struct s3_client *c = t->client;

        switch (t->state) {
        case T_ACTIVE:
                curl_multi_remove_handle(c->multi, t->easy);
                c->nactive--;
                break;
        case T_HASHING:
                c->nhashing--;
                break;
        default:
                break;
        }
        transfer_finish(t, -ECANCELED, false);
}

void s3_request_cancel(struct s3_client *c, struct s3_request *req) {
        if (!c || !req || !req->transfer || req->transfer->client != c)
                return;
        transfer_cancel(req->transfer);
        bandwidth_update(c);
        pump(c);
        hash_pump(c);
}

/* ---- the client ---- */

void s3_client_stats(const struct s3_client *c, struct s3_stats *out) {
        struct list *pos, *tmp;
        unsigned queued = 0;
        const struct list *lists[] = { &c->hash_wait, &c->hashing, &c->queue, &c->backoff };

        *out = c->stats;
        for (size_t i = 0; i < ARRAY_SIZE(lists); i++)
                list_for_each_safe(pos, tmp, (struct list *)lists[i])
                        queued++;
        out->active = c->nactive;
        out->queued = queued;
}

struct s3_client *s3_client_free(struct s3_client *c) {
        if (!c)
                return NULL;
        c->closing = true;
        struct list *lists[] = { &c->active, &c->backoff, &c->queue, &c->hashing, &c->hash_wait };
        for (size_t i = 0; i < ARRAY_SIZE(lists); i++)
                while (!list_empty(lists[i]))
                        transfer_cancel(list_first_entry(lists[i], struct s3_transfer, link));
        if (c->multi)
                curl_multi_cleanup(c->multi);
        /* whatever libcurl did not report removed */
        while (!list_empty(&c->sockets))
                socket_free(c, list_first_entry(&c->sockets, struct s3_socket, link));
        loop_timer_cancel(&c->timer);
        loop_timer_cancel(&c->kick);
        if (c->share)
                curl_share_cleanup(c->share);
        free(c->bucket);
        free(c->region);
        wipe_free(c->access_key_id);
        wipe_free(c->secret_access_key);
        wipe_free(c->session_token);
        free(c->ca_file);
        explicit_bzero(c, sizeof(*c));
        free(c);
        curl_global_unref();
        return NULL;
}

DEFINE_CLEANUP(struct s3_client *, s3_client_free)


static int strdup_opt(char **out, const char *s) {
        if (!s)
                return 0;
        *out = strdup(s);
        return *out ? 0 : -ENOMEM;
}

static bool region_valid(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > 63)
                return false;
        for (; *s; s++)
                if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_')
                        return false;
        return true;
}

int s3_client_new(struct s3_client **out, struct loop *loop, struct worker_pool *workers,
                  const struct s3_config *cfg, char *err, size_t errsize) {
        _cleanup_(s3_client_freep) struct s3_client *c = NULL;
        const char *region;
        char perr[256];
        int r;

        if (err && errsize)
                err[0] = 0;
        if (!out || !loop || !workers || !cfg)
                return errbuf_fail(-EINVAL, err, errsize, "s3: missing loop, workers or config");
        if (!cfg->endpoint)
                return errbuf_fail(-EINVAL, err, errsize, "s3: no endpoint configured");
        const struct credentials *cred = cfg->credentials;
        if (!cred || !cred->access_key_id || !cred->secret_access_key)
                return errbuf_fail(-EINVAL, err, errsize, "s3: no credentials");
        if (cfg->bucket && sigv4_bucket_validate(cfg->bucket) < 0)
                return errbuf_fail(-EINVAL, err, errsize,
                                   "s3: invalid bucket name \"%s\" (3-63 of a-z 0-9 . -)",
                                   cfg->bucket);
        if ((unsigned)cfg->addressing > S3_ADDRESSING_VIRTUAL)
                return errbuf_fail(-EINVAL, err, errsize, "s3: invalid addressing style");
        region = cfg->region ? cfg->region : cred->region ? cred->region : DEFAULT_REGION;
        if (!region_valid(region))
                return errbuf_fail(-EINVAL, err, errsize, "s3: invalid region \"%s\"", region);

        c = calloc(1, sizeof(*c));
        if (!c)
                return errbuf_fail(-ENOMEM, err, errsize, "s3: out of memory");
        r = curl_global_ref();
        if (r < 0) {
                free(TAKE_PTR(c));
                return errbuf_fail(r, err, errsize, "s3: libcurl initialisation failed");
        }
        c->loop = loop;
        c->workers = workers;
        list_init(&c->sockets);
        list_init(&c->hash_wait);
        list_init(&c->hashing);
        list_init(&c->queue);
        list_init(&c->active);
        list_init(&c->backoff);

        r = sigv4_endpoint_parse(&c->ep, cfg->endpoint, perr, sizeof(perr));
        if (r < 0)
                return errbuf_fail(r, err, errsize, "s3: endpoint: %s", perr);
        c->endpoint_is_localhost = strncmp(c->ep.host, "localhost", 9) == 0 &&
                                   (c->ep.host[9] == 0 || c->ep.host[9] == ':');
        c->addressing = cfg->addressing;
        if (c->addressing == S3_ADDRESSING_VIRTUAL && c->ep.host_is_ip)
                return errbuf_fail(-EINVAL, err, errsize,
                                   "s3: virtual-hosted addressing needs a DNS name, not an IP "
                                   "address: use path style");

        if (strdup_opt(&c->bucket, cfg->bucket) < 0 || strdup_opt(&c->region, region) < 0 ||
            strdup_opt(&c->access_key_id, cred->access_key_id) < 0 ||
            strdup_opt(&c->secret_access_key, cred->secret_access_key) < 0 ||
            strdup_opt(&c->session_token, cred->session_token) < 0 ||
            strdup_opt(&c->ca_file, cfg->ca_file) < 0)
                return errbuf_fail(-ENOMEM, err, errsize, "s3: out of memory");

        c->max_concurrent = cfg->max_concurrent ? cfg->max_concurrent : DEFAULT_MAX_CONCURRENT;
        c->max_send_bytes_per_sec = cfg->max_send_bytes_per_sec;
        c->connect_timeout_ms =
                cfg->connect_timeout_ms ? cfg->connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
        c->low_speed_bytes_per_sec =
                cfg->low_speed_bytes_per_sec ? cfg->low_speed_bytes_per_sec : DEFAULT_LOW_SPEED_BYTES;
        c->low_speed_time_s = cfg->low_speed_time_s ? cfg->low_speed_time_s : DEFAULT_LOW_SPEED_TIME_S;
        c->retry_max_attempts =
                cfg->retry_max_attempts ? cfg->retry_max_attempts : DEFAULT_RETRY_MAX_ATTEMPTS;
        c->retry_base_ms = cfg->retry_base_ms ? cfg->retry_base_ms : DEFAULT_RETRY_BASE_MS;
        c->retry_cap_ms = cfg->retry_cap_ms ? cfg->retry_cap_ms : DEFAULT_RETRY_CAP_MS;
        if (c->retry_cap_ms < c->retry_base_ms)
                c->retry_cap_ms = c->retry_base_ms;
        if (c->max_send_bytes_per_sec && c->low_speed_bytes_per_sec * (uint64_t)c->max_concurrent >
                                                 c->max_send_bytes_per_sec)
                log_warn("s3: the bandwidth cap (%" PRIu64 " B/s over %u requests) is below the "
                         "low-speed limit (%u B/s): transfers may be aborted as stalled",
                         c->max_send_bytes_per_sec, c->max_concurrent,
                         c->low_speed_bytes_per_sec);

        if (getrandom(&c->rng, sizeof(c->rng), GRND_NONBLOCK) != sizeof(c->rng))
                c->rng = (uint64_t)loop_now_ms() ^ ((uint64_t)getpid() << 32);
        c->rng |= 1;

        c->share = curl_share_init();
        c->multi = curl_multi_init();
        if (!c->share || !c->multi)
                return errbuf_fail(-ENOMEM, err, errsize, "s3: libcurl: out of memory");
        /* one thread: TLS sessions and DNS answers shared without locks */
        if (curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK ||
            curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
            curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, socket_cb) != CURLM_OK ||
            curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c) != CURLM_OK ||
            curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, timer_cb) != CURLM_OK ||
            curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c) != CURLM_OK ||
            curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, (long)c->max_concurrent * 2) !=
                    CURLM_OK)
                return errbuf_fail(-EIO, err, errsize, "s3: libcurl refused an option");

        log_info("s3: endpoint %s://%s, bucket %s, region %s, %s addressing, access key ...%s",
                 c->ep.tls ? "https" : "http", c->ep.host, c->bucket ? c->bucket : "(none)",
                 c->region, use_path_style(c, c->bucket ? c->bucket : "") ? "path" : "virtual-hosted",
                 strlen(c->access_key_id) > 4 ? c->access_key_id + strlen(c->access_key_id) - 4 : "");
        *out = TAKE_PTR(c);
        return 0;
}

/* ---- the documents ---- */

/* A continuation token is one leaf's text. */
_Static_assert(XML_TEXT_MAX >= S3_TOKEN_MAX, "xml.h XML_TEXT_MAX must hold an S3 token");

enum doc_kind {
        DOC_NONE,
        DOC_ERROR,
        DOC_SUCCESS,
};

struct doc {
        enum s3_op op;
        enum doc_kind kind;
        struct s3_result *res;
        struct s3_part_list *parts;
        struct s3_object_list *objects;
        bool have_code;
        bool have_upload_id;
        bool have_etag;
        bool have_next;
        /* the Part, Contents or CommonPrefixes entry being read */
        bool in_entry;
        bool in_prefix;
        bool have_number;
        bool have_size;
        bool have_key;
        bool have_entry_etag;
};

static int parse_bool(const char *s, bool *out) {
        if (strcmp(s, "true") == 0)
                *out = true;
        else if (strcmp(s, "false") == 0)
                *out = false;
        else
                return -EPROTO;
        return 0;
}

static const char *doc_root(enum s3_op op) {
        switch (op) {
        case S3_OP_CREATE_MULTIPART_UPLOAD:
                return "InitiateMultipartUploadResult";
        case S3_OP_COMPLETE_MULTIPART_UPLOAD:
                return "CompleteMultipartUploadResult";
        case S3_OP_LIST_PARTS:
                return "ListPartsResult";
        case S3_OP_LIST_OBJECTS:
                return "ListBucketResult";
        default:
                return NULL;
        }
}

static int doc_error_field(struct doc *d, const char *name, const char *text, size_t len) {
        if (strcmp(name, "Code") == 0) {
                if (len == 0 || len > S3_CODE_MAX)
                        return -EPROTO;
                copy_printable(d->res->code, sizeof(d->res->code), text, len);
                d->have_code = true;
        } else if (strcmp(name, "Message") == 0) {
                copy_printable(d->res->message, sizeof(d->res->message), text, len);
        } else if (strcmp(name, "RequestId") == 0 && !d->res->request_id[0]) {
                copy_printable(d->res->request_id, sizeof(d->res->request_id), text, len);
        }
        return 0;
}

static int doc_part_field(struct doc *d, const char *name, const char *text, size_t len) {
        struct s3_part *p = &d->parts->parts[d->parts->count];
        uint64_t v;

        if (strcmp(name, "PartNumber") == 0) {
                if (parse_u64(text, len, &v) < 0 || v < 1 || v > S3_PART_NUMBER_MAX)
                        return -EPROTO;
                p->number = (unsigned)v;
                d->have_number = true;
        } else if (strcmp(name, "ETag") == 0) {
                if (len == 0 || copy_bounded(p->etag, sizeof(p->etag), text, len) < 0)
                        return -EPROTO;
                d->have_entry_etag = true;
        } else if (strcmp(name, "Size") == 0) {
                if (parse_u64(text, len, &p->size) < 0)
                        return -EPROTO;
                d->have_size = true;
        }
        return 0;
}

static int doc_object_field(struct doc *d, const char *name, const char *text, size_t len) {
        struct s3_object *o = &d->objects->objects[d->objects->count];

        if (strcmp(name, "Key") == 0) {
                if (len == 0 || copy_bounded(o->key, sizeof(o->key), text, len) < 0)
                        return -EPROTO;
                d->have_key = true;
        } else if (strcmp(name, "ETag") == 0) {
                if (copy_bounded(o->etag, sizeof(o->etag), text, len) < 0)
                        return -EPROTO;
        } else if (strcmp(name, "Size") == 0) {
                if (parse_u64(text, len, &o->size) < 0)
                        return -EPROTO;
                d->have_size = true;
        }
        return 0;
}

static int doc_element(void *userdata, enum xml_event ev, unsigned depth, const char *name,
                       const char *text, size_t len) {
        struct doc *d = userdata;
        uint64_t v;

        if (depth == 1) {
                if (ev == XML_CLOSE)
                        return 0;
                if (strcmp(name, "Error") == 0) {
                        d->kind = DOC_ERROR;
                        return 0;
                }
                const char *root = doc_root(d->op);
                if (!root || strcmp(name, root) != 0)
                        return -EPROTO;
                d->kind = DOC_SUCCESS;
                return 0;
        }

        if (d->kind == DOC_ERROR) {
                if (depth == 2 && ev == XML_CLOSE && text)
                        return doc_error_field(d, name, text, len);
                return 0;
        }

        switch (d->op) {
        case S3_OP_CREATE_MULTIPART_UPLOAD:
                if (depth == 2 && ev == XML_CLOSE && text && strcmp(name, "UploadId") == 0) {
                        if (len == 0 || copy_bounded(d->res->upload_id, sizeof(d->res->upload_id),
                                                     text, len) < 0)
                                return -EPROTO;
                        d->have_upload_id = true;
                }
                return 0;
        case S3_OP_COMPLETE_MULTIPART_UPLOAD:
                if (depth == 2 && ev == XML_CLOSE && text && strcmp(name, "ETag") == 0) {
                        if (copy_bounded(d->res->etag, sizeof(d->res->etag), text, len) < 0)
                                return -EPROTO;
                        d->have_etag = true;
                }
                return 0;
        case S3_OP_LIST_PARTS:
                if (depth == 2 && strcmp(name, "Part") == 0) {
                        if (ev == XML_OPEN) {
                                if (d->parts->count >= d->parts->capacity)
                                        return -EPROTO;
                                memset(&d->parts->parts[d->parts->count], 0, sizeof(struct s3_part));
                                d->in_entry = true;
                                d->have_number = d->have_size = d->have_entry_etag = false;
                                return 0;
                        }
                        if (!d->have_number || !d->have_size || !d->have_entry_etag)
                                return -EPROTO;
                        d->in_entry = false;
                        d->parts->count++;
                        return 0;
                }
                if (depth == 3 && d->in_entry && ev == XML_CLOSE && text)
                        return doc_part_field(d, name, text, len);
                if (depth == 2 && ev == XML_CLOSE && text) {
                        if (strcmp(name, "IsTruncated") == 0)
                                return parse_bool(text, &d->parts->truncated);
                        if (strcmp(name, "NextPartNumberMarker") == 0) {
                                if (len == 0)
                                        return 0;
                                if (parse_u64(text, len, &v) < 0 || v > S3_PART_NUMBER_MAX)
                                        return -EPROTO;
                                d->parts->next_marker = (unsigned)v;
                                d->have_next = true;
                        }
                }
                return 0;
        case S3_OP_LIST_OBJECTS:
                if (depth == 2 && strcmp(name, "CommonPrefixes") == 0 && d->objects->prefixes) {
                        if (ev == XML_OPEN) {
                                if (d->objects->count + d->objects->prefix_count >=
                                    d->objects->capacity)
                                        return -EPROTO;
                                d->in_prefix = true;
                                d->have_key = false;
                                return 0;
                        }
                        if (!d->have_key)
                                return -EPROTO;
                        d->in_prefix = false;
                        d->objects->prefix_count++;
                        return 0;
                }
                if (depth == 3 && d->in_prefix && ev == XML_CLOSE && text &&
                    strcmp(name, "Prefix") == 0) {
                        struct s3_prefix *p = &d->objects->prefixes[d->objects->prefix_count];
                        if (len == 0 || copy_bounded(p->prefix, sizeof(p->prefix), text, len) < 0)
                                return -EPROTO;
                        d->have_key = true;
                        return 0;
                }
                if (depth == 2 && strcmp(name, "Contents") == 0) {
                        if (ev == XML_OPEN) {
                                if (d->objects->count + d->objects->prefix_count >=
                                    d->objects->capacity)
                                        return -EPROTO;
                                memset(&d->objects->objects[d->objects->count], 0,
                                       sizeof(struct s3_object));
                                d->in_entry = true;
                                d->have_key = d->have_size = false;
                                return 0;
                        }
                        if (!d->have_key || !d->have_size)
                                return -EPROTO;
                        d->in_entry = false;
                        d->objects->count++;
                        return 0;
                }
                if (depth == 3 && d->in_entry && ev == XML_CLOSE && text)
                        return doc_object_field(d, name, text, len);
                if (depth == 2 && ev == XML_CLOSE && text) {
                        if (strcmp(name, "IsTruncated") == 0)
                                return parse_bool(text, &d->objects->truncated);
                        if (strcmp(name, "NextContinuationToken") == 0) {
                                if (copy_bounded(d->objects->next_token,
                                                 sizeof(d->objects->next_token), text, len) < 0)
                                        return -EPROTO;
                                d->have_next = len > 0;
                        }
                }
                return 0;
        default:
                return -EPROTO;
        }
}

int s3_parse_response(enum s3_op op, const char *xml, size_t len, struct s3_result *result,
                      void *list) {
        struct doc d = { .op = op, .res = result };
        int r;

        if (!xml || !result || (unsigned)op >= S3_OP_COUNT)
                return -EINVAL;
        if (op == S3_OP_LIST_PARTS) {
                d.parts = list;
                if (d.parts) {
                        if (!d.parts->parts || !d.parts->capacity)
                                return -EINVAL;
                        d.parts->count = 0;
                        d.parts->truncated = false;
                        d.parts->next_marker = 0;
                }
        } else if (op == S3_OP_LIST_OBJECTS) {
                d.objects = list;
                if (d.objects) {
                        if (!d.objects->objects || !d.objects->capacity)
                                return -EINVAL;
                        d.objects->count = 0;
                        d.objects->prefix_count = 0;
                        d.objects->truncated = false;
                        d.objects->next_token[0] = 0;
                }
        }
        /* without an output list only an <Error> can be read */
        if ((op == S3_OP_LIST_PARTS && !d.parts) || (op == S3_OP_LIST_OBJECTS && !d.objects))
                d.op = S3_OP_HEAD_OBJECT;

        r = xml_parse(xml, len, doc_element, &d);
        if (r < 0)
                return r;
        switch (d.kind) {
        case DOC_ERROR:
                return d.have_code ? -EREMOTEIO : -EPROTO;
        case DOC_SUCCESS:
                break;
        default:
                return -EPROTO;
        }
        if (op == S3_OP_CREATE_MULTIPART_UPLOAD && !d.have_upload_id)
                return -EPROTO;
        if (op == S3_OP_LIST_PARTS && d.parts->truncated && !d.have_next)
                return -EPROTO;
        if (op == S3_OP_LIST_OBJECTS && d.objects->truncated && !d.have_next)
                return -EPROTO;
        return 0;
}
