/* SPDX-License-Identifier: MIT */
/*
 * xml — see xml.h for what is read and what is refused.
 *
 * One pass over the buffer, no allocation besides the reader itself (the
 * element names of the open path and one leaf's text, a few kB: on the
 * heap rather than the stack of a callback-heavy caller).  Text is
 * collected for every element but handed out only for leaves; an element
 * with children may hold nothing but whitespace between them.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "remote/xml.h"
#include "util/cleanup.h"

struct xml_reader {
        const char *p;
        const char *end;
        char names[XML_DEPTH_MAX][XML_NAME_MAX + 1];
        bool has_child[XML_DEPTH_MAX];
        unsigned depth;
        bool root_seen;
        char text[XML_TEXT_MAX + 1];
        size_t text_len;
        bool text_blank;
};

static bool xml_space(char ch) {
        return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

static bool xml_name_start(char ch) {
        return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || ch == '_' || ch == ':';
}

static bool xml_name_char(char ch) {
        return xml_name_start(ch) || (ch >= '0' && ch <= '9') || ch == '-' || ch == '.';
}

static bool xml_starts(const struct xml_reader *x, const char *s) {
        size_t n = strlen(s);
        return (size_t)(x->end - x->p) >= n && memcmp(x->p, s, n) == 0;
}

static void xml_skip_space(struct xml_reader *x) {
        while (x->p < x->end && xml_space(*x->p))
                x->p++;
}

static int xml_name(struct xml_reader *x, char out[XML_NAME_MAX + 1]) {
        size_t n = 0;

        if (x->p >= x->end || !xml_name_start(*x->p))
                return -EPROTO;
        while (x->p < x->end && xml_name_char(*x->p)) {
                if (n >= XML_NAME_MAX)
                        return -EPROTO;
                out[n++] = *x->p++;
        }
        out[n] = 0;
        return 0;
}

/* Skip past the terminator `end` (of a comment or the prolog). */
static int xml_skip_past(struct xml_reader *x, const char *end) {
        size_t n = strlen(end);
        for (; x->p + n <= x->end; x->p++)
                if (memcmp(x->p, end, n) == 0) {
                        x->p += n;
                        return 0;
                }
        return -EPROTO;
}

static bool xml_char_allowed(uint32_t cp) {
        return cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp <= 0xD7FF) ||
               (cp >= 0xE000 && cp <= 0xFFFD) || (cp >= 0x10000 && cp <= 0x10FFFF);
}

static int xml_text_add(struct xml_reader *x, const char *s, size_t n) {
        if (n > XML_TEXT_MAX - x->text_len)
                return -EPROTO;
        memcpy(x->text + x->text_len, s, n);
        x->text_len += n;
        return 0;
}

static int xml_text_add_cp(struct xml_reader *x, uint32_t cp) {
        char u[4];
        size_t n;

        if (!xml_char_allowed(cp))
                return -EPROTO;
        if (cp < 0x80) {
                u[0] = (char)cp;
                n = 1;
        } else if (cp < 0x800) {
                u[0] = (char)(0xC0 | (cp >> 6));
                u[1] = (char)(0x80 | (cp & 0x3F));
                n = 2;
        } else if (cp < 0x10000) {
                u[0] = (char)(0xE0 | (cp >> 12));
                u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
                u[2] = (char)(0x80 | (cp & 0x3F));
                n = 3;
        } else {
                u[0] = (char)(0xF0 | (cp >> 18));
                u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
                u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
                u[3] = (char)(0x80 | (cp & 0x3F));
                n = 4;
        }
        if (!xml_space((char)cp))
                x->text_blank = false;
        return xml_text_add(x, u, n);
}

