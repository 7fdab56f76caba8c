/* SPDX-License-Identifier: MIT */
/* The hand-written baselines (see raw.h). No library call in here. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef BENCH_TREE_HAS_LIBURING
#include <liburing.h>
#endif

#include "raw.h"

#define MMSG_MAX 1024u     /* UIO_MAXIOV: the kernel's limit per sendmmsg call */
#define URING_MAX 4096u    /* ring entries at most; larger fan-outs submit per ring-full */

const char *raw_fanout_function(enum variant_id v)
{
	switch (variant_base(v)) {
	case V_RAW:
		return "bench_raw_sendto_fanout";
	case V_RAW_SENDMMSG:
		return "bench_raw_sendmmsg_fanout";
	case V_RAW_IO_URING:
		return "bench_raw_uring_fanout";
	case V_RAW_XDP:
		return "bench_raw_xdp_fanout";
	case V_RAW_HOOK:
		return "bench_raw_sendto_fanout";
	case V_RAW_KFANOUT:
		return "bench_raw_kfanout_fanout";
	default:
		return "ms_send";
	}
}

/* ---- raw-sendto ----------------------------------------------------------------------------- */

/* As a user would write it: nothing hoisted, nothing batched. */
uint64_t bench_raw_sendto_fanout(struct rig *r)
{
	const size_t len = r->size;
	const int flags = r->raw_flags;
	uint64_t failed = 0;

	r->raw_syscalls += r->n;
	if (r->connected) {
		for (uint64_t i = 0; i < r->n; i++)
			if (sendto(r->conn[i], r->msg, len, flags, NULL, 0) != (ssize_t)len)
				failed++;
	} else {
		for (uint64_t i = 0; i < r->n; i++)
			if (sendto(r->shared, r->msg, len, flags, (const struct sockaddr *)&r->dests[i],
				   sizeof(r->dests[i])) != (ssize_t)len)
				failed++;
	}
	return failed;
}

/* ---- raw-sendmmsg --------------------------------------------------------------------------- */

uint64_t bench_raw_sendmmsg_fanout(struct rig *r)
{
	const size_t len = r->size;
	const int flags = r->raw_flags;
	struct mmsghdr *mm = r->raw_mm;
	uint64_t failed = 0;

	/* The headers were prepared once; only the message changes between fan-outs. */
	r->raw_iov.iov_base = r->msg;
	r->raw_iov.iov_len = len;
	if (r->connected) {
		for (uint64_t i = 0; i < r->n; i++) {
			int rc;

			do {
				r->raw_syscalls++;
				rc = sendmmsg(r->conn[i], &mm[i], 1, flags);
			} while (rc < 0 && errno == EINTR);
			if (rc != 1 || mm[i].msg_len != len)
				failed++;
		}
		return failed;
	}
	for (uint64_t off = 0; off < r->n;) {
		unsigned chunk = r->n - off < MMSG_MAX ? (unsigned)(r->n - off) : MMSG_MAX;
		int rc;

		r->raw_syscalls++;
		rc = sendmmsg(r->shared, mm + off, chunk, flags);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc <= 0) {
			/* The kernel reports an error only for the first message of a call (a later
			 * one's failure ends the call early, and the next call starts with it). */
			failed++;
			off++;
			continue;
		}
		for (uint64_t j = off; j < off + (unsigned)rc; j++)
			if (mm[j].msg_len != len)
				failed++;
		off += (unsigned)rc;
	}
	return failed;
}

/* ---- raw-io_uring --------------------------------------------------------------------------- */

#ifdef BENCH_TREE_HAS_LIBURING

struct raw_uring {
	struct io_uring ring;
	unsigned depth;     /* submission entries */
	bool fixed;         /* the sockets are registered files: index i (connected) or 0 */
	bool send_addr;     /* IORING_OP_SEND takes a destination address */
	int broken;         /* the ring refused a submission: every later send fails */
};

static const unsigned ring_flags[] = {
	IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
	0,
};

/* A ring with the first flags this kernel accepts; *flags says which. */
static int ring_init(struct io_uring *ring, unsigned entries, unsigned *flags)
{
	int err = -EINVAL;

	for (size_t k = 0; k < ARRAY_SIZE(ring_flags); k++) {
		struct io_uring_params p;

		memset(&p, 0, sizeof(p));
		p.flags = ring_flags[k];
		err = io_uring_queue_init_params(entries, ring, &p);
		if (err == -EINVAL)
			continue; /* a flag this kernel does not know */
		if (!err)
			*flags = ring_flags[k];
		return err;
	}
	return err;
}

