/* SPDX-License-Identifier: MIT */
/*
 * Every allocation the library makes fails in turn (malloc, calloc and realloc are wrapped at
 * link time for the library's objects and this file). Each failing call must return -ENOMEM
 * and leave its object as it was: the same call then succeeds, and a send reaches exactly the
 * destinations in the group, each once, over real AF_UNIX sockets. Leaks are caught by the
 * ASan and valgrind runs of this suite. The send path itself must allocate nothing, except a
 * slow consumer's backlog, whose failures are tested last.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <cmocka.h>

#include "multisend.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);

static long countdown = -1; /* allocations left before the one that fails; -1: never fail */
static bool fail_all;       /* every allocation fails (checks that a path allocates nothing) */
static long allocations;

static bool should_fail(void)
{
	allocations++;
	if (fail_all)
		return true;
	if (countdown < 0)
		return false;
	return countdown-- == 0;
}

void *__wrap_malloc(size_t n)
{
	return should_fail() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t m)
{
	return should_fail() ? NULL : __real_calloc(n, m);
}

void *__wrap_realloc(void *p, size_t n)
{
	return should_fail() ? NULL : __real_realloc(p, n);
}

enum { NPAIRS = 20, NADDRS = 20, NDEST = NPAIRS + NADDRS };

struct rig {
	int pair[NPAIRS][2]; /* connected AF_UNIX datagram pairs: [0] receives, [1] is the dest */
	int shared;          /* one unconnected sender for the addressed destinations */
	int rx[NADDRS];
	struct sockaddr_un addr[NADDRS];
	socklen_t addrlen[NADDRS];
	int id[NDEST];       /* -1: not in the group */
};

static void rig_open(struct rig *r)
{
	for (int i = 0; i < NPAIRS; i++)
		assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM, 0, r->pair[i]), 0);
	r->shared = socket(AF_UNIX, SOCK_DGRAM, 0);
	assert_true(r->shared >= 0);
	for (int i = 0; i < NADDRS; i++) {
		memset(&r->addr[i], 0, sizeof(r->addr[i]));
		r->addr[i].sun_family = AF_UNIX;
		int n = snprintf(r->addr[i].sun_path + 1, sizeof(r->addr[i].sun_path) - 1,
				 "ms-alloc-%d-%d", getpid(), i);
		r->addrlen[i] = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
		r->rx[i] = socket(AF_UNIX, SOCK_DGRAM, 0);
		assert_int_equal(bind(r->rx[i], (struct sockaddr *)&r->addr[i], r->addrlen[i]), 0);
	}
	for (int i = 0; i < NDEST; i++)
		r->id[i] = -1;
}

static void rig_close(struct rig *r)
{
	for (int i = 0; i < NPAIRS; i++) {
		close(r->pair[i][0]);
		close(r->pair[i][1]);
	}
	for (int i = 0; i < NADDRS; i++)
		close(r->rx[i]);
	close(r->shared);
}

static struct ms_dest dest_of(const struct rig *r, int i)
{
	if (i < NPAIRS)
		return (struct ms_dest){ .fd = r->pair[i][1] };
	i -= NPAIRS;
	return (struct ms_dest){ .fd = r->shared, .addrlen = r->addrlen[i],
				 .addr = (const struct sockaddr *)&r->addr[i] };
}

static int rx_of(const struct rig *r, int i)
{
	return i < NPAIRS ? r->pair[i][0] : r->rx[i - NPAIRS];
}

/* Add destination i, retrying once after an injected failure; the failure must be -ENOMEM and
 * change nothing. Returns how many injected failures it met (0 or 1). */
static int add(struct ms_group *g, struct rig *r, int i)
{
	size_t before = ms_group_size(g);
	struct ms_dest d = dest_of(r, i);
	int id = ms_group_add(g, &d);
	int met = 0;
	if (id == -ENOMEM) {
		met = 1;
		assert_int_equal(ms_group_size(g), before);
		id = ms_group_add(g, &d);
	}
	assert_true(id >= 0);
	assert_int_equal(ms_group_size(g), before + 1);
	r->id[i] = id;
	return met;
}

/* Send one message: exactly the members receive it, once; with every allocation failing. */
static void send_check(struct ms_group *g, struct rig *r, unsigned round)
{
	char msg[32], got[64];
	int len = snprintf(msg, sizeof(msg), "round %u", round);
	struct ms_result res[NDEST];
	size_t members = ms_group_size(g);
	fail_all = true;
	int n = ms_send(g, msg, (size_t)len, 0, res);
	fail_all = false;
	assert_int_equal(n, (int)members);
	for (size_t k = 0; k < members; k++)
		assert_int_equal(res[k].status, len);
	for (int i = 0; i < NDEST; i++) {
		ssize_t got_len = recv(rx_of(r, i), got, sizeof(got), MSG_DONTWAIT);
		if (r->id[i] < 0) {
			assert_true(got_len < 0 && errno == EAGAIN);
			continue;
		}
		assert_int_equal(got_len, len);
		assert_memory_equal(got, msg, (size_t)len);
		assert_true(recv(rx_of(r, i), got, sizeof(got), MSG_DONTWAIT) < 0);
	}
}

