/* SPDX-License-Identifier: MIT */
/*
 * ckptctl metrics: the daemon's metrics in Prometheus' text format, the
 * same document GET /metrics serves, for node_exporter's textfile
 * collector (ckptctl metrics > dir/ckptd.prom.$$ && mv ... dir/ckptd.prom).
 *
 * The document is paged (METRICS, docs/protocol.md): the first request
 * renders it, the next ones read the rest of that same rendering.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "ctl/ctl.h"

int cmd_metrics(int nargs, char **args) {
        (void)nargs;
        (void)args;
        int need = ctl_need_proto(CKPT_PROTO_VERSION_METRICS, "metrics need");
        if (need)
                return need;
        struct ckpt_reply *rep = malloc(sizeof(*rep));
        if (!rep)
                return ctl_fail(EXIT_DAEMON_ERROR, ENOMEM, "out of memory");
        uint64_t offset = 0;
        int status = 0;
        for (;;) {
                struct ckpt_request req = { .hdr.type = CKPT_MSG_METRICS };
                req.metrics.offset = offset;
                int r = wire_call(&ctl.wire, &req, rep, NULL);
                if (r < 0) {
                        status = ctl_report(r, "metrics");
                        break;
                }
                const struct ckpt_rep_metrics *m = &rep->metrics;
                fwrite(m->text, 1, m->length, ctl.out);
                offset += m->length;
                if (offset >= m->total)
                        break;
                if (m->length == 0) {
                        /* the decoder keeps offset + length <= total: an
                         * empty page before the end is the daemon's bug */
                        status = ctl_fail(EXIT_DAEMON_ERROR, EPROTO, "the daemon sent an empty "
                                          "page at offset %" PRIu64 " of %" PRIu64, offset,
                                          m->total);
                        break;
                }
        }
        free(rep);
        return status;
}
