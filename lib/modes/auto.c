/* SPDX-License-Identifier: MIT */
/*
 * MS_BACKEND_AUTO: the backend chosen by measuring the fan-outs this context really sends.
 *
 * Which backend costs least per destination depends on the host (system-call entry cost,
 * mitigations, caches, the neighbours' load), on the shape of the group (addresses on one
 * socket batch well in sendmmsg; connected sockets do not) and on its size, so no fixed order
 * is right everywhere. A context made with AUTO sets up every backend available (each with its
 * state: io_uring's ring and registered files exist beside the others) and picks one per call
 * here, before the other stages (lib/api/send.c). Every backend keeps the executor contract
 * (lib/backend.h), so results, errors, order and counters are the same whichever sends a call;
 * only system-call counts differ.
 *
 * Measurements are kept per shape of group: datagrams on few sockets (8 destinations or more
 * per socket), datagrams on many sockets, streams; each in four size classes (below 16, 128,
 * 1024 destinations, and above). A shape's life:
 *
 *   explore   rounds: each backend in turn (the order rotated every round) sends two fan-outs,
 *             the first to warm it up, the second timed. After 4 rounds, and after each round
 *             up to 12, the medians of the last 8 timed fan-outs per backend are compared; the
 *             choice is made when it is clear (the best one's interquartile range below every
 *             other's, or all within 3% of each other with narrow ranges) or at round 12
 *             (then the lowest median, the difference being within noise).
 *   settled   the chosen backend sends every call. It is timed 8 times per period (one second
 *             of its fan-outs, at least 512 fan-outs; MULTISEND_AUTO_RECHECK=N sets N fan-outs
 *             instead), and at the end of each period one
 *             round re-checks every backend; a decision follows each such round. When the
 *             chosen backend's own cost moves by more than 25% from its level after the
 *             decision, three timed fan-outs in a row, the shape explores again from nothing
 *             (the load changed).
 *   frozen    MS_CFG_AUTO_FREEZE / MULTISEND_AUTO_FREEZE: after the first decision nothing is
 *             timed or explored again.
 *
 * A timed fan-out is the only one that costs anything extra: two reads of the thread's CPU
 * clock (clock_gettime(CLOCK_THREAD_CPUTIME_ID), a system call each), and, with workers, the
 * same on each library thread for its part; the figure is the sum of the sending threads' CPU
 * time over the fan-out's destinations, kernel time included. An untimed call costs a counter
 * decrement. A child forked after the context was made sends with what the shape uses and
 * measures nothing (its parent's measurements are its own).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define WIN 8u               /* timed fan-outs per backend a decision looks at */
#define ROUNDS_MIN 4u        /* exploration rounds before the first look */
#define ROUNDS_MAX 12u       /* ... and at most */
#define CLOSE 0.03f          /* medians this close (relative) are the same cost ... */
#define NARROW 0.10f         /* ... when the ranges are this narrow */
#define PERIOD_NS 1e9f       /* a settled shape re-checks every backend once per period */
#define PERIOD_CALLS 512u    /* ... of at least this many fan-outs (bounds the share explored) */
#define SELF_PER_PERIOD 8u   /* timed fan-outs of the chosen backend per period */
#define BASE_SAMPLES 3u      /* its level after a decision: median of its first timed ones */
#define DRIFT 0.25f          /* a move from that level larger than this ... */
#define DRIFT_HITS 3u        /* ... this many times in a row: explore again */

enum { KIND_FEW, KIND_MANY, KIND_STREAM, NKINDS };
#define NSIZES 4u
#define NSHAPES (NKINDS * NSIZES)

static const char *const kind_name[NKINDS] = { "datagrams on few sockets",
					       "datagrams on many sockets", "streams" };
static const char *const size_name[NSIZES] = { "1-15", "16-127", "128-1023", "1024+" };

enum phase { EXPLORE, RECHECK, SETTLED, FROZEN };

