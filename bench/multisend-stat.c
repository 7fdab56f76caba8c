/* SPDX-License-Identifier: MIT */
/*
 * multisend-stat: watch the live counters that libmultisend (ms_config.stats_shm,
 * MULTISEND_STATS_SHM) and the LD_PRELOAD shim publish, while the publisher runs.
 *
 * It maps each file read-only (lib/obs/shm-format.h) and never writes to it, so attaching and
 * detaching cost the publisher nothing: the publisher's writers never wait for a reader.
 * Every interval it copies each slot under the slot's seqlock and shows the values and their
 * rates: a refreshing screen on a terminal, one JSON object per file and interval otherwise.
 * Or, for a monitoring system, every counter and histogram in the Prometheus / OpenMetrics text
 * format: once on stdout (--openmetrics), or to every GET /metrics of a small HTTP server
 * (--listen), read afresh for each request.
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
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <multisend.h>

#include "stat-file.h"

#define ME "multisend-stat"
#define PID_DIR "/dev/shm"
#define PID_PREFIX "multisend-"
/* A slot whose writer keeps it busy is tried this often per interval before its previous
 * values are shown again, marked stale. */
#define READ_TRIES 20000
/* A file found all zeros (its writer between ftruncate and the header) is looked at again
 * for this long before it is called "not a live-counter file". */
#define SETUP_WAIT_NS 1000000000ull
/* The time one file's slots may take to read (a sequence word kept odd costs this at most),
 * and one scrape's files: past it, the files left are skipped (reason "budget"). Both well
 * under a second a file, so that SIGTERM ends --listen within one. */
#define FILE_BUDGET_NS 250000000ull
#define SCRAPE_BUDGET_NS 3000000000ull

enum { EXIT_OK = 0, EXIT_OPEN = 1, EXIT_FORMAT = 2 };

static volatile sig_atomic_t stop;
static sigjmp_buf bus_jmp;
static volatile sig_atomic_t bus_armed;

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
		"usage: " ME " [--interval MS] [--count N] [--json] [--counters A,B,...]\n"
		"       FILE|PID...\n"
		"       " ME " --openmetrics [--owner USER]... [--all-owners] [FILE|PID...]\n"
		"       " ME " --listen [ADDR:]PORT [--owner USER]... [--all-owners]\n"
		"       [FILE|PID...]\n"
		"\n"
		"Show the live counters a libmultisend publisher (ms_config.stats_shm or\n"
		"MULTISEND_STATS_SHM) or the LD_PRELOAD shim (MULTISEND_STATS_SHM) writes in FILE:\n"
		"its counters with their rates, and count, percentiles and max of every histogram\n"
		"with samples, over the whole run and the last interval. The file is only read;\n"
		"the publisher never notices.\n"
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
		"                 is redrawn every interval, sized to the terminal)\n"
		"  --counters A,B,...  the screen shows these counters, in this order (default:\n"
		"                 the non-zero ones)\n"
		"  --openmetrics  print every counter and histogram once, in the OpenMetrics\n"
		"                 text format, and exit; with no FILE|PID, of every live-counter\n"
		"                 file in " PID_DIR " that has a live publisher and belongs to\n"
		"                 this user (a FILE or PID named is read whoever owns it)\n"
		"  --owner USER   the scan also reads USER's files (a name or a uid; repeatable)\n"
		"  --all-owners   the scan reads every user's files\n"
		"  --listen [ADDR:]PORT  serve the same at http://ADDR:PORT/metrics\n"
		"                 (OpenMetrics when the request's Accept asks for it, else\n"
		"                 Prometheus text 0.0.4), read afresh for every request; ADDR\n"
		"                 defaults to 127.0.0.1 ([::1] for IPv6); PORT 0 takes a free\n"
		"                 port; the address is printed on stderr\n"
		"  --version      the versions of this program's format and of the library\n"
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

/* The process pid as /proc shows it: its effective and filesystem uids and its start time
 * (clock ticks after boot). false: no such process (or no /proc), or one that has exited. */
