/* SPDX-License-Identifier: MIT */
/*
 * multisend-stat: watch the live counters that libmultisend (ms_config.stats_shm,
 * MULTISEND_STATS_SHM) and the LD_PRELOAD shim publish, while the publisher runs.
 *
 * It maps each file read-only (lib/shm-format.h) and never writes to it, so attaching and
 * detaching cost the publisher nothing: the publisher's writers never wait for a reader.
 * Every interval it copies each slot under the slot's seqlock and shows the values and their
 * rates: a refreshing screen on a terminal, one JSON object per file and interval otherwise.
 *
 * The file belongs to someone else and may be truncated, set up again by a new owner or
 * replaced at any time, so every interval starts by checking it again (its size, the inode the
 * path names, the header), and a SIGBUS from a page that vanished between that check and the
 * copy is caught and counts as "being replaced".
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <multisend.h>

#include "shm-format.h"

#define ME "multisend-stat"
#define PID_DIR "/dev/shm"
#define PID_PREFIX "multisend-"
/* A slot whose writer keeps it busy is tried this often per interval before its previous
 * values are shown again, marked stale. */
#define READ_TRIES 20000
/* A file found all zeros (its writer between ftruncate and the header) is looked at again
 * for this long before it is called "not a live-counter file". */
#define SETUP_WAIT_NS 1000000000ull

enum { EXIT_OK = 0, EXIT_OPEN = 1, EXIT_FORMAT = 2 };

/* What we keep of one slot: the names (written once, before the slot went LIVE) and two
 * copies of the values, the latest and the one before, for the rates. */
struct slot_view {
	bool named;          /* names copied */
	bool have, have_prev; /* values read at least once / twice */
	bool stale;          /* this interval's read did not succeed: values are older */
	uint32_t state;
	uint32_t ncounters, nhists;
	char name[MS_SHM_NAME + 1];
	char counter_name[MS_SHM_COUNTERS][MS_SHM_NAME + 1];
	char hist_name[MS_SHM_HISTS][MS_SHM_NAME + 1];
	uint64_t updated_ns;
	uint64_t counter[MS_SHM_COUNTERS], prev[MS_SHM_COUNTERS];
	uint64_t read_ns, prev_read_ns; /* CLOCK_MONOTONIC of the two reads */
	struct ms_hist hist[MS_SHM_HISTS];
};

struct source {
	const char *arg;
	char path[PATH_MAX];
	int fd;              /* -1: not open */
	const char *map;     /* NULL: not mapped */
	dev_t dev;
	ino_t ino;
	/* the owner we are showing: a change means a new owner, whose values start over */
	int32_t pid;
	uint64_t start_ns;
	char program[sizeof(((struct ms_shm_header *)0)->program) + 1];
	char lib_version[sizeof(((struct ms_shm_header *)0)->lib_version) + 1];
	uint32_t used;
	const char *problem; /* why nothing can be shown right now, or NULL */
	bool owner_gone;     /* the publisher process has exited */
	bool done;           /* gone, and every slot read after it was gone */
	bool said_done;
	unsigned unclosed;   /* slots still LIVE once the owner was gone */
	unsigned stale;      /* slots whose read failed this interval */
	struct slot_view *slots; /* [MS_SHM_SLOTS] */
};

static volatile sig_atomic_t stop;
static sigjmp_buf bus_jmp;
static volatile sig_atomic_t bus_armed;

/* The lower ends of the histogram's buckets, to find the buckets min and max fall in. */
static uint64_t bucket_lo[MS_HIST_BUCKETS];

static void on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

/* A page of the file vanished under us (truncated after the size check): give up this read
 * and let the next interval look at the file again. Any other SIGBUS is a real fault. */
