/* SPDX-License-Identifier: MIT */
/*
 * sigv4 — AWS Signature Version 4 for S3 requests (Authorization header
 * form, single-chunk payload), plus the addressing rules that decide what
 * gets signed: which Host, which path.
 *
 * Why our own signer: libcurl 7.88's CURLOPT_AWS_SIGV4 omits the
 * x-amz-content-sha256 header S3 requires and signs a bare sub-resource
 * (`?uploads`) as `uploads` where S3 expects `uploads=`, so multipart
 * uploads fail with SignatureDoesNotMatch.  Here the object-store client
 * describes a request (method, host, raw object path, query parameters,
 * extra headers, payload hash, time) and gets back exactly the headers to
 * send; it never builds a canonical string itself.
 *
 * S3 flavour of the rules (docs/object-store.md, "Request signing"):
 *   - the path is given raw (unescaped) and encoded once here, byte by
 *     byte: A-Z a-z 0-9 - . _ ~ kept, '/' kept between segments, anything
 *     else %XX (uppercase hex; UTF-8 bytes one by one).  No normalisation
 *     of "//" or "." segments and no double encoding, unlike other
 *     services;
 *   - query keys and values are encoded the same way but with '/' encoded
 *     too, then sorted by encoded key, then encoded value; a parameter
 *     without a value is signed as `key=`;
 *   - header names are lowercased, values trimmed with inner runs of
 *     whitespace collapsed to one space, repeated names joined with ',';
 *   - host, x-amz-date and x-amz-content-sha256 are always signed, and
 *     x-amz-security-token when a session token is in use.
 *
 * Secrets: the secret key only ever feeds HMAC; it and every derived key
 * are wiped from the stack before returning.  Nothing here logs.  A
 * struct sigv4_auth holds the signature and, with temporary credentials,
 * the session token: log it only through sigv4_auth_describe(), which
 * redacts both.
 *
 * Functions return 0 or -errno (-EINVAL for a malformed input, -ENOMEM,
 * -EIO when OpenSSL fails).  No global state: every function is safe to
 * call from any thread; a struct sigv4_auth belongs to its caller.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

/* "20130524T000000Z": ISO 8601 basic format, UTC. */
#define SIGV4_AMZ_DATE_LEN 16
/* Lowercase hex of a SHA-256 digest or of an HMAC-SHA256. */
#define SIGV4_HEX_LEN 64
/* The payload hash that tells S3 the body is not covered by the signature
 * (only sensible over TLS, which protects the body in transit). */
#define SIGV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"
/* SHA-256 of the empty string: the payload hash of a request with no body. */
#define SIGV4_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* Longest secret access key accepted (AWS's are 40 characters). */
#define SIGV4_SECRET_MAX 1024
/* S3 object keys are at most 1024 bytes of UTF-8; a bucket name at most 63. */
#define SIGV4_KEY_MAX 1024
#define SIGV4_BUCKET_MAX 63
/* Host header value, "bucket.host:port" included (a DNS name is <= 253). */
#define SIGV4_HOST_MAX 320
/* Raw request path: '/' bucket '/' key, NUL. */
#define SIGV4_PATH_MAX (2 + SIGV4_BUCKET_MAX + 1 + SIGV4_KEY_MAX + 1)
/* Headers sigv4_sign() adds: host, x-amz-content-sha256, x-amz-date,
 * x-amz-security-token. */
#define SIGV4_AUTH_HEADERS_MAX 4
/* Bounds on a request description, so a caller bug cannot make the signer
 * build an unbounded string. */
#define SIGV4_PARAMS_MAX 64
#define SIGV4_HEADERS_MAX 64

/* One query parameter, raw (unescaped).  value NULL or "" is signed as
 * "key="; see sigv4_url() for how the two differ on the wire. */
struct sigv4_param {
        const char *key;
        const char *value;
};

/* One HTTP header as it will be sent.  Name in any case (token characters
 * only); value without CR or LF. */
