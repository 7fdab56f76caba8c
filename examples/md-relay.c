/* SPDX-License-Identifier: MIT */
/*
 * md-relay: one node of a fan-out tree. It subscribes upstream, to an md-publisher or another
 * md-relay (UDP: JOIN/ACK on the control port; or TCP: a connection to the --tcp port), and
 * republishes every tick through libmultisend to its own subscribers, serving the same
 * JOIN/LEAVE control protocol, TCP port and fixed (multicast) destinations as md-publisher
 * (md-serve.h), so subscribers cannot tell a relay from a publisher and relays chain.
 *
 * Sequence numbers are end to end: a tick goes on byte for byte as it came (seq, ts_ns and
 * padding), so a subscriber three hops down checks the publisher's numbering and measures the
 * publisher's clock. The relay never sends a sequence number twice or backwards: a tick at or
 * below the last one forwarded (an upstream duplicate, or one that arrives after a later one)
 * is counted and dropped. A jump forward is an upstream gap: reported on stderr when found,
 * counted in the exit summary, and passed on as the same jump, which subscribers report in
 * turn (md-subscriber --allow-gaps). So a tick is either delivered once, in order, or inside
 * a gap someone reported: never a duplicate, never a silent loss.
 *
 * Trust: by UDP, the relay takes answers only from the upstream's control address and ticks
 * and END only from the upstream's host at the port its ACK2 names (recvfrom's source is
 * checked: the one socket takes both, so it cannot be connect()ed to either); by TCP, only
 * from its own connection. Anything else is counted as foreign and ignored, so a forged END
 * cannot end the relay and a forged sequence number cannot stall it. A tick more than
 * MAX_JUMP ahead of the last one is reported and never adopted, whatever its source.
 *
 * Restarts: the upstream subscription is a lease. On UDP the relay renews it three times per
 * lease the upstream announces, and re-sends JOIN2 while the feed is quiet (a server answers
 * a repeated JOIN2 with the same id, no second destination; a restarted one, whose cookies
 * changed, with a CHALLENGE2 first); on TCP it reconnects when the connection ends. A restarted relay starts from the next tick
 * it receives; its subscribers find it again with their own lease (md-subscriber
 * --rejoin-idle) and see the ticks they missed as one reported gap.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <multisend.h>

#include "md-proto.h"
#include "md-serve.h"

#define RETRY_NS 200000000u  /* JOIN, LEAVE and TCP connects are retried every 200 ms */
#define TICK_NS 50000000     /* the main loop's longest sleep while something is pending */
#define END_REPEATS 3
#define END_GAP_NS 10000000  /* 10 ms */
#define MAX_MSG 65536
/* A sequence number further ahead than this is garbage or a forgery, not a gap (as in
 * md-subscriber): adopting it would make every real tick after it look stale. */
#define MAX_JUMP (UINT64_C(1) << 26)

