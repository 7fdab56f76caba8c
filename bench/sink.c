/* SPDX-License-Identifier: MIT */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <linux/sock_diag.h>

#include "netns.h"
#include "sink.h"

#define RCVBUF_WANTED (32 << 20) /* per receiver; memory is only used by what is queued */
/* All queues together may hold at most this much before a drain, and at most a quarter of the
 * kernel's UDP memory pressure threshold (net.ipv4.udp_mem), above which queueing a datagram
 * costs something else. */
#define INFLIGHT_BUDGET (64ull << 20)
#define RECV_BATCH 64
#define MAX_RX_THREADS 4
#define TCP_READ (256 << 10) /* bytes per read(2) of a TCP receiver */
#define TCP_LISTENER UINT32_MAX /* the epoll tag of the TCP sink's listening socket */

struct rx_thread {
	struct sink *s;
	pthread_t tid;
	bool started;
	int ep;
	clockid_t cpu_clock;
	char *buf; /* RECV_BATCH whole datagrams (payload checking), or TCP_READ bytes (tcp) */
	/* Written by the receiver, read by the sender: relaxed atomics, since only totals matter. */
	uint64_t received, lost, late, bad, corrupt, foreign;
	uint64_t bytes; /* tcp: bytes read */
};

struct sink {
	enum sink_kind kind;
	size_t n, size;
	struct sockaddr_in *dests;
	int *rx;            /* n receiving sockets (loopback, deliver; tcp: the accepted
			     * connections, -1 until accepted) or NULL */
	int listener;       /* tcp: the listening socket, else -1 */
	size_t accepted;    /* tcp: connections accepted so far (the first receiver's alone) */
	uint64_t *next_seq; /* deliver: next sequence number expected per destination */
	unsigned char *ref; /* deliver with payload checking: the message as msg_fill makes it */
	uint16_t *src_port; /* deliver: SINK_MAX_SOURCES sending ports per destination (network
			     * order), 0: unset */
	int rcvbuf;         /* effective SO_RCVBUF */
	unsigned truesize;  /* kernel memory per queued datagram, measured */
	uint64_t burst;     /* fan-outs between drains */
	struct rx_thread th[MAX_RX_THREADS];
	unsigned nth;
	volatile int stop;
};

static int rx_socket(struct sink *s, struct sockaddr_in *a, char *err, size_t errlen)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0) {
		int e = errno;

		snprintf(err, errlen, "socket: %s%s", strerror(e),
			 e == EMFILE ? " (too many open files: raise ulimit -n)" : "");
		return -e;
	}
	int want = RCVBUF_WANTED;

	/* FORCE passes net.core.rmem_max (root only); otherwise the kernel caps at rmem_max. */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &want, sizeof(want)) &&
	    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof(want)))
		goto fail;
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof(*a);

	if (bind(fd, (struct sockaddr *)a, sizeof(*a)) ||
	    getsockname(fd, (struct sockaddr *)a, &len))
		goto fail;
	return fd;
fail:;
	int e = errno;

	snprintf(err, errlen, "receiver socket on 127.0.0.1: %s", strerror(e));
	close(fd);
	return -e;
}

/* Receive and discard everything queued on fd; returns datagrams read or -errno. The 16
 * bytes copied per datagram keep the drain cheap; MSG_TRUNC still reports full lengths. */
/* recvmmsg vectors over RECV_BATCH buffers of `each` bytes starting at buf, and the senders'
 * addresses into from[] unless from is NULL. */
static void rx_vectors(struct mmsghdr *m, struct iovec *iov, char *buf, size_t each,
		       struct sockaddr_in *from)
{
	for (int i = 0; i < RECV_BATCH; i++) {
		iov[i].iov_base = buf + (size_t)i * each;
		iov[i].iov_len = each;
		memset(&m[i].msg_hdr, 0, sizeof(m[i].msg_hdr));
		m[i].msg_hdr.msg_iov = &iov[i];
		m[i].msg_hdr.msg_iovlen = 1;
		if (from) {
			m[i].msg_hdr.msg_name = &from[i];
			m[i].msg_hdr.msg_namelen = sizeof(from[i]);
		}
	}
}

