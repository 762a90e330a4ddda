/* SPDX-License-Identifier: MIT */
/*
 * s3_documents — what the store's XML answers mean: s3_parse_response()
 * (s3.h) and the doc_* handlers that make an <Error>, a multipart result
 * or a list page of the elements the strict reader of remote/xml.h
 * reports, plus the bounded copies of the store's text that the curl glue
 * uses for headers too.
 *
 * Separate because it is the part that reads hostile bytes and is pure:
 * no client, no libcurl, no loop.  The fuzz target fuzz-xml instruments
 * this file and xml.c alone.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "remote/s3_internal.h"
#include "remote/xml.h"

/* ---- text from the store ---- */

int s3_copy_bounded(char *dst, size_t cap, const char *src, size_t len) {
        if (len >= cap)
                return -EPROTO;
        memcpy(dst, src, len);
        dst[len] = 0;
        return 0;
}

void s3_copy_printable(char *dst, size_t cap, const char *src, size_t len) {
        size_t n = len < cap - 1 ? len : cap - 1;
        for (size_t i = 0; i < n; i++) {
                unsigned char ch = (unsigned char)src[i];
                dst[i] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
        }
        dst[n] = 0;
}

int s3_parse_u64(const char *s, size_t len, uint64_t *out) {
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
                s3_copy_printable(d->res->code, sizeof(d->res->code), text, len);
                d->have_code = true;
        } else if (strcmp(name, "Message") == 0) {
                s3_copy_printable(d->res->message, sizeof(d->res->message), text, len);
        } else if (strcmp(name, "RequestId") == 0 && !d->res->request_id[0]) {
                s3_copy_printable(d->res->request_id, sizeof(d->res->request_id), text, len);
        }
        return 0;
}

static int doc_part_field(struct doc *d, const char *name, const char *text, size_t len) {
        struct s3_part *p = &d->parts->parts[d->parts->count];
        uint64_t v;

        if (strcmp(name, "PartNumber") == 0) {
                if (s3_parse_u64(text, len, &v) < 0 || v < 1 || v > S3_PART_NUMBER_MAX)
                        return -EPROTO;
                p->number = (unsigned)v;
                d->have_number = true;
        } else if (strcmp(name, "ETag") == 0) {
                if (len == 0 || s3_copy_bounded(p->etag, sizeof(p->etag), text, len) < 0)
                        return -EPROTO;
                d->have_entry_etag = true;
        } else if (strcmp(name, "Size") == 0) {
                if (s3_parse_u64(text, len, &p->size) < 0)
                        return -EPROTO;
                d->have_size = true;
        }
        return 0;
}

static int doc_object_field(struct doc *d, const char *name, const char *text, size_t len) {
        struct s3_object *o = &d->objects->objects[d->objects->count];

        if (strcmp(name, "Key") == 0) {
                if (len == 0 || s3_copy_bounded(o->key, sizeof(o->key), text, len) < 0)
                        return -EPROTO;
                d->have_key = true;
        } else if (strcmp(name, "ETag") == 0) {
                if (s3_copy_bounded(o->etag, sizeof(o->etag), text, len) < 0)
                        return -EPROTO;
        } else if (strcmp(name, "Size") == 0) {
                if (s3_parse_u64(text, len, &o->size) < 0)
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
                        if (len == 0 || s3_copy_bounded(d->res->upload_id, sizeof(d->res->upload_id),
                                                     text, len) < 0)
                                return -EPROTO;
                        d->have_upload_id = true;
                }
                return 0;
        case S3_OP_COMPLETE_MULTIPART_UPLOAD:
                if (depth == 2 && ev == XML_CLOSE && text && strcmp(name, "ETag") == 0) {
                        if (s3_copy_bounded(d->res->etag, sizeof(d->res->etag), text, len) < 0)
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
                                if (s3_parse_u64(text, len, &v) < 0 || v > S3_PART_NUMBER_MAX)
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
                        if (len == 0 || s3_copy_bounded(p->prefix, sizeof(p->prefix), text, len) < 0)
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
                                if (s3_copy_bounded(d->objects->next_token,
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
