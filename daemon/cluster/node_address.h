/* SPDX-License-Identifier: MIT */
/*
 * node_address — where a node's peer server listens: the parsed form of one
 * entry of [cluster] peers (config.c parses it) that the peer layer dials
 * and names in logs and STATUS.
 *
 * It lives in cluster/ rather than in config.h so that the peer layer can
 * take addresses through struct peers_options without including config.h
 * (STYLE.md: a tier never includes a module above it).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* host is a DNS name or an IPv4/IPv6 literal (IPv6 without brackets), port
 * 1..65535.  host NULL: no address.  Whoever fills it owns host (config's
 * struct config frees its own). */
struct node_address {
        char *host;
        uint16_t port;
};

/* "host:port", or "[v6]:port" for an IPv6 host, into buf (truncated to
 * size); "" for an address without a host.  Returns buf. */
const char *node_address_format(const struct node_address *a, char *buf, size_t size);
