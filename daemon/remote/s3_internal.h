/* SPDX-License-Identifier: MIT */
/*
 * s3_internal — what the four files of the S3 client share, and nothing
 * that its callers may see: they include remote/s3.h only.  Only s3*.c
 * include this header.
 *
 * The client is one noun split along its parts, each file owning its own
 * fields of the structs below (the comments at each group say whose):
 *
 *   s3.c            the curl glue and the transfer's lifetime: libcurl's
 *                   multi meeting the loop (sockets, timer), the callbacks
 *                   of one transfer, an attempt (signing, easy-handle
 *                   options, its result and the classification of errors),
 *                   s3_transfer_new/free/finish, the client's creation and
 *                   freeing.  The only file that calls libcurl.
 *   s3_schedule.c   when a transfer runs: the hashing pump on the worker
 *                   pool, the FIFO queue and max_concurrent, pause, the
 *                   bandwidth split, retries with backoff and their timers,
 *                   the kick that starts work on the next turn, cancel.
 *   s3_requests.c   what a request is: the s3_*() start calls, their
 *                   arguments, query parameters and bodies (Content-MD5,
 *                   payload hash, the XML body of CompleteMultipartUpload).
 *   s3_documents.c  what the store's XML answers mean (s3_parse_response)
 *                   and the bounded copies of the store's text.
 *
 * Life of a transfer (s3.h has the caller's side of it): s3_requests.c
 * builds it (s3_transfer_new), fills in the request and hands it to
 * s3_schedule_submit(); from then on the schedule moves it between its
 * lists — hash_wait → hashing → queue → active → done, or → backoff →
 * queue — calling s3_attempt_start() for each attempt; s3.c reports the
 * end of an attempt with s3_schedule_attempt_ended(), and the request is
 * handed back by s3_transfer_finish(), which frees the transfer.
 */
#pragma once

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/loop.h"
#include "io/worker.h"
#include "remote/s3.h"
#include "remote/sigv4.h"
#include "util/cleanup.h"
#include "util/list.h"

#define MD5_LEN 16
#define MD5_BASE64_LEN 24

/* Where a transfer is; the list it is on (struct s3_client) matches. */
enum transfer_state {
        T_HASH_WAIT,
        T_HASHING,
        T_QUEUED,
        T_ACTIVE,
        T_BACKOFF,
};

struct hash_work; /* s3_schedule.c's */

struct s3_transfer {
        /* s3.c: set by s3_transfer_new(), constant afterwards */
        struct s3_client *client;
        struct s3_request *req;
        enum s3_op op;
        const char *method;
        char *bucket;
        char *key;
        struct sigv4_address addr;

        /* s3_requests.c: the request, filled in before submit and
         * constant afterwards (but has_md5/content_md5, which the hashing
         * of s3_schedule.c fills in for an fd body) */
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
        unsigned flags;
        const char *content_type;
        bool has_body;
        int body_fd;
        uint64_t body_offset;
        uint64_t body_length;
        const unsigned char *body_mem; /* caller's, or owned_body */
        char *owned_body;
        char payload_hash[SIGV4_HEX_LEN + 1];
        bool has_md5;
        char content_md5[MD5_BASE64_LEN + 1];
        unsigned char *get_buf; /* GET into the caller's buffer */
        size_t get_len;
        bool ranged;
        uint64_t range_offset;
        struct s3_part_list *parts_out;
        struct s3_object_list *objects_out;

        /* s3_schedule.c: where the transfer is */
        struct list link;
        enum transfer_state state;
        struct hash_work *work; /* while T_HASHING */
        struct loop_timer retry_timer;

        /* s3.c: one attempt on the wire and its answer, reset by each */
        uint64_t body_pos;
        size_t received;
        char *resp;
        size_t resp_len;
        size_t resp_cap;
        uint64_t content_length;
        bool have_content_length;
        bool etag_too_long;
        int local_error; /* set by a callback that stopped the transfer */
        const char *why; /* what went wrong, when not the store's verdict
                          * (also set where a transfer fails to start) */
        CURL *easy;
        struct curl_slist *headers;
        char errbuf[CURL_ERROR_SIZE];
};

struct s3_client {
        /* s3.c: the loop, libcurl, the endpoint and the secrets */
        struct loop *loop;
        struct worker_pool *workers;
        CURLM *multi;
        CURLSH *share;
        struct loop_timer timer; /* libcurl's timeout */
        struct list sockets;     /* struct s3_socket */
        struct sigv4_endpoint ep;
        enum s3_addressing addressing;
        bool endpoint_is_localhost;
        char *bucket;
        char *region;
        char *access_key_id;
        char *secret_access_key;
        char *session_token;
        char *ca_file;
        unsigned connect_timeout_ms;
        unsigned low_speed_bytes_per_sec;
        unsigned low_speed_time_s;
        bool closing;            /* s3_client_free() runs: nothing starts */

