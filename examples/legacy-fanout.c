/* SPDX-License-Identifier: MIT */
/*
 * legacy-fanout: the fan-out every publisher starts with, and the program the LD_PRELOAD shim
 * is tested under. It deliberately does NOT use libmultisend: one blocking UDP socket, and for
 * each message, for each subscriber, one sendto(2) with no flags.
 *
 * Message m (1..M) goes to subscriber i (0..N-1) at PORT+i; fanout-receiver checks it byte for
 * byte (format in md-proto.h).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "md-proto.h"

#define MAX_ERRNO 256 /* errs[0] counts anything larger: Linux errnos stay below 134 */

static void usage(FILE *out)
{
	fprintf(out,
		"usage: legacy-fanout [options]\n"
		"  --dest HOST:PORT   first subscriber; subscriber i is PORT+i\n"
		"                     (default 127.0.0.1:6000, [::1]:6000 with --ipv6)\n"
		"  --subscribers N    (default 64)\n"
		"  --messages M       (default 1000)\n"
		"  --size BYTES       datagram size, >= %zu (default 64)\n"
		"  --rate R           messages per second, 0 = as fast as possible (default 0)\n"
		"  --ipv6             IPv6 socket and destinations\n"
		"  --identical        send byte-identical datagrams to every subscriber (the\n"
		"                     subscriber field is %#x), as most real publishers do\n"
		"  --help\n",
		sizeof(struct lf_hdr), LF_ANY_SUBSCRIBER);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dest", required_argument, NULL, 'd' },
		{ "subscribers", required_argument, NULL, 'n' },
		{ "messages", required_argument, NULL, 'm' },
		{ "size", required_argument, NULL, 's' },
		{ "rate", required_argument, NULL, 'r' },
		{ "ipv6", no_argument, NULL, '6' },
		{ "identical", no_argument, NULL, 'I' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *dest = NULL;
	uint64_t nsubs = 64, messages = 1000, rate = 0, size = 64;
	bool ipv6 = false, identical = false;
	static uint64_t errs[MAX_ERRNO];
	uint64_t calls = 0, nerrs = 0, shorts = 0;
	struct sockaddr_storage dst;
	socklen_t dstlen;
	int c, fd;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dest = optarg; break;
		case 'n': nsubs = ex_num("subscribers", optarg, 1, 65535); break;
		case 'm': messages = ex_num("messages", optarg, 0, UINT64_MAX / 2); break;
		case 's': size = ex_num("size", optarg, sizeof(struct lf_hdr), 65507); break;
		case 'r': rate = ex_num("rate", optarg, 0, 1000000000); break;
		case '6': ipv6 = true; break;
		case 'I': identical = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	if (!dest)
		dest = ipv6 ? "[::1]:6000" : "127.0.0.1:6000";
	if (ex_parse_addr(dest, -1, ipv6 ? AF_INET6 : AF_INET, &dst, &dstlen) < 0)
		return 2;

	uint16_t port0 = ex_port(&dst);

	if (port0 == 0 || port0 + nsubs - 1 > 65535) {
		fprintf(stderr, "legacy-fanout: ports %u..%" PRIu64 " are not all valid\n", port0,
			port0 + nsubs - 1);
		return 2;
	}

	uint8_t *msg = malloc(size);

	fd = socket(dst.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (!msg || fd < 0) {
		perror("legacy-fanout");
		return 1;
	}

	uint64_t t0 = ex_now_ns(CLOCK_MONOTONIC);

	for (uint64_t seq = 1; seq <= messages; seq++) {
		struct lf_hdr h = {
			.magic = htole32(LF_MAGIC),
			.subscriber = htole32(LF_ANY_SUBSCRIBER),
			.seq = htole64(seq),
			.size = htole32((uint32_t)size),
		};

		if (rate) {
			/* Message seq is due at t0 + (seq-1)/rate s, exactly, on an absolute
			 * clock: a late message does not push back the ones after it. */
			uint64_t k = seq - 1;
			uint64_t due = t0 + k / rate * 1000000000u + k % rate * 1000000000u / rate;
			struct timespec ts = { .tv_sec = (time_t)(due / 1000000000u),
					       .tv_nsec = (long)(due % 1000000000u) };

			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
				;
		}
		lf_fill(msg + sizeof(h), size - sizeof(h), seq);
		for (uint64_t i = 0; i < nsubs; i++) {
			ssize_t n;

			if (!identical)
				h.subscriber = htole32((uint32_t)i);
			memcpy(msg, &h, sizeof(h));
			ex_set_port(&dst, (uint16_t)(port0 + i));
			do {
				calls++;
				n = sendto(fd, msg, size, 0, (struct sockaddr *)&dst, dstlen);
			} while (n < 0 && errno == EINTR);
			if (n < 0) {
				nerrs++;
				errs[errno < MAX_ERRNO ? errno : 0]++;
			} else if ((size_t)n != size) {
				nerrs++;
				shorts++;
			}
		}
	}

	double secs = (double)(ex_now_ns(CLOCK_MONOTONIC) - t0) / 1e9;

	close(fd);
	free(msg);
	printf("legacy-fanout: messages %" PRIu64 ", subscribers %" PRIu64 ", sendto calls %" PRIu64
	       ", errors %" PRIu64, messages, nsubs, calls, nerrs);
	const char *sep = " (";

	for (int e = 0; e < MAX_ERRNO; e++) {
		const char *name = e ? strerrorname_np(e) : NULL;

		if (errs[e]) {
			printf("%s%s %" PRIu64, sep, name ? name : "other", errs[e]);
			sep = ", ";
		}
	}
	if (shorts) {
		printf("%sshort sends %" PRIu64, sep, shorts);
		sep = ", ";
	}
	printf("%s, elapsed %.3f s\n", sep[0] == ',' ? ")" : "", secs);
	if (fflush(stdout) == EOF)
		return 1;
	return nerrs ? 1 : 0;
}
