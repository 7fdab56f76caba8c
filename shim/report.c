/* SPDX-License-Identifier: MIT */
/*
 * The report at exit: totals, errors by errno, flush reasons, and one row per socket (a socket
 * is an fd number and a generation, since numbers are reused). Text, or one JSON object on one
 * line when MULTISEND_STATS ends in .json. The file is opened for appending, so every process
 * of a run that sent something adds its own report (multisend-run empties the file first);
 * "%p" in the path is replaced by the process id. A process that made no send writes nothing.
 * The file must be a regular file owned by the effective user, reached without following a
 * symbolic link at its last component (open_report); otherwise, and when there is no such
 * path, the report goes to descriptor 2 if that is still the process's stderr (errfd.c), and
 * nowhere if it is not.
 *
 * No stdio and no malloc: the program may have either in any state at exit.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "multisend.h"
#include "shim.h"

extern _Atomic uint64_t shim_reentered, shim_sigqueued; /* intercept.c */

/* ---- rows of sockets that are gone (under the registry lock) -------------------------------- */

#define RETIRED_MAX 4096
#define ROWS_MAX 16384

static struct shim_sockrow *rrows;
static unsigned nrrows;

static void merge_row(struct shim_sockrow *rows, unsigned *n, unsigned cap,
		      const struct shim_sockrow *r)
{
	for (unsigned i = 0; i < *n; i++) {
		if (rows[i].fd == r->fd && rows[i].gen == r->gen) {
			shim_counts_add(&rows[i].c, &r->c);
			rows[i].info |= r->info;
			return;
		}
	}
	if (*n < cap) {
		rows[(*n)++] = *r;
		return;
	}
	/* Out of room: the last row collects the rest, as "other sockets". */
	rows[cap - 1].fd = -1;
	rows[cap - 1].gen = 0;
	shim_counts_add(&rows[cap - 1].c, &r->c);
}

void shim_report_retire_row(const struct shim_sockrow *r)
{
	if (!rrows) {
		void *p = mmap(NULL, RETIRED_MAX * sizeof(*rrows), PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p == MAP_FAILED)
			return;
		rrows = p;
	}
	merge_row(rrows, &nrrows, RETIRED_MAX, r);
}

void shim_report_retire_rows(struct shim_thread *t)
{
	if (!t) {
		nrrows = 0;
		return;
	}
	for (unsigned i = 0; i <= SHIM_SOCK_SLOTS; i++)
		if (t->rows[i].c.calls || t->rows[i].c.fsyscalls)
			shim_report_retire_row(&t->rows[i]);
}

/* ---- a buffer to print into ----------------------------------------------------------------- */

struct out {
	char *buf;
	size_t len, cap;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	if (o->len >= o->cap)
		return;
	va_start(ap, fmt);
	int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->len = o->len + (size_t)n < o->cap ? o->len + (size_t)n : o->cap - 1;
}

/* ---- adding up ------------------------------------------------------------------------------ */

struct totals {
	struct shim_counts c;
	uint64_t calls_by[CALL_N];
	uint64_t errs[SHIM_ERRNO_MAX], ferrs[SHIM_ERRNO_MAX];
	uint64_t flushes[FLUSH_N];
	struct shim_fcounts fc;
	bool any;
};

static void add_thread(struct totals *T, const struct shim_thread *t)
{
	if (!t || !t->counted)
		return;
	T->any = true;
	for (int k = 0; k < CALL_N; k++)
		T->calls_by[k] += t->calls_by[k];
	for (int k = 0; k < SHIM_ERRNO_MAX; k++) {
		T->errs[k] += t->errs[k];
		T->ferrs[k] += t->ferrs[k];
	}
	for (int k = 0; k < FLUSH_N; k++)
		T->flushes[k] += t->flushes[k];
	shim_fcounts_add(&T->fc, &t->fc);
}

/* What is still open at exit counts too: a fan-out run in progress, metrics mode's planned
 * batch. (The counters themselves are left alone.) */
