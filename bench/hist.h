/* SPDX-License-Identifier: MIT */
/*
 * A log-linear histogram of non-negative integer values (nanoseconds here), in the spirit of
 * HdrHistogram: every power of two is split into HIST_SUB linear buckets, so a reported value
 * is never more than 1/HIST_SUB (0.8%) above the true one, whatever its magnitude, and
 * recording is a shift, an add and an increment. Memory is fixed when the histogram is made;
 * hist_record never allocates, so it can sit inside a timing loop.
 */
#ifndef BENCH_HIST_H
#define BENCH_HIST_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define HIST_SUB_BITS 7
#define HIST_SUB (1u << HIST_SUB_BITS)

struct hist {
	uint64_t *counts;
	uint32_t nbuckets;
	uint64_t highest;  /* values above are counted in the top bucket (max stays exact) */
	uint64_t total;
	uint64_t clamped;  /* values that were above highest */
	uint64_t min, max; /* exact */
	double sum, sumsq;
};

/* Bucket index of v (v <= highest). Values below 2 * HIST_SUB have a bucket each. */
static inline uint32_t hist_index(uint64_t v)
{
	unsigned msb = 63u - (unsigned)__builtin_clzll(v | 1);
	unsigned shift = msb > HIST_SUB_BITS ? msb - HIST_SUB_BITS : 0;

	return shift * HIST_SUB + (uint32_t)(v >> shift);
}

/* Make an empty histogram for values up to highest (>= 1). Returns 0 or -ENOMEM. */
int hist_init(struct hist *h, uint64_t highest);
void hist_free(struct hist *h);
void hist_reset(struct hist *h);

static inline void hist_record(struct hist *h, uint64_t v)
{
	uint64_t b = v;

	if (v > h->highest) {
		b = h->highest;
		h->clamped++;
	}
	h->counts[hist_index(b)]++;
	if (!h->total || v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
	h->total++;
	h->sum += (double)v;
	h->sumsq += (double)v * (double)v;
}

/* dst += src. Both must have been made with the same highest. Returns 0 or -EINVAL. */
int hist_add(struct hist *dst, const struct hist *src);

/* Smallest and largest value that bucket i stands for. */
uint64_t hist_bucket_low(uint32_t i);
uint64_t hist_bucket_high(uint32_t i);

/*
 * The nearest-rank percentile: the smallest recorded value v such that at least
 * ceil(p / 100 * total) values are <= v, reported as the highest value of v's bucket (never
 * above max). So exact <= reported <= exact * (1 + 1 / HIST_SUB). p = 0 gives min, p = 100
 * max. p is rounded to 1e-7 percent. 0 for an empty histogram.
 */
uint64_t hist_percentile(const struct hist *h, double p);

/* How many recorded values are <= hist_percentile(h, p) (the TotalCount column of .hgrm). */
uint64_t hist_count_at_percentile(const struct hist *h, double p);

double hist_mean(const struct hist *h);
double hist_stddev(const struct hist *h);

/*
 * Write the percentile distribution in HdrHistogram's text format (.hgrm), values divided by
 * unit (1000 turns nanoseconds into microseconds), percentiles stepping by halves towards 100%
 * with ticks_per_half steps in each half. Returns 0, or -EIO if the stream has an error.
 */
int hist_write_hgrm(const struct hist *h, FILE *f, double unit, unsigned ticks_per_half);

/*
 * Call fn for each reporting level of that walk (percent in [0, 100]), the same levels as
 * hist_write_hgrm: for charts of the percentile spectrum.
 */
void hist_walk_levels(const struct hist *h, unsigned ticks_per_half,
		      void (*fn)(double percent, uint64_t value, uint64_t count, void *arg),
		      void *arg);

#endif
