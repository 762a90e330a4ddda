/* SPDX-License-Identifier: MIT */
/*
 * ckptd — entry point: configuration (defaults < file < flags), then the
 * daemon.  Exit status: 0 after a clean drain, 1 on a runtime failure,
 * 2 on a configuration error.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckptd-config.h"
#include "daemon.h"
#include "util/log.h"

static char *default_config_path(void) {
        char *p = NULL;
        /* systemd's ConfigurationDirectory= says where our config lives,
         * whatever user the unit runs as. */
        const char *cd = getenv("CONFIGURATION_DIRECTORY");
        if (cd && *cd == '/') {
                size_t n = strcspn(cd, ":");
                if (asprintf(&p, "%.*s/ckptd.conf", (int)n, cd) < 0)
                        return NULL;
                return p;
        }
        if (geteuid() == 0)
                return strdup(CKPTD_SYSCONFDIR "/ckptd/ckptd.conf");
        const char *xdg = getenv("XDG_CONFIG_HOME");
        const char *home = getenv("HOME");
        if (xdg && *xdg == '/') {
                if (asprintf(&p, "%s/ckptd/ckptd.conf", xdg) < 0)
                        return NULL;
        } else if (home && *home == '/') {
                if (asprintf(&p, "%s/.config/ckptd/ckptd.conf", home) < 0)
                        return NULL;
        }
        return p;
}

int main(int argc, char **argv) {
        struct config cfg;
        struct daemon *d = NULL;
        int r;

        r = config_init(&cfg);
        if (r < 0) {
                fprintf(stderr, "ckptd: cannot set up defaults: %s\n", strerror(-r));
                return 1;
        }
        const char *explicit_path = config_path_from_args(argc, argv);
        char *path = explicit_path ? strdup(explicit_path) : default_config_path();
        if (path) {
                r = config_load_file(&cfg, path, stderr);
                if (r == -ENOENT && !explicit_path) {
                        r = 0; /* no config file: embedded defaults */
                } else if (r == -ENOENT) {
                        fprintf(stderr, "ckptd: config file %s does not exist\n", path);
                }
                if (r < 0) {
                        free(path);
                        config_clear(&cfg);
                        return 2;
                }
        }
        r = config_parse_args(&cfg, argc, argv, stderr);
        if (r == 1) {
                printf("Usage: ckptd [--config PATH] [--SECTION-KEY=VALUE ...]\n\n"
                       "Per-node checkpoint daemon. Every configuration key is also a flag:\n\n");
                config_print_help(stdout);
        } else if (r == 2) {
                printf("ckptd %s\n", CKPTD_VERSION);
        }
        if (r == 1 || r == 2 || r < 0 || config_validate(&cfg, stderr) < 0) {
                free(path);
                config_clear(&cfg);
                return r == 1 || r == 2 ? 0 : 2;
        }
        log_set_level(cfg.log_level);
        log_set_target((enum log_target)cfg.log_target);
        log_set_node((int32_t)cfg.cluster_node_index);

        r = daemon_new(&d, &cfg, path, argc, argv);
        if (r < 0) {
                log_error("cannot start: %s", strerror(-r));
                free(path);
                config_clear(&cfg);
                return 1;
        }
        r = daemon_run(d);
        daemon_free(d);
        free(path);
        config_clear(&cfg);
        return r < 0 ? 1 : 0;
}
