/* SPDX-License-Identifier: MIT */
/*
 * What the bench prints: the environment header and tables for people (stdout, or stderr when
 * JSON goes to stdout), JSON lines for programs (one object per measured backend and
 * configuration, like iperf3 -J), and CSV.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <string.h>

#include "bench.h"

const char *sink_name(enum sink_kind k)
{
	switch (k) {
	case SINK_LOOPBACK:
		return "loopback";
	case SINK_NETNS_DROP:
		return "netns-drop";
	case SINK_DELIVER:
		return "deliver";
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

void text_header(FILE *f, const struct session *s)
{
	const struct env_info *e = &s->env;

	fprintf(f, "multisend-bench %s\n", BENCH_VERSION);
	fprintf(f, "  kernel    %s\n", e->kernel);
	fprintf(f, "  cpu       %s; %ld cores online, %ld usable%s; clock source %s\n",
		e->cpu_model, e->cores_online, e->cores_allowed,
		e->hypervisor ? "; virtual machine (hypervisor flag)" : "", e->clocksource);
	if (s->o->cpu >= 0)
		fprintf(f, "  sender    one thread, pinned to CPU %d\n", s->o->cpu);
	else
		fprintf(f, "  sender    one thread, not pinned (--cpu pins it)\n");
	fprintf(f, "  library   libmultisend %s\n", e->lib_version);
	fprintf(f, "  backends");
	bool first = true;

	for (unsigned i = 0; i < s->o->nvariants; i++) {
		const struct variant *v = &s->var[s->o->order[i]];

		fprintf(f, "%s%-11s %s%s\n", first ? "  " : "            ", v->name,
			v->available ? "" : "SKIPPED: ", v->detail);
		first = false;
	}
	fprintf(f, "  sockets   %s\n", s->shape_desc);
	fprintf(f, "  sink      %s\n", s->sink_desc);
	fprintf(f, "  method    %s\n", s->method_desc);
	fprintf(f, "  start     %s, load average %s, RLIMIT_NOFILE %" PRIu64 "\n", e->date,
		e->loadavg, e->nofile);
}

void json_env(FILE *f, const struct session *s)
{
	const struct env_info *e = &s->env;

	fputs("{\"type\":\"env\",\"bench_version\":", f);
	json_str(f, BENCH_VERSION);
	fputs(",\"library_version\":", f);
	json_str(f, e->lib_version);
	fputs(",\"kernel\":", f);
	json_str(f, e->kernel);
	fputs(",\"cpu_model\":", f);
	json_str(f, e->cpu_model);
	fprintf(f, ",\"cores_online\":%ld,\"cores_usable\":%ld,\"virtual_machine\":%s",
		e->cores_online, e->cores_allowed, e->hypervisor ? "true" : "false");
	fputs(",\"clocksource\":", f);
	json_str(f, e->clocksource);
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
	if (fabs(r->max - r->min) < 0.005)
		snprintf(buf, len, "%.2f", r->median);
	else
		snprintf(buf, len, "%.2f [%.2f-%.2f]", r->median, r->min, r->max);
	return buf;
}

static void table_heading(struct session *s, unsigned mode)
{
	FILE *f = s->table;

	fprintf(f, "\n%s: %s sink, %s\n", mode == MODE_CAPACITY ? "capacity sweep" : mode_name(mode),
		sink_name(s->o->sink),
		s->o->connected ? "one connected socket per destination"
				: "one unconnected socket");
	fprintf(f, "%7s %5s  %-10s %10s %9s  %-19s %6s  %-19s %8s %6s", "fan-out", "size",
		"backend", "fan-outs/s", "dests/s", "CPU ns/dest process", "caller",
		"vs raw-sendto", "syscalls", "drops");
	if (s->o->sink == SINK_DELIVER)
		fprintf(f, " %9s %6s", "received", "unacc.");
	if (s->o->sink == SINK_NETNS_DROP)
		fprintf(f, " %10s", "veth drops");
	fprintf(f, "\n%7s %5s  %-10s %10s %9s  %-19s %6s  %-19s %8s %6s\n", "", "B", "", "median",
		"median", "median [min-max]", "median", "CPU/dest [min-max]", "/fan-out", "");
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
	fprintf(f, "%7" PRIu64 " %5" PRIu64 "  %-10s %10s %9s  %-19s %6.0f  %-19s %8.2f %6" PRIu64,
		r->n, r->size, variant_name(r->v), fmt_si(a, sizeof(a), r->fanouts_s.median),
		fmt_si(b, sizeof(b), r->dests_s.median), cpu, r->cpu_caller.median, ratio,
		r->syscalls.median, r->drops);
	if (s->o->sink == SINK_DELIVER)
		fprintf(f, " %9" PRIu64 " %6" PRId64, r->received, r->unaccounted);
	if (s->o->sink == SINK_NETNS_DROP)
		fprintf(f, " %10" PRIu64, r->k.dev_tx_dropped);
	fputc('\n', f);
	if (r->failed)
		fprintf(f, "        ! %" PRIu64 " of %" PRIu64 " destinations were refused by the kernel\n",
			r->failed, r->dests);
	if (r->softirqd.median > 0.03 * r->cpu_proc.median)
		fprintf(f, "        ! ksoftirqd ran %.0f ns/dest during these runs: receive-path work "
			   "the kernel deferred out of the process,\n          so this row's CPU "
			   "figures understate its cost by about that much (wall: %.0f ns/dest)\n",
			r->softirqd.median, r->wall_dest.median);
	if (s->o->sink == SINK_LOOPBACK && r->drops)
		fprintf(f, "        ! %" PRIu64 " datagrams were dropped at the receivers: a queue "
			   "overflowed between drains\n",
			r->drops);
	if (s->o->sink == SINK_DELIVER && (r->unaccounted || r->bad || r->corrupt))
		fprintf(f, "        ! deliver: %" PRId64 " datagrams unaccounted, %" PRIu64
			   " malformed, %" PRIu64 " corrupt, %" PRIu64 " late\n",
			r->unaccounted, r->bad, r->corrupt, r->late);
	if (s->o->sink == SINK_DELIVER &&
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
			fprintf(f, "  fit %4" PRIu64 " B %-10s process CPU per fan-out = %.0f ns + %.0f ns "
				   "x N\n",
				size, variant_name(v), (sxx * sy - sx * sxy) / det,
				(w * sxy - sx * sy) / det);
		}
	}
	out_end(s);
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

static void json_lib(FILE *f, const struct result *r, const struct lib_count *l)
{
	if (r->v == V_RAW) {
		fputs(",\"library\":null", f);
		return;
	}
	fprintf(f,
		",\"library\":{\"fanouts\":%" PRIu64 ",\"dests_attempted\":%" PRIu64
		",\"dests_accepted\":%" PRIu64 ",\"dests_failed\":%" PRIu64 ",\"bytes\":%" PRIu64
		",\"syscalls\":%" PRIu64 "}",
		l->fanouts, l->attempted, l->accepted, l->failed, l->bytes, l->syscalls);
}

static void json_deliver(FILE *f, const struct session *s, const struct sample *x)
{
	fprintf(f,
		",\"deliver\":{\"received\":%" PRIu64 ",\"kernel_drops\":%" PRIu64
		",\"unaccounted\":%" PRId64 ",\"lost_by_sequence\":%" PRIu64
		",\"late\":%" PRIu64 ",\"malformed\":%" PRIu64 ",\"corrupt\":%" PRIu64
		",\"payload_checked\":%s,\"foreign\":%" PRIu64 "}",
		x->received, x->drops, x->unaccounted, x->lost, x->late, x->bad, x->corrupt,
		s->o->verify_payload ? "true" : "false", x->foreign);
}

void json_result(FILE *f, const struct session *s, const struct result *r)
{
	fputs("{\"type\":\"result\",\"mode\":", f);
	json_str(f, mode_name(r->mode));
	fputs(",\"backend\":", f);
	json_str(f, variant_name(r->v));
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
	fputc('}', f);
	fprintf(f, ",\"dests_sent\":%" PRIu64 ",\"dests_failed\":%" PRIu64 ",\"preempted\":%" PRIu64,
		r->dests, r->failed, r->preempted);
	if (s->o->sink == SINK_DELIVER) {
		struct sample all = { .received = r->received, .drops = r->drops,
				      .unaccounted = r->unaccounted, .lost = r->lost,
				      .late = r->late, .bad = r->bad, .corrupt = r->corrupt,
				      .foreign = r->foreign };

		json_deliver(f, s, &all);
	}
	json_lib(f, r, &r->lib);
	/* The warm-up: untimed, but its datagrams were sent (and, deliver, checked) too. */
	fprintf(f,
		",\"warmup\":{\"fanouts\":%" PRIu64 ",\"dests_sent\":%" PRIu64
		",\"dests_failed\":%" PRIu64 ",\"drops\":%" PRIu64,
		r->warm.fanouts, r->warm.dests, r->warm.failed, r->warm.drops);
	if (s->o->sink == SINK_DELIVER)
		json_deliver(f, s, &r->warm);
	json_lib(f, r, &r->warm.lib);
	fputc('}', f);
	fputs(",\"runs\":[", f);
	for (unsigned i = 0; i < r->rounds; i++) {
		const struct sample *x = &r->s[i];

		fprintf(f,
			"%s{\"fanouts\":%" PRIu64 ",\"wall_ns\":%" PRIu64 ",\"process_cpu_ns\":%" PRIu64
			",\"caller_cpu_ns\":%" PRIu64 ",\"receiver_cpu_ns\":%" PRIu64
			",\"syscalls\":%" PRIu64 ",\"failed\":%" PRIu64 ",\"drops\":%" PRIu64
			",\"udp_drops_namespace\":%" PRIu64 ",\"preempted\":%" PRIu64
			",\"ksoftirqd_ns\":%" PRIu64 "}",
			i ? "," : "", x->fanouts, x->wall_ns, x->proc_ns, x->thread_ns, x->rx_ns,
			x->syscalls, x->failed, x->drops, kstat_udp_drops(&x->k), x->preempted,
			x->softirqd_ns);
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
	      "rate,achieved_rate,samples,p50_us,p90_us,p99_us,p999_us,p9999_us,max_us\n",
	      f);
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
	if (s->o->sink == SINK_DELIVER)
		fprintf(f, ",%" PRIu64 ",%" PRId64, r->received, r->unaccounted);
	else
		fputs(",,", f);
	if (s->o->sink == SINK_NETNS_DROP)
		fprintf(f, ",%" PRIu64, r->k.dev_tx_dropped);
	else
		fputs(",", f);
	fputs(",,,,,,,,,\n", f);
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
		fprintf(f, "%7s %5s %8s  %-10s %9s %8s %8s %8s %8s %8s %8s %8s %8s\n", "fan-out",
			"size", "rate/s", "backend", "achieved", "samples", "p50", "p90", "p99",
			"p99.9", "p99.99", "max", "preempt");
		s->latency_heading = true;
	}
	fprintf(f, "%7" PRIu64 " %5" PRIu64 " %8s  %-10s %9s %8" PRIu64, l->n, l->size,
		fmt_si(rate, sizeof(rate), (double)l->rate), variant_name(l->v),
		fmt_si(ach, sizeof(ach), l->achieved), l->lat.total);
	for (size_t i = 0; i < ARRAY_SIZE(levels); i++) {
		/* Fewer than 10 samples beyond a percentile make it anecdote, not statistic. */
		bool thin = (double)l->lat.total * (1 - levels[i] / 100) < 10;

		fprintf(f, " %7.1f%c", hist_percentile(&l->lat, levels[i]) / 1000.0, thin ? '*' : ' ');
	}
	fprintf(f, " %7.1f  %7" PRIu64 "\n", l->lat.max / 1000.0, l->preempted);
	if (l->achieved < 0.98 * (double)l->rate)
		fprintf(f, "        ! achieved %.0f/s of %" PRIu64 "/s offered: the calls fell behind "
			   "the schedule (%s), so latencies grew through the run\n",
			l->achieved, l->rate,
			l->preempted > 100 ? "the sending thread was preempted: other work on this "
					     "machine"
					   : "the backend cannot keep up at this rate");
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
	fprintf(f, ",%.3f\n", l->lat.max / 1000.0);
}

