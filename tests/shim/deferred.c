/* SPDX-License-Identifier: MIT */
/*
 * An error a route decides: a datagram to the subnet broadcast address 127.255.255.255
 * without SO_BROADCAST (EACCES). Batch mode asks the route before it batches a destination,
 * so shim-test.sh expects "immediate" in every mode; "batched" and "deferred" describe what
 * the program checks for an error found only at flush (a route removed after the check):
 *   immediate  the sendto itself fails with EACCES;
 *   batched    batch mode: the sendto returns 64, the error is counted at flush, and the next
 *              send on the socket is not affected;
 *   deferred   batch mode with MULTISEND_DEFER_ERRORS=1: as batched, but the next send on the
 *              socket fails with EACCES (and is not sent); the one after succeeds.
 * In every case the good datagrams arrive.
 */
#include <fcntl.h>
#include <poll.h>

#include "shimtest.h"

int main(int argc, char **argv)
{
	if (argc != 2)
		st_die("usage: deferred immediate|batched|deferred");
	const char *want = argv[1];
	int rx = st_udp(), tx = st_udp();
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(to);
	if (bind(rx, (struct sockaddr *)&to, sizeof(to)) || getsockname(rx, (struct sockaddr *)&to, &l))
		st_die("bind: %s", strerror(errno));
	struct sockaddr_in bcast = to;
	bcast.sin_addr.s_addr = htonl(0x7fffffff); /* 127.255.255.255 */
	uint8_t msg[ST_SIZE] = { 42 };

	errno = 0;
	ssize_t r = sendto(tx, msg, sizeof(msg), 0, (struct sockaddr *)&bcast, sizeof(bcast));
	if (!strcmp(want, "immediate")) {
		if (r != -1 || errno != EACCES)
			st_die("broadcast without SO_BROADCAST: %zd, %s; expected EACCES", r,
			       strerror(errno));
	} else if (r != sizeof(msg)) {
		st_die("broadcast in batch mode: %zd, %s; expected it batched", r, strerror(errno));
	}
	poll(NULL, 0, 0); /* a flush point: the batch goes out, the kernel says EACCES */

	int delivered = 0;
	r = sendto(tx, msg, sizeof(msg), 0, (struct sockaddr *)&to, sizeof(to));
	if (!strcmp(want, "deferred")) {
		if (r != -1 || errno != EACCES)
			st_die("the send after the failed flush: %zd, %s; expected the deferred EACCES",
			       r, strerror(errno));
		r = sendto(tx, msg, sizeof(msg), 0, (struct sockaddr *)&to, sizeof(to));
	}
	if (r != sizeof(msg))
		st_die("good send: %zd, %s", r, strerror(errno));
	uint8_t buf[128];
	while (recv(rx, buf, sizeof(buf), 0) == sizeof(msg)) {
		delivered++;
		fcntl(rx, F_SETFL, O_NONBLOCK); /* the first recv flushed and waited; the rest not */
	}
	if (delivered != 1)
		st_die("%d datagrams arrived, expected 1", delivered);
	printf("deferred: %s as expected\n", want);
	return 0;
}
