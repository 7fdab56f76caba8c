/* SPDX-License-Identifier: MIT */
/*
 * bypass-errno: each result the kernel's send path gives, provoked in the bypass tests'
 * sending namespace (tests/harness.sh ns_pair_up: xs0 10.77.0.1/24 fd77::1/64, the peer
 * 10.77.0.2 fd77::2, plus the routes bypass-test.sh adds: unreachable 10.98.0.0/24 and
 * 2001:db8:98::/64, prohibit 10.97.0.0/24 and 2001:db8:97::/64, blackhole 10.96.0.0/24, and
 * another veth pair, xs1 10.88.0.1/24 to 10.88.0.2, a rule: fwmark 1 looks up table 100,
 * where 10.77.0.2 is unreachable, and routes with an MTU of their own via the peer to its
 * loopback addresses 10.55.0.5 and fd55::5),
 * one line per case: its name and the result(s), a byte count or an errno name. Run without
 * the shim and under multisend-run --bypass: the outputs must be identical.
 *
 *   bypass-errno all       every case that needs nothing special
 *   bypass-errno efault K  bad pointer case K (0..5: buffer, address, an iovec's base, the
 *                          iovec array, the msghdr, the mmsghdr vector): EFAULT, one case
 *                          per process, since a shim that reads them itself crashes
 *   bypass-errno changes   routes, the address and the link changed between sends (by ip,
 *                          then 20 ms without a send)
 *   bypass-errno changes-fast  routes changed between sends by the program's own rtnetlink
 *                          requests, no pause
 *   bypass-errno eperm     a destination an output firewall rule rejects (the test adds it)
 *
 * Port 9 of the peer has no listener. Exit status 0 once every case has printed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <linux/net_tstamp.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <time.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "bypass-proto.h"

#define PORT 9

static uint8_t msg[70000];

static void line(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(const char *name, const char *fmt, ...)
{
	va_list ap;

	printf("%-22s ", name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static int sock(int fam)
{
	int fd = socket(fam, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0) {
		perror("socket");
		exit(1);
	}
	return fd;
}

static struct sockaddr_in v4(const char *a, uint16_t port)
{
	struct sockaddr_in s = { .sin_family = AF_INET, .sin_port = htons(port) };

	inet_pton(AF_INET, a, &s.sin_addr);
	return s;
}

static struct sockaddr_in6 v6(const char *a, uint16_t port)
{
	struct sockaddr_in6 s = { .sin6_family = AF_INET6, .sin6_port = htons(port) };

	inet_pton(AF_INET6, a, &s.sin6_addr);
	return s;
}

/* sendto's result, as text. */
static const char *to(int fd, size_t len, int flags, const void *addr, socklen_t alen)
{
	static char b[64];
	ssize_t r = sendto(fd, msg, len, flags, (const struct sockaddr *)addr, alen);

	return bp_result(r, errno, b, sizeof(b));
}

/* One sendto of size bytes to peer from a fresh IPv4 socket with one option set: name,
 * result. */
static void with_opt(const char *name, int level, int opt, const void *val, socklen_t vlen,
		     size_t size, const struct sockaddr_in *peer)
{
	int fd = sock(AF_INET);

	setsockopt(fd, level, opt, val, vlen);
	line(name, "%s", to(fd, size, 0, peer, sizeof(*peer)));
	close(fd);
}

/* One sendto to a fresh socket of family fam: name, result. */
static void one(const char *name, int fam, size_t len, const void *addr, socklen_t alen)
{
	int fd = sock(fam);

	line(name, "%s", to(fd, len, 0, addr, alen));
	close(fd);
}

static void v4case(const char *name, const char *a, size_t len)
{
	struct sockaddr_in d = v4(a, PORT);

	one(name, AF_INET, len, &d, sizeof(d));
}

static void v6case(const char *name, const char *a, size_t len)
{
	struct sockaddr_in6 d = v6(a, PORT);

	one(name, AF_INET6, len, &d, sizeof(d));
}

