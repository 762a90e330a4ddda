/* SPDX-License-Identifier: MIT */
/*
 * node_address — formatting a node's peer address the way [cluster] peers
 * spells it, so logs, STATUS and ckptctl config show what the user wrote.
 */
#include <stdio.h>
#include <string.h>

#include "cluster/node_address.h"

const char *node_address_format(const struct node_address *a, char *buf, size_t size) {
        if (!size)
                return buf;
        if (!a->host)
                buf[0] = '\0';
        else if (strchr(a->host, ':'))
                snprintf(buf, size, "[%s]:%u", a->host, (unsigned)a->port);
        else
                snprintf(buf, size, "%s:%u", a->host, (unsigned)a->port);
        return buf;
}