static bool proc_info(int32_t pid, uid_t *euid, uid_t *fsuid, uint64_t *start)
{
	char path[64], buf[4096];
	FILE *f;
	bool got = false;

	if (pid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%" PRId32 "/status", pid);
	if (!(f = fopen(path, "re")))
		return false;
	bool dead = false;
	while (fgets(buf, sizeof(buf), f)) {
		unsigned long r, e, sv, fs;
		char st;
		if (sscanf(buf, "State: %c", &st) == 1 && (st == 'Z' || st == 'X'))
			dead = true; /* exited, not yet reaped */
		if (sscanf(buf, "Uid: %lu %lu %lu %lu", &r, &e, &sv, &fs) == 4) {
			*euid = (uid_t)e;
			*fsuid = (uid_t)fs;
			got = true;
		}
	}
	fclose(f);
	if (dead)
		return false;
	*start = 0;
	snprintf(path, sizeof(path), "/proc/%" PRId32 "/stat", pid);
	if (got && (f = fopen(path, "re"))) {
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		buf[n] = '\0';
		char *q = strrchr(buf, ')');
		for (int field = 2; q && field < 22; field++)
			q = strchr(q + 1, ' ');
		if (q)
			*start = strtoull(q + 1, NULL, 10);
		fclose(f);
	}
	return got;
}

enum owner { OWNER_OK, OWNER_NONE, OWNER_OTHER_USER, OWNER_OTHER_PROCESS };

/* Is process pid the one that the file (owned by uid, naming a process started at pid_start)
 * says published it? *puid gets the process's uid. */
static enum owner owner_of(int32_t pid, uint64_t pid_start, uid_t uid, uid_t *puid)
{
	uid_t euid, fsuid;
	uint64_t start;

	if (!proc_info(pid, &euid, &fsuid, &start))
		return OWNER_NONE;
	*puid = euid;
	if (uid != euid && uid != fsuid)
		return OWNER_OTHER_USER;
	if (pid_start && start && pid_start != start)
		return OWNER_OTHER_PROCESS; /* the pid was used again */
	return OWNER_OK;
}

/* Does some open file description hold a write lock on the file: has it a live owner
 * (lib/obs/shm-format.h)? Only a test: a reader never takes a lock. */
static bool write_locked(int fd)
{
	struct flock l = { .l_type = F_RDLCK, .l_whence = SEEK_SET };
	return fcntl(fd, F_OFD_GETLK, &l) == 0 && l.l_type != F_UNLCK;
}

/* PID: the conventional name, else whichever live-counter file in PID_DIR names that pid and
 * belongs to that process's user (for a process that is gone, one of our own user's). */
static void resolve_pid(struct source *s, const char *arg)
{
	uint64_t pid;
	DIR *d;
	struct dirent *de;
	char fallback[PATH_MAX] = "";

	snprintf(s->path, sizeof(s->path), PID_DIR "/" PID_PREFIX "%s", arg);
	if (parse_u64(arg, 1, INT32_MAX, &pid) < 0)
		return;
	s->want_pid = (int32_t)pid;
	if (access(s->path, F_OK) == 0)
		return;
	d = opendir(PID_DIR);
	if (!d)
		return;
	while ((de = readdir(d))) {
		char p[PATH_MAX];
		struct ms_shm_header h;
		struct stat st;
		uid_t puid;
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
		if (!match)
			continue;
		enum owner o = owner_of(h.pid, h.pid_start, st.st_uid, &puid);
		if (o == OWNER_OK) {
			snprintf(s->path, sizeof(s->path), "%s", p);
			break;
		}
		/* A process that is gone: its user is unknown, so only a file of our own user's
		 * (a publisher of ours that has exited) stands in for it, failing a live one. */
		if (o == OWNER_NONE && st.st_uid == geteuid() && !fallback[0])
			snprintf(fallback, sizeof(fallback), "%s", p);
	}
	closedir(d);
	if (access(s->path, F_OK) != 0 && fallback[0])
		snprintf(s->path, sizeof(s->path), "%s", fallback);
}

/* The file's owner, and its user name for the owner label (looked up again only when the
 * owner changes; none: the label shows the uid). */
static void set_owner(struct source *s, uid_t uid)
{
	if (s->uid == uid && s->owner[0])
		return;
	s->uid = uid;
	s->owner[0] = '\0';
	struct passwd pw, *r = NULL;
	char buf[4096];
	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &r) == 0 && r && r->pw_name)
		snprintf(s->owner, sizeof(s->owner), "%s", r->pw_name);
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

/* A source given as a PID whose file belongs to another user than that process's: not its
 * live counters (anyone may write a file under that name). 1 with *why set, or 0. */
static int check_pid_owner(struct source *s, int32_t file_pid, uint64_t pid_start, char *why,
			   size_t whylen)
{
	uid_t puid = 0;
	char e[4 * PATH_MAX];

	if (!s->want_pid)
		return 0;
	if (owner_of(s->want_pid, file_pid == s->want_pid ? pid_start : 0, s->uid, &puid) ==
	    OWNER_OTHER_USER) {
		snprintf(why, whylen, "%s belongs to uid %lu, not to the user of process %" PRId32
			 " (uid %lu): not its live counters",
			 stat_escape(e, sizeof(e), s->path, false), (unsigned long)s->uid,
			 s->want_pid, (unsigned long)puid);
		return 1;
	}
	return 0;
}

/* Open and map the file, and check its header. 0, -EOPEN-like (the system's error, which
 * *why explains), 1 when the file is not a live-counter file of this version (*why says
 * how), 3 when it may still be being set up. Only the header's fixed part is checked here;
 * the owner's fields are read with the values. */
