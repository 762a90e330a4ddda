/* SPDX-License-Identifier: MIT */
/*
 * s3 — an S3 client driven by the daemon's loop: the object-store tier
 * (flush of checkpoints, restore from the store) talks to the store only
 * through this.
 *
 * Why it looks like this: uploads run for minutes and many run at once, so
 * nothing may block the loop thread.  libcurl's multi interface does the
 * HTTP; its sockets join the loop through loop_watch_*() and its timeout
 * through a loop_timer, so there is no I/O thread.  The only CPU-heavy step
 * (hashing a body for Content-MD5, possibly gigabytes) runs on the worker
 * pool before the request starts.  Every request is signed with our own
 * SigV4 (remote/sigv4.h explains why not libcurl's).
 *
 * Model (the house style of loop_req): the caller owns a struct s3_request,
 * zeroed before its first use, sets req->done (and optionally req->bucket),
 * and starts one operation on it with an s3_*() call below.  From a
 * successful start until done() runs the request belongs to the client and
 * must not be touched or freed; done(req, error) runs exactly once, on the
 * loop thread, never from inside the start call, with req->result filled
 * in.  Afterwards the caller may reuse or free the request.  A start call
 * that returns < 0 did nothing and done() will not run.  Strings passed to a start call (key, upload id,
 * prefix, token) are copied; a body's fd or memory, and a list's output
 * arrays, are borrowed until done() runs.
 *
 * Retries happen inside the client (exponential backoff with full jitter);
 * done() sees only the final outcome.  A retryable failure that used up
 * its attempts is reported with result.permanent == false: the caller may
 * try again later.  Requests beyond max_concurrent wait in a FIFO queue.
 *
 * Retried non-idempotent operations: if an attempt's response is lost
 * after the store acted, the retry sees the new state — a conditional PUT
 * then gets "already exists" (-EEXIST) and CompleteMultipartUpload gets
 * 404 NoSuchUpload (-ENOENT).  result.attempts > 1 tells the caller to
 * check with HeadObject (and the ETag) before treating either as a
 * failure.  A retried CreateMultipartUpload may leave an orphan upload.
 *
 * Secrets: credentials are copied and wiped on free.  Nothing here logs a
 * secret, an Authorization header, a signature or a query string; URLs in
 * logs are scheme://host/path.
 *
 * Thread-safety: a client and its requests are touched only by the loop
 * thread.  s3_classify() and s3_parse_response() are pure and may be
 * called from any thread.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/loop.h"
#include "io/worker.h"
#include "remote/credentials.h"
#include "remote/sigv4.h"

/* Bounds of the strings a result carries (the store's values are shorter;
 * a longer one is a protocol error, or truncated for the message). */
#define S3_ETAG_MAX 128
#define S3_UPLOAD_ID_MAX 1024
#define S3_CODE_MAX 64
#define S3_MESSAGE_MAX 256
#define S3_REQUEST_ID_MAX 128
#define S3_TOKEN_MAX 4096
#define S3_KEY_MAX SIGV4_KEY_MAX

/* S3's own limits. */
#define S3_PART_NUMBER_MAX 10000
#define S3_OBJECT_PUT_MAX (5ull << 30) /* one PutObject or UploadPart */
#define S3_LIST_MAX 1000               /* max-keys / max-parts per page */
/* Memory bodies are for small things (manifests, commit markers): they
 * are hashed (SHA-256 and MD5) on the loop thread.  Bigger bodies go
 * through an fd (a memfd works). */
#define S3_MEMORY_BODY_MAX (1u << 20)

enum s3_op {
        S3_OP_PUT_OBJECT,
        S3_OP_GET_OBJECT,
        S3_OP_HEAD_OBJECT,
        S3_OP_DELETE_OBJECT,
        S3_OP_CREATE_BUCKET,
        S3_OP_CREATE_MULTIPART_UPLOAD,
        S3_OP_UPLOAD_PART,
        S3_OP_COMPLETE_MULTIPART_UPLOAD,
        S3_OP_ABORT_MULTIPART_UPLOAD,
        S3_OP_LIST_PARTS,
        S3_OP_LIST_OBJECTS,
        S3_OP_COUNT
};

