/* SPDX-License-Identifier: MIT */
/*
 * md-subscriber: joins an md-publisher (or md-relay) feed and checks it: every tick valid,
 * none missing, none twice, and whether any came out of order. It does not use libmultisend;
 * it is what sits at the other end of the fan-out.
 *
 * One process can hold several independent subscriptions (--sockets K): each socket joins on
 * its own, is counted on its own and prints its own summary, so a test runs 50 subscribers for
 * the price of one process. Three ways in: UDP (JOIN2/CHALLENGE2/ACK2 on the control address,
 * md-proto.h), TCP (a connection to the server's --tcp port, ticks framed by their size
 * field), or a multicast group (--group: the socket joins the group, nothing is sent to the
 * publisher).
 *
 * UDP: answers are taken only from the control address, and ticks and END only from the
 * control address's host at the port the ACK2 names: anything else is counted as foreign and
 * ignored, so a forged tick or END from another source changes nothing. The socket is not
 * connect()ed, because it takes the server's answers (from the control port) and the ticks
 * (from the data port) both; recvfrom's source address is checked instead.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "md-proto.h"

#define RETRY_NS 200000000u /* JOIN and LEAVE are retried every 200 ms until answered */
/* A sequence number further ahead than this is treated as garbage rather than as a gap, so
 * one corrupt datagram cannot make the seen-bitmap allocate gigabytes. */
#define MAX_JUMP (UINT64_C(1) << 26)

/* One-way delay of each tick (its arrival on CLOCK_REALTIME minus the publisher's ts_ns: one
 * host, or hosts whose clocks agree), in a log-linear histogram: exact below 64 ns, then 32
 * buckets per power of two (within 3%), 1920 counters in all whatever the run's length. */
#define LAT_BUCKETS 1920

static unsigned lat_bucket(uint64_t v)
{
	unsigned e;

	if (v < 64)
		return (unsigned)v;
	e = 63u - (unsigned)__builtin_clzll(v); /* 6..63 */
	return 64 + (e - 6) * 32 + (unsigned)((v >> (e - 5)) & 31);
}

static uint64_t lat_low(unsigned i)
{
	if (i < 64)
		return i;
	return (uint64_t)(32 + (i - 64) % 32) << ((i - 64) / 32 + 1);
}

/* The q-quantile's bucket, as its lower bound (0 without samples). */
static uint64_t lat_quantile(const uint32_t *h, uint64_t n, double q)
{
	uint64_t want = (uint64_t)(q * (double)n), seen = 0;

	for (unsigned i = 0; i < LAT_BUCKETS && n; i++) {
		seen += h[i];
		if (seen > want)
			return lat_low(i);
	}
	return 0;
}

/* One bit per sequence number after `base`: exact duplicate and late-arrival detection at any
 * reordering distance, at 1.25 MB per ten million ticks. */
struct feed {
	uint64_t *seen;
	uint64_t words;
	uint64_t base;      /* ticks up to this one are not owed to us (joined late) */
	uint64_t high;      /* highest sequence number received, or base */
	uint64_t received;  /* valid ticks, duplicates included */
	uint64_t gaps;      /* runs of sequence numbers still missing */
	uint64_t missing;   /* sequence numbers still missing */
	uint64_t dups, reordered, invalid;
	uint64_t implausible; /* ticks too far ahead to be real (MAX_JUMP): never adopted */
	uint64_t foreign;   /* datagrams from anything but the server's addresses: ignored */
	uint32_t lat[LAT_BUCKETS]; /* one-way delays, ns (see lat_bucket) */
	uint64_t lat_n, lat_max;
	bool report;        /* print each new gap as it is found (--allow-gaps) */
	char label[32];     /* "subscriber ID", "member I", "tcp": whose feed this is */
};

static bool seen_get(const struct feed *f, uint64_t s)
{
	uint64_t b = s - f->base;

	return s <= f->base || (b / 64 < f->words && (f->seen[b / 64] >> (b % 64) & 1));
}

