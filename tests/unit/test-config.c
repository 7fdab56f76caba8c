/* SPDX-License-Identifier: MIT */
/*
 * ms_ctx_new's -EINVAL rules (include/multisend.h), one test each, in the header's order. Each
 * test sets the smallest config that breaks its rule and nothing else, and checks the value at
 * the rule's edge is accepted, so that dropping or loosening the rule fails the test (and
 * tightening it too). The loop backend and MS_CFG_IGNORE_ENV keep the machine and the
 * environment out of it; no socket is made.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"

static struct ms_config base(void)
{
	struct ms_config c;
	memset(&c, 0, sizeof(c));
	c.size = sizeof(c);
	c.backend = MS_BACKEND_LOOP;
	c.flags = MS_CFG_IGNORE_ENV;
	return c;
}

/* ms_ctx_new's result for c; a context made is freed at once. */
static int try_cfg(const struct ms_config *c)
{
	struct ms_ctx *ctx = NULL;
	int err = ms_ctx_new(&ctx, c);
	if (err)
		assert_null(ctx);
	else
		assert_non_null(ctx);
	ms_ctx_free(ctx);
	return err;
}

static void test_out_null(void **state)
{
	(void)state;
	struct ms_config c = base();
	assert_int_equal(ms_ctx_new(NULL, &c), -EINVAL);
	assert_int_equal(ms_ctx_new(NULL, NULL), -EINVAL);
	assert_int_equal(try_cfg(NULL), 0); /* all defaults */
}

/* Every size shorter than the struct: the shorter layouts (16 bytes, before the timestamp
 * fields, and the one before the workers fields) were never released. */
static void test_size_too_small(void **state)
{
	(void)state;
	struct ms_config c = base();
	for (c.size = 0; c.size < sizeof(c); c.size++)
		assert_int_equal(try_cfg(&c), -EINVAL);
	c.size = sizeof(c);
	assert_int_equal(try_cfg(&c), 0);
}

static void test_size_too_large(void **state)
{
	(void)state;
	static unsigned char buf[4097];
	struct ms_config c = base();
	memset(buf, 0, sizeof(buf));
	memcpy(buf, &c, sizeof(c));
	struct ms_config *big = (struct ms_config *)(void *)buf;
	big->size = 4096;
	assert_int_equal(try_cfg(big), 0);
	big->size = 4097;
	assert_int_equal(try_cfg(big), -EINVAL);
	big->size = UINT32_MAX;
	assert_int_equal(try_cfg(big), -EINVAL);
}

/* A newer caller's tail must be zero, to its last byte. */
static void test_size_tail_nonzero(void **state)
{
	(void)state;
	struct {
		struct ms_config c;
		unsigned char tail[64];
	} big;
	memset(&big, 0, sizeof(big));
	big.c = base();
	big.c.size = sizeof(big);
	assert_int_equal(try_cfg(&big.c), 0);
	big.tail[63] = 1;
	assert_int_equal(try_cfg(&big.c), -EINVAL);
	big.tail[63] = 0;
	big.tail[0] = 0x80;
	assert_int_equal(try_cfg(&big.c), -EINVAL);
	big.c.size = sizeof(big.c); /* the same bytes past a size that does not cover them */
	assert_int_equal(try_cfg(&big.c), 0);
}

static void test_flags_unknown(void **state)
{
	(void)state;
	struct ms_config c = base();
	c.flags |= ~MS_CFG_ALL_FLAGS & (MS_CFG_ALL_FLAGS + 1); /* the next bit */
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.flags = MS_CFG_IGNORE_ENV | (1u << 31);
	assert_int_equal(try_cfg(&c), -EINVAL);
}

static void test_backend_outside_enum(void **state)
{
	(void)state;
	struct ms_config c = base();
	c.backend = MS_BACKEND_KFANOUT + 1;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.backend = UINT32_MAX;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.backend = MS_BACKEND_AUTO;
	assert_int_equal(try_cfg(&c), 0);
}

/* MS_CFG_AUTO_FREEZE qualifies MS_BACKEND_AUTO: with a backend asked for by name it would be
 * ignored, so it is refused. */
static void test_auto_freeze_needs_auto(void **state)
{
	(void)state;
	struct ms_config c = base();
	c.flags |= MS_CFG_AUTO_FREEZE;
	for (uint32_t b = MS_BACKEND_LOOP; b <= MS_BACKEND_KFANOUT; b++) {
		c.backend = b;
		assert_int_equal(try_cfg(&c), -EINVAL);
	}
	c.backend = MS_BACKEND_AUTO;
	assert_int_equal(try_cfg(&c), 0);
}

/* Kernel bypass: xdp_queue only with MS_CFG_XDP_QUEUE, xdp_frames a power of two in
 * 64..65536, xdp_ifname a name an interface can have. */
