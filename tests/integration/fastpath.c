/* SPDX-License-Identifier: MIT */
/*
 * Fast-path options on real sockets, once per backend: `fastpath BACKEND`.
 *
 * - MS_CFG_ROTATE: every destination is a different loopback address (127.0.0.1, .2, ...) on
 *   one port, and ONE receiving socket bound to that port on all addresses reads them all, with
 *   IP_PKTINFO saying which address each datagram was sent to. The sending thread is pinned to
 *   one CPU, so loopback delivers in send order, and the arrival order is the send order. For
 *   every call the test checks that the order is exactly the group order started one
 *   destination later than the call before (the group order is what res[] reports), with one
 *   unconnected socket, with one connected socket per destination, and with a mix of both; then
 *   that over 10,000 calls every destination's mean position is (N - 1) / 2, the issue's
 *   fairness figure. Group changes between calls, streams, and timestamps (the sample's first
 *   entry is the destination sent first) with rotation too.
 * - Fire and forget (io_uring with MS_SEND_DONTWAIT on datagram sockets: only failures
 *   complete): one io_uring_enter per fan-out, every status the message length, every copy
 *   there byte for byte; a full receiver's -EAGAIN reported for it alone, exactly, while the
 *   others succeed. The other backends run the same checks with their own system-call counts.
 * - MS_CFG_MLOCK: the process's locked memory (VmLck) grows by at least the group's arrays,
 *   and not at all without the flag.
 * - MS_CFG_CONNECT: the library's own connected sockets, their options and source address
 *   checked on the sockets and on arrival (the TOS byte), closed on removal; a port that
 *   cannot be shared refused; a subscriber without a listener reported alone.
 * - Zero copy (io_uring, ms_config.zc_min; off at 0, the default): on loopback the kernel copies, says so, and the
 *   ring turns zero copy off after its first such fan-out, every copy byte for byte through
 *   both buffers, an AF_UNIX destination in the same group never sent with it; into a veth
 *   with a large MTU whose peer is down (a namespace of the test's own) the kernel takes the
 *   pages, and zero copy stays on. Other backends never use it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "multisend.h"
#include "net.h"

static enum ms_backend backend;

static struct ms_ctx *new_ctx(uint32_t flags, uint32_t ts_sample, uint32_t ts_flags)
{
	struct ms_config cfg = { .size = sizeof(cfg),
				 .backend = backend,
				 .flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV | flags,
				 .ts_sample = ts_sample,
				 .ts_flags = ts_flags };
	struct ms_ctx *ctx = NULL;
	assert_int_equal(ms_ctx_new(&ctx, &cfg), 0);
	return ctx;
}

static struct ms_stats stats(const struct ms_ctx *ctx)
{
	struct ms_stats st = { .size = sizeof(st) };
	assert_int_equal(ms_ctx_stats(ctx, &st), 0);
	return st;
}

/* Loopback delivers in send order only when every send leaves from the same CPU. */
static void pin_to_this_cpu(void)
{
	int cpu = sched_getcpu();
	assert_true(cpu >= 0);
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	assert_int_equal(sched_setaffinity(0, sizeof(set), &set), 0);
}

/* ---- one receiver, many loopback addresses ------------------------------------------------ */

#define MAXD 64

struct rig {
	int rx;                  /* bound to 0.0.0.0:port, IP_PKTINFO on */
	in_port_t port;
	int tx[MAXD];            /* sockets the library sends on (-1: none) */
	int ntx;
	uint32_t addr_of_id[MAXD * 4]; /* destination id -> address index (127.0.0.(1 + k)) */
	int id_of_addr[MAXD];          /* address index -> id, -1 when not in the group */
	unsigned naddr;
};

static struct sockaddr_in lo_addr(const struct rig *r, unsigned k)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = r->port };
	a.sin_addr.s_addr = htonl(0x7f000001u + k);
	return a;
}

static void rig_init(struct rig *r)
{
	memset(r, 0, sizeof(*r));
	r->rx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(r->rx >= 0);
	struct sockaddr_in any = { .sin_family = AF_INET };
	assert_int_equal(bind(r->rx, (struct sockaddr *)&any, sizeof(any)), 0);
	socklen_t l = sizeof(any);
	assert_int_equal(getsockname(r->rx, (struct sockaddr *)&any, &l), 0);
	r->port = any.sin_port;
	int one = 1, big = 4 << 20;
	assert_int_equal(setsockopt(r->rx, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one)), 0);
	(void)setsockopt(r->rx, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
	for (int k = 0; k < MAXD; k++)
		r->id_of_addr[k] = -1;
}

static int rig_socket(struct rig *r)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	r->tx[r->ntx++] = fd;
	return fd;
}

/* Add address k to g: on the unconnected socket fd, or (fd < 0) on a new socket connected to
 * it. */
static int rig_add(struct rig *r, struct ms_group *g, int fd, unsigned k)
{
	struct sockaddr_in a = lo_addr(r, k);
	struct ms_dest d = { .fd = fd, .addr = (struct sockaddr *)&a, .addrlen = sizeof(a) };
	if (fd < 0) {
		d.fd = rig_socket(r);
		assert_int_equal(connect(d.fd, (struct sockaddr *)&a, sizeof(a)), 0);
		d.addr = NULL;
		d.addrlen = 0;
	}
	int id = ms_group_add(g, &d);
	assert_true(id >= 0 && id < MAXD * 4);
	r->addr_of_id[id] = k;
	r->id_of_addr[k] = id;
	if (k >= r->naddr)
		r->naddr = k + 1;
	return id;
}

