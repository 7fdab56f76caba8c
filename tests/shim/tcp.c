/* SPDX-License-Identifier: MIT */
/*
 * TCP passes through untouched: a stream of numbered records sent with send, sendto (no
 * address), sendmsg, write and writev in turn, and read back by a second thread that checks
 * every byte. A UDP fan-out is sent between the records, so the batch and the stream interleave.
 */
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/uio.h>

#include "shimtest.h"

#define RECORDS 2000
#define RECLEN 100

static int conn_fd;

static void record(uint8_t *r, uint32_t k)
{
	for (int j = 0; j < RECLEN; j++)
		r[j] = (uint8_t)(k * 131 + (uint32_t)j * 7);
}

static void *reader(void *arg)
{
	(void)arg;
	uint8_t buf[RECLEN], want[RECLEN];
	for (uint32_t k = 0; k < RECORDS; k++) {
		for (size_t got = 0; got < RECLEN;) {
			ssize_t r = read(conn_fd, buf + got, RECLEN - got);
			if (r <= 0)
				st_die("tcp read: %s", r < 0 ? strerror(errno) : "EOF");
			got += (size_t)r;
		}
		record(want, k);
		if (memcmp(buf, want, RECLEN))
			st_die("tcp record %u differs", k);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct st_args a;
	st_args(argc, argv, &a);
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), cs, one = 1;
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(sin);
	pthread_t th;

	if (ls < 0 || bind(ls, (struct sockaddr *)&sin, sizeof(sin)) || listen(ls, 1) ||
	    getsockname(ls, (struct sockaddr *)&sin, &l))
		st_die("listen: %s", strerror(errno));
	cs = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (cs < 0 || connect(cs, (struct sockaddr *)&sin, sizeof(sin)) ||
	    (conn_fd = accept(ls, NULL, NULL)) < 0)
		st_die("connect: %s", strerror(errno));
	setsockopt(cs, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (pthread_create(&th, NULL, reader, NULL))
		st_die("pthread_create");

	int udp = st_udp();
	uint64_t seq = 1;
	for (uint32_t k = 0; k < RECORDS; k++) {
		uint8_t r[RECLEN];
		struct iovec iov[2] = { { r, 40 }, { r + 40, RECLEN - 40 } };
		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
		ssize_t n;

		record(r, k);
		switch (k % 5) {
		case 0: n = send(cs, r, RECLEN, 0); break;
		case 1: n = sendto(cs, r, RECLEN, 0, NULL, 0); break;
		case 2: n = sendmsg(cs, &mh, 0); break;
		case 3: n = write(cs, r, RECLEN); break;
		default: n = writev(cs, iov, 2); break;
		}
		if (n != RECLEN)
			st_die("tcp send %u: %s", k, n < 0 ? strerror(errno) : "short");
		if (k % (RECORDS / a.m) == 0 && seq <= a.m) {
			for (uint32_t i = 0; i < a.n; i++)
				st_send(udp, &a, seq, i, true);
			seq++;
		}
	}
	while (seq <= a.m) {
		for (uint32_t i = 0; i < a.n; i++)
			st_send(udp, &a, seq, i, true);
		seq++;
	}
	pthread_join(th, NULL);
	printf("tcp: %d records through, %llu UDP fan-outs\n", RECORDS, (unsigned long long)a.m);
	return 0;
}
