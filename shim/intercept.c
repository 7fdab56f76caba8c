/* SPDX-License-Identifier: MIT */
/*
 * The exported wrappers: the only symbols the shim exports (libmultisend-preload.map lists
 * them). Each one is a thin door:
 *
 *   re-entered (shim_guard set)  -> the real function at once, with no lock taken. That is
 *                                   the async-signal-safe path: a handler that sends while its
 *                                   thread is inside the shim, or a call the shim makes itself.
 *                                   (A handler's send that would overtake its thread's batch
 *                                   waits in the batch's lock-free signal queue instead.)
 *   mode off / filtered program  -> the real function.
 *   send family                  -> do_send: count, batch or pass through.
 *   everything else              -> a flush point: this thread's batch (and another thread's
 *                                   data for the same descriptor) goes out first, then the
 *                                   real function runs with the guard released, so a signal
 *                                   handler during a blocking call gets the normal paths.
 *
 * The socket-address parameters use glibc's transparent-union types (__SOCKADDR_ARG) so the
 * definitions match the declarations of <sys/socket.h> under _GNU_SOURCE.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sched.h>
#include <semaphore.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <threads.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include "shim.h"

_Atomic uint64_t shim_reentered;
_Atomic uint64_t shim_sigqueued; /* ... of which queued behind the batch */

/* The real function, resolved now if a re-entered call came before init finished. */
#define REAL(field, sym) \
	(likely(shim_real.field != NULL) ? shim_real.field \
					 : (__typeof__(shim_real.field))shim_resolve_one(sym))

static inline bool off(void)
{
	return shim_cfg.mode == SHIM_OFF;
}

/* ---- flush points --------------------------------------------------------------------------- */

static void point_slow(int fd, enum shim_reason why)
{
	int saved = errno;

	if (fd >= 0) {
		shim_flush_fd(fd, why);
	} else {
		shim_flush_own(why);
	}
	errno = saved;
}

/* Does another thread hold data for fd? (No table yet: nobody does.) */
static inline bool other_pending(int fd, const struct shim_thread *t)
{
	struct shim_fd *e = shim_fd_peek(fd);
	struct shim_thread *p = e ? atomic_load_explicit(&e->pending, memory_order_relaxed) : NULL;
	return p && p != t;
}

/* Enter, flush what this call must not overtake, leave. Then the caller runs the real call.
 * The common case, nothing pending anywhere, costs a few loads. */
static inline void point(int fd, enum shim_reason why)
{
	shim_guard = 1;
	shim_init();
	struct shim_thread *t = shim_self;
	if (shim_cfg.mode == SHIM_METRICS) {
		if (t && t->est.n)
			shim_count_boundary(t);
	} else if (shim_cfg.mode == SHIM_BATCH) {
		if ((t && t->b && __atomic_load_n(&t->b->first_ns, __ATOMIC_RELAXED)) ||
		    (fd >= 0 && other_pending(fd, t)))
			point_slow(fd, why);
	} else if (shim_cfg.mode == SHIM_BYPASS) {
		/* The program may have waited for another process that changed a route: the
		 * next frame is made after the kernel's notifications are read (unless they
		 * were in the last millisecond). */
		shim_xport_recheck(false);
	}
	if (t && unlikely(__atomic_load_n(&shim_live_enabled, __ATOMIC_RELAXED)))
		shim_live_idle(t);
	shim_guard = 0;
}

/* ---- the send path -------------------------------------------------------------------------- */

static ssize_t real_send(const struct shim_send *s)
{
	switch (s->call) {
	case CALL_SEND:
		return shim_real.send(s->fd, s->buf, s->len, s->flags);
	case CALL_SENDTO:
		return shim_real.sendto(s->fd, s->buf, s->len, s->flags, s->uaddr, s->ualen);
	case CALL_SENDMSG:
		return shim_real.sendmsg(s->fd, s->msg, s->flags);
	case CALL_WRITE:
		return shim_real.write(s->fd, s->buf, s->len);
	case CALL_WRITEV:
		return shim_real.writev(s->fd, s->uiov, s->uiovcnt);
	default:
		errno = ENOSYS;
		return -1;
	}
}

/* The kernel makes the send, then the shim counts it (reading only what the kernel read, or
 * what it probes: shim_count_made). Guard set; returns with it cleared, errno as the kernel
 * left it on failure, else saved. */
static ssize_t made_then_counted(struct shim_thread *t, struct shim_send *s, struct shim_fd *e,
				 uint32_t info, int saved, bool observe)
{
	int *errp = &errno;

	shim_guard = 0;
	*errp = saved;
	ssize_t r = real_send(s);
	int err = *errp;
	shim_guard = 1;
	shim_count_made(t, s, e, info, r, err, observe);
	shim_guard = 0;
	*errp = r < 0 ? err : saved;
	return r;
}

/* Called with the guard set and init done; returns with the guard cleared. */
static ssize_t do_send(struct shim_send *s)
{
	int *errp = &errno;
	int saved = *errp;
	struct shim_thread *t = shim_thread();
	struct shim_fd *e = shim_fd_get(s->fd);

	if (unlikely(!t || atomic_load_explicit(&shim_exiting, memory_order_relaxed))) {
		shim_guard = 0;
		return real_send(s);
	}
	uint32_t info = shim_fd_info(s->fd, e);

	if (shim_cfg.mode == SHIM_METRICS)
		return made_then_counted(t, s, e, info, saved, false);

	uint64_t port_sys = 0; /* bypass mode: the port's system calls before the kernel's path */
	struct shim_sockrow *row;
	if (shim_cfg.mode == SHIM_BYPASS) {
		ssize_t r;
		if (unlikely((info & (FD_SOCKET | FD_INET | FD_UNIX)) == FD_SOCKET))
			shim_xport_recheck(true); /* netlink (and the like): routes may change now */
		/* (bypass mode reads nothing of a send to count it) */
		row = shim_count_send(t, s, e, 0, info, false);
		if (shim_bypass_send(t, s, e, info, &port_sys, &r)) {
			shim_count_framed(row, (size_t)r, port_sys);
			shim_guard = 0;
			*errp = saved;
			return r;
		}
	} else {
		/* batch mode */
		if (!e || s->call > CALL_SENDMSG) {
			shim_flush_fd(s->fd, s->call >= CALL_WRITE ? FLUSH_WRITE : FLUSH_SEND);
			return made_then_counted(t, s, e, info, saved, false);
		}
		int de = shim_batch_deferred(e);
		if (de) {
			row = shim_count_send(t, s, e, shim_dest_key(s->fd, NULL, 0), info, false);
			shim_count_result(t, row, -1, de, 1, false, 0);
			shim_guard = 0;
			*errp = de;
			return -1;
		}
		/* A send that will pass whatever it holds is made first and looked at after; one
		 * that may be batched is probed first (probe.c), and passes if the kernel would
		 * refuse it, which then says why. */
		const bool maybe = (info & FD_BATCHABLE) && !(s->flags & ~MSG_NOSIGNAL);
		const bool sure = maybe && shim_batch_surely_passes(t);
		if (!maybe || sure || !shim_send_load(s, -1)) {
			shim_flush_fd(s->fd, FLUSH_SEND);
			return made_then_counted(t, s, e, info, saved, sure);
		}
		uint64_t key = shim_dest_key(s->fd, s->addr, s->alen);
		bool dest_ok = shim_dest_ok(info, s->addr, s->alen);
		bool can = dest_ok && shim_batchable(s, info, dest_ok);
		row = shim_count_send(t, s, e, key, info, can);
		int err = 0;
		if (shim_batch_send(t, s, e, info, key, can, &err) > 0) {
			shim_count_result(t, row, (ssize_t)s->len, 0, 1, true, 0);
			shim_guard = 0;
			*errp = saved;
			return (ssize_t)s->len;
		}
	}

	shim_guard = 0;
	*errp = saved;
	ssize_t r = real_send(s);
	int err = *errp;
	shim_guard = 1;
	shim_count_result(t, row, r, err, 1, false, port_sys + 1);
	shim_guard = 0;
	*errp = r < 0 ? err : saved;
	return r;
}