static void rig_free(struct rig *r)
{
	close(r->rx);
	for (int k = 0; k < r->ntx; k++)
		close(r->tx[k]);
}

/* Read n datagrams; order[i] = the address index the i-th was sent to. Each must carry msg. */
static void rig_recv(const struct rig *r, size_t n, const unsigned char *msg, size_t len,
		     unsigned *order)
{
	for (size_t i = 0; i < n; i++) {
		struct pollfd p = { .fd = r->rx, .events = POLLIN };
		assert_int_equal(poll(&p, 1, 5000), 1);
		unsigned char buf[256];
		union {
			char b[CMSG_SPACE(sizeof(struct in_pktinfo))];
			struct cmsghdr align;
		} ctl;
		struct iovec iov = { buf, sizeof(buf) };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
				    .msg_controllen = sizeof(ctl.b) };
		ssize_t got = recvmsg(r->rx, &m, MSG_DONTWAIT);
		assert_int_equal(got, (ssize_t)len);
		assert_memory_equal(buf, msg, len);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		assert_non_null(c);
		assert_int_equal(c->cmsg_type, IP_PKTINFO);
		struct in_pktinfo pi;
		memcpy(&pi, CMSG_DATA(c), sizeof(pi));
		uint32_t k = ntohl(pi.ipi_addr.s_addr) - 0x7f000001u;
		assert_true(k < r->naddr);
		order[i] = k;
	}
	char extra;
	assert_int_equal(recv(r->rx, &extra, 1, MSG_DONTWAIT), -1);
}

/* One fan-out; checks results and arrival; returns the group position sent first. */
static size_t fan_once(struct rig *r, struct ms_group *g, unsigned call, unsigned flags,
		       struct ms_result *res, unsigned *order)
{
	size_t n = ms_group_size(g);
	unsigned char msg[48];
	make_payload(msg, sizeof(msg), call);
	assert_int_equal(ms_send(g, msg, sizeof(msg), flags, res), (int)n);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(res[i].status, (int)sizeof(msg));
	rig_recv(r, n, msg, sizeof(msg), order);
	/* The arrival order is the group order (res[]) rotated: find where it starts. */
	size_t start = n;
	for (size_t i = 0; i < n; i++)
		if (r->addr_of_id[res[i].id] == order[0])
			start = i;
	assert_true(start < n);
	for (size_t i = 0; i < n; i++) {
		size_t p = (start + i) % n;
		if (r->addr_of_id[res[p].id] != order[i]) {
			print_error("call %u: arrival %zu is address %u, expected group position %zu "
				    "(address %u)\n", call, i, order[i], p, r->addr_of_id[res[p].id]);
			fail();
		}
	}
	return start;
}

/*
 * shape: socket of each address k < n: -1 connected, else index into a few unconnected
 * sockets. Checks every call's order, then the fairness figure.
 */
static void rotate_shape(const int *shape, unsigned n, unsigned calls)
{
	struct rig r;
	rig_init(&r);
	pin_to_this_cpu();
	int shared[4];
	for (int k = 0; k < 4; k++)
		shared[k] = rig_socket(&r);
	struct ms_ctx *ctx = new_ctx(MS_CFG_ROTATE, 0, 0);
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	for (unsigned k = 0; k < n; k++)
		rig_add(&r, g, shape[k] < 0 ? -1 : shared[shape[k]], k);

	struct ms_result res[MAXD];
	unsigned order[MAXD];
	double possum[MAXD] = { 0 };
	size_t prev = 0;
	for (unsigned c = 0; c < calls; c++) {
		size_t start = fan_once(&r, g, c, 0, res, order);
		if (c)
			assert_int_equal(start, (prev + 1) % n); /* one later each call */
		else
			assert_int_equal(start, 0);
		prev = start;
		for (unsigned i = 0; i < n; i++)
			possum[order[i]] += i;
	}
	/* Fairness: each destination's mean position in the send order, against (N - 1) / 2. */
	double want = (n - 1) / 2.0, worst = 0;
	for (unsigned k = 0; k < n; k++) {
		double mean = possum[k] / calls, dev = mean > want ? mean - want : want - mean;
		if (dev > worst)
			worst = dev;
		assert_true(dev <= 0.05 * want);
	}
	printf("# %s: %u destinations, %u calls: mean send positions within %.4f of %.1f\n",
	       ms_backend_name(backend), n, calls, worst, want);
	ms_group_free(g);
	ms_ctx_free(ctx);
	rig_free(&r);
}

static void test_rotate_one_socket(void **state)
{
	(void)state;
	int shape[16] = { 0 };
	rotate_shape(shape, 16, 10000);
}

static void test_rotate_connected(void **state)
{
	(void)state;
	int shape[12];
	for (int k = 0; k < 12; k++)
		shape[k] = -1;
	rotate_shape(shape, 12, 10000);
}

