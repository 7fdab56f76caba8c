/* SPDX-License-Identifier: MIT */
/*
 * What the bench prints: the environment header and tables for people (stdout, or stderr when
 * JSON goes to stdout), JSON lines for programs (one object per measured backend and
 * configuration, like iperf3 -J), and CSV.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "netns.h"

const char *sink_name(enum sink_kind k)
{
	switch (k) {
	case SINK_LOOPBACK:
		return "loopback";
	case SINK_NETNS_DROP:
		return "netns-drop";
	case SINK_DELIVER:
		return "deliver";
	case SINK_TCP:
		return "tcp";
	case SINK_NETNS_XDP:
		return "netns-xdp";
	}
	return "?";
}

const char *mode_name(unsigned mode)
{
	switch (mode) {
	case MODE_COMPARE:
		return "compare";
	case MODE_SWEEP:
		return "sweep";
	case MODE_LATENCY:
		return "latency";
	case MODE_CAPACITY:
		return "capacity";
	}
	return "?";
}

const char *send_options_desc(const struct opts *o, char *buf, size_t len)
{
	static const char dw[] = "ms_send with MS_SEND_DONTWAIT (io_uring: fire and forget, only "
				 "failures complete), the baselines' sends with MSG_DONTWAIT",
			  rot[] = "MS_CFG_ROTATE (each fan-out starts one destination later); the "
				  "raw baselines are unaffected",
			  conn[] = "MS_CFG_CONNECT (a connected socket of the library's own per "
				   "destination);\n            the raw baselines stay unconnected";

	if (o->dontwait)
		snprintf(buf, len, "every send without waiting: %s", dw);
	else if (o->compare_dw)
		snprintf(buf, len, "each backend also runs as +dontwait, interleaved: %s", dw);
	else
		snprintf(buf, len, "blocking sends (no MS_SEND_DONTWAIT, no MSG_DONTWAIT)");
	size_t l = strlen(buf);

	if (o->rotate)
		snprintf(buf + l, len - l, ";\n            library contexts with %s", rot);
	else if (o->compare_rot)
		snprintf(buf + l, len - l,
			 ";\n            each library backend also runs as +rotate, interleaved: %s",
			 rot);
	else
		snprintf(buf + l, len - l, "; library contexts without MS_CFG_ROTATE");
	l = strlen(buf);
	if (o->lib_connect)
		snprintf(buf + l, len - l, ";\n            library contexts with %s", conn);
	else if (o->compare_conn)
		snprintf(buf + l, len - l,
			 ";\n            each library backend also runs as +connect, "
			 "interleaved: %s",
			 conn);
	l = strlen(buf);
	if (o->workers)
		snprintf(buf + l, len - l, ";\n            library contexts with workers = %u",
			 o->workers);
	else if (o->compare_workers)
		snprintf(buf + l, len - l,
			 ";\n            each library backend also runs as +w%u, interleaved: "
			 "workers = %u%s",
			 o->compare_workers, o->compare_workers,
			 o->ts_sample ? ", stamped like +ts and measured against it" : "");
	l = strlen(buf);
	if (o->offload)
		snprintf(buf + l, len - l,
			 ";\n            library contexts with MS_CFG_OFFLOAD, sent with ms_post (a "
			 "library thread sends; each timed batch ends with ms_ctx_drain)");
	else if (o->compare_off)
		snprintf(buf + l, len - l,
			 ";\n            each library backend also runs as +offload, interleaved: "
			 "MS_CFG_OFFLOAD, ms_post (a library thread sends;\n            each timed "
			 "batch ends with ms_ctx_drain)");
	l = strlen(buf);
	if (o->compare_zc)
		snprintf(buf + l, len - l,
			 ";\n            io_uring also runs as +zc, interleaved: zc_min = %u (zero "
			 "copy), plain io_uring zc_min = never",
			 o->zc_min ? o->zc_min : 1);
	else if (o->zc_never)
		snprintf(buf + l, len - l, ";\n            library contexts with zc_min = never");
	else if (o->zc_min)
		snprintf(buf + l, len - l, ";\n            library contexts with zc_min = %u",
			 o->zc_min);
	l = strlen(buf);
	if (o->offload_kib || o->spin_us || o->ncpus) {
		char cpus[MAX_LIST * 8] = "";

		for (unsigned k = 0; k < o->ncpus; k++)
			snprintf(cpus + strlen(cpus), sizeof(cpus) - strlen(cpus), "%s%d",
				 k ? "," : "", o->cpus[k]);
		snprintf(buf + l, len - l, ";\n            library threads:");
		l = strlen(buf);
		if (o->offload_kib)
			snprintf(buf + l, len - l, " offload ring %u KiB", o->offload_kib);
		l = strlen(buf);
		if (o->spin_us)
			snprintf(buf + l, len - l, "%s spin %u us before sleeping",
				 o->offload_kib ? "," : "", o->spin_us);
		l = strlen(buf);
		if (o->ncpus)
			snprintf(buf + l, len - l, "%s the i-th of each context pinned to CPU %s",
				 o->offload_kib || o->spin_us ? "," : "", cpus);
	}
	return buf;
}

void json_send_options(FILE *f, const struct opts *o)
{
	fprintf(f,
		",\"send_options\":{\"dontwait\":%s,\"rotate\":%s,\"compare_dontwait\":%s,"
		"\"compare_rotate\":%s,\"connect\":%s,\"compare_connect\":%s",
		o->dontwait ? "true" : "false", o->rotate ? "true" : "false",
		o->compare_dw ? "true" : "false", o->compare_rot ? "true" : "false",
		o->lib_connect ? "true" : "false", o->compare_conn ? "true" : "false");
	/* 0: not given (the library's default). */
	fprintf(f,
		",\"workers\":%u,\"offload\":%s,\"compare_workers\":%u,\"compare_offload\":%s,"
		"\"offload_kib\":%u,\"spin_us\":%u,\"cpus\":[",
		o->workers, o->offload ? "true" : "false", o->compare_workers,
		o->compare_off ? "true" : "false", o->offload_kib, o->spin_us);
	for (unsigned k = 0; k < o->ncpus; k++)
		fprintf(f, "%s%d", k ? "," : "", o->cpus[k]);
	/* zc_min 0: not given or never (the library's default: no zero copy). */
	fprintf(f, "],\"zc_min\":%u,\"compare_zc\":%s,\"mtu\":%u,\"tcp\":%s}", o->zc_min,
		o->compare_zc ? "true" : "false", o->mtu, o->tcp ? "true" : "false");
}

/* Take the terminal from the progress line. */
static void out_begin(struct session *s)
{
	pthread_mutex_lock(&s->out_lock);
	if (s->progress_shown) {
		fputs("\r\033[K", stderr);
		s->progress_shown = false;
	}
}

static void out_end(struct session *s)
{
	bool bad = fflush(s->table) || ferror(s->table);

	if (s->json)
		bad |= fflush(s->json) || ferror(s->json);
	if (s->csv)
		bad |= fflush(s->csv) || ferror(s->csv);
	/* Nobody is reading (a closed pipe, a full disk): measuring on is wasted time. */
	if (bad && !stopped(s)) {
		request_stop(s);
		s->output_failed = true;
	}
	pthread_mutex_unlock(&s->out_lock);
}

/* ---- environment header ------------------------------------------------------------------- */

/* The backend column fits the longest name that runs ("sendmmsg+ts/64"). */
static int backend_width(const struct session *s)
{
	int w = 10;

	for (unsigned i = 0; i < s->o->nvariants; i++) {
		int l = (int)strlen(variant_name(s->o->order[i]));

		if (l > w)
			w = l;
	}
	return w;
}

/* The header's "load" line: what background load runs, and when. */
static const char *load_desc(const struct session *s, char *buf, size_t len)
{
	const struct opts *o = s->o;

	if (!o->bg_load) {
		snprintf(buf, len, "no background load (--background-load K adds some)");
		return buf;
	}
	int l = snprintf(buf, len,
			 "%u background process%s (short system calls and walks of an 8 MiB "
			 "buffer; not pinned), ",
			 o->bg_load, o->bg_load == 1 ? "" : "es");

	if (l < 0 || (size_t)l >= len)
		return buf;
	if (o->load_from_half && o->timeline > 0)
		snprintf(buf + l, len - (size_t)l,
			 "off for the first half of each timeline, on for the second (from %.3g s)",
			 o->timeline / 2);
	else if (o->load_from_half)
		snprintf(buf + l, len - (size_t)l,
			 "on from half the expected run (%.3g s of about %.3g s)", s->expected_s / 2,
			 s->expected_s);
	else if (o->load_from > 0)
		snprintf(buf + l, len - (size_t)l, "on from %.3g s after the start", o->load_from);
	else
		snprintf(buf + l, len - (size_t)l, "on for the whole run");
	return buf;
}

void text_header(FILE *f, const struct session *s)
{
	const struct env_info *e = &s->env;

	fprintf(f, "multisend-bench %s\n", BENCH_VERSION);
	fprintf(f, "  kernel    %s\n", e->kernel);
	fprintf(f, "  cpu       %s; %ld cores online, %ld usable%s; clock source %s\n",
		e->cpu_model, e->cores_online, e->cores_allowed,
		e->hypervisor ? "; virtual machine (hypervisor flag)" : "", e->clocksource);
	fprintf(f, "  clock     one read of the thread's CPU clock costs %.0f ns (AUTO reads it twice "
		   "per timed fan-out)\n", e->thread_clock_ns);
	if (s->o->cpu >= 0)
		fprintf(f, "  sender    one thread, pinned to CPU %d\n", s->o->cpu);
	else
		fprintf(f, "  sender    one thread, not pinned (--cpu pins it)\n");
	fprintf(f, "  library   libmultisend %s\n", e->lib_version);
	fprintf(f, "  backends");
	bool first = true;

	for (unsigned i = 0; i < s->o->nvariants; i++) {
		const struct variant *v = &s->var[s->o->order[i]];

		fprintf(f, "%s%-*s %s%s\n", first ? "  " : "            ",
			backend_width(s) > 11 ? backend_width(s) : 11, v->name,
			v->available ? "" : "SKIPPED: ", v->detail);
		first = false;
	}
	if (s->o->ts_sample)
		fprintf(f, "  stamps    kernel software transmit timestamps (SO_TIMESTAMPING) on one fan-out "
			   "in %u of each +ts backend, %s;\n            skew figures from them%s\n",
			s->o->ts_sample,
			s->o->ts_all ? "every destination" : "first and last destination",
			s->o->ts_compare ? "; every backend also runs without, interleaved" : "");
	char sends[1024];

	fprintf(f, "  sends     %s\n", send_options_desc(s->o, sends, sizeof(sends)));
	fprintf(f, "  sockets   %s\n", s->shape_desc);
	fprintf(f, "  sink      %s\n", s->sink_desc);
	fprintf(f, "  method    %s\n", s->method_desc);
	char load[256];

	fprintf(f, "  load      %s\n", load_desc(s, load, sizeof(load)));
	fprintf(f, "  start     %s, load average %s, RLIMIT_NOFILE %" PRIu64 "\n", e->date,
		e->loadavg, e->nofile);
}

