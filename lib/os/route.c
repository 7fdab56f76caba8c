/* SPDX-License-Identifier: MIT */
/*
 * Route and neighbour over raw rtnetlink (rtnetlink(7), netlink(7)): one request at a time on
 * a blocking socket, each answered by the kernel with one message or an NLMSG_ERROR; a second
 * socket only listens. The answer is read into struct ms__nl's buffer, so a call allocates
 * nothing; the contract is route.h's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <linux/if_arp.h>
#include <linux/fib_rules.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include "route.h"
#include "sys.h"
#include "internal.h" /* ms__fork_gen */

#ifdef MS_HAVE_LIBURING
#include <poll.h>
#include <liburing.h>
#endif

/* Big enough for any single answer asked for here: a link's message without its statistics
 * (RTEXT_FILTER_SKIP_STATS) is well under 4 KiB, a route's or a neighbour's a few hundred
 * bytes. A longer one is reported (MSG_TRUNC), not parsed in part. */
#define MS__NL_BUF 16384

struct ms__nl {
	int fd;        /* requests and their answers */
	int ev;        /* notifications, non-blocking */
	uint32_t seq;  /* of the last request */
	uint32_t port; /* fd's netlink port id: answers are addressed to it */
#ifdef MS_HAVE_LIBURING
	/* ms__nl_watch: a multishot poll of ev whose completions land in this ring's memory, so
	 * that "nothing changed" is a read of the completion queue, not a recv(2). */
	struct io_uring ring;
	bool watched;      /* the poll is armed (or its last completion not yet seen) */
	bool rearm;        /* the poll ended: arm it again once the socket is drained */
	unsigned gen;      /* ms__fork_gen when armed: a child shares the ring, never reads it */
	uint64_t every;    /* the backstop's period: recv(2) at least this often all the same */
	uint64_t backstop; /* CLOCK_MONOTONIC ns: when it is next due */
#endif
	union {
		struct nlmsghdr h;
		char b[MS__NL_BUF];
	} buf;
};

/* A request: the header, the family's fixed part and room for the few attributes we add. */
struct ms__nlreq {
	struct nlmsghdr h;
	union {
		struct rtmsg rt;
		struct ndmsg nd;
		struct ifinfomsg ifi;
	};
	char attrs[256];
};

/* What a link's RTM_NEWLINK says that a route needs. */
struct ms__link {
	int ifindex;
	unsigned type;  /* ARPHRD_* */
	unsigned flags; /* IFF_* */
	uint32_t mtu;
	uint8_t mac[6];
	bool has_mac;
};

static int nl_socket(int groups, int flags)
{
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | flags, NETLINK_ROUTE);
	if (fd < 0)
		return -errno;
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK, .nl_groups = (uint32_t)groups };
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

