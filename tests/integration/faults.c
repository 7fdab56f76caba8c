/* SPDX-License-Identifier: MIT */
/*
 * Faults on real sockets, run once per backend: `faults BACKEND`. What fanout.c does not cover:
 *
 *  - an interface taken down and up again, in a private network namespace, so that every
 *    backend (io_uring included, which the unit tests' fake system calls cannot reach) meets
 *    the kernel's own routing errors;
 *  - a receiving PROCESS killed mid-run: its connected UDP destinations start refusing, the
 *    others never notice;
 *  - a socket closed or replaced (dup2) by another thread while it is in a group, before a
 *    send and racing with it;
 *  - MS_SEND_DONTWAIT against a full AF_UNIX sender buffer, and a stalled TCP stream that
 *    takes part of a message.
 *
 * Every check is on what the kernel did: bytes that arrived at real sockets, statuses, errno
 * values, counters. Where the kernel decides an errno (an interface down), a plain system call
 * in the same state says what to expect; nothing waits on a timer for correctness: arrivals
 * are awaited with poll and generous timeouts, and asynchronous ICMP errors with POLLERR.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "multisend.h"
#include "net.h"

#define WAIT_MS 5000 /* for anything that must arrive: generous, for a loaded VM under valgrind */
#define NOT_IN_GROUP INT_MIN

static enum ms_backend backend;
/* io_uring with a registered file table: a destination whose fd is closed or replaced keeps
 * sending on the original socket until it is removed (include/multisend.h, struct ms_dest). */
static bool uring_fixed;

static struct ms_config config(void)
{
	return (struct ms_config){ .size = sizeof(struct ms_config),
				   .backend = backend,
				   .flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV };
}

static struct ms_ctx *new_ctx(void)
{
	struct ms_config cfg = config();
	struct ms_ctx *ctx = NULL;
	assert_int_equal(ms_ctx_new(&ctx, &cfg), 0);
	assert_int_equal(ms_ctx_backend(ctx), backend);
	return ctx;
}

/* ---- checks usable in a test and in a forked child (they print why and return false) ---- */

enum { C_AGAIN, C_NOBUFS, C_MSGSIZE, C_UNREACH, C_CONN, C_BADF, C_OTHER, C_N };
static const char *const class_names[C_N] = { "err_again", "err_nobufs", "err_msgsize",
					      "err_unreach", "err_conn", "err_badf", "err_other" };

/* The counter an errno goes to, as include/multisend.h lists them. */
static int err_class(int err)
{
	switch (err) {
	case EAGAIN:
		return C_AGAIN;
	case ENOBUFS:
	case ENOMEM:
		return C_NOBUFS;
	case EMSGSIZE:
		return C_MSGSIZE;
	case ECONNREFUSED:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case ENETDOWN:
	case EHOSTDOWN:
		return C_UNREACH;
	case EPIPE:
	case ECONNRESET:
	case ENOTCONN:
	case EDESTADDRREQ:
		return C_CONN;
	case EBADF:
	case ENOTSOCK:
		return C_BADF;
	default:
		return C_OTHER;
	}
}

static uint64_t class_count(const struct ms_stats *s, int c)
{
	const uint64_t *f[C_N] = { &s->err_again,   &s->err_nobufs, &s->err_msgsize, &s->err_unreach,
				   &s->err_conn,    &s->err_badf,   &s->err_other };
	return *f[c];
}

static const char *errname(int status)
{
	static char buf[8][64];
	static unsigned k;
	char *b = buf[k++ % 8];
	if (status >= 0)
		snprintf(b, 64, "%d bytes", status);
	else
		snprintf(b, 64, "-%d (%s)", -status, ms_strerror(status));
	return b;
}

/*
 * Send one message to g and check the bookkeeping against the statuses: every destination of
 * the group reported exactly once (status[i] for endpoint i of nt; endpoints with id < 0 are not
 * in the group and get NOT_IN_GROUP), the return value, and every counter, exactly. What
 * arrived is for the caller to check (check_arrivals), against the same statuses.
 */
static bool fan(struct ms_ctx *ctx, struct ms_group *g, const struct net *nt,
		const unsigned char *msg, size_t len, unsigned flags, bool gathered, int *status)
{
	size_t n = ms_group_size(g), members = 0;
	for (size_t i = 0; i < nt->n; i++) {
		status[i] = NOT_IN_GROUP;
		members += nt->ep[i].id >= 0;
	}
	if (members != n) {
		fprintf(stderr, "  group has %zu destinations, the test knows %zu\n", n, members);
		return false;
	}
	struct ms_result *res = calloc(n ? n : 1, sizeof(*res));
	if (!res)
		return false;
	struct ms_stats before = { .size = sizeof(before) }, after = { .size = sizeof(after) };
	if (ms_ctx_stats(ctx, &before))
		return false;
	int ret;
	if (gathered) { /* two pieces, so io_uring takes its SENDMSG path */
		struct iovec iov[2] = { { (void *)msg, len / 3 }, { (void *)(msg + len / 3), len - len / 3 } };
		ret = ms_sendv(g, iov, 2, flags, res);
	} else {
		ret = ms_send(g, msg, len, flags, res);
	}
	bool ok = ms_ctx_stats(ctx, &after) == 0;

	size_t accepted = 0, partial = 0, failed = 0;
	uint64_t bytes = 0, cls[C_N] = { 0 };
	for (size_t k = 0; k < n; k++) {
		long i = -1;
		for (size_t q = 0; q < nt->n; q++)
			if (nt->ep[q].id >= 0 && nt->ep[q].id == res[k].id)
				i = (long)q;
		if (i < 0 || status[i] != NOT_IN_GROUP) {
			fprintf(stderr, "  result %zu: id %d unknown or reported twice\n", k, res[k].id);
			ok = false;
			continue;
		}
		int s = res[k].status;
		status[i] = s;
		if (s >= 0) {
			if ((size_t)s > len) {
				fprintf(stderr, "  id %d: status %d > len %zu\n", res[k].id, s, len);
				ok = false;
			}
			bytes += (unsigned)s;
			if ((size_t)s == len)
				accepted++;
			else
				partial++;
		} else {
			failed++;
			cls[err_class(-s)]++;
		}
	}
	if (ret != (int)accepted) {
		fprintf(stderr, "  ms_send returned %d, %zu destinations took the whole message\n", ret,
			accepted);
		ok = false;
	}
#define DELTA(field, want)                                                                      \
	do {                                                                                    \
		uint64_t d_ = after.field - before.field;                                      \
		if (d_ != (uint64_t)(want)) {                                                  \
			fprintf(stderr, "  counter %s went up by %llu, expected %llu\n", #field,      \
				(unsigned long long)d_, (unsigned long long)(want));            \
			ok = false;                                                            \
		}                                                                              \
	} while (0)
	DELTA(fanouts, n ? 1 : 0);
	DELTA(dests_attempted, n);
	DELTA(dests_accepted, accepted);
	DELTA(dests_partial, partial);
	DELTA(dests_failed, failed);
	DELTA(bytes, bytes);
#undef DELTA
	for (int c = 0; c < C_N; c++) {
		uint64_t d = class_count(&after, c) - class_count(&before, c);
		if (d != cls[c]) {
			fprintf(stderr, "  counter %s went up by %llu, expected %llu\n", class_names[c],
				(unsigned long long)d, (unsigned long long)cls[c]);
			ok = false;
		}
	}
	free(res);
	return ok;
}