struct sigv4_header {
        const char *name;
        const char *value;
};

/* What is being sent.  All pointers are borrowed for the duration of the
 * call only. */
struct sigv4_request {
        const char *method;     /* "GET", "PUT", "POST", "HEAD", "DELETE" */
        const char *host;       /* Host header value: "bucket.s3.amazonaws.com",
                                 * "127.0.0.1:7480" (struct sigv4_address) */
        const char *path;       /* raw, unescaped, starts with '/':
                                 * "/bucket/jobs/a b/ü.bin" */
        const struct sigv4_param *params; /* nparams entries, any order */
        size_t nparams;
        const struct sigv4_header *headers; /* extra headers to sign and send
                                             * (range, content-type, ...) */
        size_t nheaders;
        const char *payload_hash; /* 64 lowercase hex (sigv4_sha256_hex of the
                                   * body) or SIGV4_UNSIGNED_PAYLOAD */
        const char *amz_date;     /* SIGV4_AMZ_DATE_LEN chars, UTC; passed in so
                                   * that signing is deterministic */
};

/* Who signs, and for which scope.  Borrowed for the duration of the call. */
struct sigv4_key {
        const char *access_key_id;     /* printable, no space, '/' or ',' */
        const char *secret_access_key; /* non-empty, <= SIGV4_SECRET_MAX */
        const char *session_token;     /* NULL unless temporary credentials */
        const char *region;            /* "us-east-1"; what the store expects */
        const char *service;           /* "s3" */
};

/* The result of signing: send every headers[] entry, then
 * "Authorization: <authorization>", plus the caller's own request headers
 * exactly as described (they were signed).  Owned by the caller; free with
 * sigv4_auth_free(), which wipes it. */
struct sigv4_auth {
        char *authorization;  /* "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=..." */
        struct sigv4_header headers[SIGV4_AUTH_HEADERS_MAX]; /* lowercase names */
        size_t nheaders;
        char *signed_headers; /* "host;range;x-amz-content-sha256;x-amz-date" */
        char signature[SIGV4_HEX_LEN + 1];
        /* The intermediate strings, for tests and for comparing with the
         * <CanonicalRequest> a store returns with SignatureDoesNotMatch.  The
         * canonical request contains the session token when there is one:
         * never log it verbatim. */
        char *canonical_request;
        char *string_to_sign;
};

/* Sign an S3 request.  Adds and signs host (req->host),
 * x-amz-content-sha256 (req->payload_hash), x-amz-date (req->amz_date) and,
 * when key->session_token is set, x-amz-security-token; req->headers must
 * not contain any of those nor Authorization (-EINVAL: they would be
 * signed twice).  On success *out is a new struct sigv4_auth.
 * -EINVAL: a malformed method, host, path, parameter, header, payload hash,
 * date, key or scope; -ENOMEM; -EIO (OpenSSL). */
int sigv4_sign(struct sigv4_auth **out, const struct sigv4_request *req,
               const struct sigv4_key *key);

/* Sign exactly req->headers and nothing else: no header is added,
 * req->host is ignored, and key->session_token must be NULL (put an
 * x-amz-security-token header in req->headers instead).  This is plain
 * SigV4, for AWS's generic test suite and for services other than S3; the
 * S3 client must use sigv4_sign(), because S3 rejects a request whose
 * x-amz-content-sha256 is not signed.  out->headers is empty. */
int sigv4_sign_raw(struct sigv4_auth **out, const struct sigv4_request *req,
                   const struct sigv4_key *key);

/* Free a, wiping it first; accepts NULL; returns NULL. */
struct sigv4_auth *sigv4_auth_free(struct sigv4_auth *a);

/* Write a one-line description of a for a log or an error message into buf
 * (always NUL-terminated when size > 0): the access key id masked to its
 * last four characters, the scope and the signed header names; signature
 * and session token never appear.  Returns the length it wanted, like
 * snprintf. */
