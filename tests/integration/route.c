/* SPDX-License-Identifier: MIT */
/*
 * lib/os/route.c against the kernel's own answers, in a private network namespace (a forked
 * child unshares it, so the host's network is never touched): veth pairs, addresses, routes and
 * neighbour entries made with ip(8), then each destination resolved and checked against what
 * the namespace says (the device's address and MTU, a real UDP socket's errno and source
 * address). Exit 77 (skipped) when the namespace or ip(8) is not available.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "route.h"

#define CHECK(c)                                                                           \
	do {                                                                               \
		if (!(c)) {                                                                \
			printf("%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c);       \
			fflush(NULL);                                                      \
			_exit(1);                                                          \
		}                                                                          \
	} while (0)
#define CHECK_EQ(a, b)                                                                     \
	do {                                                                               \
		long long a_ = (long long)(a), b_ = (long long)(b);                        \
		if (a_ != b_) {                                                            \
			printf("%s:%d: %s == %lld, expected %s == %lld\n", __FILE__, __LINE__, \
			       #a, a_, #b, b_);                                            \
			fflush(NULL);                                                      \
			_exit(1);                                                          \
		}                                                                          \
	} while (0)

static struct ms__nl *nl;
static bool have_v6;

static void sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	int st = system(cmd);
	if (st != 0) {
		printf("`%s` failed (status %d)\n", cmd, st);
		fflush(NULL);
		_exit(1);
	}
}

static bool sh_ok(const char *cmd)
{
	return system(cmd) == 0;
}

/* An address and port as a sockaddr (IPv4 or IPv6 by its text). */
static socklen_t addr(const char *ip, int port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *in = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, ip, &in->sin_addr) == 1) {
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)port);
		return sizeof(*in);
	}
	CHECK(inet_pton(AF_INET6, ip, &in6->sin6_addr) == 1);
	in6->sin6_family = AF_INET6;
	in6->sin6_port = htons((uint16_t)port);
	return sizeof(*in6);
}

static struct ms__route rq(const char *dst, const char *src, int oif, uint32_t mark)
{
	struct sockaddr_storage d, s;
	socklen_t dl = addr(dst, 9, &d);
	if (src)
		addr(src, 0, &s);
	struct ms__route r;
	memset(&r, 0xa5, sizeof(r));
	const struct ms__flow fl = { .oif = oif, .mark = mark };
	int err = ms__route_get(nl, (struct sockaddr *)&d, dl, src ? (struct sockaddr *)&s : NULL,
				&fl, &r);
	if (err) {
		printf("ms__route_get(%s): %s\n", dst, strerror(-err));
		fflush(NULL);
		_exit(1);
	}
	return r;
}

/* The errno of a real UDP sendto from an unbound socket in this namespace, bound to the
 * device dev if not NULL (0: sent). */