SHIM_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags,
			   __CONST_SOCKADDR_ARG addr, socklen_t alen)
{
	struct shim_send s = { .call = CALL_SENDTO, .fd = fd, .flags = flags, .buf = buf,
			       .uaddr = addr.__sockaddr__, .ualen = alen, .len = len };
	if (unlikely(shim_guard)) {
		atomic_fetch_add_explicit(&shim_reentered, 1, memory_order_relaxed);
		if (shim_batch_signal_send(&s)) {
			atomic_fetch_add_explicit(&shim_sigqueued, 1, memory_order_relaxed);
			return shim_count_reentered(CALL_SENDTO, (ssize_t)len, true);
		}
		return shim_count_reentered(CALL_SENDTO, shim_raw_sendto(fd, buf, len, flags,
						addr.__sockaddr__, alen), false);
	}
	shim_guard = 1;
	shim_init();
	if (unlikely(off())) {
		shim_guard = 0;
		return shim_real.sendto(fd, buf, len, flags, addr.__sockaddr__, alen);
	}
	if (shim_cfg.mode == SHIM_METRICS) {
		ssize_t r = shim_metrics_fast(fd, buf, len, flags, addr.__sockaddr__, alen,
					      CALL_SENDTO);
		if (likely(r != SHIM_SLOW)) {
			shim_guard = 0;
			return r;
		}
	}
	return do_send(&s);
}

SHIM_EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	struct shim_send s = { .call = CALL_SEND, .fd = fd, .flags = flags, .buf = buf,
			       .len = len };
	if (unlikely(shim_guard)) {
		atomic_fetch_add_explicit(&shim_reentered, 1, memory_order_relaxed);
		if (shim_batch_signal_send(&s)) {
			atomic_fetch_add_explicit(&shim_sigqueued, 1, memory_order_relaxed);
			return shim_count_reentered(CALL_SEND, (ssize_t)len, true);
		}
		return shim_count_reentered(CALL_SEND, shim_raw_sendto(fd, buf, len, flags, NULL, 0),
					    false);
	}
	shim_guard = 1;
	shim_init();
	if (unlikely(off())) {
		shim_guard = 0;
		return shim_real.send(fd, buf, len, flags);
	}
	if (shim_cfg.mode == SHIM_METRICS) {
		ssize_t r = shim_metrics_fast(fd, buf, len, flags, NULL, 0, CALL_SEND);
		if (likely(r != SHIM_SLOW)) {
			shim_guard = 0;
			return r;
		}
	}
	return do_send(&s);
}

SHIM_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	/* Nothing of msg is read here: the kernel reads it first, or the shim probes it
	 * (probe.c). */
	struct shim_send s = { .call = CALL_SENDMSG, .fd = fd, .flags = flags, .msg = msg };
	if (unlikely(shim_guard)) {
		atomic_fetch_add_explicit(&shim_reentered, 1, memory_order_relaxed);
		if (shim_batch_signal_send(&s)) {
			atomic_fetch_add_explicit(&shim_sigqueued, 1, memory_order_relaxed);
			return shim_count_reentered(CALL_SENDMSG, (ssize_t)s.len, true);
		}
		return shim_count_reentered(CALL_SENDMSG, shim_raw_sendmsg(fd, msg, flags), false);
	}
	shim_guard = 1;
	shim_init();
	if (unlikely(off())) {
		shim_guard = 0;
		return shim_real.sendmsg(fd, msg, flags);
	}
	return do_send(&s);
}

SHIM_EXPORT int sendmmsg(int fd, struct mmsghdr *msgs, unsigned int n, int flags)
{
	if (unlikely(shim_guard)) {
		atomic_fetch_add_explicit(&shim_reentered, 1, memory_order_relaxed);
		return shim_count_reentered_mmsg(shim_raw_sendmmsg(fd, msgs, n, flags), msgs);
	}
	shim_guard = 1;
	shim_init();
	struct shim_thread *t = off() ? NULL : shim_thread();
	if (unlikely(!t)) {
		shim_guard = 0;
		return shim_real.sendmmsg(fd, msgs, n, flags);
	}
	int saved = errno;
	struct shim_fd *e = shim_fd_get(fd);
	uint32_t info = shim_fd_info(fd, e);
	struct shim_send s = { .call = CALL_SENDMMSG, .fd = fd, .flags = flags };
	struct shim_sockrow *row = shim_count_send(t, &s, e, shim_dest_key(fd, NULL, 0), info,
						   false);

	if (shim_cfg.mode == SHIM_BATCH)
		shim_flush_fd(fd, FLUSH_SEND);
	int r, err;
	uint64_t sys = 1;
	if (shim_cfg.mode == SHIM_BYPASS) {
		/* Frames and the kernel's path in turn, all within this thread's own call. */
		errno = saved;
		r = shim_bypass_mmsg(t, fd, e, info, msgs, n, flags, &sys);
		err = errno;
	} else {
		shim_guard = 0;
		errno = saved;
		r = shim_real.sendmmsg(fd, msgs, n, flags);
		err = errno;
		shim_guard = 1;
	}
	/* (msg_len of the messages sent: the kernel wrote them) */
	uint64_t bytes = 0;
	for (int i = 0; i < r; i++)
		bytes += msgs[i].msg_len;
	shim_count_result(t, row, r < 0 ? -1 : (ssize_t)bytes, err, r < 0 ? 0 : (uint64_t)r,
			  false, sys);
	shim_guard = 0;
	errno = r < 0 ? err : saved;
	return r;
}

/* write and writev count (and flush) only on sockets: the fd's kind is cached. */
static inline bool on_socket(int fd)
{
	struct shim_fd *e = shim_fd_get(fd);
	return e && (shim_fd_info(fd, e) & FD_SOCKET);
}

SHIM_EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
	if (unlikely(shim_guard))
		return shim_raw_write(fd, buf, len);
	shim_guard = 1;
	shim_init();
	if (off() || !on_socket(fd)) {
		shim_guard = 0;
		return shim_real.write(fd, buf, len);
	}
	struct shim_send s = { .call = CALL_WRITE, .fd = fd, .buf = buf, .len = len };
	return do_send(&s);
}

