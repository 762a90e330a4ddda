/* SPDX-License-Identifier: MIT */
/*
 * xml — a strict, small reader for the flat XML documents an S3-compatible
 * store answers with (errors, multipart results, list pages).
 *
 * A general XML library would bring DTDs, entity expansion and external
 * references, none of which a store's answer needs and all of which are
 * attack surface for bytes that come from the network.  This reader knows
 * elements, attributes (checked for form, values not kept), the five named
 * entities and numeric character references, comments, and a prolog before
 * the root.  Refused (-EPROTO): DTDs and CDATA, processing instructions
 * after the root opened, mixed content, mismatched or unclosed tags, a
 * second root, text outside the root, unknown entities, NUL and other
 * control characters, invalid UTF-8 in a leaf's text, and anything past
 * the bounds below.  What the elements mean is the caller's business
 * (s3_documents.c); the reader only reports structure.
 *
 * Thread-safety: reentrant; the reader state lives on the heap for the
 * call only.
 */
#pragma once

#include <stddef.h>

/* Nesting depth, the root counting as 1. */
#define XML_DEPTH_MAX 8
/* Bytes of an element name (attribute names likewise). */
#define XML_NAME_MAX 64
/* Decoded bytes of one leaf's text: room for S3's longest value, a
 * continuation token (s3.h S3_TOKEN_MAX, 4096), and some slack. */
#define XML_TEXT_MAX (4096 + 64)

enum xml_event {
        XML_OPEN,
        XML_CLOSE,
};

/* Called at each element's opening and closing.  depth: 1 for the root.
 * name: the element's name, as written (no namespace processing).  text:
 * at XML_CLOSE of a leaf, its decoded text, NUL-terminated (len bytes, ""
 * for an empty element, valid UTF-8 without NUL); NULL otherwise (len 0).
 * name and text are borrowed for the call.  A negative return stops the
 * parse and becomes xml_parse()'s result. */
typedef int (*xml_element_fn)(void *userdata, enum xml_event ev, unsigned depth,
                              const char *name, const char *text, size_t len);

/* Read buf[0..len) (not NUL-terminated; a NUL byte in it is refused),
 * calling fn for every element in document order.  Returns 0 when the whole
 * document was well-formed (exactly one root, every element closed), else
 * -EPROTO, -ENOMEM, or fn's negative return.  fn may have been called for a
 * prefix of a document that turns out malformed: a caller keeps nothing it
 * collected unless xml_parse() returns 0. */
int xml_parse(const char *buf, size_t len, xml_element_fn fn, void *userdata);