static int seen_set(struct feed *f, uint64_t s)
{
	uint64_t b = s - f->base;

	if (b / 64 >= f->words) {
		uint64_t words = f->words ? f->words : 1024;

		while (words <= b / 64)
			words *= 2;
		uint64_t *n = realloc(f->seen, words * sizeof(*n));

		if (!n)
			return -ENOMEM;
		memset(n + f->words, 0, (words - f->words) * sizeof(*n));
		f->seen = n;
		f->words = words;
	}
	f->seen[b / 64] |= UINT64_C(1) << (b % 64);
	return 0;
}

static int on_tick(struct feed *f, uint64_t s)
{
	if (s == 0) {
		f->invalid++;
		return 0;
	}
	if (s > f->high + MAX_JUMP) {
		/* Garbage or a forgery from the server's own address: its number is never
		 * adopted (every real tick after it would look stale, and the bitmap would
		 * grow without bound). Reported once, counted apart from the feed's own
		 * faults, which the verdict judges. */
		if (f->implausible++ == 0)
			fprintf(stderr, "md-subscriber: %s: implausible sequence number %" PRIu64
				" after %" PRIu64 " ignored\n", f->label, s, f->high);
		return 0;
	}
	f->received++;
	if (s <= f->base) {
		/* Older than the first tick a late joiner saw: not owed, and not tracked. */
		f->reordered++;
		return 0;
	}
	if (seen_get(f, s)) {
		f->dups++;
		return 0;
	}
	if (seen_set(f, s) < 0)
		return -ENOMEM;
	if (s > f->high) {
		if (s > f->high + 1) { /* a new hole just below s */
			f->gaps++;
			f->missing += s - f->high - 1;
			/* Flushed at once: a script waits for this line to know the feed came
			 * back after a relay restart. */
			if (f->report) {
				printf("%s: gap %" PRIu64 "..%" PRIu64 " (%" PRIu64 " missing)\n",
				       f->label, f->high + 1, s - 1, s - f->high - 1);
				fflush(stdout);
			}
		}
		f->high = s;
		return 0;
	}
	/* A late tick fills a hole: the hole closes, shrinks or splits in two. s < high here,
	 * so s+1 is inside the bitmap, and seen_get counts everything up to base as seen. */
	bool left = seen_get(f, s - 1), right = seen_get(f, s + 1);

	f->reordered++;
	f->missing--;
	if (left && right)
		f->gaps--;
	else if (!left && !right)
		f->gaps++;
	return 0;
}

static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			       &((const struct sockaddr_in6 *)b)->sin6_addr, 16) &&
		       ex_port(a) == ex_port(b);
	return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr &&
	       ex_port(a) == ex_port(b);
}


enum { WAY_UDP, WAY_TCP, WAY_GROUP };

struct sock {
	int fd;
	int id;              /* the server's id for us (UDP), else -1 */
	bool acked, ended, done, left;
	bool broken;         /* its run ended on an error (printed), not by END */
	bool reached;        /* --progress: said so */
	char cookie[MD_COOKIE_HEX + 1]; /* the server's last cookie for us ("" none yet) */
	uint16_t data_port;  /* where the server's ticks come from (ACK2), 0 before */
	uint64_t renew_at;   /* when to renew the lease */
	uint64_t last_join;  /* when the last JOIN2 went */
	uint64_t end_seq;
	uint64_t next_join;  /* when to (re-)send JOIN */
	uint64_t last_rx;    /* when the last datagram of the feed arrived */
	uint8_t *sbuf;       /* TCP: bytes of an unfinished tick */
	size_t sfill;
	struct feed f;
};

struct opts {
	int way;
	struct sockaddr_storage ctl; /* control (UDP), server (TCP) or group address */
	socklen_t ctllen;
	const char *iface;           /* --group: the interface to join it on */
	uint64_t expect, leave_after, rejoin_idle_ns, progress;
	bool have_expect, expect_end, allow_gaps;
};

