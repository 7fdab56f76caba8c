/* SPDX-License-Identifier: MIT */
/*
 * The capacity recommendation as a pure function of its inputs, so that the rule can be
 * tested on fixed numbers (tests/bench/test-recommend.c) and stated in the output.
 *
 * Backends whose N per core lie within the run's own noise of the largest are tied: one run
 * cannot tell them apart, and picking the largest of them would change from run to run. Two
 * N are within noise when they differ by no more than the larger of the two backends' noise
 * (capacity.c: the larger of the CPU per destination's min-max over rounds relative to the
 * median, and the fit's largest relative deviation, both from this run). Among tied backends
 * the rule is fixed and said: with a p99 bound, the lowest measured p99 at its N (a backend
 * without a measured p99 comes after those with one); without a bound, the simplest backend
 * (loop < sendmmsg < io_uring < xdp < kfanout < auto). A remaining tie goes to the simpler, then to the
 * earlier row.
 */
#ifndef BENCH_RECOMMEND_H
#define BENCH_RECOMMEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rec_row {
	uint64_t n;          /* N per core; 0: cannot serve one subscriber */
	double spread;       /* relative uncertainty of n: the run's own noise (0.1 = 10%) */
	double p99_us;       /* measured p99 at n; meaningful when measured */
	bool measured;
	bool eligible;       /* may be recommended (a library backend) */
	unsigned simplicity; /* lower is simpler */
};

enum rec_rule {
	REC_NONE,       /* no eligible row serves anyone */
	REC_MOST,       /* one backend serves more than every other beyond the noise */
	REC_TIE_P99,    /* tied; the lowest measured p99 (a bound was given) */
	REC_TIE_SIMPLE, /* tied; the simplest */
};

struct rec_result {
	int best;            /* row index, -1: none */
	enum rec_rule rule;
	unsigned ntied;      /* rows tied with the largest N, best included (1 when alone) */
	bool tied[64];       /* which rows (the first 64) */
	double noise;        /* the widest spread among the tied rows */
};

/* Whether a and b (N per core) are within noise of each other for spreads sa and sb. */
bool rec_within_noise(uint64_t a, uint64_t b, double sa, double sb);

/* Choose among rows[0..n) (n <= 64); by_p99: a p99 bound was given. */
void recommend(const struct rec_row *rows, unsigned n, bool by_p99, struct rec_result *out);

/* The rule that chose, in words, into buf ("" for REC_NONE). */
const char *rec_rule_text(const struct rec_result *r, char *buf, size_t len);

#endif
