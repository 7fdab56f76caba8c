/* SPDX-License-Identifier: MIT */
/*
 * io_uring: one submission for the whole fan-out, across any number of sockets.
 *
 * - One ring per context, SINGLE_ISSUER | DEFER_TASKRUN | SUBMIT_ALL when the kernel has them
 *   (6.1+), fewer flags on older kernels. The ring starts disabled and is enabled by the first
 *   send, so the thread that creates a context need not be the one that sends on it.
 * - Sockets are registered in a sparse file table indexed by fd number (slot = fd), kept in
 *   step with the groups by reference counts; fds past the table use plain file lookups.
 * - Unconnected destinations use IORING_OP_SEND with a destination address (Linux 6.1, detected
 *   by the same release's IORING_OP_SENDMSG_ZC); older kernels and gathered messages use
 *   IORING_OP_SENDMSG on the group's prebuilt message headers.
 * - Every request has completed when ms_send returns (we wait for all of them), so the
 *   caller's buffer is free again.
 * - Fire and forget: a datagram send that may not wait (MS_SEND_DONTWAIT, or an O_NONBLOCK
 *   socket) carries IOSQE_CQE_SKIP_SUCCESS (Linux 5.17, IORING_FEAT_CQE_SKIP), so only its
 *   failure completes; a fan-out of such sends is one io_uring_enter that waits for nothing.
 *   This rests on two kernel rules: a send with MSG_DONTWAIT never waits for socket space
 *   (REQ_F_NOWAIT: -EAGAIN completes instead of arming a poll), so it is done, and its data
 *   copied, before io_uring_enter returns; and a request completed inline posts its CQE
 *   before io_uring_enter returns. A datagram is taken whole or not at all, so a request
 *   without a CQE took the whole message: its status is the message length.
 * - Zero copy (ms_config.zc_min): a message of at least zc_min bytes is copied once into one
 *   of two buffers registered with the ring and sent to every destination with SEND_ZC from
 *   there, so the kernel does not copy it per destination. Each request completes twice: its
 *   result, then (IORING_CQE_F_MORE) a notification when the kernel has let go of the buffer;
 *   a buffer is written again only once all its notifications are in. REPORT_USAGE makes a
 *   notification say when the kernel copied anyway (loopback, a local namespace, a device
 *   without scatter-gather): then zero copy is turned off for the ring, for good. A kernel
 *   that refuses the request (-EINVAL: no REPORT_USAGE before 6.2) turns it off too, and the
 *   destination is sent again with a plain SEND. Not with CQE_SKIP_SUCCESS (the kernel
 *   forbids it), so a zero-copy fan-out always waits for its results.
 * - AF_UNIX datagram and seqpacket sockets are never left to io_uring to wait on: when the
 *   receiver's queue is full, the kernel (6.18) has already consumed the message when it says
 *   so, and io_uring's retry once there is room sends an EMPTY message (status 0). So a
 *   blocking send to one goes with MSG_DONTWAIT, and if that says -EAGAIN the library sends it
 *   again itself with a plain blocking sendmsg, before the fan-out returns.
 * - A forked child must not touch its parent's ring (the mapping and the kernel object are
 *   shared): MS__CAP_FORK_UNSAFE, so there the core sends with the plain loop and does not
 *   call the file-table hooks.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "uring-compat.h"

#include "internal.h"
#include "sys.h"

#define FILE_TABLE_MAX 65536u /* slots; fds above use plain lookups (a slot costs kernel memory) */

/* A request's user_data: the destination's position in the plan, tagged. UD_SKIP marks a
 * request that completes only on failure. */
#define UD_SKIP (1ull << 62)
#define UD_ZC (1ull << 61)     /* a SEND_ZC request; its buffer in the bits from ZC_SHIFT */
#define UD_BLOCK (1ull << 60)  /* AF_UNIX, blocking: -EAGAIN means send again, blocking */
#define ZC_SHIFT 56
#define UD_ZC_BUF(ud) ((unsigned)((ud) >> ZC_SHIFT) & 1u)
#define UD_INDEX(ud) ((ud) & ((1ull << ZC_SHIFT) - 1))
#define ZC_BUFS 2u
#define ZC_MAX 65536u          /* the largest message sent with zero copy (a buffer's size) */

