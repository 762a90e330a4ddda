/* SPDX-License-Identifier: MIT */
/*
 * retention/every — the keep_every value ("1000", "6h", "off"), parsed
 * and formatted in one place for the daemon's config check, the policy's
 * reasons and ckptctl's --keep-every (which links this file alone: it
 * knows nothing of the catalog).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "retention/retention.h"

static const struct {
        char unit;
        uint64_t seconds;
} every_units[] = { { 's', 1 }, { 'm', 60 }, { 'h', 3600 }, { 'd', 86400 } };

int retention_every_parse(const char *s, uint64_t *every_steps, uint64_t *every_seconds,
                          char *why, size_t n) {
        uint64_t v = 0;
        const char *q = s;

        if (!s || !*s || !strcmp(s, "off")) {
                *every_steps = *every_seconds = 0;
                return 0;
        }
        for (; *q >= '0' && *q <= '9'; q++) {
                if (v > (UINT64_MAX - 9) / 10 / 86400) {
                        snprintf(why, n, "'%s' is too large", s);
                        return -EINVAL;
                }
                v = v * 10 + (uint64_t)(*q - '0');
        }
        if (q == s || v == 0) {
                snprintf(why, n, "'%s' is not a step count (1000) or a duration (6h), or off", s);
                return -EINVAL;
        }
        if (*q == 0) {
                *every_steps = v;
                *every_seconds = 0;
                return 0;
        }
        for (size_t i = 0; i < sizeof(every_units) / sizeof(every_units[0]); i++)
                if (q[0] == every_units[i].unit && q[1] == 0) {
                        *every_steps = 0;
                        *every_seconds = v * every_units[i].seconds;
                        return 0;
                }
        snprintf(why, n, "'%s': a duration takes the unit s, m, h or d (6h), a step count none",
                 s);
        return -EINVAL;
}

void retention_every_format(const struct retention_policy *p, char *buf, size_t n) {
        if (p->every_steps) {
                snprintf(buf, n, "%" PRIu64, p->every_steps);
                return;
        }
        if (!p->every_seconds) {
                snprintf(buf, n, "off");
                return;
        }
        /* the largest unit that divides it: 6h, not 21600s */
        for (size_t i = sizeof(every_units) / sizeof(every_units[0]); i-- > 0;)
                if (p->every_seconds % every_units[i].seconds == 0) {
                        snprintf(buf, n, "%" PRIu64 "%c", p->every_seconds / every_units[i].seconds,
                                 every_units[i].unit);
                        return;
                }
}

