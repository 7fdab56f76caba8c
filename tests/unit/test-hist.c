/* SPDX-License-Identifier: MIT */
/* The log-linear histogram (lib/obs/hist.c): buckets tile the whole range, each at most 1/16 of its
 * values wide, and quantiles land within one bucket of the exact value. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"

static void test_buckets_tile_the_range(void **state)
{
	(void)state;
	uint64_t prev_hi = 0;
	for (unsigned i = 0; i < MS_HIST_BUCKETS; i++) {
		uint64_t lo, hi;
		assert_int_equal(ms_hist_bucket_range(i, &lo, &hi), 0);
		assert_true(lo <= hi);
		if (i)
			assert_true(lo == prev_hi + 1);
		else
			assert_true(lo == 0);
		assert_int_equal(ms__hist_index(lo), i);
		assert_int_equal(ms__hist_index(hi), i);
		if (i >= MS_HIST_SUB && i < MS_HIST_BUCKETS - 1)
			assert_true((hi - lo + 1) * MS_HIST_SUB <= lo); /* within 6.25% */
		prev_hi = hi;
	}
	assert_true(prev_hi == UINT64_MAX);
	assert_int_equal(ms__hist_index(UINT64_C(1) << 40), MS_HIST_BUCKETS - 1);
	assert_int_equal(ms__hist_index(UINT64_MAX), MS_HIST_BUCKETS - 1);
	uint64_t lo, hi;
	assert_int_equal(ms_hist_bucket_range(MS_HIST_BUCKETS, &lo, &hi), -EINVAL);
	assert_int_equal(ms_hist_bucket_range(0, NULL, &hi), -EINVAL);
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void test_quantiles(void **state)
{
	(void)state;
	enum { N = 100000 };
	static uint64_t v[N];
	static struct ms_hist h;
	memset(&h, 0, sizeof(h));
	assert_int_equal(ms_hist_quantile(&h, 0.5), 0);
	assert_int_equal(ms_hist_quantile(NULL, 0.5), 0);
	uint64_t x = 88172645463325252u, sum = 0;
	for (int i = 0; i < N; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		v[i] = (x % 1000000) * (1 + (x >> 60)); /* a wide, lumpy spread */
		ms__hist_add(&h, v[i]);
		sum += v[i];
	}
	qsort(v, N, sizeof(v[0]), cmp);
	assert_int_equal(h.count, N);
	assert_true(h.sum_ns == sum);
	assert_true(h.min_ns == v[0]);
	assert_true(h.max_ns == v[N - 1]);
	uint64_t seen = 0;
	for (unsigned i = 0; i < MS_HIST_BUCKETS; i++)
		seen += h.bucket[i];
	assert_true(seen == N);
	const double qs[] = { 0.001, 0.25, 0.5, 0.9, 0.99, 0.999, 0.9999 };
	for (size_t k = 0; k < sizeof(qs) / sizeof(qs[0]); k++) {
		uint64_t exact = v[(size_t)(qs[k] * N + 0.999999) - 1], got = ms_hist_quantile(&h, qs[k]);
		/* The bucket's upper end: never below the exact value, at most one bucket above. */
		assert_true(got >= exact);
		assert_true(got <= exact + exact / MS_HIST_SUB + 1);
	}
	assert_true(ms_hist_quantile(&h, 0) == v[0]);
	assert_true(ms_hist_quantile(&h, 1) == v[N - 1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buckets_tile_the_range),
		cmocka_unit_test(test_quantiles),
	};
	return cmocka_run_group_tests_name("hist", tests, NULL, NULL);
}