static void add_open(struct shim_sockrow *rows, unsigned nrows, const struct shim_thread *t)
{
	uint64_t n = t->run_len;

	for (unsigned i = 0; n >= 2 && t->run_row && i < nrows; i++) {
		if (rows[i].fd == t->run_row->fd && rows[i].gen == t->run_row->gen) {
			rows[i].c.runs++;
			rows[i].c.run_dests += n;
			if (n > rows[i].c.run_max)
				rows[i].c.run_max = n;
			break;
		}
	}
	if (shim_cfg.mode == SHIM_METRICS)
		for (uint32_t k = 0; k < t->est.nfds; k++)
			for (unsigned i = 0; i < nrows; i++)
				if (rows[i].fd == t->est.fds[k])
					rows[i].c.syscalls_est++;
}

/* Under kernel bypass, batch mode shows the port's reasons, bypass mode its own as well
 * (shim_xreason_name: the port's are the same words as the library's xdp_fallback_*). */
static int xdp_reasons(void)
{
	return shim_cfg.mode == SHIM_BYPASS ? SHIM_XR_N : MS__XDP_NREASONS;
}

static bool xdp_shown(void)
{
	return shim_cfg.mode == SHIM_BYPASS || (shim_cfg.mode == SHIM_BATCH && shim_cfg.xdp_iface[0]);
}

static const char *mode_name(enum shim_mode m)
{
	return m == SHIM_BYPASS ? "bypass" : m == SHIM_BATCH ? "batch"
	       : m == SHIM_METRICS ? "metrics" : "off";
}

static const char *errname(int e)
{
	const char *n = e ? strerrorname_np(e) : NULL;
	return n ? n : "other";
}

/* Sends from signal handlers that re-entered the shim (counted with atomics, metrics.c): in
 * the totals, in no socket's row. Those that went straight out made one system call each. */
static void add_reentered(struct totals *T)
{
	uint64_t passed = atomic_load_explicit(&shim_re.passed, memory_order_relaxed);

	T->c.calls += atomic_load_explicit(&shim_re.calls, memory_order_relaxed);
	T->c.datagrams += atomic_load_explicit(&shim_re.datagrams, memory_order_relaxed);
	T->c.bytes += atomic_load_explicit(&shim_re.bytes, memory_order_relaxed);
	T->c.batched += atomic_load_explicit(&shim_re.batched, memory_order_relaxed);
	T->c.errors += atomic_load_explicit(&shim_re.errors, memory_order_relaxed);
	T->c.passed += passed;
	T->c.syscalls += passed;
	if (shim_cfg.mode == SHIM_METRICS)
		T->c.syscalls_est += passed;
	for (int k = 0; k < CALL_N; k++)
		T->calls_by[k] += atomic_load_explicit(&shim_re.calls_by[k], memory_order_relaxed);
	for (int k = 0; k < SHIM_ERRNO_MAX; k++)
		T->errs[k] += atomic_load_explicit(&shim_re.errs[k], memory_order_relaxed);
	if (atomic_load_explicit(&shim_re.calls, memory_order_relaxed))
		T->any = true;
}

/* ---- the two formats ------------------------------------------------------------------------ */

static void counts_json(struct out *o, const struct shim_counts *c)
{
	put(o, "\"calls\":%lu,\"datagrams\":%lu,\"bytes\":%lu,\"batched\":%lu,\"passed_through\":%lu,"
	       "\"errors\":%lu,\"errors_at_flush\":%lu,\"syscalls\":%lu,"
	       "\"syscalls_without_shim\":%lu",
	    c->calls, c->datagrams, c->bytes, c->batched, c->passed, c->errors, c->flush_errors,
	    c->syscalls + c->fsyscalls, c->calls);
	if (shim_cfg.mode == SHIM_METRICS)
		put(o, ",\"syscalls_if_batched\":%lu", c->syscalls_est);
	put(o, ",\"fanout_runs\":%lu,\"fanout_destinations\":%lu,\"fanout_longest\":%lu",
	    c->runs, c->run_dests, c->run_max);
}

static void errs_json(struct out *o, const char *name, const uint64_t *errs)
{
	const char *sep = "";
	put(o, ",\"%s\":{", name);
	for (int e = 0; e < SHIM_ERRNO_MAX; e++) {
		if (errs[e]) {
			put(o, "%s\"%s\":%lu", sep, errname(e), errs[e]);
			sep = ",";
		}
	}
	put(o, "}");
}

/* Sends from signal handlers that re-entered the shim. */
struct reentry {
	uint64_t calls, queued, overflow, unordered;
};