void json_env(FILE *f, const struct session *s)
{
	const struct env_info *e = &s->env;

	fputs("{\"type\":\"env\",\"schema_version\":1,\"bench_version\":", f);
	json_str(f, BENCH_VERSION);
	fputs(",\"library_version\":", f);
	json_str(f, e->lib_version);
	fputs(",\"kernel\":", f);
	json_str(f, e->kernel);
	fputs(",\"host\":", f);
	json_str(f, e->host);
	fputs(",\"cpu_model\":", f);
	json_str(f, e->cpu_model);
	fprintf(f, ",\"cores_online\":%ld,\"cores_usable\":%ld,\"virtual_machine\":%s",
		e->cores_online, e->cores_allowed, e->hypervisor ? "true" : "false");
	fputs(",\"clocksource\":", f);
	json_str(f, e->clocksource);
	fprintf(f, ",\"thread_clock_read_ns\":%.1f", e->thread_clock_ns);
	fputs(",\"loadavg\":", f);
	json_str(f, e->loadavg);
	fputs(",\"start\":", f);
	json_str(f, e->date);
	fprintf(f, ",\"sender_cpu\":%d,\"nofile\":%" PRIu64, s->o->cpu, e->nofile);
	fputs(",\"sink\":", f);
	json_str(f, sink_name(s->o->sink));
	fputs(",\"sink_detail\":", f);
	json_str(f, s->sink_desc);
	fputs(",\"sockets\":", f);
	json_str(f, s->o->connected ? "connected" : "unconnected");
	fputs(",\"method\":", f);
	json_str(f, s->method_desc);
	if (s->o->ts_sample)
		fprintf(f, ",\"tx_timestamps\":{\"sample_one_in\":%u,\"dests\":\"%s\",\"compare\":%s}",
			s->o->ts_sample, s->o->ts_all ? "all" : "first_last",
			s->o->ts_compare ? "true" : "false");
	else
		fputs(",\"tx_timestamps\":null", f);
	json_send_options(f, s->o);
	if (s->o->bg_load) {
		fprintf(f, ",\"background_load\":{\"processes\":%u,\"from\":", s->o->bg_load);
		if (s->o->load_from_half)
			fputs("\"half\"", f);
		else
			fprintf(f, "%.3f", s->o->load_from);
		fprintf(f, ",\"expected_run_s\":%.3f}", s->expected_s);
	} else {
		fputs(",\"background_load\":null", f);
	}
	fprintf(f, ",\"auto_warmup_s\":%.3f", s->o->auto_warmup);
	if (s->o->timeline > 0)
		fprintf(f, ",\"timeline_s\":%.3f", s->o->timeline);
	fputs(",\"backends\":[", f);
	for (unsigned i = 0; i < s->o->nvariants; i++) {
		const struct variant *v = &s->var[s->o->order[i]];

		fputs(i ? ",{\"name\":" : "{\"name\":", f);
		json_str(f, v->name);
		fprintf(f, ",\"available\":%s,\"%s\":", v->available ? "true" : "false",
			v->available ? "detail" : "reason");
		json_str(f, v->detail);
		fputc('}', f);
	}
	fputs("]}\n", f);
}

void report_header(struct session *s)
{
	out_begin(s);
	text_header(s->table, s);
	if (s->json)
		json_env(s->json, s);
	out_end(s);
}

/* ---- throughput results ------------------------------------------------------------------- */

static const char *ratio_str(char *buf, size_t len, const struct summary *r)
{
	/* Two significant digits below 0.1 ("caller vs loop" under offload): 0.00 would say
	 * nothing. */
	int d = 2;

	for (double m = 0.095; r->median > 0 && r->median < m && d < 5; m /= 10)
		d++;
	if (fabs(r->max - r->min) < 0.5 * pow(10, -d))
		snprintf(buf, len, "%.*f", d, r->median);
	else
		snprintf(buf, len, "%.*f [%.*f-%.*f]", d, r->median, d, r->min, d, r->max);
	return buf;
}

/* The "vs raw twin" column: only when a hand-written twin other than raw-sendto runs (for loop
 * alone it would repeat "vs raw-sendto"). */
static bool show_twin(const struct session *s)
{
	for (unsigned i = 0; i < s->o->nvariants; i++)
		if (variant_base(s->o->order[i]) == V_RAW_SENDMMSG ||
		    variant_base(s->o->order[i]) == V_RAW_IO_URING || s->o->order[i] == V_RAW_XDP ||
		    s->o->order[i] == V_RAW_KFANOUT)
			return true;
	return false;
}

/* The "vs plain" column: when variants run beside their plain backends (or "+wK+ts" beside
 * "+ts"). */
static bool show_base(const struct session *s)
{
	return s->o->ts_compare || s->o->compare_dw || s->o->compare_rot || s->o->compare_conn ||
	       s->o->compare_off || s->o->compare_workers || s->o->compare_zc;
}

/* The "caller vs loop" column: "+offload" variants' caller CPU over the plain loop's. */
static bool show_loop(const struct session *s)
{
	return s->o->compare_off;
}

static void table_heading(struct session *s, unsigned mode)
{
	FILE *f = s->table;
	const int bw = backend_width(s);
	const bool nots = show_base(s), twin = show_twin(s), loop = show_loop(s);

	fprintf(f, "\n%s: %s sink, %s\n", mode == MODE_CAPACITY ? "capacity sweep" : mode_name(mode),
		sink_name(s->o->sink),
		s->o->connected ? "one connected socket per destination"
				: "one unconnected socket");
	fprintf(f, "%7s %5s  %-*s %10s %9s  %-19s %6s  %-19s", "fan-out", "size", bw, "backend",
		"fan-outs/s", "dests/s", "CPU ns/dest process", "caller", "vs raw-sendto");
	if (twin)
		fprintf(f, "  %-19s", "vs raw twin");
	if (nots)
		fprintf(f, "  %-19s",
			s->o->ts_compare && !s->o->compare_workers ? "+ts vs plain" : "vs plain");
	if (loop)
		fprintf(f, "  %-19s", "caller vs loop");
	fprintf(f, " %8s %6s", "syscalls", "drops");
	if (sink_reads(s->o->sink))
		fprintf(f, " %9s %6s", "received", "unacc.");
	if (s->o->sink == SINK_NETNS_DROP)
		fprintf(f, " %10s", "veth drops");
	if (s->o->sink == SINK_NETNS_XDP)
		fprintf(f, " %10s", "veth tx");
	fprintf(f, "\n%7s %5s  %-*s %10s %9s  %-19s %6s  %-19s", "", "B", bw, "", "median", "median",
		"median [min-max]", "median", "CPU/dest [min-max]");
	if (twin)
		fprintf(f, "  %-19s", "CPU/dest [min-max]");
	if (nots)
		fprintf(f, "  %-19s", "CPU/dest [min-max]");
	if (loop)
		fprintf(f, "  %-19s", "caller CPU/dest");
	fprintf(f, " %8s %6s\n", "/fan-out", "");
}