static uint8_t buf[65536];
static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

/* LEAVE from every UDP socket that was acknowledged, retried until each one's BYE or
 * budget_ns passes, all at once: after END the server may be gone, and 50 sockets waiting in
 * turn would take 50 budgets. The server removes a subscriber before it answers, so after BYE
 * no tick can reach a closed port: on its connected sockets that would come back as
 * ECONNREFUSED, a failure it must count. Ticks still queued are discarded: we stopped
 * counting when we decided to leave. */
static void leave_all(struct sock *ss, size_t k, const struct opts *o, uint64_t budget_ns)
{
	uint64_t now = ex_now_ns(CLOCK_MONOTONIC), end = now + budget_ns, next = now;
	size_t pending = 0;

	for (size_t i = 0; i < k; i++)
		pending += !(ss[i].left = !ss[i].acked);
	for (; pending && now < end; now = ex_now_ns(CLOCK_MONOTONIC)) {
		if (now >= next) {
			for (size_t i = 0; i < k; i++) {
				char req[MD_CTL_SIZE];
				size_t len = md_ctl_request(req, "LEAVE2", ss[i].cookie[0] ?
							    ss[i].cookie : NULL);

				if (!ss[i].left && sendto(ss[i].fd, req, len, 0,
							  (const struct sockaddr *)&o->ctl,
							  o->ctllen) < 0) {
					perror("md-subscriber: sending LEAVE2");
					return;
				}
			}
			next = now + RETRY_NS;
		}

		struct pollfd pfd[k];
		uint64_t wake = next < end ? next : end;

		for (size_t i = 0; i < k; i++)
			pfd[i] = (struct pollfd){ .fd = ss[i].left ? -1 : ss[i].fd,
						  .events = POLLIN };
		if (poll(pfd, k, (int)((wake - now + 999999) / 1000000)) < 0 && errno != EINTR) {
			perror("md-subscriber: poll");
			return;
		}
		for (size_t i = 0; i < k; i++) {
			while (!ss[i].left) {
				uint8_t b[MD_CTL_REPLY_MAX + 1];
				struct md_answer a;
				struct sockaddr_storage from;
				socklen_t fromlen = sizeof(from);
				ssize_t n = recvfrom(ss[i].fd, b, sizeof(b), MSG_DONTWAIT | MSG_TRUNC,
						     (struct sockaddr *)&from, &fromlen);

				if (n < 0)
					break;
				if (!same_addr(&from, &o->ctl))
					continue;
				switch (md_parse_answer(b, (size_t)n, &a)) {
				case 'B':
					ss[i].left = true;
					pending--;
					break;
				case 'C': /* our cookie was stale: LEAVE2 again with this one */
					memcpy(ss[i].cookie, a.cookie, sizeof(a.cookie));
					if (next > now + RETRY_NS / 8)
						next = now + RETRY_NS / 8;
					break;
				}
			}
		}
	}
}

/* One tick or END of n bytes at p, for socket s. Returns 0, or -1 when the process must stop
 * (no memory). */
