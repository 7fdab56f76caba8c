/* SPDX-License-Identifier: MIT */
/*
 * Throughput runs: for each configuration, a warm-up of every backend (which also sizes the
 * runs), then rounds in which every backend runs once, always in the same order
 * (A B C A B C ...), so slow drift of a shared machine hits all of them alike. Each backend's
 * figure is the median over rounds, with min and max, and its ratio to raw-sendto is taken
 * round by round (runs seconds apart, not minutes) before the median is taken.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kfanout.h"
#include "netns.h"
#include "run.h"

/* Share of the duration budget spent in timed sending; the rest goes to setting up, warming
 * up, draining and the deliver sink's catching up. */
#define TIMED_SHARE 0.7
#define MIN_RUN_NS 2000000ull      /* 2 ms: far above the cost of reading the clocks */
#define MAX_BURST_NS 100000000ull  /* bursts of at most 100 ms keep Ctrl-C and progress lively */
/* Deliver: give up waiting after 2 s without progress. Only a run that lost datagrams waits
 * that long; a receiver thread starved on a busy machine must not be mistaken for a loss. */
#define SETTLE_IDLE_NS 2000000000ull

bool stopped(const struct session *s)
{
	return __atomic_load_n(s->stop, __ATOMIC_RELAXED) != 0;
}

void request_stop(struct session *s)
{
	__atomic_store_n(s->stop, 1, __ATOMIC_RELAXED);
}

void progress_plan(struct session *s, double units)
{
	pthread_mutex_lock(&s->out_lock);
	s->work_total += units;
	pthread_mutex_unlock(&s->out_lock);
}

void progress_step(struct session *s, double units, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&s->out_lock);
	s->work_done += units;
	va_start(ap, fmt);
	vsnprintf(s->progress_label, sizeof(s->progress_label), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&s->out_lock);
}

unsigned active_variants(const struct session *s, enum variant_id out[V_COUNT])
{
	unsigned n = 0;

	for (unsigned i = 0; i < s->o->nvariants; i++)
		if (s->var[s->o->order[i]].available)
			out[n++] = s->o->order[i];
	return n;
}

const char *kstat_dev(const struct session *s)
{
	return sink_netns(s->o->sink) ? NETNS_DEV : NULL;
}

int64_t rig_room(struct rig *r, enum variant_id v, uint64_t want)
{
	uint64_t lim = sink_burst_limit(r->sink);
	/* The kernel fan-out's program on the device for the variants that need it, off for the
	 * others: here, before every timed batch or call and outside it (kfanout.h). */
	int herr = r->kf ? kf_hook(r->kf, v) : 0;

	if (herr)
		return herr;
	if (lim == UINT64_MAX || r->pending + want <= lim)
		return (int64_t)want;
	int err = sink_drain(r->sink);

	if (err)
		return err;
	r->pending = 0;
	if (lim > 1) {
		/* Under offload, sent before the timed calls (and counted before theirs). */
		rig_send(r, v, 1);
		rig_sync(r, v);
		lim--;
	}
	return (int64_t)(want < lim ? want : lim);
}

/* Deliver and tcp: wait until every datagram (tcp: message) this run handed to the kernel was
 * either received or counted as dropped, or until nothing moves any more. */
static void settle(struct rig *r, uint64_t accepted0, const struct deliver_count *d0,
		   uint64_t drops0, struct sample *out)
{
	uint64_t want = r->accepted - accepted0, last = UINT64_MAX, idle_since = now_ns(), drops;
	struct deliver_count d;

	for (;;) {
		sink_count(r->sink, &d);
		drops = sink_drops(r->sink) - drops0;
		uint64_t seen = d.received - d0->received + drops;

		if (seen >= want)
			break;
		if (seen != last) {
			last = seen;
			idle_since = now_ns();
		} else if (now_ns() - idle_since > SETTLE_IDLE_NS) {
			break;
		}
		struct timespec ms = { 0, 1000000 };

		nanosleep(&ms, NULL);
	}
	out->received = d.received - d0->received;
	out->rx_bytes = d.bytes - d0->bytes;
	out->lost = d.lost - d0->lost;
	out->late = d.late - d0->late;
	out->bad = d.bad - d0->bad;
	out->corrupt = d.corrupt - d0->corrupt;
	out->foreign = d.foreign - d0->foreign;
	out->unaccounted = (int64_t)want - (int64_t)out->received - (int64_t)drops;
}

/* Drops that belong to this run: our receivers' own counters where there are receivers (other
 * programs' traffic cannot leak in), else the private namespace's UDP counters. There, what
 * the UDP layer lost of the datagrams the sender was told it took is accepted - OutDatagrams
 * (a local ENOBUFS, which the kernel hides from a UDP socket without IP_RECVERR, counts in
 * SndbufErrors and not in OutDatagrams), plus anything dropped on receipt (InErrors, NoPorts;
 * nothing is received there). Not SndbufErrors itself: the kernel counts there too a send it
 * REFUSED for want of buffer space (EAGAIN under MSG_DONTWAIT, and io_uring's own non-blocking
 * first attempt), which the sender counts as failed or which was sent after all, so that
 * sent = failed + drops + veth drops would no longer hold. */
