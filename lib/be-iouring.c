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
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "uring-compat.h"

#include "internal.h"

#define FILE_TABLE_MAX 65536u /* slots; fds above use plain lookups (a slot costs kernel memory) */

struct uring_state {
	struct io_uring ring;
	unsigned setup_flags;
	unsigned depth;     /* submission queue entries */
	bool open;          /* ring set up */
	bool ready;         /* ring enabled and its fd registered, by the sending thread */
	bool files_ok;      /* the registered file table is usable */
	uint32_t nfiles;    /* slots in the registered table */
	uint32_t *refs;     /* per fd < nrefs: buckets (over all groups) using it */
	uint32_t nrefs;
	size_t *retry;      /* destinations to submit again after -EINTR (depth entries) */
};

/* ---- process-wide probe --------------------------------------------------------------------- */

static bool g_send_addr; /* IORING_OP_SEND takes a destination address */

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
		st->open = true;
		st->ready = false;
		return 0;
	}
	return err;
}

/* Register the sparse table and every fd currently in use. Failure is not an error: sends
 * then use plain fds. */
static void files_register(struct uring_state *st)
{
	struct rlimit rl;
	uint32_t n = FILE_TABLE_MAX;
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < n)
		n = (uint32_t)rl.rlim_cur; /* the kernel refuses tables larger than RLIMIT_NOFILE */
	st->files_ok = false;
	st->nfiles = 0;
	if (!n || io_uring_register_files_sparse(&st->ring, n) < 0)
		return;
	st->nfiles = n;
	st->files_ok = true;
	for (uint32_t fd = 0; fd < st->nrefs && fd < n; fd++) {
		int v = (int)fd;
		if (st->refs[fd] && io_uring_register_files_update(&st->ring, fd, &v, 1) != 1)
			st->files_ok = false;
	}
}

static int uring_ctx_init(struct ms_ctx *ctx)
{
	struct uring_state *st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	int err = ring_open(st, ctx->queue_depth);
	if (!err) {
		st->retry = calloc(st->depth, sizeof(*st->retry));
		if (!st->retry)
			err = -ENOMEM;
	}
	if (err) {
		if (st->open)
			io_uring_queue_exit(&st->ring);
		free(st->retry);
		free(st);
		return err;
	}
	files_register(st);
	ctx->be_state = st;
	return 0;
}

static void uring_ctx_fini(struct ms_ctx *ctx)
{
	struct uring_state *st = ctx->be_state;
	if (!st)
		return;
	if (st->open)
		io_uring_queue_exit(&st->ring);
	free(st->refs);
	free(st->retry);
	free(st);
	ctx->be_state = NULL;
}

static int uring_bucket_added(struct ms_ctx *ctx, struct ms__bucket *b)
{
	struct uring_state *st = ctx->be_state;
	uint32_t fd = (uint32_t)b->fd;

	b->fixed = false;
	if (fd >= st->nfiles)
		return 0;
	if (fd >= st->nrefs) {
		uint32_t n = st->nrefs ? st->nrefs : 64;
		while (n <= fd)
			n *= 2;
		uint32_t *r = realloc(st->refs, (size_t)n * sizeof(*r));
		if (!r)
			return -ENOMEM;
		memset(r + st->nrefs, 0, (size_t)(n - st->nrefs) * sizeof(*r));
		st->refs = r;
		st->nrefs = n;
	}
	if (st->refs[fd] == 0 && st->files_ok) {
		int v = b->fd;
		if (io_uring_register_files_update(&st->ring, fd, &v, 1) != 1)
			return 0; /* this socket goes by plain fd */
	}
	st->refs[fd]++;
	b->fixed = true;
	return 0;
}

static void uring_bucket_removed(struct ms_ctx *ctx, struct ms__bucket *b)
{
	struct uring_state *st = ctx->be_state;
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

static int make_ready(struct uring_state *st, unsigned queue_depth)
{
	if (!st->open) {
		/* A previous submission failed and the ring was dropped: start again. */
		int err = ring_open(st, queue_depth);
		if (err)
			return err;
		files_register(st);
	}
	if (st->setup_flags & IORING_SETUP_R_DISABLED) {
		int err = ms__uring_enable_rings(&st->ring);
		if (err < 0)
			return err;
	}
	/* Saves a file lookup per io_uring_enter; optional (5.18+). */
	(void)io_uring_register_ring_fd(&st->ring);
	st->ready = true;
	return 0;
}

/* Drop a ring that refused a submission: its queue may hold requests nobody must send. */
static void ring_drop(struct uring_state *st)
{
	io_uring_queue_exit(&st->ring);
	st->open = false;
	st->ready = false;
	st->files_ok = false;
}

static void prep(struct uring_state *st, struct ms__send *s, struct ms__bucket *b, uint32_t j,
		 size_t i)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&st->ring);
	const struct ms__dest *d = &b->dests[j];
	int flags = s->msg_flags;

	/* send(2) on a blocking stream socket returns when all is sent; io_uring does the same
	 * only with MSG_WAITALL (otherwise it may complete short). */
	if (b->type != SOCK_DGRAM && !(flags & MSG_DONTWAIT))
		flags |= MSG_WAITALL;
	if (s->iovcnt == 1 && (!d->addrlen || g_send_addr)) {
		io_uring_prep_send(sqe, b->fd, s->iov[0].iov_base, s->iov[0].iov_len, flags);
		if (d->addrlen)
			io_uring_prep_send_set_addr(sqe, (const struct sockaddr *)&d->addr,
						    (uint16_t)d->addrlen);
	} else {
		io_uring_prep_sendmsg(sqe, b->fd, &b->msgs[j].msg_hdr, (unsigned)flags);
	}
	if (b->fixed && st->files_ok)
		sqe->flags |= IOSQE_FIXED_FILE;
	sqe->user_data = i;
	if (s->res)
		s->res[i].id = d->id;
}

