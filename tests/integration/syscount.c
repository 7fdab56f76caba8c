/* SPDX-License-Identifier: MIT */
/*
 * `syscount BACKEND KIND N ROUNDS`: fan ROUNDS messages out to N real loopback destinations
 * (KIND: shared = one unconnected UDP socket with N addresses, connected = N connected UDP
 * sockets), check every copy arrived, and print the library's own system-call counter. The
 * 'syscalls' suite runs this under strace and checks that both counts agree with the
 * backend's promise. BACKEND auto: also the number of fan-outs AUTO timed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "multisend.h"
#include "net.h"

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s loop|sendmmsg|io_uring|auto shared|connected N ROUNDS\n", argv[0]);
		return 2;
	}
	int parsed = ms_backend_from_name(argv[1]);
	enum ms_backend b = parsed > 0 ? (enum ms_backend)parsed : MS_BACKEND_AUTO;
	enum kind kind = !strcmp(argv[2], "connected") ? K_UDP4_CONN : K_UDP4;
	size_t n = strtoul(argv[3], NULL, 10);
	unsigned rounds = (unsigned)strtoul(argv[4], NULL, 10);
	if (parsed < 0 || !n || !rounds) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}

	/* Up to 6,000 ports, and receivers that must see only the test's own datagrams. */
	net_private_netns("syscount");

	/* AUTO reads MULTISEND_AUTO_RECHECK (the suite sets it) and nothing else of the
	 * environment that matters here. */
	struct ms_config cfg = { .size = sizeof(cfg), .backend = b,
				 .flags = b == MS_BACKEND_AUTO ? 0
							: MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV };
	struct ms_ctx *ctx;
	int err = ms_ctx_new(&ctx, &cfg);
	if (err) {
		printf("backend %s unavailable: %s\n", argv[1], ms_strerror(err));
		return 77;
	}
	net_raise_nofile((unsigned)(2 * n + 64));
	struct net nt;
	net_init(&nt);
	struct ms_group *g;
	if ((err = ms_group_new(ctx, &g)) || (err = net_add(&nt, kind, n)) ||
	    (err = net_join(&nt, g, 0))) {
		fprintf(stderr, "setup: %s\n", ms_strerror(err));
		return 1;
	}
	unsigned char msg[64];
	for (unsigned r = 0; r < rounds; r++) {
		make_payload(msg, sizeof(msg), r);
		int got = ms_send(g, msg, sizeof(msg), 0, NULL);
		if (got != (int)n) {
			fprintf(stderr, "round %u: %d of %zu accepted\n", r, got, n);
			return 1;
		}
		for (size_t i = 0; i < n; i++)
			if (!expect_one(&nt.ep[i], msg, sizeof(msg), 2000))
				return 1;
	}
	struct ms_stats st = { .size = sizeof(st) };
	ms_ctx_stats(ctx, &st);
	printf("backend=%s kind=%s n=%zu rounds=%u fanouts=%llu syscalls=%llu sampled=%llu\n",
	       argv[1], argv[2], n, rounds, (unsigned long long)st.fanouts,
	       (unsigned long long)st.syscalls, (unsigned long long)st.auto_sampled);
	ms_group_free(g);
	ms_ctx_free(ctx);
	net_free(&nt);
	return 0;
}
