/* SPDX-License-Identifier: MIT */
/*
 * The --report directory: summary.csv, runs.jsonl, one .hgrm per latency result, the data and
 * gnuplot script behind the charts (so anyone can re-render or restyle them), the SVG charts
 * when gnuplot is installed, and index.html that shows it all with the environment header.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"

static const char *const colour[V_COUNT] = {
	[V_RAW] = "#222222",
	/* The other hand-written baselines: greys, darker than nothing but raw-sendto. */
	[V_RAW_SENDMMSG] = "#7f7f7f",
	[V_RAW_IO_URING] = "#a0a0a0",
	[V_LOOP] = "#1f77b4",
	[V_SENDMMSG] = "#ff7f0e",
	[V_IO_URING] = "#2ca02c",
	/* With timestamps: the same hue, lighter. */
	[V_LOOP_TS] = "#6baed6",
	[V_SENDMMSG_TS] = "#fdae6b",
	[V_IO_URING_TS] = "#74c476",
	[V_RAW_DW] = "#555555",
	[V_RAW_SENDMMSG_DW] = "#8c564b",
	[V_RAW_IO_URING_DW] = "#c49c94",
	[V_LOOP_DW] = "#17becf",
	[V_SENDMMSG_DW] = "#d62728",
	[V_IO_URING_DW] = "#bcbd22",
	[V_LOOP_ROT] = "#9467bd",
	[V_SENDMMSG_ROT] = "#e377c2",
	[V_IO_URING_ROT] = "#98df8a",
	[V_LOOP_CONN] = "#393b79",
	[V_SENDMMSG_CONN] = "#8c6d31",
	[V_IO_URING_CONN] = "#637939",
	[V_LOOP_OFF] = "#5254a3",
	[V_SENDMMSG_OFF] = "#bd9e39",
	[V_IO_URING_OFF] = "#8ca252",
	[V_LOOP_W] = "#6b6ecf",
	[V_SENDMMSG_W] = "#e7ba52",
	[V_IO_URING_W] = "#b5cf6b",
	/* Workers with timestamps: the workers' hue, lighter, as "+ts" is to its backend. */
	[V_LOOP_W_TS] = "#9c9ede",
	[V_SENDMMSG_W_TS] = "#e7cb94",
	[V_IO_URING_W_TS] = "#cedb9c",
	[V_AUTO] = "#d62728",
	/* Kernel bypass: purple, the hand-written twin lighter. */
	[V_RAW_XDP] = "#c5b0d5",
	[V_XDP] = "#7b4173",
	/* The kernel fan-out: dark teal, the hand-written twin lighter; raw-sendto with its hook
	 * a grey near raw-sendto's. */
	[V_RAW_KFANOUT] = "#7fcdbb",
	[V_KFANOUT] = "#00665e",
	[V_RAW_HOOK] = "#4d4d4d",
	/* auto+kfanout: auto's red, darker. */
	[V_AUTO_KF] = "#8c1c13",
};

/* A variant's name as it can appear in a file name: "loop+ts/64" becomes "loop+ts-64". */
static const char *file_tag(enum variant_id v)
{
	static char tag[V_COUNT][40];

	snprintf(tag[v], sizeof(tag[v]), "%s", variant_name(v));
	for (char *p = tag[v]; *p; p++)
		if (*p == '/')
			*p = '-';
	return tag[v];
}

struct dir {
	const char *path;
	char err[4096 + 256];
};

static FILE *open_in(struct dir *d, const char *name, const char *mode)
{
	char p[4096];

	snprintf(p, sizeof(p), "%s/%s", d->path, name);
	FILE *f = fopen(p, mode);

	if (!f && !d->err[0])
		snprintf(d->err, sizeof(d->err), "%s: %s", p, strerror(errno));
	return f;
}

static int close_checked(struct dir *d, FILE *f, const char *name)
{
	if (!f)
		return -EIO;
	bool bad = ferror(f);

	if (fclose(f) || bad) {
		if (!d->err[0])
			snprintf(d->err, sizeof(d->err), "writing %s/%s failed", d->path, name);
		return -EIO;
	}
	return 0;
}

/* Which throughput results to chart: the most detailed mode that ran. */
static unsigned chart_mode(const struct session *s)
{
	static const unsigned pref[] = { MODE_SWEEP, MODE_COMPARE, MODE_CAPACITY };

	for (size_t k = 0; k < ARRAY_SIZE(pref); k++)
		for (size_t i = 0; i < s->nres; i++)
			if (s->res[i].mode == pref[k])
				return pref[k];
	return 0;
}

static bool seen_size(const uint64_t *sizes, unsigned n, uint64_t x)
{
	for (unsigned i = 0; i < n; i++)
		if (sizes[i] == x)
			return true;
	return false;
}

/* ---- data files and the gnuplot script --------------------------------------------------- */

/* Backend k of n drawn at x times this on a log axis: min-max bars of backends measured at the
 * same fan-out stand side by side instead of on top of each other (0.08 of a doubling each). */
static double x_offset(unsigned k, unsigned n)
{
	return pow(2, ((double)k - (n - 1) / 2.0) * 0.08);
}

/* One chart of each kind per message size, one line per backend: the median over rounds, with
 * thin bars from min to max. */
