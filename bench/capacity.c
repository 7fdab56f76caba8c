/* SPDX-License-Identifier: MIT */
/*
 * Capacity: how many subscribers one core can serve at a given message rate and size, within
 * a CPU budget and (optionally) a tail-latency bound.
 *
 * 1. Sweep fan-outs for the size and fit, per backend, the process CPU per fan-out as
 *    a + b*N (a: what a call costs whatever N, b: each destination) and the wall time per
 *    fan-out the same way. Weighted least squares on relative error, so N = 1 counts as much
 *    as N = 1024.
 * 2. At rate R the CPU used per second is R * (a + b*N): N_cpu = (budget * 1e9 / R - a) / b.
 *    With a p99 bound, the last destination of a fan-out is served after the whole call, so
 *    the model limit is N_lat = (bound - a_wall) / b_wall.
 * 3. Measure, do not trust the model alone: run the latency mode at the candidate N and R
 *    and, while its p99 is over the bound, step N down and measure again.
 * 4. The recommended backend serves the most subscribers, unless others are within this run's
 *    noise of it: then a stated rule chooses among them (recommend.h), so that the answer does
 *    not change from run to run with the noise. Larger audiences need ceil(M / N) cores, or
 *    relay hosts in a one-level tree; with IP multicast (--segments S) a group address per
 *    segment is one destination, so S (+ --unicast U) destinations per message.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "recommend.h"
#include "run.h"

struct fit {
	double a, b, dev;
};

/* y = a + b*x minimising sum(((y_i - a - b*x_i) / y_i)^2). */
static int fit_rel(const double *x, const double *y, unsigned n, struct fit *f)
{
	double S = 0, Sx = 0, Sy = 0, Sxx = 0, Sxy = 0;

	memset(f, 0, sizeof(*f));
	if (!n)
		return -EINVAL;
	if (n == 1) { /* one point cannot separate a from b: all of it per destination */
		f->b = y[0] / x[0];
		return 0;
	}
	for (unsigned i = 0; i < n; i++) {
		double w = y[i] > 0 ? 1 / (y[i] * y[i]) : 0;

		S += w;
		Sx += w * x[i];
		Sy += w * y[i];
		Sxx += w * x[i] * x[i];
		Sxy += w * x[i] * y[i];
	}
	double det = S * Sxx - Sx * Sx;

	if (fabs(det) < 1e-300)
		return -EDOM;
	f->b = (S * Sxy - Sx * Sy) / det;
	f->a = (Sxx * Sy - Sx * Sxy) / det;
	for (unsigned i = 0; i < n; i++) {
		double d = fabs(f->a + f->b * x[i] - y[i]) / y[i];

		if (d > f->dev)
			f->dev = d;
	}
	return 0;
}

/* Largest N with a + b*N <= limit (a clamped at 0: a negative intercept is fitting noise). */
static uint64_t n_within(double a, double b, double limit)
{
	if (a < 0)
		a = 0;
	if (b <= 0 || limit <= a)
		return 0;
	double n = floor((limit - a) / b);

	return n > 1e12 ? (uint64_t)1e12 : (uint64_t)n;
}

static void verify_row(struct session *s, struct cap_row *row, uint64_t cand, double bound_ns)
{
	unsigned tries = s->o->quick ? 2 : 6;
	double secs = s->o->quick ? 0.3 : 1.0;

	row->n_max = cand;
	while (cand >= 1 && tries--) {
		double p99;

		if (rig_fds_needed(s, cand) > s->env.nofile || cand > 50000) {
			snprintf(row->note, sizeof(row->note),
				 "model only: N = %llu is more than this host can set up to measure",
				 (unsigned long long)cand);
			return;
		}
		int err = latency_probe(s, row->v, cand, s->cap.size, s->cap.rate, secs, &p99,
					&row->preempted);

		if (err) {
			snprintf(row->note, sizeof(row->note), "not measured: %s", ms_strerror(err));
			return;
		}
		row->n_max = cand;
		row->p99_us = p99 / 1000;
		row->verified = true;
		progress_step(s, 0, "capacity: %s at N = %llu: p99 %.1f us", variant_name(row->v),
			      (unsigned long long)cand, p99 / 1000);
		if (bound_ns <= 0 || p99 <= bound_ns)
			return;
		/* Over the bound: step down in proportion, at least by one. */
		uint64_t next = (uint64_t)((double)cand * fmax(0.5, fmin(0.9, bound_ns / p99)));

		cand = next < cand ? next : cand - 1;
		row->verified = false;
	}
	if (bound_ns > 0 && row->verified == false) {
		row->n_max = cand;
		snprintf(row->note, sizeof(row->note), "p99 still above the bound after %s%s",
			 cand ? "stepping down" : "N = 1",
			 row->preempted > 10 ? "; the sending thread was preempted: other work on "
					       "this machine, not the backend, sets this tail"
					     : "");
	}
}

