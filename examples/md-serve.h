/* SPDX-License-Identifier: MIT */
/*
 * The serving side that md-publisher and md-relay share: the JOIN/LEAVE control socket, an
 * optional TCP listener, fixed destinations (multicast groups), and the group that every tick
 * goes to through libmultisend. A relay serves exactly what a publisher serves, so subscribers
 * and relays cannot tell the two apart and relays chain into a tree.
 *
 * Destinations:
 *   - a UDP subscriber, from its JOIN2 once its source address has proved that it receives
 *     there (it echoed a cookie the server sent it: md-proto.h); ticks leave from one shared
 *     unconnected socket, or (connected) from a socket of its own, bound to the control
 *     socket's address, whose port the ACK2 names. Its subscription is a lease that ends
 *     unless renewed, and the number of them is capped per source address and in total;
 *   - a TCP subscriber, from an accepted connection: ticks are framed by md_tick.size on the
 *     stream; the group's slow-consumer policy queues up to --queue-limit (4 MiB) for a slow
 *     reader and then disconnects it, so a stream subscriber never loses a tick silently: it
 *     has either every tick or a closed connection;
 *   - a fixed address (--dest), typically an IPv4 or IPv6 multicast group: one destination
 *     that reaches every member of a segment. TTL, loopback and the outgoing interface are the
 *     options of its socket (IP_MULTICAST_TTL/LOOP/IF, IPV6_MULTICAST_HOPS/LOOP/IF), set here
 *     as the caller's socket options; the library sends to the address like any other.
 *
 * Resource limits: everything a remote peer can make the server hold has a cap. TCP
 * connections: at most --max-conns at once (default: 1024, lowered to what RLIMIT_NOFILE
 * leaves); one more is accepted and closed at once, and counted. Out of descriptors anyway
 * (EMFILE, ENFILE: connected UDP subscribers share them, or another process takes the
 * system's last), one spare descriptor is given up to accept and close the connection
 * waiting, so the listener never stays readable with nothing done and the server keeps
 * serving; without even that, the listener rests for MD_LIS_REST_NS. Backlog memory: at most
 * --backlog-max bytes over all stream subscribers; past it the subscribers holding the most
 * are disconnected until it fits. Per-peer log lines: at most MD_LOG_PER_SEC a second, the
 * rest counted in one "suppressed" line.
 *
 * Everything is static: each program includes it once.
 */
#ifndef MD_SERVE_H
#define MD_SERVE_H

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <multisend.h>

#include "md-proto.h"

#define MD_MAX_LOGGED_FAILURES 10
#define MD_MAX_FIXED 16
/* Control datagrams handled per md_control_drain: a flood waits in the socket's buffer (and
 * overflows it) instead of delaying the next tick. */
#define MD_CTL_BUDGET 64
#define MD_MAX_SUBS_DEFAULT 4096
#define MD_MAX_PER_SOURCE_DEFAULT 256
#define MD_REPLY_RATE_DEFAULT 100
/* Token buckets of CHALLENGE2 answers, one per source address hashed into this many (sources
 * that collide share one), made once: an unproven request allocates nothing. */
#define MD_BUCKETS 4096

struct md_bucket {
	double tokens;
	uint64_t refilled; /* CLOCK_MONOTONIC ns, 0: never used */
};
#define MD_LOG_PER_SEC 10          /* per-peer log lines a second; the rest are counted */
#define MD_MAX_CONNS_DEFAULT 1024  /* TCP subscribers at once, unless RLIMIT_NOFILE is lower */
#define MD_FD_HEADROOM 16          /* descriptors the connection cap leaves for the rest */
#define MD_BACKLOG_MAX_DEFAULT (64ull << 20) /* bytes queued over all stream subscribers */
#define MD_ACCEPT_BATCH 64         /* connections taken per drain: ticks go on in a flood */
#define MD_LIS_REST_NS 100000000u  /* out of descriptors, not even a spare: rest 100 ms */

enum md_kind { MD_SUB_UDP, MD_SUB_TCP, MD_SUB_FIXED };

struct md_sub {
	struct sockaddr_storage addr;
	socklen_t addrlen;
	int fd;   /* its own socket (connected UDP, TCP, a fixed destination's), else -1 */
	int id;   /* destination id in the group, also the id a UDP subscriber is told */
	int kind; /* enum md_kind */
	uint16_t port;    /* UDP: the port its ticks leave from */
	uint64_t expires; /* UDP: the lease's end, CLOCK_MONOTONIC ns */
};

/* Socket options for the fixed destinations; -1 (or NULL) leaves the kernel's default. */
struct md_mcast_opts {
	int ttl;           /* IP_MULTICAST_TTL / IPV6_MULTICAST_HOPS */
	int loop;          /* IP_MULTICAST_LOOP / IPV6_MULTICAST_LOOP */
	const char *iface; /* IP_MULTICAST_IF / IPV6_MULTICAST_IF, by interface name */
};

struct md_serve {
	const char *name;  /* the program's name, for messages */
	int ctl;           /* control socket */
	int data;          /* the shared unconnected data socket, -1 with connected */
	int lis;           /* TCP listener, or -1 */
	bool connected;
	struct ms_group *g;
	struct md_sub *subs; /* UDP and TCP subscribers, then nothing: fixed ones are apart */
	size_t nsubs, cap;
	struct md_sub fixed[MD_MAX_FIXED];
	size_t nfixed;
	struct ms_result *res;       /* room for cap + nfixed results */
	struct ms_slow_result *slow; /* room for cap entries */
	uint64_t joined, left, dropped;
	uint64_t failures;  /* per-destination failures seen in ms_result, all phases */
	uint64_t partial;   /* stream sends the policy queued (whole or in part) */
	uint64_t accepted;  /* sum of ms_sendv's return values over the ticks */
	/* The control protocol (md-proto.h): the cookie's key, the caps and counters. */
	uint8_t key[16];
	struct sockaddr_storage local; /* the control socket's address */
	socklen_t locallen;
	uint16_t data_port;      /* the shared data socket's port */
	uint64_t lease_ns;
	size_t max_subs, max_per_source; /* UDP subscribers in total, per source address */
	uint64_t reply_rate;     /* CHALLENGE2 answers per second to one source address */
	struct md_bucket *buckets; /* MD_BUCKETS of them, each holding at most reply_rate */
	uint64_t next_expiry;
	uint64_t challenged, unknown, refused, limited, expired, renewed;
	uint64_t ctl_logged; /* control lines logged: the first MD_MAX_LOGGED_FAILURES only */
	/* Resource limits (see the top of this file). */
	size_t max_conns;     /* TCP subscribers at once (md_open settles 0 to the default) */
	size_t nconns;        /* TCP subscribers now */
	uint64_t backlog_max; /* bytes over all stream backlogs (0: MD_BACKLOG_MAX_DEFAULT) */
	uint32_t queue_limit; /* bytes per stream (0: the library's 4 MiB) */
	int reserve;          /* a spare descriptor for refusing at EMFILE, if has_reserve */
	bool has_reserve;
	uint64_t lis_rest_until;        /* the listener rests until then (CLOCK_MONOTONIC) */
	uint64_t conns, conn_refused;   /* TCP connections taken; refused (cap, descriptors) */
	uint64_t refused_fd;            /* of those, for want of a descriptor */
	uint64_t evicted;               /* stream subscribers dropped for backlog_max */
	uint64_t log_sec, log_suppressed; /* md_log's rate limit: this second, lines held */
	unsigned log_n;                 /* lines printed in log_sec */
	uint64_t log_total, log_dropped; /* md_log's messages, and those never printed */
};