struct uring_state {
	struct io_uring ring;
	unsigned setup_flags;
	unsigned depth;     /* submission queue entries */
	bool ready;         /* ring enabled and its fd registered, by the sending thread */
	pthread_t owner;    /* that thread: the kernel refuses the ring to any other */
	bool files_ok;      /* the registered file table is usable */
	uint32_t nfiles;    /* slots in the registered table */
	uint32_t *refs;     /* per fd < nrefs: buckets (over all groups) using its slot */
	uint64_t *inos;     /* per fd < nrefs: inode of the socket registered in its slot */
	uint32_t nrefs;
	uint64_t *retry;    /* user_data of requests to submit again after -EINTR (depth) */
	uint64_t *bretry;   /* positions of UD_BLOCK requests that said -EAGAIN (depth) */
	unsigned nblock;
	bool skip_ok;       /* IOSQE_CQE_SKIP_SUCCESS is available */
	unsigned qskip;     /* requests queued since the last flush that complete only on failure */
	uint64_t skip_prepped, skip_reported; /* this fan-out's such requests, and their CQEs */
	/* Per class of destination (MS__PLAN_*), for a call without and with MSG_DONTWAIT: its
	 * send flags, entry flags and user_data tag (set_classes). */
	unsigned msgf[2][MS__PLAN_CLASSES];
	uint8_t sqef[2][MS__PLAN_CLASSES];
	uint64_t tag[2][MS__PLAN_CLASSES];
	/* Zero copy: zc_min > 0 while it is on; ZC_BUFS buffers of ZC_MAX bytes registered as
	 * one (index 0); notifications outstanding per buffer; the buffer of the next fan-out. */
	uint32_t zc_min;
	unsigned char *zbuf;
	uint32_t zpending[ZC_BUFS];
	unsigned zcur;
};

/* send(2) on a blocking stream returns when all is sent; io_uring does so only with
 * MSG_WAITALL. A datagram that may not wait completes only if it fails (see the top of this
 * file). Worked out once, when the ring and its file table are set up. */
static void set_classes(struct uring_state *st)
{
	for (unsigned w = 0; w < 2; w++)
		for (unsigned c = 0; c < MS__PLAN_CLASSES; c++) {
			/* what lib/api/send.c passes: MSG_NOSIGNAL, and MSG_DONTWAIT if asked */
			int fl = MSG_NOSIGNAL | (w || (c & MS__PLAN_NOWAIT) ? MSG_DONTWAIT : 0);
			bool dgram = c & MS__PLAN_DGRAM;
			bool block = (c & MS__PLAN_UNIXMSG) && !(fl & MSG_DONTWAIT);
			bool skip = dgram && (fl & MSG_DONTWAIT) && st->skip_ok;
			if (block)
				fl |= MSG_DONTWAIT; /* see the top of this file */
			if (!dgram && !(fl & MSG_DONTWAIT))
				fl |= MSG_WAITALL;
			st->msgf[w][c] = (unsigned)fl;
			st->sqef[w][c] = (uint8_t)((c & MS__PLAN_FIXED && st->files_ok ? IOSQE_FIXED_FILE
										: 0) |
						   (skip ? IOSQE_CQE_SKIP_SUCCESS : 0));
			st->tag[w][c] = skip ? UD_SKIP : block ? UD_BLOCK : 0;
		}
}

/* ---- process-wide probe --------------------------------------------------------------------- */

static bool g_send_addr; /* IORING_OP_SEND takes a destination address */
static bool g_send_zc;   /* IORING_OP_SEND_ZC (Linux 6.0) */

static int read_int_file(const char *path, int *v)
{
	char buf[32];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	*v = atoi(buf);
	return 0;
}

static int uring_probe(const char **why)
{
	int v;
	if (!read_int_file("/proc/sys/kernel/io_uring_disabled", &v) && v == 2) {
		*why = "disabled by the sysctl kernel.io_uring_disabled=2";
		return -EPERM;
	}
	struct io_uring r;
	int err = io_uring_queue_init(4, &r, 0);
	if (err == -ENOSYS) {
		*why = "io_uring_setup is not available (kernel without io_uring, or a seccomp filter)";
		return err;
	}
	if (err == -EPERM || err == -EACCES) {
		*why = "io_uring_setup is not permitted (seccomp filter, or kernel.io_uring_disabled=1 "
		       "for an unprivileged process)";
		return err;
	}
	if (err < 0) {
		*why = "io_uring_setup failed";
		return err;
	}
	struct io_uring_probe *p = io_uring_get_probe_ring(&r);
	if (!p) {
		*why = "the kernel cannot list io_uring opcodes (older than 5.6)";
		err = -ENOTSUP;
	} else if (!io_uring_opcode_supported(p, IORING_OP_SEND) ||
		   !io_uring_opcode_supported(p, IORING_OP_SENDMSG)) {
		*why = "the kernel lacks IORING_OP_SEND/SENDMSG (needs 5.6)";
		err = -ENOTSUP;
	} else {
		g_send_addr = io_uring_opcode_supported(p, IORING_OP_SENDMSG_ZC);
		g_send_zc = io_uring_opcode_supported(p, IORING_OP_SEND_ZC);
	}
	if (p)
		io_uring_free_probe(p);
	io_uring_queue_exit(&r);
	return err;
}

