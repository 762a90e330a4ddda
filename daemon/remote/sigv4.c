/* SPDX-License-Identifier: MIT */
/*
 * sigv4 — see sigv4.h for the contract and the S3 encoding rules.
 *
 * Every canonical string is assembled in a small growable buffer that
 * remembers running out of memory, so the building code reads as the
 * specification does (method, '\n', URI, '\n', ...) and the single check
 * sits at the end.  Buffers that held a secret-derived byte or the session
 * token are wiped before they are freed.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "remote/sigv4.h"
#include "util/cleanup.h"

#define ALGORITHM "AWS4-HMAC-SHA256"
#define SCOPE_TERMINATOR "aws4_request"
#define SHA256_LEN 32
#define SESSION_TOKEN_MAX 16384

/* ---- growable string ---- */

struct buf {
        char *p;
        size_t len, cap;
        bool oom;
};

static void buf_reserve(struct buf *b, size_t extra) {
        if (b->oom)
                return;
        if (extra > SIZE_MAX / 2 - b->len) {
                b->oom = true;
                return;
        }
        size_t need = b->len + extra + 1;
        if (need <= b->cap)
                return;
        size_t cap = MAX(need, MAX(b->cap * 2, (size_t)128));
        char *p = malloc(cap);
        if (!p) {
                b->oom = true;
                return;
        }
        /* Copy instead of realloc so that the old block can be wiped: it
         * may hold the session token. */
        if (b->p) {
                memcpy(p, b->p, b->len + 1);
                explicit_bzero(b->p, b->cap);
                free(b->p);
        } else {
                p[0] = 0;
        }
        b->p = p;
        b->cap = cap;
}

static void buf_add(struct buf *b, const char *s, size_t n) {
        buf_reserve(b, n);
        if (b->oom)
                return;
        memcpy(b->p + b->len, s, n);
        b->len += n;
        b->p[b->len] = 0;
}

static void buf_adds(struct buf *b, const char *s) {
        buf_add(b, s, strlen(s));
}

static void buf_addc(struct buf *b, char c) {
        buf_add(b, &c, 1);
}

static bool is_unreserved(unsigned char c) {
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
               c == '-' || c == '.' || c == '_' || c == '~';
}

/* AWS's UriEncode(): every byte but the unreserved ones (and '/' in a
 * path) as %XX, uppercase hex. */
static void buf_add_uri_encoded(struct buf *b, const char *s, bool keep_slash) {
        static const char hex[] = "0123456789ABCDEF";
        for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
                if (is_unreserved(*c) || (keep_slash && *c == '/')) {
                        buf_addc(b, (char)*c);
                } else {
                        char esc[3] = { '%', hex[*c >> 4], hex[*c & 15] };
                        buf_add(b, esc, sizeof(esc));
                }
        }
}

/* The finished string (never NULL on success), or NULL after an allocation
 * failure; either way b no longer owns it. */
static char *buf_take(struct buf *b) {
        if (!b->oom && !b->p)
                buf_reserve(b, 0);
        if (b->oom) {
                if (b->p)
                        explicit_bzero(b->p, b->cap);
                free(b->p);
                *b = (struct buf){ 0 };
                return NULL;
        }
        char *p = b->p;
        *b = (struct buf){ 0 };
        return p;
}

static void buf_wipe(struct buf *b) {
        if (b->p) {
                explicit_bzero(b->p, b->cap);
                free(b->p);
        }
        *b = (struct buf){ 0 };
}

/* Free a string that may hold the session token or a signature. */
static void wipe_free(char *s) {
        if (s) {
                explicit_bzero(s, strlen(s));
                free(s);
        }
}

static void wipe_freep(char **s) {
        wipe_free(*s);
}

/* ---- crypto ---- */

static void hex_encode(const unsigned char *in, size_t len, char *out) {
        static const char hex[] = "0123456789abcdef";
        for (size_t i = 0; i < len; i++) {
                out[2 * i] = hex[in[i] >> 4];
                out[2 * i + 1] = hex[in[i] & 15];
        }
        out[2 * len] = 0;
}

