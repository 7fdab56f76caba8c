/* SPDX-License-Identifier: MIT */
/*
 * A "rig": one configuration made concrete. N destinations from the sink, the sending
 * sockets in the chosen shape (one unconnected socket with N addresses, or N connected
 * sockets), one library group per available backend over those same sockets (a "+ts" variant
 * over its own sockets of the same shape), and the message.
 * rig_send is the inner loop every measurement times.
 */
#ifndef BENCH_WORKLOAD_H
#define BENCH_WORKLOAD_H

#include <sys/socket.h>
#include <sys/uio.h>

#include "bench.h"
#include "sink.h"

struct raw_uring;
struct raw_xdp;
struct raw_kf;

struct rig {
	uint64_t n, size;
	bool connected;
	bool dontwait; /* --dontwait: every send of every backend without waiting */
	struct sink *sink;
	const struct sockaddr_in *dests;
	int shared;   /* the unconnected sending socket, or -1 */
	int *conn;    /* n connected sending sockets, or NULL */
	/* The stamped variants' own sockets in the same shape ("+ts", "+wK+ts"; -1 / NULL for the
	 * others): the library sets timestamping on a socket and reads its error queue, so two
	 * contexts sampling on one socket would take each other's stamps. */
	int ts_shared[V_COUNT];
	int *ts_conn[V_COUNT];
	struct ms_group *g[V_COUNT];
	/* The hand-written baselines' own state (raw.c), on the plain sockets above: message
	 * headers prepared once (raw-sendmmsg, and raw-io_uring's SENDMSG fallback) that all point
	 * at raw_iov, the one iovec each fan-out sets; raw-io_uring's ring. */
	struct mmsghdr *raw_mm;
	struct iovec raw_iov;
	struct raw_uring *raw_ring;
	struct raw_xdp *raw_xdp; /* raw-xdp's socket, UMEM, rings and templates */
	struct raw_kf *raw_kf;   /* raw-kfanout's maps and slots */
	struct kf_bench *kf;     /* the session's kernel fan-out (rig_room switches its hook) */
	uint64_t raw_syscalls; /* system calls the baselines made, since the rig opened */
	int raw_flags;         /* the baselines' send flags for this fan-out: MSG_DONTWAIT or 0 */
	unsigned char *msg;
	uint64_t seq;     /* last sequence number stamped into msg */
	uint64_t pending; /* fan-outs since the sink was last drained */
	uint64_t accepted;/* destinations that took a datagram, since the rig opened */
	/* MS_CFG_OFFLOAD: the variants' contexts (NULL for the others), and the destinations each
	 * context had counted as failed at the last rig_sync. */
	struct ms_ctx *off_ctx[V_COUNT];
	uint64_t off_failed[V_COUNT];
};

/* Build a rig. Returns 0; -EMFILE/-E2BIG/-ENOSPC-style errors come with a reason in err that
 * the caller reports as a skipped configuration. */
int rig_open(struct session *s, struct rig *r, uint64_t n, uint64_t size, char *err,
	     size_t errlen);
/* rig_open for one configuration of a mode's loop: 0 (opened), 1 (could not: reported as
 * skipped, "<label>fan-out N, S B", and `units` of progress counted), or -EXDEV (a namespace
 * breach, never skipped over). */
int rig_open_or_skip(struct session *s, struct rig *r, uint64_t n, uint64_t size,
		     const char *label, double units);
void rig_close(struct rig *r);

/*
 * Send count fan-outs with backend v: nothing but the sends themselves (no allocation, no
 * other system call). Stamps each fan-out's sequence number into the message. Returns the
 * number of destinations that did not accept the datagram. With MS_CFG_OFFLOAD (rig_offloads)
 * the messages are posted (ms_post): what is returned is the calls refused (n destinations
 * each), and rig_sync must follow before the sends are over.
 */
uint64_t rig_send(struct rig *r, enum variant_id v, uint64_t count);

/*
 * MS_CFG_OFFLOAD: wait until v's context has sent every message handed over (ms_ctx_drain),
 * then return the destinations that failed since the last rig_sync, from the library's counters
 * (ms_post said only how many destinations each message would be attempted on), and take them
 * out of r->accepted. 0 at once for the other variants.
 */
uint64_t rig_sync(struct rig *r, enum variant_id v);

static inline bool rig_offloads(const struct rig *r, enum variant_id v)
{
	return r->off_ctx[v] != NULL;
}

/* The library's counters of v's context so far (system calls, destinations, bytes); false for
 * the hand-written baselines, which have no context. */
bool variant_stats(const struct session *s, enum variant_id v, struct ms_stats *st);

/* Descriptors a configuration needs, so it can be refused up front with a clear reason. */
uint64_t rig_fds_needed(const struct session *s, uint64_t n);

#endif
