/* SPDX-License-Identifier: MIT */
/*
 * --callgrind: what each backend's fan-out costs in user space, counted in instructions by
 * valgrind's callgrind rather than timed. The kernel's work is not in the count (callgrind sees
 * user space only), which is the point: what is left is the library's own overhead next to the
 * same fan-out written by hand, free of the noise a shared machine puts into CPU times.
 *
 * The bench runs itself under `valgrind --tool=callgrind` once per backend and configuration
 * (--callgrind-child), with --collect-atstart=no and --toggle-collect set to the backend's
 * per-fan-out function: ms_send for the library's, bench_raw_*_fanout for the hand-written ones
 * (raw.h). So the count is that function's inclusive cost and nothing else. The child sends
 * warm-up fan-outs first (lazy binding, first-touch page faults, io_uring's first submission,
 * caches the library fills), then the counted ones. Built with valgrind/callgrind.h, the
 * warm-up runs before callgrind instruments anything (--instr-atstart=no, then
 * CALLGRIND_START_INSTRUMENTATION and CALLGRIND_ZERO_STATS), so it is not in the count at all;
 * without the header it is, amortised over the counted fan-outs, and the output says so.
 * Nothing is subtracted by hand: instructions / (fan-outs x N) is the figure.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef BENCH_HAVE_CALLGRIND_H
#include <valgrind/callgrind.h>
#define WARMUP_COUNTED false
#else
#define WARMUP_COUNTED true
#endif

#include "kfanout.h"
#include "raw.h"
#include "workload.h"

/* Valgrind and the sanitizers' runtimes cannot share a process. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define BENCH_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
	__has_feature(memory_sanitizer)
#define BENCH_SANITIZED 1
#endif
#endif

extern char **environ;

/* Destinations' worth of fan-outs counted, and warmed up, by default. Instruction counts vary
 * little from one fan-out to the next, so this is about amortising the rare slow path (a sink
 * drain between calls, a socket buffer that filled), not about statistics. */
#define COUNT_DESTS 65536u
#define WARM_DESTS 4096u

/* ---- the child: on the sending thread, under valgrind --------------------------------------- */

/* count fan-outs of v, draining the sink when it must be (between calls: never counted). */
static uint64_t child_send(struct session *s, struct rig *r, enum variant_id v, uint64_t count,
			   int *err)
{
	const uint64_t lim = sink_burst_limit(r->sink);
	uint64_t failed = 0;

	for (uint64_t k = 0; k < count && !*err; k++) {
		if (stopped(s)) {
			*err = -EINTR;
			break;
		}
		if (lim != UINT64_MAX && r->pending + 1 > lim) {
			*err = sink_drain(r->sink);
			r->pending = 0;
			if (*err)
				break;
		}
		if ((*err = kf_hook(&s->kf, v)))
			break;
		failed += rig_send(r, v, 1);
	}
	return failed;
}

int callgrind_child(struct session *s)
{
	const struct opts *o = s->o;
	const enum variant_id v = o->order[0];
	uint64_t warm_failed, failed;
	struct rig r;
	char why[256];
	int err;

	/* The parent reads this line; a backend this machine lacks is a skip, not a failure. */
	if (!s->var[v].available) {
		printf("callgrind-child unavailable %s\n", s->var[v].detail);
		return -ENOTSUP;
	}
	err = rig_open(s, &r, o->fanouts[0], o->sizes[0], why, sizeof(why));
	if (err) {
		printf("callgrind-child unavailable %s\n", why);
		return err;
	}
	warm_failed = child_send(s, &r, v, o->cg_warmup, &err);
#ifdef BENCH_HAVE_CALLGRIND_H
	CALLGRIND_START_INSTRUMENTATION;
	CALLGRIND_ZERO_STATS;
#endif
	failed = child_send(s, &r, v, o->iterations, &err);
#ifdef BENCH_HAVE_CALLGRIND_H
	CALLGRIND_STOP_INSTRUMENTATION;
#endif
	if (!err)
		printf("callgrind-child backend=%s function=%s n=%" PRIu64 " size=%" PRIu64
		       " fanouts=%" PRIu64 " warmup=%" PRIu64 " warmup_counted=%d failed=%" PRIu64
		       " warmup_failed=%" PRIu64 "\n",
		       variant_name(v), raw_fanout_function(v), r.n, r.size, o->iterations,
		       o->cg_warmup, WARMUP_COUNTED, failed, warm_failed);
	rig_close(&r);
	return err;
}

