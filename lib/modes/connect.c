/* SPDX-License-Identifier: MIT */
/*
 * MS_CFG_CONNECT: an unconnected UDP destination is sent on a connected socket of the
 * library's own, made like the caller's (options, binding), so that the kernel skips the
 * per-datagram route lookup. Used by ms_group_add (lib/api/group.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "internal.h"

/* Copy one integer option from the caller's socket when it differs from the new one's. */
static int copy_int(int from, int to, int level, int name)
{
	int v, w;
	socklen_t l = sizeof(v), m = sizeof(w);
	if (getsockopt(from, level, name, &v, &l) < 0 || getsockopt(to, level, name, &w, &m) < 0)
		return errno == ENOPROTOOPT ? 0 : -errno; /* an option this kernel lacks */
	if (v == w)
		return 0;
	return setsockopt(to, level, name, &v, sizeof(v)) < 0 ? -errno : 0;
}

static int copy_options(int from, int to, int family)
{
	static const int sol[] = { SO_PRIORITY, SO_MARK, SO_BROADCAST };
	static const int ip[] = { IP_TOS, IP_TTL, IP_MTU_DISCOVER, IP_RECVERR };
	static const int ip6[] = { IPV6_V6ONLY, IPV6_TCLASS, IPV6_UNICAST_HOPS, IPV6_MTU_DISCOVER,
				   IPV6_RECVERR };
	int err = 0;
	/* IPv4 options apply to an IPv6 socket's IPv4 traffic too: copy them for both. The
	 * traffic class and TOS also set SO_PRIORITY: it comes after them. */
	for (size_t k = 0; !err && k < sizeof(ip) / sizeof(ip[0]); k++)
		err = copy_int(from, to, IPPROTO_IP, ip[k]);
	for (size_t k = 0; !err && family == AF_INET6 && k < sizeof(ip6) / sizeof(ip6[0]); k++)
		err = copy_int(from, to, IPPROTO_IPV6, ip6[k]);
	for (size_t k = 0; !err && k < sizeof(sol) / sizeof(sol[0]); k++)
		err = copy_int(from, to, SOL_SOCKET, sol[k]);
	if (err)
		return err;
	/* SO_SNDBUF reads back doubled; a value past net.core.wmem_max needs SO_SNDBUFFORCE. */
	int v, w;
	socklen_t l = sizeof(v);
	if (getsockopt(from, SOL_SOCKET, SO_SNDBUF, &v, &l) < 0 ||
	    getsockopt(to, SOL_SOCKET, SO_SNDBUF, &w, &l) < 0)
		return -errno;
	if (v != w) {
		int half = v / 2;
		if (setsockopt(to, SOL_SOCKET, SO_SNDBUF, &half, sizeof(half)) < 0 ||
		    getsockopt(to, SOL_SOCKET, SO_SNDBUF, &w, &l) < 0)
			return -errno;
		if (w != v && setsockopt(to, SOL_SOCKET, SO_SNDBUFFORCE, &half, sizeof(half)) < 0)
			return -errno;
	}
	char dev[IFNAMSIZ] = "";
	socklen_t dl = sizeof(dev);
	if (getsockopt(from, SOL_SOCKET, SO_BINDTODEVICE, dev, &dl) < 0)
		return -errno;
	if (dl > 0 && dev[0] && setsockopt(to, SOL_SOCKET, SO_BINDTODEVICE, dev, dl) < 0)
		return -errno;
	return 0;
}

/* Bind `to` where the caller's socket is bound (nothing to do if it is not). */
static int bind_like(int from, int to)
{
	struct sockaddr_storage a;
	socklen_t l = sizeof(a);
	if (getsockname(from, (struct sockaddr *)&a, &l) < 0)
		return -errno;
	in_port_t port;
	bool any;
	if (a.ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)&a;
		port = in->sin_port;
		any = in->sin_addr.s_addr == htonl(INADDR_ANY);
	} else if (a.ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&a;
		port = in6->sin6_port;
		any = IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr);
	} else {
		return -EAFNOSUPPORT;
	}
	if (any && !port)
		return 0; /* unbound: the kernel picks as it would for the caller */
	int one = 1;
	if (port && setsockopt(to, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
		return -errno;
	return bind(to, (const struct sockaddr *)&a, l) < 0 ? -errno : 0;
}

/* A connected UDP socket for addr, made like the caller's fd. The new fd, or -errno. */
int ms__connect_own(int fd, int family, const struct sockaddr *addr, socklen_t alen)
{
	int fl = fcntl(fd, F_GETFL);
	int s = socket(family, SOCK_DGRAM | SOCK_CLOEXEC |
				       (fl >= 0 && (fl & O_NONBLOCK) ? SOCK_NONBLOCK : 0), 0);
	if (s < 0)
		return -errno;
	int err = copy_options(fd, s, family);
	if (!err)
		err = bind_like(fd, s);
	if (!err && connect(s, addr, alen) < 0)
		err = -errno;
	if (err) {
		close(s);
		return err;
	}
	return s;
}

