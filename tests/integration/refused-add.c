/* SPDX-License-Identifier: MIT */
/*
 * A refused ms_group_add under MS_CFG_MLOCK leaves the group exactly as it was, and every send
 * after it delivers byte for byte to every destination still in the group: `refused-add
 * BACKEND` (loop, sendmmsg, io_uring).
 *
 * What made it fail (issue 26, item 12): with RLIMIT_MEMLOCK 1 MiB the 2,049th destination of
 * a socket grows its arrays past the limit; realloc moves the destinations' array, then mlock
 * refuses the new block (-ENOMEM); the add is refused, but the prepared message headers and
 * the plan still pointed into the freed old array, and the next send gave -EFAULT to every
 * destination (io_uring), or sent to whatever the freed memory held. It needed realloc to move
 * the block (sometimes, depending on the address space), so it came and went.
 *
 * Here it is made deterministic, at link time (-Wl,--wrap): every realloc moves the block and
 * fills the old one with a poison pattern, kept (not freed) until the round's sends are checked,
 * so a stale pointer reads poison (an address family no socket takes) and never a copy that
 * happens to be right; and mlock fails on demand, as the k-th call from now. For each size at
 * which the arrays grow (4 .. 2048 destinations on one socket, and sockets of their own), and
 * each k until the add gets through: the add is refused with -ENOMEM, the group's size is
 * unchanged, and a send then reaches every member once, byte for byte, and the refused
 * endpoint nothing; then the same add, allowed, succeeds and the next send reaches all. As root
 * the test runs in a network namespace of its own (its loopback up), so that no other process
 * can send to its thousands of receivers on 127.0.0.1.
 */
#include <errno.h>
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#include "multisend.h"
#include "net.h"

void *__real_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n);
int __real_mlock(const void *p, size_t n);
int __wrap_mlock(const void *p, size_t n);

/* ---- the faults ---------------------------------------------------------------------------- */

#define GRAVE_MAX 4096
static void *grave[GRAVE_MAX]; /* old blocks realloc "freed": poisoned, freed by bury() */
static size_t ngrave;
static long mlock_countdown = -1; /* mlock calls before the one that fails; -1: none fails */
static long mlock_failed;

/* Always a new block: the old one poisoned and kept until bury(). */
void *__wrap_realloc(void *p, size_t n)
{
	if (!p || ngrave == GRAVE_MAX)
		return __real_realloc(p, n);
	size_t old = malloc_usable_size(p);
	void *q = malloc(n ? n : 1);
	if (!q)
		return NULL;
	memcpy(q, p, old < n ? old : n);
	memset(p, 0xa5, old);
	grave[ngrave++] = p;
	return q;
}

int __wrap_mlock(const void *p, size_t n)
{
	if (mlock_countdown >= 0 && mlock_countdown-- == 0) {
		mlock_failed++;
		errno = ENOMEM; /* what mlock says past RLIMIT_MEMLOCK */
		return -1;
	}
	return __real_mlock(p, n);
}

static void bury(void)
{
	for (size_t i = 0; i < ngrave; i++)
		free(grave[i]);
	ngrave = 0;
}

/* ---- the rig ------------------------------------------------------------------------------- */

static enum ms_backend backend;
static unsigned char msg[200];
static unsigned round_no;

/* Add endpoint e to g: its id, or the add's error. */
static int add(struct ms_group *g, struct endpoint *e)
{
	struct ms_dest d = { .fd = e->tx,
			     .addrlen = e->addrlen,
			     .addr = e->addrlen ? (struct sockaddr *)&e->addr : NULL };
	int id = ms_group_add(g, &d);
	if (id >= 0)
		e->id = id;
	return id;
}

/* One send: every member took the whole message and got exactly one copy, byte for byte;
 * the endpoints outside the group got nothing. */
static void send_all(struct ms_group *g, const struct net *nt, const char *where)
{
	size_t n = ms_group_size(g);
	struct ms_result *res = calloc(n ? n : 1, sizeof(*res));
	assert_non_null(res);
	make_payload(msg, sizeof(msg), round_no++);
	int r = ms_send(g, msg, sizeof(msg), 0, res);
	size_t bad = 0;
	for (size_t k = 0; k < n; k++)
		if (res[k].status != (int)sizeof(msg) && bad++ < 3)
			fprintf(stderr, "%s: destination id %d: status %d (%s)\n", where, res[k].id,
				res[k].status,
				res[k].status < 0 ? ms_strerror(res[k].status) : "bytes");
	if (bad || r != (int)n)
		fail_msg("%s: ms_send gave %d of %zu, %zu destinations failed", where, r, n, bad);
	for (size_t i = 0; i < nt->n; i++) {
		const struct endpoint *e = &nt->ep[i];
		bool ok = e->id >= 0 ? expect_one(e, msg, sizeof(msg), 5000) : expect_none(e);
		if (!ok)
			fail_msg("%s: endpoint %zu (id %d): not what was sent", where, i, e->id);
	}
	free(res);
}

static struct ms_ctx *ctx_mlock(void)
{
	struct ms_config cfg = { .size = sizeof(cfg),
				 .backend = backend,
				 .flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV | MS_CFG_MLOCK };
	struct ms_ctx *ctx;
	int err = ms_ctx_new(&ctx, &cfg);
	if (err)
		fail_msg("ms_ctx_new(%s, MS_CFG_MLOCK): %s", ms_backend_name(backend),
			 ms_strerror(err));
	return ctx;
}

