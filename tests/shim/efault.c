/* SPDX-License-Identifier: MIT */
/*
 * efault: every send-family call with memory the kernel refuses (a buffer, an address, a
 * message header, an iovec array or an iovec's base that is unmapped, PROT_NONE, or half
 * unmapped; sendmmsg's vector; iovec lengths past SSIZE_MAX or summing past 2^64), on UDP
 * (unconnected and connected), TCP and AF_UNIX (datagram and stream) sockets, between good
 * sends that make a fan-out (so batch mode is batching when the bad call comes). One line per
 * call: its name and result (a byte count or an errno name). Run without the shim and under
 * multisend-run in each mode: the outputs must be identical, and the process must not die
 * (issue 26, item 9).
 *
 *   efault local       everything on loopback; the good datagrams are received and checked
 *   efault peer ADDR   UDP only, its datagrams to ADDR port 9 and 10 (bypass mode's peer,
 *                      where they go as AF_XDP frames; nothing listens there)
 *   efault signal NEXT the bad calls from a signal handler that runs inside the shim's flush
 *                      (signal_main, below)
 *
 * Exit status 0 once every case has printed (and, local, every good datagram arrived).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define SIZE 64
#define PAGE 4096

static uint8_t good[SIZE];
static void *unmapped, *noaccess, *straddle; /* straddle: 32 readable bytes, then unmapped */
static void *const beyond = (void *)((uintptr_t)1 << 52);
static long sent_good;                      /* good datagrams to the local UDP receivers */
static volatile int many = 1025, negative = -1; /* counts the kernel refuses (EINVAL) */

