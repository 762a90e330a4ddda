/* SPDX-License-Identifier: MIT */
/*
 * ckptctl — the operator's view of a running ckptd.
 *
 *   ckptctl COMMAND [ARGS] [--socket PATH] [--json] [--timeout DURATION]
 *
 * The options that apply to every command may stand anywhere on the line
 * (before the command, between its arguments, after them); "--" ends them,
 * so a job named "--json" can still be named.  Everything else goes to the
 * command, whose own options (--rank, --repair, ...) may also come in any
 * order among its arguments.
 *
 * Tables for people, --json for scripts.  Exit status: 0 ok, 1 the daemon
 * reported an error, 2 usage, 3 no daemon is running at the socket.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ckptd-config.h"
#include "ctl/ctl.h"

struct ctl_session ctl;

static const struct ctl_command commands[] = {
        { "status", "status [--watch [--interval S]]",
          "daemon state, pool, in-flight saves, per-job summary;\n"
          "--watch: again every S seconds (default 2) with\n"
          "progress bars, until Ctrl-C",
          0, 3, cmd_status },
        { "list", "list [JOB]", "jobs, or the checkpoints of JOB (newest first)", 0, 1, cmd_list },
        { "show", "show JOB STEP", "one checkpoint: ranks and shards", 2, 2, cmd_show },
        { "latest", "latest JOB [--rank R [--below STEP]]",
          "the newest committed step; with --rank, the newest\n"
          "one rank R can be restored from (through this node,\n"
          "its neighbours or the object store) and whether\n"
          "that fell back to an older step",
          1, -1, cmd_latest },
        { "restore", "restore JOB [STEP] [--node N | --rank R | --all | --from-peers]",
          "copy a committed step (default: the newest) from the\n"
          "object store to local disk: the ranks node N held\n"
          "(default: this node's index), one rank, or all;\n"
          "--from-peers: this node's ranks from its neighbours",
          1, -1, cmd_restore },
        { "verify", "verify JOB [STEP] [--rank R] [--repair]",
          "read and check every copy this node holds (local tier,\n"
          "replica areas) in full, a line per shard of each;\n"
          "--repair replaces bad copies with a good one;\n"
          "exit 1 while a bad copy remains",
          1, -1, cmd_verify },
        { "drain", "drain [JOB] [--tier local|replicated|remote] [--timeout T]",
          "wait until the newest committed step of every job\n"
          "(or JOB) reached the tier on this node (default: the\n"
          "highest configured); exit 1 at the timeout",
          0, 3, cmd_drain },
        { "pin", "pin JOB STEP", "keep a step whatever retention says (local and store)", 2, 2,
          cmd_pin },
        { "unpin", "unpin JOB STEP", "let retention decide again", 2, 2, cmd_unpin },
        { "metrics", "metrics", "the metrics in Prometheus' text format (what GET\n"
          "/metrics serves), for node_exporter's textfile\n"
          "collector; --json changes only how errors print", 0, 0, cmd_metrics },
        { "delete", "delete JOB [STEP] [--force]",
          "remove a step (or the whole job) from this node's\n"
          "tiers; the newest committed step and pinned steps\n"
          "only with --force; the bytes go in the background",
          1, 3, cmd_delete },
        { "retention", "retention [JOB] [--dry-run [--keep-latest N] [--keep-every E]]",
          "per job and tier, the steps retention keeps and the\n"
          "ones that go, and why; applied now unless --dry-run;\n"
          "--keep-latest/--keep-every preview another policy",
          0, 6, cmd_retention },
        { "cluster", "cluster",
          "every node: reachable, unreachable (no answer in\n"
          "2 s) or down, newest committed step and steps owed\n"
          "per job, links down, errors; exit 1 when a node is\n"
          "not reachable",
          0, 0, cmd_cluster },
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f) {
        fprintf(f, "Usage: ckptctl COMMAND [ARGS] [--socket PATH] [--json] [--timeout DURATION]\n\n"
                   "Commands:\n");
        for (size_t i = 0; i < N_COMMANDS; i++) {
                const struct ctl_command *c = &commands[i];
                size_t len = strlen(c->usage);
                /* the usage, then the help indented under column 19 */
                fprintf(f, "  %s%*s", c->usage, len < 17 ? (int)(17 - len) : 0, "");
                if (len >= 17)
                        fprintf(f, "\n%19s", "");
                for (const char *h = c->help; *h; h++) {
                        fputc(*h, f);
                        if (*h == '\n')
                                fprintf(f, "%19s", "");
                }
                fputc('\n', f);
        }
        fprintf(f, "\nOptions (anywhere on the line; \"--\" ends them):\n"
                   "  --socket PATH    daemon socket (default: $CKPT_SOCKET, the per-user socket,\n"
                   "                   or /run/ckptd/ckptd.sock)\n"
                   "  --json           machine-readable output; errors as {\"error\":{...}}\n"
                   "                   on stdout (and a line on stderr)\n"
                   "  --timeout DURATION\n"
                   "                   how long each request waits for the daemon's reply\n"
                   "                   (N ms, Nms or Ns; 0: forever; default $CKPT_TIMEOUT_MS,\n"
                   "                   else 60s; restore's fetch and verify: forever unless\n"
                   "                   given)\n"
                   "  --version, --help\n");
}

