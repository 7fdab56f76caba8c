/* SPDX-License-Identifier: MIT */
/*
 * Workers and offload on real sockets, once per backend: `workers BACKEND`.
 *
 * - ms_config.workers = 1..4 and 64: every destination gets exactly one copy of every message,
 *   byte for byte, whatever mix of sockets the group holds (one unconnected socket carrying many
 *   addresses, connected UDP, AF_UNIX datagram and seqpacket, TCP), with ms_sendv,
 *   MS_SEND_DONTWAIT, MS_CFG_CONNECT; res has one entry per destination with its id and status;
 *   the counters are exact. Destinations that fail (AF_UNIX receivers, connected or not, and
 *   seqpacket peers taken away all along the send order; an IPv6 socket with IPV6_V6ONLY sent
 *   to a v4-mapped address; connected UDP subscribers with no listener under MS_CFG_CONNECT;
 *   full receivers under MS_SEND_DONTWAIT) fail alone, with their own errors, in every part.
 * - How a fan-out is split: the calling thread is pinned to CPU 0 and the library's threads to
 *   CPU 1 (ms_config.cpus), and every receiver is a connected UDP socket, so SO_INCOMING_CPU
 *   says which CPU sent each copy (loopback delivers on the sending CPU). The calling thread's
 *   copies must be one contiguous run of the send order, starting where the fan-out starts
 *   (one later each call with MS_CFG_ROTATE), of an equal share of the group, and the
 *   library's threads must send all the others; groups with fewer than 8 destinations per
 *   part use fewer parts. With timestamps (ts_sample = 1), every part's ends are stamped and
 *   tile the send order; MS_TS_ALL_DESTS stamps every destination in send order.
 * - Offload (MS_CFG_OFFLOAD, ms_post): the return value is the group's size and the post
 *   numbers run 1, 2, 3...; ms_post without MS_CFG_OFFLOAD is refused (-ENOTSUP); a message
 *   longer than a quarter of the ring is refused, the caller's buffer is free on return
 *   (overwritten at once, the receivers still get the original), messages arrive in order at
 *   every receiver (sequence numbers) exactly once after ms_ctx_drain, with a collector thread
 *   reading meanwhile. ms_send and ms_sendv on the same context, between posts, return what
 *   they return without offload, with res, and their messages arrive in call order. The post
 *   log: destinations that fail (a connected UDP socket whose listener is gone:
 *   -ECONNREFUSED from its second message; a closed descriptor: -EBADF; an AF_UNIX address
 *   with no receiver) appear with the post number, group, id and errno, once each, and
 *   nothing else does; a full log counts what it drops. A full ring: the library's thread is
 *   stalled on a seqpacket receiver that does not read; MS_SEND_DONTWAIT is then refused
 *   (-EAGAIN, offload_refused) and the refused messages never arrive; a blocking hand-over
 *   waits (offload_waits) until a second thread lets the receiver read. Group changes take
 *   effect between messages; ms_group_free delivers what was still queued; a forked child
 *   sends by itself, before ms_post returns, and logs there.
 * - ms_config.cpus: the library's threads get exactly the CPUs asked (from
 *   /proc/self/task/N/status), and are gone after ms_ctx_free; config validation.
 *
 * Nothing here asserts a duration: waits are bounded only to fail instead of hanging, and an
 * alarm ends any test that blocks.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "multisend.h"
#include "net.h"

#ifndef SO_INCOMING_CPU
#define SO_INCOMING_CPU 49
#endif

#define WAIT_MS 5000 /* for anything that must arrive */

static enum ms_backend backend;
static unsigned alarm_s = 120;
/* valgrind (3.19) keeps its one-thread-at-a-time lock through io_uring_enter: a library thread
 * waiting there for a send that only another thread's read can unblock never lets that thread
 * run. Under valgrind with io_uring, nothing may wait for a receiver to read. */
static bool vg_uring;

/* ---- contexts and counters ------------------------------------------------------------------- */

struct opt {
	uint32_t flags;
	uint32_t workers;
	uint32_t offload_kib;
	uint32_t ts_sample;
	uint32_t ts_flags;
	const int *cpus;
	uint32_t ncpus;
	uint32_t spin_us;
};

static int ctx_try(struct ms_ctx **ctx, const struct opt *o)
{
	struct ms_config cfg = { .size = sizeof(cfg),
				 .backend = backend,
				 .flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV | o->flags,
				 .ts_sample = o->ts_sample,
				 .ts_flags = o->ts_flags,
				 .workers = o->workers,
				 .offload_kib = o->offload_kib,
				 .cpus = o->cpus,
				 .ncpus = o->ncpus,
				 .spin_us = o->spin_us };
	*ctx = NULL;
	return ms_ctx_new(ctx, &cfg);
}

static struct ms_ctx *ctx_new(const struct opt *o)
{
	struct ms_ctx *ctx;
	int err = ctx_try(&ctx, o);
	if (err)
		fail_msg("ms_ctx_new (workers %u, flags %#x): %s", o->workers, o->flags,
			 ms_strerror(err));
	return ctx;
}

/* Whether the kernel keys transmit timestamps per datagram (else ts_sample gives -ENOTSUP). */
static bool have_ts(void)
{
	struct ms_ctx *ctx;
	struct opt o = { .ts_sample = 1 };
	int err = ctx_try(&ctx, &o);
	if (err == -ENOTSUP)
		return false;
	assert_int_equal(err, 0);
	ms_ctx_free(ctx);
	return true;
}

static struct ms_stats stats(const struct ms_ctx *ctx)
{
	struct ms_stats st = { .size = sizeof(st) };
	assert_int_equal(ms_ctx_stats(ctx, &st), 0);
	return st;
}

static struct ms_snapshot snap(const struct ms_ctx *ctx)
{
	struct ms_snapshot s = { .size = sizeof(s) };
	assert_int_equal(ms_ctx_snapshot(ctx, &s), 0);
	return s;
}

/* What the counters must have moved by, exactly; every class not named must not move. */
struct want {
	uint64_t fanouts, attempted, accepted, failed, bytes, unreach, again;
};

static void check_stats(const struct ms_stats *a, const struct ms_stats *b, const struct want *w)
{
	assert_int_equal(b->fanouts - a->fanouts, w->fanouts);
	assert_int_equal(b->dests_attempted - a->dests_attempted, w->attempted);
	assert_int_equal(b->dests_accepted - a->dests_accepted, w->accepted);
	assert_int_equal(b->dests_failed - a->dests_failed, w->failed);
	assert_int_equal(b->dests_partial - a->dests_partial, 0);
	assert_int_equal(b->bytes - a->bytes, w->bytes);
	assert_int_equal(b->err_unreach - a->err_unreach, w->unreach);
	assert_int_equal(b->err_again - a->err_again, w->again);
	assert_int_equal(b->err_nobufs - a->err_nobufs, 0);
	assert_int_equal(b->err_msgsize - a->err_msgsize, 0);
	assert_int_equal(b->err_conn - a->err_conn, 0);
	assert_int_equal(b->err_badf - a->err_badf, 0);
	assert_int_equal(b->err_other - a->err_other, 0);
}

/* ---- endpoints ------------------------------------------------------------------------------ */

static bool is_stream(enum kind k)
{
	return k == K_TCP4 || k == K_TCP6;
}

static bool is_udp(enum kind k)
{
	return k == K_UDP4 || k == K_UDP6 || k == K_UDP4_CONN || k == K_UDP6_CONN;
}

/* A mix in runs, so that one socket's run of addresses (a sendmmsg batch) crosses the parts'
 * boundaries, and connected sockets sit between them. */
static const struct {
	enum kind k;
	unsigned run;
} MIX[] = {
	{ K_UDP4, 5 }, { K_UDP4_CONN, 1 }, { K_UNIX, 3 },      { K_UNIX_CONN, 1 }, { K_SEQPACKET, 1 },
	{ K_UDP6, 4 }, { K_TCP4, 1 },      { K_UDP4, 2 },      { K_UDP6_CONN, 1 }, { K_UNIX_CONN, 2 },
};

static enum kind mix_kind(size_t i)
{
	size_t period = 0;
	for (size_t m = 0; m < sizeof(MIX) / sizeof(MIX[0]); m++)
		period += MIX[m].run;
	i %= period;
	for (size_t m = 0;; m++) {
		if (i < MIX[m].run) {
			enum kind k = MIX[m].k;
			if (vg_uring && k == K_UNIX) /* a receiver of 10 datagrams makes senders wait */
				k = K_UNIX_CONN;
			if (!net_have_ipv6())
				k = k == K_UDP6 ? K_UDP4 : k == K_UDP6_CONN ? K_UDP4_CONN : k;
			return k;
		}
		i -= MIX[m].run;
	}
}

static void add_mix(struct net *nt, size_t n)
{
	for (size_t i = 0; i < n; i++)
		assert_int_equal(net_add(nt, mix_kind(i), 1), 0);
}

/* Room for everything a test sends before it reads (root may exceed rmem_max). */
static void big_rcvbuf(struct net *nt)
{
	int big = 4 << 20;
	for (size_t i = 0; i < nt->n; i++)
		if (nt->ep[i].rx >= 0 && is_udp(nt->ep[i].kind) &&
		    setsockopt(nt->ep[i].rx, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)))
			(void)setsockopt(nt->ep[i].rx, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
}

/* An AF_UNIX datagram destination whose receiver is gone: -ECONNREFUSED at every send. */
static void add_dead_unix(struct net *nt)
{
	assert_int_equal(net_add(nt, K_UNIX, 1), 0);
	struct endpoint *e = &nt->ep[nt->n - 1];
	close(e->rx);
	e->rx = -1;
}

/* An IPv6 socket with IPV6_V6ONLY sending to a v4-mapped address: -ENETUNREACH at every
 * send. Uses the shared IPv6 sender (set V6ONLY on it: it has not been bound yet). */
static void add_dead_mapped(struct net *nt)
{
	assert_int_equal(net_add(nt, K_UDP6, 1), 0);
	struct endpoint *e = &nt->ep[nt->n - 1];
	int one = 1;
	assert_int_equal(setsockopt(nt->shared[1], IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)),
			 0);
	struct sockaddr_in6 *a = (struct sockaddr_in6 *)&e->addr;
	in_port_t port = a->sin6_port;
	memset(a, 0, sizeof(*a));
	a->sin6_family = AF_INET6;
	a->sin6_port = port;
	a->sin6_addr.s6_addr[10] = a->sin6_addr.s6_addr[11] = 0xff;
	a->sin6_addr.s6_addr[12] = 127;
	a->sin6_addr.s6_addr[15] = 1;
	e->addrlen = sizeof(*a);
	close(e->rx);
	e->rx = -1;
}

/* Add endpoints [from, to) of nt to g. */
static void join_range(struct net *nt, struct ms_group *g, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++) {
		struct endpoint *e = &nt->ep[i];
		struct ms_dest d = { .fd = e->tx,
				     .addrlen = e->addrlen,
				     .addr = e->addrlen ? (struct sockaddr *)&e->addr : NULL };
		e->id = ms_group_add(g, &d);
		assert_true(e->id >= 0);
	}
}

/* ---- one synchronous fan-out, checked ------------------------------------------------------- */

/*
 * Send round `round`'s message of len bytes to g (whose destinations are exactly nt's
 * endpoints) and check everything: the return value, one result per destination (each id once,
 * nothing written past the group's size), each status (fail[e] for endpoint e, 0 = the length),
 * one byte-identical copy at every live endpoint and nothing at the others. pos[e], if not NULL,
 * gets endpoint e's position in res.
 */
static void fan_check(struct net *nt, struct ms_group *g, unsigned round, size_t len,
		      unsigned flags, bool gather, const int *fail, size_t *pos)
{
	size_t n = ms_group_size(g);
	assert_int_equal(n, nt->n);
	unsigned char *msg = malloc(len);
	struct ms_result *res = calloc(n + 1, sizeof(*res));
	bool *seen = calloc(n, sizeof(*seen));
	assert_true(msg && res && seen);
	make_payload(msg, len, round);
	res[n].id = -77;
	res[n].status = -77;
	int ret;
	if (gather) {
		/* Three pieces, one of them empty. */
		size_t cut = len / 3;
		struct iovec iov[3] = { { msg, cut }, { msg + cut, 0 }, { msg + cut, len - cut } };
		ret = ms_sendv(g, iov, 3, flags, res);
	} else {
		ret = ms_send(g, msg, len, flags, res);
	}
	int ok = 0;
	for (size_t i = 0; i < n; i++) {
		long e = net_find(nt, res[i].id);
		if (e < 0)
			fail_msg("res[%zu].id = %d: not a destination of the group", i, res[i].id);
		assert_false(seen[e]);
		seen[e] = true;
		if (pos)
			pos[e] = i;
		int want = fail && fail[e] ? fail[e] : (int)len;
		if (res[i].status != want)
			fail_msg("res[%zu] (%s endpoint %ld, id %d): status %d (%s), expected %d",
				 i, kind_name(nt->ep[e].kind), e, res[i].id, res[i].status,
				 res[i].status < 0 ? ms_strerror(res[i].status) : "bytes", want);
		ok += want == (int)len;
	}
	assert_int_equal(ms_group_slow_results(g, NULL, 0), 0); /* no policy: nothing */
	assert_int_equal(res[n].id, -77);
	assert_int_equal(res[n].status, -77);
	assert_int_equal(ret, ok);
	for (size_t e = 0; e < n; e++) {
		if (fail && fail[e]) {
			if (nt->ep[e].rx >= 0)
				assert_true(expect_none(&nt->ep[e]));
		} else {
			assert_true(expect_one(&nt->ep[e], msg, len, WAIT_MS));
		}
	}
	free(seen);
	free(res);
	free(msg);
}

/* ---- workers: results, receipt and counters ------------------------------------------------- */

/* Groups of every size class for K = 1..4 (K parts, fewer parts, one part), a mixed group, a
 * plain send, a gathered one and one with MS_SEND_DONTWAIT each; counters exact. */