SHIM_EXPORT ssize_t writev(int fd, const struct iovec *iov, int n)
{
	if (unlikely(shim_guard))
		return shim_raw_writev(fd, iov, n);
	shim_guard = 1;
	shim_init();
	if (off() || !on_socket(fd)) {
		shim_guard = 0;
		return shim_real.writev(fd, iov, n);
	}
	/* (the iovec array is read only once the kernel has, or once probed: probe.c) */
	struct shim_send s = { .call = CALL_WRITEV, .fd = fd, .uiov = iov, .uiovcnt = n };
	return do_send(&s);
}

/* ---- receiving and reading ------------------------------------------------------------------ */

SHIM_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	if (unlikely(shim_guard))
		return shim_raw_recvfrom(fd, buf, len, flags, NULL, NULL);
	point(fd, FLUSH_RECV);
	return shim_real.recv(fd, buf, len, flags);
}

SHIM_EXPORT ssize_t recvfrom(int fd, void *restrict buf, size_t len, int flags,
			     __SOCKADDR_ARG addr, socklen_t *restrict alen)
{
	if (unlikely(shim_guard))
		return shim_raw_recvfrom(fd, buf, len, flags, addr.__sockaddr__, alen);
	point(fd, FLUSH_RECV);
	return shim_real.recvfrom(fd, buf, len, flags, addr.__sockaddr__, alen);
}

SHIM_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	if (unlikely(shim_guard))
		return shim_raw_recvmsg(fd, msg, flags);
	point(fd, FLUSH_RECV);
	return shim_real.recvmsg(fd, msg, flags);
}

SHIM_EXPORT int recvmmsg(int fd, struct mmsghdr *m, unsigned int n, int flags, struct timespec *t)
{
	if (unlikely(shim_guard))
		return shim_raw_recvmmsg(fd, m, n, flags, t);
	point(fd, FLUSH_RECV);
	return shim_real.recvmmsg(fd, m, n, flags, t);
}

SHIM_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
	if (unlikely(shim_guard))
		return shim_raw_read(fd, buf, len);
	point(fd, FLUSH_READ);
	return shim_real.read(fd, buf, len);
}

SHIM_EXPORT ssize_t readv(int fd, const struct iovec *iov, int n)
{
	if (unlikely(shim_guard))
		return shim_raw_readv(fd, iov, n);
	point(fd, FLUSH_READ);
	return shim_real.readv(fd, iov, n);
}

/* The fortified variants (-D_FORTIFY_SOURCE) call these instead of recv, read, poll... */
SHIM_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags);
SHIM_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags)
{
	if (likely(!shim_guard))
		point(fd, FLUSH_RECV);
	return REAL(recv_chk, "__recv_chk")(fd, buf, len, buflen, flags);
}

SHIM_EXPORT ssize_t __recvfrom_chk(int fd, void *restrict buf, size_t len, size_t buflen,
				   int flags, __SOCKADDR_ARG addr, socklen_t *restrict alen);
SHIM_EXPORT ssize_t __recvfrom_chk(int fd, void *restrict buf, size_t len, size_t buflen,
				   int flags, __SOCKADDR_ARG addr, socklen_t *restrict alen)
{
	if (likely(!shim_guard))
		point(fd, FLUSH_RECV);
	return REAL(recvfrom_chk, "__recvfrom_chk")(fd, buf, len, buflen, flags,
						    addr.__sockaddr__, alen);
}

SHIM_EXPORT ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen);
SHIM_EXPORT ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen)
{
	if (likely(!shim_guard))
		point(fd, FLUSH_READ);
	return REAL(read_chk, "__read_chk")(fd, buf, len, buflen);
}

SHIM_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);
SHIM_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
	if (likely(!shim_guard))
		point(-1, FLUSH_POLL);
	return REAL(poll_chk, "__poll_chk")(fds, n, timeout, fdslen);
}

SHIM_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
			    const sigset_t *ss, size_t fdslen);
SHIM_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
			    const sigset_t *ss, size_t fdslen)
{
	if (likely(!shim_guard))
		point(-1, FLUSH_POLL);
	return REAL(ppoll_chk, "__ppoll_chk")(fds, n, timeout, ss, fdslen);
}

/* ---- waiting -------------------------------------------------------------------------------- */

SHIM_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	if (likely(!shim_guard))
		point(-1, FLUSH_POLL);
	return REAL(poll, "poll")(fds, n, timeout);
}

SHIM_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
		      const sigset_t *ss)
{
	if (likely(!shim_guard))
		point(-1, FLUSH_POLL);
	return REAL(ppoll, "ppoll")(fds, n, timeout, ss);
}

SHIM_EXPORT int select(int n, fd_set *restrict r, fd_set *restrict w, fd_set *restrict x,
		       struct timeval *restrict timeout)
{
	if (likely(!shim_guard))
		point(-1, FLUSH_POLL);
	return REAL(select, "select")(n, r, w, x, timeout);
}

SHIM_EXPORT int pselect(int n, fd_set *restrict r, fd_set *restrict w, fd_set *restrict x,
			const struct timespec *restrict timeout, const sigset_t *restrict ss)
{
	if (likely(!shim_guard))
		point(-1, FLUSH_POLL);
	return REAL(pselect, "pselect")(n, r, w, x, timeout, ss);
}

SHIM_EXPORT int epoll_wait(int ep, struct epoll_event *ev, int n, int timeout)
{
	if (likely(!shim_guard))
		point(-1, FLUSH_POLL);
	return REAL(epoll_wait, "epoll_wait")(ep, ev, n, timeout);
}

SHIM_EXPORT int epoll_pwait(int ep, struct epoll_event *ev, int n, int timeout,
			    const sigset_t *ss)
{
	if (likely(!shim_guard))
		point(-1, FLUSH_POLL);
	return REAL(epoll_pwait, "epoll_pwait")(ep, ev, n, timeout, ss);
}

SHIM_EXPORT int epoll_pwait2(int ep, struct epoll_event *ev, int n,
			     const struct timespec *timeout, const sigset_t *ss)
{
	if (likely(!shim_guard))
		point(-1, FLUSH_POLL);
	return REAL(epoll_pwait2, "epoll_pwait2")(ep, ev, n, timeout, ss);
}

SHIM_EXPORT int nanosleep(const struct timespec *req, struct timespec *rem)
{
	if (likely(!shim_guard))
		point(-1, FLUSH_SLEEP);
	return REAL(nanosleep, "nanosleep")(req, rem);
}

SHIM_EXPORT int clock_nanosleep(clockid_t clk, int flags, const struct timespec *req,
				struct timespec *rem)
{
	if (likely(!shim_guard))
		point(-1, FLUSH_SLEEP);
	return REAL(clock_nanosleep, "clock_nanosleep")(clk, flags, req, rem);
}

SHIM_EXPORT int usleep(useconds_t us)
{
	if (likely(!shim_guard))
		point(-1, FLUSH_SLEEP);
	return REAL(usleep, "usleep")(us);
}

SHIM_EXPORT unsigned int sleep(unsigned int s)
{
	if (likely(!shim_guard))
		point(-1, FLUSH_SLEEP);
	return REAL(sleep, "sleep")(s);
}

/* ---- descriptors ---------------------------------------------------------------------------- */

/* The number fd may name another file from now on. */
static void forget(int fd)
{
	if (!off()) {
		int saved = errno;
		shim_guard = 1;
		shim_fd_forget(fd);
		shim_guard = 0;
		errno = saved;
	}
}