static void test_xdp_fields(void **state)
{
	(void)state;
	struct ms_config c = base();
	c.xdp_queue = 1;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.flags |= MS_CFG_XDP_QUEUE;
	assert_int_equal(try_cfg(&c), 0);
	c = base();
	const uint32_t bad_frames[] = { 1, 32, 63, 96, 4095, 65537, 131072, UINT32_MAX };
	for (size_t k = 0; k < sizeof(bad_frames) / sizeof(bad_frames[0]); k++) {
		c.xdp_frames = bad_frames[k];
		assert_int_equal(try_cfg(&c), -EINVAL);
	}
	const uint32_t good_frames[] = { 0, 64, 4096, 65536 };
	for (size_t k = 0; k < sizeof(good_frames) / sizeof(good_frames[0]); k++) {
		c.xdp_frames = good_frames[k];
		assert_int_equal(try_cfg(&c), 0);
	}
	c = base();
	const char *bad_names[] = { "", "0123456789abcdef", "a/b", "a b" };
	for (size_t k = 0; k < sizeof(bad_names) / sizeof(bad_names[0]); k++) {
		c.xdp_ifname = bad_names[k];
		assert_int_equal(try_cfg(&c), -EINVAL);
	}
	/* A good name that no interface has: the context is made (another backend sends). */
	c.xdp_ifname = "0123456789abcde";
	assert_int_equal(try_cfg(&c), 0);
	c.flags |= MS_CFG_XDP_COPY;
	assert_int_equal(try_cfg(&c), 0);
}

static void test_queue_depth_range(void **state)
{
	(void)state;
	struct ms_config c = base();
	c.queue_depth = 32769;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.queue_depth = 32768;
	assert_int_equal(try_cfg(&c), 0);
}

static void test_zc_min_range(void **state)
{
	(void)state;
	struct ms_config c = base();
	c.zc_min = 65537;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.zc_min = UINT32_MAX; /* once "never": 0 says that now */
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.zc_min = 65536;
	assert_int_equal(try_cfg(&c), 0);
	c.zc_min = MS_ZC_MIN_DEFAULT;
	assert_int_equal(try_cfg(&c), 0);
}

/* The timestamp rules come before the kernel is asked whether it can stamp (-ENOTSUP), so
 * they hold on any kernel. */
static void test_ts_sample_range(void **state)
{
	(void)state;
	struct ms_config c = base();
	c.ts_sample = 1000000001;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.ts_sample = 1000000000;
	int err = try_cfg(&c);
	assert_true(err == 0 || err == -ENOTSUP);
}

static void test_ts_flags_unknown(void **state)
{
	(void)state;
	struct ms_config c = base();
	c.ts_sample = 1;
	c.ts_flags = MS_TS_ALL_FLAGS + 1;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.ts_flags = MS_TS_ALL_FLAGS;
	int err = try_cfg(&c);
	assert_true(err == 0 || err == -ENOTSUP);
}

static void test_ts_flags_without_ts_sample(void **state)
{
	(void)state;
	struct ms_config c = base();
	c.ts_flags = MS_TS_ALL_DESTS;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.ts_flags = 0;
	assert_int_equal(try_cfg(&c), 0);
}

static void test_workers_range(void **state)
{
	(void)state;
	struct ms_config c = base();
	c.workers = 65;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.workers = 1;
	assert_int_equal(try_cfg(&c), 0);
	c.workers = 2;
	assert_int_equal(try_cfg(&c), 0);
}

static void test_offload_kib_without_offload(void **state)
{
	(void)state;
	struct ms_config c = base();
	c.offload_kib = 64;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.workers = 4; /* library threads, but no offload */
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.workers = 0;
	c.flags |= MS_CFG_OFFLOAD;
	assert_int_equal(try_cfg(&c), 0);
}

static void test_offload_kib_range(void **state)
{
	(void)state;
	struct ms_config c = base();
	c.flags |= MS_CFG_OFFLOAD;
	c.offload_kib = 63;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.offload_kib = 1048577;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.offload_kib = 64;
	assert_int_equal(try_cfg(&c), 0);
}

static void test_spin_us_without_threads(void **state)
{
	(void)state;
	struct ms_config c = base();
	c.spin_us = 1;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.workers = 1; /* one sending thread is the caller's: no library thread */
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.workers = 2;
	assert_int_equal(try_cfg(&c), 0);
	c.workers = 0;
	c.flags |= MS_CFG_OFFLOAD;
	assert_int_equal(try_cfg(&c), 0);
}

static void test_spin_us_range(void **state)
{
	(void)state;
	struct ms_config c = base();
	c.workers = 2;
	c.spin_us = 1000001;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.spin_us = 1000000;
	assert_int_equal(try_cfg(&c), 0);
}