/* ---- ring and file table -------------------------------------------------------------------- */

static int ring_open(struct uring_state *st, unsigned depth)
{
	static const unsigned tries[] = {
		IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
			IORING_SETUP_R_DISABLED,
		IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_R_DISABLED,
		IORING_SETUP_SUBMIT_ALL,
		0,
	};
	int err = -EINVAL;
	for (size_t k = 0; k < sizeof(tries) / sizeof(tries[0]); k++) {
		struct io_uring_params p;
		memset(&p, 0, sizeof(p));
		p.flags = tries[k];
		err = io_uring_queue_init_params(depth, &st->ring, &p);
		if (err == -EINVAL)
			continue; /* a flag this kernel does not know */
		if (err < 0)
			return err;
		st->setup_flags = tries[k];
		st->depth = p.sq_entries;
		st->skip_ok = p.features & IORING_FEAT_CQE_SKIP;
		st->ready = false;
		return 0;
	}
	return err;
}

/* Register an empty sparse file table. Failure is not an error: sends then use plain fds. */
static void files_register(struct uring_state *st)
{
	struct rlimit rl;
	uint32_t n = FILE_TABLE_MAX;
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < n)
		n = (uint32_t)rl.rlim_cur; /* the kernel refuses tables larger than RLIMIT_NOFILE */
	if (n && io_uring_register_files_sparse(&st->ring, n) == 0) {
		st->nfiles = n;
		st->files_ok = true;
	}
}

/* Zero copy: two message buffers registered with the ring. Not available (the kernel lacks
 * SEND_ZC, or refuses the registration): zero copy stays off, quietly. */
static void zc_setup(const struct ms_ctx *ctx, struct uring_state *st)
{
	if (!g_send_zc || !ctx->zc_min || ctx->zc_min > ZC_MAX)
		return;
	if (posix_memalign((void **)&st->zbuf, 4096, ZC_BUFS * ZC_MAX)) {
		st->zbuf = NULL;
		return;
	}
	struct iovec iov = { .iov_base = st->zbuf, .iov_len = ZC_BUFS * ZC_MAX };
	if (io_uring_register_buffers(&st->ring, &iov, 1)) {
		free(st->zbuf);
		st->zbuf = NULL;
		return;
	}
	st->zc_min = ctx->zc_min;
}

/* MS_CFG_MLOCK: our own arrays, and the rings and submission entries (64 bytes an entry,
 * 256 KiB for 4096) for kernels that fault them in on first touch. Linux 6.18 inserts every
 * ring page when the ring is mapped and marks the mapping special, which mlock leaves alone
 * (nor does VmLck count it): those pages are resident and mapped from the start. */
static int lock_ring(const struct ms_ctx *ctx, struct uring_state *st)
{
	const struct io_uring *r = &st->ring;
	int err;
	if ((err = ms__mlock(ctx, r->sq.ring_ptr, r->sq.ring_sz)) ||
	    (err = ms__mlock(ctx, r->cq.ring_ptr, r->cq.ring_sz)))
		return err;
	return ms__mlock(ctx, r->sq.sqes, (size_t)*r->sq.kring_entries * sizeof(*r->sq.sqes));
}

static void state_free(struct uring_state *st)
{
	if (!st)
		return;
	if (st->depth) /* the ring was opened */
		io_uring_queue_exit(&st->ring); /* the kernel keeps registered pages until done */
	free(st->refs);
	free(st->inos);
	free(st->retry);
	free(st->bretry);
	free(st->zbuf);
	free(st);
}

/* A ring and the arrays sized by it, locked with MS_CFG_MLOCK (lib/mem.c); shared by the context's ring
 * and the library threads' rings (uring_part_init). */
static int state_new(const struct ms_ctx *ctx, struct uring_state **out)
{
	int err;
	struct uring_state *st = ms__zalloc(ctx, sizeof(*st), &err);
	if (!st)
		return err;
	err = ring_open(st, ctx->queue_depth);
	if (!err)
		st->retry = ms__zalloc(ctx, st->depth * sizeof(*st->retry), &err);
	if (!err)
		st->bretry = ms__zalloc(ctx, st->depth * sizeof(*st->bretry), &err);
	if (!err)
		err = lock_ring(ctx, st);
	if (err) {
		state_free(st);
		return err;
	}
	*out = st;
	return 0;
}

static int uring_ctx_init(struct ms_ctx *ctx, void **state)
{
	struct uring_state *st;
	int err = state_new(ctx, &st);
	if (err)
		return err;
	files_register(st);
	set_classes(st);
	zc_setup(ctx, st);
	*state = st;
	return 0;
}

static void uring_ctx_fini(void *state)
{
	state_free(state);
}