static void test_rotate_mixed(void **state)
{
	(void)state;
	/* Runs of 3, 1 and 4 on three sockets, two connected sockets between them. */
	const int shape[] = { 0, 0, -1, 1, 0, 2, 2, -1, 2, 2 };
	rotate_shape(shape, sizeof(shape) / sizeof(shape[0]), 2000);
}

/* Adds and removes between calls: every destination still gets exactly one copy, and the
 * order is still the group order rotated. */
static void test_rotate_group_changes(void **state)
{
	(void)state;
	struct rig r;
	rig_init(&r);
	pin_to_this_cpu();
	int s0 = rig_socket(&r), s1 = rig_socket(&r);
	struct ms_ctx *ctx = new_ctx(MS_CFG_ROTATE, 0, 0);
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	bool in[MAXD] = { false };
	for (unsigned k = 0; k < 20; k++) {
		rig_add(&r, g, k % 3 == 2 ? -1 : (k % 2 ? s1 : s0), k);
		in[k] = true;
	}
	struct ms_result res[MAXD];
	unsigned order[MAXD];
	srand(7);
	for (unsigned c = 0; c < 600; c++) {
		if (c % 3 == 0) { /* remove one, add one back that is out */
			unsigned k = (unsigned)rand() % 20;
			if (in[k] && ms_group_size(g) > 1) {
				assert_int_equal(ms_group_remove(g, r.id_of_addr[k]), 0);
				r.id_of_addr[k] = -1;
				in[k] = false;
			}
			unsigned a = (unsigned)rand() % 20;
			if (!in[a]) {
				rig_add(&r, g, a % 3 == 2 ? -1 : (a % 2 ? s1 : s0), a);
				in[a] = true;
			}
		}
		size_t n = ms_group_size(g);
		fan_once(&r, g, c, 0, res, order);
		bool seen[MAXD] = { false };
		for (size_t i = 0; i < n; i++) {
			assert_true(in[order[i]]);
			assert_false(seen[order[i]]);
			seen[order[i]] = true;
		}
	}
	ms_group_free(g);
	ms_ctx_free(ctx);
	rig_free(&r);
}

/* Streams with rotation: every receiver gets every message once, in order, byte for byte. */
static void test_rotate_streams(void **state)
{
	(void)state;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_TCP4, 5), 0);
	assert_int_equal(net_add(&nt, K_SEQPACKET, 3), 0);
	struct ms_ctx *ctx = new_ctx(MS_CFG_ROTATE, 0, 0);
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	struct ms_result res[8];
	for (unsigned c = 0; c < 50; c++) {
		unsigned char msg[300];
		make_payload(msg, sizeof(msg), c);
		assert_int_equal(ms_send(g, msg, sizeof(msg), 0, res), 8);
		for (size_t i = 0; i < nt.n; i++)
			assert_true(expect_one(&nt.ep[i], msg, sizeof(msg), 5000));
	}
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
}

/* A sampled fan-out's stamps come in send order: the first entry is the destination sent
 * first, which moves with rotation. */
static void test_rotate_timestamps(void **state)
{
	(void)state;
	struct ms_config probe = { .size = sizeof(probe), .backend = backend, .ts_sample = 1,
				   .flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV };
	struct ms_ctx *pc;
	if (ms_ctx_new(&pc, &probe)) {
		skip(); /* no per-datagram stamp keys on this kernel: tstamp says so too */
	}
	ms_ctx_free(pc);
	struct rig r;
	rig_init(&r);
	pin_to_this_cpu();
	int s0 = rig_socket(&r);
	struct ms_ctx *ctx = new_ctx(MS_CFG_ROTATE, 1, MS_TS_ALL_DESTS);
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	for (unsigned k = 0; k < 6; k++)
		rig_add(&r, g, k < 4 ? s0 : -1, k);
	struct ms_result res[MAXD];
	unsigned order[MAXD];
	size_t starts[8];
	for (unsigned c = 0; c < 8; c++) {
		starts[c] = fan_once(&r, g, c, 0, res, order);
		if (c == 0)
			continue;
		/* The call before is accounted now that this one went out. */
		struct ms_ts_dest d[MAXD];
		assert_int_equal(ms_group_ts_last(g, d, MAXD, NULL), 6);
		for (unsigned i = 0; i < 6; i++)
			assert_int_equal(d[i].pos, (starts[c - 1] + i) % 6);
	}
	ms_group_free(g);
	ms_ctx_free(ctx);
	rig_free(&r);
}

/* ---- fire and forget ------------------------------------------------------------------------ */

/* MS_SEND_DONTWAIT on datagram sockets: every copy arrives and every status is the length; on
 * io_uring one system call per fan-out (only failures complete, and nothing is waited for). */
