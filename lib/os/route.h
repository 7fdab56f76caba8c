/* SPDX-License-Identifier: MIT */
/*
 * Route and neighbour, asked of the kernel over rtnetlink: where a datagram to an address would
 * leave and with which Ethernet header, so that the xdp backend (lib/be/xdp.c) can build the
 * frame the kernel's own path would have sent, and the hardware timestamps (lib/modes/tstamp.c)
 * can ask the device it leaves by. Nothing here is cached: the callers keep what they resolved
 * per destination and ask again when a notification says something changed.
 *
 * One struct ms__nl per backend state, used by one thread at a time.
 */
#ifndef MS_ROUTE_H
#define MS_ROUTE_H

#include <stdbool.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>

/* What the kernel would do with a datagram to the address (struct ms__route.kind). */
enum ms__route_kind {
	MS__RT_OK,      /* a unicast or multicast route out of an Ethernet device, the next hop's
	                   link-layer address known: the frame can be built */
	MS__RT_NEIGH,   /* a route, but the next hop's neighbour entry is not usable yet (none,
	                   INCOMPLETE, FAILED): a send by the kernel makes it resolve */
	MS__RT_LOCAL,   /* delivered on this host: local or loopback address (RTN_LOCAL), or the
	                   route's device is loopback */
	MS__RT_BCAST,   /* broadcast (RTN_BROADCAST, or the limited broadcast address) */
	MS__RT_UNREACH, /* no route, or unreachable / prohibit / blackhole: err has the errno a
	                   send would see (ENETUNREACH, EHOSTUNREACH, EACCES, EINVAL...) */
	MS__RT_OTHER,   /* anything else the frame cannot be built for: a device without an
	                   Ethernet header (tun, ip tunnels, ppp), an IPsec policy... */
};

struct ms__route {
	enum ms__route_kind kind;
	int err;               /* MS__RT_UNREACH: the positive errno; else 0 */
	int ifindex;           /* the egress device (0 when there is none) */
	uint32_t mtu;          /* the path's MTU: the route's MTU metric (RTAX_MTU, which includes
	                          a learned PMTU) if set, else the device's MTU */
	uint8_t src_mac[6];    /* the egress device's address */
	uint8_t dst_mac[6];    /* the next hop's (gateway's or destination's) link-layer address;
	                          for a multicast destination the group's MAC
	                          (01:00:5e + low 23 bits; 33:33 + low 32 bits) */
	bool multicast;
	int family;            /* AF_INET or AF_INET6: that of `src` and the looked-up address
	                          (a v4-mapped IPv6 address is looked up as IPv4) */
	union {
		struct in_addr v4;
		struct in6_addr v6;
	} src;                 /* the source address the kernel would use: the socket's bound
	                          address when it is not the wildcard, else the route's preferred
	                          source (RTA_PREFSRC; for IPv6 the kernel's source address
	                          selection, which RTM_GETROUTE answers) */
};

/* What of the sending socket the kernel's output lookup (its policy rules, multipath hash)
 * matches on besides the addresses and ports: ms__route_get carries each into RTM_GETROUTE. */
struct ms__flow {
	int oif;       /* the device: SO_BINDTODEVICE, or a multicast send's (IP_MULTICAST_IF...) */
	uint32_t mark; /* SO_MARK (fwmark rules) */
	uint32_t uid;  /* the socket's owner, sk_uid (uidrange rules): fstat's st_uid of it */
	bool has_uid;  /* false: the lookup's uid is the caller's, as RTM_GETROUTE's default */
	uint8_t tos;   /* IP_TOS, or IPV6_TCLASS for IPv6 (tos / dsfield rules) */
};

struct ms__nl;

/* Open the rtnetlink sockets: one for requests, one subscribed to link, address, route, rule
 * and neighbour notifications (IPv4 and IPv6), both in the calling thread's network namespace,
 * close-on-exec, the second non-blocking. 0 or -errno. */
int ms__nl_open(struct ms__nl **out);
void ms__nl_close(struct ms__nl *nl);