static int write_throughput(struct session *s, struct dir *d, FILE *gp)
{
	unsigned mode = chart_mode(s);
	uint64_t sizes[MAX_LIST];
	unsigned nsz = 0;
	int err = 0;

	if (!mode)
		return 0;
	for (size_t i = 0; i < s->nres; i++)
		if (s->res[i].mode == mode && !seen_size(sizes, nsz, s->res[i].size) && nsz < MAX_LIST)
			sizes[nsz++] = s->res[i].size;
	const char *shape = s->o->connected ? "connected sockets" : "one unconnected socket";

	fprintf(gp, "\n# Throughput and CPU per destination vs fan-out (%s mode)\n", mode_name(mode));
	fprintf(gp, "set logscale x 2\nunset logscale y\nset yrange [0:*]\nset format y '%%g'\n");
	fprintf(gp, "set format x '%%g'\nset xlabel 'fan-out N (destinations per call, log scale)'\n");
	for (unsigned j = 0; j < nsz; j++) {
		char plot_tp[8192] = "", plot_cpu[8192] = "";
		size_t ltp = 0, lcpu = 0;

		for (unsigned k = 0; k < s->o->nvariants; k++) {
			enum variant_id v = s->o->order[k];
			const double off = x_offset(k, s->o->nvariants);
			char name[128];
			FILE *f;
			unsigned rows = 0;

			snprintf(name, sizeof(name), "data/tp-%s-%s-s%" PRIu64 ".dat", mode_name(mode),
				 file_tag(v), sizes[j]);
			if (!(f = open_in(d, name, "w")))
				return -EIO;
			fprintf(f, "# fan-out  dests/s median min max  CPU ns/dest (process) median min "
				   "max  caller median\n");
			for (size_t i = 0; i < s->nres; i++) {
				const struct result *r = &s->res[i];

				if (r->mode != mode || r->v != v || r->size != sizes[j])
					continue;
				fprintf(f, "%" PRIu64 " %.1f %.1f %.1f %.1f %.1f %.1f %.1f\n", r->n,
					r->dests_s.median, r->dests_s.min, r->dests_s.max,
					r->cpu_proc.median, r->cpu_proc.min, r->cpu_proc.max,
					r->cpu_caller.median);
				rows++;
			}
			if ((err = close_checked(d, f, name)))
				return err;
			if (!rows)
				continue;
			ltp += (size_t)snprintf(plot_tp + ltp, sizeof(plot_tp) - ltp,
						"%s'%s' using ($1*%.4f):($2/1e3) with lines lw 2 lc rgb '%s' "
						"title '%s', '' using ($1*%.4f):($2/1e3):($3/1e3):($4/1e3) with "
						"yerrorbars lw 1 pt 7 ps 0.5 lc rgb '%s' notitle",
						ltp ? ", \\\n     " : "", name, off, colour[v],
						variant_name(v), off, colour[v]);
			lcpu += (size_t)snprintf(plot_cpu + lcpu, sizeof(plot_cpu) - lcpu,
						 "%s'%s' using ($1*%.4f):5 with lines lw 2 lc rgb '%s' title "
						 "'%s', '' using ($1*%.4f):5:6:7 with yerrorbars lw 1 pt 7 ps "
						 "0.5 lc rgb '%s' notitle",
						 lcpu ? ", \\\n     " : "", name, off, colour[v],
						 variant_name(v), off, colour[v]);
			if (ltp >= sizeof(plot_tp) || lcpu >= sizeof(plot_cpu))
				return -E2BIG;
		}
		if (!ltp)
			continue;
		fprintf(gp, "set output 'throughput-s%" PRIu64 ".svg'\n", sizes[j]);
		fprintf(gp, "set title \"Destinations per second vs fan-out, %" PRIu64 " B (%s sink, %s): "
			    "median of interleaved rounds, bars min-max (offset sideways)\\nthe "
			    "zig-zag is the machine, not the backends: plan with CPU per destination "
			    "and the capacity answer\"\n",
			sizes[j], sink_name(s->o->sink), shape);
		fprintf(gp, "set ylabel 'thousand destinations per second'\nplot %s\n", plot_tp);
		fprintf(gp, "set output 'cpu-per-dest-s%" PRIu64 ".svg'\n", sizes[j]);
		fprintf(gp, "set title \"CPU per destination vs fan-out, %" PRIu64 " B (process CPU time, "
			    "%s sink, %s): lower is cheaper\\nmedian of interleaved rounds, bars "
			    "min-max (offset sideways so that they do not overlap)\"\n",
			sizes[j], sink_name(s->o->sink), shape);
		fprintf(gp, "set ylabel 'CPU ns per destination'\nplot %s\n", plot_cpu);
	}
	return 0;
}

/* The capacity answer's chart: each backend's process CPU per fan-out against N (the sweep's
 * medians, bars min-max, offset sideways), its fit a + b*N, and the CPU budget per message at
 * the rate: where a fit crosses the budget is that backend's N by CPU. The recommended backend's
 * N per core is marked. */
