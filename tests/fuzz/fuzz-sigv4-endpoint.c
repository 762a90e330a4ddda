/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: sigv4_endpoint_parse() (daemon/remote/sigv4.h), which reads
 * [remote] endpoint from ckptd.conf and decides the Host header that every
 * request signs.  Beyond "does not crash" this checks:
 *  - only 0 or -EINVAL; a refusal always explains itself, and the message
 *    is NUL-terminated whatever the buffer's size (1, a few bytes, none);
 *  - with user:password@ in the authority the URL is refused and the
 *    message does not depend on what precedes the '@' (the password is
 *    never repeated): the same URL with those letters and digits changed
 *    gives the very same message;
 *  - a parsed endpoint has a non-empty lowercase host that fits, and
 *    re-rendered as scheme://host (also with a trailing "/", and bare when
 *    it is https) parses to the same endpoint;
 *  - the port is kept exactly when it is not the scheme's default: the host
 *    without its port, given the default port (443, 80), parses to that
 *    bare host, and given another port to host:port;
 *  - path-style addressing always works with it, virtual-hosted style is
 *    refused for an IP literal, and the URL built for a key starts with the
 *    scheme and host.
 * The input is one URL: its bytes up to the first NUL.  abort() on a
 * violation.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuzz-util.h"
#include "remote/sigv4.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ERR_SIZE 512

static int parse(struct sigv4_endpoint *ep, const char *url, char *err, size_t errsize) {
        if (errsize)
                memset(err, 0xAA, errsize);
        int r = sigv4_endpoint_parse(ep, url, err, errsize);
        if (r != 0 && r != -EINVAL)
                abort();
        if (errsize && !memchr(err, 0, errsize))
                abort();
        if (r == -EINVAL && errsize > 1 && !err[0])
                abort();
        if (r == 0 && errsize && err[0])
                abort();
        return r;
}

static void same_endpoint(const struct sigv4_endpoint *a, const char *url) {
        struct sigv4_endpoint b;
        char err[ERR_SIZE];

        if (parse(&b, url, err, sizeof(err)) != 0 || a->tls != b.tls ||
            a->host_is_ip != b.host_is_ip || strcmp(a->host, b.host) != 0)
                abort();
}

/* user:password@ before the host: refused, and the part before '@' does
 * not show in the message. */
static void check_userinfo(const char *url, int r, const char *err) {
        const char *s = url;

        if (strncasecmp(s, "https://", 8) == 0)
                s += 8;
        else if (strncasecmp(s, "http://", 7) == 0)
                s += 7;
        else if (strstr(s, "://"))
                return; /* refused for its scheme first */
        size_t authority = strcspn(s, "/?#");
        const char *at = memchr(s, '@', authority);
        if (!at)
                return;
        if (r != -EINVAL)
                abort();

        char *other = strdup(url), again[ERR_SIZE];
        struct sigv4_endpoint ep;
        if (!other)
                return;
        for (char *p = other + (s - url); p < other + (at - url); p++)
                *p = fuzz_rot13(*p);
        if (parse(&ep, other, again, sizeof(again)) != -EINVAL || strcmp(err, again) != 0)
                abort();
        free(other);
}

static void check_parsed(const struct sigv4_endpoint *ep) {
        size_t n = strnlen(ep->host, sizeof(ep->host));
        char url[SIGV4_HOST_MAX + 16];

        if (n == 0 || n == sizeof(ep->host))
                abort();
        for (size_t i = 0; i < n; i++)
                if (ep->host[i] >= 'A' && ep->host[i] <= 'Z')
                        abort();
        const char *scheme = ep->tls ? "https" : "http";
        snprintf(url, sizeof(url), "%s://%s", scheme, ep->host);
        same_endpoint(ep, url);
        snprintf(url, sizeof(url), "%s://%s/", scheme, ep->host);
        same_endpoint(ep, url);
        if (ep->tls)
                same_endpoint(ep, ep->host);

        /* The port rule, on the host without its port. */
        struct sigv4_endpoint bare = *ep;
        char *cut = bare.host[0] == '[' ? strchr(bare.host, ']') : bare.host;
        if (!cut)
                abort();
        cut = strrchr(cut, ':');
        if (cut)
                *cut = 0;
        unsigned def = ep->tls ? 443 : 80, other = ep->tls ? 80 : 443;
        snprintf(url, sizeof(url), "%s://%s:%u", scheme, bare.host, def);
        same_endpoint(&bare, url);
        struct sigv4_endpoint with_port = bare;
        snprintf(with_port.host + strlen(bare.host), sizeof(with_port.host) - strlen(bare.host),
                 ":%u", other);
        snprintf(url, sizeof(url), "%s://%s:%u", scheme, bare.host, other);
        same_endpoint(&with_port, url);

        struct sigv4_address addr;
        if (sigv4_address_build(&addr, ep, SIGV4_PATH_STYLE, "bucket", "jobs/a/b") != 0 ||
            strcmp(addr.host, ep->host) != 0 || strcmp(addr.path, "/bucket/jobs/a/b") != 0)
                abort();
        int r = sigv4_address_build(&addr, ep, SIGV4_VIRTUAL_HOSTED, "bucket", "k");
        if (ep->host_is_ip ? r != -EINVAL : (r != 0 && r != -ENAMETOOLONG))
                abort();
        r = sigv4_address_build(&addr, ep, SIGV4_PATH_STYLE, "bucket", "k");
        char *full = NULL;
        if (r != 0 || (r = sigv4_url(&full, ep, &addr, NULL, 0)) == -ENOMEM)
                return;
        snprintf(url, sizeof(url), "%s://%s/", scheme, ep->host);
        if (r != 0 || strncmp(full, url, strlen(url)) != 0)
                abort();
        free(full);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *url = malloc(size + 1), err[ERR_SIZE], tiny[7];
        struct sigv4_endpoint ep;

        if (!url)
                return 0;
        memcpy(url, data, size);
        url[size] = 0;

        int r = parse(&ep, url, err, sizeof(err));
        check_userinfo(url, r, err);
        if (r == 0)
                check_parsed(&ep);

        /* Small buffers are truncated, never overrun; none at all is fine. */
        struct sigv4_endpoint ep2;
        if (parse(&ep2, url, tiny, sizeof(tiny)) != r || parse(&ep2, url, tiny, 1) != r ||
            parse(&ep2, url, NULL, 0) != r)
                abort();
        if (r == 0 && (ep2.tls != ep.tls || strcmp(ep2.host, ep.host) != 0))
                abort();
        free(url);
        return 0;
}