static int on_message(struct sock *s, const struct opts *o, const uint8_t *p, size_t n)
{
	struct md_tick t;
	uint32_t magic;

	if (n < sizeof(t) || n > sizeof(buf)) {
		s->f.invalid++;
		return 0;
	}
	memcpy(&t, p, sizeof(t));
	magic = le32toh(t.magic);
	if (le32toh(t.size) != (uint64_t)n || (magic != MD_MAGIC_TICK && magic != MD_MAGIC_END)) {
		s->f.invalid++;
		return 0;
	}
	if (magic == MD_MAGIC_END) {
		s->end_seq = le64toh(t.seq);
		s->ended = s->done = true;
		return 0;
	}
	uint64_t seq = le64toh(t.seq), ts = le64toh(t.ts_ns), now = ex_now_ns(CLOCK_REALTIME);
	uint64_t delay = now > ts ? now - ts : 0; /* a clock behind the sender's: 0 */
	bool owed_from_1 = o->have_expect || o->expect_end;

	if (!owed_from_1 && s->f.received == 0 && seq > 0)
		s->f.base = s->f.high = seq - 1; /* joined late: earlier ticks not owed */
	/* A tick on_tick refuses (seq 0, or implausibly far ahead) has no delay worth
	 * keeping: its timestamp is as made up as its number. */
	if (seq && seq <= s->f.high + MAX_JUMP) {
		s->f.lat[lat_bucket(delay)]++;
		s->f.lat_n++;
		if (delay > s->f.lat_max)
			s->f.lat_max = delay;
	}
	if (on_tick(&s->f, seq) < 0) {
		fprintf(stderr, "md-subscriber: out of memory\n");
		return -1;
	}
	if (o->progress && !s->reached && s->f.high >= o->progress) { /* high: adopted only */
		/* Flushed at once: a script waits for this line to know the feed got here. */
		printf("%s: reached %" PRIu64 "\n", s->f.label, o->progress);
		fflush(stdout);
		s->reached = true;
	}
	if (o->leave_after && s->f.received >= o->leave_after)
		s->done = true;
	return 0;
}

/* Drain socket s. Returns 0, or -1 on an error that ends this socket's run (printed). */
static int drain_udp(struct sock *s, const struct opts *o, uint64_t now)
{
	for (;;) {
		struct sockaddr_storage from;
		socklen_t fromlen = sizeof(from);
		ssize_t n = recvfrom(s->fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC,
				     (struct sockaddr *)&from, &fromlen);

		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return 0;
			perror("md-subscriber: recvfrom");
			return -1;
		}
		if (o->way == WAY_UDP && same_addr(&from, &o->ctl)) {
			struct md_answer a;

			switch (md_parse_answer(buf, (size_t)n, &a)) {
			case 'C':
				/* JOIN2 again with this cookie, soon but not at once: a forged
				 * CHALLENGE2 makes us send at most 40 JOIN2 a second. */
				memcpy(s->cookie, a.cookie, sizeof(a.cookie));
				if (s->next_join > s->last_join + RETRY_NS / 8)
					s->next_join = s->last_join + RETRY_NS / 8;
				break;
			case 'A':
				if (!s->acked)
					s->last_rx = now; /* the idle clock starts now */
				s->acked = true;
				s->id = a.id;
				s->data_port = (uint16_t)a.port;
				memcpy(s->cookie, a.cookie, sizeof(a.cookie));
				/* Renewed three times a lease, so two lost renewals cost nothing. */
				s->renew_at = now + a.lease_ms * 1000000u / 3;
				s->next_join = now + RETRY_NS;
				break;
			default:
				s->f.foreign++; /* never answered */
			}
			continue;
		}
		if (o->way == WAY_UDP) {
			struct sockaddr_storage data = o->ctl;

			ex_set_port(&data, s->data_port);
			if (!s->data_port || !same_addr(&from, &data)) {
				s->f.foreign++;
				continue;
			}
		}
		s->last_rx = now;
		/* MSG_TRUNC made n the datagram's real length, so a truncated one fails the
		 * size check rather than passing as a shorter tick. */
		if (on_message(s, o, buf, (size_t)n) < 0)
			return -1;
		if (s->done)
			return 0;
	}
}

/* Read what the stream has and take every whole tick from it. Returns 0, or -1 when the
 * stream ended or broke (printed). */
