/* SPDX-License-Identifier: MIT */
/*
 * bypass-queue ADDR PORT N: N datagrams of 64 bytes to ADDR:PORT (IPv4) from one unconnected
 * UDP socket, then the AF_XDP sockets this process holds: every descriptor in /proc/self/fd
 * whose SO_DOMAIN is AF_XDP (under multisend-run --bypass, the shim's port's; each one holds a
 * transmit queue of its interface). Prints "sent N, AF_XDP sockets K". Issue 26, item 11: a
 * program whose datagrams all go to loopback must hold none.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef AF_XDP
#define AF_XDP 44
#endif

int main(int argc, char **argv)
{
	struct sockaddr_in to = { .sin_family = AF_INET };
	unsigned char msg[64] = { 1, 2, 3 };

	if (argc != 4 || inet_pton(AF_INET, argv[1], &to.sin_addr) != 1) {
		fprintf(stderr, "usage: bypass-queue ADDR PORT N\n");
		return 2;
	}
	to.sin_port = htons((unsigned short)atoi(argv[2]));
	const long n = atol(argv[3]);
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return perror("socket"), 1;
	long sent = 0;
	for (long k = 0; k < n; k++)
		if (sendto(fd, msg, sizeof(msg), 0, (struct sockaddr *)&to, sizeof(to)) == sizeof(msg))
			sent++;
	int xdp = 0;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return perror("/proc/self/fd"), 1;
	for (struct dirent *e; (e = readdir(d));) {
		int dom = 0;
		socklen_t l = sizeof(dom);
		if (e->d_name[0] != '.' &&
		    getsockopt(atoi(e->d_name), SOL_SOCKET, SO_DOMAIN, &dom, &l) == 0 && dom == AF_XDP)
			xdp++;
	}
	closedir(d);
	printf("sent %ld, AF_XDP sockets %d\n", sent, xdp);
	return sent == n ? 0 : 1;
}