/* Per-peer messages (anything a remote peer can cause once per connection or datagram) go
 * through here: at most MD_LOG_PER_SEC lines a second, so a flood cannot fill the journal;
 * the rest are counted and said in one line when the next second begins, or by md_report. */
static void md_log_flush(struct md_serve *p)
{
	if (!p->log_suppressed)
		return;
	fprintf(stderr, "%s: %" PRIu64 " more per-peer messages suppressed (at most %d a second)\n",
		p->name, p->log_suppressed, MD_LOG_PER_SEC);
	p->log_suppressed = 0;
}

__attribute__((format(printf, 2, 3)))
static void md_log(struct md_serve *p, const char *fmt, ...)
{
	uint64_t sec = ex_now_ns(CLOCK_MONOTONIC) / 1000000000u;
	va_list ap;

	p->log_total++;
	if (sec != p->log_sec) {
		md_log_flush(p);
		p->log_sec = sec;
		p->log_n = 0;
	}
	if (p->log_n >= MD_LOG_PER_SEC) {
		p->log_suppressed++;
		p->log_dropped++;
		return;
	}
	p->log_n++;
	fprintf(stderr, "%s: ", p->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static inline bool md_addr_equal(const struct sockaddr_storage *a,
				 const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;

		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;

		return x->sin6_port == y->sin6_port && x->sin6_scope_id == y->sin6_scope_id &&
		       !memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr));
	}
	return false;
}

/* Subscriber tables stay small and JOIN/LEAVE/failures are rare next to ticks, so a linear
 * search costs less than keeping an index in step with the group's id reuse. */
static struct md_sub *md_find_addr(struct md_serve *p, const struct sockaddr_storage *a)
{
	for (size_t i = 0; i < p->nsubs; i++)
		if (p->subs[i].kind == MD_SUB_UDP && md_addr_equal(&p->subs[i].addr, a))
			return &p->subs[i];
	return NULL;
}

static struct md_sub *md_find_id(struct md_serve *p, int id)
{
	for (size_t i = 0; i < p->nsubs; i++)
		if (p->subs[i].id == id)
			return &p->subs[i];
	return NULL;
}

static void md_reply(struct md_serve *p, const struct sockaddr_storage *to, socklen_t tolen,
		     const char *msg)
{
	/* A lost reply is like any lost UDP datagram: the subscriber retries its JOIN2. So a
	 * failure here is not fatal, and the server never blocks on it; only the first few
	 * are logged, since a remote peer decides how many there are. */
	if (sendto(p->ctl, msg, strlen(msg), MSG_DONTWAIT, (const struct sockaddr *)to, tolen) < 0 &&
	    p->ctl_logged++ < MD_MAX_LOGGED_FAILURES)
		fprintf(stderr, "%s: control reply: %s\n", p->name, strerror(errno));
}

/* The cookie of address a in epoch e, as MD_COOKIE_HEX hex digits: SipHash of the family,
 * port, address (and IPv6 scope) and the epoch under the server's random key, so the server
 * recognises its own cookies without keeping any state for an unproven address. */
static void md_cookie(const struct md_serve *p, const struct sockaddr_storage *a, uint64_t e,
		      char out[MD_COOKIE_HEX + 1])
{
	uint8_t in[40];
	size_t n = 0;
	uint16_t fam = (uint16_t)a->ss_family, port = ex_port(a);

	e = htole64(e);
	memcpy(in + n, &e, 8), n += 8;
	memcpy(in + n, &fam, 2), n += 2;
	memcpy(in + n, &port, 2), n += 2;
	if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)a;

		memcpy(in + n, &x->sin6_addr, 16), n += 16;
		memcpy(in + n, &x->sin6_scope_id, 4), n += 4;
	} else {
		memcpy(in + n, &((const struct sockaddr_in *)a)->sin_addr, 4), n += 4;
	}
	snprintf(out, MD_COOKIE_HEX + 1, "%016" PRIx64, md_siphash(p->key, in, n));
}

static uint64_t md_epoch(void)
{
	return ex_now_ns(CLOCK_MONOTONIC) / (MD_COOKIE_EPOCH_S * UINT64_C(1000000000));
}

/* Whether cookie c (NULL: none) is one md_cookie gave a, this epoch or the one before. */
static bool md_cookie_valid(const struct md_serve *p, const struct sockaddr_storage *a,
			    const char *c)
{
	uint64_t e = md_epoch();
	char want[MD_COOKIE_HEX + 1];

	if (!c)
		return false;
	for (uint64_t back = 0; back < 2 && back <= e; back++) {
		unsigned diff = 0;

		md_cookie(p, a, e - back, want);
		for (int i = 0; i < MD_COOKIE_HEX; i++)
			diff |= (unsigned)(want[i] ^ c[i]);
		if (!diff)
			return true;
	}
	return false;
}

/* Answer an unproven request with a CHALLENGE2 (smaller than the request), at most
 * reply_rate a second to one source address (its bucket, found by a keyed hash of the address
 * alone, so that an attacker cannot aim collisions at a chosen victim): a flood of spoofed
 * requests reflects to each victim no more than that, and what goes over is counted. A
 * subscriber whose address is not flooded keeps its own budget. */
