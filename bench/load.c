/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "load.h"
#include "util.h"

/* Larger than any L2 (and most L3 slices): each walk misses. */
#define LOAD_BUF (8u << 20)
#define LOAD_LINE 64u
/* Per turn of the loop: this many short system calls, and a walk of this share of the buffer,
 * so that the deadline is checked every few hundred microseconds. */
#define LOAD_CALLS 32u
#define LOAD_WALK (256u << 10)

static uint64_t mono_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* The worker: never returns. Only async-signal-safe calls and plain memory access (forked from
 * a process that may hold locks in other threads' names, although the bench forks first). */
static void __attribute__((noreturn)) worker(pid_t parent, uint64_t deadline_ns, unsigned secs)
{
	sigset_t none;

	/* Dies with the bench, however it ends; if it already ended, now. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
		_exit(0);
	/* Holds none of the bench's descriptors: a pipe on its output (--json -) must see its end
	 * when the bench ends, sockets and files close when the bench closes them. */
	int devnull = open("/dev/null", O_RDWR);

	if (devnull >= 0)
		for (int fd = 0; fd < 3; fd++)
			dup2(devnull, fd);
	close_range(3, ~0u, 0);
	alarm(secs); /* the backstop: SIGALRM's default action ends the process */
	signal(SIGALRM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* Wait, stopped, until the bench starts the load. */
	raise(SIGSTOP);

	int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
	unsigned char *buf = mmap(NULL, LOAD_BUF, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	size_t at = 0;

	if (buf == MAP_FAILED)
		_exit(1);
	for (unsigned turn = 0;; turn++) {
		for (unsigned i = 0; i < LOAD_CALLS; i++) {
			switch (i & 3) {
			case 0:
				(void)getppid();
				break;
			case 1:
				if (null >= 0)
					(void)!write(null, buf + at, LOAD_LINE);
				break;
			case 2:
				(void)syscall(SYS_getpid);
				break;
			default:
				if (!(turn & 7))
					sched_yield();
				else
					(void)getppid();
				break;
			}
		}
		/* Read-modify-write one cache line in each, through a window of the buffer. */
		for (size_t end = at + LOAD_WALK; at < end; at += LOAD_LINE)
			buf[at]++;
		if (at >= LOAD_BUF)
			at = 0;
		if (mono_ns() >= deadline_ns || getppid() != parent)
			_exit(0);
	}
}

static void kill_all(struct bg_load *l)
{
	for (unsigned i = 0; i < l->n; i++)
		if (l->pid[i] > 0)
			kill(l->pid[i], SIGKILL);
}

static unsigned reap_all(struct bg_load *l)
{
	unsigned alive = 0;

	for (unsigned i = 0; i < l->n; i++) {
		int status;

		if (l->pid[i] <= 0)
			continue;
		while (waitpid(l->pid[i], &status, 0) < 0 && errno == EINTR)
			;
		alive += WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
		l->pid[i] = 0;
	}
	return alive;
}

int load_start(struct bg_load *l, unsigned k, double deadline_s, char *err, size_t errlen)
{
	const pid_t parent = getpid();
	const uint64_t t0 = mono_ns();
	const uint64_t deadline = t0 + (uint64_t)(deadline_s * 1e9);
	const unsigned secs = (unsigned)deadline_s + 2;

	memset(l, 0, sizeof(*l));
	pthread_mutex_init(&l->lock, NULL);
	l->deadline_s = deadline_s;
	l->started_ns = now_ns();
	if (k > LOAD_MAX)
		k = LOAD_MAX;
	fflush(NULL); /* nothing buffered is written twice */
	for (unsigned i = 0; i < k; i++) {
		pid_t pid = fork();

		if (pid < 0) {
			int e = errno;

			snprintf(err, errlen, "--background-load: fork: %s", strerror(e));
			load_stop(l);
			return -e;
		}
		if (!pid)
			worker(parent, deadline, secs);
		l->pid[l->n++] = pid;
		/* Wait until it has stopped itself, so that no load runs before load_set. */
		int status;

		while (waitpid(pid, &status, WUNTRACED) < 0 && errno == EINTR)
			;
		if (!WIFSTOPPED(status)) {
			l->pid[l->n - 1] = 0;
			snprintf(err, errlen, "--background-load: a load process ended at once");
			load_stop(l);
			return -ECHILD;
		}
	}
	return 0;
}

void load_set(struct bg_load *l, bool on)
{
	if (!l || !l->n)
		return;
	pthread_mutex_lock(&l->lock);
	if (l->on != on) {
		uint64_t t = now_ns();

		for (unsigned i = 0; i < l->n; i++)
			if (l->pid[i] > 0)
				kill(l->pid[i], on ? SIGCONT : SIGSTOP);
		if (on) {
			if (!l->first_on_ns)
				l->first_on_ns = t;
			l->last_on_ns = t;
		} else {
			l->on_ns += t - l->last_on_ns;
		}
		l->on = on;
		l->switches++;
	}
	pthread_mutex_unlock(&l->lock);
}

bool load_is_on(struct bg_load *l)
{
	bool on;

	if (!l || !l->n)
		return false;
	pthread_mutex_lock(&l->lock);
	on = l->on;
	pthread_mutex_unlock(&l->lock);
	return on;
}

unsigned load_stop(struct bg_load *l)
{
	unsigned alive;

	if (!l->n)
		return 0;
	load_set(l, false);
	kill_all(l);
	alive = reap_all(l);
	l->n = 0;
	pthread_mutex_destroy(&l->lock);
	return alive;
}