/* Submit the queued requests, wait for all of them, record their results. Interrupted sends
 * are appended to st->retry. Returns 0, or -errno when the ring refused the submission (then
 * nothing of this batch was sent). */
static int flush(struct uring_state *st, struct ms__send *s, unsigned queued, unsigned *nretry)
{
	int r;
	do {
		s->syscalls++;
		r = io_uring_submit_and_wait(&st->ring, queued);
	} while (r == -EINTR);
	if (r < 0)
		return r;

	unsigned seen = 0;
	for (;;) {
		struct io_uring_cqe *cqe;
		unsigned head, n = 0;
		io_uring_for_each_cqe(&st->ring, head, cqe) {
			size_t i = (size_t)cqe->user_data;
			if (cqe->res == -EINTR) {
				st->retry[(*nretry)++] = i;
			} else {
				if (s->res)
					s->res[i].status = cqe->res;
				ms__account(s, cqe->res);
			}
			n++;
		}
		io_uring_cq_advance(&st->ring, n);
		seen += n;
		if (seen >= queued)
			return 0;
		/* Some requests had to wait for socket space: wait for them, they use the buffer. */
		do {
			s->syscalls++;
			r = io_uring_wait_cqe_nr(&st->ring, &cqe, queued - seen);
		} while (r == -EINTR || r == -EAGAIN || r == -EBUSY);
		if (r < 0)
			return r;
	}
}

/* Position of the i-th destination (rare path: resubmitting after -EINTR). */
static void locate(struct ms_group *g, size_t i, struct ms__bucket **b, uint32_t *j)
{
	for (uint32_t k = 0;; k++) {
		if (i < g->buckets[k]->n) {
			*b = g->buckets[k];
			*j = (uint32_t)i;
			return;
		}
		i -= g->buckets[k]->n;
	}
}

/* Submit the batch and then any interrupted requests again until none are left. On failure,
 * *nretried says how many retried requests (listed in st->retry) were left unsent; 0 means
 * the first submission failed and nothing of the batch went out. */
static int flush_all(struct uring_state *st, struct ms__send *s, unsigned queued,
		     unsigned *nretried)
{
	unsigned nretry = 0;
	int err = flush(st, s, queued, &nretry);
	*nretried = 0;
	while (!err && nretry) {
		unsigned n = nretry;
		for (unsigned k = 0; k < n; k++) {
			struct ms__bucket *b;
			uint32_t j;
			locate(s->g, st->retry[k], &b, &j);
			prep(st, s, b, j, st->retry[k]);
		}
		nretry = 0;
		err = flush(st, s, n, &nretry);
		if (err)
			*nretried = n;
	}
	return err;
}

static void record_status(struct ms__send *s, size_t i, int status)
{
	if (s->res)
		s->res[i].status = status; /* the id was written by prep */
	ms__account(s, status);
}

/* The ring refused a batch: its unsent requests get the error, and the ring, whose queue may
 * still hold them, is dropped (the next send sets up a new one). */
static void fail_batch(struct uring_state *st, struct ms__send *s, int err, size_t from,
		       size_t to, unsigned nretried)
{
	ring_drop(st);
	if (nretried) {
		for (unsigned q = 0; q < nretried; q++)
			record_status(s, st->retry[q], err);
	} else {
		for (size_t q = from; q < to; q++)
			record_status(s, q, err);
	}
}

static int uring_send(struct ms__send *s)
{
	struct ms_group *g = s->g;
	struct uring_state *st = g->ctx->be_state;
	int err = 0;
	size_t i = 0, batch_start = 0;
	unsigned queued = 0, nretried;

	if (!st->ready)
		err = make_ready(st, g->ctx->queue_depth);
	for (uint32_t k = 0; k < g->nbuckets; k++) {
		struct ms__bucket *b = g->buckets[k];
		for (uint32_t j = 0; j < b->n; j++, i++) {
			if (err) {
				ms__record(s, i, b->dests[j].id, err);
				continue;
			}
			prep(st, s, b, j, i);
			if (++queued < st->depth)
				continue;
			err = flush_all(st, s, queued, &nretried);
			if (err)
				fail_batch(st, s, err, batch_start, i + 1, nretried);
			queued = 0;
			batch_start = i + 1;
		}
	}
	if (!err && queued) {
		err = flush_all(st, s, queued, &nretried);
		if (err)
			fail_batch(st, s, err, batch_start, i, nretried);
	}
	return err;
}

static void uring_describe(const struct ms_ctx *ctx, char *buf, size_t len)
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
	const struct uring_state *st = ctx->be_state;
	char flags[96] = "";
	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
		if (st->setup_flags & names[k].flag)
			snprintf(flags + strlen(flags), sizeof(flags) - strlen(flags), "%s%s",
				 *flags ? "|" : "", names[k].name);
	snprintf(buf, len, "ring of %u entries, flags %s, %s, %s", st->depth,
		 *flags ? flags : "none", st->files_ok ? "registered files" : "plain fds",
		 g_send_addr ? "SEND with address" : "SENDMSG for addresses");
}

const struct ms__backend ms__backend_iouring = {
	.id = MS_BACKEND_IO_URING,
	.name = "io_uring",
	.probe = uring_probe,
	.ctx_init = uring_ctx_init,
	.ctx_fini = uring_ctx_fini,
	.bucket_added = uring_bucket_added,
	.bucket_removed = uring_bucket_removed,
	.describe = uring_describe,
	.send = uring_send,
};