uint64_t run_drops(const struct session *s, const struct rig *r, const struct kstat *dk,
		   uint64_t sink0, uint64_t accepted)
{
	/* netns-xdp: the AF_XDP backends' frames never pass the UDP layer, so what the veth
	 * handed to its peer is the count for every backend alike. */
	if (s->o->sink == SINK_NETNS_XDP)
		return (accepted > dk->dev_tx_packets ? accepted - dk->dev_tx_packets : 0) +
		       dk->udp_in_errors + dk->udp_no_ports;
	if (s->o->sink != SINK_NETNS_DROP)
		return sink_drops(r->sink) - sink0;
	return (accepted > dk->udp_out ? accepted - dk->udp_out : 0) + dk->udp_in_errors +
	       dk->udp_no_ports;
}

static void lib_delta(struct lib_count *acc, const struct ms_stats *a, const struct ms_stats *b)
{
	acc->fanouts += a->fanouts - b->fanouts;
	acc->attempted += a->dests_attempted - b->dests_attempted;
	acc->accepted += a->dests_accepted - b->dests_accepted;
	acc->failed += a->dests_failed - b->dests_failed;
	acc->bytes += a->bytes - b->bytes;
	acc->syscalls += a->syscalls - b->syscalls;
	acc->off_msgs += a->offload_msgs - b->offload_msgs;
	acc->off_waits += a->offload_waits - b->offload_waits;
	acc->off_refused += a->offload_refused - b->offload_refused;
	acc->zc_sends += a->zc_sends - b->zc_sends;
	acc->zc_copied += a->zc_copied - b->zc_copied;
	acc->xdp_frames += a->xdp_frames - b->xdp_frames;
	acc->xdp_kicks += a->xdp_kicks - b->xdp_kicks;
	acc->xdp_fallback += (a->xdp_fallback_local + a->xdp_fallback_iface + a->xdp_fallback_mtu +
			      a->xdp_fallback_route + a->xdp_fallback_neigh + a->xdp_fallback_other) -
			     (b->xdp_fallback_local + b->xdp_fallback_iface + b->xdp_fallback_mtu +
			      b->xdp_fallback_route + b->xdp_fallback_neigh + b->xdp_fallback_other);
	acc->kf_templates += a->kfanout_templates - b->kfanout_templates;
	acc->kf_clones += a->kfanout_clones - b->kfanout_clones;
	acc->kf_kernel_path +=
		(a->kfanout_reclaimed + a->kfanout_fallback_local + a->kfanout_fallback_iface +
		 a->kfanout_fallback_mtu + a->kfanout_fallback_route + a->kfanout_fallback_neigh +
		 a->kfanout_fallback_other) -
		(b->kfanout_reclaimed + b->kfanout_fallback_local + b->kfanout_fallback_iface +
		 b->kfanout_fallback_mtu + b->kfanout_fallback_route + b->kfanout_fallback_neigh +
		 b->kfanout_fallback_other);
	acc->kf_refused += (a->kfanout_refused + a->kfanout_clone_err) -
			   (b->kfanout_refused + b->kfanout_clone_err);
}

static void lib_add(struct lib_count *acc, const struct lib_count *x)
{
	acc->fanouts += x->fanouts;
	acc->attempted += x->attempted;
	acc->accepted += x->accepted;
	acc->failed += x->failed;
	acc->bytes += x->bytes;
	acc->syscalls += x->syscalls;
	acc->off_msgs += x->off_msgs;
	acc->off_waits += x->off_waits;
	acc->off_refused += x->off_refused;
	acc->zc_sends += x->zc_sends;
	acc->zc_copied += x->zc_copied;
	acc->xdp_frames += x->xdp_frames;
	acc->xdp_kicks += x->xdp_kicks;
	acc->xdp_fallback += x->xdp_fallback;
	acc->kf_templates += x->kf_templates;
	acc->kf_clones += x->kf_clones;
	acc->kf_kernel_path += x->kf_kernel_path;
	acc->kf_refused += x->kf_refused;
}

void sample_add(struct sample *acc, const struct sample *x)
{
	acc->fanouts += x->fanouts;
	acc->dests += x->dests;
	acc->failed += x->failed;
	acc->wall_ns += x->wall_ns;
	acc->proc_ns += x->proc_ns;
	acc->thread_ns += x->thread_ns;
	acc->rx_ns += x->rx_ns;
	acc->drain_ns += x->drain_ns;
	acc->syscalls += x->syscalls;
	acc->preempted += x->preempted;
	acc->softirqd_ns += x->softirqd_ns;
	acc->drops += x->drops;
	acc->k.udp_out += x->k.udp_out;
	acc->k.udp_in_errors += x->k.udp_in_errors;
	acc->k.udp_rcvbuf_errors += x->k.udp_rcvbuf_errors;
	acc->k.udp_sndbuf_errors += x->k.udp_sndbuf_errors;
	acc->k.udp_no_ports += x->k.udp_no_ports;
	acc->k.udp_mem_errors += x->k.udp_mem_errors;
	acc->k.dev_tx_dropped += x->k.dev_tx_dropped;
	acc->k.dev_tx_packets += x->k.dev_tx_packets;
	acc->k.softnet_dropped += x->k.softnet_dropped;
	acc->received += x->received;
	acc->rx_bytes += x->rx_bytes;
	acc->lost += x->lost;
	acc->late += x->late;
	acc->bad += x->bad;
	acc->corrupt += x->corrupt;
	acc->foreign += x->foreign;
	acc->unaccounted += x->unaccounted;
	lib_add(&acc->lib, &x->lib);
}

