/* SPDX-License-Identifier: MIT */
/*
 * multisend-bench: the threads around the measurement.
 *
 * All measuring happens on one "sending thread": it owns the library contexts (io_uring ties a
 * ring to the thread that sends on it), is the thread --cpu pins, and is the only thread that
 * enters the netns-drop namespace. The main thread keeps every signal to itself: it waits for
 * SIGINT/SIGTERM/SIGHUP with sigtimedwait, asks the sending thread to stop, draws the progress
 * line, and deletes the namespace on every way out.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench.h"
#include "kfanout.h"
#include "netns.h"
#include "sink.h"
#include "workload.h"

#define EXIT_USAGE 2

/* Set by the main thread (signals) or the sending thread (output failed); atomic accesses. */
static int stop_flag;

/* ---- the sending thread -------------------------------------------------------------------- */

struct worker {
	struct session *s;
	struct netns *ns;
	volatile int done;
	int err;
};

static const uint64_t cmp_fan[] = { 1, 16, 256, 1024 }, cmp_fan_q[] = { 1, 16, 256 };
static const uint64_t cmp_size[] = { 64, 512 }, cmp_size_q[] = { 64 };
static const uint64_t sw_fan[] = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024 };
static const uint64_t sw_fan_q[] = { 1, 4, 16, 64, 256 };
static const uint64_t sw_size[] = { 64, 256, 512, 1024, 1472 }, sw_size_q[] = { 64, 512 };
static const uint64_t lat_fan[] = { 16, 256 }, lat_fan_q[] = { 16 };
static const uint64_t lat_size[] = { 64 };
static const uint64_t tl_fan[] = { 256 }, tl_size[] = { 64 };

/* The user's list, else the mode's quick or full default. */
#define PICK(o, user, nuser, full_list, quick_list, outp, outn)                                 \
	do {                                                                                    \
		if (nuser) {                                                                    \
			outp = user;                                                            \
			outn = nuser;                                                           \
		} else if ((o)->quick) {                                                        \
			outp = quick_list;                                                      \
			outn = ARRAY_SIZE(quick_list);                                          \
		} else {                                                                        \
			outp = full_list;                                                       \
			outn = ARRAY_SIZE(full_list);                                           \
		}                                                                               \
	} while (0)

/* The progress line counts modes as equal shares: each has the same duration budget. */
static void next_mode(struct session *s)
{
	pthread_mutex_lock(&s->out_lock);
	if (s->work_total > 0)
		s->mode_index++;
	s->work_total = s->work_done = 0;
	s->mode_started_ns = now_ns();
	pthread_mutex_unlock(&s->out_lock);
}

