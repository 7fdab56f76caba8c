/* SPDX-License-Identifier: MIT */
/*
 * The executor interface: what a backend is, the whole contract. Read this before lib/api/send.c.
 *
 * A call to ms_send goes through stages (lib/api/send.c), and only one of them is a backend:
 *
 *   validate    arguments, flags (lib/api/send.c)
 *   plan        the group compiled into one flat array in group order, one entry per
 *               destination (struct ms__plan_entry, lib/api/group.c): rebuilt after a change,
 *               read by every backend; the send order of a call is "n positions from `first`,
 *               wrapping around" (rotation is that one integer)
 *   before      timestamps arm control messages on some prepared headers (lib/modes/tstamp.c); the
 *               slow-consumer policy gives the call a status array and marks the positions
 *               whose backlog must go first, which the core leaves out of the executor's
 *               ranges (lib/modes/slow.c)
 *   execute     the backend's send() over a range of the plan, on the calling thread, or K
 *               ranges on K threads each with its own backend state (lib/exec/workers.c)
 *   after       the policy turns its destinations' statuses into its own outcomes, timestamps
 *               disarm, the call's tally is added to the context's counters and published
 *               (lib/modes/slow.c, lib/modes/tstamp.c, lib/api/ctx.c)
 *
 * A backend sees none of that: no configuration but what ctx_init reads, no policy, no
 * timestamp logic, no workers, no fork. It gets a batch (the message, the flags, the plan and
 * an optional status array) and a range of positions, and it must:
 *
 *   - attempt every position of the range exactly once (EINTR retried inside, never skipped,
 *     never sent twice: a partial return is resumed at the first message not sent);
 *   - for a position that took the whole message: add it to b->t.accepted (and b->t.bytes),
 *     and when b->res is set write { id, len } there; everything else (a short count on a
 *     stream, -errno) goes through ms__status(b, pos, status), which writes b->res and the
 *     tally's failure counts. Successes are counted in bulk so that a fan-out without a
 *     result array writes nothing per destination; the after stage touches only exceptions;
 *   - count every system call it makes in b->t.syscalls;
 *   - send a position any way it likes that has the same meaning as
 *     sendto(e->fd, buf, len, b->msg_flags | e->xflags, e->name, e->namelen), or, with
 *     MS__CAP_HDR, when b->hdr is set and the message is gathered (b->iovcnt != 1), longer
 *     than 32 bits, or the header carries control messages (e->mm->msg_hdr.msg_control):
 *     with that prepared header (e->mm, sendmsg semantics). Without MS__CAP_HDR it never
 *     sees b->hdr set;
 *   - return 0, or -errno when the backend itself failed (a ring that refused): the positions
 *     it could not attempt are then reported with that error through ms__status.
 *
 * Several ranges of one call may run at once on different threads, each with its own batch
 * (their tallies are added up afterwards) and its own state (part_init); their positions and
 * so their res entries are disjoint.
 *
 * Adding a backend: one file under lib/be/ with a `const struct ms__backend`, its id in the public
 * enum, and one line in the preference table of lib/api/ctx.c (AUTO then measures it beside
 * the others, lib/modes/auto.c). Its capability bits tell the core
 * what it cannot do; the core then does it otherwise (a child after fork() uses the loop).
 */
#ifndef MS_BACKEND_H
#define MS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "multisend.h"
#include "counters.h" /* enum ms__errclass, struct ms__tally */

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define MS__MMSG_MAX 1024u /* UIO_MAXIOV: the kernel's limit per sendmmsg call */

/*
 * One destination of the plan: everything its send needs, in group order (socket by socket, so
 * that a socket's destinations are consecutive and their prepared headers contiguous).
 */
struct ms__plan_entry {
	const struct sockaddr *name; /* NULL: the socket's connected peer */
	struct mmsghdr *mm; /* its prepared header: name, the group's iovecs, control messages when
	                       armed; consecutive entries of one socket have consecutive headers */
	uint32_t namelen;
	int fd;
	int id;
	int xflags;      /* extra send flags of its socket (MSG_DONTWAIT when non-blocking) */
	uint16_t cls;    /* MS__PLAN_*: what the backends derive their flags from */
	uint16_t zc;     /* a UDP socket (AF_INET, AF_INET6 datagram): may go with zero copy */
	uint32_t run;    /* entries from this one to the last of its socket */
};
#define MS__PLAN_DGRAM 1u    /* SOCK_DGRAM */
#define MS__PLAN_FIXED 2u    /* io_uring: a registered file */
#define MS__PLAN_NOWAIT 4u   /* xflags has MSG_DONTWAIT */
#define MS__PLAN_UNIXMSG 8u  /* AF_UNIX datagram or seqpacket (see lib/be/iouring.c) */
#define MS__PLAN_CLASSES 16u

enum ms__errclass ms__errclass(int err);

/* One message over (a range of) the plan: what the executor reads, and its tally. */
struct ms__batch {
	const struct ms__plan_entry *plan;
	size_t n;                /* entries in the plan (positions wrap around at n) */
	const struct iovec *iov; /* the group's copy of the caller's iovecs */
	int iovcnt;
	bool hdr;                /* some positions must go with their prepared header: gathered,
	                            control messages armed, or a length past 32 bits */
	int msg_flags;           /* MSG_NOSIGNAL, plus MSG_DONTWAIT for MS_SEND_DONTWAIT */
	size_t len;              /* total message length */
	struct ms_result *res;   /* status per position, or NULL */
	void *gdata;             /* the group's data for this backend (its prepare hook), or NULL */
	struct ms__tally t;
};