/* One copy where the kernel took the whole message, nothing where it refused it; endpoints
 * without a receiver here (rx < 0) or marked NOT_IN_GROUP are left to the caller. */
static bool check_arrivals(const struct net *nt, const int *status, const unsigned char *msg,
			   size_t len)
{
	bool ok = true;
	for (size_t i = 0; i < nt->n; i++) {
		if (nt->ep[i].rx < 0 || status[i] == NOT_IN_GROUP)
			continue;
		if (status[i] == (int)len)
			ok &= expect_one(&nt->ep[i], msg, len, WAIT_MS);
		else if (status[i] < 0)
			ok &= expect_none(&nt->ep[i]);
	}
	return ok;
}

/* Every destination must have this status (0 meaning: the whole message). */
static bool all_status(const struct net *nt, const int *status, const int *expect, size_t len)
{
	bool ok = true;
	for (size_t i = 0; i < nt->n; i++) {
		if (status[i] == NOT_IN_GROUP)
			continue;
		int want = expect && expect[i] ? expect[i] : (int)len;
		if (status[i] != want) {
			fprintf(stderr, "  %s endpoint %zu (id %d): status %s, expected %s\n",
				kind_name(nt->ep[i].kind), i, nt->ep[i].id, errname(status[i]),
				errname(want));
			ok = false;
		}
	}
	return ok;
}

/*
 * A datagram socket (or seqpacket) that must hold exactly one copy of msg, arriving within
 * WAIT_MS, and nothing after it; eof_ok lets the peer have gone after sending it. *port gets
 * the sender's port (IP only).
 */
static bool one_dgram(int rx, const unsigned char *msg, size_t len, bool eof_ok, uint16_t *port,
		      const char *who)
{
	unsigned char *buf = malloc(len + 1);
	struct sockaddr_storage from;
	socklen_t fl = sizeof(from);
	bool ok = false;
	struct pollfd p = { .fd = rx, .events = POLLIN };
	if (!buf)
		return false;
	if (poll(&p, 1, WAIT_MS) != 1) {
		fprintf(stderr, "  %s: nothing arrived\n", who);
		goto out;
	}
	memset(&from, 0, sizeof(from));
	ssize_t r = recvfrom(rx, buf, len + 1, MSG_DONTWAIT | MSG_TRUNC, (struct sockaddr *)&from, &fl);
	if (r != (ssize_t)len || memcmp(buf, msg, len)) {
		fprintf(stderr, "  %s: received %zd bytes (%s), expected the %zu-byte message\n", who, r,
			r < 0 ? strerror(errno) : r == (ssize_t)len ? "content differs" : "length", len);
		goto out;
	}
	if (port)
		*port = from.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&from)->sin_port) : 0;
	r = recv(rx, buf, 1, MSG_DONTWAIT | MSG_PEEK);
	ok = (r < 0 && errno == EAGAIN) || (r == 0 && eof_ok);
	if (!ok)
		fprintf(stderr, "  %s: more after the message (recv returned %zd)\n", who, r);
out:
	free(buf);
	return ok;
}

/* Nothing waiting at rx (the end of a seqpacket stream is allowed when eof_ok). */
static bool no_dgram(int rx, bool eof_ok, const char *who)
{
	char c;
	ssize_t r = recv(rx, &c, 1, MSG_DONTWAIT | MSG_PEEK);
	if ((r < 0 && errno == EAGAIN) || (r == 0 && eof_ok))
		return true;
	fprintf(stderr, "  %s: unexpected data (recv returned %zd)\n", who, r);
	return false;
}

static uint16_t local_port(int fd)
{
	struct sockaddr_in a;
	socklen_t l = sizeof(a);
	memset(&a, 0, sizeof(a));
	if (getsockname(fd, (struct sockaddr *)&a, &l))
		return 0;
	return ntohs(a.sin_port);
}

/* A UDP socket on 127.0.0.1, bound to an ephemeral port. */
static int udp_bound(void)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof(a))) {
		close(s);
		return -1;
	}
	return s;
}

/* A UDP socket connected to rx. */
static int udp_connected_to(int rx)
{
	struct sockaddr_storage a;
	socklen_t l = sizeof(a);
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0 || getsockname(rx, (struct sockaddr *)&a, &l) || connect(s, (struct sockaddr *)&a, l)) {
		if (s >= 0)
			close(s);
		return -1;
	}
	return s;
}

/* ---- forked children -------------------------------------------------------------------------- */

/* Run fn in a child process; returns its exit status (0 passed, 77 skipped). */
static int run_child(void (*fn)(void))
{
	int st = net_run_child(fn);
	assert_true(st >= 0);
	if (st >= 128)
		fail_msg("the child died of signal %d", st - 128);
	return st;
}

/* ---- 1. an interface taken down and brought up again ------------------------------------------ */

static int lo_set(bool up)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, "lo", 3);
	int err = 0;
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) {
		err = -errno;
	} else {
		if (up)
			ifr.ifr_flags |= IFF_UP;
		else
			ifr.ifr_flags &= ~IFF_UP;
		if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
			err = -errno;
	}
	close(s);
	return err;
}

static int family_of(enum kind k)
{
	return (k == K_UDP6 || k == K_UDP6_CONN || k == K_TCP6) ? AF_INET6 : AF_INET;
}

static bool is_ip(enum kind k)
{
	return k != K_UNIX && k != K_UNIX_CONN && k != K_SEQPACKET;
}

/* lo's transmit drops, from /proc/net/dev (this process's namespace); -1 if unreadable. */
static long long lo_tx_dropped(void)
{
	FILE *f = fopen("/proc/net/dev", "re");
	char line[512];
	long long v = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':'), *name = line;
		if (!colon)
			continue;
		*colon = 0;
		while (*name == ' ')
			name++;
		if (strcmp(name, "lo"))
			continue;
		/* rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes packets
		 * errs drop */
		if (sscanf(colon + 1, "%*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %lld", &v) != 1)
			v = -1;
	}
	fclose(f);
	return v;
}

static void bind_to_lo(int fd)
{
	CHECK(setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, "lo", 3) == 0);
}

/*
 * In a private network namespace (a forked child, so the test process stays where it was):
 * lo up, a fan-out to UDP destinations over IPv4 and IPv6, on shared unconnected sockets and
 * connected ones, some of them bound to lo (SO_BINDTODEVICE), plus AF_UNIX ones. Then lo
 * down: what each destination must report is what a plain send from a socket in the same
 * state gives (a probe socket per destination, set up like the destination's). On Linux 6.18:
 * an unbound IPv4 socket's send is accepted and the datagram dropped by the down device
 * (counted in lo's tx_dropped, which we check), a socket bound to lo gets ENETUNREACH from the
 * route lookup, IPv6 gets EADDRNOTAVAIL unconnected (::1 is gone with lo) and ENETUNREACH
 * connected; whatever the kernel says, each destination must say the same, nothing may arrive,
 * the counters must add up, and AF_UNIX destinations must not notice. Then lo up: every
 * destination receives every message exactly once again.
 */