int sigv4_sha256_hex(const void *buf, size_t len, char out[SIGV4_HEX_LEN + 1]) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int mdlen = 0;
        if (!buf && len)
                return -EINVAL;
        if (EVP_Digest(buf ? buf : "", len, md, &mdlen, EVP_sha256(), NULL) != 1 ||
            mdlen != SHA256_LEN)
                return -EIO;
        hex_encode(md, SHA256_LEN, out);
        return 0;
}

static int hmac_sha256(const void *key, size_t keylen, const void *data, size_t datalen,
                       unsigned char out[SHA256_LEN]) {
        size_t outlen = 0;
        if (!EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, key, keylen, data, datalen, out,
                       SHA256_LEN, &outlen) ||
            outlen != SHA256_LEN)
                return -EIO;
        return 0;
}

/* signature = hex(HMAC(kSigning, string_to_sign)), where
 * kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" secret, date), region), service),
 * "aws4_request").  Every key on the way is wiped. */
static int compute_signature(const char *secret, const char *date8, const char *region,
                             const char *service, const char *string_to_sign,
                             char out[SIGV4_HEX_LEN + 1]) {
        size_t slen = strlen(secret);
        /* On the stack, so that no heap block ever holds the secret. */
        char k_secret[4 + SIGV4_SECRET_MAX];
        /* Two buffers, so no HMAC reads its key from where it writes. */
        unsigned char k1[SHA256_LEN], k2[SHA256_LEN], sig[SHA256_LEN];
        int r;

        if (slen > SIGV4_SECRET_MAX)
                return -EINVAL;
        memcpy(k_secret, "AWS4", 4);
        memcpy(k_secret + 4, secret, slen);
        r = hmac_sha256(k_secret, 4 + slen, date8, 8, k1);
        explicit_bzero(k_secret, 4 + slen);
        if (r >= 0)
                r = hmac_sha256(k1, sizeof(k1), region, strlen(region), k2);
        if (r >= 0)
                r = hmac_sha256(k2, sizeof(k2), service, strlen(service), k1);
        if (r >= 0)
                r = hmac_sha256(k1, sizeof(k1), SCOPE_TERMINATOR, strlen(SCOPE_TERMINATOR), k2);
        if (r >= 0)
                r = hmac_sha256(k2, sizeof(k2), string_to_sign, strlen(string_to_sign), sig);
        if (r >= 0)
                hex_encode(sig, sizeof(sig), out);
        explicit_bzero(k1, sizeof(k1));
        explicit_bzero(k2, sizeof(k2));
        explicit_bzero(sig, sizeof(sig));
        return r;
}

/* ---- input checks ---- */

static bool method_valid(const char *m) {
        size_t n = m ? strlen(m) : 0;
        if (n == 0 || n > 16)
                return false;
        for (; *m; m++)
                if (*m < 'A' || *m > 'Z')
                        return false;
        return true;
}

static bool amz_date_valid(const char *d) {
        if (!d || strlen(d) != SIGV4_AMZ_DATE_LEN)
                return false;
        for (int i = 0; i < SIGV4_AMZ_DATE_LEN; i++) {
                if (i == 8) {
                        if (d[i] != 'T')
                                return false;
                } else if (i == 15) {
                        if (d[i] != 'Z')
                                return false;
                } else if (d[i] < '0' || d[i] > '9') {
                        return false;
                }
        }
        return true;
}

static bool payload_hash_valid(const char *h) {
        if (!h)
                return false;
        if (strcmp(h, SIGV4_UNSIGNED_PAYLOAD) == 0)
                return true;
        if (strlen(h) != SIGV4_HEX_LEN)
                return false;
        for (; *h; h++)
                if (!((*h >= '0' && *h <= '9') || (*h >= 'a' && *h <= 'f')))
                        return false;
        return true;
}

/* Printable ASCII without space; `forbidden` lists more bytes to refuse. */
static bool printable_token(const char *s, size_t max, const char *forbidden) {
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > max)
                return false;
        for (; *s; s++)
                if (*s < 0x21 || *s > 0x7e || strchr(forbidden, *s))
                        return false;
        return true;
}