static void test_workers_mixed(void **state)
{
	(void)state;
	static const struct {
		uint32_t k;
		size_t n;
	} cases[] = {
		{ 1, 11 }, { 2, 19 }, { 3, 27 }, { 4, 35 }, /* 8 * K + 3: K parts */
		{ 4, 20 }, /* two parts */
		{ 2, 12 }, /* 8 to 15: one */
		{ 3, 5 },  /* fewer than 8: one */
		{ 0, 9 },  /* 0 = 1 */
	};
	net_raise_nofile(1024);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct opt o = { .workers = cases[c].k };
		struct ms_ctx *ctx = ctx_new(&o);
		struct ms_group *g;
		struct net nt;
		net_init(&nt);
		add_mix(&nt, cases[c].n);
		assert_int_equal(ms_group_new(ctx, &g), 0);
		assert_int_equal(net_join(&nt, g, 0), 0);
		struct ms_stats a = stats(ctx);
		size_t len = 100 + c;
		fan_check(&nt, g, 3 * (unsigned)c, len, 0, false, NULL, NULL);
		fan_check(&nt, g, 3 * (unsigned)c + 1, len, 0, true, NULL, NULL);
		fan_check(&nt, g, 3 * (unsigned)c + 2, len, MS_SEND_DONTWAIT, false, NULL, NULL);
		struct ms_stats b = stats(ctx);
		size_t n = cases[c].n;
		struct want w = { .fanouts = 3, .attempted = 3 * n, .accepted = 3 * n,
				  .bytes = 3 * n * len };
		check_stats(&a, &b, &w);
		if (backend == MS_BACKEND_LOOP) /* one send per destination, whichever thread */
			assert_int_equal(b.syscalls - a.syscalls, 3 * n);
		ms_group_free(g);
		ms_ctx_free(ctx);
		net_free(&nt);
	}
}

/* 64 workers and a group big enough for 64 parts (and one for 12): all on one unconnected
 * socket, so every part is a slice of the same socket's addresses. */
static void test_workers_64(void **state)
{
	(void)state;
	net_raise_nofile(2048);
	struct opt o = { .workers = 64 };
	struct ms_ctx *ctx = ctx_new(&o);
	static const size_t sizes[] = { 64 * 8 + 5, 100 };
	for (size_t c = 0; c < 2; c++) {
		size_t n = sizes[c];
		struct ms_group *g;
		struct net nt;
		net_init(&nt);
		assert_int_equal(net_add(&nt, K_UDP4, n - 3), 0);
		assert_int_equal(net_add(&nt, K_UNIX_CONN, 3), 0);
		assert_int_equal(ms_group_new(ctx, &g), 0);
		assert_int_equal(net_join(&nt, g, 0), 0);
		struct ms_stats a = stats(ctx);
		fan_check(&nt, g, 64 + (unsigned)c, 64, 0, false, NULL, NULL);
		fan_check(&nt, g, 66 + (unsigned)c, 64, 0, true, NULL, NULL);
		struct ms_stats b = stats(ctx);
		struct want w = { .fanouts = 2, .attempted = 2 * n, .accepted = 2 * n,
				  .bytes = 2 * n * 64 };
		check_stats(&a, &b, &w);
		ms_group_free(g);
		net_free(&nt);
	}
	ms_ctx_free(ctx);
}

/* The kinds a receiver can be taken away from after the group is made, and what a send to
 * it then reports: the first time, and every time after. */
static bool killable(enum kind k)
{
	return k == K_UNIX || k == K_UNIX_CONN || k == K_SEQPACKET;
}

static int killed_status(enum kind k, bool first)
{
	return k == K_SEQPACKET ? -EPIPE : k == K_UNIX_CONN && !first ? -ENOTCONN : -ECONNREFUSED;
}

/*
 * Failing destinations in every part, wherever the library puts them in its order: a first
 * fan-out says where each destination is, then every other receiver that can be taken away
 * (AF_UNIX datagram, connected or not, and seqpacket) is, along the whole send order (at most 7
 * positions apart, and parts have at least 8). With IPv6, destinations on an IPV6_V6ONLY
 * socket sent to v4-mapped addresses fail from the start. Each fails alone, with its own error,
 * counted by class.
 */
static void test_workers_failures(void **state)
{
	(void)state;
	net_raise_nofile(1024);
	static const enum kind pattern[] = { K_UNIX_CONN, K_UDP4, K_SEQPACKET, K_UNIX,
					     K_UDP4_CONN, K_UNIX_CONN, K_TCP4, K_SEQPACKET };
	const size_t np = sizeof(pattern) / sizeof(pattern[0]);
	bool v6 = net_have_ipv6();
	for (uint32_t k = 2; k <= 4; k++) {
		size_t n = 8 * k + 3;
		struct opt o = { .workers = k };
		struct ms_ctx *ctx = ctx_new(&o);
		struct ms_group *g;
		struct net nt;
		net_init(&nt);
		int fail[64] = { 0 };
		for (size_t i = 0; i < n; i++) {
			if (v6 && i % 10 == 9) {
				add_dead_mapped(&nt);
				fail[i] = -ENETUNREACH;
			} else {
				assert_int_equal(net_add(&nt, pattern[i % np], 1), 0);
			}
		}
		assert_int_equal(ms_group_new(ctx, &g), 0);
		assert_int_equal(net_join(&nt, g, 0), 0);
		size_t pos[64], at[64];
		fan_check(&nt, g, 100, 80, 0, false, fail, pos);
		for (size_t e = 0; e < n; e++)
			at[pos[e]] = e;
		/* Take every other killable receiver away, in send order. */
		bool kill = true, killed[64] = { false };
		for (size_t p = 0; p < n; p++) {
			struct endpoint *ep = &nt.ep[at[p]];
			if (fail[at[p]] || !killable(ep->kind))
				continue;
			if (kill) {
				close(ep->rx);
				ep->rx = -1;
				killed[at[p]] = true;
			}
			kill = !kill;
		}
		struct ms_stats a = stats(ctx);
		uint64_t nfail = 0, unreach = 0, conn = 0;
		for (unsigned r = 0; r < 2; r++) {
			for (size_t e = 0; e < n; e++)
				if (killed[e])
					fail[e] = killed_status(nt.ep[e].kind, r == 0);
			fan_check(&nt, g, 101 + r, 80, 0, r == 1, fail, pos);
			bool bad[64] = { false };
			for (size_t e = 0; e < n; e++) {
				if (!fail[e])
					continue;
				bad[pos[e]] = true;
				nfail++;
				if (fail[e] == -EPIPE || fail[e] == -ENOTCONN)
					conn++;
				else
					unreach++;
			}
			/* Failures all along the send order, successes between them. */
			size_t gap = 0, maxgap = 0, good = 0;
			for (size_t p = 0; p < 2 * n; p++) {
				gap = bad[p % n] ? 0 : gap + 1;
				maxgap = gap > maxgap ? gap : maxgap;
				good += p < n && !bad[p];
			}
			assert_true(maxgap < 8);
			assert_true(good >= n / 2);
		}
		struct ms_stats b = stats(ctx);
		assert_int_equal(b.err_conn - a.err_conn, conn);
		b.err_conn = a.err_conn; /* (check_stats wants no other class) */
		struct want w = { .fanouts = 2, .attempted = 2 * n, .accepted = 2 * n - nfail,
				  .failed = nfail, .unreach = unreach, .bytes = (2 * n - nfail) * 80 };
		check_stats(&a, &b, &w);
		ms_group_free(g);
		ms_ctx_free(ctx);
		net_free(&nt);
	}
}

/* Receivers that stop reading, in two different parts: under MS_SEND_DONTWAIT each alone
 * reports -EAGAIN once full, and each holds exactly the messages it was said to take. Half the
 * group are AF_UNIX pairs, so whatever order the library gives them they span two parts at
 * least; the first and the last of them in send order stop reading. */
static void test_workers_dontwait_full(void **state)
{
	(void)state;
	const size_t n = 27;
	struct opt o = { .workers = 3 };
	struct ms_ctx *ctx = ctx_new(&o);
	struct ms_group *g;
	struct net nt;
	net_init(&nt);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(net_add(&nt, i % 2 ? mix_kind(i / 2) : K_UNIX_CONN, 1), 0);
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	size_t pos[32];
	fan_check(&nt, g, 0, 100, MS_SEND_DONTWAIT, false, NULL, pos);
	size_t stuck[2] = { n, n };
	for (size_t e = 0; e < n; e++) {
		if (nt.ep[e].kind != K_UNIX_CONN)
			continue;
		if (stuck[0] == n || pos[e] < pos[stuck[0]])
			stuck[0] = e;
		if (stuck[1] == n || pos[e] > pos[stuck[1]])
			stuck[1] = e;
	}
	assert_true(stuck[0] < n && stuck[1] < n);
	assert_true(pos[stuck[0]] / 9 < pos[stuck[1]] / 9); /* parts of 9 */
	struct ms_result res[32];
	unsigned char msg[1000];
	uint64_t again[2] = { 0, 0 }, took[2] = { 0, 0 };
	struct ms_stats a = stats(ctx);
	const unsigned calls = 400;
	for (unsigned c = 0; c < calls; c++) {
		make_payload(msg, sizeof(msg), c);
		int acc = ms_send(g, msg, sizeof(msg), MS_SEND_DONTWAIT, res);
		int want_acc = (int)n;
		for (size_t i = 0; i < n; i++) {
			long e = net_find(&nt, res[i].id);
			assert_true(e >= 0);
			int which = (size_t)e == stuck[0] ? 0 : (size_t)e == stuck[1] ? 1 : -1;
			if (which >= 0) {
				if (res[i].status == -EAGAIN) {
					again[which]++;
					want_acc--;
				} else {
					assert_int_equal(res[i].status, (int)sizeof(msg));
					took[which]++;
				}
			} else {
				assert_int_equal(res[i].status, (int)sizeof(msg));
				assert_true(expect_one(&nt.ep[e], msg, sizeof(msg), WAIT_MS));
			}
		}
		assert_int_equal(acc, want_acc);
	}
	struct ms_stats b = stats(ctx);
	uint64_t ag = again[0] + again[1];
	struct want w = { .fanouts = calls, .attempted = calls * n, .accepted = calls * n - ag,
			  .failed = ag, .again = ag, .bytes = (calls * n - ag) * sizeof(msg) };
	check_stats(&a, &b, &w);
	for (int s = 0; s < 2; s++) {
		assert_true(again[s] > 0 && took[s] > 0);
		unsigned char buf[2000];
		uint64_t held = 0;
		while (recv(nt.ep[stuck[s]].rx, buf, sizeof(buf), MSG_DONTWAIT) == (ssize_t)sizeof(msg))
			held++;
		assert_int_equal(held, took[s]);
	}
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
}

/* MS_CFG_CONNECT with workers: the library's connected sockets, one per address, split like
 * any others; two subscribers that lose their listener, near the two ends of the send order
 * (so in different parts), report -ECONNREFUSED alone (on the send after the one whose ICMP
 * told). */
static void test_workers_connect(void **state)
{
	(void)state;
	const size_t n = 19;
	struct opt o = { .workers = 2, .flags = MS_CFG_CONNECT };
	struct ms_ctx *ctx = ctx_new(&o);
	struct ms_group *g;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UDP4, n), 0);
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	size_t pos[32], at[32];
	int fail[32] = { 0 };
	fan_check(&nt, g, 1, 48, 0, false, NULL, pos);
	for (size_t e = 0; e < n; e++)
		at[pos[e]] = e;
	const size_t dead[2] = { at[2], at[n - 3] };
	for (int d = 0; d < 2; d++) {
		close(nt.ep[dead[d]].rx);
		nt.ep[dead[d]].rx = -1;
	}
	/* The copies to them still leave (the refusals come back as ICMP, after). */
	unsigned char msg[48];
	struct ms_result res[32];
	make_payload(msg, sizeof(msg), 2);
	assert_int_equal(ms_send(g, msg, sizeof(msg), 0, res), (int)n);
	for (size_t e = 0; e < n; e++)
		if (nt.ep[e].rx >= 0)
			assert_true(expect_one(&nt.ep[e], msg, sizeof(msg), WAIT_MS));
	fail[dead[0]] = fail[dead[1]] = -ECONNREFUSED;
	struct ms_stats a = stats(ctx);
	fan_check(&nt, g, 3, sizeof(msg), 0, false, fail, pos);
	assert_int_equal(pos[dead[0]], 2);
	assert_int_equal(pos[dead[1]], n - 3);
	struct ms_stats b = stats(ctx);
	struct want w = { .fanouts = 1, .attempted = n, .accepted = n - 2, .failed = 2,
			  .unreach = 2, .bytes = (n - 2) * sizeof(msg) };
	check_stats(&a, &b, &w);
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
}

/* ---- how a fan-out is split, seen from the receivers' CPUs ---------------------------------- */

static cpu_set_t saved_affinity;
static bool affinity_saved;

static bool have_cpus_0_and_1(void)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
	return CPU_ISSET(0, &set) && CPU_ISSET(1, &set);
}

static void pin_main(int cpu)
{
	if (!affinity_saved) {
		assert_int_equal(sched_getaffinity(0, sizeof(saved_affinity), &saved_affinity), 0);
		affinity_saved = true;
	}
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	assert_int_equal(sched_setaffinity(0, sizeof(set), &set), 0);
}

static void unpin_main(void)
{
	if (affinity_saved)
		(void)sched_setaffinity(0, sizeof(saved_affinity), &saved_affinity);
	affinity_saved = false;
}

#define MAXS 80

/* Receivers connected back to their sender, so the kernel records each one's receiving CPU. */
struct cpurig {
	int shared; /* one unconnected sender for most addresses */
	size_t n;
	int rx[MAXS], tx[MAXS], id[MAXS];
};

static int bound_udp(struct sockaddr_in *a)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)a, sizeof(*a)), 0);
	socklen_t l = sizeof(*a);
	assert_int_equal(getsockname(fd, (struct sockaddr *)a, &l), 0);
	return fd;
}

