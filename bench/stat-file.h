/* SPDX-License-Identifier: MIT */
/*
 * multisend-stat's reading of a live-counter file's bytes (lib/obs/shm-format.h) and its two
 * outputs, apart from the files and processes around them (bench/multisend-stat.c), so that a
 * fuzz target (tests/fuzz/fuzz-stat-file.c) can run them on any bytes.
 */
#ifndef MS_STAT_FILE_H
#define MS_STAT_FILE_H

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <multisend.h>

#include "../lib/obs/shm-format.h"

/* What we keep of one slot: the names (written once, before the slot went LIVE) and two
 * copies of the values, the latest and the one before, for the rates. */
struct slot_view {
	bool named;          /* names copied */
	bool have, have_prev; /* values read at least once / twice */
	bool stale;          /* this interval's read did not succeed: values are older */
	uint32_t state;
	uint32_t backend;    /* enum ms_backend the context sends with (0: unknown, the shim) */
	uint32_t ncounters, nhists;
	char name[MS_SHM_NAME + 1];
	char counter_name[MS_SHM_COUNTERS][MS_SHM_NAME + 1];
	char hist_name[MS_SHM_HISTS][MS_SHM_NAME + 1];
	uint64_t updated_ns;
	uint64_t counter[MS_SHM_COUNTERS], prev[MS_SHM_COUNTERS];
	uint64_t read_ns, prev_read_ns; /* CLOCK_MONOTONIC of the two reads */
	struct ms_hist hist[MS_SHM_HISTS];
	struct ms_hist prev_hist[MS_SHM_HISTS]; /* the read before (have_prev): per interval */
};

struct source {
	const char *arg;
	char path[PATH_MAX];
	int32_t want_pid;    /* given as a PID: that process's file (0: given as a file) */
	int fd;              /* -1: not open */
	const char *map;     /* NULL: not mapped */
	dev_t dev;
	ino_t ino;
	uid_t uid;           /* the file's owner */
	char owner[64];      /* its user name (the metrics' owner label); "": the uid is shown */
	uint64_t deadline_ns; /* CLOCK_MONOTONIC past which stat_read stops waiting for a busy
	                         slot (the file's time budget); 0: no limit */
	bool over_time;      /* stat_read gave up on a slot because deadline_ns had passed */
	/* the owner we are showing: a change means a new owner, whose values start over */
	int32_t pid;
	uint64_t start_ns, pid_start;
	char program[sizeof(((struct ms_shm_header *)0)->program) + 1];
	char lib_version[sizeof(((struct ms_shm_header *)0)->lib_version) + 1];
	uint32_t used;
	const char *problem; /* why nothing can be shown right now, or NULL */
	bool owner_gone;     /* the file has no live owner (no write lock): the publisher is gone
	                        or let the file go */
	bool pid_verified;   /* /proc shows the process the file names: there, the one that made
	                        the file, the file's user (false also when it is out of sight:
	                        another PID namespace, hidepid) */
	bool done;           /* gone, and every slot read after it was gone */
	bool said_done;
	unsigned unclosed;   /* slots still LIVE once the owner was gone */
	unsigned stale;      /* slots whose read failed this interval */
	struct slot_view *slots; /* [MS_SHM_SLOTS] */
};

/* Set up the histogram bucket bounds (once). 0, or -1 if libmultisend has fewer buckets. */
int stat_init(void);

/* Check a file's header: len bytes at map (the file's size; map may be longer, never read past
 * len). 0: a live-counter file of this version; 1: not one (*why says how); 3: all zeros or
 * too short, maybe a writer still setting it up. */
int stat_check_header(const struct source *s, const unsigned char *map, size_t len, char *why,
		      size_t whylen);

/* Read the header's owner and every slot from len bytes at map (a header that
 * stat_check_header accepted), each slot's values under its seqlock tried up to `tries`
 * times. 0, or 1 with *why set when the header no longer passes. Sets s->used, s->stale,
 * s->unclosed and each slot's view; a new owner (pid, start time) forgets the old values. */
int stat_read(struct source *s, const unsigned char *map, size_t len, unsigned tries,
	      uint64_t now_mono, char *why, size_t whylen);

/* Forget every value (a new owner). */
void stat_forget(struct source *s);

/* One JSON object (one line) for the source, and the source on a screen. */
void stat_json(FILE *out, const struct source *s, uint64_t now_real);
void stat_screen(FILE *out, const struct source *s, uint64_t now_real);

/* The screen's size and choice for stat_screen: at most `rows` lines (each ending in a newline)
 * of at most `cols` columns per source (default 22 x 79: a source under a title line on an
 * 80 x 24 terminal, the cursor kept off the last line). counters (n names, kept by the caller):
 * only those counters, in that order, zero or not; NULL: the non-zero ones, then "N more". */
void stat_screen_setup(unsigned rows, unsigned cols, const char *const *counters, size_t n);

/* One line of at most the set-up width: fmt's text escaped for a terminal and cut at a whole
 * character. */
void stat_screen_line(FILE *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Why a file was left out of the metrics: the reason label of
 * multisend_stat_files_skipped_total. A file in /dev/shm can be written by anyone: it is
 * hostile input, and each of these bounds what one such file can cost a scrape. */
enum stat_skip {
	STAT_SKIP_OWNER,  /* a scan's file of a user not asked for (multisend-stat.c) */
	STAT_SKIP_NAMES,  /* more distinct metric names than STAT_FILE_NAMES_MAX */
	STAT_SKIP_BUSY,   /* its slots did not settle within the file's time budget */
	STAT_SKIP_BUDGET, /* past the scrape's budget (time, families or lines) */
	STAT_SKIP_N
};
extern const char *const stat_skip_reason[STAT_SKIP_N];

/* The most distinct metric names one file may bring (the library's slot and the shim's have
 * about 140 between them; 64 slots of 64 names of their own would make 4,352). */
#define STAT_FILE_NAMES_MAX 256u
/* The most metric families and sample lines one scrape exports (a file with every slot in use
 * makes about 14,000 lines); a file that would pass either is left out, whole. */
#define STAT_SCRAPE_FAMILIES_MAX 8192u
#define STAT_SCRAPE_LINES_MAX 262144u

/* Every counter and histogram of the n sources (read already; one with a problem is left out)
 * in the Prometheus text format 0.0.4, or OpenMetrics 1.0.0 (ending in "# EOF"): one label set
 * per file and slot. docs/json.md ("Metrics") lists the names. Time and memory are linear in
 * the number of names (a hash of the families). A source over a budget above is left out and
 * counted in skipped[] (NULL: not counted), which is then exported as
 * multisend_stat_files_skipped_total, one series per reason. */
void stat_metrics(FILE *out, const struct source *const *s, size_t n, bool openmetrics,
		  uint64_t *skipped);

/* Set to a flag that a signal handler sets (multisend-stat's SIGTERM): stat_metrics then
 * stops writing series at once (a server that is told to end drops the response). NULL: no
 * flag. */
extern volatile sig_atomic_t *stat_stop;

/* Text from the file, made safe to show: into dst (cap bytes, always terminated). For a
 * terminal, control characters (C0, DEL and C1) and bytes that are not UTF-8 become \xNN (a C1
 * character encoded in UTF-8 becomes \u00NN) and a backslash becomes \\; for JSON (the quoted
 * string's contents), '"' and '\' are escaped, controls become \u00NN and a byte that is not
 * UTF-8 becomes \ufffd. Valid UTF-8 otherwise passes unchanged. Returns dst. */
const char *stat_escape(char *dst, size_t cap, const char *src, bool json);

#endif
