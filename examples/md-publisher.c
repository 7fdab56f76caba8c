/* SPDX-License-Identifier: MIT */
/*
 * md-publisher: a market-data publisher that fans every tick out to its subscribers with one
 * libmultisend call.
 *
 * Subscribers register over a UDP control port (see md-proto.h): a JOIN2 that echoes the
 * cookie of a CHALLENGE2, then renewed within each lease. Each tick is one header
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
#include "md-serve.h"

#define END_REPEATS 3
#define END_GAP_NS 10000000 /* 10 ms */

struct pub {
	struct md_serve sv;
	uint64_t seq;    /* last tick sent */
	size_t want;     /* --subscribers: waited for before the feed */
	uint64_t behind; /* one-second windows in which fewer than 95% of --rate went out */
};

#define BEHIND_WARN_NS 10000000000u /* at most one "behind" line per 10 s */

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
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
	/* The achieved rate, checked once a second against --rate (win_*: the window's start). */
	uint64_t win_t = t0, win_seq = p->seq, warned = 0, behind_since_warn = 0;
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

		rc = md_control_drain(&p->sv);
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
			uint64_t now = ex_now_ns(CLOCK_MONOTONIC);

			if (now - win_t >= 1000000000u) {
				double got = (double)(seq - win_seq) * 1e9 / (double)(now - win_t);

				/* Said while it happens (a summary at the end is too late for an
				 * operator), at most once per 10 s; every window is counted. */
				if (got < 0.95 * (double)rate) {
					p->behind++;
					behind_since_warn++;
					if (!warned || now - warned >= BEHIND_WARN_NS) {
						fprintf(stderr,
							"md-publisher: behind --rate %" PRIu64
							": %.0f ticks/s in the last %.1f s (%" PRIu64
							" second%s behind since the last warning)\n",
							rate, got, (double)(now - win_t) / 1e9,
							behind_since_warn,
							behind_since_warn == 1 ? "" : "s");
						warned = now;
						behind_since_warn = 0;
					}
				}
				win_t = now;
				win_seq = seq;
			}
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

		rc = md_fanout(&p->sv, iov, iov[1].iov_len ? 2 : 1, size, "tick");
		if (rc < 0)
			break;
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
		struct iovec iov = { .iov_base = &end, .iov_len = sizeof(end) };
		int rc = md_control_drain(&p->sv);

		if (rc >= 0)
			rc = md_fanout(&p->sv, &iov, 1, sizeof(end), "END");
		if (rc < 0) {
			fprintf(stderr, "md-publisher: sending END: %s\n", ms_strerror(rc));
			return rc;
		}
		if (i == 0)
			md_end_streams(&p->sv);
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

	/* Scripts wait for this line before starting late joiners. A subscriber is one
	 * subscription: a joined UDP socket or a TCP connection (md-subscriber --sockets K
	 * makes K). */
	fprintf(stderr, "md-publisher: publishing to %zu subscribers (joined sockets and TCP "
		"connections; --subscribers %zu waited for) and %zu fixed destinations\n",
		p->sv.nsubs, p->want, p->sv.nfixed);
	rc = publish(p, count, rate, size);
	double secs = (double)(ex_now_ns(CLOCK_MONOTONIC) - t0) / 1e9;
	/* Counters as of the last tick: END's sends, made while subscribers leave, are not
	 * part of the feed. */
	int src = ms_ctx_stats(ctx, &st);
	size_t nsubs = p->sv.nsubs;
	uint64_t accepted = p->sv.accepted, failures = p->sv.failures;

	if (src < 0) {
		fprintf(stderr, "md-publisher: ms_ctx_stats: %s\n", ms_strerror(src));
		rc = rc ? rc : src;
		st.dests_accepted = accepted;
		st.dests_failed = failures;
	} else if (st.dests_accepted != accepted || st.dests_failed != failures) {
		/* ms_sendv's return values and results are the contract; the counters must
		 * agree with them, or one of the two is wrong. */
		fprintf(stderr, "md-publisher: stats disagree with results: accepted %" PRIu64
			" vs %" PRIu64 ", failed %" PRIu64 " vs %" PRIu64 "\n", st.dests_accepted,
			accepted, st.dests_failed, failures);
		rc = rc ? rc : -EPROTO;
	}

	int erc = send_end(p);
	char behind[80] = "";

	if (rate)
		snprintf(behind, sizeof(behind), " (behind --rate in %" PRIu64 " one-second windows)",
			 p->behind);

	printf("md-publisher: backend %s, subscribers %zu (joined %" PRIu64 ", left %" PRIu64
	       ", dropped %" PRIu64 "), ticks %" PRIu64 ", destinations accepted %" PRIu64
	       ", failures %" PRIu64 ", elapsed %.3f s, rate %.0f ticks/s%s, %s\n",
	       ms_backend_name(ms_ctx_backend(ctx)), nsubs, p->sv.joined, p->sv.left,
	       p->sv.dropped,
	       p->seq, st.dests_accepted, st.dests_failed, secs,
	       secs > 0 ? (double)p->seq / secs : 0.0,
	       behind, md_ctl_summary(&p->sv));
	md_report(&p->sv);
	if (stop)
		fprintf(stderr, "md-publisher: interrupted after %" PRIu64 " ticks\n", p->seq);
	return rc ? rc : erc;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: md-publisher [options]\n"
		"  --control PORT      UDP control port (default %d; 0 = any, printed)\n"
		"  --bind ADDR         address of the control socket (default 127.0.0.1)\n"
		"  --tcp PORT          also take TCP subscribers on this port of ADDR (0 = any,\n"
		"                      printed): ticks framed by their size field on the stream\n"
		"  --dest HOST:PORT    also send every tick to this address, typically a multicast\n"
		"                      group (repeatable, up to %d)\n"
		"  --mcast-ttl N       IP_MULTICAST_TTL / IPV6_MULTICAST_HOPS of --dest's sockets\n"
		"  --mcast-loop 0|1    IP_MULTICAST_LOOP / IPV6_MULTICAST_LOOP of --dest's sockets\n"
		"  --mcast-if IF       IP_MULTICAST_IF / IPV6_MULTICAST_IF of --dest's sockets\n"
		"  --backend NAME      auto|loop|sendmmsg|io_uring|xdp (default auto)\n"
		"  --xdp-iface IF      kernel bypass: the interface whose transmit queue the xdp\n"
		"                      backend takes (default: the MULTISEND_XDP_IFACE variable);\n"
		"                      with --backend auto, xdp is measured beside the others\n"
		"  --connected         one connected UDP socket per subscriber\n"
		"  --subscribers K     wait for K subscribers before publishing (default 0)\n"
		"  --join-timeout SEC  how long to wait for them (default 10)\n"
		"  --lease MS          a UDP subscription ends unless renewed within MS ms\n"
		"                      (default %d)\n"
		"  --max-subscribers N at most N UDP subscribers in all (default %d)\n"
		"  --max-per-source N  at most N UDP subscribers per source address (default %d)\n"
		"  --challenge-rate N  at most N CHALLENGE2 answers per second to one address not\n"
		"                      yet proven (default %d)\n"
		"  --max-conns N       at most N TCP subscribers at once (default 1024, or what\n"
		"                      RLIMIT_NOFILE leaves)\n"
		"  --backlog-max BYTES at most this much queued for slow TCP subscribers in all\n"
		"                      (default 64M; K, M, G: powers of 1024)\n"
		"  --queue-limit BYTES at most this much queued for one (default 4M)\n"
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
		MD_PORT_DEFAULT, MD_MAX_FIXED, MD_LEASE_MS_DEFAULT, MD_MAX_SUBS_DEFAULT,
		MD_MAX_PER_SOURCE_DEFAULT, MD_REPLY_RATE_DEFAULT, sizeof(struct md_tick));
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		MD_SERVE_LONGOPTS,
		{ "xdp-iface", required_argument, NULL, 'X' },
		{ "count", required_argument, NULL, 'n' },
		{ "rate", required_argument, NULL, 'r' },
		{ "size", required_argument, NULL, 's' },
		{ "ts-sample", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct md_serve_opts so = MD_SERVE_OPTS_INIT;
	uint64_t count = 10000, rate = 10000;
	size_t size = 64;
	struct ms_config cfg = { .size = sizeof(cfg) };
	struct pub p = { .sv = { .name = "md-publisher", .ctl = -1, .data = -1, .lis = -1 } };
	struct ms_ctx *ctx = NULL;
	int c, rc;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'X': cfg.xdp_ifname = optarg; break;
		case 'n': count = ex_num("count", optarg, 0, UINT64_MAX / 2); break;
		case 'r': rate = ex_num("rate", optarg, 0, 1000000000); break;
		case 's': size = ex_num("size", optarg, sizeof(struct md_tick), 65507); break;
		case 'T': cfg.ts_sample = (uint32_t)ex_num("ts-sample", optarg, 0, 1000000000); break;
		case 'h': usage(stdout); return 0;
		default:
			rc = md_serve_opt(c, optarg, &so, &p.sv, &cfg);
			if (rc <= 0) {
				if (!rc)
					usage(stderr);
				return 2;
			}
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
	rc = ms_group_new(ctx, &p.sv.g);
	if (rc < 0)
		fprintf(stderr, "md-publisher: ms_group_new: %s\n", ms_strerror(rc));
	p.want = so.want;
	if (rc >= 0)
		rc = md_serve_start(&p.sv, &so, &stop);
	if (rc >= 0)
		rc = run(&p, ctx, count, rate, size);

	md_close(&p.sv);
	ms_ctx_free(ctx);
	if (fflush(stdout) == EOF && rc == 0)
		rc = -errno;
	return rc < 0 || stop ? 1 : 0;
}