struct relay {
	struct md_serve sv;
	bool tcp;                      /* upstream by TCP, else UDP */
	struct sockaddr_storage up;    /* upstream control (UDP) or TCP address */
	socklen_t uplen;
	int ufd;                       /* upstream socket, -1 while a TCP one is down */
	bool connecting;               /* a non-blocking TCP connect in progress */
	bool acked;                    /* UDP: the upstream answered our JOIN2 */
	char cookie[MD_COOKIE_HEX + 1];/* UDP: the upstream's last cookie for us ("" none) */
	uint16_t data_port;            /* UDP: where its ticks come from (ACK2), 0 before */
	uint64_t renew_at, last_join;  /* UDP: the lease's renewal, the last JOIN2 sent */
	uint64_t next_try, last_rx, idle_ns;
	uint8_t *sbuf;                 /* TCP: bytes of an unfinished tick */
	size_t sfill;
	uint8_t *buf;                  /* one datagram */
	uint64_t first, last;          /* first and last sequence number forwarded (0: none) */
	uint64_t forwarded, gaps, missing, stale, invalid, reconnects, rejoins;
	uint64_t implausible, foreign;
	bool ended;
	uint8_t end[sizeof(struct md_tick)]; /* END as it came */
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

/* One message of n bytes from upstream. Returns 0 or a negative errno that should stop the
 * relay. */
static int on_upstream(struct relay *r, const uint8_t *p, size_t n)
{
	struct md_tick t;
	uint32_t magic;
	uint64_t seq;

	if (n < sizeof(t) || n > MAX_MSG) {
		r->invalid++;
		return 0;
	}
	memcpy(&t, p, sizeof(t));
	magic = le32toh(t.magic);
	if (le32toh(t.size) != (uint64_t)n || (magic != MD_MAGIC_TICK && magic != MD_MAGIC_END)) {
		r->invalid++;
		return 0;
	}
	seq = le64toh(t.seq);
	if (magic == MD_MAGIC_END) {
		memcpy(r->end, p, sizeof(r->end));
		r->ended = true;
		return 0;
	}
	if (r->last && seq > r->last + MAX_JUMP) {
		if (r->implausible++ == 0)
			fprintf(stderr, "md-relay: implausible sequence number %" PRIu64
				" after %" PRIu64 " ignored\n", seq, r->last);
		return 0;
	}
	if (seq == 0 || seq <= r->last) {
		/* A duplicate, or a tick overtaken by a later one: forwarding it would give
		 * subscribers a sequence number twice or out of order. Its place is already
		 * inside a gap that was reported. */
		r->stale++;
		return 0;
	}
	if (r->last == 0) {
		r->first = seq;
		fprintf(stderr, "md-relay: first tick seq %" PRIu64 "\n", seq);
	} else if (seq > r->last + 1) {
		r->gaps++;
		r->missing += seq - r->last - 1;
		fprintf(stderr, "md-relay: upstream gap %" PRIu64 "..%" PRIu64 " (%" PRIu64
			" missing)\n", r->last + 1, seq - 1, seq - r->last - 1);
	}
	r->last = seq;

	struct iovec iov = { .iov_base = (void *)p, .iov_len = n };
	int rc = md_fanout(&r->sv, &iov, 1, n, "tick");

	if (rc < 0)
		return rc;
	r->forwarded++;
	return 0;
}

static void upstream_close(struct relay *r, const char *why)
{
	if (r->ufd < 0)
		return;
	fprintf(stderr, "md-relay: upstream connection %s\n", why);
	close(r->ufd);
	r->ufd = -1;
	r->connecting = false;
	r->sfill = 0; /* a tick cut by the end of a stream is lost, and found as a gap */
}

/* Start a TCP connection upstream (non-blocking); poll reports when it is made. */
static int upstream_connect(struct relay *r)
{
	r->ufd = socket(r->up.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (r->ufd < 0) {
		/* Out of descriptors or memory (subscribers hold them): tried again after
		 * RETRY_NS, as a refused connect is; the relay keeps serving meanwhile. */
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
			return 0;
		return -errno;
	}
	/* Failing only leaves a smaller buffer: the upstream's policy copes with a slow
	 * reader. */
	(void)ex_set_rcvbuf(r->ufd, 8 << 20);
	if (connect(r->ufd, (struct sockaddr *)&r->up, r->uplen) < 0 && errno != EINPROGRESS) {
		close(r->ufd);
		r->ufd = -1;
		return 0; /* tried again after RETRY_NS */
	}
	r->connecting = true;
	return 0;
}

static int read_tcp(struct relay *r)
{
	for (;;) {
		ssize_t n = recv(r->ufd, r->sbuf + r->sfill, 2 * MAX_MSG - r->sfill, MSG_DONTWAIT);
		size_t off = 0;

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		if (n <= 0) {
			upstream_close(r, n == 0 ? "closed by the upstream" : strerror(errno));
			return 0;
		}
		r->sfill += (size_t)n;
		while (!r->ended && r->sfill - off >= 8) {
			uint32_t size;

			memcpy(&size, r->sbuf + off + 4, 4);
			size = le32toh(size);
			/* The size field frames the stream; one that cannot be a tick means the
			 * framing is lost, so the connection starts again from a fresh stream. */
			if (size < sizeof(struct md_tick) || size > MAX_MSG) {
				r->invalid++;
				upstream_close(r, "lost its framing");
				return 0;
			}
			if (r->sfill - off < size)
				break;
			int rc = on_upstream(r, r->sbuf + off, size);

			if (rc < 0)
				return rc;
			off += size;
		}
		memmove(r->sbuf, r->sbuf + off, r->sfill - off);
		r->sfill -= off;
		if (r->ended)
			return 0;
	}
}

static int read_udp(struct relay *r, uint64_t now)
{
	for (;;) {
		struct sockaddr_storage from;
		socklen_t fromlen = sizeof(from);
		ssize_t n = recvfrom(r->ufd, r->buf, MAX_MSG, MSG_DONTWAIT | MSG_TRUNC,
				     (struct sockaddr *)&from, &fromlen);

		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return 0;
			/* An ICMP error from a JOIN to a server not up yet, say: not fatal. */
			return 0;
		}
		if (md_addr_equal(&from, &r->up)) {
			struct md_answer a;

			switch (md_parse_answer(r->buf, (size_t)n, &a)) {
			case 'C':
				/* JOIN2 again with this cookie, soon but not at once: forged
				 * CHALLENGE2s make us send at most 40 JOIN2 a second. */
				memcpy(r->cookie, a.cookie, sizeof(a.cookie));
				if (r->next_try > r->last_join + RETRY_NS / 8)
					r->next_try = r->last_join + RETRY_NS / 8;
				break;
			case 'A':
				if (!r->acked) {
					fprintf(stderr, "md-relay: upstream ACK2 %d\n", a.id);
					r->last_rx = now; /* the idle clock starts now */
				}
				r->acked = true;
				r->data_port = (uint16_t)a.port;
				memcpy(r->cookie, a.cookie, sizeof(a.cookie));
				r->renew_at = now + a.lease_ms * 1000000u / 3;
				break;
			default:
				r->foreign++; /* never answered */
			}
			continue;
		}

		struct sockaddr_storage data = r->up;

		ex_set_port(&data, r->data_port);
		if (!r->data_port || !md_addr_equal(&from, &data)) {
			r->foreign++;
			continue;
		}
		r->last_rx = now;
		int rc = on_upstream(r, r->buf, (size_t)n);

		if (rc < 0 || r->ended)
			return rc;
	}
}

/* Keep the upstream subscription alive: JOIN until acknowledged and again while the feed is
 * quiet (UDP), or (re)connect (TCP). */
static int upstream_tend(struct relay *r, uint64_t now)
{
	if (now < r->next_try)
		return 0;
	if (r->tcp) {
		if (r->ufd >= 0)
			return 0;
		r->next_try = now + RETRY_NS;
		return upstream_connect(r);
	}
	bool idle = now - r->last_rx >= r->idle_ns;
	char req[MD_CTL_SIZE];
	size_t len;

	if (r->acked && !idle && now < r->renew_at)
		return 0;
	if (r->acked && idle)
		r->rejoins++;
	r->next_try = now + RETRY_NS;
	r->last_join = now;
	len = md_ctl_request(req, "JOIN2", r->cookie[0] ? r->cookie : NULL);
	if (sendto(r->ufd, req, len, 0, (struct sockaddr *)&r->up, r->uplen) < 0 &&
	    errno != ECONNREFUSED)
		fprintf(stderr, "md-relay: sending JOIN2: %s\n", strerror(errno));
	return 0;
}

static int upstream_open_udp(struct relay *r)
{
	struct sockaddr_storage local = { .ss_family = r->up.ss_family };

	/* Any port on the address family of the upstream; the upstream learns it from the
	 * JOIN. Loopback for a loopback upstream, else every address. */
	if (r->up.ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)&r->up)->sin6_addr;
		((struct sockaddr_in6 *)&local)->sin6_addr =
			IN6_IS_ADDR_LOOPBACK(a) ? in6addr_loopback : in6addr_any;
	} else {
		const uint32_t a = ntohl(((const struct sockaddr_in *)&r->up)->sin_addr.s_addr);
		((struct sockaddr_in *)&local)->sin_addr.s_addr =
			htonl((a >> 24) == 127 ? INADDR_LOOPBACK : INADDR_ANY);
	}
	r->ufd = socket(r->up.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (r->ufd < 0 || ex_set_rcvbuf(r->ufd, 8 << 20) < 0 ||
	    bind(r->ufd, (struct sockaddr *)&local, r->uplen) < 0) {
		int rc = -errno;

		perror("md-relay: upstream socket");
		return rc;
	}
	return 0;
}