/* "PutObject", "GetObject", ... (the S3 API names). */
const char *s3_op_name(enum s3_op op);

enum s3_addressing {
        S3_ADDRESSING_AUTO,    /* path style for an IP or localhost endpoint
                                * (or a bucket virtual hosting cannot reach),
                                * virtual-hosted otherwise */
        S3_ADDRESSING_PATH,
        S3_ADDRESSING_VIRTUAL,
};

/* Client settings.  Pointers are borrowed for s3_client_new() only; a 0
 * number means the default shown. */
struct s3_config {
        const char *endpoint;          /* "https://s3.eu-west-1.amazonaws.com",
                                        * "http://127.0.0.1:7480"; TLS (with
                                        * verification) unless explicitly http:// */
        const char *region;            /* NULL: credentials->region, else "us-east-1" */
        const char *bucket;            /* the default bucket of requests */
        enum s3_addressing addressing;
        const struct credentials *credentials; /* copied */
        const char *ca_file;           /* NULL: the system's CA store */
        unsigned max_concurrent;       /* requests on the wire at once: 8 */
        uint64_t max_send_bytes_per_sec; /* upload cap for the whole client,
                                          * split evenly among active uploads;
                                          * 0: none */
        unsigned connect_timeout_ms;   /* 10000 */
        unsigned low_speed_bytes_per_sec; /* a transfer slower than this ... */
        unsigned low_speed_time_s;     /* ... for this long is aborted (and
                                        * retried): 1 B/s for 60 s */
        unsigned retry_max_attempts;   /* attempts in all, the first included: 5;
                                        * 1 disables retries */
        unsigned retry_base_ms;        /* backoff before attempt n+1 is uniform in */
        unsigned retry_cap_ms;         /* [0, min(cap, base * 2^(n-1))]: 100, 20000 */
};

/* What a request uploads: `length` bytes of `fd` from `offset`, read with
 * pread as the socket takes them (never copied whole), or, when fd < 0,
 * `length` (<= S3_MEMORY_BODY_MAX) bytes at `data`.  The fd or memory is
 * borrowed until done() and must not change meanwhile: a retry reads it
 * again from the start, and the store checks it against the Content-MD5
 * computed before the first attempt.  md5: the body's MD5 if the caller
 * already has it (copied), else NULL and the client computes it — on the
 * worker pool for an fd. */
struct s3_body {
        int fd;
        uint64_t offset;
        uint64_t length;
        const void *data;
        const unsigned char *md5; /* 16 bytes or NULL */
};

static inline struct s3_body s3_body_fd(int fd, uint64_t offset, uint64_t length) {
        return (struct s3_body){ .fd = fd, .offset = offset, .length = length };
}
static inline struct s3_body s3_body_mem(const void *data, size_t length) {
        return (struct s3_body){ .fd = -1, .data = data, .length = length };
}

/* One part of a multipart upload: what UploadPart returned, what ListParts
 * lists and what CompleteMultipartUpload takes. */
struct s3_part {
        unsigned number;              /* 1..S3_PART_NUMBER_MAX */
        char etag[S3_ETAG_MAX + 1];   /* with its quotes, as the store gave it */
        uint64_t size;                /* ListParts only */
};

/* Output of ListParts: the caller's array of `capacity` parts (max-parts
 * asks for that many, at most S3_LIST_MAX). */
struct s3_part_list {
        struct s3_part *parts;
        size_t capacity;
        size_t count;
        bool truncated;               /* more after next_marker */
        unsigned next_marker;         /* part-number-marker of the next page */
};

struct s3_object {
        char key[S3_KEY_MAX + 1];
        uint64_t size;
        char etag[S3_ETAG_MAX + 1];
};

/* A common prefix of a listing with a delimiter: the "directory"
 * "jobs/a/steps/00000000000000000042/" standing for every key below it. */