/* x->p at '&': decode one reference into the text. */
static int xml_entity(struct xml_reader *x) {
        static const struct {
                const char *name;
                char ch;
        } named[] = { { "amp", '&' }, { "lt", '<' }, { "gt", '>' }, { "quot", '"' }, { "apos", '\'' } };
        const char *start = x->p + 1, *semi = start;

        while (semi < x->end && *semi != ';' && semi - start < 12)
                semi++;
        if (semi >= x->end || *semi != ';' || semi == start)
                return -EPROTO;
        size_t n = (size_t)(semi - start);
        x->p = semi + 1;

        if (start[0] == '#') {
                uint32_t cp = 0;
                bool hex = n > 1 && start[1] == 'x';
                size_t i = hex ? 2 : 1;
                if (i >= n)
                        return -EPROTO;
                for (; i < n; i++) {
                        char ch = start[i];
                        unsigned d;
                        if (ch >= '0' && ch <= '9')
                                d = (unsigned)(ch - '0');
                        else if (hex && ch >= 'a' && ch <= 'f')
                                d = (unsigned)(ch - 'a' + 10);
                        else if (hex && ch >= 'A' && ch <= 'F')
                                d = (unsigned)(ch - 'A' + 10);
                        else
                                return -EPROTO;
                        cp = cp * (hex ? 16 : 10) + d;
                        if (cp > 0x10FFFF)
                                return -EPROTO;
                }
                return xml_text_add_cp(x, cp);
        }
        for (size_t i = 0; i < ARRAY_SIZE(named); i++)
                if (strlen(named[i].name) == n && memcmp(named[i].name, start, n) == 0)
                        return xml_text_add_cp(x, (uint32_t)(unsigned char)named[i].ch);
        return -EPROTO;
}

static bool utf8_valid(const unsigned char *s, size_t n) {
        size_t i = 0;

        while (i < n) {
                unsigned char c0 = s[i];
                uint32_t cp;
                size_t len;
                if (c0 < 0x80) {
                        i++;
                        continue;
                } else if (c0 >= 0xC2 && c0 <= 0xDF) {
                        len = 2;
                        cp = c0 & 0x1F;
                } else if (c0 >= 0xE0 && c0 <= 0xEF) {
                        len = 3;
                        cp = c0 & 0x0F;
                } else if (c0 >= 0xF0 && c0 <= 0xF4) {
                        len = 4;
                        cp = c0 & 0x07;
                } else {
                        return false;
                }
                if (n - i < len)
                        return false;
                for (size_t k = 1; k < len; k++) {
                        if ((s[i + k] & 0xC0) != 0x80)
                                return false;
                        cp = (cp << 6) | (s[i + k] & 0x3F);
                }
                if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
                    (cp >= 0xD800 && cp <= 0xDFFF) || cp == 0xFFFE || cp == 0xFFFF)
                        return false;
                i += len;
        }
        return true;
}

