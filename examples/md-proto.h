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
 * Control channel (UDP, version 2): a subscriber sends JOIN2 or LEAVE2 from its data socket,
 * so the server learns the data address from the datagram's source. Nothing is ever sent to
 * that address, beyond an answer no larger than the request, until it has proved that it
 * receives there (as QUIC's Retry and DTLS's HelloVerifyRequest do):
 *
 *   subscriber -> server   "JOIN2" or "LEAVE2", then " " and a cookie (MD_COOKIE_HEX hex
 *                          digits) once it has one; NUL-padded to MD_CTL_SIZE bytes. A
 *                          shorter datagram is never answered, so an answer (at most
 *                          MD_CTL_REPLY_MAX bytes) is never larger than its request.
 *   server -> subscriber   "CHALLENGE2 <cookie>" to a request without a valid cookie: a keyed
 *                          hash of the source's address and port and of a coarse time epoch,
 *                          so the server keeps no state for it. Valid for this epoch and the
 *                          next (MD_COOKIE_EPOCH_S to twice that).
 *                          "ACK2 <id> <port> <lease_ms> <cookie>" to a JOIN2 with a valid
 *                          cookie: the subscription exists (or was renewed) until lease_ms
 *                          from now, ticks leave from <port> of the control socket's address
 *                          (the subscriber accepts ticks from there only), and <cookie> is a
 *                          fresh one for the next renewal, so that a subscriber that renews
 *                          in time never needs a CHALLENGE2 again. A repeated JOIN2 renews the
 *                          lease and gets the same id: never a second destination.
 *                          "BYE2" to a LEAVE2 with a valid cookie.
 *
 * The server never answers anything else: an unknown or malformed datagram, a refused JOIN2
 * (caps) or an answer to an answer are counted, never answered, so two servers' control ports
 * cannot be made to talk to each other forever. Version 1 clients ("JOIN", "LEAVE", 4 and 5
 * bytes) get no answer at all and keep retrying: they are counted as unknown.
 */
#define MD_CTL_SIZE 64
#define MD_CTL_REPLY_MAX 60
#define MD_COOKIE_HEX 16
#define MD_COOKIE_EPOCH_S 30
#define MD_LEASE_MS_DEFAULT 30000

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

/* ---------------------------------------------------------------------------------------------
 * The control protocol's pieces that both ends use
 */

/* SipHash-2-4 (Aumasson and Bernstein): a keyed 64-bit hash, the cookie's MAC. */
static inline uint64_t md_rotl(uint64_t x, int b)
{
	return (x << b) | (x >> (64 - b));
}

#define MD_SIPROUND                                                                          \
	do {                                                                                 \
		v0 += v1; v1 = md_rotl(v1, 13); v1 ^= v0; v0 = md_rotl(v0, 32);             \
		v2 += v3; v3 = md_rotl(v3, 16); v3 ^= v2;                                    \
		v0 += v3; v3 = md_rotl(v3, 21); v3 ^= v0;                                    \
		v2 += v1; v1 = md_rotl(v1, 17); v1 ^= v2; v2 = md_rotl(v2, 32);             \
	} while (0)

static inline uint64_t md_siphash(const uint8_t key[16], const uint8_t *in, size_t len)
{
	uint64_t k0, k1, m, b = (uint64_t)len << 56;
	size_t i, end = len - len % 8;

	memcpy(&k0, key, 8);
	memcpy(&k1, key + 8, 8);
	k0 = le64toh(k0);
	k1 = le64toh(k1);

	uint64_t v0 = k0 ^ UINT64_C(0x736f6d6570736575), v1 = k1 ^ UINT64_C(0x646f72616e646f6d);
	uint64_t v2 = k0 ^ UINT64_C(0x6c7967656e657261), v3 = k1 ^ UINT64_C(0x7465646279746573);

	for (i = 0; i < end; i += 8) {
		memcpy(&m, in + i, 8);
		m = le64toh(m);
		v3 ^= m;
		MD_SIPROUND;
		MD_SIPROUND;
		v0 ^= m;
	}
	for (size_t j = 0; j < len % 8; j++)
		b |= (uint64_t)in[end + j] << (8 * j);
	v3 ^= b;
	MD_SIPROUND;
	MD_SIPROUND;
	v0 ^= b;
	v2 ^= 0xff;
	MD_SIPROUND;
	MD_SIPROUND;
	MD_SIPROUND;
	MD_SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

/* A control request: "JOIN2" or "LEAVE2" (cmd) with the cookie (NULL: none), NUL-padded to
 * MD_CTL_SIZE bytes into out. Returns its length. */
static inline size_t md_ctl_request(char out[MD_CTL_SIZE], const char *cmd, const char *cookie)
{
	memset(out, 0, MD_CTL_SIZE);
	snprintf(out, MD_CTL_SIZE, "%s%s%s", cmd, cookie ? " " : "", cookie ? cookie : "");
	return MD_CTL_SIZE;
}

/* 1 if s is exactly MD_COOKIE_HEX lower-case hex digits. */
static inline int md_cookie_ok(const char *s)
{
	size_t i;

	for (i = 0; i < MD_COOKIE_HEX; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return s[i] == '\0';
}

/* One answer from the server, parsed (a datagram that came from the control address):
 * 'C' CHALLENGE2 (cookie), 'A' ACK2 (id, port, lease_ms, cookie), 'B' BYE2, 0 anything else
 * (ignored: never answered). */
struct md_answer {
	char cookie[MD_COOKIE_HEX + 1];
	int id;
	unsigned port;
	unsigned long lease_ms;
};

static inline int md_parse_answer(const uint8_t *p, size_t n, struct md_answer *a)
{
	char s[MD_CTL_REPLY_MAX + 1], c[MD_COOKIE_HEX + 2], tail;

	if (n > MD_CTL_REPLY_MAX)
		return 0;
	memcpy(s, p, n);
	s[n] = '\0';
	if (sscanf(s, "CHALLENGE2 %17s%c", c, &tail) == 1 && md_cookie_ok(c)) {
		memcpy(a->cookie, c, sizeof(a->cookie));
		return 'C';
	}
	if (sscanf(s, "ACK2 %d %u %lu %17s%c", &a->id, &a->port, &a->lease_ms, c, &tail) == 4 &&
	    a->id >= 0 && a->port > 0 && a->port < 65536 && a->lease_ms > 0 && md_cookie_ok(c)) {
		memcpy(a->cookie, c, sizeof(a->cookie));
		return 'A';
	}
	if (!strcmp(s, "BYE2"))
		return 'B';
	return 0;
}

#endif /* MD_PROTO_H */
