/* SPDX-License-Identifier: MIT */
/*
 * ms_ctx_snapshot never waits for ever (issue 16): a context whose own sequence word stays odd
 * (a writer stopped inside an update, here simulated by setting it) makes the snapshot, and
 * ms_ctx_stats, which reads the same counters the same way, return -EBUSY after a bounded
 * number of tries; once the word is even again both work. Its own memory is read, never the
 * live-counter file (tests/stat's livefile damage shows that side with a real file).
 *
 * ms_ctx_stats is the snapshot's .stats (issue 12): after sends, with and without offload,
 * the two give the same counters; a snapshot's own fields (backend, ts_sample) are filled;
 * an out struct shorter than the library's is filled to its size and no further, and the
 * snapshot's stats.size says how much of stats it got.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"
#include "shm-format.h"

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = "ms_ctx_snapshot did not return within 30 s\n";
	if (write(2, m, sizeof(m) - 1) < 0)
		_exit(1);
	_exit(1);
}

static void check(uint32_t flags)
{
	struct ms_config c = { .size = sizeof(c), .backend = MS_BACKEND_LOOP,
			       .flags = MS_CFG_IGNORE_ENV | flags };
	struct ms_ctx *ctx = NULL;
	assert_int_equal(ms_ctx_new(&ctx, &c), 0);
	struct ms_snapshot s = { .size = sizeof(s) };
	struct ms_stats st = { .size = sizeof(st) };
	assert_int_equal(ms_ctx_snapshot(ctx, &s), 0);

	signal(SIGALRM, on_alarm);
	alarm(30);
	__atomic_store_n(&ctx->own->seq, ctx->own->seq | 1, __ATOMIC_RELEASE);
	assert_int_equal(ms_ctx_snapshot(ctx, &s), -EBUSY);
	assert_int_equal(ms_ctx_stats(ctx, &st), -EBUSY);
	alarm(0);

	__atomic_store_n(&ctx->own->seq, ctx->own->seq + 1, __ATOMIC_RELEASE);
	assert_int_equal(ms_ctx_snapshot(ctx, &s), 0);
	assert_int_equal(ms_ctx_stats(ctx, &st), 0);
	assert_int_equal(st.fanouts, 0);
	ms_ctx_free(ctx);
}

static void test_snapshot_bounded(void **state)
{
	(void)state;
	check(0);
	check(MS_CFG_OFFLOAD);
}

/* Send n messages to a socketpair on a context with these flags; stats and snapshot agree. */
static void same_counters(uint32_t flags)
{
	struct ms_config c = { .size = sizeof(c), .backend = MS_BACKEND_LOOP,
			       .flags = MS_CFG_IGNORE_ENV | flags };
	struct ms_ctx *ctx = NULL;
	assert_int_equal(ms_ctx_new(&ctx, &c), 0);
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM, 0, sv), 0);
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	struct ms_dest d = { .fd = sv[1] };
	assert_true(ms_group_add(g, &d) >= 0);
	enum { N = 5 };
	for (int k = 0; k < N; k++) /* under offload posted, else sent */
		assert_int_equal((flags & MS_CFG_OFFLOAD) ? ms_post(g, "abc", 3, 0, NULL)
							  : ms_send(g, "abc", 3, 0, NULL),
				 1);
	assert_int_equal(ms_ctx_drain(ctx), 0);

	struct ms_stats st;
	memset(&st, 0xee, sizeof(st));
	st.size = sizeof(st);
	assert_int_equal(ms_ctx_stats(ctx, &st), 0);
	static struct ms_snapshot s;
	memset(&s, 0xee, sizeof(s));
	s.size = sizeof(s);
	assert_int_equal(ms_ctx_snapshot(ctx, &s), 0);
	assert_int_equal(s.size, sizeof(s));
	assert_int_equal(s.backend, MS_BACKEND_LOOP);
	assert_int_equal(s.ts_sample, 0);
	assert_int_equal(s.reserved, 0);
	assert_int_equal(s.stats.size, sizeof(struct ms_stats));
	assert_int_equal(st.size, sizeof(st));
	assert_int_equal(st.reserved, 0);
	/* Nothing is sent in between: the counters are the same, field for field. */
	assert_memory_equal(&st, &s.stats, sizeof(st));
	assert_int_equal(st.fanouts, N);
	assert_int_equal(st.dests_attempted, N);
	assert_int_equal(st.dests_accepted, N);
	assert_int_equal(st.bytes, 3 * N);
	assert_int_equal(st.offload_msgs, (flags & MS_CFG_OFFLOAD) ? N : 0);

	/* A shorter out struct (an older caller's) is filled to its size only. */
	struct ms_stats short_st;
	memset(&short_st, 0xee, sizeof(short_st));
	short_st.size = offsetof(struct ms_stats, bytes);
	assert_int_equal(ms_ctx_stats(ctx, &short_st), 0);
	assert_int_equal(short_st.size, offsetof(struct ms_stats, bytes));
	assert_int_equal(short_st.dests_failed, 0);
	assert_int_equal(short_st.bytes, 0xeeeeeeeeeeeeeeeeull);
	memset(&s, 0xee, sizeof(s));
	s.size = (uint32_t)(offsetof(struct ms_snapshot, stats) + offsetof(struct ms_stats, bytes));
	assert_int_equal(ms_ctx_snapshot(ctx, &s), 0);
	assert_int_equal(s.stats.size, offsetof(struct ms_stats, bytes));
	assert_int_equal(s.stats.fanouts, N);
	assert_int_equal(s.stats.bytes, 0xeeeeeeeeeeeeeeeeull);
	s.size = 16; /* up to taken_ns's first byte: nothing of the histograms or stats */
	memset(&s.taken_ns, 0xee, sizeof(s) - 16);
	assert_int_equal(ms_ctx_snapshot(ctx, &s), 0);
	assert_int_equal(s.taken_ns, 0xeeeeeeeeeeeeeeeeull);
	assert_int_equal(s.stats.size, 0xeeeeeeeeu);
	s.size = 15;
	assert_int_equal(ms_ctx_snapshot(ctx, &s), -EINVAL);
	short_st.size = 7;
	assert_int_equal(ms_ctx_stats(ctx, &short_st), -EINVAL);
	assert_int_equal(ms_ctx_stats(NULL, &st), -EINVAL);
	assert_int_equal(ms_ctx_stats(ctx, NULL), -EINVAL);

	ms_group_free(g);
	ms_ctx_free(ctx);
	close(sv[0]);
	close(sv[1]);
}

static void test_stats_is_snapshot_subset(void **state)
{
	(void)state;
	same_counters(0);
	same_counters(MS_CFG_OFFLOAD);
	same_counters(MS_CFG_ROTATE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_snapshot_bounded),
		cmocka_unit_test(test_stats_is_snapshot_subset),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