static void cpurig_init(struct cpurig *r, struct ms_group *g, size_t n)
{
	struct sockaddr_in sa, ra, ta;
	r->shared = bound_udp(&sa);
	r->n = n;
	for (size_t i = 0; i < n; i++) {
		r->rx[i] = bound_udp(&ra);
		struct ms_dest d = { .fd = r->shared, .addr = (struct sockaddr *)&ra,
				     .addrlen = sizeof(ra) };
		r->tx[i] = -1;
		if (i % 4 == 3) { /* a connected sender of its own */
			r->tx[i] = bound_udp(&ta);
			assert_int_equal(connect(r->tx[i], (struct sockaddr *)&ra, sizeof(ra)), 0);
			assert_int_equal(connect(r->rx[i], (struct sockaddr *)&ta, sizeof(ta)), 0);
			d.fd = r->tx[i];
			d.addr = NULL;
			d.addrlen = 0;
		} else {
			assert_int_equal(connect(r->rx[i], (struct sockaddr *)&sa, sizeof(sa)), 0);
		}
		r->id[i] = ms_group_add(g, &d);
		assert_true(r->id[i] >= 0);
	}
}

static void cpurig_free(struct cpurig *r)
{
	for (size_t i = 0; i < r->n; i++) {
		close(r->rx[i]);
		if (r->tx[i] >= 0)
			close(r->tx[i]);
	}
	close(r->shared);
}

static size_t cpurig_find(const struct cpurig *r, int id)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->id[i] == id)
			return i;
	fail_msg("id %d is not in the group", id);
	return 0;
}

/* The parts a fan-out to n destinations with K workers makes. */
static size_t parts_of(size_t n, uint32_t k)
{
	size_t p = n / 8;
	return p < 2 ? 1 : p < k ? p : k;
}

/*
 * One fan-out; cpu_at[p] = the CPU that sent the copy at group position p. Returns the
 * position where the calling thread's run starts (the fan-out's first destination).
 */
static size_t split_once(struct cpurig *r, struct ms_group *g, unsigned round, uint32_t k,
			 long prev_start, bool rotate)
{
	const size_t n = r->n;
	unsigned char msg[60], buf[128];
	struct ms_result res[MAXS];
	int cpu_at[MAXS];
	make_payload(msg, sizeof(msg), round);
	assert_int_equal(ms_send(g, msg, sizeof(msg), 0, res), (int)n);
	for (size_t p = 0; p < n; p++) {
		assert_int_equal(res[p].status, (int)sizeof(msg));
		size_t i = cpurig_find(r, res[p].id);
		struct pollfd pf = { .fd = r->rx[i], .events = POLLIN };
		assert_int_equal(poll(&pf, 1, WAIT_MS), 1);
		assert_int_equal(recv(r->rx[i], buf, sizeof(buf), MSG_DONTWAIT), (ssize_t)sizeof(msg));
		assert_memory_equal(buf, msg, sizeof(msg));
		assert_int_equal(recv(r->rx[i], buf, sizeof(buf), MSG_DONTWAIT), -1);
		int cpu = -1;
		socklen_t l = sizeof(cpu);
		assert_int_equal(getsockopt(r->rx[i], SOL_SOCKET, SO_INCOMING_CPU, &cpu, &l), 0);
		assert_true(cpu == 0 || cpu == 1);
		cpu_at[p] = cpu;
	}
	const size_t parts = parts_of(n, k);
	size_t zeros = 0, starts = 0, start = 0;
	for (size_t p = 0; p < n; p++) {
		zeros += cpu_at[p] == 0;
		if (cpu_at[p] == 0 && cpu_at[(p + n - 1) % n] != 0) {
			starts++;
			start = p;
		}
	}
	char line[MAXS + 1];
	for (size_t p = 0; p < n; p++)
		line[p] = (char)('0' + cpu_at[p]);
	line[n] = 0;
	printf("# %s, %u workers, %zu destinations%s: sending CPU by position %s\n",
	       ms_backend_name(backend), k, n, rotate ? ", rotated" : "", line);
	if (parts == 1) {
		/* The calling thread sent everything. */
		assert_int_equal(zeros, n);
		return prev_start < 0 ? 0 : (size_t)(prev_start + 1) % n;
	}
	/* The calling thread sent one contiguous run of the send order, its equal share, and the
	 * library's threads everything else. */
	assert_int_equal(starts, 1);
	assert_true(zeros == n / parts || zeros == (n + parts - 1) / parts);
	if (!rotate)
		assert_int_equal(start, 0);
	else if (prev_start >= 0)
		assert_int_equal(start, (size_t)(prev_start + 1) % n);
	return start;
}

static void test_workers_split(void **state)
{
	(void)state;
	if (!have_cpus_0_and_1()) {
		printf("# CPUs 0 and 1 are not both available: skipped\n");
		skip();
	}
	static const struct {
		uint32_t k;
		size_t n;
	} cases[] = {
		{ 2, 19 }, { 3, 27 }, { 4, 35 }, { 4, 67 }, /* K parts */
		{ 4, 20 }, { 3, 23 },                       /* two parts */
		{ 2, 12 }, { 4, 15 },                       /* one */
	};
	static const int on1[3] = { 1, 1, 1 };
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		for (int rotate = 0; rotate < 2; rotate++) {
			uint32_t k = cases[c].k;
			/* Created before the calling thread is pinned: its threads inherit nothing
			 * from the test's pinning but what cpus says. */
			struct opt o = { .workers = k, .cpus = on1, .ncpus = k - 1,
					 .flags = rotate ? MS_CFG_ROTATE : 0 };
			struct ms_ctx *ctx = ctx_new(&o);
			struct ms_group *g;
			assert_int_equal(ms_group_new(ctx, &g), 0);
			struct cpurig r;
			cpurig_init(&r, g, cases[c].n);
			pin_main(0);
			long start = -1;
			for (unsigned call = 0; call < 4; call++)
				start = (long)split_once(&r, g, call, k, start, rotate);
			unpin_main();
			ms_group_free(g);
			ms_ctx_free(ctx);
			cpurig_free(&r);
		}
	}
}

/* ---- timestamps with parts ------------------------------------------------------------------- */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* ts_sample = 1: each part's first and last destination stamped, the ends tiling the send
 * order in equal shares; every sample counts in the skew histograms. MS_TS_ALL_DESTS with
 * MS_CFG_ROTATE: every destination, in send order, one later each call. */
static void test_workers_timestamps(void **state)
{
	(void)state;
	if (!have_ts()) {
		printf("# no per-datagram timestamp keys here: skipped\n");
		skip();
	}
	static const struct {
		uint32_t k;
		size_t n;
		bool rotate, all;
	} cases[] = {
		{ 2, 19, false, false }, { 3, 27, true, false }, { 4, 35, false, false },
		{ 4, 20, true, false },  { 2, 12, false, false }, { 3, 27, true, true },
		{ 4, 35, false, true },
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		const uint32_t k = cases[c].k;
		const size_t n = cases[c].n, parts = parts_of(n, k);
		struct opt o = { .workers = k, .ts_sample = 1,
				 .ts_flags = cases[c].all ? MS_TS_ALL_DESTS : 0,
				 .flags = cases[c].rotate ? MS_CFG_ROTATE : 0 };
		struct ms_ctx *ctx = ctx_new(&o);
		struct ms_group *g;
		struct net nt;
		net_init(&nt);
		for (size_t i = 0; i < n; i++)
			assert_int_equal(net_add(&nt, i % 3 == 2 ? K_UDP4_CONN : K_UDP4, 1), 0);
		assert_int_equal(ms_group_new(ctx, &g), 0);
		assert_int_equal(net_join(&nt, g, 0), 0);
		const size_t per = cases[c].all ? n : 2 * parts;
		const unsigned calls = 5;
		long prev = -1;
		struct ms_snapshot s0 = snap(ctx);
		for (unsigned call = 0; call < calls; call++) {
			unsigned char msg[90];
			struct ms_result res[64];
			make_payload(msg, sizeof(msg), call);
			assert_int_equal(ms_send(g, msg, sizeof(msg), 0, res), (int)n);
			for (size_t e = 0; e < n; e++)
				assert_true(expect_one(&nt.ep[e], msg, sizeof(msg), WAIT_MS));
			assert_true(ms_group_ts_collect(g) >= (int)per);
			struct ms_ts_dest td[72];
			uint64_t t0 = 0;
			assert_int_equal(ms_group_ts_last(g, td, 72, &t0), (int)per);
			assert_true(t0 > 0);
			/* The sample's first entry is the destination sent first. */
			size_t start = td[0].pos;
			if (!cases[c].rotate)
				assert_int_equal(start, 0);
			else if (prev >= 0)
				assert_int_equal(start, (size_t)(prev + 1) % n);
			prev = (long)start;
			uint32_t off[72];
			for (size_t i = 0; i < per; i++) {
				assert_true(td[i].pos < n);
				assert_int_equal(td[i].id, res[td[i].pos].id);
				assert_int_equal(td[i].flags, MS_TS_SCHED | MS_TS_SND);
				off[i] = (uint32_t)((td[i].pos + n - start) % n);
				if (cases[c].all) /* in send order */
					assert_int_equal(off[i], i);
			}
			if (!cases[c].all) {
				/* Sorted by send position, the entries are the parts' ends: the
				 * first at 0, the last at n - 1, each part [a, z] starting right
				 * after the one before and holding an equal share. */
				qsort(off, per, sizeof(off[0]), cmp_u32);
				assert_int_equal(off[0], 0);
				assert_int_equal(off[per - 1], n - 1);
				for (size_t p = 0; p < parts; p++) {
					uint32_t a = off[2 * p], z = off[2 * p + 1];
					if (p)
						assert_int_equal(a, off[2 * p - 1] + 1);
					size_t cnt = z - a + 1;
					assert_true(cnt == n / parts || cnt == (n + parts - 1) / parts);
				}
			}
		}
		struct ms_snapshot s1 = snap(ctx);
		assert_int_equal(s1.stats.ts_sampled - s0.stats.ts_sampled, calls);
		assert_int_equal(s1.stats.ts_requested - s0.stats.ts_requested, calls * per);
		assert_int_equal(s1.stats.ts_stamped - s0.stats.ts_stamped, calls * per);
		assert_int_equal(s1.stats.ts_missing - s0.stats.ts_missing, 0);
		assert_int_equal(s1.stats.ts_unsupported - s0.stats.ts_unsupported, 0);
		assert_int_equal(s1.stats.ts_late - s0.stats.ts_late, 0);
		assert_int_equal(s1.dest_lag.count - s0.dest_lag.count, calls * per);
		assert_int_equal(s1.first_last.count - s0.first_last.count, calls);
		assert_int_equal(s1.call_first.count - s0.call_first.count, calls);
		assert_int_equal(s1.call_last.count - s0.call_last.count, calls);
		assert_true(s1.call_last.max_ns >= s1.call_first.min_ns);
		assert_int_equal(s1.stats.fanouts - s0.stats.fanouts, calls);
		assert_int_equal(s1.stats.dests_accepted - s0.stats.dests_accepted, calls * n);
		ms_group_free(g);
		ms_ctx_free(ctx);
		net_free(&nt);
	}
}

/* ---- offload: messages with sequence numbers, read in order ---------------------------------- */

struct seqfmt {
	size_t base;     /* a message's length: base + (seq * 37) % spread */
	unsigned spread; /* 0: always base */
};

static size_t seq_len(const struct seqfmt *f, unsigned seq)
{
	return f->base + (f->spread ? (seq * 37u) % f->spread : 0);
}

/* The message with sequence number seq: the number, then bytes that depend on it. */
static void seq_fill(unsigned char *buf, size_t len, unsigned seq)
{
	make_payload(buf, len, seq ^ 0x5eed0000u);
	memcpy(buf, &seq, sizeof(seq));
}

#define ACC (1u << 17)

/* What one endpoint must receive: these sequence numbers, in this order, and nothing else. */
struct seqrx {
	struct endpoint ep; /* a copy: a collector thread may outlive a failed test's frame */
	const struct endpoint *e;
	unsigned *want;
	unsigned nwant, got;
	unsigned char *acc; /* a stream's bytes not yet matched */
	size_t have;
	bool bad;
};

static void seqrx_init(struct seqrx *r, const struct endpoint *e, unsigned from, unsigned to)
{
	memset(r, 0, sizeof(*r));
	r->ep = *e;
	r->e = &r->ep;
	r->want = calloc(to > from ? to - from : 1, sizeof(unsigned));
	r->acc = malloc(ACC);
	assert_true(r->want && r->acc);
	for (unsigned s = from; s < to; s++)
		r->want[r->nwant++] = s;
}

static void seqrx_free(struct seqrx *r, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(r[i].want);
		free(r[i].acc);
	}
}

#define RX "%s id %d (receiver fd %d)"
#define RXARGS(e) kind_name((e)->kind), (e)->id, (e)->rx

/* Read what is there (not waiting). False, with the reason printed, at the first thing wrong. */
static bool seqrx_read(struct seqrx *r, const struct seqfmt *f, unsigned char *tmp,
		       unsigned char *got)
{
	const struct endpoint *e = r->e;
	for (;;) {
		if (is_stream(e->kind)) {
			ssize_t n = recv(e->rx, r->acc + r->have, ACC - r->have, MSG_DONTWAIT);
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				return true;
			if (n <= 0) {
				fprintf(stderr, "  " RX ": recv %zd (%s)\n", RXARGS(e),
					n, n ? strerror(errno) : "closed");
				return false;
			}
			r->have += (size_t)n;
			while (r->got < r->nwant) {
				unsigned s = r->want[r->got];
				size_t len = seq_len(f, s);
				if (r->have < len)
					break;
				seq_fill(tmp, len, s);
				if (memcmp(r->acc, tmp, len)) {
					unsigned was;
					memcpy(&was, r->acc, sizeof(was));
					fprintf(stderr, "  " RX ": message %u of the stream is not seq %u "
						"(starts like seq %u)\n", RXARGS(e),
						r->got, s, was);
					return false;
				}
				memmove(r->acc, r->acc + len, r->have - len);
				r->have -= len;
				r->got++;
			}
			if (r->got == r->nwant && r->have) {
				fprintf(stderr, "  " RX ": %zu bytes more than expected\n",
					RXARGS(e), r->have);
				return false;
			}
		} else {
			ssize_t n = recv(e->rx, got, ACC, MSG_DONTWAIT | MSG_TRUNC);
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				return true;
			if (n < 0) {
				fprintf(stderr, "  " RX ": recv: %s\n", RXARGS(e),
					strerror(errno));
				return false;
			}
			unsigned was = ~0u;
			if (n >= 4)
				memcpy(&was, got, sizeof(was));
			if (r->got == r->nwant) {
				fprintf(stderr, "  " RX ": unexpected datagram (seq %u, %zd bytes) "
					"after all %u expected\n", RXARGS(e), was, n,
					r->nwant);
				return false;
			}
			unsigned s = r->want[r->got];
			size_t len = seq_len(f, s);
			seq_fill(tmp, len, s);
			if ((size_t)n != len || memcmp(got, tmp, len)) {
				fprintf(stderr, "  " RX ": datagram %u is seq %u (%zd bytes), expected "
					"seq %u (%zu bytes)\n", RXARGS(e), r->got, was, n,
					s, len);
				return false;
			}
			r->got++;
		}
	}
}