/* The AF_XDP port's descriptors are not the program's: closing one is closing a number the
 * program never had (EBADF, as the kernel would say had the shim not opened it). */
static inline bool port_fd(int fd)
{
	return unlikely(shim_xport_owns(fd));
}

SHIM_EXPORT int close(int fd)
{
	if (unlikely(shim_guard))
		return shim_raw_close(fd); /* the shim's own, the port's included */
	if (port_fd(fd)) {
		errno = EBADF;
		return -1;
	}
	shim_stderr_close(fd);
	point(fd, FLUSH_CLOSE);
	int r = shim_real.close(fd);
	forget(fd);
	return r;
}

SHIM_EXPORT int dup2(int from, int to)
{
	if (!shim_guard && port_fd(to))
		shim_xport_lose(); /* the program's file takes the number: the port gives it up */
	if (likely(!shim_guard))
		point(to, FLUSH_CLOSE);
	int r = REAL(dup2, "dup2")(from, to);
	shim_stderr_dup(to, r);
	if (r >= 0 && !shim_guard)
		forget(to);
	return r;
}

SHIM_EXPORT int dup3(int from, int to, int flags)
{
	if (!shim_guard && port_fd(to))
		shim_xport_lose();
	if (likely(!shim_guard))
		point(to, FLUSH_CLOSE);
	int r = REAL(dup3, "dup3")(from, to, flags);
	shim_stderr_dup(to, r);
	if (r >= 0 && !shim_guard)
		forget(to);
	return r;
}

SHIM_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
	if (unlikely(shim_guard))
		return REAL(close_range, "close_range")(first, last, flags);
	point(-1, FLUSH_CLOSE);
	if (shim_cfg.mode == SHIM_BATCH && !(flags & CLOSE_RANGE_CLOEXEC)) {
		/* Other threads' data for any of these sockets goes out before they close. */
		int saved = errno;
		shim_guard = 1;
		for (unsigned fd = first; fd <= last && fd < SHIM_FDTAB_MAX; fd++) {
			struct shim_fd *e = shim_fd_get((int)fd);
			struct shim_thread *p = e ? atomic_load(&e->pending) : NULL;
			if (p)
				shim_flush_thread(p, FLUSH_OTHER_THREAD);
		}
		shim_guard = 0;
		errno = saved;
	}
	if (first <= 2 && last >= 2 && !(flags & CLOSE_RANGE_CLOEXEC))
		shim_stderr_close(2);
	/* The port's descriptors stay open: the range is closed around them. */
	const unsigned ofirst = first, olast = last;
	int own[3];
	for (int k = 0, n = (flags & CLOSE_RANGE_CLOEXEC) ? 0 : shim_xport_fds(own); k < n; k++) {
		const unsigned fd = (unsigned)own[k];
		if (fd < first || fd > last)
			continue;
		int r = fd > first ? shim_real.close_range(first, fd - 1, flags) : 0;
		if (r)
			return r;
		if (fd == last) {
			first = 1, last = 0; /* nothing left to close */
			break;
		}
		first = fd + 1;
	}
	int r = first <= last ? shim_real.close_range(first, last, flags) : 0;
	if (r == 0 && !off() && !(flags & CLOSE_RANGE_CLOEXEC)) {
		int saved = errno;
		shim_guard = 1;
		shim_fd_forget_range(ofirst, olast);
		shim_guard = 0;
		errno = saved;
	}
	return r;
}

SHIM_EXPORT int socket(int domain, int type, int protocol)
{
	if (likely(!shim_guard))
		point(-1, FLUSH_SOCKET);
	int fd = REAL(socket, "socket")(domain, type, protocol);
	if (fd >= 0 && !shim_guard)
		forget(fd);
	return fd;
}

SHIM_EXPORT int accept(int fd, __SOCKADDR_ARG addr, socklen_t *restrict alen)
{
	if (likely(!shim_guard))
		point(-1, FLUSH_SOCKET);
	int r = REAL(accept, "accept")(fd, addr.__sockaddr__, alen);
	if (r >= 0 && !shim_guard)
		forget(r);
	return r;
}

SHIM_EXPORT int accept4(int fd, __SOCKADDR_ARG addr, socklen_t *restrict alen, int flags)
{
	if (likely(!shim_guard))
		point(-1, FLUSH_SOCKET);
	int r = REAL(accept4, "accept4")(fd, addr.__sockaddr__, alen, flags);
	if (r >= 0 && !shim_guard)
		forget(r);
	return r;
}

/* Calls that change or reveal a socket's state: what was sent before them must have gone. */
SHIM_EXPORT int connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t alen)
{
	if (likely(!shim_guard))
		point(fd, FLUSH_SOCKOPT);
	int r = REAL(connect, "connect")(fd, addr.__sockaddr__, alen);
	if (!shim_guard)
		forget(fd); /* connected or not, it may have changed */
	return r;
}

SHIM_EXPORT int bind(int fd, __CONST_SOCKADDR_ARG addr, socklen_t alen)
{
	if (likely(!shim_guard))
		point(fd, FLUSH_SOCKOPT);
	return REAL(bind, "bind")(fd, addr.__sockaddr__, alen);
}

SHIM_EXPORT int shutdown(int fd, int how)
{
	if (likely(!shim_guard))
		point(fd, FLUSH_SOCKOPT);
	int r = REAL(shutdown, "shutdown")(fd, how);
	if (!shim_guard)
		forget(fd);
	return r;
}

SHIM_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	if (likely(!shim_guard))
		point(fd, FLUSH_SOCKOPT);
	int r = REAL(setsockopt, "setsockopt")(fd, level, name, val, len);
	if (!shim_guard)
		forget(fd);
	return r;
}

SHIM_EXPORT int getsockname(int fd, __SOCKADDR_ARG addr, socklen_t *restrict alen)
{
	/* An unbound socket gets its port from its first send: that send must have happened. */
	if (likely(!shim_guard))
		point(fd, FLUSH_SOCKOPT);
	return REAL(getsockname, "getsockname")(fd, addr.__sockaddr__, alen);
}

/* ---- what the program can order its sends by ------------------------------------------------ */

/*
 * A batch must never be overtaken by a send that the program ordered after it through
 * something the shim does not see as a socket call: a mutex, a condition variable, a
 * semaphore, a barrier, a signal to another thread or process. Each of these is a flush
 * point: this thread's batch goes out before the call, so whatever the other side does after
 * it (its own sends) comes later on the wire. Waiting in one is a flush point too, so a batch
 * never waits while its thread blocks.
 *
 * The one exception keeps batching possible in single-threaded programs whose runtime locks
 * a process-private mutex around every call (CPython's interpreter lock): while the program
 * has started no thread (pthread_create, through the shim), a process-private object cannot
 * order anything against another sender, so it is not a flush point. Whether an object is
 * process-shared is read from glibc's layout (checked in tests/shim): mutex kind bit 7,
 * condition variable __wrefs bit 0, rwlock __shared, semaphore "private" word 128.
 *
 * Not seen, so not flush points (say so in the documentation): raw futex system calls,
 * lock-free shared memory, and threads made without pthread_create.
 */
_Atomic bool shim_program_threaded;

