/* SPDX-License-Identifier: MIT */
/*
 * The bench's histogram against exact percentiles of sorted samples: for many distributions
 * (tiny integers, uniform, exponential, heavy-tailed, constant, bucket edges, huge values, a
 * single sample) and percentiles from 0 to 100, the reported value must lie between the exact
 * nearest-rank percentile and one bucket width above it (1/128 of it), min/max/count must be
 * exact, merging two histograms must equal recording everything into one, and the .hgrm text
 * must end on the total count.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hist.h"

static int failures;

#define CHECK(cond, ...)                                                                        \
	do {                                                                                    \
		if (!(cond)) {                                                                  \
			failures++;                                                             \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                    \
			fprintf(stderr, __VA_ARGS__);                                           \
			fputc('\n', stderr);                                                    \
		}                                                                               \
	} while (0)

static uint64_t rng_state = 88172645463325252ull;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static double unit_rnd(void)
{
	return (double)(rnd() >> 11) / 9007199254740992.0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Percentiles in parts per million, so the exact rank is integer arithmetic. */
static const uint64_t ppm[] = { 0,      1,      10000,  250000, 500000, 750000, 900000,
				990000, 999000, 999900, 999990, 999999, 1000000 };

static uint64_t exact(const uint64_t *sorted, size_t n, uint64_t p_ppm)
{
	if (p_ppm == 0)
		return sorted[0];
	uint64_t rank = (p_ppm * n + 999999) / 1000000; /* ceil(p * n), 1-based */

	if (rank < 1)
		rank = 1;
	return sorted[rank - 1];
}

static void check_against_sorted(const char *name, uint64_t *v, size_t n, uint64_t highest)
{
	struct hist h;

	if (hist_init(&h, highest)) {
		CHECK(0, "%s: hist_init failed", name);
		return;
	}
	for (size_t i = 0; i < n; i++)
		hist_record(&h, v[i]);
	qsort(v, n, sizeof(*v), cmp_u64);
	CHECK(h.total == n, "%s: total %" PRIu64 " != %zu", name, h.total, n);
	CHECK(h.min == v[0], "%s: min %" PRIu64 " != %" PRIu64, name, h.min, v[0]);
	CHECK(h.max == v[n - 1], "%s: max %" PRIu64 " != %" PRIu64, name, h.max, v[n - 1]);
	for (size_t k = 0; k < sizeof(ppm) / sizeof(ppm[0]); k++) {
		double p = (double)ppm[k] / 10000.0;
		uint64_t want = exact(v, n, ppm[k]);
		uint64_t got = hist_percentile(&h, p);
		/* One bucket: width 1 below 256, else at most want / 128. */
		uint64_t slack = want < 2 * HIST_SUB ? 0 : want / HIST_SUB;

		if (want > highest)
			continue; /* clamped values only keep max exact */
		CHECK(got >= want && got <= want + slack,
		      "%s: p%.4f = %" PRIu64 ", exact %" PRIu64 " (slack %" PRIu64 ")", name, p, got,
		      want, slack);
		/* The count at that percentile covers the rank and stays within the bucket. */
		uint64_t cnt = hist_count_at_percentile(&h, p);
		uint64_t rank = ppm[k] ? (ppm[k] * n + 999999) / 1000000 : 1;

		CHECK(cnt >= rank && cnt <= n, "%s: count at p%.4f = %" PRIu64 ", rank %" PRIu64,
		      name, p, cnt, rank);
	}
	double sum = 0;

	for (size_t i = 0; i < n; i++)
		sum += (double)v[i];
	CHECK(fabs(hist_mean(&h) - sum / (double)n) <= 1e-9 * (sum / (double)n) + 1e-9,
	      "%s: mean %f != %f", name, hist_mean(&h), sum / (double)n);
	hist_free(&h);
}

static void test_distributions(void)
{
	enum { N = 200003 };
	uint64_t *v = malloc(N * sizeof(*v));

	if (!v) {
		CHECK(0, "out of memory");
		return;
	}
	for (size_t i = 0; i < N; i++)
		v[i] = rnd() % 50;
	check_against_sorted("small integers", v, N, 1000000);

	for (size_t i = 0; i < N; i++)
		v[i] = 1000 + rnd() % 1000000;
	check_against_sorted("uniform", v, N, UINT64_C(1) << 40);

	for (size_t i = 0; i < N; i++)
		v[i] = (uint64_t)(-log(1 - unit_rnd()) * 20000.0);
	check_against_sorted("exponential", v, N, UINT64_C(1) << 40);

	/* Latency-like: a log-normal body with a Pareto tail of rare stalls. */
	for (size_t i = 0; i < N; i++) {
		double x = exp(8 + 0.5 * sqrt(-2 * log(1 - unit_rnd())) * cos(6.283185307 * unit_rnd()));

		if (rnd() % 1000 == 0)
			x *= 1 / pow(1 - unit_rnd(), 1.5) * 50;
		v[i] = (uint64_t)x;
	}
	check_against_sorted("heavy tail", v, N, UINT64_C(1) << 40);

	for (size_t i = 0; i < 1000; i++)
		v[i] = 777777;
	check_against_sorted("constant", v, 1000, UINT64_C(1) << 40);

	/* Every bucket edge and its neighbours, over many magnitudes. */
	size_t n = 0;
	for (unsigned s = 0; s < 30 && n + 6 * HIST_SUB < N; s++)
		for (unsigned k = 0; k < 2 * HIST_SUB; k += 1) {
			uint64_t edge = (uint64_t)(HIST_SUB + k % HIST_SUB) << s;

			v[n++] = edge;
			v[n++] = edge - 1;
			v[n++] = edge + 1;
		}
	check_against_sorted("bucket edges", v, n, UINT64_C(1) << 40);

	for (size_t i = 0; i < N; i++)
		v[i] = (rnd() >> 20) + (UINT64_C(1) << 40);
	check_against_sorted("huge values", v, N, UINT64_C(1) << 45);

	v[0] = 12345;
	check_against_sorted("one sample", v, 1, 1000000);
	free(v);
}