/* Read until every endpoint has everything it must (true), something wrong arrives, or
 * timeout_ms pass without it all (false). Endpoints without a receiver expect nothing. */
static bool seqrx_wait(struct seqrx *r, size_t n, const struct seqfmt *f, int timeout_ms,
		       atomic_int *stop)
{
	unsigned char *tmp = malloc(ACC), *got = malloc(ACC);
	struct pollfd *pf = calloc(n, sizeof(*pf));
	size_t *which = calloc(n, sizeof(*which));
	bool ok = false;
	if (!tmp || !got || !pf || !which)
		goto out;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		size_t np = 0;
		for (size_t i = 0; i < n; i++) {
			if (r[i].bad)
				goto out;
			if (r[i].e->rx >= 0 && r[i].got < r[i].nwant) {
				pf[np] = (struct pollfd){ .fd = r[i].e->rx, .events = POLLIN };
				which[np++] = i;
			}
		}
		if (!np) {
			ok = true;
			break;
		}
		if (stop && atomic_load(stop))
			break;
		clock_gettime(CLOCK_MONOTONIC, &t);
		long ms = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
		if (ms > timeout_ms) {
			for (size_t j = 0; j < np; j++) {
				const struct seqrx *x = &r[which[j]];
				fprintf(stderr, "  %s id %d (receiver fd %d): %u of %u messages "
					"arrived\n", kind_name(x->e->kind), x->e->id, x->e->rx, x->got,
					x->nwant);
			}
			break;
		}
		if (poll(pf, np, 100) < 0 && errno != EINTR)
			break;
		for (size_t j = 0; j < np; j++)
			if (pf[j].revents && !seqrx_read(&r[which[j]], f, tmp, got))
				r[which[j]].bad = true;
	}
out:
	free(which);
	free(pf);
	free(got);
	free(tmp);
	return ok;
}

/*
 * The same from a thread of the test's: starts reading when told to (go), delay_ms later. It
 * owns its heap array of n seqrx from collector_start on. A test that fails leaves it running
 * (cmocka jumps out of the test): the teardown stops it.
 */
struct collector {
	pthread_t th;
	struct seqrx *r;
	size_t n;
	struct seqfmt f;
	int delay_ms, timeout_ms;
	atomic_int go, stop;
	bool ok;
};

static struct collector *live_collector;

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static void *collector_main(void *arg)
{
	struct collector *c = arg;
	while (!atomic_load(&c->go))
		sleep_ms(1);
	if (c->delay_ms && !atomic_load(&c->stop))
		sleep_ms(c->delay_ms);
	c->ok = seqrx_wait(c->r, c->n, &c->f, c->timeout_ms, &c->stop);
	if (!c->ok) {
		/* Keep the receivers empty, so the library's thread does not block for ever and
		 * the test fails instead of hanging. */
		unsigned char *buf = malloc(ACC);
		while (buf && !atomic_load(&c->stop)) {
			for (size_t i = 0; i < c->n; i++)
				if (c->r[i].e->rx >= 0)
					while (recv(c->r[i].e->rx, buf, ACC, MSG_DONTWAIT) > 0)
						;
			sleep_ms(1);
		}
		free(buf);
	}
	return NULL;
}

static struct collector *collector_start(struct seqrx *r, size_t n, const struct seqfmt *f,
					 bool go, int delay_ms)
{
	struct collector *c = calloc(1, sizeof(*c));
	assert_non_null(c);
	assert_null(live_collector);
	c->r = r;
	c->n = n;
	c->f = *f;
	c->delay_ms = delay_ms;
	c->timeout_ms = (int)alarm_s * 1000 / 2;
	atomic_store(&c->go, go);
	assert_int_equal(pthread_create(&c->th, NULL, collector_main, c), 0);
	live_collector = c;
	return c;
}

static void collector_go(struct collector *c)
{
	atomic_store(&c->go, 1);
}

/* Wait for it to have read everything (true) or to have given up, and free it. */
static bool collector_join(struct collector *c)
{
	atomic_store(&c->go, 1);
	assert_int_equal(pthread_join(c->th, NULL), 0);
	bool ok = c->ok;
	seqrx_free(c->r, c->n);
	free(c->r);
	free(c);
	live_collector = NULL;
	return ok;
}

static void collector_abandon(void)
{
	struct collector *c = live_collector;
	if (!c)
		return;
	atomic_store(&c->stop, 1);
	atomic_store(&c->go, 1);
	pthread_join(c->th, NULL);
	seqrx_free(c->r, c->n);
	free(c->r);
	free(c);
	live_collector = NULL;
}

/* Post message seq; the buffer is overwritten as soon as the call returns. Returns what
 * ms_post (or ms_postv, every third message) returned. */
static int hand_over(struct ms_group *g, const struct seqfmt *f, unsigned seq, unsigned flags,
		     unsigned char *buf)
{
	size_t len = seq_len(f, seq);
	seq_fill(buf, len, seq);
	int ret;
	if (seq % 3 == 1) {
		struct iovec iov[2] = { { buf, len / 2 }, { buf + len / 2, len - len / 2 } };
		ret = ms_postv(g, iov, 2, flags, NULL);
	} else {
		ret = ms_post(g, buf, len, flags, NULL);
	}
	memset(buf, 0xee, len);
	return ret;
}

/* Send message seq synchronously (ms_send, or ms_sendv for odd seq) with results; the buffer
 * is overwritten as soon as the call returns. */
static int send_sync(struct ms_group *g, const struct seqfmt *f, unsigned seq,
		     unsigned char *buf, struct ms_result *res)
{
	size_t len = seq_len(f, seq);
	seq_fill(buf, len, seq);
	int ret;
	if (seq % 2) {
		struct iovec iov[2] = { { buf, len / 2 }, { buf + len / 2, len - len / 2 } };
		ret = ms_sendv(g, iov, 2, 0, res);
	} else {
		ret = ms_send(g, buf, len, 0, res);
	}
	memset(buf, 0xee, len);
	return ret;
}

static void none_extra(const struct net *nt)
{
	for (size_t i = 0; i < nt->n; i++)
		if (nt->ep[i].rx >= 0)
			assert_true(expect_none(&nt->ep[i]));
}

/* ---- offload --------------------------------------------------------------------------------- */

/* What offload refuses and accepts: res, the size limit (a quarter of the ring, rounded up to
 * a power of two), an empty group; ms_ctx_drain. */
static void test_offload_api(void **state)
{
	(void)state;
	assert_int_equal(ms_ctx_drain(NULL), -EINVAL);
	for (uint32_t k = 1; k <= 2; k++) {
		struct opt o = { .flags = MS_CFG_OFFLOAD, .workers = k, .offload_kib = 64 };
		struct ms_ctx *ctx = ctx_new(&o);
		struct ms_group *g, *empty;
		struct net nt;
		net_init(&nt);
		assert_int_equal(net_add(&nt, K_UDP4, 2), 0);
		assert_int_equal(net_add(&nt, K_SEQPACKET, 1), 0);
		assert_int_equal(net_add(&nt, K_TCP4, 1), 0);
		big_rcvbuf(&nt);
		assert_int_equal(ms_group_new(ctx, &g), 0);
		assert_int_equal(ms_group_new(ctx, &empty), 0);
		assert_int_equal(net_join(&nt, g, 0), 0);
		static unsigned char big[32769];
		struct ms_result res[4];
		struct iovec iov[2] = { { big, 100 }, { big + 100, 100 } };
		/* Refused, nothing handed over (and *seq says so): */
		uint64_t seq = 77;
		assert_int_equal(ms_post(NULL, big, 100, 0, NULL), -EINVAL);
		assert_int_equal(ms_post(g, NULL, 100, 0, NULL), -EINVAL);
		assert_int_equal(ms_postv(NULL, iov, 2, 0, NULL), -EINVAL);
		assert_int_equal(ms_postv(g, NULL, 2, 0, NULL), -EINVAL);
		assert_int_equal(ms_postv(g, iov, -1, 0, NULL), -EINVAL);
		assert_int_equal(ms_post(g, big, 16385, 0, &seq), -EMSGSIZE);
		assert_int_equal(seq, 0);
		assert_int_equal(ms_post(g, big, 16385, MS_SEND_DONTWAIT, NULL), -EMSGSIZE);
		iov[1].iov_len = 16385 - 100;
		assert_int_equal(ms_postv(g, iov, 2, 0, NULL), -EMSGSIZE);
		assert_int_equal(ms_post(g, big, 100, 1u << 7, NULL), -EINVAL);
		assert_int_equal(ms_postv(g, iov, 2, 1u << 7, NULL), -EINVAL);
		seq = 77;
		assert_int_equal(ms_post(empty, big, 100, 0, &seq), 0);
		assert_int_equal(seq, 0);
		assert_int_equal(ms_ctx_drain(ctx), 0);
		assert_int_equal(ms_ctx_post_errors(ctx, NULL, 0, NULL), 0);
		struct ms_stats st = stats(ctx);
		assert_int_equal(st.offload_msgs, 0);
		assert_int_equal(st.offload_refused, 0);
		assert_int_equal(st.fanouts, 0);
		assert_int_equal(st.dests_attempted, 0);
		for (size_t e = 0; e < nt.n; e++)
			assert_true(expect_none(&nt.ep[e]));
		/* A quarter of the ring exactly: accepted, numbered 1, and it arrives whole. */
		make_payload(big, 16384, 9);
		assert_int_equal(ms_post(g, big, 16384, 0, &seq), 4);
		assert_int_equal(seq, 1);
		memset(big, 0, 16384);
		assert_int_equal(ms_ctx_drain(ctx), 0);
		make_payload(big, 16384, 9);
		for (size_t e = 0; e < nt.n; e++)
			assert_true(expect_one(&nt.ep[e], big, 16384, WAIT_MS));
		st = stats(ctx);
		assert_int_equal(st.offload_msgs, 1);
		assert_int_equal(st.fanouts, 1);
		assert_int_equal(st.dests_accepted, 4);
		assert_int_equal(st.bytes, 4 * 16384);
		/* ms_send on the context: synchronous, with results, no size limit of the ring's,
		 * not numbered; the next post is 2. */
		make_payload(big, 20000, 11);
		assert_int_equal(ms_send(g, big, 20000, 0, res), 4);
		for (size_t e = 0; e < nt.n; e++) {
			assert_int_equal(res[e].status, 20000);
			assert_true(expect_one(&nt.ep[net_find(&nt, res[e].id)], big, 20000, 0));
		}
		iov[0] = (struct iovec){ big, 30 };
		iov[1] = (struct iovec){ big + 30, 40 };
		assert_int_equal(ms_postv(g, iov, 2, MS_SEND_DONTWAIT, &seq), 4);
		assert_int_equal(seq, 2);
		assert_int_equal(ms_ctx_drain(ctx), 0);
		for (size_t e = 0; e < nt.n; e++)
			assert_true(expect_one(&nt.ep[e], big, 70, WAIT_MS));
		st = stats(ctx);
		assert_int_equal(st.offload_msgs, 2);
		assert_int_equal(st.fanouts, 3);
		assert_int_equal(st.dests_accepted, 12);
		assert_int_equal(st.bytes, 4 * (16384 + 20000 + 70));
		struct ms_post_error pe[2];
		uint64_t lost = 5;
		assert_int_equal(ms_ctx_post_errors(ctx, pe, 2, &lost), 0);
		assert_int_equal(lost, 0);
		ms_group_free(empty);
		ms_group_free(g);
		ms_ctx_free(ctx);

		/* 100 KiB is rounded up to 128: a quarter is 32 KiB. */
		o.offload_kib = 100;
		ctx = ctx_new(&o);
		assert_int_equal(ms_group_new(ctx, &g), 0);
		struct ms_dest d = { .fd = nt.ep[2].tx }; /* the seqpacket pair */
		assert_true(ms_group_add(g, &d) >= 0);
		assert_int_equal(ms_post(g, big, 32769, 0, NULL), -EMSGSIZE);
		make_payload(big, 32768, 10);
		assert_int_equal(ms_post(g, big, 32768, 0, NULL), 1);
		assert_int_equal(ms_ctx_drain(ctx), 0);
		assert_true(expect_one(&nt.ep[2], big, 32768, WAIT_MS));
		ms_group_free(g);
		ms_ctx_free(ctx);
		net_free(&nt);
	}
	/* Without offload (with and without workers), drain has nothing to wait for, ms_post is
	 * refused and sends nothing, and the post log is empty. */
	for (uint32_t k = 0; k <= 2; k += 2) {
		struct opt plain = { .workers = k };
		struct ms_ctx *ctx = ctx_new(&plain);
		struct ms_group *g;
		struct net nt;
		net_init(&nt);
		assert_int_equal(net_add(&nt, K_UDP4, 2), 0);
		assert_int_equal(ms_group_new(ctx, &g), 0);
		assert_int_equal(net_join(&nt, g, 0), 0);
		unsigned char msg[40];
		struct iovec iov = { msg, sizeof(msg) };
		uint64_t seq = 77, lost = 5;
		make_payload(msg, sizeof(msg), 3);
		assert_int_equal(ms_post(g, msg, sizeof(msg), 0, &seq), -ENOTSUP);
		assert_int_equal(ms_postv(g, &iov, 1, MS_SEND_DONTWAIT, NULL), -ENOTSUP);
		assert_int_equal(ms_post(g, msg, sizeof(msg), 1u << 7, NULL), -EINVAL);
		assert_int_equal(ms_ctx_drain(ctx), 0);
		struct ms_post_error pe[1];
		assert_int_equal(ms_ctx_post_errors(ctx, pe, 1, &lost), 0);
		assert_int_equal(lost, 0);
		assert_int_equal(ms_ctx_post_errors(NULL, pe, 1, &lost), -EINVAL);
		assert_int_equal(ms_ctx_post_errors(ctx, NULL, 1, &lost), -EINVAL);
		for (size_t e = 0; e < nt.n; e++)
			assert_true(expect_none(&nt.ep[e]));
		struct ms_stats st = stats(ctx);
		assert_int_equal(st.fanouts, 0);
		assert_int_equal(st.offload_msgs, 0);
		ms_group_free(g);
		ms_ctx_free(ctx);
		net_free(&nt);
	}
}