int timed_run(struct session *s, struct rig *r, enum variant_id v, uint64_t iterations,
	      uint64_t max_burst, struct sample *out)
{
	const bool deliver = sink_reads(s->o->sink), offload = rig_offloads(r, v);
	uint64_t lim = sink_burst_limit(r->sink);
	struct kstat k0, k1;
	struct deliver_count d0;
	uint64_t accepted0 = r->accepted;

	memset(out, 0, sizeof(*out));
	if (lim != UINT64_MAX && max_burst > lim - 1)
		max_burst = lim > 1 ? lim - 1 : 1;
	if (!max_burst)
		max_burst = 1;
	/* Equal bursts, so no run ends with a sliver whose clock reads would weigh. */
	uint64_t nb = (iterations + max_burst - 1) / max_burst;

	if (kstat_read(&k0, kstat_dev(s)))
		memset(&k0, 0, sizeof(k0));
	if (deliver)
		sink_count(r->sink, &d0);
	uint64_t soft0 = ksoftirqd_ns(&s->ksoftirqd), sink0 = sink_drops(r->sink);

	for (uint64_t b = 0; b < nb; b++) {
		uint64_t want = iterations / nb + (b < iterations % nb);

		while (want) {
			if (stopped(s))
				return -EINTR;
			int64_t room = rig_room(r, v, want);

			if (room < 0)
				return (int)room;
			struct ms_stats st0, st1;
			bool lib = variant_stats(s, v, &st0);
			uint64_t pre0 = thread_preemptions(), rx0 = 0, rx1 = 0, sc0 = r->raw_syscalls;
			uint64_t pub = 0;
			struct clocks a, z;

			/* Receiver CPU (deliver, tcp) is read just inside the process interval, so
			 * what is taken out of the process figure never exceeds what is in it. */
			a.proc = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
			if (deliver)
				rx0 = sink_rx_cpu_ns(r->sink);
			a.thread = clock_ns(CLOCK_THREAD_CPUTIME_ID);
			a.wall = now_ns();
			out->failed += rig_send(r, v, (uint64_t)room);
			if (offload) {
				/* The publishing ends here, and with it the caller's CPU. The batch
				 * ends when the library thread has sent it all (ms_ctx_drain), inside
				 * the wall and process intervals, so that the rate and the process
				 * CPU are the sending's; the caller's CPU in that wait is counted
				 * apart (drain_ns), the bench's and not a publisher's. */
				pub = clock_ns(CLOCK_THREAD_CPUTIME_ID);
				out->failed += rig_sync(r, v);
			}
			z.wall = now_ns();
			z.thread = clock_ns(CLOCK_THREAD_CPUTIME_ID);
			if (deliver)
				rx1 = sink_rx_cpu_ns(r->sink);
			z.proc = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
			out->preempted += thread_preemptions() - pre0;
			if (lib && variant_stats(s, v, &st1))
				lib_delta(&out->lib, &st1, &st0);
			else
				lib = false;
			out->wall_ns += z.wall - a.wall;
			out->proc_ns += z.proc - a.proc;
			out->thread_ns += (offload ? pub : z.thread) - a.thread;
			out->drain_ns += offload ? z.thread - pub : 0;
			out->rx_ns += rx1 - rx0;
			if (variant_is_raw(v))
				out->syscalls += r->raw_syscalls - sc0;
			else if (lib)
				out->syscalls += st1.syscalls - st0.syscalls;
			out->fanouts += (uint64_t)room;
			want -= (uint64_t)room;
		}
	}
	out->dests = out->fanouts * r->n;
	out->softirqd_ns = ksoftirqd_ns(&s->ksoftirqd) - soft0;
	if (deliver)
		settle(r, accepted0, &d0, sink0, out);
	if (kstat_read(&k1, kstat_dev(s)))
		memset(&k1, 0, sizeof(k1));
	kstat_delta(&k1, &k0, &out->k);
	out->drops = run_drops(s, r, &out->k, sink0, r->accepted - accepted0);
	return 0;
}

double rig_calibrate(struct session *s, struct rig *r, enum variant_id v, uint64_t min_ns,
		     struct sample *acc)
{
	uint64_t count = 1, fanouts = 0, wall = 0;

	/* Double the batch until the time is spent: the first calls (page faults, cold caches,
	 * io_uring's first-send setup) weigh less and less. */
	while (wall < min_ns) {
		struct sample smp;
		int err = timed_run(s, r, v, count, count, &smp);

		if (err)
			return err;
		wall += smp.wall_ns;
		fanouts += smp.fanouts;
		if (acc)
			sample_add(acc, &smp);
		if (smp.wall_ns < min_ns / 4)
			count *= 2;
	}
	return (double)wall / (double)fanouts;
}

/* ---- transmit timestamps -------------------------------------------------------------------- */

/* d = a - b for cumulative histograms (a taken after b). min and max are exact when the
 * window holds the extreme; otherwise the edge of the window's outermost bucket (kept within
 * a's range) is as close as the buckets say. */