static void md_challenge(struct md_serve *p, const struct sockaddr_storage *to, socklen_t tolen)
{
	uint64_t now = ex_now_ns(CLOCK_MONOTONIC);
	char msg[MD_CTL_REPLY_MAX + 1], c[MD_COOKIE_HEX + 1];
	struct sockaddr_storage host = *to;
	struct md_bucket *b;

	ex_set_port(&host, 0);
	md_cookie(p, &host, UINT64_MAX, c); /* epoch UINT64_MAX: never a cookie's */
	b = &p->buckets[strtoull(c, NULL, 16) % MD_BUCKETS];
	if (!b->refilled)
		b->tokens = (double)p->reply_rate;
	else
		b->tokens += (double)(now - b->refilled) * 1e-9 * (double)p->reply_rate;
	if (b->tokens > (double)p->reply_rate)
		b->tokens = (double)p->reply_rate;
	b->refilled = now;
	if (b->tokens < 1) {
		p->limited++;
		return;
	}
	b->tokens -= 1;
	p->challenged++;
	md_cookie(p, to, md_epoch(), c);
	snprintf(msg, sizeof(msg), "CHALLENGE2 %s", c);
	md_reply(p, to, tolen, msg);
}

/* Forget s, which the group no longer holds, and close its own socket. Only now may the
 * socket be closed (multisend.h). */
static void md_forget(struct md_serve *p, struct md_sub *s)
{
	if (s->fd >= 0 && close(s->fd) < 0)
		fprintf(stderr, "%s: close: %s\n", p->name, strerror(errno));
	if (s->kind == MD_SUB_TCP)
		p->nconns--;
	*s = p->subs[--p->nsubs];
}

static int md_remove_sub(struct md_serve *p, struct md_sub *s)
{
	int rc = ms_group_remove(p->g, s->id);

	if (rc < 0) {
		fprintf(stderr, "%s: ms_group_remove(%d): %s\n", p->name, s->id, ms_strerror(rc));
		return rc;
	}
	md_forget(p, s);
	return 0;
}

static int md_grow(struct md_serve *p)
{
	size_t cap = p->cap ? 2 * p->cap : 16;
	struct md_sub *ns = realloc(p->subs, cap * sizeof(*ns));

	if (!ns)
		return -ENOMEM;
	p->subs = ns;
	struct ms_result *nr = realloc(p->res, (cap + MD_MAX_FIXED) * sizeof(*nr));

	if (!nr)
		return -ENOMEM;
	p->res = nr;
	struct ms_slow_result *sl = realloc(p->slow, cap * sizeof(*sl));

	if (!sl)
		return -ENOMEM;
	p->slow = sl;
	p->cap = cap;
	return 0;
}

/* Add the subscriber of ss (UDP: its data address) or of fd (TCP: an accepted connection,
 * which the table owns from here on, also on failure). Returns its id or a negative errno. */
static int md_add(struct md_serve *p, int kind, const struct sockaddr_storage *ss,
		  socklen_t sslen, int fd)
{
	struct md_sub *s;
	int rc;

	if (p->nsubs == p->cap && (rc = md_grow(p)) < 0) {
		if (fd >= 0)
			close(fd);
		return rc;
	}
	s = &p->subs[p->nsubs];
	*s = (struct md_sub){ .addrlen = sslen, .fd = fd, .kind = kind };
	memcpy(&s->addr, ss, sslen);

	struct ms_dest d = { .fd = fd };

	if (kind == MD_SUB_UDP && p->connected) {
		/* One socket per subscriber: the kernel caches the route, so each send skips
		 * the lookup an unconnected sendto pays, and ICMP errors come back per peer.
		 * Bound to the control socket's address, so that ticks leave from the address
		 * the subscriber sent its JOIN2 to, from the port the ACK2 names. */
		struct sockaddr_storage me = p->local;
		socklen_t melen = p->locallen;

		ex_set_port(&me, 0);
		s->fd = socket(ss->ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (s->fd < 0)
			return -errno;
		if (bind(s->fd, (const struct sockaddr *)&me, melen) < 0 ||
		    connect(s->fd, (const struct sockaddr *)ss, sslen) < 0 ||
		    getsockname(s->fd, (struct sockaddr *)&me, &melen) < 0) {
			rc = -errno;
			close(s->fd);
			return rc;
		}
		s->port = ex_port(&me);
		d.fd = s->fd;
	} else if (kind == MD_SUB_UDP) {
		s->port = p->data_port;
		d = (struct ms_dest){ .fd = p->data, .addr = (const struct sockaddr *)&s->addr,
				      .addrlen = sslen };
	}
	rc = ms_group_add(p->g, &d);
	if (rc < 0) {
		if (s->fd >= 0)
			close(s->fd);
		return rc;
	}
	s->id = rc;
	p->nsubs++;
	p->joined++;
	return rc;
}

static bool md_same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	struct sockaddr_storage x = *a;

	ex_set_port(&x, ex_port(b));
	return md_addr_equal(&x, b);
}

/* A JOIN2 whose cookie proved that `from` receives there: a new subscriber within the caps,
 * or a renewed lease. Returns 0, or a negative errno for a refused one (not answered). */
static int md_join(struct md_serve *p, const struct sockaddr_storage *from, socklen_t fromlen)
{
	struct md_sub *s = md_find_addr(p, from);
	char msg[MD_CTL_REPLY_MAX + 1], c[MD_COOKIE_HEX + 1];
	uint64_t now = ex_now_ns(CLOCK_MONOTONIC);

	/* A repeated JOIN2: its ACK2 was lost, or the subscriber renews its lease. Same id, no
	 * second destination: a subscriber must never get a tick twice. */
	if (s) {
		p->renewed++;
	} else {
		size_t udp = 0, here = 0;
		int rc;

		for (size_t i = 0; i < p->nsubs; i++) {
			if (p->subs[i].kind != MD_SUB_UDP)
				continue;
			udp++;
			here += md_same_host(&p->subs[i].addr, from);
		}
		if (udp >= p->max_subs || here >= p->max_per_source)
			return -EUSERS;
		rc = md_add(p, MD_SUB_UDP, from, fromlen, -1);
		if (rc < 0)
			return rc;
		s = md_find_addr(p, from);
	}
	s->expires = now + p->lease_ns;
	md_cookie(p, from, md_epoch(), c);
	snprintf(msg, sizeof(msg), "ACK2 %d %u %" PRIu64 " %s", s->id, s->port,
		 p->lease_ns / 1000000, c);
	md_reply(p, from, fromlen, msg);
	return 0;
}