/* Count one destination's outcome that is not "took the whole message": bytes or -errno. */
static inline void ms__tally_status(struct ms__tally *t, size_t len, int status)
{
	if (status >= 0) {
		t->bytes += (unsigned)status;
		if ((size_t)status == len)
			t->accepted++;
		else
			t->partial++;
	} else {
		t->failed++;
		t->err[ms__errclass(-status)]++;
	}
}

/* Report position i's outcome (see the contract above). */
static inline void ms__status(struct ms__batch *b, size_t i, int status)
{
	if (b->res)
		b->res[i] = (struct ms_result){ .id = b->plan[i].id, .status = status };
	ms__tally_status(&b->t, b->len, status);
}

/* Positions [first, first + count) of a plan of n as at most two linear spans, part 0 from
 * first up to the plan's end, part 1 what wraps around to the start:
 *	for (int part = 0; part < 2; part++)
 *		for (size_t i = ms__span_from(first, part), end = ms__span_to(first, count, n, part);
 *		     i < end; i++)
 */
static inline size_t ms__span_from(size_t first, int part)
{
	return part ? 0 : first;
}
static inline size_t ms__span_to(size_t first, size_t count, size_t n, int part)
{
	if (part)
		return first + count > n ? first + count - n : 0;
	return first + count < n ? first + count : n;
}

/* The same positions one by one, wrapping around: for (MS__EACH(...)) */
#define MS__EACH(i, left, first, count, n)                                                    \
	size_t i = (first), left = (count);                                                   \
	left;                                                                                 \
	left--, i = i + 1 == (n) ? 0 : i + 1

/* Capabilities: what the core may hand a backend; anything else the loop executor sends. */
#define MS__CAP_HDR 1u         /* sends positions with their prepared headers (b->hdr: gathered
                                  messages, control messages, lengths past 32 bits) */
#define MS__CAP_FORK_UNSAFE 2u /* its state is unusable in a forked child: the loop sends there */
#define MS__CAP_ONE_THREAD 4u  /* its context state takes calls from one thread only, the first
                                  that sends (io_uring's SINGLE_ISSUER ring): with offload, the
                                  offload thread sends the caller's ms_send too */
#define MS__CAP_WHOLE 8u       /* sends a fan-out whole, on the calling thread: workers do not
                                  split it (an AF_XDP socket is one transmit queue) */

struct ms_ctx;
struct ms__bucket;

struct ms__backend {
	enum ms_backend id;
	const char *name;
	unsigned caps;
	/* Can this process use the backend? 0, or -errno with *why set to a static reason. Called
	 * once per process (the result is cached). NULL: always available. */
	int (*probe)(const char **why);
	/* The context's state (*state, NULL if none), made by the thread that makes the
	 * context. A context may hold the states of several backends at once (MS_BACKEND_AUTO
	 * measures them side by side, lib/modes/auto.c): a backend keeps nothing of its own
	 * outside its state. */
	int (*ctx_init)(struct ms_ctx *ctx, void **state); /* may set ctx->init_why */
	void (*ctx_fini)(void *state);
	/* A socket joins or leaves a group (optional: io_uring registers its file). Never
	 * called in a forked child for a context made before the fork. */
	int (*bucket_added)(struct ms_ctx *ctx, void *state, struct ms__bucket *b);
	void (*bucket_removed)(void *state, struct ms__bucket *b);
	/* Before each call it sends (optional): make or refresh what its send needs per plan
	 * position in *gdata, the group's data for this backend (NULL at first; kept by the group
	 * and given to send as b->gdata, freed by group_fini). plan_gen changes whenever the plan
	 * was made again (a change of the group). Runs on the sending thread; may allocate and make
	 * system calls. An error fails the call: every position reports it. */
	int (*prepare)(struct ms_ctx *ctx, void *state, struct ms_group *g, uint32_t plan_gen,
		       void **gdata);
	void (*group_fini)(void *state, void *gdata);
	/* The executor: positions [first, first + count) of b->plan, wrapping around (see the
	 * top of this file). `state` is the context's state (ctx_init) on a thread that sends
	 * for the context, or what part_init made on a library thread. */
	int (*send)(void *state, struct ms__batch *b, size_t first, size_t count);
	/* A library thread's own state, made, used and freed by that thread (optional). */
	int (*part_init)(struct ms_ctx *ctx, void **state);
	void (*part_fini)(void *state);
	/* One line on how the backend is set up, for MULTISEND_SHOW_BACKEND (optional). */
	void (*describe)(const struct ms_ctx *ctx, const void *state, char *buf, size_t len);
};

extern const struct ms__backend ms__backend_loop;
extern const struct ms__backend ms__backend_sendmmsg;
#ifdef MS_HAVE_LIBURING
extern const struct ms__backend ms__backend_iouring;
#endif
#ifdef MS_HAVE_XDP
extern const struct ms__backend ms__backend_xdp;
#endif
#ifdef MS_HAVE_KFANOUT
extern const struct ms__backend ms__backend_kfanout;
#endif

#endif
