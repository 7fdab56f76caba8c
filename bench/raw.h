/* SPDX-License-Identifier: MIT */
/*
 * The hand-written baselines: the fan-outs a user would write without the library, on a rig's
 * plain sending sockets (the ones the library's groups use too), so that every ratio compares
 * the same sends to the same destinations.
 *
 *   raw-sendto    one sendto(2) per destination (connected sockets: without an address)
 *   raw-sendmmsg  the library's sendmmsg backend by hand: one unconnected socket gets one
 *                 sendmmsg(2) per up to 1024 destinations on message headers prepared when the
 *                 rig opens; N connected sockets get one sendmmsg each (one message). After a
 *                 partial return it resends from the first unsent message; a call that fails
 *                 fails its first message only, which is counted and skipped
 *   raw-io_uring  the library's io_uring backend by hand (liburing): one ring per rig of
 *                 min(N, 4096) entries, SINGLE_ISSUER|DEFER_TASKRUN when the kernel takes
 *                 them, the sockets as registered files when it lets us; IORING_OP_SEND with
 *                 a destination address (Linux 6.1) for unconnected destinations, SENDMSG on
 *                 the prepared headers before that, SEND on connected sockets; one
 *                 io_uring_submit_and_wait per fan-out (per ring-full beyond 4096), then every
 *                 completion is reaped
 *   raw-kfanout   the library's kfanout backend by hand (raw-kfanout.c; --sink netns-xdp only):
 *                 slots claimed and destinations written in the attachment's mmap'ed maps when
 *                 the rig opens, then per slice of the attachment's slice size: count, arm,
 *                 one sendto of the message to the slot's template address, the statuses read
 *   raw-sendto+hook  raw-sendto while the kernel fan-out's program is on the device
 *   raw-xdp       the library's xdp backend by hand over AF_XDP (raw-xdp.c; --sink netns-xdp
 *                 only): frames built from per-destination templates, one sendto kick per
 *                 batch the kernel takes
 *
 * With --dontwait (or as a "+dontwait" variant) every send passes MSG_DONTWAIT (rig->raw_flags):
 * sendto's and sendmmsg's flags, the msg_flags of raw-io_uring's SQEs (which still waits for
 * every completion); a send refused with EAGAIN counts as failed, like any refusal.
 *
 * Each fan-out is one call of a function named bench_raw_*_fanout that is never inlined nor
 * cloned, so --callgrind can collect it by name (--toggle-collect), as it does ms_send for the
 * library. Each returns how many destinations did not take the whole message.
 */
#ifndef BENCH_RAW_H
#define BENCH_RAW_H

#include "workload.h"

/* A function callgrind can find by name: gcc would otherwise clone it under another one
 * (.constprop, .isra) even when it does not inline it; clang does not rename functions. */
#if defined(__clang__)
#define BENCH_NAMED __attribute__((noinline))
#else
#define BENCH_NAMED __attribute__((noinline, noipa))
#endif

uint64_t bench_raw_sendto_fanout(struct rig *r) BENCH_NAMED;
uint64_t bench_raw_sendmmsg_fanout(struct rig *r) BENCH_NAMED;
uint64_t bench_raw_uring_fanout(struct rig *r) BENCH_NAMED;
/* raw-xdp (raw-xdp.c): the library's xdp backend by hand over AF_XDP. */
uint64_t bench_raw_xdp_fanout(struct rig *r) BENCH_NAMED;

/* raw-kfanout (raw-kfanout.c): the library's kfanout backend by hand over the pinned maps. */
uint64_t bench_raw_kfanout_fanout(struct rig *r) BENCH_NAMED;
/* Whether raw-kfanout can run (the attachment made, an unconnected socket): a description. */
bool raw_kfanout_probe(const struct session *s, char *detail, size_t len);
/* Its maps and slots on a rig whose sockets are open (sending thread, in the namespace). */
int raw_kfanout_open(const struct session *s, struct rig *r, char *err, size_t errlen);
void raw_kfanout_close(struct rig *r);

/* Whether raw-xdp can run with this sink: a description of what it will use, or why not. */
bool raw_xdp_probe(enum sink_kind sink, char *detail, size_t len);
/* Its socket, UMEM, rings and templates on a rig whose sockets are open (sending thread, in
 * the namespace). 0, or -errno with a reason. */
int raw_xdp_open(const struct session *s, struct rig *r, char *err, size_t errlen);
void raw_xdp_close(struct rig *r);

/* The per-fan-out function of backend v, as callgrind names it (ms_send for the library's). */
const char *raw_fanout_function(enum variant_id v);

/* Whether raw-io_uring can run here: a description of what it will use, or why not. */
bool raw_uring_probe(char *detail, size_t len);

/* Prepare what the wanted baselines need on a rig whose sockets are open (the headers, the
 * ring: on the sending thread, which the ring is then bound to). 0, or -errno with a reason. */
int raw_open(const struct session *s, struct rig *r, char *err, size_t errlen);
void raw_close(struct rig *r);

#endif