typedef int (*fn_obj)(void *);
typedef int (*fn_obj2)(void *, void *);
typedef int (*fn_obj_ts)(void *, const struct timespec *);
typedef int (*fn_obj_clk_ts)(void *, clockid_t, const struct timespec *);
typedef int (*fn_obj2_ts)(void *, void *, const struct timespec *);
typedef int (*fn_obj2_clk_ts)(void *, void *, clockid_t, const struct timespec *);

/* The next definition of sym (of version ver where glibc keeps an older one beside it). */
static void *next_sym(const char *sym, const char *ver)
{
	void *f = ver ? dlvsym(RTLD_NEXT, sym, ver) : NULL;
	return f ? f : dlsym(RTLD_NEXT, sym);
}

/* Each NEXT() site registers its pointer in the section shim_next, so that init resolves
 * them all at once with the other real functions (resolve.c), not on a first call that may
 * come from anywhere; a call before init (another library's constructor) resolves its own. */
struct next_reg {
	void **slot;
	const char *sym, *ver;
} __attribute__((aligned(32))); /* the size is the stride: the compiler pads nothing between */
extern const struct next_reg __start_shim_next[], __stop_shim_next[];

void shim_resolve_next(void)
{
	for (const struct next_reg *r = __start_shim_next; r < __stop_shim_next; r++)
		if (!__atomic_load_n(r->slot, __ATOMIC_RELAXED))
			__atomic_store_n(r->slot, next_sym(r->sym, r->ver), __ATOMIC_RELAXED);
}

#define NEXT(type, sym_, ver_)                                                         \
	({                                                                             \
		static void *next_;                                                    \
		static const struct next_reg reg_                                      \
			__attribute__((section("shim_next"), used)) = { &next_, sym_, ver_ }; \
		void *f_ = __atomic_load_n(&next_, __ATOMIC_RELAXED);                  \
		if (unlikely(!f_)) {                                                   \
			f_ = next_sym(reg_.sym, reg_.ver);                             \
			__atomic_store_n(&next_, f_, __ATOMIC_RELAXED);                \
		}                                                                      \
		(__typeof__(type))f_;                                                  \
	})

static inline void sync_point(bool shared)
{
	if (likely(!shim_guard) && shim_cfg.mode != SHIM_OFF &&
	    (shared || atomic_load_explicit(&shim_program_threaded, memory_order_relaxed)))
		point(-1, FLUSH_SYNC);
}

/* Waiting for a child: what it did (a route it changed, data it sent) comes before what the
 * program does next (bypass mode: the kernel's notifications are read before the next frame,
 * however recent the last look). */
static inline void child_point(void)
{
	if (likely(!shim_guard)) {
		point(-1, FLUSH_SYNC);
		if (shim_cfg.mode == SHIM_BYPASS)
			shim_xport_recheck(true);
	}
}

/* Signals (fault.c): once the shim's SIGSEGV/SIGBUS handler is set (batch and bypass modes,
 * at the first send that reads the program's memory first; with live counters, at the first
 * file), the program sets and reads its own handler for them as if the shim's were not there:
 * its handler is the one the shim's chains to, and never reaches the kernel. In batch and
 * bypass modes every other handler the program sets is called through a trampoline, which
 * tells the shim that a send comes from inside a handler; the program reads back its own. */
static int program_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	bool done = false;
	int r = 0;
	/* Not before init, and never running it: a constructor's sigaction (the sanitizer
	 * runtime's, another library's) comes before the environment is there, and the
	 * configuration is read once. Nothing of the shim's is at the kernel before init, and
	 * fault.c takes over the handlers set before then when it sets its own. */
	if (likely(!shim_guard) && shim_ready()) {
		shim_guard = 1;
		int saved = errno;
		r = shim_fault_sigaction(sig, act, old, &done);
		errno = saved;
		shim_guard = 0;
	}
	return done ? r : NEXT(&sigaction, "sigaction", NULL)(sig, act, old);
}

SHIM_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	return program_sigaction(sig, act, old);
}

/* signal(), bsd_signal() and sysv_signal() reach glibc's sigaction without the PLT: each is
 * one of its own, with glibc's flags (BSD: SA_RESTART, the signal blocked in its handler;
 * System V: one-shot and not blocked). */
sighandler_t bsd_signal(int sig, sighandler_t h);
sighandler_t sysv_signal(int sig, sighandler_t h);

static sighandler_t glibc_signal(int sig, sighandler_t h, int flags)
{
	struct sigaction a = { .sa_handler = h, .sa_flags = flags }, o;

	if (h == SIG_ERR || sig <= 0 || sig >= NSIG || sigemptyset(&a.sa_mask) < 0) {
		errno = EINVAL;
		return SIG_ERR;
	}
	if (!(flags & SA_NODEFER))
		sigaddset(&a.sa_mask, sig);
	if (program_sigaction(sig, &a, &o) < 0)
		return SIG_ERR;
	return (o.sa_flags & SA_SIGINFO) ? (sighandler_t)(void (*)(void))o.sa_sigaction
					 : o.sa_handler;
}

SHIM_EXPORT sighandler_t signal(int sig, sighandler_t h)
{
	return glibc_signal(sig, h, SA_RESTART);
}

SHIM_EXPORT sighandler_t bsd_signal(int sig, sighandler_t h)
{
	return glibc_signal(sig, h, SA_RESTART);
}

SHIM_EXPORT sighandler_t sysv_signal(int sig, sighandler_t h)
{
	return glibc_signal(sig, h, SA_RESETHAND | SA_NODEFER);
}

/* The mask: a fault while SIGSEGV or SIGBUS is blocked kills whatever the handler, so the
 * shim looks at the mask again after each change it sees before it reads memory with
 * recovery (fault.c). */
SHIM_EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
	int r = NEXT(&sigprocmask, "sigprocmask", NULL)(how, set, old);
	if (set)
		shim_fault_mask_changed();
	return r;
}

SHIM_EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
	int r = NEXT(&pthread_sigmask, "pthread_sigmask", NULL)(how, set, old);
	if (set)
		shim_fault_mask_changed();
	return r;
}

/* These put back a mask saved earlier, or none, and may leave a signal handler of the
 * program's (whose mask the shim does not know): look at the mask again, handler or not. */
SHIM_EXPORT void siglongjmp(sigjmp_buf env, int val)
{
	shim_fault_jumped();
	NEXT(&siglongjmp, "siglongjmp", NULL)(env, val);
	__builtin_unreachable();
}

SHIM_EXPORT void longjmp(jmp_buf env, int val)
{
	shim_fault_jumped();
	NEXT(&longjmp, "longjmp", NULL)(env, val);
	__builtin_unreachable();
}

SHIM_EXPORT void _longjmp(jmp_buf env, int val)
{
	shim_fault_jumped();
	NEXT(&_longjmp, "_longjmp", NULL)(env, val);
	__builtin_unreachable();
}

SHIM_EXPORT void __longjmp_chk(jmp_buf env, int val);
SHIM_EXPORT void __longjmp_chk(jmp_buf env, int val)
{
	shim_fault_jumped();
	NEXT(&__longjmp_chk, "__longjmp_chk", NULL)(env, val);
	__builtin_unreachable();
}