static int send_errno_on(const char *dst, const char *dev)
{
	struct sockaddr_storage d;
	socklen_t dl = addr(dst, 9, &d);
	int s = socket(d.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	CHECK(s >= 0);
	int one = 1;
	CHECK(setsockopt(s, SOL_SOCKET, SO_BROADCAST, &one, sizeof(one)) == 0);
	if (dev)
		CHECK(setsockopt(s, SOL_SOCKET, SO_BINDTODEVICE, dev,
				 (socklen_t)strlen(dev) + 1) == 0);
	int err = sendto(s, "x", 1, 0, (struct sockaddr *)&d, dl) < 0 ? errno : 0;
	close(s);
	return err;
}

static int send_errno(const char *dst)
{
	return send_errno_on(dst, NULL);
}

/* The source address a real UDP socket connected to dst (bound to device oif) gets. */
static void kernel_src(const char *dst, const char *dev, void *src)
{
	struct sockaddr_storage d;
	socklen_t dl = addr(dst, 9, &d);
	int s = socket(d.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	CHECK(s >= 0);
	if (dev)
		CHECK(setsockopt(s, SOL_SOCKET, SO_BINDTODEVICE, dev,
				 (socklen_t)strlen(dev) + 1) == 0);
	CHECK(connect(s, (struct sockaddr *)&d, dl) == 0);
	socklen_t l = sizeof(d);
	CHECK(getsockname(s, (struct sockaddr *)&d, &l) == 0);
	if (d.ss_family == AF_INET)
		memcpy(src, &((struct sockaddr_in *)&d)->sin_addr, 4);
	else
		memcpy(src, &((struct sockaddr_in6 *)&d)->sin6_addr, 16);
	close(s);
}

static int ifx(const char *name)
{
	int i = (int)if_nametoindex(name);
	CHECK(i > 0);
	return i;
}

/* The device's address and operational state as ip(8) reports them (sysfs would show the
 * namespace it was mounted in, not ours). */
static void ip_link(const char *dev, uint8_t mac[6], char state[32])
{
	char cmd[128], name[64], st[32];
	unsigned m[6];
	snprintf(cmd, sizeof(cmd), "ip -br link show dev %s", dev);
	FILE *f = popen(cmd, "r");
	CHECK(f);
	CHECK(fscanf(f, "%63s %31s %x:%x:%x:%x:%x:%x", name, st, &m[0], &m[1], &m[2], &m[3], &m[4],
		     &m[5]) == 8);
	CHECK(pclose(f) == 0);
	for (int i = 0; mac && i < 6; i++)
		mac[i] = (uint8_t)m[i];
	if (state)
		memcpy(state, st, sizeof(st));
}

static void sys_mac(const char *dev, uint8_t mac[6])
{
	ip_link(dev, mac, NULL);
}

static void parse_mac(const char *t, uint8_t mac[6])
{
	unsigned m[6];
	CHECK(sscanf(t, "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]) == 6);
	for (int i = 0; i < 6; i++)
		mac[i] = (uint8_t)m[i];
}

static void check_mac(const uint8_t got[6], const char *want)
{
	uint8_t m[6];
	parse_mac(want, m);
	if (memcmp(got, m, 6)) {
		printf("MAC %02x:%02x:%02x:%02x:%02x:%02x, expected %s\n", got[0], got[1], got[2],
		       got[3], got[4], got[5], want);
		fflush(NULL);
		_exit(1);
	}
}

static void check_src(const struct ms__route *r, const char *want)
{
	uint8_t a[16];
	int fam = strchr(want, ':') ? AF_INET6 : AF_INET;
	CHECK(inet_pton(fam, want, a) == 1);
	CHECK_EQ(r->family, fam);
	if (memcmp(&r->src, a, fam == AF_INET ? 4 : 16)) {
		char g[INET6_ADDRSTRLEN];
		printf("src %s, expected %s\n", inet_ntop(fam, &r->src, g, sizeof(g)), want);
		fflush(NULL);
		_exit(1);
	}
}

static uint32_t dev_mtu(const char *dev)
{
	int ifindex;
	uint32_t mtu;
	uint8_t mac[6], sm[6];
	bool running;
	CHECK_EQ(ms__link_get(nl, dev, &ifindex, &mtu, mac, &running), 0);
	CHECK_EQ(ifindex, ifx(dev));
	sys_mac(dev, sm);
	CHECK(!memcmp(mac, sm, 6));
	return mtu;
}

/* An Ethernet route fully resolved: kind OK out of dev to dst_mac, from src. */
static void check_ok(const struct ms__route *r, const char *dev, const char *dst_mac,
		     const char *src, uint32_t mtu)
{
	CHECK_EQ(r->kind, MS__RT_OK);
	CHECK_EQ(r->err, 0);
	CHECK_EQ(r->ifindex, ifx(dev));
	uint8_t sm[6];
	sys_mac(dev, sm);
	CHECK(!memcmp(r->src_mac, sm, 6));
	check_mac(r->dst_mac, dst_mac);
	check_src(r, src);
	CHECK_EQ(r->mtu, mtu);
}

static void case_done(const char *name)
{
	printf("ok: %s\n", name);
	fflush(NULL);
}

static const char *kind_name(enum ms__route_kind k)
{
	static const char *const n[] = { "OK", "NEIGH", "LOCAL", "BCAST", "UNREACH", "OTHER" };
	return (unsigned)k < 6 ? n[k] : "?";
}

/* A route that drops: MS__RT_UNREACH with the errno of a real send. */
static void check_drop(const char *dst, const char *what)
{
	struct ms__route r = rq(dst, NULL, 0, 0);
	int e = send_errno(dst);
	printf("    %s %s: sendto errno %d (%s); route kind %s err %d\n", what, dst, e,
	       strerror(e), kind_name(r.kind), r.err);
	CHECK(e != 0);
	CHECK_EQ(r.kind, MS__RT_UNREACH);
	CHECK_EQ(r.err, e);
	case_done(what);
}

static void setup(void)
{
	/* No link-local addresses on new devices: no DAD, no late notifications. */
	have_v6 = access("/proc/sys/net/ipv6/conf/default/addr_gen_mode", W_OK) == 0;
	if (have_v6)
		sh("echo 1 > /proc/sys/net/ipv6/conf/default/addr_gen_mode");
	sh("ip link set lo up");
	sh("ip link add a0 type veth peer name a1");
	sh("ip link add b0 type veth peer name b1");
	sh("ip link set a0 up && ip link set a1 up && ip link set b0 up && ip link set b1 up");
	sh("ip addr add 10.1.0.1/24 dev a0");
	sh("ip addr add 10.2.0.1/24 dev b0");
	sh("ip neigh replace 10.1.0.2 lladdr 02:00:00:00:01:02 dev a0 nud permanent");
	sh("ip neigh replace 10.1.0.254 lladdr 02:00:00:00:01:fe dev a0 nud permanent");
	sh("ip route add 10.50.0.0/16 via 10.1.0.254");
	if (have_v6) {
		sh("ip addr add fd01::1/64 dev a0 nodad");
		sh("ip addr add fd02::1/64 dev b0 nodad");
		sh("ip -6 neigh replace fd01::2 lladdr 02:00:00:00:06:02 dev a0 nud permanent");
	}
}

static void ipv4_cases(void)
{
	struct ms__route r;
	uint32_t mtu = dev_mtu("a0");
	CHECK_EQ(mtu, 1500);

	r = rq("10.1.0.2", NULL, 0, 0);
	check_ok(&r, "a0", "02:00:00:00:01:02", "10.1.0.1", 1500);
	CHECK(!r.multicast);
	case_done("IPv4 direct, permanent neighbour");

	r = rq("::ffff:10.1.0.2", NULL, 0, 0);
	check_ok(&r, "a0", "02:00:00:00:01:02", "10.1.0.1", 1500);
	r = rq("::ffff:10.1.0.2", "::", 0, 0);
	check_ok(&r, "a0", "02:00:00:00:01:02", "10.1.0.1", 1500);
	case_done("v4-mapped IPv6 looked up as IPv4");

	r = rq("10.50.1.1", NULL, 0, 0);
	check_ok(&r, "a0", "02:00:00:00:01:fe", "10.1.0.1", 1500);
	case_done("IPv4 via a gateway");

	sh("ip link set a0 mtu 1400");
	CHECK_EQ(dev_mtu("a0"), 1400);
	r = rq("10.1.0.2", NULL, 0, 0);
	check_ok(&r, "a0", "02:00:00:00:01:02", "10.1.0.1", 1400);
	sh("ip route add 10.1.0.5/32 dev a0 mtu 1300");
	sh("ip neigh replace 10.1.0.5 lladdr 02:00:00:00:01:05 dev a0 nud permanent");
	r = rq("10.1.0.5", NULL, 0, 0);
	check_ok(&r, "a0", "02:00:00:00:01:05", "10.1.0.1", 1300);
	case_done("device MTU 1400, route MTU 1300 wins");

	r = rq("10.1.0.3", NULL, 0, 0);
	CHECK_EQ(r.kind, MS__RT_NEIGH);
	CHECK_EQ(r.ifindex, ifx("a0"));
	CHECK_EQ(r.mtu, 1400);
	uint8_t sm[6];
	sys_mac("a0", sm);
	CHECK(!memcmp(r.src_mac, sm, 6));
	check_src(&r, "10.1.0.1");
	sh("ip neigh replace 10.1.0.3 lladdr 02:00:00:00:01:03 dev a0");
	r = rq("10.1.0.3", NULL, 0, 0);
	check_ok(&r, "a0", "02:00:00:00:01:03", "10.1.0.1", 1400);
	case_done("unresolved neighbour (no entry), then replaced");

	/* A send makes an INCOMPLETE entry (nobody answers on a1: it has no address). */
	CHECK_EQ(send_errno("10.1.0.4"), 0);
	r = rq("10.1.0.4", NULL, 0, 0);
	CHECK_EQ(r.kind, MS__RT_NEIGH);
	CHECK_EQ(r.ifindex, ifx("a0"));
	/* Gone again, or its turn to FAILED seconds later would be a notification. */
	sh("ip neigh flush dev a0 to 10.1.0.4");
	case_done("INCOMPLETE neighbour");

	/* Each state as set from user space, then deleted (their timers would notify). */
	static const struct {
		const char *nud;
		bool usable;
	} states[] = { { "reachable", true }, { "stale", true },   { "delay", true },
		       { "probe", true },     { "noarp", true },   { "failed", false },
		       { "incomplete", false }, { "none", false } };
	for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
		char cmd[160];
		snprintf(cmd, sizeof(cmd),
			 "ip neigh replace 10.1.0.6 lladdr 02:00:00:00:01:06 dev a0 nud %s "
			 "2>/dev/null",
			 states[i].nud);
		if (!sh_ok(cmd)) {
			printf("    nud %s: not settable here\n", states[i].nud);
			continue;
		}
		r = rq("10.1.0.6", NULL, 0, 0);
		printf("    nud %s: kind %s\n", states[i].nud, kind_name(r.kind));
		if (states[i].usable)
			check_ok(&r, "a0", "02:00:00:00:01:06", "10.1.0.1", 1400);
		else
			CHECK_EQ(r.kind, MS__RT_NEIGH);
		sh("ip neigh del 10.1.0.6 dev a0 2>/dev/null || true");
	}
	case_done("neighbour states");

	r = rq("10.1.0.1", NULL, 0, 0);
	CHECK_EQ(r.kind, MS__RT_LOCAL);
	r = rq("127.0.0.1", NULL, 0, 0);
	CHECK_EQ(r.kind, MS__RT_LOCAL);
	case_done("local address and 127.0.0.1");

	r = rq("10.1.0.255", NULL, 0, 0);
	CHECK_EQ(r.kind, MS__RT_BCAST);
	r = rq("255.255.255.255", NULL, ifx("a0"), 0);
	CHECK_EQ(r.kind, MS__RT_BCAST);
	case_done("subnet broadcast, limited broadcast out of a device");

	check_drop("10.99.0.1", "no route");
	/* The limited broadcast without a device and without a default route: no route. */
	check_drop("255.255.255.255", "limited broadcast, no device, no default route");
	sh("ip route add prohibit 10.20.0.0/16");
	sh("ip route add unreachable 10.21.0.0/16");
	sh("ip route add blackhole 10.22.0.0/16");
	check_drop("10.20.0.1", "prohibit");
	check_drop("10.21.0.1", "unreachable");
	check_drop("10.22.0.1", "blackhole");

	sh("ip route add 239.0.0.0/8 dev a0");
	r = rq("239.1.2.3", NULL, 0, 0);
	check_ok(&r, "a0", "01:00:5e:01:02:03", "10.1.0.1", 1400);
	CHECK(r.multicast);
	r = rq("239.129.2.3", NULL, 0, 0); /* only the low 23 bits */
	check_ok(&r, "a0", "01:00:5e:01:02:03", "10.1.0.1", 1400);
	CHECK(r.multicast);
	case_done("IPv4 multicast with a route");

	sh("ip addr add 10.1.0.9/24 dev a0");
	r = rq("10.1.0.2", "10.1.0.9", 0, 0);
	check_ok(&r, "a0", "02:00:00:00:01:02", "10.1.0.9", 1400);
	r = rq("10.1.0.2", "::ffff:10.1.0.9", 0, 0);
	check_ok(&r, "a0", "02:00:00:00:01:02", "10.1.0.9", 1400);
	r = rq("10.1.0.2", "0.0.0.0", 0, 0);
	check_ok(&r, "a0", "02:00:00:00:01:02", "10.1.0.1", 1400);
	case_done("bound source address");

	sh("ip route add 10.70.0.0/16 dev a0");
	sh("ip route add 10.70.0.0/16 dev b0 metric 10");
	sh("ip neigh replace 10.70.0.1 lladdr 02:00:00:00:07:0a dev a0 nud permanent");
	sh("ip neigh replace 10.70.0.1 lladdr 02:00:00:00:07:0b dev b0 nud permanent");
	r = rq("10.70.0.1", NULL, 0, 0);
	check_ok(&r, "a0", "02:00:00:00:07:0a", "10.1.0.1", 1400);
	r = rq("10.70.0.1", NULL, ifx("b0"), 0);
	struct in_addr ks;
	kernel_src("10.70.0.1", "b0", &ks);
	CHECK_EQ(ks.s_addr, inet_addr("10.2.0.1"));
	check_ok(&r, "b0", "02:00:00:00:07:0b", "10.2.0.1", 1500);
	case_done("oif (SO_BINDTODEVICE) selects the second interface");

	sh("ip rule add fwmark 7 table 100");
	sh("ip route add 10.70.0.0/16 dev b0 table 100");
	r = rq("10.70.0.1", NULL, 0, 7);
	check_ok(&r, "b0", "02:00:00:00:07:0b", "10.2.0.1", 1500);
	r = rq("10.70.0.1", NULL, 0, 8);
	check_ok(&r, "a0", "02:00:00:00:07:0a", "10.1.0.1", 1400);
	case_done("mark (SO_MARK) selects a policy rule's table");

	sh("ip route add default via 10.1.0.254");
	r = rq("255.255.255.255", NULL, 0, 0);
	CHECK_EQ(r.kind, MS__RT_BCAST);
	CHECK_EQ(send_errno("255.255.255.255"), 0);
	case_done("limited broadcast with a default route");
}

static void ipv6_cases(void)
{
	struct ms__route r;
	if (!have_v6) {
		printf("skipped: IPv6 cases (no IPv6 in this kernel)\n");
		return;
	}
	r = rq("fd01::2", NULL, 0, 0);
	check_ok(&r, "a0", "02:00:00:00:06:02", "fd01::1", 1400);
	CHECK(!r.multicast);
	uint8_t ks[16];
	kernel_src("fd01::2", NULL, ks);
	CHECK(!memcmp(ks, &r.src, 16));
	case_done("IPv6 direct, permanent neighbour");

	sh("ip -6 neigh replace fd01::fe lladdr 02:00:00:00:06:fe dev a0 nud permanent");
	sh("ip -6 route add fd50::/16 via fd01::fe");
	r = rq("fd50::1", NULL, 0, 0);
	check_ok(&r, "a0", "02:00:00:00:06:fe", "fd01::1", 1400);
	case_done("IPv6 via a gateway");

	/* IPv4 through an IPv6 next hop (RTA_VIA): the neighbour is the IPv6 one. */
	if (sh_ok("ip route add 10.95.0.0/16 via inet6 fd01::fe dev a0 2>/dev/null")) {
		r = rq("10.95.0.1", NULL, 0, 0);
		check_ok(&r, "a0", "02:00:00:00:06:fe", "10.1.0.1", 1400);
		case_done("IPv4 via an IPv6 gateway");
	} else {
		printf("skipped: IPv4 via an IPv6 gateway (not supported by ip or the kernel)\n");
	}

	sh("ip addr add fd01::9/64 dev a0 nodad");
	r = rq("fd01::2", "fd01::9", 0, 0);
	check_ok(&r, "a0", "02:00:00:00:06:02", "fd01::9", 1400);
	case_done("IPv6 bound source address");

	r = rq("fd01::3", NULL, 0, 0);
	CHECK_EQ(r.kind, MS__RT_NEIGH);
	CHECK_EQ(r.ifindex, ifx("a0"));
	CHECK_EQ(r.family, AF_INET6);
	kernel_src("fd01::3", NULL, ks); /* fd01::1 or fd01::9: the kernel's choice */
	CHECK(!memcmp(ks, &r.src, 16));
	case_done("IPv6 unresolved neighbour");

	char ka[INET6_ADDRSTRLEN];
	r = rq("ff0e::1:2:3", NULL, ifx("a0"), 0);
	kernel_src("ff0e::1:2:3", "a0", ks);
	check_ok(&r, "a0", "33:33:00:02:00:03", inet_ntop(AF_INET6, ks, ka, sizeof(ka)), 1400);
	CHECK(r.multicast);
	/* The local table's ff00::/8 of each device comes first (and a device without an
	 * address, as a1, gives EADDRNOTAVAIL): a longer prefix there chooses b0. */
	sh("ip -6 route add multicast ff0e::/16 dev b0 table local");
	r = rq("ff0e::1:2:3", NULL, 0, 0);
	kernel_src("ff0e::1:2:3", NULL, ks);
	check_ok(&r, "b0", "33:33:00:02:00:03", inet_ntop(AF_INET6, ks, ka, sizeof(ka)), 1500);
	CHECK(r.multicast);
	/* Out of a device without an IPv6 address: no source, the send fails. */
	r = rq("ff0e::1:2:3", NULL, ifx("a1"), 0);
	int e = send_errno_on("ff0e::1:2:3", "a1");
	printf("    IPv6 multicast out of a1 (no address): sendto errno %d (%s); kind %s err %d\n",
	       e, strerror(e), kind_name(r.kind), r.err);
	CHECK_EQ(r.kind, MS__RT_UNREACH);
	CHECK_EQ(r.err, e);
	case_done("IPv6 multicast");

	r = rq("fd01::1", NULL, 0, 0);
	CHECK_EQ(r.kind, MS__RT_LOCAL);
	r = rq("::1", NULL, 0, 0);
	CHECK_EQ(r.kind, MS__RT_LOCAL);
	case_done("IPv6 local address and ::1");

	check_drop("fd99::1", "IPv6 no route");
	sh("ip -6 route add prohibit fd20::/16");
	sh("ip -6 route add unreachable fd21::/16");
	sh("ip -6 route add blackhole fd22::/16");
	check_drop("fd20::1", "IPv6 prohibit");
	check_drop("fd21::1", "IPv6 unreachable");
	check_drop("fd22::1", "IPv6 blackhole");
}

/*
 * Policy rules on what the sending socket carries (ip-rule(8)): for each, a real UDP socket
 * with that property (bound to the wildcard address with its own port; a destination port;
 * owned by uid 65534 by fchown, while this process and so its rtnetlink requests stay root's;
 * SO_MARK; IP_TOS / IPV6_TCLASS) and a rule that drops its datagrams: the
 * lookup with the socket's flow answers MS__RT_UNREACH with the errno the socket's sendto
 * gets, and the same lookup for another port / without the property still finds the route.
 */
struct pol_case {
	const char *sel, *act;
	int what; /* 0 sport, 1 dport, 2 uid, 3 mark, 4 tos */
};

static void policy_family(const char *dst, const char *fam)
{
	static const struct pol_case cs[] = {
		{ "ipproto udp sport %u", "prohibit", 0 },
		{ "ipproto udp dport 4242", "unreachable", 1 },
		{ "uidrange 65534-65534", "blackhole", 2 },
		{ "fwmark 0x2a", "prohibit", 3 },
		{ "tos 0x10", "unreachable", 4 },
	};
	for (size_t k = 0; k < sizeof(cs) / sizeof(cs[0]); k++) {
		const struct pol_case *c = &cs[k];
		struct sockaddr_storage d, self;
		socklen_t dl = addr(dst, c->what == 1 ? 4242 : 9, &d);
		const int v6 = d.ss_family == AF_INET6;
		int s = socket(d.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		CHECK(s >= 0);
		struct sockaddr_storage any;
		socklen_t al = addr(v6 ? "::" : "0.0.0.0", 0, &any);
		CHECK(bind(s, (struct sockaddr *)&any, al) == 0);
		socklen_t sl = sizeof(self);
		CHECK(getsockname(s, (struct sockaddr *)&self, &sl) == 0);
		const unsigned sport = ntohs(v6 ? ((struct sockaddr_in6 *)&self)->sin6_port
						: ((struct sockaddr_in *)&self)->sin_port);
		struct ms__flow fl = { 0 }, plain = { 0 };
		int v = 0x2a, tos = 0x10;
		switch (c->what) {
		case 2:
			CHECK(fchown(s, 65534, (gid_t)-1) == 0);
			fl.uid = 65534;
			fl.has_uid = true;
			plain.uid = 0;
			plain.has_uid = true;
			break;
		case 3:
			CHECK(setsockopt(s, SOL_SOCKET, SO_MARK, &v, sizeof(v)) == 0);
			fl.mark = 0x2a;
			break;
		case 4:
			CHECK(setsockopt(s, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_TCLASS : IP_TOS,
					 &tos, sizeof(tos)) == 0);
			fl.tos = 0x10;
			break;
		default:
			break;
		}
		char sel[64];
		snprintf(sel, sizeof(sel), c->sel, sport);
		sh("ip %s rule add %s %s", fam, sel, c->act);
		const int e = sendto(s, "x", 1, 0, (struct sockaddr *)&d, dl) < 0 ? errno : 0;
		struct ms__route r;
		memset(&r, 0xa5, sizeof(r));
		CHECK_EQ(ms__route_get(nl, (struct sockaddr *)&d, dl, (struct sockaddr *)&self, &fl,
				       &r), 0);
		printf("    %s rule %s %s: sendto errno %d (%s); route kind %s err %d\n", fam, sel,
		       c->act, e, strerror(e), kind_name(r.kind), r.err);
		CHECK(e != 0);
		CHECK_EQ(r.kind, MS__RT_UNREACH);
		CHECK_EQ(r.err, e);
		/* The flow without what the rule matches: the route. */
		struct sockaddr_storage d2 = d, self2 = self;
		if (c->what == 1)
			addr(dst, 9, &d2);
		if (c->what == 0)
			addr(v6 ? "::" : "0.0.0.0", (int)sport + 1, &self2);
		memset(&r, 0xa5, sizeof(r));
		CHECK_EQ(ms__route_get(nl, (struct sockaddr *)&d2, dl, (struct sockaddr *)&self2,
				       &plain, &r), 0);
		CHECK_EQ(r.kind, MS__RT_OK);
		sh("ip %s rule del %s %s", fam, sel, c->act);
		close(s);
	}
}

static void policy_cases(void)
{
	/* Which ports answers depend on: none, until a rule matches on one or multipath
	 * routes hash on them. */
	unsigned deps4, deps6;
	CHECK_EQ(ms__route_deps(nl, AF_INET, &deps4), 0);
	CHECK_EQ(deps4, 0);
	sh("ip rule add ipproto udp dport 4244 prohibit");
	CHECK_EQ(ms__route_deps(nl, AF_INET, &deps4), 0);
	CHECK_EQ(deps4, MS__DEP_DPORT);
	sh("ip rule del ipproto udp dport 4244 prohibit");
	sh("echo 1 > /proc/sys/net/ipv4/fib_multipath_hash_policy");
	CHECK_EQ(ms__route_deps(nl, AF_INET, &deps4), 0);
	CHECK_EQ(deps4, MS__DEP_SPORT | MS__DEP_DPORT);
	sh("echo 0 > /proc/sys/net/ipv4/fib_multipath_hash_policy");
	if (have_v6) {
		sh("ip -6 rule add ipproto udp sport 4245 prohibit");
		CHECK_EQ(ms__route_deps(nl, AF_INET6, &deps6), 0);
		CHECK_EQ(deps6, MS__DEP_SPORT);
		CHECK_EQ(ms__route_deps(nl, AF_INET, &deps4), 0);
		CHECK_EQ(deps4, 0);
		sh("ip -6 rule del ipproto udp sport 4245 prohibit");
	}
	case_done("ms__route_deps: port rules and multipath hashing");
	policy_family("10.1.0.2", "-4");
	if (have_v6)
		policy_family("fd01::2", "-6");
	case_done("policy rules on sport, dport, uid, fwmark and tos: the kernel's errno");
}

static bool settled(void)
{
	static const char *const up[] = { "a0", "a1", "b0", "b1" };
	for (size_t i = 0; i < sizeof(up) / sizeof(up[0]); i++) {
		char st[32];
		ip_link(up[i], NULL, st);
		if (strcmp(st, "UP"))
			return false;
	}
	return true;
}

/* Watched (ms__nl_watch): "nothing changed" must have cost no system call (the backstop is
 * set beyond the test's length); not watched: one recv(2) at least. */
static bool watched;
static bool nl_changed(void)
{
	uint64_t sys = 0;
	const bool c = ms__nl_changed(nl, &sys);
	if (watched && !c)
		CHECK_EQ(sys, 0);
	if (!watched)
		CHECK(sys >= 1);
	return c;
}

/* Read whatever is pending, without the checks above. */
static void drain(void)
{
	uint64_t sys = 0;
	while (ms__nl_changed(nl, &sys))
		;
}

static void *watch_in_thread(void *arg)
{
	(void)arg;
	CHECK_EQ(ms__nl_watch(nl, UINT64_MAX), 0);
	return NULL;
}

/* The first read, which arms the poll, made here. */
static void *drain_in_thread(void *arg)
{
	(void)arg;
	drain();
	return NULL;
}

/* The same changes each round, with values of the round's own (v): each is a change. */
static void notify_round(int v, const char *how)
{
	drain();
	CHECK(!nl_changed());
	CHECK(!nl_changed());
	sh("ip neigh replace 10.1.0.2 lladdr 02:00:00:00:01:%02x dev a0 nud permanent", 0x22 + v);
	CHECK(nl_changed());
	CHECK(!nl_changed());
	char mac[32];
	snprintf(mac, sizeof(mac), "02:00:00:00:01:%02x", 0x22 + v);
	struct ms__route r = rq("10.1.0.2", NULL, 0, 0);
	check_ok(&r, "a0", mac, "10.1.0.1", v ? 1450 : 1400);
	sh("ip link set a0 mtu %d", v ? 1440 : 1450);
	CHECK(nl_changed());
	CHECK(!nl_changed());
	sh("ip route add 10.%d.0.0/16 via 10.1.0.254", 90 + v);
	CHECK(nl_changed());
	CHECK(!nl_changed());
	/* A policy rule added or deleted changes what a lookup answers: notified too. */
	sh("ip rule add ipproto udp sport %d prohibit", 4243 + v);
	CHECK(nl_changed());
	CHECK(!nl_changed());
	sh("ip rule del ipproto udp sport %d prohibit", 4243 + v);
	CHECK(nl_changed());
	CHECK(!nl_changed());
	if (have_v6) {
		sh("ip -6 rule add fwmark 0x%x prohibit", 0x2b + v);
		CHECK(nl_changed());
		CHECK(!nl_changed());
	}
	char what[160];
	snprintf(what, sizeof(what), "notifications%s: neighbour, link MTU, route, IPv4 and IPv6 rules", how);
	case_done(what);

	/* More notifications than the socket's buffer holds: ENOBUFS, then drained (watched:
	 * more wake-ups than the ring's completion queue holds, too). */
	FILE *f = popen("ip -batch -", "w");
	CHECK(f);
	for (int i = 0; i < 8192; i++)
		fprintf(f, "route %s 10.%d.%d.0/24 via 10.1.0.254\n", v ? "del" : "add",
			100 + i / 256, i % 256);
	CHECK(pclose(f) == 0);
	CHECK(nl_changed());
	CHECK(!nl_changed());
	snprintf(what, sizeof(what), "notifications%s overflowing the socket's buffer", how);
	case_done(what);
}

static void notify_cases(void)
{
	/* The operational state follows the carrier through the kernel's link-watch work,
	 * which notifies when it gets to it: wait until it has, so that what follows is ours. */
	while (!settled())
		usleep(10000);
	notify_round(0, "");
	/* The same through io_uring: no system call while nothing arrived. */
	int err = ms__nl_watch(nl, UINT64_MAX);
	if (err) {
		printf("SKIP watched notifications: ms__nl_watch: %s\n", strerror(-err));
		return;
	}
	watched = true;
	notify_round(1, " (watched)");
	/* Armed by a thread that is gone: its poll ended (-ECANCELED) and is armed again by the
	 * thread that reads. */
	ms__nl_close(nl);
	CHECK_EQ(ms__nl_open(&nl), 0);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, watch_in_thread, NULL) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	drain();
	CHECK(!nl_changed());
	sh("ip route add 10.92.0.0/16 via 10.1.0.254");
	CHECK(nl_changed()); /* armed by this thread at the first read: told at once */
	CHECK(!nl_changed());
	case_done("notifications (watched, armed by the reading thread)");
	/* Armed (first read) by a thread that then exits: the change that wakes the poll is said
	 * by the kernel's fallback a tick later (-ECANCELED). Waited for, up to 10 s. */
	ms__nl_close(nl);
	CHECK_EQ(ms__nl_open(&nl), 0);
	CHECK_EQ(ms__nl_watch(nl, UINT64_MAX), 0);
	pthread_t t2;
	CHECK(pthread_create(&t2, NULL, drain_in_thread, NULL) == 0);
	CHECK(pthread_join(t2, NULL) == 0);
	CHECK(!nl_changed());
	sh("ip route add 10.93.0.0/16 via 10.1.0.254");
	int waited = 0;
	while (!nl_changed() && waited++ < 10000)
		usleep(1000);
	CHECK(waited < 10000);
	CHECK(!nl_changed()); /* armed again by this thread, after the socket was drained */
	sh("ip route add 10.94.0.0/16 via 10.1.0.254");
	CHECK(nl_changed());
	CHECK(!nl_changed());
	printf("    the change after the arming thread exited: said after %d ms of polling\n", waited);
	case_done("notifications (watched, the arming thread exited)");
	watched = false;
	/* A zero backstop: every call reads the socket. */
	ms__nl_close(nl);
	CHECK_EQ(ms__nl_open(&nl), 0);
	CHECK_EQ(ms__nl_watch(nl, 0), 0);
	drain();
	uint64_t sys = 0;
	CHECK(!ms__nl_changed(nl, &sys));
	CHECK_EQ(sys, 1);
	case_done("notifications (watched, backstop 0: read every time)");
	sh("ip link set a0 mtu 1450"); /* as the link cases expect it */
	drain();
}

static void link_cases(void)
{
	int ifindex;
	uint32_t mtu;
	uint8_t mac[6], sm[6];
	bool running;
	CHECK_EQ(ms__link_get(nl, "lo", &ifindex, &mtu, mac, &running), -EPROTONOSUPPORT);
	CHECK_EQ(ms__link_get(nl, "nosuch0", &ifindex, &mtu, mac, &running), -ENODEV);
	CHECK_EQ(ms__link_get(nl, "", &ifindex, &mtu, mac, &running), -ENODEV);
	CHECK_EQ(ms__link_get(nl, "a-name-far-too-long", &ifindex, &mtu, mac, &running), -ENODEV);
	CHECK_EQ(ms__link_get(nl, "a0", &ifindex, &mtu, mac, &running), 0);
	CHECK_EQ(ifindex, ifx("a0"));
	CHECK_EQ(mtu, 1450);
	sys_mac("a0", sm);
	CHECK(!memcmp(mac, sm, 6));
	CHECK(running);
	sh("ip link set a1 down");
	CHECK_EQ(ms__link_get(nl, "a0", &ifindex, &mtu, mac, &running), 0);
	CHECK(!running);
	sh("ip link set a1 up");
	CHECK_EQ(ms__link_get(nl, "a0", &ifindex, &mtu, mac, &running), 0);
	CHECK(running);
	sh("ip link set a0 down");
	CHECK_EQ(ms__link_get(nl, "a0", &ifindex, &mtu, mac, &running), 0);
	CHECK(!running);
	case_done("ms__link_get: lo, missing names, running with the peer down and up");
}

/* Last: a tun device without a reader has no carrier, and the kernel's link-watch work
 * notifies that when it gets to it, which would be a change the notification cases did not
 * make. */
static void tun_cases(void)
{
	if (!sh_ok("ip tuntap add mode tun dev t0 2>/dev/null")) {
		printf("skipped: tun device (ip tuntap add failed)\n");
		return;
	}
	sh("ip link set t0 up && ip addr add 10.80.0.1/24 dev t0");
	struct ms__route r = rq("10.80.0.2", NULL, 0, 0);
	CHECK_EQ(r.kind, MS__RT_OTHER);
	int ifindex;
	uint32_t mtu;
	uint8_t mac[6];
	bool running;
	CHECK_EQ(ms__link_get(nl, "t0", &ifindex, &mtu, mac, &running), -EPROTONOSUPPORT);
	case_done("tun device: route MS__RT_OTHER, ms__link_get -EPROTONOSUPPORT");
}

static void child(void)
{
	alarm(100); /* never hang: a stuck request ends the test */
	if (unshare(CLONE_NEWNET)) {
		printf("unshare(CLONE_NEWNET): %s: skipped\n", strerror(errno));
		fflush(NULL);
		_exit(77);
	}
	if (!sh_ok("ip -V >/dev/null 2>&1")) {
		printf("ip(8) (iproute2) not found: skipped\n");
		fflush(NULL);
		_exit(77);
	}
	setup();
	int err = ms__nl_open(&nl);
	if (err) {
		printf("ms__nl_open: %s\n", strerror(-err));
		_exit(1);
	}
	ipv4_cases();
	ipv6_cases();
	policy_cases();
	notify_cases();
	link_cases();
	tun_cases();
	ms__nl_close(nl);
	fflush(NULL);
	_exit(0);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0)
		child();
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR) {
			perror("waitpid");
			return 1;
		}
	if (WIFSIGNALED(st)) {
		printf("the child died of signal %d (%s)\n", WTERMSIG(st), strsignal(WTERMSIG(st)));
		return 1;
	}
	return WEXITSTATUS(st);
}
