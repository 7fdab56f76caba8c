/* SPDX-License-Identifier: MIT */
/*
 * For measure.sh only: the kernel's floor for batch mode. The same fan-out as legacy-fanout
 * --identical (N subscribers at 127.0.0.1:PORT+i, M messages of 64 bytes), sent by hand
 * either as one sendto per destination or as one sendmmsg per fan-out, with no shim: what
 * the kernel charges per datagram on each path.
 *   rawsend sendto|sendmmsg PORT N M
 */
#include "shimtest.h"

int main(int argc, char **argv)
{
	if (argc != 5)
		return 2;
	bool mmsg = !strcmp(argv[1], "sendmmsg");
	struct st_args a;
	st_args(argc - 1, argv + 1, &a);
	int fd = st_udp();
	struct sockaddr_in *to = calloc(a.n, sizeof(*to));
	struct mmsghdr *mm = calloc(a.n, sizeof(*mm));
	uint8_t msg[ST_SIZE];
	struct iovec iov = { .iov_base = msg, .iov_len = sizeof(msg) };

	for (uint32_t i = 0; i < a.n; i++) {
		to[i] = st_addr(&a, i);
		mm[i].msg_hdr = (struct msghdr){ .msg_name = &to[i], .msg_namelen = sizeof(to[i]),
						 .msg_iov = &iov, .msg_iovlen = 1 };
	}
	for (uint64_t seq = 1; seq <= a.m; seq++) {
		st_msg(msg, seq, 0, true);
		if (mmsg) {
			for (uint32_t off = 0; off < a.n;) {
				int r = sendmmsg(fd, mm + off, a.n - off, 0);
				if (r <= 0)
					st_die("sendmmsg: %s", strerror(errno));
				off += (uint32_t)r;
			}
		} else {
			for (uint32_t i = 0; i < a.n; i++)
				if (sendto(fd, msg, sizeof(msg), 0, (struct sockaddr *)&to[i],
					   sizeof(to[i])) != sizeof(msg))
					st_die("sendto: %s", strerror(errno));
		}
	}
	return 0;
}