static int uring_bucket_added(struct ms_ctx *ctx, void *state, struct ms__bucket *b)
{
	struct uring_state *st = state;
	uint32_t fd = (uint32_t)b->fd;

	b->fixed = false;
	if (fd >= st->nfiles)
		return 0;
	if (fd >= st->nrefs) {
		uint32_t n = st->nrefs ? st->nrefs : 64;
		while (n <= fd)
			n *= 2;
		int err;
		if ((err = ms__grow(ctx, &st->refs, (size_t)n * sizeof(*st->refs))) ||
		    (err = ms__grow(ctx, &st->inos, (size_t)n * sizeof(*st->inos))))
			return err; /* nrefs did not grow: nothing is lost */
		memset(st->refs + st->nrefs, 0, (size_t)(n - st->nrefs) * sizeof(*st->refs));
		st->nrefs = n;
	}
	if (st->refs[fd] == 0) {
		int v = b->fd;
		if (!st->files_ok || io_uring_register_files_update(&st->ring, fd, &v, 1) != 1)
			return 0; /* this socket goes by plain fd */
		st->inos[fd] = b->ino;
	} else if (st->inos[fd] != b->ino) {
		/* The slot still holds a socket that was closed while in a group (which keeps
		 * using it until removed); a new socket with its number goes by plain fd. */
		return 0;
	}
	st->refs[fd]++;
	b->fixed = true;
	return 0;
}

static void uring_bucket_removed(void *state, struct ms__bucket *b)
{
	struct uring_state *st = state;
	if (!b->fixed)
		return;
	uint32_t fd = (uint32_t)b->fd;
	if (--st->refs[fd] == 0 && st->files_ok) {
		int v = -1;
		/* Drops the ring's reference to the socket. */
		(void)io_uring_register_files_update(&st->ring, fd, &v, 1);
	}
	b->fixed = false;
}

/* ---- sending -------------------------------------------------------------------------------- */

static int make_ready(struct uring_state *st)
{
	if (st->setup_flags & IORING_SETUP_R_DISABLED) {
		int err = ms__uring_enable_rings(&st->ring);
		if (err < 0)
			return err;
	}
	/* Saves a file lookup per io_uring_enter; optional (5.18+). */
	(void)io_uring_register_ring_fd(&st->ring);
	st->owner = pthread_self();
	st->ready = true;
	return 0;
}


/* Position i as one request, any case (a gathered message, control messages, an address
 * before Linux 6.1, a request sent again after -EINTR). */
static void prep(struct uring_state *st, struct ms__batch *b, size_t i)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&st->ring);
	const struct ms__plan_entry *e = &b->plan[i];
	const struct msghdr *h = &e->mm->msg_hdr;
	const unsigned c = e->cls;
	int flags = b->msg_flags | e->xflags;
	const bool block = (c & MS__PLAN_UNIXMSG) && !(flags & MSG_DONTWAIT);

	if (block)
		flags |= MSG_DONTWAIT; /* see the top of this file */
	/* send(2) on a blocking stream socket returns when all is sent; io_uring does the same
	 * only with MSG_WAITALL (otherwise it may complete short). */
	if (!(c & MS__PLAN_DGRAM) && !(flags & MSG_DONTWAIT))
		flags |= MSG_WAITALL;
	if (b->iovcnt == 1 && b->len <= UINT32_MAX && (!e->namelen || g_send_addr) &&
	    !h->msg_control) {
		io_uring_prep_send(sqe, e->fd, b->iov[0].iov_base, b->iov[0].iov_len, flags);
		if (e->namelen)
			io_uring_prep_send_set_addr(sqe, e->name, (uint16_t)e->namelen);
	} else {
		io_uring_prep_sendmsg(sqe, e->fd, h, (unsigned)flags);
	}
	if ((c & MS__PLAN_FIXED) && st->files_ok)
		sqe->flags |= IOSQE_FIXED_FILE;
	bool skip = (c & MS__PLAN_DGRAM) && (flags & MSG_DONTWAIT) && st->skip_ok && !block;
	sqe->user_data = i | (block ? UD_BLOCK : 0);
	if (skip) {
		sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
		sqe->user_data |= UD_SKIP;
		st->qskip++;
		st->skip_prepped++;
	}
	if (b->res) /* a failure's CQE overwrites the status */
		b->res[i] = (struct ms_result){ .id = e->id, .status = skip ? (int)b->len : 0 };
}

static void record_status(struct uring_state *st, struct ms__batch *b, uint64_t ud, int status)
{
	if (ud & UD_SKIP) {
		st->skip_reported++;
		ud &= ~UD_SKIP;
	}
	ud &= ~(UD_ZC | (1ull << ZC_SHIFT) | UD_BLOCK);
	if (b->res)
		b->res[ud].status = status; /* the id was written by prep */
	ms__tally_status(&b->t, b->len, status);
}