int ms__nl_open(struct ms__nl **out)
{
	struct ms__nl *nl = calloc(1, sizeof(*nl));
	if (!nl)
		return -ENOMEM;
	nl->fd = nl_socket(0, 0);
	if (nl->fd < 0) {
		int err = nl->fd;
		free(nl);
		return err;
	}
	/* The listener: every change that can alter a resolved frame, policy rules included
	 * (a rule added or deleted changes which table, or which drop, a lookup ends in). A
	 * burst (a link flapping with its routes) may exceed the buffer; ENOBUFS then says
	 * "something changed", which is all the backend needs, so a moderate buffer is
	 * enough. */
	nl->ev = nl_socket(RTMGRP_LINK | RTMGRP_NEIGH | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR |
				   RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE | RTMGRP_IPV4_RULE |
				   1 << (RTNLGRP_IPV6_RULE - 1),
			   SOCK_NONBLOCK);
	if (nl->ev < 0) {
		int err = nl->ev;
		close(nl->fd);
		free(nl);
		return err;
	}
	int one = 1, rcvbuf = 256 * 1024;
	(void)setsockopt(nl->ev, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	/* Errors without a copy of our request (CAP_ACK); requests checked field by field
	 * (GET_STRICT_CHK, Linux 4.20), so that a malformed one fails instead of being read
	 * as a dump or with attributes ignored. Both only refine: older kernels do without. */
	(void)setsockopt(nl->fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof(one));
	(void)setsockopt(nl->fd, SOL_NETLINK, NETLINK_GET_STRICT_CHK, &one, sizeof(one));
	struct sockaddr_nl sa;
	socklen_t l = sizeof(sa);
	if (getsockname(nl->fd, (struct sockaddr *)&sa, &l) < 0) {
		int err = -errno;
		ms__nl_close(nl);
		return err;
	}
	nl->port = sa.nl_pid;
	nl->seq = 0;
	*out = nl;
	return 0;
}

void ms__nl_close(struct ms__nl *nl)
{
	if (!nl)
		return;
#ifdef MS_HAVE_LIBURING
	if (nl->watched) /* in a child too: its mappings and descriptor, not the parent's */
		io_uring_queue_exit(&nl->ring);
#endif
	close(nl->fd);
	close(nl->ev);
	free(nl);
}

static void put_attr(struct ms__nlreq *r, unsigned short type, const void *data, size_t len)
{
	struct rtattr *a = (struct rtattr *)((char *)r + NLMSG_ALIGN(r->h.nlmsg_len));
	/* Our requests add at most a handful of small attributes: attrs[] always has room. */
	a->rta_type = type;
	a->rta_len = (unsigned short)RTA_LENGTH(len);
	memcpy(RTA_DATA(a), data, len);
	r->h.nlmsg_len = NLMSG_ALIGN(r->h.nlmsg_len) + RTA_ALIGN(a->rta_len);
}

/*
 * Send the request and wait for its answer: a message of type `want` (returned through *ans,
 * in nl->buf) or an NLMSG_ERROR (its -errno). Anything else read meanwhile (a late answer to
 * an earlier request, a message not from the kernel) is skipped. 0 or -errno.
 */
static int nl_ask(struct ms__nl *nl, struct ms__nlreq *r, unsigned short want,
		  const struct nlmsghdr **ans)
{
	r->h.nlmsg_flags = NLM_F_REQUEST;
	r->h.nlmsg_seq = ++nl->seq;
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	ssize_t n;
	do
		/* Through the library's door to send calls (sys.h): never the preload
		 * shim's, which would count the library's own requests as the program's. */
		n = ms__sys.sendto(nl->fd, r, r->h.nlmsg_len, 0, (struct sockaddr *)&kernel,
				   sizeof(kernel));
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	for (;;) {
		struct sockaddr_nl from;
		struct iovec iov = { .iov_base = nl->buf.b, .iov_len = sizeof(nl->buf.b) };
		struct msghdr mh = { .msg_name = &from, .msg_namelen = sizeof(from),
				     .msg_iov = &iov, .msg_iovlen = 1 };
		n = recvmsg(nl->fd, &mh, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (from.nl_pid != 0)
			continue; /* not from the kernel */
		if (mh.msg_flags & MSG_TRUNC)
			return -EMSGSIZE;
		size_t len = (size_t)n;
		const struct nlmsghdr *h = &nl->buf.h;
		for (; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
			if (h->nlmsg_seq != nl->seq || h->nlmsg_pid != nl->port)
				continue; /* an answer to an earlier request */
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);
				if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*e)))
					return -EPROTO;
				/* A request without NLM_F_ACK is acknowledged only by an error. */
				return e->error ? e->error : -EPROTO;
			}
			if (h->nlmsg_type == want) {
				*ans = h;
				return 0;
			}
		}
	}
}

/* Index the attributes that follow a message's fixed part: tb[type] (the last of a type). */
static void parse_attrs(const struct rtattr **tb, int max, const struct rtattr *a, size_t len)
{
	memset(tb, 0, sizeof(*tb) * (size_t)(max + 1));
	unsigned int l = (unsigned int)len;
	for (; RTA_OK(a, l); a = RTA_NEXT(a, l))
		if (a->rta_type <= max)
			tb[a->rta_type] = a;
}

static size_t payload(const struct rtattr *a)
{
	return RTA_PAYLOAD(a);
}

