/* SPDX-License-Identifier: MIT */
/*
 * Latency at a fixed offered rate. Call k is due at t0 + k/rate; its latency is measured from
 * that scheduled time, not from when it actually started, so a stall that delays later calls
 * shows up in all of them (no coordinated omission): a backend that cannot keep up has
 * latencies that grow through the run instead of looking fine at a lower real rate. Between
 * calls the sending thread spins on the vDSO clock: no system call of its own, no sleep whose
 * wake-up would be measured. The service time (from actual start) is kept too.
 *
 * Backends are interleaved run by run like the throughput runs, and each backend's runs at
 * one rate are merged into one histogram.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"

#define HIST_HIGHEST (UINT64_C(1) << 40) /* ns, about 18 minutes */
#define LAT_SHARE 0.7

/* Round to two significant digits: offered rates a person can repeat. */
static uint64_t round2(double x)
{
	if (x < 1)
		return 1;
	double p = pow(10, floor(log10(x)) - 1);

	return (uint64_t)(floor(x / p + 0.5) * p);
}

/* calls fan-outs at rate; adds to lat and svc. */
static int lat_run(struct session *s, struct rig *r, enum variant_id v, uint64_t rate,
		   uint64_t calls, struct lat_result *out, double *elapsed_ns)
{
	const double period = 1e9 / (double)rate;
	uint64_t done = 0;
	struct kstat k0, k1, d;

	uint64_t pre0 = thread_preemptions(), sink0 = sink_drops(r->sink), accepted0 = r->accepted;

	if (kstat_read(&k0, kstat_dev(s)))
		memset(&k0, 0, sizeof(k0));
	while (done < calls) {
		int64_t seg = rig_room(r, v, calls - done);

		if (seg < 0)
			return (int)seg;
		/* Each segment restarts the schedule: a drain between segments is not a stall of
		 * the system under test. */
		uint64_t t0 = now_ns(), end = t0;

		for (int64_t k = 0; k < seg; k++) {
			uint64_t due = t0 + (uint64_t)((double)k * period), start;

			while ((start = now_ns()) < due)
				cpu_relax();
			if (stopped(s))
				return -EINTR;
			out->failed += rig_send(r, v, 1);
			end = now_ns();
			hist_record(&out->lat, end - due);
			hist_record(&out->svc, end - start);
		}
		*elapsed_ns += (double)(end - t0);
		done += (uint64_t)seg;
		/* Offload: a call's latency is its hand-over; the segment's messages are sent
		 * (and their failures counted) before the sink is drained or the counters read. */
		out->failed += rig_sync(r, v);
	}
	out->preempted += thread_preemptions() - pre0;
	if (kstat_read(&k1, kstat_dev(s)))
		memset(&k1, 0, sizeof(k1));
	kstat_delta(&k1, &k0, &d);
	out->drops += run_drops(s, r, &d, sink0, r->accepted - accepted0);
	out->k.udp_in_errors += d.udp_in_errors;
	out->k.udp_rcvbuf_errors += d.udp_rcvbuf_errors;
	out->k.udp_sndbuf_errors += d.udp_sndbuf_errors;
	out->k.udp_no_ports += d.udp_no_ports;
	out->k.udp_mem_errors += d.udp_mem_errors;
	out->k.dev_tx_dropped += d.dev_tx_dropped;
	out->k.dev_tx_packets += d.dev_tx_packets;
	out->k.udp_out += d.udp_out;
	return 0;
}

static int lat_init(struct lat_result *l, enum variant_id v, const struct rig *r,
		    uint64_t rate, unsigned rounds)
{
	memset(l, 0, sizeof(*l));
	l->v = v;
	l->n = r->n;
	l->size = r->size;
	l->rate = rate;
	l->rounds = rounds;
	if (hist_init(&l->lat, HIST_HIGHEST) || hist_init(&l->svc, HIST_HIGHEST)) {
		hist_free(&l->lat);
		hist_free(&l->svc);
		return -ENOMEM;
	}
	return 0;
}

static int store(struct session *s, const struct lat_result *l)
{
	if (grow((void **)&s->lat, &s->caplat, s->nlat, sizeof(*s->lat), 16))
		return -ENOMEM;
	s->lat[s->nlat++] = *l;
	return 0;
}

static unsigned lat_rounds(const struct session *s)
{
	return s->o->rounds ? s->o->rounds : s->o->quick ? 2 : 3;
}

/* The offered rates for one configuration: given, or fractions of what the baseline (else the
 * fastest backend) sustains flat out, so that the list spans light to heavy load. */