static void child_iface_down(void)
{
	if (unshare(CLONE_NEWNET)) {
		printf("unshare(CLONE_NEWNET): %s: skipped\n", strerror(errno));
		fflush(NULL);
		_exit(77);
	}
	/* A new namespace has only lo, and it is down. */
	CHECK_EQ(lo_set(true), 0);
	bool v6 = net_have_ipv6();
	struct net nt;
	net_init(&nt);
	CHECK_EQ(net_add(&nt, K_UDP4, 3), 0);      /* one unconnected socket, three addresses */
	CHECK_EQ(net_add(&nt, K_UDP4_CONN, 2), 0); /* connected sockets */
	/* The same again on sockets bound to lo: a second shared socket (net.c keeps one per
	 * family; the first is ours to close now). */
	int plain_shared = nt.shared[0];
	nt.shared[0] = -1;
	size_t bound_from = nt.n;
	CHECK_EQ(net_add(&nt, K_UDP4, 2), 0);
	CHECK_EQ(net_add(&nt, K_UDP4_CONN, 2), 0);
	for (size_t i = bound_from; i < nt.n; i++)
		bind_to_lo(nt.ep[i].tx);
	if (v6) {
		CHECK_EQ(net_add(&nt, K_UDP6, 2), 0);
		CHECK_EQ(net_add(&nt, K_UDP6_CONN, 2), 0);
	}
	/* AF_UNIX does not route: these must not notice lo at all. */
	CHECK_EQ(net_add(&nt, K_UNIX, 2), 0);
	CHECK_EQ(net_add(&nt, K_UNIX_CONN, 1), 0);
	struct ms_config cfg = config();
	struct ms_ctx *ctx;
	struct ms_group *g;
	CHECK_EQ(ms_ctx_new(&ctx, &cfg), 0);
	CHECK_EQ(ms_group_new(ctx, &g), 0);
	CHECK_EQ(net_join(&nt, g, 0), 0);

	int *status = calloc(nt.n, sizeof(*status)), *expect = calloc(nt.n, sizeof(*expect));
	int *probe = calloc(nt.n, sizeof(*probe));
	bool *on_lo = calloc(nt.n, sizeof(*on_lo));
	unsigned char msg[300];
	unsigned round = 0;
	CHECK(status && expect && probe && on_lo);
	for (int k = 0; k < 2; k++, round++) {
		make_payload(msg, sizeof(msg), round);
		CHECK(fan(ctx, g, &nt, msg, sizeof(msg), 0, k == 1, status));
		CHECK(all_status(&nt, status, NULL, sizeof(msg)));
		CHECK(check_arrivals(&nt, status, msg, sizeof(msg)));
	}

	/* A probe per IP destination, in the same state: same family, bound to the same device,
	 * connected (while lo is up) to the same receiver, or not. */
	for (size_t i = 0; i < nt.n; i++) {
		const struct endpoint *e = &nt.ep[i];
		probe[i] = -1;
		if (!is_ip(e->kind))
			continue;
		char dev[IFNAMSIZ] = "";
		socklen_t dl = sizeof(dev);
		CHECK(getsockopt(e->tx, SOL_SOCKET, SO_BINDTODEVICE, dev, &dl) == 0);
		probe[i] = socket(family_of(e->kind), SOCK_DGRAM | SOCK_CLOEXEC, 0);
		CHECK(probe[i] >= 0);
		on_lo[i] = *dev;
		if (on_lo[i])
			bind_to_lo(probe[i]);
		if (!e->addrlen) {
			struct sockaddr_storage peer;
			socklen_t pl = sizeof(peer);
			CHECK(getpeername(e->tx, (struct sockaddr *)&peer, &pl) == 0);
			CHECK(connect(probe[i], (struct sockaddr *)&peer, pl) == 0);
		}
	}

	CHECK_EQ(lo_set(false), 0);
	make_payload(msg, sizeof(msg), round++);
	long long drops = lo_tx_dropped();
	unsigned lost = 0; /* destinations whose datagram the kernel accepts and drops */
	for (size_t i = 0; i < nt.n; i++) {
		const struct endpoint *e = &nt.ep[i];
		if (probe[i] < 0)
			continue; /* AF_UNIX: expect[i] = 0, it arrives */
		ssize_t r = e->addrlen ? sendto(probe[i], msg, sizeof(msg), MSG_NOSIGNAL,
						(const struct sockaddr *)&e->addr, e->addrlen)
				       : send(probe[i], msg, sizeof(msg), MSG_NOSIGNAL);
		expect[i] = r < 0 ? -errno : 0;
		CHECK(r < 0 || r == (ssize_t)sizeof(msg));
		lost += r >= 0;
		if (i == 0 || e->kind != nt.ep[i - 1].kind || on_lo[i] != on_lo[i - 1])
			printf("lo down: a plain send on %s%s gives %s\n", kind_name(e->kind),
			       on_lo[i] ? " bound to lo" : "",
			       r < 0 ? errname(expect[i]) : "success (the device drops it)");
	}
	CHECK(lost == 0 || drops >= 0);
	if (lost)
		CHECK_EQ(lo_tx_dropped() - drops, lost); /* the probes' datagrams died at lo */
	for (size_t i = 0; i < nt.n; i++)
		if (is_ip(nt.ep[i].kind))
			CHECK(expect_none(&nt.ep[i]));

	for (int k = 0; k < 4; k++, round++) {
		make_payload(msg, sizeof(msg), round);
		drops = lo_tx_dropped();
		/* Plain, gathered, and with DONTWAIT: the same outcome, and nothing blocks. */
		CHECK(fan(ctx, g, &nt, msg, sizeof(msg), k >= 2 ? MS_SEND_DONTWAIT : 0, k % 2, status));
		CHECK(all_status(&nt, status, expect, sizeof(msg)));
		if (lost)
			CHECK_EQ(lo_tx_dropped() - drops, lost);
		for (size_t i = 0; i < nt.n; i++) {
			if (is_ip(nt.ep[i].kind))
				CHECK(expect_none(&nt.ep[i]));
			else
				CHECK(expect_one(&nt.ep[i], msg, sizeof(msg), WAIT_MS));
		}
	}

	/* Up again: everything arrives, exactly once (expect_one would also see a stale copy of a
	 * message sent while down, had one been kept somewhere). */
	CHECK_EQ(lo_set(true), 0);
	for (int k = 0; k < 3; k++, round++) {
		make_payload(msg, sizeof(msg), round);
		CHECK(fan(ctx, g, &nt, msg, sizeof(msg), 0, k == 1, status));
		CHECK(all_status(&nt, status, NULL, sizeof(msg)));
		CHECK(check_arrivals(&nt, status, msg, sizeof(msg)));
	}

	for (size_t i = 0; i < nt.n; i++)
		if (probe[i] >= 0)
			close(probe[i]);
	free(probe);
	free(on_lo);
	free(status);
	free(expect);
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
	close(plain_shared);
}