static void json(struct out *o, const struct totals *T, const struct shim_sockrow *rows,
		 unsigned nrows, const struct reentry *re)
{
	put(o, "{\"shim\":\"" SHIM_NAME "\",\"version\":\"%s\",\"pid\":%d,\"program\":\"",
	    ms_version_string(), (int)getpid());
	for (const char *p = shim_cfg.program; *p; p++)
		put(o, (*p == '"' || *p == '\\') ? "\\%c" : ((unsigned char)*p < 32 ? "?" : "%c"),
		    *p);
	put(o, "\",\"mode\":\"%s\",\"environment_ignored\":%s,\"batch_max\":%u,"
	       "\"batch_delay_us\":%u,\"defer_errors\":%s,\"fanout_end\":%s,\"total\":{",
	    mode_name(shim_cfg.mode), shim_cfg.secure ? "true" : "false", shim_cfg.batch_max,
	    shim_cfg.delay_us, shim_cfg.defer_errors ? "true" : "false",
	    shim_cfg.fanout_end ? "true" : "false");
	counts_json(o, &T->c);
	put(o, ",\"sendmmsg\":%lu,\"single_sends_at_flush\":%lu,\"reentered_calls\":%lu,"
	       "\"reentered_queued\":%lu,\"reentered_overflow\":%lu,\"reentered_unordered\":%lu",
	    T->fc.sendmmsg_calls, T->fc.single_sends, re->calls, re->queued, re->overflow,
	    re->unordered);
	if (xdp_shown()) {
		put(o, ",\"xdp_iface\":\"%s\",\"xdp_queue\":\"%s\",\"xdp_frames\":%lu,\"xdp_kicks\":%lu,"
		       "\"xdp_fallback\":{",
		    shim_xport_ifname(), shim_xport_queue_state(), T->fc.xdp_frames, T->fc.xdp_kicks);
		for (int k = 1; k < xdp_reasons(); k++)
			put(o, "%s\"%s\":%lu", k > 1 ? "," : "", shim_xreason_name[k],
			    T->fc.xdp_fallback[k] + (k == SHIM_XR_REENTERED ? re->calls : 0));
		put(o, "}");
	}
	put(o, ",\"calls_by\":{");
	for (int k = 0; k < CALL_N; k++)
		put(o, "%s\"%s\":%lu", k ? "," : "", shim_call_name[k], T->calls_by[k]);
	put(o, "}}");
	errs_json(o, "errors", T->errs);
	errs_json(o, "errors_at_flush", T->ferrs);
	put(o, ",\"flushes\":{");
	for (int k = 0; k < FLUSH_N; k++)
		put(o, "%s\"%s\":%lu", k ? "," : "", shim_reason_name[k], T->flushes[k]);
	put(o, "},\"sockets\":[");
	for (unsigned i = 0; i < nrows; i++) {
		const struct shim_sockrow *r = &rows[i];
		put(o, "%s{\"fd\":%d,\"kind\":\"%s\",", i ? "," : "", r->fd,
		    r->fd < 0 ? "other" : shim_fd_kind(r->info));
		counts_json(o, &r->c);
		put(o, ",\"last_errno\":\"%s\"}", r->c.last_errno ? errname(r->c.last_errno) : "");
	}
	put(o, "]}\n");
}

static void counts_text(struct out *o, const struct shim_counts *c)
{
	put(o, "%lu calls, %lu datagrams, %lu bytes; batched %lu, passed through %lu; "
	       "system calls %lu (without the shim %lu",
	    c->calls, c->datagrams, c->bytes, c->batched, c->passed, c->syscalls + c->fsyscalls,
	    c->calls);
	if (shim_cfg.mode == SHIM_METRICS)
		put(o, ", if batched %lu", c->syscalls_est);
	put(o, "); fan-out runs %lu (%lu destinations, longest %lu); errors %lu (at flush %lu)",
	    c->runs, c->run_dests, c->run_max, c->errors + c->flush_errors, c->flush_errors);
}

static void errs_text(struct out *o, const char *title, const uint64_t *errs)
{
	bool any = false;
	for (int e = 0; e < SHIM_ERRNO_MAX; e++) {
		if (!errs[e])
			continue;
		put(o, "%s%s %lu (%s)", any ? ", " : title, errname(e), errs[e],
		    e ? ms_strerror(e) : "errno above 159");
		any = true;
	}
	if (any)
		put(o, "\n");
}