/*
 * Many messages of varying length, each to every destination of a mixed group in order, each
 * exactly once, read by a collector thread while they are handed over; the caller's buffer
 * overwritten after every call. One destination has no receiver (-ECONNREFUSED each time).
 * The counters, live while sending (never going back, never past the end) and exact after
 * ms_ctx_drain.
 */
static void offload_order(uint32_t k, uint32_t flags)
{
	/* (under valgrind with io_uring, few enough that no sender's buffer fills: see
	 * vg_uring) */
	const unsigned M = vg_uring ? 100 : 300;
	const struct seqfmt f = { .base = 16, .spread = 200 };
	struct opt o = { .flags = MS_CFG_OFFLOAD | flags, .workers = k };
	struct ms_ctx *ctx = ctx_new(&o);
	struct ms_group *g;
	struct net nt;
	net_init(&nt);
	add_mix(&nt, 18);
	add_dead_unix(&nt); /* last: 19 destinations, 2 parts with 2 workers */
	big_rcvbuf(&nt);
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	const size_t n = nt.n;
	struct seqrx *r = calloc(n, sizeof(*r));
	assert_non_null(r);
	for (size_t i = 0; i < n; i++)
		seqrx_init(&r[i], &nt.ep[i], 0, nt.ep[i].rx >= 0 ? M : 0);
	struct collector *c = collector_start(r, n, &f, true, 0);

	unsigned char buf[512];
	uint64_t total = 0;
	struct ms_stats prev = stats(ctx);
	for (unsigned s = 0; s < M; s++) {
		assert_int_equal(hand_over(g, &f, s, 0, buf), (int)n);
		total += seq_len(&f, s);
		if (s % 25 == 0) {
			struct ms_stats st = stats(ctx);
			assert_true(st.fanouts >= prev.fanouts && st.fanouts <= M);
			assert_true(st.dests_attempted >= prev.dests_attempted);
			assert_true(st.dests_accepted >= prev.dests_accepted);
			assert_true(st.bytes >= prev.bytes);
			assert_true(st.offload_msgs >= prev.offload_msgs && st.offload_msgs <= s + 1);
			prev = st;
			/* A snapshot is consistent: whole fan-outs only. */
			struct ms_snapshot sn = snap(ctx);
			assert_true(sn.stats.fanouts >= prev.fanouts && sn.stats.fanouts <= M);
			assert_int_equal(sn.stats.dests_attempted, sn.stats.fanouts * n);
			assert_int_equal(sn.stats.dests_failed, sn.stats.fanouts);
			assert_int_equal(sn.stats.dests_attempted,
					 sn.stats.dests_accepted + sn.stats.dests_failed);
		}
	}
	assert_int_equal(ms_ctx_drain(ctx), 0);
	struct ms_stats st = stats(ctx);
	struct ms_stats zero = { 0 };
	struct want w = { .fanouts = M, .attempted = (uint64_t)M * n,
			  .accepted = (uint64_t)M * (n - 1), .failed = M, .unreach = M,
			  .bytes = total * (n - 1) };
	check_stats(&zero, &st, &w);
	assert_int_equal(st.offload_msgs, M);
	assert_int_equal(st.offload_waits, 0);
	assert_int_equal(st.offload_refused, 0);
	assert_true(collector_join(c));
	none_extra(&nt);
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
}

static void test_offload_order(void **state)
{
	(void)state;
	net_raise_nofile(1024);
	offload_order(1, 0);
	offload_order(2, 0);
	offload_order(2, MS_CFG_ROTATE | MS_CFG_CONNECT);
	offload_order(3, MS_CFG_ROTATE);
}

/* A seqpacket pair whose sender's buffer holds only a few messages: a blocking send to it
 * stalls until its receiver reads. */
static void make_small_seqpacket(struct net *nt)
{
	assert_int_equal(net_add(nt, K_SEQPACKET, 1), 0);
	int one = 1;
	assert_int_equal(setsockopt(nt->ep[nt->n - 1].tx, SOL_SOCKET, SO_SNDBUF, &one, sizeof(one)),
			 0);
}

/*
 * The library's thread stalled on a receiver that does not read (blocking messages to a group
 * of one seqpacket pair), the ring then filled with messages to a second group of the same
 * context (UDP receivers with room for all of them, which MS_SEND_DONTWAIT cannot make fail):
 * calls with MS_SEND_DONTWAIT are refused (-EAGAIN, offload_refused) and send nothing; a
 * blocking call waits (offload_waits) until a second thread lets the receivers read.
 * Everything handed over then arrives, in order, and nothing refused does.
 */
static void ring_full(uint32_t k)
{
	const struct seqfmt f = { .base = 3000, .spread = 0 };
	struct opt o = { .flags = MS_CFG_OFFLOAD, .workers = k, .offload_kib = 64 };
	struct ms_ctx *ctx = ctx_new(&o);
	struct ms_group *g1, *g2;
	struct net nt;
	net_init(&nt);
	make_small_seqpacket(&nt);
	assert_int_equal(net_add(&nt, K_UDP4, 2), 0);
	assert_int_equal(net_add(&nt, K_UDP4_CONN, 1), 0);
	big_rcvbuf(&nt);
	assert_int_equal(ms_group_new(ctx, &g1), 0);
	assert_int_equal(ms_group_new(ctx, &g2), 0);
	join_range(&nt, g1, 0, 1);
	join_range(&nt, g2, 1, 4);

	unsigned char buf[4096];
	unsigned seq = 0, refused = 0;
	unsigned *want1 = calloc(64, sizeof(unsigned)), *want2 = calloc(20000, sizeof(unsigned));
	unsigned n1 = 0, n2 = 0;
	assert_true(want1 && want2);
	/* The seqpacket pair's sender buffer filled first (by the test itself, with messages of
	 * the same form), so the library's thread blocks on the first message it takes, before it
	 * has freed any room: what fits in the ring after that does not depend on when it ran. */
	for (unsigned j = 0;; j++) {
		assert_true(j < 1000);
		seq_fill(buf, f.base, 50000 + j);
		ssize_t sent = send(nt.ep[0].tx, buf, f.base, MSG_DONTWAIT);
		if (sent < 0) {
			assert_int_equal(errno, EAGAIN);
			break;
		}
		assert_int_equal(sent, (ssize_t)f.base);
		want1[n1++] = 50000 + j;
	}
	const unsigned prefilled = n1;
	for (int i = 0; i < 4; i++) {
		assert_int_equal(hand_over(g1, &f, seq, 0, buf), 1);
		want1[n1++] = seq++;
	}
	/* Fill the ring: this must end in -EAGAIN. */
	for (;;) {
		assert_true(seq < 10000);
		int ret = hand_over(g2, &f, seq, MS_SEND_DONTWAIT, buf);
		if (ret == -EAGAIN) {
			refused++;
			seq++;
			break;
		}
		assert_int_equal(ret, 3);
		want2[n2++] = seq++;
	}
	/* The thread is stuck: the ring stays full. */
	for (int i = 0; i < 5; i++) {
		assert_int_equal(hand_over(g2, &f, seq++, MS_SEND_DONTWAIT, buf), -EAGAIN);
		refused++;
	}
	assert_int_equal(hand_over(g1, &f, seq++, MS_SEND_DONTWAIT, buf), -EAGAIN);
	refused++;
	printf("# %s, %u workers: %u + %u messages of %zu bytes handed over before the ring was "
	       "full\n", ms_backend_name(backend), k, n1 - prefilled, n2, f.base);
	assert_true(n2 >= 8); /* a 64 KiB ring holds more than a few 3000-byte messages */
	struct ms_stats st = stats(ctx);
	assert_int_equal(st.offload_refused, refused);
	assert_int_equal(st.offload_msgs, n1 - prefilled + n2);
	assert_int_equal(st.offload_waits, 0);
	assert_int_equal(st.fanouts, 0);

	/* A blocking call waits for room: a second thread lets the receivers read 300 ms (1 s
	 * under valgrind) after this thread says it is about to call. Then a few more to both
	 * groups, and drain. */
	const unsigned blocking = seq++, more = 6;
	want2[n2++] = blocking;
	for (unsigned i = 0; i < more; i++) {
		if (i & 1)
			want2[n2++] = seq + i;
		else
			want1[n1++] = seq + i;
	}
	struct seqrx *r = calloc(4, sizeof(*r));
	assert_non_null(r);
	for (size_t i = 0; i < 4; i++) {
		seqrx_init(&r[i], &nt.ep[i], 0, 0);
		free(r[i].want);
		unsigned nw = i ? n2 : n1;
		r[i].want = malloc(nw * sizeof(unsigned));
		assert_non_null(r[i].want);
		memcpy(r[i].want, i ? want2 : want1, nw * sizeof(unsigned));
		r[i].nwant = nw;
	}
	struct collector *c = collector_start(r, 4, &f, false, alarm_s > 120 ? 1000 : 300);
	collector_go(c);
	assert_int_equal(hand_over(g2, &f, blocking, 0, buf), 3);
	assert_int_equal(ms_ctx_drain(ctx), 0);
	st = stats(ctx);
	assert_int_equal(st.offload_waits, 1);
	for (unsigned i = 0; i < more; i++)
		assert_int_equal(hand_over(i & 1 ? g2 : g1, &f, seq + i, 0, buf), i & 1 ? 3 : 1);
	assert_int_equal(ms_ctx_drain(ctx), 0);
	assert_true(collector_join(c));
	none_extra(&nt);
	st = stats(ctx);
	struct ms_stats zero = { 0 };
	n1 -= prefilled;
	struct want w = { .fanouts = n1 + n2, .attempted = n1 + 3 * n2, .accepted = n1 + 3 * n2,
			  .bytes = (uint64_t)(n1 + 3 * n2) * f.base };
	check_stats(&zero, &st, &w);
	assert_int_equal(st.offload_msgs, n1 + n2);
	assert_int_equal(st.offload_waits, 1);
	assert_int_equal(st.offload_refused, refused);
	free(want1);
	free(want2);
	ms_group_free(g1);
	ms_group_free(g2);
	ms_ctx_free(ctx);
	net_free(&nt);
}

static void skip_if_vg_uring(void)
{
	if (vg_uring) {
		printf("# valgrind: a library thread blocked in io_uring_enter would keep the reader "
		       "from running: skipped\n");
		skip();
	}
}

static void test_offload_ring_full(void **state)
{
	(void)state;
	skip_if_vg_uring();
	ring_full(1);
	ring_full(2);
}

/*
 * Group changes take effect between messages: a destination added after some messages gets
 * none of them and all later ones; one removed gets everything handed over before its
 * removal; the others everything. ms_group_free with messages queued sends them first. A
 * collector thread reads all along (AF_UNIX receivers hold only a few datagrams).
 */
static void group_changes(uint32_t k)
{
	enum { M1 = 10, M2 = 20, M3 = 30 };
	const struct seqfmt f = { .base = 40, .spread = 50 };
	struct opt o = { .flags = MS_CFG_OFFLOAD, .workers = k };
	struct ms_ctx *ctx = ctx_new(&o);
	struct ms_group *g;
	struct net nt;
	net_init(&nt);
	add_mix(&nt, 17); /* 2 parts with 2 workers, before and after the changes */
	const size_t first_new = nt.n;
	assert_int_equal(net_add(&nt, K_SEQPACKET, 1), 0); /* joined later */
	assert_int_equal(net_add(&nt, K_UDP4, 1), 0);      /* (an address on the shared socket) */
	big_rcvbuf(&nt);
	const size_t removed = 7; /* an address on the shared AF_UNIX socket (a pair: vg_uring) */
	assert_int_equal(nt.ep[removed].kind, vg_uring ? K_UNIX_CONN : K_UNIX);
	assert_int_equal(ms_group_new(ctx, &g), 0);
	join_range(&nt, g, 0, first_new);
	struct seqrx *r = calloc(nt.n, sizeof(*r));
	assert_non_null(r);
	for (size_t i = 0; i < nt.n; i++)
		seqrx_init(&r[i], &nt.ep[i], i >= first_new ? M1 : 0, i == removed ? M2 : M3);
	struct collector *c = collector_start(r, nt.n, &f, true, 0);

	unsigned char buf[256];
	unsigned s = 0;
	for (; s < M1; s++)
		assert_int_equal(hand_over(g, &f, s, 0, buf), 17);
	join_range(&nt, g, first_new, nt.n);
	assert_int_equal(ms_group_size(g), 19);
	for (; s < M2; s++)
		assert_int_equal(hand_over(g, &f, s, 0, buf), 19);
	assert_int_equal(ms_group_remove(g, nt.ep[removed].id), 0);
	assert_int_equal(ms_group_size(g), 18);
	for (; s < M3; s++)
		assert_int_equal(hand_over(g, &f, s, 0, buf), 18);
	ms_group_free(g); /* sends what is still queued first */
	struct ms_stats st = stats(ctx);
	assert_int_equal(st.fanouts, M3);
	assert_int_equal(st.dests_attempted, 17 * M1 + 19 * (M2 - M1) + 18 * (M3 - M2));
	assert_int_equal(st.dests_accepted, st.dests_attempted);
	assert_int_equal(st.offload_msgs, M3);
	assert_true(collector_join(c));
	none_extra(&nt);
	ms_ctx_free(ctx);
	net_free(&nt);
}

static void test_offload_group_changes(void **state)
{
	(void)state;
	group_changes(1);
	group_changes(2);
}

/* ms_group_free with messages still queued (the library's thread is stalled on a receiver
 * that does not read yet) waits for them and sends them all; then ms_ctx_free. */