/* The requests the kernel did not take get err and leave the submission queue: the kernel
 * reads only up to the tail we publish, so moving the tail back to its head withdraws them,
 * and the ring stays usable (liburing has no call for this; its ring fields are public). */
static void withdraw_unsubmitted(struct uring_state *st, struct ms__batch *b, int err)
{
	struct io_uring_sq *sq = &st->ring.sq;
	unsigned head = io_uring_smp_load_acquire(sq->khead);
	for (unsigned k = head; k != sq->sqe_tail; k++)
		record_status(st, b, sq->sqes[k & *sq->kring_mask].user_data, err);
	sq->sqe_head = sq->sqe_tail = head;
	io_uring_smp_store_release(sq->ktail, head);
}

/* A zero-copy request's notification: its buffer is free again; REPORT_USAGE says whether
 * the kernel copied the data anyway, and then zero copy only costs (two completions instead
 * of none or one): off for this ring. */
static void zc_notified(struct uring_state *st, struct ms__batch *b, uint64_t ud, int res)
{
	st->zpending[UD_ZC_BUF(ud)]--;
	if ((unsigned)res & IORING_NOTIF_USAGE_ZC_COPIED) {
		b->t.zc_copied++;
		st->zc_min = 0;
	}
}

/* Read the notifications already posted (outside flush, the completion queue holds nothing
 * else). */
static void zc_reap(struct uring_state *st, struct ms__batch *b)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;
	io_uring_for_each_cqe(&st->ring, head, cqe) {
		n++;
		if (cqe->flags & IORING_CQE_F_NOTIF)
			zc_notified(st, b, cqe->user_data, cqe->res);
	}
	io_uring_cq_advance(&st->ring, n);
}

/* Of the n requests submitted from SQE index first on, those that always complete. */
static unsigned count_completing(const struct uring_state *st, unsigned first, unsigned n)
{
	const struct io_uring_sq *sq = &st->ring.sq;
	unsigned c = 0;
	for (unsigned k = first; k != first + n; k++)
		c += !(sq->sqes[k & *sq->kring_mask].flags & IOSQE_CQE_SKIP_SUCCESS);
	return c;
}

/* Any completion but a plain success (see the top of this file): a blocking AF_UNIX send to
 * retry, a zero-copy result or notification, a fire-and-forget failure, an interrupted send
 * (queued in st->retry), an error. Returns 1 if it is not among the completions waited for. */
static __attribute__((noinline)) unsigned cqe_other(struct uring_state *st, struct ms__batch *b,
						     const struct io_uring_cqe *c, unsigned *nretry)
{
	uint64_t ud = c->user_data;
	int cr = c->res;
	if (ud & UD_BLOCK) {
		ud &= ~UD_BLOCK;
		if (cr == -EAGAIN) { /* sent again, blocking, by flush_all */
			st->bretry[st->nblock++] = ud;
			return 0;
		}
	}
	if (unlikely(ud & UD_ZC)) {
		if (c->flags & IORING_CQE_F_NOTIF) {
			zc_notified(st, b, ud, cr);
			return 1;
		}
		if (c->flags & IORING_CQE_F_MORE)
			st->zpending[UD_ZC_BUF(ud)]++; /* its notification will come */
		b->t.zc_sends++;
		if (cr == -EINVAL || cr == -EOPNOTSUPP) {
			/* A kernel without REPORT_USAGE (before 6.2) or a socket without zero copy:
			 * off, and this one again, plainly. */
			st->zc_min = 0;
			cr = -EINTR;
		}
		ud = UD_INDEX(ud);
		if (cr >= 0 && (size_t)cr == b->len) {
			b->t.accepted++;
			b->t.bytes += b->len;
			if (b->res)
				b->res[ud].status = cr;
			return 0;
		}
	}
	if (cr == -EINTR) {
		if (ud & UD_SKIP)
			st->skip_reported++; /* prepared again, counted again */
		st->retry[(*nretry)++] = ud & ~UD_SKIP;
	} else {
		record_status(st, b, ud, cr);
	}
	return (ud & UD_SKIP) != 0;
}

/*
 * Submit the queued requests, wait for every submitted one that completes (all but the
 * successful fire-and-forget ones, see the top of this file), record their results;
 * interrupted sends are appended to st->retry. Returns 0, or -errno when the ring refused
 * (part of) the batch: the refused requests are recorded with that error and withdrawn.
 */
