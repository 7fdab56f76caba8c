/* SPDX-License-Identifier: MIT */
/*
 * md-publisher: a market-data publisher that fans every tick out to its subscribers with one
 * libmultisend call.
 *
 * Subscribers register over a UDP control port (see md-proto.h). Each tick is one header
 * (struct md_tick) plus padding up to --size, gathered with ms_sendv so the padding is never
 * copied into the header's buffer. Between ticks the control socket is drained without
 * blocking, so subscribers can join and leave while the feed runs.
 *
 * With --stats-shm (or MULTISEND_STATS_SHM) the library publishes its counters, and with
 * --ts-sample its latency histograms, in a shared-memory file that `multisend-stat FILE`
 * shows live, attaching and detaching without disturbing the feed.
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

#define END_REPEATS 3
#define END_GAP_NS 10000000 /* 10 ms */
#define MAX_LOGGED_FAILURES 10

struct sub {
	struct sockaddr_storage addr;
	socklen_t addrlen;
	int fd; /* its own connected socket (--connected), else -1 */
	int id; /* destination id in the group, also the id the subscriber is told */
};

struct pub {
	int ctl;           /* control socket */
	int data;          /* the shared unconnected data socket, -1 with --connected */
	bool connected;
	struct ms_group *g;
	struct sub *subs;
	size_t nsubs, cap;
	struct ms_result *res; /* room for cap results */
	uint64_t joined, left, dropped;
	uint64_t failures;     /* per-destination failures seen in ms_result, all phases */
	uint64_t logged;
	uint64_t seq;          /* last tick sent */
	uint64_t accepted;     /* sum of ms_sendv's return values over the ticks */
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static bool addr_equal(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
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
static struct sub *find_addr(struct pub *p, const struct sockaddr_storage *a)
{
	for (size_t i = 0; i < p->nsubs; i++)
		if (addr_equal(&p->subs[i].addr, a))
			return &p->subs[i];
	return NULL;
}

static struct sub *find_id(struct pub *p, int id)
{
	for (size_t i = 0; i < p->nsubs; i++)
		if (p->subs[i].id == id)
			return &p->subs[i];
	return NULL;
}

static void reply(struct pub *p, const struct sockaddr_storage *to, socklen_t tolen,
		  const char *msg)
{
	/* A lost reply is like any lost UDP datagram: the subscriber retries its JOIN. So a
	 * failure here is reported and not fatal, and the publisher never blocks on it. */
	if (sendto(p->ctl, msg, strlen(msg), MSG_DONTWAIT, (const struct sockaddr *)to, tolen) < 0)
		fprintf(stderr, "md-publisher: control reply: %s\n", strerror(errno));
}

static int remove_sub(struct pub *p, struct sub *s)
{
	int rc = ms_group_remove(p->g, s->id);

	if (rc < 0) {
		fprintf(stderr, "md-publisher: ms_group_remove(%d): %s\n", s->id, ms_strerror(rc));
		return rc;
	}
	/* Only now that the group no longer holds it may the socket be closed (multisend.h). */
	if (s->fd >= 0 && close(s->fd) < 0)
		fprintf(stderr, "md-publisher: close: %s\n", strerror(errno));
	*s = p->subs[--p->nsubs];
	return 0;
}

static int join(struct pub *p, const struct sockaddr_storage *from, socklen_t fromlen)
{
	struct sub *s = find_addr(p, from);
	char msg[32];
	int rc;

	if (s) { /* a retried JOIN whose ACK was lost */
		snprintf(msg, sizeof(msg), "ACK %d", s->id);
		reply(p, from, fromlen, msg);
		return 0;
	}
	if (p->nsubs == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 16;
		struct sub *ns = realloc(p->subs, cap * sizeof(*ns));

		if (!ns)
			return -ENOMEM;
		p->subs = ns;
		struct ms_result *nr = realloc(p->res, cap * sizeof(*nr));

		if (!nr)
			return -ENOMEM;
		p->res = nr;
		p->cap = cap;
	}
	s = &p->subs[p->nsubs];
	*s = (struct sub){ .addrlen = fromlen, .fd = -1 };
	memcpy(&s->addr, from, fromlen);

	struct ms_dest d = { .fd = p->data, .addr = (const struct sockaddr *)&s->addr,
			     .addrlen = fromlen };

	if (p->connected) {
		/* One socket per subscriber: the kernel caches the route, so each send skips
		 * the lookup an unconnected sendto pays, and ICMP errors come back per peer. */
		s->fd = socket(from->ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (s->fd < 0)
			return -errno;
		if (connect(s->fd, (const struct sockaddr *)from, fromlen) < 0) {
			rc = -errno;
			close(s->fd);
			return rc;
		}
		d = (struct ms_dest){ .fd = s->fd };
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
	snprintf(msg, sizeof(msg), "ACK %d", s->id);
	reply(p, from, fromlen, msg);
	return 0;
}

/* Handle every pending control datagram. A non-blocking recvfrom that finds nothing is one
 * system call, the same as poll with a zero timeout, and saves the recvfrom poll would need
 * after it. Returns 0 or a negative errno that should stop the publisher. */
static int control_drain(struct pub *p)
{
	for (;;) {
		char buf[64];
		struct sockaddr_storage from;
		socklen_t fromlen = sizeof(from);
		ssize_t n = recvfrom(p->ctl, buf, sizeof(buf) - 1, MSG_DONTWAIT,
				     (struct sockaddr *)&from, &fromlen);

		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			if (errno == EINTR)
				continue;
			return -errno;
		}
		while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
			n--; /* so that `echo JOIN | nc -u` works too */
		buf[n] = '\0';

		if (!strcmp(buf, "JOIN")) {
			int rc = join(p, &from, fromlen);

			if (rc < 0) {
				char msg[96];

				fprintf(stderr, "md-publisher: JOIN refused: %s\n",
					ms_strerror(rc));
				snprintf(msg, sizeof(msg), "ERR %s", ms_strerror(rc));
				reply(p, &from, fromlen, msg);
			}
		} else if (!strcmp(buf, "LEAVE")) {
			struct sub *s = find_addr(p, &from);

			if (s) {
				int rc = remove_sub(p, s);

				if (rc < 0)
					return rc;
				p->left++;
			}
			reply(p, &from, fromlen, "BYE");
		} else {
			reply(p, &from, fromlen, "ERR unknown command");
		}
	}
}

/* Account for the destinations of the last send that did not take the whole message. A
 * connected UDP socket whose peer is gone reports ECONNREFUSED on every later send, so that
 * subscriber is dropped, as a LEAVE would have done. */
static int check_results(struct pub *p, size_t n, size_t len, const char *what)
{
	int gone[64]; /* more in one call are dropped on a later call */
	size_t ngone = 0;

	for (size_t i = 0; i < n; i++) {
		int st = p->res[i].status;

		if (st >= 0 && (size_t)st == len)
			continue;
		p->failures++;
		if (p->logged++ < MAX_LOGGED_FAILURES)
			fprintf(stderr, "md-publisher: %s to destination %d: %s\n", what,
				p->res[i].id, st < 0 ? ms_strerror(st) : "partial send");
		if (st == -ECONNREFUSED && ngone < sizeof(gone) / sizeof(gone[0]))
			gone[ngone++] = p->res[i].id;
	}
	/* Removal reorders the group, so it waits until res has been read. */
	for (size_t i = 0; i < ngone; i++) {
		struct sub *s = find_id(p, gone[i]);
		int rc;

		if (!s)
			continue;
		rc = remove_sub(p, s);
		if (rc < 0)
			return rc;
		fprintf(stderr, "md-publisher: destination %d refuses datagrams: dropped it\n",
			gone[i]);
		p->dropped++;
	}
	return 0;
}

static int wait_for_subscribers(struct pub *p, size_t want, unsigned timeout_s)
{
	uint64_t deadline = ex_now_ns(CLOCK_MONOTONIC) + (uint64_t)timeout_s * 1000000000u;

	while (p->nsubs < want && !stop) {
		uint64_t now = ex_now_ns(CLOCK_MONOTONIC);
		struct pollfd pfd = { .fd = p->ctl, .events = POLLIN };
		int rc;

		if (now >= deadline) {
			fprintf(stderr, "md-publisher: %zu of %zu subscribers joined within %u s\n",
				p->nsubs, want, timeout_s);
			return -ETIMEDOUT;
		}
		rc = poll(&pfd, 1, (int)((deadline - now + 999999) / 1000000));
		if (rc < 0 && errno != EINTR)
			rc = -errno;
		else
			rc = control_drain(p);
		if (rc < 0) {
			fprintf(stderr, "md-publisher: control: %s\n", ms_strerror(rc));
			return rc;
		}
	}
	return 0;
}

static void sleep_until(uint64_t t_ns)
{
	struct timespec ts = { .tv_sec = (time_t)(t_ns / 1000000000u),
			       .tv_nsec = (long)(t_ns % 1000000000u) };

	/* Absolute deadlines keep the schedule from drifting by each tick's own cost. Returns
	 * early on a signal, and the caller checks `stop`. */
	(void)clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

/* The feed: count ticks at rate per second to whoever is subscribed at the time. Returns 0,
 * or a negative errno after printing it. */
static int publish(struct pub *p, uint64_t count, uint64_t rate, size_t size)
{
	/* The padding never changes: one zeroed buffer, gathered behind every header. */
	uint8_t *pad = calloc(1, size - sizeof(struct md_tick) + 1);
	int64_t price[8];
	uint64_t t0 = ex_now_ns(CLOCK_MONOTONIC);
	int rc = 0;

	if (!pad)
		return -ENOMEM;
	for (size_t i = 0; i < 8; i++)
		price[i] = 1000000 + (int64_t)i * 250000;

	while (p->seq < count && !stop) {
		struct md_tick t;
		struct iovec iov[2] = {
			{ .iov_base = &t, .iov_len = sizeof(t) },
			{ .iov_base = pad, .iov_len = size - sizeof(t) },
		};
		uint64_t seq = p->seq;
		uint32_t sym;

		rc = control_drain(p);
		if (rc < 0) {
			fprintf(stderr, "md-publisher: control: %s\n", ms_strerror(rc));
			break;
		}
		if (rate) {
			/* Tick seq+1 is due at t0 + seq/rate s: computed exactly, so no rounding
			 * error builds up, and without overflow. */
			sleep_until(t0 + seq / rate * 1000000000u +
				    seq % rate * 1000000000u / rate);
			if (stop)
				break;
		}
		p->seq = ++seq;
		sym = (uint32_t)seq * 2654435761u >> 29; /* 0..7, scattered (Fibonacci hashing) */
		price[sym] += (int64_t)(seq % 7) - 3;
		t = (struct md_tick){
			.magic = htole32(MD_MAGIC_TICK),
			.size = htole32((uint32_t)size),
			.seq = htole64(seq),
			.ts_ns = htole64(ex_now_ns(CLOCK_REALTIME)),
			.price = (int64_t)htole64((uint64_t)price[sym]),
			.symbol = htole32(sym),
			.qty = htole32((uint32_t)(100 * (1 + seq % 10))),
		};

		size_t n = ms_group_size(p->g); /* the entries ms_sendv fills in p->res */

		rc = ms_sendv(p->g, iov, iov[1].iov_len ? 2 : 1, 0, p->res);
		if (rc < 0) {
			fprintf(stderr, "md-publisher: ms_sendv: %s\n", ms_strerror(rc));
			/* Not a bad argument, so the backend itself failed and every result
			 * carries its error. Stop: the next tick would fail the same way. */
			if (rc != -EINVAL)
				(void)check_results(p, n, size, "tick");
			break;
		}
		p->accepted += (uint64_t)rc;
		if ((size_t)rc != n) {
			rc = check_results(p, n, size, "tick");
			if (rc < 0)
				break;
		}
		rc = 0;
	}
	free(pad);
	return rc;
}

/* END, a few times: UDP may drop one, and a subscriber stops at the first. It carries the
 * last sequence number actually sent, also after an early stop, so that subscribers can tell
 * a short feed from lost ticks. Failures here are counted but expected: subscribers leave as
 * soon as they see END. */
static int send_end(struct pub *p)
{
	struct md_tick end = {
		.magic = htole32(MD_MAGIC_END),
		.size = htole32(sizeof(end)),
		.seq = htole64(p->seq),
		.ts_ns = htole64(ex_now_ns(CLOCK_REALTIME)),
	};

	for (int i = 0; i < END_REPEATS; i++) {
		int rc = control_drain(p);
		size_t n = ms_group_size(p->g);

		if (rc >= 0)
			rc = ms_send(p->g, &end, sizeof(end), 0, p->res);
		if (rc >= 0 && (size_t)rc != n)
			rc = check_results(p, n, sizeof(end), "END");
		if (rc < 0) {
			fprintf(stderr, "md-publisher: sending END: %s\n", ms_strerror(rc));
			return rc;
		}
		if (i + 1 < END_REPEATS)
			sleep_until(ex_now_ns(CLOCK_MONOTONIC) + END_GAP_NS);
	}
	return 0;
}

/* The feed, END and the summary line. Returns 0 or the first negative errno. */
static int run(struct pub *p, struct ms_ctx *ctx, uint64_t count, uint64_t rate, size_t size)
{
	struct ms_stats st = { .size = sizeof(st) };
	uint64_t t0 = ex_now_ns(CLOCK_MONOTONIC);
	int rc;

	/* Scripts wait for this line before starting late joiners. */
	fprintf(stderr, "md-publisher: publishing to %zu subscribers\n", p->nsubs);
	rc = publish(p, count, rate, size);
	double secs = (double)(ex_now_ns(CLOCK_MONOTONIC) - t0) / 1e9;
	/* Counters as of the last tick: END's sends, made while subscribers leave, are not
	 * part of the feed. */
	int src = ms_ctx_stats(ctx, &st);
	size_t nsubs = p->nsubs;

	if (src < 0) {
		fprintf(stderr, "md-publisher: ms_ctx_stats: %s\n", ms_strerror(src));
		rc = rc ? rc : src;
		st.dests_accepted = p->accepted;
		st.dests_failed = p->failures;
	} else if (st.dests_accepted != p->accepted || st.dests_failed != p->failures) {
		/* ms_sendv's return values and results are the contract; the counters must
		 * agree with them, or one of the two is wrong. */
		fprintf(stderr, "md-publisher: stats disagree with results: accepted %" PRIu64
			" vs %" PRIu64 ", failed %" PRIu64 " vs %" PRIu64 "\n", st.dests_accepted,
			p->accepted, st.dests_failed, p->failures);
		rc = rc ? rc : -EPROTO;
	}

	int erc = send_end(p);

	printf("md-publisher: backend %s, subscribers %zu (joined %" PRIu64 ", left %" PRIu64
	       ", dropped %" PRIu64 "), ticks %" PRIu64 ", destinations accepted %" PRIu64
	       ", failures %" PRIu64 ", elapsed %.3f s, rate %.0f ticks/s\n",
	       ms_backend_name(ms_ctx_backend(ctx)), nsubs, p->joined, p->left, p->dropped,
	       p->seq, st.dests_accepted, st.dests_failed, secs,
	       secs > 0 ? (double)p->seq / secs : 0.0);
	if (stop)
		fprintf(stderr, "md-publisher: interrupted after %" PRIu64 " ticks\n", p->seq);
	return rc ? rc : erc;
}

/* Control socket on addr (port 0: any, printed for scripts), plus, without --connected, the
 * one socket all ticks leave from. */
static int open_sockets(struct pub *p, const char *addr, unsigned port)
{
	struct sockaddr_storage local;
	socklen_t len;

	if (ex_parse_addr(addr, (int)port, AF_UNSPEC, &local, &len) < 0)
		return -EINVAL;
	p->ctl = socket(local.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (p->ctl < 0 || bind(p->ctl, (struct sockaddr *)&local, len) < 0 ||
	    getsockname(p->ctl, (struct sockaddr *)&local, &len) < 0) {
		int rc = -errno;

		fprintf(stderr, "md-publisher: control socket on %s port %u: %s\n", addr, port,
			strerror(-rc));
		return rc;
	}
	/* Ticks leave from their own socket, so a JOIN retry or a reply never queues behind
	 * the feed. Same family as the control socket: it can reach every address a JOIN can
	 * come from. */
	if (!p->connected) {
		p->data = socket(local.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (p->data < 0) {
			int rc = -errno;

			perror("md-publisher: data socket");
			return rc;
		}
	}
	printf("control port %u\n", ex_port(&local));
	return fflush(stdout) == EOF ? -errno : 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: md-publisher [options]\n"
		"  --control PORT      UDP control port (default %d; 0 = any, printed)\n"
		"  --bind ADDR         address of the control socket (default 127.0.0.1)\n"
		"  --backend NAME      auto|loop|sendmmsg|io_uring|xdp (default auto)\n"
		"  --xdp-iface IF      kernel bypass: the interface whose transmit queue the xdp\n"
		"                      backend takes (default: the MULTISEND_XDP_IFACE variable);\n"
		"                      with --backend auto, xdp is measured beside the others\n"
		"  --connected         one connected UDP socket per subscriber\n"
		"  --subscribers K     wait for K subscribers before publishing (default 0)\n"
		"  --join-timeout SEC  how long to wait for them (default 10)\n"
		"  --count N           ticks to publish (default 10000)\n"
		"  --rate R            ticks per second, 0 = as fast as possible (default 10000)\n"
		"  --size BYTES        datagram size, >= %zu (default 64)\n"
		"  --stats-shm PATH    publish live counters in PATH, a shared-memory file (put it\n"
		"                      in /dev/shm; %%p is replaced by the process id) that\n"
		"                      multisend-stat shows while the feed runs (default: the\n"
		"                      MULTISEND_STATS_SHM variable, or nowhere)\n"
		"  --ts-sample K       kernel transmit timestamps on one tick in K (0 = off,\n"
		"                      default): fills the live histograms (Linux 6.13 or later)\n"
		"  --help\n",
		MD_PORT_DEFAULT, sizeof(struct md_tick));
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "control", required_argument, NULL, 'c' },
		{ "bind", required_argument, NULL, 'b' },
		{ "backend", required_argument, NULL, 'B' },
		{ "xdp-iface", required_argument, NULL, 'X' },
		{ "connected", no_argument, NULL, 'C' },
		{ "subscribers", required_argument, NULL, 'k' },
		{ "join-timeout", required_argument, NULL, 'j' },
		{ "count", required_argument, NULL, 'n' },
		{ "rate", required_argument, NULL, 'r' },
		{ "size", required_argument, NULL, 's' },
		{ "stats-shm", required_argument, NULL, 'S' },
		{ "ts-sample", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *bind_addr = "127.0.0.1";
	unsigned port = MD_PORT_DEFAULT, join_timeout = 10;
	uint64_t count = 10000, rate = 10000;
	size_t want = 0, size = 64;
	struct ms_config cfg = { .size = sizeof(cfg) };
	struct pub p = { .ctl = -1, .data = -1 };
	struct ms_ctx *ctx = NULL;
	int c, rc;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': port = (unsigned)ex_num("control", optarg, 0, 65535); break;
		case 'b': bind_addr = optarg; break;
		case 'B': {
			int b = ms_backend_from_name(optarg);
			if (b < 0) {
				fprintf(stderr, "--backend: unknown backend '%s'\n", optarg);
				return 2;
			}
			cfg.backend = (uint32_t)b;
			break;
		}
		case 'X': cfg.xdp_ifname = optarg; break;
		case 'C': p.connected = true; break;
		case 'k': want = ex_num("subscribers", optarg, 0, INT32_MAX); break;
		case 'j': join_timeout = (unsigned)ex_num("join-timeout", optarg, 0, 86400); break;
		case 'n': count = ex_num("count", optarg, 0, UINT64_MAX / 2); break;
		case 'r': rate = ex_num("rate", optarg, 0, 1000000000); break;
		case 's': size = ex_num("size", optarg, sizeof(struct md_tick), 65507); break;
		/* The library expands %p and creates the file; without the option it reads
		 * MULTISEND_STATS_SHM itself. */
		case 'S': cfg.stats_shm = optarg; break;
		case 'T': cfg.ts_sample = (uint32_t)ex_num("ts-sample", optarg, 0, 1000000000); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}

	struct sigaction sa = { .sa_handler = on_signal }; /* no SA_RESTART: sleeps end early */

	if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0) {
		perror("md-publisher: sigaction");
		return 1;
	}
	rc = ms_ctx_new(&ctx, &cfg);
	if (rc < 0) {
		fprintf(stderr, "md-publisher: ms_ctx_new: %s\n", ms_strerror(rc));
		return 1;
	}
	rc = ms_group_new(ctx, &p.g);
	if (rc < 0)
		fprintf(stderr, "md-publisher: ms_group_new: %s\n", ms_strerror(rc));
	if (rc >= 0)
		rc = open_sockets(&p, bind_addr, port);
	if (rc >= 0)
		rc = wait_for_subscribers(&p, want, join_timeout);
	if (rc >= 0)
		rc = run(&p, ctx, count, rate, size);

	while (p.nsubs > 0)
		if (remove_sub(&p, &p.subs[0]) < 0)
			break;
	ms_group_free(p.g);
	ms_ctx_free(ctx);
	free(p.subs);
	free(p.res);
	if (p.data >= 0)
		close(p.data);
	if (p.ctl >= 0)
		close(p.ctl);
	if (fflush(stdout) == EOF && rc == 0)
		rc = -errno;
	return rc < 0 || stop ? 1 : 0;
}