/* ---- the parent ----------------------------------------------------------------------------- */

struct cg_row {
	enum variant_id v;
	uint64_t n, size;
	bool ok;      /* measured */
	bool skipped; /* the backend is unavailable here (why in note) */
	uint64_t fanouts, warmup, failed, warm_failed;
	bool warm_counted;
	double instr, per_dest;
	char note[320];
};

struct cg_run {
	const struct opts *o;
	const struct env_info *env;
	FILE *table, *json;
	char exe[4096];
	char dir[4096];
	bool temp_dir;
	char valgrind[128];
	bool heading; /* the table's heading was printed */
	int sig;      /* a signal that stopped us */
};

static void spawn_cleanup(posix_spawnattr_t *attr, posix_spawn_file_actions_t *fa)
{
	posix_spawn_file_actions_destroy(fa);
	posix_spawnattr_destroy(attr);
}

/*
 * Run argv (argv[0] from PATH) with stdout to out and stderr to log, in our process group (so
 * a terminal's Ctrl-C reaches the bench under valgrind too, and it cleans up as it always
 * does), and wait. SIGINT/SIGTERM/SIGHUP sent to us alone are passed on to it. Returns its
 * exit status, 128 + signal, or -errno if it could not be started.
 */
static int spawn_wait(struct cg_run *c, char *const argv[], const char *out, const char *log)
{
	posix_spawnattr_t attr;
	posix_spawn_file_actions_t fa;
	sigset_t none, sigs, old;
	pid_t pid;
	int err, status;

	if ((err = posix_spawnattr_init(&attr)))
		return -err;
	if ((err = posix_spawn_file_actions_init(&fa))) {
		posix_spawnattr_destroy(&attr);
		return -err;
	}
	sigemptyset(&none);
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	err = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	if (!err)
		err = posix_spawnattr_setsigmask(&attr, &none);
	if (!err)
		err = posix_spawnattr_setsigdefault(&attr, &sigs);
	if (!err)
		err = posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC,
						       0644);
	if (!err)
		err = posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC,
						       0644);
	if (err) {
		spawn_cleanup(&attr, &fa);
		return -err;
	}
	/* Blocked before the child exists, so no signal is lost between spawning and waiting. */
	pthread_sigmask(SIG_BLOCK, &sigs, &old);
	err = posix_spawnp(&pid, argv[0], &fa, &attr, argv, environ);
	spawn_cleanup(&attr, &fa);
	if (err) {
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		return -err;
	}
	for (;;) {
		struct timespec tick = { 0, 100000000 };
		pid_t w = waitpid(pid, &status, WNOHANG);
		int got;

		if (w == pid)
			break;
		if (w < 0 && errno != EINTR) {
			err = -errno;
			break;
		}
		got = sigtimedwait(&sigs, NULL, &tick);
		if (got > 0) {
			if (!c->sig)
				c->sig = got;
			kill(pid, got);
		}
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err)
		return err;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* The "totals:" (else "summary:") line of a callgrind output file: the events collected, here
 * the instructions (Ir) executed inside the toggled function. -1 if there is none. */
static double callgrind_totals(const char *path)
{
	FILE *f = fopen(path, "re");
	char line[1024];
	double totals = -1, summary = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *end;

		if (!strncmp(line, "totals:", 7)) {
			double v = strtod(line + 7, &end);

			if (end != line + 7)
				totals = v;
		} else if (!strncmp(line, "summary:", 8)) {
			double v = strtod(line + 8, &end);

			if (end != line + 8)
				summary = v;
		}
	}
	fclose(f);
	return totals >= 0 ? totals : summary;
}