static int attach(struct source *s, char *why, size_t whylen)
{
	struct stat st;
	char e[4 * PATH_MAX];

	detach(s);
	s->fd = open(s->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (s->fd < 0) {
		int err = errno;
		snprintf(why, whylen, "cannot open %s: %s", stat_escape(e, sizeof(e), s->path, false),
			 strerror(err));
		return -err;
	}
	if (fstat(s->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "%s: not a libmultisend live-counter file (not a regular file)",
			 stat_escape(e, sizeof(e), s->path, false));
		detach(s);
		return 1;
	}
	s->dev = st.st_dev;
	s->ino = st.st_ino;
	set_owner(s, st.st_uid);
	if ((size_t)st.st_size < sizeof(struct ms_shm_header)) {
		int rc = stat_check_header(s, NULL, (size_t)st.st_size, why, whylen);
		detach(s);
		return rc;
	}
	/* Mapped whole even when the file is shorter: only pages inside it are read, after
	 * the size check (and SIGBUS is caught for one that goes meanwhile). */
	void *m = mmap(NULL, MS_SHM_FILE_SIZE, PROT_READ, MAP_SHARED, s->fd, 0);
	if (m == MAP_FAILED) {
		int err = errno;
		snprintf(why, whylen, "cannot map %s: %s", stat_escape(e, sizeof(e), s->path, false),
			 strerror(err));
		detach(s);
		return -err;
	}
	s->map = m;

	int rc;
	if (sigsetjmp(bus_jmp, 1)) {
		snprintf(why, whylen, "%s: truncated while being read",
			 stat_escape(e, sizeof(e), s->path, false));
		detach(s);
		return 3;
	}
	bus_armed = 1;
	size_t len = (size_t)st.st_size < MS_SHM_FILE_SIZE ? (size_t)st.st_size : MS_SHM_FILE_SIZE;
	rc = stat_check_header(s, (const unsigned char *)m, len, why, whylen);
	const struct ms_shm_header *h = m;
	if (!rc)
		rc = check_pid_owner(s, h->pid, h->pid_start, why, whylen);
	bus_armed = 0;
	if (rc)
		detach(s);
	return rc;
}

/* ---- reading ---------------------------------------------------------------------------- */

/* Look at the file again and read every slot. Sets s->problem when nothing can be shown. */
static void refresh(struct source *s, char *why, size_t whylen)
{
	struct stat st, pst;
	char e[4 * PATH_MAX];

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
			 stat_escape(e, sizeof(e), s->path, false), (long long)st.st_size);
		s->problem = why;
		detach(s);
		return;
	}
	set_owner(s, st.st_uid);
	const struct ms_shm_header *h = (const struct ms_shm_header *)s->map;
	if (sigsetjmp(bus_jmp, 1)) {
		snprintf(why, whylen, "%s: truncated while being read",
			 stat_escape(e, sizeof(e), s->path, false));
		s->problem = why;
		detach(s);
		return;
	}
	bus_armed = 1;
	/* The owner's liveness first: a slot read after it is found gone is final. Alive: the
	 * file has a live owner (a write lock, which only its owner or root can take). That
	 * alone: the process the file names may be out of our sight (another PID namespace,
	 * /proc mounted hidepid) and alive all the same. Whether /proc shows that process (there,
	 * the one that made the file, running as the file's owner) is said apart (pid_verified),
	 * and used to resolve a PID argument and to word messages, never for liveness. */
	int32_t pid = h->pid;
	uint64_t pid_start = h->pid_start;
	uid_t puid;
	bool gone = !write_locked(s->fd);
	s->deadline_ns = clock_ns(CLOCK_MONOTONIC) + FILE_BUDGET_NS;
	s->pid_verified = owner_of(pid, pid_start, st.st_uid, &puid) == OWNER_OK;
	int rc = check_pid_owner(s, pid, pid_start, why, whylen);
	if (!rc)
		rc = stat_read(s, (const unsigned char *)s->map, MS_SHM_FILE_SIZE, READ_TRIES,
			       clock_ns(CLOCK_MONOTONIC), why, whylen);
	bus_armed = 0;
	if (rc) {
		s->problem = why;
		detach(s);
		return;
	}
	s->owner_gone = gone;
	s->done = gone && !s->stale;
}

/* ---- metrics ------------------------------------------------------------------------------ */

/* At most this many files found in PID_DIR are exported by one scrape. */
#define DISCOVER_MAX 256

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static struct source *source_new(void)
{
	struct source *s = calloc(1, sizeof(*s));
	if (s && !(s->slots = calloc(MS_SHM_SLOTS, sizeof(*s->slots)))) {
		free(s);
		s = NULL;
	}
	if (s) {
		s->fd = -1;
		s->pid = -1;
	}
	return s;
}

static void source_free(struct source *s)
{
	if (!s)
		return;
	detach(s);
	free(s->slots);
	free(s);
}

/* Whose files a scan reads (--owner, --all-owners): by default only the invoking user's,
 * root's included: a file in PID_DIR may be written by anyone, and names any pid and program. */
#define OWNERS_MAX 64
static uid_t owners[OWNERS_MAX];
static size_t nowners;
static bool all_owners;

static bool owner_wanted(uid_t uid)
{
	if (all_owners || uid == geteuid())
		return true;
	for (size_t i = 0; i < nowners; i++)
		if (owners[i] == uid)
			return true;
	return false;
}

/* Files left out of the metrics since this program started, by reason (stat-file.h). */
static uint64_t skipped[STAT_SKIP_N];

/* Every live-counter file in PID_DIR whose owner is alive (holds its write lock) and is one
 * of the owners asked for, whatever its name, in name order, read now: *out gets them (the
 * caller frees each with source_free). Files come and go while we look: one that vanishes or
 * fails a check is left out. Each file is hostile input: another owner's is never read (its
 * size and owner come from fstat), one whose slots do not settle within FILE_BUDGET_NS is
 * left out, and past SCRAPE_BUDGET_NS (or on SIGTERM) the rest are. */