static void die(const char *what) __attribute__((noreturn));
static void die(const char *what)
{
	fprintf(stderr, "FAIL: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void line(const char *sock, const char *name, ssize_t r)
{
	if (r < 0)
		printf("%-5s %-22s %s\n", sock, name, strerrorname_np(errno));
	else
		printf("%-5s %-22s %zd\n", sock, name, r);
	fflush(stdout);
}

static void *map(size_t pages, int prot)
{
	void *p = mmap(NULL, pages * PAGE, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	return p;
}

/* A hole no mmap fills: three pages at an address far below where mmap places memory (top
 * down from near the stack) and above the heap, the middle one unmapped again. (A hole among
 * ordinary mappings is where the next mmap goes, the shim's own included, so the "bad"
 * pointer would then be readable under the shim and not without it.) */
static char *hinted(void)
{
	for (uintptr_t h = (uintptr_t)1 << 33; h < (uintptr_t)1 << 46; h += (uintptr_t)1 << 32) {
		void *p = mmap((void *)h, 3 * PAGE, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
		if (p != MAP_FAILED && p == (void *)h)
			return p;
		if (p != MAP_FAILED)
			munmap(p, 3 * PAGE);
	}
	die("no room for the hole");
}

static void setup_memory(void)
{
	char *h = hinted();
	munmap(h + PAGE, PAGE);
	memset(h, 0x5a, PAGE);
	unmapped = h + PAGE;
	straddle = h + PAGE - SIZE / 2;
	noaccess = map(1, PROT_NONE);
	for (int k = 0; k < SIZE; k++)
		good[k] = (uint8_t)(k + 1);
}

/* The good fan-out between cases: one datagram to each of the UDP destinations. */
struct fan {
	int fd;
	struct sockaddr_in to[3];
	int n;
	bool local;
};

static void fanout(const struct fan *f)
{
	for (int k = 0; k < f->n; k++) {
		if (sendto(f->fd, good, SIZE, 0, (const struct sockaddr *)&f->to[k],
			   sizeof(f->to[k])) != SIZE)
			die("a good sendto");
		if (f->local)
			sent_good++;
	}
}

/*
 * Every bad case on socket fd (to: its destination, NULL for a connected or stream socket).
 * dgram: a datagram socket (the single huge lengths go there only: a stream socket would
 * send whatever follows the buffer). f: the fan-out made before each case.
 */
static void cases(const char *sk, int fd, const struct sockaddr_in *to, bool dgram,
		  const struct fan *f)
{
	const struct sockaddr *a = (const struct sockaddr *)to;
	const socklen_t al = to ? sizeof(*to) : 0;
	struct iovec iov[3];
	struct msghdr mh;
	struct mmsghdr mm[2];

#define CASE(name, call)          \
	do {                      \
		fanout(f);        \
		errno = 0;        \
		ssize_t r_ = (call); \
		line(sk, name, r_); \
	} while (0)
#define MSG(n_)                                                                              \
	(mh = (struct msghdr){ .msg_name = (void *)a, .msg_namelen = al, .msg_iov = iov,     \
			       .msg_iovlen = (n_) })

	CASE("buffer_unmapped", sendto(fd, unmapped, SIZE, 0, a, al));
	CASE("buffer_prot_none", sendto(fd, noaccess, SIZE, 0, a, al));
	CASE("buffer_half_unmapped", sendto(fd, straddle, SIZE, 0, a, al));
	/* Past 47 bits: user space with five-level paging, never mapped unasked; else past it. */
	CASE("buffer_past_47_bits", sendto(fd, beyond, SIZE, 0, a, al));
	CASE("send_unmapped", to ? 0 : send(fd, unmapped, SIZE, 0));
	CASE("address_unmapped", sendto(fd, good, SIZE, 0, unmapped, sizeof(struct sockaddr_in)));
	CASE("address_prot_none", sendto(fd, good, SIZE, 0, noaccess, sizeof(struct sockaddr_in)));
	CASE("msghdr_unmapped", sendmsg(fd, unmapped, 0));
	CASE("msghdr_prot_none", sendmsg(fd, noaccess, 0));
	CASE("msghdr_past_47_bits", sendmsg(fd, beyond, 0));
	iov[0] = (struct iovec){ good, 16 };
	iov[1] = (struct iovec){ unmapped, SIZE - 16 };
	MSG(2);
	CASE("sendmsg_iov_base", sendmsg(fd, &mh, 0));
	iov[1] = (struct iovec){ straddle, SIZE - 16 };
	CASE("sendmsg_iov_half", sendmsg(fd, &mh, 0));
	MSG(2);
	mh.msg_iov = unmapped;
	CASE("sendmsg_iov_array", sendmsg(fd, &mh, 0));
	iov[0] = (struct iovec){ good, SIZE };
	MSG(1);
	mh.msg_name = unmapped;
	mh.msg_namelen = sizeof(struct sockaddr_in);
	CASE("sendmsg_name", sendmsg(fd, &mh, 0));
	MSG(1);
	mh.msg_control = unmapped;
	mh.msg_controllen = 64;
	CASE("sendmsg_control", sendmsg(fd, &mh, 0));
	/* Lengths: one past SSIZE_MAX (EINVAL); three that sum past 2^64 (the sum wraps to a
	 * small number: each one is EFAULT for the kernel, past user space). */
	iov[0] = (struct iovec){ good, 16 };
	iov[1] = (struct iovec){ good, (size_t)SSIZE_MAX + 1 };
	MSG(2);
	CASE("iov_len_over_ssize_max", sendmsg(fd, &mh, 0));
	iov[0] = (struct iovec){ good, (size_t)SSIZE_MAX };
	iov[1] = (struct iovec){ good, (size_t)SSIZE_MAX };
	iov[2] = (struct iovec){ good, 4 };
	MSG(3);
	CASE("iov_sum_past_2_64", sendmsg(fd, &mh, 0));
	CASE("writev_sum_past_2_64", to ? 0 : writev(fd, iov, 3));
	CASE("writev_over_uio_maxiov", to ? 0 : writev(fd, iov, many));
	CASE("writev_negative_count", to ? 0 : writev(fd, iov, negative));
	MSG(1025);
	CASE("sendmsg_over_uio_maxiov", sendmsg(fd, &mh, 0));
	if (dgram) {
		iov[0] = (struct iovec){ good, (size_t)1 << 62 };
		MSG(1);
		CASE("iov_len_2_62", sendmsg(fd, &mh, 0));
		CASE("sendto_len_max", sendto(fd, good, SIZE_MAX, 0, a, al));
	}
	CASE("write_unmapped", to ? 0 : write(fd, unmapped, SIZE));
	CASE("write_half_unmapped", to ? 0 : write(fd, straddle, SIZE));
	iov[0] = (struct iovec){ good, 16 };
	iov[1] = (struct iovec){ unmapped, SIZE - 16 };
	CASE("writev_iov_base", to ? 0 : writev(fd, iov, 2));
	CASE("writev_iov_array", to ? 0 : writev(fd, unmapped, 2));
	CASE("sendmmsg_vector", sendmmsg(fd, unmapped, 2, 0));
	if (!to && dgram && !f->local)
		return; /* a connected socket to the peer sends nothing (its ICMP error would be
			   the next send's, at a moment nobody controls) */
	struct iovec g = { good, SIZE }, b = { unmapped, SIZE };
	memset(mm, 0, sizeof(mm));
	mm[0].msg_hdr = (struct msghdr){ .msg_name = (void *)a, .msg_namelen = al, .msg_iov = &b,
					 .msg_iovlen = 1 };
	mm[1].msg_hdr = mm[0].msg_hdr;
	mm[1].msg_hdr.msg_iov = &g;
	CASE("sendmmsg_first_bad", sendmmsg(fd, mm, 2, 0));
	mm[0].msg_hdr.msg_iov = &g;
	mm[1].msg_hdr.msg_iov = &b;
	CASE("sendmmsg_second_bad", sendmmsg(fd, mm, 2, 0));
	if (f->local && dgram && to)
		sent_good++; /* its first message went */
	mm[1].msg_hdr.msg_iov = unmapped;
	CASE("sendmmsg_second_iov", sendmmsg(fd, mm, 2, 0));
	if (f->local && dgram && to)
		sent_good++;
	/* And a good one after them all. */
	CASE("good_after", to ? sendto(fd, good, SIZE, 0, a, al) : send(fd, good, SIZE, 0));
	if (f->local && dgram && to)
		sent_good++;
#undef CASE
#undef MSG
}

static int udp(void)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket");
	return fd;
}

static struct sockaddr_in bound(int fd)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || getsockname(fd, (struct sockaddr *)&a, &l))
		die("bind");
	return a;
}

/* Until `got` is every good datagram sent so far, each intact, at the receivers rx[0..n)
 * (drained after each socket's cases, so their buffers never fill); 10 s at most. */
static long got;

static void drain(const int *rx, int n, long want)
{
	uint8_t buf[2 * SIZE];

	for (int idle = 0; got < want && idle < 100;) {
		struct pollfd p[4];
		for (int k = 0; k < n; k++)
			p[k] = (struct pollfd){ .fd = rx[k], .events = POLLIN };
		if (poll(p, (nfds_t)n, 100) <= 0) {
			idle++;
			continue;
		}
		for (int k = 0; k < n; k++) {
			if (!(p[k].revents & POLLIN))
				continue;
			ssize_t r = recv(rx[k], buf, sizeof(buf), MSG_DONTWAIT);
			if (r == SIZE && !memcmp(buf, good, SIZE))
				got++;
			else if (r >= 0) {
				fprintf(stderr, "FAIL: a datagram of %zd bytes that is not the good one\n", r);
				exit(1);
			}
		}
	}
}

/*
 * efault signal NEXT: a SIGUSR1 handler makes the bad calls on a socket the batch holds data
 * for, while its thread is inside the shim: NEXT (libshim-sigflood-next.so, put after the
 * shim in LD_PRELOAD by a re-exec) raises SIGUSR1 inside each sendmmsg of the shim's flush.
 * The handler also runs once from main, outside the shim (and without the shim, that is the
 * only time). It prints, per call, the set of results it saw: the same with and without the
 * shim. How many times the handler ran inside the shim goes to stderr.
 */
enum { H_SENDTO, H_ADDR, H_MSGHDR, H_IOV_ARRAY, H_IOV_BASE, H_SEND_HALF, H_N };
static const char *const hname[H_N] = { "sendto_buffer", "sendto_address", "sendmsg_msghdr",
					"sendmsg_iov_array", "sendmsg_iov_base", "sendto_half" };
static volatile uint64_t hseen[H_N]; /* bit e: errno e seen (0: success) */
static volatile unsigned hruns;
static struct fan hfan;

static void hnote(int k, ssize_t r)
{
	int e = r < 0 ? errno : 0;
	hseen[k] |= (uint64_t)1 << (e < 64 ? e : 63);
}

static void on_usr1(int sig)
{
	int saved = errno;
	const struct sockaddr *a = (const struct sockaddr *)&hfan.to[0];
	struct iovec iov[2] = { { good, 16 }, { unmapped, SIZE - 16 } };
	struct msghdr mh = { .msg_name = (void *)a, .msg_namelen = sizeof(hfan.to[0]),
			     .msg_iov = iov, .msg_iovlen = 2 };

	(void)sig;
	hruns = hruns + 1;
	hnote(H_SENDTO, sendto(hfan.fd, unmapped, SIZE, 0, a, sizeof(hfan.to[0])));
	hnote(H_ADDR, sendto(hfan.fd, good, SIZE, 0, unmapped, sizeof(hfan.to[0])));
	hnote(H_MSGHDR, sendmsg(hfan.fd, unmapped, 0));
	hnote(H_IOV_BASE, sendmsg(hfan.fd, &mh, 0));
	mh.msg_iov = unmapped;
	hnote(H_IOV_ARRAY, sendmsg(hfan.fd, &mh, 0));
	hnote(H_SEND_HALF, sendto(hfan.fd, straddle, SIZE, 0, a, sizeof(hfan.to[0])));
	errno = saved;
}

static int signal_main(int argc, char **argv)
{
	const char *next = argv[2], *pre = getenv("LD_PRELOAD");
	if (!pre || !strstr(pre, next)) {
		char buf[4096];
		snprintf(buf, sizeof(buf), "%s %s", pre ? pre : "", next);
		setenv("LD_PRELOAD", buf, 1);
		execv("/proc/self/exe", argv);
		die("execv");
	}
	(void)argc;
	setup_memory();
	int rx[3];
	hfan.fd = udp();
	hfan.n = 3;
	hfan.local = true;
	for (int k = 0; k < 3; k++) {
		rx[k] = udp();
		hfan.to[k] = bound(rx[k]);
	}
	struct sigaction sa = { .sa_handler = on_usr1, .sa_flags = SA_RESTART };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	raise(SIGUSR1); /* once outside the shim */
	const unsigned outside = hruns;
	for (int k = 0; k < 200; k++) {
		fanout(&hfan);
		if (k % 20 == 19)
			drain(rx, 3, sent_good);
	}
	drain(rx, 3, sent_good);
	for (int k = 0; k < H_N; k++) {
		printf("handler %-18s", hname[k]);
		for (int e = 0; e < 64; e++)
			if (hseen[k] & ((uint64_t)1 << e))
				printf(" %s", e ? strerrorname_np(e) : "sent");
		printf("\n");
	}
	printf("local receivers: %ld of %ld good datagrams, intact\n", got, sent_good);
	fprintf(stderr, "the handler ran %u times inside the program's sends\n", hruns - outside);
	return got == sent_good ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "signal"))
		return signal_main(argc, argv);
	const bool local = argc == 2 && !strcmp(argv[1], "local");
	struct fan f = { .local = local };
	int rx[3] = { -1, -1, -1 };

	if (!local && !(argc == 3 && !strcmp(argv[1], "peer"))) {
		fprintf(stderr, "usage: efault local | efault peer ADDR | efault signal NEXT_LIBRARY\n");
		return 2;
	}
	setup_memory();
	f.fd = udp();
	if (local) {
		f.n = 3;
		for (int k = 0; k < 3; k++) {
			rx[k] = udp();
			f.to[k] = bound(rx[k]);
		}
	} else {
		f.n = 2;
		for (int k = 0; k < 2; k++) {
			f.to[k] = (struct sockaddr_in){ .sin_family = AF_INET,
							.sin_port = htons((uint16_t)(9 + k)) };
			if (inet_pton(AF_INET, argv[2], &f.to[k].sin_addr) != 1)
				die("address");
		}
	}
	/* The fan-out's pattern, seen a few times: batch mode batches from then on. */
	for (int k = 0; k < 4; k++)
		fanout(&f);

	/* UDP, unconnected: the fan-out's own socket, to its first destination. */
	cases("udp", f.fd, &f.to[0], true, &f);
	/* UDP, connected to the first destination. */
	int c = udp();
	if (connect(c, (struct sockaddr *)&f.to[0], sizeof(f.to[0])))
		die("connect");
	if (local) {
		drain(rx, 3, sent_good);
		cases("udpc", c, NULL, true, &f);
		sent_good++; /* good_after */
		sent_good += 2; /* sendmmsg's first message twice */
		drain(rx, 3, sent_good);
	} else {
		/* Nothing listens at the peer: no datagram on this socket (an ICMP error would
		 * be the next send's, at a moment nobody controls); only what the kernel
		 * refuses before sending. */
		cases("udpc", c, NULL, true, &(struct fan){ .fd = f.fd, .to = { f.to[1] }, .n = 1 });
		errno = 0;
	}
	if (local) {
		/* TCP on loopback. */
		int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), t, a;
		struct sockaddr_in la = { .sin_family = AF_INET,
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t ll = sizeof(la);
		if (l < 0 || bind(l, (struct sockaddr *)&la, sizeof(la)) || listen(l, 1) ||
		    getsockname(l, (struct sockaddr *)&la, &ll))
			die("tcp listen");
		t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (t < 0 || connect(t, (struct sockaddr *)&la, sizeof(la)) || (a = accept(l, NULL, NULL)) < 0)
			die("tcp connect");
		cases("tcp", t, NULL, false, &f);
		drain(rx, 3, sent_good);
		/* AF_UNIX, datagram and stream. */
		int u[2], s[2];
		if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, u) ||
		    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s))
			die("socketpair");
		cases("unixd", u[0], NULL, true, &f);
		drain(rx, 3, sent_good);
		cases("unixs", s[0], NULL, false, &f);
		close(a);
		close(t);
		close(l);
		drain(rx, 3, sent_good);
		printf("local receivers: %ld of %ld good datagrams, intact\n", got, sent_good);
		if (got != sent_good)
			return 1;
	}
	printf("done\n");
	return 0;
}