/* Drop the UDP subscribers whose lease ended (checked every tenth of a lease). */
static int md_expire(struct md_serve *p)
{
	uint64_t now = ex_now_ns(CLOCK_MONOTONIC);

	if (now < p->next_expiry)
		return 0;
	p->next_expiry = now + p->lease_ns / 10;
	for (size_t i = 0; i < p->nsubs;) {
		struct md_sub *s = &p->subs[i];
		int rc;

		if (s->kind != MD_SUB_UDP || s->expires > now) {
			i++;
			continue;
		}
		rc = md_remove_sub(p, s); /* the last one moves to i */
		if (rc < 0)
			return rc;
		p->expired++;
	}
	return 0;
}

/* The listener's descriptor for poll: -1 while it rests (out of descriptors), so that a
 * listener that stays readable does not wake the caller at once, again and again. */
static int md_lis_pollfd(const struct md_serve *p)
{
	if (p->lis >= 0 && p->lis_rest_until && ex_now_ns(CLOCK_MONOTONIC) < p->lis_rest_until)
		return -1;
	return p->lis;
}

/* accept4 found no descriptor for a connection (EMFILE, ENFILE; ENOBUFS, ENOMEM: no memory
 * for one). Refuse that one connection and keep serving: give up the spare descriptor, take
 * the connection with it and close it, take the spare back. Without a spare (it could not be
 * taken back) the listener rests for MD_LIS_REST_NS: the connections wait in its queue, and
 * the server does not spin on a listener that stays readable. Returns true while there may be
 * more to take now. */
static bool md_refuse_nofd(struct md_serve *p, int err)
{
	int fd = -1;

	if (p->has_reserve) {
		close(p->reserve);
		fd = accept4(p->lis, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			err = errno;
		else
			close(fd);
		p->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
		p->has_reserve = p->reserve >= 0;
		if (fd < 0 && (err == EAGAIN || err == EWOULDBLOCK))
			return false; /* it was gone already */
	}
	if (fd < 0) {
		p->lis_rest_until = ex_now_ns(CLOCK_MONOTONIC) + MD_LIS_REST_NS;
		md_log(p, "TCP listener resting for %u ms: %s", MD_LIS_REST_NS / 1000000u,
		       strerror(err));
		return false;
	}
	p->conn_refused++;
	p->refused_fd++;
	md_log(p, "TCP connection refused: %s (connections %zu)", strerror(err), p->nconns);
	return true;
}

/* Take the pending connections on the TCP listener, at most MD_ACCEPT_BATCH (a flood of
 * connections must not stop the ticks). Returns 0 or a negative errno that should stop the
 * server. */
static int md_accept(struct md_serve *p)
{
	if (md_lis_pollfd(p) < 0)
		return 0;
	p->lis_rest_until = 0;
	for (int i = 0; i < MD_ACCEPT_BATCH; i++) {
		struct sockaddr_storage from;
		socklen_t fromlen = sizeof(from);
		int one = 1, fd = accept4(p->lis, (struct sockaddr *)&from, &fromlen, SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				if (!md_refuse_nofd(p, errno))
					return 0;
				continue;
			}
			return -errno;
		}
		if (p->nconns >= p->max_conns) {
			close(fd);
			p->conn_refused++;
			md_log(p, "TCP connection refused: %zu connections, the most (--max-conns)",
			       p->nconns);
			continue;
		}
		/* Ticks are small and latency is the point: no Nagle delay. */
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		int rc = md_add(p, MD_SUB_TCP, &from, fromlen, fd);

		if (rc < 0) {
			p->conn_refused++;
			md_log(p, "TCP subscriber refused: %s", ms_strerror(rc));
			continue;
		}
		p->nconns++;
		p->conns++;
	}
	return 0;
}

/* Handle every pending control datagram and connection. A non-blocking recvfrom that finds
 * nothing is one system call, the same as poll with a zero timeout, and saves the recvfrom
 * poll would need after it. Returns 0 or a negative errno that should stop the server. */
static int md_control_drain(struct md_serve *p)
{
	int rc;

	if (p->lis >= 0) {
		rc = md_accept(p);
		if (rc < 0)
			return rc;
	}
	if ((rc = md_expire(p)) < 0)
		return rc;
	/* At most MD_CTL_BUDGET datagrams, so a flood cannot hold up the feed: the rest waits
	 * for the next call, or is dropped by the kernel when the socket's buffer is full. */
	for (int budget = MD_CTL_BUDGET; budget > 0; budget--) {
		char buf[MD_CTL_SIZE + 1];
		const char *cookie = NULL;
		struct sockaddr_storage from;
		socklen_t fromlen = sizeof(from);
		ssize_t n = recvfrom(p->ctl, buf, sizeof(buf) - 1, MSG_DONTWAIT | MSG_TRUNC,
				     (struct sockaddr *)&from, &fromlen);

		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			if (errno == EINTR)
				continue;
			return -errno;
		}
		/* Shorter than MD_CTL_SIZE (a version 1 "JOIN" among them): never answered,
		 * since any answer could be larger than the request. */
		if (n < MD_CTL_SIZE) {
			p->unknown++;
			continue;
		}
		buf[MD_CTL_SIZE] = '\0';

		char *sp = strchr(buf, ' ');

		if (sp) {
			*sp = '\0';
			cookie = sp + 1;
			if (!md_cookie_ok(cookie)) {
				p->unknown++;
				continue;
			}
		}
		bool join = !strcmp(buf, "JOIN2");

		if (!join && strcmp(buf, "LEAVE2")) {
			p->unknown++; /* an answer, garbage, another server's datagram */
			continue;
		}
		if (!md_cookie_valid(p, &from, cookie)) {
			md_challenge(p, &from, fromlen);
			continue;
		}
		if (join) {
			rc = md_join(p, &from, fromlen);
			if (rc == -EUSERS) {
				p->refused++; /* over a cap: no answer, no line per request */
			} else if (rc < 0) {
				if (p->ctl_logged++ < MD_MAX_LOGGED_FAILURES)
					fprintf(stderr, "%s: JOIN2 refused: %s\n", p->name,
						ms_strerror(rc));
				p->refused++;
			}
			continue;
		}

		struct md_sub *s = md_find_addr(p, &from);

		if (s) {
			rc = md_remove_sub(p, s);
			if (rc < 0)
				return rc;
			p->left++;
		}
		md_reply(p, &from, fromlen, "BYE2");
	}
	return 0;
}

/* The control protocol's counters, for a program's summary line. */
static const char *md_ctl_summary(const struct md_serve *p)
{
	static char s[256];

	snprintf(s, sizeof(s), "control: challenged %" PRIu64 ", renewed %" PRIu64
		 ", expired %" PRIu64 ", refused %" PRIu64 ", rate-limited %" PRIu64
		 ", unknown %" PRIu64, p->challenged, p->renewed, p->expired, p->refused,
		 p->limited, p->unknown);
	return s;
}

