/* SPDX-License-Identifier: MIT */
/*
 * errno and synchronous errors, the same with or without the shim, in every mode:
 *   - an errno value the program set survives a successful send (the first one, which makes
 *     the shim set itself up, and the following ones), a flushing recv, a poll, a close;
 *   - what sendto refuses at once is refused at once: EMSGSIZE (too big for UDP over IPv4),
 *     EAFNOSUPPORT (an IPv6 address on an IPv4 socket), EINVAL (short address, port 0),
 *     EDESTADDRREQ (send without an address on an unconnected socket), EBADF, ENOTSOCK.
 */
#include <netinet/in.h>
#include <poll.h>

#include "shimtest.h"

#define MARK EILSEQ

static void expect_ok(ssize_t r, const char *what)
{
	if (r < 0)
		st_die("%s failed: %s", what, strerror(errno));
	if (errno != MARK)
		st_die("%s succeeded but changed errno to %d (%s)", what, errno, strerror(errno));
}

static void expect_err(ssize_t r, int want, const char *what)
{
	if (r != -1 || errno != want)
		st_die("%s: returned %zd, errno %s; expected -1, %s", what, r, strerrorname_np(errno),
		       strerrorname_np(want));
}

int main(void)
{
	int rx = st_udp(), tx = st_udp(), pfd[2];
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(to);
	static uint8_t big[65508];
	uint8_t msg[ST_SIZE] = { 1, 2, 3 }, buf[256];

	if (bind(rx, (struct sockaddr *)&to, sizeof(to)) ||
	    getsockname(rx, (struct sockaddr *)&to, &l) || pipe(pfd))
		st_die("setup: %s", strerror(errno));

	/* Two destinations taking turns: a fan-out pattern, which batch mode batches. */
	int rx2 = st_udp();
	struct sockaddr_in to2 = to;
	to2.sin_port = 0;
	l = sizeof(to2);
	if (bind(rx2, (struct sockaddr *)&to2, sizeof(to2)) ||
	    getsockname(rx2, (struct sockaddr *)&to2, &l))
		st_die("setup: %s", strerror(errno));
	for (int k = 0; k < 100; k++) {
		errno = MARK;
		expect_ok(sendto(tx, msg, sizeof(msg), 0, (struct sockaddr *)(k % 2 ? &to2 : &to),
				 sizeof(to)),
			  "sendto");
	}
	for (int k = 0; k < 100; k++) {
		errno = MARK;
		expect_ok(recv(k % 2 ? rx2 : rx, buf, sizeof(buf), 0), "recv after sendto");
	}
	l = sizeof(to);
	errno = MARK;
	expect_ok(sendto(tx, msg, sizeof(msg), 0, (struct sockaddr *)&to, sizeof(to)), "sendto");
	struct pollfd p = { .fd = rx, .events = POLLIN };
	errno = MARK;
	expect_ok(poll(&p, 1, 10000), "poll");
	errno = MARK;
	expect_ok(recvfrom(rx, buf, sizeof(buf), 0, NULL, NULL), "recvfrom");

	struct sockaddr_in6 v6 = { .sin6_family = AF_INET6, .sin6_port = to.sin_port,
				   .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	struct sockaddr_in port0 = to;
	port0.sin_port = 0;
	expect_err(sendto(tx, big, sizeof(big), 0, (struct sockaddr *)&to, sizeof(to)), EMSGSIZE,
		   "65508 bytes over IPv4");
	expect_err(sendto(tx, msg, sizeof(msg), 0, (struct sockaddr *)&v6, sizeof(v6)),
		   EAFNOSUPPORT, "IPv6 address on an IPv4 socket");
	expect_err(sendto(tx, msg, sizeof(msg), 0, (struct sockaddr *)&to, 8), EINVAL,
		   "8-byte address");
	expect_err(sendto(tx, msg, sizeof(msg), 0, (struct sockaddr *)&port0, sizeof(port0)),
		   EINVAL, "port 0");
	expect_err(send(tx, msg, sizeof(msg), 0), EDESTADDRREQ, "send on an unconnected socket");
	expect_err(sendto(pfd[0], msg, sizeof(msg), 0, (struct sockaddr *)&to, sizeof(to)),
		   ENOTSOCK, "sendto on a pipe");
	int dead = st_udp();
	close(dead);
	expect_err(sendto(dead, msg, sizeof(msg), 0, (struct sockaddr *)&to, sizeof(to)), EBADF,
		   "sendto on a closed descriptor");

	/* And the ones that were refused did not disturb the good path. */
	errno = MARK;
	expect_ok(sendto(tx, msg, sizeof(msg), 0, (struct sockaddr *)&to, sizeof(to)), "sendto");
	errno = MARK;
	expect_ok(recv(rx, buf, sizeof(buf), 0), "recv");
	errno = MARK;
	expect_ok(close(tx), "close");
	printf("errno: preserved, and every synchronous error given at call time\n");
	return 0;
}