/* A link by index (name NULL) or by name. */
static int link_query(struct ms__nl *nl, int ifindex, const char *name, struct ms__link *lk)
{
	struct ms__nlreq r;
	memset(&r, 0, sizeof(r));
	r.h.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
	r.h.nlmsg_type = RTM_GETLINK;
	r.ifi.ifi_family = AF_UNSPEC;
	r.ifi.ifi_index = ifindex;
	if (name) {
		size_t l = strnlen(name, IFNAMSIZ);
		if (l == 0 || l >= IFNAMSIZ)
			return -ENODEV; /* no interface can have that name */
		put_attr(&r, IFLA_IFNAME, name, l + 1);
	}
	uint32_t ext = RTEXT_FILTER_SKIP_STATS;
	put_attr(&r, IFLA_EXT_MASK, &ext, sizeof(ext));
	const struct nlmsghdr *h;
	int err = nl_ask(nl, &r, RTM_NEWLINK, &h);
	if (err)
		return err;
	const struct ifinfomsg *ifi = NLMSG_DATA(h);
	if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*ifi)))
		return -EPROTO;
	const struct rtattr *tb[IFLA_MAX + 1];
	parse_attrs(tb, IFLA_MAX, IFLA_RTA(ifi), h->nlmsg_len - NLMSG_LENGTH(sizeof(*ifi)));
	memset(lk, 0, sizeof(*lk));
	lk->ifindex = ifi->ifi_index;
	lk->type = ifi->ifi_type;
	lk->flags = ifi->ifi_flags;
	if (tb[IFLA_MTU] && payload(tb[IFLA_MTU]) >= sizeof(uint32_t))
		memcpy(&lk->mtu, RTA_DATA(tb[IFLA_MTU]), sizeof(uint32_t));
	if (tb[IFLA_ADDRESS] && payload(tb[IFLA_ADDRESS]) == 6) {
		memcpy(lk->mac, RTA_DATA(tb[IFLA_ADDRESS]), 6);
		lk->has_mac = true;
	}
	return 0;
}

int ms__link_get(struct ms__nl *nl, const char *ifname, int *ifindex, uint32_t *mtu,
		 uint8_t mac[6], bool *running)
{
	struct ms__link lk;
	int err = link_query(nl, 0, ifname, &lk);
	if (err)
		return err;
	if (lk.type != ARPHRD_ETHER || !lk.has_mac)
		return -EPROTONOSUPPORT;
	*ifindex = lk.ifindex;
	*mtu = lk.mtu;
	memcpy(mac, lk.mac, 6);
	/* IFF_LOWER_UP is the carrier itself, set as the driver reports it; IFF_RUNNING (the
	 * operational state) follows through the kernel's link-watch work, up to a second
	 * later. The carrier is what decides whether a frame can leave. */
	*running = (lk.flags & IFF_UP) && (lk.flags & IFF_LOWER_UP);
	return 0;
}

/* The neighbour entry's address if it can be used for sending now: 1, 0 (none usable), or
 * -errno. */
static int neigh_get(struct ms__nl *nl, int family, const void *addr, int ifindex,
		     uint8_t mac[6])
{
	struct ms__nlreq r;
	memset(&r, 0, sizeof(r));
	r.h.nlmsg_len = NLMSG_LENGTH(sizeof(struct ndmsg));
	r.h.nlmsg_type = RTM_GETNEIGH;
	r.nd.ndm_family = (unsigned char)family;
	r.nd.ndm_ifindex = ifindex;
	put_attr(&r, NDA_DST, addr, family == AF_INET ? 4 : 16);
	const struct nlmsghdr *h;
	int err = nl_ask(nl, &r, RTM_NEWNEIGH, &h);
	if (err == -ENOENT)
		return 0; /* no entry yet */
	if (err)
		return err;
	const struct ndmsg *nd = NLMSG_DATA(h);
	if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*nd)))
		return -EPROTO;
	const struct rtattr *tb[NDA_MAX + 1];
	parse_attrs(tb, NDA_MAX,
		    (const struct rtattr *)((const char *)nd + NLMSG_ALIGN(sizeof(*nd))),
		    h->nlmsg_len - NLMSG_LENGTH(sizeof(*nd)));
	/* INCOMPLETE, FAILED and NONE have no address to use; the others have one the kernel
	 * itself would send to (STALE, DELAY and PROBE while it re-confirms it). */
	const unsigned usable = NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE |
				NUD_PERMANENT | NUD_NOARP;
	if (!(nd->ndm_state & usable) || !tb[NDA_LLADDR] || payload(tb[NDA_LLADDR]) != 6)
		return 0;
	memcpy(mac, RTA_DATA(tb[NDA_LLADDR]), 6);
	return 1;
}

/*
 * The source the kernel would choose, asked the way a socket asks it: a UDP socket connected
 * to dst (bound to the device, marked, with the TOS) and getsockname(). Only when the
 * route's answer did not carry one. 0 or -errno.
 */