struct shape {
	uint8_t phase;
	uint8_t cur;     /* ctx->exec index in use */
	uint8_t step;    /* a round's fan-outs so far: backend step / 2, timed when odd */
	uint8_t rot;     /* the round's first backend */
	uint8_t rounds;  /* rounds of this exploration */
	uint8_t drift;   /* timed fan-outs in a row away from base */
	uint8_t self;    /* timed fan-outs of cur this period */
	uint8_t nbase;
	bool decided;    /* at least once */
	uint32_t countdown; /* settled: fan-outs until the next timed one */
	uint32_t self_every;
	float base;      /* cur's level after the decision (0: not known yet) */
	float basewin[BASE_SAMPLES];
	float win[MS__NEXEC][WIN]; /* the last timed fan-outs of the rounds, ns per destination */
	uint8_t nwin[MS__NEXEC], wpos[MS__NEXEC];
	float med[MS__NEXEC];      /* at the last decision */
	uint64_t decisions;
};

struct ms__auto {
	bool freeze, show;
	uint32_t recheck; /* MULTISEND_AUTO_RECHECK: a period of this many fan-outs (0: by time) */
	struct shape sh[NSHAPES];
};

uint64_t ms__thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int ms__auto_new(struct ms_ctx *ctx, bool freeze, uint32_t recheck)
{
	int err;
	struct ms__auto *a = ms__zalloc(ctx, sizeof(*a), &err);
	if (!a)
		return err;
	a->freeze = freeze;
	a->recheck = recheck;
	ctx->autos = a;
	ctx->c.auto_backend = ctx->exec[0].be->id;
	return 0;
}

void ms__auto_free(struct ms_ctx *ctx)
{
	free(ctx->autos);
	ctx->autos = NULL;
}

bool ms__auto_has(const struct ms_ctx *ctx, enum ms_backend b)
{
	for (unsigned k = 0; k < ctx->nexec; k++)
		if (ctx->exec[k].be->id == b)
			return true;
	return false;
}

enum ms_backend ms__auto_now(const struct ms_ctx *ctx)
{
	return (enum ms_backend)ctx->c.auto_backend; /* the last decision's, of any shape */
}

void ms__auto_show(struct ms_ctx *ctx)
{
	ctx->autos->show = true;
}

uint8_t ms__auto_shape(const struct ms_group *g)
{
	unsigned kind = KIND_FEW;
	for (uint32_t k = 0; k < g->nbuckets; k++)
		if (g->buckets[k]->type == SOCK_STREAM)
			kind = KIND_STREAM;
	if (kind != KIND_STREAM && (size_t)g->nbuckets * 8 > g->size)
		kind = KIND_MANY;
	unsigned sz = g->size < 16 ? 0 : g->size < 128 ? 1 : g->size < 1024 ? 2 : 3;
	return (uint8_t)(kind * NSIZES + sz);
}

/* ---- figures -------------------------------------------------------------------------------- */

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

struct spread {
	float q1, med, q3;
};

static struct spread spread_of(const float *v, unsigned n)
{
	if (!n)
		return (struct spread){ .q1 = 1e30f, .med = 1e30f, .q3 = 1e30f };
	float s[WIN];
	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), cmp_float);
	return (struct spread){ .q1 = s[n / 4], .med = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2,
				.q3 = s[(3 * n) / 4 < n ? (3 * n) / 4 : n - 1] };
}

static void push(struct shape *h, unsigned x, float v)
{
	h->win[x][h->wpos[x]] = v;
	h->wpos[x] = (uint8_t)((h->wpos[x] + 1) % WIN);
	if (h->nwin[x] < WIN)
		h->nwin[x]++;
}

/* The backend with the lowest median; *clear: is the difference clear, or clearly none? */
static unsigned best_of(const struct ms_ctx *ctx, const struct shape *h, struct spread *sp,
			bool *clear)
{
	unsigned best = 0;
	for (unsigned x = 0; x < ctx->nexec; x++) {
		sp[x] = spread_of(h->win[x], h->nwin[x]);
		if (sp[x].med < sp[best].med)
			best = x;
	}
	*clear = true;
	const struct spread *b = &sp[best];
	for (unsigned x = 0; x < ctx->nexec; x++) {
		const struct spread *o = &sp[x];
		if (x == best || o->q1 > b->q3)
			continue; /* clearly dearer */
		bool same = o->med - b->med <= CLOSE * b->med && b->q3 - b->q1 <= NARROW * b->med &&
			    o->q3 - o->q1 <= NARROW * o->med;
		if (!same)
			*clear = false;
	}
	return best;
}