/* Forget the stream subscribers the slow-consumer policy removed in the last call (a full
 * backlog, or a stream that failed): the group no longer holds them, so their sockets can
 * be closed. */
static void md_reap_removed(struct md_serve *p, int n)
{

	for (int i = 0; i < n && (size_t)i < p->cap; i++) {
		struct md_sub *s;

		if (!(p->slow[i].flags & MS_RES_REMOVED) || !(s = md_find_id(p, p->slow[i].id)))
			continue;
		md_log(p, "TCP subscriber %d removed: %s", s->id,
		       p->slow[i].status < 0 ? ms_strerror(p->slow[i].status) : "too slow");
		md_forget(p, s);
		p->dropped++;
	}
}

/* Keep the bytes queued over all stream subscribers within backlog_max: after a send whose
 * record (n entries in p->slow, read by the caller) names every destination that holds a
 * backlog, disconnect the ones holding the most until the total fits. The one holding the
 * most is the one furthest behind, and each went past its share; the total can pass the cap
 * by at most one message per stream, the send that found it. */
static int md_cap_backlog(struct md_serve *p, int n)
{
	size_t total = ms_group_backlog(p->g);

	if (n > 0 && (size_t)n > p->cap)
		n = (int)p->cap;
	while (total > p->backlog_max) {
		struct ms_slow_result *big = NULL;
		struct md_sub *s;
		int rc;

		for (int i = 0; i < n; i++)
			if (!(p->slow[i].flags & MS_RES_REMOVED) && p->slow[i].backlog &&
			    (!big || p->slow[i].backlog > big->backlog))
				big = &p->slow[i];
		if (!big)
			break; /* nothing more to take from: the record is stale */
		big->flags |= MS_RES_REMOVED; /* taken once */
		if (!(s = md_find_id(p, big->id)) || s->kind != MD_SUB_TCP)
			continue;
		rc = md_remove_sub(p, s);
		if (rc < 0)
			return rc;
		md_log(p, "TCP subscriber %d removed: %" PRIu64 " bytes behind, the backlogs of all "
		       "hold %zu (--backlog-max %" PRIu64 ")", big->id, big->backlog, total,
		       p->backlog_max);
		p->dropped++;
		p->evicted++;
		total = ms_group_backlog(p->g);
	}
	return 0;
}

/* Account for the destinations of the last send (n results) that did not take the whole
 * message. A connected UDP socket whose peer is gone reports ECONNREFUSED on every later
 * send, so that subscriber is dropped, as a LEAVE would have done; a stream the policy queued
 * is not a failure. */
static int md_check_results(struct md_serve *p, size_t n, size_t len, const char *what)
{
	int gone[64]; /* more in one call are dropped on a later call */
	size_t ngone = 0;

	for (size_t i = 0; i < n; i++) {
		int st = p->res[i].status;

		if (st >= 0 && (size_t)st == len)
			continue;
		if (st >= 0) {
			p->partial++;
			continue;
		}
		p->failures++;
		md_log(p, "%s to destination %d: %s", what, p->res[i].id, ms_strerror(st));
		if (st == -ECONNREFUSED && ngone < sizeof(gone) / sizeof(gone[0]))
			gone[ngone++] = p->res[i].id;
	}
	if (p->lis >= 0) {
		int k = ms_group_slow_results(p->g, p->slow, p->cap), rc;

		md_reap_removed(p, k);
		if ((rc = md_cap_backlog(p, k)) < 0)
			return rc;
	}
	/* Removal reorders the group, so it waits until res has been read. */
	for (size_t i = 0; i < ngone; i++) {
		struct md_sub *s = md_find_id(p, gone[i]);
		int rc;

		if (!s || s->kind != MD_SUB_UDP)
			continue;
		rc = md_remove_sub(p, s);
		if (rc < 0)
			return rc;
		md_log(p, "destination %d refuses datagrams: dropped it", gone[i]);
		p->dropped++;
	}
	return 0;
}

/* One message (iov) to every destination. Returns 0 or a negative errno that should stop the
 * server, after printing it. */
static int md_fanout(struct md_serve *p, const struct iovec *iov, int iovcnt, size_t len,
		     const char *what)
{
	size_t n = ms_group_size(p->g); /* the entries ms_sendv fills in p->res */
	int rc;

	/* ms_sendv writes what a stream's backlog holds first, before the new message. */
	rc = ms_sendv(p->g, iov, iovcnt, 0, p->res);
	if (rc < 0) {
		fprintf(stderr, "%s: ms_sendv: %s\n", p->name, ms_strerror(rc));
		/* Not a bad argument, so the backend itself failed and every result carries
		 * its error. Stop: the next message would fail the same way. */
		if (rc != -EINVAL)
			(void)md_check_results(p, n, len, what);
		return rc;
	}
	if (!strcmp(what, "tick"))
		p->accepted += (uint64_t)rc;
	if ((size_t)rc != n || ms_group_size(p->g) != n)
		return md_check_results(p, n, len, what);
	return 0;
}

/* A fixed destination (--dest): its own unconnected socket, so that each one carries its own
 * options whatever the family of the control socket. */
static int md_add_fixed(struct md_serve *p, const char *addr, const struct md_mcast_opts *o)
{
	struct md_sub *s;
	struct ms_dest d;
	unsigned ifindex = 0;
	int rc, fd;

	if (p->nfixed == MD_MAX_FIXED) {
		fprintf(stderr, "%s: at most %d --dest\n", p->name, MD_MAX_FIXED);
		return -EINVAL;
	}
	s = &p->fixed[p->nfixed];
	*s = (struct md_sub){ .fd = -1, .kind = MD_SUB_FIXED };
	if (ex_parse_addr(addr, -1, AF_UNSPEC, &s->addr, &s->addrlen) < 0)
		return -EINVAL;
	if (o->iface && !(ifindex = if_nametoindex(o->iface))) {
		rc = -errno;
		fprintf(stderr, "%s: --mcast-if %s: %s\n", p->name, o->iface, strerror(errno));
		return rc;
	}
	fd = socket(s->addr.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	s->fd = fd;
	rc = 0;
	if (s->addr.ss_family == AF_INET6) {
		int idx = (int)ifindex;

		if ((o->ttl >= 0 && setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_HOPS, &o->ttl,
					       sizeof(o->ttl)) < 0) ||
		    (o->loop >= 0 && setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, &o->loop,
						sizeof(o->loop)) < 0) ||
		    (ifindex && setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_IF, &idx,
					   sizeof(idx)) < 0))
			rc = -errno;
	} else {
		struct ip_mreqn mr = { .imr_ifindex = (int)ifindex };

		if ((o->ttl >= 0 && setsockopt(fd, IPPROTO_IP, IP_MULTICAST_TTL, &o->ttl,
					       sizeof(o->ttl)) < 0) ||
		    (o->loop >= 0 && setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &o->loop,
						sizeof(o->loop)) < 0) ||
		    (ifindex && setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &mr, sizeof(mr)) < 0))
			rc = -errno;
	}
	if (rc < 0) {
		fprintf(stderr, "%s: --dest %s: socket options: %s\n", p->name, addr,
			strerror(-rc));
		close(fd);
		return rc;
	}
	d = (struct ms_dest){ .fd = fd, .addr = (const struct sockaddr *)&s->addr,
			      .addrlen = s->addrlen };
	rc = ms_group_add(p->g, &d);
	if (rc < 0) {
		fprintf(stderr, "%s: --dest %s: ms_group_add: %s\n", p->name, addr,
			ms_strerror(rc));
		close(fd);
		return rc;
	}
	s->id = rc;
	p->nfixed++;
	return 0;
}