/* Read a small file whole (the child's stdout, its log's end), NUL-terminated. */
static void slurp(const char *path, char *buf, size_t len, bool tail)
{
	FILE *f = fopen(path, "re");
	size_t n = 0;

	buf[0] = 0;
	if (!f)
		return;
	if (tail && !fseek(f, 0, SEEK_END)) {
		long end = ftell(f);

		if (end > (long)len - 1)
			fseek(f, end - (long)len + 1, SEEK_SET);
		else
			rewind(f);
	}
	n = fread(buf, 1, len - 1, f);
	buf[n] = 0;
	fclose(f);
}

static bool field_u64(const char *line, const char *key, uint64_t *out)
{
	char pat[32];
	const char *p;

	snprintf(pat, sizeof(pat), " %s=", key);
	char *end;

	p = strstr(line, pat);
	if (!p || p[strlen(pat)] < '0' || p[strlen(pat)] > '9')
		return false;
	errno = 0;
	*out = strtoull(p + strlen(pat), &end, 10);
	return !errno && (*end == ' ' || *end == '\n' || !*end);
}

static void file_name(char *buf, size_t len, const struct cg_run *c, const struct cg_row *w,
		      const char *what)
{
	snprintf(buf, len, "%s/%s.%s-n%" PRIu64 "-s%" PRIu64 "%s", c->dir, what,
		 variant_name(w->v), w->n, w->size, c->o->connected ? "-connected" : "");
}

static int measure_one(struct cg_run *c, struct cg_row *w, uint64_t iters, uint64_t warm)
{
	const struct opts *o = c->o;
	char out_file[4400], cg_file[4400], log_file[4400], out_arg[4500], toggle[128];
	char n_s[24], size_s[24], iters_s[24], warm_s[24], cpu_s[16], text[1024];
	char *argv[40];
	int a = 0, rc;

	file_name(cg_file, sizeof(cg_file), c, w, "callgrind.out");
	file_name(out_file, sizeof(out_file), c, w, "stdout");
	file_name(log_file, sizeof(log_file), c, w, "log");
	snprintf(out_arg, sizeof(out_arg), "--callgrind-out-file=%s", cg_file);
	snprintf(toggle, sizeof(toggle), "--toggle-collect=%s", raw_fanout_function(w->v));
	snprintf(n_s, sizeof(n_s), "%" PRIu64, w->n);
	snprintf(size_s, sizeof(size_s), "%" PRIu64, w->size);
	snprintf(iters_s, sizeof(iters_s), "%" PRIu64, iters);
	snprintf(warm_s, sizeof(warm_s), "%" PRIu64, warm);
	argv[a++] = "valgrind";
	argv[a++] = "--tool=callgrind";
	argv[a++] = "-q";
	argv[a++] = out_arg;
	argv[a++] = "--collect-atstart=no";
	if (!WARMUP_COUNTED)
		argv[a++] = "--instr-atstart=no";
	argv[a++] = toggle;
	argv[a++] = c->exe;
	argv[a++] = "--callgrind-child";
	argv[a++] = warm_s;
	argv[a++] = "--backends";
	argv[a++] = (char *)variant_name(w->v);
	argv[a++] = "--fanout";
	argv[a++] = n_s;
	argv[a++] = "--size";
	argv[a++] = size_s;
	argv[a++] = "--sink";
	argv[a++] = (char *)sink_name(o->sink);
	if (o->connected)
		argv[a++] = "--connected";
	if (o->verify_payload)
		argv[a++] = "--verify-payload";
	if (o->dontwait)
		argv[a++] = "--dontwait";
	if (o->rotate)
		argv[a++] = "--rotate";
	if (o->lib_connect)
		argv[a++] = "--lib-connect";
	if (o->cpu >= 0) {
		snprintf(cpu_s, sizeof(cpu_s), "%d", o->cpu);
		argv[a++] = "--cpu";
		argv[a++] = cpu_s;
	}
	argv[a++] = "--iterations";
	argv[a++] = iters_s;
	argv[a++] = "--no-progress";
	argv[a] = NULL;

	rc = spawn_wait(c, argv, out_file, log_file);
	if (rc < 0) {
		snprintf(w->note, sizeof(w->note), "could not start valgrind: %s", strerror(-rc));
		return rc;
	}
	slurp(out_file, text, sizeof(text), false);
	if (!strncmp(text, "callgrind-child unavailable ", 28)) {
		w->skipped = true;
		text[strcspn(text, "\n")] = 0;
		snprintf(w->note, sizeof(w->note), "%.300s", text + 28);
		return 0;
	}
	const char *line = strstr(text, "callgrind-child backend=");
	uint64_t wc = 0;

	if (rc || !line || !field_u64(line, "fanouts", &w->fanouts) ||
	    !field_u64(line, "warmup", &w->warmup) || !field_u64(line, "failed", &w->failed) ||
	    !field_u64(line, "warmup_failed", &w->warm_failed) ||
	    !field_u64(line, "warmup_counted", &wc)) {
		char tail[240];

		slurp(log_file, tail, sizeof(tail), true);
		for (char *p = tail; *p; p++)
			if (*p == '\n')
				*p = ' ';
		snprintf(w->note, sizeof(w->note), "the run under valgrind failed (exit status %d): %s",
			 rc, tail[0] ? tail : "no output");
		return c->sig ? -EINTR : -EIO;
	}
	w->warm_counted = wc != 0;
	w->instr = callgrind_totals(cg_file);
	if (w->instr < 0) {
		snprintf(w->note, sizeof(w->note), "no totals in %.290s", cg_file);
		return -EIO;
	}
	uint64_t counted = w->fanouts + (w->warm_counted ? w->warmup : 0);

	w->per_dest = w->instr / ((double)counted * (double)w->n);
	w->ok = true;
	return 0;
}