static void text(struct out *o, const struct totals *T, const struct shim_sockrow *rows,
		 unsigned nrows, const struct reentry *re)
{
	put(o, SHIM_NAME " %s: pid %d (%s), mode %s", ms_version_string(), (int)getpid(),
	    shim_quote(&(struct shim_quoted){ 0 }, shim_cfg.program), mode_name(shim_cfg.mode));
	if (shim_cfg.mode == SHIM_BATCH)
		put(o, " (batch max %u, delay %u us%s%s)", shim_cfg.batch_max, shim_cfg.delay_us,
		    shim_cfg.fanout_end ? "" : ", no fan-out end detection",
		    shim_cfg.defer_errors ? ", errors deferred" : "");
	if (shim_cfg.secure)
		put(o, ", environment ignored (AT_SECURE)");
	put(o, "\n  total: ");
	counts_text(o, &T->c);
	put(o, "\n  calls:");
	for (int k = 0; k < CALL_N; k++)
		if (T->calls_by[k])
			put(o, " %s %lu", shim_call_name[k], T->calls_by[k]);
	if (shim_cfg.mode == SHIM_BATCH)
		put(o, "\n  flushed with sendmmsg %lu, with sendto %lu", T->fc.sendmmsg_calls,
		    T->fc.single_sends);
	if (xdp_shown()) {
		put(o, "\n  kernel bypass on %s (queue %s): %lu datagrams as AF_XDP frames, %lu kicks; "
		       "by the kernel's path:", shim_xport_ifname()[0] ? shim_xport_ifname() : "(none)",
		    shim_xport_queue_state(), T->fc.xdp_frames, T->fc.xdp_kicks);
		for (int k = 1; k < xdp_reasons(); k++)
			put(o, " %s %lu", shim_xreason_name[k],
			    T->fc.xdp_fallback[k] + (k == SHIM_XR_REENTERED ? re->calls : 0));
	}
	if (re->calls) {
		put(o, "\n  sends re-entering the shim (from signal handlers, in the totals, in no "
		       "socket's row): %lu, of which %lu queued behind the batch (%lu beyond its "
		       "ring) and %lu passed straight through",
		    re->calls, re->queued, re->overflow, re->calls - re->queued);
		if (re->unordered)
			put(o, "\n  WARNING: %lu of those had to wait behind the batch but found no "
			       "memory to queue in, so may have overtaken earlier data",
			    re->unordered);
	}
	put(o, "\n");
	errs_text(o, "  errors seen by the program: ", T->errs);
	errs_text(o, "  errors found at flush: ", T->ferrs);
	bool any = false;
	for (int k = 0; k < FLUSH_N; k++) {
		if (!T->flushes[k])
			continue;
		put(o, "%s%s %lu", any ? ", " : "  flushes: ", shim_reason_name[k], T->flushes[k]);
		any = true;
	}
	if (any)
		put(o, "\n");
	for (unsigned i = 0; i < nrows; i++) {
		const struct shim_sockrow *r = &rows[i];
		if (r->fd >= 0)
			put(o, "  socket fd %d (%s): ", r->fd, shim_fd_kind(r->info));
		else
			put(o, "  other sockets: ");
		counts_text(o, &r->c);
		put(o, "\n");
	}
}

/* ---- writing -------------------------------------------------------------------------------- */

static void write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = shim_raw_write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

/* The path with every "%p" replaced by the pid. */
/* Copy src to dst with each %p replaced by the process id. Returns false, with dst empty,
 * when the result does not fit (a cut path would name another file). */
static bool expand(char *dst, size_t cap, const char *src)
{
	size_t n = 0;
	for (; *src; src++) {
		if (src[0] == '%' && src[1] == 'p') {
			int w = snprintf(dst + n, cap - n, "%d", (int)getpid());
			if (w < 0 || (size_t)w >= cap - n)
				goto too_long;
			n += (size_t)w;
			src++;
		} else {
			if (n + 1 >= cap)
				goto too_long;
			dst[n++] = *src;
		}
	}
	dst[n] = '\0';
	return true;
too_long:
	dst[0] = '\0';
	return false;
}

/* The report file, appended to (created mode 0600). Never through a symbolic link
 * (O_NOFOLLOW), never waiting (O_NONBLOCK: a FIFO nobody reads fails with ENXIO instead of
 * hanging the exit; one that a reader holds is refused by the lstat before it is opened), and
 * only a regular file owned by the effective user is kept (fstat of what was opened: the lstat
 * is only there so that a FIFO or a device is not opened at all). Returns the descriptor, or
 * -1 with *why saying why not. */