static void test_interface_down(void **state)
{
	(void)state;
	int st = run_child(child_iface_down);
	if (st == 77)
		skip();
	assert_int_equal(st, 0);
}

/* ---- 2. a receiving process killed mid-run --------------------------------------------------- */

static pid_t receiver_pid = -1;

static int kill_receiver(void **state)
{
	(void)state;
	if (receiver_pid > 0) {
		kill(receiver_pid, SIGKILL);
		waitpid(receiver_pid, NULL, 0);
		receiver_pid = -1;
	}
	return 0;
}

/* The receiving process: every datagram that reaches rx[i] goes to ctl as [i][datagram]. */
__attribute__((noreturn)) static void forward_datagrams(int ctl, const int *rx, size_t n)
{
	struct pollfd p[8];
	static unsigned char buf[1 + 65536];
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	for (size_t i = 0; i < n; i++)
		p[i] = (struct pollfd){ .fd = rx[i], .events = POLLIN };
	p[n] = (struct pollfd){ .fd = ctl, .events = POLLIN };
	for (;;) {
		if (poll(p, n + 1, -1) < 0 && errno != EINTR)
			_exit(3);
		if (p[n].revents)
			_exit(0); /* the test went away */
		for (size_t i = 0; i < n; i++) {
			if (!p[i].revents)
				continue;
			ssize_t r = recv(rx[i], buf + 1, sizeof(buf) - 1, MSG_DONTWAIT);
			if (r < 0)
				continue;
			buf[0] = (unsigned char)i;
			if (send(ctl, buf, (size_t)r + 1, MSG_NOSIGNAL) < 0)
				_exit(0);
		}
	}
}

/* The receiving process forwarded exactly one copy of msg per socket it owns (m of them). */
static bool collect(int ctl, size_t m, const unsigned char *msg, size_t len)
{
	static unsigned char buf[1 + 65536];
	bool seen[8] = { false };
	for (size_t got = 0; got < m;) {
		struct pollfd p = { .fd = ctl, .events = POLLIN };
		if (poll(&p, 1, WAIT_MS) != 1) {
			fprintf(stderr, "  receiving process: %zu of %zu copies arrived\n", got, m);
			return false;
		}
		ssize_t r = recv(ctl, buf, sizeof(buf), MSG_DONTWAIT);
		if (r < 1 || buf[0] >= m || seen[buf[0]] || (size_t)r - 1 != len ||
		    memcmp(buf + 1, msg, len)) {
			fprintf(stderr, "  receiving process: wrong, extra or empty copy (%zd bytes, "
					"socket %d)\n", r, r > 0 ? buf[0] : -1);
			return false;
		}
		seen[buf[0]] = true;
		got++;
	}
	char c;
	if (recv(ctl, &c, 1, MSG_DONTWAIT | MSG_PEEK) >= 0 || errno != EAGAIN) {
		fprintf(stderr, "  receiving process: more copies than sockets\n");
		return false;
	}
	return true;
}

/*
 * Some destinations' receiving sockets belong to another process, which is killed (SIGKILL)
 * after a few rounds. Its connected UDP destinations then report -ECONNREFUSED, and only
 * they: the kernel learns of the missing listener from an ICMP port-unreachable that a send
 * provokes, asynchronously, so the send right after the death is accepted (and lost), and a
 * later one reports the refusal. We wait for the socket's POLLERR (the ICMP has been
 * processed) before each send: after it, the send must report -ECONNREFUSED; without it
 * (ICMP errors are rate-limited machine-wide, so one can be dropped and the next send
 * provokes another) the send is accepted or refused. The unconnected destination to the dead
 * process's port never reports anything (include/multisend.h), and the parent's own
 * destinations keep receiving every message exactly once.
 */
static void test_receiver_killed(void **state)
{
	(void)state;
	enum { DEAD_CONN = 3, CHILD = 4 }; /* endpoints 0-2 connected, 3 unconnected: the child's */
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UDP4_CONN, DEAD_CONN), 0);
	assert_int_equal(net_add(&nt, K_UDP4, 1), 0);
	assert_int_equal(net_add(&nt, K_UDP4, 3), 0);      /* the parent's, on the same socket */
	assert_int_equal(net_add(&nt, K_UDP4_CONN, 3), 0); /* the parent's */
	int ctl[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl), 0);
	int rx[CHILD];
	for (size_t j = 0; j < CHILD; j++)
		rx[j] = nt.ep[j].rx;

	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* Keep only the receiving sockets and the channel to the test. */
		close(ctl[0]);
		for (size_t i = 0; i < nt.n; i++) {
			if (i >= CHILD)
				close(nt.ep[i].rx);
			if (nt.ep[i].own_tx)
				close(nt.ep[i].tx);
		}
		for (int k = 0; k < 3; k++)
			if (nt.shared[k] >= 0)
				close(nt.shared[k]);
		forward_datagrams(ctl[1], rx, CHILD);
	}
	receiver_pid = pid;
	close(ctl[1]);
	for (size_t j = 0; j < CHILD; j++) { /* the child's alone now */
		close(nt.ep[j].rx);
		nt.ep[j].rx = -1;
	}
	/* The context after the fork: the child has no copy of the ring. */
	struct ms_ctx *ctx = new_ctx();
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	int *status = calloc(nt.n, sizeof(*status));
	assert_non_null(status);
	unsigned char msg[200];
	unsigned round = 0;

	for (; round < 3; round++) {
		make_payload(msg, sizeof(msg), round);
		assert_true(fan(ctx, g, &nt, msg, sizeof(msg), 0, round == 1, status));
		assert_true(all_status(&nt, status, NULL, sizeof(msg)));
		assert_true(check_arrivals(&nt, status, msg, sizeof(msg)));
		assert_true(collect(ctl[0], CHILD, msg, sizeof(msg)));
	}

	assert_int_equal(kill(pid, SIGKILL), 0);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	receiver_pid = -1;
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	/* Its sockets were closed when it died (before waitpid returned): nothing listens there. */

	/* The first send after the death: accepted everywhere (the refusal comes later). */
	make_payload(msg, sizeof(msg), round++);
	assert_true(fan(ctx, g, &nt, msg, sizeof(msg), 0, false, status));
	assert_true(all_status(&nt, status, NULL, sizeof(msg)));
	assert_true(check_arrivals(&nt, status, msg, sizeof(msg)));

	bool refused[DEAD_CONN] = { false };
	unsigned sends[DEAD_CONN] = { 1, 1, 1 }, refused_at[DEAD_CONN] = { 0 }, unreach = 0;
	for (unsigned tries = 0; tries < 10; tries++) {
		bool all = true, pollerr[DEAD_CONN] = { false };
		for (size_t j = 0; j < DEAD_CONN; j++) {
			all &= refused[j];
			if (refused[j])
				continue;
			struct pollfd p = { .fd = nt.ep[j].tx, .events = 0 };
			pollerr[j] = poll(&p, 1, WAIT_MS) == 1 && (p.revents & POLLERR);
		}
		if (all)
			break;
		make_payload(msg, sizeof(msg), round++);
		assert_true(fan(ctx, g, &nt, msg, sizeof(msg), 0, tries % 2 == 1, status));
		for (size_t i = 0; i < nt.n; i++) {
			if (i < DEAD_CONN) {
				if (status[i] == -ECONNREFUSED) {
					unreach++;
					if (!refused[i])
						refused_at[i] = sends[i] + 1;
					refused[i] = true;
				} else if (pollerr[i] || status[i] != (int)sizeof(msg)) {
					fail_msg("dead destination %zu: status %s%s", i, errname(status[i]),
						 pollerr[i] ? " after POLLERR" : "");
				}
				sends[i]++;
			} else {
				/* The unconnected one to the dead port, and all the parent's. */
				assert_int_equal(status[i], (int)sizeof(msg));
			}
		}
		assert_true(check_arrivals(&nt, status, msg, sizeof(msg)));
	}
	for (size_t j = 0; j < DEAD_CONN; j++) {
		if (!refused[j])
			fail_msg("dead destination %zu never reported ECONNREFUSED", j);
		printf("dead destination %zu: -ECONNREFUSED on send %u after the receiver died\n", j,
		       refused_at[j]);
	}
	struct ms_stats s = { .size = sizeof(s) };
	assert_int_equal(ms_ctx_stats(ctx, &s), 0);
	assert_int_equal(s.err_unreach, unreach);
	assert_int_equal(s.dests_failed, unreach);

	close(ctl[0]);
	free(status);
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
}