/* The row of v in this configuration's rows, or NULL. */
static const struct cg_row *find_row(const struct cg_row *rows, unsigned n, int v)
{
	for (unsigned i = 0; i < n; i++)
		if ((int)rows[i].v == v && rows[i].ok)
			return &rows[i];
	return NULL;
}

static double twin_ratio(const struct cg_row *rows, unsigned n, const struct cg_row *w)
{
	const struct cg_row *t = find_row(rows, n, variant_twin(w->v));

	if (!w->ok || !t || t->per_dest <= 0)
		return NAN;
	return w->per_dest / t->per_dest;
}

static void print_header(struct cg_run *c)
{
	const struct opts *o = c->o;
	const struct env_info *e = c->env;
	FILE *f = c->table;
	char sends[1024];

	fprintf(f, "multisend-bench %s --callgrind\n", BENCH_VERSION);
	fprintf(f, "  kernel    %s\n", e->kernel);
	fprintf(f, "  cpu       %s; %ld cores online%s\n", e->cpu_model, e->cores_online,
		e->hypervisor ? "; virtual machine (hypervisor flag)" : "");
	fprintf(f, "  library   libmultisend %s\n", e->lib_version);
	fprintf(f, "  valgrind  %s, callgrind: user-space instructions (Ir) only; the kernel's work "
		   "is not in them\n",
		c->valgrind);
	fprintf(f, "  sockets   %s\n",
		o->connected ? "one connected UDP socket per destination"
			     : "one unconnected UDP socket, one address per destination");
	fprintf(f, "  sink      %s\n", sink_name(o->sink));
	fprintf(f, "  sends     %s\n", send_options_desc(o, sends, sizeof(sends)));
	fprintf(f, "  method    each backend runs alone under valgrind --tool=callgrind "
		   "--collect-atstart=no --toggle-collect=FUNCTION,\n"
		   "            FUNCTION being its per-fan-out function; %s\n"
		   "            instr/dest = the collected instructions / (fan-outs x fan-out), nothing "
		   "subtracted\n",
		WARMUP_COUNTED ? "its warm-up fan-outs ARE counted (built without "
				 "valgrind/callgrind.h), amortised over the rest;"
			       : "its warm-up fan-outs run before callgrind instruments anything "
				 "(client requests) and are not counted;");
	fprintf(f, "  start     %s, load average %s\n", e->date, e->loadavg);
	if (c->json) {
		fputs("{\"type\":\"callgrind_env\",\"bench_version\":", c->json);
		json_str(c->json, BENCH_VERSION);
		fputs(",\"library_version\":", c->json);
		json_str(c->json, e->lib_version);
		fputs(",\"kernel\":", c->json);
		json_str(c->json, e->kernel);
		fputs(",\"valgrind\":", c->json);
		json_str(c->json, c->valgrind);
		fputs(",\"sink\":", c->json);
		json_str(c->json, sink_name(o->sink));
		fputs(",\"sockets\":", c->json);
		json_str(c->json, o->connected ? "connected" : "unconnected");
		json_send_options(c->json, o);
		fprintf(c->json, ",\"warmup_counted\":%s}\n", WARMUP_COUNTED ? "true" : "false");
	}
}