static void test_dontwait_datagrams(void **state)
{
	(void)state;
	struct rig r;
	rig_init(&r);
	pin_to_this_cpu();
	int s0 = rig_socket(&r);
	struct ms_ctx *ctx = new_ctx(0, 0, 0);
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	const unsigned n = 40;
	for (unsigned k = 0; k < n; k++)
		rig_add(&r, g, k % 4 == 3 ? -1 : s0, k);
	struct ms_result res[MAXD];
	unsigned order[MAXD];
	struct ms_stats before = stats(ctx);
	const unsigned calls = 200;
	for (unsigned c = 0; c < calls; c++)
		fan_once(&r, g, c, MS_SEND_DONTWAIT, res, order);
	struct ms_stats after = stats(ctx);
	assert_int_equal(after.dests_accepted - before.dests_accepted, (uint64_t)calls * n);
	assert_int_equal(after.dests_failed - before.dests_failed, 0);
	assert_int_equal(after.bytes - before.bytes, (uint64_t)calls * n * 48);
	uint64_t sys = after.syscalls - before.syscalls;
	/* loop: one per destination; sendmmsg: one per socket; io_uring: one per fan-out. */
	uint64_t want = backend == MS_BACKEND_LOOP ? n : backend == MS_BACKEND_SENDMMSG ? 1 + n / 4 : 1;
	assert_int_equal(sys, (uint64_t)calls * want);
	printf("# %s: %u datagram destinations with MS_SEND_DONTWAIT: %.1f system calls per "
	       "fan-out\n", ms_backend_name(backend), n, (double)sys / calls);
	if (backend == MS_BACKEND_IO_URING) {
		/* The kernel here has IORING_FEAT_CQE_SKIP (5.17+): the path above was the one
		 * where only failures complete. */
		char line[256];
		assert_true(ms_ctx_describe(ctx, line, sizeof(line)) > 0);
		printf("# %s\n", line);
		assert_non_null(strstr(line, "fire-and-forget"));
	}
	ms_group_free(g);
	ms_ctx_free(ctx);
	rig_free(&r);
}

/* A receiver that stops reading: only its destination fails (-EAGAIN), exactly, counted;
 * the others get every message. AF_UNIX datagrams: the sender sees the receiver's full queue. */
static void test_dontwait_full_receiver(void **state)
{
	(void)state;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UNIX_CONN, 6), 0);
	struct ms_ctx *ctx = new_ctx(0, 0, 0);
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	const size_t stuck = 2; /* this endpoint's receiver is never read */
	struct ms_result res[8];
	unsigned char msg[1000];
	uint64_t again = 0, ok_stuck = 0;
	struct ms_stats before = stats(ctx);
	for (unsigned c = 0; c < 400; c++) {
		make_payload(msg, sizeof(msg), c);
		int acc = ms_send(g, msg, sizeof(msg), MS_SEND_DONTWAIT, res);
		int want_acc = 6;
		for (size_t i = 0; i < 6; i++) {
			long e = net_find(&nt, res[i].id);
			assert_true(e >= 0);
			if ((size_t)e == stuck) {
				if (res[i].status == -EAGAIN) {
					again++;
					want_acc--;
				} else {
					assert_int_equal(res[i].status, (int)sizeof(msg));
					ok_stuck++;
				}
			} else {
				assert_int_equal(res[i].status, (int)sizeof(msg));
				assert_true(expect_one(&nt.ep[e], msg, sizeof(msg), 5000));
			}
		}
		assert_int_equal(acc, want_acc);
	}
	struct ms_stats after = stats(ctx);
	assert_true(again > 0 && ok_stuck > 0); /* it filled up, then refused */
	assert_int_equal(after.dests_failed - before.dests_failed, again);
	assert_int_equal(after.err_again - before.err_again, again);
	assert_int_equal(after.dests_accepted - before.dests_accepted, 400 * 6 - again);
	/* The stuck receiver holds exactly the messages it was said to take. */
	uint64_t held = 0;
	unsigned char buf[2000];
	while (recv(nt.ep[stuck].rx, buf, sizeof(buf), MSG_DONTWAIT) == (ssize_t)sizeof(msg))
		held++;
	assert_int_equal(held, ok_stuck);
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
}

/* ---- MS_CFG_MLOCK ----------------------------------------------------------------------------- */

/* The sanitizers' runtimes make mlock(2) a no-op that succeeds (their shadow memory could not
 * be locked), so VmLck stays 0 there; the calls and their error paths still run. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

/* The process's locked memory, from /proc/self/status (kB). */
static long vmlck_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	assert_non_null(f);
	char line[256];
	long kb = -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmLck: %ld kB", &kb) == 1)
			break;
	fclose(f);
	assert_true(kb >= 0);
	return kb;
}

/* With MS_CFG_MLOCK the group's arrays (and io_uring's rings) are locked as they grow; every
 * destination still gets its one copy. Without it nothing is locked. */
