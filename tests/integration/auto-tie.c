/* SPDX-License-Identifier: MIT */
/*
 * MS_BACKEND_AUTO on a tie (issue 30): backends whose costs are within noise of each other
 * must not be chosen by the noise. Measured before this test in a live publisher: sendmmsg
 * and io_uring within 2% of each other, and AUTO's choice flipped between them from run to
 * run of the same workload.
 *
 * The costs are made exact here, so that "1% dearer" means exactly that: the library is
 * linked statically with its clocks and sends wrapped (-Wl,--wrap). While the rig is on, the
 * thread's CPU clock and CLOCK_MONOTONIC read a virtual clock that moves only when a datagram
 * is sent: by cost_loop per sendto/sendmsg (the loop backend's calls) and by cost_mm per
 * datagram a sendmmsg took; getrusage says the thread was never switched out (so AUTO takes
 * the time as time on the CPU, and its CPU clock as honest). io_uring is left out
 * (MULTISEND_NO_IO_URING: its sends are liburing's own system calls, which the rig cannot
 * charge), so AUTO chooses between loop and sendmmsg. The sends are real: every copy of every
 * message arrives once, byte for byte, at its own receiver.
 *
 * - tie: loop 1% dearer in one run, sendmmsg 1% dearer in another: the same choice in both,
 *   the one of the two that makes fewer system calls (sendmmsg); before the tie rule, each run
 *   chose its cheaper one.
 * - a real difference (10%) still decides, either way.
 * - settled: chosen at 10% cheaper, then the other backend becomes 1% cheaper: no switch
 *   over the many re-checks that see it; then 10% cheaper: one switch.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>

#include <cmocka.h>

#include "multisend.h"
#include "net.h"

#define N 64
#define LEN 64
#define WAIT_MS 5000

int __real_clock_gettime(clockid_t id, struct timespec *ts);
int __real_getrusage(int who, struct rusage *ru);
ssize_t __real_sendto(int fd, const void *buf, size_t len, int flags,
		      const struct sockaddr *to, socklen_t tolen);
ssize_t __real_sendmsg(int fd, const struct msghdr *m, int flags);
int __real_sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags);
int __wrap_clock_gettime(clockid_t id, struct timespec *ts);
int __wrap_getrusage(int who, struct rusage *ru);
ssize_t __wrap_sendto(int fd, const void *buf, size_t len, int flags,
		      const struct sockaddr *to, socklen_t tolen);
ssize_t __wrap_sendmsg(int fd, const struct msghdr *m, int flags);
int __wrap_sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags);

static bool rig;                  /* the virtual clock in use */
static uint64_t vnow = 1000000000; /* ns */
static uint64_t cost_loop, cost_mm; /* ns per datagram */

int __wrap_clock_gettime(clockid_t id, struct timespec *ts)
{
	if (!rig || (id != CLOCK_MONOTONIC && id != CLOCK_THREAD_CPUTIME_ID))
		return __real_clock_gettime(id, ts);
	ts->tv_sec = (time_t)(vnow / 1000000000u);
	ts->tv_nsec = (long)(vnow % 1000000000u);
	return 0;
}

int __wrap_getrusage(int who, struct rusage *ru)
{
	if (!rig)
		return __real_getrusage(who, ru);
	memset(ru, 0, sizeof(*ru)); /* never switched out */
	return 0;
}

ssize_t __wrap_sendto(int fd, const void *buf, size_t len, int flags,
		      const struct sockaddr *to, socklen_t tolen)
{
	ssize_t r = __real_sendto(fd, buf, len, flags, to, tolen);
	if (rig && r >= 0)
		vnow += cost_loop;
	return r;
}

ssize_t __wrap_sendmsg(int fd, const struct msghdr *m, int flags)
{
	ssize_t r = __real_sendmsg(fd, m, flags);
	if (rig && r >= 0)
		vnow += cost_loop;
	return r;
}

int __wrap_sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags)
{
	int r = __real_sendmmsg(fd, v, n, flags);
	if (rig && r > 0)
		vnow += cost_mm * (uint64_t)r;
	return r;
}

static struct ms_stats stats(const struct ms_ctx *ctx)
{
	struct ms_stats s = { .size = sizeof(s) };
	assert_int_equal(ms_ctx_stats(ctx, &s), 0);
	return s;
}

struct rig_group {
	struct net nt;
	struct ms_ctx *ctx;
	struct ms_group *g;
	unsigned calls;
};

/* N receivers on loopback, one unconnected socket, an AUTO context. */
static void open_group(struct rig_group *r)
{
	net_init(&r->nt);
	assert_int_equal(net_add(&r->nt, K_UDP4, N), 0);
	struct ms_config cfg = { .size = sizeof(cfg), .backend = MS_BACKEND_AUTO };
	assert_int_equal(ms_ctx_new(&r->ctx, &cfg), 0);
	assert_int_equal(ms_group_new(r->ctx, &r->g), 0);
	assert_int_equal(net_join(&r->nt, r->g, 0), 0);
	r->calls = 0;
}

static void close_group(struct rig_group *r)
{
	ms_group_free(r->g);
	ms_ctx_free(r->ctx);
	net_free(&r->nt);
}