/* SEND with an address came with Linux 6.1, as did SENDMSG_ZC: the library detects it the
 * same way (liburing cannot ask about a feature of an opcode). */
static bool ring_send_addr(struct io_uring *ring, bool *send_ok)
{
	struct io_uring_probe *p = io_uring_get_probe_ring(ring);
	bool addr = false;

	*send_ok = false;
	if (p) {
		*send_ok = io_uring_opcode_supported(p, IORING_OP_SEND) &&
			   io_uring_opcode_supported(p, IORING_OP_SENDMSG);
		addr = io_uring_opcode_supported(p, IORING_OP_SENDMSG_ZC);
		io_uring_free_probe(p);
	}
	return addr;
}

bool raw_uring_probe(char *detail, size_t len)
{
	struct io_uring ring;
	unsigned flags = 0;
	bool send_ok, addr;
	int err = ring_init(&ring, 4, &flags);

	if (err) {
		snprintf(detail, len,
			 "unavailable: the kernel refuses io_uring (%s: older than 5.6, "
			 "kernel.io_uring_disabled, or a seccomp filter, as in container runtimes)",
			 strerror(-err));
		return false;
	}
	addr = ring_send_addr(&ring, &send_ok);
	io_uring_queue_exit(&ring);
	if (!send_ok) {
		snprintf(detail, len, "unavailable: the kernel lacks IORING_OP_SEND/SENDMSG (5.6)");
		return false;
	}
	snprintf(detail, len,
		 "hand-written io_uring, no library: one ring per configuration of min(N, %u) "
		 "entries, flags %s, sockets as registered files, %s; one submit-and-wait per "
		 "fan-out",
		 URING_MAX, flags ? "SINGLE_ISSUER|DEFER_TASKRUN" : "none",
		 addr ? "SEND with address" : "SENDMSG for addresses (no SEND with address before 6.1)");
	return true;
}

static int uring_open(struct rig *r, char *err, size_t errlen)
{
	struct raw_uring *u = calloc(1, sizeof(*u));
	unsigned flags = 0;
	bool send_ok;
	int e;

	if (!u) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	e = ring_init(&u->ring, r->n < URING_MAX ? (unsigned)r->n : URING_MAX, &flags);
	if (e) {
		free(u);
		snprintf(err, errlen, "raw-io_uring: io_uring_queue_init: %s", strerror(-e));
		return e;
	}
	u->depth = u->ring.sq.ring_entries;
	u->send_addr = ring_send_addr(&u->ring, &send_ok);
	/* Saves a file lookup per io_uring_enter, as the library does (5.18+; optional). */
	(void)io_uring_register_ring_fd(&u->ring);
	/* Registered files spare the kernel a file lookup per request; a kernel or a limit that
	 * refuses the table leaves plain descriptors, which work the same. */
	if (r->connected)
		u->fixed = io_uring_register_files(&u->ring, r->conn, (unsigned)r->n) == 0;
	else
		u->fixed = io_uring_register_files(&u->ring, &r->shared, 1) == 0;
	r->raw_ring = u;
	return 0;
}

static void uring_close(struct rig *r)
{
	if (!r->raw_ring)
		return;
	io_uring_queue_exit(&r->raw_ring->ring);
	free(r->raw_ring);
	r->raw_ring = NULL;
}

/* Submit queued requests and wait for all of them; the count of those that did not send the
 * whole message. A ring that refuses the submission is marked broken: its requests count as
 * failed (nothing of this fan-out is resent). */
static uint64_t uring_flush(struct rig *r, struct raw_uring *u, unsigned queued)
{
	unsigned submitted = 0, seen = 0, busy = 0;
	uint64_t failed = 0;
	int rc;

	while (submitted < queued) {
		r->raw_syscalls++;
		rc = submitted ? io_uring_submit(&u->ring)
			       : io_uring_submit_and_wait(&u->ring, queued);
		if (rc == -EINTR || ((rc == -EAGAIN || rc == -EBUSY) && ++busy < 1000))
			continue;
		if (rc <= 0) {
			u->broken = rc ? rc : -EIO;
			failed += queued - submitted;
			break;
		}
		submitted += (unsigned)rc;
	}
	while (seen < submitted) {
		struct io_uring_cqe *cqe;
		unsigned head, n = 0;

		io_uring_for_each_cqe(&u->ring, head, cqe) {
			if (cqe->res != (int)r->size)
				failed++;
			n++;
		}
		io_uring_cq_advance(&u->ring, n);
		seen += n;
		if (seen >= submitted)
			break;
		/* Requests that waited for socket space still use the message: wait for them. */
		r->raw_syscalls++;
		rc = io_uring_wait_cqe_nr(&u->ring, &cqe, submitted - seen);
		if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
			u->broken = rc;
			failed += submitted - seen;
			break;
		}
	}
	return failed;
}