/*
 * Resolve a destination as a UDP send from a socket would: dst (AF_INET or AF_INET6, may be a
 * v4-mapped AF_INET6 address, its port the destination port), the socket's local address
 * `src` as getsockname() gives it (NULL: none; the wildcard address: the kernel chooses the
 * source; its port, wildcard or not, is the source port), and fl (NULL: none of it) with the
 * rest of the flow. The request carries everything UDP's own output lookup uses (addresses,
 * protocol, both ports, uid, mark, TOS, device), so that every policy rule (ip-rule(8):
 * from, to, ipproto, sport, dport, uidrange, fwmark, tos, oif) matches as for the kernel's
 * path; a route that drops (prohibit, unreachable, blackhole, or no route) answers the errno
 * a send gets.
 * Returns 0 with *out filled (every kind, including MS__RT_UNREACH), or -errno when the
 * kernel could not be asked (netlink itself failed), or -EINVAL / -EAFNOSUPPORT for a dst or
 * src that is not a whole IPv4 or IPv6 address. A multicast destination's device is oif: a
 * socket with IP_MULTICAST_IF / IPV6_MULTICAST_IF set should pass that index as oif, as the
 * kernel uses it for such a send.
 */
int ms__route_get(struct ms__nl *nl, const struct sockaddr *dst, socklen_t dstlen,
		  const struct sockaddr *src, const struct ms__flow *fl, struct ms__route *out);

/*
 * What of the ports a lookup's answer can depend on now in the family (AF_INET, AF_INET6):
 * MS__DEP_SPORT, MS__DEP_DPORT when a policy rule matches on that port (a dump of the rules)
 * or multipath routes hash on it (net.ipv{4,6}.fib_multipath_hash_policy 1, or 3 with the
 * port among fib_multipath_hash_fields). A caller that keeps answers need not tell apart two
 * flows that differ only in a port that does not matter, until the next change is notified
 * (rules are). 0 with *deps set, or -errno (*deps then has what the sysctls say).
 */
#define MS__DEP_SPORT 1u
#define MS__DEP_DPORT 2u
int ms__route_deps(struct ms__nl *nl, int family, unsigned *deps);

/* Did anything change since the last call (a notification of a link, address, route, policy
 * rule or neighbour)? Reads every pending notification without blocking; true also when the
 * notification socket overflowed (ENOBUFS: something changed, unknown what). One recv(2) when
 * nothing is pending, unless watched (below); the system calls made are added to *sys. */
bool ms__nl_changed(struct ms__nl *nl, uint64_t *sys);

/* Watch the listener through an io_uring of its own (a multishot poll): from then on
 * ms__nl_changed makes no system call while nothing arrived, but one recv(2) at least every
 * backstop_ns all the same (MS__NL_BACKSTOP_NS), in case a completion was held up (the
 * thread that armed the poll asleep uninterruptibly). The ring is one more descriptor (close-on-exec), so the
 * preload shim's ports, which must know every descriptor they hold, do not watch. Not in a
 * forked child: there the listener is read as without a watch. 0, or -errno (no io_uring, or
 * built without liburing: -EOPNOTSUPP; ms__nl_changed then works as before). */
int ms__nl_watch(struct ms__nl *nl, uint64_t backstop_ns);
#define MS__NL_BACKSTOP_NS (1000ull * 1000 * 1000)
/* The descriptors: fds[0] for requests, fds[1] the notification listener (poll it for
 * POLLIN: ms__nl_changed would find something). */
void ms__nl_fds(const struct ms__nl *nl, int fds[2]);
/* Free nl without closing its descriptors (their numbers are someone else's now). Never
 * for a watched nl. */
void ms__nl_abandon(struct ms__nl *nl);

/* The interface's index, MTU, Ethernet address and whether it is up with a carrier
 * (IFF_UP and IFF_LOWER_UP: the carrier as the driver set it; IFF_RUNNING follows it through
 * the kernel's link-watch work, up to a second late). 0, or -errno (-ENODEV: no such
 * interface; -EPROTONOSUPPORT: not an Ethernet device, lo included). */
int ms__link_get(struct ms__nl *nl, const char *ifname, int *ifindex, uint32_t *mtu,
		 uint8_t mac[6], bool *running);

#endif
