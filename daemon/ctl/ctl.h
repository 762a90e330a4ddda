/* SPDX-License-Identifier: MIT */
/*
 * ctl — what every ckptctl command shares: the session with the daemon, the
 * output buffer, and the way results and errors are printed.
 *
 * main.c owns the session (`ctl`): it parses the options that apply to
 * every command (anywhere on the line), connects, runs one command from its
 * table, and writes the command's buffered output to stdout only if the
 * command succeeded (or asked to keep it: verify reports a finding by its
 * exit status).  A command never prints to stdout itself.
 *
 * Errors go through ctl_fail()/ctl_report(): always one line on stderr
 * ("ckptctl: ..."), and with --json also a JSON document on stdout,
 *   {"error":{"errno":"ENOENT","code":2,"exit":1,"message":"..."}}
 * so a script reading stdout never has to parse text.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "conn.h"

#define EXIT_DAEMON_ERROR 1
#define EXIT_USAGE 2
#define EXIT_NOT_RUNNING 3

struct ctl_session {
        bool json;           /* --json */
        FILE *out;           /* the command's output, reaching stdout on success */
        bool keep_output;    /* print `out` even when the command exits non-zero */
        struct wire wire;    /* the connection to the daemon */
        const char *socket_path; /* where it is (status --watch connects again) */
        /* The deadline of each request (--timeout, else $CKPT_TIMEOUT_MS,
         * else conn.h's default): a stopped or hung daemon must not hang
         * ckptctl, and so whatever script or monitor runs it. */
        uint32_t timeout_ms;
        bool timeout_given;
};

extern struct ctl_session ctl;

/* One command: `name` and its usage line, the number of arguments (options
 * of its own included) it accepts, and what runs it.  Returns the exit
 * status. */
struct ctl_command {
        const char *name;
        const char *usage;  /* "list [JOB]" */
        const char *help;   /* for --help, lines of at most 56 columns */
        int min_args, max_args; /* max_args < 0: any number */
        int (*run)(int nargs, char **args);
};

/* Print why the command failed (see the top of this file) and return
 * `status`.  err is the errno the error corresponds to (EINVAL for usage). */
int ctl_fail(int status, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A request to the daemon failed with r (-errno): its message, or
 * strerror; returns EXIT_DAEMON_ERROR. */
int ctl_report(int r, const char *what);
/* 0 when the daemon speaks protocol `version`, else EXIT_DAEMON_ERROR
 * after saying "<what> version N: upgrade ckptd" ("metrics need"). */
int ctl_need_proto(uint16_t version, const char *what);
/* "usage: <cmd->usage>", EXIT_USAGE. */
int ctl_usage(const char *usage);

/* Output helpers, into ctl.out. */
void json_str(const char *s);
const char *human_bytes(uint64_t b, char buf[32]);
const char *human_duration(uint64_t ms, char buf[32]);
const char *fmt_time(int64_t t, char buf[32]); /* ISO 8601 UTC, "-" for none */

/* Argument parsing: 0, or ctl_fail()s and returns -EINVAL. */
int parse_u64(const char *what, const char *str, uint64_t max, uint64_t *value);
int parse_timeout(const char *s, uint32_t *ms_out);
/* ckpt_name_set() with ckptctl's error: 0 or -EINVAL (reported). */
int ctl_job_name(struct ckpt_name *name, const char *job);

/* The job list and one job's checkpoints, every page (caller frees). */
int fetch_jobs(struct ckpt_job_entry **jobs_out, uint32_t *n_out);
int fetch_ckpts(const char *job, struct ckpt_ckpt_entry **ckpts_out, uint32_t *n_out);
void print_job_table(const struct ckpt_job_entry *jobs, uint32_t n);
void print_job_json(const struct ckpt_job_entry *j);

/* The commands (one file per noun). */
int cmd_status(int nargs, char **args);
int cmd_list(int nargs, char **args);
int cmd_show(int nargs, char **args);
int cmd_pin(int nargs, char **args);
int cmd_unpin(int nargs, char **args);
int cmd_restore(int nargs, char **args);
int cmd_latest(int nargs, char **args);
int cmd_verify(int nargs, char **args);
int cmd_drain(int nargs, char **args);
/* status --watch [--interval S] (watch.c); args are status's */
int status_watch(int nargs, char **args);
int cmd_metrics(int nargs, char **args);
int cmd_delete(int nargs, char **args);
int cmd_retention(int nargs, char **args);
int cmd_cluster(int nargs, char **args);
