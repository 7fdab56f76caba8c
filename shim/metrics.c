/* SPDX-License-Identifier: MIT */
/*
 * Counting. Every counter lives in the thread that makes the calls, in that socket's row (no
 * atomics, no shared cache lines on the hot path, and no separate totals: report.c adds the
 * rows up at exit). Flushes, which another thread may run, write only their own fields, under
 * the batch lock.
 *
 * Fan-out runs: consecutive sends of byte-identical payloads to different destinations (a
 * destination is a socket and an address). The previous payload is kept per thread; a send
 * compares against it (memcmp, stopping at the first difference) and copies only when it
 * differs.
 *
 * Metrics mode also runs the batch planner on the side (without copying anything), so the
 * report can say how many send-family system calls batch mode would have made.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <string.h>

#include "shim.h"

const char *const shim_reason_name[FLUSH_N] = {
	[FLUSH_FULL] = "full",
	[FLUSH_ARENA] = "payload_space",
	[FLUSH_FANOUT] = "fanout_end",
	[FLUSH_SOCKETS] = "too_many_sockets",
	[FLUSH_SEND] = "pass_through_send",
	[FLUSH_RECV] = "recv",
	[FLUSH_READ] = "read",
	[FLUSH_POLL] = "poll",
	[FLUSH_SLEEP] = "sleep",
	[FLUSH_CLOSE] = "close_dup",
	[FLUSH_WRITE] = "write",
	[FLUSH_SOCKOPT] = "socket_state",
	[FLUSH_SOCKET] = "new_socket",
	[FLUSH_OTHER_THREAD] = "other_thread",
	[FLUSH_AGE] = "age",
	[FLUSH_FORK] = "fork",
	[FLUSH_EXEC] = "exec",
	[FLUSH_THREAD_EXIT] = "thread_exit",
	[FLUSH_SYNC] = "sync",
	[FLUSH_SIGNAL] = "signal",
	[FLUSH_NAMESPACE] = "namespace",
	[FLUSH_EXIT] = "exit",
};

const char *const shim_call_name[CALL_N] = {
	[CALL_SEND] = "send",
	[CALL_SENDTO] = "sendto",
	[CALL_SENDMSG] = "sendmsg",
	[CALL_SENDMMSG] = "sendmmsg",
	[CALL_WRITE] = "write",
	[CALL_WRITEV] = "writev",
};

void shim_counts_add(struct shim_counts *to, const struct shim_counts *from)
{
	to->calls += from->calls;
	to->datagrams += from->datagrams;
	to->bytes += from->bytes;
	to->batched += from->batched;
	to->passed += from->passed;
	to->errors += from->errors;
	to->flush_errors += from->flush_errors;
	to->syscalls += from->syscalls;
	to->fsyscalls += from->fsyscalls;
	to->syscalls_est += from->syscalls_est;
	to->runs += from->runs;
	to->run_dests += from->run_dests;
	if (from->run_max > to->run_max)
		to->run_max = from->run_max;
	if (from->last_errno)
		to->last_errno = from->last_errno;
}

static struct shim_sockrow *slot(struct shim_thread *t, int fd)
{
	return (unsigned)fd < SHIM_SOCK_SLOTS ? &t->rows[fd] : &t->rows[SHIM_SOCK_SLOTS];
}

struct shim_sockrow *shim_row(struct shim_thread *t, int fd, struct shim_fd *e, uint32_t info)
{
	struct shim_sockrow *r = slot(t, fd);

	if (unlikely((unsigned)fd >= SHIM_SOCK_SLOTS)) {
		r->fd = -1; /* everything above shares one row */
		r->info |= info;
		return r;
	}
	uint32_t gen = e ? __atomic_load_n(&e->gen, __ATOMIC_RELAXED) : 0;
	if (likely(r->gen == gen && r->fd == fd && r->info == info))
		return r;
	if (r->c.calls || r->c.fsyscalls) {
		/* The number names another socket now: keep the old one's counts. */
		if (r->gen == gen && r->fd == fd) {
			r->info = info; /* same socket, reclassified (an option changed) */
			return r;
		}
		pthread_mutex_lock(&shim_registry_lock);
		shim_report_retire_row(r);
		pthread_mutex_unlock(&shim_registry_lock);
		shim_counts_add(&t->live_gone, &r->c); /* the live totals never go down */
		memset(r, 0, sizeof(*r));
		if (t->run_row == r)
			t->run_row = NULL;
	}
	r->fd = fd;
	r->gen = gen;
	r->info = info;
	if ((uint32_t)fd >= t->rows_hi)
		t->rows_hi = (uint32_t)fd + 1; /* how far live.c adds up */
	return r;
}