struct s3_prefix {
        char prefix[S3_KEY_MAX + 1];
};

/* Output of ListObjectsV2: the caller's arrays.  max-keys = capacity, and
 * S3 counts keys and common prefixes together against it. */
struct s3_object_list {
        struct s3_object *objects;    /* capacity entries */
        struct s3_prefix *prefixes;   /* capacity entries when listing with a
                                       * delimiter, else NULL */
        size_t capacity;
        size_t count;                 /* objects filled */
        size_t prefix_count;          /* prefixes filled */
        bool truncated;
        char next_token[S3_TOKEN_MAX + 1]; /* continuation token of the next page */
};

/* The outcome of a request.  error:
 *   0            success;
 *   -EEXIST      a conditional PUT found the key taken (412
 *                PreconditionFailed) — an expected outcome, permanent;
 *   -ENOENT      404: NoSuchKey, NoSuchBucket, NoSuchUpload (HeadObject
 *                has no body, so no code) — permanent;
 *   -EACCES      403: AccessDenied, SignatureDoesNotMatch,
 *                InvalidAccessKeyId, RequestTimeTooSkewed — permanent;
 *   -EBADMSG     the store's digest check failed (400 BadDigest,
 *                XAmzContentSHA256Mismatch): the body changed — permanent;
 *   -ERANGE      a ranged GET past the object's end (416, or fewer bytes
 *                than asked) — permanent;
 *   -EFBIG       the object is larger than the GET buffer — permanent;
 *   -EINVAL, -EOPNOTSUPP  other 4xx, 501 — permanent;
 *   -EAGAIN      429, 503 SlowDown, 409 OperationAborted — retryable;
 *   -EIO         500, 502, 504, a cut-off body — retryable;
 *   -ETIMEDOUT, -ECONNREFUSED, -ECONNRESET, -EHOSTUNREACH — retryable;
 *   -EPROTO      the store's answer made no sense (malformed XML, missing
 *                ETag) — permanent;
 *   -EPERM       the server's TLS certificate failed verification —
 *                permanent;
 *   -ECANCELED   s3_request_cancel() or s3_client_free();
 *   -errno       reading the body's fd failed (or it ended early: -EIO) —
 *                permanent;
 *   -ENOMEM.
 */
struct s3_result {
        int error;
        bool permanent;               /* retrying the same request cannot help */
        long status;                  /* HTTP status of the last attempt, 0: none */
        unsigned attempts;            /* requests sent, retries included */
        uint64_t bytes;               /* sent (PUT, UploadPart), received into the
                                       * buffer (GET), object size (HEAD) */
        char etag[S3_ETAG_MAX + 1];   /* PUT, UploadPart, HEAD, GET, Complete
                                       * (radosgw 16 returns an empty one there) */
        char upload_id[S3_UPLOAD_ID_MAX + 1]; /* CreateMultipartUpload */
        char code[S3_CODE_MAX + 1];   /* S3 error code, "" when none */
        char message[S3_MESSAGE_MAX + 1]; /* its message (truncated, control
                                           * characters replaced) */
        char request_id[S3_REQUEST_ID_MAX + 1]; /* x-amz-request-id */
};

struct s3_transfer;

struct s3_request {
        /* set by the caller before a start call */
        void (*done)(struct s3_request *req, int error); /* error == result.error */
        const char *bucket;           /* NULL: the client's bucket (copied at start) */
        /* filled in before done() */
        struct s3_result result;
        /* private */
        struct s3_transfer *transfer;
};

struct s3_client;

/* Counters since s3_client_new(), per operation (for tests and `ckptctl
 * status`). */