int sigv4_auth_describe(const struct sigv4_auth *a, char *buf, size_t size);

/* out = lowercase hex SHA-256 of buf[0..len).  0 or -EIO. */
int sigv4_sha256_hex(const void *buf, size_t len, char out[SIGV4_HEX_LEN + 1]);

/* Format t (seconds since the epoch) as an x-amz-date.  0 or -EINVAL
 * (out of range). */
int sigv4_amz_date(time_t t, char out[SIGV4_AMZ_DATE_LEN + 1]);

/* *out = the S3-encoded form of a raw path ('/' kept), as signed and as it
 * must appear in the request line.  -EINVAL unless path starts with '/'. */
int sigv4_canonical_uri(char **out, const char *path);

/* *out = the canonical query string: encoded, sorted, "k=v" joined by
 * '&' ("" for no parameters).  -EINVAL for an empty or NULL key. */
int sigv4_canonical_query(char **out, const struct sigv4_param *params, size_t nparams);

/* ---- addressing ---- */

enum sigv4_addressing {
        SIGV4_PATH_STYLE,     /* https://endpoint/bucket/key: works with any
                               * endpoint, IP addresses and dotted buckets */
        SIGV4_VIRTUAL_HOSTED, /* https://bucket.endpoint/key: AWS's default */
};

/* A parsed endpoint URL. */
struct sigv4_endpoint {
        bool tls;                   /* https; false only for an explicit http:// */
        bool host_is_ip;            /* an IPv4 or [IPv6] literal */
        char host[SIGV4_HOST_MAX];  /* lowercase name or address, with ":port"
                                     * unless it is the scheme's default */
};

/* Parse "https://s3.eu-west-1.amazonaws.com", "http://127.0.0.1:7480",
 * "http://[::1]:9000" or a bare "host[:port]" (taken as https: TLS is used
 * unless the scheme is explicitly http).  Rejected with -EINVAL and a
 * message in err (always NUL-terminated when errsize > 0): another scheme,
 * user:password@ (the message never repeats the URL then), a path other
 * than "/", a query or fragment, a bad host or port. */
int sigv4_endpoint_parse(struct sigv4_endpoint *ep, const char *url, char *err, size_t errsize);

/* 0 if bucket follows S3's naming rules: 3-63 characters of lowercase
 * letters, digits, '.' and '-', beginning and ending with a letter or
 * digit, no "..", not shaped like an IPv4 address.  -EINVAL otherwise. */
int sigv4_bucket_validate(const char *bucket);

/* Where a request goes: the Host header and the raw path to sign. */
struct sigv4_address {
        char host[SIGV4_HOST_MAX];
        char path[SIGV4_PATH_MAX];
};

/* Address object `key` (NULL or "" for a bucket-level request) in bucket.
 * Path style: host = endpoint, path = "/bucket/key" ("/bucket").  Virtual
 * hosted: host = "bucket.endpoint", path = "/key" ("/").
 * -EINVAL: invalid bucket; virtual-hosted style with an IP endpoint, or
 * with a dotted bucket over TLS (the certificate's wildcard cannot match;
 * use path style); a key with a "." or ".." segment (HTTP clients and
 * proxies remove those, so the object named would not be the one signed).
 * -ENAMETOOLONG: key over SIGV4_KEY_MAX bytes or host too long. */
int sigv4_address_build(struct sigv4_address *out, const struct sigv4_endpoint *ep,
                        enum sigv4_addressing style, const char *bucket, const char *key);

/* *out = the URL to request: scheme, addr->host, the encoded path and the
 * query string.  The query uses the signed encoding and order; a parameter
 * whose value is NULL is written bare ("?uploads", as SDKs send it), one
 * whose value is "" as "key=" — S3 signs both as "key=".  -EINVAL, -ENOMEM. */
int sigv4_url(char **out, const struct sigv4_endpoint *ep, const struct sigv4_address *addr,
              const struct sigv4_param *params, size_t nparams);
