/* SPDX-License-Identifier: MIT */
/*
 * The real functions: the next definition of each intercepted name in the link chain
 * (libc's, or another preloaded library's), found with dlsym(RTLD_NEXT) on the first
 * intercepted call, under pthread_once, never in a constructor.
 *
 * The core library inside the shim calls the kernel through its system-call table
 * (lib/os/sys.h). Left alone, that table would hold the shim's own sendto, so the shim's flushes
 * would land back in the shim: init points it at the real functions.
 *
 * A call that re-enters the shim (shim_guard set) cannot wait on pthread_once: a signal
 * handler running on a thread that is inside init would deadlock. Those calls use the
 * resolved pointer if it is already there, else the system call itself.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim.h"
#include "sys.h"

struct shim_real shim_real;
SHIM_TLS int shim_guard;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static _Atomic bool resolved; /* the pointers are there (re-entered paths may use them) */
static _Atomic bool ready;    /* init has finished: configuration, thread key, all of it */

void *shim_resolve_one(const char *name)
{
	return dlsym(RTLD_NEXT, name);
}

#define R(field, name) shim_real.field = (__typeof__(shim_real.field))dlsym(RTLD_NEXT, name)

static void resolve_all(void)
{
	R(send, "send");
	R(sendto, "sendto");
	R(sendmsg, "sendmsg");
	R(sendmmsg, "sendmmsg");
	R(write, "write");
	R(writev, "writev");
	R(recv, "recv");
	R(recvfrom, "recvfrom");
	R(recvmsg, "recvmsg");
	R(recvmmsg, "recvmmsg");
	R(read, "read");
	R(readv, "readv");
	R(poll, "poll");
	R(ppoll, "ppoll");
	R(select, "select");
	R(pselect, "pselect");
	R(epoll_wait, "epoll_wait");
	R(epoll_pwait, "epoll_pwait");
	R(epoll_pwait2, "epoll_pwait2");
	R(nanosleep, "nanosleep");
	R(clock_nanosleep, "clock_nanosleep");
	R(usleep, "usleep");
	R(sleep, "sleep");
	R(close, "close");
	R(dup2, "dup2");
	R(dup3, "dup3");
	R(close_range, "close_range");
	R(socket, "socket");
	R(accept, "accept");
	R(accept4, "accept4");
	R(connect, "connect");
	R(bind, "bind");
	R(shutdown, "shutdown");
	R(setsockopt, "setsockopt");
	R(getsockname, "getsockname");
	R(fork, "fork");
	R(execve, "execve");
	R(execv, "execv");
	R(execvp, "execvp");
	R(execvpe, "execvpe");
	R(fexecve, "fexecve");
	R(execveat, "execveat");
	R(exit, "exit");
	R(_exit, "_exit");
	R(_Exit, "_Exit");
	R(recv_chk, "__recv_chk");
	R(recvfrom_chk, "__recvfrom_chk");
	R(read_chk, "__read_chk");
	R(poll_chk, "__poll_chk");
	R(ppoll_chk, "__ppoll_chk");
	shim_resolve_next();
}

static void init(void)
{
	resolve_all();
	/* The core's own sends must never come back here. */
	if (shim_real.sendto)
		ms__sys.sendto = shim_real.sendto;
	if (shim_real.sendmsg)
		ms__sys.sendmsg = shim_real.sendmsg;
	if (shim_real.sendmmsg)
		ms__sys.sendmmsg = shim_real.sendmmsg;
	/* The live-counter file's SIGBUS handler is set by the real sigaction (the program's
	 * calls see their own handler: intercept.c). */
	void *sa = dlsym(RTLD_NEXT, "sigaction");
	if (sa)
		ms__sys.sigaction = (__typeof__(ms__sys.sigaction))sa;
	atomic_store_explicit(&resolved, true, memory_order_release);
	shim_fault_setup();
	shim_config_load();
	shim_live_setup();
	shim_thread_setup();
	atomic_store_explicit(&ready, true, memory_order_release);
}

/* Has init run (without running it: the program's sigaction may come from a constructor, before
 * the environment and the program's name are there, and the configuration is read once)? */
bool shim_ready(void)
{
	return atomic_load_explicit(&ready, memory_order_acquire);
}

/* The fast path must wait for the end of init, not for `resolved`: a thread that went on
 * while another was still inside init sent under a configuration not yet read, and made its
 * state before the thread key existed, so its exit went unseen (its live totals were lost). */
void shim_init(void)
{
	if (likely(atomic_load_explicit(&ready, memory_order_acquire)))
		return;
	pthread_once(&init_once, init);
}

/* ---- re-entered paths ----------------------------------------------------------------------- */

/* The pointer, when init has published it; NULL before. */
#define REAL_IF_READY(f) \
	(atomic_load_explicit(&resolved, memory_order_acquire) ? shim_real.f : NULL)