static const int cpus0[64]; /* CPU 0, which every process here may run on */

static void test_ncpus_without_threads(void **state)
{
	(void)state;
	struct ms_config c = base();
	c.cpus = cpus0;
	c.ncpus = 1;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.workers = 1;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.workers = 2;
	assert_int_equal(try_cfg(&c), 0);
}

/* At most one CPU per library thread: workers - 1, and one more with offload. */
static void test_ncpus_above_threads(void **state)
{
	(void)state;
	struct ms_config c = base();
	c.cpus = cpus0;
	c.workers = 3;
	c.ncpus = 3;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.ncpus = 2;
	assert_int_equal(try_cfg(&c), 0);
	c.flags |= MS_CFG_OFFLOAD;
	c.ncpus = 4;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.ncpus = 3;
	assert_int_equal(try_cfg(&c), 0);
}

static void test_ncpus_without_cpus(void **state)
{
	(void)state;
	struct ms_config c = base();
	c.workers = 2;
	c.ncpus = 1;
	assert_int_equal(try_cfg(&c), -EINVAL);
}

static void test_cpus_without_ncpus(void **state)
{
	(void)state;
	struct ms_config c = base();
	c.workers = 2;
	c.cpus = cpus0;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.workers = 0;
	assert_int_equal(try_cfg(&c), -EINVAL);
	c.cpus = NULL;
	assert_int_equal(try_cfg(&c), 0);
}

static void test_cpu_not_allowed(void **state)
{
	(void)state;
	static const int bad[][1] = { { -1 }, { 4095 }, { 1 << 20 } };
	struct ms_config c = base();
	c.workers = 2;
	c.ncpus = 1;
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		c.cpus = bad[k];
		assert_int_equal(try_cfg(&c), -EINVAL);
	}
}

static void test_stats_shm_path(void **state)
{
	(void)state;
	static char longpath[4097];
	struct ms_config c = base();
	c.stats_shm = "";
	assert_int_equal(try_cfg(&c), -EINVAL);
	memcpy(longpath, "/nonexistent/", 13);
	memset(longpath + 13, 'a', 4096 - 13);
	c.stats_shm = longpath; /* 4096 bytes */
	assert_int_equal(try_cfg(&c), -EINVAL);
	longpath[4095] = '\0'; /* 4095: taken (the file cannot be made: published nowhere) */
	assert_int_equal(try_cfg(&c), 0);
}

/* No zero field switches a feature on: the all-zero config's context has no zero copy, no
 * library thread, no timestamps; zc_min goes to the backend as given. */
static void test_zero_means_off(void **state)
{
	(void)state;
	struct ms_config c = base();
	struct ms_ctx *ctx = NULL;
	assert_int_equal(ms_ctx_new(&ctx, &c), 0);
	assert_int_equal(ctx->zc_min, 0);
	assert_null(ctx->pool);
	assert_int_equal(ctx->ts_sample, 0);
	ms_ctx_free(ctx);
	c.zc_min = MS_ZC_MIN_DEFAULT;
	assert_int_equal(ms_ctx_new(&ctx, &c), 0);
	assert_int_equal(ctx->zc_min, MS_ZC_MIN_DEFAULT);
	ms_ctx_free(ctx);
	c.zc_min = 1;
	assert_int_equal(ms_ctx_new(&ctx, &c), 0);
	assert_int_equal(ctx->zc_min, 1);
	ms_ctx_free(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_out_null),
		cmocka_unit_test(test_size_too_small),
		cmocka_unit_test(test_size_too_large),
		cmocka_unit_test(test_size_tail_nonzero),
		cmocka_unit_test(test_flags_unknown),
		cmocka_unit_test(test_backend_outside_enum),
		cmocka_unit_test(test_auto_freeze_needs_auto),
		cmocka_unit_test(test_xdp_fields),
		cmocka_unit_test(test_queue_depth_range),
		cmocka_unit_test(test_zc_min_range),
		cmocka_unit_test(test_ts_sample_range),
		cmocka_unit_test(test_ts_flags_unknown),
		cmocka_unit_test(test_ts_flags_without_ts_sample),
		cmocka_unit_test(test_workers_range),
		cmocka_unit_test(test_offload_kib_without_offload),
		cmocka_unit_test(test_offload_kib_range),
		cmocka_unit_test(test_spin_us_without_threads),
		cmocka_unit_test(test_spin_us_range),
		cmocka_unit_test(test_ncpus_without_threads),
		cmocka_unit_test(test_ncpus_above_threads),
		cmocka_unit_test(test_ncpus_without_cpus),
		cmocka_unit_test(test_cpus_without_ncpus),
		cmocka_unit_test(test_cpu_not_allowed),
		cmocka_unit_test(test_stats_shm_path),
		cmocka_unit_test(test_zero_means_off),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