static long drain_fd(int fd, struct mmsghdr *m, struct iovec *iov, char (*buf)[16])
{
	long total = 0;

	rx_vectors(m, iov, buf[0], sizeof(buf[0]), NULL);
	for (;;) {
		int r = recvmmsg(fd, m, RECV_BATCH, MSG_DONTWAIT | MSG_TRUNC, NULL);

		if (r < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return total;
			if (errno == EINTR)
				continue;
			return -errno;
		}
		total += r;
		if (r < RECV_BATCH)
			return total;
	}
}

static int drain_all(struct sink *s)
{
	struct mmsghdr m[RECV_BATCH];
	struct iovec iov[RECV_BATCH];
	char buf[RECV_BATCH][16];

	for (size_t i = 0; i < s->n; i++) {
		long r = drain_fd(s->rx[i], m, iov, buf);

		if (r < 0)
			return (int)r;
	}
	return 0;
}

int sink_drain(struct sink *s)
{
	return s->kind == SINK_LOOPBACK ? drain_all(s) : 0;
}

/* How much kernel memory one queued datagram of this size takes (skb truesize), from
 * SO_MEMINFO after queueing a few: it decides how many fit before a drain. */
static int measure_truesize(struct sink *s, char *err, size_t errlen)
{
	enum { PROBES = 32 };
	int tx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	char *msg = calloc(1, s->size);
	int ret = 0;

	if (tx < 0 || !msg) {
		ret = tx < 0 ? -errno : -ENOMEM;
		snprintf(err, errlen, "measuring receive memory: %s", strerror(-ret));
		goto out;
	}
	for (int i = 0; i < PROBES; i++)
		if (sendto(tx, msg, s->size, 0, (struct sockaddr *)&s->dests[0],
			   sizeof(s->dests[0])) != (ssize_t)s->size) {
			ret = -errno;
			snprintf(err, errlen, "sending to 127.0.0.1: %s", strerror(errno));
			goto out;
		}
	uint32_t mem[SK_MEMINFO_VARS];
	socklen_t len = sizeof(mem);

	if (getsockopt(s->rx[0], SOL_SOCKET, SO_MEMINFO, mem, &len)) {
		ret = -errno;
		snprintf(err, errlen, "SO_MEMINFO: %s", strerror(errno));
		goto out;
	}
	s->truesize = mem[SK_MEMINFO_RMEM_ALLOC] / PROBES;
	/* Never trust a figure below what a datagram must at least take. */
	if (s->truesize < s->size + 256)
		s->truesize = (unsigned)s->size + 256;
	ret = drain_all(s);
	if (ret)
		snprintf(err, errlen, "draining: %s", strerror(-ret));
out:
	free(msg);
	if (tx >= 0)
		close(tx);
	return ret;
}

void msg_fill(unsigned char *msg, size_t size)
{
	for (size_t i = 0; i < size; i++)
		msg[i] = (unsigned char)(i * 131 + 7);
	if (size >= sizeof(struct msg_head)) {
		struct msg_head h = { .seq = 0, .magic = MSG_MAGIC, .size = (uint32_t)size };

		memcpy(msg, &h, sizeof(h));
	}
}

static void verify(struct sink *s, struct rx_thread *t, size_t idx, const char *buf, size_t len,
		   const struct sockaddr_in *from)
{
	struct msg_head h;

	/* Other programs may send to any loopback port, ours included: only what comes from the
	 * rig's own sending sockets for this destination (the plain one, and each "+ts"
	 * variant's) is the bench's to check. */
	bool ours = false;

	for (unsigned k = 0; k < SINK_MAX_SOURCES && !ours; k++)
		ours = from->sin_port ==
		       __atomic_load_n(&s->src_port[idx * SINK_MAX_SOURCES + k], __ATOMIC_RELAXED);
	if (!ours) {
		t->foreign++;
		return;
	}
	if (len != s->size) {
		t->bad++;
		return;
	}
	memcpy(&h, buf, sizeof(h));
	if (h.magic != MSG_MAGIC || h.size != s->size) {
		t->bad++;
		return;
	}
	/* A corrupt datagram still arrived: it is counted received, and its sequence number (the
	 * head is intact) still tracks order. */
	if (s->ref && memcmp(buf + sizeof(h), s->ref + sizeof(h), s->size - sizeof(h)))
		t->corrupt++;
	uint64_t want = s->next_seq[idx];

	if (h.seq >= want) {
		t->lost += h.seq - want;
		s->next_seq[idx] = h.seq + 1;
	} else {
		t->late++;
		if (t->lost)
			t->lost--; /* it was counted missing when its successor came */
	}
	t->received++;
}