static int drain_tcp(struct sock *s, const struct opts *o)
{
	ssize_t n = recv(s->fd, s->sbuf + s->sfill, 2 * sizeof(buf) - s->sfill, MSG_DONTWAIT);

	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : (perror("md-subscriber: recv"), -1);
	if (n == 0) {
		fprintf(stderr, "md-subscriber: the server closed the stream\n");
		return -1;
	}
	s->sfill += (size_t)n;

	size_t off = 0;

	while (!s->done && s->sfill - off >= 8) {
		uint32_t size;

		memcpy(&size, s->sbuf + off + 4, 4);
		size = le32toh(size);
		/* The size field frames the stream: one that cannot be a tick means framing is
		 * lost, and nothing after it can be trusted. */
		if (size < sizeof(struct md_tick) || size > sizeof(buf)) {
			fprintf(stderr, "md-subscriber: stream framing lost (size %u)\n", size);
			return -1;
		}
		if (s->sfill - off < size)
			break;
		if (on_message(s, o, s->sbuf + off, size) < 0)
			return -1;
		off += size;
	}
	memmove(s->sbuf, s->sbuf + off, s->sfill - off);
	s->sfill -= off;
	return 0;
}

/* The socket of subscription i. Returns the descriptor or -1 (printed). */
static int open_sock(struct sock *s, const struct opts *o, size_t i)
{
	struct sockaddr_storage local = { 0 };
	int one = 1, fd, fam = o->ctl.ss_family;

	snprintf(s->f.label, sizeof(s->f.label), o->way == WAY_GROUP ? "member %zu" :
		 o->way == WAY_TCP ? "tcp %zu" : "subscriber %zu", i);
	s->f.report = o->allow_gaps;
	s->id = -1;
	if (o->way == WAY_TCP) {
		fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (const struct sockaddr *)&o->ctl, o->ctllen) < 0) {
			perror("md-subscriber: connect");
			if (fd >= 0)
				close(fd);
			return -1;
		}
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		s->sbuf = malloc(2 * sizeof(buf));
		if (!s->sbuf) {
			close(fd);
			return -1;
		}
		s->acked = true;
		return fd;
	}

	/* Ticks keep coming while this process is not running; the default receive buffer
	 * holds only a few hundred of them. */
	fd = socket(fam, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || ex_set_rcvbuf(fd, 8 << 20) < 0) {
		perror("md-subscriber: socket");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (o->way == WAY_GROUP) {
		/* Every member socket binds the group's port (SO_REUSEADDR lets them share it),
		 * and the kernel gives each one its own copy of each datagram. */
		unsigned idx = o->iface ? if_nametoindex(o->iface) : 0;
		int rc;

		if (o->iface && !idx) {
			fprintf(stderr, "md-subscriber: --iface %s: %s\n", o->iface,
				strerror(errno));
			close(fd);
			return -1;
		}
		if (fam == AF_INET6) {
			struct ipv6_mreq mr = { .ipv6mr_interface = idx };

			mr.ipv6mr_multiaddr = ((const struct sockaddr_in6 *)&o->ctl)->sin6_addr;
			rc = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
			     bind(fd, (const struct sockaddr *)&o->ctl, o->ctllen) < 0 ||
			     setsockopt(fd, IPPROTO_IPV6, IPV6_JOIN_GROUP, &mr, sizeof(mr)) < 0;
		} else {
			struct ip_mreqn mr = { .imr_ifindex = (int)idx };

			mr.imr_multiaddr = ((const struct sockaddr_in *)&o->ctl)->sin_addr;
			rc = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
			     bind(fd, (const struct sockaddr *)&o->ctl, o->ctllen) < 0 ||
			     setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mr, sizeof(mr)) < 0;
		}
		if (rc) {
			perror("md-subscriber: joining the group");
			close(fd);
			return -1;
		}
		s->acked = true;
		return fd;
	}

	/* Any port (the publisher learns it from the JOIN's source address): on loopback when
	 * the publisher is on this host's loopback, else on every address, so that a publisher
	 * on another host (or namespace) reaches the address the JOIN left from. */
	local.ss_family = (sa_family_t)fam;
	if (fam == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)&o->ctl)->sin6_addr;
		((struct sockaddr_in6 *)&local)->sin6_addr =
			IN6_IS_ADDR_LOOPBACK(a) ? in6addr_loopback : in6addr_any;
	} else {
		const uint32_t a = ntohl(((const struct sockaddr_in *)&o->ctl)->sin_addr.s_addr);
		((struct sockaddr_in *)&local)->sin_addr.s_addr =
			htonl((a >> 24) == 127 ? INADDR_LOOPBACK : INADDR_ANY);
	}
	if (bind(fd, (struct sockaddr *)&local, o->ctllen) < 0) {
		perror("md-subscriber: bind");
		close(fd);
		return -1;
	}
	return fd;
}