static int run_modes(struct session *s)
{
	const struct opts *o = s->o;
	const uint64_t *f, *z;
	unsigned nf, nz;
	int err = 0;

	if (o->timeline > 0) {
		/* --timeline replaces the modes. */
		s->nmodes = 1;
		PICK(o, o->fanouts, o->nfanouts, tl_fan, tl_fan, f, nf);
		PICK(o, o->sizes, o->nsizes, tl_size, tl_size, z, nz);
		return run_timeline(s, f, nf, z, nz);
	}
	s->nmodes = (unsigned)__builtin_popcount(o->modes);

	if (o->modes & MODE_COMPARE) {
		PICK(o, o->fanouts, o->nfanouts, cmp_fan, cmp_fan_q, f, nf);
		PICK(o, o->sizes, o->nsizes, cmp_size, cmp_size_q, z, nz);
		err = run_throughput(s, MODE_COMPARE, f, nf, z, nz);
	}
	if (!err && (o->modes & MODE_SWEEP)) {
		next_mode(s);
		PICK(o, o->fanouts, o->nfanouts, sw_fan, sw_fan_q, f, nf);
		PICK(o, o->sizes, o->nsizes, sw_size, sw_size_q, z, nz);
		err = run_throughput(s, MODE_SWEEP, f, nf, z, nz);
	}
	if (!err && (o->modes & MODE_LATENCY)) {
		next_mode(s);
		PICK(o, o->fanouts, o->nfanouts, lat_fan, lat_fan_q, f, nf);
		PICK(o, o->sizes, o->nsizes, lat_size, lat_size, z, nz);
		err = run_latency(s, f, nf, z, nz);
	}
	if (!err && (o->modes & MODE_CAPACITY)) {
		next_mode(s);
		err = run_capacity(s);
	}
	return err;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct session *s = w->s;
	const struct opts *o = s->o;
	int err = 0;

	if (w->ns && (err = netns_enter(w->ns))) {
		fprintf(stderr, "multisend-bench: entering namespace %s: %s\n", w->ns->name,
			strerror(-err));
		goto out;
	}
	/* The contexts first, then the pin: a library thread (--workers, --offload) starts with
	 * the affinity of the thread that made its context, so made after the pin it would share
	 * the sending thread's one CPU unless --cpus places it. */
	if (variants_open(s) && !o->cg_child) {
		fprintf(stderr, "multisend-bench: no backend to measure:\n");
		for (unsigned i = 0; i < o->nvariants; i++)
			fprintf(stderr, "  %s: %s\n", s->var[o->order[i]].name,
				s->var[o->order[i]].detail);
		err = -ENOTSUP;
		goto out;
	}
	if (o->cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(o->cpu, &set);
		if ((err = -pthread_setaffinity_np(pthread_self(), sizeof(set), &set))) {
			fprintf(stderr, "multisend-bench: --cpu %d: %s\n", o->cpu, strerror(-err));
			goto out;
		}
	}
	if (o->cg_child) {
		/* Under valgrind for --callgrind: one backend, one configuration, nothing printed
		 * but the line the parent reads. */
		err = callgrind_child(s);
		goto out;
	}
	report_header(s);
	err = run_modes(s);
	if (err && err != -EINTR) {
		const char *why = err == -EXDEV ? "a sending socket was outside the namespace"
						: strerror(-err);
		fprintf(stderr, "multisend-bench: measurement failed: %s\n", why);
	}
out:
	variants_close(s);
	w->err = err;
	__atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* ---- the main thread ----------------------------------------------------------------------- */

static double planned_seconds(const struct opts *o)
{
	double per = o->duration > 0 ? o->duration : o->quick ? 3 : 60;
	int modes = __builtin_popcount(o->modes);

	if (o->timeline > 0)
		return o->timeline * (o->nfanouts ? o->nfanouts : 1) * (o->nsizes ? o->nsizes : 1);
	return per * modes;
}

/* How long the whole run should take: the modes' budgets, and AUTO's warm-up in each of their
 * configurations (which the budgets do not include). */
static double expected_seconds(const struct opts *o)
{
	double t = planned_seconds(o);
	bool want_auto = false;

	for (unsigned i = 0; i < o->nvariants; i++)
		want_auto |= variant_is_auto(o->order[i]);
	if (!want_auto || o->timeline > 0)
		return t;
#define NCONF(full_, quick_, user_) \
	((user_) ? (user_) : o->quick ? ARRAY_SIZE(quick_) : ARRAY_SIZE(full_))
	if (o->modes & MODE_COMPARE)
		t += o->auto_warmup * (double)NCONF(cmp_fan, cmp_fan_q, o->nfanouts) *
		     (double)NCONF(cmp_size, cmp_size_q, o->nsizes);
	if (o->modes & MODE_SWEEP)
		t += o->auto_warmup * (double)NCONF(sw_fan, sw_fan_q, o->nfanouts) *
		     (double)NCONF(sw_size, sw_size_q, o->nsizes);
	if (o->modes & MODE_CAPACITY)
		t += o->auto_warmup * 8;
#undef NCONF
	return t;
}

/* Time left: the current mode's planned work still to do at the time per unit it has taken so
 * far, plus the modes still to come at their budgets, scaled by how far the run so far has
 * been from its own budgets (a mode that overran says the machine is slower than planned).
 * The percentage is elapsed over elapsed + left: the same estimate, never a share of modes. */
static void draw_progress(struct session *s)
{
	pthread_mutex_lock(&s->out_lock);
	if (s->work_total > 0 && s->work_done > 0 && s->nmodes) {
		const uint64_t now = now_ns();
		double el = (double)(now - s->started_ns) / 1e9;
		double mode_el = (double)(now - s->mode_started_ns) / 1e9;
		double per_mode = planned_seconds(s->o) / s->nmodes;
		double left_mode = (s->work_total - s->work_done) * mode_el / s->work_done;

		if (left_mode < 0)
			left_mode = 0;
		double corr = (el + left_mode) / ((s->mode_index + 1) * per_mode);

		corr = corr < 0.25 ? 0.25 : corr > 50 ? 50 : corr;
		double left = left_mode + (s->nmodes - s->mode_index - 1) * per_mode * corr;
		double frac = el / (el + left);

		fprintf(stderr, "\r\033[K[%3.0f%%] %.60s", frac * 100, s->progress_label);
		if (left >= 1)
			fprintf(stderr, "  ~%.0f s left", left);
		s->progress_shown = true;
	}
	pthread_mutex_unlock(&s->out_lock);
}

/* The table goes to its terminal or file and into a memory stream for the --report page. */
struct tee {
	FILE *out, *copy;
};

static ssize_t tee_write(void *cookie, const char *buf, size_t n)
{
	struct tee *t = cookie;

	if (t->copy)
		fwrite(buf, 1, n, t->copy);
	/* A failure here is the table's: ferror on the tee, which out_end checks. */
	if (fwrite(buf, 1, n, t->out) != n || fflush(t->out))
		return -1;
	return (ssize_t)n;
}

/* Fan-outs the user asked for that no rig can be set up for: said before the run; when that is
 * every one of them, nothing would be measured and the run is refused. */
static int check_fanouts(const struct session *s)
{
	const struct opts *o = s->o;
	unsigned bad = 0;

	for (unsigned i = 0; i < o->nfanouts; i++) {
		uint64_t need = rig_fds_needed(s, o->fanouts[i]);

		if (need <= s->env.nofile)
			continue;
		fprintf(stderr, "multisend-bench: --fanout %llu needs about %llu file descriptors, "
				"RLIMIT_NOFILE allows %llu (raise the hard limit, e.g. ulimit -Hn)%s\n",
			(unsigned long long)o->fanouts[i], (unsigned long long)need,
			(unsigned long long)s->env.nofile,
			o->nfanouts > 1 ? ": it will be skipped" : "");
		bad++;
	}
	if (o->nfanouts && bad == o->nfanouts) {
		fprintf(stderr, "multisend-bench: no --fanout can be set up on this host: nothing "
				"to measure\n");
		return -EMFILE;
	}
	return 0;
}

static void raise_nofile(void)
{
	struct rlimit rl;

	/* A fan-out of 1024 needs over 1024 descriptors; the soft limit is often exactly 1024.
	 * The hard limit is ours to use. */
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl))
			fprintf(stderr, "multisend-bench: could not raise RLIMIT_NOFILE: %s\n",
				strerror(errno));
	}
}

