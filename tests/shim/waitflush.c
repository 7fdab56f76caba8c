/* SPDX-License-Identifier: MIT */
/*
 * A batch pending while its thread waits in a futex goes out when the wait starts, not when
 * the age bound ends. A sender thread makes fan-outs of three, and after the second
 * destination of each it waits on a semaphore that the main thread posts only once it has
 * received those two datagrams. shim-test.sh runs it with a 1 s age bound and checks the
 * report: the waits flushed (sync), the age bound never did.
 */
#include <pthread.h>
#include <semaphore.h>
#include <sys/time.h>

#include "shimtest.h"

#define ROUNDS 40

static int rx[3];
static struct sockaddr_in to[3];
static sem_t go;

static void *sender(void *arg)
{
	(void)arg;
	int tx = st_udp();
	uint8_t msg[ST_SIZE];

	for (uint32_t seq = 0; seq < ROUNDS; seq++) {
		memset(msg, 0, sizeof(msg));
		memcpy(msg, &seq, sizeof(seq));
		for (int i = 0; i < 3; i++) {
			if (sendto(tx, msg, sizeof(msg), 0, (struct sockaddr *)&to[i],
				   sizeof(to[i])) != sizeof(msg))
				st_die("sendto: %s", strerror(errno));
			if (i == 1)
				while (sem_wait(&go) != 0)
					if (errno != EINTR)
						st_die("sem_wait: %s", strerror(errno));
		}
	}
	return NULL;
}

static uint32_t recv_seq(int fd)
{
	uint8_t buf[ST_SIZE];
	uint32_t seq;
	if (recv(fd, buf, sizeof(buf), 0) != sizeof(buf))
		st_die("recv: %s", strerror(errno));
	memcpy(&seq, buf, sizeof(seq));
	return seq;
}

int main(void)
{
	struct timeval tv = { .tv_sec = 20 }; /* only against a hang; the report is the check */
	for (int i = 0; i < 3; i++) {
		rx[i] = st_udp();
		to[i] = (struct sockaddr_in){ .sin_family = AF_INET,
					      .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t l = sizeof(to[i]);
		if (bind(rx[i], (struct sockaddr *)&to[i], sizeof(to[i])) ||
		    getsockname(rx[i], (struct sockaddr *)&to[i], &l) ||
		    setsockopt(rx[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)))
			st_die("setup: %s", strerror(errno));
	}
	sem_init(&go, 0, 0);
	pthread_t th;
	if (pthread_create(&th, NULL, sender, NULL))
		st_die("pthread_create");
	for (uint32_t seq = 0; seq < ROUNDS; seq++) {
		for (int i = 0; i < 2; i++)
			if (recv_seq(rx[i]) != seq)
				st_die("receiver %d: out of order at %u", i, seq);
		sem_post(&go);
	}
	pthread_join(th, NULL);
	for (uint32_t seq = 0; seq < ROUNDS; seq++)
		if (recv_seq(rx[2]) != seq)
			st_die("receiver 2: out of order at %u", seq);
	printf("waitflush: %d fan-outs, each pending while its thread waited\n", ROUNDS);
	return 0;
}