static size_t discover(struct source ***out)
{
	struct dirent **de = NULL;
	int nde = scandir(PID_DIR, &de, NULL, by_name);
	size_t n = 0;
	char why[PATH_MAX + 256];
	uint64_t end = clock_ns(CLOCK_MONOTONIC) + SCRAPE_BUDGET_NS;

	*out = NULL;
	if (nde < 0)
		return 0;
	struct source **v = calloc((size_t)nde + 1, sizeof(*v));
	for (int i = 0; i < nde; i++) {
		char p[PATH_MAX];
		struct ms_shm_header h;
		struct stat st;
		int fd;

		if (!v || stop || n >= DISCOVER_MAX ||
		    snprintf(p, sizeof(p), PID_DIR "/%s", de[i]->d_name) >= (int)sizeof(p))
			goto next;
		fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		if (fd < 0)
			goto next;
		if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
		    (size_t)st.st_size != MS_SHM_FILE_SIZE) {
			close(fd);
			goto next;
		}
		if (!owner_wanted(st.st_uid)) { /* a live-counter file's size: counted unread */
			close(fd);
			skipped[STAT_SKIP_OWNER]++;
			goto next;
		}
		bool match = pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
			     h.magic == MS_SHM_MAGIC && h.version == MS_SHM_VERSION &&
			     write_locked(fd);
		close(fd);
		if (!match)
			goto next;
		if (clock_ns(CLOCK_MONOTONIC) >= end) {
			skipped[STAT_SKIP_BUDGET]++;
			goto next;
		}
		struct source *s = source_new();
		if (!s)
			goto next;
		snprintf(s->path, sizeof(s->path), "%s", p);
		s->arg = s->path;
		refresh(s, why, sizeof(why));
		/* A slot that never settled (its tries or the file's time ran out): a writer's
		 * update takes nanoseconds, so the file is hostile or stuck. */
		if (!s->problem && (s->over_time || s->stale)) {
			skipped[STAT_SKIP_BUSY]++;
			source_free(s);
		} else if (s->problem) { /* replaced or gone meanwhile */
			source_free(s);
		} else {
			v[n++] = s;
		}
	next:
		free(de[i]);
	}
	free(de);
	*out = v;
	return n;
}

/* One scrape into out: the sources given (read again now), or else every live file found. */
static void scrape(FILE *out, struct source *src, size_t n, bool om)
{
	char why[PATH_MAX + 256];

	if (n) {
		const struct source **v = calloc(n, sizeof(*v));
		for (size_t i = 0; i < n; i++) {
			refresh(&src[i], why, sizeof(why));
			if (src[i].problem)
				fprintf(stderr, ME ": %s\n", src[i].problem);
			if (v)
				v[i] = &src[i];
		}
		if (v)
			stat_metrics(out, v, n, om, skipped);
		free(v);
		return;
	}
	struct source **found;
	size_t nf = discover(&found);
	stat_metrics(out, (const struct source *const *)found, nf, om, skipped);
	for (size_t i = 0; i < nf; i++)
		source_free(found[i]);
	free(found);
}

/* ---- the HTTP server ------------------------------------------------------------------------ */

/* One client at a time is served (a scrape reads files: quick), but many may be connected:
 * each has a bounded request buffer and one deadline for the whole exchange, so a client that
 * sends slowly, never, too much or garbage costs a slot for HTTP_TIMEOUT_MS at most, and when
 * every slot is taken the oldest connection is dropped for a new one. */
#define HTTP_CONNS 32
#define HTTP_REQ_MAX 8192
#define HTTP_TIMEOUT_MS 10000u
#define HTTP_DRAIN_MS 1000u

enum conn_state { C_FREE, C_READ, C_WRITE, C_DRAIN };

struct conn {
	enum conn_state state;
	int fd;
	uint64_t deadline; /* CLOCK_MONOTONIC ns */
	uint64_t since;    /* accepted: the oldest goes first when all are taken */
	size_t got;
	char req[HTTP_REQ_MAX + 1];
	char *resp;
	size_t len, sent;
};

static void conn_close(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->resp);
	c->resp = NULL;
	c->fd = -1;
	c->state = C_FREE;
}

static bool ieq_prefix(const char *s, const char *prefix)
{
	for (; *prefix; s++, prefix++)
		if ((*s | 0x20) != (*prefix | 0x20) || !*s)
			return false;
	return true;
}

/* Does the request's Accept header ask for OpenMetrics (and not with q=0)? */
static bool wants_openmetrics(const char *req)
{
	for (const char *l = strchr(req, '\n'); l; l = strchr(l, '\n')) {
		l++;
		if (!ieq_prefix(l, "accept:"))
			continue;
		const char *end = strchr(l, '\n');
		size_t n = end ? (size_t)(end - l) : strlen(l);
		char v[HTTP_REQ_MAX + 1];
		memcpy(v, l, n);
		v[n] = '\0';
		for (char *p = v; *p; p++)
			*p = (char)(*p >= 'A' && *p <= 'Z' ? *p | 0x20 : *p);
		char *om = strstr(v, "application/openmetrics-text");
		if (!om)
			continue;
		char *next = strchr(om, ',');
		if (next)
			*next = '\0';
		char *q = strstr(om, "q=");
		return !(q && strtod(q + 2, NULL) <= 0);
	}
	return false;
}