static void restart(struct shape *h)
{
	memset(h->nwin, 0, sizeof(h->nwin));
	memset(h->wpos, 0, sizeof(h->wpos));
	h->phase = EXPLORE;
	h->step = 0;
	h->rounds = 0;
	h->drift = 0;
}

static uint64_t *ns_counter(struct ms_ctx *ctx, enum ms_backend b)
{
	switch (b) {
	case MS_BACKEND_LOOP:
		return &ctx->c.auto_ns_loop;
	case MS_BACKEND_SENDMMSG:
		return &ctx->c.auto_ns_sendmmsg;
	case MS_BACKEND_IO_URING:
		return &ctx->c.auto_ns_io_uring;
	case MS_BACKEND_XDP:
		return &ctx->c.auto_ns_xdp;
	case MS_BACKEND_KFANOUT:
		return &ctx->c.auto_ns_kfanout;
	default:
		return NULL;
	}
}

/* Append to buf[len] at *k, like snprintf (*k counts the whole length even when cut). */
static void put(char *buf, size_t len, size_t *k, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int w = vsnprintf(buf + (*k < len ? *k : len), *k < len ? len - *k : 0, fmt, ap);
	va_end(ap);
	*k += w > 0 ? (size_t)w : 0;
}

/* "datagrams on few sockets, 16-127: loop (loop 1412, io_uring 1377, sendmmsg 1401 ns/dest" */
static void put_shape(const struct ms_ctx *ctx, unsigned shape, char *buf, size_t len, size_t *k)
{
	const struct shape *h = &ctx->autos->sh[shape];
	put(buf, len, k, "%s, %s: %s (", kind_name[shape / NSIZES], size_name[shape % NSIZES],
	    ctx->exec[h->cur].be->name);
	for (unsigned x = 0; x < ctx->nexec; x++)
		put(buf, len, k, "%s%s %.0f", x ? ", " : "", ctx->exec[x].be->name, (double)h->med[x]);
	put(buf, len, k, " ns/dest");
}

static void show_decision(const struct ms_ctx *ctx, unsigned shape)
{
	char line[512];
	size_t k = 0;
	put_shape(ctx, shape, line, sizeof(line), &k);
	fprintf(stderr, "libmultisend: auto: %s)\n", line);
}

static void decide(struct ms_ctx *ctx, struct shape *h, unsigned shape, size_t n)
{
	struct ms__auto *a = ctx->autos;
	struct spread sp[MS__NEXEC];
	bool clear;
	unsigned best = best_of(ctx, h, sp, &clear);
	bool first = !h->decided, changed = best != h->cur;

	for (unsigned x = 0; x < ctx->nexec; x++) {
		h->med[x] = sp[x].med;
		uint64_t *c = ns_counter(ctx, ctx->exec[x].be->id);
		if (c)
			*c = (uint64_t)(sp[x].med + 0.5f);
	}
	ctx->c.auto_decisions++;
	ctx->c.auto_switches += changed;
	if (changed || h->phase == EXPLORE) {
		h->base = 0; /* the chosen backend's level is measured again */
		h->nbase = 0;
		h->drift = 0;
	}
	h->cur = (uint8_t)best;
	h->decided = true;
	h->decisions++;
	ctx->c.auto_backend = ctx->exec[best].be->id;

	/* One period: a second of the chosen backend's fan-outs, and at least PERIOD_CALLS. */
	float call_ns = sp[best].med * (float)n;
	float calls = call_ns > 0 ? PERIOD_NS / call_ns : (float)UINT32_MAX;
	uint32_t period = calls > (float)(UINT32_MAX / 2) ? UINT32_MAX / 2 : (uint32_t)calls;
	if (period < PERIOD_CALLS)
		period = PERIOD_CALLS;
	if (a->recheck)
		period = a->recheck;
	h->self_every = period / SELF_PER_PERIOD;
	h->countdown = h->self_every;
	h->self = 0;
	h->phase = a->freeze ? FROZEN : SETTLED;
	if (a->show && (first || changed))
		show_decision(ctx, shape);
}