static void test_mlock(void **state)
{
	(void)state;
	const unsigned n = 3000; /* message headers and addresses: 3000 * (64 + 136) bytes */
	long base = vmlck_kb();
	for (int locked = 0; locked < 2; locked++) {
		net_raise_nofile(64);
		int rx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		int tx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		assert_true(rx >= 0 && tx >= 0);
		struct sockaddr_in a = { .sin_family = AF_INET };
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		assert_int_equal(bind(rx, (struct sockaddr *)&a, sizeof(a)), 0);
		socklen_t l = sizeof(a);
		assert_int_equal(getsockname(rx, (struct sockaddr *)&a, &l), 0);
		int big = 8 << 20;
		(void)setsockopt(rx, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
		struct ms_ctx *ctx = new_ctx(locked ? MS_CFG_MLOCK : 0, 0, 0);
		struct ms_group *g;
		assert_int_equal(ms_group_new(ctx, &g), 0);
		/* The same address n times: one receiver counts the copies. */
		struct ms_dest d = { .fd = tx, .addr = (struct sockaddr *)&a, .addrlen = sizeof(a) };
		for (unsigned k = 0; k < n; k++)
			assert_true(ms_group_add(g, &d) >= 0);
		long kb = vmlck_kb() - base;
		printf("# %s, %s: %ld kB locked with %u destinations\n", ms_backend_name(backend),
		       locked ? "MS_CFG_MLOCK" : "no MS_CFG_MLOCK", kb, n);
		if (locked && !SANITIZED)
			assert_true(kb >= (long)(n * (sizeof(struct mmsghdr) + 128) / 1024));
		else
			assert_int_equal(kb, 0);
		unsigned char msg[32];
		make_payload(msg, sizeof(msg), 1);
		assert_int_equal(ms_send(g, msg, sizeof(msg), 0, NULL), (int)n);
		for (unsigned k = 0; k < n; k++) {
			unsigned char buf[64];
			assert_int_equal(recv(rx, buf, sizeof(buf), MSG_DONTWAIT), (ssize_t)sizeof(msg));
			assert_memory_equal(buf, msg, sizeof(msg));
		}
		char c;
		assert_int_equal(recv(rx, &c, 1, MSG_DONTWAIT), -1);
		ms_group_free(g);
		ms_ctx_free(ctx);
		close(rx);
		close(tx);
	}
}

/* ---- MS_CFG_CONNECT --------------------------------------------------------------------------- */

/* The process's open descriptors, as a bitmap of the first 1024. */
static unsigned open_fds(bool *set)
{
	unsigned n = 0;
	for (int fd = 0; fd < 1024; fd++) {
		set[fd] = fcntl(fd, F_GETFD) >= 0;
		n += set[fd];
	}
	return n;
}

static int opt(int fd, int level, int name)
{
	int v = -1;
	socklen_t l = sizeof(v);
	assert_int_equal(getsockopt(fd, level, name, &v, &l), 0);
	return v;
}

/* Every address added on an unconnected socket gets a connected socket of the library's own,
 * made like the caller's (options checked on the library's sockets themselves, and the TOS
 * byte and source address on arrival); each copy arrives once; removing closes it. */
static void test_connect(void **state)
{
	(void)state;
	struct rig r;
	rig_init(&r);
	pin_to_this_cpu();
	int one = 1, tos = 0x28, prio = 5, sndbuf = 300000;
	assert_int_equal(setsockopt(r.rx, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one)), 0);
	int s0 = rig_socket(&r);
	assert_int_equal(setsockopt(s0, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)), 0);
	assert_int_equal(setsockopt(s0, SOL_SOCKET, SO_PRIORITY, &prio, sizeof(prio)), 0);
	assert_int_equal(setsockopt(s0, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);
	/* Bound to 127.0.0.9 and a port, shared with SO_REUSEADDR: the source every copy has. */
	assert_int_equal(setsockopt(s0, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
	struct sockaddr_in src = lo_addr(&r, 8);
	src.sin_port = 0;
	assert_int_equal(bind(s0, (struct sockaddr *)&src, sizeof(src)), 0);
	socklen_t sl = sizeof(src);
	assert_int_equal(getsockname(s0, (struct sockaddr *)&src, &sl), 0);

	bool before[1024], after[1024];
	struct ms_ctx *ctx = new_ctx(MS_CFG_CONNECT, 0, 0);
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	unsigned n0 = open_fds(before); /* (after the context: io_uring's ring is a file) */
	const unsigned n = 6;
	for (unsigned k = 0; k < n; k++)
		rig_add(&r, g, s0, k);
	unsigned n1 = open_fds(after);
	unsigned made = 0;
	for (int fd = 0; fd < 1024; fd++) {
		if (!after[fd] || before[fd])
			continue;
		made++;
		/* The library's socket: connected, and like s0. */
		struct sockaddr_in peer, me;
		socklen_t pl = sizeof(peer), ml = sizeof(me);
		assert_int_equal(getpeername(fd, (struct sockaddr *)&peer, &pl), 0);
		assert_int_equal(getsockname(fd, (struct sockaddr *)&me, &ml), 0);
		assert_int_equal(me.sin_addr.s_addr, src.sin_addr.s_addr);
		assert_int_equal(me.sin_port, src.sin_port);
		assert_int_equal(opt(fd, IPPROTO_IP, IP_TOS), tos);
		assert_int_equal(opt(fd, SOL_SOCKET, SO_PRIORITY), prio);
		assert_int_equal(opt(fd, SOL_SOCKET, SO_SNDBUF), opt(s0, SOL_SOCKET, SO_SNDBUF));
	}
	assert_int_equal(made, n);
	assert_int_equal(n1, n0 + n);

	struct ms_result res[MAXD];
	for (unsigned c = 0; c < 20; c++) {
		unsigned char msg[40];
		make_payload(msg, sizeof(msg), c);
		assert_int_equal(ms_send(g, msg, sizeof(msg), 0, res), (int)n);
		bool seen[MAXD] = { false };
		for (unsigned i = 0; i < n; i++) {
			unsigned char buf[64];
			union {
				char b[CMSG_SPACE(sizeof(struct in_pktinfo)) + CMSG_SPACE(sizeof(int))];
				struct cmsghdr align;
			} ctl;
			struct sockaddr_in from;
			struct iovec iov = { buf, sizeof(buf) };
			struct msghdr m = { .msg_name = &from, .msg_namelen = sizeof(from),
					    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
					    .msg_controllen = sizeof(ctl.b) };
			struct pollfd p = { .fd = r.rx, .events = POLLIN };
			assert_int_equal(poll(&p, 1, 5000), 1);
			assert_int_equal(recvmsg(r.rx, &m, MSG_DONTWAIT), (ssize_t)sizeof(msg));
			assert_memory_equal(buf, msg, sizeof(msg));
			assert_int_equal(from.sin_addr.s_addr, src.sin_addr.s_addr);
			assert_int_equal(from.sin_port, src.sin_port);
			int got_tos = -1;
			unsigned k = MAXD;
			for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
				if (cm->cmsg_type == IP_TOS)
					got_tos = *(unsigned char *)CMSG_DATA(cm);
				if (cm->cmsg_type == IP_PKTINFO) {
					struct in_pktinfo pi;
					memcpy(&pi, CMSG_DATA(cm), sizeof(pi));
					k = ntohl(pi.ipi_addr.s_addr) - 0x7f000001u;
				}
			}
			assert_int_equal(got_tos, tos);
			assert_true(k < n);
			assert_false(seen[k]);
			seen[k] = true;
		}
	}
	/* Removing a destination closes its socket; freeing the group closes the rest. */
	assert_int_equal(ms_group_remove(g, r.id_of_addr[0]), 0);
	assert_int_equal(open_fds(after), n0 + n - 1);
	ms_group_free(g);
	assert_int_equal(open_fds(after), n0);
	ms_ctx_free(ctx);
	rig_free(&r);
}

/* A caller's socket bound to a port without SO_REUSEADDR: the library's sockets cannot share
 * it, and the add says so, changing nothing. An unbound caller's destinations get ports of
 * their own. A subscriber with no listener is reported by its connected socket alone. */
static void test_connect_refusals(void **state)
{
	(void)state;
	struct rig r;
	rig_init(&r);
	int s0 = rig_socket(&r);
	struct sockaddr_in a = lo_addr(&r, 0);
	a.sin_port = 0;
	assert_int_equal(bind(s0, (struct sockaddr *)&a, sizeof(a)), 0);
	bool set[1024];
	struct ms_ctx *ctx = new_ctx(MS_CFG_CONNECT, 0, 0);
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	unsigned n0 = open_fds(set);
	struct sockaddr_in d = lo_addr(&r, 1);
	struct ms_dest dest = { .fd = s0, .addr = (struct sockaddr *)&d, .addrlen = sizeof(d) };
	assert_int_equal(ms_group_add(g, &dest), -EADDRINUSE);
	assert_int_equal(ms_group_size(g), 0);
	assert_int_equal(open_fds(set), n0);

	/* Unbound: fine. One destination has no listener (a port nobody has). */
	int s1 = rig_socket(&r);
	dest.fd = s1;
	int live = ms_group_add(g, &dest);
	assert_true(live >= 0);
	int dead_rx = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in dead = { .sin_family = AF_INET };
	dead.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(dead_rx, (struct sockaddr *)&dead, sizeof(dead)), 0);
	socklen_t dl = sizeof(dead);
	assert_int_equal(getsockname(dead_rx, (struct sockaddr *)&dead, &dl), 0);
	close(dead_rx); /* now nobody listens there */
	struct ms_dest dd = { .fd = s1, .addr = (struct sockaddr *)&dead, .addrlen = sizeof(dead) };
	int gone = ms_group_add(g, &dd);
	assert_true(gone >= 0);
	struct ms_result res[2];
	unsigned char msg[16] = "refused?";
	assert_int_equal(ms_send(g, msg, sizeof(msg), 0, res), 2); /* the ICMP comes after */
	char buf[32];
	struct pollfd p = { .fd = r.rx, .events = POLLIN };
	assert_int_equal(poll(&p, 1, 5000), 1);
	assert_int_equal(recv(r.rx, buf, sizeof(buf), 0), (ssize_t)sizeof(msg));
	assert_int_equal(ms_send(g, msg, sizeof(msg), 0, res), 1);
	for (int i = 0; i < 2; i++)
		assert_int_equal(res[i].status, res[i].id == gone ? -ECONNREFUSED : (int)sizeof(msg));
	ms_group_free(g);
	assert_int_equal(open_fds(set), n0 + 1); /* s1 only */
	ms_ctx_free(ctx);
	rig_free(&r);
}