static void respond(struct conn *c, int code, const char *reason, const char *type,
		    const char *extra, const char *body, size_t blen, bool head)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (f) {
		fprintf(f, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
			"Connection: close\r\n\r\n", code, reason, type, blen, extra);
		if (!head)
			fwrite(body, 1, blen, f);
		if (fclose(f) != 0) {
			free(buf);
			buf = NULL;
		}
	}
	if (!buf) {
		conn_close(c);
		return;
	}
	c->resp = buf;
	c->len = len;
	c->sent = 0;
	c->state = C_WRITE;
}

static void text_response(struct conn *c, int code, const char *reason, const char *extra,
			  const char *text)
{
	respond(c, code, reason, "text/plain; charset=utf-8", extra, text, strlen(text), false);
}

/* A whole request head is in c->req: answer it. */
static void handle(struct conn *c, struct source *src, size_t n)
{
	char method[16], target[HTTP_REQ_MAX], version[16];
	char *eol = strpbrk(c->req, "\r\n");
	size_t l1 = eol ? (size_t)(eol - c->req) : strlen(c->req);
	char first[HTTP_REQ_MAX + 1];

	memcpy(first, c->req, l1);
	first[l1] = '\0';
	if (sscanf(first, "%15s %8191s %15s", method, target, version) != 3 ||
	    strncmp(version, "HTTP/1.", 7) != 0) {
		text_response(c, 400, "Bad Request", "", "bad request\n");
		return;
	}
	bool head = !strcmp(method, "HEAD");
	if (strcmp(method, "GET") && !head) {
		text_response(c, 405, "Method Not Allowed", "Allow: GET, HEAD\r\n",
			      "only GET /metrics\n");
		return;
	}
	char *q = strchr(target, '?');
	if (q)
		*q = '\0';
	if (strcmp(target, "/metrics")) {
		text_response(c, 404, "Not Found", "", "not found: the metrics are at /metrics\n");
		return;
	}
	bool om = wants_openmetrics(c->req);
	char *body = NULL;
	size_t blen = 0;
	FILE *f = open_memstream(&body, &blen);
	if (!f) {
		text_response(c, 500, "Internal Server Error", "", "out of memory\n");
		return;
	}
	scrape(f, src, n, om);
	if (fclose(f) != 0) {
		free(body);
		text_response(c, 500, "Internal Server Error", "", "out of memory\n");
		return;
	}
	respond(c, 200, "OK", om ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
				 : "text/plain; version=0.0.4; charset=utf-8",
		"", body, blen, head);
	free(body);
}

/* "PORT", "ADDR:PORT", "[IPV6]:PORT" (ADDR a number or a name): a listening socket, or -1
 * with the reason on stderr. */
static int listen_on(const char *arg)
{
	char host[256] = "127.0.0.1", port[16];
	const char *colon;

	if (all_digits(arg)) {
		snprintf(port, sizeof(port), "%s", arg);
	} else if (arg[0] == '[') {
		const char *end = strchr(arg, ']');
		if (!end || end[1] != ':' || (size_t)(end - arg - 1) >= sizeof(host))
			goto bad;
		memcpy(host, arg + 1, (size_t)(end - arg - 1));
		host[end - arg - 1] = '\0';
		snprintf(port, sizeof(port), "%s", end + 2);
	} else if ((colon = strrchr(arg, ':')) && colon > arg &&
		   (size_t)(colon - arg) < sizeof(host) &&
		   !memchr(arg, ':', (size_t)(colon - arg))) {
		memcpy(host, arg, (size_t)(colon - arg));
		host[colon - arg] = '\0';
		snprintf(port, sizeof(port), "%s", colon + 1);
	} else {
		goto bad;
	}
	uint64_t pn;
	if (parse_u64(port, 0, 65535, &pn) < 0)
		goto bad;

	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV }, *ai, *a;
	int rc = getaddrinfo(host, port, &hints, &ai);
	if (rc) {
		fprintf(stderr, ME ": --listen %s: %s\n", arg, gai_strerror(rc));
		return -1;
	}
	int fd = -1, err = 0;
	for (a = ai; a; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			err = errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &(int){ 1 }, sizeof(int));
		if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 64) == 0)
			break;
		err = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd < 0) {
		fprintf(stderr, ME ": --listen %s: %s\n", arg, strerror(err));
		return -1;
	}
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char a_s[INET6_ADDRSTRLEN] = "?";
	unsigned p = 0;
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		inet_ntop(AF_INET6, &s6->sin6_addr, a_s, sizeof(a_s));
		p = ntohs(s6->sin6_port);
		fprintf(stderr, ME ": serving http://[%s]:%u/metrics\n", a_s, p);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		inet_ntop(AF_INET, &s4->sin_addr, a_s, sizeof(a_s));
		p = ntohs(s4->sin_port);
		fprintf(stderr, ME ": serving http://%s:%u/metrics\n", a_s, p);
	}
	return fd;
bad:
	fprintf(stderr, ME ": --listen wants PORT, ADDR:PORT or [IPV6]:PORT with PORT 0..65535, "
		"not '%s'\n", arg);
	return -1;
}