/* Until the ICMP error of the last datagram has reached fd (5 s: only a bound against a hang;
 * nothing waits that long when it works). */
static void wait_error(int fd)
{
	struct pollfd p = { .fd = fd, .events = 0 };

	poll(&p, 1, 5000);
}

static void all(void)
{
	struct sockaddr_in peer = v4("10.77.0.2", PORT);
	struct sockaddr_in6 peer6 = v6("fd77::2", PORT);
	char b[64], list[1024];
	int fd, one_ = 1;

	/* What the bypass carries. */
	v4case("ok_v4", "10.77.0.2", 64);
	v6case("ok_v6", "fd77::2", 64);
	v4case("ok_v4_1472", "10.77.0.2", 1472);
	v4case("ok_v4_zero_length", "10.77.0.2", 0);
	v6case("ok_v4_mapped", "::ffff:10.77.0.2", 64);
	fd = sock(AF_INET);
	{
		struct sockaddr_in u = peer;
		u.sin_family = AF_UNSPEC; /* Linux takes AF_UNSPEC as AF_INET here */
		line("unspec_family", "%s", to(fd, 64, 0, &u, sizeof(u)));
	}
	close(fd);
	fd = sock(AF_INET);
	if (setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, "xs0", 4) == 0)
		line("bindtodevice_xs0", "%s", to(fd, 64, 0, &peer, sizeof(peer)));
	else
		line("bindtodevice_xs0", "setsockopt %s", strerrorname_np(errno));
	close(fd);
	/* A connected socket given another address by sendto: the address is used. */
	fd = sock(AF_INET);
	{
		struct sockaddr_in c = v4("10.77.0.2", 10);
		connect(fd, (struct sockaddr *)&c, sizeof(c));
		line("connected_sendto_other", "%s", to(fd, 64, 0, &peer, sizeof(peer)));
	}
	close(fd);

	/* Routes. xs1 is another interface (10.88.0.0/24). */
	v4case("other_iface_v4", "10.88.0.2", 64);
	v4case("noroute_v4", "10.99.0.1", 64);
	v6case("noroute_v6", "2001:db8:99::1", 64);
	v4case("unreachable_v4", "10.98.0.1", 64);
	v6case("unreachable_v6", "2001:db8:98::1", 64);
	v4case("prohibit_v4", "10.97.0.1", 64);
	v6case("prohibit_v6", "2001:db8:97::1", 64);
	v4case("blackhole_v4", "10.96.0.1", 64);
	v4case("lbcast_noopt", "255.255.255.255", 64);
	/* Policy routing by the socket's mark: mark 1 looks up table 100, where the peer is
	 * unreachable; mark 2 has no rule. */
	for (int mark = 1; mark <= 2; mark++) {
		fd = sock(AF_INET);
		if (setsockopt(fd, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) == 0)
			line(mark == 1 ? "so_mark_1_table_100" : "so_mark_2",
			     "%s", to(fd, 64, 0, &peer, sizeof(peer)));
		else
			line(mark == 1 ? "so_mark_1_table_100" : "so_mark_2", "setsockopt %s",
			     strerrorname_np(errno));
		close(fd);
	}
	fd = sock(AF_INET6);
	setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one_, sizeof(one_));
	{
		struct sockaddr_in6 m = v6("::ffff:10.77.0.2", PORT);
		line("v4_mapped_v6only", "%s", to(fd, 64, 0, &m, sizeof(m)));
	}
	close(fd);

	/* A route's own MTU, below the device's: 10.55.0.5 via the peer, mtu lock 1000 (972 B
	 * of payload in one packet); fd55::5 via the peer, mtu 1280 (1232 B). */
	{
		struct sockaddr_in g = v4("10.55.0.5", PORT);
		struct sockaddr_in6 g6 = v6("fd55::5", PORT);
		int pm = IP_PMTUDISC_DO;

		fd = sock(AF_INET);
		line("route_mtu_972", "%s", to(fd, 972, 0, &g, sizeof(g)));
		line("route_mtu_1200", "%s", to(fd, 1200, 0, &g, sizeof(g)));
		setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pm, sizeof(pm));
		line("route_mtu_do_972", "%s", to(fd, 972, 0, &g, sizeof(g)));
		line("route_mtu_do_973", "%s", to(fd, 973, 0, &g, sizeof(g)));
		close(fd);
		fd = sock(AF_INET6);
		setsockopt(fd, IPPROTO_IPV6, IPV6_DONTFRAG, &one_, sizeof(one_));
		line("route_mtu_v6_1232", "%s", to(fd, 1232, 0, &g6, sizeof(g6)));
		line("route_mtu_v6_1233", "%s", to(fd, 1233, 0, &g6, sizeof(g6)));
		close(fd);
	}

	/* Broadcast, with and without SO_BROADCAST. */
	v4case("bcast_noopt", "10.77.0.255", 64);
	fd = sock(AF_INET);
	setsockopt(fd, SOL_SOCKET, SO_BROADCAST, &one_, sizeof(one_));
	{
		struct sockaddr_in bc = v4("10.77.0.255", PORT);
		line("bcast_opt", "%s", to(fd, 64, 0, &bc, sizeof(bc)));
	}
	close(fd);

	/* Sizes. */
	v4case("emsgsize_v4_65508", "10.77.0.2", 65508);
	v4case("max_v4_65507", "10.77.0.2", 65507);
	v6case("emsgsize_v6_65528", "fd77::2", 65528);
	v4case("frag_v4_1473", "10.77.0.2", 1473);
	fd = sock(AF_INET);
	{
		int pm = IP_PMTUDISC_DO;
		setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pm, sizeof(pm));
		line("pmtudisc_do_1472", "%s", to(fd, 1472, 0, &peer, sizeof(peer)));
		line("pmtudisc_do_1473", "%s", to(fd, 1473, 0, &peer, sizeof(peer)));
	}
	close(fd);
	fd = sock(AF_INET6);
	setsockopt(fd, IPPROTO_IPV6, IPV6_DONTFRAG, &one_, sizeof(one_));
	line("dontfrag_v6_1452", "%s", to(fd, 1452, 0, &peer6, sizeof(peer6)));
	line("dontfrag_v6_1453", "%s", to(fd, 1453, 0, &peer6, sizeof(peer6)));
	close(fd);

	/* A connected socket whose peer port has no listener: the ICMP error is the next
	 * send's (alternate sends). Waited for after each datagram that went. */
	for (int fam = AF_INET; fam; fam = fam == AF_INET ? AF_INET6 : 0) {
		fd = sock(fam);
		if (fam == AF_INET)
			connect(fd, (struct sockaddr *)&peer, sizeof(peer));
		else
			connect(fd, (struct sockaddr *)&peer6, sizeof(peer6));
		list[0] = 0;
		for (int k = 0; k < 10; k++) {
			ssize_t r = send(fd, msg, 64, 0);
			int e = errno;

			strcat(list, " ");
			strcat(list, bp_result(r, e, b, sizeof(b)));
			if (r >= 0)
				wait_error(fd);
		}
		line(fam == AF_INET ? "refused_v4" : "refused_v6", "%s", list + 1);
		/* write(2) on it, the same. */
		list[0] = 0;
		for (int k = 0; k < 4; k++) {
			ssize_t r = write(fd, msg, 64);
			int e = errno;

			strcat(list, " ");
			strcat(list, bp_result(r, e, b, sizeof(b)));
			if (r >= 0)
				wait_error(fd);
		}
		line(fam == AF_INET ? "refused_write_v4" : "refused_write_v6", "%s", list + 1);
		close(fd);
	}
	/* A pending error is the next send's, whatever its address: sendto another port on
	 * the connected socket, writev. */
	for (int fam = AF_INET; fam; fam = fam == AF_INET ? AF_INET6 : 0) {
		struct sockaddr_in o4 = v4("10.77.0.2", PORT + 1);
		struct sockaddr_in6 o6 = v6("fd77::2", PORT + 1);
		const void *o = fam == AF_INET ? (const void *)&o4 : (const void *)&o6;
		socklen_t ol = fam == AF_INET ? sizeof(o4) : sizeof(o6);
		struct iovec iov = { msg, 64 };

		fd = sock(fam);
		if (fam == AF_INET)
			connect(fd, (struct sockaddr *)&peer, sizeof(peer));
		else
			connect(fd, (struct sockaddr *)&peer6, sizeof(peer6));
		list[0] = 0;
		/* Waited for after each datagram to the peer; the other port's ICMP errors match
		 * no socket (the connected one's peer is port 9) and are never waited for. */
		for (int k = 0; k < 3; k++) {
			ssize_t r = send(fd, msg, 64, 0);
			strcat(list, " ");
			strcat(list, bp_result(r, errno, b, sizeof(b)));
			if (r >= 0)
				wait_error(fd);
			for (int j = 0; j < 2; j++) {
				strcat(list, " ");
				strcat(list, to(fd, 64, 0, o, ol));
			}
			r = writev(fd, &iov, 1);
			strcat(list, " ");
			strcat(list, bp_result(r, errno, b, sizeof(b)));
			if (r >= 0)
				wait_error(fd);
		}
		line(fam == AF_INET ? "refused_sendto_other_v4" : "refused_sendto_other_v6", "%s",
		     list + 1);
		close(fd);
	}

	/* Refused at the call. */
	fd = sock(AF_INET);
	{
		ssize_t r = send(fd, msg, 64, 0);
		line("edestaddrreq_send", "%s", bp_result(r, errno, b, sizeof(b)));
		r = write(fd, msg, 64);
		line("edestaddrreq_write", "%s", bp_result(r, errno, b, sizeof(b)));
		line("einval_addrlen_8", "%s", to(fd, 64, 0, &peer, 8));
		struct sockaddr_in p0 = v4("10.77.0.2", 0);
		line("einval_port_0", "%s", to(fd, 64, 0, &p0, sizeof(p0)));
		line("eafnosupport_v6_on_v4", "%s", to(fd, 64, 0, &peer6, sizeof(peer6)));
		struct sockaddr_in6 p6 = peer6;
		line("einval_v6_addrlen_8", "%s", to(sock(AF_INET6), 64, 0, &p6, 8));
		line("eopnotsupp_msg_oob", "%s", to(fd, 64, MSG_OOB, &peer, sizeof(peer)));
	}
	close(fd);
	{
		int dead = sock(AF_INET), p[2];

		close(dead);
		line("ebadf", "%s", to(dead, 64, 0, &peer, sizeof(peer)));
		if (pipe(p) == 0) {
			line("enotsock_pipe", "%s", to(p[1], 64, 0, &peer, sizeof(peer)));
			close(p[0]);
			close(p[1]);
		}
	}

	/* Flags and options the frames cannot honour: still the kernel's results. */
	fd = sock(AF_INET);
	line("msg_more", "%s", to(fd, 10, MSG_MORE, &peer, sizeof(peer)));
	line("msg_more_end", "%s", to(fd, 20, 0, &peer, sizeof(peer)));
	line("after_msg_more", "%s", to(fd, 64, 0, &peer, sizeof(peer)));
	close(fd);
	with_opt("ip_recverr", SOL_IP, IP_RECVERR, &one_, sizeof(one_), 64, &peer);
	const int prio = 3;
	with_opt("so_priority_3", SOL_SOCKET, SO_PRIORITY, &prio, sizeof(prio), 64, &peer);
	fd = sock(AF_INET);
	{
		union {
			char buf[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		} u = { 0 };
		struct iovec iov = { .iov_base = msg, .iov_len = 64 };
		struct msghdr mh = { .msg_name = &peer, .msg_namelen = sizeof(peer), .msg_iov = &iov,
				     .msg_iovlen = 1, .msg_control = u.buf,
				     .msg_controllen = sizeof(u.buf) };
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		int ttl = 9;

		c->cmsg_level = IPPROTO_IP;
		c->cmsg_type = IP_TTL;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &ttl, sizeof(ttl));
		ssize_t r = sendmsg(fd, &mh, 0);
		line("sendmsg_cmsg_ttl", "%s", bp_result(r, errno, b, sizeof(b)));
		/* A bad control message: EINVAL from the kernel. */
		c->cmsg_len = 3;
		r = sendmsg(fd, &mh, 0);
		line("sendmsg_bad_cmsg", "%s", bp_result(r, errno, b, sizeof(b)));
	}
	close(fd);
	fd = sock(AF_INET);
	{
		/* UDP_CORK: the sends make one datagram, sent when it is uncorked. */
		int on = 1, off = 0;
		setsockopt(fd, IPPROTO_UDP, UDP_CORK, &on, sizeof(on));
		line("udp_cork_10", "%s", to(fd, 10, 0, &peer, sizeof(peer)));
		line("udp_cork_20", "%s", to(fd, 20, 0, &peer, sizeof(peer)));
		line("udp_uncork", "%s", setsockopt(fd, IPPROTO_UDP, UDP_CORK, &off, sizeof(off)) ?
					     strerrorname_np(errno) : "0");
		line("after_uncork", "%s", to(fd, 64, 0, &peer, sizeof(peer)));
	}
	close(fd);
	const unsigned char opts[4] = { 1, 1, 1, 0 }; /* NOP NOP NOP EOL */
	with_opt("ip_options", IPPROTO_IP, IP_OPTIONS, opts, sizeof(opts), 64, &peer);
	const int ts = SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE;
	with_opt("so_timestamping_tx", SOL_SOCKET, SO_TIMESTAMPING, &ts, sizeof(ts), 64, &peer);
	const int seg = 100;
	with_opt("udp_segment_300", IPPROTO_UDP, UDP_SEGMENT, &seg, sizeof(seg), 300, &peer);

	/* Non-blocking: 1000 sends on an O_NONBLOCK socket, 1000 with MSG_DONTWAIT; the
	 * distinct results and their counts. */
	for (int pass = 0; pass < 2; pass++) {
		long ok = 0, errs[200] = { 0 };

		fd = sock(AF_INET);
		if (pass == 0)
			fcntl(fd, F_SETFL, O_NONBLOCK);
		for (int k = 0; k < 1000; k++) {
			ssize_t r = sendto(fd, msg, 64, pass ? MSG_DONTWAIT : 0,
					   (struct sockaddr *)&peer, sizeof(peer));
			if (r == 64)
				ok++;
			else if (r < 0 && errno < 200)
				errs[errno]++;
			else
				errs[0]++;
		}
		list[0] = 0;
		for (int e = 0; e < 200; e++)
			if (errs[e]) {
				snprintf(b, sizeof(b), " %s:%ld", e ? strerrorname_np(e) : "short",
					 errs[e]);
				strcat(list, b);
			}
		line(pass ? "msg_dontwait_1000" : "o_nonblock_1000", "ok:%ld%s", ok, list);
		close(fd);
	}
}