static int flush(struct uring_state *st, struct ms__batch *b, unsigned queued, unsigned *nretry)
{
	unsigned submitted = 0, seen = 0, busy = 0, skips = st->qskip;
	uint64_t ok = 0;
	unsigned first = io_uring_smp_load_acquire(st->ring.sq.khead);
	int err = 0, r;

	st->qskip = 0;
	/* One call normally does it all (SUBMIT_ALL); a short submission returns at once. */
	while (submitted < queued) {
		b->t.syscalls++;
		r = submitted ? io_uring_submit(&st->ring)
			      : io_uring_submit_and_wait(&st->ring, queued - skips);
		if (r == -EINTR || ((r == -EAGAIN || r == -EBUSY) && ++busy < 1000))
			continue;
		if (r < 0) {
			err = r;
			break;
		}
		submitted += (unsigned)r;
	}
	unsigned expect = submitted == queued ? queued - skips
					      : count_completing(st, first, submitted);
	struct ms_result *const res = b->res;
	const size_t len = b->len;
	struct io_uring_cq *const cq = &st->ring.cq;
	const struct io_uring_cqe *const cqes = cq->cqes;
	const unsigned cmask = *cq->kring_mask; /* 16-byte entries: no IORING_SETUP_CQE32 */
	for (;;) {
		struct io_uring_cqe *cqe;
		unsigned head = *cq->khead, tail = io_uring_smp_load_acquire(cq->ktail);
		unsigned n = tail - head, quiet = 0;
		for (; head != tail; head++) {
			const struct io_uring_cqe *c = &cqes[head & cmask];
			uint64_t ud = c->user_data;
			int cr = c->res;
			/* The common case: a destination that took the whole message. */
			if (likely(!(ud & (UD_SKIP | UD_ZC | UD_BLOCK)) && cr >= 0 && (size_t)cr == len)) {
				ok++;
				if (res)
					res[ud].status = cr; /* the id was written when prepared */
				continue;
			}
			quiet += cqe_other(st, b, c, nretry);
		}
		io_uring_cq_advance(&st->ring, n);
		seen += n - quiet;
		if (seen >= expect)
			break;
		/* Requests that had to wait for socket space still use the buffer: wait. */
		b->t.syscalls++;
		r = io_uring_wait_cqe_nr(&st->ring, &cqe, expect - seen);
		if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY && !err)
			err = r; /* cannot happen short of a broken ring; keep waiting regardless */
	}
	b->t.accepted += (uint32_t)ok;
	b->t.bytes += ok * len;
	if (err)
		withdraw_unsubmitted(st, b, err);
	return err;
}

/* AF_UNIX destinations that a blocking send found full: sent again with a plain blocking
 * sendmsg on their prepared header (see the top of this file). */
static void send_blocked(struct uring_state *st, struct ms__batch *b)
{
	for (unsigned k = 0; k < st->nblock; k++) {
		const struct ms__plan_entry *e = &b->plan[st->bretry[k]];
		ssize_t r;
		do {
			b->t.syscalls++;
			r = ms__sys.sendmsg(e->fd, &e->mm->msg_hdr, b->msg_flags | e->xflags);
		} while (r < 0 && errno == EINTR);
		record_status(st, b, st->bretry[k], r < 0 ? -errno : (int)r);
	}
	st->nblock = 0;
}

/* Submit a batch, then the interrupted requests again until none are left. */
static int flush_all(struct uring_state *st, struct ms__batch *b, unsigned queued)
{
	unsigned nretry = 0;
	int err = flush(st, b, queued, &nretry);
	send_blocked(st, b);
	while (!err && nretry) {
		unsigned n = nretry;
		for (unsigned k = 0; k < n; k++)
			prep(st, b, st->retry[k]);
		nretry = 0;
		err = flush(st, b, n, &nretry);
		send_blocked(st, b);
	}
	/* Interrupted requests that could not be submitted again get the ring's error. */
	for (unsigned k = 0; k < nretry; k++)
		record_status(st, b, st->retry[k], err);
	return err;
}

/* Zero copy for this message (see the top of this file): a buffer whose notifications are
 * all in, with the message copied there and *tzc the template of its requests; or -1, and
 * this fan-out goes plainly (zero copy never waits). */
static int zc_begin(struct uring_state *st, struct ms__batch *b, struct io_uring_sqe *tzc,
		    uint64_t *ztag)
{
	const unsigned len = (unsigned)b->len;
	int zb = -1;
	if (len < st->zc_min || len > ZC_MAX)
		return -1;
	zc_reap(st, b);
	if (!st->zpending[st->zcur])
		zb = (int)st->zcur;
	else if (!st->zpending[st->zcur ^ 1])
		zb = (int)(st->zcur ^ 1);
	if (zb < 0)
		return -1;
	unsigned char *zp = st->zbuf + (size_t)zb * ZC_MAX;
	memcpy(zp, b->iov[0].iov_base, len);
	st->zcur = (unsigned)zb ^ 1;
	io_uring_prep_send_zc_fixed(tzc, -1, zp, len, 0, IORING_SEND_ZC_REPORT_USAGE, 0);
	*ztag = UD_ZC | ((uint64_t)zb << ZC_SHIFT);
	return zb;
}

