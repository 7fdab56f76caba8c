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
 * 4. The recommended backend serves the most subscribers; larger audiences need
 *    ceil(M / N) cores, or relay hosts in a one-level tree.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

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

static void answer(struct session *s)
{
	struct capacity *c = &s->cap;
	char *p = c->sentence;
	size_t left = sizeof(c->sentence);
	int w;

	c->best = -1;
	/* The recommendation is a library backend; the hand-written baselines are yardsticks. */
	for (unsigned i = 0; i < c->nrows; i++)
		if (c->row[i].n_max && !variant_is_raw(c->row[i].v) &&
		    (c->best < 0 || c->row[i].n_max > c->row[c->best].n_max ||
		     (c->row[i].n_max == c->row[c->best].n_max && c->row[i].b < c->row[c->best].b)))
			c->best = (int)i;
	w = snprintf(p, left, "At %llu msg/s of %llu B, within %.0f%% of one core",
		     (unsigned long long)c->rate, (unsigned long long)c->size, c->budget * 100);
	p += w, left -= (size_t)w;
	if (c->bound_us > 0) {
		w = snprintf(p, left, " and p99 <= %.0f us", c->bound_us);
		p += w, left -= (size_t)w;
	}
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
			snprintf(p, left, ", no backend can serve even one subscriber: the rate alone "
					  "exceeds the CPU budget.");
		else
			snprintf(p, left,
				 ", the CPU budget alone would allow %llu subscribers per core (%s), but "
				 "the measured p99 stayed above the bound down to one subscriber%s: "
				 "this host cannot meet the bound as it is; measure on a quiet machine "
				 "or an isolated core (--cpu).",
				 (unsigned long long)cpu->n_cpu, variant_name(cpu->v),
				 pre > 10 ? ", because other work on the host kept preempting the "
					    "sending thread"
					  : "");
		return;
	}
	const struct cap_row *b = &c->row[c->best];

	w = snprintf(p, left, ", one core serves at most %llu subscribers with %s (recommended",
		     (unsigned long long)b->n_max, variant_name(b->v));
	p += w, left -= (size_t)w;
	const char *close = NULL;

	for (unsigned i = 0, first = 1; i < c->nrows; i++) {
		const struct cap_row *r = &c->row[i];

		if ((int)i == c->best)
			continue;
		w = snprintf(p, left, "%s%s %llu", first ? "; " : ", ", variant_name(r->v),
			     (unsigned long long)r->n_max);
		p += w, left -= (size_t)w;
		first = 0;
		/* Say so when a runner-up is within what one run can resolve. */
		if (!close && !variant_is_raw(r->v) && (double)r->n_max >= 0.95 * (double)b->n_max)
			close = variant_name(r->v);
	}
	if (close)
		w = snprintf(p, left, "; %s is within 5%%, closer than one run can tell apart)", close);
	else
		w = snprintf(p, left, ")");
	p += w, left -= (size_t)w;
	if (b->verified) {
		w = snprintf(p, left, ", with a measured p99 of %.0f us at that load", b->p99_us);
		p += w, left -= (size_t)w;
	}
	uint64_t m = s->o->subscribers;

	if (m) {
		uint64_t cores = (m + b->n_max - 1) / b->n_max;
		unsigned rc = s->o->relay_cores ? s->o->relay_cores : (unsigned)s->env.cores_online;
		uint64_t per_relay = (uint64_t)rc * b->n_max;
		uint64_t relays = (m + per_relay - 1) / per_relay;

		if (cores <= 1)
			w = snprintf(p, left, "; %llu subscribers fit on one core",
				     (unsigned long long)m);
		else if (relays <= b->n_max)
			w = snprintf(p, left,
				     "; %llu subscribers need %llu such cores, or, in a one-level tree, "
				     "one publisher core feeding %llu relay host%s of %u core%s each",
				     (unsigned long long)m, (unsigned long long)cores,
				     (unsigned long long)relays, relays == 1 ? "" : "s", rc,
				     rc == 1 ? "" : "s");
		else
			w = snprintf(p, left,
				     "; %llu subscribers need %llu such cores; a one-level tree would "
				     "need %llu relay hosts of %u cores, more than one publisher core "
				     "can feed (%llu), so it takes a second level of relays",
				     (unsigned long long)m, (unsigned long long)cores,
				     (unsigned long long)relays, rc, (unsigned long long)b->n_max);
		p += w, left -= (size_t)w;
	}
	snprintf(p, left, ".");
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
		c->nrows++;
	}
	progress_plan(s, 0);
	for (unsigned i = 0; i < c->nrows && !stopped(s); i++) {
		struct cap_row *row = &c->row[i];
		uint64_t cand = row->n_cpu < row->n_lat ? row->n_cpu : row->n_lat;

		if (!cand) {
			snprintf(row->note, sizeof(row->note), "%s",
				 row->n_cpu ? "the p99 bound is below one destination's time"
					    : "the rate alone exceeds the CPU budget");
			continue;
		}
		verify_row(s, row, cand, c->bound_us * 1000);
	}
	if (stopped(s))
		return -EINTR;
	answer(s);
	c->done = true;
	report_capacity(s);
	return 0;
}