struct s3_stats {
        uint64_t requests[S3_OP_COUNT]; /* HTTP requests sent, retries included */
        uint64_t retries[S3_OP_COUNT];  /* attempts after a retryable failure */
        uint64_t completed[S3_OP_COUNT]; /* done() with error 0 */
        uint64_t failed[S3_OP_COUNT];   /* done() with an error */
        uint64_t bytes_sent;            /* request bodies (retries included) */
        uint64_t bytes_received;        /* GET bodies written to buffers */
        uint64_t bytes_hashed;          /* fd bodies hashed (MD5) on the worker pool */
        unsigned active;                /* requests on the wire now */
        unsigned queued;                /* waiting for a slot, a hash or a backoff */
        unsigned max_active;            /* the most ever on the wire at once */
};

/* Create a client on `loop`, hashing on `workers` (both borrowed; they
 * must outlive the client).  err (always NUL-terminated when errsize > 0)
 * says what was wrong, naming no secret.  -EINVAL: bad endpoint, bucket,
 * region, addressing or missing credentials; -ENOMEM; -EIO: libcurl. */
int s3_client_new(struct s3_client **out, struct loop *loop, struct worker_pool *workers,
                  const struct s3_config *cfg, char *err, size_t errsize);

/* Every request not yet done gets done(req, -ECANCELED) (start calls from
 * those callbacks fail with -ESHUTDOWN), then the client is freed and its
 * secrets wiped.  Call it from the loop thread, never from a done()
 * callback.  Hash work still on the worker pool is left to free itself,
 * so the pool may be freed before or after the client.  Accepts NULL;
 * returns NULL. */
struct s3_client *s3_client_free(struct s3_client *c);

void s3_client_stats(const struct s3_client *c, struct s3_stats *out);

/* Hold every transfer where it is (curl_easy_pause) and start nothing new
 * — no request, no hashing — until called again with false.  For short
 * pauses (seconds): a store may drop a connection idle for a minute, which
 * is then an ordinary retryable failure. */
void s3_client_pause(struct s3_client *c, bool paused);

/* Change the upload cap (0: none); requests on the wire get their new
 * share at once (SIGHUP of [remote] bandwidth). */
void s3_client_set_bandwidth(struct s3_client *c, uint64_t bytes_per_sec);

/* Stop a request started on c: done(req, -ECANCELED) runs before this
 * returns.  Nothing happens if req is not in flight.  Call it from the
 * loop thread, never from inside req's own done(). */
void s3_request_cancel(struct s3_client *c, struct s3_request *req);

/* ---- operations ----
 * All return 0 (started: done() will run) or, doing nothing:
 *   -EINVAL      a bad argument (NULL, empty key, a key with a "." or ".."
 *                segment, invalid bucket, part number out of range, body
 *                too long, parts not ascending, req->done unset, req still
 *                in flight);
 *   -ENAMETOOLONG  key over S3_KEY_MAX bytes;
 *   -ESHUTDOWN   the client is being freed;
 *   -ENOMEM.
 */

/* PutObject.  flags S3_PUT_IF_NONE_MATCH: create only (If-None-Match: *);
 * an existing key gives -EEXIST.  result: etag, bytes. */
#define S3_PUT_IF_NONE_MATCH 1u
int s3_put_object(struct s3_client *c, struct s3_request *req, const char *key,
                  const struct s3_body *body, unsigned flags);

/* GetObject of the whole object into buf (capacity len bytes; buf may be
 * NULL when len is 0).  The object must fit (-EFBIG otherwise); result.bytes
 * is its size, and a body shorter than its Content-Length is a (retryable)
 * error.  result: bytes, etag. */
int s3_get_object(struct s3_client *c, struct s3_request *req, const char *key, void *buf,
                  size_t len);

/* GetObject of bytes [offset, offset + len) (len >= 1) into buf: exactly
 * len bytes or an error (-ERANGE when the object ends before). */
int s3_get_object_range(struct s3_client *c, struct s3_request *req, const char *key,
                        uint64_t offset, void *buf, size_t len);

/* HeadObject.  result: bytes (the object's size), etag; -ENOENT if absent. */
int s3_head_object(struct s3_client *c, struct s3_request *req, const char *key);