static void free_queued(uint32_t k)
{
	enum { M = 10 };
	const struct seqfmt f = { .base = 1000, .spread = 0 };
	struct opt o = { .flags = MS_CFG_OFFLOAD, .workers = k };
	struct ms_ctx *ctx = ctx_new(&o);
	struct ms_group *g;
	struct net nt;
	net_init(&nt);
	make_small_seqpacket(&nt);
	assert_int_equal(net_add(&nt, K_UDP4, 1), 0);
	assert_int_equal(net_add(&nt, K_TCP4, 1), 0);
	big_rcvbuf(&nt);
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	unsigned char buf[1024];
	for (unsigned s = 0; s < M; s++)
		assert_int_equal(hand_over(g, &f, s, 0, buf), 3);
	/* The seqpacket sender's buffer cannot hold 10 of them: some are still queued. */
	struct ms_stats st = stats(ctx);
	assert_true(st.fanouts < M);
	struct seqrx *r = calloc(3, sizeof(*r));
	assert_non_null(r);
	for (size_t i = 0; i < 3; i++)
		seqrx_init(&r[i], &nt.ep[i], 0, M);
	struct collector *c = collector_start(r, 3, &f, false, 100);
	collector_go(c); /* reads 100 ms from now: the messages are still queued */
	ms_group_free(g);
	st = stats(ctx);
	assert_int_equal(st.fanouts, M);
	assert_int_equal(st.dests_accepted, 3 * M);
	assert_int_equal(st.bytes, 3 * M * f.base);
	assert_true(collector_join(c));
	none_extra(&nt);
	ms_ctx_free(ctx);
	net_free(&nt);
}

static void test_offload_free_queued(void **state)
{
	(void)state;
	skip_if_vg_uring();
	free_queued(1);
	free_queued(2);
}

#define CHILD_CHECK(c)                                                                    \
	do {                                                                              \
		if (!(c)) {                                                               \
			fprintf(stderr, "child: %s failed (line %d)\n", #c, __LINE__);    \
			_exit(1);                                                         \
		}                                                                         \
	} while (0)

/* A forked child has none of the library's threads: its ms_send sends before returning (the
 * copies are there when it returns), group calls work, drain returns; the parent's context
 * keeps working with its own threads, and the child's sends never reach its counters. */
static void offload_fork(uint32_t k)
{
	const size_t len = 64;
	struct opt o = { .flags = MS_CFG_OFFLOAD, .workers = k };
	struct ms_ctx *ctx = ctx_new(&o);
	struct ms_group *g;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UDP4, 2), 0);
	assert_int_equal(net_add(&nt, K_UNIX_CONN, 1), 0);
	assert_int_equal(net_add(&nt, K_SEQPACKET, 1), 0);
	assert_int_equal(net_add(&nt, K_TCP4, 1), 0);
	big_rcvbuf(&nt);
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	const size_t n = nt.n;
	/* A second group, to an AF_UNIX address without a receiver, for the child's post log. */
	struct ms_group *gdead;
	struct net ndead;
	net_init(&ndead);
	add_dead_unix(&ndead);
	assert_int_equal(ms_group_new(ctx, &gdead), 0);
	assert_int_equal(net_join(&ndead, gdead, 0), 0);
	unsigned char msg[64];
	for (unsigned s = 0; s < 5; s++) {
		make_payload(msg, len, s);
		assert_int_equal(ms_post(g, msg, len, 0, NULL), (int)n);
		assert_int_equal(ms_ctx_drain(ctx), 0);
		for (size_t e = 0; e < n; e++)
			assert_true(expect_one(&nt.ep[e], msg, len, WAIT_MS));
	}
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(60);
		struct ms_stats a = { .size = sizeof(a) }, b = { .size = sizeof(b) };
		CHILD_CHECK(ms_ctx_stats(ctx, &a) == 0);
		for (unsigned s = 100; s < 105; s++) {
			uint64_t seq = 0;
			make_payload(msg, len, s);
			CHILD_CHECK(ms_post(g, msg, len, 0, &seq) == (int)n);
			CHILD_CHECK(seq == s - 100 + 6); /* the parent posted 5 */
			memset(msg, 0, len);
			make_payload(msg, len, s);
			/* Already there: no waiting. */
			for (size_t e = 0; e < n; e++)
				CHILD_CHECK(expect_one(&nt.ep[e], msg, len, 0));
		}
		CHILD_CHECK(ms_ctx_drain(ctx) == 0);
		CHILD_CHECK(ms_ctx_stats(ctx, &b) == 0);
		CHILD_CHECK(b.fanouts - a.fanouts == 5);
		CHILD_CHECK(b.dests_accepted - a.dests_accepted == 5 * n);
		CHILD_CHECK(b.offload_msgs - a.offload_msgs == 5);
		/* What fails is logged here too, before ms_post returns. */
		struct ms_post_error pe[2];
		uint64_t lost = 1, seq = 0;
		CHILD_CHECK(ms_ctx_post_errors(ctx, pe, 2, &lost) == 0 && lost == 0);
		CHILD_CHECK(ms_post(gdead, msg, len, 0, &seq) == 1 && seq == 11);
		CHILD_CHECK(ms_ctx_post_errors(ctx, pe, 2, &lost) == 1 && lost == 0);
		CHILD_CHECK(pe[0].seq == 11 && pe[0].g == gdead && pe[0].id == ndead.ep[0].id &&
			    pe[0].status == -ECONNREFUSED && pe[0].flags == 0);
		ms_group_free(gdead);
		CHILD_CHECK(ms_group_remove(g, nt.ep[0].id) == 0);
		CHILD_CHECK(ms_group_size(g) == n - 1);
		make_payload(msg, len, 105);
		CHILD_CHECK(ms_post(g, msg, len, 0, NULL) == (int)n - 1);
		for (size_t e = 1; e < n; e++)
			CHILD_CHECK(expect_one(&nt.ep[e], msg, len, 0));
		CHILD_CHECK(expect_none(&nt.ep[0]));
		ms_group_free(g);
		ms_ctx_free(ctx);
		_exit(0);
	}
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	/* The child read all it sent: nothing of it went through the parent's threads. */
	sleep_ms(100);
	for (size_t e = 0; e < n; e++) {
		unsigned char x[256];
		ssize_t got;
		while ((got = recv(nt.ep[e].rx, x, sizeof(x), MSG_DONTWAIT)) > 0) {
			long which = -1;
			for (unsigned s = 0; s < 110 && got == (ssize_t)len; s++) {
				make_payload(msg, len, s);
				if (!memcmp(msg, x, len))
					which = s;
			}
			fail_msg("%s endpoint %zu: %zd bytes (message %ld) after the child",
				 kind_name(nt.ep[e].kind), e, got, which);
		}
	}
	/* The parent's group is as it was, and its threads still send. */
	for (unsigned s = 5; s < 10; s++) {
		uint64_t seq = 0;
		make_payload(msg, len, s);
		assert_int_equal(ms_post(g, msg, len, 0, &seq), (int)n);
		assert_int_equal(seq, s + 1);
		assert_int_equal(ms_ctx_drain(ctx), 0);
		for (size_t e = 0; e < n; e++)
			assert_true(expect_one(&nt.ep[e], msg, len, WAIT_MS));
	}
	struct ms_stats st = stats(ctx);
	assert_int_equal(st.fanouts, 10);
	assert_int_equal(st.dests_accepted, 10 * n);
	assert_int_equal(st.offload_msgs, 10);
	/* The child's log entry is not the parent's. */
	struct ms_post_error pe[1];
	assert_int_equal(ms_ctx_post_errors(ctx, pe, 1, NULL), 0);
	ms_group_free(gdead);
	net_free(&ndead);
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
}

static void test_offload_fork(void **state)
{
	(void)state;
	offload_fork(1);
	offload_fork(2);
}

/* Timestamps under offload, taken by the library's threads: every destination stamped, the
 * sample read once the messages have gone (ms_group_ts_collect waits for them). */
static void test_offload_timestamps(void **state)
{
	(void)state;
	if (!have_ts()) {
		printf("# no per-datagram timestamp keys here: skipped\n");
		skip();
	}
	enum { N = 16, M = 3 };
	struct opt o = { .flags = MS_CFG_OFFLOAD, .workers = 2, .ts_sample = 1,
			 .ts_flags = MS_TS_ALL_DESTS };
	struct ms_ctx *ctx = ctx_new(&o);
	struct ms_group *g;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UDP4_CONN, N / 2), 0);
	assert_int_equal(net_add(&nt, K_UDP4, N / 2), 0);
	big_rcvbuf(&nt);
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	unsigned char msg[3][70];
	for (unsigned s = 0; s < M; s++) {
		make_payload(msg[s], sizeof(msg[s]), s);
		assert_int_equal(ms_post(g, msg[s], sizeof(msg[s]), 0, NULL), N);
	}
	/* (each sampled fan-out reads the stamps waiting before it: how many are left for
	 * collect depends on how far the library's thread had gone) */
	assert_true(ms_group_ts_collect(g) >= 0);
	struct ms_ts_dest td[N + 1];
	uint64_t t0 = 0;
	assert_int_equal(ms_group_ts_last(g, td, N + 1, &t0), N);
	assert_true(t0 > 0);
	for (size_t i = 0; i < N; i++) {
		assert_int_equal(td[i].pos, i);
		assert_int_equal(td[i].flags, MS_TS_SCHED | MS_TS_SND);
	}
	for (size_t e = 0; e < N; e++) {
		for (unsigned s = 0; s < M; s++) {
			unsigned char got[128];
			struct pollfd p = { .fd = nt.ep[e].rx, .events = POLLIN };
			assert_int_equal(poll(&p, 1, WAIT_MS), 1);
			assert_int_equal(recv(nt.ep[e].rx, got, sizeof(got), MSG_DONTWAIT),
					 (ssize_t)sizeof(msg[s]));
			assert_memory_equal(got, msg[s], sizeof(msg[s]));
		}
		assert_true(expect_none(&nt.ep[e]));
	}
	struct ms_snapshot sn = snap(ctx);
	assert_int_equal(sn.stats.ts_sampled, M);
	assert_int_equal(sn.stats.ts_requested, M * N);
	assert_int_equal(sn.stats.ts_stamped, M * N);
	assert_int_equal(sn.dest_lag.count, M * N);
	assert_int_equal(sn.first_last.count, M);
	assert_int_equal(sn.stats.fanouts, M);
	assert_int_equal(sn.stats.offload_msgs, M);
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
}

/*
 * ms_send and ms_sendv on an offload context, between posts: each waits for the messages
 * posted before it, returns how many destinations accepted its message, with res (one entry
 * per destination, each id once, its own status), and every receiver gets all messages, posted
 * or sent, in call order, exactly once. Only posted messages reach the post log: one entry per
 * post for the destination without a receiver, numbered 1, 2, 3... in order.
 */
static void offload_sync(uint32_t k)
{
	const unsigned M = vg_uring ? 60 : 200;
	const struct seqfmt f = { .base = 16, .spread = 200 };
	struct opt o = { .flags = MS_CFG_OFFLOAD, .workers = k };
	struct ms_ctx *ctx = ctx_new(&o);
	struct ms_group *g;
	struct net nt;
	net_init(&nt);
	add_mix(&nt, 18);
	add_dead_unix(&nt);
	big_rcvbuf(&nt);
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	const size_t n = nt.n, dead = n - 1;
	struct seqrx *r = calloc(n, sizeof(*r));
	assert_non_null(r);
	for (size_t i = 0; i < n; i++)
		seqrx_init(&r[i], &nt.ep[i], 0, nt.ep[i].rx >= 0 ? M : 0);
	struct collector *c = collector_start(r, n, &f, true, 0);

	unsigned char buf[512];
	struct ms_result res[32];
	uint64_t total = 0, posted = 0;
	for (unsigned s = 0; s < M; s++) {
		total += seq_len(&f, s);
		if (s % 4 != 3) {
			assert_int_equal(hand_over(g, &f, s, 0, buf), (int)n);
			posted++;
			continue;
		}
		memset(res, 0x55, sizeof(res));
		assert_int_equal(send_sync(g, &f, s, buf, res), (int)n - 1);
		bool seen[32] = { false };
		for (size_t i = 0; i < n; i++) {
			long found = net_find(&nt, res[i].id);
			assert_true(found >= 0 && (size_t)found < n);
			size_t e = (size_t)found % n;
			assert_false(seen[e]);
			seen[e] = true;
			assert_int_equal(res[i].status,
					 e == dead ? -ECONNREFUSED : (int)seq_len(&f, s));
		}
		assert_int_equal(ms_group_slow_results(g, NULL, 0), 0); /* no policy */
	}
	assert_int_equal(ms_ctx_drain(ctx), 0);
	assert_true(collector_join(c));
	none_extra(&nt);
	struct ms_stats st = stats(ctx);
	struct ms_stats zero = { 0 };
	struct want w = { .fanouts = M, .attempted = (uint64_t)M * n,
			  .accepted = (uint64_t)M * (n - 1), .failed = M, .unreach = M,
			  .bytes = total * (n - 1) };
	check_stats(&zero, &st, &w);
	assert_int_equal(st.offload_msgs, posted);
	struct ms_post_error *pe = calloc(M + 1, sizeof(*pe));
	assert_non_null(pe);
	uint64_t lost = 9;
	assert_int_equal(ms_ctx_post_errors(ctx, pe, M + 1, &lost), (int)posted);
	assert_int_equal(lost, 0);
	for (uint64_t i = 0; i < posted; i++) {
		assert_int_equal(pe[i].seq, i + 1);
		assert_ptr_equal(pe[i].g, g);
		assert_int_equal(pe[i].id, nt.ep[dead].id);
		assert_int_equal(pe[i].status, -ECONNREFUSED);
		assert_int_equal(pe[i].flags, 0);
	}
	free(pe);
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
}

static void test_offload_sync(void **state)
{
	(void)state;
	net_raise_nofile(1024);
	offload_sync(1);
	offload_sync(2);
}

/* The next datagram at e is msg (more may follow). */
static bool next_datagram(const struct endpoint *e, const void *msg, size_t len)
{
	unsigned char got[2048];
	struct pollfd p = { .fd = e->rx, .events = POLLIN };
	if (poll(&p, 1, WAIT_MS) != 1)
		return false;
	ssize_t r = recv(e->rx, got, sizeof(got), MSG_DONTWAIT | MSG_TRUNC);
	return r == (ssize_t)len && !memcmp(got, msg, len);
}