static int open_report(const char *path, const char **why)
{
	struct stat st;

	if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		*why = S_ISLNK(st.st_mode) ? "a symbolic link, not followed" : "not a regular file";
		return -1;
	}
	int f = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
		     0600);
	if (f < 0) {
		*why = errno == ELOOP ? "a symbolic link, not followed"
		       : errno == ENXIO ? "not a regular file" : strerror(errno);
		return -1;
	}
	if (fstat(f, &st) < 0) {
		*why = strerror(errno);
	} else if (!S_ISREG(st.st_mode)) {
		*why = "not a regular file";
	} else if (st.st_uid != geteuid()) {
		*why = "owned by another user";
	} else if (st.st_nlink > 1) {
		*why = "a file with other names (hard links)";
	} else {
		return f;
	}
	shim_raw_close(f);
	return -1;
}

void shim_report_write(void)
{
	struct totals *T;
	struct shim_sockrow *rows;
	size_t tsz = sizeof(*T), rsz = ROWS_MAX * sizeof(*rows), osz = 4u << 20;
	char *mem = mmap(NULL, tsz + rsz + osz, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	unsigned nrows = 0;

	if (mem == MAP_FAILED)
		return;
	rows = (struct shim_sockrow *)mem;
	T = (struct totals *)(mem + rsz);
	struct out o = { .buf = mem + rsz + tsz, .cap = osz };

	pthread_mutex_lock(&shim_registry_lock);
	add_thread(T, shim_retired());
	for (unsigned i = 0; i < nrrows; i++)
		merge_row(rows, &nrows, ROWS_MAX, &rrows[i]);
	for (struct shim_thread *t = shim_registry; t; t = t->next) {
		if (!t->in_use || !t->counted)
			continue;
		add_thread(T, t);
		for (unsigned i = 0; i <= SHIM_SOCK_SLOTS; i++)
			if (t->rows[i].c.calls || t->rows[i].c.fsyscalls)
				merge_row(rows, &nrows, ROWS_MAX, &t->rows[i]);
	}
	for (struct shim_thread *t = shim_registry; t; t = t->next)
		if (t->in_use && t->counted)
			add_open(rows, nrows, t);
	pthread_mutex_unlock(&shim_registry_lock);
	for (unsigned i = 0; i < nrows; i++) {
		if (shim_cfg.mode == SHIM_METRICS) {
			/* Every call passed through as one system call (metrics.c's fast path
			 * leaves these two to be filled in here). */
			rows[i].c.passed = rows[i].c.calls;
			rows[i].c.syscalls = rows[i].c.calls;
		}
		shim_counts_add(&T->c, &rows[i].c);
	}
	add_reentered(T);

	if (T->any) {
		struct reentry re = { atomic_load(&shim_reentered), atomic_load(&shim_sigqueued),
				      atomic_load(&shim_sigoverflow),
				      atomic_load(&shim_sigunordered) };
		if (shim_cfg.json)
			json(&o, T, rows, nrows, &re);
		else
			text(&o, T, rows, nrows, &re);

		/* A program may have closed stderr and put a data file or a socket at its
		 * number: the report must never go into its data (errfd.c). */
		int fd = shim_stderr_ok() ? 2 : -1;
		bool opened = false;
		if (shim_cfg.stats_path[0]) {
			char path[sizeof(shim_cfg.stats_path) + 32];
			const char *why = NULL;
			int f = -1;
			if (!expand(path, sizeof(path), shim_cfg.stats_path))
				shim_warn("MULTISEND_STATS is longer than %zu bytes once %%p is "
					  "expanded; writing the report here", sizeof(path) - 1);
			else if (!strcmp(path, "/dev/null"))
				fd = -1; /* the one device allowed: no report (measure.sh) */
			else
				f = open_report(path, &why);
			if (f < 0 && why)
				shim_warn("cannot write the report to '%s': %s; writing it here",
					  shim_quote(&(struct shim_quoted){ 0 }, path), why);
			if (f >= 0) {
				fd = f;
				opened = true;
			}
		}
		if (fd >= 0)
			write_all(fd, o.buf, o.len);
		if (opened)
			shim_raw_close(fd);
	}
	munmap(mem, tsz + rsz + osz);
}