static void free_session(struct session *s)
{
	for (size_t i = 0; i < s->nres; i++) {
		free(s->res[i].s);
		free(s->res[i].ts);
	}
	free(s->res);
	for (size_t i = 0; i < s->nlat; i++) {
		hist_free(&s->lat[i].lat);
		hist_free(&s->lat[i].svc);
		free(s->lat[i].ts);
	}
	free(s->lat);
	free(s->tl);
}

static void describe(struct session *s, const struct netns *ns)
{
	const struct opts *o = s->o;
	char order[512] = "";

	for (unsigned i = 0; i < o->nvariants; i++)
		snprintf(order + strlen(order), sizeof(order) - strlen(order), "%s%s", i ? " " : "",
			 variant_name(o->order[i]));
	if (ns)
		netns_describe(ns, s->sink_desc, sizeof(s->sink_desc));
	else
		sink_describe(o->sink, o->verify_payload, s->sink_desc, sizeof(s->sink_desc));
	snprintf(s->shape_desc, sizeof(s->shape_desc), "%s%s",
		 o->tcp ? "one connected TCP socket per destination (TCP_NODELAY; send without "
			  "address)"
		 : o->connected
			 ? "one connected UDP socket per destination (sendto without address)"
			 : "one unconnected UDP socket, one address per destination",
		 o->lib_connect || o->compare_conn
			 ? ";\n            MS_CFG_CONNECT groups: a connected socket of the "
			   "library's own per destination, sharing the\n            unconnected "
			   "socket's port (bound with SO_REUSEADDR)"
			 : "");
	if (o->timeline > 0)
		snprintf(s->method_desc, sizeof(s->method_desc),
			 "timeline: for %.3g s per configuration the backends take turns in slices of "
			 "about 150 ms, in the order %s rotated by one every turn, each keeping its "
			 "context and group throughout (no warm-up: every slice counts); figures "
			 "are totals over the whole run and over the slices that started in each half",
			 o->timeline, order);
	else
		snprintf(s->method_desc, sizeof(s->method_desc),
			 "warm-up, then rounds that run each backend once in the order %s (interleaved); "
			 "figures are medians over rounds [min-max]; ratios to raw-sendto are taken round "
			 "by round",
			 order);
}