static void end_run(struct shim_thread *t)
{
	uint64_t n = t->run_len;

	if (n >= 2) {
		if (t->run_row) {
			t->run_row->c.runs++;
			t->run_row->c.run_dests += n;
			if (n > t->run_row->c.run_max)
				t->run_row->c.run_max = n;
		}
	}
	t->run_len = 0;
}

static void est_flush(struct shim_thread *t)
{
	struct shim_plan *p = &t->est;

	/* One system call per socket in the batch (a batch never exceeds one sendmmsg). */
	for (uint32_t k = 0; k < p->nfds; k++)
		slot(t, p->fds[k])->c.syscalls_est++;
	shim_plan_reset(p);
}

/* A send batch mode could take, in the estimate: what batch mode does with it (shim.h's
 * planner, and no batch before the fan-out pattern is known). */
static void est_send(struct shim_thread *t, struct shim_sockrow *row, int fd, uint64_t key)
{
	enum shim_reason why;

	shim_plan_observe(&t->est, key);
	if (shim_cfg.fanout_end && t->est.pred_len < 2 && !t->est.n) {
		row->c.syscalls_est++;
		return;
	}
	if (unlikely(shim_plan_needs_room(&t->est, fd)))
		est_flush(t);
	if (shim_plan_take(&t->est, fd, key, shim_cfg.batch_max, &why))
		est_flush(t);
}

void shim_count_boundary(struct shim_thread *t)
{
	if (t->est.n)
		est_flush(t);
}

void shim_count_thread_end(struct shim_thread *t)
{
	end_run(t);
	if (shim_cfg.mode == SHIM_METRICS)
		shim_count_boundary(t);
}

static bool last_eq(const struct shim_thread *t, const struct iovec *iov, int iovcnt, size_t len)
{
	if (t->last_len != len)
		return false;
	const uint8_t *p = t->lastbuf;
	for (int i = 0; i < iovcnt; i++) {
		if (!shim_bytes_eq(p, iov[i].iov_base, iov[i].iov_len))
			return false;
		p += iov[i].iov_len;
	}
	return true;
}

static void last_set(struct shim_thread *t, const struct iovec *iov, int iovcnt, size_t len)
{
	if (len > SHIM_LAST_MAX) {
		t->last_len = SIZE_MAX;
		return;
	}
	uint8_t *p = t->lastbuf;
	for (int i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len)
			memcpy(p, iov[i].iov_base, iov[i].iov_len);
		p += iov[i].iov_len;
	}
	t->last_len = len;
}

struct shim_sockrow *shim_count_send(struct shim_thread *t, const struct shim_send *s,
				     struct shim_fd *e, uint64_t key, uint32_t info,
				     bool batchable)
{
	struct shim_sockrow *row = shim_row(t, s->fd, e, info);

	t->counted = true;
	t->calls_by[s->call]++;
	row->c.calls++;

	if (shim_cfg.mode == SHIM_BYPASS) {
		/* Fan-out runs tell what batching would save: nothing bypass mode does. */
	} else if (likely(s->call != CALL_SENDMMSG)) {
		/* Only a payload known to be readable is looked at (probe.c). */
		const bool valid = s->readable;
		if (valid && last_eq(t, s->iov, s->iovcnt, s->len)) {
			if (key != t->last_key)
				t->run_len = t->run_len ? t->run_len + 1 : 2;
			else
				end_run(t);
		} else {
			end_run(t);
			if (valid)
				last_set(t, s->iov, s->iovcnt, s->len);
			else
				t->last_len = SIZE_MAX;
		}
		t->last_key = key;
		t->run_row = row;
	} else {
		end_run(t);
		t->last_len = SIZE_MAX;
	}

	if (shim_cfg.mode == SHIM_METRICS) {
		if (batchable) {
			est_send(t, row, s->fd, key);
		} else {
			est_flush(t);
			row->c.syscalls_est++;
		}
	}
	shim_live_count(t);
	return row;
}