static int write_capacity(struct session *s, struct dir *d, FILE *gp)
{
	const struct capacity *c = &s->cap;
	char plot[8192] = "";
	size_t lp = 0;
	uint64_t nmax = 1;
	int err;

	if (!c->done)
		return 0;
	const double budget_ns = c->budget * 1e9 / (double)c->rate;

	for (unsigned i = 0; i < c->nrows; i++) {
		const struct cap_row *row = &c->row[i];
		const double off = x_offset(i, c->nrows);
		char name[160];
		unsigned rows = 0;
		FILE *f;

		snprintf(name, sizeof(name), "data/capacity-%s-s%" PRIu64 ".dat", file_tag(row->v),
			 c->size);
		if (!(f = open_in(d, name, "w")))
			return -EIO;
		fprintf(f, "# fan-out  process CPU ns per fan-out: median min max (over rounds); fit "
			   "a = %.1f, b = %.3f\n",
			row->a, row->b);
		for (size_t k = 0; k < s->nres; k++) {
			const struct result *r = &s->res[k];

			if (r->mode != MODE_CAPACITY || r->v != row->v || r->size != c->size)
				continue;
			fprintf(f, "%" PRIu64 " %.1f %.1f %.1f\n", r->n, r->cpu_proc.median * (double)r->n,
				r->cpu_proc.min * (double)r->n, r->cpu_proc.max * (double)r->n);
			if (r->n > nmax)
				nmax = r->n;
			rows++;
		}
		if ((err = close_checked(d, f, name)))
			return err;
		if (!rows)
			continue;
		if (row->n_max > nmax)
			nmax = row->n_max;
		lp += (size_t)snprintf(plot + lp, sizeof(plot) - lp,
				       "%s'%s' using ($1*%.4f):2:3:4 with yerrorbars pt 7 ps 0.6 lw 1 "
				       "lc rgb '%s' notitle, %.3f + %.5f*x with lines lw 2 lc rgb '%s' "
				       "title '%s: %.0f + %.1f N ns%s'",
				       lp ? ", \\\n     " : "", name, off, colour[row->v],
				       row->a > 0 ? row->a : 0, row->b, colour[row->v],
				       variant_name(row->v), row->a > 0 ? row->a : 0, row->b,
				       (int)i == c->best ? " (recommended)" : "");
		if (lp >= sizeof(plot))
			return -E2BIG;
	}
	if (!lp)
		return 0;
	lp += (size_t)snprintf(plot + lp, sizeof(plot) - lp,
			       ", \\\n     %.3f with lines lw 2 dt 2 lc rgb '#000000' title 'CPU budget "
			       "per message: %.0f ns (%.2f of a core at %" PRIu64 "/s)'",
			       budget_ns, budget_ns, c->budget, c->rate);
	if (lp >= sizeof(plot))
		return -E2BIG;
	fprintf(gp, "\n# Capacity: CPU per fan-out vs N, the fits and the budget\n");
	fprintf(gp, "set output 'capacity-s%" PRIu64 ".svg'\n", c->size);
	fprintf(gp, "set title \"Capacity at %" PRIu64 " msg/s of %" PRIu64 " B (%s sink): process "
		    "CPU per message vs fan-out\\npoints: median [min-max] over rounds; lines: the "
		    "fit a + b N; a line crossing the budget gives N by CPU\"\n",
		c->rate, c->size, sink_name(s->o->sink));
	fprintf(gp, "set key inside left top box opaque\n");
	fprintf(gp, "set logscale x 2\nset logscale y 10\nset xrange [0.7:%.0f]\nset yrange [*:*]\n"
		    "set format x '%%g'\nset format y '%%g'\nset samples 400\n",
		(double)nmax * 1.6);
	fprintf(gp, "set xlabel 'fan-out N (destinations per message, log scale)'\n"
		    "set ylabel 'process CPU ns per message (log scale)'\n");
	if (c->best >= 0) {
		const struct cap_row *b = &c->row[c->best];

		fprintf(gp, "set arrow 1 from %" PRIu64 ", graph 0 to %" PRIu64 ", graph 1 nohead dt 3 "
			    "lw 2 lc rgb '%s'\n",
			b->n_max, b->n_max, colour[b->v]);
		fprintf(gp, "set label 1 'N per core %" PRIu64 " (%s)' at %" PRIu64 ", graph 0.06 "
			    "right offset -0.5,0 tc rgb '%s'\n",
			b->n_max, variant_name(b->v), b->n_max, colour[b->v]);
	}
	fprintf(gp, "plot %s\nunset arrow 1\nunset label 1\nset xrange [*:*]\nset yrange [*:*]\n"
		    "unset logscale y\nset key outside right top nobox noopaque\n",
		plot);
	return 0;
}

struct spec_out {
	FILE *f;
	uint64_t total;
	bool thin; /* a point with fewer than 10 samples beyond was written */
};

/* Column 4: 2 where at least 10 samples lie beyond the percentile (drawn solid), 0 where fewer
 * do (drawn dotted: an anecdote, not a statistic), 1 at the first such point (both lines, so
 * that they join). */