static int src_by_connect(int family, const void *dst, int oif, uint32_t mark, int tos,
			  void *src)
{
	int s = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	socklen_t l;
	if (family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;
		in->sin_family = AF_INET;
		in->sin_port = htons(9);
		memcpy(&in->sin_addr, dst, 4);
		l = sizeof(*in);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(9);
		in6->sin6_scope_id = (uint32_t)oif;
		memcpy(&in6->sin6_addr, dst, 16);
		l = sizeof(*in6);
	}
	int err = 0;
	if (oif && setsockopt(s, SOL_SOCKET, SO_BINDTOIFINDEX, &oif, sizeof(oif)) < 0)
		err = -errno;
	if (!err && mark && setsockopt(s, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) < 0)
		err = -errno;
	if (!err && tos &&
	    setsockopt(s, family == AF_INET ? IPPROTO_IP : IPPROTO_IPV6,
		       family == AF_INET ? IP_TOS : IPV6_TCLASS, &tos, sizeof(tos)) < 0)
		err = -errno;
	if (!err && connect(s, (struct sockaddr *)&ss, l) < 0)
		err = -errno;
	l = sizeof(ss);
	if (!err && getsockname(s, (struct sockaddr *)&ss, &l) < 0)
		err = -errno;
	close(s);
	if (err)
		return err;
	if (family == AF_INET)
		memcpy(src, &((struct sockaddr_in *)&ss)->sin_addr, 4);
	else
		memcpy(src, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
	return 0;
}

/* An address as (family, 4 or 16 bytes, port, scope), v4-mapped IPv6 made IPv4. */
struct ms__ip {
	int family;
	uint8_t a[16];
	uint16_t port; /* network order */
	uint32_t scope;
};

static int ip_of(const struct sockaddr *sa, socklen_t len, struct ms__ip *ip)
{
	memset(ip, 0, sizeof(*ip));
	if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		ip->family = AF_INET;
		memcpy(ip->a, &in->sin_addr, 4);
		ip->port = in->sin_port;
		return 0;
	}
	if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		ip->port = in6->sin6_port;
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
			ip->family = AF_INET;
			memcpy(ip->a, &in6->sin6_addr.s6_addr[12], 4);
		} else {
			ip->family = AF_INET6;
			memcpy(ip->a, &in6->sin6_addr, 16);
			ip->scope = in6->sin6_scope_id;
		}
		return 0;
	}
	return sa->sa_family == AF_INET || sa->sa_family == AF_INET6 ? -EINVAL : -EAFNOSUPPORT;
}

static bool ip_any(const struct ms__ip *ip)
{
	static const uint8_t zero[16];
	return !memcmp(ip->a, zero, ip->family == AF_INET ? 4 : 16);
}

static bool ip_multicast(const struct ms__ip *ip)
{
	return ip->family == AF_INET ? (ip->a[0] & 0xf0) == 0xe0 : ip->a[0] == 0xff;
}

/* The send errno of a route type that drops (what udp sendto(2) returns for it). */
static int drop_errno(unsigned type)
{
	switch (type) {
	case RTN_UNREACHABLE:
		return EHOSTUNREACH;
	case RTN_PROHIBIT:
		return EACCES;
	case RTN_BLACKHOLE:
		return EINVAL;
	default:
		return ENETUNREACH;
	}
}