/* The verdict on one subscription after the run, with its summary line. Returns 0 or 1. */
static int verdict(struct sock *s, const struct opts *o, uint64_t timeout_s)
{
	struct feed *f = &s->f;
	int status = 0;

	if (s->ended && s->end_seq > f->high) { /* the tail of the feed never arrived */
		f->gaps++;
		f->missing += s->end_seq - f->high;
		if (f->report)
			printf("%s: gap %" PRIu64 "..%" PRIu64 " (%" PRIu64 " missing)\n",
			       f->label, f->high + 1, s->end_seq, s->end_seq - f->high);
	}
	printf("%s: received %" PRIu64 ", gaps %" PRIu64 " (missing %" PRIu64
	       "), duplicates %" PRIu64 ", last seq %" PRIu64 ", reordered %" PRIu64
	       ", invalid %" PRIu64 ", id %d, delay p50 %.1f p99 %.1f max %.1f us, implausible %"
	       PRIu64 ", foreign %" PRIu64 "\n",
	       f->label, f->received, f->gaps, f->missing, f->dups, f->high, f->reordered,
	       f->invalid, s->id, (double)lat_quantile(f->lat, f->lat_n, 0.5) / 1e3,
	       (double)lat_quantile(f->lat, f->lat_n, 0.99) / 1e3, (double)f->lat_max / 1e3,
	       f->implausible, f->foreign);

	if (s->broken)
		return 1;
	if (!s->done) {
		if (stop)
			fprintf(stderr, "md-subscriber: %s: no END before the signal\n", f->label);
		else
			fprintf(stderr, "md-subscriber: %s: no END within %" PRIu64 " s%s\n",
				f->label, timeout_s, s->acked ? "" : " (never acknowledged)");
		return 1;
	}

	uint64_t want = o->expect_end ? s->end_seq : o->expect;

	if (!o->have_expect && !o->expect_end)
		return 0;
	if (o->allow_gaps) {
		/* Ticks may be missing, but only inside gaps this subscriber reported: every
		 * sequence number 1..want arrived once or is in a gap, in order, none twice. */
		if (f->received + f->missing != want || f->dups || f->invalid || f->reordered ||
		    (s->ended && s->end_seq != want))
			status = 1;
	} else if (f->received != want || f->gaps || f->dups || f->invalid ||
		   (s->ended && s->end_seq != want)) {
		status = 1;
	}
	if (status)
		fprintf(stderr,
			"md-subscriber: %s: expected ticks 1..%" PRIu64 " exactly once%s%s\n",
			f->label, want, o->allow_gaps ? " or in a reported gap, in order" : "",
			s->ended && s->end_seq != want ? ", END says another count" : "");
	return status;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: md-subscriber [options]\n"
		"  --control HOST:PORT  publisher's (or relay's) UDP control address\n"
		"                       (default 127.0.0.1:%d)\n"
		"  --tcp HOST:PORT      subscribe by TCP to the server's --tcp port instead\n"
		"  --group ADDR:PORT    be a member of this multicast group instead (IPv4 or\n"
		"                       IPv6)\n"
		"  --iface IF           the interface to join --group on (default: the kernel's\n"
		"                       choice)\n"
		"  --sockets K          K independent subscriptions in this process (default 1)\n"
		"  --timeout SEC        fail if no END arrives within SEC (default 30)\n"
		"  --expect N           fail unless ticks 1..N all arrive, once each\n"
		"  --expect-end         as --expect, with N the last tick END announces\n"
		"  --allow-gaps         with --expect or --expect-end: a missing tick is reported\n"
		"                       (a 'gap A..B' line when found) instead of failing; still\n"
		"                       fails on a duplicate, a tick out of order, or a count\n"
		"                       that does not add up\n"
		"  --rejoin-idle MS     re-send JOIN2 while no tick has come for MS ms (finds a\n"
		"                       restarted relay; 0 = never, the default); the lease is\n"
		"                       renewed three times per lease the server announces\n"
		"  --leave-after N      leave (LEAVE2, wait for BYE2) after N ticks, without END\n"
		"  --progress N         print 'LABEL: reached N' when a tick >= N first arrives\n"
		"  --help\n"
		"Without --expect or --expect-end, ticks before the first one received are not\n"
		"counted as missing (a late join). Prints 'joined K' once every socket is in, and\n"
		"at the end one summary line per subscription, with its one-way delay percentiles\n"
		"(publisher's clock to arrival); SIGINT or SIGTERM ends the run there. By UDP,\n"
		"ticks and END count only from the server's address and the port its ACK2\n"
		"names; others are 'foreign' and ignored.\n",
		MD_PORT_DEFAULT);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "control", required_argument, NULL, 'c' },
		{ "tcp", required_argument, NULL, 'P' },
		{ "group", required_argument, NULL, 'g' },
		{ "iface", required_argument, NULL, 'i' },
		{ "sockets", required_argument, NULL, 'k' },
		{ "timeout", required_argument, NULL, 't' },
		{ "expect", required_argument, NULL, 'e' },
		{ "expect-end", no_argument, NULL, 'E' },
		{ "allow-gaps", no_argument, NULL, 'G' },
		{ "rejoin-idle", required_argument, NULL, 'R' },
		{ "leave-after", required_argument, NULL, 'l' },
		{ "progress", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *addr = "127.0.0.1:5000";
	uint64_t timeout_s = 30;
	size_t k = 1, joined = 0;
	struct opts o = { .way = WAY_UDP };
	struct sock *ss;
	int c, status = 0;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': addr = optarg; o.way = WAY_UDP; break;
		case 'P': addr = optarg; o.way = WAY_TCP; break;
		case 'g': addr = optarg; o.way = WAY_GROUP; break;
		case 'i': o.iface = optarg; break;
		case 'k': k = ex_num("sockets", optarg, 1, 1000); break;
		case 't': timeout_s = ex_num("timeout", optarg, 0, 86400); break;
		case 'e':
			o.expect = ex_num("expect", optarg, 0, UINT64_MAX / 2);
			o.have_expect = true;
			break;
		case 'E': o.expect_end = true; break;
		case 'G': o.allow_gaps = true; break;
		case 'R': o.rejoin_idle_ns = ex_num("rejoin-idle", optarg, 0, 86400000) * 1000000u;
			break;
		case 'l': o.leave_after = ex_num("leave-after", optarg, 1, UINT64_MAX / 2); break;
		case 'p': o.progress = ex_num("progress", optarg, 1, UINT64_MAX / 2); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	if (ex_parse_addr(addr, o.way == WAY_UDP ? MD_PORT_DEFAULT : -1, AF_UNSPEC, &o.ctl,
			  &o.ctllen) < 0)
		return 2;
	ss = calloc(k, sizeof(*ss));
	if (!ss) {
		perror("md-subscriber");
		return 1;
	}
	for (size_t i = 0; i < k; i++)
		ss[i].fd = -1;
	for (size_t i = 0; i < k && status == 0; i++)
		if ((ss[i].fd = open_sock(&ss[i], &o, i)) < 0)
			status = 1;

	uint64_t now = ex_now_ns(CLOCK_MONOTONIC);
	uint64_t deadline = now + timeout_s * 1000000000u;
	bool said_joined = false;

	/* SIGINT or SIGTERM: count what is queued, print the summaries and stop (without END,
	 * a failure). No SA_RESTART, so that poll returns at once. */
	struct sigaction sa = { .sa_handler = on_signal };

	if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0) {
		perror("md-subscriber: sigaction");
		status = 1;
	}
	while (status == 0) {
		size_t active = 0;
		bool timers = false;

		now = ex_now_ns(CLOCK_MONOTONIC);
		if (stop) {
			for (size_t i = 0; i < k; i++)
				if (!ss[i].done && (o.way == WAY_TCP ? drain_tcp(&ss[i], &o) :
							drain_udp(&ss[i], &o, now)) < 0)
					ss[i].broken = ss[i].done = true;
			break;
		}
		if (now >= deadline)
			break;
		joined = 0;
		for (size_t i = 0; i < k; i++) {
			struct sock *s = &ss[i];
			bool idle = s->acked && o.rejoin_idle_ns &&
				    now - s->last_rx >= o.rejoin_idle_ns;

			joined += s->acked;
			if (s->done)
				continue;
			active++;
			if (o.way != WAY_UDP)
				continue;
			timers = true;
			if ((!s->acked || idle || now >= s->renew_at) && now >= s->next_join) {
				/* The JOIN2 or its answer may be lost, the publisher may not be up
				 * yet, the lease is due for renewal, or (idle) a relay restarted and
				 * forgot us; a server answers a repeated JOIN2 with the same id and
				 * no second destination. */
				char req[MD_CTL_SIZE];
				size_t len = md_ctl_request(req, "JOIN2",
							    s->cookie[0] ? s->cookie : NULL);

				if (sendto(s->fd, req, len, 0, (struct sockaddr *)&o.ctl,
					   o.ctllen) < 0) {
					perror("md-subscriber: sending JOIN2");
					status = 1;
					break;
				}
				s->last_join = now;
				s->next_join = now + RETRY_NS;
			}
		}
		if (!active || status)
			break;
		if (joined == k && !said_joined) {
			/* Scripts wait for this before starting the feed. */
			printf("joined %zu\n", k);
			fflush(stdout);
			said_joined = true;
		}

		struct pollfd pfd[k];
		uint64_t wake = deadline;

		if (timers && now + RETRY_NS / 4 < wake)
			wake = now + RETRY_NS / 4; /* JOIN retries and leases: 50 ms is fine */
		for (size_t i = 0; i < k; i++)
			pfd[i] = (struct pollfd){ .fd = ss[i].done ? -1 : ss[i].fd,
						  .events = POLLIN };
		int rc = poll(pfd, k, (int)((wake - now + 999999) / 1000000));

		if (rc < 0 && errno != EINTR) {
			perror("md-subscriber: poll");
			status = 1;
			break;
		}
		now = ex_now_ns(CLOCK_MONOTONIC);
		for (size_t i = 0; rc > 0 && i < k && status == 0; i++) {
			if (!(pfd[i].revents & (POLLIN | POLLERR | POLLHUP)))
				continue;
			if ((o.way == WAY_TCP ? drain_tcp(&ss[i], &o) :
						drain_udp(&ss[i], &o, now)) < 0)
				ss[i].broken = ss[i].done = true; /* the verdict fails it */
		}
	}
	/* Without a LEAVE, a publisher on connected sockets would learn we are gone only from
	 * the ICMP errors of its next sends. After END it may have exited already, so the wait
	 * for its BYE is short. */
	if (o.way == WAY_UDP) {
		bool all_ended = true;

		for (size_t i = 0; i < k; i++)
			all_ended &= ss[i].ended;
		leave_all(ss, k, &o, all_ended ? 300000000u : 2000000000u);
	}
	for (size_t i = 0; i < k; i++) {
		if (ss[i].fd >= 0)
			close(ss[i].fd);
		if (ss[i].fd >= 0 && verdict(&ss[i], &o, timeout_s))
			status = 1;
		free(ss[i].f.seen);
		free(ss[i].sbuf);
	}
	free(ss);
	if (fflush(stdout) == EOF)
		status = 1;
	return status;
}