ssize_t shim_metrics_fast(int fd, const void *buf, size_t len, int flags,
			  const struct sockaddr *addr, socklen_t alen, enum shim_call call)
{
	struct shim_thread *t = shim_self;
	struct shim_fd *e = shim_fd_peek(fd);

	if (unlikely(!t || !e || (unsigned)fd >= SHIM_SOCK_SLOTS))
		return SHIM_SLOW;
	/* The row is this socket's if it was made for the same (info, generation) pair, which
	 * shim_fd keeps side by side: one 64-bit compare. */
	struct shim_sockrow *row = &t->rows[fd];
	uint64_t now_tag = __atomic_load_n((const uint64_t *)(const void *)&e->info, __ATOMIC_RELAXED);
	uint64_t row_tag;
	memcpy(&row_tag, &row->info, sizeof(row_tag));
	uint32_t info = (uint32_t)now_tag;
	if (unlikely(!info || now_tag != row_tag || row->fd != fd))
		return SHIM_SLOW;

	/* The kernel first: nothing of the program's is read before it has read it (a buffer
	 * or an address it refuses with EFAULT is never touched; probe.c). */
	shim_guard = 0;
	ssize_t r = call == CALL_SENDTO ? shim_real.sendto(fd, buf, len, flags, addr, alen)
					: shim_real.send(fd, buf, len, flags);
	shim_guard = 1;
	const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
	if (unlikely(r < 0 || (size_t)r != len ||
		     (addr && (alen < sizeof(*in) || in->sin_family != AF_INET)))) {
		int err = errno;
		struct shim_send s = { .call = call, .fd = fd, .flags = flags, .buf = buf,
				       .uaddr = addr, .ualen = alen, .len = len };
		shim_count_made(t, &s, e, info, r, err, false);
		errno = err;
		return r;
	}
	uint64_t key = (uint64_t)(uint16_t)fd << 48;
	bool dest_ok;
	if (addr) {
		key |= (uint64_t)in->sin_port << 32 | in->sin_addr.s_addr;
		dest_ok = !(info & FD_V6) && in->sin_port &&
			  in->sin_addr.s_addr != htonl(INADDR_BROADCAST);
	} else {
		key |= 0xffffffffffffu;
		dest_ok = info & FD_CONNECTED;
	}

	t->calls_by[call]++;
	row->c.calls++;
	if (len == t->last_len && shim_bytes_eq(t->lastbuf, buf, len)) {
		if (key != t->last_key)
			t->run_len = t->run_len ? t->run_len + 1 : 2;
		else
			end_run(t);
	} else {
		end_run(t);
		struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
		last_set(t, &iov, 1, len);
	}
	t->last_key = key;
	t->run_row = row;

	if ((info & FD_BATCHABLE) && dest_ok && !(flags & ~MSG_NOSIGNAL) && len <= SHIM_PAYLOAD_MAX) {
		est_send(t, row, fd, key);
	} else {
		est_flush(t);
		row->c.syscalls_est++;
	}

	shim_live_count(t);
	/* In metrics mode every call is one system call passed through: report.c fills in
	 * those two counters from the calls. */
	row->c.datagrams++;
	row->c.bytes += (uint64_t)r;
	return r;
}

