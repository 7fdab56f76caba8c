/* SPDX-License-Identifier: MIT */
/*
 * close of a socket with data pending.
 *   same:  the thread that sent closes the socket; the data must go out first.
 *   other: thread A sends one fan-out (pending: the delay is long and the fan-out predictor
 *          has not seen a cycle yet), tells thread B through a condition variable (no call
 *          the shim sees), and B closes the socket: B must flush A's batch first.
 * Either way every datagram arrives, and the program exits with _exit (no exit-time flush
 * to hide a lost batch).
 */
#include <pthread.h>

#include "shimtest.h"

static struct st_args a;
static int fd;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int stage;

static void *sender(void *arg)
{
	(void)arg;
	for (uint64_t seq = 1; seq <= a.m; seq++)
		for (uint32_t i = 0; i < a.n; i++)
			st_send(fd, &a, seq, i, true);
	pthread_mutex_lock(&mu);
	stage = 1;
	pthread_cond_signal(&cv);
	while (stage != 2)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	return NULL;
}

int main(int argc, char **argv)
{
	int x = st_args(argc, argv, &a);
	bool other = x < argc && !strcmp(argv[x], "other");

	fd = st_udp();
	if (!other) {
		for (uint64_t seq = 1; seq <= a.m; seq++)
			for (uint32_t i = 0; i < a.n; i++)
				st_send(fd, &a, seq, i, true);
		if (close(fd) < 0)
			st_die("close: %s", strerror(errno));
	} else {
		pthread_t th;
		if (pthread_create(&th, NULL, sender, NULL))
			st_die("pthread_create");
		pthread_mutex_lock(&mu);
		while (stage != 1)
			pthread_cond_wait(&cv, &mu);
		pthread_mutex_unlock(&mu);
		if (close(fd) < 0)
			st_die("close: %s", strerror(errno));
		pthread_mutex_lock(&mu);
		stage = 2;
		pthread_cond_signal(&cv);
		pthread_mutex_unlock(&mu);
		pthread_join(th, NULL);
	}
	printf("closepending (%s thread): sent and closed\n", other ? "another" : "the same");
	fflush(stdout);
	_exit(0);
}