ssize_t shim_raw_sendto(int fd, const void *buf, size_t len, int flags,
			const struct sockaddr *addr, socklen_t alen)
{
	__typeof__(shim_real.sendto) f = REAL_IF_READY(sendto);
	return f ? f(fd, buf, len, flags, addr, alen)
		 : syscall(SYS_sendto, fd, buf, len, flags, addr, alen);
}

ssize_t shim_raw_sendmsg(int fd, const struct msghdr *msg, int flags)
{
	__typeof__(shim_real.sendmsg) f = REAL_IF_READY(sendmsg);
	return f ? f(fd, msg, flags) : syscall(SYS_sendmsg, fd, msg, flags);
}

int shim_raw_sendmmsg(int fd, struct mmsghdr *msgs, unsigned int n, int flags)
{
	__typeof__(shim_real.sendmmsg) f = REAL_IF_READY(sendmmsg);
	return f ? f(fd, msgs, n, flags) : (int)syscall(SYS_sendmmsg, fd, msgs, n, flags);
}

ssize_t shim_raw_write(int fd, const void *buf, size_t len)
{
	__typeof__(shim_real.write) f = REAL_IF_READY(write);
	return f ? f(fd, buf, len) : syscall(SYS_write, fd, buf, len);
}

ssize_t shim_raw_writev(int fd, const struct iovec *iov, int n)
{
	__typeof__(shim_real.writev) f = REAL_IF_READY(writev);
	return f ? f(fd, iov, n) : syscall(SYS_writev, fd, iov, n);
}

ssize_t shim_raw_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *addr,
			  socklen_t *alen)
{
	__typeof__(shim_real.recvfrom) f = REAL_IF_READY(recvfrom);
	return f ? f(fd, buf, len, flags, addr, alen)
		 : syscall(SYS_recvfrom, fd, buf, len, flags, addr, alen);
}

ssize_t shim_raw_recvmsg(int fd, struct msghdr *msg, int flags)
{
	__typeof__(shim_real.recvmsg) f = REAL_IF_READY(recvmsg);
	return f ? f(fd, msg, flags) : syscall(SYS_recvmsg, fd, msg, flags);
}

int shim_raw_recvmmsg(int fd, struct mmsghdr *m, unsigned n, int flags, struct timespec *t)
{
	__typeof__(shim_real.recvmmsg) f = REAL_IF_READY(recvmmsg);
	return f ? f(fd, m, n, flags, t) : (int)syscall(SYS_recvmmsg, fd, m, n, flags, t);
}

ssize_t shim_raw_read(int fd, void *buf, size_t len)
{
	__typeof__(shim_real.read) f = REAL_IF_READY(read);
	return f ? f(fd, buf, len) : syscall(SYS_read, fd, buf, len);
}

ssize_t shim_raw_readv(int fd, const struct iovec *iov, int n)
{
	__typeof__(shim_real.readv) f = REAL_IF_READY(readv);
	return f ? f(fd, iov, n) : syscall(SYS_readv, fd, iov, n);
}

int shim_raw_close(int fd)
{
	__typeof__(shim_real.close) f = REAL_IF_READY(close);
	return f ? f(fd) : (int)syscall(SYS_close, fd);
}

/* ---- helpers -------------------------------------------------------------------------------- */

uint64_t shim_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void shim_warn(const char *fmt, ...)
{
	enum { LINE = 512 };
	static const char hex[] = "0123456789abcdef";
	char raw[LINE], buf[LINE];
	int saved = errno;
	va_list ap;

	/* Not into a file the program has put at descriptor 2 since it started (errfd.c). */
	if (!shim_stderr_ok()) {
		errno = saved;
		return;
	}
	va_start(ap, fmt);
	int m = vsnprintf(raw, sizeof(raw), fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	/* One line whatever the arguments hold: every byte that is not printable ASCII becomes
	 * \xNN (values from the environment come quoted already, shim_quote), and a message
	 * too long for the line is cut with "...". */
	size_t n = sizeof(SHIM_NAME ": ") - 1, cap = sizeof(buf) - 4; /* room for "...\n" */
	bool cut = (size_t)m >= sizeof(raw);
	memcpy(buf, SHIM_NAME ": ", n);
	for (size_t i = 0; i < (size_t)m && i < sizeof(raw) - 1; i++) {
		unsigned char c = (unsigned char)raw[i];
		size_t need = c < 0x20 || c >= 0x7f ? 4 : 1;
		if (n + need > cap) {
			cut = true;
			break;
		}
		if (need == 1) {
			buf[n++] = (char)c;
		} else {
			buf[n++] = '\\';
			buf[n++] = 'x';
			buf[n++] = hex[c >> 4];
			buf[n++] = hex[c & 15];
		}
	}
	if (cut) {
		memcpy(buf + n, "...", 3);
		n += 3;
	}
	buf[n++] = '\n';
	for (size_t off = 0; off < n;) {
		ssize_t w = shim_raw_write(2, buf + off, n - off);
		if (w <= 0) {
			if (w < 0 && errno == EINTR)
				continue;
			break;
		}
		off += (size_t)w;
	}
	errno = saved;
}