/* calls fan-outs at these costs (ns per datagram); every copy checked. */
static struct ms_stats send_some(struct rig_group *r, uint64_t loop_ns, uint64_t mm_ns,
				 unsigned calls)
{
	unsigned char msg[LEN];
	cost_loop = loop_ns;
	cost_mm = mm_ns;
	for (unsigned c = 0; c < calls; c++, r->calls++) {
		make_payload(msg, sizeof(msg), r->calls);
		rig = true;
		const int sent = ms_send(r->g, msg, sizeof(msg), 0, NULL);
		rig = false;
		assert_int_equal(sent, N);
		for (size_t i = 0; i < r->nt.n; i++)
			assert_true(expect_one(&r->nt.ep[i], msg, sizeof(msg), WAIT_MS));
	}
	struct ms_stats s = stats(r->ctx);
	assert_int_equal(s.dests_accepted, (uint64_t)r->calls * N);
	assert_int_equal(s.dests_failed, 0);
	return s;
}

static void show(const char *what, const struct rig_group *r, const struct ms_stats *s)
{
	printf("  %s: %u fan-outs, %llu decisions, %llu switches; chose %s; measured loop %llu, "
	       "sendmmsg %llu ns/dest\n",
	       what, r->calls, (unsigned long long)s->auto_decisions,
	       (unsigned long long)s->auto_switches,
	       ms_ctx_backend(r->ctx) == MS_BACKEND_LOOP ? "loop" : "sendmmsg",
	       (unsigned long long)s->auto_ns_loop, (unsigned long long)s->auto_ns_sendmmsg);
}

/* A whole run (a new context) at these costs until AUTO decided three times: its choice. */
static enum ms_backend one_run(const char *what, uint64_t loop_ns, uint64_t mm_ns)
{
	struct rig_group r;
	open_group(&r);
	struct ms_stats s;
	do
		s = send_some(&r, loop_ns, mm_ns, 16);
	while (s.auto_decisions < 3 && r.calls < 2000);
	assert_true(s.auto_decisions >= 3);
	/* The rig: AUTO saw exactly the costs given. */
	assert_int_equal(s.auto_ns_loop, loop_ns);
	assert_int_equal(s.auto_ns_sendmmsg, mm_ns);
	show(what, &r, &s);
	enum ms_backend b = (enum ms_backend)ms_ctx_backend(r.ctx);
	assert_int_equal(s.auto_backend, b);
	close_group(&r);
	return b;
}

static void test_tie(void **state)
{
	(void)state;
	enum ms_backend a = one_run("loop 1% dearer", 1010, 1000);
	enum ms_backend b = one_run("sendmmsg 1% dearer", 1000, 1010);
	assert_int_equal(a, b);
	assert_int_equal(a, MS_BACKEND_SENDMMSG); /* the fewer system calls */
}

static void test_real_difference(void **state)
{
	(void)state;
	assert_int_equal(one_run("sendmmsg 10% dearer", 1000, 1100), MS_BACKEND_LOOP);
	assert_int_equal(one_run("loop 10% dearer", 1100, 1000), MS_BACKEND_SENDMMSG);
}

static void test_settled(void **state)
{
	(void)state;
	struct rig_group r;
	open_group(&r);
	struct ms_stats s;
	do
		s = send_some(&r, 900, 1000, 16);
	while (s.auto_decisions < 1 && r.calls < 2000);
	assert_int_equal(ms_ctx_backend(r.ctx), MS_BACKEND_LOOP);
	show("loop 10% cheaper", &r, &s);
	const uint64_t switches = s.auto_switches, decisions = s.auto_decisions;
	/* sendmmsg now 1% cheaper: its re-checks' windows fill with the new costs (8 timed
	 * fan-outs each, one per re-check: MULTISEND_AUTO_RECHECK=16), and more. */
	s = send_some(&r, 1000, 990, 400);
	show("then sendmmsg 1% cheaper", &r, &s);
	assert_true(s.auto_decisions >= decisions + 12);
	assert_int_equal(s.auto_ns_loop, 1000);
	assert_int_equal(s.auto_ns_sendmmsg, 990);
	assert_int_equal(s.auto_switches, switches);
	assert_int_equal(ms_ctx_backend(r.ctx), MS_BACKEND_LOOP);
	/* sendmmsg 10% cheaper: a real difference, one switch. */
	s = send_some(&r, 1000, 900, 400);
	show("then sendmmsg 10% cheaper", &r, &s);
	assert_int_equal(s.auto_switches, switches + 1);
	assert_int_equal(ms_ctx_backend(r.ctx), MS_BACKEND_SENDMMSG);
	close_group(&r);
}

int main(void)
{
	/* Its own loopback (as root), where no other test's datagram arrives. */
	net_private_netns("auto-tie");
	/* loop and sendmmsg only; re-checks every 16 fan-outs. */
	setenv("MULTISEND_NO_IO_URING", "1", 1);
	setenv("MULTISEND_AUTO_RECHECK", "16", 1);
	unsetenv("MULTISEND_AUTO_FREEZE");
	unsetenv("MULTISEND_BACKEND");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tie),
		cmocka_unit_test(test_real_difference),
		cmocka_unit_test(test_settled),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