/* The value of a global option given as "--name=value" or "--name value"
 * (advancing *i); NULL when it is missing. */
static const char *option_value(int argc, char **argv, int *i, const char *name) {
        size_t n = strlen(name);
        if (argv[*i][n] == '=')
                return argv[*i] + n + 1;
        if (*i + 1 >= argc)
                return NULL;
        return argv[++*i];
}

static bool is_option(const char *arg, const char *name) {
        size_t n = strlen(name);
        return !strncmp(arg, name, n) && (arg[n] == '\0' || arg[n] == '=');
}

/* rest: room for what is not a global option, in order: the command and
 * its args (main() owns it, so that every return here frees it). */
static int ctl_main(int argc, char **argv, char **rest) {
        const char *socket_path = NULL;
        const char *bad_value = NULL;
        char def[108];
        int nrest = 0;
        bool help = false, version = false, options_done = false;

        /* --json first, so that every error below is already in its form */
        for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
                if (!strcmp(argv[i], "--json") || !strcmp(argv[i], "-j"))
                        ctl.json = true;
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                if (options_done || a[0] != '-' || !strcmp(a, "-")) {
                        rest[nrest++] = argv[i];
                } else if (!strcmp(a, "--")) {
                        options_done = true;
                } else if (!strcmp(a, "--json") || !strcmp(a, "-j")) {
                        /* taken above */
                } else if (is_option(a, "--socket") || !strcmp(a, "-s")) {
                        socket_path = option_value(argc, argv, &i, a[1] == 's' ? "-s" : "--socket");
                        if (!socket_path)
                                bad_value = "--socket";
                } else if (is_option(a, "--timeout")) {
                        const char *v = option_value(argc, argv, &i, "--timeout");
                        if (!v)
                                bad_value = "--timeout";
                        else if (parse_timeout(v, &ctl.timeout_ms) < 0)
                                return EXIT_USAGE;
                        ctl.timeout_given = true;
                } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
                        help = true;
                } else if (!strcmp(a, "--version") || !strcmp(a, "-V")) {
                        version = true;
                } else {
                        rest[nrest++] = argv[i]; /* the command's own option */
                }
                if (bad_value)
                        return ctl_fail(EXIT_USAGE, EINVAL, "%s needs a value", bad_value);
        }
        if (help) {
                usage(stdout);
                return 0;
        }
        if (version) {
                printf("ckptctl %s\n", CKPTD_VERSION);
                return 0;
        }
        if (nrest == 0) {
                if (!ctl.json)
                        usage(stderr);
                return ctl_fail(EXIT_USAGE, EINVAL, "no command given (ckptctl --help lists them)");
        }
        const char *name = rest[0];
        const struct ctl_command *cmd = NULL;
        for (size_t i = 0; i < N_COMMANDS; i++)
                if (!strcmp(commands[i].name, name))
                        cmd = &commands[i];
        if (!cmd)
                return ctl_fail(EXIT_USAGE, EINVAL, "unknown command '%s' (ckptctl --help lists "
                                "them)", name);
        int nargs = nrest - 1;
        char **args = rest + 1;
        if (nargs < cmd->min_args || (cmd->max_args >= 0 && nargs > cmd->max_args))
                return ctl_usage(cmd->usage);

        if (!socket_path)
                socket_path = wire_default_path(def, sizeof(def));
        ctl.socket_path = socket_path;
        if (!ctl.timeout_given && wire_timeout_from_env(&ctl.timeout_ms, ctl.wire.errmsg,
                                                        sizeof(ctl.wire.errmsg)) < 0)
                return ctl_fail(EXIT_USAGE, EINVAL, "%s", ctl.wire.errmsg);
        int r = wire_open_within(&ctl.wire, socket_path, "connect", ctl.timeout_ms, NULL);
        if (r == -ENOENT || r == -ECONNREFUSED)
                return ctl_fail(EXIT_NOT_RUNNING, -r, "ckptd is not running (nothing listens on "
                                "%s); start it with 'systemctl start ckptd' or run ckptd",
                                socket_path);
        if (r < 0)
                return ctl_fail(EXIT_DAEMON_ERROR, -r, "cannot talk to ckptd at %s: %s",
                                socket_path, ctl.wire.errmsg[0] ? ctl.wire.errmsg : strerror(-r));
        char *text = NULL;
        size_t len = 0;
        ctl.out = open_memstream(&text, &len);
        if (!ctl.out)
                return ctl_fail(EXIT_DAEMON_ERROR, ENOMEM, "out of memory");
        r = cmd->run(nargs, args);
        wire_close(&ctl.wire);
        fclose(ctl.out);
        ctl.out = NULL;
        if (r == 0 || ctl.keep_output)
                fwrite(text, 1, len, stdout);
        free(text);
        return r;
}

int main(int argc, char **argv) {
        char **rest = calloc((size_t)argc + 1, sizeof(*rest));
        if (!rest)
                return ctl_fail(EXIT_DAEMON_ERROR, ENOMEM, "out of memory");
        int r = ctl_main(argc, argv, rest);
        free(rest);
        return r;
}