/* ---- zero copy (io_uring) ------------------------------------------------------------------ */

static struct ms_ctx *new_zc_ctx(uint32_t zc_min)
{
	struct ms_config cfg = { .size = sizeof(cfg), .backend = backend, .zc_min = zc_min,
				 .flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV };
	struct ms_ctx *ctx = NULL;
	assert_int_equal(ms_ctx_new(&ctx, &cfg), 0);
	return ctx;
}

static bool describes(const struct ms_ctx *ctx, const char *what)
{
	char d[512];
	assert_true(ms_ctx_describe(ctx, d, sizeof(d)) > 0);
	return strstr(d, what) != NULL;
}

/* Loopback: the kernel copies each datagram to deliver it, and reports it; the ring stops
 * using zero copy. Every call's copies must arrive whole and exact (the two buffers take
 * turns), the AF_UNIX destination is never sent with zero copy, and below zc_min nothing is. */
static void test_zero_copy_loopback(void **state)
{
	(void)state;
	enum { N = 6, LEN = 6000 };
	struct rig r;
	rig_init(&r);
	int usrv = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0), ucli = socket(AF_UNIX, SOCK_DGRAM, 0);
	struct sockaddr_un ua = { .sun_family = AF_UNIX };
	snprintf(ua.sun_path + 1, sizeof(ua.sun_path) - 1, "ms-zc-%d", (int)getpid());
	socklen_t ulen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(ua.sun_path + 1));
	assert_int_equal(bind(usrv, (struct sockaddr *)&ua, ulen), 0);
	int big = 1 << 20;
	(void)setsockopt(usrv, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));

	struct ms_ctx *ctx = new_zc_ctx(MS_ZC_MIN_DEFAULT); /* the recommended value, set */
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	int tx = rig_socket(&r);
	for (unsigned k = 0; k < N; k++)
		rig_add(&r, g, tx, k);
	struct ms_dest ud = { .fd = ucli, .addr = (struct sockaddr *)&ua, .addrlen = ulen };
	int uid = ms_group_add(g, &ud);
	assert_true(uid >= 0);
	bool io_uring = backend == MS_BACKEND_IO_URING;
	if (io_uring)
		assert_true(describes(ctx, "zero copy from 4096 bytes"));

	static unsigned char msg[LEN], got[LEN + 16];
	struct ms_result res[N + 1];
	struct ms_stats st;
	unsigned calls = 0;
	do { /* until the copies are reported (the first call's, normally) */
		make_payload(msg, LEN, calls);
		assert_int_equal(ms_send(g, msg, LEN, 0, res), N + 1);
		for (unsigned i = 0; i <= N; i++)
			assert_int_equal(res[i].status, LEN);
		memset(msg, 0, LEN); /* the library's copy is what went out */
		make_payload(msg, LEN, calls);
		unsigned order[N];
		for (unsigned i = 0; i < N; i++) {
			struct pollfd p = { .fd = r.rx, .events = POLLIN };
			assert_int_equal(poll(&p, 1, 5000), 1);
			assert_int_equal(recv(r.rx, got, sizeof(got), 0), LEN);
			assert_memory_equal(got, msg, LEN);
		}
		(void)order;
		assert_int_equal(recv(usrv, got, sizeof(got), MSG_DONTWAIT), LEN);
		assert_memory_equal(got, msg, LEN);
		st = stats(ctx);
		calls++;
	} while (io_uring && st.zc_copied < st.zc_sends + (st.zc_sends == 0) && calls < 20);
	if (io_uring) {
		/* Every zero-copy send was to a UDP destination, whole fan-outs of them, and every
		 * one was reported copied; then it is off. */
		assert_true(st.zc_sends >= N);
		assert_int_equal(st.zc_sends % N, 0);
		assert_int_equal(st.zc_copied, st.zc_sends);
		assert_true(describes(ctx, "zero copy off (the kernel copied)"));
	} else {
		assert_int_equal(st.zc_sends, 0);
		assert_int_equal(st.zc_copied, 0);
	}
	uint64_t before = st.zc_sends;
	make_payload(msg, LEN, 99);
	assert_int_equal(ms_send(g, msg, LEN, 0, NULL), N + 1);
	for (unsigned i = 0; i < N; i++) {
		struct pollfd p = { .fd = r.rx, .events = POLLIN };
		assert_int_equal(poll(&p, 1, 5000), 1);
		assert_int_equal(recv(r.rx, got, sizeof(got), 0), LEN);
		assert_memory_equal(got, msg, LEN);
	}
	assert_int_equal(recv(usrv, got, sizeof(got), MSG_DONTWAIT), LEN);
	st = stats(ctx);
	assert_int_equal(st.zc_sends, before);
	assert_int_equal(st.dests_accepted, (uint64_t)(calls + 1) * (N + 1));
	ms_group_free(g);
	ms_ctx_free(ctx);

	/* Below zc_min, and with zc_min 0 (the default: an all-zero config): never. */
	for (int pass = 0; pass < 2; pass++) {
		ctx = new_zc_ctx(pass ? 0 : 8192);
		assert_int_equal(ms_group_new(ctx, &g), 0);
		for (unsigned k = 0; k < N; k++)
			rig_add(&r, g, tx, k);
		assert_int_equal(ms_send(g, msg, LEN, 0, NULL), N);
		for (unsigned i = 0; i < N; i++)
			assert_int_equal(recv(r.rx, got, sizeof(got), 0), LEN);
		assert_int_equal(stats(ctx).zc_sends, 0);
		if (io_uring && pass)
			assert_true(describes(ctx, "zero copy off"));
		ms_group_free(g);
		ms_ctx_free(ctx);
	}
	close(usrv);
	close(ucli);
	rig_free(&r);
}

