/* SPDX-License-Identifier: MIT */
/*
 * ms_ctx_snapshot never waits for ever (issue 16): a context whose own sequence word stays odd
 * (a writer stopped inside an update, here simulated by setting it) makes the snapshot, and
 * ms_ctx_stats under offload, return -EBUSY after a bounded number of tries; once the word is
 * even again both work. Its own memory is read, never the live-counter file (tests/stat's
 * livefile damage shows that side with a real file).
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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
	if (flags & MS_CFG_OFFLOAD)
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_snapshot_bounded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