/* DeleteObject (S3 answers success for an absent key too). */
int s3_delete_object(struct s3_client *c, struct s3_request *req, const char *key);

/* CreateBucket (PUT /bucket, no location constraint: the store's default
 * region) of req->bucket, else the client's. */
int s3_create_bucket(struct s3_client *c, struct s3_request *req);

/* CreateMultipartUpload (POST ?uploads).  result: upload_id. */
int s3_create_multipart_upload(struct s3_client *c, struct s3_request *req, const char *key);

/* UploadPart (PUT ?partNumber=N&uploadId=...).  Parts but the last must be
 * >= 5 MiB (the store checks at completion).  result: etag, bytes. */
int s3_upload_part(struct s3_client *c, struct s3_request *req, const char *key,
                   const char *upload_id, unsigned part_number, const struct s3_body *body);

/* CompleteMultipartUpload with nparts parts in ascending number, each with
 * the ETag UploadPart returned (copied into the XML body, signed with its
 * SHA-256).  result: etag (empty from radosgw 16: HeadObject has it).  A
 * 200 answer whose body is an <Error> is a failure, as S3 documents. */
int s3_complete_multipart_upload(struct s3_client *c, struct s3_request *req, const char *key,
                                 const char *upload_id, const struct s3_part *parts,
                                 size_t nparts);

/* AbortMultipartUpload (DELETE ?uploadId=...). */
int s3_abort_multipart_upload(struct s3_client *c, struct s3_request *req, const char *key,
                              const char *upload_id);

/* ListParts: one page of up to out->capacity (1..S3_LIST_MAX) parts after
 * part number `marker` (0: from the start); fills out->parts, count,
 * truncated, next_marker.  out is borrowed until done(). */
int s3_list_parts(struct s3_client *c, struct s3_request *req, const char *key,
                  const char *upload_id, unsigned marker, struct s3_part_list *out);

/* ListObjectsV2: one page of up to out->capacity (1..S3_LIST_MAX) entries
 * in key order, keys starting with prefix (NULL: all), continuing after
 * `token` (NULL or "": from the start; else a next_token of the previous
 * page).  With a delimiter (NULL: none; then out->prefixes is needed),
 * keys that contain it after the prefix are rolled up into
 * out->prefixes: prefix "jobs/a/steps/" and delimiter "/" list the steps.
 * Keys and prefixes come back decoded (XML entities).  out is borrowed
 * until done(). */
int s3_list_objects(struct s3_client *c, struct s3_request *req, const char *prefix,
                    const char *delimiter, const char *token, struct s3_object_list *out);

/* A one-line account of a failed request for logs and status, naming no
 * secret: "403 SignatureDoesNotMatch: The request signature ...", "HTTP
 * 500 (Input/output error)", or strerror() when no answer came. */
void s3_result_describe(const struct s3_result *res, int error, char *out, size_t size);

/* ---- pieces exposed for tests ---- */

/* How a failed answer is classified: returns the -errno of the table at
 * struct s3_result and sets *permanent.  status is the HTTP status (0: no
 * answer), code the S3 error code ("" or NULL when none). */
int s3_classify(long status, const char *code, bool *permanent);

/* Parse an XML body the store sent for `op` with the strict reader of
 * remote/xml.h (no DTD, no CDATA, bounded depth, names and text; the five
 * named entities and numeric character references are decoded; text must
 * be valid UTF-8).  The documents understood: <Error> for any op (code and
 * message into result, returns -EREMOTEIO), and for success
 * InitiateMultipartUploadResult (result->upload_id),
 * CompleteMultipartUploadResult (result->etag), ListPartsResult (list is a
 * struct s3_part_list *) and ListBucketResult (a struct s3_object_list *;
 * CommonPrefixes are kept when it has a prefixes array).
 * Returns 0, -EREMOTEIO for an <Error> document, -EPROTO for anything
 * malformed, unexpected, missing a required field or over a bound. */
int s3_parse_response(enum s3_op op, const char *xml, size_t len, struct s3_result *result,
                      void *list);