void shim_count_made(struct shim_thread *t, struct shim_send *s, struct shim_fd *e,
		     uint32_t info, ssize_t r, int err, bool observe)
{
	/* What the kernel took it has read; after any other failure than EFAULT the shim
	 * looks for itself (probe.c); after EFAULT it reads nothing. */
	if (r >= 0 || err != EFAULT)
		shim_send_load(s, r >= 0 ? r : -1);
	uint64_t key = 0;
	bool can = false;
	if (shim_cfg.mode != SHIM_BYPASS) {
		key = s->loaded ? shim_dest_key(s->fd, s->addr, s->alen)
				: shim_dest_key(s->fd, NULL, 0);
		bool dest_ok = s->loaded && (info & FD_BATCHABLE) &&
			       shim_dest_ok(info, s->addr, s->alen);
		can = dest_ok && s->call <= CALL_SENDMSG && shim_batchable(s, info, dest_ok);
	}
	struct shim_sockrow *row = shim_count_send(t, s, e, key, info, can);
	if (observe && can)
		shim_batch_observe(t, key);
	shim_count_result(t, row, r, err, 1, false, 1);
}

static unsigned errno_slot(int err)
{
	return err > 0 && err < SHIM_ERRNO_MAX ? (unsigned)err : 0;
}

void shim_count_result(struct shim_thread *t, struct shim_sockrow *row, ssize_t r, int err,
		       uint64_t datagrams, bool batched, uint64_t syscalls)
{
	struct shim_counts *c = &row->c;

	c->syscalls += syscalls;
	if (likely(r >= 0)) {
		c->datagrams += datagrams;
		c->bytes += (uint64_t)r;
		if (batched)
			c->batched += datagrams;
		else
			c->passed++;
	} else {
		c->passed += !batched;
		c->errors++;
		c->last_errno = err;
		t->errs[errno_slot(err)]++;
	}
}

void shim_count_framed(struct shim_sockrow *row, size_t len, uint64_t syscalls)
{
	struct shim_counts *c = &row->c;

	c->syscalls += syscalls;
	c->datagrams++;
	c->bytes += len;
}

void shim_count_flush_error(struct shim_thread *t, int fd, int err)
{
	struct shim_sockrow *row = slot(t, fd);

	t->ferrs[errno_slot(err)]++;
	row->c.flush_errors++;
	row->c.last_errno = err;
}

/* ---- sends that re-entered the shim (signal handlers) --------------------------------------- */

struct shim_reentry shim_re;

static inline void re_add(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

ssize_t shim_count_reentered(enum shim_call call, ssize_t r, bool queued)
{
	int err = errno; /* read only when r < 0; nothing here changes it */

	re_add(&shim_re.calls, 1);
	re_add(&shim_re.calls_by[call], 1);
	if (r >= 0) {
		re_add(&shim_re.datagrams, 1);
		re_add(&shim_re.bytes, (uint64_t)r);
	} else {
		re_add(&shim_re.errors, 1);
		re_add(&shim_re.errs[errno_slot(err)], 1);
	}
	if (queued)
		re_add(&shim_re.batched, 1);
	else
		re_add(&shim_re.passed, 1);
	return r;
}

int shim_count_reentered_mmsg(int r, const struct mmsghdr *msgs)
{
	int err = errno;
	uint64_t bytes = 0;

	for (int i = 0; i < r; i++)
		bytes += msgs[i].msg_len;
	re_add(&shim_re.calls, 1);
	re_add(&shim_re.calls_by[CALL_SENDMMSG], 1);
	re_add(&shim_re.passed, 1);
	if (r >= 0) {
		re_add(&shim_re.datagrams, (uint64_t)r);
		re_add(&shim_re.bytes, bytes);
	} else {
		re_add(&shim_re.errors, 1);
		re_add(&shim_re.errs[errno_slot(err)], 1);
	}
	return r;
}

extern _Atomic uint64_t shim_reentered, shim_sigqueued; /* intercept.c */

void shim_reentry_reset(void)
{
	_Atomic uint64_t *c = (_Atomic uint64_t *)&shim_re;
	for (size_t i = 0; i < sizeof(shim_re) / sizeof(*c); i++)
		atomic_store_explicit(&c[i], 0, memory_order_relaxed);
	atomic_store_explicit(&shim_reentered, 0, memory_order_relaxed);
	atomic_store_explicit(&shim_sigqueued, 0, memory_order_relaxed);
	atomic_store_explicit(&shim_sigoverflow, 0, memory_order_relaxed);
	atomic_store_explicit(&shim_sigunordered, 0, memory_order_relaxed);
}