/* ip COMMAND, quietly, then 20 ms without a send: longer than the shim's 5 ms without a kick
 * after which it reads the kernel's notifications before the next frame. */
static bool ip(const char *args)
{
	char cmd[256];
	struct timespec ts = { 0, 20 * 1000 * 1000 };
	int r;

	snprintf(cmd, sizeof(cmd), "ip %s >/dev/null 2>&1", args);
	r = system(cmd);
	nanosleep(&ts, NULL);
	return r == 0;
}

/* A route of type rtype to dst/32 added (RTM_NEWROUTE) or deleted through the program's own
 * rtnetlink socket, acknowledged by the kernel before it returns: the change is complete, as
 * it is when `ip route add` has exited, but well within a millisecond. */
static bool nl_route(int type, unsigned char rtype, const char *dst)
{
	struct {
		struct nlmsghdr n;
		struct rtmsg r;
		struct rtattr a;
		struct in_addr d;
	} req = {
		.n = { .nlmsg_len = sizeof(req), .nlmsg_type = (unsigned short)type,
		       .nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK |
				      (type == RTM_NEWROUTE ? NLM_F_CREATE | NLM_F_EXCL : 0),
		       .nlmsg_seq = 1 },
		.r = { .rtm_family = AF_INET, .rtm_dst_len = 32, .rtm_table = RT_TABLE_MAIN,
		       .rtm_protocol = RTPROT_BOOT,
		       .rtm_scope = type == RTM_NEWROUTE ? RT_SCOPE_UNIVERSE : RT_SCOPE_NOWHERE,
		       .rtm_type = rtype },
		.a = { .rta_len = RTA_LENGTH(sizeof(struct in_addr)), .rta_type = RTA_DST },
	};
	union {
		char buf[1024];
		struct nlmsghdr align;
	} u;
	struct sockaddr_nl k = { .nl_family = AF_NETLINK };
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	bool ok = false;

	inet_pton(AF_INET, dst, &req.d);
	if (fd >= 0 && sendto(fd, &req, sizeof(req), 0, (struct sockaddr *)&k, sizeof(k)) > 0) {
		ssize_t n = recv(fd, u.buf, sizeof(u.buf), 0);
		struct nlmsghdr *h = &u.align;

		ok = n >= (ssize_t)NLMSG_LENGTH(sizeof(struct nlmsgerr)) && h->nlmsg_type == NLMSG_ERROR &&
		     ((struct nlmsgerr *)NLMSG_DATA(h))->error == 0;
	}
	if (fd >= 0)
		close(fd);
	return ok;
}