/* Down to two significant digits: a cap that stays below what it caps. */
static uint64_t round2_down(double x)
{
	if (x < 1)
		return 1;
	double p = pow(10, floor(log10(x)) - 1);

	return (uint64_t)(floor(x / p) * p);
}

/* Share of the host's flat-out rate an offered rate is capped at: at the flat-out rate itself
 * every call waits for the one before it and the queue grows for the whole run. */
#define RATE_CAP_SHARE 0.9

static unsigned pick_rates(const struct session *s, const double *est, const enum variant_id *act,
			   unsigned nv, uint64_t *rates)
{
	static const double full[] = { 0.2, 0.5, 0.8 }, quick[] = { 0.3, 0.7 };
	const double *f = s->o->quick ? quick : full;
	unsigned nf = s->o->quick ? 2 : 3;
	double best = 0;

	if (s->o->nrates) {
		memcpy(rates, s->o->rates, s->o->nrates * sizeof(*rates));
		return s->o->nrates;
	}
	for (unsigned i = 0; i < nv; i++) {
		double cap = 1e9 / est[i];

		if (act[i] == V_RAW) {
			best = cap;
			break;
		}
		if (cap > best)
			best = cap;
	}
	for (unsigned i = 0; i < nf; i++)
		rates[i] = round2(best * f[i]);
	return nf;
}

static int one_config(struct session *s, struct rig *r, double run_s, unsigned rounds)
{
	enum variant_id act[V_COUNT];
	unsigned nv = active_variants(s, act);
	double est[V_COUNT];
	uint64_t rates[MAX_LIST];
	int err = 0;

	for (unsigned i = 0; i < nv; i++) {
		/* AUTO's first seconds (its exploration) before anything is measured. */
		if (variant_is_auto(act[i]) && s->o->auto_warmup > 0 &&
		    (err = auto_warmup_send(s, r, act[i], NULL)))
			return err;
		est[i] = rig_calibrate(s, r, act[i], 20000000, NULL);
		if (est[i] < 0)
			return (int)est[i];
	}
	unsigned nr = pick_rates(s, est, act, nv, rates);
	uint64_t requested[MAX_LIST] = { 0 };
	double host_rate = 0;
	unsigned fastest = 0;

	/* An offered rate the host cannot sustain measures a queue growing through the run (and
	 * takes as long as the host needs, not the planned time): capped below what the fastest
	 * backend sustained flat out here, and said so. */
	for (unsigned i = 0; i < nv; i++)
		if (est[i] > 0 && 1e9 / est[i] > host_rate) {
			host_rate = 1e9 / est[i];
			fastest = i;
		}
	const uint64_t cap = round2_down(host_rate * RATE_CAP_SHARE);

	for (unsigned q = 0; q < nr; q++) {
		if (host_rate <= 0 || rates[q] <= cap)
			continue;
		report_note(s, "offered %llu/s capped to %llu/s at fan-out %llu, %llu B: the host "
			       "measured at most %.0f fan-outs/s flat out (%s, %.1f us per call); at or "
			       "above that the queue grows through the run, which measures the queue",
			    (unsigned long long)rates[q], (unsigned long long)cap,
			    (unsigned long long)r->n, (unsigned long long)r->size, host_rate,
			    variant_name(act[fastest]), est[fastest] / 1000);
		requested[q] = rates[q];
		rates[q] = cap;
	}
	/* Two rates capped to the same: measured once. */
	for (unsigned q = 0; q < nr; q++)
		for (unsigned k = 0; k < q; k++)
			if (rates[k] == rates[q]) {
				memmove(&rates[q], &rates[q + 1], (nr - q - 1) * sizeof(*rates));
				memmove(&requested[q], &requested[q + 1],
					(nr - q - 1) * sizeof(*requested));
				nr--;
				q--;
				progress_step(s, nv * rounds, "latency: a capped rate measured once");
				break;
			}

	for (unsigned q = 0; q < nr && !err; q++) {
		struct lat_result l[V_COUNT];
		unsigned made = 0;
		double elapsed[V_COUNT] = { 0 };
		uint64_t calls = (uint64_t)(run_s * (double)rates[q]);

		if (calls < 100)
			calls = 100;
		for (; made < nv; made++) {
			if ((err = lat_init(&l[made], act[made], r, rates[q], rounds)))
				break;
			l[made].requested_rate = requested[q];
			l[made].host_rate = host_rate;
			l[made].backend_rate = est[made] > 0 ? 1e9 / est[made] : 0;
		}
		/* A short warm-up at the rate itself, not recorded. */
		for (unsigned i = 0; i < nv && !err; i++) {
			err = lat_run(s, r, act[i], rates[q], calls / 10 + 10, &l[i], &elapsed[i]);
			hist_reset(&l[i].lat);
			hist_reset(&l[i].svc);
			memset(&l[i].k, 0, sizeof(l[i].k));
			l[i].failed = 0;
			l[i].preempted = 0;
			l[i].drops = 0;
			elapsed[i] = 0;
		}
		/* The "+ts" variants' stamps over the recorded rounds, as their latencies. */
		struct ms_snapshot *mark[V_COUNT] = { NULL };

		for (unsigned i = 0; i < made && !err; i++)
			err = ts_begin(s, r->g[act[i]], act[i], &mark[i]);
		for (unsigned k = 0; k < rounds && !err; k++)
			for (unsigned i = 0; i < nv && !err; i++) {
				err = lat_run(s, r, act[i], rates[q], calls, &l[i], &elapsed[i]);
				progress_step(s, 1, "latency fan-out %llu, %llu B, %llu/s: round %u/%u %s",
					      (unsigned long long)r->n, (unsigned long long)r->size,
					      (unsigned long long)rates[q], k + 1, rounds,
					      variant_name(act[i]));
			}
		struct ts_result *ts[V_COUNT] = { NULL };

		for (unsigned i = 0; i < made && !err; i++) {
			err = ts_end(s, r->g[act[i]], act[i], &mark[i], &l[i].ts);
			ts[i] = l[i].ts;
		}
		if (!err)
			ts_relate(act, ts, made);
		size_t first = s->nlat;

		for (unsigned i = 0; i < made; i++) {
			free(mark[i]);
			if (!err) {
				l[i].achieved = elapsed[i] > 0 ? (double)l[i].lat.total * 1e9 / elapsed[i]
							       : 0;
				err = store(s, &l[i]);
				if (!err) {
					report_latency(s, &s->lat[s->nlat - 1]);
					continue;
				}
			}
			hist_free(&l[i].lat);
			hist_free(&l[i].svc);
			free(l[i].ts);
		}
		if (!err)
			report_ts_latency(s, first, s->nlat - first);
	}
	return err;
}