/* Region and service are scope components: '/' would change the scope. */
static bool scope_part_valid(const char *s) {
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > 63)
                return false;
        for (; *s; s++)
                if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_')
                        return false;
        return true;
}

static bool key_valid(const struct sigv4_key *key) {
        if (!key)
                return false;
        /* '/' and ',' would be read as part of the Credential= syntax. */
        if (!printable_token(key->access_key_id, 128, "/,"))
                return false;
        if (!key->secret_access_key || !key->secret_access_key[0] ||
            strlen(key->secret_access_key) > SIGV4_SECRET_MAX)
                return false;
        for (const char *c = key->secret_access_key; *c; c++)
                if ((unsigned char)*c < 0x20 || *c == 0x7f)
                        return false;
        if (key->session_token && !printable_token(key->session_token, SESSION_TOKEN_MAX, ""))
                return false;
        return scope_part_valid(key->region) && scope_part_valid(key->service);
}

/* RFC 9110 token characters: what a header name may consist of. */
static bool is_tchar(unsigned char c) {
        return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool header_name_valid(const char *n) {
        if (!n || !*n || strlen(n) > 128)
                return false;
        for (; *n; n++)
                if (!is_tchar((unsigned char)*n))
                        return false;
        return true;
}

/* No control bytes but tab: a CR or LF would let a value inject headers. */
static bool header_value_valid(const char *v) {
        if (!v)
                return false;
        for (; *v; v++)
                if (((unsigned char)*v < 0x20 && *v != '\t') || *v == 0x7f)
                        return false;
        return true;
}

/* ---- canonical pieces ---- */

int sigv4_canonical_uri(char **out, const char *path) {
        _cleanup_(buf_wipe) struct buf b = { 0 };
        if (!path || path[0] != '/')
                return -EINVAL;
        buf_add_uri_encoded(&b, path, true);
        *out = buf_take(&b);
        return *out ? 0 : -ENOMEM;
}

struct query_pair {
        char *key, *value; /* encoded */
        bool bare;         /* value was NULL */
};

static int query_pair_cmp(const void *a, const void *b) {
        const struct query_pair *x = a, *y = b;
        int r = strcmp(x->key, y->key);
        return r ? r : strcmp(x->value, y->value);
}

/* Encode and sort; `bare_null` writes a NULL-valued parameter as "key"
 * (for a URL) instead of "key=" (what is signed). */
static int build_query(char **out, const struct sigv4_param *params, size_t nparams,
                       bool bare_null) {
        _cleanup_(buf_wipe) struct buf b = { 0 };
        struct query_pair *pairs = NULL;
        int r = 0;

        if (nparams > SIGV4_PARAMS_MAX)
                return -E2BIG;
        if (nparams && !params)
                return -EINVAL;
        if (nparams) {
                pairs = calloc(nparams, sizeof(*pairs));
                if (!pairs)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < nparams && r == 0; i++) {
                struct buf k = { 0 }, v = { 0 };
                if (!params[i].key || !params[i].key[0]) {
                        r = -EINVAL;
                        break;
                }
                buf_add_uri_encoded(&k, params[i].key, false);
                buf_add_uri_encoded(&v, params[i].value ? params[i].value : "", false);
                pairs[i].key = buf_take(&k);
                pairs[i].value = buf_take(&v);
                pairs[i].bare = !params[i].value;
                if (!pairs[i].key || !pairs[i].value)
                        r = -ENOMEM;
        }
        if (r == 0) {
                if (nparams)
                        qsort(pairs, nparams, sizeof(*pairs), query_pair_cmp);
                for (size_t i = 0; i < nparams; i++) {
                        if (i)
                                buf_addc(&b, '&');
                        buf_adds(&b, pairs[i].key);
                        if (!(bare_null && pairs[i].bare)) {
                                buf_addc(&b, '=');
                                buf_adds(&b, pairs[i].value);
                        }
                }
                *out = buf_take(&b);
                if (!*out)
                        r = -ENOMEM;
        }
        for (size_t i = 0; i < nparams; i++) {
                free(pairs[i].key);
                free(pairs[i].value);
        }
        free(pairs);
        return r;
}

int sigv4_canonical_query(char **out, const struct sigv4_param *params, size_t nparams) {
        return build_query(out, params, nparams, false);
}

struct canon_header {
        char *name;  /* lowercase */
        char *value; /* trimmed, whitespace runs collapsed */
        size_t order;
};

static int canon_header_cmp(const void *a, const void *b) {
        const struct canon_header *x = a, *y = b;
        int r = strcmp(x->name, y->name);
        if (r)
                return r;
        /* Repeated names keep the order given: their values are joined. */
        return x->order < y->order ? -1 : x->order > y->order;
}

static char *lowercase_dup(const char *s) {
        char *d = strdup(s);
        if (d)
                for (char *c = d; *c; c++)
                        *c = (char)tolower((unsigned char)*c);
        return d;
}

/* AWS's Trimall: strip leading and trailing whitespace, turn each inner
 * run of whitespace into one space. */
static char *trimall_dup(const char *v) {
        struct buf b = { 0 };
        bool pending_space = false;
        for (; *v; v++) {
                if (*v == ' ' || *v == '\t') {
                        pending_space = b.len > 0;
                        continue;
                }
                if (pending_space)
                        buf_addc(&b, ' ');
                pending_space = false;
                buf_addc(&b, *v);
        }
        return buf_take(&b);
}

/* Canonical headers block ("name:value\n" each, sorted, repeats joined)
 * and the SignedHeaders list. */
static int build_headers(char **canonical, char **signed_list, const struct sigv4_header *hs,
                         size_t n) {
        _cleanup_(buf_wipe) struct buf c = { 0 };
        _cleanup_(buf_wipe) struct buf s = { 0 };
        struct canon_header *ch;
        int r = 0;

        if (n == 0 || !hs)
                return -EINVAL; /* at least host is always signed */
        ch = calloc(n, sizeof(*ch));
        if (!ch)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                if (!header_name_valid(hs[i].name) || !header_value_valid(hs[i].value)) {
                        r = -EINVAL;
                        break;
                }
                ch[i].name = lowercase_dup(hs[i].name);
                ch[i].value = trimall_dup(hs[i].value);
                ch[i].order = i;
                if (!ch[i].name || !ch[i].value) {
                        r = -ENOMEM;
                        break;
                }
        }
        if (r == 0) {
                qsort(ch, n, sizeof(*ch), canon_header_cmp);
                for (size_t i = 0; i < n; i++) {
                        bool repeat = i > 0 && strcmp(ch[i].name, ch[i - 1].name) == 0;
                        if (repeat) {
                                buf_addc(&c, ',');
                        } else {
                                if (i > 0) {
                                        buf_addc(&c, '\n');
                                        buf_addc(&s, ';');
                                }
                                buf_adds(&c, ch[i].name);
                                buf_addc(&c, ':');
                                buf_adds(&s, ch[i].name);
                        }
                        buf_adds(&c, ch[i].value);
                }
                buf_addc(&c, '\n');
                *canonical = buf_take(&c);
                *signed_list = buf_take(&s);
                if (!*canonical || !*signed_list) {
                        wipe_free(*canonical);
                        free(*signed_list);
                        *canonical = *signed_list = NULL;
                        r = -ENOMEM;
                }
        }
        for (size_t i = 0; i < n; i++) {
                free(ch[i].name);
                wipe_free(ch[i].value);
        }
        free(ch);
        return r;
}