static int sh(const char *cmd)
{
	int st = system(cmd);
	return st == 0 ? 0 : -1;
}

/* Packets zc0 was given: sent plus dropped, from /proc/net/dev (the calling thread's network
 * namespace; /sys/class/net would show the namespace sysfs was mounted in). */
static uint64_t dev_given(void)
{
	FILE *f = fopen("/proc/net/dev", "r");
	char line[512];
	unsigned long long v[16], given = 0;
	while (f && fgets(line, sizeof(line), f)) {
		char *p = strstr(line, "zc0:");
		if (p && sscanf(p + 4, "%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu",
				&v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9],
				&v[10], &v[11]) == 12)
			given = v[9] + v[11]; /* tx packets, tx drop */
	}
	if (f)
		fclose(f);
	return given;
}

/* A veth in a namespace of the child's own, MTU 65535, its peer down and a permanent neighbour
 * entry: every datagram is handed to the device and dropped there, and the kernel never copies
 * the pages, so zero copy stays on; the device counts what it was given. */
static enum ms_backend zc_backend;
static void child_zero_copy_device(void)
{
	enum { N = 16, LEN = 8192, CALLS = 50 };
	if (unshare(CLONE_NEWNET) ||
	    sh("ip link add zc0 type veth peer name zc1 >/dev/null 2>&1") ||
	    sh("ip link set zc0 mtu 65535 addrgenmode none && ip addr add 10.77.0.1/24 dev zc0 && "
	       "ip link set zc0 up && ip neigh replace 10.77.0.2 lladdr 02:00:00:00:00:02 dev zc0 "
	       "nud permanent")) {
		printf("no private network namespace with a veth (needs root and iproute2): skipped\n");
		fflush(NULL);
		_exit(77);
	}
	struct ms_config cfg = { .size = sizeof(cfg), .backend = zc_backend, .zc_min = 1024,
				 .flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV };
	struct ms_ctx *ctx;
	CHECK_EQ(ms_ctx_new(&ctx, &cfg), 0);
	struct ms_group *g;
	CHECK_EQ(ms_group_new(ctx, &g), 0);
	int tx = socket(AF_INET, SOCK_DGRAM, 0);
	for (unsigned i = 0; i < N; i++) {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)(9000 + i)) };
		a.sin_addr.s_addr = inet_addr("10.77.0.2");
		struct ms_dest d = { .fd = tx, .addr = (struct sockaddr *)&a, .addrlen = sizeof(a) };
		CHECK(ms_group_add(g, &d) >= 0);
	}
	uint64_t given0 = dev_given();
	static unsigned char msg[LEN];
	struct ms_result res[N];
	for (unsigned c = 0; c < CALLS; c++) {
		make_payload(msg, LEN, c);
		CHECK_EQ(ms_send(g, msg, LEN, 0, res), N);
		for (unsigned i = 0; i < N; i++)
			CHECK_EQ(res[i].status, LEN);
	}
	struct ms_stats st = { .size = sizeof(st) };
	CHECK_EQ(ms_ctx_stats(ctx, &st), 0);
	CHECK_EQ(st.dests_accepted, N * CALLS);
	CHECK_EQ(dev_given() - given0, N * CALLS);
	if (zc_backend == MS_BACKEND_IO_URING) {
		/* Zero copy never waits for a buffer, so a fan-out may go plainly; most do not. */
		CHECK_EQ(st.zc_copied, 0);
		CHECK_EQ(st.zc_sends % N, 0);
		CHECK(st.zc_sends >= N * CALLS / 2);
		char d[512];
		ms_ctx_describe(ctx, d, sizeof(d));
		CHECK(strstr(d, "zero copy from 1024 bytes") != NULL);
		printf("# zero copy into a dropping veth: %llu of %u sends, none copied\n",
		       (unsigned long long)st.zc_sends, N * CALLS);
	} else {
		CHECK_EQ(st.zc_sends, 0);
	}
	ms_group_free(g);
	ms_ctx_free(ctx);
}