#define STEP(cond, label)                                                                        \
	do {                                                                                     \
		strcat(list, (cond) ? " " label : " (" label " failed)");                        \
		strcat(list, ":");                                                               \
		strcat(list, to(fd, 64, 0, &peer, sizeof(peer)));                                \
	} while (0)

/* The network changes between two sends (by ip, then a 20 ms pause): every send must see the
 * route the kernel's own send would. xs0 down and up loses its IPv6 address and the peer's
 * permanent neighbour entries: nothing else runs after these. */
static void changes(void)
{
	struct sockaddr_in peer = v4("10.77.0.2", PORT);
	char list[512];
	int fd = sock(AF_INET);

	list[0] = 0;
	STEP(true, "before");
	STEP(ip("route add unreachable 10.77.0.2/32"), "unreachable");
	STEP(ip("route del unreachable 10.77.0.2/32"), "deleted");
	STEP(ip("route add prohibit 10.77.0.2/32"), "prohibit");
	STEP(ip("route replace blackhole 10.77.0.2/32"), "blackhole");
	STEP(ip("route del 10.77.0.2/32"), "deleted");
	line("route_changes", "%s", list + 1);
	list[0] = 0;
	STEP(ip("addr del 10.77.0.1/24 dev xs0"), "address_gone");
	STEP(ip("addr add 10.77.0.1/24 dev xs0"), "address_back");
	STEP(ip("link set xs0 down"), "down");
	STEP(ip("link set xs0 up"), "up");
	STEP(true, "again");
	line("link_changes", "%s", list + 1);
	close(fd);
}