/* UDP: LEAVE2, retried until BYE2 or half a second, so that an upstream on connected sockets
 * does not learn of our exit only from ICMP errors. */
static void upstream_leave(struct relay *r)
{
	uint64_t now = ex_now_ns(CLOCK_MONOTONIC), end = now + 500000000u, next = now;

	for (; r->acked && now < end; now = ex_now_ns(CLOCK_MONOTONIC)) {
		struct pollfd pfd = { .fd = r->ufd, .events = POLLIN };

		if (now >= next) {
			char req[MD_CTL_SIZE];
			size_t len = md_ctl_request(req, "LEAVE2", r->cookie[0] ? r->cookie : NULL);

			if (sendto(r->ufd, req, len, 0, (struct sockaddr *)&r->up, r->uplen) < 0)
				return;
			next = now + RETRY_NS / 2;
		}
		if (poll(&pfd, 1, (int)((next - now + 999999) / 1000000)) < 0 && errno != EINTR)
			return;
		for (;;) {
			uint8_t b[MD_CTL_REPLY_MAX + 1];
			struct md_answer a;
			struct sockaddr_storage from;
			socklen_t fromlen = sizeof(from);
			ssize_t n = recvfrom(r->ufd, b, sizeof(b), MSG_DONTWAIT | MSG_TRUNC,
					     (struct sockaddr *)&from, &fromlen);

			if (n < 0)
				break;
			if (!md_addr_equal(&from, &r->up))
				continue;
			int kind = md_parse_answer(b, (size_t)n, &a);

			if (kind == 'B')
				return;
			if (kind == 'C') { /* our cookie was stale: again with this one */
				memcpy(r->cookie, a.cookie, sizeof(a.cookie));
				if (next > now + RETRY_NS / 8)
					next = now + RETRY_NS / 8;
			}
		}
	}
}