/* ---- 3. a socket closed or replaced by another thread ------------------------------------------ */

enum sabotage { SAB_CLOSE, SAB_DUP2_SOCKET, SAB_DUP2_NONSOCKET };

struct sab_job {
	enum sabotage how;
	int n;
	int fd[3], with[3];
	pthread_barrier_t *start; /* NULL: at once */
};

/* ThreadSanitizer models a file descriptor as memory and reports this thread's close()/dup2()
 * racing with the library's send on the same fd: that race is what test_race is for (the
 * kernel serializes the fd table), so it is suppressed, for this thread's function alone. */
#if defined(__SANITIZE_THREAD__)
#define FAULTS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FAULTS_TSAN 1
#endif
#endif
#ifdef FAULTS_TSAN
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
	return "race:sab_thread\n";
}
#endif

static void *sab_thread(void *arg)
{
	struct sab_job *j = arg;
	if (j->start)
		pthread_barrier_wait(j->start);
	for (int k = 0; k < j->n; k++) {
		if (j->how == SAB_CLOSE)
			close(j->fd[k]);
		else
			dup2(j->with[k], j->fd[k]);
	}
	return NULL;
}

static bool peer_gone(int rx, int timeout_ms)
{
	struct pollfd p = { .fd = rx, .events = POLLIN };
	return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLHUP);
}

/*
 * Between ms_group_add and ms_send, another thread closes three sockets of the group (the
 * shared unconnected UDP socket that carries three destinations, a connected UDP socket, a
 * seqpacket socket), or dup2()s another socket, or a non-socket, over their numbers. The
 * header's contract (struct ms_dest): loop and sendmmsg report -EBADF (or send on whatever
 * file took the number: the other socket, or -ENOTSOCK for a non-socket); io_uring keeps
 * sending on the original sockets until the destinations are removed. Never an error on
 * another destination.
 */
static void test_replaced_before_send(void **state)
{
	enum sabotage how = *(const enum sabotage *)*state;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UDP4, 3), 0);      /* 0-2: victim S, one socket */
	assert_int_equal(net_add(&nt, K_UDP4_CONN, 3), 0); /* 3: victim B */
	assert_int_equal(net_add(&nt, K_SEQPACKET, 2), 0); /* 6: victim C */
	assert_int_equal(net_add(&nt, K_UNIX, 2), 0);
	assert_int_equal(net_add(&nt, K_UNIX_CONN, 2), 0);
	assert_int_equal(net_add(&nt, K_TCP4, 1), 0);
	enum { B = 3, C = 6 };
	struct ms_ctx *ctx = new_ctx();
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	int *status = calloc(nt.n, sizeof(*status));
	assert_non_null(status);
	unsigned char msg[333];
	make_payload(msg, sizeof(msg), 0);
	assert_true(fan(ctx, g, &nt, msg, sizeof(msg), 0, false, status));
	assert_true(all_status(&nt, status, NULL, sizeof(msg)));
	assert_true(check_arrivals(&nt, status, msg, sizeof(msg)));

	int S = nt.ep[0].tx;
	uint16_t port_s = local_port(S); /* bound by the first send */
	int dec_tx[3] = { -1, -1, -1 }, dec_rx[3] = { -1, -1, -1 }, devnull = -1;
	uint16_t port_dec = 0;
	struct sab_job job = { .how = how, .n = 3, .fd = { S, nt.ep[B].tx, nt.ep[C].tx } };
	if (how == SAB_DUP2_SOCKET) {
		int sv[2];
		dec_tx[0] = udp_bound(); /* sends to the same addresses, from another port */
		port_dec = local_port(dec_tx[0]);
		dec_rx[1] = udp_bound();
		dec_tx[1] = udp_connected_to(dec_rx[1]);
		assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
		dec_rx[2] = sv[0];
		dec_tx[2] = sv[1];
		assert_true(dec_tx[0] >= 0 && dec_tx[1] >= 0 && dec_rx[1] >= 0);
		memcpy(job.with, dec_tx, sizeof(job.with));
	} else if (how == SAB_DUP2_NONSOCKET) {
		devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
		assert_true(devnull >= 0);
		job.with[0] = job.with[1] = job.with[2] = devnull;
	}
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, sab_thread, &job), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	if (how == SAB_CLOSE) { /* those numbers are not ours any more */
		nt.shared[0] = -1;
		nt.ep[B].own_tx = nt.ep[C].own_tx = false;
	}

	/* The original seqpacket socket is released at once unless the ring holds it. */
	assert_true(peer_gone(nt.ep[C].rx, 0) == !uring_fixed);

	bool original = uring_fixed;
	int victim_status = original || how == SAB_DUP2_SOCKET ? (int)sizeof(msg)
			    : how == SAB_CLOSE			 ? -EBADF
								 : -ENOTSOCK;
	int *expect = calloc(nt.n, sizeof(*expect));
	assert_non_null(expect);
	enum { NV = 5 };
	const size_t victims[NV] = { 0, 1, 2, B, C };
	for (size_t k = 0; k < NV; k++)
		expect[victims[k]] = victim_status > 0 ? 0 : victim_status;
	for (unsigned r = 1; r <= 2; r++) {
		make_payload(msg, sizeof(msg), r);
		assert_true(fan(ctx, g, &nt, msg, sizeof(msg), 0, r == 2, status));
		assert_true(all_status(&nt, status, expect, sizeof(msg)));
		for (size_t k = 0; k < NV; k++)
			status[victims[k]] = NOT_IN_GROUP; /* checked below */
		assert_true(check_arrivals(&nt, status, msg, sizeof(msg)));
		for (size_t j = 0; j < 3; j++) { /* S's destinations: the same receivers either way */
			uint16_t from = 0;
			if (victim_status < 0) {
				assert_true(no_dgram(nt.ep[j].rx, false, "S destination"));
				continue;
			}
			assert_true(one_dgram(nt.ep[j].rx, msg, sizeof(msg), false, &from, "S destination"));
			assert_int_equal(from, original ? port_s : port_dec); /* sent by which socket */
		}
		if (victim_status < 0) {
			assert_true(no_dgram(nt.ep[B].rx, false, "B"));
			assert_true(no_dgram(nt.ep[C].rx, true, "C"));
		} else if (original) {
			assert_true(one_dgram(nt.ep[B].rx, msg, sizeof(msg), false, NULL, "B"));
			assert_true(one_dgram(nt.ep[C].rx, msg, sizeof(msg), false, NULL, "C"));
		} else { /* the sockets dup2'd over the numbers got the messages */
			assert_true(no_dgram(nt.ep[B].rx, false, "B"));
			assert_true(no_dgram(nt.ep[C].rx, true, "C"));
			assert_true(one_dgram(dec_rx[1], msg, sizeof(msg), false, NULL, "B's replacement"));
			assert_true(one_dgram(dec_rx[2], msg, sizeof(msg), false, NULL, "C's replacement"));
		}
		for (int k = 1; k < 3; k++)
			if (dec_rx[k] >= 0)
				assert_true(no_dgram(dec_rx[k], false, "replacement"));
	}
	for (size_t k = 0; k < NV; k++) {
		assert_int_equal(ms_group_remove(g, nt.ep[victims[k]].id), 0);
		nt.ep[victims[k]].id = -1;
	}
	/* Removed: nothing holds the original seqpacket socket any more (io_uring dropped its
	 * registered reference), so its peer sees the end. */
	assert_true(peer_gone(nt.ep[C].rx, WAIT_MS));
	make_payload(msg, sizeof(msg), 3);
	assert_true(fan(ctx, g, &nt, msg, sizeof(msg), 0, false, status));
	assert_true(all_status(&nt, status, NULL, sizeof(msg)));
	assert_true(check_arrivals(&nt, status, msg, sizeof(msg)));

	for (int k = 0; k < 3; k++) {
		if (dec_tx[k] >= 0)
			close(dec_tx[k]);
		if (dec_rx[k] >= 0)
			close(dec_rx[k]);
	}
	if (devnull >= 0)
		close(devnull);
	free(expect);
	free(status);
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt); /* closes what now holds S's, B's and C's numbers, if anything */
}

