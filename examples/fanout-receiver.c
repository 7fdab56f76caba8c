/* SPDX-License-Identifier: MIT */
/*
 * fanout-receiver: the verifying end of legacy-fanout (and of the shim tests). It binds N UDP
 * sockets on PORT..PORT+N-1 and checks that every (message, subscriber) pair arrived exactly
 * once, byte for byte, in order per subscriber.
 *
 * Exit status: 0 everything arrived exactly once and intact; 1 it did not; 2 usage; 3 a port
 * was in use (a test may retry elsewhere); 4 not enough file descriptors, 5 no such address
 * or family here, e.g. IPv6 disabled (a test may skip).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "md-proto.h"

#define BATCH 32
#define SLOT 65536 /* larger than any UDP payload; MSG_TRUNC catches the impossible */
#define MAX_LOGGED 5

struct sub {
	int fd;
	uint64_t high;  /* highest sequence number received */
	uint64_t got;   /* distinct messages received */
	uint64_t *seen; /* one bit per sequence number 1..M */
};

struct rx {
	uint64_t messages; /* expected per subscriber */
	size_t size;       /* required datagram size, 0 = any */
	bool identical;
	struct sub *subs;
	struct mmsghdr mm[BATCH];
	struct iovec iov[BATCH];
	uint64_t received, dups, corrupt, reordered;
};

/* Account for one datagram of socket idx. Returns NULL if it is good (new or a duplicate),
 * else why it is corrupt. */
static const char *check(struct rx *r, uint32_t idx, const uint8_t *p, size_t len, int flags)
{
	struct sub *s = &r->subs[idx];
	struct lf_hdr h;
	uint64_t seq;

	if (flags & MSG_TRUNC)
		return "truncated";
	if (len < sizeof(h) || (r->size && len != r->size))
		return "wrong length";
	memcpy(&h, p, sizeof(h));
	seq = le64toh(h.seq);
	if (le32toh(h.magic) != LF_MAGIC || h.reserved != 0)
		return "bad magic";
	if (le32toh(h.size) != len)
		return "length differs from header";
	if (le32toh(h.subscriber) != (r->identical ? LF_ANY_SUBSCRIBER : idx))
		return "subscriber field differs from socket index";
	if (seq == 0 || seq > r->messages)
		return "sequence number out of range";
	if (lf_check(p + sizeof(h), len - sizeof(h), seq) < 0)
		return "payload differs from pattern";
	if (s->seen[seq / 64] >> (seq % 64) & 1) {
		r->dups++;
		return NULL;
	}
	s->seen[seq / 64] |= UINT64_C(1) << (seq % 64);
	s->got++;
	r->received++;
	if (seq < s->high)
		r->reordered++;
	else
		s->high = seq;
	return NULL;
}

/* Read everything queued on socket idx. Level-triggered epoll would report it again, but
 * each extra wakeup is an epoll_wait the other sockets wait behind. Returns 0 or -1. */
static int drain(struct rx *r, uint32_t idx)
{
	int got;

	do {
		for (int j = 0; j < BATCH; j++)
			r->mm[j].msg_hdr.msg_flags = 0;
		got = recvmmsg(r->subs[idx].fd, r->mm, BATCH, MSG_DONTWAIT, NULL);
		if (got < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -1;
		for (int j = 0; j < got; j++) {
			const char *why = check(r, idx, r->iov[j].iov_base, r->mm[j].msg_len,
						r->mm[j].msg_hdr.msg_flags);

			if (why && ++r->corrupt <= MAX_LOGGED)
				fprintf(stderr, "fanout-receiver: socket %u: %u bytes: %s\n", idx,
					r->mm[j].msg_len, why);
		}
	} while (got == BATCH);
	return 0;
}

/* Room for n sockets plus stdio and epoll. Returns 0, or -1 when even the hard limit is too
 * low and cannot be raised (that takes CAP_SYS_RESOURCE). */
static int ensure_nofile(rlim_t n)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -1;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < n) {
		rl.rlim_cur = n;
		if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < n)
			rl.rlim_max = n;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			return -1;
	}
	return 0;
}