SHIM_EXPORT int setcontext(const ucontext_t *uc)
{
	shim_fault_jumped();
	return NEXT(&setcontext, "setcontext", NULL)(uc);
}

SHIM_EXPORT int swapcontext(ucontext_t *restrict o, const ucontext_t *restrict uc)
{
	shim_fault_jumped();
	int r = NEXT(&swapcontext, "swapcontext", NULL)(o, uc);
	shim_fault_jumped(); /* (back: the mask saved in o) */
	return r;
}

/* A raw rt_sigaction through libc's syscall() replaces what the shim set without its
 * wrappers: from then on the shim reads memory only after asking the kernel (fault.c). */
SHIM_EXPORT long syscall(long nr, ...)
{
	va_list ap;
	va_start(ap, nr);
	long a1 = va_arg(ap, long), a2 = va_arg(ap, long), a3 = va_arg(ap, long);
	long a4 = va_arg(ap, long), a5 = va_arg(ap, long), a6 = va_arg(ap, long);
	va_end(ap);
	if (unlikely(nr == SYS_rt_sigaction || nr == SYS_rt_sigprocmask))
		shim_fault_syscall(nr, a1, a2);
	return NEXT(long (*)(long, ...), "syscall", NULL)(nr, a1, a2, a3, a4, a5, a6);
}

SHIM_EXPORT pid_t waitpid(pid_t pid, int *status, int options)
{
	child_point();
	return NEXT(&waitpid, "waitpid", NULL)(pid, status, options);
}

SHIM_EXPORT pid_t wait(int *status)
{
	child_point();
	return NEXT(&wait, "wait", NULL)(status);
}

SHIM_EXPORT pid_t wait4(pid_t pid, int *status, int options, struct rusage *ru)
{
	child_point();
	return NEXT(&wait4, "wait4", NULL)(pid, status, options, ru);
}

SHIM_EXPORT int waitid(idtype_t type, id_t id, siginfo_t *info, int options)
{
	child_point();
	return NEXT(&waitid, "waitid", NULL)(type, id, info, options);
}

static inline bool mutex_shared(const pthread_mutex_t *m)
{
	return m && (m->__data.__kind & 128) != 0;
}

static inline bool cond_shared(const pthread_cond_t *c, const pthread_mutex_t *m)
{
	return (c && (c->__data.__wrefs & 1)) || mutex_shared(m);
}

static inline bool sem_shared(const sem_t *s)
{
	int priv;
	if (!s)
		return false;
	memcpy(&priv, (const char *)s + 8, sizeof(priv));
	return priv != 0;
}

SHIM_EXPORT int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *),
			       void *arg)
{
	/* From the first thread on, every lock can order this thread's sends against
	 * another's. Batches already pending go out before the new thread runs. */
	if (likely(!shim_guard)) {
		atomic_store(&shim_program_threaded, true);
		sync_point(true);
	}
	return NEXT(int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *),
		    "pthread_create", "GLIBC_2.34")(th, attr, fn, arg);
}

SHIM_EXPORT int pthread_join(pthread_t th, void **ret)
{
	sync_point(true);
	return NEXT(int (*)(pthread_t, void **), "pthread_join", "GLIBC_2.34")(th, ret);
}