/* The message arrived at exactly one of a and b (a seqpacket whose peer is gone is at its end,
 * which is not a message): 0 for a, 1 for b, -1 (reason printed) otherwise. */
static int arrived_at_one(int a, int b, const unsigned char *msg, size_t len)
{
	struct pollfd p[2] = { { .fd = a, .events = POLLIN }, { .fd = b, .events = POLLIN } };
	for (;;) {
		if (poll(p, 2, WAIT_MS) < 1) {
			fprintf(stderr, "  the message arrived at neither socket\n");
			return -1;
		}
		for (int k = 0; k < 2; k++) {
			if (!p[k].revents)
				continue;
			char c;
			ssize_t r = recv(p[k].fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
			if (r == 0) { /* the end of a seqpacket stream: keep waiting on the other */
				p[k].fd = -1;
				continue;
			}
			int fds[2] = { a, b };
			if (!one_dgram(fds[k], msg, len, true, NULL, k ? "replacement" : "original") ||
			    !no_dgram(fds[!k], true, k ? "original" : "replacement"))
				return -1;
			return k;
		}
		if (p[0].fd < 0 && p[1].fd < 0) {
			fprintf(stderr, "  both sockets at their end, no message\n");
			return -1;
		}
	}
}

/*
 * The same, racing: a few hundred times, a new destination (connected UDP or seqpacket) joins
 * the group and another thread closes its socket, or dup2()s another socket over it, while
 * ms_send runs. The kernel call on that destination either ran before the close (the message
 * was sent, exactly once) or after (-EBADF; for dup2: sent on the other socket); io_uring
 * keeps the original. Never a crash, never anything wrong on the other destinations, counters
 * exact every time.
 */
static void test_race(void **state)
{
	enum sabotage how = *(const enum sabotage *)*state;
	enum { ITER = 300 };
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UDP4, 2), 0);
	assert_int_equal(net_add(&nt, K_UDP4_CONN, 2), 0);
	assert_int_equal(net_add(&nt, K_UNIX_CONN, 1), 0);
	assert_int_equal(net_add(&nt, K_SEQPACKET, 1), 0);
	assert_int_equal(net_add(&nt, K_TCP4, 1), 0);
	struct ms_ctx *ctx = new_ctx();
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	int *status = calloc(nt.n + ITER, sizeof(*status));
	assert_non_null(status);
	unsigned char msg[128];
	unsigned sent = 0, replaced = 0, badf = 0;

	for (unsigned it = 0; it < ITER; it++) {
		enum kind k = it % 2 ? K_SEQPACKET : K_UDP4_CONN;
		size_t v = nt.n;
		assert_int_equal(net_add(&nt, k, 1), 0);
		assert_int_equal(net_join(&nt, g, v), 0);
		struct endpoint *e = &nt.ep[v];
		int drx = -1, dtx = -1;
		if (how == SAB_DUP2_SOCKET) {
			if (k == K_SEQPACKET) {
				int sv[2];
				assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
				drx = sv[0];
				dtx = sv[1];
			} else {
				drx = udp_bound();
				dtx = udp_connected_to(drx);
				assert_true(drx >= 0 && dtx >= 0);
			}
		}
		pthread_barrier_t bar;
		assert_int_equal(pthread_barrier_init(&bar, NULL, 2), 0);
		struct sab_job job = { .how = how, .n = 1, .fd = { e->tx }, .with = { dtx }, .start = &bar };
		pthread_t th;
		assert_int_equal(pthread_create(&th, NULL, sab_thread, &job), 0);
		make_payload(msg, sizeof(msg), it);
		pthread_barrier_wait(&bar);
		bool ok = fan(ctx, g, &nt, msg, sizeof(msg), 0, false, status);
		assert_int_equal(pthread_join(th, NULL), 0);
		pthread_barrier_destroy(&bar);
		if (how == SAB_CLOSE)
			e->own_tx = false;
		assert_true(ok);

		int vs = status[v];
		status[v] = NOT_IN_GROUP;
		assert_true(all_status(&nt, status, NULL, sizeof(msg)));
		assert_true(check_arrivals(&nt, status, msg, sizeof(msg)));
		if (vs == (int)sizeof(msg) && (uring_fixed || how == SAB_CLOSE)) {
			assert_true(one_dgram(e->rx, msg, sizeof(msg), !uring_fixed, NULL, "victim"));
			if (drx >= 0)
				assert_true(no_dgram(drx, false, "replacement"));
			sent++;
		} else if (vs == (int)sizeof(msg)) {
			int w = arrived_at_one(e->rx, drx, msg, sizeof(msg));
			assert_true(w >= 0);
			if (w)
				replaced++;
			else
				sent++;
		} else if (vs == -EBADF && how == SAB_CLOSE && !uring_fixed) {
			assert_true(no_dgram(e->rx, true, "victim"));
			badf++;
		} else {
			fail_msg("iteration %u, %s victim: status %s", it, kind_name(k), errname(vs));
		}

		assert_int_equal(ms_group_remove(g, e->id), 0);
		e->id = -1;
		close(e->rx);
		e->rx = -1;
		if (how != SAB_CLOSE) {
			close(e->tx); /* the replacement's duplicate */
			e->own_tx = false;
			close(dtx);
			close(drx);
		}
	}
	printf("%s racing ms_send, %d iterations: %u sent on the original socket, %u on the "
	       "replacement, %u -EBADF\n", how == SAB_CLOSE ? "close" : "dup2", ITER, sent, replaced,
	       badf);
	make_payload(msg, sizeof(msg), ITER);
	assert_true(fan(ctx, g, &nt, msg, sizeof(msg), 0, true, status));
	assert_true(all_status(&nt, status, NULL, sizeof(msg)));
	assert_true(check_arrivals(&nt, status, msg, sizeof(msg)));
	free(status);
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
}

