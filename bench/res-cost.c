/* SPDX-License-Identifier: MIT */
/*
 * What a result array costs ms_send, in user-space instructions per destination (issue 12),
 * which multisend-bench --callgrind cannot say: it always sends without one. N destinations
 * (addresses of one local UDP receiver, whose drops are silent) on one unconnected socket;
 * CALLS fan-outs of 64 bytes after 8 more, with the result array (RES 1) or without (RES 0),
 * on BACKEND (1 loop, 2 sendmmsg, 3 io_uring). Run it under callgrind, counting ms_send only:
 *   valgrind --tool=callgrind --collect-atstart=no --toggle-collect=ms_send \
 *     build/bench/res-cost N CALLS BACKEND RES
 * and divide the total Ir by (the calls it prints x N). Not installed, not a test.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "multisend.h"

int main(int argc, char **argv)
{
	if (argc != 5)
		return 2;
	int n = atoi(argv[1]), calls = atoi(argv[2]), be = atoi(argv[3]), with_res = atoi(argv[4]);
	int rx = socket(AF_INET, SOCK_DGRAM, 0), tx = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	if (bind(rx, (struct sockaddr *)&a, sizeof(a)) || getsockname(rx, (struct sockaddr *)&a, &al))
		return 1;
	struct ms_config cfg = { .size = sizeof(cfg), .backend = (uint32_t)be,
				 .flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV };
	struct ms_ctx *ctx;
	struct ms_group *g;
	if (ms_ctx_new(&ctx, &cfg) || ms_group_new(ctx, &g))
		return 1;
	for (int i = 0; i < n; i++) {
		struct ms_dest d = { .fd = tx, .addr = (struct sockaddr *)&a, .addrlen = sizeof(a) };
		if (ms_group_add(g, &d) < 0)
			return 1;
	}
	struct ms_result *res = calloc((size_t)n, sizeof(*res));
	char msg[64] = { 0 };
	long ok = 0;
	for (int c = 0; c < 8; c++) /* warm-up: not counted only if toggled off; tiny anyway */
		ok += ms_send(g, msg, sizeof(msg), 0, with_res ? res : NULL);
	for (int c = 0; c < calls; c++)
		ok += ms_send(g, msg, sizeof(msg), 0, with_res ? res : NULL);
	printf("n=%d calls=%d backend=%d res=%d sizeof(ms_result)=%zu res_bytes_per_dest=%zu ok=%ld\n",
	       n, calls + 8, be, with_res, sizeof(struct ms_result), with_res ? sizeof(*res) : 0, ok);
	ms_group_free(g);
	ms_ctx_free(ctx);
	free(res);
	return 0;
}