#define MUTEX_WRAP(name, ver)                                             \
	SHIM_EXPORT int name(pthread_mutex_t *m)                          \
	{                                                                 \
		sync_point(mutex_shared(m));                              \
		return NEXT(fn_obj, #name, ver)(m);                       \
	}
MUTEX_WRAP(pthread_mutex_lock, NULL)
MUTEX_WRAP(pthread_mutex_trylock, "GLIBC_2.34")
MUTEX_WRAP(pthread_mutex_unlock, NULL)

SHIM_EXPORT int pthread_mutex_timedlock(pthread_mutex_t *restrict m,
					const struct timespec *restrict ts)
{
	sync_point(mutex_shared(m));
	return NEXT(fn_obj_ts, "pthread_mutex_timedlock", "GLIBC_2.34")(m, ts);
}

SHIM_EXPORT int pthread_mutex_clocklock(pthread_mutex_t *restrict m, clockid_t clk,
					const struct timespec *restrict ts)
{
	sync_point(mutex_shared(m));
	return NEXT(fn_obj_clk_ts, "pthread_mutex_clocklock", "GLIBC_2.34")(m, clk, ts);
}

SHIM_EXPORT int pthread_cond_wait(pthread_cond_t *restrict c, pthread_mutex_t *restrict m)
{
	sync_point(cond_shared(c, m));
	return NEXT(fn_obj2, "pthread_cond_wait", "GLIBC_2.3.2")(c, m);
}

SHIM_EXPORT int pthread_cond_timedwait(pthread_cond_t *restrict c, pthread_mutex_t *restrict m,
				       const struct timespec *restrict ts)
{
	sync_point(cond_shared(c, m));
	return NEXT(fn_obj2_ts, "pthread_cond_timedwait", "GLIBC_2.3.2")(c, m, ts);
}

SHIM_EXPORT int pthread_cond_clockwait(pthread_cond_t *restrict c, pthread_mutex_t *restrict m,
				       clockid_t clk, const struct timespec *restrict ts)
{
	sync_point(cond_shared(c, m));
	return NEXT(fn_obj2_clk_ts, "pthread_cond_clockwait", "GLIBC_2.34")(c, m, clk, ts);
}

SHIM_EXPORT int pthread_cond_signal(pthread_cond_t *c)
{
	sync_point(cond_shared(c, NULL));
	return NEXT(fn_obj, "pthread_cond_signal", "GLIBC_2.3.2")(c);
}

SHIM_EXPORT int pthread_cond_broadcast(pthread_cond_t *c)
{
	sync_point(cond_shared(c, NULL));
	return NEXT(fn_obj, "pthread_cond_broadcast", "GLIBC_2.3.2")(c);
}

#define RWLOCK_WRAP(name)                                                 \
	SHIM_EXPORT int name(pthread_rwlock_t *l)                         \
	{                                                                 \
		sync_point(l->__data.__shared != 0);                      \
		return NEXT(fn_obj, #name, "GLIBC_2.34")(l);              \
	}
RWLOCK_WRAP(pthread_rwlock_rdlock)
RWLOCK_WRAP(pthread_rwlock_wrlock)
RWLOCK_WRAP(pthread_rwlock_unlock)

/* C11 threads: glibc's thrd_*, mtx_* and cnd_* reach its pthread functions internally, past
 * the wrappers above. C11 objects are never process-shared. */
SHIM_EXPORT int thrd_create(thrd_t *th, thrd_start_t fn, void *arg)
{
	if (likely(!shim_guard)) {
		atomic_store(&shim_program_threaded, true);
		sync_point(true);
	}
	return NEXT(int (*)(thrd_t *, thrd_start_t, void *), "thrd_create", "GLIBC_2.34")(th, fn,
											   arg);
}

SHIM_EXPORT int thrd_join(thrd_t th, int *res)
{
	sync_point(true);
	return NEXT(int (*)(thrd_t, int *), "thrd_join", "GLIBC_2.34")(th, res);
}

SHIM_EXPORT int mtx_lock(mtx_t *m)
{
	sync_point(false);
	return NEXT(int (*)(mtx_t *), "mtx_lock", "GLIBC_2.34")(m);
}

SHIM_EXPORT int mtx_trylock(mtx_t *m)
{
	sync_point(false);
	return NEXT(int (*)(mtx_t *), "mtx_trylock", "GLIBC_2.34")(m);
}

SHIM_EXPORT int mtx_timedlock(mtx_t *restrict m, const struct timespec *restrict ts)
{
	sync_point(false);
	return NEXT(int (*)(mtx_t *, const struct timespec *), "mtx_timedlock", "GLIBC_2.34")(m,
											       ts);
}

SHIM_EXPORT int mtx_unlock(mtx_t *m)
{
	sync_point(false);
	return NEXT(int (*)(mtx_t *), "mtx_unlock", "GLIBC_2.34")(m);
}

SHIM_EXPORT int cnd_wait(cnd_t *c, mtx_t *m)
{
	sync_point(false);
	return NEXT(int (*)(cnd_t *, mtx_t *), "cnd_wait", "GLIBC_2.34")(c, m);
}

SHIM_EXPORT int cnd_timedwait(cnd_t *restrict c, mtx_t *restrict m,
			      const struct timespec *restrict ts)
{
	sync_point(false);
	return NEXT(int (*)(cnd_t *, mtx_t *, const struct timespec *), "cnd_timedwait",
		    "GLIBC_2.34")(c, m, ts);
}

SHIM_EXPORT int cnd_signal(cnd_t *c)
{
	sync_point(false);
	return NEXT(int (*)(cnd_t *), "cnd_signal", "GLIBC_2.34")(c);
}

SHIM_EXPORT int cnd_broadcast(cnd_t *c)
{
	sync_point(false);
	return NEXT(int (*)(cnd_t *), "cnd_broadcast", "GLIBC_2.34")(c);
}

/* Spin locks and barriers carry no process-shared mark: always flush points. */
SHIM_EXPORT int pthread_spin_lock(pthread_spinlock_t *l)
{
	sync_point(true);
	return NEXT(int (*)(pthread_spinlock_t *), "pthread_spin_lock", "GLIBC_2.34")(l);
}

SHIM_EXPORT int pthread_spin_unlock(pthread_spinlock_t *l)
{
	sync_point(true);
	return NEXT(int (*)(pthread_spinlock_t *), "pthread_spin_unlock", "GLIBC_2.34")(l);
}

SHIM_EXPORT int pthread_barrier_wait(pthread_barrier_t *b)
{
	sync_point(true);
	return NEXT(int (*)(pthread_barrier_t *), "pthread_barrier_wait", "GLIBC_2.34")(b);
}

SHIM_EXPORT int sem_post(sem_t *s)
{
	sync_point(sem_shared(s));
	return NEXT(int (*)(sem_t *), "sem_post", "GLIBC_2.34")(s);
}

SHIM_EXPORT int sem_wait(sem_t *s)
{
	sync_point(sem_shared(s));
	return NEXT(int (*)(sem_t *), "sem_wait", "GLIBC_2.34")(s);
}

SHIM_EXPORT int sem_trywait(sem_t *s)
{
	sync_point(sem_shared(s));
	return NEXT(int (*)(sem_t *), "sem_trywait", "GLIBC_2.34")(s);
}

SHIM_EXPORT int sem_timedwait(sem_t *restrict s, const struct timespec *restrict ts)
{
	sync_point(sem_shared(s));
	return NEXT(int (*)(sem_t *, const struct timespec *), "sem_timedwait", "GLIBC_2.34")(s,
											       ts);
}

SHIM_EXPORT int sem_clockwait(sem_t *restrict s, clockid_t clk,
			      const struct timespec *restrict ts)
{
	sync_point(sem_shared(s));
	return NEXT(int (*)(sem_t *, clockid_t, const struct timespec *), "sem_clockwait",
		    "GLIBC_2.34")(s, clk, ts);
}

/* A signal can tell another thread or process that this one has sent. (pthread_kill is not
 * wrapped: glibc keeps two functions under that name, with different results for a thread
 * that has exited, and an unversioned wrapper would hand old binaries the new one.) */
static inline void signal_point(void)
{
	if (likely(!shim_guard) && shim_cfg.mode != SHIM_OFF)
		point(-1, FLUSH_SIGNAL);
}

SHIM_EXPORT int kill(pid_t pid, int sig)
{
	signal_point();
	return NEXT(int (*)(pid_t, int), "kill", NULL)(pid, sig);
}

SHIM_EXPORT int tgkill(pid_t tgid, pid_t tid, int sig)
{
	signal_point();
	return NEXT(int (*)(pid_t, pid_t, int), "tgkill", NULL)(tgid, tid, sig);
}

SHIM_EXPORT int sigqueue(pid_t pid, int sig, const union sigval val)
{
	signal_point();
	return NEXT(int (*)(pid_t, int, const union sigval), "sigqueue", NULL)(pid, sig, val);
}

/* ---- namespaces ----------------------------------------------------------------------------- */

/* unshare(CLONE_NEWUSER) and setns into a user namespace need a single-threaded process: the
 * shim's flusher thread is stopped (after every batch has gone out) and joined first, and
 * started again by the next batch. A thread that pthread_join has seen exit can still be in
 * the thread group for a moment, so EINVAL right after stopping it is retried a bounded
 * number of times. */
static int with_flusher_stopped(int (*fn)(int, int), int a, int b, bool two, bool need)
{
	bool stopped = false;

	if (likely(!shim_guard) && shim_cfg.mode != SHIM_OFF && need) {
		point(-1, FLUSH_NAMESPACE);
		int saved = errno;
		shim_guard = 1;
		if (shim_cfg.mode == SHIM_BATCH) {
			shim_flush_all(FLUSH_NAMESPACE);
			stopped = shim_flusher_quiesce();
		}
		shim_guard = 0;
		errno = saved;
	}
	int r = two ? fn(a, b) : ((int (*)(int))(void *)fn)(a);
	for (int i = 0; r < 0 && errno == EINVAL && stopped && i < 1000; i++) {
		sched_yield();
		r = two ? fn(a, b) : ((int (*)(int))(void *)fn)(a);
	}
	if (stopped) {
		int saved = errno;
		shim_guard = 1;
		shim_flusher_resume();
		shim_guard = 0;
		errno = saved;
	}
	return r;
}

SHIM_EXPORT int unshare(int flags)
{
	return with_flusher_stopped((int (*)(int, int))(void *)NEXT(int (*)(int), "unshare", NULL),
				    flags, 0, false, (flags & CLONE_NEWUSER) != 0);
}

SHIM_EXPORT int setns(int fd, int nstype)
{
	/* nstype 0 may name a user namespace */
	return with_flusher_stopped(NEXT(int (*)(int, int), "setns", NULL), fd, nstype, true,
				    nstype == 0 || (nstype & CLONE_NEWUSER));
}

/* ---- O_NONBLOCK ----------------------------------------------------------------------------- */

/* Whether a socket blocks is cached (fdtab.c): a change through fcntl or ioctl forgets it,
 * after this thread's batch for it has gone out, and for every other UDP descriptor, which
 * may share the file (a dup); a new descriptor number is forgotten too. */
static void forget_nonblock(int fd)
{
	if (off())
		return;
	int saved = errno;
	shim_guard = 1;
	shim_fd_forget(fd);
	if (shim_fd_info(fd, shim_fd_peek(fd)) & FD_UDP)
		shim_fd_forget_udp();
	shim_guard = 0;
	errno = saved;
}

static long fcntl_common(int (*real)(int, int, ...), int fd, int cmd, long arg)
{
	bool changes = cmd == F_SETFL;
	if (likely(!shim_guard) && changes)
		point(fd, FLUSH_SOCKOPT);
	int r = real(fd, cmd, arg);
	if (!shim_guard && r >= 0) {
		if (changes)
			forget_nonblock(fd);
		else if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
			forget(r);
	}
	return r;
}

/* Under _FILE_OFFSET_BITS=64 <fcntl.h> renames fcntl to fcntl64: the names are given here. */
SHIM_EXPORT int shim_fcntl(int fd, int cmd, ...) __asm__("fcntl");
SHIM_EXPORT int shim_fcntl64(int fd, int cmd, ...) __asm__("fcntl64");

SHIM_EXPORT int shim_fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	long arg = va_arg(ap, long);
	va_end(ap);
	return (int)fcntl_common(NEXT(int (*)(int, int, ...), "fcntl", NULL), fd, cmd, arg);
}

SHIM_EXPORT int shim_fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	long arg = va_arg(ap, long);
	va_end(ap);
	return (int)fcntl_common(NEXT(int (*)(int, int, ...), "fcntl64", NULL), fd, cmd, arg);
}