static void print_rows(struct cg_run *c, const struct cg_row *rows, unsigned n)
{
	FILE *f = c->table;
	char ratios[512] = "";

	/* One heading: every configuration has the same sink and shape. */
	if (!c->heading) {
		fprintf(f, "\ncallgrind: %s sink, %s\n", sink_name(c->o->sink),
			c->o->connected ? "one connected socket per destination"
					: "one unconnected socket");
		fprintf(f, "%7s %5s  %-12s  %-26s %8s %7s %14s %10s  %s\n", "fan-out", "size",
			"backend", "per-fan-out function", "fan-outs", "warm-up", "instructions",
			"instr/dest", "vs raw twin");
		c->heading = true;
	}
	for (unsigned i = 0; i < n; i++) {
		const struct cg_row *w = &rows[i];
		double ratio = twin_ratio(rows, n, w);
		char rs[48] = "-";

		if (!w->ok) {
			fprintf(f, "%7" PRIu64 " %5" PRIu64 "  %-12s  %s: %s\n", w->n, w->size,
				variant_name(w->v), w->skipped ? "skipped" : "FAILED", w->note);
		} else {
			if (isfinite(ratio)) {
				snprintf(rs, sizeof(rs), "%.2f", ratio);
				snprintf(ratios + strlen(ratios), sizeof(ratios) - strlen(ratios),
					 "%s%s / %s %.2f", ratios[0] ? ", " : "", variant_name(w->v),
					 variant_name((enum variant_id)variant_twin(w->v)), ratio);
			}
			fprintf(f, "%7" PRIu64 " %5" PRIu64 "  %-12s  %-26s %8" PRIu64 " %7" PRIu64
				   " %14.0f %10.1f  %s\n",
				w->n, w->size, variant_name(w->v), raw_fanout_function(w->v), w->fanouts,
				w->warmup, w->instr, w->per_dest, rs);
			if (w->failed || w->warm_failed)
				fprintf(f, "        ! %" PRIu64 " of %" PRIu64 " destination-sends were "
					   "refused by the kernel (%" PRIu64 " in the warm-up)\n",
					w->failed + w->warm_failed,
					(w->fanouts + w->warmup) * w->n, w->warm_failed);
		}
		if (!c->json)
			continue;
		fputs("{\"type\":\"callgrind\",\"backend\":", c->json);
		json_str(c->json, variant_name(w->v));
		fprintf(c->json, ",\"fanout\":%" PRIu64 ",\"size\":%" PRIu64, w->n, w->size);
		fputs(",\"sink\":", c->json);
		json_str(c->json, sink_name(c->o->sink));
		fputs(",\"sockets\":", c->json);
		json_str(c->json, c->o->connected ? "connected" : "unconnected");
		fputs(",\"function\":", c->json);
		json_str(c->json, raw_fanout_function(w->v));
		fprintf(c->json, ",\"status\":\"%s\"", w->ok ? "ok" : w->skipped ? "skipped" : "failed");
		if (w->ok) {
			fprintf(c->json,
				",\"fanouts\":%" PRIu64 ",\"warmup\":%" PRIu64
				",\"warmup_counted\":%s,\"instructions\":%.0f,\"instructions_per_dest\":",
				w->fanouts, w->warmup, w->warm_counted ? "true" : "false", w->instr);
			json_num(c->json, w->per_dest);
			fprintf(c->json, ",\"dests_failed\":%" PRIu64 ",\"warmup_dests_failed\":%" PRIu64,
				w->failed, w->warm_failed);
		} else {
			fputs(",\"reason\":", c->json);
			json_str(c->json, w->note);
		}
		fputs(",\"twin\":", c->json);
		if (variant_twin(w->v) >= 0)
			json_str(c->json, variant_name((enum variant_id)variant_twin(w->v)));
		else
			fputs("null", c->json);
		fputs(",\"ratio_to_twin\":", c->json);
		json_num(c->json, ratio);
		fputs("}\n", c->json);
	}
	if (ratios[0])
		fprintf(f, "        library / hand-written, instructions per destination: %s\n", ratios);
	fflush(f);
	if (c->json)
		fflush(c->json);
}

