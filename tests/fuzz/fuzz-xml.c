/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the XML reader (daemon/remote/xml.h) and the S3 documents
 * made of it (s3_parse_response(), daemon/remote/s3.h).  Every answer of
 * the object store goes through them, so a store or anything on the path
 * to it chooses these bytes.  Beyond "does not crash" this checks:
 *  - the reader returns only 0, -EPROTO, -ENOMEM or the callback's error;
 *  - its events are well nested: each OPEN one level deeper than the open
 *    path, at most XML_DEPTH_MAX; each CLOSE names the innermost open
 *    element; names are 1..XML_NAME_MAX bytes of name characters;
 *  - text comes only with a CLOSE, is NUL-terminated at len (no NUL
 *    inside), at most XML_TEXT_MAX bytes, and valid UTF-8 (checked here by
 *    an independent decoder);
 *  - a document that reads (0) had exactly one root and closed it;
 *  - a callback's error stops the parse at once and is what comes back;
 *  - a document that reads, written out again from its events (names as
 *    tags, leaf text with &amp; &lt; &gt; escaped), reads again and gives
 *    the very same events: what the reader decodes, it decodes one way;
 *  - s3_parse_response() for every operation, with and without output
 *    lists, returns only documented errors, fills bounded NUL-terminated
 *    strings, never more list entries than the capacity, and the fields a
 *    success document requires.
 * abort() on a violation.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "remote/s3.h"
#include "remote/xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAPACITY 4

/* A growing byte string (open_memstream would do, but this is simpler to
 * compare and cannot fail half-way unnoticed). */
struct bytes {
        char *data;
        size_t len, cap;
        bool failed;
};

static void bytes_add(struct bytes *b, const void *p, size_t n) {
        if (b->failed)
                return;
        if (b->len + n > b->cap) {
                size_t cap = (b->len + n) * 2;
                char *d = realloc(b->data, cap);
                if (!d) {
                        b->failed = true;
                        return;
                }
                b->data = d;
                b->cap = cap;
        }
        memcpy(b->data + b->len, p, n);
        b->len += n;
}

static void bytes_str(struct bytes *b, const char *s) {
        bytes_add(b, s, strlen(s));
}

struct events {
        char path[XML_DEPTH_MAX][XML_NAME_MAX + 1];
        unsigned depth;
        unsigned roots;
        unsigned long count;
        unsigned long stop_at; /* 0: never stop */
        struct bytes *log;     /* every event, NULL: not kept */
        struct bytes *doc;     /* the document written from them, NULL: none */
};

/* Record one event in e->log and write it out to e->doc. */
static void record(struct events *e, enum xml_event ev, unsigned depth, const char *name,
                   const char *text, size_t len) {
        char head[2] = { (char)ev, (char)depth };

        if (e->log) {
                bytes_add(e->log, head, sizeof(head));
                bytes_add(e->log, name, strlen(name) + 1);
                bytes_add(e->log, text ? "T" : "-", 1);
                bytes_add(e->log, &len, sizeof(len));
                if (text)
                        bytes_add(e->log, text, len);
        }
        if (!e->doc)
                return;
        if (ev == XML_OPEN) {
                bytes_str(e->doc, "<");
                bytes_str(e->doc, name);
                bytes_str(e->doc, ">");
                return;
        }
        for (size_t i = 0; text && i < len; i++) {
                const char *esc = text[i] == '&' ? "&amp;" : text[i] == '<' ? "&lt;"
                                  : text[i] == '>' ? "&gt;" : NULL;
                if (esc)
                        bytes_str(e->doc, esc);
                else
                        bytes_add(e->doc, &text[i], 1);
        }
        bytes_str(e->doc, "</");
        bytes_str(e->doc, name);
        bytes_str(e->doc, ">");
}

static bool name_char(char ch, bool first) {
        if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || ch == '_' || ch == ':')
                return true;
        return !first && ((ch >= '0' && ch <= '9') || ch == '-' || ch == '.');
}

/* Independent of the reader's own check: well-formed UTF-8 of Unicode
 * scalar values, no overlong forms, no surrogates, no U+FFFE/U+FFFF. */
static bool utf8_ok(const unsigned char *s, size_t n) {
        for (size_t i = 0; i < n;) {
                uint32_t cp;
                size_t len;
                if (s[i] < 0x80) {
                        i++;
                        continue;
                }
                if ((s[i] & 0xE0) == 0xC0)
                        len = 2, cp = s[i] & 0x1Fu;
                else if ((s[i] & 0xF0) == 0xE0)
                        len = 3, cp = s[i] & 0x0Fu;
                else if ((s[i] & 0xF8) == 0xF0)
                        len = 4, cp = s[i] & 0x07u;
                else
                        return false;
                if (n - i < len)
                        return false;
                for (size_t k = 1; k < len; k++) {
                        if ((s[i + k] & 0xC0) != 0x80)
                                return false;
                        cp = cp << 6 | (s[i + k] & 0x3Fu);
                }
                static const uint32_t least[] = { 0, 0, 0x80, 0x800, 0x10000 };
                if (cp < least[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) ||
                    cp == 0xFFFE || cp == 0xFFFF)
                        return false;
                i += len;
        }
        return true;
}