SHIM_EXPORT int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	va_start(ap, req);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	bool changes = req == FIONBIO;
	if (likely(!shim_guard) && changes)
		point(fd, FLUSH_SOCKOPT);
	int r = NEXT(int (*)(int, unsigned long, ...), "ioctl", NULL)(fd, req, arg);
	if (!shim_guard && r >= 0 && changes)
		forget_nonblock(fd);
	return r;
}

/* ---- processes ------------------------------------------------------------------------------ */

SHIM_EXPORT pid_t fork(void)
{
	/* The atfork handlers (thread.c) flush this thread's batch and hold the registry lock
	 * across the fork; the child's batches are empty in any case (MADV_WIPEONFORK). */
	if (likely(!shim_guard))
		point(-1, FLUSH_FORK);
	return REAL(fork, "fork")();
}

/* A vfork child shares its parent's memory and thread state, and a vfork wrapper cannot
 * return into its caller's frame safely: fork is a correct vfork (POSIX allows it). */
SHIM_EXPORT pid_t vfork(void)
{
	return fork();
}

static void before_exec(void)
{
	if (unlikely(shim_guard))
		return;
	shim_guard = 1;
	shim_init();
	if (!off()) {
		/* The new image starts with a new shim; this one's counts are reported now. (If
		 * the exec fails, the report at exit repeats them.) */
		int saved = errno;
		if (shim_cfg.mode == SHIM_BATCH)
			shim_flush_all(FLUSH_EXEC);
		shim_live_final(true, true);
		shim_report_write();
		errno = saved;
	}
	shim_fault_exec(true);
	shim_guard = 0;
}

/* The exec failed: the process goes on, as it was. */
static void after_exec(void)
{
	if (unlikely(shim_guard))
		return;
	int saved = errno;
	shim_fault_exec(false);
	errno = saved;
}

SHIM_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	before_exec();
	int r = REAL(execve, "execve")(path, argv, envp);
	after_exec();
	return r;
}

SHIM_EXPORT int execv(const char *path, char *const argv[])
{
	before_exec();
	int r = REAL(execv, "execv")(path, argv);
	after_exec();
	return r;
}

SHIM_EXPORT int execvp(const char *file, char *const argv[])
{
	before_exec();
	int r = REAL(execvp, "execvp")(file, argv);
	after_exec();
	return r;
}

SHIM_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	before_exec();
	int r = REAL(execvpe, "execvpe")(file, argv, envp);
	after_exec();
	return r;
}

SHIM_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	before_exec();
	int r = REAL(fexecve, "fexecve")(fd, argv, envp);
	after_exec();
	return r;
}

SHIM_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[],
			 int flags)
{
	before_exec();
	int r = REAL(execveat, "execveat")(dirfd, path, argv, envp, flags);
	after_exec();
	return r;
}

/* execl, execlp and execle reach execve inside libc, past the shim: rebuild their argv and
 * go through the wrappers above. */
#define ARGS_MAX 4096
#define COLLECT(first, ap, argv, n, fail)                    \
	do {                                                     \
		argv[0] = (char *)(first);                           \
		for (n = 1; argv[n - 1]; n++) {                      \
			if (n == ARGS_MAX) {                             \
				va_end(ap);                                  \
				errno = E2BIG;                               \
				fail;                                        \
			}                                                \
			argv[n] = va_arg(ap, char *);                    \
		}                                                    \
	} while (0)

SHIM_EXPORT int execl(const char *path, const char *arg, ...)
{
	char *argv[ARGS_MAX];
	va_list ap;
	int n;

	va_start(ap, arg);
	COLLECT(arg, ap, argv, n, return -1);
	va_end(ap);
	return execv(path, argv);
}

SHIM_EXPORT int execlp(const char *file, const char *arg, ...)
{
	char *argv[ARGS_MAX];
	va_list ap;
	int n;

	va_start(ap, arg);
	COLLECT(arg, ap, argv, n, return -1);
	va_end(ap);
	return execvp(file, argv);
}

SHIM_EXPORT int execle(const char *path, const char *arg, ...)
{
	char *argv[ARGS_MAX];
	va_list ap;
	int n;

	va_start(ap, arg);
	COLLECT(arg, ap, argv, n, return -1);
	char *const *envp = va_arg(ap, char *const *);
	va_end(ap);
	return execve(path, argv, envp);
}

SHIM_EXPORT void exit(int status)
{
	/* The report waits for the shim's destructor, after the atexit handlers, which may
	 * still send. */
	if (likely(!shim_guard)) {
		shim_guard = 1;
		shim_init();
		if (shim_cfg.mode == SHIM_BATCH)
			shim_flush_all(FLUSH_EXIT);
		shim_guard = 0;
	}
	REAL(exit, "exit")(status);
	abort();
}

/* No atexit handlers or destructors will run: flush and report now. */
static void before_exit_now(void)
{
	if (shim_guard)
		return; /* a handler that interrupted the shim: the batch may be mid-update */
	shim_guard = 1;
	shim_init();
	shim_guard = 0;
	if (!off())
		shim_exit_hook();
}

SHIM_EXPORT void _exit(int status)
{
	before_exit_now();
	__typeof__(shim_real._exit) f = REAL(_exit, "_exit");
	if (f)
		f(status);
	syscall(SYS_exit_group, status);
	abort();
}

SHIM_EXPORT void _Exit(int status)
{
	before_exit_now();
	__typeof__(shim_real._Exit) f = REAL(_Exit, "_Exit");
	if (f)
		f(status);
	syscall(SYS_exit_group, status);
	abort();
}

/* Process exit (exit() or a return from main): runs after every atexit handler. Does nothing
 * in a process where the shim never ran. */
__attribute__((destructor)) static void shim_fini(void)
{
	if (!shim_guard && shim_real.sendto && !off())
		shim_exit_hook();
}