/* ---- signing ---- */

struct sigv4_auth *sigv4_auth_free(struct sigv4_auth *a) {
        if (!a)
                return NULL;
        wipe_free(a->authorization);
        wipe_free(a->signed_headers);
        wipe_free(a->canonical_request);
        wipe_free(a->string_to_sign);
        for (size_t i = 0; i < a->nheaders; i++)
                wipe_free((char *)a->headers[i].value);
        explicit_bzero(a, sizeof(*a));
        free(a);
        return NULL;
}

DEFINE_CLEANUP(struct sigv4_auth *, sigv4_auth_free)

/* Sign req with exactly the headers hs[0..n). */
static int sign_headers(struct sigv4_auth *a, const struct sigv4_request *req,
                        const struct sigv4_header *hs, size_t n, const struct sigv4_key *key) {
        _cleanup_free_ char *uri = NULL, *query = NULL;
        _cleanup_(wipe_freep) char *headers = NULL;
        _cleanup_(buf_wipe) struct buf b = { 0 };
        char creq_hash[SIGV4_HEX_LEN + 1], date8[9];
        int r;

        if (!method_valid(req->method) || !amz_date_valid(req->amz_date) ||
            !payload_hash_valid(req->payload_hash) || !key_valid(key))
                return -EINVAL;
        if (n > SIGV4_HEADERS_MAX + SIGV4_AUTH_HEADERS_MAX)
                return -E2BIG;
        r = sigv4_canonical_uri(&uri, req->path);
        if (r < 0)
                return r;
        r = sigv4_canonical_query(&query, req->params, req->nparams);
        if (r < 0)
                return r;
        r = build_headers(&headers, &a->signed_headers, hs, n);
        if (r < 0)
                return r;

        buf_adds(&b, req->method);
        buf_addc(&b, '\n');
        buf_adds(&b, uri);
        buf_addc(&b, '\n');
        buf_adds(&b, query);
        buf_addc(&b, '\n');
        buf_adds(&b, headers);
        buf_addc(&b, '\n');
        buf_adds(&b, a->signed_headers);
        buf_addc(&b, '\n');
        buf_adds(&b, req->payload_hash);
        a->canonical_request = buf_take(&b);
        if (!a->canonical_request)
                return -ENOMEM;

        r = sigv4_sha256_hex(a->canonical_request, strlen(a->canonical_request), creq_hash);
        if (r < 0)
                return r;
        memcpy(date8, req->amz_date, 8);
        date8[8] = 0;
        /* StringToSign: algorithm, time, scope, hash of the canonical request. */
        buf_adds(&b, ALGORITHM "\n");
        buf_adds(&b, req->amz_date);
        buf_addc(&b, '\n');
        buf_adds(&b, date8);
        buf_addc(&b, '/');
        buf_adds(&b, key->region);
        buf_addc(&b, '/');
        buf_adds(&b, key->service);
        buf_adds(&b, "/" SCOPE_TERMINATOR "\n");
        buf_adds(&b, creq_hash);
        a->string_to_sign = buf_take(&b);
        if (!a->string_to_sign)
                return -ENOMEM;

        r = compute_signature(key->secret_access_key, date8, key->region, key->service,
                              a->string_to_sign, a->signature);
        if (r < 0)
                return r;

        buf_adds(&b, ALGORITHM " Credential=");
        buf_adds(&b, key->access_key_id);
        buf_addc(&b, '/');
        buf_adds(&b, date8);
        buf_addc(&b, '/');
        buf_adds(&b, key->region);
        buf_addc(&b, '/');
        buf_adds(&b, key->service);
        buf_adds(&b, "/" SCOPE_TERMINATOR ", SignedHeaders=");
        buf_adds(&b, a->signed_headers);
        buf_adds(&b, ", Signature=");
        buf_adds(&b, a->signature);
        a->authorization = buf_take(&b);
        return a->authorization ? 0 : -ENOMEM;
}

