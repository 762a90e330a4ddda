/* SPDX-License-Identifier: MIT */
/*
 * s3 — see s3.h for the model.  This file is the client's curl glue and
 * the lifetime of a transfer; s3_internal.h says how the client is split
 * and which file owns which fields.
 *
 * Here because it is the one place that speaks libcurl: libcurl meets the
 * loop in three places — the socket callback keeps one small struct
 * s3_socket per curl socket, registered with loop_watch_*; the timer
 * callback arms one loop_timer; after every curl_multi_socket_action()
 * the finished transfers are drained from curl_multi_info_read().  Each
 * attempt is signed afresh (x-amz-date moves) on the same easy handle
 * after curl_easy_reset(), and what it amounts to (the store's verdict,
 * libcurl's error, a short or malformed answer) is classified here, then
 * handed to the schedule (s3_schedule.c), which retries or finishes it.
 * User done() callbacks run only from s3_transfer_finish(), reached from
 * there (or from the worker hand-off, cancel and free), never inside a
 * libcurl callback, so they may start or cancel requests freely.
 *
 * What the requests are is in s3_requests.c, what the store's XML means
 * in s3_documents.c.
 */
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "remote/s3_internal.h"
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

/* ---- small helpers ---- */

static void wipe_free(char *s) {
        if (s) {
                explicit_bzero(s, strlen(s));
                free(s);
        }
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

struct s3_socket {
        struct list link;
        struct loop_watch watch;
        struct s3_client *client;
        curl_socket_t fd;
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

static void wipe_slist(struct curl_slist *l) {
        for (struct curl_slist *i = l; i; i = i->next)
                explicit_bzero(i->data, strlen(i->data));
        curl_slist_free_all(l);
}

struct s3_transfer *s3_transfer_free(struct s3_transfer *t) {
        if (!t)
                return NULL;
        s3_schedule_forget(t);
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

static bool expected_outcome(const struct s3_transfer *t, int error) {
        if (error == -EEXIST && (t->flags & S3_PUT_IF_NONE_MATCH))
                return true;
        return error == -ENOENT && (t->op == S3_OP_HEAD_OBJECT || t->op == S3_OP_LIST_PARTS);
}

void s3_describe_failure(const struct s3_transfer *t, char *buf, size_t size) {
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
void s3_transfer_finish(struct s3_transfer *t, int error, bool permanent) {
        struct s3_client *c = t->client;
        struct s3_request *req = t->req;

        req->result.error = error;
        req->result.permanent = error ? permanent : false;
        if (error) {
                c->stats.failed[t->op]++;
                if (error != -ECANCELED) {
                        char why[1024];
                        s3_describe_failure(t, why, sizeof(why));
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
        s3_transfer_free(t);
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
                if (s3_copy_bounded(res->etag, sizeof(res->etag), v, vlen) < 0) {
                        res->etag[0] = 0;
                        t->etag_too_long = true;
                }
        } else if (header_is(line, len, "x-amz-request-id", &v, &vlen)) {
                s3_copy_printable(res->request_id, sizeof(res->request_id), v, vlen);
        } else if (header_is(line, len, "Content-Length", &v, &vlen)) {
                t->have_content_length = s3_parse_u64(v, vlen, &t->content_length) == 0;
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

/* ---- results ---- */

void s3_result_describe(const struct s3_result *res, int error, char *out, size_t size) {
        if (res->status && res->code[0])
                snprintf(out, size, "%ld %s%s%s", res->status, res->code,
                         res->message[0] ? ": " : "", res->message);
        else if (res->status)
                snprintf(out, size, "HTTP %ld (%s)", res->status, strerror(-error));
        else
                snprintf(out, size, "%s", strerror(-error));
}

/* ---- attempts ---- */

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

int s3_attempt_start(struct s3_transfer *t) {
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
        return 0;
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

/* The schedule's handles on an attempt on the wire. */
void s3_attempt_remove(struct s3_transfer *t) {
        curl_multi_remove_handle(t->client->multi, t->easy);
}

void s3_attempt_pause(struct s3_transfer *t, bool paused) {
        curl_easy_pause(t->easy, paused ? CURLPAUSE_ALL : CURLPAUSE_CONT);
}

void s3_attempt_set_send_speed(struct s3_transfer *t, curl_off_t bytes_per_sec) {
        curl_easy_setopt(t->easy, CURLOPT_MAX_SEND_SPEED_LARGE, bytes_per_sec);
}

static void attempt_end(struct s3_transfer *t, CURLcode rc) {
        bool permanent;

        s3_attempt_remove(t);
        int error = attempt_result(t, rc, &permanent);
        s3_schedule_attempt_ended(t, error, permanent);
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

/* ---- a new transfer ---- */

int s3_transfer_new(struct s3_transfer **out, struct s3_client *c, struct s3_request *req,
                    enum s3_op op, const char *method, const char *key, bool need_key) {
        _cleanup_(s3_transfer_freep) struct s3_transfer *t = NULL;
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

/* ---- the client ---- */

struct s3_client *s3_client_free(struct s3_client *c) {
        if (!c)
                return NULL;
        c->closing = true;
        s3_schedule_stop(c);
        if (c->multi)
                curl_multi_cleanup(c->multi);
        /* whatever libcurl did not report removed */
        while (!list_empty(&c->sockets))
                socket_free(c, list_first_entry(&c->sockets, struct s3_socket, link));
        loop_timer_cancel(&c->timer);
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
        s3_schedule_init(c);

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

