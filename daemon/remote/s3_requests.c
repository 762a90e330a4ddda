/* SPDX-License-Identifier: MIT */
/*
 * s3_requests — what each operation of s3.h sends: the s3_*() start
 * calls check their arguments and fill in a struct s3_transfer (key,
 * upload id, the query parameters SigV4 signs, the body: fd or memory,
 * its payload hash and Content-MD5, the XML body of
 * CompleteMultipartUpload with its escapes, where a GET lands, where a
 * list page goes), then hand it to the schedule (s3_schedule.c).
 *
 * Separate because it is the client's vocabulary — which S3 operation
 * is which method, parameters and body — and knows nothing of libcurl,
 * the loop or when a request runs: adding an operation touches this file
 * (and its document in s3_documents.c), nothing else.
 */
#include <errno.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote/s3_internal.h"
#include "util/cleanup.h"

int s3_md5_base64(const unsigned char md5[MD5_LEN], char out[MD5_BASE64_LEN + 1]) {
        return EVP_EncodeBlock((unsigned char *)out, md5, MD5_LEN) == MD5_BASE64_LEN ? 0 : -EIO;
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
                        if (s3_md5_base64(md5, t->content_md5) < 0)
                                return -EIO;
                        t->has_md5 = true;
                }
        }
        if (body->md5) {
                if (s3_md5_base64(body->md5, t->content_md5) < 0)
                        return -EIO;
                t->has_md5 = true;
        }
        return 0;
}

/* Build the URL, then hand the transfer to the schedule: from here on
 * the request belongs to the client. */
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
        s3_schedule_submit(t);
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
        _cleanup_(s3_transfer_freep) struct s3_transfer *t = NULL;
        int r;

        if (flags & ~S3_PUT_IF_NONE_MATCH)
                return -EINVAL;
        r = s3_transfer_new(&t, c, req, S3_OP_PUT_OBJECT, "PUT", key, true);
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
        _cleanup_(s3_transfer_freep) struct s3_transfer *t = NULL;
        int r;

        if ((!buf && len) || (ranged && (len == 0 || offset > UINT64_MAX - len)))
                return -EINVAL;
        r = s3_transfer_new(&t, c, req, S3_OP_GET_OBJECT, "GET", key, true);
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
        _cleanup_(s3_transfer_freep) struct s3_transfer *t = NULL;
        int r = s3_transfer_new(&t, c, req, S3_OP_HEAD_OBJECT, "HEAD", key, true);
        if (r < 0)
                return r;
        SUBMIT(t);
}

int s3_delete_object(struct s3_client *c, struct s3_request *req, const char *key) {
        _cleanup_(s3_transfer_freep) struct s3_transfer *t = NULL;
        int r = s3_transfer_new(&t, c, req, S3_OP_DELETE_OBJECT, "DELETE", key, true);
        if (r < 0)
                return r;
        SUBMIT(t);
}

int s3_create_bucket(struct s3_client *c, struct s3_request *req) {
        _cleanup_(s3_transfer_freep) struct s3_transfer *t = NULL;
        int r = s3_transfer_new(&t, c, req, S3_OP_CREATE_BUCKET, "PUT", NULL, false);
        if (r < 0)
                return r;
        /* an empty PUT: no CreateBucketConfiguration, the store's default
         * location (radosgw refuses any name but its zonegroup's) */
        t->has_body = true;
        SUBMIT(t);
}

int s3_create_multipart_upload(struct s3_client *c, struct s3_request *req, const char *key) {
        _cleanup_(s3_transfer_freep) struct s3_transfer *t = NULL;
        int r = s3_transfer_new(&t, c, req, S3_OP_CREATE_MULTIPART_UPLOAD, "POST", key, true);
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
        _cleanup_(s3_transfer_freep) struct s3_transfer *t = NULL;
        int r;

        if (part_number < 1 || part_number > S3_PART_NUMBER_MAX)
                return -EINVAL;
        r = s3_transfer_new(&t, c, req, S3_OP_UPLOAD_PART, "PUT", key, true);
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
        _cleanup_(s3_transfer_freep) struct s3_transfer *t = NULL;
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
        r = s3_transfer_new(&t, c, req, S3_OP_COMPLETE_MULTIPART_UPLOAD, "POST", key, true);
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
        _cleanup_(s3_transfer_freep) struct s3_transfer *t = NULL;
        int r = s3_transfer_new(&t, c, req, S3_OP_ABORT_MULTIPART_UPLOAD, "DELETE", key, true);
        if (r < 0)
                return r;
        r = upload_id_set(t, upload_id);
        if (r < 0)
                return r;
        SUBMIT(t);
}

int s3_list_parts(struct s3_client *c, struct s3_request *req, const char *key,
                  const char *upload_id, unsigned marker, struct s3_part_list *out) {
        _cleanup_(s3_transfer_freep) struct s3_transfer *t = NULL;
        int r;

        if (!out || !out->parts || out->capacity < 1 || out->capacity > S3_LIST_MAX)
                return -EINVAL;
        r = s3_transfer_new(&t, c, req, S3_OP_LIST_PARTS, "GET", key, true);
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
        _cleanup_(s3_transfer_freep) struct s3_transfer *t = NULL;
        int r;

        if (!out || !out->objects || out->capacity < 1 || out->capacity > S3_LIST_MAX)
                return -EINVAL;
        if (delimiter && (!*delimiter || !out->prefixes))
                return -EINVAL;
        if ((prefix && strlen(prefix) > S3_KEY_MAX) || (token && strlen(token) > S3_TOKEN_MAX) ||
            (delimiter && strlen(delimiter) > S3_KEY_MAX))
                return -ENAMETOOLONG;
        r = s3_transfer_new(&t, c, req, S3_OP_LIST_OBJECTS, "GET", NULL, false);
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