/* The rule's order among tied backends (recommend.h): the plain library backends from the
 * simplest, then their variants ("+ts", "+wK"...) in the same order. */
static unsigned simplicity(enum variant_id v)
{
	unsigned extra = v != variant_base(v) ? 10 : 0;

	switch (variant_base(v)) {
	case V_LOOP:
		return extra;
	case V_SENDMMSG:
		return 1 + extra;
	case V_IO_URING:
		return 2 + extra;
	case V_XDP:
		return 3 + extra;
	case V_KFANOUT:
		return 4 + extra;
	default:
		return 5 + extra;
	}
}

#define APPEND(...)                                                                             \
	do {                                                                                    \
		int w_ = snprintf(p, left, __VA_ARGS__);                                        \
		if (w_ > 0)                                                                     \
			p += (size_t)w_ < left ? (size_t)w_ : left - 1,                         \
			left -= (size_t)w_ < left ? (size_t)w_ : left - 1;                      \
	} while (0)

/* --segments S: S group addresses, one per segment, reach every subscriber of that segment
 * with one send; the sender pays one destination for each (the network makes the copies),
 * plus one for each --unicast subscriber. */
static void answer_multicast(struct session *s)
{
	struct capacity *c = &s->cap;
	const struct opts *o = s->o;
	char *p = c->multicast;
	size_t left = sizeof(c->multicast);

	if (!o->segments)
		return;
	c->mc_dests = o->segments + o->unicast;
	APPEND("With IP multicast: %llu group address%s (one per segment)",
	       (unsigned long long)o->segments, o->segments == 1 ? "" : "es");
	if (o->unicast)
		APPEND(" + %llu unicast", (unsigned long long)o->unicast);
	APPEND(" = %llu destination%s per message", (unsigned long long)c->mc_dests,
	       c->mc_dests == 1 ? "" : "s");
	if (o->subscribers)
		APPEND(" instead of %llu", (unsigned long long)o->subscribers);
	if (c->best < 0) {
		APPEND(", but no backend met the budget%s here, so no core count follows",
		       c->bound_us > 0 ? " and bound" : "");
		return;
	}
	const struct cap_row *b = &c->row[c->best];
	const double a = b->a > 0 ? b->a : 0;

	c->mc_cores = (c->mc_dests + b->n_max - 1) / b->n_max;
	c->mc_share = (double)c->rate * (a + b->b * (double)c->mc_dests) / 1e9;
	if (c->mc_cores <= 1)
		APPEND(": one core with %s, using about %.0f%% of it at %llu msg/s (from its fit)",
		       variant_name(b->v), c->mc_share * 100, (unsigned long long)c->rate);
	else
		APPEND(": %llu cores with %s (%llu per core)", (unsigned long long)c->mc_cores,
		       variant_name(b->v), (unsigned long long)b->n_max);
	APPEND("; a group address costs the sender one destination, the network copies it to "
	       "every member of its segment");
}