/* ---- 4. MS_SEND_DONTWAIT against full buffers ----------------------------------------------- */

/*
 * An AF_UNIX datagram stays charged to the SENDER's buffer until the receiver reads it. One
 * unconnected sender with the smallest SO_SNDBUF fans out to 16 receivers that do not read:
 * the buffer fills within the first fan-out (no receiver holds more than one message, so
 * their queues are not what is full), the rest get -EAGAIN, later fan-outs get -EAGAIN
 * everywhere on that socket, nothing blocks. Exactly the accepted messages arrive; when the
 * receivers have read, the socket takes messages again. Connected pairs in the same group,
 * read every round, never notice.
 */
static void test_unix_sndbuf_dontwait(void **state)
{
	/* Non-blocking by MS_SEND_DONTWAIT, or by the socket's own O_NONBLOCK (which io_uring
	 * honours only because the library passes it on: it waits for room otherwise). */
	bool by_socket = *(const int *)*state;
	unsigned dontwait = by_socket ? 0 : MS_SEND_DONTWAIT;
	enum { N = 16, ROUNDS = 4 };
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UNIX, N), 0);
	assert_int_equal(net_add(&nt, K_UNIX_CONN, 2), 0);
	int u = nt.shared[2], tiny = 1, sndbuf = 0;
	socklen_t sl = sizeof(sndbuf);
	if (by_socket)
		assert_int_equal(fcntl(u, F_SETFL, fcntl(u, F_GETFL) | O_NONBLOCK), 0);
	alarm(120); /* a send that waits for room fails the test instead of hanging it */
	assert_int_equal(setsockopt(u, SOL_SOCKET, SO_SNDBUF, &tiny, sizeof(tiny)), 0);
	assert_int_equal(getsockopt(u, SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl), 0);
	struct ms_ctx *ctx = new_ctx();
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	int *status = calloc(nt.n, sizeof(*status));
	assert_non_null(status);
	unsigned char msg[1500], first[1500];
	bool took[N] = { false };
	unsigned accepted = 0;

	for (unsigned r = 0; r < ROUNDS; r++) {
		make_payload(msg, sizeof(msg), r);
		if (r == 0)
			memcpy(first, msg, sizeof(msg));
		assert_true(fan(ctx, g, &nt, msg, sizeof(msg), dontwait, r == 1, status));
		unsigned again = 0;
		for (size_t i = 0; i < N; i++) {
			if (status[i] == -EAGAIN) {
				again++;
			} else {
				assert_int_equal(status[i], (int)sizeof(msg));
				assert_int_equal(r, 0); /* after the first fan-out the buffer stays full */
				took[i] = true;
				accepted++;
			}
			status[i] = NOT_IN_GROUP; /* their receivers are read below */
		}
		if (r == 0)
			assert_true(accepted >= 1 && again >= 1);
		assert_true(all_status(&nt, status, NULL, sizeof(msg)));
		assert_true(check_arrivals(&nt, status, msg, sizeof(msg)));
	}
	printf("AF_UNIX sender, SO_SNDBUF %d: %u of %d destinations took a %zu-byte message, then "
	       "-EAGAIN\n", sndbuf, accepted, N, sizeof(msg));
	/* Exactly the accepted messages arrived (reading them frees the sender's buffer). */
	for (size_t i = 0; i < N; i++) {
		if (took[i])
			assert_true(one_dgram(nt.ep[i].rx, first, sizeof(first), false, NULL, "receiver"));
		else
			assert_true(no_dgram(nt.ep[i].rx, false, "receiver"));
	}
	/* Room again. */
	make_payload(msg, sizeof(msg), ROUNDS);
	assert_true(fan(ctx, g, &nt, msg, sizeof(msg), dontwait, false, status));
	unsigned again = 0;
	for (size_t i = 0; i < N; i++) {
		assert_true(status[i] == (int)sizeof(msg) || status[i] == -EAGAIN);
		again += status[i] == -EAGAIN;
	}
	assert_true(again < N);
	assert_true(check_arrivals(&nt, status, msg, sizeof(msg)));
	alarm(0);
	free(status);
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
}

/*
 * A TCP stream whose receiver does not read, with small buffers, under MS_SEND_DONTWAIT: a
 * 1 MiB message is taken in part (a positive status below len, counted in dests_partial and
 * bytes, not in ms_send's return), later ones in part or not at all (-EAGAIN), nothing blocks;
 * what the receiver then reads is exactly the accepted prefixes, in order.
 */