uint64_t bench_raw_uring_fanout(struct rig *r)
{
	struct raw_uring *u = r->raw_ring;
	const unsigned sqe_flags = u->fixed ? IOSQE_FIXED_FILE : 0;
	const int shared = u->fixed ? 0 : r->shared;
	const int flags = r->raw_flags;
	uint64_t failed = 0;
	unsigned queued = 0;

	if (u->broken)
		return r->n;
	r->raw_iov.iov_base = r->msg;
	r->raw_iov.iov_len = r->size;
	for (uint64_t i = 0; i < r->n; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);

		if (r->connected) {
			io_uring_prep_send(sqe, u->fixed ? (int)i : r->conn[i], r->msg, r->size, flags);
		} else if (u->send_addr) {
			io_uring_prep_send(sqe, shared, r->msg, r->size, flags);
			io_uring_prep_send_set_addr(sqe, (const struct sockaddr *)&r->dests[i],
						    sizeof(r->dests[i]));
		} else {
			io_uring_prep_sendmsg(sqe, shared, &r->raw_mm[i].msg_hdr, (unsigned)flags);
		}
		sqe->flags |= (__u8)sqe_flags;
		if (++queued == u->depth) {
			failed += uring_flush(r, u, queued);
			queued = 0;
			if (u->broken)
				return failed + (r->n - i - 1);
		}
	}
	if (queued)
		failed += uring_flush(r, u, queued);
	return failed;
}

#else /* !BENCH_TREE_HAS_LIBURING */

struct raw_uring {
	int unused;
};

bool raw_uring_probe(char *detail, size_t len)
{
	snprintf(detail, len, "unavailable: the bench was built without liburing");
	return false;
}

static int uring_open(struct rig *r, char *err, size_t errlen)
{
	(void)r;
	snprintf(err, errlen, "raw-io_uring: built without liburing");
	return -ENOTSUP;
}

static void uring_close(struct rig *r)
{
	(void)r;
}

uint64_t bench_raw_uring_fanout(struct rig *r)
{
	return r->n;
}

#endif

/* ---- set-up --------------------------------------------------------------------------------- */

int raw_open(const struct session *s, struct rig *r, char *err, size_t errlen)
{
	const bool mmsg = s->var[V_RAW_SENDMMSG].available || s->var[V_RAW_SENDMMSG_DW].available,
		   uring = s->var[V_RAW_IO_URING].available || s->var[V_RAW_IO_URING_DW].available;

	/* raw-io_uring's SENDMSG fallback uses the same headers. */
	if (mmsg || uring) {
		r->raw_mm = calloc(r->n, sizeof(*r->raw_mm));
		if (!r->raw_mm) {
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		r->raw_iov.iov_base = r->msg;
		r->raw_iov.iov_len = r->size;
		for (uint64_t i = 0; i < r->n; i++) {
			struct msghdr *h = &r->raw_mm[i].msg_hdr;

			if (!r->connected) {
				h->msg_name = (void *)&r->dests[i];
				h->msg_namelen = sizeof(r->dests[i]);
			}
			h->msg_iov = &r->raw_iov;
			h->msg_iovlen = 1;
		}
	}
	if (uring) {
		int e = uring_open(r, err, errlen);

		if (e)
			return e;
	}
	if (s->var[V_RAW_XDP].available) {
		int e = raw_xdp_open(s, r, err, errlen);

		if (e)
			return e;
	}
	if (s->var[V_RAW_KFANOUT].available)
		return raw_kfanout_open(s, r, err, errlen);
	return 0;
}

void raw_close(struct rig *r)
{
	raw_xdp_close(r);
	raw_kfanout_close(r);
	uring_close(r);
	free(r->raw_mm);
	r->raw_mm = NULL;
}