/* Serve until SIGINT or SIGTERM. */
static int serve(int lfd, struct source *src, size_t n)
{
	static struct conn conns[HTTP_CONNS];
	struct pollfd pfd[HTTP_CONNS + 1];

	for (unsigned i = 0; i < HTTP_CONNS; i++)
		conns[i].fd = -1;
	while (!stop) {
		uint64_t now = clock_ns(CLOCK_MONOTONIC), wake = now + 60000000000ull;
		unsigned np = 1;
		unsigned map[HTTP_CONNS + 1];

		pfd[0] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		for (unsigned i = 0; i < HTTP_CONNS; i++) {
			struct conn *c = &conns[i];
			if (c->state == C_FREE)
				continue;
			if (now >= c->deadline) {
				conn_close(c); /* too slow: dropped */
				continue;
			}
			if (c->deadline < wake)
				wake = c->deadline;
			map[np] = i;
			pfd[np].fd = c->fd;
			pfd[np++].events = c->state == C_WRITE ? POLLOUT : POLLIN;
		}
		int timeout = (int)((wake - now) / 1000000u) + 1;
		int rc = poll(pfd, np, timeout);
		if (rc < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, ME ": poll: %s\n", strerror(errno));
			return EXIT_OPEN;
		}
		now = clock_ns(CLOCK_MONOTONIC);
		for (unsigned k = 1; k < np; k++) {
			struct conn *c = &conns[map[k]];
			if (!pfd[k].revents)
				continue;
			if (c->state == C_READ) {
				ssize_t r = recv(c->fd, c->req + c->got, HTTP_REQ_MAX - c->got,
						 MSG_DONTWAIT);
				if (r <= 0) {
					if (r == 0 || (errno != EAGAIN && errno != EINTR))
						conn_close(c);
					continue;
				}
				c->got += (size_t)r;
				c->req[c->got] = '\0';
				if (memchr(c->req, '\0', c->got)) {
					text_response(c, 400, "Bad Request", "", "bad request\n");
				} else if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n")) {
					handle(c, src, n);
				} else if (c->got == HTTP_REQ_MAX) {
					text_response(c, 431, "Request Header Fields Too Large", "",
						      "request too large\n");
				}
			} else if (c->state == C_WRITE) {
				ssize_t w = send(c->fd, c->resp + c->sent, c->len - c->sent,
						 MSG_DONTWAIT | MSG_NOSIGNAL);
				if (w < 0) {
					if (errno != EAGAIN && errno != EINTR)
						conn_close(c);
					continue;
				}
				c->sent += (size_t)w;
				if (c->sent == c->len) {
					/* Done: read what the client still sends until it
					 * closes, so that closing does not reset the connection
					 * under the response (it may have sent a body we never
					 * read). */
					shutdown(c->fd, SHUT_WR);
					free(c->resp);
					c->resp = NULL;
					c->state = C_DRAIN;
					if (c->deadline > now + HTTP_DRAIN_MS * 1000000ull)
						c->deadline = now + HTTP_DRAIN_MS * 1000000ull;
				}
			} else if (c->state == C_DRAIN) {
				char junk[4096];
				ssize_t r = recv(c->fd, junk, sizeof(junk), MSG_DONTWAIT);
				if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
					conn_close(c);
			}
		}
		if (pfd[0].revents & POLLIN) {
			for (;;) {
				int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
				if (fd < 0)
					break;
				struct conn *c = NULL, *oldest = NULL;
				for (unsigned i = 0; i < HTTP_CONNS && !c; i++) {
					if (conns[i].state == C_FREE)
						c = &conns[i];
					else if (!oldest || conns[i].since < oldest->since)
						oldest = &conns[i];
				}
				if (!c) { /* all taken: the oldest makes room */
					conn_close(oldest);
					c = oldest;
				}
				c->fd = fd;
				c->state = C_READ;
				c->got = 0;
				c->req[0] = '\0';
				c->since = now;
				c->deadline = now + HTTP_TIMEOUT_MS * 1000000ull;
			}
		}
	}
	for (unsigned i = 0; i < HTTP_CONNS; i++)
		if (conns[i].state != C_FREE)
			conn_close(&conns[i]);
	return EXIT_OK;
}

/* ---- main ------------------------------------------------------------------------------- */

/* The JSON interface's version (docs/json.md): the first member of every object this program
 * prints. It rises only when a member changes meaning or goes away; members may be added
 * without it. The object itself is stat_json's (stat-file.c); the member goes in front. */
#define STAT_JSON_SCHEMA_VERSION 1

static void print_json(const struct source *s, uint64_t now_real)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&buf, &len);
	if (mem) {
		stat_json(mem, s, now_real);
		if (fclose(mem) == 0 && len > 1 && buf[0] == '{') {
			printf("{\"schema_version\":%d,%s", STAT_JSON_SCHEMA_VERSION, buf + 1);
			free(buf);
			return;
		}
	}
	free(buf);
	fprintf(stderr, ME ": cannot format a JSON line (out of memory)\n");
	exit(EXIT_FAILURE);
}

/* How the publisher of a file that is done ended, on stderr (once). */
static void say_done(struct source *s)
{
	char ep[4 * PATH_MAX], en[4 * sizeof(s->program)];

	stat_escape(ep, sizeof(ep), s->path, false);
	stat_escape(en, sizeof(en), s->program, false);
	if (s->unclosed)
		fprintf(stderr, ME ": %s: publisher %" PRId32 " (%s) is gone, "
			"leaving %u slot(s) open: it did not exit cleanly\n",
			ep, s->pid, en, s->unclosed);
	else if (owner_of(s->pid, s->pid_start, s->uid, &(uid_t){ 0 }) == OWNER_OK)
		/* The process runs on, done with the file (its lock is gone). */
		fprintf(stderr, ME ": %s: publisher %" PRId32 " (%s) has closed "
			"all its slots and let the file go\n", ep, s->pid, en);
	else
		fprintf(stderr, ME ": %s: publisher %" PRId32 " (%s) has exited "
			"and closed all its slots\n", ep, s->pid, en);
	s->said_done = true;
}