/* Publish the queued requests (tail: the queue's, kept in a local by uring_flat) and flush. */
static int submit(struct uring_state *st, struct ms__batch *b, unsigned tail, unsigned queued,
		  unsigned nskip)
{
	st->ring.sq.sqe_tail = tail;
	st->qskip += nskip;
	st->skip_prepped += nskip;
	return flush_all(st, b, queued);
}

/* The plan in send order, each entry a copy of one template SEND plus its own socket, flags,
 * address and user_data, written straight into the submission queue (the rare cases through
 * prep). The queue's tail is kept here and
 * stored back before anything else uses the ring (prep, flush). The ring has room: a batch
 * is flushed when depth entries are queued, and the kernel took the previous one whole. */
static int uring_flat(struct uring_state *st, struct ms__batch *b, size_t first, size_t count)
{
	const struct ms__plan_entry *const f = b->plan;
	const size_t n = b->n;
	/* A gathered message, a length past 32 bits, or control messages on some headers: those
	 * go as SENDMSG, and so do addresses before Linux 6.1. Tested once per entry only when
	 * either can be. */
	const bool hdr = b->hdr, send_addr = g_send_addr;
	const bool allhdr = b->iovcnt != 1 || b->len > UINT32_MAX;
	const bool special = hdr || !send_addr;
	const unsigned len = (unsigned)b->len;
	struct io_uring_sqe tzc;
	uint64_t ztag = 0;
	const int zb = unlikely(st->zc_min) && !hdr ? zc_begin(st, b, &tzc, &ztag) : -1;
	const bool rare = special || zb >= 0;
	const int base_flags = b->msg_flags;
	_Static_assert(MS__PLAN_CLASSES == 16, "four bits of class");
	struct ms_result *const res = b->res;
	struct io_uring_sq *const sq = &st->ring.sq;
	struct io_uring_sqe *const sqes = sq->sqes;
	const unsigned mask = *sq->kring_mask, depth = st->depth;
	unsigned tail = sq->sqe_tail, queued = 0, nskip = 0;
	struct io_uring_sqe tmpl;
	int err = 0;

	/* Each class of destination (datagram or stream, registered file or not, non-blocking
	 * or not): its flags, for this call's MSG_DONTWAIT or not (set_classes). */
	const unsigned w = (base_flags & MSG_DONTWAIT) != 0;
	unsigned msgf[MS__PLAN_CLASSES];
	uint8_t sqef[MS__PLAN_CLASSES];
	uint64_t tag[MS__PLAN_CLASSES];
	/* Local copies: the entries written below could alias st, as far as the compiler knows. */
	memcpy(msgf, st->msgf[w], sizeof(msgf));
	memcpy(sqef, st->sqef[w], sizeof(sqef));
	memcpy(tag, st->tag[w], sizeof(tag));
	io_uring_prep_send(&tmpl, -1, b->iov[0].iov_base, len, 0);
	for (int part = 0; part < 2; part++) {
		for (size_t i = ms__span_from(first, part), end = ms__span_to(first, count, n, part);
		     i < end; i++) {
			const struct ms__plan_entry *e = &f[i];
			if (unlikely(rare) && special &&
			    ((e->namelen && !send_addr) ||
			     (hdr && (allhdr || e->mm->msg_hdr.msg_control)))) {
				sq->sqe_tail = tail;
				prep(st, b, i);
				tail = sq->sqe_tail;
			} else if (unlikely(rare) && zb >= 0 && e->zc) {
				const unsigned c = e->cls;
				struct io_uring_sqe *sqe = &sqes[tail++ & mask];
				*sqe = tzc;
				sqe->fd = e->fd;
				sqe->msg_flags = msgf[c];
				sqe->flags = sqef[c] & (uint8_t)~IOSQE_CQE_SKIP_SUCCESS; /* not with SEND_ZC */
				sqe->addr2 = (uint64_t)(uintptr_t)e->name;
				sqe->addr_len = (uint16_t)e->namelen;
				sqe->user_data = i | ztag;
				if (res)
					res[i] = (struct ms_result){ .id = e->id, .status = 0 };
			} else {
				const unsigned c = e->cls;
				struct io_uring_sqe *sqe = &sqes[tail++ & mask];
				*sqe = tmpl;
				sqe->fd = e->fd;
				sqe->msg_flags = msgf[c];
				sqe->flags = sqef[c];
				sqe->addr2 = (uint64_t)(uintptr_t)e->name; /* NULL: connected */
				sqe->addr_len = (uint16_t)e->namelen;
				sqe->user_data = i | tag[c];
				nskip += (tag[c] & UD_SKIP) != 0;
				/* a skipped success keeps this status; a CQE overwrites it */
				if (res)
					res[i] = (struct ms_result){
						.id = e->id, .status = tag[c] & UD_SKIP ? (int)len : 0
					};
			}
			if (unlikely(++queued == depth)) {
				err = submit(st, b, tail, queued, nskip);
				tail = sq->sqe_tail;
				queued = nskip = 0;
				if (err) { /* the ring refused: the rest get its error */
					size_t done = part ? n - first + i + 1 : i - first + 1;
					for (MS__EACH(j, left, (first + done) % n, count - done, n))
						ms__status(b, j, err);
					return err;
				}
			}
		}
	}
	if (queued)
		err = submit(st, b, tail, queued, nskip);
	return err;
}