static void test_tcp_partial_dontwait(void **state)
{
	(void)state;
	enum { N = 2 };
	const size_t len = 1u << 20;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_TCP4, N), 0);
	for (size_t i = 0; i < N; i++) {
		int small = 4096;
		assert_int_equal(setsockopt(nt.ep[i].tx, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
		assert_int_equal(setsockopt(nt.ep[i].rx, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	}
	struct ms_ctx *ctx = new_ctx();
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	int status[N];
	unsigned char *msg = malloc(len), *buf = malloc(65536);
	unsigned char *want[N] = { NULL };
	size_t have[N] = { 0 };
	unsigned sends[N] = { 0 }, again_at[N] = { 0 };
	int first[N] = { 0 };
	assert_true(msg && buf);

	for (unsigned r = 0; r < 1000 && !(again_at[0] && again_at[1]); r++) {
		make_payload(msg, len, r);
		assert_true(fan(ctx, g, &nt, msg, len, MS_SEND_DONTWAIT, r % 2 == 1, status));
		for (size_t i = 0; i < N; i++) {
			sends[i]++;
			if (r == 0)
				first[i] = status[i];
			if (status[i] == -EAGAIN) {
				assert_true(r > 0); /* a fresh stream takes something */
				if (!again_at[i])
					again_at[i] = sends[i];
				continue;
			}
			/* Never the whole message: far more than both buffers hold. */
			if (status[i] <= 0 || (size_t)status[i] >= len)
				fail_msg("stream %zu: status %s for a %zu-byte message", i,
					 errname(status[i]), len);
			unsigned char *w = realloc(want[i], have[i] + (size_t)status[i]);
			assert_non_null(w);
			want[i] = w;
			memcpy(want[i] + have[i], msg, (size_t)status[i]);
			have[i] += (size_t)status[i];
		}
	}
	for (size_t i = 0; i < N; i++) {
		assert_true(again_at[i] > 0);
		printf("TCP stream %zu: took %d of %zu bytes first, -EAGAIN first on send %u, %zu bytes "
		       "in %u sends\n", i, first[i], len, again_at[i], have[i], sends[i]);
	}
	/* The receivers read: exactly the accepted prefixes, in order, and nothing else. */
	for (size_t i = 0; i < N; i++) {
		size_t got = 0;
		while (got < have[i]) {
			struct pollfd p = { .fd = nt.ep[i].rx, .events = POLLIN };
			if (poll(&p, 1, WAIT_MS) != 1)
				fail_msg("stream %zu: %zu of %zu bytes arrived", i, got, have[i]);
			ssize_t r = recv(nt.ep[i].rx, buf, 65536, MSG_DONTWAIT);
			if (r <= 0 || (size_t)r > have[i] - got)
				fail_msg("stream %zu: recv %zd at %zu of %zu", i, r, got, have[i]);
			if (memcmp(buf, want[i] + got, (size_t)r))
				fail_msg("stream %zu: bytes %zu..%zu differ", i, got, got + (size_t)r);
			got += (size_t)r;
		}
		assert_true(expect_none(&nt.ep[i]));
	}
	free(msg);
	free(buf);
	for (size_t i = 0; i < N; i++)
		free(want[i]);
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
}

/* ---- main ------------------------------------------------------------------------------------ */

/*
 * A socket closed while in a group, and a NEW socket that takes its number: the new one must
 * never be confused with the old. In another group of the same context it receives its own
 * messages (io_uring's file table is per context, indexed by number); in the same group the
 * add is refused with -ESTALE until the stale destination is removed.
 */
static void test_fd_number_reused(void **state)
{
	(void)state;
	struct ms_ctx *ctx = new_ctx();
	struct ms_group *a, *b;
	assert_int_equal(ms_group_new(ctx, &a), 0);
	assert_int_equal(ms_group_new(ctx, &b), 0);
	int rx1 = udp_bound(), rx2 = udp_bound();
	assert_true(rx1 >= 0 && rx2 >= 0);
	int tx1 = udp_connected_to(rx1);
	assert_true(tx1 >= 0);
	struct ms_dest d1 = { .fd = tx1 };
	int id1 = ms_group_add(a, &d1);
	assert_true(id1 >= 0);
	unsigned char msg[64];
	struct ms_result res[2];
	make_payload(msg, sizeof(msg), 1);
	assert_int_equal(ms_send(a, msg, sizeof(msg), 0, res), 1);
	assert_true(one_dgram(rx1, msg, sizeof(msg), false, NULL, "rx1"));

	/* The caller's mistake: close it while it is in group a; a new socket takes the number. */
	close(tx1);
	int tx2 = udp_connected_to(rx2);
	assert_int_equal(tx2, tx1);

	/* Same group: refused, the group unchanged. */
	struct ms_dest d2 = { .fd = tx2 };
	assert_int_equal(ms_group_add(a, &d2), -ESTALE);
	assert_int_equal(ms_group_size(a), 1);

	/* Another group: the new socket is itself. */
	int id2 = ms_group_add(b, &d2);
	assert_true(id2 >= 0);
	for (unsigned r = 2; r < 5; r++) {
		make_payload(msg, sizeof(msg), r);
		assert_int_equal(ms_send(b, msg, sizeof(msg), 0, res), 1);
		assert_int_equal(res[0].status, (int)sizeof(msg));
		assert_true(one_dgram(rx2, msg, sizeof(msg), false, NULL, "rx2"));
		assert_true(no_dgram(rx1, false, "rx1"));
	}
	/* The stale destination: io_uring still sends on the original socket, the others send
	 * on whatever now has the number (the header's rule). Either way nothing crashes and the
	 * result says what happened. */
	make_payload(msg, sizeof(msg), 9);
	assert_int_equal(ms_send(a, msg, sizeof(msg), 0, res), 1);
	if (uring_fixed)
		assert_true(one_dgram(rx1, msg, sizeof(msg), false, NULL, "rx1"));
	else
		assert_true(one_dgram(rx2, msg, sizeof(msg), false, NULL, "rx2"));

	/* Once the stale one is removed, the same group takes the new socket, and it too is
	 * sent to as itself. */
	assert_int_equal(ms_group_remove(a, id1), 0);
	int id3 = ms_group_add(a, &d2);
	assert_true(id3 >= 0);
	make_payload(msg, sizeof(msg), 10);
	assert_int_equal(ms_send(a, msg, sizeof(msg), 0, res), 1);
	assert_true(one_dgram(rx2, msg, sizeof(msg), false, NULL, "rx2"));
	assert_true(no_dgram(rx1, false, "rx1"));
	make_payload(msg, sizeof(msg), 11);
	assert_int_equal(ms_send(b, msg, sizeof(msg), 0, res), 1);
	assert_true(one_dgram(rx2, msg, sizeof(msg), false, NULL, "rx2"));

	ms_group_free(a);
	ms_group_free(b);
	ms_ctx_free(ctx);
	close(tx2);
	close(rx1);
	close(rx2);
}

int main(int argc, char **argv)
{
	char line[256];

	/* Before any socket: a loopback of its own, where no other test's datagram can reach
	 * a receiver on an ephemeral port (net.c). */
	net_private_netns("faults");
	backend = net_backend_arg(argc, argv, config(), line, sizeof(line));
	uring_fixed = backend == MS_BACKEND_IO_URING && strstr(line, "registered files");
	printf("%s\n", line);

	static const int by_flag = 0, by_socket = 1;
	static const enum sabotage close_it = SAB_CLOSE, dup_sock = SAB_DUP2_SOCKET,
				   dup_file = SAB_DUP2_NONSOCKET;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_interface_down),
		cmocka_unit_test_teardown(test_receiver_killed, kill_receiver),
		{ "closed_by_thread_before_send", test_replaced_before_send, NULL, NULL,
		  (void *)&close_it },
		{ "socket_dup2_by_thread_before_send", test_replaced_before_send, NULL, NULL,
		  (void *)&dup_sock },
		{ "file_dup2_by_thread_before_send", test_replaced_before_send, NULL, NULL,
		  (void *)&dup_file },
		{ "close_racing_send", test_race, NULL, NULL, (void *)&close_it },
		{ "dup2_racing_send", test_race, NULL, NULL, (void *)&dup_sock },
		{ "unix_sndbuf_dontwait", test_unix_sndbuf_dontwait, NULL, NULL, (void *)&by_flag },
		{ "unix_sndbuf_o_nonblock", test_unix_sndbuf_dontwait, NULL, NULL,
		  (void *)&by_socket },
		cmocka_unit_test(test_tcp_partial_dontwait),
		cmocka_unit_test(test_fd_number_reused),
	};
	char group[64];
	snprintf(group, sizeof(group), "faults-%s", argv[1]);
	return _cmocka_run_group_tests(group, tests, sizeof(tests) / sizeof(tests[0]), NULL, NULL);
}