int sigv4_sign_raw(struct sigv4_auth **out, const struct sigv4_request *req,
                   const struct sigv4_key *key) {
        _cleanup_(sigv4_auth_freep) struct sigv4_auth *a = NULL;
        int r;

        if (!req || !key || key->session_token)
                return -EINVAL;
        if (req->nheaders > SIGV4_HEADERS_MAX)
                return -E2BIG;
        a = calloc(1, sizeof(*a));
        if (!a)
                return -ENOMEM;
        r = sign_headers(a, req, req->headers, req->nheaders, key);
        if (r < 0)
                return r;
        *out = TAKE_PTR(a);
        return 0;
}

/* Headers sigv4_sign() owns; a caller's copy would be signed twice. */
static bool header_reserved(const char *name) {
        static const char *const reserved[] = {
                "host", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token",
                "authorization",
        };
        for (size_t i = 0; i < ARRAY_SIZE(reserved); i++)
                if (strcasecmp(name, reserved[i]) == 0)
                        return true;
        return false;
}

static int auth_add_header(struct sigv4_auth *a, const char *name, const char *value) {
        char *v = strdup(value);
        if (!v)
                return -ENOMEM;
        a->headers[a->nheaders++] = (struct sigv4_header){ .name = name, .value = v };
        return 0;
}