static void spec_line(double percent, uint64_t value, uint64_t count, void *arg)
{
	struct spec_out *o = arg;
	int solid = 2;

	(void)count;
	if (percent >= 100)
		return;
	if ((double)o->total * (1 - percent / 100) < 10) {
		solid = o->thin ? 0 : 1;
		o->thin = true;
	}
	fprintf(o->f, "%.9f %.6f %.3f %d\n", percent, 1 / (1 - percent / 100), value / 1000.0, solid);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* One spectrum chart and one latency-vs-rate chart per (fan-out, size). */
static int write_latency(struct session *s, struct dir *d, FILE *gp)
{
	int err;

	for (size_t i = 0; i < s->nlat; i++) {
		struct lat_result *l = &s->lat[i];
		FILE *f;

		snprintf(l->hgrm, sizeof(l->hgrm), "latency-%s-n%" PRIu64 "-s%" PRIu64 "-r%" PRIu64
						   ".hgrm",
			 file_tag(l->v), l->n, l->size, l->rate);
		if (!(f = open_in(d, l->hgrm, "w")))
			return -EIO;
		hist_write_hgrm(&l->lat, f, 1000, 5);
		if ((err = close_checked(d, f, l->hgrm)))
			return err;
	}
	for (size_t i = 0; i < s->nlat; i++) {
		const struct lat_result *first = &s->lat[i];
		bool done = false;

		for (size_t j = 0; j < i; j++)
			if (s->lat[j].n == first->n && s->lat[j].size == first->size)
				done = true;
		if (done)
			continue;
		/* The rates of this configuration; the spectrum is drawn at the middle one. */
		uint64_t rates[MAX_LIST];
		unsigned nr = 0;

		for (size_t j = i; j < s->nlat; j++)
			if (s->lat[j].n == first->n && s->lat[j].size == first->size &&
			    !seen_size(rates, nr, s->lat[j].rate) && nr < MAX_LIST)
				rates[nr++] = s->lat[j].rate;
		qsort(rates, nr, sizeof(*rates), cmp_u64);
		uint64_t mid = rates[(nr - 1) / 2];
		char spec[8192] = "", vs[8192] = "";
		size_t ls = 0, lv = 0;

		for (unsigned k = 0; k < s->o->nvariants; k++) {
			enum variant_id v = s->o->order[k];
			char name[160], rname[160];
			FILE *rf;

			snprintf(rname, sizeof(rname), "data/latrate-%s-n%" PRIu64 "-s%" PRIu64 ".dat",
				 file_tag(v), first->n, first->size);
			if (!(rf = open_in(d, rname, "w")))
				return -EIO;
			fprintf(rf, "# offered/s achieved/s p50_us p90_us p99_us p99.9_us max_us\n");
			unsigned rows = 0;

			for (unsigned q = 0; q < nr; q++)
				for (size_t j = i; j < s->nlat; j++) {
					const struct lat_result *l = &s->lat[j];

					if (l->v != v || l->n != first->n || l->size != first->size ||
					    l->rate != rates[q])
						continue;
					fprintf(rf, "%" PRIu64 " %.0f %.3f %.3f %.3f %.3f %.3f\n", l->rate,
						l->achieved, hist_percentile(&l->lat, 50) / 1000.0,
						hist_percentile(&l->lat, 90) / 1000.0,
						hist_percentile(&l->lat, 99) / 1000.0,
						hist_percentile(&l->lat, 99.9) / 1000.0,
						l->lat.max / 1000.0);
					rows++;
					if (l->rate != mid)
						continue;
					FILE *sf;
					struct spec_out o;

					snprintf(name, sizeof(name), "data/spectrum-%s-n%" PRIu64 "-s%" PRIu64
								     "-r%" PRIu64 ".dat",
						 file_tag(v), l->n, l->size, l->rate);
					if (!(sf = open_in(d, name, "w"))) {
						fclose(rf);
						return -EIO;
					}
					fprintf(sf, "# percentile 1/(1-p) latency_us solid(2: >= 10 "
						    "samples beyond, 0: fewer, 1: the first of those)\n");
					o.f = sf;
					o.total = l->lat.total;
					o.thin = false;
					hist_walk_levels(&l->lat, 5, spec_line, &o);
					if ((err = close_checked(d, sf, name))) {
						fclose(rf);
						return err;
					}
					ls += (size_t)snprintf(spec + ls, sizeof(spec) - ls,
							       "%s'%s' using 2:($4 >= 1 ? $3 : NaN) with "
							       "lines lw 2 lc rgb '%s' title '%s (%" PRIu64
							       " samples)', '' using 2:($4 <= 1 ? $3 : NaN) "
							       "with lines lw 2 dt 3 lc rgb '%s' notitle",
							       ls ? ", \\\n     " : "", name, colour[v],
							       variant_name(v), l->lat.total, colour[v]);
				}
			if ((err = close_checked(d, rf, rname)))
				return err;
			if (rows)
				lv += (size_t)snprintf(vs + lv, sizeof(vs) - lv,
						       "%s'%s' using 1:5 with linespoints lw 2 pt 7 "
						       "lc rgb '%s' title '%s p99', '%s' using 1:3 with "
						       "linespoints lw 1 dt 2 pt 6 lc rgb '%s' title '%s p50'",
						       lv ? ", \\\n     " : "", rname, colour[v],
						       variant_name(v), rname, colour[v], variant_name(v));
			if (ls >= sizeof(spec) || lv >= sizeof(vs))
				return -E2BIG;
		}
		fprintf(gp, "\n# Latency, fan-out %" PRIu64 ", %" PRIu64 " B\n", first->n, first->size);
		if (ls) {
			fprintf(gp, "set output 'latency-spectrum-n%" PRIu64 "-s%" PRIu64 ".svg'\n",
				first->n, first->size);
			fprintf(gp, "set title \"Latency by percentile, fan-out %" PRIu64 ", %" PRIu64
				    " B, %" PRIu64 " fan-outs/s offered (from each call's scheduled "
				    "start)\\ndotted where fewer than 10 samples lie beyond: a few "
				    "calls, not a percentile\"\n",
				first->n, first->size, mid);
			fprintf(gp, "set logscale x 10\nset logscale y 10\nset yrange [*:*]\n"
				    "set format y '%%g'\n");
			/* Tic labels are format strings to gnuplot: a percent sign is written %%. */
			fprintf(gp, "set xtics ('50%%%%' 2, '90%%%%' 10, '99%%%%' 100, '99.9%%%%' 1000, "
				    "'99.99%%%%' 10000, '99.999%%%%' 100000)\n");
			fprintf(gp, "set xlabel 'percentile'\nset ylabel 'latency, microseconds (log "
				    "scale)'\n");
			fprintf(gp, "plot %s\nset xtics autofreq\n", spec);
		}
		if (lv) {
			fprintf(gp, "set output 'latency-vs-rate-n%" PRIu64 "-s%" PRIu64 ".svg'\n",
				first->n, first->size);
			fprintf(gp, "set title 'Latency vs offered rate, fan-out %" PRIu64 ", %" PRIu64
				    " B: p99 solid, p50 dashed'\n",
				first->n, first->size);
			fprintf(gp, "unset logscale x\nset logscale y 10\nset xrange [0:*]\n"
				    "set format x '%%g'\nset format y '%%g'\n");
			fprintf(gp, "set xlabel 'offered rate, fan-outs per second'\n"
				    "set ylabel 'latency, microseconds (log scale)'\n");
			fprintf(gp, "plot %s\nset xrange [*:*]\n", vs);
		}
	}
	return 0;
}

/* The "+ts" variants' first-to-last skew, one chart per configuration that has any: the
 * cumulative distribution from the kernel's transmit stamps, one step line per backend, so
 * backends with different sample counts still compare. */
static int write_skew(struct session *s, struct dir *d, FILE *gp)
{
	int err;

	for (size_t i = 0; i < s->nres; i++) {
		const struct result *first = &s->res[i];
		char plot[4096] = "";
		size_t lp = 0;
		bool seen = false;

		if (!first->ts)
			continue;
		/* Once per configuration: at its first "+ts" result. */
		for (size_t k = 0; k < i && !seen; k++)
			seen = s->res[k].ts && s->res[k].mode == first->mode &&
			       s->res[k].n == first->n && s->res[k].size == first->size;
		if (seen)
			continue;
		for (size_t k = i; k < s->nres; k++) {
			const struct result *r = &s->res[k];
			const struct ms_hist *h;
			char name[160];
			uint64_t cum = 0;
			FILE *f;

			if (!r->ts || r->mode != first->mode || r->n != first->n ||
			    r->size != first->size)
				continue;
			h = &r->ts->h[TS_FIRST_LAST];
			snprintf(name, sizeof(name), "data/skew-%s-%s-n%" PRIu64 "-s%" PRIu64 ".dat",
				 mode_name(r->mode), file_tag(r->v), r->n, r->size);
			if (!(f = open_in(d, name, "w")))
				return -EIO;
			fprintf(f, "# first-to-last skew from kernel TX timestamps, %s, %" PRIu64
				   " samples\n# from_us below_us count cumulative_fraction\n",
				variant_name(r->v), h->count);
			for (unsigned b = 0; b < MS_HIST_BUCKETS && h->count; b++) {
				uint64_t lo, hi;

				if (!h->bucket[b] || ms_hist_bucket_range(b, &lo, &hi))
					continue;
				cum += h->bucket[b];
				fprintf(f, "%.3f %.3f %" PRIu64 " %.6f\n", lo / 1000.0, (hi + 1) / 1000.0,
					h->bucket[b], (double)cum / (double)h->count);
			}
			if ((err = close_checked(d, f, name)))
				return err;
			if (!h->count)
				continue;
			lp += (size_t)snprintf(plot + lp, sizeof(plot) - lp,
					       "%s'%s' using 2:4 with steps lw 2 lc rgb '%s' title "
					       "'%s (%" PRIu64 " samples)'",
					       lp ? ", \\\n     " : "", name, colour[r->v],
					       variant_name(r->v), h->count);
			if (lp >= sizeof(plot))
				return -E2BIG;
		}
		if (!lp)
			continue;
		fprintf(gp, "\n# Skew from transmit timestamps, %s fan-out %" PRIu64 ", %" PRIu64 " B\n",
			mode_name(first->mode), first->n, first->size);
		fprintf(gp, "set output 'skew-%s-n%" PRIu64 "-s%" PRIu64 ".svg'\n",
			mode_name(first->mode), first->n, first->size);
		fprintf(gp, "set title 'Skew, first to last destination (kernel TX timestamps), "
			    "fan-out %" PRIu64 ", %" PRIu64 " B, %s'\n",
			first->n, first->size, sink_name(s->o->sink));
		/* A log axis, base 2 for a tic per doubling: the tail (preemptions) reaches several
		 * times the body. */
		fprintf(gp, "set logscale x 2\nunset logscale y\nset xrange [*:*]\nset autoscale xfix\n"
			    "set yrange [0:1]\nset format x '%%g'\nset format y '%%g'\n");
		fprintf(gp, "set xlabel 'skew, microseconds (log scale)'\nset ylabel 'fraction of "
			    "sampled fan-outs with at most this skew'\n");
		fprintf(gp, "plot %s\nset autoscale x\nset yrange [*:*]\n", plot);
	}
	return 0;
}

/* ---- index.html --------------------------------------------------------------------------- */

/* n bytes of s as HTML text: escaped, control bytes but newline and tab left out. */
static void html_strn(FILE *f, const char *s, size_t n)
{
	for (size_t i = 0; i < n && s[i]; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '<')
			fputs("&lt;", f);
		else if (c == '>')
			fputs("&gt;", f);
		else if (c == '&')
			fputs("&amp;", f);
		else if (c == '"')
			fputs("&quot;", f);
		else if (c >= 0x20 || c == '\n' || c == '\t')
			fputc(c, f);
	}
}