static void answer(struct session *s)
{
	struct capacity *c = &s->cap;
	char *p = c->sentence;
	size_t left = sizeof(c->sentence);
	struct rec_row rr[V_COUNT];
	struct rec_result rec;

	/* The recommendation is a library backend; the hand-written baselines are yardsticks. */
	for (unsigned i = 0; i < c->nrows; i++) {
		const struct cap_row *r = &c->row[i];

		rr[i] = (struct rec_row){ .n = r->n_max, .spread = r->spread, .p99_us = r->p99_us,
					  .measured = r->verified, .eligible = !variant_is_raw(r->v),
					  .simplicity = simplicity(r->v) };
	}
	recommend(rr, c->nrows, c->bound_us > 0, &rec);
	c->best = rec.best;
	for (unsigned i = 0; i < c->nrows; i++)
		c->row[i].tied = rec.tied[i];
	rec_rule_text(&rec, c->rule, sizeof(c->rule));
	APPEND("At %llu msg/s of %llu B, within %.0f%% of one core", (unsigned long long)c->rate,
	       (unsigned long long)c->size, c->budget * 100);
	if (c->bound_us > 0)
		APPEND(" and p99 <= %.0f us", c->bound_us);
	if (c->best < 0) {
		/* Say what limited it: the CPU budget, or a tail set by other work on the host. */
		const struct cap_row *cpu = NULL;
		uint64_t pre = 0;

		for (unsigned i = 0; i < c->nrows; i++) {
			const struct cap_row *r = &c->row[i];

			pre += r->preempted;
			if (!variant_is_raw(r->v) && r->n_cpu && (!cpu || r->n_cpu > cpu->n_cpu))
				cpu = r;
		}
		if (!cpu)
			APPEND(", no backend can serve even one subscriber: the rate alone exceeds the "
			       "CPU budget.");
		else
			APPEND(", the CPU budget alone would allow %llu subscribers per core (%s), but "
			       "the measured p99 stayed above the bound down to one subscriber%s: "
			       "this host cannot meet the bound as it is; measure on a quiet machine "
			       "or an isolated core (--cpu).",
			       (unsigned long long)cpu->n_cpu, variant_name(cpu->v),
			       pre > 10 ? ", because other work on the host kept preempting the "
					  "sending thread"
					: "");
		answer_multicast(s);
		return;
	}
	const struct cap_row *b = &c->row[c->best];

	APPEND(", one core serves at most %llu subscribers with %s (recommended",
	       (unsigned long long)b->n_max, variant_name(b->v));
	for (unsigned i = 0, first = 1; i < c->nrows; i++) {
		const struct cap_row *r = &c->row[i];

		if ((int)i == c->best)
			continue;
		APPEND("%s%s %llu%s", first ? "; " : ", ", variant_name(r->v),
		       (unsigned long long)r->n_max, r->tied ? " (tied)" : "");
		first = 0;
	}
	APPEND(")");
	if (b->verified)
		APPEND(", with a measured p99 of %.0f us at that load", b->p99_us);
	uint64_t m = s->o->subscribers;

	if (m) {
		uint64_t cores = (m + b->n_max - 1) / b->n_max;
		unsigned rc = s->o->relay_cores ? s->o->relay_cores : (unsigned)s->env.cores_online;
		uint64_t per_relay = (uint64_t)rc * b->n_max;
		uint64_t relays = (m + per_relay - 1) / per_relay;

		c->cores = cores;
		c->relay_cores = rc;
		if (cores <= 1)
			APPEND("; %llu subscribers fit on one core", (unsigned long long)m);
		else if (relays <= b->n_max) {
			c->relays = relays;
			APPEND("; %llu subscribers need %llu such cores, or, in a one-level tree, one "
			       "publisher core feeding %llu relay host%s of %u core%s each",
			       (unsigned long long)m, (unsigned long long)cores,
			       (unsigned long long)relays, relays == 1 ? "" : "s", rc,
			       rc == 1 ? "" : "s");
		} else {
			c->relays = relays;
			APPEND("; %llu subscribers need %llu such cores; a one-level tree would need "
			       "%llu relay hosts of %u cores, more than one publisher core can feed "
			       "(%llu), so it takes a second level of relays",
			       (unsigned long long)m, (unsigned long long)cores,
			       (unsigned long long)relays, rc, (unsigned long long)b->n_max);
		}
	}
	APPEND(". Why %s: %s%s.", variant_name(b->v), c->rule,
	       rec.rule == REC_TIE_SIMPLE && c->bound_us <= 0
		       ? "; give --p99-bound to choose among them by tail latency instead"
		       : "");
	answer_multicast(s);
}