static void test_index_roundtrip(void)
{
	for (uint64_t x = 0; x < (UINT64_C(1) << 22); x += 1 + x / 1000) {
		uint32_t i = hist_index(x);

		CHECK(hist_bucket_low(i) <= x && x <= hist_bucket_high(i),
		      "value %" PRIu64 " outside its bucket %u [%" PRIu64 ", %" PRIu64 "]", x, i,
		      hist_bucket_low(i), hist_bucket_high(i));
		CHECK(i == 0 || hist_bucket_high(i - 1) + 1 == hist_bucket_low(i),
		      "buckets %u and %u are not adjacent", i - 1, i);
	}
}

static void test_merge_and_clamp(void)
{
	struct hist a, b, all;

	if (hist_init(&a, 1000000) || hist_init(&b, 1000000) || hist_init(&all, 1000000)) {
		CHECK(0, "hist_init failed");
		return;
	}
	for (int i = 0; i < 50000; i++) {
		uint64_t x = rnd() % 900000;

		hist_record(i % 3 ? &a : &b, x);
		hist_record(&all, x);
	}
	CHECK(hist_add(&a, &b) == 0, "hist_add failed");
	CHECK(a.total == all.total && a.min == all.min && a.max == all.max, "merged totals differ");
	CHECK(!memcmp(a.counts, all.counts, a.nbuckets * sizeof(*a.counts)), "merged counts differ");

	hist_record(&a, 5000000); /* above highest: counted, clamped, max exact */
	CHECK(a.clamped == 1 && a.max == 5000000, "clamping: clamped %" PRIu64 " max %" PRIu64,
	      a.clamped, a.max);
	CHECK(hist_percentile(&a, 100) == 5000000, "p100 is not the exact max");

	struct hist other;

	if (!hist_init(&other, 5000)) {
		CHECK(hist_add(&a, &other) != 0, "hist_add accepted a different layout");
		hist_free(&other);
	}
	hist_reset(&a);
	CHECK(a.total == 0 && hist_percentile(&a, 50) == 0, "reset left data");
	hist_free(&a);
	hist_free(&b);
	hist_free(&all);
}

static void test_hgrm(void)
{
	struct hist h;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f || hist_init(&h, UINT64_C(1) << 40)) {
		CHECK(0, "setup failed");
		return;
	}
	for (int i = 1; i <= 10000; i++)
		hist_record(&h, (uint64_t)i * 1000);
	CHECK(hist_write_hgrm(&h, f, 1000, 5) == 0, "hist_write_hgrm failed");
	fclose(f);
	CHECK(!strncmp(text, "       Value     Percentile TotalCount 1/(1-Percentile)\n\n", 57),
	      "hgrm header differs:\n%.80s", text);
	CHECK(strstr(text, "  10000.000 1.000000000000      10000\n") != NULL,
	      "hgrm has no final 100%% line for 10000 values");
	CHECK(strstr(text, "#[Max     =    10000.000, Total count    =        10000]") != NULL,
	      "hgrm footer differs");
	/* Percentile column strictly increasing, counts never decreasing. */
	double last_p = -1;
	unsigned long long last_c = 0;
	int lines = 0;

	for (char *line = strchr(text, '\n') + 2; line && *line && *line != '#';) {
		double v, p;
		unsigned long long c;

		if (sscanf(line, "%lf %lf %llu", &v, &p, &c) != 3)
			break;
		CHECK(p > last_p && c >= last_c, "hgrm line out of order: %.60s", line);
		last_p = p;
		last_c = c;
		lines++;
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	CHECK(lines > 20 && last_c == 10000, "hgrm has %d lines, last count %llu", lines, last_c);
	free(text);
	hist_free(&h);
}

int main(void)
{
	test_index_roundtrip();
	test_distributions();
	test_merge_and_clamp();
	test_hgrm();
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("histogram: all checks passed\n");
	return 0;
}