static size_t line_len(const char *p)
{
	const char *e = strchr(p, '\n');

	return e ? (size_t)(e - p) : strlen(p);
}

/* A warning line of the table: "! ..." under a row or a configuration, or a skipped one. */
static bool warning_line(const char *p, size_t n)
{
	size_t i = 0;

	while (i < n && p[i] == ' ')
		i++;
	return (n - i >= 2 && p[i] == '!' && p[i + 1] == ' ') ||
	       (n - i >= 8 && !strncmp(p + i, "skipped ", 8));
}

/* Its continuation: indented deeper than the "!" and not a warning itself. */
static bool continuation(const char *p, size_t n)
{
	return n > 10 && !strncmp(p, "          ", 10) && !warning_line(p, n);
}

/* Every warning the terminal showed, word for word, each under the line it follows (the row or
 * heading it is about). Returns how many; writes them only when f is not NULL. */
static unsigned html_warnings(FILE *f, const char *t)
{
	const char *ctx = NULL;
	size_t ctx_n = 0;
	unsigned count = 0;
	bool open = false;

	for (const char *p = t; p && *p;) {
		size_t n = line_len(p);

		if (warning_line(p, n)) {
			count++;
			if (f) {
				if (open)
					fputs("</pre></li>\n", f);
				fputs("<li>", f);
				if (ctx) {
					fputs("<code>", f);
					html_strn(f, ctx, ctx_n);
					fputs("</code>\n", f);
				}
				fputs("<pre class=\"warn\">", f);
				html_strn(f, p, n);
				open = true;
			}
		} else if (open && continuation(p, n)) {
			fputc('\n', f);
			html_strn(f, p, n);
		} else {
			if (open) {
				fputs("</pre></li>\n", f);
				open = false;
			}
			if (n && !continuation(p, n)) {
				ctx = p;
				ctx_n = n;
			}
		}
		p += n;
		if (*p == '\n')
			p++;
	}
	if (open)
		fputs("</pre></li>\n", f);
	return count;
}

