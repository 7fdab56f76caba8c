/* SPDX-License-Identifier: MIT */
/*
 * bypass-sigsend: a signal handler that sends while the main thread is inside the shim's send.
 * The main thread sends M datagrams (stream 0) to HOST:PORT0 as fast as it can; a 50 us
 * interval timer's handler sends one datagram of stream 1 to HOST:PORT0+1 per tick. Each
 * stream has one sender, so bypass-recv.py must see each in order, exactly once. Prints the
 * counts (the handler's depends on timing; the test compares it with the receiver's).
 *
 *   bypass-sigsend HOST PORT0 M
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "bypass-proto.h"

static int hfd;
static struct sockaddr_in hto;
static volatile sig_atomic_t hseq, herr;

static void on_tick(int sig)
{
	uint8_t m[100];
	int saved = errno;

	(void)sig;
	bp_make(m, 1, (uint32_t)hseq, sizeof(m));
	if (sendto(hfd, m, sizeof(m), 0, (struct sockaddr *)&hto, sizeof(hto)) == (ssize_t)sizeof(m))
		hseq++;
	else
		herr = errno;
	errno = saved;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: bypass-sigsend HOST PORT0 M\n");
		return 2;
	}
	uint16_t port0 = (uint16_t)atoi(argv[2]);
	uint32_t m = (uint32_t)atoi(argv[3]);
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(port0) };
	uint8_t buf[64];
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	hfd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (inet_pton(AF_INET, argv[1], &to.sin_addr) != 1 || fd < 0 || hfd < 0) {
		perror("bypass-sigsend: set-up");
		return 1;
	}
	hto = to;
	hto.sin_port = htons(port0 + 1);

	struct sigaction sa = { .sa_handler = on_tick, .sa_flags = SA_RESTART };
	struct itimerval it = { { 0, 50 }, { 0, 50 } };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
	for (uint32_t seq = 0; seq < m; seq++) {
		ssize_t r;

		bp_make(buf, 0, seq, sizeof(buf));
		do
			r = sendto(fd, buf, sizeof(buf), 0, (struct sockaddr *)&to, sizeof(to));
		while (r < 0 && errno == EINTR);
		if (r != (ssize_t)sizeof(buf)) {
			perror("bypass-sigsend: sendto");
			return 1;
		}
	}
	struct itimerval off = { { 0, 0 }, { 0, 0 } };
	setitimer(ITIMER_REAL, &off, NULL);
	if (herr) {
		fprintf(stderr, "bypass-sigsend: the handler's sendto: %s\n", strerror(herr));
		return 1;
	}
	for (uint32_t k = 0; k < 2; k++) {
		struct sockaddr_in e = to;
		uint8_t em[BP_HDR];

		e.sin_port = htons(port0 + k);
		bp_make(em, k, BP_END, BP_HDR);
		sendto(fd, em, sizeof(em), 0, (struct sockaddr *)&e, sizeof(e));
	}
	printf("main %u handler %u\n", m, (unsigned)hseq);
	return 0;
}