/* Descriptors open now (those of /proc/self/fd), or -1 if it cannot be read. */
static long md_fds_open(void)
{
	DIR *d = opendir("/proc/self/fd");
	long n = -1; /* the directory's own */

	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n - 2; /* "." and ".." */
}

/* The TCP side's limits, once the listener is open: the connection cap (what --max-conns
 * says, else the default lowered to what RLIMIT_NOFILE leaves over the descriptors open now
 * and MD_FD_HEADROOM for the rest: an upstream, the library, stats), the backlog cap, and the
 * spare descriptor. */
static int md_limits(struct md_serve *p)
{
	struct rlimit rl;
	long open_now = md_fds_open();

	if (!p->backlog_max)
		p->backlog_max = MD_BACKLOG_MAX_DEFAULT;
	p->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (p->reserve < 0) {
		int rc = -errno;

		fprintf(stderr, "%s: /dev/null: %s\n", p->name, strerror(-rc));
		return rc;
	}
	p->has_reserve = true;
	if (open_now < 0)
		open_now = 64;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
		rlim_t left = rl.rlim_cur > (rlim_t)open_now + MD_FD_HEADROOM ?
				      rl.rlim_cur - (rlim_t)open_now - MD_FD_HEADROOM : 1;

		if (!p->max_conns)
			p->max_conns = left < MD_MAX_CONNS_DEFAULT ? (size_t)left :
								     MD_MAX_CONNS_DEFAULT;
		else if (p->max_conns > left)
			fprintf(stderr, "%s: --max-conns %zu: RLIMIT_NOFILE %llu leaves about %llu; "
				"connections past that are refused as descriptors run out\n",
				p->name, p->max_conns, (unsigned long long)rl.rlim_cur,
				(unsigned long long)left);
	}
	if (!p->max_conns)
		p->max_conns = MD_MAX_CONNS_DEFAULT;
	return 0;
}

/* Control socket on addr (port 0: any, printed for scripts), without connected the one socket
 * all UDP ticks leave from, and with tcp_port >= 0 a TCP listener on the same address
 * (0: any, printed). */
