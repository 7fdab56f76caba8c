/* SPDX-License-Identifier: MIT */
/*
 * What each descriptor is, cached per fd number, so that the hot path asks the kernel nothing.
 *
 * Whether a socket may be batched depends on things that never change for an open socket
 * (family, type, protocol) and on options that can (send timeout, path-MTU discovery, corking,
 * GSO, the connected peer). The cache is dropped whenever the number may come to mean another
 * file or the options may change: close, dup2, dup3, close_range, socket, accept, setsockopt,
 * connect, shutdown, and fcntl F_SETFL / ioctl FIONBIO (O_NONBLOCK) all go through the shim.
 * O_NONBLOCK can still change behind the shim's back (another process sharing the file): a
 * flush that then meets EAGAIN waits for room, as the program's blocking send would have.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "shim.h"

struct shim_fd *shim_fdtab;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_map(void)
{
	void *p = mmap(NULL, SHIM_FDTAB_MAX * sizeof(struct shim_fd), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p != MAP_FAILED)
		__atomic_store_n(&shim_fdtab, (struct shim_fd *)p, __ATOMIC_RELEASE);
}

struct shim_fd *shim_fd_map(int fd)
{
	pthread_once(&table_once, table_map);
	return shim_fdtab ? &shim_fdtab[fd] : NULL;
}

static int getint(int fd, int level, int opt, int *v)
{
	socklen_t l = sizeof(*v);
	*v = 0;
	return getsockopt(fd, level, opt, v, &l);
}

/* May sends on this UDP socket go into a batch, that is, will the kernel's answer to a
 * sendto depend only on what batch.c checks at call time (size and address)? */
static bool udp_batchable(int fd, bool v6)
{
	struct timeval tv = { 0 };
	socklen_t l = sizeof(tv);
	int v;

	/* Errors that arrive after a send (ICMP port unreachable, a local drop) are given to the
	 * program by its next call on a connected socket or one with IP_RECVERR / IPV6_RECVERR:
	 * a batch would hide them or hand them to the wrong call. */
	if (getint(fd, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_RECVERR : IP_RECVERR, &v) < 0 || v)
		return false;
	if (v6 && (getint(fd, IPPROTO_IP, IP_RECVERR, &v) < 0 || v))
		return false;
	/* A send timeout makes a blocking socket report EAGAIN: the program must see it. */
	if (getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &l) < 0 || tv.tv_sec || tv.tv_usec)
		return false;
	/* Corked sends are joined into one datagram; GSO splits them: leave both alone. */
	if (getint(fd, IPPROTO_UDP, UDP_CORK, &v) < 0 || v)
		return false;
	if (getint(fd, IPPROTO_UDP, UDP_SEGMENT, &v) == 0 && v)
		return false;
	/* With path-MTU discovery on (DO, PROBE, INTERFACE) or DONTFRAG, a datagram larger
	 * than the route's MTU fails with EMSGSIZE, which only a route lookup can predict. */
	if (v6) {
		if (getint(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &v) < 0 ||
		    (v != IPV6_PMTUDISC_DONT && v != IPV6_PMTUDISC_WANT && v != IPV6_PMTUDISC_OMIT))
			return false;
		if (getint(fd, IPPROTO_IPV6, IPV6_DONTFRAG, &v) < 0 || v)
			return false;
	} else {
		if (getint(fd, IPPROTO_IP, IP_MTU_DISCOVER, &v) < 0 ||
		    (v != IP_PMTUDISC_DONT && v != IP_PMTUDISC_WANT && v != IP_PMTUDISC_OMIT))
			return false;
	}
	return true;
}

static uint32_t classify(int fd)
{
	int type, dom, proto;
	uint32_t info = FD_KNOWN;

	if (getint(fd, SOL_SOCKET, SO_TYPE, &type) < 0)
		return errno == ENOTSOCK ? info : 0; /* not open: nothing to cache */
	info |= FD_SOCKET;
	if (getint(fd, SOL_SOCKET, SO_DOMAIN, &dom) < 0 ||
	    getint(fd, SOL_SOCKET, SO_PROTOCOL, &proto) < 0)
		return info;
	if (dom == AF_UNIX)
		info |= FD_UNIX;
	if (dom == AF_INET || dom == AF_INET6)
		info |= FD_INET | (dom == AF_INET6 ? FD_V6 : 0);
	if (type == SOCK_STREAM)
		info |= FD_STREAM;
	if ((info & FD_INET) && type == SOCK_DGRAM && proto == IPPROTO_UDP) {
		struct sockaddr_storage ss;
		socklen_t l = sizeof(ss);

		int fl = fcntl(fd, F_GETFL);

		info |= FD_UDP;
		if (fl < 0 || (fl & O_NONBLOCK))
			info |= FD_NONBLOCK; /* EAGAIN must reach the program */
		if (getpeername(fd, (struct sockaddr *)&ss, &l) == 0)
			info |= FD_CONNECTED;
		if (!(info & (FD_NONBLOCK | FD_CONNECTED)) && udp_batchable(fd, dom == AF_INET6))
			info |= FD_BATCHABLE;
	}
	return info;
}

/* One past the highest descriptor ever classified as UDP (what shim_fd_forget_udp scans). */
static _Atomic unsigned udp_hi;

uint32_t shim_fd_classify(int fd, struct shim_fd *e)
{
	int saved = errno;
	uint32_t info = classify(fd);
	errno = saved;
	if (e && info) {
		__atomic_store_n(&e->info, info, __ATOMIC_RELAXED);
		unsigned hi = atomic_load_explicit(&udp_hi, memory_order_relaxed);
		while ((info & FD_UDP) && (unsigned)fd >= hi &&
		       !atomic_compare_exchange_weak(&udp_hi, &hi, (unsigned)fd + 1))
			;
	}
	return info;
}

void shim_fd_forget_udp(void)
{
	unsigned hi = atomic_load_explicit(&udp_hi, memory_order_relaxed);
	for (unsigned fd = 0; fd < hi && shim_fdtab; fd++)
		if (__atomic_load_n(&shim_fdtab[fd].info, __ATOMIC_RELAXED) & FD_UDP)
			shim_fd_forget((int)fd);
}

void shim_fd_forget(int fd)
{
	struct shim_fd *e = shim_fd_peek(fd);

	if (!e)
		return;
	__atomic_store_n(&e->info, 0, __ATOMIC_RELAXED);
	__atomic_fetch_add(&e->gen, 1, __ATOMIC_RELAXED);
	atomic_store_explicit(&e->deferred, 0, memory_order_relaxed);
}

void shim_fd_forget_range(unsigned first, unsigned last)
{
	if (!shim_fdtab)
		return;
	if (last >= SHIM_FDTAB_MAX)
		last = SHIM_FDTAB_MAX - 1;
	for (unsigned fd = first; fd <= last && first < SHIM_FDTAB_MAX; fd++)
		if (__atomic_load_n(&shim_fdtab[fd].info, __ATOMIC_RELAXED))
			shim_fd_forget((int)fd);
}

const char *shim_fd_kind(uint32_t info)
{
	if (!(info & FD_SOCKET))
		return info ? "not a socket" : "unknown";
	if (info & FD_UDP)
		return info & FD_V6 ? "udp6" : "udp4";
	if ((info & FD_INET) && (info & FD_STREAM))
		return info & FD_V6 ? "tcp6" : "tcp4";
	if (info & FD_UNIX)
		return "unix";
	return "socket";
}