static void *rx_main(void *arg)
{
	struct rx_thread *t = arg;
	struct sink *s = t->s;
	struct mmsghdr m[RECV_BATCH];
	struct iovec iov[RECV_BATCH];
	char head[RECV_BATCH][sizeof(struct msg_head)];
	struct sockaddr_in from[RECV_BATCH];
	struct epoll_event ev[64];
	struct rx_thread local = { 0 };
	/* Only the head is copied unless the whole payload is checked; MSG_TRUNC still reports
	 * every datagram's full length. */
	const size_t each = t->buf ? s->size : sizeof(head[0]);
	char *base = t->buf ? t->buf : head[0];

	rx_vectors(m, iov, base, each, from);
	while (!__atomic_load_n(&s->stop, __ATOMIC_RELAXED)) {
		int ne = epoll_wait(t->ep, ev, 64, 50);

		for (int e = 0; e < ne; e++) {
			size_t idx = ev[e].data.u32;
			int r;

			do {
				r = recvmmsg(s->rx[idx], m, RECV_BATCH, MSG_DONTWAIT | MSG_TRUNC, NULL);
				for (int i = 0; i < r; i++) {
					verify(s, &local, idx, base + (size_t)i * each,
					       m[i].msg_len, &from[i]);
					m[i].msg_hdr.msg_namelen = sizeof(from[i]);
				}
			} while (r == RECV_BATCH);
		}
		__atomic_store_n(&t->received, local.received, __ATOMIC_RELAXED);
		__atomic_store_n(&t->lost, local.lost, __ATOMIC_RELAXED);
		__atomic_store_n(&t->late, local.late, __ATOMIC_RELAXED);
		__atomic_store_n(&t->bad, local.bad, __ATOMIC_RELAXED);
		__atomic_store_n(&t->corrupt, local.corrupt, __ATOMIC_RELAXED);
		__atomic_store_n(&t->foreign, local.foreign, __ATOMIC_RELAXED);
	}
	return NULL;
}

/* tcp: accept every connection that waits, each read by receiver (idx mod nth). Only the first
 * receiver runs this, so s->accepted needs no lock; sink_close joins it before closing. */
static void tcp_accept(struct sink *s)
{
	while (s->accepted < s->n) {
		int fd = accept4(s->listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0)
			return;
		size_t idx = s->accepted++;
		struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)idx };

		s->rx[idx] = fd;
		if (epoll_ctl(s->th[idx % s->nth].ep, EPOLL_CTL_ADD, fd, &ev)) {
			/* Unread, its sender will block: the run stops at the settle's limit and
			 * reports the bytes unaccounted, which says what went wrong. */
			fprintf(stderr, "multisend-bench: tcp receiver: epoll_ctl: %s\n",
				strerror(errno));
		}
	}
}

/* tcp: read every connection and discard the bytes, counting them. Level-triggered: a read
 * that leaves data queued comes back at the next epoll_wait. */
static void *tcp_rx_main(void *arg)
{
	struct rx_thread *t = arg;
	struct sink *s = t->s;
	struct epoll_event ev[64];
	uint64_t bytes = 0;

	while (!__atomic_load_n(&s->stop, __ATOMIC_RELAXED)) {
		int ne = epoll_wait(t->ep, ev, 64, 50);

		for (int e = 0; e < ne; e++) {
			if (ev[e].data.u32 == TCP_LISTENER) {
				tcp_accept(s);
				continue;
			}
			int fd = s->rx[ev[e].data.u32];
			ssize_t r = read(fd, t->buf, TCP_READ);

			if (r > 0)
				bytes += (uint64_t)r;
			else if (!r || (errno != EAGAIN && errno != EINTR)) /* the sender closed */
				epoll_ctl(t->ep, EPOLL_CTL_DEL, fd, NULL);
		}
		__atomic_store_n(&t->bytes, bytes, __ATOMIC_RELAXED);
	}
	return NULL;
}