static void html_capacity(FILE *f, const struct session *s, struct dir *d)
{
	const struct capacity *c = &s->cap;
	char chart[96], path[4096 + 96];

	fputs("<h2>Capacity</h2>\n<p class=\"answer\"><b>", f);
	html_str(f, c->sentence);
	fputs("</b></p>\n", f);
	if (c->multicast[0]) {
		fputs("<p class=\"answer\"><b>", f);
		html_str(f, c->multicast);
		fputs(".</b></p>\n", f);
	}
	fprintf(f, "<p>%" PRIu64 " B at %" PRIu64 " msg/s, CPU budget %.2f of a core, ", c->size,
		c->rate, c->budget);
	if (c->bound_us > 0)
		fprintf(f, "p99 bound %.0f us.</p>\n", c->bound_us);
	else
		fputs("no latency bound (--p99-bound).</p>\n", f);
	fputs("<table class=\"capacity\">\n<tr><th>backend</th><th>a ns/call</th><th>b ns/dest</th>"
	      "<th>fit dev</th><th>noise</th><th>N by CPU</th><th>N by p99</th><th>N per core</th>"
	      "<th>p99 at N us</th><th>preempt</th><th>choice</th><th>note</th></tr>\n",
	      f);
	for (unsigned i = 0; i < c->nrows; i++) {
		const struct cap_row *r = &c->row[i];

		fprintf(f, "<tr%s><td>%s</td><td>%.0f</td><td>%.0f</td><td>%.1f%%</td><td>%.1f%%</td>"
			   "<td>%" PRIu64 "</td>",
			(int)i == c->best ? " class=\"best\"" : "", variant_name(r->v), r->a, r->b,
			r->dev * 100, r->spread * 100, r->n_cpu);
		if (r->n_lat == UINT64_MAX)
			fputs("<td>-</td>", f);
		else
			fprintf(f, "<td>%" PRIu64 "</td>", r->n_lat);
		fprintf(f, "<td>%" PRIu64 "</td>", r->n_max);
		if (r->verified || r->p99_us > 0)
			fprintf(f, "<td>%.1f%s</td>", r->p99_us, r->verified ? "" : "?");
		else
			fputs("<td>-</td>", f);
		fprintf(f, "<td>%" PRIu64 "</td><td>%s</td><td class=\"l\">", r->preempted,
			(int)i == c->best ? "recommended" : r->tied ? "tied" : "");
		html_str(f, r->note);
		fputs("</td></tr>\n", f);
	}
	fputs("</table>\n<p>a, b: process CPU per fan-out = a + b &times; N, fitted over the sweep; "
	      "noise: the larger of the backend's CPU per destination min-max over rounds / median "
	      "(the median over the sweep) and its fit dev; N by CPU = (budget &times; 1e9 / "
	      "rate &minus; a) / b; N by p99 from "
	      "the same fit of wall time; N per core measured at the rate and stepped down until "
	      "p99 meets the bound (? = the last step was not measured); preempt: involuntary "
	      "context switches of the sending thread during that measurement; tied: within the "
	      "noise of the largest N.</p>\n",
	      f);
	snprintf(chart, sizeof(chart), "capacity-s%" PRIu64 ".svg", c->size);
	snprintf(path, sizeof(path), "%s/%s", d->path, chart);
	if (!access(path, R_OK))
		fprintf(f, "<img src=\"%s\" alt=\"%s\">\n", chart, chart);
}

static void html_results(FILE *f, const struct session *s)
{
	unsigned mode = 0;
	char a[16], b[16];

	for (size_t i = 0; i < s->nres; i++) {
		const struct result *r = &s->res[i];

		if (r->mode != mode) {
			if (mode)
				fputs("</table>\n", f);
			mode = r->mode;
			fprintf(f, "<h2>%s</h2>\n<table>\n<tr><th>fan-out</th><th>size B</th>"
				   "<th>backend</th><th>fan-outs/s</th><th>dests/s</th><th>CPU ns/dest "
				   "process<br>median [min-max]</th><th>caller</th><th>vs raw-sendto<br>"
				   "CPU/dest</th><th>syscalls /fan-out</th><th>drops</th></tr>\n",
				mode_name(mode));
		}
		fprintf(f, "<tr><td>%" PRIu64 "</td><td>%" PRIu64 "</td><td>%s</td><td>%s</td>"
			   "<td>%s</td><td>%.0f [%.0f-%.0f]</td><td>%.0f</td>",
			r->n, r->size, variant_name(r->v), fmt_si(a, sizeof(a), r->fanouts_s.median),
			fmt_si(b, sizeof(b), r->dests_s.median), r->cpu_proc.median, r->cpu_proc.min,
			r->cpu_proc.max, r->cpu_caller.median);
		if (r->have_ratio)
			fprintf(f, "<td>%.2f [%.2f-%.2f]</td>", r->r_cpu_proc.median, r->r_cpu_proc.min,
				r->r_cpu_proc.max);
		else
			fputs("<td>-</td>", f);
		fprintf(f, "<td>%.2f</td><td>%" PRIu64 "</td></tr>\n", r->syscalls.median,
			r->drops);
	}
	if (mode)
		fputs("</table>\n", f);
	if (s->nlat) {
		fputs("<h2>latency</h2>\n<p>Microseconds from each call's scheduled start to its "
		      "return, at a fixed offered rate. <b>*</b> marks a percentile with fewer than 10 "
		      "samples beyond it: a few calls, not a statistic. preempt: involuntary context "
		      "switches of the sending thread during the runs.</p>\n<table>\n"
		      "<tr><th>fan-out</th><th>size B</th><th>rate/s</th><th>backend</th>"
		      "<th>achieved/s</th><th>samples</th><th>p50</th><th>p90</th><th>p99</th>"
		      "<th>p99.9</th><th>p99.99</th><th>max</th><th>preempt</th><th>histogram</th>"
		      "</tr>\n",
		      f);
		for (size_t i = 0; i < s->nlat; i++) {
			const struct lat_result *l = &s->lat[i];
			static const double lv[] = { 50, 90, 99, 99.9, 99.99 };

			fprintf(f, "<tr><td>%" PRIu64 "</td><td>%" PRIu64 "</td><td>%" PRIu64
				   "%s</td><td>%s</td><td>%.0f</td><td>%" PRIu64 "</td>",
				l->n, l->size, l->rate, l->requested_rate ? " (capped)" : "",
				variant_name(l->v), l->achieved, l->lat.total);
			for (size_t k = 0; k < ARRAY_SIZE(lv); k++) {
				bool thin = (double)l->lat.total * (1 - lv[k] / 100) < 10;

				fprintf(f, "<td%s>%.1f%s</td>", thin ? " class=\"thin\"" : "",
					hist_percentile(&l->lat, lv[k]) / 1000.0, thin ? "*" : "");
			}
			fprintf(f, "<td>%.1f</td><td>%" PRIu64 "</td><td><a href=\"%s\">%s</a></td></tr>\n",
				l->lat.max / 1000.0, l->preempted, l->hgrm, l->hgrm);
		}
		fputs("</table>\n", f);
	}
}