/* The same route changes made by the program itself through rtnetlink, each complete (the
 * kernel's acknowledgement read) before the next send, and no pause: the send right after a
 * change must see it, as the kernel's own send does. */
static void changes_fast(void)
{
	struct sockaddr_in peer = v4("10.77.0.2", PORT);
	char list[512];
	int fd = sock(AF_INET);

	list[0] = 0;
	for (int k = 0; k < 3; k++) {
		STEP(true, "before");
		STEP(nl_route(RTM_NEWROUTE, RTN_UNREACHABLE, "10.77.0.2"), "unreachable");
		STEP(nl_route(RTM_DELROUTE, RTN_UNREACHABLE, "10.77.0.2"), "deleted");
		STEP(nl_route(RTM_NEWROUTE, RTN_PROHIBIT, "10.77.0.2"), "prohibit");
		STEP(nl_route(RTM_DELROUTE, RTN_PROHIBIT, "10.77.0.2"), "deleted");
		STEP(nl_route(RTM_NEWROUTE, RTN_BLACKHOLE, "10.77.0.2"), "blackhole");
		STEP(nl_route(RTM_DELROUTE, RTN_BLACKHOLE, "10.77.0.2"), "deleted");
		line("route_changes_fast", "%s", list + 1);
		list[0] = 0;
	}
	close(fd);
}
#undef STEP