/* Empty and remove the temporary directory (only files of ours are in it). */
static void remove_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char p[4400];

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
		unlink(p);
	}
	closedir(d);
	rmdir(path);
}

static int setup_run(struct cg_run *c)
{
	const struct opts *o = c->o;
	ssize_t n;

	if (!have_program("valgrind")) {
		fprintf(stderr, "multisend-bench: --callgrind needs valgrind, which is not in PATH; "
				"install it (Debian/Ubuntu: apt-get install valgrind; scripts/install-deps "
				"does)\n");
		return -ENOENT;
	}
	/* valgrind runs a path, not "/proc/self/exe" (which would be valgrind itself there). */
	n = readlink("/proc/self/exe", c->exe, sizeof(c->exe) - 1);
	if (n <= 0 || (size_t)n >= sizeof(c->exe) - 1) {
		fprintf(stderr, "multisend-bench: cannot find my own executable: %s\n",
			strerror(errno));
		return -ENOENT;
	}
	c->exe[n] = 0;
	if (o->callgrind_out) {
		snprintf(c->dir, sizeof(c->dir), "%s", o->callgrind_out);
		if (mkdir(c->dir, 0755) && errno != EEXIST) {
			fprintf(stderr, "multisend-bench: --callgrind-out %s: %s\n", c->dir,
				strerror(errno));
			return -errno;
		}
	} else {
		const char *tmp = getenv("TMPDIR");

		snprintf(c->dir, sizeof(c->dir), "%s/msbench-callgrind-XXXXXX",
			 tmp && *tmp ? tmp : "/tmp");
		if (!mkdtemp(c->dir)) {
			fprintf(stderr, "multisend-bench: mkdtemp %s: %s\n", c->dir, strerror(errno));
			return -errno;
		}
		c->temp_dir = true;
	}
	/* "valgrind-3.19.0", for the header. */
	char out[4400], log[4400];
	char *argv[] = { "valgrind", "--version", NULL };

	snprintf(out, sizeof(out), "%s/valgrind-version", c->dir);
	snprintf(log, sizeof(log), "%s/valgrind-version.log", c->dir);
	snprintf(c->valgrind, sizeof(c->valgrind), "valgrind (version unknown)");
	if (spawn_wait(c, argv, out, log) == 0) {
		slurp(out, c->valgrind, sizeof(c->valgrind), false);
		c->valgrind[strcspn(c->valgrind, "\n")] = 0;
	}
	unlink(out);
	unlink(log);
	return 0;
}

