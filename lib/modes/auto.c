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
 *             (then the lowest median, the difference being within noise). Backends whose
 *             medians are within 3% of the lowest cost the same: of those, the one in use
 *             stays, else the one that makes the fewest system calls is chosen (tie_break),
 *             so that noise neither switches backends nor makes runs of one workload choose
 *             differently.
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
 * What is measured: the time the sending threads spent on the CPU for the fan-out, per
 * destination, kernel time included (with workers, the sum over the threads of their parts).
 * The thread's CPU clock alone cannot be trusted for that: on some hosts it under-charges some
 * kinds of kernel work (measured on a guest kernel: io_uring calls charged 20-42% less than the
 * time the thread was on the CPU, loop and sendmmsg 0-4%; work done in interrupt context on the
 * thread's behalf is another such case), so a backend can look cheaper than it is. So a timed
 * fan-out reads three clocks on each thread that sends a part: its context switches
 * (getrusage(RUSAGE_THREAD): voluntary and involuntary), CLOCK_MONOTONIC and its CPU clock.
 * A thread that was never switched out between the two reads was on the CPU the whole time:
 * its wall time is its time on the CPU, whatever its CPU clock says, and the ratio of the two
 * is how much that clock charges this backend here (per shape and backend, the median of the
 * last 8). A thread that was switched out (preempted, or asleep waiting) has only its CPU
 * clock, divided by that ratio. A backend whose clock was seen to under-charge (ratio below
 * 0.8, counted in auto_clock_low) and whose window holds fewer than half such verified
 * fan-outs, or whose clock was never checked (its threads always switched out), keeps
 * exploring (up to round 12) rather than be decided on corrected or unchecked figures.
 * The figures by the CPU clock alone are kept beside (auto_cpu_ns_*), so an operator sees
 * both. Wall time when not switched out is what the user waits for and what the core is
 * busy for; the CPU clock is used only where that cannot be seen.
 *
 * A timed fan-out is the only one that costs anything extra: two reads of each clock (the CPU
 * clock and getrusage are a system call each; CLOCK_MONOTONIC is not), on each thread that
 * sends a part. An untimed call costs a counter decrement. A child forked after the context
 * was made sends with what the shape uses and measures nothing (its parent's measurements are
 * its own).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

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
#define TRUST 0.8f           /* a CPU clock that charges less than this share of the time a
                                thread stayed on the CPU under-charges (auto_clock_low) */
#define RATE_MIN 0.02f       /* the lowest share a correction assumes */

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
	/* The last timed fan-outs of the rounds, ns per destination: the wall time of the parts
	 * whose threads stayed on the CPU, and the CPU clock's time of the others (corrected by
	 * the clock's ratio when a decision reads them: see figure()) */
	float win[MS__NEXEC][WIN], mwin[MS__NEXEC][WIN];
	float cwin[MS__NEXEC][WIN]; /* ... the same fan-outs by the threads' CPU clocks alone */
	uint8_t stayed[MS__NEXEC];  /* ... bit i: fan-out i's threads were never switched out */
	uint8_t nwin[MS__NEXEC], wpos[MS__NEXEC];
	float rate[MS__NEXEC][WIN]; /* the last shares the CPU clock charged of time on the CPU
	                              (kept when the shape explores again: the clock's habit
	                              is the host's, not the load's) */
	uint8_t nrate[MS__NEXEC], rpos[MS__NEXEC];
	float med[MS__NEXEC];      /* at the last decision */
	float cmed[MS__NEXEC];     /* ... by the CPU clocks */
	uint64_t decisions;
};

struct ms__auto {
	bool freeze, show;
	uint32_t recheck; /* MULTISEND_AUTO_RECHECK: a period of this many fan-outs (0: by time) */
	struct shape sh[NSHAPES];
};

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The calling thread's context switches: voluntary (it slept) and involuntary (preempted). */
static void thread_switches(uint64_t *slept, uint64_t *preempted)
{
	struct rusage ru;
	if (getrusage(RUSAGE_THREAD, &ru)) {
		*slept = *preempted = UINT64_MAX;
		return;
	}
	*slept = (uint64_t)ru.ru_nvcsw;
	*preempted = (uint64_t)ru.ru_nivcsw;
}

/* The calling thread's time waiting on a run queue, ns: the second field of
 * /proc/thread-self/schedstat (the kernel's sched_info run_delay, on the run queue's own clock,
 * not the CPU clock's); UINT64_MAX where it cannot be read (no /proc, no descriptor free, a
 * kernel without schedstats). */