/* The whole life of a context with the k-th allocation failing. Returns false once k is past
 * the last allocation (nothing failed). */
static bool life(enum ms_backend b, long k)
{
	struct rig r;
	rig_open(&r);
	countdown = k;
	int met = 0;

	struct ms_config cfg = { .size = sizeof(cfg), .backend = b,
				 .flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV };
	struct ms_ctx *ctx;
	int err = ms_ctx_new(&ctx, &cfg);
	if (err == -ENOMEM) {
		met++;
		err = ms_ctx_new(&ctx, &cfg);
	}
	assert_int_equal(err, 0);
	struct ms_group *g;
	err = ms_group_new(ctx, &g);
	if (err == -ENOMEM) {
		met++;
		err = ms_group_new(ctx, &g);
	}
	assert_int_equal(err, 0);

	/* Interleave the two kinds so buckets, the fd map, ids and per-socket arrays all grow. */
	for (int i = 0; i < NPAIRS; i++) {
		met += add(g, &r, i);
		met += add(g, &r, NPAIRS + i);
	}
	send_check(g, &r, 1);
	for (int i = 0; i < NDEST; i += 3) {
		assert_int_equal(ms_group_remove(g, r.id[i]), 0);
		r.id[i] = -1;
	}
	send_check(g, &r, 2);
	for (int i = 0; i < NDEST; i += 3)
		met += add(g, &r, i);
	struct iovec iov[2] = { { "gather", 6 }, { "ed", 2 } };
	fail_all = true;
	assert_int_equal(ms_sendv(g, iov, 2, 0, NULL), NDEST);
	fail_all = false;
	for (int i = 0; i < NDEST; i++) {
		char got[16];
		assert_int_equal(recv(rx_of(&r, i), got, sizeof(got), MSG_DONTWAIT), 8);
	}
	send_check(g, &r, 3);

	ms_group_free(g);
	ms_ctx_free(ctx);
	rig_close(&r);
	countdown = -1;
	assert_true(met <= 1); /* exactly one allocation was made to fail */
	return met == 1;
}

static void each_allocation_fails(enum ms_backend b)
{
	struct ms_config cfg = { .size = sizeof(cfg), .backend = b,
				 .flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV };
	struct ms_ctx *probe;
	if (ms_ctx_new(&probe, &cfg))
		skip();
	ms_ctx_free(probe);
	long k = 0;
	while (life(b, k))
		k++;
	printf("  %s: %ld allocations failed in turn, each cleanly\n", ms_backend_name(b), k);
	assert_true(k >= 10);
}

static void alloc_loop(void **state)
{
	(void)state;
	each_allocation_fails(MS_BACKEND_LOOP);
}

static void alloc_sendmmsg(void **state)
{
	(void)state;
	each_allocation_fails(MS_BACKEND_SENDMMSG);
}

static void alloc_io_uring(void **state)
{
	(void)state;
	each_allocation_fails(MS_BACKEND_IO_URING);
}

/*
 * The one allocation a send may make: a slow consumer's backlog (MS_SLOW_QUEUE). When it
 * fails, nothing is lost silently and no stream loses its framing: a message the kernel took
 * none of is dropped (the overflow action), one it took part of has its destination removed
 * (the rest cannot be kept), each said in the results and the counters; the bytes the receiver
 * gets are exactly the ones the results report.
 */