static int chart_rank(const char *name)
{
	/* The capacity answer's chart is shown with the answer; the throughput zig-zag last (the
	 * machine's speed shows in it more than the backends' cost does). */
	static const char *const order[] = { "capacity-", "cpu-per-dest-", "latency-vs-rate-",
					     "latency-spectrum-", "skew-", "throughput-" };

	for (size_t i = 0; i < ARRAY_SIZE(order); i++)
		if (!strncmp(name, order[i], strlen(order[i])))
			return (int)i;
	return (int)ARRAY_SIZE(order);
}

static int cmp_chart(const void *a, const void *b)
{
	const char *x = *(const char *const *)a, *y = *(const char *const *)b;
	int d = chart_rank(x) - chart_rank(y);

	return d ? d : strverscmp(x, y);
}

/* Every SVG in the directory but the capacity chart (shown with the answer), by kind and then
 * by name (sizes and fan-outs in numeric order). */
static void show_charts(FILE *f, struct dir *d, bool with_capacity)
{
	DIR *dir = opendir(d->path);
	struct dirent *e;
	char *names[256];
	size_t n = 0;

	if (!dir)
		return;
	while ((e = readdir(dir)) && n < ARRAY_SIZE(names)) {
		size_t len = strlen(e->d_name);

		if (with_capacity && !strncmp(e->d_name, "capacity-", 9))
			continue;
		if (len > 4 && !strcmp(e->d_name + len - 4, ".svg") && (names[n] = strdup(e->d_name)))
			n++;
	}
	closedir(dir);
	qsort(names, n, sizeof(*names), cmp_chart);
	if (n)
		fputs("<h2>Charts</h2>\n<p>Every chart says its host, kernel and date at its foot. "
		      "Where backends were measured at the same fan-out, their points and min-max bars "
		      "are drawn slightly apart so that none hides another.</p>\n",
		      f);
	for (size_t i = 0; i < n; i++) {
		fprintf(f, "<img src=\"%s\" alt=\"%s\">\n", names[i], names[i]);
		free(names[i]);
	}
}

static const char html_head[] =
	"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>multisend-bench "
	"report</title>\n<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;"
	"padding:0 1em}pre{background:#f5f5f5;padding:1em;overflow-x:auto;white-space:pre-wrap}"
	"table{border-collapse:collapse;font-size:90%}td,th{border:1px solid #ccc;padding:"
	"2px 8px;text-align:right}td.l{text-align:left}tr.best{background:#e6f4e6;font-weight:"
	"bold}td.thin{color:#a00}img{max-width:100%;border:1px solid #ddd;margin:1em 0}"
	"p.answer{font-size:110%}p.cut{background:#fde0dc;border:1px solid #c00;padding:.5em 1em}"
	"ol.warn li{margin:.3em 0}ol.warn code{white-space:pre}ol.warn pre{margin:0;padding:.2em "
	".5em;background:#fff4e0}"
	"</style></head><body>\n<h1>multisend-bench report</h1>\n";

static int write_index(struct session *s, struct dir *d, bool charts)
{
	FILE *f = open_in(d, "index.html", "w");
	const char *t = s->transcript_buf;
	char *hdr = NULL;
	size_t hlen = 0;
	FILE *m;

	if (!f)
		return -EIO;
	fputs(html_head, f);
	if (s->cut_short[0]) {
		fputs("<p class=\"cut\"><b>This report is incomplete: ", f);
		html_str(f, s->cut_short);
		fputs(".</b> It holds what finished before that.</p>\n", f);
	}
	if (s->cap.done)
		html_capacity(f, s, d);
	unsigned nwarn = t ? html_warnings(NULL, t) : 0;

	fprintf(f, "<h2>Warnings (%u)</h2>\n", nwarn);
	if (nwarn) {
		fputs("<p>Every warning the terminal showed, word for word, under the line it "
		      "follows.</p>\n<ol class=\"warn\">\n",
		      f);
		html_warnings(f, t);
		fputs("</ol>\n", f);
	} else {
		fputs("<p>None.</p>\n", f);
	}
	m = open_memstream(&hdr, &hlen);
	if (m) {
		text_header(m, s);
		fclose(m);
		fputs("<h2>Environment</h2>\n<pre>", f);
		html_str(f, hdr);
		fputs("</pre>\n", f);
		free(hdr);
	}
	fputs("<p>Absolute numbers drift on a shared or virtual machine; ratios to raw-sendto, "
	      "taken round by round between interleaved runs, hold much better. Every figure is "
	      "a median over rounds with its min and max.</p>\n",
	      f);
	if (!charts)
		fputs("<p>Charts were not drawn, or not all of them: gnuplot is not installed "
		      "(Debian: apt-get install gnuplot-nox), or it failed (see gnuplot.log). "
		      "charts.gp and data/ hold what they would show.</p>\n",
		      f);
	show_charts(f, d, s->cap.done);
	html_results(f, s);
	if (t && *t) {
		fputs("<h2>Terminal output</h2>\n<p>The table as the terminal showed it: every row, "
		      "fit line, note and table.</p>\n<pre class=\"transcript\">",
		      f);
		html_strn(f, t, s->transcript_len);
		fputs("</pre>\n", f);
	}
	fputs("<h2>Files</h2>\n<ul><li><a href=\"summary.csv\">summary.csv</a>: one row per "
	      "result</li><li><a href=\"runs.jsonl\">runs.jsonl</a>: JSON lines, every run's raw "
	      "figures</li><li>*.hgrm: latency histograms in HdrHistogram's percentile format "
	      "(microseconds)</li><li><a href=\"charts.gp\">charts.gp</a> and data/: the charts' "
	      "gnuplot script and data (data/skew-*.dat: the +ts backends' first-to-last skew "
	      "histograms, from the kernel's transmit timestamps)</li></ul>\n</body></html>\n",
	      f);
	return close_checked(d, f, "index.html");
}