/* ---- the stages ------------------------------------------------------------------------------ */

/* The next fan-out of a round: which backend, and whether it is the timed one. */
static unsigned round_step(const struct ms_ctx *ctx, struct shape *h, bool *timed)
{
	unsigned x = (h->rot + h->step / 2u) % ctx->nexec;
	*timed = h->step & 1u;
	h->step++;
	return x;
}

void ms__auto_pick(struct ms_ctx *ctx, struct ms__send *s)
{
	struct shape *h = &ctx->autos->sh[s->g->shape];
	unsigned x = h->cur;
	bool timed = false;

	if (unlikely(ms__forked(ctx)))
		goto out; /* the parent's measurements, not this process's */
	switch (h->phase) {
	case FROZEN:
		break;
	case SETTLED:
		if (likely(--h->countdown))
			break;
		h->countdown = h->self_every;
		if (h->self < SELF_PER_PERIOD) {
			h->self++;
			timed = true;
			break;
		}
		h->phase = RECHECK; /* the period is over: one round */
		h->step = 0;
		/* fall through */
	case EXPLORE:
	case RECHECK:
		x = round_step(ctx, h, &timed);
		break;
	}
out:
	s->x = &ctx->exec[x];
	s->sampled = timed;
	if (x != h->cur) {
		ctx->c.auto_explored++;
		s->counted = true;
	}
	s->counted |= timed;
}

void ms__auto_done(struct ms_ctx *ctx, struct ms__send *s)
{
	struct ms__auto *a = ctx->autos;
	unsigned shape = s->g->shape;
	struct shape *h = &a->sh[shape];
	uint64_t ns = ms__thread_cpu_ns() - s->cpu_ns + s->cpu_parts;
	float v = (float)ns / (float)s->b.n;

	ctx->c.auto_sampled++;
	if (h->phase == SETTLED) {
		/* The chosen backend's own level: set by its first timed fan-outs after a
		 * decision; a lasting move away from it means the host changed. */
		if (!h->base) {
			h->basewin[h->nbase++] = v;
			if (h->nbase == BASE_SAMPLES)
				h->base = spread_of(h->basewin, BASE_SAMPLES).med;
			return;
		}
		float d = v > h->base ? v - h->base : h->base - v;
		h->drift = d > DRIFT * h->base ? (uint8_t)(h->drift + 1) : 0;
		if (h->drift >= DRIFT_HITS)
			restart(h);
		return;
	}
	push(h, (unsigned)(s->x - ctx->exec), v);
	if (h->step < 2 * ctx->nexec)
		return;
	/* a round is complete */
	h->step = 0;
	h->rot = (uint8_t)((h->rot + 1) % ctx->nexec);
	h->rounds++;
	bool clear = false;
	if (h->phase == EXPLORE && h->rounds >= ROUNDS_MIN) {
		struct spread sp[MS__NEXEC];
		(void)best_of(ctx, h, sp, &clear);
	}
	if (h->phase == RECHECK || clear || h->rounds >= ROUNDS_MAX)
		decide(ctx, h, shape, s->b.n);
}

void ms__auto_describe(const struct ms_ctx *ctx, char *buf, size_t len)
{
	const struct ms__auto *a = ctx->autos;
	size_t k = 0;
	put(buf, len, &k, "auto over");
	for (unsigned x = 0; x < ctx->nexec; x++)
		put(buf, len, &k, "%s %s", x ? "," : "", ctx->exec[x].be->name);
	unsigned nd = 0;
	for (unsigned i = 0; i < NSHAPES; i++) {
		if (!a->sh[i].decided)
			continue;
		nd++;
		put(buf, len, &k, "; ");
		put_shape(ctx, i, buf, len, &k);
		put(buf, len, &k, "%s)", a->sh[i].phase == FROZEN ? ", frozen" : "");
	}
	put(buf, len, &k, "%s; %llu of %llu fan-outs explored, %llu timed, %llu decisions",
	    nd ? "" : "; measuring", (unsigned long long)ctx->c.auto_explored,
	    (unsigned long long)ctx->c.fanouts, (unsigned long long)ctx->c.auto_sampled,
	    (unsigned long long)ctx->c.auto_decisions);
}