/*
 * Grow a group of `kind` endpoints to `max`; at each size where an array grows (n a power of
 * two from 4 on), refuse the next add at every mlock it makes in turn, with a send checked
 * after each refusal, then let it through. Returns the refusals made.
 */
static unsigned grow_refusing(enum kind kind, size_t max)
{
	struct ms_ctx *ctx = ctx_mlock();
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	struct net nt;
	net_init(&nt);
	unsigned refusals = 0;
	char where[128];
	while (nt.n < max) {
		const size_t n = nt.n;
		assert_int_equal(net_add(&nt, kind, 1), 0);
		struct endpoint *e = &nt.ep[n];
		e->id = -1;
		const bool boundary = n >= 4 && (n & (n - 1)) == 0;
		for (long k = 0; boundary; k++) {
			/* The k-th mlock from here fails. */
			mlock_countdown = k;
			const long failed = mlock_failed;
			int id = add(g, e);
			mlock_countdown = -1;
			if (mlock_failed == failed) {
				/* This add made fewer than k + 1 mlock calls: it went through. */
				assert_true(id >= 0);
				break;
			}
			snprintf(where, sizeof(where), "%s, %zu destinations, mlock %ld refused",
				 kind_name(kind), n, k);
			if (id != -ENOMEM)
				fail_msg("%s: ms_group_add gave %d (%s), expected -ENOMEM", where, id,
					 id < 0 ? ms_strerror(id) : "an id");
			assert_int_equal(e->id, -1);
			assert_int_equal(ms_group_size(g), n);
			refusals++;
			/* Twice: the first send after the refusal, and one more. */
			send_all(g, &nt, where);
			send_all(g, &nt, where);
			bury();
		}
		if (e->id < 0) {
			int id = add(g, e);
			if (id < 0)
				fail_msg("%s, %zu destinations: ms_group_add, allowed: %s",
					 kind_name(kind), n, ms_strerror(id));
		}
		if (boundary) {
			snprintf(where, sizeof(where), "%s, %zu destinations, after the refusals",
				 kind_name(kind), n + 1);
			send_all(g, &nt, where);
			bury();
		}
	}
	bury();
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
	return refusals;
}

/* One socket, unconnected, up to the 2,049 destinations. */
static void test_one_socket(void **state)
{
	(void)state;
	unsigned r = grow_refusing(K_UDP4, 2049);
	printf("%s: one UDP socket, 4 .. 2049 destinations: %u refused adds, each followed by "
	       "two sends that reached every member\n", ms_backend_name(backend), r);
	assert_true(r >= 9); /* at least one per size 4, 8, ..., 1024, 2048 */
}

/* A socket per destination (a bucket each: the group's bucket list and map grow). */
static void test_socket_each(void **state)
{
	(void)state;
	unsigned r = grow_refusing(K_UDP4_CONN, 257);
	printf("%s: a connected UDP socket each, 4 .. 257 destinations: %u refused adds\n",
	       ms_backend_name(backend), r);
	assert_true(r >= 7);
}

/* IPv6 and a socket shared, repeated: many refusals in a row at the same size. */
static void test_repeated(void **state)
{
	(void)state;
	if (!net_have_ipv6())
		skip();
	unsigned r = 0;
	for (int k = 0; k < 20; k++)
		r += grow_refusing(K_UDP6, 33);
	printf("%s: IPv6, 20 groups of 33: %u refused adds\n", ms_backend_name(backend), r);
	assert_true(r >= 20 * 4);
}

/* As root, a network namespace of the test's own with its loopback up: thousands of
 * receivers on 127.0.0.1 see nothing another process on the host sends there. */
static void private_loopback(void)
{
	if (geteuid() != 0 || unshare(CLONE_NEWNET))
		return; /* the host's loopback, then */
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0) {
		fprintf(stderr, "loopback in a new namespace: %m\n");
		exit(1);
	}
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0) {
		fprintf(stderr, "loopback up in a new namespace: %m\n");
		exit(1);
	}
	close(s);
}

int main(int argc, char **argv)
{
	private_loopback();
	net_raise_nofile(8192);
	/* The real mlock calls must all succeed (only the injected ones fail): root has
	 * CAP_IPC_LOCK; anyone else needs room under RLIMIT_MEMLOCK for 2,049 destinations. */
	struct rlimit rl;
	if (geteuid() != 0 && !getrlimit(RLIMIT_MEMLOCK, &rl) && rl.rlim_max != RLIM_INFINITY &&
	    rl.rlim_max < 64u << 20) {
		printf("RLIMIT_MEMLOCK %llu bytes (hard) is too low for this test: skipped\n",
		       (unsigned long long)rl.rlim_max);
		return 77;
	}
	if (geteuid() != 0) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_MEMLOCK, &rl);
	}
	struct ms_config cfg = { .flags = MS_CFG_MLOCK };
	char line[256];
	backend = net_backend_arg(argc, argv, cfg, line, sizeof(line));
	printf("%s\n", line);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_socket),
		cmocka_unit_test(test_socket_each),
		cmocka_unit_test(test_repeated),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