int callgrind_main(const struct opts *o, const struct env_info *env)
{
	static const uint64_t def_fan[] = { 256 }, def_size[] = { 64 };
	const uint64_t *fan = o->nfanouts ? o->fanouts : def_fan;
	const uint64_t *sizes = o->nsizes ? o->sizes : def_size;
	const unsigned nf = o->nfanouts ? o->nfanouts : 1, nz = o->nsizes ? o->nsizes : 1;
	struct cg_run c = { .o = o, .env = env, .table = stdout };
	int status = 0;

#ifdef BENCH_SANITIZED
	fprintf(stderr, "multisend-bench: --callgrind cannot run this build: it was built with a "
			"sanitizer, whose runtime valgrind cannot host; use a build without "
			"-Db_sanitize\n");
	return 1;
#endif
	if (o->json && !strcmp(o->json, "-")) {
		c.json = stdout;
		c.table = stderr;
	} else if (o->json && !(c.json = fopen(o->json, "we"))) {
		fprintf(stderr, "multisend-bench: --json %s: %s\n", o->json, strerror(errno));
		return 1;
	}
	/* The children would each say so; once, before any valgrind, is enough. */
	if (sink_netns(o->sink) && geteuid() != 0) {
		fprintf(stderr, "multisend-bench: --sink %s needs root (it creates a network "
				"namespace and a veth pair); run it as root, or use --sink loopback or "
				"deliver\n",
			sink_name(o->sink));
		status = 1;
		goto out;
	}
	if (setup_run(&c)) {
		status = 1;
		goto out;
	}
	print_header(&c);
	for (unsigned j = 0; j < nz && !c.sig; j++)
		for (unsigned i = 0; i < nf && !c.sig; i++) {
			struct cg_row rows[V_COUNT];
			const uint64_t n = fan[i];
			uint64_t iters = o->iterations, warm;
			unsigned nr = 0;

			/* Whole fan-outs worth COUNT_DESTS destinations (an eighth with --quick). */
			if (!iters) {
				iters = (COUNT_DESTS / (o->quick ? 8 : 1) + n - 1) / n;
				if (iters < 4)
					iters = 4;
			}
			warm = (WARM_DESTS / (o->quick ? 8 : 1) + n - 1) / n;
			if (warm < 2)
				warm = 2;
			unsigned good = 0;

			for (unsigned k = 0; k < o->nvariants && !c.sig; k++) {
				struct cg_row *w = &rows[nr++];

				memset(w, 0, sizeof(*w));
				w->v = o->order[k];
				w->n = n;
				w->size = sizes[j];
				if (measure_one(&c, w, iters, warm) && !c.sig)
					status = 1;
				good += w->ok || w->skipped;
			}
			if (!c.sig)
				print_rows(&c, rows, nr);
			/* Every backend failed: the cause is common to all (the logs say which), and
			 * the other configurations would only repeat it. */
			if (!good)
				goto done;
		}
done:
	if (c.sig) {
		fprintf(stderr, "multisend-bench: interrupted by %s; stopped\n", strsignal(c.sig));
	} else if (status && c.temp_dir) {
		fprintf(stderr, "multisend-bench: valgrind's logs are kept in %s\n", c.dir);
		c.temp_dir = false;
	} else if (o->callgrind_out) {
		fprintf(c.table, "\ncallgrind output kept in %s (callgrind_annotate FILE shows where "
				 "the instructions went)\n",
			c.dir);
	}
	if (c.temp_dir)
		remove_dir(c.dir);
out:
	if (c.json && c.json != stdout && fclose(c.json)) {
		fprintf(stderr, "multisend-bench: --json %s: %s\n", o->json, strerror(errno));
		status = 1;
	}
	if (fflush(stdout) && !status)
		status = 1;
	return c.sig ? 128 + c.sig : status;
}