int ms__route_get(struct ms__nl *nl, const struct sockaddr *dst, socklen_t dstlen,
		  const struct sockaddr *src, const struct ms__flow *fl, struct ms__route *out)
{
	static const struct ms__flow none;
	if (!fl)
		fl = &none;
	int oif = fl->oif;
	const uint32_t mark = fl->mark;
	struct ms__ip d, s = { 0 };
	int err = ip_of(dst, dstlen, &d);
	if (err)
		return err;
	bool bound = false;
	if (src) {
		/* The caller passes what getsockname() gave: its length is the family's. */
		err = ip_of(src, src->sa_family == AF_INET ? sizeof(struct sockaddr_in)
							   : sizeof(struct sockaddr_in6), &s);
		if (err)
			return err;
		bound = !ip_any(&s);
	}
	memset(out, 0, sizeof(*out));
	out->family = d.family;
	if (bound && s.family != d.family) {
		/* An IPv6 socket bound to a (non-mapped) IPv6 address sending to a v4-mapped
		 * one: the kernel's own path decides what happens (an error); not a frame. */
		out->kind = MS__RT_OTHER;
		return 0;
	}
	if (!oif && d.family == AF_INET6 && d.scope)
		oif = (int)d.scope; /* a link-local destination names its device */
	const size_t alen = d.family == AF_INET ? 4 : 16;

	struct ms__nlreq r;
	memset(&r, 0, sizeof(r));
	r.h.nlmsg_len = NLMSG_LENGTH(sizeof(struct rtmsg));
	r.h.nlmsg_type = RTM_GETROUTE;
	r.rt.rtm_family = (unsigned char)d.family;
	r.rt.rtm_dst_len = (unsigned char)(alen * 8);
	/* The TOS (IPv4) or traffic class (IPv6) the socket's datagrams carry: tos and dsfield
	 * rules match it (for IPv6 the request's rtm_tos is the flow's traffic class). */
	r.rt.rtm_tos = fl->tos;
	put_attr(&r, RTA_DST, d.a, alen);
	if (bound) {
		r.rt.rtm_src_len = (unsigned char)(alen * 8);
		put_attr(&r, RTA_SRC, s.a, alen);
	}
	if (oif)
		put_attr(&r, RTA_OIF, &oif, sizeof(oif));
	if (mark)
		put_attr(&r, RTA_MARK, &mark, sizeof(mark));
	/* The socket's owner, as UDP's lookup has it (sk_uid); without it the kernel would
	 * match uidrange rules against the caller's uid, which may be another. */
	if (fl->has_uid)
		put_attr(&r, RTA_UID, &fl->uid, sizeof(fl->uid));
	/* The flow as UDP's own lookup has it (policy rules and multipath hashing on the
	 * protocol and ports; Linux 4.17): the source port is the socket's whether or not it
	 * is bound to an address (a socket bound to 0.0.0.0:P sends from port P). */
	uint8_t proto = IPPROTO_UDP;
	put_attr(&r, RTA_IP_PROTO, &proto, sizeof(proto));
	if (d.port)
		put_attr(&r, RTA_DPORT, &d.port, sizeof(d.port));
	if (s.port)
		put_attr(&r, RTA_SPORT, &s.port, sizeof(s.port));
	const struct nlmsghdr *h;
	err = nl_ask(nl, &r, RTM_NEWROUTE, &h);
	if (err) {
		/* No route, and unreachable, prohibit and blackhole routes, fail the request
		 * itself with the errno a send gets, for IPv4 and IPv6 alike (Linux 6.18:
		 * ENETUNREACH, EHOSTUNREACH, EACCES, EINVAL; tests/integration/route.c
		 * compares them with a real sendto). Our own mistakes are not a route. */
		if (err == -ENOMEM || err == -EMSGSIZE || err == -EPROTO || err == -ENOBUFS)
			return err;
		out->kind = MS__RT_UNREACH;
		out->err = -err;
		return 0;
	}
	const struct rtmsg *rt = NLMSG_DATA(h);
	if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*rt)))
		return -EPROTO;
	const struct rtattr *tb[RTA_MAX + 1];
	parse_attrs(tb, RTA_MAX, RTM_RTA(rt), h->nlmsg_len - NLMSG_LENGTH(sizeof(*rt)));

	/* Everything needed from this answer, before the next request reuses the buffer. */
	const unsigned type = rt->rtm_type;
	int dev = 0, cache_err = 0;
	uint32_t route_mtu = 0;
	int nh_family = d.family;
	uint8_t nh[16], prefsrc[16];
	bool has_prefsrc = false;
	memcpy(nh, d.a, alen);
	if (tb[RTA_OIF] && payload(tb[RTA_OIF]) >= sizeof(int))
		memcpy(&dev, RTA_DATA(tb[RTA_OIF]), sizeof(int));
	if (tb[RTA_GATEWAY] && payload(tb[RTA_GATEWAY]) == alen) {
		memcpy(nh, RTA_DATA(tb[RTA_GATEWAY]), alen);
	} else if (tb[RTA_VIA] && payload(tb[RTA_VIA]) >= sizeof(struct rtvia)) {
		/* An IPv4 route through an IPv6 next hop (RFC 5549): the neighbour is IPv6. */
		const struct rtvia *via = RTA_DATA(tb[RTA_VIA]);
		size_t vl = payload(tb[RTA_VIA]) - sizeof(*via);
		if (via->rtvia_family == AF_INET6 && vl == 16) {
			nh_family = AF_INET6;
			memcpy(nh, via->rtvia_addr, 16);
		} else if (via->rtvia_family == AF_INET && vl == 4) {
			nh_family = AF_INET;
			memcpy(nh, via->rtvia_addr, 4);
		}
	}
	if (tb[RTA_PREFSRC] && payload(tb[RTA_PREFSRC]) == alen) {
		memcpy(prefsrc, RTA_DATA(tb[RTA_PREFSRC]), alen);
		has_prefsrc = true;
	}
	if (tb[RTA_METRICS]) {
		const struct rtattr *m[RTAX_MAX + 1];
		parse_attrs(m, RTAX_MAX, RTA_DATA(tb[RTA_METRICS]), payload(tb[RTA_METRICS]));
		if (m[RTAX_MTU] && payload(m[RTAX_MTU]) >= sizeof(uint32_t))
			memcpy(&route_mtu, RTA_DATA(m[RTAX_MTU]), sizeof(uint32_t));
	}
	/* A kernel that answers a route that drops with a message rather than an error (not
	 * 6.18's) has the type say which; IPv6 also has the error a send gets here. */
	if (tb[RTA_CACHEINFO] && payload(tb[RTA_CACHEINFO]) >= sizeof(struct rta_cacheinfo)) {
		const struct rta_cacheinfo *ci = RTA_DATA(tb[RTA_CACHEINFO]);
		const int32_t e = (int32_t)ci->rta_error; /* a negative errno in a __u32 */
		cache_err = e < 0 ? -e : 0;
	}

	out->ifindex = dev;
	switch (type) {
	case RTN_UNICAST:
	case RTN_MULTICAST:
		break;
	case RTN_LOCAL:
		out->kind = MS__RT_LOCAL;
		return 0;
	case RTN_BROADCAST:
		out->kind = MS__RT_BCAST;
		return 0;
	case RTN_UNREACHABLE:
	case RTN_PROHIBIT:
	case RTN_BLACKHOLE:
	case RTN_THROW:
		out->kind = MS__RT_UNREACH;
		out->err = cache_err ? cache_err : drop_errno(type);
		out->ifindex = 0;
		return 0;
	default: /* NAT, XRESOLVE...: nothing a frame can be built for */
		out->kind = MS__RT_OTHER;
		return 0;
	}
	if (!dev) {
		out->kind = MS__RT_OTHER;
		return 0;
	}

	struct ms__link lk;
	err = link_query(nl, dev, NULL, &lk);
	if (err == -ENODEV) { /* gone between the two answers: ask again later */
		out->kind = MS__RT_OTHER;
		return 0;
	}
	if (err)
		return err;
	if (lk.flags & IFF_LOOPBACK) {
		out->kind = MS__RT_LOCAL;
		return 0;
	}
	if (lk.type != ARPHRD_ETHER || !lk.has_mac) {
		out->kind = MS__RT_OTHER;
		return 0;
	}
	out->mtu = route_mtu ? route_mtu : lk.mtu;
	memcpy(out->src_mac, lk.mac, 6);
	if (bound) {
		memcpy(&out->src, s.a, alen);
	} else if (has_prefsrc) {
		memcpy(&out->src, prefsrc, alen);
	} else {
		/* Linux 6.18 answers RTA_PREFSRC for IPv6 too (its source address selection),
		 * except where there is no source to choose, as out of a device without an
		 * IPv6 address: the socket's own way then says so (EADDRNOTAVAIL). */
		err = src_by_connect(d.family, d.a, oif ? oif : dev, mark, fl->tos, &out->src);
		if (err) {
			out->kind = MS__RT_UNREACH;
			out->err = -err;
			return 0;
		}
	}

	if (type == RTN_MULTICAST || ip_multicast(&d)) {
		out->multicast = true;
		if (d.family == AF_INET) {
			const uint8_t m[6] = { 0x01, 0x00, 0x5e, d.a[1] & 0x7f, d.a[2], d.a[3] };
			memcpy(out->dst_mac, m, 6);
		} else {
			const uint8_t m[6] = { 0x33, 0x33, d.a[12], d.a[13], d.a[14], d.a[15] };
			memcpy(out->dst_mac, m, 6);
		}
		out->kind = MS__RT_OK;
		return 0;
	}

	err = neigh_get(nl, nh_family, nh, dev, out->dst_mac);
	if (err < 0)
		return err;
	out->kind = err ? MS__RT_OK : MS__RT_NEIGH;
	return 0;
}

