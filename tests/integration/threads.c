/* SPDX-License-Identifier: MIT */
/*
 * Eight threads, each with its own context (backends taken in turn), send at once on the SAME
 * sockets: one shared unconnected UDP socket with an address per subscriber, and connected
 * AF_UNIX sockets. Contexts share nothing, so every thread's every message must arrive at
 * every subscriber exactly once. Run under ThreadSanitizer by scripts/test, which also
 * checks that the library's code has no data race.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "multisend.h"
#include "net.h"

enum { THREADS = 8, SUBS = 16, PAIRS = 8, MESSAGES = 400 };

struct msg {
	uint32_t thread, seq;
};

static int shared_udp;
static struct sockaddr_in addr[SUBS];
static int rx_udp[SUBS];
static int pair[PAIRS][2];
static pthread_barrier_t start;

#define CHECK(c)                                                                      \
	do {                                                                          \
		if (!(c)) {                                                           \
			fprintf(stderr, "threads: check failed: %s (line %d)\n", #c, __LINE__); \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

static void *sender(void *arg)
{
	uint32_t t = (uint32_t)(uintptr_t)arg;
	enum ms_backend order[] = { MS_BACKEND_LOOP, MS_BACKEND_SENDMMSG, MS_BACKEND_IO_URING };
	struct ms_config cfg = { .size = sizeof(cfg), .backend = order[t % 3],
				 .flags = MS_CFG_IGNORE_ENV };
	struct ms_ctx *ctx;
	struct ms_group *g;
	CHECK(ms_ctx_new(&ctx, &cfg) == 0);
	CHECK(ms_group_new(ctx, &g) == 0);
	for (int i = 0; i < SUBS; i++) {
		struct ms_dest d = { shared_udp, sizeof(addr[i]), (struct sockaddr *)&addr[i] };
		CHECK(ms_group_add(g, &d) >= 0);
	}
	for (int i = 0; i < PAIRS; i++) {
		struct ms_dest d = { .fd = pair[i][1] };
		CHECK(ms_group_add(g, &d) >= 0);
	}
	pthread_barrier_wait(&start);
	struct ms_result res[SUBS + PAIRS];
	for (uint32_t s = 0; s < MESSAGES; s++) {
		struct msg m = { t, s };
		int n = ms_send(g, &m, sizeof(m), 0, res);
		if (n != SUBS + PAIRS) {
			for (int k = 0; k < SUBS + PAIRS; k++)
				if (res[k].status != (int)sizeof(m))
					fprintf(stderr, "thread %u: id %d: %s\n", t, res[k].id,
						ms_strerror(res[k].status));
			CHECK(n == SUBS + PAIRS);
		}
	}
	struct ms_stats st = { .size = sizeof(st) };
	CHECK(ms_ctx_stats(ctx, &st) == 0);
	CHECK(st.dests_accepted == (uint64_t)MESSAGES * (SUBS + PAIRS) && st.dests_failed == 0);
	ms_group_free(g);
	ms_ctx_free(ctx);
	return NULL;
}

static int rx_fd(int i)
{
	return i < SUBS ? rx_udp[i] : pair[i - SUBS][0];
}

/* Reads every receiver until all THREADS * MESSAGES arrived at each, checking that each
 * (thread, seq) arrives once and each thread's messages arrive in order. */
static void *receiver(void *arg)
{
	(void)arg;
	static uint32_t next[SUBS + PAIRS][THREADS];
	long left = (long)(SUBS + PAIRS) * THREADS * MESSAGES;
	struct pollfd p[SUBS + PAIRS];
	for (int i = 0; i < SUBS + PAIRS; i++)
		p[i] = (struct pollfd){ .fd = rx_fd(i), .events = POLLIN };
	while (left > 0) {
		int r = poll(p, SUBS + PAIRS, 10000);
		CHECK(r > 0); /* a message is missing if nothing comes for 10 s */
		for (int i = 0; i < SUBS + PAIRS; i++) {
			struct msg m;
			while (recv(p[i].fd, &m, sizeof(m), MSG_DONTWAIT) == (ssize_t)sizeof(m)) {
				CHECK(m.thread < THREADS);
				CHECK(m.seq == next[i][m.thread]); /* once each, in order */
				next[i][m.thread]++;
				left--;
			}
		}
	}
	return NULL;
}

int main(void)
{
	/* Before any socket: a loopback of its own, where no other test's datagram can reach
	 * a receiver on an ephemeral port (net.c). */
	net_private_netns("threads");
	shared_udp = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(shared_udp >= 0);
	for (int i = 0; i < SUBS; i++) {
		rx_udp[i] = socket(AF_INET, SOCK_DGRAM, 0);
		int big = 8 << 20;
		setsockopt(rx_udp[i], SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
		addr[i] = (struct sockaddr_in){ .sin_family = AF_INET,
						.sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t l = sizeof(addr[i]);
		CHECK(bind(rx_udp[i], (struct sockaddr *)&addr[i], l) == 0);
		CHECK(getsockname(rx_udp[i], (struct sockaddr *)&addr[i], &l) == 0);
	}
	for (int i = 0; i < PAIRS; i++)
		CHECK(socketpair(AF_UNIX, SOCK_DGRAM, 0, pair[i]) == 0);
	pthread_barrier_init(&start, NULL, THREADS);
	pthread_t th[THREADS], rth;
	CHECK(pthread_create(&rth, NULL, receiver, NULL) == 0);
	for (uintptr_t t = 0; t < THREADS; t++)
		CHECK(pthread_create(&th[t], NULL, sender, (void *)t) == 0);
	for (int t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	pthread_join(rth, NULL);
	printf("%d threads x %d messages x %d destinations: every copy once, in order\n", THREADS,
	       MESSAGES, SUBS + PAIRS);
	return 0;
}
