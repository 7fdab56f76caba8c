/* SPDX-License-Identifier: MIT */
/*
 * MS_BACKEND_AUTO on real sockets: it sends with every backend available, switching between
 * them (each exploration round alternates backends every two fan-outs, and
 * MULTISEND_AUTO_RECHECK=16 makes a round of re-checks every 16 fan-outs after a decision), and
 * none of that may show:
 *
 * - every destination gets exactly one byte-identical copy of every message, in order, on one
 *   unconnected socket with many addresses (UDP, AF_UNIX), on connected UDP sockets, on TCP
 *   streams, with workers (fan-outs split across threads) and with offload (ms_post through
 *   the library's thread, ms_send between posts); each call's result array holds every id
 *   once with the whole length; the counters are exact (fan-outs, destinations, bytes);
 * - errors are the same whichever backend meets them: a message too long for UDP fails with
 *   -EMSGSIZE at every destination of every call, counted as such;
 * - the figures: every backend available was measured (auto_ns_*), the decisions, the timed
 *   and explored fan-outs are counted, auto_backend, ms_ctx_backend and the snapshot agree,
 *   ms_ctx_describe and MULTISEND_SHOW_BACKEND say what was chosen for which shape;
 * - MS_CFG_AUTO_FREEZE: after the first decision nothing is timed or explored again;
 * - a child forked after the context was made sends correctly, and measures nothing.
 *
 * No timing is asserted: which backend wins is the host's business.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <setjmp.h>

#include <cmocka.h>

#include "multisend.h"
#include "net.h"

#define WAIT_MS 5000
#define LEN 200

static bool have_uring;

static struct ms_ctx *auto_ctx(uint32_t flags, uint32_t workers)
{
	struct ms_config cfg = { .size = sizeof(cfg), .backend = MS_BACKEND_AUTO,
				 .flags = flags, .workers = workers };
	struct ms_ctx *ctx = NULL;
	assert_int_equal(ms_ctx_new(&ctx, &cfg), 0);
	return ctx;
}

static struct ms_stats stats(const struct ms_ctx *ctx)
{
	struct ms_stats s = { .size = sizeof(s) };
	assert_int_equal(ms_ctx_stats(ctx, &s), 0);
	return s;
}

/* Every available backend has been measured, and the figures agree with one another. */
static void check_figures(const struct ms_ctx *ctx)
{
	struct ms_stats s = stats(ctx);
	assert_true(s.auto_decisions >= 1);
	assert_true(s.auto_sampled >= 1);
	assert_true(s.auto_explored >= 1);
	assert_true(s.auto_ns_loop > 0);
	assert_true(s.auto_ns_sendmmsg > 0);
	if (have_uring)
		assert_true(s.auto_ns_io_uring > 0);
	else
		assert_int_equal(s.auto_ns_io_uring, 0);
	assert_int_equal(s.auto_backend, ms_ctx_backend(ctx));
	struct ms_snapshot snap = { .size = sizeof(snap) };
	assert_int_equal(ms_ctx_snapshot(ctx, &snap), 0);
	assert_int_equal(snap.backend, ms_ctx_backend(ctx));
	assert_int_equal(snap.stats.auto_decisions, s.auto_decisions);
	char line[2048];
	assert_true(ms_ctx_describe(ctx, line, sizeof(line)) > 0);
	assert_non_null(strstr(line, "auto over loop"));
	assert_non_null(strstr(line, "ns/dest"));
}

/* `rounds` messages to every endpoint of nt (all in g), checked call by call and copy by copy;
 * then the counters. */
static void send_rounds(struct ms_ctx *ctx, struct ms_group *g, struct net *nt, unsigned rounds,
			unsigned seed)
{
	struct ms_stats before = stats(ctx);
	unsigned char msg[LEN];
	struct ms_result *res = calloc(nt->n, sizeof(*res));
	char *seen = calloc(nt->n, 1);
	assert_non_null(res);
	assert_non_null(seen);
	for (unsigned r = 0; r < rounds; r++) {
		make_payload(msg, sizeof(msg), seed + r);
		memset(res, 0, nt->n * sizeof(*res));
		assert_int_equal(ms_send(g, msg, sizeof(msg), 0, res), (int)nt->n);
		memset(seen, 0, nt->n);
		for (size_t i = 0; i < nt->n; i++) {
			assert_int_equal(res[i].status, LEN);
			long e = net_find(nt, res[i].id);
			assert_true(e >= 0);
			assert_int_equal(seen[e], 0); /* every id once */
			seen[e] = 1;
		}
		for (size_t i = 0; i < nt->n; i++)
			assert_true(expect_one(&nt->ep[i], msg, sizeof(msg), WAIT_MS));
	}
	struct ms_stats s = stats(ctx);
	assert_int_equal(s.fanouts - before.fanouts, rounds);
	assert_int_equal(s.dests_attempted - before.dests_attempted, (uint64_t)rounds * nt->n);
	assert_int_equal(s.dests_accepted - before.dests_accepted, (uint64_t)rounds * nt->n);
	assert_int_equal(s.bytes - before.bytes, (uint64_t)rounds * nt->n * LEN);
	assert_int_equal(s.dests_failed - before.dests_failed, 0);
	assert_int_equal(s.dests_partial - before.dests_partial, 0);
	free(res);
	free(seen);
}

