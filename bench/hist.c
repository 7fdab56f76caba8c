/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hist.h"

int hist_init(struct hist *h, uint64_t highest)
{
	memset(h, 0, sizeof(*h));
	if (!highest)
		highest = 1;
	h->highest = highest;
	h->nbuckets = hist_index(highest) + 1;
	h->counts = calloc(h->nbuckets, sizeof(*h->counts));
	return h->counts ? 0 : -ENOMEM;
}

void hist_free(struct hist *h)
{
	free(h->counts);
	memset(h, 0, sizeof(*h));
}

void hist_reset(struct hist *h)
{
	memset(h->counts, 0, h->nbuckets * sizeof(*h->counts));
	h->total = h->clamped = h->min = h->max = 0;
	h->sum = h->sumsq = 0;
}

int hist_add(struct hist *dst, const struct hist *src)
{
	if (dst->nbuckets != src->nbuckets || dst->highest != src->highest)
		return -EINVAL;
	if (!src->total)
		return 0;
	for (uint32_t i = 0; i < src->nbuckets; i++)
		dst->counts[i] += src->counts[i];
	if (!dst->total || src->min < dst->min)
		dst->min = src->min;
	if (src->max > dst->max)
		dst->max = src->max;
	dst->total += src->total;
	dst->clamped += src->clamped;
	dst->sum += src->sum;
	dst->sumsq += src->sumsq;
	return 0;
}

uint64_t hist_bucket_low(uint32_t i)
{
	if (i < 2 * HIST_SUB)
		return i;
	unsigned shift = i / HIST_SUB - 1;

	return (uint64_t)(i % HIST_SUB + HIST_SUB) << shift;
}

uint64_t hist_bucket_high(uint32_t i)
{
	if (i < 2 * HIST_SUB)
		return i;
	unsigned shift = i / HIST_SUB - 1;

	return hist_bucket_low(i) + (UINT64_C(1) << shift) - 1;
}

/* 1-based rank of the nearest-rank percentile. p is taken in units of 1e-7 percent so that
 * decimal percentiles (99.99) are exact and the rank does not depend on float rounding. */
static uint64_t rank_of(const struct hist *h, double p)
{
	if (p <= 0)
		return 1;
	if (p >= 100)
		return h->total;
	unsigned __int128 units = (unsigned __int128)llround(p * 1e7); /* of 1e9 */
	unsigned __int128 r = (units * h->total + 999999999u) / 1000000000u;

	if (r < 1)
		r = 1;
	return r > h->total ? h->total : (uint64_t)r;
}

/* Index of the bucket holding the rank-th smallest value, and the count up to it. */
static uint32_t bucket_of_rank(const struct hist *h, uint64_t rank, uint64_t *cum_out)
{
	uint64_t cum = 0;
	uint32_t i;

	for (i = 0; i < h->nbuckets; i++) {
		cum += h->counts[i];
		if (cum >= rank)
			break;
	}
	if (i == h->nbuckets)
		i = h->nbuckets - 1;
	if (cum_out)
		*cum_out = cum;
	return i;
}

uint64_t hist_percentile(const struct hist *h, double p)
{
	if (!h->total)
		return 0;
	if (p <= 0)
		return h->min;
	if (p >= 100)
		return h->max;
	uint64_t v = hist_bucket_high(bucket_of_rank(h, rank_of(h, p), NULL));

	if (v > h->max)
		v = h->max;
	if (v < h->min)
		v = h->min;
	return v;
}

uint64_t hist_count_at_percentile(const struct hist *h, double p)
{
	uint64_t cum;

	if (!h->total)
		return 0;
	if (p >= 100)
		return h->total;
	bucket_of_rank(h, rank_of(h, p), &cum);
	return cum;
}

double hist_mean(const struct hist *h)
{
	return h->total ? h->sum / (double)h->total : 0;
}

double hist_stddev(const struct hist *h)
{
	if (h->total < 2)
		return 0;
	double m = hist_mean(h);
	double var = h->sumsq / (double)h->total - m * m;

	return var > 0 ? sqrt(var) : 0;
}

void hist_walk_levels(const struct hist *h, unsigned ticks_per_half,
		      void (*fn)(double percent, uint64_t value, uint64_t count, void *arg),
		      void *arg)
{
	if (!h->total)
		return;
	if (!ticks_per_half)
		ticks_per_half = 5;
	/* The step halves each time the remaining distance to 100% halves, so the tail gets as
	 * many reporting points per "nine" as the body. The iteration cap only guards against a
	 * float pathology; rank_of reaches total well before it. */
	double level = 0;

	for (int guard = 0; guard < 100000; guard++) {
		uint64_t count = hist_count_at_percentile(h, level);

		if (count >= h->total)
			break;
		fn(level, hist_percentile(h, level), count, arg);
		double halvings = floor(log2(100.0 / (100.0 - level)));

		level += 100.0 / (ticks_per_half * pow(2.0, halvings + 1));
		if (level >= 100)
			break;
	}
	fn(100, h->max, h->total, arg);
}

struct hgrm_out {
	FILE *f;
	double unit;
};

static void hgrm_line(double percent, uint64_t value, uint64_t count, void *arg)
{
	struct hgrm_out *o = arg;
	double q = percent / 100;

	if (percent >= 100)
		fprintf(o->f, "%12.3f %2.12f %10llu\n", (double)value / o->unit, 1.0,
			(unsigned long long)count);
	else
		fprintf(o->f, "%12.3f %2.12f %10llu %14.2f\n", (double)value / o->unit, q,
			(unsigned long long)count, 1 / (1 - q));
}

int hist_write_hgrm(const struct hist *h, FILE *f, double unit, unsigned ticks_per_half)
{
	struct hgrm_out o = { f, unit > 0 ? unit : 1 };
	uint32_t used = 0;

	for (uint32_t i = 0; i < h->nbuckets; i++)
		if (h->counts[i])
			used = i + 1;
	fprintf(f, "%12s %14s %10s %14s\n\n", "Value", "Percentile", "TotalCount",
		"1/(1-Percentile)");
	hist_walk_levels(h, ticks_per_half, hgrm_line, &o);
	fprintf(f, "#[Mean    = %12.3f, StdDeviation   = %12.3f]\n", hist_mean(h) / o.unit,
		hist_stddev(h) / o.unit);
	fprintf(f, "#[Max     = %12.3f, Total count    = %12llu]\n", (double)h->max / o.unit,
		(unsigned long long)h->total);
	/* "Buckets" counts powers of two in use, as HdrHistogram does; SubBuckets per power. */
	fprintf(f, "#[Buckets = %12u, SubBuckets     = %12u]\n",
		used > 2 * HIST_SUB ? (used - 1) / HIST_SUB : 1, 2 * HIST_SUB);
	return ferror(f) ? -EIO : 0;
}
