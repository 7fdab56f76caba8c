/* SPDX-License-Identifier: MIT */
/*
 * md-subscriber: joins an md-publisher feed and checks it: every tick valid, none missing,
 * none twice, and whether any came out of order. It does not use libmultisend; it is what sits
 * at the other end of the fan-out.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
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
	if (s == 0 || s > f->high + MAX_JUMP) {
		f->invalid++;
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

/* LEAVE, retried until the publisher says BYE or budget_ns passes. The publisher removes us
 * before it answers, so after BYE no tick can reach a closed port: on its connected sockets
 * that would come back as ECONNREFUSED, a failure it must count. Ticks still queued to us are
 * discarded: we stopped counting when we decided to leave. */
static void leave(int fd, const struct sockaddr_storage *ctl, socklen_t ctllen,
		  uint64_t budget_ns)
{
	uint64_t now = ex_now_ns(CLOCK_MONOTONIC), end = now + budget_ns, next = now;

	for (; now < end; now = ex_now_ns(CLOCK_MONOTONIC)) {
		if (now >= next) {
			if (sendto(fd, "LEAVE", 5, 0, (const struct sockaddr *)ctl, ctllen) < 0) {
				perror("md-subscriber: sending LEAVE");
				return;
			}
			next = now + RETRY_NS;
		}

		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		uint64_t wake = next < end ? next : end;

		if (poll(&pfd, 1, (int)((wake - now + 999999) / 1000000)) < 0 && errno != EINTR) {
			perror("md-subscriber: poll");
			return;
		}
		for (;;) {
			char b[16];
			struct sockaddr_storage from;
			socklen_t fromlen = sizeof(from);
			ssize_t n = recvfrom(fd, b, sizeof(b), MSG_DONTWAIT,
					     (struct sockaddr *)&from, &fromlen);

			if (n < 0)
				break;
			if (n == 3 && !memcmp(b, "BYE", 3) && same_addr(&from, ctl))
				return;
		}
	}
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: md-subscriber [options]\n"
		"  --control HOST:PORT  publisher's control address (default 127.0.0.1:%d)\n"
		"  --timeout SEC        fail if no END arrives within SEC (default 30)\n"
		"  --expect N           fail unless ticks 1..N all arrive, once each\n"
		"  --leave-after N      leave (LEAVE, wait for BYE) after N ticks, without END\n"
		"  --help\n"
		"Without --expect, ticks before the first one received are not counted as missing\n"
		"(a late join).\n",
		MD_PORT_DEFAULT);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "control", required_argument, NULL, 'c' },
		{ "timeout", required_argument, NULL, 't' },
		{ "expect", required_argument, NULL, 'e' },
		{ "leave-after", required_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	static uint8_t buf[65536];
	const char *control = "127.0.0.1:5000";
	uint64_t timeout_s = 30, expect = 0, leave_after = 0, end_seq = 0;
	bool have_expect = false, acked = false, ended = false, done = false;
	struct sockaddr_storage ctl, local = { 0 };
	socklen_t ctllen;
	struct feed f = { 0 };
	int c, fd, id = -1, status = 0;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': control = optarg; break;
		case 't': timeout_s = ex_num("timeout", optarg, 0, 86400); break;
		case 'e':
			expect = ex_num("expect", optarg, 0, UINT64_MAX / 2);
			have_expect = true;
			break;
		case 'l': leave_after = ex_num("leave-after", optarg, 1, UINT64_MAX / 2); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	if (ex_parse_addr(control, MD_PORT_DEFAULT, AF_UNSPEC, &ctl, &ctllen) < 0)
		return 2;

	/* Any port (the publisher learns it from the JOIN's source address): on loopback when
	 * the publisher is on this host's loopback, else on every address, so that a publisher
	 * on another host (or namespace) reaches the address the JOIN left from. */
	local.ss_family = ctl.ss_family;
	if (ctl.ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)&ctl)->sin6_addr;
		((struct sockaddr_in6 *)&local)->sin6_addr =
			IN6_IS_ADDR_LOOPBACK(a) ? in6addr_loopback : in6addr_any;
	} else {
		const uint32_t a = ntohl(((const struct sockaddr_in *)&ctl)->sin_addr.s_addr);
		((struct sockaddr_in *)&local)->sin_addr.s_addr =
			htonl((a >> 24) == 127 ? INADDR_LOOPBACK : INADDR_ANY);
	}

	/* Ticks keep coming while this process is not running; the default receive buffer
	 * holds only a few hundred of them. */
	fd = socket(ctl.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || ex_set_rcvbuf(fd, 8 << 20) < 0 ||
	    bind(fd, (struct sockaddr *)&local, ctllen) < 0) {
		perror("md-subscriber: socket");
		return 1;
	}

	uint64_t now = ex_now_ns(CLOCK_MONOTONIC), next_join = now;
	uint64_t deadline = now + timeout_s * 1000000000u;

	while (!done && status == 0) {
		now = ex_now_ns(CLOCK_MONOTONIC);
		if (now >= deadline)
			break;
		if (!acked && now >= next_join) {
			/* The JOIN or its ACK may be lost, or the publisher may not be up yet;
			 * the publisher answers a repeated JOIN with the same ACK. */
			if (sendto(fd, "JOIN", 4, 0, (struct sockaddr *)&ctl, ctllen) < 0) {
				perror("md-subscriber: sending JOIN");
				status = 1;
				break;
			}
			next_join = now + RETRY_NS;
		}

		uint64_t wake = acked || deadline < next_join ? deadline : next_join;
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int rc = poll(&pfd, 1, (int)((wake - now + 999999) / 1000000));

		if (rc < 0 && errno != EINTR) {
			perror("md-subscriber: poll");
			status = 1;
			break;
		}
		/* Drain everything queued before looking at the clock again. */
		while (rc > 0 && !done && status == 0) {
			struct sockaddr_storage from;
			socklen_t fromlen = sizeof(from);
			ssize_t n = recvfrom(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC,
					     (struct sockaddr *)&from, &fromlen);
			struct md_tick t;
			uint32_t magic;

			if (n < 0) {
				if (errno == EAGAIN || errno == EINTR)
					break;
				perror("md-subscriber: recvfrom");
				status = 1;
				break;
			}
			if (same_addr(&from, &ctl) && (size_t)n < sizeof(buf)) {
				buf[n] = '\0';
				if (sscanf((char *)buf, "ACK %d", &id) == 1) {
					acked = true;
				} else if (!strncmp((char *)buf, "ERR", 3)) {
					fprintf(stderr, "md-subscriber: refused: %s\n", buf);
					status = 1;
				}
				continue;
			}
			/* MSG_TRUNC made n the datagram's real length, so a truncated one fails
			 * the size check rather than passing as a shorter tick. */
			if ((size_t)n < sizeof(t) || (size_t)n > sizeof(buf)) {
				f.invalid++;
				continue;
			}
			memcpy(&t, buf, sizeof(t));
			magic = le32toh(t.magic);
			if (le32toh(t.size) != (uint64_t)n ||
			    (magic != MD_MAGIC_TICK && magic != MD_MAGIC_END)) {
				f.invalid++;
				continue;
			}
			if (magic == MD_MAGIC_END) {
				end_seq = le64toh(t.seq);
				ended = done = true;
				continue;
			}
			uint64_t seq = le64toh(t.seq);

			if (!have_expect && f.received == 0 && seq > 0)
				f.base = f.high = seq - 1; /* joined late: earlier ticks not owed */
			if (on_tick(&f, seq) < 0) {
				fprintf(stderr, "md-subscriber: out of memory\n");
				status = 1;
			}
			if (leave_after && f.received >= leave_after)
				done = true;
		}
	}
	/* Without a LEAVE, a publisher on connected sockets would learn we are gone only from
	 * the ICMP errors of its next sends. After END it may have exited already, so the wait
	 * for its BYE is short. */
	if (acked)
		leave(fd, &ctl, ctllen, ended ? 300000000u : 2000000000u);
	close(fd);

	if (ended && end_seq > f.high) { /* the tail of the feed never arrived */
		f.gaps++;
		f.missing += end_seq - f.high;
	}
	printf("subscriber %d: received %" PRIu64 ", gaps %" PRIu64 " (missing %" PRIu64
	       "), duplicates %" PRIu64 ", last seq %" PRIu64 ", reordered %" PRIu64
	       ", invalid %" PRIu64 "\n",
	       id, f.received, f.gaps, f.missing, f.dups, f.high, f.reordered, f.invalid);
	free(f.seen);

	if (!done && status == 0) {
		fprintf(stderr, "md-subscriber %d: no END within %" PRIu64 " s%s\n", id, timeout_s,
			acked ? "" : " (never acknowledged)");
		status = 1;
	}
	if (have_expect && (f.received != expect || f.gaps || f.dups || f.invalid ||
			    (ended && end_seq != expect))) {
		fprintf(stderr, "md-subscriber %d: expected ticks 1..%" PRIu64 " exactly once%s\n",
			id, expect, ended && end_seq != expect ? ", END says another count" : "");
		status = 1;
	}
	if (fflush(stdout) == EOF)
		status = 1;
	return status;
}