static int start_receivers(struct sink *s, int sender_cpu, char *err, size_t errlen)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t set;
	bool pin = false;

	s->nth = cpus > 1 ? (unsigned)(cpus - 1) : 1;
	if (s->nth > MAX_RX_THREADS)
		s->nth = MAX_RX_THREADS;
	if (s->nth > s->n)
		s->nth = (unsigned)s->n;
	s->next_seq = calloc(s->n, sizeof(*s->next_seq));
	s->src_port = calloc(s->n * SINK_MAX_SOURCES, sizeof(*s->src_port));
	if (!s->next_seq || !s->src_port) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < s->n; i++)
		s->next_seq[i] = 1;
	/* Keep receivers off a pinned sender's CPU when another is allowed. */
	if (sender_cpu >= 0 && !sched_getaffinity(0, sizeof(set), &set)) {
		CPU_CLR(sender_cpu, &set);
		pin = CPU_COUNT(&set) > 0;
	}
	for (unsigned k = 0; k < s->nth; k++) {
		struct rx_thread *t = &s->th[k];

		t->s = s;
		if (s->ref && !(t->buf = malloc((size_t)RECV_BATCH * s->size))) {
			errno = ENOMEM;
			goto fail;
		}
		if (s->kind == SINK_TCP && !(t->buf = malloc(TCP_READ))) {
			errno = ENOMEM;
			goto fail;
		}
		t->ep = epoll_create1(EPOLL_CLOEXEC);
		if (t->ep < 0)
			goto fail;
		/* tcp: the connections join as they are accepted, by the first receiver. */
		for (size_t i = k; s->kind != SINK_TCP && i < s->n; i += s->nth) {
			struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)i };

			if (epoll_ctl(t->ep, EPOLL_CTL_ADD, s->rx[i], &ev))
				goto fail;
		}
	}
	/* Every epoll set exists before the first receiver may accept into one. */
	for (unsigned k = 0; k < s->nth; k++) {
		struct rx_thread *t = &s->th[k];
		struct epoll_event lev = { .events = EPOLLIN, .data.u32 = TCP_LISTENER };

		if (s->kind == SINK_TCP && !k && epoll_ctl(t->ep, EPOLL_CTL_ADD, s->listener, &lev))
			goto fail;
		int e = pthread_create(&t->tid, NULL, s->kind == SINK_TCP ? tcp_rx_main : rx_main,
				       t);

		if (e) {
			errno = e;
			goto fail;
		}
		t->started = true;
		if (pin && (e = pthread_setaffinity_np(t->tid, sizeof(set), &set))) {
			errno = e;
			goto fail;
		}
		if ((e = pthread_getcpuclockid(t->tid, &t->cpu_clock))) {
			errno = e;
			goto fail;
		}
	}
	return 0;
fail:;
	int e = errno;

	snprintf(err, errlen, "starting receiver threads: %s", strerror(e));
	return -e;
}

static uint64_t inflight_budget(void)
{
	char buf[128];
	unsigned long long low;
	uint64_t budget = INFLIGHT_BUDGET;
	long page = sysconf(_SC_PAGESIZE);

	if (!read_file("/proc/sys/net/ipv4/udp_mem", buf, sizeof(buf)) &&
	    sscanf(buf, "%llu", &low) == 1 && page > 0 && low * (uint64_t)page / 4 < budget)
		budget = low * (uint64_t)page / 4;
	return budget;
}

/* tcp: one listening socket on 127.0.0.1 that every destination connects to (each connection
 * is its own destination), with room in its backlog for all of them. */
static int tcp_listen(struct sink *s, char *err, size_t errlen)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);

	s->listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->listener < 0 || bind(s->listener, (struct sockaddr *)&a, sizeof(a)) ||
	    getsockname(s->listener, (struct sockaddr *)&a, &len) ||
	    listen(s->listener, s->n < 65535 ? (int)s->n : 65535)) {
		int e = errno;

		snprintf(err, errlen, "tcp listening socket on 127.0.0.1: %s", strerror(e));
		return -e;
	}
	for (size_t i = 0; i < s->n; i++)
		s->dests[i] = a;
	return 0;
}