static int on_element(void *userdata, enum xml_event ev, unsigned depth, const char *name,
                      const char *text, size_t len) {
        struct events *e = userdata;
        size_t nlen = strlen(name);

        if (nlen == 0 || nlen > XML_NAME_MAX)
                abort();
        for (size_t i = 0; i < nlen; i++)
                if (!name_char(name[i], i == 0))
                        abort();
        if (ev == XML_OPEN) {
                if (text || len || depth != e->depth + 1 || depth > XML_DEPTH_MAX)
                        abort();
                if (depth == 1 && ++e->roots > 1)
                        abort();
                memcpy(e->path[e->depth], name, nlen + 1);
                e->depth++;
        } else if (ev == XML_CLOSE) {
                if (depth != e->depth || depth == 0 || strcmp(name, e->path[depth - 1]) != 0)
                        abort();
                if (!text && len)
                        abort();
                if (text && (strlen(text) != len || len > XML_TEXT_MAX ||
                             !utf8_ok((const unsigned char *)text, len)))
                        abort();
                e->depth--;
        } else {
                abort();
        }
        record(e, ev, depth, name, text, len);
        if (++e->count == e->stop_at)
                return -ECANCELED;
        return 0;
}

/* The document written out from a read's events reads to the same events. */
static void check_rewritten(const struct bytes *log, const struct bytes *doc) {
        struct bytes log2 = { 0 };
        struct events e = { .log = &log2 };

        if (log->failed || doc->failed)
                return;
        int r = xml_parse(doc->data, doc->len, on_element, &e);
        if (r == -ENOMEM || log2.failed) {
                free(log2.data);
                return;
        }
        if (r != 0 || log2.len != log->len || memcmp(log2.data, log->data, log->len) != 0)
                abort();
        free(log2.data);
}

static void check_reader(const uint8_t *data, size_t size) {
        struct bytes log = { 0 }, doc = { 0 };
        struct events e = { .log = &log, .doc = &doc };
        int r = xml_parse((const char *)data, size, on_element, &e);

        if (r == 0) {
                if (e.depth != 0 || e.roots != 1)
                        abort();
                check_rewritten(&log, &doc);
        } else if (r != -EPROTO && r != -ENOMEM) {
                abort();
        }
        free(log.data);
        free(doc.data);
        if (e.count == 0)
                return;

        /* The same input, stopped half-way by the callback. */
        unsigned long seen = e.count;
        e = (struct events){ .stop_at = (seen + 1) / 2 };
        r = xml_parse((const char *)data, size, on_element, &e);
        if (r != -ECANCELED || e.count != e.stop_at)
                abort();
}

static void bounded(const char *field, size_t size) {
        if (!memchr(field, 0, size))
                abort();
}

static void check_result(const struct s3_result *res) {
        bounded(res->etag, sizeof(res->etag));
        bounded(res->upload_id, sizeof(res->upload_id));
        bounded(res->code, sizeof(res->code));
        bounded(res->message, sizeof(res->message));
        bounded(res->request_id, sizeof(res->request_id));
        /* What came from the store and goes to a log has no control characters. */
        for (const char *f[] = { res->code, res->message, res->request_id }, **p = f;
             p < f + 3; p++)
                for (const unsigned char *c = (const unsigned char *)*p; *c; c++)
                        if (*c < 0x20 || *c == 0x7f)
                                abort();
}

static void check_documents(const uint8_t *data, size_t size) {
        static struct s3_part parts[CAPACITY];
        static struct s3_object objects[CAPACITY];
        static struct s3_prefix prefixes[CAPACITY];
        static struct s3_result res;
        static struct s3_object_list ol;

        for (int op = 0; op < S3_OP_COUNT; op++) {
                for (int with_list = 0; with_list < 3; with_list++) {
                        struct s3_part_list pl = { .parts = parts, .capacity = CAPACITY };
                        void *list = NULL;

                        ol = (struct s3_object_list){ .objects = objects, .capacity = CAPACITY,
                                                      .prefixes = with_list == 2 ? prefixes : NULL };
                        if (with_list && op == S3_OP_LIST_PARTS)
                                list = &pl;
                        else if (with_list && op == S3_OP_LIST_OBJECTS)
                                list = &ol;
                        else if (with_list)
                                continue;
                        memset(&res, 0, sizeof(res));
                        int r = s3_parse_response((enum s3_op)op, (const char *)data, size, &res,
                                                  list);
                        check_result(&res);
                        if (r == -EREMOTEIO) {
                                if (!res.code[0])
                                        abort(); /* an <Error> is one with a Code */
                                continue;
                        }
                        if (r == -EPROTO || r == -ENOMEM)
                                continue;
                        if (r != 0)
                                abort();
                        if (op == S3_OP_CREATE_MULTIPART_UPLOAD && !res.upload_id[0])
                                abort();
                        if (list == &pl) {
                                if (pl.count > pl.capacity)
                                        abort();
                                for (size_t i = 0; i < pl.count; i++) {
                                        if (parts[i].number < 1 ||
                                            parts[i].number > S3_PART_NUMBER_MAX ||
                                            !parts[i].etag[0])
                                                abort();
                                        bounded(parts[i].etag, sizeof(parts[i].etag));
                                }
                        }
                        if (list == &ol) {
                                if (ol.count + ol.prefix_count > ol.capacity ||
                                    (!ol.prefixes && ol.prefix_count))
                                        abort();
                                bounded(ol.next_token, sizeof(ol.next_token));
                                if (ol.truncated && !ol.next_token[0])
                                        abort();
                                for (size_t i = 0; i < ol.count; i++) {
                                        bounded(objects[i].key, sizeof(objects[i].key));
                                        bounded(objects[i].etag, sizeof(objects[i].etag));
                                        if (!objects[i].key[0])
                                                abort();
                                }
                                for (size_t i = 0; i < ol.prefix_count; i++) {
                                        bounded(prefixes[i].prefix, sizeof(prefixes[i].prefix));
                                        if (!prefixes[i].prefix[0])
                                                abort();
                                }
                        }
                }
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        check_reader(data, size);
        check_documents(data, size);
        return 0;
}