static int make_dirs(const char *path)
{
	char p[4096];

	snprintf(p, sizeof(p), "%s/data", path);
	if ((mkdir(path, 0755) && errno != EEXIST) || (mkdir(p, 0755) && errno != EEXIST)) {
		int e = errno;

		fprintf(stderr, "multisend-bench: --report %s: %s\n", path, strerror(e));
		return -e;
	}
	return 0;
}

int report_dir_prepare(const struct session *s)
{
	struct dir d = { .path = s->o->report };
	FILE *f;
	int err = make_dirs(d.path);

	if (err)
		return err;
	/* A page that says the run is under way: proves the directory takes files now, and
	 * whoever opens it early is not shown an old run's report. */
	if (!(f = open_in(&d, "index.html", "w"))) {
		fprintf(stderr, "multisend-bench: --report: %s\n", d.err);
		return -EIO;
	}
	fputs(html_head, f);
	fprintf(f, "<p>multisend-bench is running (started %s); this page is replaced when the run "
		   "ends.</p>\n</body></html>\n",
		s->env.date);
	if (close_checked(&d, f, "index.html")) {
		fprintf(stderr, "multisend-bench: --report: %s\n", d.err);
		return -EIO;
	}
	return 0;
}

/* The foot of every chart: where and when it was measured. */
static void chart_footer(FILE *gp, const struct session *s)
{
	char foot[1024];
	size_t n = 0;

	n = (size_t)snprintf(foot, sizeof(foot), "host %s, %s, %s; %s sink; started %s; "
						 "multisend-bench %s, libmultisend %s",
			     s->env.host[0] ? s->env.host : "?", s->env.kernel, s->env.cpu_model,
			     sink_name(s->o->sink), s->env.date, BENCH_VERSION, s->env.lib_version);
	if (n >= sizeof(foot))
		foot[sizeof(foot) - 1] = 0;
	fputs("set bmargin 5\nset label 100 '", gp);
	for (const char *p = foot; *p; p++) {
		if (*p == '\'')
			fputc('\'', gp); /* '' is a quote inside gnuplot's single quotes */
		if ((unsigned char)*p >= 0x20)
			fputc(*p, gp);
	}
	fputs("' at screen 0.01, screen 0.02 left font ',9' textcolor rgb '#555555'\n", gp);
}

int report_dir_write(struct session *s)
{
	struct dir d = { .path = s->o->report };
	FILE *f, *gp;
	int err;

	if ((err = make_dirs(d.path)))
		return err;
	/* The table's copy, complete up to now. */
	if (s->transcript)
		fflush(s->transcript);
	/* summary.csv and runs.jsonl: the same writers as --csv and --json. */
	if (!(f = open_in(&d, "summary.csv", "w")))
		goto fail;
	csv_header(f);
	for (size_t i = 0; i < s->nres; i++)
		csv_result(f, s, &s->res[i]);
	for (size_t i = 0; i < s->nlat; i++)
		csv_latency(f, s, &s->lat[i]);
	if (close_checked(&d, f, "summary.csv"))
		goto fail;

	if (!(gp = open_in(&d, "charts.gp", "w")))
		goto fail;
	fprintf(gp, "# Written by multisend-bench; render with: cd %s && gnuplot charts.gp\n", d.path);
	fprintf(gp, "set terminal svg size 980,560 dynamic noenhanced font 'Helvetica,12' "
		    "background rgb 'white'\nset grid\nset key outside right top\n"
		    "set bars small\n");
	chart_footer(gp, s);
	err = write_capacity(s, &d, gp);
	if (!err)
		err = write_throughput(s, &d, gp);
	if (!err)
		err = write_latency(s, &d, gp); /* also writes the .hgrm files */
	if (!err)
		err = write_skew(s, &d, gp);
	if (close_checked(&d, gp, "charts.gp") || err)
		goto fail;

	if (!(f = open_in(&d, "runs.jsonl", "w")))
		goto fail;
	json_env(f, s);
	for (size_t i = 0; i < s->nres; i++)
		json_result(f, s, &s->res[i]);
	for (size_t i = 0; i < s->nlat; i++)
		json_latency(f, s, &s->lat[i]);
	if (s->cap.done)
		json_capacity(f, s);
	if (close_checked(&d, f, "runs.jsonl"))
		goto fail;

	bool charts = false;

	if (have_program("gnuplot")) {
		char *argv[] = { "gnuplot", "charts.gp", NULL };
		char log[4096];

		snprintf(log, sizeof(log), "%s/gnuplot.log", d.path);
		int rc = run_command(argv, d.path, log);

		if (rc)
			fprintf(stderr, "multisend-bench: gnuplot failed (status %d), see %s\n", rc, log);
		else
			charts = true;
	}
	if (write_index(s, &d, charts))
		goto fail;
	return 0;
fail:
	fprintf(stderr, "multisend-bench: --report: %s\n", d.err[0] ? d.err : "write failed");
	return -EIO;
}
