/* SPDX-License-Identifier: MIT */
/*
 * Four threads send at once. Thread k sends every message to the subscribers i with
 * i % 4 == k, each thread on its own socket, or with "shared" all four on one socket, so that
 * the threads keep finding each other's data pending on it and flush it before their own.
 * Every thread also polls now and then (a flush point) to mix the paths.
 */
#include <poll.h>
#include <pthread.h>

#include "shimtest.h"

#define NTHREADS 4

static struct st_args a;
static int shared_fd = -1;

static void *run(void *arg)
{
	uint32_t k = (uint32_t)(uintptr_t)arg;
	int fd = shared_fd >= 0 ? shared_fd : st_udp();

	for (uint64_t seq = 1; seq <= a.m; seq++) {
		for (uint32_t i = k; i < a.n; i += NTHREADS)
			st_send(fd, &a, seq, i, true);
		if (seq % 7 == 0)
			poll(NULL, 0, 0);
	}
	if (shared_fd < 0)
		close(fd);
	return NULL;
}

int main(int argc, char **argv)
{
	int x = st_args(argc, argv, &a);
	pthread_t th[NTHREADS];

	if (x < argc && !strcmp(argv[x], "shared"))
		shared_fd = st_udp();
	for (uintptr_t k = 0; k < NTHREADS; k++)
		if (pthread_create(&th[k], NULL, run, (void *)k))
			st_die("pthread_create");
	for (int k = 0; k < NTHREADS; k++)
		pthread_join(th[k], NULL);
	printf("threads: %d threads sent %llu messages to %u subscribers%s\n", NTHREADS,
	       (unsigned long long)a.m, a.n, shared_fd >= 0 ? " on one shared socket" : "");
	return 0;
}