/* A small decimal number from a sysctl file (-1: unreadable). */
static long sysctl_num(const char *path)
{
	char b[32];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, b, sizeof(b) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	b[n] = '\0';
	return strtol(b, NULL, 0);
}

/* Multipath hashing on layer 4 (fib_multipath_hash_policy 1, or 3 with the port fields:
 * FIB_MULTIPATH_HASH_FIELD_SRC_PORT 0x20, DST_PORT 0x40): which ports it reads. */
static unsigned hash_ports(int family)
{
	const char *pol = family == AF_INET ? "/proc/sys/net/ipv4/fib_multipath_hash_policy"
					    : "/proc/sys/net/ipv6/fib_multipath_hash_policy";
	const char *fld = family == AF_INET ? "/proc/sys/net/ipv4/fib_multipath_hash_fields"
					    : "/proc/sys/net/ipv6/fib_multipath_hash_fields";
	const long p = sysctl_num(pol);
	if (p == 1)
		return MS__DEP_SPORT | MS__DEP_DPORT;
	if (p != 3)
		return 0;
	const long f = sysctl_num(fld);
	return (f & 0x20 ? MS__DEP_SPORT : 0) | (f & 0x40 ? MS__DEP_DPORT : 0);
}

int ms__route_deps(struct ms__nl *nl, int family, unsigned *deps)
{
	*deps = hash_ports(family);
	struct ms__nlreq r;
	memset(&r, 0, sizeof(r));
	/* struct fib_rule_hdr has rtmsg's layout (its family first): the request's fixed part. */
	r.h.nlmsg_len = NLMSG_LENGTH(sizeof(struct fib_rule_hdr));
	r.h.nlmsg_type = RTM_GETRULE;
	r.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	r.h.nlmsg_seq = ++nl->seq;
	r.rt.rtm_family = (unsigned char)family;
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	ssize_t n;
	do
		n = ms__sys.sendto(nl->fd, &r, r.h.nlmsg_len, 0, (struct sockaddr *)&kernel,
				   sizeof(kernel));
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	/* Every part of the dump is read (to its NLMSG_DONE), so that no part of it is left for
	 * the next request to skip. */
	int err = 0;
	for (;;) {
		struct sockaddr_nl from;
		struct iovec iov = { .iov_base = nl->buf.b, .iov_len = sizeof(nl->buf.b) };
		struct msghdr mh = { .msg_name = &from, .msg_namelen = sizeof(from),
				     .msg_iov = &iov, .msg_iovlen = 1 };
		n = recvmsg(nl->fd, &mh, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (from.nl_pid != 0)
			continue;
		if (mh.msg_flags & MSG_TRUNC)
			err = -EMSGSIZE; /* read on to the end all the same */
		size_t len = (size_t)n;
		for (const struct nlmsghdr *h = &nl->buf.h; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
			if (h->nlmsg_seq != nl->seq || h->nlmsg_pid != nl->port)
				continue;
			if (h->nlmsg_type == NLMSG_DONE)
				return err;
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);
				if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*e)))
					return -EPROTO;
				return e->error ? e->error : err;
			}
			if (h->nlmsg_type != RTM_NEWRULE ||
			    h->nlmsg_len < NLMSG_LENGTH(sizeof(struct fib_rule_hdr)))
				continue;
			const struct fib_rule_hdr *fr = NLMSG_DATA(h);
			const struct rtattr *tb[FRA_MAX + 1];
			parse_attrs(tb, FRA_MAX,
				    (const struct rtattr *)((const char *)fr +
							    NLMSG_ALIGN(sizeof(*fr))),
				    h->nlmsg_len - NLMSG_LENGTH(sizeof(*fr)));
			if (tb[FRA_SPORT_RANGE])
				*deps |= MS__DEP_SPORT;
			if (tb[FRA_DPORT_RANGE])
				*deps |= MS__DEP_DPORT;
		}
	}
}

