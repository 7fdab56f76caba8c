/* SPDX-License-Identifier: MIT */
/*
 * The capacity recommendation's rule (bench/recommend.c) on fixed inputs: a backend that
 * serves more than the others beyond the run's noise is chosen for that; backends within the
 * noise of the largest N are tied and the stated rule chooses among them (the simplest without
 * a p99 bound, the lowest measured p99 with one), whatever their order and however their N
 * move inside the noise; baselines are never chosen; nothing serving anyone chooses nothing.
 */
#include <stdio.h>
#include <string.h>

#include "recommend.h"

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

enum { LOOP, SENDMMSG, IO_URING }; /* simplicity ranks as capacity.c gives them */

static struct rec_row row(uint64_t n, double spread, double p99, bool measured, unsigned simp)
{
	struct rec_row r = { .n = n, .spread = spread, .p99_us = p99, .measured = measured,
			     .eligible = true, .simplicity = simp };

	return r;
}

static uint64_t rng_state = 88172645463325252ull;

static double unit_rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (double)(rng_state >> 11) / (double)(1ull << 53);
}

int main(void)
{
	struct rec_result r;
	char buf[512];

	/* The edge of the noise: 10% of the larger N. */
	CHECK(rec_within_noise(100, 90, 0.10, 0), "90 is within 10%% of 100");
	CHECK(!rec_within_noise(100, 89, 0.10, 0.05), "89 is not within 10%% of 100");
	CHECK(rec_within_noise(90, 100, 0.05, 0.10), "the larger spread of the two counts");
	CHECK(rec_within_noise(7, 7, 0, 0), "equal N are always tied");
	CHECK(!rec_within_noise(8, 7, 0, 0), "no spread: only equal N are tied");

	/* A clear winner beyond the noise: chosen for serving the most, even if not simplest. */
	struct rec_row clear[] = { row(800, 0.05, 40, true, LOOP), row(1000, 0.05, 90, true,
									 IO_URING),
				   row(900, 0.05, 30, true, SENDMMSG) };

	recommend(clear, 3, false, &r);
	CHECK(r.best == 1 && r.rule == REC_MOST && r.ntied == 1, "clear winner: best %d rule %d "
	      "tied %u", r.best, r.rule, r.ntied);
	recommend(clear, 3, true, &r);
	CHECK(r.best == 1 && r.rule == REC_MOST, "clear winner with a bound: best %d", r.best);
	CHECK(strstr(rec_rule_text(&r, buf, sizeof(buf)), "serves the most"), "rule text: %s",
	      buf);

	/* Three within 10% of each other: tied; no bound -> the simplest (loop), in any order. */
	struct rec_row tie[] = { row(1080, 0.10, 80, true, IO_URING), row(1000, 0.10, 50, true,
									   LOOP),
				 row(1050, 0.10, 30, true, SENDMMSG) };
	static const unsigned perm[6][3] = { { 0, 1, 2 }, { 0, 2, 1 }, { 1, 0, 2 },
					     { 1, 2, 0 }, { 2, 0, 1 }, { 2, 1, 0 } };

	for (int p = 0; p < 6; p++) {
		struct rec_row x[3];

		for (int i = 0; i < 3; i++)
			x[i] = tie[perm[p][i]];
		recommend(x, 3, false, &r);
		CHECK(r.best >= 0 && x[r.best].simplicity == LOOP && r.rule == REC_TIE_SIMPLE &&
			      r.ntied == 3,
		      "tie, order %d: chose simplicity %u, rule %d, %u tied", p,
		      r.best >= 0 ? x[r.best].simplicity : 99, r.rule, r.ntied);
		/* With a bound: the lowest measured p99 (sendmmsg's 30 us), not the largest N. */
		recommend(x, 3, true, &r);
		CHECK(r.best >= 0 && x[r.best].simplicity == SENDMMSG && r.rule == REC_TIE_P99,
		      "tie with bound, order %d: chose simplicity %u, rule %d", p,
		      r.best >= 0 ? x[r.best].simplicity : 99, r.rule);
	}
	recommend(tie, 3, false, &r);
	rec_rule_text(&r, buf, sizeof(buf));
	CHECK(strstr(buf, "3 backends are within this run's noise (10%") && strstr(buf, "simplest"),
	      "tie rule text: %s", buf);

	/* Stable: the N of three tied backends moved at random within the noise 2000 times (the
	 * run-to-run change that made the old rule flip between them): always the same choice. */
	for (int t = 0; t < 2000; t++) {
		struct rec_row x[3];

		for (int i = 0; i < 3; i++) {
			x[i] = row(1000, 0.12, 50 + 10 * i, true, (unsigned)i);
			x[i].n = (uint64_t)(1000 * (1 + 0.05 * (2 * unit_rnd() - 1)));
		}
		recommend(x, 3, false, &r);
		CHECK(r.best == 0, "trial %d: %llu %llu %llu chose %d", t, (unsigned long long)x[0].n,
		      (unsigned long long)x[1].n, (unsigned long long)x[2].n, r.best);
	}

	/* With a bound, a measured p99 beats an unmeasured one (a model-only N). */
	struct rec_row mix[] = { row(1000, 0.1, 0, false, LOOP), row(980, 0.1, 70, true,
								     IO_URING) };

	recommend(mix, 2, true, &r);
	CHECK(r.best == 1 && r.rule == REC_TIE_P99, "measured first: best %d rule %d", r.best,
	      r.rule);
	/* None measured: the simplest. */
	mix[1].measured = false;
	recommend(mix, 2, true, &r);
	CHECK(r.best == 0 && r.rule == REC_TIE_SIMPLE, "none measured: best %d rule %d", r.best,
	      r.rule);

	/* A baseline (not eligible) with the largest N neither wins nor sets the tie. */
	struct rec_row raw[] = { row(5000, 0.01, 10, true, 0), row(1000, 0.05, 60, true, IO_URING),
				 row(900, 0.05, 50, true, LOOP) };

	raw[0].eligible = false;
	recommend(raw, 3, false, &r);
	CHECK(r.best == 1 && r.rule == REC_MOST, "baseline ignored: best %d rule %d", r.best,
	      r.rule);

	/* Nobody serves one subscriber: no recommendation. */
	struct rec_row none[] = { row(0, 0.1, 0, false, LOOP), row(0, 0.1, 0, false, SENDMMSG) };

	recommend(none, 2, true, &r);
	CHECK(r.best == -1 && r.rule == REC_NONE && r.ntied == 0, "none: best %d", r.best);
	CHECK(!rec_rule_text(&r, buf, sizeof(buf))[0], "no rule text without a choice");
	recommend(none, 0, false, &r);
	CHECK(r.best == -1, "no rows");

	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("ok\n");
	return 0;
}