int sink_open(struct sink **out, enum sink_kind kind, size_t n, size_t size, int sender_cpu,
	      bool check_payload, char *err, size_t errlen)
{
	struct sink *s = calloc(1, sizeof(*s));
	int ret;

	*out = NULL;
	if (!s || !(s->dests = calloc(n, sizeof(*s->dests)))) {
		free(s);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (unsigned k = 0; k < MAX_RX_THREADS; k++)
		s->th[k].ep = -1;
	s->kind = kind;
	s->n = n;
	s->size = size;
	s->burst = UINT64_MAX;
	s->listener = -1;

	if (sink_netns(kind)) {
		if (n > 65535 - NETNS_FIRST_PORT) {
			snprintf(err, errlen, "%s supports at most %u destinations",
				 kind == SINK_NETNS_XDP ? "netns-xdp" : "netns-drop",
				 65535 - NETNS_FIRST_PORT);
			ret = -E2BIG;
			goto fail;
		}
		for (size_t i = 0; i < n; i++) {
			s->dests[i].sin_family = AF_INET;
			s->dests[i].sin_port = htons((uint16_t)(NETNS_FIRST_PORT + i));
			if (inet_pton(AF_INET, NETNS_REMOTE, &s->dests[i].sin_addr) != 1) {
				ret = -EINVAL;
				snprintf(err, errlen, "bad address " NETNS_REMOTE);
				goto fail;
			}
		}
		*out = s;
		return 0;
	}

	s->rx = malloc(n * sizeof(*s->rx));
	if (!s->rx) {
		ret = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < n; i++)
		s->rx[i] = -1;
	if (kind == SINK_TCP) {
		if ((ret = tcp_listen(s, err, errlen)) ||
		    (ret = start_receivers(s, sender_cpu, err, errlen)))
			goto fail;
		*out = s;
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		s->rx[i] = rx_socket(s, &s->dests[i], err, errlen);
		if (s->rx[i] < 0) {
			ret = s->rx[i];
			goto fail;
		}
	}
	socklen_t len = sizeof(s->rcvbuf);

	if (getsockopt(s->rx[0], SOL_SOCKET, SO_RCVBUF, &s->rcvbuf, &len)) {
		ret = -errno;
		snprintf(err, errlen, "SO_RCVBUF: %s", strerror(errno));
		goto fail;
	}
	if ((ret = measure_truesize(s, err, errlen)))
		goto fail;
	if (kind == SINK_DELIVER && check_payload) {
		if (!(s->ref = malloc(size))) {
			ret = -ENOMEM;
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		msg_fill(s->ref, size);
	}
	if (kind == SINK_LOOPBACK) {
		/* Three quarters of a queue: the kernel's limit check is not exact to the byte. */
		uint64_t per_queue = (uint64_t)s->rcvbuf * 3 / 4 / s->truesize;
		uint64_t all = inflight_budget() / s->truesize / n;

		s->burst = per_queue < all ? per_queue : all;
		if (!s->burst)
			s->burst = 1;
	} else if ((ret = start_receivers(s, sender_cpu, err, errlen))) {
		goto fail;
	}
	*out = s;
	return 0;
fail:
	sink_close(s);
	return ret;
}

void sink_close(struct sink *s)
{
	if (!s)
		return;
	__atomic_store_n(&s->stop, 1, __ATOMIC_RELAXED);
	for (unsigned k = 0; k < MAX_RX_THREADS; k++) {
		if (s->th[k].started)
			pthread_join(s->th[k].tid, NULL);
		if (s->th[k].ep >= 0)
			close(s->th[k].ep);
		free(s->th[k].buf);
	}
	if (s->rx)
		for (size_t i = 0; i < s->n; i++)
			if (s->rx[i] >= 0)
				close(s->rx[i]);
	if (s->listener >= 0)
		close(s->listener);
	free(s->rx);
	free(s->next_seq);
	free(s->ref);
	free(s->src_port);
	free(s->dests);
	free(s);
}

const struct sockaddr_in *sink_dests(const struct sink *s)
{
	return s->dests;
}

uint64_t sink_burst_limit(const struct sink *s)
{
	return s->burst;
}

uint64_t sink_drops(const struct sink *s)
{
	uint64_t sum = 0;

	/* tcp: a segment the receiver dropped is sent again; nothing of the stream is lost. */
	for (size_t i = 0; s->kind != SINK_TCP && s->rx && i < s->n; i++) {
		uint32_t mem[SK_MEMINFO_VARS];
		socklen_t len = sizeof(mem);

		if (!getsockopt(s->rx[i], SOL_SOCKET, SO_MEMINFO, mem, &len))
			sum += mem[SK_MEMINFO_DROPS];
	}
	return sum;
}

void sink_expect_source(struct sink *s, size_t idx, uint16_t port)
{
	if (!s->src_port || idx >= s->n)
		return;
	uint16_t *p = &s->src_port[idx * SINK_MAX_SOURCES];

	for (unsigned k = 0; k < SINK_MAX_SOURCES; k++)
		if (!p[k] || p[k] == port) {
			__atomic_store_n(&p[k], port, __ATOMIC_RELAXED);
			return;
		}
}

void sink_count(const struct sink *s, struct deliver_count *c)
{
	memset(c, 0, sizeof(*c));
	for (unsigned k = 0; k < s->nth; k++) {
		c->received += __atomic_load_n(&s->th[k].received, __ATOMIC_RELAXED);
		c->lost += __atomic_load_n(&s->th[k].lost, __ATOMIC_RELAXED);
		c->late += __atomic_load_n(&s->th[k].late, __ATOMIC_RELAXED);
		c->bad += __atomic_load_n(&s->th[k].bad, __ATOMIC_RELAXED);
		c->corrupt += __atomic_load_n(&s->th[k].corrupt, __ATOMIC_RELAXED);
		c->foreign += __atomic_load_n(&s->th[k].foreign, __ATOMIC_RELAXED);
		c->bytes += __atomic_load_n(&s->th[k].bytes, __ATOMIC_RELAXED);
	}
	/* tcp: whole messages, once every byte of them has been read. */
	if (s->kind == SINK_TCP)
		c->received = c->bytes / s->size;
}

uint64_t sink_rx_cpu_ns(const struct sink *s)
{
	uint64_t sum = 0;

	for (unsigned k = 0; k < s->nth; k++)
		if (s->th[k].started)
			sum += clock_ns(s->th[k].cpu_clock);
	return sum;
}

void sink_describe(enum sink_kind kind, bool check_payload, char *buf, size_t len)
{
	/* What a receiver's buffer will be, from a throwaway socket set up like the real ones. */
	int rcvbuf = 0, want = RCVBUF_WANTED;
	bool forced = false;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd >= 0) {
		socklen_t l = sizeof(rcvbuf);

		forced = !setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &want, sizeof(want));
		if (!forced && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof(want)))
			rcvbuf = 0;
		if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &l))
			rcvbuf = 0;
		close(fd);
	}
	switch (kind) {
	case SINK_LOOPBACK:
		snprintf(buf, len,
			 "loopback: one UDP receiver per destination on 127.0.0.1, SO_RCVBUF %d KiB%s. "
			 "Not read while a batch is timed; the sender drains the queues between "
			 "batches, untimed, before they can fill, so every datagram is queued and none "
			 "dropped. The cost includes the loopback receive path up to the socket queue "
			 "(the kernel runs it on the sending CPU), not the receiver's read",
			 rcvbuf / 1024, forced ? " (forced)" : " (capped by net.core.rmem_max)");
		break;
	case SINK_DELIVER:
		snprintf(buf, len,
			 "deliver: one UDP receiver per destination on 127.0.0.1, SO_RCVBUF %d KiB, "
			 "read concurrently by receiver threads that check length, magic, "
			 "per-destination sequence numbers%s (a datagram that finds its receiver asleep "
			 "also pays the wake-up); sent = received + kernel drops is checked "
			 "per run; receiver CPU is reported apart, not charged to the sender",
			 rcvbuf / 1024, check_payload ? " and every payload byte" : "");
		break;
	case SINK_NETNS_DROP:
		snprintf(buf, len, "netns-drop");
		break;
	case SINK_NETNS_XDP:
		snprintf(buf, len, "netns-xdp");
		break;
	case SINK_TCP:
		snprintf(buf, len,
			 "tcp: one TCP connection per destination over 127.0.0.1 (TCP_NODELAY), "
			 "all to one listening socket, read concurrently by receiver threads "
			 "(epoll) that discard every byte and count them; sent bytes = received is "
			 "checked per run (a full send buffer blocks the sender, nothing is "
			 "dropped); receiver CPU is reported apart, not charged to the sender");
		break;
	}
}
