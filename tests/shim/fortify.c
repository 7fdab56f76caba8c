/* SPDX-License-Identifier: MIT */
/*
 * Built with -O2 -D_FORTIFY_SOURCE=2, so recv, recvfrom, read, poll and ppoll become
 * __recv_chk, __recvfrom_chk, __read_chk, __poll_chk and __ppoll_chk (the driver checks the
 * binary's imports). Each round sends a fan-out to four sockets of this program and then,
 * first thing, makes one of those calls: it must flush the batch, or the call waits for the
 * age bound (the driver sets it to seconds and checks the report's flush reasons).
 */
#include <poll.h>
#include <signal.h>

#include "shimtest.h"

#define RX 4

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 50;
	volatile size_t want = ST_SIZE; /* not a constant: the fortified paths need that */
	int rx[RX], tx = st_udp();
	struct sockaddr_in to[RX];
	struct st_args a = { .n = RX, .m = (uint64_t)rounds };

	for (int k = 0; k < RX; k++) {
		socklen_t l = sizeof(to[k]);
		to[k] = (struct sockaddr_in){ .sin_family = AF_INET,
					      .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		rx[k] = st_udp();
		if (bind(rx[k], (struct sockaddr *)&to[k], sizeof(to[k])) ||
		    getsockname(rx[k], (struct sockaddr *)&to[k], &l))
			st_die("bind: %s", strerror(errno));
	}
	for (int r = 1; r <= rounds; r++) {
		uint8_t msg[ST_SIZE], buf[ST_SIZE + 16], want_msg[ST_SIZE];
		st_msg(msg, (uint64_t)r, 0, true);
		for (int k = 0; k < RX; k++)
			if (sendto(tx, msg, sizeof(msg), 0, (struct sockaddr *)&to[k],
				   sizeof(to[k])) != ST_SIZE)
				st_die("sendto: %s", strerror(errno));
		struct pollfd p[RX];
		volatile nfds_t np = RX; /* not a constant: poll becomes __poll_chk */
		for (int k = 0; k < RX; k++)
			p[k] = (struct pollfd){ .fd = rx[k], .events = POLLIN };
		struct timespec ts = { 10, 0 };
		switch (r % 5) {
		case 0: if (poll(p, np, 10000) <= 0) st_die("poll"); break;
		case 1: if (ppoll(p, np, &ts, NULL) <= 0) st_die("ppoll"); break;
		default: break; /* the receive itself is the first call */
		}
		for (int k = 0; k < RX; k++) {
			ssize_t n;
			switch ((r + k) % 3) {
			case 0: n = recv(rx[k], buf, want, 0); break;
			case 1: n = recvfrom(rx[k], buf, want, 0, NULL, NULL); break;
			default: n = read(rx[k], buf, want); break;
			}
			st_msg(want_msg, (uint64_t)r, 0, true);
			if (n != ST_SIZE || memcmp(buf, want_msg, ST_SIZE))
				st_die("round %d socket %d: wrong datagram", r, k);
		}
	}
	(void)a;
	printf("fortify: %d rounds\n", rounds);
	return 0;
}
