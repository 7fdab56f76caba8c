/* SPDX-License-Identifier: MIT */
/*
 * Non-blocking sockets pass through, and EAGAIN reaches the program.
 *   - A UDP socket opened non-blocking sends to the first half of the subscribers; a blocking
 *     one sends to the second half and is switched to O_NONBLOCK with fcntl (behind the
 *     shim's back) half way through. The receiver checks everything arrived in order; the
 *     driver checks in the report that the first socket had nothing batched.
 *   - Loopback UDP never fills a sender's buffer, so EAGAIN is shown on a non-blocking
 *     AF_UNIX datagram socket whose peer does not read: sends until EAGAIN, which the
 *     program must see as such (errno EAGAIN, return -1).
 */
#include <fcntl.h>

#include "shimtest.h"

int main(int argc, char **argv)
{
	struct st_args a;
	st_args(argc, argv, &a);
	int nb = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), bl = st_udp();
	uint32_t half = a.n / 2;

	if (nb < 0 || half == 0)
		st_die("socket, or fewer than 2 subscribers");
	for (uint64_t seq = 1; seq <= a.m; seq++) {
		if (seq == a.m / 2 + 1 && fcntl(bl, F_SETFL, fcntl(bl, F_GETFL) | O_NONBLOCK) < 0)
			st_die("fcntl: %s", strerror(errno));
		for (uint32_t i = 0; i < a.n; i++) {
			/* Non-blocking UDP on loopback does not fill up; retry if it ever does. */
			for (;;) {
				uint8_t buf[ST_SIZE];
				struct sockaddr_in sin = st_addr(&a, i);
				st_msg(buf, seq, i, true);
				ssize_t r = sendto(i < half ? nb : bl, buf, sizeof(buf), 0,
						   (struct sockaddr *)&sin, sizeof(sin));
				if (r == (ssize_t)sizeof(buf))
					break;
				if (r < 0 && (errno == EAGAIN || errno == EINTR))
					continue;
				st_die("sendto: %s", r < 0 ? strerror(errno) : "short");
			}
		}
	}

	int sv[2];
	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
		st_die("socketpair: %s", strerror(errno));
	char msg[256] = { 0 };
	long sent = 0;
	int saw = 0;
	for (int k = 0; k < 100000; k++) {
		errno = 0;
		ssize_t r = send(sv[0], msg, sizeof(msg), 0);
		if (r == (ssize_t)sizeof(msg)) {
			sent++;
			continue;
		}
		if (r == -1 && errno == EAGAIN) {
			saw = 1;
			break;
		}
		st_die("unix send: returned %zd, %s", r, strerror(errno));
	}
	if (!saw)
		st_die("no EAGAIN after %ld datagrams to a peer that does not read", sent);
	printf("nonblock: passed, EAGAIN seen after %ld datagrams\n", sent);
	return 0;
}