/* Text between tags: decoded into x->text. */
static int xml_chars(struct xml_reader *x) {
        while (x->p < x->end && *x->p != '<') {
                char ch = *x->p;
                int r;
                if (ch == '&') {
                        /* A reference is text, even one that decodes to a
                         * space: outside the root it has no place. */
                        if (x->depth == 0)
                                return -EPROTO;
                        r = xml_entity(x);
                } else {
                        unsigned char u = (unsigned char)ch;
                        if (u < 0x20 && !xml_space(ch))
                                return -EPROTO;
                        if (x->depth == 0 && !xml_space(ch))
                                return -EPROTO; /* text outside the root */
                        if (!xml_space(ch))
                                x->text_blank = false;
                        r = x->depth ? xml_text_add(x, &ch, 1) : 0;
                        x->p++;
                }
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Attributes are read and checked for form, their values not kept (S3
 * sends only xmlns). */
static int xml_attributes(struct xml_reader *x) {
        char name[XML_NAME_MAX + 1];

        for (;;) {
                const char *before = x->p;
                xml_skip_space(x);
                if (x->p >= x->end)
                        return -EPROTO;
                if (*x->p == '>' || *x->p == '/')
                        return 0;
                if (x->p == before)
                        return -EPROTO; /* attributes need a space before them */
                if (xml_name(x, name) < 0)
                        return -EPROTO;
                xml_skip_space(x);
                if (x->p >= x->end || *x->p != '=')
                        return -EPROTO;
                x->p++;
                xml_skip_space(x);
                if (x->p >= x->end || (*x->p != '"' && *x->p != '\''))
                        return -EPROTO;
                char quote = *x->p++;
                while (x->p < x->end && *x->p != quote) {
                        if (*x->p == '<' || (unsigned char)*x->p < 0x20)
                                return -EPROTO;
                        x->p++;
                }
                if (x->p >= x->end)
                        return -EPROTO;
                x->p++;
        }
}

int xml_parse(const char *buf, size_t len, xml_element_fn fn, void *userdata) {
        _cleanup_free_ struct xml_reader *x = calloc(1, sizeof(*x));
        int r;

        if (!x)
                return -ENOMEM;
        x->p = buf;
        x->end = buf + len;
        if (memchr(buf, 0, len))
                return -EPROTO;
        if (xml_starts(x, "\xEF\xBB\xBF"))
                x->p += 3;
        x->text_blank = true;

        while (x->p < x->end) {
                if (*x->p != '<') {
                        r = xml_chars(x);
                        if (r < 0)
                                return r;
                        continue;
                }
                if (xml_starts(x, "<?")) {
                        if (x->root_seen)
                                return -EPROTO;
                        r = xml_skip_past(x, "?>");
                } else if (xml_starts(x, "<!--")) {
                        x->p += 4;
                        r = xml_skip_past(x, "-->");
                } else if (xml_starts(x, "<!")) {
                        return -EPROTO; /* DOCTYPE, CDATA */
                } else if (xml_starts(x, "</")) {
                        char name[XML_NAME_MAX + 1];
                        x->p += 2;
                        if (x->depth == 0 || xml_name(x, name) < 0)
                                return -EPROTO;
                        xml_skip_space(x);
                        if (x->p >= x->end || *x->p != '>')
                                return -EPROTO;
                        x->p++;
                        unsigned d = x->depth - 1;
                        if (strcmp(name, x->names[d]) != 0)
                                return -EPROTO;
                        bool leaf = !x->has_child[d];
                        if (!leaf && !x->text_blank)
                                return -EPROTO; /* mixed content */
                        if (leaf && !utf8_valid((unsigned char *)x->text, x->text_len))
                                return -EPROTO;
                        x->text[x->text_len] = 0;
                        r = fn(userdata, XML_CLOSE, x->depth, name, leaf ? x->text : NULL,
                               leaf ? x->text_len : 0);
                        x->depth--;
                        x->text_len = 0;
                        x->text_blank = true;
                } else {
                        char name[XML_NAME_MAX + 1];
                        x->p++;
                        if ((x->depth == 0 && x->root_seen) || x->depth >= XML_DEPTH_MAX)
                                return -EPROTO;
                        if (x->depth > 0) {
                                if (!x->text_blank)
                                        return -EPROTO; /* mixed content */
                                x->has_child[x->depth - 1] = true;
                        }
                        if (xml_name(x, name) < 0 || xml_attributes(x) < 0)
                                return -EPROTO;
                        bool empty = *x->p == '/';
                        if (empty) {
                                x->p++;
                                if (x->p >= x->end || *x->p != '>')
                                        return -EPROTO;
                        }
                        x->p++;
                        x->root_seen = true;
                        memcpy(x->names[x->depth], name, sizeof(name));
                        x->has_child[x->depth] = false;
                        x->depth++;
                        x->text_len = 0;
                        x->text_blank = true;
                        r = fn(userdata, XML_OPEN, x->depth, name, NULL, 0);
                        if (r >= 0 && empty) {
                                x->text[0] = 0;
                                r = fn(userdata, XML_CLOSE, x->depth, name, x->text, 0);
                                x->depth--;
                        }
                }
                if (r < 0)
                        return r;
        }
        if (x->depth != 0 || !x->root_seen)
                return -EPROTO;
        return 0;
}