static void hist_delta(struct ms_hist *d, const struct ms_hist *a, const struct ms_hist *b)
{
	int first = -1, last = -1;
	uint64_t lo, hi;

	memset(d, 0, sizeof(*d));
	d->count = a->count - b->count;
	d->sum_ns = a->sum_ns - b->sum_ns;
	for (unsigned i = 0; i < MS_HIST_BUCKETS; i++) {
		d->bucket[i] = a->bucket[i] - b->bucket[i];
		if (d->bucket[i]) {
			if (first < 0)
				first = (int)i;
			last = (int)i;
		}
	}
	if (!d->count || first < 0)
		return;
	if (!b->count || a->min_ns < b->min_ns)
		d->min_ns = a->min_ns;
	else if (!ms_hist_bucket_range((unsigned)first, &lo, &hi))
		d->min_ns = lo > a->min_ns ? lo : a->min_ns;
	if (!b->count || a->max_ns > b->max_ns)
		d->max_ns = a->max_ns;
	else if (!ms_hist_bucket_range((unsigned)last, &lo, &hi))
		d->max_ns = hi < a->max_ns ? hi : a->max_ns;
	if (d->min_ns > d->max_ns)
		d->min_ns = d->max_ns;
}

static struct ms_snapshot *ts_snapshot(struct session *s, struct ms_group *g, enum variant_id v,
				       int *err)
{
	struct ms_snapshot *snap = calloc(1, sizeof(*snap));

	if (!snap) {
		*err = -ENOMEM;
		return NULL;
	}
	/* Account for the group's last sample (its stamps are on the error queue by now: the
	 * sinks' devices stamp inside the send), so a window ends with every sample it sent. */
	ms_group_ts_collect(g);
	snap->size = sizeof(*snap);
	*err = ms_ctx_snapshot(s->var[v].ctx, snap);
	if (*err) {
		free(snap);
		return NULL;
	}
	return snap;
}

int ts_begin(struct session *s, struct ms_group *g, enum variant_id v, struct ms_snapshot **mark)
{
	int err = 0;

	*mark = NULL;
	if (!variant_stamped(v) || !s->var[v].ctx || !g)
		return 0;
	*mark = ts_snapshot(s, g, v, &err);
	return err;
}

int ts_end(struct session *s, struct ms_group *g, enum variant_id v, struct ms_snapshot **mark,
	   struct ts_result **out)
{
	struct ms_snapshot *a, *b = *mark;
	struct ts_result *t;
	int err = 0;

	*out = NULL;
	if (!b)
		return 0;
	*mark = NULL;
	a = ts_snapshot(s, g, v, &err);
	t = a ? calloc(1, sizeof(*t)) : NULL;
	if (!t) {
		free(a);
		free(b);
		return err ? err : -ENOMEM;
	}
	t->c.sampled = a->stats.ts_sampled - b->stats.ts_sampled;
	t->c.requested = a->stats.ts_requested - b->stats.ts_requested;
	t->c.stamped = a->stats.ts_stamped - b->stats.ts_stamped;
	t->c.missing = a->stats.ts_missing - b->stats.ts_missing;
	t->c.unsupported = a->stats.ts_unsupported - b->stats.ts_unsupported;
	t->c.foreign = a->stats.ts_foreign - b->stats.ts_foreign;
	t->c.late = a->stats.ts_late - b->stats.ts_late;
	hist_delta(&t->h[TS_CALL_FIRST], &a->call_first, &b->call_first);
	hist_delta(&t->h[TS_CALL_LAST], &a->call_last, &b->call_last);
	hist_delta(&t->h[TS_FIRST_LAST], &a->first_last, &b->first_last);
	hist_delta(&t->h[TS_DEST_LAG], &a->dest_lag, &b->dest_lag);
	free(a);
	free(b);
	*out = t;
	return 0;
}

void ts_relate(const enum variant_id *act, struct ts_result *const *ts, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		if (!ts[i] || !variant_is_w_ts(act[i]))
			continue;
		for (unsigned j = 0; j < n; j++) {
			if (act[j] != variant_ref(act[i]) || !ts[j])
				continue;
			const struct ms_hist *a = &ts[i]->h[TS_FIRST_LAST];
			const struct ms_hist *b = &ts[j]->h[TS_FIRST_LAST];

			if (!a->count || !b->count)
				break;
			/* Of the whole rounds' histograms, not round by round: a round holds too
			 * few samples for a p99 of its own. */
			double a50 = (double)ms_hist_quantile(a, 0.5);
			double b50 = (double)ms_hist_quantile(b, 0.5);
			double a99 = (double)ms_hist_quantile(a, 0.99);
			double b99 = (double)ms_hist_quantile(b, 0.99);
			double am = (double)a->sum_ns / (double)a->count;
			double bm = (double)b->sum_ns / (double)b->count;

			ts[i]->skew_ratio[SKEW_P50] = b50 > 0 ? a50 / b50 : 0;
			ts[i]->skew_ratio[SKEW_P99] = b99 > 0 ? a99 / b99 : 0;
			ts[i]->skew_ratio[SKEW_MEAN] = bm > 0 ? am / bm : 0;
			ts[i]->have_ref = true;
			break;
		}
	}
}