/* Case k (0..5) of the bad pointers, then a good send on the same socket. */
static void efault(int k)
{
	struct sockaddr_in peer = v4("10.77.0.2", PORT);
	struct iovec iov[2] = { { msg, 16 }, { (void *)16, 48 } };
	struct msghdr mh = { .msg_name = &peer, .msg_namelen = sizeof(peer), .msg_iov = iov,
			     .msg_iovlen = 2 };
	static const char *const names[] = { "efault_buffer", "efault_address", "efault_iovec_base",
					     "efault_iovec", "efault_msghdr", "efault_mmsghdr" };
	char b[64];
	int fd = sock(AF_INET);
	ssize_t r = 0;

	switch (k) {
	case 0: r = sendto(fd, (void *)16, 64, 0, (struct sockaddr *)&peer, sizeof(peer)); break;
	case 1: r = sendto(fd, msg, 64, 0, (struct sockaddr *)16, sizeof(peer)); break;
	case 2: r = sendmsg(fd, &mh, 0); break;
	case 3: mh.msg_iov = (void *)16; r = sendmsg(fd, &mh, 0); break;
	case 4: r = sendmsg(fd, (void *)16, 0); break;
	case 5: r = sendmmsg(fd, (void *)16, 2, 0); break;
	}
	line(names[k], "%s", bp_result(r, errno, b, sizeof(b)));
	r = sendto(fd, msg, 64, 0, (struct sockaddr *)&peer, sizeof(peer));
	line("after_efault", "%s", bp_result(r, errno, b, sizeof(b)));
	close(fd);
}

static void eperm(void)
{
	/* The test's firewall rejects output to port 7 of the peer (nft: reject with
	 * EPERM at the output hook is "drop": sendto then returns EPERM). */
	struct sockaddr_in d = v4("10.77.0.2", 7);

	one("eperm_firewall", AF_INET, 64, &d, sizeof(d));
	v4case("eperm_other_port_ok", "10.77.0.2", 64);
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "all";

	for (size_t k = 0; k < sizeof(msg); k++)
		msg[k] = (uint8_t)k;
	if (!strcmp(what, "all"))
		all();
	else if (!strcmp(what, "changes"))
		changes();
	else if (!strcmp(what, "changes-fast"))
		changes_fast();
	else if (!strcmp(what, "efault") && argc > 2 && atoi(argv[2]) >= 0 && atoi(argv[2]) < 6)
		efault(atoi(argv[2]));
	else if (!strcmp(what, "eperm"))
		eperm();
	else {
		fprintf(stderr, "usage: bypass-errno all | changes | changes-fast | efault 0..5 | eperm\n");
		return 2;
	}
	return 0;
}