/* The backend's noise: its CPU per destination's min-max over rounds relative to the median,
 * at each fan-out of the sweep; the median of those (one noisy fan-out does not set it). */
static double row_spread(const struct session *s, enum variant_id v, uint64_t size)
{
	double sp[MAX_LIST];
	unsigned n = 0;

	for (size_t i = 0; i < s->nres && n < MAX_LIST; i++) {
		const struct result *r = &s->res[i];

		if (r->mode == MODE_CAPACITY && r->v == v && r->size == size &&
		    r->cpu_proc.median > 0)
			sp[n++] = (r->cpu_proc.max - r->cpu_proc.min) / r->cpu_proc.median;
	}
	if (!n)
		return 0;
	struct summary sm;

	summarize(sp, n, &sm);
	return sm.median;
}

int run_capacity(struct session *s)
{
	static const uint64_t def[] = { 1, 4, 16, 64, 256, 1024 }, quick[] = { 1, 16, 64, 256 };
	const struct opts *o = s->o;
	const uint64_t *fanouts = o->nfanouts ? o->fanouts : o->quick ? quick : def;
	unsigned nf = o->nfanouts ? o->nfanouts : o->quick ? ARRAY_SIZE(quick) : ARRAY_SIZE(def);
	struct capacity *c = &s->cap;
	enum variant_id act[V_COUNT];
	unsigned nv = active_variants(s, act);
	int err;

	memset(c, 0, sizeof(*c));
	c->size = o->nsizes ? o->sizes[0] : 64;
	c->rate = o->nrates ? o->rates[0] : 10000;
	c->budget = o->cpu_budget;
	c->bound_us = o->p99_bound_us;
	c->best = -1;

	err = run_throughput(s, MODE_CAPACITY, fanouts, nf, &c->size, 1);
	if (err)
		return err;
	for (unsigned k = 0; k < nv; k++) {
		double x[MAX_LIST], yc[MAX_LIST], yw[MAX_LIST];
		unsigned n = 0;
		struct fit fc, fw;
		struct cap_row *row = &c->row[c->nrows];

		for (size_t i = 0; i < s->nres; i++) {
			const struct result *r = &s->res[i];

			if (r->mode != MODE_CAPACITY || r->v != act[k] || r->size != c->size ||
			    n == MAX_LIST)
				continue;
			x[n] = (double)r->n;
			yc[n] = r->cpu_proc.median * (double)r->n;
			yw[n] = r->wall_dest.median * (double)r->n;
			n++;
		}
		if (!n || fit_rel(x, yc, n, &fc) || fit_rel(x, yw, n, &fw))
			continue;
		memset(row, 0, sizeof(*row));
		row->v = act[k];
		row->a = fc.a;
		row->b = fc.b;
		row->dev = fc.dev;
		row->aw = fw.a;
		row->bw = fw.b;
		row->n_cpu = n_within(fc.a, fc.b, c->budget * 1e9 / (double)c->rate);
		row->n_lat = c->bound_us > 0 ? n_within(fw.a, fw.b, c->bound_us * 1000) : UINT64_MAX;
		/* N comes from the fit: it is as uncertain as the points are spread and as far as
		 * the fit strays from them. */
		row->spread = fmax(row_spread(s, act[k], c->size), fc.dev);
		c->nrows++;
	}
	/* One unit per backend for the progress line's time left: each is measured at its
	 * candidate (a few steps down at most). */
	progress_plan(s, c->nrows);
	for (unsigned i = 0; i < c->nrows && !stopped(s); i++) {
		struct cap_row *row = &c->row[i];
		uint64_t cand = row->n_cpu < row->n_lat ? row->n_cpu : row->n_lat;

		if (!cand)
			snprintf(row->note, sizeof(row->note), "%s",
				 row->n_cpu ? "the p99 bound is below one destination's time"
					    : "the rate alone exceeds the CPU budget");
		else
			verify_row(s, row, cand, c->bound_us * 1000);
		progress_step(s, 1, "capacity: %s measured", variant_name(row->v));
	}
	if (stopped(s))
		return -EINTR;
	answer(s);
	c->done = true;
	report_capacity(s);
	return 0;
}