static void backlog_fails(enum ms_backend b, size_t len)
{
	struct ms_config cfg = { .size = sizeof(cfg), .backend = b,
				 .flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV };
	struct ms_ctx *ctx;
	struct ms_group *g;
	if (ms_ctx_new(&ctx, &cfg))
		skip();
	assert_int_equal(ms_group_new(ctx, &g), 0);
	struct ms_slow_config slow = { .size = sizeof(slow), .policy = MS_SLOW_QUEUE };
	assert_int_equal(ms_group_set_slow(g, &slow), 0);
	/* Small messages on an AF_UNIX stream (taken whole or not at all), large ones on
	 * loopback TCP with small buffers (taken in part at some point). sv[0] receives. */
	int sv[2], small = 4096;
	if (len <= 4096) {
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	} else {
		int l = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = { .sin_family = AF_INET,
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t al = sizeof(a);
		assert_int_equal(setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
		assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
		assert_int_equal(listen(l, 1), 0);
		assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
		sv[1] = socket(AF_INET, SOCK_STREAM, 0);
		assert_int_equal(connect(sv[1], (struct sockaddr *)&a, sizeof(a)), 0);
		sv[0] = accept(l, NULL, NULL);
		assert_true(sv[0] >= 0);
		close(l);
	}
	assert_int_equal(setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	struct ms_dest d = { .fd = sv[1] };
	assert_true(ms_group_add(g, &d) >= 0);
	/* The same message again and again into a receiver that does not read, with
	 * every allocation failing: full sends, then a drop or a removal. */
	static char msg[8192];
	memset(msg, 'x', sizeof(msg));
	assert_true(len <= sizeof(msg));
	long taken = 0;
	unsigned dropped = 0, removed = 0;
	fail_all = true;
	for (int i = 0; i < 10000 && !removed && dropped < 3; i++) {
		struct ms_result res;
		int n = ms_send(g, msg, len, 0, &res);
		/* The policy's record needs no memory on the send path (reserved by the add). */
		struct ms_slow_result sr = { .id = -1, .flags = ~0u, .backlog = ~0ull };
		int nsr = ms_group_slow_results(g, &sr, 1);
		assert_true(nsr == 0 || nsr == 1);
		if (nsr) {
			assert_int_equal(sr.id, res.id);
			assert_int_equal(sr.status, res.status);
			assert_int_equal(sr.pos, 0);
		}
		uint32_t flags = nsr ? sr.flags : 0;
		if (res.status > 0)
			taken += res.status;
		if (flags & MS_RES_DROPPED) {
			assert_int_equal(res.status, -EAGAIN);
			dropped++;
		} else if (flags & MS_RES_REMOVED) {
			assert_true(res.status > 0 && res.status < (int)len);
			removed++;
		} else {
			assert_int_equal(nsr, 0); /* took it whole: the policy did nothing */
			assert_int_equal(n, 1);
			assert_int_equal(res.status, (int)len);
		}
		if (nsr)
			assert_int_equal(sr.backlog, 0);
	}
	fail_all = false;
	assert_true(dropped + removed > 0);
	struct ms_stats st = { .size = sizeof(st) };
	assert_int_equal(ms_ctx_stats(ctx, &st), 0);
	assert_int_equal(st.slow_dropped, dropped);
	assert_int_equal(st.slow_removed, removed);
	assert_int_equal(st.slow_queued, 0);
	assert_int_equal(st.backlog_bytes + st.backlog_discarded, 0);
	assert_int_equal(ms_group_size(g), removed ? 0 : 1);
	assert_int_equal(ms_group_backlog(g), 0);
	/* The receiver holds exactly what the results said was taken. */
	long got = 0;
	char buf[65536];
	for (;;) { /* TCP may still hold some in the sender's buffer: wait for it */
		ssize_t r = recv(sv[0], buf, sizeof(buf), MSG_DONTWAIT);
		if (r > 0) {
			got += r;
			continue;
		}
		struct pollfd p = { .fd = sv[0], .events = POLLIN };
		if (got >= taken || poll(&p, 1, 5000) != 1)
			break;
	}
	assert_int_equal(got, taken);
	printf("  %s, %zu-byte messages: backlog allocation failing: %ld bytes taken, %u dropped, "
	       "%u removed\n", ms_backend_name(b), len, taken, dropped, removed);
	/* A message split over several of the socket's buffers is taken in part, at some point:
	 * its rest cannot be kept, so its destination goes. */
	if (len > 4096)
		assert_int_equal(removed, 1);
	ms_group_free(g);
	ms_ctx_free(ctx);
	close(sv[0]);
	close(sv[1]);
}

static void backlog_loop(void **state)
{
	(void)state;
	backlog_fails(MS_BACKEND_LOOP, 1000);
	backlog_fails(MS_BACKEND_LOOP, 6000);
}

static void backlog_sendmmsg(void **state)
{
	(void)state;
	backlog_fails(MS_BACKEND_SENDMMSG, 1000);
	backlog_fails(MS_BACKEND_SENDMMSG, 6000);
}

static void backlog_io_uring(void **state)
{
	(void)state;
	backlog_fails(MS_BACKEND_IO_URING, 1000);
	backlog_fails(MS_BACKEND_IO_URING, 6000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(alloc_loop),
		cmocka_unit_test(alloc_sendmmsg),
		cmocka_unit_test(alloc_io_uring),
		cmocka_unit_test(backlog_loop),
		cmocka_unit_test(backlog_sendmmsg),
		cmocka_unit_test(backlog_io_uring),
	};
	return cmocka_run_group_tests_name("alloc", tests, NULL, NULL);
}