/* Per-round figures of one sample. */
static double per(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

/* The process CPU a run is charged: deliver's receivers and the bench's own wait for an
 * offloaded batch (drain_ns) are not the sending. */
static uint64_t proc_work(const struct sample *x)
{
	return x->proc_ns - x->rx_ns - x->drain_ns;
}

/* raw: raw-sendto's result from the same rounds, base: for a variant what it is measured
 * against (variant_ref), twin: for a library backend its hand-written twin's, loop: for an
 * "+offload" variant the library's plain loop's; any may be NULL. */
static void summarize_one(struct result *res, const struct result *raw, const struct result *base,
			  const struct result *twin, const struct result *loop)
{
	double v[MAX_ROUNDS], w[MAX_ROUNDS];
	unsigned n = res->rounds;

#define SUMMARY(field, expr)                                                                    \
	do {                                                                                    \
		for (unsigned i = 0; i < n; i++) {                                              \
			const struct sample *x = &res->s[i];                                    \
			v[i] = (expr);                                                          \
		}                                                                               \
		summarize(v, n, &res->field);                                                   \
	} while (0)
#define RATIO(ref, field, expr)                                                                 \
	do {                                                                                    \
		for (unsigned i = 0; i < n; i++) {                                              \
			const struct sample *x = &res->s[i];                                    \
			w[i] = (expr);                                                          \
			x = &(ref)->s[i];                                                       \
			double b_ = (expr);                                                     \
			w[i] = b_ > 0 ? w[i] / b_ : 0;                                          \
		}                                                                               \
		summarize(w, n, &res->field);                                                   \
	} while (0)

	SUMMARY(fanouts_s, per(x->fanouts * 1000000000ull, x->wall_ns));
	SUMMARY(dests_s, per(x->dests * 1000000000ull, x->wall_ns));
	SUMMARY(cpu_proc, per(proc_work(x), x->dests));
	SUMMARY(cpu_caller, per(x->thread_ns, x->dests));
	SUMMARY(syscalls, per(x->syscalls, x->fanouts));
	SUMMARY(wall_dest, per(x->wall_ns, x->dests));
	SUMMARY(softirqd, per(x->softirqd_ns, x->dests));
	if (raw) {
		res->have_ratio = true;
		RATIO(raw, r_fanouts_s, per(x->fanouts * 1000000000ull, x->wall_ns));
		RATIO(raw, r_dests_s, per(x->dests * 1000000000ull, x->wall_ns));
		RATIO(raw, r_cpu_proc, per(proc_work(x), x->dests));
		RATIO(raw, r_cpu_caller, per(x->thread_ns, x->dests));
		RATIO(raw, r_syscalls, per(x->syscalls, x->fanouts));
	}
	if (base) {
		res->have_base = true;
		RATIO(base, b_dests_s, per(x->dests * 1000000000ull, x->wall_ns));
		RATIO(base, b_cpu_proc, per(proc_work(x), x->dests));
		RATIO(base, b_cpu_caller, per(x->thread_ns, x->dests));
	}
	if (twin) {
		res->have_twin = true;
		RATIO(twin, t_cpu_proc, per(proc_work(x), x->dests));
		RATIO(twin, t_cpu_caller, per(x->thread_ns, x->dests));
	}
	if (loop) {
		res->have_loop = true;
		RATIO(loop, l_cpu_caller, per(x->thread_ns, x->dests));
	}
#undef SUMMARY
#undef RATIO
	for (unsigned i = 0; i < n; i++) {
		const struct sample *x = &res->s[i];

		res->k.udp_out += x->k.udp_out;
		res->k.udp_in_errors += x->k.udp_in_errors;
		res->k.udp_rcvbuf_errors += x->k.udp_rcvbuf_errors;
		res->k.udp_sndbuf_errors += x->k.udp_sndbuf_errors;
		res->k.udp_no_ports += x->k.udp_no_ports;
		res->k.udp_mem_errors += x->k.udp_mem_errors;
		res->k.dev_tx_dropped += x->k.dev_tx_dropped;
		res->k.dev_tx_packets += x->k.dev_tx_packets;
		res->k.softnet_dropped += x->k.softnet_dropped;
		res->failed += x->failed;
		res->dests += x->dests;
		res->received += x->received;
		res->rx_bytes += x->rx_bytes;
		res->lost += x->lost;
		res->late += x->late;
		res->bad += x->bad;
		res->corrupt += x->corrupt;
		res->foreign += x->foreign;
		lib_add(&res->lib, &x->lib);
		res->preempted += x->preempted;
		res->drops += x->drops;
		res->unaccounted += x->unaccounted;
	}
}

static int store_result(struct session *s, const struct result *r)
{
	if (grow((void **)&s->res, &s->capres, s->nres, sizeof(*s->res), 32))
		return -ENOMEM;
	s->res[s->nres++] = *r;
	return 0;
}

/* An AUTO variant's context as the library describes it now (its decision and figures), and
 * the backend it sends with now (its last decision). */
static void auto_describe(struct session *s, enum variant_id v, char *buf, size_t len,
			  int *backend)
{
	if (!s->var[v].ctx || ms_ctx_describe(s->var[v].ctx, buf, len) < 0)
		snprintf(buf, len, "(ms_ctx_describe failed)");
	*backend = s->var[v].ctx ? (int)ms_ctx_backend(s->var[v].ctx) : -1;
}

int auto_warmup_send(struct session *s, struct rig *r, enum variant_id v, struct sample *acc)
{
	const uint64_t want = (uint64_t)(s->o->auto_warmup * 1e9), t0 = now_ns();
	uint64_t count = 1;

	while (now_ns() - t0 < want) {
		struct sample smp;
		int err = timed_run(s, r, v, count, count, &smp);

		if (err)
			return err;
		if (acc)
			sample_add(acc, &smp);
		if (smp.wall_ns < 50000000ull / 2)
			count *= 2;
	}
	return 0;
}

/* AUTO's first --auto-warmup seconds in a configuration (auto_warmup_send) before the warm-up
 * every backend gets and before the rounds, so that what it explores at the start stays out of
 * the steady-state figures; reported apart, and counted in the warm-up's sends (accounting). */
static int auto_warmup(struct session *s, struct rig *r, enum variant_id v, struct result *res)
{
	int err;

	res->have_auto_first = true;
	res->auto_first_s = s->o->auto_warmup;
	err = auto_warmup_send(s, r, v, &res->auto_first);
	sample_add(&res->warm, &res->auto_first);
	return err;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

#define CALL_WALL_MAX 2000      /* calls timed per backend at most */
#define CALL_WALL_MIN 100       /* ... and at least */
#define CALL_WALL_NS 300000000. /* about this long per backend between the two */
#define CALL_WALL_SLICE 50      /* calls of one backend before the next one's turn */

/*
 * --sink netns-xdp: how long one fan-out call takes, start to return, at this N. For the
 * backends compared there (raw-sendto, io_uring, xdp, raw-xdp) the return is when the kernel
 * has taken the last destination's datagram or frame: a send call, io_uring's wait for every
 * completion, and the AF_XDP kicks until the transmit ring's consumer index has passed the
 * fan-out's last descriptor (the library's xdp reports a destination only once its descriptor
 * is consumed). Each call alone between two CLOCK_MONOTONIC reads, after the rounds (so the
 * rows' CPU figures carry no clock reads), the backends taking turns in slices. Not in the
 * rows' counts. Skipped for a variant that offloads (its call is a hand-over).
 */
static int call_wall(struct session *s, struct rig *r, const enum variant_id *act, unsigned nv,
		     const double *est, struct result *res)
{
	uint64_t *t[V_COUNT] = { NULL }, want[V_COUNT], have[V_COUNT] = { 0 };
	int err = 0;
	bool more = true;

	for (unsigned i = 0; i < nv; i++) {
		double w = est[i] > 0 ? CALL_WALL_NS / est[i] : CALL_WALL_MAX;

		want[i] = w > CALL_WALL_MAX ? CALL_WALL_MAX : w < CALL_WALL_MIN ? CALL_WALL_MIN
										  : (uint64_t)w;
		if (rig_offloads(r, act[i]))
			want[i] = 0;
		if (want[i] && !(t[i] = malloc(want[i] * sizeof(*t[i])))) {
			err = -ENOMEM;
			goto out;
		}
	}
	while (more) {
		more = false;
		for (unsigned i = 0; i < nv; i++) {
			for (unsigned k = 0; k < CALL_WALL_SLICE && have[i] < want[i]; k++) {
				if (stopped(s)) {
					err = -EINTR;
					goto out;
				}
				int64_t room = rig_room(r, act[i], 1);

				if (room < 0) {
					err = (int)room;
					goto out;
				}
				uint64_t a = now_ns();

				rig_send(r, act[i], 1);
				t[i][have[i]++] = now_ns() - a;
			}
			more |= have[i] < want[i];
		}
	}
	for (unsigned i = 0; i < nv; i++) {
		if (!have[i])
			continue;
		qsort(t[i], have[i], sizeof(*t[i]), cmp_u64);
		res[i].have_call_wall = true;
		res[i].call_wall_n = have[i];
		res[i].call_wall_p50_ns = (double)t[i][(have[i] - 1) / 2];
		res[i].call_wall_p99_ns = (double)t[i][(uint64_t)((double)(have[i] - 1) * 0.99)];
	}
out:
	for (unsigned i = 0; i < nv; i++)
		free(t[i]);
	return err;
}

/* Measure one configuration: warm-up, rounds, results. */
static int measure(struct session *s, unsigned mode, struct rig *r, double run_ns,
		   unsigned rounds)
{
	enum variant_id act[V_COUNT];
	unsigned nv = active_variants(s, act);
	double est[V_COUNT];
	struct result res[V_COUNT];
	struct ms_snapshot *mark[V_COUNT] = { NULL };
	int err = 0;

	memset(res, 0, sizeof(res));
	for (unsigned i = 0; i < nv; i++) {
		if (variant_is_auto(act[i]) && s->o->auto_warmup > 0) {
			if ((err = auto_warmup(s, r, act[i], &res[i])))
				return err;
			progress_step(s, 0, "%s fan-out %llu, %llu B: %s's first %.3g s",
				      mode_name(mode), (unsigned long long)r->n,
				      (unsigned long long)r->size, variant_name(act[i]),
				      s->o->auto_warmup);
		}
		double e = rig_calibrate(s, r, act[i],
					 (uint64_t)(run_ns > MIN_RUN_NS ? run_ns : MIN_RUN_NS),
					 &res[i].warm);
		if (e < 0)
			return (int)e;
		est[i] = e;
		progress_step(s, 1, "%s fan-out %llu, %llu B: warm-up %s", mode_name(mode),
			      (unsigned long long)r->n, (unsigned long long)r->size,
			      variant_name(act[i]));
	}
	struct summary sm;

	double est_each[V_COUNT]; /* est in act's order, which summarize does not keep */

	memcpy(est_each, est, nv * sizeof(*est));
	summarize(est, nv, &sm); /* reorders est; only the median is used */
	/* The same work for every backend: they are compared on equal terms. */
	uint64_t iters = s->o->iterations;

	if (!iters) {
		double t = run_ns > MIN_RUN_NS ? run_ns : MIN_RUN_NS;

		iters = (uint64_t)(t / sm.median);
		if (!iters)
			iters = 1;
	}
	uint64_t burst = (uint64_t)(MAX_BURST_NS / sm.median);

	for (unsigned i = 0; i < nv; i++) {
		res[i].mode = mode;
		res[i].v = act[i];
		res[i].n = r->n;
		res[i].size = r->size;
		res[i].rounds = rounds;
		res[i].iterations = iters;
		res[i].s = calloc(rounds, sizeof(struct sample));
		if (!res[i].s) {
			err = -ENOMEM;
			goto out;
		}
	}
	/* The "+ts" variants' stamps are counted over the rounds only, not the warm-up. */
	for (unsigned i = 0; i < nv; i++)
		if ((err = ts_begin(s, r->g[act[i]], act[i], &mark[i])))
			goto out;
	for (unsigned k = 0; k < rounds; k++)
		for (unsigned i = 0; i < nv; i++) {
			err = timed_run(s, r, act[i], iters, burst ? burst : 1, &res[i].s[k]);
			if (err)
				goto out;
			progress_step(s, 1, "%s fan-out %llu, %llu B: round %u/%u %s",
				      mode_name(mode), (unsigned long long)r->n,
				      (unsigned long long)r->size, k + 1, rounds, variant_name(act[i]));
		}
	struct ts_result *ts[V_COUNT];

	for (unsigned i = 0; i < nv; i++) {
		if ((err = ts_end(s, r->g[act[i]], act[i], &mark[i], &res[i].ts)))
			goto out;
		ts[i] = res[i].ts;
	}
	ts_relate(act, ts, nv);
	for (unsigned i = 0; i < nv; i++)
		if (variant_is_auto(act[i]))
			auto_describe(s, act[i], res[i].auto_desc, sizeof(res[i].auto_desc),
				      &res[i].auto_backend);
	if (s->o->sink == SINK_NETNS_XDP && (err = call_wall(s, r, act, nv, est_each, res)))
		goto out;
	const struct result *raw = NULL, *loop = NULL;

	for (unsigned i = 0; i < nv; i++) {
		if (act[i] == V_RAW)
			raw = &res[i];
		if (act[i] == V_LOOP)
			loop = &res[i];
	}
	for (unsigned i = 0; i < nv; i++) {
		const struct result *base = NULL, *twin = NULL;

		for (unsigned j = 0; j < nv; j++) {
			if (act[i] != variant_ref(act[i]) && act[j] == variant_ref(act[i]))
				base = &res[j];
			if ((int)act[j] == variant_twin(act[i]))
				twin = &res[j];
		}
		summarize_one(&res[i], raw, base, twin, variant_is_off(act[i]) ? loop : NULL);
	}
	double spread = 0;

	for (unsigned i = 0; i < nv; i++) {
		const struct summary *c = &res[i].cpu_proc;

		if (c->median > 0 && (c->max - c->min) / c->median > spread)
			spread = (c->max - c->min) / c->median;
	}
	for (unsigned i = 0; i < nv; i++) {
		err = store_result(s, &res[i]);
		if (err)
			goto out;
		report_result(s, &s->res[s->nres - 1]);
		res[i].s = NULL; /* owned by s->res now */
		res[i].ts = NULL;
	}
	/* A wide min-max in CPU per destination while the thread was on the CPU the whole time
	 * means the machine itself changed speed (a busy host under a virtual machine, frequency
	 * scaling): the ratios, taken within each round, are what still holds. */
	if (spread > 0.25)
		report_note(s, "CPU per destination varied by up to %.0f%% between rounds: the machine's "
			       "speed changed during this configuration; trust the ratios more than the "
			       "absolute figures",
			    spread * 100);
	report_ts(s, s->nres - nv, nv);
	report_call_wall(s, s->nres - nv, nv);
	report_auto_best(s, s->nres - nv, nv);
out:
	for (unsigned i = 0; i < nv; i++) {
		free(res[i].s);
		free(res[i].ts);
		free(mark[i]);
	}
	return err;
}

static unsigned default_rounds(const struct session *s)
{
	return s->o->rounds ? s->o->rounds : s->o->quick ? 3 : 7;
}

int run_throughput(struct session *s, unsigned mode, const uint64_t *fanouts, unsigned nf,
		   const uint64_t *sizes, unsigned nsz)
{
	enum variant_id act[V_COUNT];
	unsigned nv = active_variants(s, act);
	unsigned rounds = default_rounds(s);
	double duration = s->o->duration > 0 ? s->o->duration : s->o->quick ? 3 : 60;
	double runs = (double)nf * nsz * nv * (rounds + 1);
	double run_ns = duration * 1e9 * TIMED_SHARE / runs;
	int err = 0;

	progress_plan(s, runs);
	for (unsigned j = 0; j < nsz && !err; j++) {
		for (unsigned i = 0; i < nf && !err; i++) {
			struct rig r;

			if (stopped(s))
				return -EINTR;
			int skip = rig_open_or_skip(s, &r, fanouts[i], sizes[j], "",
						    nv * (rounds + 1.0));
			if (skip < 0)
				return skip;
			if (skip)
				continue;
			err = measure(s, mode, &r, run_ns, rounds);
			rig_close(&r);
		}
		if (!err)
			report_results_done(s, mode, sizes[j]);
	}
	return err;
}

/* ---- --timeline ------------------------------------------------------------------------------ */

#define SLICE_NS 150000000ull /* each variant's turn: about 150 ms of sending */

static int store_tl(struct session *s, const struct tl_result *t)
{
	if (grow((void **)&s->tl, &s->captl, s->ntl, sizeof(*s->tl), 16))
		return -ENOMEM;
	s->tl[s->ntl++] = *t;
	return 0;
}

/* The fixed library backends: the ones AUTO chooses among (and their variants). */
static bool fixed_lib(enum variant_id v)
{
	return !variant_is_auto(v) && !variant_is_raw(v);
}

static void tl_figures(struct tl_result *t, unsigned nv)
{
	for (unsigned i = 0; i < nv; i++)
		for (int p = 0; p < TL_NPART; p++) {
			const struct sample *x = &t[i].part[p];

			t[i].cpu[p] = per(proc_work(x), x->dests);
			t[i].caller[p] = per(x->thread_ns, x->dests);
		}
	for (int p = 0; p < TL_NPART; p++) {
		int best = -1;

		for (unsigned i = 0; i < nv; i++)
			if (fixed_lib(t[i].v) && t[i].cpu[p] > 0 &&
			    (best < 0 || t[i].cpu[p] < t[best].cpu[p]))
				best = (int)i;
		for (unsigned i = 0; i < nv; i++) {
			t[i].best[p] = best < 0 ? -1 : (int)t[best].v;
			t[i].vs_best[p] = best < 0 ? 0 : t[i].cpu[p] / t[best].cpu[p];
		}
	}
}

/* One configuration for o->timeline seconds: every variant keeps its context and group (the
 * rig's) for the whole time and sends in slices of about SLICE_NS, taking turns in an order
 * rotated by one every turn. A turn belongs to the half it starts in. With --load-from half
 * the load is off at the start and switched on at half time, before the first turn of the
 * second half. */
static int timeline_one(struct session *s, struct rig *r)
{
	enum variant_id act[V_COUNT];
	const unsigned nv = active_variants(s, act);
	const uint64_t total = (uint64_t)(s->o->timeline * 1e9);
	const bool half = s->load && s->o->load_from_half;
	struct tl_result t[V_COUNT];
	double est[V_COUNT] = { 0 }; /* wall ns per fan-out so far, 0: not yet sent */
	int err = 0;

	memset(t, 0, sizeof(t));
	for (unsigned i = 0; i < nv; i++) {
		t[i].v = act[i];
		t[i].n = r->n;
		t[i].size = r->size;
		t[i].seconds = s->o->timeline;
	}
	if (half)
		load_set(s->load, false);
	const uint64_t t0 = now_ns();
	bool switched = false;

	/* The end and the half are taken at turn boundaries, so that every variant has as many
	 * slices as the others in each half (the run ends up to one turn late). */
	for (unsigned turn = 0; !err; turn++) {
		const uint64_t el = now_ns() - t0;

		if (el >= total)
			break;
		if (half && !switched && el >= total / 2) {
			load_set(s->load, true);
			switched = true;
		}
		const int part = el < total / 2 ? TL_FIRST : TL_SECOND;

		for (unsigned k = 0; k < nv && !err; k++) {
			const unsigned i = (k + turn) % nv;
			const bool on = load_is_on(s->load);
			struct sample smp;

			memset(&smp, 0, sizeof(smp));
			if (est[i] <= 0) {
				/* Its first slice: batches doubling until the slice is spent. */
				double e = rig_calibrate(s, r, act[i], SLICE_NS, &smp);

				if (e < 0) {
					err = (int)e;
					break;
				}
			} else {
				uint64_t it = (uint64_t)((double)SLICE_NS / est[i]);
				uint64_t burst = (uint64_t)((double)MAX_BURST_NS / est[i]);

				if ((err = timed_run(s, r, act[i], it ? it : 1, burst ? burst : 1, &smp)))
					break;
			}
			sample_add(&t[i].part[TL_WHOLE], &smp);
			sample_add(&t[i].part[part], &smp);
			t[i].slices[TL_WHOLE]++;
			t[i].slices[part]++;
			t[i].load_on[TL_WHOLE] |= on;
			t[i].load_on[part] |= on;
			est[i] = (double)t[i].part[TL_WHOLE].wall_ns /
				 (double)t[i].part[TL_WHOLE].fanouts;
			progress_step(s, (double)smp.wall_ns / 1e9,
				      "timeline fan-out %llu, %llu B: %.0f/%.0f s %s%s",
				      (unsigned long long)r->n, (unsigned long long)r->size,
				      (double)(now_ns() - t0) / 1e9, s->o->timeline,
				      variant_name(act[i]), on ? " (load on)" : "");
		}
	}
	if (err)
		return err;
	for (unsigned i = 0; i < nv; i++)
		if (variant_is_auto(act[i]))
			auto_describe(s, act[i], t[i].auto_desc, sizeof(t[i].auto_desc),
				      &t[i].auto_backend);
	tl_figures(t, nv);
	size_t first = s->ntl;

	for (unsigned i = 0; i < nv && !err; i++)
		err = store_tl(s, &t[i]);
	if (!err)
		report_timeline(s, first, nv);
	return err;
}

int run_timeline(struct session *s, const uint64_t *fanouts, unsigned nf, const uint64_t *sizes,
		 unsigned nsz)
{
	int err = 0;

	progress_plan(s, s->o->timeline * nf * nsz);
	for (unsigned j = 0; j < nsz && !err; j++)
		for (unsigned i = 0; i < nf && !err; i++) {
			struct rig r;

			if (stopped(s))
				return -EINTR;
			int skip = rig_open_or_skip(s, &r, fanouts[i], sizes[j], "",
						    s->o->timeline);
			if (skip < 0)
				return skip;
			if (skip)
				continue;
			err = timeline_one(s, &r);
			rig_close(&r);
		}
	return err;
}