/* The terminal's size: the kernel's, else LINES and COLUMNS, else 80 x 24 (at least 8 x 40). */
static void screen_size(unsigned *rows, unsigned *cols)
{
	struct winsize ws = { 0 };
	uint64_t v;
	const char *e;

	*rows = 24;
	*cols = 80;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
		*rows = ws.ws_row;
		*cols = ws.ws_col;
	} else {
		if ((e = getenv("LINES")) && parse_u64(e, 1, 10000, &v) == 0)
			*rows = (unsigned)v;
		if ((e = getenv("COLUMNS")) && parse_u64(e, 1, 10000, &v) == 0)
			*cols = (unsigned)v;
	}
	if (*rows < 8)
		*rows = 8;
	if (*cols < 40)
		*cols = 40;
}

/* name on stderr after a space, unless it is among the *n in *said already (to which it is
 * added; out of memory, it is said again). */
static void say_name(const char *name, const char ***said, size_t *n)
{
	char e[4 * MS_SHM_NAME + 1];

	for (size_t i = 0; i < *n; i++)
		if (!strcmp((*said)[i], name))
			return;
	const char **more = realloc(*said, (*n + 1) * sizeof(*more));
	if (more) {
		more[(*n)++] = name;
		*said = more;
	}
	fprintf(stderr, " %s", stat_escape(e, sizeof(e), name, false));
}

/* --counters names none of the slots has: an error, with the names there are. Slots that are
 * not there yet cannot be asked: with none at all, the names are taken on trust. */