/* Bind socket i to addr:port0+i and add it to ep. Returns 0 or an exit status. */
static int open_socket(struct rx *r, uint32_t i, int ep, struct sockaddr_storage *addr,
		       socklen_t addrlen, uint16_t port0)
{
	/* Every socket fills while this one thread serves the others. Room for all of its
	 * datagrams, up to 4 MB (used only as datagrams queue up; about 1 KB of overhead each
	 * on top of the payload). */
	uint64_t want = r->messages * ((r->size ? r->size : 1500) + 1024);
	int rcvbuf = want < (1u << 20) ? 1 << 20 : want > (4u << 20) ? 4 << 20 : (int)want;
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = i };
	int fd = socket(addr->ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	r->subs[i].fd = fd;
	ex_set_port(addr, (uint16_t)(port0 + i));
	if (fd >= 0 && ex_set_rcvbuf(fd, rcvbuf) == 0 &&
	    bind(fd, (struct sockaddr *)addr, addrlen) == 0 &&
	    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0)
		return 0;

	int e = errno;

	fprintf(stderr, "fanout-receiver: socket %u (port %u): %s\n", i, port0 + i, strerror(e));
	if (e == EADDRINUSE)
		return 3;
	if (e == EMFILE || e == ENFILE)
		return 4;
	return e == EADDRNOTAVAIL || e == EAFNOSUPPORT ? 5 : 1;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: fanout-receiver [options]\n"
		"  --listen HOST:PORT   first socket; socket i is PORT+i (default 127.0.0.1:6000)\n"
		"  --subscribers N      sockets to bind (default 64)\n"
		"  --messages M         messages expected on each (default 1000)\n"
		"  --size BYTES         also require this datagram size (default: any)\n"
		"  --identical          expect legacy-fanout --identical datagrams\n"
		"  --idle-timeout SEC   give up after SEC without a datagram (default 5)\n"
		"  --linger-ms MS       after the last one, wait this long for duplicates (200)\n"
		"  --ready-file PATH    create PATH once every socket is bound (\"ready\" is also\n"
		"                       printed to stdout)\n"
		"  --help\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "subscribers", required_argument, NULL, 'n' },
		{ "messages", required_argument, NULL, 'm' },
		{ "size", required_argument, NULL, 's' },
		{ "identical", no_argument, NULL, 'I' },
		{ "idle-timeout", required_argument, NULL, 'i' },
		{ "linger-ms", required_argument, NULL, 'L' },
		{ "ready-file", required_argument, NULL, 'R' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	static struct rx r = { .messages = 1000 };
	const char *listen_at = "127.0.0.1:6000", *ready_file = NULL;
	uint64_t nsubs = 64, idle_s = 5, linger_ms = 200;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	int c, ep, rc;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'l': listen_at = optarg; break;
		case 'n': nsubs = ex_num("subscribers", optarg, 1, 65535); break;
		case 'm': r.messages = ex_num("messages", optarg, 0, UINT32_MAX); break;
		case 's': r.size = ex_num("size", optarg, sizeof(struct lf_hdr), 65507); break;
		case 'I': r.identical = true; break;
		case 'i': idle_s = ex_num("idle-timeout", optarg, 1, 86400); break;
		case 'L': linger_ms = ex_num("linger-ms", optarg, 0, 60000); break;
		case 'R': ready_file = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	if (ex_parse_addr(listen_at, -1, AF_UNSPEC, &addr, &addrlen) < 0)
		return 2;

	uint16_t port0 = ex_port(&addr);

	if (port0 == 0 || port0 + nsubs - 1 > 65535) {
		fprintf(stderr, "fanout-receiver: ports %u..%" PRIu64 " are not all valid\n", port0,
			port0 + nsubs - 1);
		return 2;
	}
	if (ensure_nofile(nsubs + 16) < 0) {
		fprintf(stderr, "fanout-receiver: cannot raise RLIMIT_NOFILE to %" PRIu64 ": %s\n",
			nsubs + 16, strerror(errno));
		return 4;
	}

	size_t words = r.messages / 64 + 1;
	uint64_t *bits = calloc(nsubs * words, sizeof(*bits));
	uint8_t *slots = malloc((size_t)BATCH * SLOT);
	struct epoll_event evs[256];

	r.subs = calloc(nsubs, sizeof(*r.subs));
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (!r.subs || !bits || !slots || ep < 0) {
		perror("fanout-receiver");
		return 1;
	}
	for (int i = 0; i < BATCH; i++) {
		r.iov[i] = (struct iovec){ .iov_base = slots + (size_t)i * SLOT, .iov_len = SLOT };
		r.mm[i].msg_hdr = (struct msghdr){ .msg_iov = &r.iov[i], .msg_iovlen = 1 };
	}
	for (uint32_t i = 0; i < nsubs; i++) {
		r.subs[i].seen = bits + i * words;
		rc = open_socket(&r, i, ep, &addr, addrlen, port0);
		if (rc)
			return rc;
	}
	if (ready_file) {
		int fd = open(ready_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

		if (fd < 0 || close(fd) < 0) {
			perror(ready_file);
			return 1;
		}
	}
	printf("ready\n");
	if (fflush(stdout) == EOF)
		return 1;

	uint64_t expected = nsubs * r.messages;
	bool complete = expected == 0;
	/* Every datagram restarts the idle timer; once all are in, only a short linger for
	 * late duplicates remains. */
	uint64_t deadline = ex_now_ns(CLOCK_MONOTONIC) +
			    (complete ? linger_ms * 1000000u : idle_s * 1000000000u);

	for (uint64_t now; (now = ex_now_ns(CLOCK_MONOTONIC)) < deadline;) {
		int n = epoll_wait(ep, evs, sizeof(evs) / sizeof(evs[0]),
				   (int)((deadline - now + 999999) / 1000000));

		if (n < 0 && errno != EINTR) {
			perror("fanout-receiver: epoll_wait");
			return 1;
		}
		for (int k = 0; k < n; k++) {
			if (drain(&r, evs[k].data.u32) < 0) {
				perror("fanout-receiver: recvmmsg");
				return 1;
			}
		}
		if (n > 0 && !complete)
			deadline = ex_now_ns(CLOCK_MONOTONIC) + idle_s * 1000000000u;
		if (!complete && r.received == expected) {
			complete = true;
			deadline = ex_now_ns(CLOCK_MONOTONIC) + linger_ms * 1000000u;
		}
	}

	printf("received %" PRIu64 " of %" PRIu64 ", missing %" PRIu64 ", duplicates %" PRIu64
	       ", corrupt %" PRIu64 ", reordered %" PRIu64 "\n",
	       r.received, expected, expected - r.received, r.dups, r.corrupt, r.reordered);
	/* Which subscribers lost datagrams tells a per-socket bug from overall loss. */
	for (uint32_t i = 0, shown = 0; i < nsubs && shown < 8; i++) {
		if (r.subs[i].got == r.messages)
			continue;
		fprintf(stderr, "fanout-receiver: subscriber %u (port %u): %" PRIu64 " of %" PRIu64
			"\n", i, port0 + i, r.subs[i].got, r.messages);
		shown++;
	}
	for (uint32_t i = 0; i < nsubs; i++)
		close(r.subs[i].fd);
	close(ep);
	free(r.subs);
	free(bits);
	free(slots);
	if (fflush(stdout) == EOF)
		return 1;
	return r.received == expected && !r.dups && !r.corrupt && !r.reordered ? 0 : 1;
}
