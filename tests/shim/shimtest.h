/* SPDX-License-Identifier: MIT */
/*
 * Helpers for the shim's test programs. Each program sends legacy-fanout's datagrams (see
 * examples/md-proto.h) so that examples/fanout-receiver can check every one of them: message
 * seq (1..M) to subscriber i at 127.0.0.1:PORT+i, exactly once, in order per subscriber.
 * Exit status: 0 pass, 1 fail, 2 usage, 77 skip.
 */
#ifndef SHIMTEST_H
#define SHIMTEST_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "md-proto.h"

#define ST_SIZE 64

static inline void st_die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static inline void st_die(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "FAIL: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(1);
}

struct st_args {
	uint16_t port; /* first subscriber */
	uint32_t n;    /* subscribers */
	uint64_t m;    /* messages */
};

/* argv: PORT N M [extra...]; returns the index of the first extra argument. */
static inline int st_args(int argc, char **argv, struct st_args *a)
{
	if (argc < 4) {
		fprintf(stderr, "usage: %s PORT SUBSCRIBERS MESSAGES ...\n", argv[0]);
		exit(2);
	}
	a->port = (uint16_t)ex_num("port", argv[1], 1, 65535);
	a->n = (uint32_t)ex_num("subscribers", argv[2], 1, 65535);
	a->m = ex_num("messages", argv[3], 1, 1000000);
	return 4;
}

static inline struct sockaddr_in st_addr(const struct st_args *a, uint32_t i)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)(a->port + i)),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	return sin;
}

/* Message seq for subscriber i, as legacy-fanout sends it (identical: --identical). */
static inline void st_msg(uint8_t *buf, uint64_t seq, uint32_t i, bool identical)
{
	struct lf_hdr h = {
		.magic = htole32(LF_MAGIC),
		.subscriber = htole32(identical ? LF_ANY_SUBSCRIBER : i),
		.seq = htole64(seq),
		.size = htole32(ST_SIZE),
	};
	memcpy(buf, &h, sizeof(h));
	lf_fill(buf + sizeof(h), ST_SIZE - sizeof(h), seq);
}

/* sendto message seq to subscriber i; any failure ends the test. */
static inline void st_send(int fd, const struct st_args *a, uint64_t seq, uint32_t i,
			   bool identical)
{
	uint8_t buf[ST_SIZE];
	struct sockaddr_in sin = st_addr(a, i);
	ssize_t r;

	st_msg(buf, seq, i, identical);
	do
		r = sendto(fd, buf, sizeof(buf), 0, (struct sockaddr *)&sin, sizeof(sin));
	while (r < 0 && errno == EINTR);
	if (r != (ssize_t)sizeof(buf))
		st_die("sendto message %llu to subscriber %u: %s", (unsigned long long)seq, i,
		       r < 0 ? strerror(errno) : "short");
}

static inline int st_udp(void)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		st_die("socket: %s", strerror(errno));
	return fd;
}

#endif