static void on_bus(int sig)
{
	if (bus_armed) {
		bus_armed = 0;
		siglongjmp(bus_jmp, 1);
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

static uint64_t clock_ns(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " ME " [--interval MS] [--count N] [--json] FILE|PID...\n"
		"\n"
		"Show the live counters a libmultisend publisher (ms_config.stats_shm or\n"
		"MULTISEND_STATS_SHM) or the LD_PRELOAD shim (MULTISEND_STATS_SHM) writes in FILE:\n"
		"every counter with its rate per second, and count, p50, p90, p99, p99.9 and max of\n"
		"every histogram with samples. The file is only read; the publisher never notices.\n"
		"\n"
		"  FILE           a live-counter file; several may be given, one per process\n"
		"  PID            a number: " PID_DIR "/" PID_PREFIX "PID (what\n"
		"                 MULTISEND_STATS_SHM=" PID_DIR "/" PID_PREFIX "%%p creates), or else\n"
		"                 the live-counter file in " PID_DIR " whose publisher is PID\n"
		"                 (write ./123 for a file named 123)\n"
		"  --interval MS  time between two reads, 10..3600000 (default 1000)\n"
		"  --count N      stop after N intervals (default: until interrupted, or until\n"
		"                 every publisher has exited and its slots are closed)\n"
		"  --json         one JSON object per file and interval, one per line (the default\n"
		"                 when standard output is not a terminal; on a terminal the screen\n"
		"                 is redrawn every interval)\n"
		"  --help\n"
		"\n"
		"Exit status: 0 done, 1 a file cannot be opened, 2 a file that is not a\n"
		"live-counter file of this version, or a bad argument.\n");
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	uint64_t v = 0;

	if (!*s)
		return -EINVAL;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > (UINT64_MAX - 9) / 10)
			return -EINVAL;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	if (v < lo || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

/* A fixed-size name from the file, which need not be terminated. */
static void copy_name(char *dst, const char *src, size_t n)
{
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* ---- finding and checking the file ------------------------------------------------------ */

static bool all_digits(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return false;
	return true;
}

/* PID: the conventional name, else whichever live-counter file in PID_DIR names that pid. */
static void resolve_pid(struct source *s, const char *arg)
{
	uint64_t pid;
	DIR *d;
	struct dirent *de;

	snprintf(s->path, sizeof(s->path), PID_DIR "/" PID_PREFIX "%s", arg);
	if (access(s->path, F_OK) == 0 || parse_u64(arg, 1, INT32_MAX, &pid) < 0)
		return;
	d = opendir(PID_DIR);
	if (!d)
		return;
	while ((de = readdir(d))) {
		char p[PATH_MAX];
		struct ms_shm_header h;
		struct stat st;
		int fd;

		if (snprintf(p, sizeof(p), PID_DIR "/%s", de->d_name) >= (int)sizeof(p))
			continue;
		fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		if (fd < 0)
			continue;
		bool match = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
			     (size_t)st.st_size == MS_SHM_FILE_SIZE &&
			     pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
			     h.magic == MS_SHM_MAGIC && h.pid == (int32_t)pid;
		close(fd);
		if (match) {
			snprintf(s->path, sizeof(s->path), "%s", p);
			break;
		}
	}
	closedir(d);
}

static void detach(struct source *s)
{
	if (s->map)
		munmap((void *)s->map, MS_SHM_FILE_SIZE);
	if (s->fd >= 0)
		close(s->fd);
	s->map = NULL;
	s->fd = -1;
}

static void forget_values(struct source *s)
{
	memset(s->slots, 0, MS_SHM_SLOTS * sizeof(*s->slots));
	s->used = 0;
	s->owner_gone = s->done = s->said_done = false;
}

/* Open and map the file, and check its header. 0, -EOPEN-like (the system's error, which
 * *why explains), or 1 when the file is not a live-counter file of this version (*why says
 * how). Only the header's fixed part is checked here; the owner's fields are read with
 * the values. */
static int attach(struct source *s, char *why, size_t whylen)
{
	struct stat st;
	const struct ms_shm_header *h;

	detach(s);
	s->fd = open(s->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (s->fd < 0) {
		int e = errno;
		snprintf(why, whylen, "cannot open %s: %s", s->path, strerror(e));
		return -e;
	}
	if (fstat(s->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "%s: not a libmultisend live-counter file (not a regular file)", s->path);
		detach(s);
		return 1;
	}
	s->dev = st.st_dev;
	s->ino = st.st_ino;
	if ((size_t)st.st_size < sizeof(struct ms_shm_header)) {
		snprintf(why, whylen, "%s: not a libmultisend live-counter file (%lld bytes, too short for its "
			 "header)", s->path, (long long)st.st_size);
		detach(s);
		return st.st_size == 0 ? 3 : 1;
	}
	/* Mapped whole even when the file is shorter: only pages inside it are read, after
	 * the size check below (and SIGBUS is caught for one that goes meanwhile). */
	void *m = mmap(NULL, MS_SHM_FILE_SIZE, PROT_READ, MAP_SHARED, s->fd, 0);
	if (m == MAP_FAILED) {
		int e = errno;
		snprintf(why, whylen, "cannot map %s: %s", s->path, strerror(e));
		detach(s);
		return -e;
	}
	s->map = m;
	h = m;

	int rc = 0;
	if (sigsetjmp(bus_jmp, 1)) {
		snprintf(why, whylen, "%s: truncated while being read", s->path);
		detach(s);
		return 3;
	}
	bus_armed = 1;
	uint64_t magic = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE);
	if (magic != MS_SHM_MAGIC) {
		snprintf(why, whylen, "%s: not a libmultisend live-counter file (no magic number)",
			 s->path);
		rc = magic == 0 ? 3 : 1; /* 0: maybe a writer still setting it up */
	} else if (h->version != MS_SHM_VERSION) {
		snprintf(why, whylen, "%s: live-counter file of format version %" PRIu32 "; this "
			 ME " reads version %u", s->path, h->version, MS_SHM_VERSION);
		rc = 1;
	} else if (h->header_size != sizeof(struct ms_shm_header) ||
		   h->slot_size != sizeof(struct ms_shm_slot) || h->nslots != MS_SHM_SLOTS) {
		snprintf(why, whylen, "%s: live-counter file with an unexpected layout (header %"
			 PRIu32 ", %" PRIu32 " slots of %" PRIu32 " bytes; this " ME " reads %zu, "
			 "%u of %zu)", s->path, h->header_size, h->nslots, h->slot_size,
			 sizeof(struct ms_shm_header), MS_SHM_SLOTS, sizeof(struct ms_shm_slot));
		rc = 1;
	} else if ((size_t)st.st_size < MS_SHM_FILE_SIZE) {
		snprintf(why, whylen, "%s: live-counter file cut short (%lld of %zu bytes)",
			 s->path, (long long)st.st_size, MS_SHM_FILE_SIZE);
		rc = 1;
	}
	bus_armed = 0;
	if (rc)
		detach(s);
	return rc;
}

/* ---- reading ---------------------------------------------------------------------------- */

static unsigned bucket_of(uint64_t v)
{
	unsigned lo = 0, hi = MS_HIST_BUCKETS - 1;

	while (lo < hi) { /* the last bucket whose lower end is <= v */
		unsigned mid = (lo + hi + 1) / 2;
		if (bucket_lo[mid] <= v)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* Copy the slot's values into v, all from one moment: the copy counts only if the sequence
 * word was even and the same before and after. Only the buckets from min's to max's are
 * copied (the others are zero by definition), which keeps the copy short and so the chance
 * of overlapping a write small. Returns false when the writer was always busy. */
static bool read_values(const struct ms_shm_slot *s, struct slot_view *v)
{
	uint32_t nc = v->ncounters, nh = v->nhists;

	for (unsigned tries = 0; tries < READ_TRIES; tries++) {
		uint64_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
		if (seq & 1) {
			if (tries % 64 == 63)
				sched_yield();
			continue;
		}
		v->updated_ns = s->updated_ns;
		memcpy(v->counter, s->counter, nc * sizeof(v->counter[0]));
		for (unsigned k = 0; k < nh; k++) {
			struct ms_hist *d = &v->hist[k];
			const struct ms_hist *h = &s->hist[k];
			d->count = h->count;
			d->sum_ns = h->sum_ns;
			d->min_ns = h->min_ns;
			d->max_ns = h->max_ns;
			memset(d->bucket, 0, sizeof(d->bucket));
			if (d->count) {
				unsigned a = bucket_of(d->min_ns), b = bucket_of(d->max_ns);
				if (a <= b)
					memcpy(&d->bucket[a], &h->bucket[a],
					       (b - a + 1) * sizeof(d->bucket[0]));
			}
		}
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) == seq)
			return true;
		if (tries % 64 == 63)
			sched_yield();
	}
	return false;
}

/* Is the process still there? (EPERM: it is, and belongs to someone else.) */
static bool alive(int32_t pid)
{
	return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

/* Look at the file again and read every slot. Sets s->problem when nothing can be shown. */
static void refresh(struct source *s, char *why, size_t whylen)
{
	struct stat st, pst;
	const struct ms_shm_header *h;

	s->problem = NULL;
	s->stale = 0;
	/* Replaced (a new file under the same name): follow the name. */
	if (s->map && stat(s->path, &pst) == 0 && (pst.st_dev != s->dev || pst.st_ino != s->ino))
		detach(s);
	if (!s->map) {
		int rc = attach(s, why, whylen);
		if (rc) {
			s->problem = why;
			return;
		}
	}
	if (fstat(s->fd, &st) < 0 || (size_t)st.st_size < MS_SHM_FILE_SIZE) {
		snprintf(why, whylen, "%s: truncated (%lld bytes): being set up by a new owner?",
			 s->path, (long long)st.st_size);
		s->problem = why;
		detach(s);
		return;
	}
	h = (const struct ms_shm_header *)s->map;
	if (sigsetjmp(bus_jmp, 1)) {
		snprintf(why, whylen, "%s: truncated while being read", s->path);
		s->problem = why;
		detach(s);
		return;
	}
	bus_armed = 1;
	if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != MS_SHM_MAGIC ||
	    h->version != MS_SHM_VERSION || h->header_size != sizeof(*h) ||
	    h->slot_size != sizeof(struct ms_shm_slot) || h->nslots != MS_SHM_SLOTS) {
		bus_armed = 0;
		snprintf(why, whylen, "%s: header changed: being set up by a new owner?", s->path);
		s->problem = why;
		detach(s);
		return;
	}
	if (h->pid != s->pid || h->start_ns != s->start_ns) {
		/* A new owner: its counters start from zero, so rates start over too. */
		forget_values(s);
		s->pid = h->pid;
		s->start_ns = h->start_ns;
		copy_name(s->program, h->program, sizeof(h->program));
		copy_name(s->lib_version, h->lib_version, sizeof(h->lib_version));
	}
	/* The owner's liveness first: a slot read after it is found gone is final. */
	bool gone = !alive(s->pid);
	uint32_t used = __atomic_load_n(&h->used, __ATOMIC_ACQUIRE);
	if (used > MS_SHM_SLOTS)
		used = MS_SHM_SLOTS;
	s->used = used;
	const struct ms_shm_slot *slots =
		(const struct ms_shm_slot *)(s->map + sizeof(struct ms_shm_header));
	unsigned unclosed = 0;
	for (uint32_t i = 0; i < used; i++) {
		const struct ms_shm_slot *src = &slots[i];
		struct slot_view *v = &s->slots[i];
		uint32_t state = __atomic_load_n(&src->state, __ATOMIC_ACQUIRE);

		if (state == MS_SHM_FREE)
			continue;
		if (!v->named) {
			/* Written once before the state left FREE (release), never again. */
			copy_name(v->name, src->name, MS_SHM_NAME);
			v->ncounters = src->ncounters < MS_SHM_COUNTERS ? src->ncounters
									: MS_SHM_COUNTERS;
			v->nhists = src->nhists < MS_SHM_HISTS ? src->nhists : MS_SHM_HISTS;
			for (unsigned k = 0; k < v->ncounters; k++)
				copy_name(v->counter_name[k], src->counter_name[k], MS_SHM_NAME);
			for (unsigned k = 0; k < v->nhists; k++)
				copy_name(v->hist_name[k], src->hist_name[k], MS_SHM_NAME);
			v->named = true;
		}
		v->state = state;
		if (state == MS_SHM_LIVE)
			unclosed++;
		uint64_t keep[MS_SHM_COUNTERS];
		memcpy(keep, v->counter, sizeof(keep));
		if (!read_values(src, v)) {
			v->stale = true;
			s->stale++;
			memcpy(v->counter, keep, sizeof(keep));
			continue;
		}
		v->stale = false;
		if (v->have) {
			memcpy(v->prev, keep, sizeof(keep));
			v->prev_read_ns = v->read_ns;
			v->have_prev = true;
		}
		v->read_ns = clock_ns(CLOCK_MONOTONIC);
		v->have = true;
	}
	bus_armed = 0;
	s->owner_gone = gone;
	s->unclosed = unclosed;
	s->done = gone && !s->stale;
}

/* Per second over the last interval; negative (a counter that went down: never for a
 * counter, so someone reset it) means unknown. */
static double rate(const struct slot_view *v, unsigned k)
{
	if (!v->have_prev || v->read_ns <= v->prev_read_ns || v->counter[k] < v->prev[k])
		return -1;
	return (double)(v->counter[k] - v->prev[k]) * 1e9 / (double)(v->read_ns - v->prev_read_ns);
}

static const char *state_name(uint32_t st)
{
	return st == MS_SHM_LIVE ? "live" : st == MS_SHM_CLOSED ? "closed" : "unknown";
}

/* ---- JSON ------------------------------------------------------------------------------- */

static void json_str(const char *p)
{
	putchar('"');
	for (; *p; p++) {
		unsigned char c = (unsigned char)*p;
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void json_source(const struct source *s, uint64_t now_real)
{
	printf("{\"time\":%.3f,\"file\":", (double)now_real / 1e9);
	json_str(s->path);
	if (s->problem) {
		printf(",\"error\":");
		json_str(s->problem);
		printf("}\n");
		return;
	}
	printf(",\"pid\":%" PRId32 ",\"program\":", s->pid);
	json_str(s->program);
	printf(",\"lib_version\":");
	json_str(s->lib_version);
	printf(",\"uptime_s\":%.3f,\"alive\":%s,\"slots\":[",
	       now_real > s->start_ns ? (double)(now_real - s->start_ns) / 1e9 : 0.0,
	       s->owner_gone ? "false" : "true");
	const char *sep = "";
	for (uint32_t i = 0; i < s->used; i++) {
		const struct slot_view *v = &s->slots[i];
		if (!v->have)
			continue;
		printf("%s{\"slot\":%" PRIu32 ",\"name\":", sep, i);
		json_str(v->name);
		printf(",\"state\":\"%s\",\"stale\":%s,\"updated\":%.3f,\"counters\":{",
		       state_name(v->state), v->stale ? "true" : "false",
		       (double)v->updated_ns / 1e9);
		for (unsigned k = 0; k < v->ncounters; k++) {
			printf("%s", k ? "," : "");
			json_str(v->counter_name[k]);
			printf(":%" PRIu64, v->counter[k]);
		}
		printf("},\"rates\":{");
		for (unsigned k = 0; k < v->ncounters; k++) {
			double r = rate(v, k);
			printf("%s", k ? "," : "");
			json_str(v->counter_name[k]);
			if (r < 0)
				printf(":null");
			else
				printf(":%.1f", r);
		}
		printf("},\"histograms\":{");
		for (unsigned k = 0; k < v->nhists; k++) {
			const struct ms_hist *hh = &v->hist[k];
			printf("%s", k ? "," : "");
			json_str(v->hist_name[k]);
			printf(":{\"count\":%" PRIu64 ",\"mean\":%.1f,\"min\":%" PRIu64
			       ",\"p50\":%" PRIu64 ",\"p90\":%" PRIu64 ",\"p99\":%" PRIu64
			       ",\"p999\":%" PRIu64 ",\"max\":%" PRIu64 "}",
			       hh->count, hh->count ? (double)hh->sum_ns / (double)hh->count : 0.0,
			       hh->min_ns, ms_hist_quantile(hh, 0.5), ms_hist_quantile(hh, 0.9),
			       ms_hist_quantile(hh, 0.99), ms_hist_quantile(hh, 0.999), hh->max_ns);
		}
		printf("}}");
		sep = ",";
	}
	printf("]}\n");
}

/* ---- the screen ------------------------------------------------------------------------- */

/* "812ns", "12.4us", "3.10ms", "1.25s": nanoseconds for a column. */
static const char *fmt_ns(char *buf, size_t len, uint64_t ns)
{
	if (ns < 1000)
		snprintf(buf, len, "%" PRIu64 "ns", ns);
	else if (ns < 1000000)
		snprintf(buf, len, "%.1fus", (double)ns / 1e3);
	else if (ns < 1000000000)
		snprintf(buf, len, "%.2fms", (double)ns / 1e6);
	else
		snprintf(buf, len, "%.2fs", (double)ns / 1e9);
	return buf;
}

static void screen_source(const struct source *s, uint64_t now_real)
{
	if (s->problem) {
		printf("%s\n  %s\n\n", s->path, s->problem);
		return;
	}
	uint64_t up = now_real > s->start_ns ? (now_real - s->start_ns) / 1000000000u : 0;
	printf("%s: pid %" PRId32 " (%s), up %" PRIu64 ":%02" PRIu64 ":%02" PRIu64
	       ", libmultisend %s%s\n", s->path, s->pid, s->program, up / 3600, up / 60 % 60,
	       up % 60, s->lib_version, s->owner_gone ? ", EXITED" : "");
	bool any = false;
	for (uint32_t i = 0; i < s->used; i++) {
		const struct slot_view *v = &s->slots[i];
		char b[6][24];

		if (!v->have)
			continue;
		any = true;
		printf("  slot %" PRIu32 " \"%s\": %s%s\n", i, v->name, state_name(v->state),
		       v->stale ? " (busy: values from an earlier interval)" : "");
		printf("    %-32s %20s %14s\n", "counter", "value", "per second");
		for (unsigned k = 0; k < v->ncounters; k++) {
			double r = rate(v, k);
			if (r < 0)
				printf("    %-32s %20" PRIu64 " %14s\n", v->counter_name[k],
				       v->counter[k], "-");
			else
				printf("    %-32s %20" PRIu64 " %14.1f\n", v->counter_name[k],
				       v->counter[k], r);
		}
		bool hdr = false;
		for (unsigned k = 0; k < v->nhists; k++) {
			const struct ms_hist *hh = &v->hist[k];
			if (!hh->count)
				continue;
			if (!hdr)
				printf("    %-20s %12s %9s %9s %9s %9s %9s\n", "histogram", "count",
				       "p50", "p90", "p99", "p99.9", "max");
			hdr = true;
			printf("    %-20s %12" PRIu64 " %9s %9s %9s %9s %9s\n", v->hist_name[k],
			       hh->count, fmt_ns(b[0], sizeof(b[0]), ms_hist_quantile(hh, 0.5)),
			       fmt_ns(b[1], sizeof(b[1]), ms_hist_quantile(hh, 0.9)),
			       fmt_ns(b[2], sizeof(b[2]), ms_hist_quantile(hh, 0.99)),
			       fmt_ns(b[3], sizeof(b[3]), ms_hist_quantile(hh, 0.999)),
			       fmt_ns(b[4], sizeof(b[4]), hh->max_ns));
		}
		if (!hdr && v->nhists)
			printf("    (no histogram has samples yet)\n");
	}
	if (!any)
		printf("  (no slot in use yet)\n");
	printf("\n");
}

/* ---- main ------------------------------------------------------------------------------- */

static void sleep_until(uint64_t t)
{
	struct timespec ts = { .tv_sec = (time_t)(t / 1000000000u),
			       .tv_nsec = (long)(t % 1000000000u) };
	while (!stop && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "interval", required_argument, NULL, 'i' },
		{ "count", required_argument, NULL, 'c' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	uint64_t interval_ms = 1000, count = 0;
	bool json = false;
	int c;

	while ((c = getopt_long(argc, argv, "i:c:jh", opts, NULL)) != -1) {
		switch (c) {
		case 'i':
			if (parse_u64(optarg, 10, 3600000, &interval_ms) < 0) {
				fprintf(stderr, ME ": --interval must be a whole number of "
					"milliseconds from 10 to 3600000, not '%s'\n", optarg);
				return EXIT_FORMAT;
			}
			break;
		case 'c':
			if (parse_u64(optarg, 1, UINT32_MAX, &count) < 0) {
				fprintf(stderr, ME ": --count must be a whole number from 1 to %u, "
					"not '%s'\n", UINT32_MAX, optarg);
				return EXIT_FORMAT;
			}
			break;
		case 'j': json = true; break;
		case 'h': usage(stdout); return EXIT_OK;
		default: usage(stderr); return EXIT_FORMAT;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_FORMAT;
	}
	bool screen = !json && isatty(STDOUT_FILENO);

	for (unsigned i = 0; i < MS_HIST_BUCKETS; i++) {
		uint64_t lo, hi;
		if (ms_hist_bucket_range(i, &lo, &hi) < 0) {
			fprintf(stderr, ME ": libmultisend has no histogram bucket %u\n", i);
			return EXIT_FORMAT;
		}
		bucket_lo[i] = lo;
	}

	size_t n = (size_t)(argc - optind);
	struct source *src = calloc(n, sizeof(*src));
	char (*why)[PATH_MAX + 256] = calloc(n, sizeof(*why));
	int status = EXIT_OK;
	if (!src || !why) {
		perror(ME);
		status = EXIT_OPEN;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		src[i].fd = -1;
	struct sigaction bus = { .sa_handler = on_bus, .sa_flags = SA_NODEFER };
	sigaction(SIGBUS, &bus, NULL);

	/* Every file must be one to watch before anything is shown. A file whose header is
	 * still zeros may have a writer half way through setting it up: it gets a second. */
	for (size_t i = 0; i < n; i++) {
		struct source *s = &src[i];
		const char *arg = argv[optind + (int)i];

		s->arg = arg;
		s->pid = -1;
		s->slots = calloc(MS_SHM_SLOTS, sizeof(*s->slots));
		if (!s->slots) {
			perror(ME);
			status = EXIT_OPEN;
			goto out;
		}
		if (all_digits(arg))
			resolve_pid(s, arg);
		else
			snprintf(s->path, sizeof(s->path), "%s", arg);
		uint64_t deadline = clock_ns(CLOCK_MONOTONIC) + SETUP_WAIT_NS;
		int rc;
		while ((rc = attach(s, why[i], sizeof(why[i]))) == 3 && !stop &&
		       clock_ns(CLOCK_MONOTONIC) < deadline)
			usleep(20000);
		if (rc) {
			fprintf(stderr, ME ": %s\n", why[i]);
			if (rc > 0)
				status = EXIT_FORMAT;
			else if (status == EXIT_OK)
				status = EXIT_OPEN;
		}
	}
	if (status != EXIT_OK)
		goto out;

	struct sigaction sa = { .sa_handler = on_stop }; /* no SA_RESTART: the sleep ends */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	/* A first read, so that the first report has rates over a whole interval. */
	for (size_t i = 0; i < n; i++)
		refresh(&src[i], why[i], sizeof(why[i]));
	uint64_t next = clock_ns(CLOCK_MONOTONIC);
	for (uint64_t round = 0; !stop && (!count || round < count); round++) {
		bool all_done = true;

		next += interval_ms * 1000000u;
		sleep_until(next);
		if (stop)
			break;
		uint64_t now_real = clock_ns(CLOCK_REALTIME);
		if (screen) {
			time_t t = (time_t)(now_real / 1000000000u);
			struct tm tm;
			char when[32];
			strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tm));
			/* home and clear: redraw in place */
			printf("\033[H\033[2J" ME " (libmultisend %s)  %s  every %" PRIu64
			       " ms  (Ctrl-C quits)\n\n", ms_version_string(), when, interval_ms);
		}
		for (size_t i = 0; i < n; i++) {
			struct source *s = &src[i];
			refresh(s, why[i], sizeof(why[i]));
			if (screen)
				screen_source(s, now_real);
			else
				json_source(s, now_real);
			if (!s->problem && s->done && !s->said_done) {
				if (s->unclosed)
					fprintf(stderr, ME ": %s: publisher %" PRId32 " (%s) is gone, "
						"leaving %u slot(s) open: it did not exit cleanly\n",
						s->path, s->pid, s->program, s->unclosed);
				else
					fprintf(stderr, ME ": %s: publisher %" PRId32 " (%s) has exited "
						"and closed all its slots\n", s->path, s->pid,
						s->program);
				s->said_done = true;
			}
			all_done &= !s->problem && s->done;
		}
		if (fflush(stdout) == EOF) {
			fprintf(stderr, ME ": writing the output: %s\n", strerror(errno));
			status = EXIT_OPEN;
			break;
		}
		if (all_done && !count)
			break;
	}
out:
	for (size_t i = 0; src && i < n; i++) {
		detach(&src[i]);
		free(src[i].slots);
	}
	free(src);
	free(why);
	return status;
}
