/* SPDX-License-Identifier: MIT */
/*
 * The MESSAGE_ID of each kind of event ckptd logs (log_event(), util/log.h).
 *
 * journald files a record under its MESSAGE_ID, so that an operator (or a
 * monitor) finds every "save failed" with `journalctl MESSAGE_ID=...`
 * whatever the message text says, and the text may change without breaking
 * anyone's filter.  The ids were made once with `systemd-id128 new` and
 * never change: a new kind of event gets a new id.  docs/ckptd.8 (JOURNAL
 * FIELDS) lists them with what each record means and what to do about it.
 *
 * Kept in util/ only because every tier logs events and util/ is what they
 * all include; the ids are plain strings and carry no logic.
 */
#pragma once

#define LOG_ID_DAEMON_START    "361dff7410ee40ec9bdda46510e230e0" /* ready, listening */
#define LOG_ID_DAEMON_STOP     "7d8a21c9595746b2b3e284bba42371d5" /* drained, exiting */
#define LOG_ID_RANK_SAVED      "7c7e317f35e04cfcb01324c0ce15ad22" /* a rank is on local disk */
#define LOG_ID_SAVE_FAILED     "fa4a9ca8d92f4febb421965b76e6d90b" /* a rank's save failed */
#define LOG_ID_STEP_COMMITTED  "36190670119f4fa1a4df3f818e214a8f" /* a step was committed */
#define LOG_ID_REPL_SENT       "ed0c133234d44c1dba7623b4321f652d" /* a step reached a target */
#define LOG_ID_REPL_RECEIVED   "d065373108f241ea869e24d4d8b986b3" /* a peer's rank stored here */
#define LOG_ID_UPLOAD_DONE     "b031ed23e59948c899613799e7f71cda" /* a step is in the store */
#define LOG_ID_HEAL            "ec7dfdc1633140839c503fb0b9b14069" /* a corrupt copy replaced */
#define LOG_ID_SCRUB_FINDING   "001a49488530477584dba773f8eafa2c" /* the scrub found a bad copy */
#define LOG_ID_PEER_UP         "70a06221b7514b6e9e4568bfd6662633" /* a peer link authenticated */
#define LOG_ID_PEER_DOWN       "edbd85254383465794ecfa5ccce75017" /* a peer link closed */