static void test_zero_copy_device(void **state)
{
	(void)state;
	zc_backend = backend;
	int st = net_run_child(child_zero_copy_device);
	if (st == 77)
		skip();
	assert_int_equal(st, 0);
}

int main(int argc, char **argv)
{
	/* Before any socket: a loopback of its own, where no other test's datagram can reach
	 * a receiver on an ephemeral port (net.c). */
	net_private_netns("fastpath");
	backend = net_backend_arg(argc, argv, (struct ms_config){ 0 }, NULL, 0);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rotate_one_socket),
		cmocka_unit_test(test_rotate_connected),
		cmocka_unit_test(test_rotate_mixed),
		cmocka_unit_test(test_rotate_group_changes),
		cmocka_unit_test(test_rotate_streams),
		cmocka_unit_test(test_rotate_timestamps),
		cmocka_unit_test(test_dontwait_datagrams),
		cmocka_unit_test(test_dontwait_full_receiver),
		cmocka_unit_test(test_mlock),
		cmocka_unit_test(test_connect),
		cmocka_unit_test(test_connect_refusals),
		cmocka_unit_test(test_zero_copy_loopback),
		cmocka_unit_test(test_zero_copy_device),
	};
	return cmocka_run_group_tests_name(argv[1], tests, NULL, NULL);
}