static uint64_t thread_waited_ns(void)
{
	char buf[96];
	int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return UINT64_MAX;
	ssize_t r = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (r <= 0)
		return UINT64_MAX;
	buf[r] = 0;
	char *p;
	errno = 0;
	(void)strtoull(buf, &p, 10);
	if (p == buf || *p != ' ')
		return UINT64_MAX;
	char *q;
	unsigned long long w = strtoull(p + 1, &q, 10);
	if (q == p + 1 || errno)
		return UINT64_MAX;
	return (uint64_t)w;
}

void ms__clocks_start(struct ms__clocks *c)
{
	int e = errno;
	thread_switches(&c->slept, &c->preempted);
	c->waited_ns = thread_waited_ns();
	errno = e;
	c->wall_ns = clock_ns(CLOCK_MONOTONIC);
	c->cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

void ms__cost_add(struct ms__cost *acc, const struct ms__clocks *start)
{
	uint64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID) - start->cpu_ns;
	uint64_t wall = clock_ns(CLOCK_MONOTONIC) - start->wall_ns;
	int e = errno;
	uint64_t slept, preempted;
	thread_switches(&slept, &preempted);
	if (slept != start->slept || slept == UINT64_MAX) {
		acc->cpu_unseen += cpu; /* it slept (or cannot tell): off the CPU for its own reasons */
	} else if (preempted == start->preempted) {
		acc->cpu_seen += cpu; /* on the CPU throughout */
		acc->oncpu_seen += wall;
	} else {
		/* Preempted, never asleep: on the CPU but while it waited on a run queue (read
		 * after the wall clock: a preemption in between counts against it, rarely, a
		 * little). */
		uint64_t w = thread_waited_ns();
		if (w == UINT64_MAX || start->waited_ns == UINT64_MAX || w < start->waited_ns ||
		    w - start->waited_ns >= wall) {
			acc->cpu_unseen += cpu;
		} else {
			acc->cpu_seen += cpu;
			acc->oncpu_seen += wall - (w - start->waited_ns);
		}
	}
	errno = e;
}