void ms__nl_fds(const struct ms__nl *nl, int fds[2])
{
	fds[0] = nl->fd;
	fds[1] = nl->ev;
}

void ms__nl_abandon(struct ms__nl *nl)
{
	free(nl);
}

#ifdef MS_HAVE_LIBURING
static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Arm the multishot poll of the listener (one io_uring_enter). 0 or -errno. */
static int watch_arm(struct ms__nl *nl)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&nl->ring);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_poll_multishot(sqe, nl->ev, POLLIN);
	int r = io_uring_submit(&nl->ring);
	return r == 1 ? 0 : r < 0 ? r : -EIO;
}

int ms__nl_watch(struct ms__nl *nl, uint64_t backstop_ns)
{
	if (nl->watched)
		return 0;
	/* No IORING_SETUP_COOP_TASKRUN or DEFER_TASKRUN: the poll's completion is posted by the
	 * task work the wake-up sends to the arming thread, which runs it at its next return
	 * to user space or wakes from an interruptible sleep to run it: the ring's memory then
	 * says it, with no system call of the reader's. */
	int err = io_uring_queue_init(4, &nl->ring, 0);
	if (err)
		return err;
	nl->watched = true;
	nl->rearm = true; /* by the first reader: the thread that sends, more likely to last */
	nl->gen = __atomic_load_n(&ms__fork_gen, __ATOMIC_RELAXED);
	nl->every = backstop_ns < INT64_MAX / 2 ? backstop_ns : INT64_MAX / 2;
	nl->backstop = mono_ns() + nl->every;
	return 0;
}