/* The next datagram waiting at e is msg, byte for byte (more may follow). */
static void expect_next(const struct endpoint *e, const unsigned char *msg, size_t len)
{
	unsigned char got[LEN + 1];
	struct pollfd p = { .fd = e->rx, .events = POLLIN };
	assert_int_equal(poll(&p, 1, WAIT_MS), 1);
	ssize_t r = recv(e->rx, got, sizeof(got), MSG_DONTWAIT | MSG_TRUNC);
	assert_int_equal(r, (ssize_t)len);
	assert_memory_equal(got, msg, len);
}

static void one_shape(enum kind k, size_t n, uint32_t workers, unsigned rounds)
{
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, k, n), 0);
	struct ms_ctx *ctx = auto_ctx(0, workers);
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	send_rounds(ctx, g, &nt, rounds, (unsigned)k * 1000);
	check_figures(ctx);
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
}

static void test_udp_one_socket(void **state)
{
	(void)state;
	one_shape(K_UDP4, 40, 0, 200);
}

static void test_udp_connected(void **state)
{
	(void)state;
	one_shape(K_UDP4_CONN, 24, 0, 150);
}

static void test_unix(void **state)
{
	(void)state;
	one_shape(K_UNIX, 24, 0, 150);
}

static void test_tcp(void **state)
{
	(void)state;
	one_shape(K_TCP4, 16, 0, 150);
}

static void test_workers(void **state)
{
	(void)state;
	one_shape(K_UDP4, 64, 3, 150);
	one_shape(K_UDP4_CONN, 32, 2, 100);
}

/* Several shapes in one context: each has its own measurements and decision. */
static void test_shapes_side_by_side(void **state)
{
	(void)state;
	struct net a, b;
	net_init(&a);
	net_init(&b);
	assert_int_equal(net_add(&a, K_UDP4, 20), 0);
	assert_int_equal(net_add(&b, K_TCP4, 8), 0);
	struct ms_ctx *ctx = auto_ctx(0, 0);
	struct ms_group *ga, *gb;
	assert_int_equal(ms_group_new(ctx, &ga), 0);
	assert_int_equal(ms_group_new(ctx, &gb), 0);
	assert_int_equal(net_join(&a, ga, 0), 0);
	assert_int_equal(net_join(&b, gb, 0), 0);
	for (unsigned r = 0; r < 8; r++) {
		send_rounds(ctx, ga, &a, 15, 100 + r * 15);
		send_rounds(ctx, gb, &b, 15, 500 + r * 15);
	}
	char line[2048];
	ms_ctx_describe(ctx, line, sizeof(line));
	printf("%s\n", line);
	assert_non_null(strstr(line, "datagrams on few sockets, 16-127:"));
	assert_non_null(strstr(line, "streams, 1-15:"));
	ms_group_free(ga);
	ms_group_free(gb);
	ms_ctx_free(ctx);
	net_free(&a);
	net_free(&b);
}

/* A message UDP cannot carry: the same error at every destination, whoever sends. */
static void test_errors_alike(void **state)
{
	(void)state;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UDP4, 16), 0);
	struct ms_ctx *ctx = auto_ctx(0, 0);
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	const size_t big = 70000; /* past 65507, the largest UDP payload over IPv4 */
	unsigned char *msg = calloc(1, big);
	struct ms_result res[16];
	const unsigned rounds = 120;
	for (unsigned r = 0; r < rounds; r++) {
		assert_int_equal(ms_send(g, msg, big, 0, res), 0); /* none took it */
		for (size_t i = 0; i < nt.n; i++)
			assert_int_equal(res[i].status, -EMSGSIZE);
	}
	for (size_t i = 0; i < nt.n; i++)
		assert_true(expect_none(&nt.ep[i]));
	struct ms_stats s = stats(ctx);
	assert_int_equal(s.dests_failed, rounds * nt.n);
	assert_int_equal(s.err_msgsize, rounds * nt.n);
	assert_int_equal(s.dests_accepted, 0);
	assert_true(s.auto_explored >= 1);
	/* and a good message after: every copy */
	send_rounds(ctx, g, &nt, 40, 7);
	free(msg);
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
}