        /* s3_schedule.c: settings (s3.c copies them in at creation) */
        unsigned max_concurrent;
        uint64_t max_send_bytes_per_sec;
        unsigned retry_max_attempts;
        unsigned retry_base_ms;
        unsigned retry_cap_ms;
        /* s3_schedule.c: the transfers, by state */
        struct list hash_wait;
        struct list hashing;
        struct list queue;
        struct list active;
        struct list backoff;
        unsigned nhashing;
        unsigned nactive;
        struct loop_timer kick;  /* start queued work on the next turn */
        uint64_t rng;            /* backoff jitter */
        bool paused;             /* s3_client_pause(): nothing moves, nothing starts */

        /* each counter is counted by the file where its event happens */
        struct s3_stats stats;
};

/* ---- s3.c ---- */

/* A new transfer of op on req, for key (copied; need_key: must be set)
 * in req->bucket or the client's bucket.  Checks the request can start
 * (-EINVAL, -ESHUTDOWN, -ENOMEM, or sigv4_address_build's error). */
int s3_transfer_new(struct s3_transfer **out, struct s3_client *c, struct s3_request *req,
                    enum s3_op op, const char *method, const char *key, bool need_key);

/* Frees t, wherever it is (off its list, its timer stopped, its hash work
 * orphaned); does not touch t->req.  Accepts NULL; returns NULL. */
struct s3_transfer *s3_transfer_free(struct s3_transfer *t);
DEFINE_CLEANUP(struct s3_transfer *, s3_transfer_free)

/* Hand the request back with its outcome (logged unless cancelled), free
 * t, then run req->done().  t must be off the wire and off the counts of
 * the schedule. */
void s3_transfer_finish(struct s3_transfer *t, int error, bool permanent);

/* The failure in res->error (and t->why, the store's code, libcurl's
 * message) in one line, for the logs. */
void s3_describe_failure(const struct s3_transfer *t, char *buf, size_t size);

/* Sign and set up the next attempt and put it on the wire: 0, or -errno
 * and nothing sent.  The schedule moves t to its active list after. */
int s3_attempt_start(struct s3_transfer *t);

/* Take an attempt off the wire without an outcome (cancel). */
void s3_attempt_remove(struct s3_transfer *t);

/* Hold (curl_easy_pause) or resume an attempt on the wire. */
void s3_attempt_pause(struct s3_transfer *t, bool paused);

/* The upload speed cap of an attempt on the wire (0: none). */
void s3_attempt_set_send_speed(struct s3_transfer *t, curl_off_t bytes_per_sec);

/* ---- s3_schedule.c ---- */

/* The schedule's lists and jitter, empty (at client creation). */
void s3_schedule_init(struct s3_client *c);

/* Take over a transfer built by s3_requests.c: hashed first if its fd
 * body has no Content-MD5 yet, then queued; started on the next turn. */
void s3_schedule_submit(struct s3_transfer *t);

/* The attempt on the wire ended (off the multi already) with error
 * (0: done) and permanent: retry after a backoff, or finish. */
void s3_schedule_attempt_ended(struct s3_transfer *t, int error, bool permanent);

/* Unlink t from the schedule (from s3_transfer_free). */
void s3_schedule_forget(struct s3_transfer *t);

/* Cancel every transfer (done(-ECANCELED)), from s3_client_free() with
 * c->closing set, and stop the kick. */
void s3_schedule_stop(struct s3_client *c);

/* ---- s3_requests.c ---- */

/* Content-MD5's value of a digest: 0 or -EIO. */
int s3_md5_base64(const unsigned char md5[MD5_LEN], char out[MD5_BASE64_LEN + 1]);

/* ---- s3_documents.c: text the store sent ---- */

/* Copy len bytes and a NUL into dst (cap bytes): -EPROTO if they do not
 * fit. */
int s3_copy_bounded(char *dst, size_t cap, const char *src, size_t len);

/* Copy text for a log line or a result: truncated, with control
 * characters replaced, so it cannot forge log lines. */
void s3_copy_printable(char *dst, size_t cap, const char *src, size_t len);

/* A decimal number of len digits that fits 64 bits, or -EPROTO. */
int s3_parse_u64(const char *s, size_t len, uint64_t *out);