static int md_open(struct md_serve *p, const char *addr, unsigned port, int tcp_port)
{
	struct sockaddr_storage local;
	socklen_t len;
	int rc;

	if (ex_parse_addr(addr, (int)port, AF_UNSPEC, &local, &len) < 0)
		return -EINVAL;
	if (!p->cap && (rc = md_grow(p)) < 0) /* res has room for the fixed destinations */
		return rc;
	p->ctl = socket(local.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (p->ctl < 0 || bind(p->ctl, (struct sockaddr *)&local, len) < 0 ||
	    getsockname(p->ctl, (struct sockaddr *)&local, &len) < 0) {
		rc = -errno;
		fprintf(stderr, "%s: control socket on %s port %u: %s\n", p->name, addr, port,
			strerror(-rc));
		return rc;
	}
	/* Ticks leave from their own socket, so a JOIN retry or a reply never queues behind
	 * the feed. Same family as the control socket: it can reach every address a JOIN can
	 * come from. */
	if (!p->connected) {
		struct sockaddr_storage me = local;
		socklen_t melen = len;

		/* Bound to the control socket's address, port 0: subscribers accept ticks
		 * only from this address and the port the ACK2 names. */
		ex_set_port(&me, 0);
		p->data = socket(local.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (p->data < 0 || bind(p->data, (struct sockaddr *)&me, melen) < 0 ||
		    getsockname(p->data, (struct sockaddr *)&me, &melen) < 0) {
			rc = -errno;
			fprintf(stderr, "%s: data socket: %s\n", p->name, strerror(-rc));
			return rc;
		}
		p->data_port = ex_port(&me);
	}
	p->local = local;
	p->locallen = len;
	if (getrandom(p->key, sizeof(p->key), 0) != (ssize_t)sizeof(p->key)) {
		rc = -errno;
		fprintf(stderr, "%s: getrandom: %s\n", p->name, strerror(-rc));
		return rc;
	}
	if (!p->buckets && !(p->buckets = calloc(MD_BUCKETS, sizeof(*p->buckets))))
		return -ENOMEM;
	printf("control port %u\n", ex_port(&local));
	if (tcp_port >= 0) {
		struct ms_slow_config sc = { .size = sizeof(sc), .policy = MS_SLOW_QUEUE,
					     .overflow = MS_SLOW_DISCONNECT,
					     .queue_limit = p->queue_limit };
		int one = 1;

		/* A stream is framed only as long as every message goes whole: the policy
		 * completes what a full socket took part of, and disconnects a reader that
		 * falls queue_limit (4 MiB) behind instead of blocking the whole fan-out on
		 * it. */
		rc = ms_group_set_slow(p->g, &sc);
		if (rc < 0) {
			fprintf(stderr, "%s: ms_group_set_slow: %s\n", p->name, ms_strerror(rc));
			return rc;
		}
		ex_set_port(&local, (uint16_t)tcp_port);
		p->lis = socket(local.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		/* SO_REUSEADDR: a restarted server gets its port back while the connections of
		 * the one before are in TIME_WAIT. */
		if (p->lis < 0 ||
		    setsockopt(p->lis, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
		    bind(p->lis, (struct sockaddr *)&local, len) < 0 || listen(p->lis, 128) < 0 ||
		    getsockname(p->lis, (struct sockaddr *)&local, &len) < 0) {
			rc = -errno;
			fprintf(stderr, "%s: TCP listener on %s port %d: %s\n", p->name, addr,
				tcp_port, strerror(-rc));
			return rc;
		}
		rc = md_limits(p);
		if (rc < 0)
			return rc;
		printf("tcp port %u\n", ex_port(&local));
	}
	return fflush(stdout) == EOF ? -errno : 0;
}

/* Serve the control socket until want subscribers have joined (or connected). */
static int md_wait_for(struct md_serve *p, size_t want, unsigned timeout_s,
		       const volatile sig_atomic_t *stop)
{
	uint64_t deadline = ex_now_ns(CLOCK_MONOTONIC) + (uint64_t)timeout_s * 1000000000u;

	while (p->nsubs < want && !*stop) {
		uint64_t now = ex_now_ns(CLOCK_MONOTONIC);
		struct pollfd pfd[2] = { { .fd = p->ctl, .events = POLLIN },
					 { .fd = md_lis_pollfd(p), .events = POLLIN } };
		int rc;

		if (now >= deadline) {
			fprintf(stderr, "%s: %zu of %zu subscribers joined within %u s\n", p->name,
				p->nsubs, want, timeout_s);
			return -ETIMEDOUT;
		}
		/* A resting listener (-1) is not polled: wake when its rest ends. */
		uint64_t wake = pfd[1].fd < 0 && p->lis >= 0 && p->lis_rest_until < deadline ?
					p->lis_rest_until : deadline;

		rc = poll(pfd, p->lis >= 0 ? 2 : 1,
			  wake > now ? (int)((wake - now + 999999) / 1000000) : 0);
		if (rc < 0 && errno != EINTR)
			rc = -errno;
		else
			rc = md_control_drain(p);
		if (rc < 0) {
			fprintf(stderr, "%s: control: %s\n", p->name, ms_strerror(rc));
			return rc;
		}
	}
	return 0;
}

/* ---- the serving side's options: md-publisher and md-relay take the same ---------------- */

struct md_serve_opts {
	const char *bind;        /* --bind: the control socket's (and TCP listener's) address */
	unsigned port;           /* --control (0: any, printed) */
	int tcp_port;            /* --tcp (0: any, printed); -1: no TCP subscribers */
	const char *dests[MD_MAX_FIXED]; /* --dest, in order */
	size_t ndests;
	struct md_mcast_opts mo; /* --mcast-ttl, --mcast-loop, --mcast-if */
	size_t want;             /* --subscribers: wait for this many before the feed */
	unsigned join_timeout;   /* --join-timeout, seconds */
	uint64_t lease_ms;       /* --lease */
	size_t max_subs;         /* --max-subscribers */
	size_t max_per_source;   /* --max-per-source */
	uint64_t reply_rate;     /* --challenge-rate */
	size_t max_conns;        /* --max-conns (0: the default, see md_limits) */
	uint64_t backlog_max;    /* --backlog-max, bytes (0: MD_BACKLOG_MAX_DEFAULT) */
	uint32_t queue_limit;    /* --queue-limit, bytes (0: the library's 4 MiB) */
};

/* getopt_long values of the options without a letter */
enum { MD_OPT_MAX_CONNS = 0x300, MD_OPT_BACKLOG_MAX, MD_OPT_QUEUE_LIMIT };

/* A byte count for option opt: digits, then optionally K, M or G (KiB, MiB, GiB), in
 * min..max. Exits on error, like ex_num. */
static unsigned long long md_bytes(const char *opt, const char *s, unsigned long long min,
				   unsigned long long max)
{
	char num[32];
	size_t n = strlen(s);
	unsigned shift = 0;

	if (n > 0 && n < sizeof(num)) {
		switch (s[n - 1]) {
		case 'K': case 'k': shift = 10; break;
		case 'M': case 'm': shift = 20; break;
		case 'G': case 'g': shift = 30; break;
		}
	}
	if (!shift || n >= sizeof(num))
		return ex_num(opt, s, min, max);
	memcpy(num, s, n - 1);
	num[n - 1] = '\0';
	return ex_num(opt, num, (min + (1ull << shift) - 1) >> shift, max >> shift) << shift;
}
#define MD_SERVE_OPTS_INIT                                                                   \
	{ .bind = "127.0.0.1", .port = MD_PORT_DEFAULT, .tcp_port = -1,                      \
	  .mo = { .ttl = -1, .loop = -1 }, .join_timeout = 10,                               \
	  .lease_ms = MD_LEASE_MS_DEFAULT, .max_subs = MD_MAX_SUBS_DEFAULT,                  \
	  .max_per_source = MD_MAX_PER_SOURCE_DEFAULT, .reply_rate = MD_REPLY_RATE_DEFAULT }

/* getopt values of the control protocol's options: outside the letters, so that they never
 * collide with a program's own. */
enum { MD_OPT_LEASE = 0x200, MD_OPT_MAX_SUBS, MD_OPT_MAX_PER_SOURCE, MD_OPT_CHALLENGE_RATE };

/* Their getopt_long entries (md_serve_opt takes their letters). */
#define MD_SERVE_LONGOPTS                                                                    \
	{ "control", required_argument, NULL, 'c' },                                         \
	{ "bind", required_argument, NULL, 'b' },                                            \
	{ "tcp", required_argument, NULL, 'P' },                                             \
	{ "dest", required_argument, NULL, 'd' },                                            \
	{ "mcast-ttl", required_argument, NULL, 'L' },                                       \
	{ "mcast-loop", required_argument, NULL, 'O' },                                      \
	{ "mcast-if", required_argument, NULL, 'I' },                                        \
	{ "backend", required_argument, NULL, 'B' },                                         \
	{ "connected", no_argument, NULL, 'C' },                                             \
	{ "subscribers", required_argument, NULL, 'k' },                                     \
	{ "join-timeout", required_argument, NULL, 'j' },                                    \
	{ "stats-shm", required_argument, NULL, 'S' },                                       \
	{ "lease", required_argument, NULL, MD_OPT_LEASE },                                  \
	{ "max-subscribers", required_argument, NULL, MD_OPT_MAX_SUBS },                     \
	{ "max-per-source", required_argument, NULL, MD_OPT_MAX_PER_SOURCE },                \
	{ "challenge-rate", required_argument, NULL, MD_OPT_CHALLENGE_RATE },                \
	{ "max-conns", required_argument, NULL, MD_OPT_MAX_CONNS },                          \
	{ "backlog-max", required_argument, NULL, MD_OPT_BACKLOG_MAX },                      \
	{ "queue-limit", required_argument, NULL, MD_OPT_QUEUE_LIMIT }

/* getopt_long's letter c (argument arg), if it is one of MD_SERVE_LONGOPTS: into o, sv (its
 * connected flag) and cfg (backend, and the live-counter file: the library expands %p and
 * creates it; without the option it reads MULTISEND_STATS_SHM itself). 1: taken; 0: not one
 * of them; -1: a bad value, said on stderr (exit status 2). */
static int md_serve_opt(int c, const char *arg, struct md_serve_opts *o, struct md_serve *sv,
			struct ms_config *cfg)
{
	switch (c) {
	case 'c': o->port = (unsigned)ex_num("control", arg, 0, 65535); return 1;
	case 'b': o->bind = arg; return 1;
	case 'P': o->tcp_port = (int)ex_num("tcp", arg, 0, 65535); return 1;
	case 'd':
		if (o->ndests == MD_MAX_FIXED) {
			fprintf(stderr, "--dest: at most %d\n", MD_MAX_FIXED);
			return -1;
		}
		o->dests[o->ndests++] = arg;
		return 1;
	case 'L': o->mo.ttl = (int)ex_num("mcast-ttl", arg, 0, 255); return 1;
	case 'O': o->mo.loop = (int)ex_num("mcast-loop", arg, 0, 1); return 1;
	case 'I': o->mo.iface = arg; return 1;
	case 'B': {
		int b = ms_backend_from_name(arg);
		if (b < 0) {
			fprintf(stderr, "--backend: unknown backend '%s'\n", arg);
			return -1;
		}
		cfg->backend = (uint32_t)b;
		return 1;
	}
	case 'C': sv->connected = true; return 1;
	case 'k': o->want = ex_num("subscribers", arg, 0, INT32_MAX); return 1;
	case 'j': o->join_timeout = (unsigned)ex_num("join-timeout", arg, 0, 86400); return 1;
	case 'S': cfg->stats_shm = arg; return 1;
	case MD_OPT_LEASE: o->lease_ms = ex_num("lease", arg, 100, 86400000); return 1;
	case MD_OPT_MAX_SUBS: o->max_subs = ex_num("max-subscribers", arg, 0, 1000000); return 1;
	case MD_OPT_MAX_PER_SOURCE:
		o->max_per_source = ex_num("max-per-source", arg, 0, 1000000);
		return 1;
	case MD_OPT_CHALLENGE_RATE:
		o->reply_rate = ex_num("challenge-rate", arg, 0, 10000000);
		return 1;
	case MD_OPT_MAX_CONNS: o->max_conns = ex_num("max-conns", arg, 1, 1u << 20); return 1;
	case MD_OPT_BACKLOG_MAX:
		o->backlog_max = md_bytes("backlog-max", arg, 1, 1ull << 40);
		return 1;
	case MD_OPT_QUEUE_LIMIT:
		o->queue_limit = (uint32_t)md_bytes("queue-limit", arg, 1, 1u << 30);
		return 1;
	default: return 0;
	}
}

/* The serving side up as the options say: the control socket (and TCP listener), the fixed
 * destinations, then the first o->want subscribers waited for. */
static int md_serve_start(struct md_serve *sv, const struct md_serve_opts *o,
			  const volatile sig_atomic_t *stop)
{
	int rc;

	sv->lease_ns = o->lease_ms * 1000000u;
	sv->max_subs = o->max_subs;
	sv->max_per_source = o->max_per_source;
	sv->reply_rate = o->reply_rate;
	sv->max_conns = o->max_conns;
	sv->backlog_max = o->backlog_max;
	sv->queue_limit = o->queue_limit;
	rc = md_open(sv, o->bind, o->port, o->tcp_port);
	for (size_t i = 0; i < o->ndests && rc >= 0; i++)
		rc = md_add_fixed(sv, o->dests[i], &o->mo);
	if (rc >= 0)
		rc = md_wait_for(sv, o->want, o->join_timeout, stop);
	return rc;
}

/* Before the server exits: give the stream subscribers what their backlogs still hold (END
 * among it), for at most budget_ns. */
static void md_flush_backlogs(struct md_serve *p, uint64_t budget_ns)
{
	uint64_t end = ex_now_ns(CLOCK_MONOTONIC) + budget_ns;

	while (p->lis >= 0 && ms_group_backlog(p->g) > 0 && ex_now_ns(CLOCK_MONOTONIC) < end) {
		struct timespec ts = { .tv_nsec = 1000000 };

		md_reap_removed(p, ms_group_flush(p->g, p->slow, p->cap));
		if (ms_group_backlog(p->g) > 0)
			nanosleep(&ts, NULL);
	}
}

/* After END has gone out once: a stream delivers it (or breaks), so stream subscribers get it
 * once, from their backlogs first, and are then let go; repeating END on them would only
 * find closed connections. */
static void md_end_streams(struct md_serve *p)
{
	md_flush_backlogs(p, 2000000000u);
	for (size_t i = 0; i < p->nsubs;)
		if (p->subs[i].kind != MD_SUB_TCP || md_remove_sub(p, &p->subs[i]) < 0)
			i++;
}

/* What md_log still holds back, and the limits' counts: one line on stdout after the
 * program's summary (with a TCP listener only). */
static void md_report(struct md_serve *p)
{
	md_log_flush(p);
	if (p->lis < 0)
		return;
	printf("%s: tcp connections %" PRIu64 " (at most %zu at once), refused %" PRIu64
	       " (no descriptor %" PRIu64 "), dropped for the backlog cap %" PRIu64
	       " (--backlog-max %" PRIu64 "), per-peer messages %" PRIu64 " (suppressed %" PRIu64
	       ")\n", p->name, p->conns, p->max_conns, p->conn_refused, p->refused_fd, p->evicted,
	       p->backlog_max, p->log_total, p->log_dropped);
}

static void md_close(struct md_serve *p)
{
	while (p->nsubs > 0)
		if (md_remove_sub(p, &p->subs[0]) < 0)
			break;
	ms_group_free(p->g);
	p->g = NULL;
	for (size_t i = 0; i < p->nfixed; i++)
		close(p->fixed[i].fd);
	free(p->subs);
	free(p->res);
	free(p->slow);
	free(p->buckets);
	if (p->lis >= 0)
		close(p->lis);
	if (p->has_reserve)
		close(p->reserve);
	p->has_reserve = false;
	if (p->data >= 0)
		close(p->data);
	if (p->ctl >= 0)
		close(p->ctl);
}

#endif /* MD_SERVE_H */