/* Watched: false when the ring says nothing arrived and the backstop is not due (no system
 * call); true when the listener must be read. The poll is armed by the reading thread after
 * it has drained the socket (a notification in between makes the new poll fire at once), at
 * the first read and again whenever it ended: its completions overflowed the ring, or the
 * thread that armed it exited (its next wake-up finds no thread to post it: the kernel's
 * fallback cancels it a tick later, -ECANCELED, and that completion says "read"). The watch
 * is given up for good when the poll cannot run (Linux before 5.13 has no multishot poll:
 * -EINVAL) or arming fails. */
static bool watch_says_read(struct ms__nl *nl)
{
	if (nl->rearm)
		return true;
	bool fired = false, ended = false, broken = false;
	struct io_uring_cqe *cqe;
	/* io_uring_peek_cqe enters the kernel only when completions overflowed the ring
	 * (IORING_SQ_CQ_OVERFLOW): then they are flushed, and something surely changed. */
	while (io_uring_peek_cqe(&nl->ring, &cqe) == 0) {
		fired = true;
		if (!(cqe->flags & IORING_CQE_F_MORE)) {
			ended = true;
			broken |= cqe->res < 0 && cqe->res != -ECANCELED;
		}
		io_uring_cqe_seen(&nl->ring, cqe);
	}
	if (broken) {
		io_uring_queue_exit(&nl->ring);
		nl->watched = false;
		return true;
	}
	nl->rearm |= ended; /* after the socket is drained: a new poll then fires only for new news */
	const uint64_t now = mono_ns();
	if (!fired && (int64_t)(nl->backstop - now) > 0)
		return false;
	nl->backstop = now + nl->every;
	return true;
}
#else
int ms__nl_watch(struct ms__nl *nl, uint64_t backstop_ns)
{
	(void)nl;
	(void)backstop_ns;
	return -EOPNOTSUPP;
}
#endif

bool ms__nl_changed(struct ms__nl *nl, uint64_t *sys)
{
	bool changed = false;
#ifdef MS_HAVE_LIBURING
	/* (A forked child reads the socket as without a watch: the ring is its parent's.) */
	const bool watched =
		nl->watched && nl->gen == __atomic_load_n(&ms__fork_gen, __ATOMIC_RELAXED);
	if (watched && !watch_says_read(nl))
		return false;
#endif
	for (;;) {
		/* Only that something arrived matters: a short buffer, each read truncated. */
		char b[256];
		(*sys)++;
		ssize_t n = recv(nl->ev, b, sizeof(b), MSG_DONTWAIT | MSG_TRUNC);
		if (n >= 0) {
			changed = true;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno == ENOBUFS) { /* overflowed: lost notifications, so something changed */
			changed = true;
			continue;
		}
		break; /* EAGAIN: drained (any other error: nothing more to read) */
	}
#ifdef MS_HAVE_LIBURING
	if (watched && nl->watched && nl->rearm) {
		(*sys)++;
		nl->rearm = false;
		if (watch_arm(nl)) {
			io_uring_queue_exit(&nl->ring);
			nl->watched = false;
		}
	}
#endif
	return changed;
}
