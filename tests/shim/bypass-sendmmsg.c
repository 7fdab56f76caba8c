/* SPDX-License-Identifier: MIT */
/*
 * bypass-sendmmsg: sendmmsg vectors that mix destinations the bypass carries (the peer
 * 10.77.0.2 / fd77::2, ports PORT0 and PORT0+1, streams 0 and 1 of bypass-recv.py dgram),
 * destinations on this namespace's loopback (a receiver of its own, which it drains and
 * prints) and destinations that fail in the middle (no route, EMSGSIZE, broadcast without
 * SO_BROADCAST). Each vector is sent as a program would: sendmmsg from the first unsent
 * message, skipping one message after a -1. Prints each call's return value, errno and every
 * msg_len (unsent ones keep the sentinel 7777), then what the local receiver got. Run without
 * the shim and under multisend-run --bypass: the outputs must be identical, and so must the
 * peer's receiver's.
 *
 *   bypass-sendmmsg PORT0 v4|v6
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bypass-proto.h"

#define MAXV 64
#define SENTINEL 7777

enum kind { R0, R1, LOC, NOROUTE, BIG, BCAST };

static uint32_t seq[2], lseq;
static uint16_t port0, lport;
static bool six;

static socklen_t dest(enum kind k, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (six) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		const char *a = k == LOC ? "::1" : k == NOROUTE ? "2001:db8:99::1" :
			       k == BCAST ? "ff02::1" : "fd77::2";

		s->sin6_family = AF_INET6;
		inet_pton(AF_INET6, a, &s->sin6_addr);
		s->sin6_port = htons(k == LOC ? lport : k == R1 ? port0 + 1 : port0);
		return sizeof(*s);
	}
	struct sockaddr_in *s = (struct sockaddr_in *)ss;
	const char *a = k == LOC ? "127.0.0.1" : k == NOROUTE ? "10.99.0.1" :
		       k == BCAST ? "10.77.0.255" : "10.77.0.2";

	s->sin_family = AF_INET;
	inet_pton(AF_INET, a, &s->sin_addr);
	s->sin_port = htons(k == LOC ? lport : k == R1 ? port0 + 1 : port0);
	return sizeof(*s);
}

static void run(int fd, const char *name, const char *pattern, int flags)
{
	static uint8_t bufs[MAXV][66000];
	struct sockaddr_storage ss[MAXV];
	struct iovec iov[MAXV];
	struct mmsghdr mm[MAXV];
	int n = (int)strlen(pattern);

	for (int j = 0; j < n; j++) {
		enum kind k = pattern[j] == '0' ? R0 : pattern[j] == '1' ? R1 :
			      pattern[j] == 'L' ? LOC : pattern[j] == 'N' ? NOROUTE :
			      pattern[j] == 'M' ? BIG : BCAST;
		uint32_t len = 64 + 8 * (uint32_t)j, s;

		/* The sequence number a datagram gets is its destination's next one: a datagram
		 * that is never sent leaves a gap the receiver shows (it should not happen). */
		if (k == R0 || k == R1)
			s = seq[k]++;
		else if (k == LOC)
			s = lseq++;
		else
			s = 100000 + (uint32_t)j;
		if (k == BIG)
			len = six ? 65528 : 65508;
		bp_make(bufs[j], k == R1 ? 1 : 0, s, len);
		iov[j] = (struct iovec){ bufs[j], len };
		mm[j] = (struct mmsghdr){ .msg_hdr = { .msg_name = &ss[j],
						       .msg_namelen = dest(k == BIG ? R0 : k, &ss[j]),
						       .msg_iov = &iov[j], .msg_iovlen = 1 },
					  .msg_len = SENTINEL };
	}
	printf("%s (%s):", name, pattern);
	for (int off = 0; off < n;) {
		errno = 0;
		int r = sendmmsg(fd, mm + off, (unsigned)(n - off), flags);
		char b[64];

		printf(" [%d]=%s", off, bp_result(r, errno, b, sizeof(b)));
		off += r > 0 ? r : 1;
	}
	printf(" lens");
	for (int j = 0; j < n; j++)
		printf(" %u", mm[j].msg_len);
	printf("\n");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: bypass-sendmmsg PORT0 v4|v6\n");
		return 2;
	}
	port0 = (uint16_t)atoi(argv[1]);
	six = !strcmp(argv[2], "v6");

	int fam = six ? AF_INET6 : AF_INET;
	int fd = socket(fam, SOCK_DGRAM | SOCK_CLOEXEC, 0), lfd = socket(fam, SOCK_DGRAM, 0);
	struct sockaddr_storage la;
	socklen_t ll = dest(LOC, &la);

	((struct sockaddr_in *)&la)->sin_port = 0;
	if (fd < 0 || lfd < 0 || bind(lfd, (struct sockaddr *)&la, ll) ||
	    getsockname(lfd, (struct sockaddr *)&la, &ll)) {
		perror("bypass-sendmmsg: set-up");
		return 1;
	}
	lport = ntohs(((struct sockaddr_in *)&la)->sin_port);

	/* 0, 1: the peer's two ports; L: loopback; N: no route; M: too big; B: broadcast
	 * without SO_BROADCAST (v6: ff02::1, all nodes, which is allowed and loops back). */
	run(fd, "peer only", "0101010101", 0);
	run(fd, "local only", "LLLL", 0);
	run(fd, "mixed", "01L0L1N0L10L", 0);
	run(fd, "no route first", "N0101", 0);
	run(fd, "no route last", "0101N", 0);
	run(fd, "two failures", "0NN1L", 0);
	run(fd, "too big in the middle", "01M10", 0);
	run(fd, "broadcast in the middle", "0L1B01", 0);
	run(fd, "dontwait", "01L01NL10", MSG_DONTWAIT);
	char longv[MAXV + 1];
	for (int j = 0; j < MAXV; j++)
		longv[j] = "01L0101L"[j % 8];
	longv[MAXV] = 0;
	longv[40] = 'N';
	run(fd, "64 with one failure", longv, 0);

	/* The local receiver: every datagram it got, in order. */
	uint8_t buf[70000];
	uint32_t got = 0, inorder = 1;
	struct pollfd p = { .fd = lfd, .events = POLLIN };

	while (got < lseq && poll(&p, 1, 5000) == 1) {
		ssize_t r = recv(lfd, buf, sizeof(buf), 0);
		uint32_t s;

		if (r < BP_HDR)
			break;
		uint8_t want[70000];
		uint32_t len;

		memcpy(&s, buf + 8, 4);
		memcpy(&len, buf + 12, 4);
		bp_make(want, 0, le32toh(s), le32toh(len));
		if (le32toh(s) != got || le32toh(len) != (uint32_t)r || memcmp(want, buf, (size_t)r))
			inorder = 0;
		got++;
	}
	printf("local receiver: %u of %u datagrams, %s\n", got, lseq,
	       inorder ? "in order, intact" : "NOT in order or NOT intact");

	/* End markers for the peer's receiver. */
	for (int k = 0; k < 2; k++) {
		struct sockaddr_storage ss;
		socklen_t l = dest(k ? R1 : R0, &ss);
		uint8_t m[BP_HDR];

		bp_make(m, (uint32_t)k, BP_END, BP_HDR);
		sendto(fd, m, sizeof(m), 0, (struct sockaddr *)&ss, l);
	}
	printf("peer streams: %u %u\n", seq[0], seq[1]);
	return 0;
}
