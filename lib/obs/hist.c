/* SPDX-License-Identifier: MIT */
/* Log-linear histograms of nanoseconds (struct ms_hist). */
#include <errno.h>

#include "internal.h"

_Static_assert(MS_HIST_BUCKETS == (40 - 3) * MS_HIST_SUB, "16 exact buckets, then 2^4..2^39");

unsigned ms__hist_index(uint64_t v)
{
	if (v < MS_HIST_SUB)
		return (unsigned)v;
	unsigned k = 63u - (unsigned)__builtin_clzll(v); /* 2^k <= v < 2^(k+1), k >= 4 */
	unsigned i = (k - 3) * MS_HIST_SUB + (unsigned)((v >> (k - 4)) & (MS_HIST_SUB - 1));
	return i < MS_HIST_BUCKETS ? i : MS_HIST_BUCKETS - 1;
}

int ms_hist_bucket_range(unsigned i, uint64_t *lo, uint64_t *hi)
{
	if (i >= MS_HIST_BUCKETS || !lo || !hi)
		return -EINVAL;
	if (i < MS_HIST_SUB) {
		*lo = *hi = i;
		return 0;
	}
	unsigned k = i / MS_HIST_SUB + 3, sub = i % MS_HIST_SUB;
	*lo = (uint64_t)(MS_HIST_SUB + sub) << (k - 4);
	*hi = i == MS_HIST_BUCKETS - 1 ? UINT64_MAX : ((uint64_t)(MS_HIST_SUB + sub + 1) << (k - 4)) - 1;
	return 0;
}

uint64_t ms_hist_quantile(const struct ms_hist *h, double q)
{
	if (!h || !h->count)
		return 0;
	if (!(q > 0))
		return h->min_ns;
	if (q >= 1)
		return h->max_ns;
	/* The smallest value with at least ceil(q * count) values at or below it. */
	double want = q * (double)h->count;
	uint64_t rank = (uint64_t)want;
	if ((double)rank < want)
		rank++;
	uint64_t seen = 0;
	for (unsigned i = 0; i < MS_HIST_BUCKETS; i++) {
		seen += h->bucket[i];
		if (seen >= rank) {
			uint64_t lo, hi;
			ms_hist_bucket_range(i, &lo, &hi);
			if (hi > h->max_ns)
				hi = h->max_ns;
			return hi < h->min_ns ? h->min_ns : hi;
		}
	}
	return h->max_ns;
}

void ms__hist_add(struct ms_hist *h, uint64_t v)
{
	/* Stored one word at a time, atomically: a snapshot may be reading (under the seqlock). */
	uint64_t n = h->count;
	if (!n || v < h->min_ns)
		__atomic_store_n(&h->min_ns, v, __ATOMIC_RELAXED);
	if (v > h->max_ns)
		__atomic_store_n(&h->max_ns, v, __ATOMIC_RELAXED);
	__atomic_store_n(&h->count, n + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&h->sum_ns, h->sum_ns + v, __ATOMIC_RELAXED);
	unsigned i = ms__hist_index(v);
	__atomic_store_n(&h->bucket[i], h->bucket[i] + 1, __ATOMIC_RELAXED);
}