int sigv4_sign(struct sigv4_auth **out, const struct sigv4_request *req,
               const struct sigv4_key *key) {
        _cleanup_(sigv4_auth_freep) struct sigv4_auth *a = NULL;
        struct sigv4_header hs[SIGV4_HEADERS_MAX + SIGV4_AUTH_HEADERS_MAX];
        size_t n = 0;
        int r;

        if (!req || !key)
                return -EINVAL;
        if (req->nheaders > SIGV4_HEADERS_MAX)
                return -E2BIG;
        if (req->nheaders && !req->headers)
                return -EINVAL;
        if (!req->host || !req->host[0] || strlen(req->host) >= SIGV4_HOST_MAX ||
            !printable_token(req->host, SIGV4_HOST_MAX, ""))
                return -EINVAL;
        for (size_t i = 0; i < req->nheaders; i++) {
                if (!req->headers[i].name || header_reserved(req->headers[i].name))
                        return -EINVAL;
                hs[n++] = req->headers[i];
        }

        a = calloc(1, sizeof(*a));
        if (!a)
                return -ENOMEM;
        /* Validated inside sign_headers(); copied here for the caller. */
        if ((r = auth_add_header(a, "host", req->host)) < 0 ||
            (r = auth_add_header(a, "x-amz-content-sha256",
                                 req->payload_hash ? req->payload_hash : "")) < 0 ||
            (r = auth_add_header(a, "x-amz-date", req->amz_date ? req->amz_date : "")) < 0)
                return r;
        if (key->session_token && (r = auth_add_header(a, "x-amz-security-token",
                                                       key->session_token)) < 0)
                return r;
        for (size_t i = 0; i < a->nheaders; i++)
                hs[n++] = a->headers[i];

        r = sign_headers(a, req, hs, n, key);
        if (r < 0)
                return r;
        *out = TAKE_PTR(a);
        return 0;
}

int sigv4_auth_describe(const struct sigv4_auth *a, char *buf, size_t size) {
        static const char prefix[] = ALGORITHM " Credential=";
        const char *cred, *slash, *comma;
        size_t idlen;

        if (!a || !a->authorization || strncmp(a->authorization, prefix, strlen(prefix)) != 0)
                return snprintf(buf, size, "(no signature)");
        cred = a->authorization + strlen(prefix);
        slash = strchr(cred, '/');
        comma = slash ? strchr(slash, ',') : NULL;
        if (!comma)
                return snprintf(buf, size, "(malformed signature)");
        /* Access key ids are not secret, but they name an account: show
         * the tail only, as AWS's own tools do. */
        idlen = (size_t)(slash - cred);
        return snprintf(buf, size, "%s****%.*s%.*s, SignedHeaders=%s, Signature=<redacted>",
                        prefix, idlen > 4 ? 4 : 0, idlen > 4 ? slash - 4 : "",
                        (int)(comma - slash), slash,
                        a->signed_headers ? a->signed_headers : "");
}

int sigv4_amz_date(time_t t, char out[SIGV4_AMZ_DATE_LEN + 1]) {
        struct tm tm;
        if (!gmtime_r(&t, &tm) || tm.tm_year + 1900 < 0 || tm.tm_year + 1900 > 9999)
                return -EINVAL;
        if (strftime(out, SIGV4_AMZ_DATE_LEN + 1, "%Y%m%dT%H%M%SZ", &tm) != SIGV4_AMZ_DATE_LEN)
                return -EINVAL;
        return 0;
}

/* ---- addressing ---- */

static int fail(char *err, size_t errsize, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errsize, const char *fmt, ...) {
        if (err && errsize) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err, errsize, fmt, ap);
                va_end(ap);
        }
        return -EINVAL;
}

/* A DNS-ish host name: labels of letters, digits, '-' and '_' (container
 * and compose service names use '_'), separated by single dots. */