/* ---- capacity ----------------------------------------------------------------------------- */

static void text_capacity(FILE *f, const struct session *s)
{
	const struct capacity *c = &s->cap;

	fprintf(f, "\ncapacity: %" PRIu64 " B at %" PRIu64 " msg/s, CPU budget %.2f of a core, ",
		c->size, c->rate, c->budget);
	if (c->bound_us > 0)
		fprintf(f, "p99 bound %.0f us\n", c->bound_us);
	else
		fprintf(f, "no latency bound (--p99-bound)\n");
	fprintf(f, "  %-10s %10s %9s %7s %9s %9s %10s %12s %8s\n", "backend", "a ns/call",
		"b ns/dest", "fit dev", "N by CPU", "N by p99", "N per core", "p99 at N us",
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
		fprintf(f, "  %-10s %10.0f %9.0f %6.1f%% %9" PRIu64 " %9s %10" PRIu64 " %12s %8" PRIu64
			   "%s\n",
			variant_name(r->v), r->a, r->b, r->dev * 100, r->n_cpu, nl, r->n_max, p99,
			r->preempted, (int)i == c->best ? "  <- recommended" : "");
		if (r->note[0])
			fprintf(f, "  %-10s %s\n", "", r->note);
	}
	fprintf(f, "  a, b: process CPU per fan-out = a + b x N, fitted over the sweep above (an a "
		   "below 0 is noise around 0);\n  "
		   "N by CPU = (budget x 1e9 / rate - a) / b;\n  N by p99 from the same fit of "
		   "wall time; N per core is then measured at the rate (latency mode) and stepped "
		   "down until p99 meets the bound\n  (? = the last step was not measured); preempt = "
		   "involuntary context switches of the sending thread\n  during that measurement: "
		   "other work on this machine, which shows in the tail.\n");
	if (s->o->sink == SINK_LOOPBACK)
		fprintf(f, "  The loopback sink charges the receive path to the sending CPU too, so "
			   "these N are conservative; --sink netns-drop (root) measures the sender "
			   "alone.\n");
	fprintf(f, "\n%s\n", c->sentence);
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
	fputs(",\"answer\":", f);
	json_str(f, c->sentence);
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
	      "kernel charges to\n  the process included; deliver receivers excluded); caller: "
	      "the sending thread's alone.\n"
	      "vs raw-sendto: CPU/dest over raw-sendto's in the same round; the median of those "
	      "ratios [min-max].\n"
	      "syscalls/fan-out: the library's own count (raw-sendto: one per destination).\n"
	      "drops: datagrams the kernel dropped over all rounds, counted at the receiving sockets "
	      "(loopback, deliver)\n  or by the private namespace's UDP counters (netns-drop).\n",
	      s->table);
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
