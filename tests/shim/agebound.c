/* SPDX-License-Identifier: MIT */
/*
 * agebound ROUNDS: how late a batched datagram arrives when the publisher spins (makes no call
 * the shim sees) in the middle of a fan-out. Not a test (it measures time): run it under
 * `multisend-run --mode batch` to see the age bound kept by the flusher thread.
 *
 * Each round sends one datagram to each of three receivers, spinning 20 ms on the clock
 * between the second and the third; a receiving thread reads the first receiver and records
 * how long after its sendto each datagram arrived. Prints p50, p90 and the maximum in us.
 */
#include <pthread.h>
#include <time.h>

#include "shimtest.h"

#define MAXN 10000

static int rx;
static double late_us[MAXN];
static int nlate;

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void *receiver(void *arg)
{
	(void)arg;
	uint64_t ts;
	while (recv(rx, &ts, sizeof(ts), 0) == sizeof(ts))
		if (nlate < MAXN)
			late_us[nlate++] = (double)(now_ns() - ts) / 1e3;
	return NULL;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 50;
	struct sockaddr_in to[3];

	if (rounds < 1 || rounds > MAXN)
		st_die("usage: agebound ROUNDS (1..%d)", MAXN);
	for (int i = 0; i < 3; i++) {
		int r = st_udp();
		socklen_t l = sizeof(to[i]);
		to[i] = (struct sockaddr_in){ .sin_family = AF_INET,
					      .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		if (bind(r, (struct sockaddr *)&to[i], sizeof(to[i])) ||
		    getsockname(r, (struct sockaddr *)&to[i], &l))
			st_die("setup: %s", strerror(errno));
		if (i == 0)
			rx = r;
	}
	pthread_t th;
	if (pthread_create(&th, NULL, receiver, NULL))
		st_die("pthread_create");
	int tx = st_udp();
	for (int k = 0; k < rounds; k++) {
		uint64_t ts = now_ns();
		for (int i = 0; i < 3; i++) {
			if (sendto(tx, &ts, sizeof(ts), 0, (struct sockaddr *)&to[i], sizeof(to[i])) < 0)
				st_die("sendto: %s", strerror(errno));
			if (i == 1)
				for (uint64_t t0 = now_ns(); now_ns() - t0 < 20000000u;)
					;
		}
	}
	struct timespec wait = { .tv_nsec = 300000000 };
	nanosleep(&wait, NULL);
	shutdown(rx, SHUT_RDWR);
	pthread_join(th, NULL);
	if (!nlate)
		st_die("nothing arrived");
	qsort(late_us, (size_t)nlate, sizeof(late_us[0]), cmp);
	printf("agebound: %d rounds, the first datagram late by p50 %.0f us, p90 %.0f us, max %.0f us\n",
	       nlate, late_us[nlate / 2], late_us[nlate * 9 / 10], late_us[nlate - 1]);
	return 0;
}