/* The ring may be used by this thread: it is the ring's, or the ring is not yet anyone's. */
static inline int claim(struct uring_state *st)
{
	return !st->ready ? make_ready(st) : pthread_equal(st->owner, pthread_self()) ? 0 : -EEXIST;
}

/* The fire-and-forget sends of this fan-out that did not complete took the whole message
 * (their status was written when they were prepared). */
static inline void count_quiet(struct uring_state *st, struct ms__batch *b)
{
	uint64_t quiet = st->skip_prepped - st->skip_reported;
	b->t.accepted += (uint32_t)quiet;
	b->t.bytes += quiet * b->len;
}

/* The executor: positions [first, first + count) of the plan, on this thread's ring. */
static int uring_send(void *state, struct ms__batch *b, size_t first, size_t count)
{
	struct uring_state *st = state;
	int err = claim(st);
	if (unlikely(err)) {
		for (MS__EACH(i, left, first, count, b->n))
			ms__status(b, i, err);
		return err;
	}
	st->skip_prepped = st->skip_reported = 0;
	err = uring_flat(st, b, first, count);
	count_quiet(st, b);
	return err;
}

/* A library thread's own ring (lib/exec/workers.c): made, enabled and used by that thread alone,
 * without a registered file table (the context's groups register their sockets in the
 * context's ring only), so its requests name sockets by plain fd. */
static int uring_part_init(struct ms_ctx *ctx, void **out)
{
	struct uring_state *st;
	int err = state_new(ctx, &st);
	if (err)
		return err;
	set_classes(st); /* files_ok is false: no IOSQE_FIXED_FILE */
	zc_setup(ctx, st);
	if ((err = make_ready(st))) {
		state_free(st);
		return err;
	}
	*out = st;
	return 0;
}

static void uring_part_fini(void *state)
{
	state_free(state);
}

static void uring_describe(const struct ms_ctx *ctx, const void *state, char *buf, size_t len)
{
	static const struct {
		unsigned flag;
		const char *name;
	} names[] = {
		{ IORING_SETUP_SUBMIT_ALL, "SUBMIT_ALL" },
		{ IORING_SETUP_SINGLE_ISSUER, "SINGLE_ISSUER" },
		{ IORING_SETUP_DEFER_TASKRUN, "DEFER_TASKRUN" },
		{ IORING_SETUP_COOP_TASKRUN, "COOP_TASKRUN" },
	};
	const struct uring_state *st = state;
	char flags[96] = "";
	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
		if (st->setup_flags & names[k].flag)
			snprintf(flags + strlen(flags), sizeof(flags) - strlen(flags), "%s%s",
				 *flags ? "|" : "", names[k].name);
	char zc[64] = "zero copy not available";
	if (st->zc_min)
		snprintf(zc, sizeof(zc), "zero copy from %u byte%s", st->zc_min,
			 st->zc_min == 1 ? "" : "s");
	else if (st->zbuf)
		snprintf(zc, sizeof(zc), "zero copy off (the kernel copied)");
	else if (g_send_zc && (!ctx->zc_min || ctx->zc_min > ZC_MAX))
		snprintf(zc, sizeof(zc), "zero copy off");
	snprintf(buf, len, "ring of %u entries, flags %s, %s, %s, %s, %s", st->depth,
		 *flags ? flags : "none", st->files_ok ? "registered files" : "plain fds",
		 g_send_addr ? "SEND with address" : "SENDMSG for addresses",
		 st->skip_ok ? "fire-and-forget datagrams with MS_SEND_DONTWAIT"
			     : "every send completes (no CQE_SKIP_SUCCESS)", zc);
}

const struct ms__backend ms__backend_iouring = {
	.id = MS_BACKEND_IO_URING,
	.name = "io_uring",
	.caps = MS__CAP_HDR | MS__CAP_FORK_UNSAFE | MS__CAP_ONE_THREAD,
	.probe = uring_probe,
	.ctx_init = uring_ctx_init,
	.ctx_fini = uring_ctx_fini,
	.bucket_added = uring_bucket_added,
	.bucket_removed = uring_bucket_removed,
	.describe = uring_describe,
	.send = uring_send,
	.part_init = uring_part_init,
	.part_fini = uring_part_fini,
};