static int check_pick(const struct source *src, size_t n, const char *const *pick, size_t npick)
{
	bool any = false;

	for (size_t i = 0; i < n; i++)
		for (uint32_t j = 0; j < src[i].used; j++)
			any |= src[i].slots[j].named;
	if (!any)
		return 0;
	for (size_t p = 0; p < npick; p++) {
		bool found = false;
		for (size_t i = 0; i < n && !found; i++)
			for (uint32_t j = 0; j < src[i].used && !found; j++) {
				const struct slot_view *v = &src[i].slots[j];
				for (unsigned k = 0; v->named && k < v->ncounters && !found; k++)
					found = !strcmp(v->counter_name[k], pick[p]);
			}
		if (found)
			continue;
		char e[4 * MS_SHM_NAME + 1];
		fprintf(stderr, ME ": --counters: no slot has a counter '%s'; there are:",
			stat_escape(e, sizeof(e), pick[p], false));
		/* every name once, in the order the slots have them */
		const char **said = NULL;
		size_t nsaid = 0;
		for (size_t i = 0; i < n; i++)
			for (uint32_t j = 0; j < src[i].used; j++) {
				const struct slot_view *v = &src[i].slots[j];
				for (unsigned k = 0; v->named && k < v->ncounters; k++)
					say_name(v->counter_name[k], &said, &nsaid);
			}
		free(said);
		fprintf(stderr, "\n");
		return -1;
	}
	return 0;
}

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
		{ "counters", required_argument, NULL, 'k' },
		{ "openmetrics", no_argument, NULL, 'o' },
		{ "listen", required_argument, NULL, 'l' },
		{ "owner", required_argument, NULL, 'u' },
		{ "all-owners", no_argument, NULL, 'U' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	uint64_t interval_ms = 1000, count = 0;
	bool json = false, openmetrics = false, timed = false;
	const char *listen_addr = NULL;
	char *pick_list = NULL;
	const char *pick[MS_SHM_COUNTERS];
	size_t npick = 0;
	int c;

	while ((c = getopt_long(argc, argv, "i:c:jhV", opts, NULL)) != -1) {
		switch (c) {
		case 'i':
			if (parse_u64(optarg, 10, 3600000, &interval_ms) < 0) {
				fprintf(stderr, ME ": --interval must be a whole number of "
					"milliseconds from 10 to 3600000, not '%s'\n", optarg);
				return EXIT_FORMAT;
			}
			timed = true;
			break;
		case 'c':
			if (parse_u64(optarg, 1, UINT32_MAX, &count) < 0) {
				fprintf(stderr, ME ": --count must be a whole number from 1 to %u, "
					"not '%s'\n", UINT32_MAX, optarg);
				return EXIT_FORMAT;
			}
			break;
		case 'j': json = true; break;
		case 'o': openmetrics = true; break;
		case 'l': listen_addr = optarg; break;
		case 'u': {
			/* A user name, or a uid as a number. */
			struct passwd pw, *r = NULL;
			char buf[4096];
			uint64_t uid;
			if (getpwnam_r(optarg, &pw, buf, sizeof(buf), &r) == 0 && r)
				uid = r->pw_uid;
			else if (parse_u64(optarg, 0, UINT32_MAX - 1, &uid) < 0) {
				fprintf(stderr, ME ": --owner: no user '%s'\n", optarg);
				return EXIT_FORMAT;
			}
			if (nowners == OWNERS_MAX) {
				fprintf(stderr, ME ": --owner: at most %d\n", OWNERS_MAX);
				return EXIT_FORMAT;
			}
			owners[nowners++] = (uid_t)uid;
			break;
		}
		case 'U': all_owners = true; break;
		case 'k':
			/* Names, comma-separated: kept in place (argv outlives them). */
			pick_list = optarg;
			npick = 0;
			for (char *p = optarg, *e; p; p = e) {
				e = strchr(p, ',');
				if (e)
					*e++ = '\0';
				if (!*p || npick == MS_SHM_COUNTERS) {
					fprintf(stderr, ME ": --counters wants 1 to %u counter "
						"names, comma-separated, none empty\n",
						MS_SHM_COUNTERS);
					return EXIT_FORMAT;
				}
				pick[npick++] = p;
			}
			break;
		case 'h': usage(stdout); return EXIT_OK;
		case 'V':
			printf(ME " (libmultisend %s), live-counter file format %u\n",
			       ms_version_string(), (unsigned)MS_SHM_VERSION);
			return EXIT_OK;
		default: usage(stderr); return EXIT_FORMAT;
		}
	}
	bool metrics = openmetrics || listen_addr;
	if (metrics && (json || timed || count || pick_list || (openmetrics && listen_addr))) {
		fprintf(stderr, ME ": --openmetrics and --listen go with no other option but each "
			"other's FILE|PID arguments\n");
		return EXIT_FORMAT;
	}
	if ((nowners || all_owners) && (!metrics || optind < argc)) {
		fprintf(stderr, ME ": --owner and --all-owners choose whose files a scan of "
			PID_DIR " reads: they go with --openmetrics or --listen and no FILE|PID\n");
		return EXIT_FORMAT;
	}
	if (optind >= argc && !metrics) {
		usage(stderr);
		return EXIT_FORMAT;
	}
	bool screen = !json && !metrics && isatty(STDOUT_FILENO);
	if (pick_list && !screen)
		fprintf(stderr, ME ": --counters chooses what the screen shows: the JSON has every "
			"counter\n");

	if (stat_init() < 0) {
		fprintf(stderr, ME ": libmultisend has fewer histogram buckets than this " ME "\n");
		return EXIT_FORMAT;
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

	stat_stop = &stop; /* a scrape's output stops at SIGTERM too */
	struct sigaction sa = { .sa_handler = on_stop }; /* no SA_RESTART: the sleep ends */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	if (openmetrics) {
		scrape(stdout, src, n, true);
		if (fflush(stdout) == EOF) {
			fprintf(stderr, ME ": writing the output: %s\n", strerror(errno));
			status = EXIT_OPEN;
		}
		goto out;
	}
	if (listen_addr) {
		signal(SIGPIPE, SIG_IGN);
		int lfd = listen_on(listen_addr);
		if (lfd < 0) {
			status = EXIT_FORMAT;
			goto out;
		}
		status = serve(lfd, src, n);
		close(lfd);
		goto out;
	}

	/* A first read, so that the first report has rates over a whole interval. */
	for (size_t i = 0; i < n; i++)
		refresh(&src[i], why[i], sizeof(why[i]));
	if (screen && pick_list && check_pick(src, n, pick, npick) < 0) {
		status = EXIT_FORMAT;
		goto out;
	}
	uint64_t next = clock_ns(CLOCK_MONOTONIC);
	size_t shown = n; /* files on the screen */
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
			unsigned rows, cols;
			strftime(when, sizeof(when), "%H:%M:%S", localtime_r(&t, &tm));
			screen_size(&rows, &cols);
			/* The title, then each file its share of the rest, but the last line: the
			 * cursor stays there, so that nothing scrolls. A line as wide as the
			 * terminal would wrap on some: one column less. */
			/* Each file gets 3 lines at least; those past the room are counted on a
			 * last line instead. */
			shown = (rows - 2) / 3 < n ? (rows - 3) / 3 : n;
			unsigned per = (rows - 2 - (shown < n)) / (unsigned)shown;
			stat_screen_setup(per, cols - 1, pick_list ? pick : NULL, npick);
			/* home and clear: redraw in place */
			printf("\033[H\033[2J");
			stat_screen_line(stdout, ME "  libmultisend %s  %s  every %" PRIu64
					 " ms  (Ctrl-C quits)", ms_version_string(), when,
					 interval_ms);
		}
		for (size_t i = 0; i < n; i++) {
			struct source *s = &src[i];
			refresh(s, why[i], sizeof(why[i]));
			if (screen && i < shown)
				stat_screen(stdout, s, now_real);
			else if (screen && i == shown)
				stat_screen_line(stdout, "... %zu more files: a taller terminal",
						 n - shown);
			else if (!screen)
				print_json(s, now_real);
			/* On the screen, the file's line says EXITED; the words go to stderr
			 * once the screen is done with (the same terminal: they would push it
			 * out of shape). */
			if (!s->problem && s->done && !s->said_done && !screen)
				say_done(s);
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
	for (size_t i = 0; screen && i < n; i++)
		if (!src[i].problem && src[i].done && !src[i].said_done)
			say_done(&src[i]);
out:
	for (size_t i = 0; src && i < n; i++) {
		detach(&src[i]);
		free(src[i].slots);
	}
	free(src);
	free(why);
	return status;
}