/* END as it came, a few times (UDP may drop one); stream subscribers get it once. */
static int send_end(struct relay *r)
{
	for (int i = 0; i < END_REPEATS; i++) {
		struct iovec iov = { .iov_base = r->end, .iov_len = sizeof(r->end) };
		int rc = md_control_drain(&r->sv);

		if (rc >= 0)
			rc = md_fanout(&r->sv, &iov, 1, sizeof(r->end), "END");
		if (rc < 0)
			return rc;
		if (i == 0)
			md_end_streams(&r->sv);
		if (i + 1 < END_REPEATS) {
			struct timespec ts = { .tv_nsec = END_GAP_NS };

			nanosleep(&ts, NULL);
		}
	}
	return 0;
}

/* Relay until upstream END or a signal. Returns 0 or a negative errno (printed). */
static int run(struct relay *r)
{
	int rc = 0;

	while (!stop && !r->ended && rc >= 0) {
		uint64_t now = ex_now_ns(CLOCK_MONOTONIC);
		struct pollfd pfd[3] = {
			{ .fd = r->sv.ctl, .events = POLLIN },
			{ .fd = md_lis_pollfd(&r->sv), .events = POLLIN },
			{ .fd = r->ufd, .events = r->connecting ? POLLOUT : POLLIN },
		};
		/* Something is always due soon: a JOIN retry or lease, a reconnect, or a
		 * stream's backlog to flush. */
		rc = upstream_tend(r, now);
		if (rc < 0)
			break;
		pfd[2].fd = r->ufd;
		pfd[2].events = r->connecting ? POLLOUT : POLLIN;
		if (poll(pfd, 3, TICK_NS / 1000000) < 0 && errno != EINTR) {
			rc = -errno;
			break;
		}
		now = ex_now_ns(CLOCK_MONOTONIC);
		rc = md_control_drain(&r->sv);
		if (rc < 0) {
			fprintf(stderr, "md-relay: control: %s\n", ms_strerror(rc));
			break;
		}
		if (r->sv.lis >= 0 && ms_group_backlog(r->sv.g) > 0)
			md_reap_removed(&r->sv, ms_group_flush(r->sv.g, r->sv.slow, r->sv.cap));
		if (r->ufd < 0 || !(pfd[2].revents & (POLLIN | POLLOUT | POLLERR | POLLHUP)))
			continue;
		if (r->connecting) {
			int err = 0;
			socklen_t len = sizeof(err);

			if (getsockopt(r->ufd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
				err = errno;
			if (err) {
				close(r->ufd); /* not up yet: tried again after RETRY_NS */
				r->ufd = -1;
				r->connecting = false;
				continue;
			}
			r->connecting = false;
			if (r->reconnects++ == 0)
				fprintf(stderr, "md-relay: upstream connected\n");
			else
				fprintf(stderr, "md-relay: upstream connected again\n");
			continue;
		}
		rc = r->tcp ? read_tcp(r) : read_udp(r, now);
	}
	if (rc < 0)
		fprintf(stderr, "md-relay: %s\n", ms_strerror(rc));
	if (r->ended) {
		int erc = send_end(r);

		if (erc < 0 && rc >= 0)
			rc = erc;
	}
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: md-relay --upstream HOST:PORT | --upstream-tcp HOST:PORT [options]\n"
		"  --upstream HOST:PORT\n"
		"                    subscribe by UDP at this md-publisher or md-relay control\n"
		"                    address\n"
		"  --upstream-tcp HOST:PORT\n"
		"                    subscribe by TCP at this server's --tcp port\n"
		"  --rejoin-idle MS  UDP upstream: re-send JOIN2 while no tick has come for MS\n"
		"                    ms (default 1000)\n"
		"  --control PORT    UDP control port for subscribers (default %d; 0 = any,\n"
		"                    printed)\n"
		"  --bind ADDR       address of the control socket (default 127.0.0.1)\n"
		"  --tcp PORT        also take TCP subscribers on this port of ADDR (0 = any,\n"
		"                    printed)\n"
		"  --dest HOST:PORT  also send every tick to this address, typically a multicast\n"
		"                    group (repeatable, up to %d)\n"
		"  --mcast-ttl N     IP_MULTICAST_TTL / IPV6_MULTICAST_HOPS of --dest\n"
		"  --mcast-loop 0|1  IP_MULTICAST_LOOP / IPV6_MULTICAST_LOOP of --dest\n"
		"  --mcast-if IF     IP_MULTICAST_IF / IPV6_MULTICAST_IF of --dest\n"
		"  --backend NAME    auto|loop|sendmmsg|io_uring|xdp (default auto)\n"
		"  --connected       one connected UDP socket per subscriber\n"
		"  --subscribers K   subscribe upstream only once K subscribers are in\n"
		"                    (default 0)\n"
		"  --join-timeout SEC\n"
		"                    how long to wait for them (default 10)\n"
		"  --lease MS        a UDP subscription ends unless renewed within MS ms\n"
		"                    (default %d)\n"
		"  --max-subscribers N\n"
		"                    at most N UDP subscribers in all (default %d)\n"
		"  --max-per-source N\n"
		"                    at most N UDP subscribers per source address (default %d)\n"
		"  --challenge-rate N\n"
		"                    at most N CHALLENGE2 answers per second to one address\n"
		"                    not yet proven (default %d)\n"
		"  --max-conns N     at most N TCP subscribers at once (default 1024, or what\n"
		"                    RLIMIT_NOFILE leaves)\n"
		"  --backlog-max BYTES\n"
		"                    at most this much queued for slow TCP subscribers in all\n"
		"                    (default 64M; K, M, G: powers of 1024)\n"
		"  --queue-limit BYTES\n"
		"                    at most this much queued for one (default 4M)\n"
		"  --stats-shm PATH  live counters for multisend-stat (see md-publisher)\n"
		"  --help\n",
		MD_PORT_DEFAULT, MD_MAX_FIXED, MD_LEASE_MS_DEFAULT, MD_MAX_SUBS_DEFAULT,
		MD_MAX_PER_SOURCE_DEFAULT, MD_REPLY_RATE_DEFAULT);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "upstream", required_argument, NULL, 'u' },
		{ "upstream-tcp", required_argument, NULL, 'U' },
		{ "rejoin-idle", required_argument, NULL, 'R' },
		MD_SERVE_LONGOPTS,
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *upstream = NULL;
	struct md_serve_opts so = MD_SERVE_OPTS_INIT;
	struct ms_config cfg = { .size = sizeof(cfg) };
	struct ms_stats st = { .size = sizeof(st) };
	struct relay r = { .sv = { .name = "md-relay", .ctl = -1, .data = -1, .lis = -1 },
			   .ufd = -1, .idle_ns = 1000000000u };
	struct ms_ctx *ctx = NULL;
	int c, rc;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'u': upstream = optarg; r.tcp = false; break;
		case 'U': upstream = optarg; r.tcp = true; break;
		case 'R': r.idle_ns = ex_num("rejoin-idle", optarg, 1, 86400000) * 1000000u; break;
		case 'h': usage(stdout); return 0;
		default:
			rc = md_serve_opt(c, optarg, &so, &r.sv, &cfg);
			if (rc <= 0) {
				if (!rc)
					usage(stderr);
				return 2;
			}
		}
	}
	if (optind < argc || !upstream) {
		if (!upstream)
			fprintf(stderr, "md-relay: --upstream or --upstream-tcp is required\n");
		usage(stderr);
		return 2;
	}
	if (ex_parse_addr(upstream, -1, AF_UNSPEC, &r.up, &r.uplen) < 0)
		return 2;

	/* No SA_RESTART: poll ends early and the loop sees `stop`. SIGTERM is how a service
	 * manager stops a relay: a clean exit with the summary, status 0. */
	struct sigaction sa = { .sa_handler = on_signal };

	if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0) {
		perror("md-relay: sigaction");
		return 1;
	}
	r.buf = malloc(MAX_MSG + 1);
	r.sbuf = malloc(2 * MAX_MSG);
	if (!r.buf || !r.sbuf) {
		perror("md-relay");
		free(r.buf);
		free(r.sbuf);
		return 1;
	}
	rc = ms_ctx_new(&ctx, &cfg);
	if (rc < 0) {
		fprintf(stderr, "md-relay: ms_ctx_new: %s\n", ms_strerror(rc));
		free(r.buf);
		free(r.sbuf);
		return 1;
	}
	rc = ms_group_new(ctx, &r.sv.g);
	if (rc < 0)
		fprintf(stderr, "md-relay: ms_group_new: %s\n", ms_strerror(rc));
	/* Subscribing upstream only once the subscribers are in lets a whole tree be built
	 * before the first tick, so that nobody misses the start of the feed. */
	if (rc >= 0)
		rc = md_serve_start(&r.sv, &so, &stop);
	if (rc >= 0 && !r.tcp)
		rc = upstream_open_udp(&r);

	uint64_t t0 = ex_now_ns(CLOCK_MONOTONIC);

	if (rc >= 0) {
		fprintf(stderr, "md-relay: relaying to %zu subscribers\n", r.sv.nsubs);
		rc = run(&r);
	}
	double secs = (double)(ex_now_ns(CLOCK_MONOTONIC) - t0) / 1e9;

	if (!r.tcp && r.ufd >= 0)
		upstream_leave(&r);
	if (ms_ctx_stats(ctx, &st) < 0) {
		st.dests_accepted = r.sv.accepted;
		st.dests_failed = r.sv.failures;
	}
	printf("md-relay: backend %s, subscribers %zu (joined %" PRIu64 ", left %" PRIu64
	       ", dropped %" PRIu64 "), ticks forwarded %" PRIu64 " (seq %" PRIu64 "..%" PRIu64
	       "), upstream gaps %" PRIu64 " (missing %" PRIu64 "), stale %" PRIu64
	       ", invalid %" PRIu64 ", rejoins %" PRIu64 ", reconnects %" PRIu64
	       ", end %s, destinations accepted %" PRIu64 ", failures %" PRIu64
	       ", elapsed %.3f s, implausible %" PRIu64 ", foreign %" PRIu64 ", %s\n",
	       ms_backend_name(ms_ctx_backend(ctx)), r.sv.nsubs, r.sv.joined, r.sv.left,
	       r.sv.dropped, r.forwarded, r.first, r.last, r.gaps, r.missing, r.stale,
	       r.invalid, r.rejoins, r.reconnects > 0 ? r.reconnects - 1 : 0,
	       r.ended ? "yes" : "no", st.dests_accepted, st.dests_failed, secs, r.implausible,
	       r.foreign, md_ctl_summary(&r.sv));
	md_report(&r.sv);

	md_close(&r.sv);
	ms_ctx_free(ctx);
	if (r.ufd >= 0)
		close(r.ufd);
	free(r.buf);
	free(r.sbuf);
	if (fflush(stdout) == EOF && rc == 0)
		rc = -errno;
	return rc < 0 ? 1 : 0;
}