static bool hostname_valid(const char *h, size_t len) {
        size_t label = 0;
        if (len == 0 || len > 253)
                return false;
        for (size_t i = 0; i < len; i++) {
                char c = h[i];
                if (c == '.') {
                        if (label == 0)
                                return false;
                        label = 0;
                } else if (isalnum((unsigned char)c) || c == '-' || c == '_') {
                        if (++label > 63)
                                return false;
                } else {
                        return false;
                }
        }
        return label > 0;
}

int sigv4_endpoint_parse(struct sigv4_endpoint *ep, const char *url, char *err, size_t errsize) {
        char host[SIGV4_HOST_MAX];
        const char *s, *end, *port = NULL;
        size_t hostlen;
        unsigned long portnum = 0;
        bool tls = true, is_ip = false;

        if (err && errsize)
                err[0] = 0;
        if (!ep || !url || !*url)
                return fail(err, errsize, "endpoint URL is empty");
        s = url;
        if (strncasecmp(s, "https://", 8) == 0) {
                s += 8;
        } else if (strncasecmp(s, "http://", 7) == 0) {
                tls = false;
                s += 7;
        } else if (strstr(s, "://")) {
                return fail(err, errsize,
                            "endpoint URL: unsupported scheme (use https://, or http:// for a "
                            "store on a trusted network)");
        }
        end = s + strcspn(s, "/?#");
        if (memchr(s, '@', (size_t)(end - s)))
                /* Do not echo the URL: what precedes '@' is a password. */
                return fail(err, errsize,
                            "endpoint URL must not contain user:password@; configure "
                            "credentials separately");
        if (*end == '?' || *end == '#' || (*end == '/' && end[1] != 0))
                return fail(err, errsize,
                            "endpoint %s: must be scheme://host[:port] only, without a path, "
                            "query or fragment (the bucket is configured separately)", url);

        if (*s == '[') {
                const char *close = memchr(s, ']', (size_t)(end - s));
                char addr[INET6_ADDRSTRLEN];
                struct in6_addr in6;
                size_t alen = close ? (size_t)(close - s - 1) : 0;
                if (!close || alen == 0 || alen >= sizeof(addr))
                        return fail(err, errsize, "endpoint %s: bad IPv6 address", url);
                memcpy(addr, s + 1, alen);
                addr[alen] = 0;
                if (inet_pton(AF_INET6, addr, &in6) != 1)
                        return fail(err, errsize, "endpoint %s: bad IPv6 address", url);
                is_ip = true;
                hostlen = (size_t)(close - s) + 1;
                if (close + 1 < end) {
                        if (close[1] != ':')
                                return fail(err, errsize, "endpoint %s: bad host", url);
                        port = close + 2;
                }
        } else {
                const char *colon = memchr(s, ':', (size_t)(end - s));
                hostlen = colon ? (size_t)(colon - s) : (size_t)(end - s);
                if (colon)
                        port = colon + 1;
                if (!hostname_valid(s, hostlen))
                        return fail(err, errsize, "endpoint %s: bad host name", url);
        }
        if (hostlen >= sizeof(host))
                return fail(err, errsize, "endpoint %s: host name too long", url);
        memcpy(host, s, hostlen);
        host[hostlen] = 0;
        for (char *c = host; *c; c++)
                *c = (char)tolower((unsigned char)*c);
        if (!is_ip) {
                struct in_addr in4;
                is_ip = inet_pton(AF_INET, host, &in4) == 1;
        }

        if (port) {
                size_t plen = (size_t)(end - port);
                if (plen == 0 || plen > 5 || strspn(port, "0123456789") < plen)
                        return fail(err, errsize, "endpoint %s: bad port", url);
                portnum = strtoul(port, NULL, 10);
                if (portnum == 0 || portnum > 65535)
                        return fail(err, errsize, "endpoint %s: port out of range", url);
        }
        /* Keep the port only when it is not the scheme's default, as HTTP
         * clients do in the Host header they send: the signed Host must be
         * the one sent. */
        if (portnum && portnum != (tls ? 443u : 80u)) {
                size_t used = strlen(host);
                int n = snprintf(host + used, sizeof(host) - used, ":%lu", portnum);
                if (n < 0 || (size_t)n >= sizeof(host) - used)
                        return fail(err, errsize, "endpoint %s: host name too long", url);
        }

        *ep = (struct sigv4_endpoint){ .tls = tls, .host_is_ip = is_ip };
        memcpy(ep->host, host, sizeof(host));
        return 0;
}

