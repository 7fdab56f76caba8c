/* SPDX-License-Identifier: MIT */
/* Small helpers shared by the bench's files: clocks, parsing, formatting, child processes. */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* CLOCK_MONOTONIC goes through the vDSO (no system call) with the usual clock sources. */
static inline uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static inline uint64_t clock_ns(clockid_t c)
{
	struct timespec t;

	if (clock_gettime(c, &t))
		return 0;
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Wall, process CPU and calling-thread CPU time, read around a batch of sends. The two CPU
 * clocks are system calls, which is why they are never read per send. The end reads mirror the
 * start reads, so the intervals nest (process around thread around wall) and a figure taken
 * from an inner one never includes more clock reading than an outer one. */
struct clocks {
	uint64_t wall, proc, thread;
};

/* Involuntary context switches of the calling thread so far: how often something else took
 * its CPU. A system call, so read around batches only. */
static inline uint64_t thread_preemptions(void)
{
	struct rusage ru;

	return getrusage(RUSAGE_THREAD, &ru) ? 0 : (uint64_t)ru.ru_nivcsw;
}

/* Strict number parsing: the whole string, no sign surprises, range-checked. 0 or -EINVAL. */
int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int parse_double(const char *s, double min, double max, double *out);
/* A comma-separated list of unsigned numbers (suffixes k and m allowed when si). Returns the
 * count (>= 1) or -EINVAL; at most cap values. */
int parse_u64_list(const char *s, uint64_t min, uint64_t max, bool si, uint64_t *out,
		   size_t cap);

/* Summary of a handful of values: median, min, max. */
struct summary {
	double median, min, max;
};
/* v is reordered. n may be 0 (all zero). */
void summarize(double *v, size_t n, struct summary *out);

/* "431.2k", "12.0M", "950": 4 significant characters for rates in a table. */
const char *fmt_si(char *buf, size_t len, double v);

/* JSON helpers: a quoted, escaped string; a number (null if not finite). */
void json_str(FILE *f, const char *s);
void json_num(FILE *f, double v);

/* HTML-escape s into f. */
void html_str(FILE *f, const char *s);

/*
 * Run argv[0] (searched in PATH) with argv, wait, return its exit status (0..255), or -errno
 * if it could not be started, or 128 + signal. The child gets default signal handling and an
 * empty signal mask whatever ours is, and its own process group, so a Ctrl-C meant for us
 * cannot kill a cleanup command half way. stdout/stderr go to log (appended) when not NULL,
 * otherwise stay ours; cwd NULL = ours.
 */
int run_command(char *const argv[], const char *cwd, const char *log);

/* true if an executable named name is in PATH. */
bool have_program(const char *name);

/* Read a small file into buf (NUL-terminated, trailing newline removed). 0 or -errno. */
int read_file(const char *path, char *buf, size_t len);

/* Make room for one more element in a growing array (*v holds *n of *cap, each `size` bytes;
 * the first allocation holds `first`). 0 or -ENOMEM (the array is then unchanged). */
int grow(void **v, size_t *cap, size_t n, size_t size, size_t first);

#endif
