/* SPDX-License-Identifier: MIT */
/*
 * Wire formats of the examples, plus the small helpers their programs share.
 *
 * Every multi-byte field is little-endian on the wire, whatever the host, so a capture taken
 * on one machine decodes on any other. The structs are only used as the layout of a local
 * buffer; every field goes through htole/letoh.
 */
#ifndef MD_PROTO_H
#define MD_PROTO_H

#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* ---------------------------------------------------------------------------------------------
 * md-publisher -> md-subscriber
 *
 * Control channel (UDP, text, no terminator): a subscriber sends "JOIN" or "LEAVE" from its
 * data socket, so the publisher learns the data address from the datagram's source. The
 * publisher answers "ACK <id>" to JOIN (again for a repeated JOIN: the subscriber retries until
 * it sees one, and the first ACK may have been lost) and "BYE" to LEAVE.
 */
#define MD_MAGIC_TICK UINT32_C(0x314b544d) /* "MTK1" read as bytes */
#define MD_MAGIC_END  UINT32_C(0x31444e45) /* "END1" */

struct md_tick {
	uint32_t magic;  /* MD_MAGIC_TICK or MD_MAGIC_END */
	uint32_t size;   /* datagram length, so a receiver can tell truncation from padding */
	uint64_t seq;    /* 1, 2, ...; on END: the last tick's sequence number */
	uint64_t ts_ns;  /* CLOCK_REALTIME at send time, to measure one-way delay on one host */
	int64_t price;   /* fixed point, 1e-4 units */
	uint32_t symbol;
	uint32_t qty;
};
_Static_assert(sizeof(struct md_tick) == 40, "md_tick must have no hidden padding");

#define MD_PORT_DEFAULT 5000

/* ---------------------------------------------------------------------------------------------
 * legacy-fanout -> fanout-receiver
 *
 * Message m (1..M) to subscriber i (0..N-1) goes to PORT+i. The payload after the header is a
 * function of m alone, so a receiver checks every byte, and a header glued to another
 * message's payload (a batching bug) does not pass.
 */
#define LF_MAGIC UINT32_C(0x3146474c) /* "LGF1" */
/* Subscriber field of a message sent byte-identical to every subscriber (--identical). */
#define LF_ANY_SUBSCRIBER UINT32_MAX

struct lf_hdr {
	uint32_t magic;
	uint32_t subscriber; /* index i, or LF_ANY_SUBSCRIBER */
	uint64_t seq;
	uint32_t size;       /* datagram length */
	uint32_t reserved;   /* zero */
};
_Static_assert(sizeof(struct lf_hdr) == 24, "lf_hdr must have no hidden padding");

/* Byte j of the pattern after the header of message seq: an xorshift stream seeded by seq, so
 * neighbouring messages differ in every byte rather than by a constant offset. */
static inline void lf_fill(uint8_t *p, size_t n, uint64_t seq)
{
	uint64_t x = seq * UINT64_C(0x9e3779b97f4a7c15) + 1;

	for (size_t j = 0; j < n; j++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[j] = (uint8_t)(x >> 32);
	}
}

/* 0 if p[0..n) is the pattern of seq. */
static inline int lf_check(const uint8_t *p, size_t n, uint64_t seq)
{
	uint64_t x = seq * UINT64_C(0x9e3779b97f4a7c15) + 1;

	for (size_t j = 0; j < n; j++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		if (p[j] != (uint8_t)(x >> 32))
			return -1;
	}
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Helpers
 */

static inline uint64_t ex_now_ns(clockid_t clk)
{
	struct timespec ts;

	/* Cannot fail for the clocks used here (CLOCK_MONOTONIC, CLOCK_REALTIME). */
	(void)clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Parse "HOST:PORT", "[V6]:PORT" or, with def_port >= 0, a bare "HOST" or "[V6]". Numeric
 * addresses only (no DNS: these programs only talk to loopback). family is AF_UNSPEC, AF_INET
 * or AF_INET6. Returns 0, or -1 after printing why. */
static inline int ex_parse_addr(const char *s, int def_port, int family,
				struct sockaddr_storage *ss, socklen_t *len)
{
	char host[128];
	const char *h = s, *port = NULL;
	const char *colon = strrchr(s, ':');
	size_t hl;
	long p = def_port;
	char *end, pbuf[24];
	struct addrinfo *ai, hints = {
		.ai_family = family,
		.ai_socktype = SOCK_DGRAM,
		.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
	};
	int rc;

	if (s[0] == '[') {
		const char *rb = strchr(s, ']');

		if (!rb || (rb[1] != '\0' && rb[1] != ':'))
			goto bad;
		h = s + 1;
		hl = (size_t)(rb - h);
		port = rb[1] == ':' ? rb + 2 : NULL;
	} else if (colon && strchr(s, ':') == colon) {
		hl = (size_t)(colon - s);
		port = colon + 1;
	} else {
		hl = strlen(s); /* a bare IPv4 address or an unbracketed IPv6 one */
	}
	if (hl == 0 || hl >= sizeof(host))
		goto bad;
	memcpy(host, h, hl);
	host[hl] = '\0';

	if (port) {
		errno = 0;
		p = strtol(port, &end, 10);
		if (errno || end == port || *end || p < 0 || p > 65535)
			goto bad;
	} else if (def_port < 0) {
		goto bad;
	}

	snprintf(pbuf, sizeof(pbuf), "%ld", p);
	rc = getaddrinfo(host, pbuf, &hints, &ai);
	if (rc != 0) {
		fprintf(stderr, "bad address '%s': %s\n", s, gai_strerror(rc));
		return -1;
	}
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
bad:
	fprintf(stderr, "bad address '%s' (want HOST:PORT or [V6]:PORT)\n", s);
	return -1;
}

static inline uint16_t ex_port(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
	return ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

static inline void ex_set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
	else
		((struct sockaddr_in *)ss)->sin_port = htons(port);
}

/* A receive buffer of `bytes`, so that a receiver descheduled for a while (a loaded test
 * machine) does not drop. SO_RCVBUFFORCE passes net.core.rmem_max, with CAP_NET_ADMIN;
 * otherwise SO_RCVBUF gets what rmem_max allows. Returns 0 or -1 with errno set. */
static inline int ex_set_rcvbuf(int fd, int bytes)
{
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) == 0)
		return 0;
	return setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

/* Strict unsigned option parsing: the whole string, in range. Exits on error, since every
 * caller is option parsing at start-up. */
static inline unsigned long long ex_num(const char *opt, const char *s, unsigned long long min,
					unsigned long long max)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < min || v > max) {
		fprintf(stderr, "--%s: want an integer in %llu..%llu, not '%s'\n", opt, min, max,
			s);
		exit(2);
	}
	return v;
}

#endif /* MD_PROTO_H */