/* Offload: posts and sends interleaved, the library's thread and the caller's (io_uring's ring
 * takes one thread only: the library routes ms_send through the offload thread). */
static void test_offload(void **state)
{
	(void)state;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UDP4, 16), 0);
	struct ms_ctx *ctx = auto_ctx(MS_CFG_OFFLOAD, 2);
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	unsigned char msg[LEN];
	const unsigned rounds = 120;
	for (unsigned r = 0; r < rounds; r++) {
		make_payload(msg, sizeof(msg), 9000 + r);
		if (r % 3 == 2) {
			struct ms_result res[16];
			assert_int_equal(ms_send(g, msg, sizeof(msg), 0, res), (int)nt.n);
			for (size_t i = 0; i < nt.n; i++)
				assert_int_equal(res[i].status, LEN);
		} else {
			uint64_t seq;
			assert_int_equal(ms_post(g, msg, sizeof(msg), 0, &seq), (int)nt.n);
		}
		if (r % 10 == 9) { /* read what came so far (receive buffers are finite) */
			assert_int_equal(ms_ctx_drain(ctx), 0);
			for (unsigned q = r - 9; q <= r; q++) {
				make_payload(msg, sizeof(msg), 9000 + q);
				for (size_t i = 0; i < nt.n; i++)
					expect_next(&nt.ep[i], msg, sizeof(msg));
			}
		}
	}
	for (size_t i = 0; i < nt.n; i++)
		assert_true(expect_none(&nt.ep[i])); /* nothing twice */
	struct ms_post_error pe[4];
	uint64_t lost = 1;
	assert_int_equal(ms_ctx_post_errors(ctx, pe, 4, &lost), 0);
	assert_int_equal(lost, 0);
	struct ms_stats s = stats(ctx);
	assert_int_equal(s.fanouts, rounds);
	assert_int_equal(s.dests_accepted, rounds * nt.n);
	check_figures(ctx);
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
}

static void test_freeze(void **state)
{
	(void)state;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UDP4, 20), 0);
	for (int frozen = 0; frozen < 2; frozen++) {
		struct ms_ctx *ctx = auto_ctx(frozen ? MS_CFG_AUTO_FREEZE : 0, 0);
		struct ms_group *g;
		assert_int_equal(ms_group_new(ctx, &g), 0);
		assert_int_equal(net_join(&nt, g, 0), 0);
		unsigned sent = 0;
		while (stats(ctx).auto_decisions == 0 && sent < 500) {
			send_rounds(ctx, g, &nt, 1, 300 + sent);
			sent++;
		}
		struct ms_stats a = stats(ctx);
		assert_int_equal(a.auto_decisions, 1);
		send_rounds(ctx, g, &nt, 200, 20000);
		struct ms_stats b = stats(ctx);
		if (frozen) {
			assert_int_equal(b.auto_decisions, a.auto_decisions);
			assert_int_equal(b.auto_sampled, a.auto_sampled);
			assert_int_equal(b.auto_explored, a.auto_explored);
			char line[2048];
			ms_ctx_describe(ctx, line, sizeof(line));
			assert_non_null(strstr(line, "frozen"));
		} else {
			/* MULTISEND_AUTO_RECHECK=16: a decision after each period of 16 fan-outs and
			 * its round of 6, or, when the chosen backend's cost drifts (noisy under
			 * valgrind), within 12 + 72 fan-outs: at least 2 more in 200 */
			assert_true(b.auto_decisions >= a.auto_decisions + 2);
			assert_true(b.auto_explored > a.auto_explored);
			assert_true(b.auto_sampled > a.auto_sampled);
		}
		ms_group_free(g);
		ms_ctx_free(ctx);
	}
	net_free(&nt);
}

