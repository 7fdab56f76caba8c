/* SPDX-License-Identifier: MIT */
/*
 * For measure.sh only: nanoseconds per call of sendto (a 64-subscriber fan-out of identical
 * 64-byte payloads on one UDP socket, as legacy-fanout --identical makes) and of poll, in a
 * tight loop. Run with tests/shim/libshim-fakesend.so preloaded (alone, or after the shim).
 */
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <netinet/in.h>
#include <sys/socket.h>

static uint64_t now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long calls = argc > 1 ? atol(argv[1]) : 1000000;
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in to[64];
	char msg[64];

	memset(msg, 7, sizeof(msg));
	for (int i = 0; i < 64; i++)
		to[i] = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(40000 + i),
					      .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	for (int i = 0; i < 1000; i++) /* warm up: the shim sets itself up on the first call */
		sendto(fd, msg, sizeof(msg), 0, (struct sockaddr *)&to[i % 64], sizeof(to[0]));
	uint64_t t0 = now();
	for (long i = 0; i < calls; i++) {
		msg[0] = (char)(i / 64); /* a new message every 64 destinations */
		sendto(fd, msg, sizeof(msg), 0, (struct sockaddr *)&to[i % 64], sizeof(to[0]));
	}
	uint64_t t1 = now();
	for (long i = 0; i < calls; i++)
		poll(NULL, 0, 0);
	uint64_t t2 = now();
	printf("sendto %.2f ns/call, poll %.2f ns/call\n", (double)(t1 - t0) / (double)calls,
	       (double)(t2 - t1) / (double)calls);
	return 0;
}
