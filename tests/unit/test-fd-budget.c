/* SPDX-License-Identifier: MIT */
/*
 * test-fd-budget — the per-uid count of descriptors held for saves and
 * reads: a uid is refused exactly past its cap and nothing is taken then,
 * uids are counted apart, root is counted but never refused, and giving
 * back frees the room (and the entry) again.
 */
#include <errno.h>

#include "util/fd_budget.h"

#include "check.h"

int main(void) {
        struct fd_budget b;

        fd_budget_init(&b, 10);
        CHECK(fd_budget_take(&b, 1000, 3) == 0, "a save's directories");
        CHECK(fd_budget_take(&b, 1000, 7) == 0, "up to the cap");
        CHECK(fd_budget_held(&b, 1000) == 10, "held %u", fd_budget_held(&b, 1000));
        CHECK(fd_budget_check(&b, 1000, 0) == 0, "nothing more fits");
        CHECK(fd_budget_check(&b, 1000, 1) == -EMFILE, "a check one past the cap");
        CHECK(fd_budget_take(&b, 1000, 1) == -EMFILE, "one past the cap");
        CHECK(fd_budget_held(&b, 1000) == 10, "a refusal took %u", fd_budget_held(&b, 1000) - 10);
        /* another uid has its own budget, whatever the first holds */
        CHECK(fd_budget_take(&b, 1001, 10) == 0, "another uid");
        CHECK(fd_budget_take(&b, 1001, 1) == -EMFILE, "another uid past its cap");
        /* root is held only to RLIMIT_NOFILE */
        CHECK(fd_budget_check(&b, 0, 100) == 0, "a check of root past the cap");
        CHECK(fd_budget_take(&b, 0, 100) == 0, "root past the cap");
        CHECK(fd_budget_held(&b, 0) == 100, "root holds %u", fd_budget_held(&b, 0));

        fd_budget_give(&b, 1000, 4);
        CHECK(fd_budget_held(&b, 1000) == 6, "after giving back %u", fd_budget_held(&b, 1000));
        CHECK(fd_budget_take(&b, 1000, 4) == 0, "room again");
        CHECK(fd_budget_take(&b, 1000, 1) == -EMFILE, "and full again");
        fd_budget_give(&b, 1000, 10);
        CHECK(fd_budget_held(&b, 1000) == 0 && b.nuids == 2, "entry dropped: %u uids", b.nuids);
        CHECK(fd_budget_held(&b, 1001) == 10, "the other uid untouched");

        /* many uids at once (the table grows) */
        for (uint32_t uid = 2000; uid < 2100; uid++)
                CHECK(fd_budget_take(&b, uid, 1) == 0, "uid %u", uid);
        for (uint32_t uid = 2000; uid < 2100; uid++)
                CHECK(fd_budget_held(&b, uid) == 1, "uid %u holds %u", uid,
                      fd_budget_held(&b, uid));
        for (uint32_t uid = 2000; uid < 2100; uid++)
                fd_budget_give(&b, uid, 1);
        CHECK(b.nuids == 2, "%u uids left", b.nuids);
        fd_budget_clear(&b);

        /* 0: no cap */
        fd_budget_init(&b, 0);
        CHECK(fd_budget_take(&b, 1000, 1u << 20) == 0, "no cap");
        fd_budget_clear(&b);
        return check_exit_code();
}
