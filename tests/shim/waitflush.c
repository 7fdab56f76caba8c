/* SPDX-License-Identifier: MIT */
/*
 * A batch pending while its thread waits in a futex goes out when the wait starts, not when
 * the age bound ends. A sender thread makes fan-outs of three, and after the second
 * destination of each it waits on a semaphore that the main thread posts only once it has
 * received those two datagrams. shim-test.sh runs it with a 1 s age bound and checks the
 * report: the waits flushed (sync), the age bound never did. "waitflush c11" does the same
 * with a thread made by thrd_create and a hand-over through mtx_t and cnd_t.
 */
#include <pthread.h>
#include <semaphore.h>
#include <sys/time.h>
#include <threads.h>

#include "shimtest.h"

#define ROUNDS 40

static int rx[3];
static struct sockaddr_in to[3];
static sem_t go;
static bool c11;
static mtx_t mtx;
static cnd_t cnd;
static unsigned posted, taken;

static void go_wait(void)
{
	if (!c11) {
		while (sem_wait(&go) != 0)
			if (errno != EINTR)
				st_die("sem_wait: %s", strerror(errno));
		return;
	}
	mtx_lock(&mtx);
	while (posted == taken)
		cnd_wait(&cnd, &mtx);
	taken++;
	mtx_unlock(&mtx);
}

static void go_post(void)
{
	if (!c11) {
		sem_post(&go);
		return;
	}
	mtx_lock(&mtx);
	posted++;
	cnd_signal(&cnd);
	mtx_unlock(&mtx);
}

static int sender_c11(void *arg);

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
				go_wait();
		}
	}
	return NULL;
}

static int sender_c11(void *arg)
{
	sender(arg);
	return 0;
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

int main(int argc, char **argv)
{
	c11 = argc > 1 && !strcmp(argv[1], "c11");
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
	mtx_init(&mtx, mtx_plain);
	cnd_init(&cnd);
	pthread_t th;
	thrd_t th11;
	if (c11 ? thrd_create(&th11, sender_c11, NULL) != thrd_success
		: pthread_create(&th, NULL, sender, NULL) != 0)
		st_die("cannot start the sender thread");
	for (uint32_t seq = 0; seq < ROUNDS; seq++) {
		for (int i = 0; i < 2; i++)
			if (recv_seq(rx[i]) != seq)
				st_die("receiver %d: out of order at %u", i, seq);
		go_post();
	}
	if (c11)
		thrd_join(th11, NULL);
	else
		pthread_join(th, NULL);
	for (uint32_t seq = 0; seq < ROUNDS; seq++)
		if (recv_seq(rx[2]) != seq)
			st_die("receiver 2: out of order at %u", seq);
	printf("waitflush: %d fan-outs, each pending while its thread waited\n", ROUNDS);
	return 0;
}