int run_latency(struct session *s, const uint64_t *fanouts, unsigned nf, const uint64_t *sizes,
		unsigned nsz)
{
	enum variant_id act[V_COUNT];
	unsigned nv = active_variants(s, act);
	unsigned rounds = lat_rounds(s);
	unsigned nrates = s->o->nrates ? s->o->nrates : s->o->quick ? 2 : 3;
	double duration = s->o->duration > 0 ? s->o->duration : s->o->quick ? 3 : 60;
	double runs = (double)nf * nsz * nrates * nv * rounds;
	double run_s = duration * LAT_SHARE / runs;
	int err = 0;

	progress_plan(s, runs);
	for (unsigned j = 0; j < nsz && !err; j++)
		for (unsigned i = 0; i < nf && !err; i++) {
			struct rig r;

			if (stopped(s))
				return -EINTR;
			int skip = rig_open_or_skip(s, &r, fanouts[i], sizes[j], "latency ",
						    (double)nrates * nv * rounds);
			if (skip < 0)
				return skip;
			if (skip)
				continue;
			err = one_config(s, &r, run_s, rounds);
			rig_close(&r);
		}
	return err;
}

int latency_probe(struct session *s, enum variant_id v, uint64_t n, uint64_t size,
		  uint64_t rate, double seconds, double *p99_ns, uint64_t *preempted)
{
	struct rig r;
	struct lat_result l;
	char why[256];
	double elapsed = 0;
	int err = rig_open(s, &r, n, size, why, sizeof(why));

	if (err)
		return err;
	/* AUTO's context is new with each rig: its first seconds before the measurement. */
	if (variant_is_auto(v) && s->o->auto_warmup > 0)
		err = auto_warmup_send(s, &r, v, NULL);
	if (!err)
		err = lat_init(&l, v, &r, rate, 1);
	if (!err) {
		/* Three parts, and the median of their p99s: one burst of other work on the machine
		 * spoils one part, not the answer. */
		uint64_t calls = (uint64_t)(seconds * (double)rate / 3);
		double p99[3];

		if (calls < 100)
			calls = 100;
		err = lat_run(s, &r, v, rate, calls / 2, &l, &elapsed); /* warm-up */
		l.preempted = 0;
		for (int k = 0; k < 3 && !err; k++) {
			hist_reset(&l.lat);
			err = lat_run(s, &r, v, rate, calls, &l, &elapsed);
			p99[k] = (double)hist_percentile(&l.lat, 99);
		}
		if (!err) {
			struct summary sm;

			summarize(p99, 3, &sm);
			*p99_ns = sm.median;
		}
		*preempted = l.preempted;
		hist_free(&l.lat);
		hist_free(&l.svc);
	}
	rig_close(&r);
	return err;
}