static void test_fork(void **state)
{
	(void)state;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UDP4, 16), 0);
	struct ms_ctx *ctx = auto_ctx(0, 0);
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	send_rounds(ctx, g, &nt, 30, 1);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct ms_stats a = { .size = sizeof(a) }, b = { .size = sizeof(b) };
		CHECK_EQ(ms_ctx_stats(ctx, &a), 0);
		unsigned char msg[LEN];
		for (unsigned r = 0; r < 60; r++) {
			make_payload(msg, sizeof(msg), 5000 + r);
			CHECK_EQ(ms_send(g, msg, sizeof(msg), 0, NULL), (int)nt.n);
			for (size_t i = 0; i < nt.n; i++)
				CHECK(expect_one(&nt.ep[i], msg, sizeof(msg), WAIT_MS));
		}
		CHECK_EQ(ms_ctx_stats(ctx, &b), 0);
		CHECK_EQ(b.auto_sampled, a.auto_sampled); /* nothing measured in the child */
		CHECK_EQ(b.dests_accepted - a.dests_accepted, 60 * nt.n);
		_exit(0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	send_rounds(ctx, g, &nt, 60, 2);
	check_figures(ctx);
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
}

/* MULTISEND_SHOW_BACKEND: the context's line, then each decision as it is made. */
static void test_show(void **state)
{
	(void)state;
	int p[2];
	assert_int_equal(pipe(p), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(p[1], 2);
		close(p[0]);
		close(p[1]);
		setenv("MULTISEND_SHOW_BACKEND", "1", 1);
		struct net nt;
		net_init(&nt);
		CHECK_EQ(net_add(&nt, K_UDP4, 20), 0);
		struct ms_config cfg = { .size = sizeof(cfg), .backend = MS_BACKEND_AUTO };
		struct ms_ctx *ctx;
		struct ms_group *g;
		CHECK_EQ(ms_ctx_new(&ctx, &cfg), 0);
		CHECK_EQ(ms_group_new(ctx, &g), 0);
		CHECK_EQ(net_join(&nt, g, 0), 0);
		unsigned char msg[LEN] = { 1 };
		for (unsigned r = 0; r < 100; r++) {
			CHECK_EQ(ms_send(g, msg, sizeof(msg), 0, NULL), (int)nt.n);
			for (size_t i = 0; i < nt.n; i++)
				CHECK(expect_one(&nt.ep[i], msg, sizeof(msg), WAIT_MS));
		}
		ms_group_free(g);
		ms_ctx_free(ctx);
		net_free(&nt);
		_exit(0);
	}
	close(p[1]);
	char out[8192];
	size_t have = 0;
	ssize_t r;
	while (have + 1 < sizeof(out) && (r = read(p[0], out + have, sizeof(out) - 1 - have)) > 0)
		have += (size_t)r;
	out[have] = 0;
	close(p[0]);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	printf("%s", out);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_non_null(strstr(out, "(asked for auto)"));
	assert_non_null(strstr(out, "measuring"));
	assert_non_null(strstr(out, "libmultisend: auto: datagrams on few sockets, 16-127: "));
}

int main(void)
{
	/* Before any socket: a loopback of its own, where no other test's datagram can reach
	 * a receiver on an ephemeral port (net.c). */
	net_private_netns("auto");
	/* Whether io_uring works here (asked in a child: this process's probe stays fresh). */
	pid_t pid = fork();
	if (pid == 0) {
		struct ms_config cfg = { .size = sizeof(cfg), .backend = MS_BACKEND_IO_URING,
					 .flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV };
		struct ms_ctx *ctx;
		_exit(ms_ctx_new(&ctx, &cfg) == 0 ? 0 : 1);
	}
	int st;
	waitpid(pid, &st, 0);
	have_uring = WIFEXITED(st) && WEXITSTATUS(st) == 0;
	/* The tests read the environment (MULTISEND_AUTO_RECHECK) and nothing else of it. */
	unsetenv("MULTISEND_BACKEND");
	unsetenv("MULTISEND_NO_LOOP");
	unsetenv("MULTISEND_NO_SENDMMSG");
	unsetenv("MULTISEND_NO_IO_URING");
	unsetenv("MULTISEND_AUTO_FREEZE");
	unsetenv("MULTISEND_SHOW_BACKEND");
	unsetenv("MULTISEND_STATS_SHM");
	setenv("MULTISEND_AUTO_RECHECK", "16", 1);
	signal(SIGPIPE, SIG_IGN);
	net_raise_nofile(4096);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_udp_one_socket),
		cmocka_unit_test(test_udp_connected),
		cmocka_unit_test(test_unix),
		cmocka_unit_test(test_tcp),
		cmocka_unit_test(test_workers),
		cmocka_unit_test(test_shapes_side_by_side),
		cmocka_unit_test(test_errors_alike),
		cmocka_unit_test(test_offload),
		cmocka_unit_test(test_freeze),
		cmocka_unit_test(test_fork),
		cmocka_unit_test(test_show),
	};
	return cmocka_run_group_tests_name("auto", tests, NULL, NULL);
}
