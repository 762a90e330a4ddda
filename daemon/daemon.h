/* SPDX-License-Identifier: MIT */
/*
 * daemon — ckptd assembled: config, ring, workers, slot pool, catalog,
 * local store, IPC server; start-up reconcile; signals; systemd
 * notification, watchdog and socket activation.
 */
#pragma once

#include "config.h"

struct daemon;

/* Build everything and reconcile the catalog with the disk.  argc/argv are
 * kept to re-read the configuration on SIGHUP. */
int daemon_new(struct daemon **out, struct config *cfg, const char *config_path, int argc,
               char **argv);
/* Serve until SIGTERM/SIGINT and the drain completes.  0 or -errno. */
int daemon_run(struct daemon *d);
struct daemon *daemon_free(struct daemon *d);