/* The post log entries of one message, in any order: n pairs (id, status). */
static void expect_logged(const struct ms_post_error *pe, size_t have, uint64_t seq,
			  const struct ms_group *g, const int (*want)[2], size_t n)
{
	size_t found = 0;
	for (size_t i = 0; i < have; i++) {
		if (pe[i].seq != seq)
			continue;
		assert_ptr_equal(pe[i].g, g);
		assert_int_equal(pe[i].flags, 0);
		size_t j = 0;
		while (j < n && want[j][0] != pe[i].id)
			j++;
		if (j == n)
			fail_msg("message %llu: destination %d logged with %d, not expected",
				 (unsigned long long)seq, pe[i].id, pe[i].status);
		assert_int_equal(pe[i].status, want[j][1]);
		found++;
	}
	assert_int_equal(found, n);
}

/*
 * The post log, destination by destination: live receivers get every posted message byte for
 * byte and are never logged; a connected UDP socket whose listener is gone is logged with
 * -ECONNREFUSED for its second message (the first leaves; its ICMP says), a closed descriptor
 * with -EBADF, an AF_UNIX address without a receiver with -ECONNREFUSED every time, each with
 * its post number, group and id; a second group's failures carry that group. The log holds
 * exactly what the counters count as failed for posted messages.
 */
static void offload_log(uint32_t k)
{
	struct opt o = { .flags = MS_CFG_OFFLOAD, .workers = k };
	struct ms_ctx *ctx = ctx_new(&o);
	struct ms_group *g, *g2;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UDP4, 3), 0);      /* 0..2: live */
	assert_int_equal(net_add(&nt, K_UDP4_CONN, 1), 0); /* 3: its listener goes */
	add_dead_unix(&nt);                                /* 4: no receiver */
	assert_int_equal(net_add(&nt, K_UDP4_CONN, 1), 0); /* 5: its descriptor is closed */
	assert_int_equal(net_add(&nt, K_UNIX_CONN, 1), 0); /* 6: live, in g2 */
	add_dead_unix(&nt);                                /* 7: no receiver, in g2 */
	big_rcvbuf(&nt);
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(ms_group_new(ctx, &g2), 0);
	join_range(&nt, g, 0, 5);
	join_range(&nt, g2, 6, 8);
	close(nt.ep[3].rx);
	nt.ep[3].rx = -1;

	unsigned char msg[4][100];
	uint64_t seq;
	for (unsigned m = 0; m < 4; m++)
		make_payload(msg[m], sizeof(msg[m]), 40 + m);
	/* 1 and 2 to g, 3 to g2 */
	assert_int_equal(ms_post(g, msg[0], 100, 0, &seq), 5);
	assert_int_equal(seq, 1);
	assert_int_equal(ms_post(g, msg[1], 100, 0, &seq), 5);
	assert_int_equal(seq, 2);
	assert_int_equal(ms_post(g2, msg[2], 100, 0, &seq), 2);
	assert_int_equal(seq, 3);
	/* 4 to g without the subscriber that lost its listener, with a socket whose descriptor
	 * is closed (the group waits for 1..3 before it changes; nothing opens a descriptor
	 * before message 4 has gone, so the number stays free) */
	assert_int_equal(ms_group_remove(g, nt.ep[3].id), 0);
	join_range(&nt, g, 5, 6);
	close(nt.ep[5].tx);
	nt.ep[5].tx = -1;
	nt.ep[5].own_tx = false;
	assert_int_equal(ms_post(g, msg[3], 100, 0, &seq), 5);
	assert_int_equal(seq, 4);
	memset(msg, 0, sizeof(msg));
	assert_int_equal(ms_ctx_drain(ctx), 0);
	for (unsigned m = 0; m < 4; m++)
		make_payload(msg[m], sizeof(msg[m]), 40 + m);

	for (size_t e = 0; e < 3; e++) {
		assert_true(next_datagram(&nt.ep[e], msg[0], 100));
		assert_true(next_datagram(&nt.ep[e], msg[1], 100));
		assert_true(expect_one(&nt.ep[e], msg[3], 100, WAIT_MS));
	}
	assert_true(expect_one(&nt.ep[6], msg[2], 100, WAIT_MS));
	none_extra(&nt); /* endpoint 5's receiver got nothing: its sender was closed */

	struct ms_post_error pe[16];
	uint64_t lost = 9;
	int got = ms_ctx_post_errors(ctx, pe, 16, &lost);
	for (int i = 0; i < got; i++)
		printf("# logged: message %llu, group %s, id %d, %s, flags %u\n",
		       (unsigned long long)pe[i].seq, pe[i].g == g ? "g" : pe[i].g == g2 ? "g2" : "?",
		       pe[i].id, ms_strerror(pe[i].status), pe[i].flags);
	assert_int_equal(got, 6);
	assert_int_equal(lost, 0);
	const int d3 = nt.ep[3].id, d4 = nt.ep[4].id, d5 = nt.ep[5].id, d7 = nt.ep[7].id;
	const int w1[][2] = { { d4, -ECONNREFUSED } };
	const int w2[][2] = { { d3, -ECONNREFUSED }, { d4, -ECONNREFUSED } };
	const int w3[][2] = { { d7, -ECONNREFUSED } };
	const int w4[][2] = { { d4, -ECONNREFUSED }, { d5, -EBADF } };
	expect_logged(pe, 6, 1, g, w1, 1);
	expect_logged(pe, 6, 2, g, w2, 2);
	expect_logged(pe, 6, 3, g2, w3, 1);
	expect_logged(pe, 6, 4, g, w4, 2);
	for (int i = 1; i < got; i++)
		assert_true(pe[i].seq >= pe[i - 1].seq); /* in the order of the messages */
	/* Read: gone from the log. */
	assert_int_equal(ms_ctx_post_errors(ctx, pe, 16, &lost), 0);
	struct ms_stats st = stats(ctx);
	assert_int_equal(st.fanouts, 4);
	assert_int_equal(st.dests_failed, 6);
	assert_int_equal(st.err_unreach, 5);
	assert_int_equal(st.err_badf, 1);
	assert_int_equal(st.dests_accepted, 4 + 3 + 1 + 3); /* 3 of 1 has no listener yet */
	/* A synchronous send reports in res, not in the log. */
	struct ms_result res[8];
	assert_int_equal(ms_send(g, msg[0], 100, 0, res), 3);
	assert_int_equal(ms_ctx_post_errors(ctx, pe, 16, &lost), 0);
	for (size_t i = 0; i < 5; i++)
		if (res[i].id == d4 || res[i].id == d5)
			assert_int_equal(res[i].status, res[i].id == d4 ? -ECONNREFUSED : -EBADF);
	for (size_t e = 0; e < 3; e++)
		assert_true(expect_one(&nt.ep[e], msg[0], 100, WAIT_MS));
	/* remove the closed descriptor's destination before anything may take its number */
	assert_int_equal(ms_group_remove(g, d5), 0);
	ms_group_free(g);
	ms_group_free(g2);
	ms_ctx_free(ctx);
	net_free(&nt);
}

static void test_offload_log(void **state)
{
	(void)state;
	offload_log(1);
	offload_log(2);
}

/* A full log: MS_POST_LOG_ENTRIES entries kept, the oldest, in order; the rest counted once
 * in lost; reading in pieces; then it takes new entries again. */
static void test_offload_log_full(void **state)
{
	(void)state;
	const unsigned extra = 10, total = MS_POST_LOG_ENTRIES + extra;
	struct opt o = { .flags = MS_CFG_OFFLOAD };
	struct ms_ctx *ctx = ctx_new(&o);
	struct ms_group *g;
	struct net nt;
	net_init(&nt);
	add_dead_unix(&nt);
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	unsigned char msg[8] = "postlog";
	for (unsigned m = 0; m < total; m++)
		assert_int_equal(ms_post(g, msg, sizeof(msg), 0, NULL), 1);
	assert_int_equal(ms_ctx_drain(ctx), 0);
	struct ms_post_error *pe = calloc(MS_POST_LOG_ENTRIES, sizeof(*pe));
	assert_non_null(pe);
	uint64_t lost = 0, next = 1;
	assert_int_equal(ms_ctx_post_errors(ctx, pe, 1000, &lost), 1000);
	assert_int_equal(lost, extra);
	unsigned have = 1000;
	for (;;) {
		int got = ms_ctx_post_errors(ctx, pe + have, MS_POST_LOG_ENTRIES - have, NULL);
		assert_true(got >= 0);
		if (!got)
			break;
		have += (unsigned)got;
	}
	assert_int_equal(have, MS_POST_LOG_ENTRIES);
	for (unsigned i = 0; i < have; i++, next++) {
		assert_int_equal(pe[i].seq, next);
		assert_int_equal(pe[i].id, nt.ep[0].id);
		assert_int_equal(pe[i].status, -ECONNREFUSED);
	}
	assert_int_equal(ms_ctx_post_errors(ctx, pe, 1, &lost), 0);
	assert_int_equal(lost, 0);
	uint64_t seq;
	assert_int_equal(ms_post(g, msg, sizeof(msg), 0, &seq), 1);
	assert_int_equal(seq, total + 1);
	assert_int_equal(ms_ctx_drain(ctx), 0);
	assert_int_equal(ms_ctx_post_errors(ctx, pe, 2, &lost), 1);
	assert_int_equal(pe[0].seq, total + 1);
	assert_int_equal(lost, 0);
	struct ms_stats st = stats(ctx);
	assert_int_equal(st.dests_failed, total + 1);
	assert_int_equal(st.offload_msgs, total + 1);
	free(pe);
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
}

/* ---- cpus ------------------------------------------------------------------------------------ */

#define MAXT 512

struct tasks {
	size_t n;
	pid_t tid[MAXT];
};

static void list_tasks(struct tasks *t)
{
	DIR *d = opendir("/proc/self/task");
	assert_non_null(d);
	t->n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.' && t->n < MAXT)
			t->tid[t->n++] = (pid_t)atoi(de->d_name);
	closedir(d);
}

static bool has_task(const struct tasks *t, pid_t tid)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->tid[i] == tid)
			return true;
	return false;
}

/* A thread's Cpus_allowed_list ("" when it is gone); its name in comm. */
static void task_cpus(pid_t tid, char *out, size_t len, char *comm, size_t clen)
{
	char path[64], line[256];
	out[0] = comm[0] = 0;
	snprintf(path, sizeof(path), "/proc/self/task/%d/status", (int)tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "Cpus_allowed_list:", 18))
			snprintf(out, len, "%s", line + 18 + strspn(line + 18, " \t"));
		if (!strncmp(line, "Name:", 5))
			snprintf(comm, clen, "%s", line + 5 + strspn(line + 5, " \t"));
	}
	fclose(f);
	out[strcspn(out, "\n")] = 0;
	comm[strcspn(comm, "\n")] = 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * ms_ctx_new with o starts exactly the threads `want` lists (their Cpus_allowed_list, sorted;
 * "*" = unpinned, i.e. the main thread's list); the main thread's affinity is unchanged; a
 * fan-out works; after ms_ctx_free the threads are gone.
 */
static void check_threads(const struct opt *o, const char *const *want, size_t nwant)
{
	pid_t me = (pid_t)syscall(SYS_gettid);
	char mine[256], comm[64];
	task_cpus(me, mine, sizeof(mine), comm, sizeof(comm));
	struct tasks *before = malloc(sizeof(*before)), *after = malloc(sizeof(*after));
	assert_true(before && after);
	list_tasks(before);
	struct ms_ctx *ctx = ctx_new(o);
	/* The pinning may be done by each thread as it starts: wait for it (bounded). */
	char got[8][256];
	size_t ngot = 0;
	pid_t new_tid[8];
	for (int tries = 0;; tries++) {
		list_tasks(after);
		ngot = 0;
		for (size_t i = 0; i < after->n; i++) {
			if (has_task(before, after->tid[i]))
				continue;
			char cpus[256];
			task_cpus(after->tid[i], cpus, sizeof(cpus), comm, sizeof(comm));
			if (!strncmp(comm, "iou-", 4) || !cpus[0])
				continue; /* io_uring's own workers, or gone */
			assert_true(ngot < 8);
			new_tid[ngot] = after->tid[i];
			snprintf(got[ngot++], sizeof(got[0]), "%s", strcmp(cpus, mine) ? cpus : "*");
		}
		size_t unpinned_want = 0;
		for (size_t i = 0; i < nwant; i++)
			unpinned_want += !strcmp(want[i], "*");
		size_t unpinned_got = 0;
		for (size_t i = 0; i < ngot; i++)
			unpinned_got += !strcmp(got[i], "*");
		if (ngot == nwant && unpinned_got == unpinned_want)
			break;
		if (tries == 2000)
			break;
		sleep_ms(1);
	}
	const char *gp[8];
	for (size_t i = 0; i < ngot; i++)
		gp[i] = got[i];
	qsort(gp, ngot, sizeof(gp[0]), cmp_str);
	char glist[512] = "", wlist[512] = "";
	for (size_t i = 0; i < ngot; i++)
		snprintf(glist + strlen(glist), sizeof(glist) - strlen(glist), " [%s]", gp[i]);
	for (size_t i = 0; i < nwant; i++)
		snprintf(wlist + strlen(wlist), sizeof(wlist) - strlen(wlist), " [%s]", want[i]);
	printf("# workers %u%s, ncpus %u: library threads' CPUs%s\n", o->workers,
	       o->flags & MS_CFG_OFFLOAD ? " (offload)" : "", o->ncpus, glist);
	if (ngot != nwant || strcmp(glist, wlist))
		fail_msg("library threads' CPUs:%s, expected%s", glist, wlist);
	/* The main thread is left alone. */
	char now[256];
	task_cpus(me, now, sizeof(now), comm, sizeof(comm));
	assert_string_equal(now, mine);

	/* It sends. */
	struct ms_group *g;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UDP4, 20), 0);
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	unsigned char msg[32];
	make_payload(msg, sizeof(msg), 5);
	if (o->flags & MS_CFG_OFFLOAD)
		assert_int_equal(ms_post(g, msg, sizeof(msg), 0, NULL), 20);
	else
		assert_int_equal(ms_send(g, msg, sizeof(msg), 0, NULL), 20);
	assert_int_equal(ms_ctx_drain(ctx), 0);
	for (size_t e = 0; e < nt.n; e++)
		assert_true(expect_one(&nt.ep[e], msg, sizeof(msg), WAIT_MS));
	ms_group_free(g);
	net_free(&nt);

	ms_ctx_free(ctx);
	/* Joined: gone (a joined thread's /proc entry can outlive the join by a moment). */
	for (size_t i = 0; i < ngot; i++) {
		int tries = 0;
		char cpus[256];
		for (;; tries++) {
			task_cpus(new_tid[i], cpus, sizeof(cpus), comm, sizeof(comm));
			if (!cpus[0] || tries == 2000)
				break;
			sleep_ms(1);
		}
		if (cpus[0])
			fail_msg("library thread %d still there after ms_ctx_free", (int)new_tid[i]);
	}
	free(before);
	free(after);
}