static bool shaped_like_ipv4(const char *s) {
        int dots = 0;
        for (; *s; s++) {
                if (*s == '.')
                        dots++;
                else if (*s < '0' || *s > '9')
                        return false;
        }
        return dots == 3;
}

int sigv4_bucket_validate(const char *bucket) {
        size_t n = bucket ? strlen(bucket) : 0;
        if (n < 3 || n > SIGV4_BUCKET_MAX)
                return -EINVAL;
        for (size_t i = 0; i < n; i++) {
                char c = bucket[i];
                if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-'))
                        return -EINVAL;
        }
        if (!isalnum((unsigned char)bucket[0]) || !isalnum((unsigned char)bucket[n - 1]))
                return -EINVAL;
        if (strstr(bucket, "..") || shaped_like_ipv4(bucket))
                return -EINVAL;
        return 0;
}

/* A "." or ".." segment is removed by URL normalisation in HTTP clients
 * and proxies, so the request would reach another key than the one signed. */
static bool key_has_dot_segment(const char *key) {
        for (const char *seg = key; seg;) {
                const char *slash = strchr(seg, '/');
                size_t len = slash ? (size_t)(slash - seg) : strlen(seg);
                if ((len == 1 && seg[0] == '.') || (len == 2 && seg[0] == '.' && seg[1] == '.'))
                        return true;
                seg = slash ? slash + 1 : NULL;
        }
        return false;
}

int sigv4_address_build(struct sigv4_address *out, const struct sigv4_endpoint *ep,
                        enum sigv4_addressing style, const char *bucket, const char *key) {
        int n;

        if (!out || !ep || !ep->host[0] || sigv4_bucket_validate(bucket) < 0)
                return -EINVAL;
        if (!key)
                key = "";
        if (strlen(key) > SIGV4_KEY_MAX)
                return -ENAMETOOLONG;
        if (*key && key_has_dot_segment(key))
                return -EINVAL;

        switch (style) {
        case SIGV4_PATH_STYLE:
                n = snprintf(out->host, sizeof(out->host), "%s", ep->host);
                if (n < 0 || (size_t)n >= sizeof(out->host))
                        return -ENAMETOOLONG;
                n = snprintf(out->path, sizeof(out->path), "/%s%s%s", bucket, *key ? "/" : "",
                             key);
                break;
        case SIGV4_VIRTUAL_HOSTED:
                if (ep->host_is_ip)
                        return -EINVAL;
                if (ep->tls && strchr(bucket, '.'))
                        return -EINVAL;
                n = snprintf(out->host, sizeof(out->host), "%s.%s", bucket, ep->host);
                if (n < 0 || (size_t)n >= sizeof(out->host))
                        return -ENAMETOOLONG;
                n = snprintf(out->path, sizeof(out->path), "/%s", key);
                break;
        default:
                return -EINVAL;
        }
        if (n < 0 || (size_t)n >= sizeof(out->path))
                return -ENAMETOOLONG;
        return 0;
}

int sigv4_url(char **out, const struct sigv4_endpoint *ep, const struct sigv4_address *addr,
              const struct sigv4_param *params, size_t nparams) {
        _cleanup_free_ char *uri = NULL, *query = NULL;
        _cleanup_(buf_wipe) struct buf b = { 0 };
        int r;

        if (!out || !ep || !addr || !addr->host[0])
                return -EINVAL;
        r = sigv4_canonical_uri(&uri, addr->path);
        if (r < 0)
                return r;
        r = build_query(&query, params, nparams, true);
        if (r < 0)
                return r;
        buf_adds(&b, ep->tls ? "https://" : "http://");
        buf_adds(&b, addr->host);
        buf_adds(&b, uri);
        if (*query) {
                buf_addc(&b, '?');
                buf_adds(&b, query);
        }
        *out = buf_take(&b);
        return *out ? 0 : -ENOMEM;
}
