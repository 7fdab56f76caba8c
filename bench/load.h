/* SPDX-License-Identifier: MIT */
/*
 * --background-load K: K worker PROCESSES (never threads of the bench, so that its process CPU
 * clock never counts them) that loop on short system calls and walks of a buffer larger than
 * L2. They are forked stopped, before any thread of the bench exists; load_set() starts
 * (SIGCONT) and pauses (SIGSTOP) them. Each dies with the bench (PR_SET_PDEATHSIG SIGKILL, and
 * a check that its parent is still the one that forked it), at its own deadline (a clock check
 * in its loop, and alarm(2) as a backstop), or at load_stop(), which kills and reaps them all.
 */
#ifndef BENCH_LOAD_H
#define BENCH_LOAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define LOAD_MAX 64

struct bg_load {
	unsigned n;            /* workers forked */
	pid_t pid[LOAD_MAX];
	double deadline_s;     /* each worker's lifetime, from its fork */
	uint64_t started_ns;   /* now_ns() at the fork */
	pthread_mutex_t lock;
	bool on;               /* working now (not stopped) */
	uint64_t first_on_ns;  /* now_ns() the first time they were set working, 0: never */
	uint64_t on_ns;        /* total time working so far, up to the last load_set(false) */
	uint64_t last_on_ns;   /* when they were last set working */
	unsigned switches;     /* load_set calls that changed the state */
};

/* Fork k stopped workers that live at most deadline_s seconds. 0, or -errno with a reason in
 * err (the workers already forked are killed and reaped). */
int load_start(struct bg_load *l, unsigned k, double deadline_s, char *err, size_t errlen);
/* Start (on) or pause the workers; idempotent, callable from any thread. */
void load_set(struct bg_load *l, bool on);
bool load_is_on(struct bg_load *l);
/* Kill and reap every worker; returns how many were still alive to be killed. */
unsigned load_stop(struct bg_load *l);

#endif