static void test_cpus_affinity(void **state)
{
	(void)state;
	static const int cpu0[1] = { 0 }, cpu10[2] = { 1, 0 };
	const char *const w0[] = { "0" }, *const w0u[] = { "*", "0" }, *const w01[] = { "0", "1" },
			  *const wu[] = { "*" };
	struct opt o = { .workers = 2, .cpus = cpu0, .ncpus = 1 };
	check_threads(&o, w0, 1);
	o = (struct opt){ .flags = MS_CFG_OFFLOAD, .cpus = cpu0, .ncpus = 1 };
	check_threads(&o, w0, 1);
	o = (struct opt){ .flags = MS_CFG_OFFLOAD, .workers = 2, .cpus = cpu0, .ncpus = 1 };
	check_threads(&o, w0u, 2);
	o = (struct opt){ .workers = 2 }; /* no cpus: inherited */
	check_threads(&o, wu, 1);
	o = (struct opt){ .workers = 1 };
	check_threads(&o, NULL, 0);
	if (have_cpus_0_and_1()) {
		o = (struct opt){ .workers = 3, .cpus = cpu10, .ncpus = 2 };
		check_threads(&o, w01, 2);
	}
}

/* CPUs the process may not run on, and every limit of the new fields; no thread is left behind
 * by a refused ms_ctx_new. */
static void test_config(void **state)
{
	(void)state;
	cpu_set_t *set = CPU_ALLOC(4096);
	size_t setsz = CPU_ALLOC_SIZE(4096);
	CPU_ZERO_S(setsz, set);
	assert_int_equal(sched_getaffinity(0, setsz, set), 0);
	assert_false(CPU_ISSET_S(4095, setsz, set));
	CPU_FREE(set);
	struct tasks *t0 = malloc(sizeof(*t0)), *t1 = malloc(sizeof(*t1));
	assert_true(t0 && t1);
	list_tasks(t0);

	static const int c4095[1] = { 4095 }, cneg[1] = { -1 }, c0_4095[2] = { 0, 4095 },
			 zeros[65] = { 0 };
	static const struct {
		struct opt o;
		int err;
	} cases[] = {
		{ { .workers = 2, .cpus = c4095, .ncpus = 1 }, -EINVAL },
		{ { .workers = 2, .cpus = cneg, .ncpus = 1 }, -EINVAL },
		{ { .workers = 3, .cpus = c0_4095, .ncpus = 2 }, -EINVAL },
		{ { .flags = MS_CFG_OFFLOAD, .cpus = c4095, .ncpus = 1 }, -EINVAL },
		{ { .workers = 65 }, -EINVAL },
		{ { .workers = 1000000 }, -EINVAL },
		{ { .offload_kib = 64 }, -EINVAL },                          /* without offload */
		{ { .workers = 2, .offload_kib = 4096 }, -EINVAL },
		{ { .flags = MS_CFG_OFFLOAD, .offload_kib = 63 }, -EINVAL },
		{ { .flags = MS_CFG_OFFLOAD, .offload_kib = 1048577 }, -EINVAL },
		{ { .flags = MS_CFG_OFFLOAD, .offload_kib = UINT32_MAX }, -EINVAL },
		{ { .cpus = zeros, .ncpus = 1 }, -EINVAL },                  /* no library thread */
		{ { .workers = 1, .cpus = zeros, .ncpus = 1 }, -EINVAL },
		{ { .workers = 2, .cpus = zeros, .ncpus = 2 }, -EINVAL },    /* one thread */
		{ { .workers = 4, .cpus = zeros, .ncpus = 4 }, -EINVAL },    /* three */
		{ { .flags = MS_CFG_OFFLOAD, .cpus = zeros, .ncpus = 2 }, -EINVAL },
		{ { .flags = MS_CFG_OFFLOAD, .workers = 2, .cpus = zeros, .ncpus = 3 }, -EINVAL },
		{ { .flags = MS_CFG_OFFLOAD, .workers = 64, .cpus = zeros, .ncpus = 65 }, -EINVAL },
		{ { .workers = 2, .ncpus = 1 }, -EINVAL },                   /* cpus NULL */
		{ { .spin_us = 1000001 }, -EINVAL },
		{ { .workers = 2, .spin_us = UINT32_MAX }, -EINVAL },
		/* Fields of library threads without any (fields that only make sense together): */
		{ { .spin_us = 1 }, -EINVAL },
		{ { .workers = 1, .spin_us = 1000000 }, -EINVAL },
		{ { .cpus = zeros, .ncpus = 0 }, -EINVAL },                  /* cpus without ncpus */
		{ { .workers = 2, .cpus = zeros, .ncpus = 0 }, -EINVAL },
		/* Accepted: */
		{ { .workers = 64 }, 0 },
		{ { .workers = 1 }, 0 },
		{ { .flags = MS_CFG_OFFLOAD, .offload_kib = 64 }, 0 },
		{ { .flags = MS_CFG_OFFLOAD, .offload_kib = 65 }, 0 },
		{ { .flags = MS_CFG_OFFLOAD, .workers = 2, .cpus = zeros, .ncpus = 2 }, 0 },
		{ { .workers = 4, .cpus = zeros, .ncpus = 3 }, 0 },
		{ { .workers = 2, .spin_us = 1 }, 0 },
		{ { .workers = 2, .spin_us = 1000000 }, 0 },
		{ { .flags = MS_CFG_OFFLOAD, .spin_us = 1 }, 0 },
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct ms_ctx *ctx;
		int err = ctx_try(&ctx, &cases[c].o);
		if (err != cases[c].err)
			fail_msg("case %zu (workers %u, flags %#x, offload_kib %u, ncpus %u, spin_us "
				 "%u): %d (%s), expected %d", c, cases[c].o.workers,
				 cases[c].o.flags, cases[c].o.offload_kib, cases[c].o.ncpus,
				 cases[c].o.spin_us, err, ms_strerror(err), cases[c].err);
		if (!err) {
			assert_non_null(ctx);
			assert_int_equal(ms_ctx_drain(ctx), 0);
			ms_ctx_free(ctx);
		}
	}

	/* No size shorter than the struct is taken (the shorter layouts were never released),
	 * whatever lies past it. */
	struct {
		struct ms_config cfg;
		uint64_t tail[2];
	} big;
	memset(&big, 0, sizeof(big));
	big.cfg.backend = backend;
	big.cfg.flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV;
	struct ms_ctx *ctx;
	for (uint32_t size = 0; size < sizeof(struct ms_config); size++) {
		big.cfg.size = size;
		assert_int_equal(ms_ctx_new(&ctx, &big.cfg), -EINVAL);
	}
	/* A larger struct: a zero tail is fine, a non-zero one is not. */
	big.cfg.workers = 2;
	big.cfg.size = sizeof(big);
	assert_int_equal(ms_ctx_new(&ctx, &big.cfg), 0);
	ms_ctx_free(ctx);
	big.tail[1] = 1;
	assert_int_equal(ms_ctx_new(&ctx, &big.cfg), -EINVAL);

	/* Nothing refused left a thread behind (joined threads can linger a moment). */
	for (int tries = 0;; tries++) {
		list_tasks(t1);
		if (t1->n <= t0->n || tries == 2000)
			break;
		sleep_ms(1);
	}
	assert_int_equal(t1->n, t0->n);
	free(t0);
	free(t1);
}

/* ---- the post log and a slow-consumer policy ---------------------------------------------- */

static void recv_all(int fd)
{
	char buf[2048];
	while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
		;
}

/* Posted messages to a group whose policy queues for a stalled seqpacket receiver (never
 * read) and then removes it: the post log carries the policy's flags for each message, as the
 * group's record (ms_group_slow_results) has them, including an empty message queued, whose
 * status is its whole length (0) and which only the flags say was not sent. */
static void test_offload_log_slow(void **state)
{
	(void)state;
	enum { L = 500 };
	struct opt o = { .flags = MS_CFG_OFFLOAD };
	struct ms_ctx *ctx = ctx_new(&o);
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	struct ms_slow_config sc = { .size = sizeof(sc), .policy = MS_SLOW_QUEUE,
				     .overflow = MS_SLOW_DISCONNECT, .queue_limit = 3 * (L + 4) };
	assert_int_equal(ms_group_set_slow(g, &sc), 0);
	int st[2], ok[2], small = 16384;
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, st), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ok), 0);
	assert_int_equal(setsockopt(st[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	struct ms_dest ds = { .fd = st[0] }, dk = { .fd = ok[0] };
	int sid = ms_group_add(g, &ds), kid = ms_group_add(g, &dk);
	assert_true(sid >= 0 && kid >= 0);
	static char m[L];
	memset(m, 'p', sizeof(m));
	struct ms_post_error pe[8];
	struct ms_slow_result sr[2];
	uint64_t lost, seq = 0;
	int got = 0;
	/* Fill the stalled receiver: no log entry while it takes every message. */
	for (int i = 0; i < 10000 && !got; i++) {
		assert_int_equal(ms_post(g, m, L, 0, &seq), 2);
		assert_int_equal(ms_ctx_drain(ctx), 0);
		got = ms_ctx_post_errors(ctx, pe, 8, &lost);
		if (!got)
			assert_int_equal(ms_group_slow_results(g, sr, 2), 0);
		recv_all(ok[1]);
	}
	assert_int_equal(got, 1);
	assert_int_equal(lost, 0);
	assert_true(pe[0].seq == seq && pe[0].g == g && pe[0].id == sid);
	assert_int_equal(pe[0].status, 0);
	assert_int_equal(pe[0].flags, MS_RES_QUEUED);
	/* The record of the last message sent says the same. */
	assert_int_equal(ms_group_slow_results(g, sr, 2), 1);
	assert_true(sr[0].id == sid && sr[0].status == 0 && sr[0].flags == MS_RES_QUEUED);
	assert_int_equal(sr[0].backlog, L);
	/* An empty message (queued behind: status 0 == its length), two more, then one that no
	 * longer fits: removed. Then one to the healthy receiver alone: no entry. */
	uint64_t first = seq + 1;
	assert_int_equal(ms_post(g, "", 0, 0, NULL), 2);
	assert_int_equal(ms_post(g, m, L, 0, NULL), 2);
	assert_int_equal(ms_post(g, m, L, 0, NULL), 2);
	assert_int_equal(ms_ctx_drain(ctx), 0);
	assert_int_equal(ms_post(g, m, L, 0, &seq), 1);
	assert_int_equal(ms_ctx_drain(ctx), 0);
	assert_int_equal(seq, first + 3);
	assert_int_equal(ms_ctx_post_errors(ctx, pe, 8, &lost), 3);
	assert_int_equal(lost, 0);
	const uint32_t want_flags[3] = { MS_RES_QUEUED, MS_RES_QUEUED, MS_RES_REMOVED };
	const int want_status[3] = { 0, 0, -EAGAIN };
	for (int i = 0; i < 3; i++) {
		assert_int_equal(pe[i].seq, first + (uint64_t)i);
		assert_ptr_equal(pe[i].g, g);
		assert_int_equal(pe[i].id, sid);
		assert_int_equal(pe[i].status, want_status[i]);
		assert_int_equal(pe[i].flags, want_flags[i]);
	}
	assert_int_equal(ms_group_slow_results(g, sr, 2), 0); /* the last message's: nothing */
	assert_int_equal(ms_group_size(g), 1);
	struct ms_stats s = stats(ctx);
	assert_int_equal(s.slow_queued, 3);
	assert_int_equal(s.slow_removed, 1);
	assert_int_equal(s.backlog_discarded, 2 * L);
	ms_group_free(g);
	ms_ctx_free(ctx);
	close(st[0]), close(st[1]), close(ok[0]), close(ok[1]);
}

/* ---- main --------------------------------------------------------------------------------- */

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = "workers: a test blocked (alarm): failing\n";
	(void)!write(2, m, sizeof(m) - 1);
	_exit(1);
}

static int setup(void **state)
{
	(void)state;
	alarm(alarm_s);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	alarm(0);
	collector_abandon();
	unpin_main();
	return 0;
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(int argc, char **argv)
{
	/* Before any socket: a loopback of its own, where no other test's datagram can reach
	 * a receiver on an ephemeral port (net.c). */
	net_private_netns("workers");
	backend = net_backend_arg(argc, argv, (struct ms_config){ 0 }, NULL, 0);
	/* valgrind runs one thread at a time, far slower. */
	const char *pre = getenv("LD_PRELOAD");
	if (pre && strstr(pre, "valgrind")) {
		alarm_s = 1200;
		vg_uring = backend == MS_BACKEND_IO_URING;
	}
	/* WORKERS_TEST=pattern runs only the matching tests (for debugging one). */
	if (getenv("WORKERS_TEST"))
		cmocka_set_test_filter(getenv("WORKERS_TEST"));
	signal(SIGALRM, on_alarm);
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		T(test_workers_mixed),
		T(test_workers_64),
		T(test_workers_failures),
		T(test_workers_dontwait_full),
		T(test_workers_connect),
		T(test_workers_split),
		T(test_workers_timestamps),
		T(test_offload_api),
		T(test_offload_order),
		T(test_offload_ring_full),
		T(test_offload_group_changes),
		T(test_offload_free_queued),
		T(test_offload_fork),
		T(test_offload_timestamps),
		T(test_offload_sync),
		T(test_offload_log),
		T(test_offload_log_full),
		T(test_offload_log_slow),
		T(test_cpus_affinity),
		T(test_config),
	};
	return cmocka_run_group_tests_name(argv[1], tests, NULL, NULL);
}