void ms__auto_start(struct ms__send *s)
{
	*s->smp = (struct ms__sample){ 0 };
	ms__clocks_start(&s->smp->clk);
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

static void push(struct shape *h, unsigned x, float ws, float cm, float vc)
{
	unsigned i = h->wpos[x];
	bool stayed = cm == 0;
	h->win[x][i] = ws;
	h->mwin[x][i] = cm;
	h->cwin[x][i] = vc;
	h->stayed[x] = (uint8_t)((h->stayed[x] & ~(1u << i)) | ((unsigned)stayed << i));
	h->wpos[x] = (uint8_t)((i + 1) % WIN);
	if (h->nwin[x] < WIN)
		h->nwin[x]++;
}

static void push_rate(struct shape *h, unsigned x, float r)
{
	h->rate[x][h->rpos[x]] = r;
	h->rpos[x] = (uint8_t)((h->rpos[x] + 1) % WIN);
	if (h->nrate[x] < WIN)
		h->nrate[x]++;
}

/* The share of time on the CPU that backend x's CPU clock charges here (1: not known). */
static float rate_of(const struct shape *h, unsigned x)
{
	if (!h->nrate[x])
		return 1.0f;
	float r = spread_of(h->rate[x], h->nrate[x]).med;
	return r < RATE_MIN ? RATE_MIN : r > 1.0f ? 1.0f : r;
}

/* Backend x's window: the time its threads were on the CPU, ns per destination, each fan-out's
 * switched-out parts corrected by what the clock is known to charge now (so a ratio learnt
 * later corrects the figures taken before it). */
static struct spread figure(const struct shape *h, unsigned x)
{
	float v[WIN], r = rate_of(h, x);
	for (unsigned i = 0; i < h->nwin[x]; i++)
		v[i] = h->win[x][i] + h->mwin[x][i] / r;
	return spread_of(v, h->nwin[x]);
}

/* Backend x's CPU clock was never checked here, or under-charges and too few of its window's
 * figures were seen directly (the rest are corrected by the ratio): it needs more samples. */
static bool doubtful(const struct shape *h, unsigned x)
{
	if (!h->nrate[x])
		return true;
	if (rate_of(h, x) >= TRUST)
		return false;
	unsigned seen = (unsigned)__builtin_popcount(h->stayed[x] & ((1u << h->nwin[x]) - 1u));
	return 2 * seen < h->nwin[x];
}

/* The backend with the lowest median; *clear: is the difference clear, or clearly none? */
static unsigned best_of(const struct ms_ctx *ctx, const struct shape *h, struct spread *sp,
			bool *clear)
{
	unsigned best = 0;
	for (unsigned x = 0; x < ctx->nexec; x++) {
		sp[x] = figure(h, x);
		if (sp[x].med < sp[best].med)
			best = x;
	}
	*clear = true;
	for (unsigned x = 0; x < ctx->nexec; x++)
		if (doubtful(h, x))
			*clear = false;
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

/* Which of the backends that cost the same as the cheapest (medians within CLOSE of its) to
 * use: the one in use if it is among them, else the one of them that makes the fewest system
 * calls, which is the last in the set-up order (lib/api/ctx.c: loop, io_uring, sendmmsg,
 * kfanout, xdp). Noise between backends that truly cost the same then moves nothing: no
 * switch from period to period, and the same choice from run to run of one workload, at most
 * CLOSE dearer than the lowest median. A backend whose clock is in doubt is not chosen on a
 * tie: only a figure lower than the others' may choose it. */
static bool tied(const struct shape *h, const struct spread *sp, unsigned x, float lim)
{
	return h->nwin[x] && sp[x].med <= lim && !doubtful(h, x);
}

static unsigned tie_break(const struct ms_ctx *ctx, const struct shape *h, const struct spread *sp,
			  unsigned best)
{
	const float lim = sp[best].med * (1.0f + CLOSE);
	if (h->decided && tied(h, sp, h->cur, lim))
		return h->cur;
	for (unsigned x = ctx->nexec; --x > best;)
		if (tied(h, sp, x, lim))
			return x;
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

/* Backend b's figures in the counters: on the CPU, and by the CPU clock (*cpu). */
static uint64_t *ns_counter(struct ms_ctx *ctx, enum ms_backend b, uint64_t **cpu)
{
	switch (b) {
	case MS_BACKEND_LOOP:
		*cpu = &ctx->c.auto_cpu_ns_loop;
		return &ctx->c.auto_ns_loop;
	case MS_BACKEND_SENDMMSG:
		*cpu = &ctx->c.auto_cpu_ns_sendmmsg;
		return &ctx->c.auto_ns_sendmmsg;
	case MS_BACKEND_IO_URING:
		*cpu = &ctx->c.auto_cpu_ns_io_uring;
		return &ctx->c.auto_ns_io_uring;
	case MS_BACKEND_XDP:
		*cpu = &ctx->c.auto_cpu_ns_xdp;
		return &ctx->c.auto_ns_xdp;
	case MS_BACKEND_KFANOUT:
		*cpu = &ctx->c.auto_cpu_ns_kfanout;
		return &ctx->c.auto_ns_kfanout;
	default:
		*cpu = NULL;
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

/* "datagrams on few sockets, 16-127: loop (loop 1412, io_uring 1377 [CPU clock 950],
 * sendmmsg 1401 ns/dest": a backend's CPU clock figure is said where it is more than 20% off */
static void put_shape(const struct ms_ctx *ctx, unsigned shape, char *buf, size_t len, size_t *k)
{
	const struct shape *h = &ctx->autos->sh[shape];
	put(buf, len, k, "%s, %s: %s (", kind_name[shape / NSIZES], size_name[shape % NSIZES],
	    ctx->exec[h->cur].be->name);
	for (unsigned x = 0; x < ctx->nexec; x++) {
		put(buf, len, k, "%s%s %.0f", x ? ", " : "", ctx->exec[x].be->name, (double)h->med[x]);
		float d = h->cmed[x] - h->med[x];
		if (d < 0)
			d = -d;
		if (h->med[x] < 1e29f && d > 0.2f * h->med[x])
			put(buf, len, k, " [CPU clock %.0f]", (double)h->cmed[x]);
	}
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
	best = tie_break(ctx, h, sp, best);
	bool first = !h->decided, changed = best != h->cur;

	for (unsigned x = 0; x < ctx->nexec; x++) {
		h->med[x] = sp[x].med;
		h->cmed[x] = spread_of(h->cwin[x], h->nwin[x]).med;
		uint64_t *cpu, *c = ns_counter(ctx, ctx->exec[x].be->id, &cpu);
		if (c && h->nwin[x]) {
			*c = (uint64_t)(h->med[x] + 0.5f);
			*cpu = (uint64_t)(h->cmed[x] + 0.5f);
		}
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
	unsigned x = (unsigned)(s->x - ctx->exec);
	struct ms__cost c = s->smp->parts;
	ms__cost_add(&c, &s->smp->clk);

	/* How much this backend's CPU clock charges of the time its threads stayed on the CPU. */
	if (c.oncpu_seen) {
		float r = (float)c.cpu_seen / (float)c.oncpu_seen;
		push_rate(h, x, r);
		ctx->c.auto_clock_low += r < TRUST;
	}
	float n = (float)s->b.n;
	float ws = (float)c.oncpu_seen / n, cm = (float)c.cpu_unseen / n;
	float v = ws + cm / rate_of(h, x);
	float vc = (float)(c.cpu_seen + c.cpu_unseen) / n;

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
	push(h, x, ws, cm, vc);
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