static double per_dest(uint64_t ns, uint64_t dests)
{
	return dests ? (double)ns / (double)dests : 0;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* One AUTO variant (auto, auto+kfanout) over the best fixed library backend of the same rounds:
 * the lowest median CPU per destination of the library's other backends and their variants
 * (kfanout and xdp included when they ran; raw-* and the AUTO variants not). */
static void auto_best_one(struct session *s, const struct result *a, size_t first, unsigned n)
{
	const struct result *best = NULL;
	for (size_t i = first; i < first + n; i++) {
		const struct result *r = &s->res[i];
		if (!variant_is_raw(r->v) && !variant_is_auto(r->v) && r->cpu_proc.median > 0 &&
		    (!best || r->cpu_proc.median < best->cpu_proc.median))
			best = r;
	}
	if (!best || !(a->cpu_proc.median > 0) || a->rounds != best->rounds || !a->rounds)
		return;
	/* Round by round, as the other ratios: both ran in the same rounds, interleaved. */
	double q[MAX_ROUNDS];
	unsigned k = 0;
	for (unsigned i = 0; i < a->rounds && k < MAX_ROUNDS; i++) {
		const struct sample *x = &a->s[i], *y = &best->s[i];
		double ca = per_dest(x->proc_ns - x->rx_ns - x->drain_ns, x->dests);
		double cb = per_dest(y->proc_ns - y->rx_ns - y->drain_ns, y->dests);
		if (ca > 0 && cb > 0)
			q[k++] = ca / cb;
	}
	if (!k)
		return;
	qsort(q, k, sizeof(q[0]), cmp_dbl);
	double med = k % 2 ? q[k / 2] : (q[k / 2 - 1] + q[k / 2]) / 2;
	fprintf(s->table, "        %s / best fixed backend (%s): %.3f [%.3f-%.3f] (CPU per destination, "
			  "round by round; %.3f of the medians)\n",
		variant_name(a->v), variant_name(best->v), med, q[0], q[k - 1],
		a->cpu_proc.median / best->cpu_proc.median);
}

void report_auto_best(struct session *s, size_t first, unsigned n)
{
	for (size_t i = first; i < first + n; i++)
		if (variant_is_auto(s->res[i].v))
			auto_best_one(s, &s->res[i], first, n);
}

void report_result(struct session *s, const struct result *r)
{
	FILE *f = s->table;
	char a[16], b[16], ratio[40], cpu[40];

	out_begin(s);
	if (s->table_mode != r->mode) {
		table_heading(s, r->mode);
		s->table_mode = r->mode;
	}
	snprintf(cpu, sizeof(cpu), "%.0f [%.0f-%.0f]", r->cpu_proc.median, r->cpu_proc.min,
		 r->cpu_proc.max);
	if (r->have_ratio)
		ratio_str(ratio, sizeof(ratio), &r->r_cpu_proc);
	else
		snprintf(ratio, sizeof(ratio), "-");
	/* Under offload the caller's share can be a few ns: decimals, or it would read 0. */
	fprintf(f, "%7" PRIu64 " %5" PRIu64 "  %-*s %10s %9s  %-19s %6.*f  %-19s", r->n, r->size,
		backend_width(s), variant_name(r->v), fmt_si(a, sizeof(a), r->fanouts_s.median),
		fmt_si(b, sizeof(b), r->dests_s.median), cpu, r->cpu_caller.median < 9.95 ? 2 : 0,
		r->cpu_caller.median, ratio);
	if (show_twin(s)) {
		char tw[40] = "-";

		if (r->have_twin)
			ratio_str(tw, sizeof(tw), &r->t_cpu_proc);
		fprintf(f, "  %-19s", tw);
	}
	if (show_base(s)) {
		char nots[40] = "-";

		if (r->have_base)
			ratio_str(nots, sizeof(nots), &r->b_cpu_proc);
		fprintf(f, "  %-19s", nots);
	}
	if (show_loop(s)) {
		char lp[40] = "-";

		if (r->have_loop)
			ratio_str(lp, sizeof(lp), &r->l_cpu_caller);
		fprintf(f, "  %-19s", lp);
	}
	fprintf(f, " %8.2f %6" PRIu64, r->syscalls.median, r->drops);
	if (sink_reads(s->o->sink))
		fprintf(f, " %9" PRIu64 " %6" PRId64, r->received, r->unaccounted);
	if (s->o->sink == SINK_NETNS_DROP)
		fprintf(f, " %10" PRIu64, r->k.dev_tx_dropped);
	if (s->o->sink == SINK_NETNS_XDP)
		fprintf(f, " %10" PRIu64, r->k.dev_tx_packets);
	fputc('\n', f);
	if (r->have_auto_first) {
		const struct sample *x = &r->auto_first;

		fprintf(f, "        auto first %.3gs: %.0f ns/dest process, %.0f caller (%" PRIu64
			   " fan-outs, before the warm-up and rounds; not in the row above)\n",
			r->auto_first_s, per_dest(x->proc_ns - x->rx_ns - x->drain_ns, x->dests),
			per_dest(x->thread_ns, x->dests), x->fanouts);
	}
	if (r->failed)
		fprintf(f, "        ! %" PRIu64 " of %" PRIu64 " destinations were refused%s\n",
			r->failed, r->dests,
			r->lib.off_refused ? "" : " by the kernel");
	if (r->lib.off_refused)
		fprintf(f, "        ! %" PRIu64 " calls were refused whole (-EAGAIN): the offload "
			   "ring was full and the call had MS_SEND_DONTWAIT\n",
			r->lib.off_refused);
	if (r->lib.off_waits)
		fprintf(f, "        ! the caller waited for room in the offload ring on %" PRIu64
			   " of %" PRIu64 " messages: the library thread fell behind, and the "
			   "caller CPU includes the wait\n",
			r->lib.off_waits, r->lib.off_msgs);
	/* Zero copy: whether the kernel really took the pages, from the library's counters. The
	 * warm-up's too: the first copy report, which turns zero copy off for the rest of the
	 * context's life, usually comes there. */
	if (r->lib.zc_sends + r->warm.lib.zc_sends || variant_is_zc(r->v))
		fprintf(f, "        ! zero copy: %" PRIu64 " of %" PRIu64 " destinations sent with "
			   "SEND_ZC, %" PRIu64 " reported copied by the kernel (warm-up: %" PRIu64
			   " of %" PRIu64 ", %" PRIu64 " copied)%s\n",
			r->lib.zc_sends, r->dests, r->lib.zc_copied, r->warm.lib.zc_sends,
			r->warm.dests, r->warm.lib.zc_copied,
			r->lib.zc_copied + r->warm.lib.zc_copied ? ": zero copy turned itself off"
								  : "");
	if (r->lib.xdp_fallback)
		fprintf(f, "        ! xdp: %" PRIu64 " of %" PRIu64 " destinations went by the "
			   "kernel's path instead (ms_stats.xdp_fallback_*), %" PRIu64 " as frames\n",
			r->lib.xdp_fallback, r->dests, r->lib.xdp_frames);
	if (r->lib.kf_kernel_path || r->lib.kf_refused)
		fprintf(f, "        ! kfanout: %" PRIu64 " of %" PRIu64 " destinations went by the "
			   "kernel's path instead (kfanout_reclaimed, kfanout_fallback_*), %" PRIu64
			   " refused by the policy or the device, %" PRIu64 " copied by the program\n",
			r->lib.kf_kernel_path, r->dests, r->lib.kf_refused, r->lib.kf_clones);
	if (r->softirqd.median > 0.03 * r->cpu_proc.median)
		fprintf(f, "        ! ksoftirqd ran %.0f ns/dest during these runs: receive-path work "
			   "the kernel deferred out of the process,\n          so this row's CPU "
			   "figures understate its cost by about that much (wall: %.0f ns/dest)\n",
			r->softirqd.median, r->wall_dest.median);
	if (s->o->sink == SINK_LOOPBACK && r->drops)
		fprintf(f, "        ! %" PRIu64 " datagrams were dropped at the receivers: a queue "
			   "overflowed between drains\n",
			r->drops);
	if (sink_reads(s->o->sink) && (r->unaccounted || r->bad || r->corrupt))
		fprintf(f, "        ! deliver: %" PRId64 " datagrams unaccounted, %" PRIu64
			   " malformed, %" PRIu64 " corrupt, %" PRIu64 " late\n",
			r->unaccounted, r->bad, r->corrupt, r->late);
	if (sink_reads(s->o->sink) &&
	    (r->warm.unaccounted || r->warm.bad || r->warm.corrupt))
		fprintf(f, "        ! deliver, warm-up: %" PRId64 " datagrams unaccounted, %" PRIu64
			   " malformed, %" PRIu64 " corrupt, %" PRIu64 " late\n",
			r->warm.unaccounted, r->warm.bad, r->warm.corrupt, r->warm.late);
	if (s->o->sink == SINK_DELIVER && r->foreign + r->warm.foreign)
		fprintf(f, "        ! %" PRIu64 " datagrams from other programs reached the "
			   "receivers' ports; ignored\n", r->foreign + r->warm.foreign);
	if (s->o->sink == SINK_NETNS_DROP && r->k.dev_tx_dropped < r->dests - r->failed)
		fprintf(f, "        ! the veth dropped %" PRIu64 " datagrams of %" PRIu64
			   " sent: something else received or queued them\n",
			r->k.dev_tx_dropped, r->dests - r->failed);
	if (s->o->sink == SINK_NETNS_XDP &&
	    (r->k.dev_tx_packets < r->dests - r->failed || r->k.dev_tx_dropped))
		fprintf(f, "        ! the veth handed its peer %" PRIu64 " frames of %" PRIu64
			   " sent, and dropped %" PRIu64 "\n",
			r->k.dev_tx_packets, r->dests - r->failed, r->k.dev_tx_dropped);
	if (s->json) {
		json_result(s->json, s, r);
	}
	if (s->csv)
		csv_result(s->csv, s, r);
	out_end(s);
}

void report_results_done(struct session *s, unsigned mode, uint64_t size)
{
	FILE *f = s->table;

	out_begin(s);
	if (mode == MODE_SWEEP) {
		/* The fit a + b*N says what a call costs apart from its destinations. */
		for (unsigned i = 0; i < s->o->nvariants; i++) {
			enum variant_id v = s->o->order[i];
			double sx = 0, sy = 0, sxx = 0, sxy = 0, w = 0;

			for (size_t k = 0; k < s->nres; k++) {
				const struct result *r = &s->res[k];

				if (r->mode != mode || r->v != v || r->size != size)
					continue;
				double x = (double)r->n, y = r->cpu_proc.median * x, q = 1 / (y * y);

				w += q, sx += q * x, sy += q * y, sxx += q * x * x, sxy += q * x * y;
			}
			double det = w * sxx - sx * sx;

			if (w == 0 || fabs(det) < 1e-300)
				continue;
			fprintf(f, "  fit %4" PRIu64 " B %-*s process CPU per fan-out = %.0f ns + %.0f ns "
				   "x N\n",
				size, backend_width(s), variant_name(v), (sxx * sy - sx * sxy) / det,
				(w * sxy - sx * sy) / det);
		}
	}
	out_end(s);
}

/* ---- transmit timestamps ------------------------------------------------------------------ */

static const char *const ts_hist_names[TS_NHIST] = {
	[TS_CALL_FIRST] = "call_to_first_us",
	[TS_CALL_LAST] = "call_to_last_us",
	[TS_FIRST_LAST] = "skew_first_to_last_us",
	[TS_DEST_LAG] = "dest_lag_us",
};

/* Microseconds with the precision the value deserves, in a column of width 7. */
static const char *fmt_us(char *buf, size_t len, double ns)
{
	double us = ns / 1000;

	if (us < 10)
		snprintf(buf, len, "%.2f", us);
	else if (us < 1000)
		snprintf(buf, len, "%.1f", us);
	else
		snprintf(buf, len, "%.0f", us);
	return buf;
}

/* p50, p99, max of one histogram; "*" marks a p99 with fewer than 10 samples beyond it, as in
 * the latency table. */
static void ts_cells(FILE *f, const struct ms_hist *h)
{
	char a[24], b[24], c[24];

	if (!h->count) {
		fprintf(f, "  %7s %7s  %7s", "-", "-", "-");
		return;
	}
	fprintf(f, "  %7s %7s%c %7s", fmt_us(a, sizeof(a), (double)ms_hist_quantile(h, 0.5)),
		fmt_us(b, sizeof(b), (double)ms_hist_quantile(h, 0.99)),
		(double)h->count * 0.01 < 10 ? '*' : ' ', fmt_us(c, sizeof(c), (double)h->max_ns));
}

/* The whole first-to-last histogram as a text chart: its buckets from the lowest to the highest
 * that holds a value, each row [from, below), a stretch of empty ones folded into one line.
 * Neighbouring buckets are merged in runs of equal length only when more than a screenful hold
 * values, so the body of the distribution keeps the library's resolution. */
static void ts_hist_chart(FILE *f, const char *backend, const char *what, const struct ms_hist *h)
{
	enum { ROWS = 40, BAR = 40 };
	int first = -1, last = -1;
	unsigned used = 0;

	for (unsigned i = 0; i < MS_HIST_BUCKETS; i++)
		if (h->bucket[i]) {
			if (first < 0)
				first = (int)i;
			last = (int)i;
			used++;
		}
	fprintf(f, "\n        skew first -> last destination, %s, %s: %" PRIu64
		   " sampled fan-outs (kernel TX timestamps), microseconds\n",
		backend, what, h->count);
	if (first < 0) {
		fprintf(f, "          (no sample)\n");
		return;
	}
	unsigned group = (used + ROWS - 1) / ROWS;
	uint64_t top = 0, cum = 0;

	for (unsigned i = (unsigned)first; i <= (unsigned)last; i += group) {
		uint64_t c = 0;

		for (unsigned k = i; k < i + group && k <= (unsigned)last; k++)
			c += h->bucket[k];
		if (c > top)
			top = c;
	}
	fprintf(f, "        %10s %10s %8s %6s\n", "from", "below", "count", "cum %");
	for (unsigned i = (unsigned)first, empty_from = 0, empty = 0; i <= (unsigned)last;
	     i += group) {
		unsigned end = i + group - 1 < (unsigned)last ? i + group - 1 : (unsigned)last;
		uint64_t lo = 0, hi = 0, dummy, c = 0;
		char a[24], b[24], bar[BAR + 1];

		ms_hist_bucket_range(i, &lo, &dummy);
		ms_hist_bucket_range(end, &dummy, &hi);
		for (unsigned k = i; k <= end; k++)
			c += h->bucket[k];
		if (!c) {
			if (!empty++)
				empty_from = i;
			continue;
		}
		if (empty) {
			uint64_t elo = 0;

			ms_hist_bucket_range(empty_from, &elo, &dummy);
			fprintf(f, "        %10s %10s %8s\n", fmt_us(a, sizeof(a), (double)elo),
				fmt_us(b, sizeof(b), (double)lo), "0");
			empty = 0;
		}
		cum += c;
		/* At least one mark for a non-empty row, so a lone outlier stays visible. */
		unsigned w = (unsigned)((c * BAR + top - 1) / top);

		memset(bar, '#', w);
		bar[w] = 0;
		fprintf(f, "        %10s %10s %8" PRIu64 " %6.1f  %s\n",
			fmt_us(a, sizeof(a), (double)lo), fmt_us(b, sizeof(b), (double)hi + 1), c,
			100.0 * (double)cum / (double)h->count, bar);
	}
	char a[24], b[24];

	fprintf(f, "        min %s us, mean %.2f us, max %s us\n",
		fmt_us(a, sizeof(a), (double)h->min_ns), (double)h->sum_ns / (double)h->count / 1000,
		fmt_us(b, sizeof(b), (double)h->max_ns));
}

struct ts_row {
	enum variant_id v;
	const struct ts_result *t;
};

/* The block under one configuration's rows: what the kernel's transmit stamps say. */
static void ts_block(struct session *s, const struct ts_row *rows, unsigned n, const char *what)
{
	FILE *f = s->table;
	const int bw = backend_width(s);
	const bool all = s->o->ts_all, workers = s->o->compare_workers != 0;
	unsigned shown = 0;

	for (unsigned i = 0; i < n; i++)
		shown += rows[i].t != NULL;
	if (!shown)
		return;
	fprintf(f, "        TX timestamps (kernel software stamps, 1 fan-out in %u), microseconds from "
		   "the ms_send call:\n",
		s->o->ts_sample);
	fprintf(f, "        %-*s %8s %7s %7s  %-24s  %-24s  %-24s", bw, "", "sampled", "stamped",
		"missing", "call -> first dest", "call -> last dest", "skew first -> last");
	if (all)
		fprintf(f, "  %-24s", "call -> each dest");
	if (workers)
		fprintf(f, "  %-20s", "skew vs 1 thread");
	fprintf(f, "\n        %-*s %8s %7s %7s", bw, "backend", "fan-outs", "dests", "dests");
	for (int k = 0; k < (all ? 4 : 3); k++)
		fprintf(f, "  %7s %7s  %7s", "p50", "p99", "max");
	if (workers)
		fprintf(f, "  %6s %6s %6s", "p50", "p99", "mean");
	fputc('\n', f);
	for (unsigned i = 0; i < n; i++) {
		const struct ts_result *t = rows[i].t;

		if (!t)
			continue;
		fprintf(f, "        %-*s %8" PRIu64 " %7" PRIu64 " %7" PRIu64, bw,
			variant_name(rows[i].v), t->c.sampled, t->c.stamped, t->c.missing);
		ts_cells(f, &t->h[TS_CALL_FIRST]);
		ts_cells(f, &t->h[TS_CALL_LAST]);
		ts_cells(f, &t->h[TS_FIRST_LAST]);
		if (all)
			ts_cells(f, &t->h[TS_DEST_LAG]);
		if (workers && t->have_ref)
			fprintf(f, "  %6.2f %6.2f %6.2f", t->skew_ratio[SKEW_P50],
				t->skew_ratio[SKEW_P99], t->skew_ratio[SKEW_MEAN]);
		else if (workers)
			fprintf(f, "  %6s %6s %6s", "-", "-", "-");
		fputc('\n', f);
		if (t->c.missing || t->c.unsupported || t->c.late)
			fprintf(f, "        ! %s: %" PRIu64 " sampled destinations got no stamp (a failed "
				   "send, or a drop before the device), %" PRIu64 " could not be "
				   "stamped, %" PRIu64 " stamps came too late to count\n",
				variant_name(rows[i].v), t->c.missing, t->c.unsupported, t->c.late);
		if (t->c.foreign)
			fprintf(f, "        ! %s: %" PRIu64 " other entries on the sockets' error queues "
				   "(ICMP errors), read and discarded by the library\n",
				variant_name(rows[i].v), t->c.foreign);
		if (!t->c.sampled)
			fprintf(f, "        ! %s: no fan-out was sampled in the timed rounds: lower "
				   "--ts-sample or run longer\n",
				variant_name(rows[i].v));
	}
	if (s->o->ts_hist)
		for (unsigned i = 0; i < n; i++)
			if (rows[i].t)
				ts_hist_chart(f, variant_name(rows[i].v), what,
					      &rows[i].t->h[TS_FIRST_LAST]);
}

void report_ts(struct session *s, size_t first, size_t n)
{
	struct ts_row rows[V_COUNT];
	unsigned k = 0;
	char what[64] = "";

	for (size_t i = first; i < first + n && i < s->nres && k < V_COUNT; i++) {
		rows[k++] = (struct ts_row){ s->res[i].v, s->res[i].ts };
		snprintf(what, sizeof(what), "fan-out %" PRIu64 ", %" PRIu64 " B", s->res[i].n,
			 s->res[i].size);
	}
	out_begin(s);
	ts_block(s, rows, k, what);
	out_end(s);
}

void report_call_wall(struct session *s, size_t first, size_t n)
{
	FILE *f = s->table;
	bool any = false;

	for (size_t i = first; i < first + n && i < s->nres; i++)
		any |= s->res[i].have_call_wall;
	if (!any)
		return;
	out_begin(s);
	fprintf(f, "        call wall, fan-out %" PRIu64 ", %" PRIu64 " B: microseconds from the "
		   "call to its return, when the kernel has taken the last destination's "
		   "datagram or frame (one call at a time, after the rounds):\n",
		s->res[first].n, s->res[first].size);
	for (size_t i = first; i < first + n && i < s->nres; i++) {
		const struct result *r = &s->res[i];

		if (r->have_call_wall)
			fprintf(f, "          %-12s p50 %9.1f  p99 %9.1f  (%" PRIu64 " calls)\n",
				variant_name(r->v), r->call_wall_p50_ns / 1e3,
				r->call_wall_p99_ns / 1e3, r->call_wall_n);
	}
	out_end(s);
}

void report_ts_latency(struct session *s, size_t first, size_t n)
{
	struct ts_row rows[V_COUNT];
	unsigned k = 0;
	char what[96] = "";

	for (size_t i = first; i < first + n && i < s->nlat && k < V_COUNT; i++) {
		rows[k++] = (struct ts_row){ s->lat[i].v, s->lat[i].ts };
		snprintf(what, sizeof(what), "fan-out %" PRIu64 ", %" PRIu64 " B at %" PRIu64 "/s",
			 s->lat[i].n, s->lat[i].size, s->lat[i].rate);
	}
	out_begin(s);
	ts_block(s, rows, k, what);
	out_end(s);
}

static void json_ts_hist(FILE *f, const char *name, const struct ms_hist *h)
{
	static const double q[] = { 0.5, 0.9, 0.99, 0.999 };
	static const char *const qn[] = { "p50", "p90", "p99", "p99.9" };

	fprintf(f, ",\"%s\":{\"samples\":%" PRIu64, name, h->count);
	for (size_t i = 0; i < ARRAY_SIZE(q); i++) {
		fprintf(f, ",\"%s\":", qn[i]);
		json_num(f, h->count ? (double)ms_hist_quantile(h, q[i]) / 1000 : NAN);
	}
	fputs(",\"max\":", f);
	json_num(f, h->count ? (double)h->max_ns / 1000 : NAN);
	fputs(",\"mean\":", f);
	json_num(f, h->count ? round((double)h->sum_ns / (double)h->count) / 1000 : NAN);
	fputc('}', f);
}

/* "tx_timestamps": the stamped variants' figures, null for the others. */
static void json_ts(FILE *f, const struct session *s, enum variant_id v, const struct ts_result *t)
{
	if (!t) {
		fputs(",\"tx_timestamps\":null", f);
		return;
	}
	fprintf(f,
		",\"tx_timestamps\":{\"source\":\"kernel software transmit timestamps "
		"(SO_TIMESTAMPING TX_SOFTWARE, else TX_SCHED), minus the ms_send call's start\""
		",\"sample_one_in\":%u,\"dests\":\"%s\",\"sampled\":%" PRIu64
		",\"requested\":%" PRIu64 ",\"stamped\":%" PRIu64 ",\"missing\":%" PRIu64
		",\"unsupported\":%" PRIu64 ",\"foreign\":%" PRIu64 ",\"late\":%" PRIu64,
		s->o->ts_sample, s->o->ts_all ? "all" : "first_last", t->c.sampled, t->c.requested,
		t->c.stamped, t->c.missing, t->c.unsupported, t->c.foreign, t->c.late);
	for (int k = 0; k < TS_NHIST; k++)
		json_ts_hist(f, ts_hist_names[k], &t->h[k]);
	/* "+wK+ts": the skew over the one-thread "+ts" variant's from the same rounds. */
	if (t->have_ref) {
		fputs(",\"skew_ratio_to_single_thread\":{\"baseline\":", f);
		json_str(f, variant_name(variant_ref(v)));
		fputs(",\"p50\":", f);
		json_num(f, t->skew_ratio[SKEW_P50]);
		fputs(",\"p99\":", f);
		json_num(f, t->skew_ratio[SKEW_P99]);
		fputs(",\"mean\":", f);
		json_num(f, t->skew_ratio[SKEW_MEAN]);
		fputc('}', f);
	} else {
		fputs(",\"skew_ratio_to_single_thread\":null", f);
	}
	/* The skew histogram itself, non-empty buckets only: [low ns, high ns, count]. */
	fputs(",\"skew_histogram_ns\":[", f);
	for (unsigned i = 0, n = 0; i < MS_HIST_BUCKETS; i++) {
		uint64_t lo, hi;

		if (!t->h[TS_FIRST_LAST].bucket[i] || ms_hist_bucket_range(i, &lo, &hi))
			continue;
		fprintf(f, "%s[%" PRIu64 ",%" PRIu64 ",%" PRIu64 "]", n++ ? "," : "", lo, hi,
			t->h[TS_FIRST_LAST].bucket[i]);
	}
	fputs("]}", f);
}

/* CSV columns for the timestamps, appended to every row (empty where they do not apply). */
static const char csv_ts_columns[] =
	",ts_sample,ts_sampled,ts_stamped,ts_missing,call_first_p50_us,call_first_p99_us,"
	"call_first_max_us,call_last_p50_us,call_last_p99_us,call_last_max_us,skew_p50_us,"
	"skew_p99_us,skew_max_us,ratio_cpu_no_ts,ratio_cpu_no_ts_min,ratio_cpu_no_ts_max";

static void csv_ts(FILE *f, const struct session *s, const struct ts_result *t,
		   const struct result *r)
{
	if (t) {
		fprintf(f, ",%u,%" PRIu64 ",%" PRIu64 ",%" PRIu64, s->o->ts_sample, t->c.sampled,
			t->c.stamped, t->c.missing);
		for (int k = TS_CALL_FIRST; k <= TS_FIRST_LAST; k++) {
			const struct ms_hist *h = &t->h[k];

			if (h->count)
				fprintf(f, ",%.3f,%.3f,%.3f", ms_hist_quantile(h, 0.5) / 1000.0,
					ms_hist_quantile(h, 0.99) / 1000.0, h->max_ns / 1000.0);
			else
				fputs(",,,", f);
		}
	} else {
		fputs(",,,,,,,,,,,,,", f);
	}
	if (r && r->have_base)
		fprintf(f, ",%.4f,%.4f,%.4f", r->b_cpu_proc.median, r->b_cpu_proc.min,
			r->b_cpu_proc.max);
	else
		fputs(",,,", f);
}

/* CSV columns for the library's threads, after the timestamps' (empty where they do not
 * apply); the last of every row. */
static const char csv_thread_columns[] =
	",workers,offload,ratio_cpu_caller_plain,ratio_cpu_caller_loop,ratio_cpu_caller_loop_min,"
	"ratio_cpu_caller_loop_max,offload_msgs,offload_waits,offload_refused,zc_min,zc_sends,"
	"zc_copied,skew_ratio_p50,"
	"skew_ratio_p99,skew_ratio_mean";

static void csv_threads(FILE *f, const struct session *s, enum variant_id v,
			const struct ts_result *t, const struct result *r)
{
	fprintf(f, ",%u,%d", variant_workers(s->o, v), variant_offloads(s->o, v));
	if (r && r->have_base)
		fprintf(f, ",%.4f", r->b_cpu_caller.median);
	else
		fputs(",", f);
	if (r && r->have_loop)
		fprintf(f, ",%.4f,%.4f,%.4f", r->l_cpu_caller.median, r->l_cpu_caller.min,
			r->l_cpu_caller.max);
	else
		fputs(",,,", f);
	if (r && !variant_is_raw(v))
		fprintf(f, ",%" PRIu64 ",%" PRIu64 ",%" PRIu64, r->lib.off_msgs, r->lib.off_waits,
			r->lib.off_refused);
	else
		fputs(",,,", f);
	/* zc_min as the context has it (0: never); the counts, throughput only. */
	if (variant_is_raw(v))
		fputs(",", f);
	else
		fprintf(f, ",%u", variant_zc_min(s->o, v));
	if (r && !variant_is_raw(v))
		fprintf(f, ",%" PRIu64 ",%" PRIu64, r->lib.zc_sends, r->lib.zc_copied);
	else
		fputs(",,", f);
	if (t && t->have_ref)
		fprintf(f, ",%.4f,%.4f,%.4f\n", t->skew_ratio[SKEW_P50], t->skew_ratio[SKEW_P99],
			t->skew_ratio[SKEW_MEAN]);
	else
		fputs(",,,\n", f);
}

static void json_summary(FILE *f, const char *name, const struct summary *m)
{
	fprintf(f, ",\"%s\":{\"median\":", name);
	json_num(f, m->median);
	fputs(",\"min\":", f);
	json_num(f, m->min);
	fputs(",\"max\":", f);
	json_num(f, m->max);
	fputc('}', f);
}

/* auto+kfanout: its sending thread's credentials (kf_unpriv), ,"unprivileged":{...} (null for
 * the other variants). */
static void json_unpriv(FILE *f, const struct session *s, enum variant_id v)
{
	const struct kf_bench *kf = &s->kf;

	fputs(",\"unprivileged\":", f);
	if (v != V_AUTO_KF) {
		fputs("null", f);
		return;
	}
	fprintf(f, "{\"cap_drops\":%" PRIu64 ",\"effective_caps\":\"0x%016" PRIx64 "\"",
		kf->unpriv_drops, kf->unpriv_eff_seen);
	if (!kf->unpriv_checked) {
		fputs(",\"af_xdp_socket_errno\":null,\"xdp_alone_error\":null}", f);
		return;
	}
	fprintf(f, ",\"af_xdp_socket_errno\":%d,\"af_xdp_socket\":", kf->unpriv_xsk_errno);
	json_str(f, kf->unpriv_xsk_errno ? strerror(kf->unpriv_xsk_errno) : "ok");
	fprintf(f, ",\"xdp_alone_error\":%d,\"xdp_alone\":", kf->unpriv_xdp_err);
	json_str(f, kf->unpriv_xdp_err ? ms_strerror(kf->unpriv_xdp_err) : "ok");
	fputc('}', f);
}

/* AUTO's fields of a result or a timeline row: its description and backend at the end, and
 * auto+kfanout's credentials (null for the other variants). */
static void json_auto(FILE *f, const struct session *s, enum variant_id v, const char *desc,
		      int backend)
{
	fputs(",\"auto_describe\":", f);
	if (variant_is_auto(v))
		json_str(f, desc);
	else
		fputs("null", f);
	fputs(",\"auto_backend\":", f);
	if (variant_is_auto(v) && backend >= 0)
		json_str(f, ms_backend_name((enum ms_backend)backend));
	else
		fputs("null", f);
	json_unpriv(f, s, v);
}

static void json_lib(FILE *f, const struct result *r, const struct lib_count *l)
{
	if (variant_is_raw(r->v)) {
		fputs(",\"library\":null", f);
		return;
	}
	fprintf(f,
		",\"library\":{\"fanouts\":%" PRIu64 ",\"dests_attempted\":%" PRIu64
		",\"dests_accepted\":%" PRIu64 ",\"dests_failed\":%" PRIu64 ",\"bytes\":%" PRIu64
		",\"syscalls\":%" PRIu64 ",\"offload_msgs\":%" PRIu64 ",\"offload_waits\":%" PRIu64
		",\"offload_refused\":%" PRIu64 ",\"zc_sends\":%" PRIu64 ",\"zc_copied\":%" PRIu64
		",\"xdp_frames\":%" PRIu64 ",\"xdp_kicks\":%" PRIu64 ",\"xdp_fallback\":%" PRIu64
		",\"kfanout_templates\":%" PRIu64 ",\"kfanout_clones\":%" PRIu64
		",\"kfanout_kernel_path\":%" PRIu64 ",\"kfanout_refused\":%" PRIu64 "}",
		l->fanouts, l->attempted, l->accepted, l->failed, l->bytes, l->syscalls, l->off_msgs,
		l->off_waits, l->off_refused, l->zc_sends, l->zc_copied, l->xdp_frames, l->xdp_kicks,
		l->xdp_fallback, l->kf_templates, l->kf_clones, l->kf_kernel_path, l->kf_refused);
}

static void json_deliver(FILE *f, const struct session *s, const struct sample *x)
{
	fprintf(f,
		",\"deliver\":{\"received\":%" PRIu64 ",\"kernel_drops\":%" PRIu64
		",\"unaccounted\":%" PRId64 ",\"lost_by_sequence\":%" PRIu64
		",\"late\":%" PRIu64 ",\"malformed\":%" PRIu64 ",\"corrupt\":%" PRIu64
		",\"payload_checked\":%s,\"foreign\":%" PRIu64,
		x->received, x->drops, x->unaccounted, x->lost, x->late, x->bad, x->corrupt,
		s->o->verify_payload ? "true" : "false", x->foreign);
	/* tcp: the bytes read, to be (dests_sent - dests_failed) x size. */
	if (s->o->sink == SINK_TCP)
		fprintf(f, ",\"bytes_received\":%" PRIu64, x->rx_bytes);
	fputc('}', f);
}

void json_result(FILE *f, const struct session *s, const struct result *r)
{
	fputs("{\"type\":\"result\",\"mode\":", f);
	json_str(f, mode_name(r->mode));
	fputs(",\"backend\":", f);
	json_str(f, variant_name(r->v));
	/* The plain backend and what its variant changes: "plain", "ts", "dontwait", "rotate",
	 * "connect", "offload", "workers" (with timestamps too: "workers_ts"). */
	fputs(",\"base_backend\":", f);
	json_str(f, variant_name(variant_base(r->v)));
	fputs(",\"variant\":", f);
	json_str(f, variant_is_ts(r->v)     ? "ts"
		    : variant_is_dw(r->v)   ? "dontwait"
		    : variant_is_rot(r->v)   ? "rotate"
		    : variant_is_conn(r->v)  ? "connect"
		    : variant_is_off(r->v)   ? "offload"
		    : variant_is_zc(r->v)    ? "zc"
		    : variant_is_w_ts(r->v)  ? "workers_ts"
		    : variant_is_w(r->v)     ? "workers"
					     : "plain");
	/* The context's threads as configured (workers 0: one thread, the caller's). */
	fprintf(f, ",\"workers\":%u,\"offload\":%s", variant_workers(s->o, r->v),
		variant_offloads(s->o, r->v) ? "true" : "false");
	fprintf(f, ",\"fanout\":%" PRIu64 ",\"size\":%" PRIu64, r->n, r->size);
	fputs(",\"sink\":", f);
	json_str(f, sink_name(s->o->sink));
	fputs(",\"sockets\":", f);
	json_str(f, s->o->connected ? "connected" : "unconnected");
	fprintf(f, ",\"rounds\":%u,\"fanouts_per_run\":%" PRIu64, r->rounds, r->iterations);
	json_summary(f, "fanouts_per_s", &r->fanouts_s);
	json_summary(f, "dests_per_s", &r->dests_s);
	json_summary(f, "cpu_ns_per_dest_process", &r->cpu_proc);
	json_summary(f, "cpu_ns_per_dest_caller", &r->cpu_caller);
	json_summary(f, "wall_ns_per_dest", &r->wall_dest);
	json_summary(f, "ksoftirqd_ns_per_dest", &r->softirqd);
	json_summary(f, "syscalls_per_fanout", &r->syscalls);
	if (r->have_call_wall)
		fprintf(f, ",\"call_wall_ns\":{\"calls\":%" PRIu64 ",\"p50\":%.0f,\"p99\":%.0f}",
			r->call_wall_n, r->call_wall_p50_ns, r->call_wall_p99_ns);
	if (r->have_ratio) {
		fputs(",\"ratio_to_raw_sendto\":{\"baseline\":\"raw-sendto\"", f);
		json_summary(f, "fanouts_per_s", &r->r_fanouts_s);
		json_summary(f, "dests_per_s", &r->r_dests_s);
		json_summary(f, "cpu_ns_per_dest_process", &r->r_cpu_proc);
		json_summary(f, "cpu_ns_per_dest_caller", &r->r_cpu_caller);
		json_summary(f, "syscalls_per_fanout", &r->r_syscalls);
		fputc('}', f);
	} else {
		fputs(",\"ratio_to_raw_sendto\":null", f);
	}
	fprintf(f, ",\"drops\":%" PRIu64, r->drops);
	fprintf(f,
		",\"kernel\":{\"udp_drops\":%" PRIu64 ",\"udp_in_errors\":%" PRIu64
		",\"udp_rcvbuf_errors\":%" PRIu64 ",\"udp_sndbuf_errors\":%" PRIu64
		",\"udp_no_ports\":%" PRIu64 ",\"udp_mem_errors\":%" PRIu64
		",\"udp_out_datagrams\":%" PRIu64 ",\"softnet_dropped\":%" PRIu64,
		kstat_udp_drops(&r->k), r->k.udp_in_errors, r->k.udp_rcvbuf_errors,
		r->k.udp_sndbuf_errors, r->k.udp_no_ports, r->k.udp_mem_errors, r->k.udp_out,
		r->k.softnet_dropped);
	if (s->o->sink == SINK_NETNS_DROP)
		fprintf(f, ",\"veth_tx_dropped\":%" PRIu64, r->k.dev_tx_dropped);
	if (s->o->sink == SINK_NETNS_XDP)
		fprintf(f, ",\"veth_tx_dropped\":%" PRIu64 ",\"veth_tx_packets\":%" PRIu64,
			r->k.dev_tx_dropped, r->k.dev_tx_packets);
	fputc('}', f);
	fprintf(f, ",\"dests_sent\":%" PRIu64 ",\"dests_failed\":%" PRIu64 ",\"preempted\":%" PRIu64,
		r->dests, r->failed, r->preempted);
	if (sink_reads(s->o->sink)) {
		struct sample all = { .received = r->received, .drops = r->drops,
				      .unaccounted = r->unaccounted, .lost = r->lost,
				      .late = r->late, .bad = r->bad, .corrupt = r->corrupt,
				      .foreign = r->foreign, .rx_bytes = r->rx_bytes };

		json_deliver(f, s, &all);
	}
	json_lib(f, r, &r->lib);
	if (r->have_twin) {
		fputs(",\"ratio_to_raw_twin\":{\"baseline\":", f);
		json_str(f, variant_name((enum variant_id)variant_twin(r->v)));
		json_summary(f, "cpu_ns_per_dest_process", &r->t_cpu_proc);
		json_summary(f, "cpu_ns_per_dest_caller", &r->t_cpu_caller);
		fputc('}', f);
	} else {
		fputs(",\"ratio_to_raw_twin\":null", f);
	}
	if (r->have_base) {
		fputs(",\"ratio_to_plain\":{\"baseline\":", f);
		json_str(f, variant_name(variant_ref(r->v)));
		json_summary(f, "dests_per_s", &r->b_dests_s);
		json_summary(f, "cpu_ns_per_dest_process", &r->b_cpu_proc);
		json_summary(f, "cpu_ns_per_dest_caller", &r->b_cpu_caller);
		fputc('}', f);
	} else {
		fputs(",\"ratio_to_plain\":null", f);
	}
	if (r->have_loop) {
		fputs(",\"caller_cpu_ratio_to_loop\":{\"baseline\":", f);
		json_str(f, variant_name(V_LOOP));
		json_summary(f, "cpu_ns_per_dest_caller", &r->l_cpu_caller);
		fputc('}', f);
	} else {
		fputs(",\"caller_cpu_ratio_to_loop\":null", f);
	}
	if (r->have_base && variant_is_ts(r->v)) {
		fputs(",\"ratio_to_no_ts\":{\"baseline\":", f);
		json_str(f, variant_name(variant_base(r->v)));
		json_summary(f, "dests_per_s", &r->b_dests_s);
		json_summary(f, "cpu_ns_per_dest_process", &r->b_cpu_proc);
		json_summary(f, "cpu_ns_per_dest_caller", &r->b_cpu_caller);
		fputc('}', f);
	} else {
		fputs(",\"ratio_to_no_ts\":null", f);
	}
	json_ts(f, s, r->v, r->ts);
	if (r->have_auto_first) {
		const struct sample *x = &r->auto_first;

		fprintf(f,
			",\"auto_first\":{\"seconds\":%.3f,\"fanouts\":%" PRIu64
			",\"dests_sent\":%" PRIu64 ",\"dests_failed\":%" PRIu64
			",\"cpu_ns_per_dest_process\":%.1f,\"cpu_ns_per_dest_caller\":%.1f"
			",\"wall_ns\":%" PRIu64 "}",
			r->auto_first_s, x->fanouts, x->dests, x->failed,
			per_dest(x->proc_ns - x->rx_ns - x->drain_ns, x->dests),
			per_dest(x->thread_ns, x->dests), x->wall_ns);
	} else {
		fputs(",\"auto_first\":null", f);
	}
	json_auto(f, s, r->v, r->auto_desc, r->auto_backend);
	/* The warm-up: untimed, but its datagrams were sent (and, deliver, checked) too. */
	fprintf(f,
		",\"warmup\":{\"fanouts\":%" PRIu64 ",\"dests_sent\":%" PRIu64
		",\"dests_failed\":%" PRIu64 ",\"drops\":%" PRIu64,
		r->warm.fanouts, r->warm.dests, r->warm.failed, r->warm.drops);
	if (sink_reads(s->o->sink))
		json_deliver(f, s, &r->warm);
	json_lib(f, r, &r->warm.lib);
	fputc('}', f);
	fputs(",\"runs\":[", f);
	for (unsigned i = 0; i < r->rounds; i++) {
		const struct sample *x = &r->s[i];

		fprintf(f,
			"%s{\"fanouts\":%" PRIu64 ",\"wall_ns\":%" PRIu64 ",\"process_cpu_ns\":%" PRIu64
			",\"caller_cpu_ns\":%" PRIu64 ",\"receiver_cpu_ns\":%" PRIu64
			",\"drain_cpu_ns\":%" PRIu64 ",\"syscalls\":%" PRIu64 ",\"failed\":%" PRIu64
			",\"drops\":%" PRIu64 ",\"udp_drops_namespace\":%" PRIu64
			",\"preempted\":%" PRIu64 ",\"ksoftirqd_ns\":%" PRIu64 "}",
			i ? "," : "", x->fanouts, x->wall_ns, x->proc_ns, x->thread_ns, x->rx_ns,
			x->drain_ns, x->syscalls, x->failed, x->drops, kstat_udp_drops(&x->k),
			x->preempted, x->softirqd_ns);
	}
	fputs("]}\n", f);
}

void csv_header(FILE *f)
{
	fputs("type,mode,backend,fanout,size,sink,sockets,rounds,fanouts_per_run,"
	      "fanouts_per_s,fanouts_per_s_min,fanouts_per_s_max,dests_per_s,dests_per_s_min,"
	      "dests_per_s_max,cpu_ns_dest_process,cpu_ns_dest_process_min,"
	      "cpu_ns_dest_process_max,cpu_ns_dest_caller,cpu_ns_dest_caller_min,"
	      "cpu_ns_dest_caller_max,ratio_cpu_process,ratio_cpu_process_min,"
	      "ratio_cpu_process_max,ratio_dests_per_s,ratio_cpu_caller,syscalls_per_fanout,"
	      "drops,dests_failed,received,unaccounted,veth_tx_dropped,"
	      "rate,achieved_rate,samples,p50_us,p90_us,p99_us,p999_us,p9999_us,max_us",
	      f);
	fputs(csv_ts_columns, f);
	fputs(csv_thread_columns, f);
	fputc('\n', f);
}

void csv_result(FILE *f, const struct session *s, const struct result *r)
{
	fprintf(f, "throughput,%s,%s,%" PRIu64 ",%" PRIu64 ",%s,%s,%u,%" PRIu64, mode_name(r->mode),
		variant_name(r->v), r->n, r->size, sink_name(s->o->sink),
		s->o->connected ? "connected" : "unconnected", r->rounds, r->iterations);
	fprintf(f, ",%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f",
		r->fanouts_s.median, r->fanouts_s.min, r->fanouts_s.max, r->dests_s.median,
		r->dests_s.min, r->dests_s.max, r->cpu_proc.median, r->cpu_proc.min, r->cpu_proc.max,
		r->cpu_caller.median, r->cpu_caller.min, r->cpu_caller.max);
	if (r->have_ratio)
		fprintf(f, ",%.4f,%.4f,%.4f,%.4f,%.4f", r->r_cpu_proc.median, r->r_cpu_proc.min,
			r->r_cpu_proc.max, r->r_dests_s.median, r->r_cpu_caller.median);
	else
		fputs(",,,,,", f);
	fprintf(f, ",%.2f,%" PRIu64 ",%" PRIu64, r->syscalls.median, r->drops, r->failed);
	if (sink_reads(s->o->sink))
		fprintf(f, ",%" PRIu64 ",%" PRId64, r->received, r->unaccounted);
	else
		fputs(",,", f);
	if (sink_netns(s->o->sink))
		fprintf(f, ",%" PRIu64, r->k.dev_tx_dropped);
	else
		fputs(",", f);
	fputs(",,,,,,,,,", f);
	csv_ts(f, s, r->ts, r);
	csv_threads(f, s, r->v, r->ts, r);
}

/* ---- latency ------------------------------------------------------------------------------ */

static const double levels[] = { 50, 90, 99, 99.9, 99.99 };
static const char *const level_names[] = { "p50", "p90", "p99", "p99.9", "p99.99" };

void report_latency(struct session *s, const struct lat_result *l)
{
	FILE *f = s->table;
	char rate[16], ach[16];

	out_begin(s);
	if (!s->latency_heading) {
		fprintf(f, "\nlatency: %s sink, %s; microseconds from each call's SCHEDULED start "
			   "to its return\n",
			sink_name(s->o->sink),
			s->o->connected ? "one connected socket per destination"
					: "one unconnected socket");
		fprintf(f, "%7s %5s %8s  %-*s %9s %8s %8s %8s %8s %8s %8s %8s %8s\n", "fan-out",
			"size", "rate/s", backend_width(s), "backend", "achieved", "samples", "p50", "p90", "p99",
			"p99.9", "p99.99", "max", "preempt");
		s->latency_heading = true;
	}
	fprintf(f, "%7" PRIu64 " %5" PRIu64 " %8s  %-*s %9s %8" PRIu64, l->n, l->size,
		fmt_si(rate, sizeof(rate), (double)l->rate), backend_width(s), variant_name(l->v),
		fmt_si(ach, sizeof(ach), l->achieved), l->lat.total);
	for (size_t i = 0; i < ARRAY_SIZE(levels); i++) {
		/* Fewer than 10 samples beyond a percentile make it anecdote, not statistic. */
		bool thin = (double)l->lat.total * (1 - levels[i] / 100) < 10;

		fprintf(f, " %7.1f%c", hist_percentile(&l->lat, levels[i]) / 1000.0, thin ? '*' : ' ');
	}
	fprintf(f, " %7.1f  %7" PRIu64 "\n", l->lat.max / 1000.0, l->preempted);
	/* Why the calls fell behind: the backend's own flat-out rate (measured before the runs)
	 * says whether it could keep up at all; only then are preemptions the reason. */
	if (l->achieved < 0.98 * (double)l->rate) {
		char why[192];

		if (l->backend_rate > 0 && (double)l->rate > 0.95 * l->backend_rate)
			snprintf(why, sizeof(why), "this backend sustained %.0f/s flat out here: it "
						   "cannot keep up at this rate",
				 l->backend_rate);
		else if (l->preempted > 100)
			snprintf(why, sizeof(why), "the sending thread was preempted %" PRIu64 " times: "
						   "other work on this machine",
				 l->preempted);
		else
			snprintf(why, sizeof(why), "bursts of slow calls: it sustained %.0f/s flat "
						   "out, and was preempted %" PRIu64 " times",
				 l->backend_rate, l->preempted);
		fprintf(f, "        ! achieved %.0f/s of %" PRIu64 "/s offered: the calls fell behind "
			   "the schedule (%s), so latencies grew through the run\n",
			l->achieved, l->rate, why);
	}
	if (s->json)
		json_latency(s->json, s, l);
	if (s->csv)
		csv_latency(s->csv, s, l);
	out_end(s);
}

static void json_pcts(FILE *f, const char *name, const struct hist *h)
{
	fprintf(f, ",\"%s\":{", name);
	for (size_t i = 0; i < ARRAY_SIZE(levels); i++) {
		fprintf(f, "%s\"%s\":", i ? "," : "", level_names[i]);
		json_num(f, hist_percentile(h, levels[i]) / 1000.0);
	}
	fputs(",\"max\":", f);
	json_num(f, h->max / 1000.0);
	fputs(",\"mean\":", f);
	json_num(f, round(hist_mean(h)) / 1000.0);
	fputc('}', f);
}

void json_latency(FILE *f, const struct session *s, const struct lat_result *l)
{
	fputs("{\"type\":\"latency\",\"backend\":", f);
	json_str(f, variant_name(l->v));
	fprintf(f, ",\"fanout\":%" PRIu64 ",\"size\":%" PRIu64 ",\"rate\":%" PRIu64, l->n, l->size,
		l->rate);
	fputs(",\"sink\":", f);
	json_str(f, sink_name(s->o->sink));
	fputs(",\"sockets\":", f);
	json_str(f, s->o->connected ? "connected" : "unconnected");
	fputs(",\"achieved_rate\":", f);
	json_num(f, round(l->achieved));
	/* The rate asked for when it was capped (null: not capped), and the flat-out rates. */
	fputs(",\"requested_rate\":", f);
	json_num(f, l->requested_rate ? (double)l->requested_rate : NAN);
	fputs(",\"host_max_rate\":", f);
	json_num(f, l->host_rate > 0 ? round(l->host_rate) : NAN);
	fputs(",\"backend_max_rate\":", f);
	json_num(f, l->backend_rate > 0 ? round(l->backend_rate) : NAN);
	fprintf(f, ",\"rounds\":%u,\"samples\":%" PRIu64, l->rounds, l->lat.total);
	/* How many samples lie beyond each percentile: how much to trust it. */
	fputs(",\"samples_beyond\":{", f);
	for (size_t i = 0; i < ARRAY_SIZE(levels); i++)
		fprintf(f, "%s\"%s\":%" PRIu64, i ? "," : "", level_names[i],
			l->lat.total - hist_count_at_percentile(&l->lat, levels[i]));
	fputc('}', f);
	json_pcts(f, "latency_us", &l->lat);
	json_pcts(f, "service_us", &l->svc);
	fprintf(f, ",\"dests_failed\":%" PRIu64 ",\"drops\":%" PRIu64 ",\"preempted\":%" PRIu64,
		l->failed, l->drops, l->preempted);
	if (l->hgrm[0]) {
		fputs(",\"hgrm\":", f);
		json_str(f, l->hgrm);
	}
	json_ts(f, s, l->v, l->ts);
	fputs("}\n", f);
}

void csv_latency(FILE *f, const struct session *s, const struct lat_result *l)
{
	fprintf(f, "latency,latency,%s,%" PRIu64 ",%" PRIu64 ",%s,%s,%u,", variant_name(l->v), l->n,
		l->size, sink_name(s->o->sink), s->o->connected ? "connected" : "unconnected",
		l->rounds);
	fputs(",,,,,,,,,,,,,,,,,,", f);
	fprintf(f, ",%" PRIu64 ",%" PRIu64 ",,,", l->drops, l->failed);
	fprintf(f, ",%" PRIu64 ",%.0f,%" PRIu64, l->rate, l->achieved, l->lat.total);
	for (size_t i = 0; i < ARRAY_SIZE(levels); i++)
		fprintf(f, ",%.3f", hist_percentile(&l->lat, levels[i]) / 1000.0);
	fprintf(f, ",%.3f", l->lat.max / 1000.0);
	csv_ts(f, s, l->ts, NULL);
	csv_threads(f, s, l->v, l->ts, NULL);
}

/* ---- capacity ----------------------------------------------------------------------------- */

static void text_capacity(FILE *f, const struct session *s)
{
	const struct capacity *c = &s->cap;
	const int bw = backend_width(s);

	fprintf(f, "\ncapacity: %" PRIu64 " B at %" PRIu64 " msg/s, CPU budget %.2f of a core, ",
		c->size, c->rate, c->budget);
	if (c->bound_us > 0)
		fprintf(f, "p99 bound %.0f us\n", c->bound_us);
	else
		fprintf(f, "no latency bound (--p99-bound)\n");
	fprintf(f, "  %-*s %10s %9s %7s %7s %9s %9s %10s %12s %8s\n", bw, "backend", "a ns/call",
		"b ns/dest", "fit dev", "noise", "N by CPU", "N by p99", "N per core", "p99 at N us",
		"preempt");
	for (unsigned i = 0; i < c->nrows; i++) {
		const struct cap_row *r = &c->row[i];
		char nl[24], p99[24];

		if (r->n_lat == UINT64_MAX)
			snprintf(nl, sizeof(nl), "-");
		else
			snprintf(nl, sizeof(nl), "%" PRIu64, r->n_lat);
		if (r->verified || r->p99_us > 0)
			snprintf(p99, sizeof(p99), "%.1f%s", r->p99_us, r->verified ? "" : "?");
		else
			snprintf(p99, sizeof(p99), "-");
		fprintf(f, "  %-*s %10.0f %9.0f %6.1f%% %6.1f%% %9" PRIu64 " %9s %10" PRIu64 " %12s %8"
			   PRIu64 "%s\n",
			bw, variant_name(r->v), r->a, r->b, r->dev * 100, r->spread * 100, r->n_cpu, nl,
			r->n_max, p99, r->preempted,
			(int)i == c->best ? "  <- recommended" : r->tied ? "  (tied)" : "");
		if (r->note[0])
			fprintf(f, "  %-*s %s\n", bw, "", r->note);
	}
	fprintf(f, "  a, b: process CPU per fan-out = a + b x N, fitted over the sweep above (an a "
		   "below 0 is noise around 0);\n  "
		   "noise: the larger of the backend's CPU per destination min-max over rounds / "
		   "median (the median over the sweep) and its fit dev;\n  "
		   "N by CPU = (budget x 1e9 / rate - a) / b;\n  N by p99 from the same fit of "
		   "wall time; N per core is then measured at the rate (latency mode) and stepped "
		   "down until p99 meets the bound\n  (? = the last step was not measured); preempt = "
		   "involuntary context switches of the sending thread\n  during that measurement: "
		   "other work on this machine, which shows in the tail.\n  tied: N per core within "
		   "the noise of the largest; among tied backends a stated rule chooses (below).\n");
	if (s->o->sink == SINK_LOOPBACK)
		fprintf(f, "  The loopback sink charges the receive path to the sending CPU too, so "
			   "these N are conservative; --sink netns-drop (root) measures the sender "
			   "alone.\n");
	fprintf(f, "\n%s\n", c->sentence);
	if (c->multicast[0])
		fprintf(f, "\n%s.\n", c->multicast);
}

void json_capacity(FILE *f, const struct session *s)
{
	const struct capacity *c = &s->cap;

	fprintf(f, "{\"type\":\"capacity\",\"size\":%" PRIu64 ",\"rate\":%" PRIu64 ",\"cpu_budget\":",
		c->size, c->rate);
	json_num(f, c->budget);
	fputs(",\"p99_bound_us\":", f);
	json_num(f, c->bound_us > 0 ? c->bound_us : NAN);
	fprintf(f, ",\"subscribers\":%" PRIu64 ",\"sink\":", s->o->subscribers);
	json_str(f, sink_name(s->o->sink));
	fputs(",\"recommended\":", f);
	json_str(f, c->best >= 0 ? variant_name(c->row[c->best].v) : "");
	fputs(",\"rule\":", f);
	json_str(f, c->rule);
	fputs(",\"answer\":", f);
	json_str(f, c->sentence);
	/* The unicast answer's numbers (--subscribers), and the multicast one (--segments). */
	if (c->cores)
		fprintf(f, ",\"unicast_answer\":{\"cores\":%" PRIu64 ",\"relay_hosts\":%" PRIu64
			   ",\"relay_host_cores\":%u}",
			c->cores, c->relays, c->relay_cores);
	else
		fputs(",\"unicast_answer\":null", f);
	if (s->o->segments) {
		fprintf(f, ",\"multicast\":{\"segments\":%" PRIu64 ",\"unicast\":%" PRIu64
			   ",\"dests_per_message\":%" PRIu64 ",\"cores\":%" PRIu64 ",\"core_share\":",
			s->o->segments, s->o->unicast, c->mc_dests, c->mc_cores);
		json_num(f, c->mc_cores ? round(c->mc_share * 1000) / 1000 : NAN);
		fputs(",\"answer\":", f);
		json_str(f, c->multicast);
		fputc('}', f);
	} else {
		fputs(",\"multicast\":null", f);
	}
	fputs(",\"backends\":[", f);
	for (unsigned i = 0; i < c->nrows; i++) {
		const struct cap_row *r = &c->row[i];

		fputs(i ? ",{\"backend\":" : "{\"backend\":", f);
		json_str(f, variant_name(r->v));
		fputs(",\"a_ns_per_fanout\":", f);
		json_num(f, round(r->a));
		fputs(",\"b_ns_per_dest\":", f);
		json_num(f, round(r->b * 10) / 10);
		fputs(",\"fit_max_rel_dev\":", f);
		json_num(f, round(r->dev * 1000) / 1000);
		fputs(",\"noise\":", f);
		json_num(f, round(r->spread * 1000) / 1000);
		fprintf(f, ",\"tied\":%s", r->tied ? "true" : "false");
		fputs(",\"wall_a_ns\":", f);
		json_num(f, round(r->aw));
		fputs(",\"wall_b_ns\":", f);
		json_num(f, round(r->bw * 10) / 10);
		fprintf(f, ",\"n_by_cpu\":%" PRIu64 ",\"n_by_p99\":", r->n_cpu);
		json_num(f, r->n_lat == UINT64_MAX ? NAN : (double)r->n_lat);
		fprintf(f, ",\"n_per_core\":%" PRIu64 ",\"measured\":%s,\"preempted\":%" PRIu64
			   ",\"p99_us\":",
			r->n_max, r->verified ? "true" : "false", r->preempted);
		json_num(f, r->p99_us > 0 ? r->p99_us : NAN);
		fputs(",\"note\":", f);
		json_str(f, r->note);
		fputc('}', f);
	}
	fputs("]}\n", f);
}

void report_capacity(struct session *s)
{
	out_begin(s);
	text_capacity(s->table, s);
	if (s->json)
		json_capacity(s->json, s);
	out_end(s);
}

void report_note(struct session *s, const char *fmt, ...)
{
	va_list ap;

	out_begin(s);
	fputs("        ! ", s->table);
	va_start(ap, fmt);
	vfprintf(s->table, fmt, ap);
	va_end(ap);
	fputc('\n', s->table);
	out_end(s);
}

void report_legend(struct session *s)
{
	out_begin(s);
	fputs("\nfan-outs/s: calls per second, dests/s: datagrams per second (timed batches only).\n"
	      "CPU ns/dest process: the whole process's CPU time per destination (io_uring work the "
	      "kernel charges to\n  the process included; deliver and tcp receivers excluded); "
	      "caller: the sending thread's alone.\n"
	      "vs raw-sendto: CPU/dest over raw-sendto's in the same round; the median of those "
	      "ratios [min-max].\n"
	      "syscalls/fan-out: the library's own count (raw-sendto: one per destination; the other "
	      "hand-written baselines count their own).\n"
	      "drops: datagrams the kernel dropped over all rounds, counted at the receiving sockets "
	      "(loopback, deliver)\n  or by the private namespace's UDP counters (netns-drop).\n",
	      s->table);
	if (s->o->sink == SINK_NETNS_XDP)
		fputs("netns-xdp: syscalls/fan-out of xdp and raw-xdp are their AF_XDP kicks (sendto "
		      "on the socket; the library's in\n  ms_stats.syscalls and xdp_kicks); drops: "
		      "datagrams the sender was told were taken that the veth did not\n  hand to its "
		      "peer (its tx packets), plus the namespace's UDP receive errors; veth tx: what "
		      "it handed\n  to the peer, which drops it. call wall: each backend's single "
		      "calls timed one at a time after the\n  rounds (CLOCK_MONOTONIC from the call to "
		      "its return, when the kernel has taken the last destination).\n",
		      s->table);
	bool kf = false, hook = false;

	for (unsigned i = 0; i < s->o->nvariants; i++) {
		kf |= (s->o->order[i] == V_KFANOUT || s->o->order[i] == V_RAW_KFANOUT) &&
		      s->var[s->o->order[i]].available;
		hook |= s->o->order[i] == V_RAW_HOOK;
	}
	if (s->o->sink == SINK_NETNS_XDP && kf)
		fputs("kfanout, raw-kfanout: one sendto of the message per slice of the attachment's "
		      "slice size (ceil(N/slice)\n  template sends per fan-out; the JSON's "
		      "library.kfanout_templates counts the library's); the library's\n  syscalls "
		      "also count its re-reads of its sockets' options (once a second) and of "
		      "rtnetlink\n  (when a change came, and once a second), so its figure can "
		      "exceed ceil(N/slice) by a hair.\n  The program runs in "
		      "the sender's sendto, before it returns, so a call's wall time is the time\n  "
		      "from the call until the last clone was handed to the device.\n",
		      s->table);
	if (s->o->sink == SINK_NETNS_XDP && hook && s->var[V_RAW_HOOK].available)
		fprintf(s->table,
			"raw-sendto+hook: raw-sendto with the kernel fan-out's program on %s's egress "
			"(tcx); its 'vs raw-sendto' is\n  what the hook costs each datagram that is "
			"not a template (the program looks at the headers and lets\n  it go), tcx's "
			"dispatch included. The other backends run with the program off the device: "
			"the\n  bench put it on or off %" PRIu64 " times between timed runs, %.1f us "
			"each on average (never inside one).\n",
			NETNS_DEV, s->kf.toggles,
			s->kf.toggles ? (double)s->kf.toggle_ns / (double)s->kf.toggles / 1e3 : 0.0);
	if (s->o->sink == SINK_NETNS_XDP && kf && s->kf.attach_ns)
		fprintf(s->table,
			"kfanout: multisend-kfanout attach and policy add took %.1f ms before the run; "
			"detach follows it.\n",
			(double)s->kf.attach_ns / 1e6);
	if (s->kf.hook_fixed && s->kf.hook_why[0])
		fprintf(s->table, "kfanout: %s.\n", s->kf.hook_why);
	bool autos = false;

	for (unsigned i = 0; i < s->o->nvariants; i++)
		autos |= variant_is_auto(s->o->order[i]);
	if (autos)
		fprintf(s->table,
			"auto: the library's MS_BACKEND_AUTO on a context made for each "
			"configuration and kept across its rounds;\n  auto first Xs: its first "
			"X seconds (--auto-warmup) of sends, before the warm-up and rounds, "
			"reported apart.\n");
	if (s->var[V_AUTO_KF].wanted && s->var[V_AUTO_KF].available) {
		const struct kf_bench *kb = &s->kf;

		fprintf(s->table,
			"auto+kfanout: auto (also 'auto first Xs'), with the kernel fan-out's program on "
			"%s, and as an unprivileged\n  publisher: the sending thread's effective "
			"capabilities cleared while its context and group were made\n  and while it "
			"sent (%" PRIu64 " times, read back as %#" PRIx64 "%s; the permitted set kept "
			"and\n  restored for the bench's own work in between).",
			NETNS_DEV, kb->unpriv_drops, kb->unpriv_eff_seen,
			kb->unpriv_eff_seen ? ": NOT cleared" : " each time");
		if (kb->unpriv_checked)
			fprintf(s->table,
				" Under them, after its context was made:\n  socket(AF_XDP) %s; "
				"ms_ctx_new of xdp alone (%s queue 0, as AUTO's context names it) %s.\n",
				kb->unpriv_xsk_errno ? strerror(kb->unpriv_xsk_errno) : "succeeded",
				NETNS_DEV,
				kb->unpriv_xdp_err ? ms_strerror(kb->unpriv_xdp_err) : "succeeded");
		else
			fputc('\n', s->table);
	}
	if (show_twin(s))
		fputs("raw-sendmmsg, raw-io_uring, raw-xdp, raw-kfanout: the library's sendmmsg, "
		      "io_uring, xdp and kfanout\n  fan-outs written by hand, without the library.\n"
		      "vs raw twin: a library backend's CPU/dest over its hand-written twin's (loop: "
		      "raw-sendto, sendmmsg:\n  raw-sendmmsg, io_uring: raw-io_uring, xdp: raw-xdp, "
		      "kfanout: raw-kfanout) in the same round; the\n  median of those ratios "
		      "[min-max].\n",
		      s->table);
	if (s->o->compare_dw)
		fputs("+dontwait: the same backend with every send not waiting (ms_send with "
		      "MS_SEND_DONTWAIT; the baselines\n  with MSG_DONTWAIT), on the same sockets; a "
		      "destination refused with EAGAIN counts as failed.\n",
		      s->table);
	if (s->o->compare_rot)
		fputs("+rotate: the same library backend on a context with MS_CFG_ROTATE (each fan-out "
		      "starts one destination later).\n",
		      s->table);
	if (s->o->compare_conn)
		fputs("+connect: the same library backend on a context with MS_CFG_CONNECT: its "
		      "group is built from the\n  same addresses on the same unconnected socket, "
		      "so the library sends on a connected\n  socket of its own per destination "
		      "(made before the rounds, untimed); raw-sendto stays\n  the plain "
		      "unconnected loop, so 'vs raw-sendto' compares the connected fan-out with "
		      "it.\n",
		      s->table);
	if (s->o->compare_off || s->o->offload)
		fputs("+offload / --offload: the same library backend on a context with MS_CFG_OFFLOAD: "
		      "ms_post copies the message into\n  a ring and a library thread sends it; each "
		      "timed batch ends with ms_ctx_drain, so dests/s and process CPU\n  include the "
		      "sending; caller is the sending thread's CPU in ms_post alone, and its wait in\n"
		      "  ms_ctx_drain is taken out of process too (the bench's, not a publisher's); "
		      "failures counted from the\n  library's counters once sent.\n",
		      s->table);
	if (s->o->compare_off)
		fputs("caller vs loop: an +offload variant's caller CPU/dest over the plain library "
		      "loop's in the same round;\n  the median of those ratios [min-max]: what the "
		      "publishing thread keeps of the loop's cost.\n",
		      s->table);
	if (s->o->compare_workers)
		fprintf(s->table,
			"+w%u: the same library backend on a context with workers = %u: each fan-out "
			"in %u parts at once, one\n  on the sending thread and the others on library "
			"threads (process CPU counts them all).\n",
			s->o->compare_workers, s->o->compare_workers, s->o->compare_workers);
	if (s->o->compare_workers && s->o->ts_sample)
		fprintf(s->table,
			"+w%u+ts/%u: sampled like +ts/%u on sockets of its own, its 'vs plain' over "
			"+ts/%u; the library stamps the first\n  and last destination of every part: "
			"skew first -> last is the latest stamp minus the earliest.\n  skew vs 1 "
			"thread: its first-to-last skew over the +ts/%u variant's from the same rounds "
			"(p50, p99,\n  mean of the two histograms; p50 and p99 are bucket upper ends, "
			"the mean exact).\n",
			s->o->compare_workers, s->o->ts_sample, s->o->ts_sample, s->o->ts_sample,
			s->o->ts_sample);
	if (s->o->compare_zc)
		fputs("+zc: io_uring on a context with zc_min = 1 (or --zc-min): messages from "
		      "that size go with SEND_ZC\n  (zero copy), beside plain io_uring with zc_min "
		      "= never. '! zero copy' under a row: the library's\n  zc_sends and "
		      "zc_copied; copied > 0 means the kernel copied anyway and zero copy turned "
		      "itself off.\n",
		      s->table);
	if (s->o->compare_dw || s->o->compare_rot || s->o->compare_conn || s->o->compare_off ||
	    s->o->compare_workers || s->o->compare_zc)
		fputs("vs plain: its CPU/dest over the plain backend's in the same round; the median of "
		      "those ratios [min-max].\n",
		      s->table);
	if (s->o->ts_sample) {
		fprintf(s->table,
			"+ts/%u: the same backend with the library's kernel transmit timestamps on one "
			"fan-out in %u, on its own sockets.\n",
			s->o->ts_sample, s->o->ts_sample);
		if (s->o->ts_compare)
			fputs("+ts vs plain: its CPU/dest over the plain backend's in the same round; the "
			      "median of those ratios [min-max].\n",
			      s->table);
		fputs("TX timestamps: from the ms_send call's start to the kernel's software transmit "
		      "stamp (TX_SOFTWARE, when the\n  driver took the datagram; TX_SCHED if it got "
		      "none) of the first and the last destination; skew first -> last\n  is how much "
		      "longer the last destination waited than the first. Timed rounds only; p50, p99 "
		      "are the\n  upper ends of the library's histogram buckets (at most 6.25% wide); "
		      "* = fewer than 10 samples beyond the p99.\n",
		      s->table);
		if (s->o->ts_all)
			fputs("call -> each dest (--ts-all): the same for every destination of a sampled "
			      "fan-out.\n",
			      s->table);
	}
	out_end(s);
}

void report_skip(struct session *s, const char *what, const char *why)
{
	out_begin(s);
	fprintf(s->table, "  skipped %s: %s\n", what, why);
	if (s->json) {
		fputs("{\"type\":\"skip\",\"what\":", s->json);
		json_str(s->json, what);
		fputs(",\"reason\":", s->json);
		json_str(s->json, why);
		fputs("}\n", s->json);
	}
	out_end(s);
}

/* ---- --timeline ------------------------------------------------------------------------------ */

static const char *const tl_part_names[TL_NPART] = { "whole", "first_half", "second_half" };

static const char *best_name(int v)
{
	return v < 0 ? "-" : variant_name((enum variant_id)v);
}

void json_timeline(FILE *f, const struct session *s, const struct tl_result *t)
{
	fputs("{\"type\":\"timeline\",\"backend\":", f);
	json_str(f, variant_name(t->v));
	fprintf(f, ",\"fanout\":%" PRIu64 ",\"size\":%" PRIu64 ",\"seconds\":%.3f", t->n, t->size,
		t->seconds);
	fputs(",\"sink\":", f);
	json_str(f, sink_name(s->o->sink));
	fputs(",\"sockets\":", f);
	json_str(f, s->o->connected ? "connected" : "unconnected");
	for (int p = 0; p < TL_NPART; p++) {
		const struct sample *x = &t->part[p];

		fprintf(f,
			",\"%s\":{\"slices\":%u,\"fanouts\":%" PRIu64 ",\"dests_sent\":%" PRIu64
			",\"dests_failed\":%" PRIu64 ",\"wall_ns\":%" PRIu64
			",\"cpu_ns_per_dest_process\":%.2f,\"cpu_ns_per_dest_caller\":%.2f"
			",\"drops\":%" PRIu64 ",\"load_on\":%s,\"best_fixed\":",
			tl_part_names[p], t->slices[p], x->fanouts, x->dests, x->failed, x->wall_ns,
			t->cpu[p], t->caller[p], x->drops, t->load_on[p] ? "true" : "false");
		if (t->best[p] < 0)
			fputs("null,\"ratio_to_best_fixed\":null", f);
		else {
			json_str(f, best_name(t->best[p]));
			fprintf(f, ",\"ratio_to_best_fixed\":%.4f", t->vs_best[p]);
		}
		if (sink_reads(s->o->sink))
			json_deliver(f, s, x);
		if (s->o->sink == SINK_NETNS_DROP)
			fprintf(f, ",\"veth_tx_dropped\":%" PRIu64, x->k.dev_tx_dropped);
		fputc('}', f);
	}
	json_auto(f, s, t->v, t->auto_desc, t->auto_backend);
	fputs("}\n", f);
}

void report_timeline(struct session *s, size_t first, size_t n)
{
	FILE *f = s->table;
	const int bw = backend_width(s);
	char load[256];

	if (!n)
		return;
	out_begin(s);
	const struct tl_result *t0 = &s->tl[first];

	fprintf(f, "\ntimeline: %s sink, %s; fan-out %" PRIu64 ", %" PRIu64 " B, %.3g s; slices "
		   "of about 150 ms, order rotated every turn;\n  every backend keeps its context "
		   "and group throughout; load: %s\n",
		sink_name(s->o->sink),
		s->o->connected ? "one connected socket per destination" : "one unconnected socket",
		t0->n, t0->size, t0->seconds, load_desc(s, load, sizeof(load)));
	fprintf(f, "%-*s %6s  %-29s %7s  %-31s %8s", bw, "backend", "slices",
		"CPU ns/dest process", "caller", "vs best fixed library backend", "drops");
	if (sink_reads(s->o->sink))
		fprintf(f, " %9s %6s", "received", "unacc.");
	if (s->o->sink == SINK_NETNS_DROP)
		fprintf(f, " %10s", "veth drops");
	fprintf(f, "\n%-*s %6s  %9s %9s %9s %7s  %9s %10s %10s\n", bw, "", "", "whole", "1st half",
		"2nd half", "whole", "whole", "1st half", "2nd half");
	for (size_t i = first; i < first + n; i++) {
		const struct tl_result *t = &s->tl[i];
		const struct sample *x = &t->part[TL_WHOLE];
		char r[TL_NPART][16];

		for (int p = 0; p < TL_NPART; p++)
			if (t->best[p] < 0 || t->vs_best[p] <= 0)
				snprintf(r[p], sizeof(r[p]), "-");
			else
				snprintf(r[p], sizeof(r[p]), "%.3f", t->vs_best[p]);
		fprintf(f, "%-*s %6u  %9.1f %9.1f %9.1f %7.1f  %9s %10s %10s %8" PRIu64, bw,
			variant_name(t->v), t->slices[TL_WHOLE], t->cpu[TL_WHOLE], t->cpu[TL_FIRST],
			t->cpu[TL_SECOND], t->caller[TL_WHOLE], r[TL_WHOLE], r[TL_FIRST], r[TL_SECOND],
			x->drops);
		if (sink_reads(s->o->sink))
			fprintf(f, " %9" PRIu64 " %6" PRId64, x->received, x->unaccounted);
		if (s->o->sink == SINK_NETNS_DROP)
			fprintf(f, " %10" PRIu64, x->k.dev_tx_dropped);
		fputc('\n', f);
		if (x->failed)
			fprintf(f, "        ! %" PRIu64 " of %" PRIu64 " destinations were refused\n",
				x->failed, x->dests);
		if (s->o->sink == SINK_LOOPBACK && x->drops)
			fprintf(f, "        ! %" PRIu64 " datagrams were dropped at the receivers: a "
				   "queue overflowed between drains\n",
				x->drops);
		if (sink_reads(s->o->sink) && (x->unaccounted || x->bad || x->corrupt))
			fprintf(f, "        ! deliver: %" PRId64 " datagrams unaccounted, %" PRIu64
				   " malformed, %" PRIu64 " corrupt, %" PRIu64 " late\n",
				x->unaccounted, x->bad, x->corrupt, x->late);
		if (s->o->sink == SINK_NETNS_DROP && x->k.dev_tx_dropped < x->dests - x->failed)
			fprintf(f, "        ! the veth dropped %" PRIu64 " datagrams of %" PRIu64
				   " sent: something else received or queued them\n",
				x->k.dev_tx_dropped, x->dests - x->failed);
	}
	for (size_t i = first; i < first + n; i++) {
		const struct tl_result *t = &s->tl[i];

		if (!variant_is_auto(t->v))
			continue;
		char r[TL_NPART][48];

		for (int p = 0; p < TL_NPART; p++)
			if (t->best[p] < 0 || t->vs_best[p] <= 0)
				snprintf(r[p], sizeof(r[p]), "-");
			else
				snprintf(r[p], sizeof(r[p]), "%.3f (%s)", t->vs_best[p],
					 best_name(t->best[p]));
		fprintf(f, "  %s / best fixed: whole %s, first half %s, second half %s%s\n",
			variant_name(t->v), r[TL_WHOLE], r[TL_FIRST], r[TL_SECOND],
			t->load_on[TL_SECOND] && !t->load_on[TL_FIRST] ? "; load on in the second "
									   "half only" : "");
	}
	if (s->json)
		for (size_t i = first; i < first + n; i++)
			json_timeline(s->json, s, &s->tl[i]);
	out_end(s);
}

/* ---- after the run -------------------------------------------------------------------------- */

void report_end(struct session *s)
{
	FILE *f = s->table;
	bool any = false;

	out_begin(s);
	for (size_t i = 0; i < s->nres; i++) {
		const struct result *r = &s->res[i];

		if (!variant_is_auto(r->v))
			continue;
		if (!any)
			fputs("\nauto (ms_ctx_describe of its context after each configuration):\n", f);
		any = true;
		fprintf(f, "  %-8s fan-out %5" PRIu64 ", %5" PRIu64 " B: %s%s%s\n", mode_name(r->mode),
			r->n, r->size, r->v == V_AUTO ? "" : variant_name(r->v),
			r->v == V_AUTO ? "" : ": ", r->auto_desc);
	}
	for (size_t i = 0; i < s->ntl; i++) {
		const struct tl_result *t = &s->tl[i];

		if (!variant_is_auto(t->v))
			continue;
		if (!any)
			fputs("\nauto (ms_ctx_describe of its context after each configuration):\n", f);
		any = true;
		fprintf(f, "  %-8s fan-out %5" PRIu64 ", %5" PRIu64 " B: %s%s%s\n", "timeline", t->n,
			t->size, t->v == V_AUTO ? "" : variant_name(t->v), t->v == V_AUTO ? "" : ": ",
			t->auto_desc);
	}
	const struct bg_load *l = s->load;
	const double on_s = l ? (double)(l->on_ns + (l->on ? now_ns() - l->last_on_ns : 0)) / 1e9
			      : 0;
	const double first_s = l && l->first_on_ns
				       ? (double)(l->first_on_ns - s->started_ns) / 1e9 : -1;

	if (l)
		fprintf(f, "\nbackground load: %u process%s, first on at %.1f s, on for %.1f s in "
			   "all (%u switches); load average at the start %s, at the end %s\n",
			s->o->bg_load, s->o->bg_load == 1 ? "" : "es", first_s, on_s, l->switches,
			s->env.loadavg, s->loadavg_end);
	else
		fprintf(f, "\nload average at the start %s, at the end %s\n", s->env.loadavg,
			s->loadavg_end);
	if (s->json) {
		fputs("{\"type\":\"end\",\"loadavg_start\":", s->json);
		json_str(s->json, s->env.loadavg);
		fputs(",\"loadavg_end\":", s->json);
		json_str(s->json, s->loadavg_end);
		if (l)
			fprintf(s->json,
				",\"background_load\":{\"processes\":%u,\"first_on_s\":%.3f,"
				"\"on_s\":%.3f,\"switches\":%u}",
				s->o->bg_load, first_s, on_s, l->switches);
		else
			fputs(",\"background_load\":null", s->json);
		fputs("}\n", s->json);
	}
	out_end(s);
}