int main(int argc, char **argv)
{
	struct opts o;
	struct session s;
	struct netns ns;
	struct worker w = { 0 };
	sigset_t sigs;
	pthread_t tid;
	int rc, status = 0, sig = 0;

	rc = parse_args(argc, argv, &o);
	if (rc)
		return rc > 0 ? 0 : EXIT_USAGE;
	variants_name(&o);

	memset(&s, 0, sizeof(s));
	memset(&ns, 0, sizeof(ns));
	s.o = &o;
	s.stop = &stop_flag;
	pthread_mutex_init(&s.out_lock, NULL);
	for (unsigned i = 0; i < o.nvariants; i++)
		s.var[o.order[i]].wanted = true;
	raise_nofile();
	env_collect(&s.env);
	/* Before any thread or signal mask: callgrind_main runs the bench again under valgrind,
	 * which keeps the descriptor limit it finds (so it is raised first, above). */
	if (o.callgrind) {
		pthread_mutex_destroy(&s.out_lock);
		return callgrind_main(&o, &s.env);
	}
	ksoftirqd_find(&s.ksoftirqd);
	s.table = stdout;
	if (o.json && !strcmp(o.json, "-")) {
		s.json = stdout;
		s.table = stderr; /* stdout carries nothing but JSON lines */
	} else if (o.json && !(s.json = fopen(o.json, "we"))) {
		fprintf(stderr, "multisend-bench: --json %s: %s\n", o.json, strerror(errno));
		return 1;
	}
	if (o.csv) {
		if (!(s.csv = fopen(o.csv, "we"))) {
			fprintf(stderr, "multisend-bench: --csv %s: %s\n", o.csv, strerror(errno));
			status = 1;
			goto out_files;
		}
		csv_header(s.csv);
	}
	/* Every output checked before the run: a report directory that cannot be written, or
	 * fan-outs this host cannot set up, refuse the run now, not after minutes of it. */
	if ((o.report && report_dir_prepare(&s)) || check_fanouts(&s)) {
		status = 1;
		goto out_files;
	}
	/* The table through a tee: the report page carries what the terminal showed. */
	struct tee tee = { .out = s.table };

	if (o.report && (s.transcript = open_memstream(&s.transcript_buf, &s.transcript_len))) {
		cookie_io_functions_t io = { .write = tee_write };
		FILE *t;

		tee.copy = s.transcript;
		if ((t = fopencookie(&tee, "w", io)))
			s.table = t;
	}

	/* --background-load: processes forked now, before any thread or namespace exists (they
	 * are the bench's children, never its threads), stopped until set working. Their own
	 * deadline: twice the expected run plus a minute; the bench kills them before that. */
	struct bg_load load = { 0 };

	s.expected_s = expected_seconds(&o);
	s.load_at_s = -1;
	if (o.bg_load) {
		char why[256];

		if (load_start(&load, o.bg_load, 2 * s.expected_s + 60, why, sizeof(why))) {
			fprintf(stderr, "multisend-bench: %s\n", why);
			status = 1;
			goto out_files;
		}
		s.load = &load;
		/* In --timeline, half is each timeline's (the sending thread switches it). */
		if (!o.load_from_half)
			s.load_at_s = o.load_from;
		else if (o.timeline <= 0)
			s.load_at_s = s.expected_s / 2;
	}
	/* Signals are taken by sigtimedwait below, never by handlers: block them everywhere
	 * (threads inherit the mask) before any thread or namespace exists. A closed pipe must
	 * not kill us before the namespace is gone: writes then fail with EPIPE instead. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (sink_netns(o.sink)) {
		char why[512];
		int err;

		ns.mtu = o.mtu;
		ns.xdp = o.sink == SINK_NETNS_XDP;
		err = netns_create(&ns, why, sizeof(why));

		if (err) {
			fprintf(stderr, "multisend-bench: %s\n", why);
			status = 1;
			goto out_ns;
		}
		s.ns = &ns;
	}
	/* The kernel fan-out, for the kfanout variants: attached before the sending thread
	 * starts, detached below on every way out. */
	kf_setup(&s, s.ns);
	describe(&s, s.ns);

	w.s = &s;
	w.ns = s.ns ? &ns : NULL;
	s.started_ns = now_ns();
	s.mode_started_ns = s.started_ns;
	if (s.load && s.load_at_s == 0)
		load_set(s.load, true);
	if ((rc = pthread_create(&tid, NULL, worker_main, &w))) {
		fprintf(stderr, "multisend-bench: pthread_create: %s\n", strerror(rc));
		status = 1;
		goto out_ns;
	}
	bool tty = o.progress && isatty(STDERR_FILENO) && planned_seconds(&o) >= 5;

	while (!__atomic_load_n(&w.done, __ATOMIC_ACQUIRE)) {
		struct timespec tick = { 0, 200000000 };
		int got = sigtimedwait(&sigs, NULL, &tick);

		if (got > 0 && !sig) {
			sig = got;
			request_stop(&s);
		}
		if (tty && !sig && now_ns() - s.started_ns > 1000000000ull)
			draw_progress(&s);
		if (s.load && s.load_at_s > 0 && !load_is_on(s.load) &&
		    (double)(now_ns() - s.started_ns) >= s.load_at_s * 1e9)
			load_set(s.load, true);
	}
	pthread_join(tid, NULL);
	pthread_mutex_lock(&s.out_lock);
	if (s.progress_shown)
		fputs("\r\033[K", stderr);
	pthread_mutex_unlock(&s.out_lock);

	if (s.load)
		load_set(s.load, false);
	loadavg_now(s.loadavg_end, sizeof(s.loadavg_end));
	const bool measured = s.nres || s.ntl || s.nlat || s.cap.done;

	if (!sig && !w.err && s.nres)
		report_legend(&s);
	if (!sig && measured)
		report_end(&s);
	if (sig) {
		fprintf(stderr, "multisend-bench: interrupted by %s; stopped%s\n", strsignal(sig),
			s.ns ? ", removing the namespace" : "");
		snprintf(s.cut_short, sizeof(s.cut_short), "interrupted by %s", strsignal(sig));
	} else if (s.output_failed) {
		fprintf(stderr, "multisend-bench: writing the output failed (%s); stopped\n",
			"closed pipe or full disk");
	} else if (w.err) {
		status = 1;
		snprintf(s.cut_short, sizeof(s.cut_short), "stopped by a failure (%s)",
			 strerror(w.err < 0 ? -w.err : w.err));
	} else if (!measured && !o.cg_child) {
		/* Every configuration skipped: a run that measured nothing has not succeeded. (A
		 * --callgrind child's measurement is the line its parent reads, not a result.) */
		fprintf(stderr, "multisend-bench: nothing was measured: every configuration was "
				"skipped (the reasons are above)\n");
		status = 1;
		snprintf(s.cut_short, sizeof(s.cut_short), "nothing was measured: every "
							   "configuration was skipped");
	}
	/* A report of what finished, however the run ended (not when the disk is the trouble). */
	if (o.report && !s.output_failed) {
		if (report_dir_write(&s))
			status = 1;
		else if (s.cut_short[0])
			fprintf(stderr, "multisend-bench: %s; %s/index.html holds what finished\n",
				s.cut_short, o.report);
		else
			fprintf(s.table, "\nreport written to %s/index.html\n", o.report);
	}

out_ns:
	/* Every load process killed and reaped, whatever happened above. */
	load_stop(&load);
	if (kf_teardown(&s))
		status = 1;
	if (ns.created) {
		int err = netns_destroy(&ns);

		if (err) {
			fprintf(stderr, "multisend-bench: could not delete namespace %s (%s); remove it "
					"with: ip netns delete %s\n",
				ns.name, strerror(-err), ns.name);
			status = 1;
		}
	}
out_files:
	if (s.table != stdout && s.table != stderr && fclose(s.table) && !status)
		status = 1;
	if (s.transcript)
		fclose(s.transcript);
	free(s.transcript_buf);
	if (s.csv && fclose(s.csv)) {
		fprintf(stderr, "multisend-bench: --csv %s: %s\n", o.csv, strerror(errno));
		status = 1;
	}
	if (s.json && s.json != stdout && fclose(s.json)) {
		fprintf(stderr, "multisend-bench: --json %s: %s\n", o.json, strerror(errno));
		status = 1;
	}
	if (fflush(stdout) && !status)
		status = 1;
	free_session(&s);
	pthread_mutex_destroy(&s.out_lock);
	if (sig)
		return 128 + sig;
	return status;
}
