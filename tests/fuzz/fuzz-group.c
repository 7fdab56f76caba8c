/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: random sequences of group add / remove / send / sendv, valid and invalid, on a
 * real context (backend chosen by the input) against a fixed pool of real sockets: AF_UNIX
 * datagram, seqpacket and stream pairs, an unconnected AF_UNIX and an unconnected UDP socket
 * with several addresses, connected UDP sockets and a TCP stream, all on loopback. After every
 * call the library must agree with a model of the group, and the receivers must hold exactly
 * what the results promise: one copy per successful datagram destination, nothing else.
 * Inputs may also set a slow-consumer policy (valid or not) and flush backlogs; a second TCP
 * stream with tiny buffers, whose receiver reads only when the input says so, fills up, and
 * every byte the kernel took for it, directly or from a backlog, must arrive.
 *
 * Inputs choose the backend, workers (1..4, no cpus), MS_CFG_ROTATE, timestamps (first/last
 * or every destination, every fan-out sampled), and MS_SEND_DONTWAIT per call. Per send, with
 * results: one entry per destination, each id once; a datagram's status is the length or
 * -errno; the return value counts the entries that took the whole message; every ms_stats
 * counter the call moves (fanouts, dests_*, err_* by class, bytes, slow_*) agrees with the
 * entries; the order of the entries does not change while the group does not (rotation or
 * not, results stay in group order); every datagram that arrives holds this call's bytes
 * (each call's message starts with a new sequence number). With timestamps, the stamped
 * destinations ms_group_ts_last reports after each send give the send order: it must start
 * at position 0 without MS_CFG_ROTATE, one position later on each fan-out of an unchanged
 * group with it, and (with MS_TS_ALL_DESTS) visit every UDP destination once in group order
 * from there.
 *
 * The first byte chooses the mode: 0..215 one of loop, sendmmsg, io_uring (b % 3) with
 * 1..4 workers; 216..227 MS_BACKEND_XDP ("xdp mode", below); 228..239 offload; 240..255
 * MS_BACKEND_AUTO. Inputs whose first byte is 240..255 use MS_BACKEND_AUTO (backends switching
 * as they are measured). Inputs whose first byte is 228..239 drive offload instead
 * (MS_CFG_OFFLOAD, a 64 KiB ring): ms_post / ms_postv among synchronous sends and group
 * changes, each posted message checked after ms_ctx_drain against the post log, the counters
 * and the receivers; see "Offload" below.
 *
 * xdp mode (first byte 216..227; workers as for the others, the shape byte's bit 0 chooses
 * MS_CFG_XDP_COPY, 64 UMEM frames, each context on a veth queue of its own with
 * MS_CFG_XDP_QUEUE): the context is MS_BACKEND_XDP on a veth whose peer is in a
 * second network namespace (the process moves to a namespace of its own at its first input,
 * before making the pool; see setup_netns). The pool then has eight more destinations, UDP over
 * the veth (an unconnected socket with six addresses, two connected sockets) to receivers
 * bound to the peer's address: the same oracle checks the datagrams that left as AF_XDP frames.
 * Every call's xdp counters are checked (check_xdp: frames + fallbacks account for every
 * destination but those with a negative status; frames only for veth destinations with the
 * bypass allowed). Op 5 with bit 7 calls ms_group_kernel_path (bit 6: on) on an id or
 * MS_GROUP_ALL, checked against the model. Without root, AF_XDP or a veth, these inputs run
 * with the backend ms_ctx_new falls back to, and every backend but xdp moves no xdp counter.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/sockios.h>

#include "multisend.h"

#define CHECK(c)                                                                            \
	do {                                                                                \
		if (!(c)) {                                                                 \
			fprintf(stderr, "fuzz-group: check failed: %s (line %d)\n", #c, __LINE__); \
			abort();                                                            \
		}                                                                           \
	} while (0)

enum { MAXLEN = 65600 };

/* One destination the input can pick: the socket to add, the address (if any) and where a
 * copy arrives. Several destinations may share a receiver. */
struct pdest {
	int fd;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	int rx;      /* receiving socket */
	bool stream; /* counts bytes, not datagrams */
	bool conn;   /* connection-oriented (stream, seqpacket): a slow-consumer policy applies */
	bool lazy;   /* its receiver reads only when the input says so (the small stream) */
	bool stuck;  /* a blocking socket whose receiver is full and never read: only
	                MS_SEND_DONTWAIT sends to it, and each gives -EAGAIN */
	int maxdgram; /* largest datagram this destination takes whole; 0 = any (stream) */
	bool veth;    /* UDP over the veth (xdp mode): the one kind the xdp backend frames */
};

/* NBASE: the pool every input has; the veth destinations (xdp mode) come after it. */
enum { NBASE = 16, NDEST = 24 };
static bool auto_mode; /* MS_BACKEND_AUTO: any backend may send a call */
static bool xdp_mode;  /* the input asked for MS_BACKEND_XDP (first byte 216..227) */
static bool xdp_ctx;   /* ... and got it (root, AF_XDP, the veth) */
enum { XDP_FRAMES = 64 }; /* few: a wide fan-out waits for frames, or gets -EAGAIN */
enum { XDP_QUEUES = 48 }; /* the veth's queues: one per xdp context (2 * 3 * 2 * 4 slots) */
static uint64_t xdp_frames_total, xdp_calls_total; /* for the report at exit */
static struct pdest pool[NDEST];
static int npool;
static int junk_pipe[2], closed_fd;
static int lazy_q; /* pool index of the small stream */
static int stuck_q, stuck_outq; /* the stuck socket's pool index, and its SIOCOUTQ when full */
/* Bytes the small stream's receiver must get: everything the kernel took for it. */
static long lazy_expect, lazy_got;
static unsigned char payload[MAXLEN];

static bool udp_big; /* the receivers have the 4 MiB buffers (SO_RCVBUFFORCE is root's) */

static void big_buffers(int fd)
{
	int big = 4 << 20;
	setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
	socklen_t l = sizeof(big);
	udp_big = getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, &l) == 0 && big >= 8 << 20;
}

static void add_pool(int fd, const void *addr, socklen_t addrlen, int rx, bool stream, int maxd)
{
	struct pdest *p = &pool[npool++];
	p->fd = fd;
	p->addrlen = addrlen;
	if (addr)
		memcpy(&p->addr, addr, addrlen);
	p->rx = rx;
	p->stream = stream;
	p->maxdgram = maxd;
	big_buffers(fd);
	big_buffers(rx);
}

static int udp_rx(struct sockaddr_in *a)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a->sin_port = 0;
	socklen_t l = sizeof(*a);
	CHECK(bind(s, (struct sockaddr *)a, l) == 0 && getsockname(s, (struct sockaddr *)a, &l) == 0);
	return s;
}

static void setup_pool(void)
{
	int sv[2];
	for (int i = 0; i < 3; i++) { /* connected AF_UNIX datagrams */
		CHECK(socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) == 0);
		fcntl(sv[0], F_SETFL, O_NONBLOCK);
		add_pool(sv[1], NULL, 0, sv[0], false, 0);
	}
	CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) == 0);
	fcntl(sv[0], F_SETFL, O_NONBLOCK);
	add_pool(sv[1], NULL, 0, sv[0], false, 0);
	pool[npool - 1].conn = true;

	int ushared = socket(AF_UNIX, SOCK_DGRAM, 0);
	for (int i = 0; i < 3; i++) { /* one unconnected AF_UNIX socket, three addresses */
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "ms-fuzz-%d-%d", getpid(), i);
		socklen_t l = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
		int rx = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
		CHECK(bind(rx, (struct sockaddr *)&a, l) == 0);
		add_pool(ushared, &a, l, rx, false, 0);
	}
	int vshared = socket(AF_INET, SOCK_DGRAM, 0);
	for (int i = 0; i < 3; i++) { /* one unconnected UDP socket, three addresses */
		struct sockaddr_in a;
		int rx = udp_rx(&a);
		add_pool(vshared, &a, sizeof(a), rx, false, 65507);
	}
	for (int i = 0; i < 2; i++) { /* connected UDP */
		struct sockaddr_in a;
		int rx = udp_rx(&a);
		int tx = socket(AF_INET, SOCK_DGRAM, 0);
		CHECK(connect(tx, (struct sockaddr *)&a, sizeof(a)) == 0);
		add_pool(tx, NULL, 0, rx, false, 65507);
	}
	/* A TCP stream. */
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(bind(ls, (struct sockaddr *)&a, l) == 0 && getsockname(ls, (struct sockaddr *)&a, &l) == 0);
	CHECK(listen(ls, 1) == 0);
	int tx = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(tx, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	CHECK(connect(tx, (struct sockaddr *)&a, l) == 0);
	int rx = accept(ls, NULL, NULL);
	fcntl(rx, F_SETFL, O_NONBLOCK);
	add_pool(tx, NULL, 0, rx, true, 0);
	pool[npool - 1].conn = true;

	/* The small stream: tiny buffers, a non-blocking sender (so that without a policy a full
	 * socket gives -EAGAIN or a short count instead of blocking), a lazy reader. */
	int small = 4096, window = 32768; /* a window below a few MSS waits for TCP's timers */
	tx = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(tx, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	setsockopt(tx, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(ls, SOL_SOCKET, SO_RCVBUF, &window, sizeof(window));
	CHECK(connect(tx, (struct sockaddr *)&a, l) == 0);
	rx = accept(ls, NULL, NULL);
	fcntl(rx, F_SETFL, O_NONBLOCK);
	fcntl(tx, F_SETFL, O_NONBLOCK);
	close(ls);
	lazy_q = npool;
	struct pdest *p = &pool[npool++];
	*p = (struct pdest){ .fd = tx, .rx = rx, .stream = true, .conn = true, .lazy = true };

	/* The stuck destination: a blocking AF_UNIX datagram socket whose peer's queue is full
	 * (net.unix.max_dgram_qlen) and is never read. A send that waited would wait forever;
	 * with MS_SEND_DONTWAIT, on every backend and in any worker's part, it is -EAGAIN and
	 * nothing more is queued (the sender's SIOCOUTQ, the bytes it has queued, stays). */
	CHECK(socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) == 0);
	while (send(sv[1], "x", 1, MSG_DONTWAIT) == 1)
		;
	CHECK(errno == EAGAIN);
	CHECK(ioctl(sv[1], SIOCOUTQ, &stuck_outq) == 0 && stuck_outq > 0);
	stuck_q = npool;
	pool[npool++] = (struct pdest){ .fd = sv[1], .rx = sv[0], .stuck = true };

	/* An AF_UNIX stream, read after every call like the TCP one. */
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	fcntl(sv[0], F_SETFL, O_NONBLOCK);
	add_pool(sv[1], NULL, 0, sv[0], true, 0);
	pool[npool - 1].conn = true;
	CHECK(npool <= NDEST);

	CHECK(pipe(junk_pipe) == 0);
	closed_fd = dup(junk_pipe[0]);
	close(closed_fd);
	for (int i = 0; i < MAXLEN; i++)
		payload[i] = (unsigned char)(i * 7 + 3);
}

/* ------------------------------------------------------------------------------------------
 * The xdp mode's network (root only): the whole process moves to a network namespace of its
 * own (unshare, before the pool is made, so the loopback pool lives there too, with `lo` up),
 * where a veth pair has one end, XDP_IF (10.99.0.1/24); its peer (10.99.0.2/24) is in a
 * second namespace, so that 10.99.0.2 is not a local address for the sender (the backend would
 * send it by the kernel's path) and the frames the xdp backend hands to XDP_IF arrive at the
 * peer and go up its stack to the receivers bound there (sockets keep their namespace). Both
 * MAC addresses are fixed and the sender's neighbour entry is permanent: frames from the first
 * send on, never waiting for ARP. Without it (not root, no veth), xdp mode inputs run with
 * another backend (ms_ctx_new falls back: no interface), and the pool has no veth entries.
 */
#define XDP_IF "msfz0"
#define XDP_PEER_IF "msfz1"
static bool have_veth;

static bool run_ip(const char *const *argv)
{
	pid_t pid;
	if (posix_spawn(&pid, "/sbin/ip", NULL, NULL, (char *const *)argv, NULL) != 0 &&
	    posix_spawn(&pid, "/usr/sbin/ip", NULL, NULL, (char *const *)argv, NULL) != 0 &&
	    posix_spawnp(&pid, "ip", NULL, NULL, (char *const *)argv, NULL) != 0)
		return false;
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return false;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

#define IP(...) run_ip((const char *const[]){ "ip", __VA_ARGS__, NULL })

/* Into a namespace of our own, lo up; false if that cannot be (then the thread is back in
 * the namespace it was in). */
static bool new_netns(void)
{
	int was = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (was < 0)
		return false;
	bool ok = unshare(CLONE_NEWNET) == 0;
	if (ok && !IP("link", "set", "lo", "up")) {
		CHECK(setns(was, CLONE_NEWNET) == 0);
		ok = false;
	}
	close(was);
	return ok;
}

/* The namespaces and the veth pair. The thread (and so the process: the library's threads
 * are made later, by this one) ends in the sender's namespace, with *peer_ns the peer's (or
 * -1 without a veth: not root, no veth driver). false: not even a namespace. */
static bool setup_netns(int *peer_ns)
{
	*peer_ns = -1;
	if (!new_netns())
		return false;
	int ns1 = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	CHECK(ns1 >= 0);
	if (!new_netns()) {
		close(ns1);
		return true; /* still in ns1 */
	}
	int ns2 = open("/proc/thread-self/ns/net", O_RDONLY); /* inherited by ip: its path */
	CHECK(ns2 >= 0 && setns(ns1, CLONE_NEWNET) == 0);
	char ns2path[64];
	snprintf(ns2path, sizeof(ns2path), "/proc/self/fd/%d", ns2);
	/* XDP_QUEUES queues: one per xdp context (a queue takes one AF_XDP socket). */
	char nq[16];
	snprintf(nq, sizeof(nq), "%d", XDP_QUEUES);
	bool ok = IP("link", "add", XDP_IF, "address", "02:00:00:99:00:01", "numtxqueues", nq,
		     "numrxqueues", nq, "type", "veth", "peer", "name", XDP_PEER_IF, "address",
		     "02:00:00:99:00:02", "numtxqueues", nq, "numrxqueues", nq, "netns", ns2path) &&
		  IP("addr", "add", "10.99.0.1/24", "dev", XDP_IF) &&
		  IP("link", "set", XDP_IF, "up") &&
		  IP("neigh", "replace", "10.99.0.2", "lladdr", "02:00:00:99:00:02", "dev", XDP_IF,
		     "nud", "permanent");
	if (ok) {
		CHECK(setns(ns2, CLONE_NEWNET) == 0);
		ok = IP("addr", "add", "10.99.0.2/24", "dev", XDP_PEER_IF) &&
		     IP("link", "set", XDP_PEER_IF, "up") &&
		     IP("neigh", "replace", "10.99.0.1", "lladdr", "02:00:00:99:00:01", "dev",
			XDP_PEER_IF, "nud", "permanent");
		CHECK(setns(ns1, CLONE_NEWNET) == 0);
	}
	close(ns1);
	if (!ok) {
		close(ns2);
		return true;
	}
	*peer_ns = ns2;
	return true;
}

/* The veth destinations, after the base pool: an unconnected UDP socket with six addresses
 * (up to 16 copies each: a fan-out can want more than the 64 frames) and two connected UDP
 * sockets, all to receivers bound to 10.99.0.2 in the peer namespace. */
static void setup_veth_pool(int peer_ns)
{
	int ns1 = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	CHECK(ns1 >= 0);
	struct sockaddr_in ra[8];
	int rx[8];
	CHECK(setns(peer_ns, CLONE_NEWNET) == 0);
	for (int i = 0; i < 8; i++) {
		rx[i] = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
		CHECK(rx[i] >= 0);
		ra[i] = (struct sockaddr_in){ .sin_family = AF_INET,
					      .sin_addr.s_addr = htonl(0x0a630002) }; /* 10.99.0.2 */
		CHECK(bind(rx[i], (struct sockaddr *)&ra[i], sizeof(ra[i])) == 0);
		socklen_t l = sizeof(ra[i]);
		CHECK(getsockname(rx[i], (struct sockaddr *)&ra[i], &l) == 0);
	}
	CHECK(setns(ns1, CLONE_NEWNET) == 0);
	close(ns1);
	close(peer_ns);
	int vshared = socket(AF_INET, SOCK_DGRAM, 0);
	for (int i = 0; i < 6; i++) {
		add_pool(vshared, &ra[i], sizeof(ra[i]), rx[i], false, 65507);
		pool[npool - 1].veth = true;
	}
	for (int i = 6; i < 8; i++) {
		int tx = socket(AF_INET, SOCK_DGRAM, 0);
		CHECK(connect(tx, (struct sockaddr *)&ra[i], sizeof(ra[i])) == 0);
		add_pool(tx, NULL, 0, rx[i], false, 65507);
		pool[npool - 1].veth = true;
	}
	CHECK(npool <= NDEST);
	have_veth = true;
}

/* Datagrams (or bytes, for the stream) waiting at a receiver; drains it. Loopback delivery
 * may finish after the send returns (the kernel can defer it to ksoftirqd), so wait up to a
 * second for at least `want` of them. */
static long drain(const struct pdest *p, size_t expect_len, long want)
{
	static unsigned char buf[MAXLEN + 1];
	long count = 0;
	for (;;) {
		ssize_t r = recv(p->rx, buf, sizeof(buf), MSG_DONTWAIT);
		if (r < 0) {
			CHECK(errno == EAGAIN);
			struct pollfd pfd = { .fd = p->rx, .events = POLLIN };
			if (count < want && poll(&pfd, 1, 1000) == 1)
				continue;
			return count;
		}
		if (p->stream) {
			count += r;
		} else {
			CHECK((size_t)r == expect_len);
			/* Byte for byte this call's message: payload[0..len) with its sequence
			 * number (a datagram of an earlier call differs there). */
			CHECK(memcmp(buf, payload, (size_t)r) == 0);
			count++;
		}
	}
}

struct in {
	const uint8_t *d;
	size_t n;
};

static unsigned take(struct in *in)
{
	if (!in->n)
		return 0;
	in->n--;
	return *in->d++;
}

/* The model: which pool entry each id stands for, and what its backlog holds. */
static int model[256];
static int nmodel;
static uint32_t held[256];
static bool kpath[256], kpath_all; /* ms_group_kernel_path's setting per id, and for new ids */
static size_t live;
static unsigned policy; /* the group's slow-consumer policy */

/* The context's configuration, as far as the checks need it. */
static unsigned workers, ts_mode; /* ts_mode: 0 off, 1 first and last, 2 every destination */
static bool rotating;
static uint32_t seq; /* the number the next call's message starts with */
/* The group's order as the last results gave it (valid until the group changes). */
static int last_ids[NDEST * 8];
static size_t nlast;
static bool order_known;
/* The position the last fan-out started at (MS_CFG_ROTATE: known once a sample showed it,
 * until the group changes), and the last sample's call time. */
static size_t rot_start;
static bool rot_known;
static uint64_t last_call_ns;
static bool sampled; /* the last call's fan-out requested stamps (a new sample came back) */

static void group_changed(void)
{
	order_known = false;
	if (rotating)
		rot_known = false;
}

/* ms_stats' failure classes, as include/multisend.h lists them. */
enum { C_AGAIN, C_NOBUFS, C_MSGSIZE, C_UNREACH, C_CONN, C_BADF, C_OTHER };
static int err_class(int err)
{
	switch (err) {
	case EAGAIN:
		return C_AGAIN;
	case ENOBUFS:
	case ENOMEM:
		return C_NOBUFS;
	case EMSGSIZE:
		return C_MSGSIZE;
	case ECONNREFUSED:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case ENETDOWN:
	case EHOSTDOWN:
		return C_UNREACH;
	case EPIPE:
	case ECONNRESET:
	case ENOTCONN:
	case EDESTADDRREQ:
		return C_CONN;
	case EBADF:
	case ENOTSOCK:
		return C_BADF;
	default:
		return C_OTHER;
	}
}

static uint64_t err_counter(const struct ms_stats *s, int c)
{
	const uint64_t v[] = { s->err_again, s->err_nobufs,
			       s->err_msgsize, s->err_unreach, s->err_conn, s->err_badf,
			       s->err_other };
	return v[c];
}

/* Read what the small stream's receiver has, waiting up to a second for all it must get. */
static void drain_lazy(void)
{
	lazy_got += drain(&pool[lazy_q], 0, lazy_expect - lazy_got);
	if (lazy_got != lazy_expect)
		fprintf(stderr, "small stream: got %ld bytes, results promise %ld\n", lazy_got, lazy_expect);
	CHECK(lazy_got == lazy_expect);
}

/* A destination's outcome as the checks below read it: ms_send's result with what the group's
 * record (ms_group_slow_results) says the policy did, or an ms_group_flush entry. */
struct fres {
	int id;
	int status;
	uint32_t flags;
	uint32_t backlog;
};

static void fres_policy(struct fres *f, const struct ms_slow_result *e)
{
	CHECK(e->backlog <= UINT32_MAX);
	f->flags = e->flags;
	f->backlog = (uint32_t)e->backlog;
}

/* res[0, n) of the call just made, with the group's record of it, into out. */
static void merge_record(struct ms_group *g, const struct ms_result *res, size_t n,
			 struct fres *out)
{
	struct ms_slow_result sr[NDEST * 8];
	int nsr = ms_group_slow_results(g, sr, NDEST * 8), j = 0;
	CHECK(nsr >= 0 && (size_t)nsr <= n);
	for (size_t k = 0; k < n; k++) {
		out[k] = (struct fres){ .id = res[k].id, .status = res[k].status };
		if (j < nsr && sr[j].pos == k) {
			CHECK(sr[j].id == res[k].id && sr[j].status == res[k].status);
			fres_policy(&out[k], &sr[j++]);
		}
	}
	CHECK(j == nsr);
}

/* ms_group_flush, its entries into out. */
static int flush_record(struct ms_group *g, struct fres *out)
{
	struct ms_slow_result sr[NDEST * 8];
	for (size_t k = 0; k < NDEST * 8; k++)
		sr[k] = (struct ms_slow_result){ .id = -7, .status = -7, .flags = 7, .backlog = 7 };
	int n = ms_group_flush(g, sr, NDEST * 8);
	/* Entries past the count are never written. */
	for (size_t k = n > 0 ? (size_t)n : 0; k < NDEST * 8; k++)
		CHECK(sr[k].id == -7 && sr[k].status == -7 && sr[k].flags == 7 && sr[k].backlog == 7);
	for (int k = 0; k < n && k < NDEST * 8; k++) {
		out[k] = (struct fres){ .id = sr[k].id, .status = sr[k].status };
		fres_policy(&out[k], &sr[k]);
	}
	return n;
}

/*
 * Check one result of a destination the policy may manage, update the model, and return the
 * bytes (streams) or messages that must arrive at its receiver because of this call: what
 * the kernel took of this message plus what it took from the backlog.
 */
static long managed_result(const struct fres *r, size_t len, bool flush, long discarded)
{
	const struct pdest *p = &pool[model[r->id]];
	bool managed = policy != MS_SLOW_BLOCK && p->conn;
	uint32_t f = r->flags;
	CHECK((f & ~(uint32_t)(MS_RES_QUEUED | MS_RES_DROPPED | MS_RES_REMOVED)) == 0);
	if (!managed) {
		CHECK(f == 0 && r->backlog == 0);
		if (!p->stream)
			return r->status >= 0;
		return r->status > 0 ? r->status : 0;
	}
	CHECK(__builtin_popcount(f) <= 1 || f == (MS_RES_QUEUED | MS_RES_REMOVED));
	long taken = 0, queued = 0;
	if (flush) {
		CHECK(!(f & MS_RES_DROPPED));
		CHECK(held[r->id] > 0);
		CHECK(!!(f & MS_RES_QUEUED) == (r->backlog > 0));
	} else {
		taken = r->status > 0 ? r->status : 0;
		if (f & MS_RES_QUEUED) {
			CHECK(r->status >= 0 && (size_t)r->status < len);
			CHECK(policy != MS_SLOW_DISCONNECT);
			queued = (long)len - taken;
		}
		if (f & MS_RES_DROPPED)
			CHECK(r->status < 0 && policy != MS_SLOW_DISCONNECT);
	}
	if (f & MS_RES_REMOVED) {
		CHECK(r->backlog == 0);
		model[r->id] = -1;
		live--;
	}
	/* What left the backlog was either sent or, if the stream failed or was removed,
	 * discarded (the caller knows how much from the counters). */
	long flushed = (long)held[r->id] + queued - (long)r->backlog - discarded;
	if (flush && r->status >= 0)
		CHECK(flushed == r->status);
	CHECK(flushed >= 0);
	held[r->id] = (f & MS_RES_REMOVED) ? 0 : r->backlog;
	if (!p->stream)
		return (r->status >= 0 && !flush && !(f & MS_RES_QUEUED)) + (flushed ? 1 : 0);
	return flush ? flushed : taken + flushed;
}

/* A slow-consumer configuration from the input: valid or not, with the rule checked here. */
static void do_set_slow(struct ms_group *g, struct in *in)
{
	unsigned b = take(in);
	struct ms_slow_config c = { .size = sizeof(c), .policy = b % 5 };
	if (b & 0x80)
		c.overflow = take(in) % 4;
	if (b & 0x40)
		c.queue_limit = (take(in) << 12) | ((b & 0x20) ? (1u << 30) + take(in) % 2 : 0);
	bool busy = false;
	for (int k = 0; k < nmodel; k++)
		busy |= model[k] >= 0 && held[k] > 0;
	bool valid = c.policy <= MS_SLOW_DISCONNECT && c.overflow != MS_SLOW_QUEUE &&
		     c.queue_limit <= (1u << 30) &&
		     (c.policy == MS_SLOW_QUEUE || (!c.overflow && !c.queue_limit));
	int r = ms_group_set_slow(g, &c);
	CHECK(r == (!valid ? -EINVAL : busy ? -EBUSY : 0));
	if (!r)
		policy = c.policy;
}

/* More than one stream failed in one call: which one's backlog was discarded and which one's
 * sent is unknowable from outside, so read every stream dry and start counting again. */
static void read_dry(const struct pdest *p)
{
	/* Bytes the kernel took may still sit in the sender's buffer, waiting for the tiny
	 * receive window: read until nothing has come for 100 ms. */
	for (;;) {
		if (drain(p, 0, 0) > 0)
			continue;
		struct pollfd pfd = { .fd = p->rx, .events = POLLIN };
		if (poll(&pfd, 1, 100) != 1)
			return;
	}
}

static void forget_streams(void)
{
	for (int q = 0; q < npool; q++)
		if (pool[q].stream)
			read_dry(&pool[q]);
	lazy_expect = lazy_got = 0;
}

static void do_flush(struct ms_ctx *ctx, struct ms_group *g)
{
	struct fres res[NDEST * 8];
	size_t before = ms_group_size(g);
	struct ms_stats s0 = { .size = sizeof(s0) }, s1 = { .size = sizeof(s1) };
	CHECK(ms_ctx_stats(ctx, &s0) == 0);
	int n = flush_record(g, res);
	CHECK(ms_ctx_stats(ctx, &s1) == 0);
	CHECK(n >= 0 && (size_t)n <= before);
	long discarded = (long)(s1.backlog_discarded - s0.backlog_discarded);
	int failing = 0;
	for (int k = 0; k < n; k++)
		failing += res[k].status < 0 || (res[k].flags & MS_RES_REMOVED);
	for (int k = 0; k < n; k++) {
		CHECK(res[k].id >= 0 && res[k].id < nmodel && model[res[k].id] >= 0);
		bool lazy = pool[model[res[k].id]].lazy;
		bool fails = res[k].status < 0 || (res[k].flags & MS_RES_REMOVED);
		long arrive = failing > 1 ? 0 : managed_result(&res[k], 0, true, fails ? discarded : 0);
		if (failing > 1) {
			model[res[k].id] = (res[k].flags & MS_RES_REMOVED) ? -1 : model[res[k].id];
			live -= (res[k].flags & MS_RES_REMOVED) != 0;
			held[res[k].id] = res[k].backlog;
			continue;
		}
		if (lazy)
			lazy_expect += arrive;
		else
			CHECK(drain(&pool[model[res[k].id]], 0, arrive) == arrive);
	}
	if (failing > 1)
		forget_streams();
	if (ms_group_size(g) != before)
		group_changed();
	CHECK(ms_group_size(g) == live);
	size_t total = 0;
	for (int k = 0; k < nmodel; k++)
		total += model[k] >= 0 ? held[k] : 0;
	CHECK(ms_group_backlog(g) == total);
}

/* Every counter a call moves, from its results (the whole group, in group order). */
static void check_counters(const struct ms_stats *b, const struct ms_stats *a,
			   const struct fres *res, size_t size, size_t len, bool managed)
{
	uint64_t acc = 0, part = 0, fail = 0, bytes = 0, cls[C_OTHER + 1] = { 0 };
	uint64_t queued = 0, dropped = 0, removed = 0;
	for (size_t k = 0; k < size; k++) {
		int st = res[k].status;
		uint32_t f = res[k].flags;
		if (f & MS_RES_QUEUED) {
			part++;
			bytes += st > 0 ? (uint64_t)st : 0;
		} else if (st >= 0) {
			bytes += (uint64_t)st;
			if ((size_t)st == len)
				acc++;
			else
				part++;
		} else {
			fail++;
			cls[err_class(-st)]++;
		}
		queued += (f & MS_RES_QUEUED) != 0;
		dropped += (f & MS_RES_DROPPED) != 0;
		removed += (f & MS_RES_REMOVED) != 0;
	}
	CHECK(a->dests_accepted - b->dests_accepted == acc);
	CHECK(a->dests_partial - b->dests_partial == part);
	CHECK(a->dests_failed - b->dests_failed == fail);
	for (int c = 0; c <= C_OTHER; c++)
		CHECK(err_counter(a, c) - err_counter(b, c) == cls[c]);
	CHECK(a->slow_queued - b->slow_queued == queued);
	CHECK(a->slow_dropped - b->slow_dropped == dropped);
	CHECK(a->slow_removed - b->slow_removed == removed);
	/* Backlogs sent first add bytes that no status of this message counts. */
	if (managed)
		CHECK(a->bytes - b->bytes >= bytes);
	else
		CHECK(a->bytes - b->bytes == bytes);
	CHECK(a->syscalls >= b->syscalls);
}

static bool is_udp(const struct fres *r)
{
	return pool[model[r->id]].maxdgram == 65507; /* AF_INET datagram: the stampable kind */
}

/*
 * Order and rotation, after a call that attempted size destinations. Results stay in group
 * order: the same sequence of ids as the call before while the group has not changed. The
 * position sent first is 0 without MS_CFG_ROTATE and, with it, one more than the last
 * fan-out's while the group has not changed; a timestamp sample shows it (the stamped
 * destinations in the order they were sent, with their positions in the group order).
 */
static void check_order(struct ms_group *g, const struct fres *res, size_t size,
			bool managed)
{
	if (res) {
		if (order_known && nlast == size)
			for (size_t k = 0; k < size; k++)
				CHECK(res[k].id == last_ids[k]);
		CHECK(!order_known || nlast == size);
		for (size_t k = 0; k < size; k++)
			last_ids[k] = res[k].id;
		nlast = size;
		order_known = true;
	}
	bool have = !rotating || rot_known;
	size_t start = !rotating ? 0 : rot_known ? (rot_start + 1) % size : 0;
	rot_start = start;
	if (!ts_mode)
		return;
	/* Account this call's sample, and read it (if this call was stamped at all: a sample
	 * without a stampable destination leaves the previous one in place). */
	CHECK(ms_group_ts_collect(g) >= 0);
	static struct ms_ts_dest t[NDEST * 8];
	uint64_t call_ns = 0;
	int nt = ms_group_ts_last(g, t, NDEST * 8, &call_ns);
	CHECK(nt >= 0);
	if (!nt || call_ns == last_call_ns)
		return; /* no new sample: the last one (of a group that may have been larger) */
	last_call_ns = call_ns;
	sampled = true;
	CHECK((size_t)nt <= size);
	if (!res)
		return;
	for (int i = 0; i < nt; i++)
		CHECK(t[i].pos < size && res[t[i].pos].id == t[i].id && is_udp(&res[t[i].pos]));
	size_t parts = 1;
	if (workers > 1 && !managed && size / 8 >= 2 && !xdp_ctx) /* xdp: never split */
		parts = size / 8 < workers ? size / 8 : workers;
	if (ts_mode == 1 && parts > 1) {
		/* Each part's first and last, in part order (where each part ends is the
		 * library's choice): part 0 starts at the start. */
		if (have && is_udp(&res[start]))
			CHECK(t[0].pos == start);
		for (int i = 0; i < nt; i++)
			for (int j = 0; j < i; j++)
				CHECK(t[i].pos != t[j].pos);
		CHECK((size_t)nt <= 2 * parts);
		return;
	}
	/* The starts that explain the sample. */
	size_t match = 0, found = 0;
	for (size_t r = 0; r < size; r++) {
		size_t want[NDEST * 8], nw = 0;
		if (ts_mode == 2) {
			for (size_t i = 0; i < size; i++)
				if (is_udp(&res[(r + i) % size]))
					want[nw++] = (r + i) % size;
		} else {
			if (is_udp(&res[r]))
				want[nw++] = r;
			size_t z = (r + size - 1) % size;
			if (size > 1 && is_udp(&res[z]))
				want[nw++] = z;
		}
		bool ok = nw == (size_t)nt;
		for (size_t i = 0; ok && i < nw; i++)
			ok = t[i].pos == want[i];
		if (ok) {
			match++;
			found = r;
			if (have && r == start)
				break;
		}
	}
	if (have) {
		if (!match || (found != start))
			fprintf(stderr, "fuzz-group: fan-out started at %zu (%zu starts fit), expected %zu; "
				"size %zu rotate %d workers %u ts %u\n", found, match, start, size,
				rotating, workers, ts_mode);
		CHECK(match && found == start);
	} else if (match == 1) {
		rot_start = found;
		rot_known = true;
	}
}

/* ms_group_kernel_path on an id from the input (MS_GROUP_ALL among them), on or off. */
static void do_kernel_path(struct ms_group *g, struct in *in, bool on)
{
	int id = (int)take(in) - 9; /* -9..246: a few invalid negatives, MS_GROUP_ALL (-1) */
	int r = ms_group_kernel_path(g, id, on);
	if (id == MS_GROUP_ALL) {
		CHECK(r == 0);
		kpath_all = on;
		for (int k = 0; k < nmodel; k++)
			kpath[k] = on;
	} else if (id < 0) {
		CHECK(r == -EINVAL);
	} else if (id < nmodel && model[id] >= 0) {
		CHECK(r == 0);
		kpath[id] = on;
	} else {
		CHECK(r == -ENOENT);
	}
}

static uint64_t xdp_fallbacks(const struct ms_stats *s)
{
	return s->xdp_fallback_local + s->xdp_fallback_iface + s->xdp_fallback_mtu +
	       s->xdp_fallback_route + s->xdp_fallback_neigh + s->xdp_fallback_other;
}

/*
 * The xdp counters of one call that attempted size destinations (r of them whole), from
 * lib/be/xdp.c's xdp_send: the xdp backend sends the fan-out whole in one xdp_send (no worker
 * splits it), where every position is exactly one of
 *   - a frame written (xdp_frames counts it, unless the kick failed for good: then its status
 *     is the kick's error and no counter moves),
 *   - MS_SEND_DONTWAIT with no free frame: status -EAGAIN, no counter moves,
 *   - the kernel's path: one xdp_fallback_* counter by reason, the loop executor's status.
 * So size - frames - fallbacks destinations are counted nowhere, and each has a negative
 * status (-EAGAIN only with MS_SEND_DONTWAIT). A destination that is not UDP over the veth
 * (loopback UDP: local; AF_UNIX, TCP: other) or that is on the kernel's path (kernel_path on:
 * other) always goes by the kernel's path; frames only carry veth destinations with the
 * bypass allowed, and only those that took the whole message. Here the veth's route is
 * direct (no route or interface fallback) and its neighbour permanent (no neighbour fallback);
 * a message over the MTU's payload (1472) goes by the kernel's path (mtu), and one that fits,
 * not stamped (control messages go by the kernel's path), goes as a frame to every allowed
 * veth destination unless one failed.
 */
static void check_xdp(const struct ms_stats *b, const struct ms_stats *a, const struct fres *res,
		      size_t size, int r, size_t len, unsigned flags, bool managed)
{
	uint64_t fr = a->xdp_frames - b->xdp_frames, fb = xdp_fallbacks(a) - xdp_fallbacks(b);
	if (!xdp_ctx) {
		/* No xdp backend (and AUTO measures none: no interface named): nothing moves. */
		CHECK(fr == 0 && fb == 0 && a->xdp_kicks == b->xdp_kicks);
		return;
	}
	xdp_calls_total++;
	xdp_frames_total += fr;
	size_t allowed = 0, forced = 0, loop_udp = 0, held_back = 0;
	for (int k = 0; k < nmodel; k++) {
		if (model[k] < 0)
			continue;
		const struct pdest *p = &pool[model[k]];
		held_back += managed && p->conn;
		if (p->veth && !kpath[k])
			allowed++;
		else
			forced++;
		loop_udp += !p->veth && !kpath[k] && p->maxdgram == 65507;
	}
	CHECK(allowed + forced == size);
	uint64_t unaccounted = size - (fr + fb);
	CHECK(fr + fb <= size);
	CHECK(fr <= allowed && fb + held_back >= forced);
	/* Each has a negative status, or is a connection-oriented destination whose backlog the
	 * policy sends first (lib/api/send.c's execute_around leaves it out of the backend's
	 * ranges: the core queues the message for it). */
	CHECK(unaccounted <= size - (size_t)r + held_back);
	CHECK(a->xdp_fallback_iface == b->xdp_fallback_iface);
	CHECK(a->xdp_fallback_route == b->xdp_fallback_route);
	CHECK(a->xdp_fallback_neigh == b->xdp_fallback_neigh);
	CHECK(a->xdp_fallback_local - b->xdp_fallback_local == loop_udp);
	if (len > 1472)
		CHECK(fr == 0 && a->xdp_fallback_mtu - b->xdp_fallback_mtu == allowed);
	else
		CHECK(a->xdp_fallback_mtu == b->xdp_fallback_mtu);
	CHECK(a->xdp_kicks - b->xdp_kicks <= a->syscalls - b->syscalls);
	if (fr)
		CHECK(a->xdp_kicks > b->xdp_kicks);
	bool failed = (size_t)r != size;
	if (res) {
		size_t veth_whole = 0, veth_failed = 0;
		for (size_t k = 0; k < size; k++) {
			const struct pdest *p = &pool[model[res[k].id]];
			if (!p->veth || kpath[res[k].id])
				continue;
			int st = res[k].status;
			veth_whole += st == (int)len;
			veth_failed += st < 0;
			if (!(flags & MS_SEND_DONTWAIT))
				CHECK(st != -EAGAIN);
			/* The veth never goes down: a frame's kick does not fail for good, and the
			 * kernel's path (the MTU, stamps) fails only for a datagram too large or
			 * memory. */
			if (st < 0 && st != -EAGAIN && !(st == -EMSGSIZE && len > 65507) &&
			    st != -ENOBUFS && st != -ENOMEM)
				fprintf(stderr, "xdp: a veth destination failed with %d (%s), "
					"len %zu\n", st, strerror(-st), len);
			CHECK(st >= 0 || st == -EAGAIN || (st == -EMSGSIZE && len > 65507) ||
			      st == -ENOBUFS || st == -ENOMEM);
		}
		if (fr > veth_whole || unaccounted > veth_failed + held_back) {
			fprintf(stderr, "xdp: %llu frames, %llu by the kernel's path, %zu "
				"attempted, %d whole; veth (bypass allowed): %zu whole, %zu "
				"failed; len %zu flags %u\n",
				(unsigned long long)fr, (unsigned long long)fb, size, r, veth_whole,
				veth_failed, len, flags);
			for (size_t k = 0; k < size; k++)
				fprintf(stderr, "  id %d pool %d veth %d kpath %d status %d\n",
					res[k].id, model[res[k].id], pool[model[res[k].id]].veth,
					kpath[res[k].id], res[k].status);
		}
		CHECK(fr <= veth_whole && unaccounted <= veth_failed + held_back);
		failed = veth_failed > 0;
	}
	if (!failed)
		CHECK(unaccounted <= held_back);
	if (!failed && !ts_mode && len <= 1472)
		CHECK(fr == allowed);
}

static void do_send(struct ms_ctx *ctx, struct ms_group *g, struct in *in, bool vector)
{
	struct ms_result sent[NDEST * 8];
	struct fres res[NDEST * 8];
	struct iovec iov[10];
	int iovcnt = 1;
	/* Mostly small messages (cheap, so many executions), sometimes the sizes at which UDP
	 * and the other kinds differ. */
	static const size_t edges[] = { 0, 1, 65507, 65508, 65527, 65528, MAXLEN };
	unsigned raw = (take(in) << 8) | take(in);
	size_t len = raw >= 0xfff0 ? edges[raw % 7] : raw % 2048;
	/* Mostly valid flags: none or MS_SEND_DONTWAIT, sometimes any byte. */
	unsigned fb = take(in);
	unsigned flags = fb & 3 ? (fb >> 2) & MS_SEND_DONTWAIT : take(in);
	/* Results are needed to know what the small stream must receive. */
	bool lazy_member = false;
	for (int q = 0; q < nmodel; q++)
		lazy_member |= model[q] >= 0 && pool[model[q]].lazy;
	bool with_res = (take(in) & 1) || policy != MS_SLOW_BLOCK || lazy_member;
	int expect = 0;

	if (vector) {
		unsigned c = take(in);
		iovcnt = c < 200 ? (int)(c % 9) : c < 250 ? (int)c * 8 : -1; /* some over IOV_MAX */
		size_t off = 0;
		len = 0;
		for (int k = 0; k < iovcnt && k < 10; k++) {
			size_t l = ((size_t)take(in) * 97) % 8000;
			bool null_base = take(in) == 0xff;
			if (off + l > MAXLEN)
				l = 0;
			iov[k].iov_base = null_base ? NULL : payload + off;
			iov[k].iov_len = l;
			if (null_base && l)
				expect = -EINVAL;
			off += l;
			len += l;
		}
		if (iovcnt < 0 || iovcnt > IOV_MAX)
			expect = -EINVAL;
		else if (iovcnt > 10)
			iovcnt = 10;
	}
	if (flags & ~MS_SEND_ALL_FLAGS)
		expect = -EINVAL;

	bool stuck_member = false;
	for (int q = 0; q < nmodel; q++)
		stuck_member |= model[q] >= 0 && pool[model[q]].stuck;
	if (stuck_member)
		flags |= MS_SEND_DONTWAIT; /* a send that waited for it would never return */
	/* A new sequence number at the message's start: a datagram of an earlier call that
	 * arrives now (or twice) does not match. */
	seq++;
	memcpy(payload, &seq, sizeof(seq));
	/* A group with a policy and a connection-oriented destination: backlogs move bytes, and
	 * the call is never split among workers. */
	bool managed = false;
	for (int q = 0; q < nmodel; q++)
		managed |= policy != MS_SLOW_BLOCK && model[q] >= 0 && pool[model[q]].conn;

	struct ms_stats before = { .size = sizeof(before) }, after = { .size = sizeof(after) };
	CHECK(ms_ctx_stats(ctx, &before) == 0);
	size_t size = ms_group_size(g); /* a policy may remove destinations during the call */
	/* Entries past the group's size are never written. */
	for (size_t k = size; k < NDEST * 8; k++)
		sent[k] = (struct ms_result){ .id = -7, .status = -7 };
	int r = vector ? ms_sendv(g, iovcnt >= 0 && iovcnt <= 10 ? iov : NULL, iovcnt, flags,
				  with_res ? sent : NULL)
		       : ms_send(g, payload, len, flags, with_res ? sent : NULL);
	CHECK(ms_ctx_stats(ctx, &after) == 0);
	for (size_t k = size; k < NDEST * 8; k++)
		CHECK(sent[k].id == -7 && sent[k].status == -7);
	if (!expect && with_res)
		merge_record(g, sent, size, res);
	if (expect) {
		CHECK(r == expect);
		CHECK(after.dests_attempted == before.dests_attempted);
		CHECK(after.fanouts == before.fanouts);
	} else {
		CHECK(r >= 0 && (size_t)r <= size);
		CHECK(after.dests_attempted - before.dests_attempted == size);
		CHECK(after.dests_accepted - before.dests_accepted == (uint64_t)r);
		CHECK(after.slow_removed - before.slow_removed ==
		      size - ms_group_size(g)); /* the policy's removals, all reported */
		CHECK(after.fanouts - before.fanouts == (size > 0));
		CHECK(after.dests_accepted + after.dests_partial + after.dests_failed -
			      (before.dests_accepted + before.dests_partial + before.dests_failed) ==
		      size);
	}
	if (!expect && with_res)
		check_counters(&before, &after, res, size, len, managed);
	if (!expect)
		check_xdp(&before, &after, with_res ? res : NULL, size, r, len, flags, managed);
	else
		CHECK(after.xdp_frames == before.xdp_frames &&
		      xdp_fallbacks(&after) == xdp_fallbacks(&before));
	sampled = false;
	if (!expect && size > 0)
		check_order(g, with_res ? res : NULL, size, managed);
	if (!expect) {
		/* Zero copy: io_uring, one buffer of at least zc_min (4096 by default), a fan-out
		 * with no stamp requested (a sample with no UDP destination at a stamped place
		 * requests none), UDP destinations alone. */
		uint64_t zc = after.zc_sends - before.zc_sends;
		size_t udp = 0;
		for (int q = 0; q < nmodel; q++)
			udp += model[q] >= 0 && pool[model[q]].maxdgram == 65507;
		if ((ms_ctx_backend(ctx) != MS_BACKEND_IO_URING && !auto_mode) || len < 4096 || sampled ||
		    (vector && iovcnt != 1))
			CHECK(zc == 0);
		CHECK(zc <= udp);
	}
	if (!expect && ms_group_size(g) != size)
		group_changed(); /* the policy removed some */

	/* Receivers: what arrived must be what the results say, per receiver. */
	long want[NDEST] = { 0 };
	long discarded = (long)(after.backlog_discarded - before.backlog_discarded);
	int failing = 0;
	if (!expect && with_res)
		for (size_t k = 0; k < size; k++)
			failing += pool[model[res[k].id]].conn && policy != MS_SLOW_BLOCK &&
				   ((res[k].status < 0 && !(res[k].flags & MS_RES_DROPPED)) ||
				    (res[k].flags & MS_RES_REMOVED));
	if (failing > 1)
		discarded = 0; /* attributed to nobody; forget_streams() below */
	if (!expect && with_res) {
		bool seen[256] = { false };
		int whole = 0;
		for (size_t k = 0; k < size; k++) {
			CHECK(res[k].id >= 0 && res[k].id < nmodel && model[res[k].id] >= 0);
			CHECK(!seen[res[k].id]);
			seen[res[k].id] = true;
			int q0 = model[res[k].id];
			const struct pdest *p = &pool[q0];
			if (res[k].status == (int)len && !(res[k].flags & MS_RES_QUEUED))
				whole++;
			else if (!(res[k].flags & MS_RES_QUEUED))
				CHECK(res[k].status < 0 || (p->stream && res[k].status < (int)len));
			if (res[k].status == -EMSGSIZE)
				CHECK(p->maxdgram && len > (size_t)p->maxdgram);
			if (p->stuck)
				CHECK(res[k].status == -EAGAIN && res[k].flags == 0);
			bool fails = p->conn && policy != MS_SLOW_BLOCK &&
				     ((res[k].status < 0 && !(res[k].flags & MS_RES_DROPPED)) ||
				      (res[k].flags & MS_RES_REMOVED));
			long arrive = managed_result(&res[k], len, false, fails ? discarded : 0);
			if (failing > 1)
				continue;
			if (p->lazy) {
				lazy_expect += arrive;
				continue;
			}
			/* Receivers are identified by fd, several pool entries may share one. */
			for (int q = 0; q < npool; q++)
				if (pool[q].rx == p->rx) {
					want[q] += arrive;
					break;
				}
		}
		CHECK(whole == r);
	}
	int outq = 0;
	CHECK(ioctl(pool[stuck_q].fd, SIOCOUTQ, &outq) == 0 && outq == stuck_outq);
	if (failing > 1) {
		forget_streams();
		for (int q = 0; q < npool; q++)
			if (!pool[q].stream && !pool[q].stuck)
				(void)drain(&pool[q], len, 0);
		return;
	}
	for (int q = 0; q < npool; q++) {
		if (pool[q].lazy || pool[q].stuck)
			continue;
		bool first = true;
		for (int e = 0; e < q; e++)
			first &= pool[e].rx != pool[q].rx;
		if (!first)
			continue;
		long got = drain(&pool[q], len, want[q]);
		if (!expect && with_res && got != want[q])
			fprintf(stderr, "receiver %d (stream %d): got %ld, results promise %ld; len %zu "
				"flags %u backend %s\n", q, pool[q].stream, got, want[q], len, flags,
				ms_backend_name(ms_ctx_backend(ctx)));
		if (!expect && with_res)
			CHECK(got == want[q]);
		if (expect)
			CHECK(got == 0);
	}
}


/* ------------------------------------------------------------------------------------------
 * Offload (issue #12): inputs whose first byte is 228..239 make a context with
 * MS_CFG_OFFLOAD and the smallest ring (offload_kib = 64: messages of at most 16 KiB, and a
 * few of them fill it), workers 1..4 as the other inputs. There, sends (ops 3 and 4) are
 * chosen by the op byte's bits 3-4: 0 the synchronous do_send above (after settling the
 * posts), 1 and 2 ms_post / ms_postv, 3 a synchronous ms_send / ms_sendv among the posts
 * (it waits for the earlier posts: checked by the order its copies arrive in). Group changes
 * between posts are not settled first (the library waits; each post goes to the group as it
 * was when posted); every other op settles the posts first.
 *
 * Settling (post_settle): ms_ctx_drain, then the whole post log is read and every posted
 * message is accounted destination by destination (a destination with no entry took the whole
 * message), the ms_ctx_stats deltas since the first post must add up over the posted and the
 * synchronous messages, and every receiver must hold exactly those messages' copies, byte for
 * byte, in order (UDP: as a multiset, see post_check_rx).
 */

enum { PMAX = 64, PMEMB = NDEST * 8, RING = 64 << 10, PMAXLEN = RING / 4 };
struct pmsg {
	uint32_t pseq;    /* the sequence number its payload starts with */
	size_t len;
	uint64_t post;    /* ms_post's number; 0 for a synchronous send */
	bool managed;     /* a slow-consumer policy applies to a member */
	int n;
	int id[PMEMB];    /* the members when posted, in no particular order */
	int q[PMEMB];     /* their pool entries */
	int status[PMEMB];
	uint32_t flags[PMEMB];
	bool logged[PMEMB];
};
static struct pmsg pm[PMAX];
static int npm;
static bool post_mode, window;
static struct ms_stats wbefore;
static unsigned w_refused, w_posted, w_waitable;
static unsigned char postbuf[PMAXLEN + 64];
static long rx_pending[NDEST]; /* per receiver (first pool entry with that rx): budget used */
static uint64_t n_refused_total, n_posted_total; /* over the run, printed at exit */
static struct ms_group *wgroup; /* the group posted to (maybe freed since: compared only) */
static bool wgroup_freed;

static int rx_key(int q)
{
	for (int e = 0; e < npool; e++)
		if (pool[e].rx == pool[q].rx)
			return e;
	return q;
}

/* The message with sequence number s, len bytes: payload's pattern with s at its start. */
static void fill_msg(unsigned char *to, uint32_t s, size_t len)
{
	memcpy(to, payload, len);
	memcpy(to, &s, len < sizeof(s) ? len : sizeof(s));
}

static bool policy_managed(void)
{
	bool m = false;
	for (int q = 0; q < nmodel; q++)
		m |= policy != MS_SLOW_BLOCK && model[q] >= 0 && pool[model[q]].conn;
	return m;
}

/* What a receiver can hold unread without a blocking sender waiting for it: AF_UNIX
 * datagrams queue at most net.unix.max_dgram_qlen (10); UDP buffers by truesize; the streams'
 * 4 MiB buffers. */
static long rx_cost(const struct pdest *p, size_t len)
{
	if (p->lazy)
		return 0;
	if (p->stream)
		return (long)len;
	if (p->maxdgram)
		return 2 * ((long)len + 4096);
	return 1;
}
static long rx_budget(const struct pdest *p)
{
	if (p->stream)
		return 1 << 20;
	if (p->maxdgram)
		return udp_big ? 4 << 20 : 100000;
	return 8;
}

static void post_settle(struct ms_ctx *ctx);

/* Open the window (stats before the first message), and make room for a message of len
 * bytes to the current members: settle first if a receiver could not take it unread. */
static void post_prepare(struct ms_ctx *ctx, size_t len)
{
	bool full = npm == PMAX;
	long add[NDEST] = { 0 };
	for (int k = 0; k < nmodel; k++)
		if (model[k] >= 0 && !pool[model[k]].stuck)
			add[rx_key(model[k])] += rx_cost(&pool[model[k]], len);
	for (int q = 0; q < npool; q++)
		full |= add[q] && rx_pending[q] + add[q] > rx_budget(&pool[q]);
	if (full)
		post_settle(ctx);
	if (!window) {
		window = true;
		npm = 0;
		w_refused = w_posted = w_waitable = 0;
		memset(rx_pending, 0, sizeof(rx_pending));
		wbefore = (struct ms_stats){ .size = sizeof(wbefore) };
		CHECK(ms_ctx_stats(ctx, &wbefore) == 0);
	}
	for (int q = 0; q < npool; q++)
		rx_pending[q] += add[q];
}

static struct pmsg *record(uint32_t s, size_t len, uint64_t post)
{
	struct pmsg *m = &pm[npm++];
	m->pseq = s;
	m->len = len;
	m->post = post;
	m->managed = policy_managed();
	m->n = 0;
	for (int k = 0; k < nmodel; k++) {
		if (model[k] < 0)
			continue;
		m->id[m->n] = k;
		m->q[m->n] = model[k];
		m->status[m->n] = (int)len;
		m->flags[m->n] = 0;
		m->logged[m->n] = false;
		m->n++;
	}
	return m;
}

/* The message's length and gather list (over postbuf) from the input. */
static size_t post_shape(struct in *in, bool vector, struct iovec *iov, int *iovcnt, int *expect)
{
	unsigned raw = (take(in) << 8) | take(in);
	/* Mostly small, sometimes near a quarter of the ring (which fills it fast). */
	static const size_t edges[] = { 0, 1, PMAXLEN - 1, PMAXLEN, PMAXLEN + 1, 12000, 16000 };
	size_t len = raw >= 0xf000 ? edges[raw % 7] : raw >= 0xc000 ? raw % PMAXLEN : raw % 2048;
	*iovcnt = 1;
	if (!vector)
		return len;
	unsigned c = take(in);
	*iovcnt = c < 250 ? (int)(c % 9) : c < 254 ? 2000 : -1;
	if (*iovcnt < 0 || *iovcnt > IOV_MAX) {
		*expect = -EINVAL;
		return 0;
	}
	size_t off = 0;
	for (int k = 0; k < *iovcnt && k < 9; k++) {
		size_t l = ((size_t)take(in) * 97) % 9000;
		bool null_base = take(in) == 0xff;
		if (off + l > PMAXLEN + 1)
			l = 0;
		iov[k].iov_base = null_base ? NULL : postbuf + off;
		iov[k].iov_len = l;
		if (null_base && l)
			*expect = -EINVAL;
		off += l;
	}
	return off;
}

static bool member_stuck(void)
{
	bool s = false;
	for (int q = 0; q < nmodel; q++)
		s |= model[q] >= 0 && pool[model[q]].stuck;
	return s;
}

/* ms_post / ms_postv. */
static void do_post(struct ms_ctx *ctx, struct ms_group *g, struct in *in, bool vector)
{
	struct iovec iov[9];
	int iovcnt, expect = 0;
	size_t len = post_shape(in, vector, iov, &iovcnt, &expect);
	unsigned fb = take(in);
	unsigned flags = fb & 3 ? (fb >> 2) & MS_SEND_DONTWAIT : take(in);
	if (flags & ~MS_SEND_ALL_FLAGS)
		expect = -EINVAL;
	if (member_stuck())
		flags |= MS_SEND_DONTWAIT; /* a send that waited for it would never return */
	bool managed = policy_managed();
	if (managed || (window && npm && pm[0].managed))
		post_settle(ctx); /* a policy moves bytes between messages: one at a time */
	if (!expect && live && len > PMAXLEN)
		expect = -EMSGSIZE;
	post_prepare(ctx, expect || !live ? 0 : len);
	CHECK(npm < PMAX);
	seq++;
	fill_msg(postbuf, seq, len);
	uint64_t ps = 77;
	int r = vector ? ms_postv(g, iovcnt >= 0 && iovcnt <= 9 ? iov : NULL, iovcnt, flags, &ps)
		       : ms_post(g, postbuf, len, flags, &ps);
	/* The library copied the message: the caller's buffer is free at once. */
	memset(postbuf, 0xee, len < sizeof(postbuf) ? len : sizeof(postbuf));
	wgroup = g;
	if (expect || !live) {
		CHECK(r == expect && ps == 0);
		return;
	}
	if (r == -EAGAIN) {
		/* Only with MS_SEND_DONTWAIT, when the ring is full; nothing numbered or sent. */
		CHECK((flags & MS_SEND_DONTWAIT) && ps == 0);
		w_refused++;
		n_refused_total++;
		return;
	}
	CHECK(r == (int)live);
	w_posted++;
	n_posted_total++;
	w_waitable += !(flags & MS_SEND_DONTWAIT);
	CHECK(ps == wbefore.offload_msgs + w_posted);
	record(seq, len, ps);
	group_changed(); /* another fan-out: rotation and samples moved on */
	if (managed)
		post_settle(ctx);
}

/* A synchronous send among the posts: it waits for them, then sends from here. */
static void do_post_sync(struct ms_ctx *ctx, struct ms_group *g, struct in *in, bool vector)
{
	struct iovec iov[9];
	int iovcnt, expect = 0;
	size_t len = post_shape(in, vector, iov, &iovcnt, &expect);
	unsigned flags = (take(in) & 1) ? MS_SEND_DONTWAIT : 0;
	if (member_stuck())
		flags |= MS_SEND_DONTWAIT;
	if (policy_managed() || expect || len > PMAXLEN) {
		post_settle(ctx);
		return;
	}
	post_prepare(ctx, len);
	CHECK(npm < PMAX);
	seq++;
	fill_msg(postbuf, seq, len);
	struct ms_result res[PMEMB];
	int r = vector ? ms_sendv(g, iov, iovcnt, flags, res) : ms_send(g, postbuf, len, flags, res);
	memset(postbuf, 0xee, len);
	wgroup = g;
	CHECK(r >= 0 && (size_t)r <= live);
	struct pmsg *m = record(seq, len, 0);
	/* What the policy did: the group's record of this call, by position. */
	struct ms_slow_result sr[PMEMB];
	uint32_t fl[PMEMB] = { 0 };
	int nsr = ms_group_slow_results(g, sr, PMEMB);
	CHECK(nsr >= 0 && nsr <= m->n);
	for (int i = 0; i < nsr; i++) {
		CHECK(sr[i].pos < (uint32_t)m->n && sr[i].id == res[sr[i].pos].id);
		fl[sr[i].pos] = sr[i].flags;
	}
	int whole = 0;
	bool seen[256] = { false };
	for (int k = 0; k < m->n; k++) {
		CHECK(res[k].id >= 0 && res[k].id < nmodel && model[res[k].id] >= 0 && !seen[res[k].id]);
		seen[res[k].id] = true;
		int j = 0;
		while (m->id[j] != res[k].id)
			j++;
		m->status[j] = res[k].status;
		m->flags[j] = fl[k];
		whole += res[k].status == (int)len && !fl[k];
	}
	CHECK(whole == r);
	if (m->n)
		group_changed();
}

/* A connection's receiver read dry, whatever it holds (after a policy moved bytes the oracle
 * cannot attribute): until the sender has nothing queued or unacknowledged (SIOCOUTQ) and the
 * receiver nothing unread. */
static void post_read_dry(const struct pdest *p)
{
	static unsigned char buf[MAXLEN + 1];
	for (int t = 0; t < 200; t++) {
		while (recv(p->rx, buf, sizeof(buf), MSG_DONTWAIT) >= 0)
			;
		CHECK(errno == EAGAIN);
		int outq = 1;
		CHECK(ioctl(p->fd, SIOCOUTQ, &outq) == 0);
		if (!outq)
			break;
		struct pollfd pfd = { .fd = p->rx, .events = POLLIN };
		poll(&pfd, 1, 10);
	}
	while (recv(p->rx, buf, sizeof(buf), MSG_DONTWAIT) >= 0)
		;
}

/* Every receiver holds exactly what the window's messages promise. */
static void post_check_rx(bool *unknown)
{
	static unsigned char buf[MAXLEN + 1], want[2 << 20], msg[MAXLEN];
	for (int q = 0; q < npool; q++) {
		const struct pdest *p = &pool[q];
		if (p->stuck || rx_key(q) != q)
			continue;
		if (unknown[q]) {
			if (p->lazy)
				lazy_expect = lazy_got = 0;
			post_read_dry(p);
			continue;
		}
		if (p->stream) {
			size_t nw = 0;
			for (int i = 0; i < npm; i++)
				for (int k = 0; k < pm[i].n; k++) {
					if (rx_key(pm[i].q[k]) != q)
						continue;
					int st = pm[i].status[k];
					if (st <= 0)
						continue;
					if (p->lazy) {
						lazy_expect += st;
						continue;
					}
					CHECK(nw + (size_t)st <= sizeof(want));
					fill_msg(want + nw, pm[i].pseq, (size_t)st);
					nw += (size_t)st;
				}
			if (p->lazy)
				continue;
			size_t got = 0;
			for (;;) {
				ssize_t r = recv(p->rx, buf, sizeof(buf), MSG_DONTWAIT);
				if (r < 0) {
					CHECK(errno == EAGAIN);
					struct pollfd pfd = { .fd = p->rx, .events = POLLIN };
					if (got < nw && poll(&pfd, 1, 1000) == 1)
						continue;
					break;
				}
				CHECK(got + (size_t)r <= nw);
				CHECK(memcmp(buf, want + got, (size_t)r) == 0);
				got += (size_t)r;
			}
			if (got != nw)
				fprintf(stderr, "post: stream receiver %d got %zu bytes of %zu\n", q, got, nw);
			CHECK(got == nw);
			continue;
		}
		/* Datagrams: the copies of whole sends, in order. AF_INET loopback delivery
		 * may be deferred to a softirq on another CPU (parts of consecutive fan-outs
		 * can leave from different threads), so for UDP the order is not checked:
		 * each datagram must be one of the copies still expected. */
		static int exp_i[PMAX * PMEMB];
		static bool used[PMAX * PMEMB];
		int ne = 0;
		for (int i = 0; i < npm; i++)
			for (int k = 0; k < pm[i].n; k++)
				if (rx_key(pm[i].q[k]) == q && pm[i].status[k] == (int)pm[i].len &&
				    !pm[i].flags[k]) {
					used[ne] = false;
					exp_i[ne++] = i;
				}
		int got = 0, next = 0;
		for (;;) {
			ssize_t r = recv(p->rx, buf, sizeof(buf), MSG_DONTWAIT);
			if (r < 0) {
				CHECK(errno == EAGAIN);
				struct pollfd pfd = { .fd = p->rx, .events = POLLIN };
				if (got < ne && poll(&pfd, 1, 1000) == 1)
					continue;
				break;
			}
			CHECK(got < ne);
			int at = -1;
			if (!p->maxdgram) {
				at = next++;
			} else {
				for (int e = 0; e < ne && at < 0; e++) {
					const struct pmsg *m = &pm[exp_i[e]];
					if (used[e] || m->len != (size_t)r)
						continue;
					fill_msg(msg, m->pseq, m->len);
					if (!memcmp(buf, msg, m->len))
						at = e;
				}
				if (at < 0)
					fprintf(stderr, "post: UDP receiver %d: a datagram of %zd bytes "
						"no send promised\n", q, r);
				CHECK(at >= 0);
			}
			const struct pmsg *m = &pm[exp_i[at]];
			if ((size_t)r != m->len)
				fprintf(stderr, "post: receiver %d: datagram %d has %zd bytes, expected "
					"message %u of %zu\n", q, at, r, m->pseq, m->len);
			CHECK((size_t)r == m->len);
			fill_msg(msg, m->pseq, m->len);
			CHECK(memcmp(buf, msg, m->len) == 0);
			used[at] = true;
			got++;
		}
		if (got != ne)
			fprintf(stderr, "post: receiver %d got %d datagrams of %d\n", q, got, ne);
		CHECK(got == ne);
	}
}

static void post_settle(struct ms_ctx *ctx)
{
	if (!window)
		return;
	window = false;
	CHECK(ms_ctx_drain(ctx) == 0);
	struct ms_stats a = { .size = sizeof(a) };
	CHECK(ms_ctx_stats(ctx, &a) == 0);
	/* The post log: every entry a destination of a message posted in this window that did
	 * not take it whole, in message order, each once. */
	static struct ms_post_error e[512];
	uint64_t lost_sum = 0, last = 0;
	int first = 0;
	for (;;) {
		uint64_t lost = 99;
		int n = ms_ctx_post_errors(ctx, e, 512, &lost);
		CHECK(n >= 0 && n <= 512);
		lost_sum += lost;
		if (!n)
			break;
		for (int j = 0; j < n; j++) {
			CHECK(e[j].seq > wbefore.offload_msgs &&
			      e[j].seq <= wbefore.offload_msgs + w_posted && e[j].seq >= last);
			last = e[j].seq;
			while (first < npm && pm[first].post != e[j].seq)
				first++;
			CHECK(first < npm);
			struct pmsg *m = &pm[first];
			CHECK(e[j].g == wgroup);
			int k = 0;
			while (k < m->n && m->id[k] != e[j].id)
				k++;
			if (k == m->n)
				fprintf(stderr, "post: log entry for id %d, not a member of message %llu\n",
					e[j].id, (unsigned long long)e[j].seq);
			CHECK(k < m->n && !m->logged[k]);
			m->logged[k] = true;
			m->status[k] = e[j].status;
			m->flags[k] = e[j].flags;
			CHECK(e[j].status != (int)m->len || e[j].flags);
		}
	}
	if (getenv("FUZZ_GROUP_DEBUG")) fprintf(stderr, "settle: %d msgs, log read up to seq %llu, managed %d, lazy %ld/%ld, backlog %zu\n", npm, (unsigned long long)last, npm ? pm[0].managed : -1, lazy_got, lazy_expect, wgroup_freed ? 0 : ms_group_backlog(wgroup));
	CHECK(lost_sum == 0); /* at most 64 messages, and only the stuck socket and the small
	                         stream fail: far fewer than MS_POST_LOG_ENTRIES */
	/* Each destination's outcome is one a send could have, and the counters add up. */
	uint64_t att = 0, acc = 0, part = 0, fail = 0, bytes = 0, cls[C_OTHER + 1] = { 0 };
	uint64_t queued = 0, dropped = 0, removed = 0, fanouts = 0;
	bool any_managed = false, unknown[NDEST] = { false };
	for (int i = 0; i < npm; i++) {
		const struct pmsg *m = &pm[i];
		any_managed |= m->managed;
		att += (uint64_t)m->n;
		fanouts += m->n > 0;
		for (int k = 0; k < m->n; k++) {
			const struct pdest *p = &pool[m->q[k]];
			int st = m->status[k];
			uint32_t f = m->flags[k];
			bool managed = m->managed && p->conn;
			CHECK((f & ~(uint32_t)(MS_RES_QUEUED | MS_RES_DROPPED | MS_RES_REMOVED)) == 0);
			if (!managed) {
				CHECK(f == 0);
				CHECK(st <= (int)m->len);
				if (!p->stream)
					CHECK(st < 0 || st == (int)m->len);
			} else {
				CHECK(__builtin_popcount(f) <= 1 || f == (MS_RES_QUEUED | MS_RES_REMOVED));
				if (f & MS_RES_QUEUED)
					CHECK(st >= 0 && (size_t)st < m->len && policy != MS_SLOW_DISCONNECT);
				if (f & MS_RES_DROPPED)
					CHECK(st < 0 && policy != MS_SLOW_DISCONNECT);
				if (st != (int)m->len || f || held[m->id[k]])
					unknown[rx_key(m->q[k])] = true;
			}
			if (p->stuck)
				CHECK(st == -EAGAIN && f == 0);
			if (st == -EMSGSIZE)
				CHECK(p->maxdgram && m->len > (size_t)p->maxdgram);
			if (f & MS_RES_QUEUED) {
				part++;
				bytes += st > 0 ? (uint64_t)st : 0;
			} else if (st >= 0) {
				bytes += (uint64_t)st;
				if ((size_t)st == m->len)
					acc++;
				else
					part++;
			} else {
				fail++;
				cls[err_class(-st)]++;
			}
			queued += (f & MS_RES_QUEUED) != 0;
			dropped += (f & MS_RES_DROPPED) != 0;
			removed += (f & MS_RES_REMOVED) != 0;
		}
	}
	CHECK(a.offload_msgs - wbefore.offload_msgs == w_posted);
	CHECK(a.offload_refused - wbefore.offload_refused == w_refused);
	CHECK(a.offload_waits - wbefore.offload_waits <= w_waitable);
	if (a.fanouts - wbefore.fanouts != fanouts || a.dests_attempted - wbefore.dests_attempted != att)
		fprintf(stderr, "post: fanouts %llu (expected %llu), attempted %llu (expected %llu)\n",
			(unsigned long long)(a.fanouts - wbefore.fanouts), (unsigned long long)fanouts,
			(unsigned long long)(a.dests_attempted - wbefore.dests_attempted),
			(unsigned long long)att);
	CHECK(a.fanouts - wbefore.fanouts == fanouts);
	CHECK(a.dests_attempted - wbefore.dests_attempted == att);
	CHECK(a.dests_accepted - wbefore.dests_accepted == acc);
	CHECK(a.dests_partial - wbefore.dests_partial == part);
	CHECK(a.dests_failed - wbefore.dests_failed == fail);
	for (int c = 0; c <= C_OTHER; c++)
		CHECK(err_counter(&a, c) - err_counter(&wbefore, c) == cls[c]);
	CHECK(a.slow_queued - wbefore.slow_queued == queued);
	CHECK(a.slow_dropped - wbefore.slow_dropped == dropped);
	CHECK(a.slow_removed - wbefore.slow_removed == removed);
	if (any_managed)
		CHECK(a.bytes - wbefore.bytes >= bytes);
	else
		CHECK(a.bytes - wbefore.bytes == bytes);
	/* A policy removed some: the model follows. What the policy holds or moved between
	 * messages is read from a flush (each backlog's size), and those receivers read dry. */
	for (int i = 0; i < npm; i++)
		for (int k = 0; k < pm[i].n; k++)
			if ((pm[i].flags[k] & MS_RES_REMOVED) && model[pm[i].id[k]] >= 0) {
				model[pm[i].id[k]] = -1;
				held[pm[i].id[k]] = 0;
				live--;
				group_changed();
			}
	bool any_unknown = false;
	for (int q = 0; q < npool; q++)
		any_unknown |= unknown[q];
	if (any_unknown && !wgroup_freed) {
		struct ms_slow_result res[PMEMB];
		int n = ms_group_backlog(wgroup) ? ms_group_flush(wgroup, res, PMEMB) : 0;
		CHECK(n >= 0 && n <= PMEMB);
		for (int k = 0; k < nmodel; k++)
			held[k] = 0;
		for (int j = 0; j < n; j++) {
			CHECK(res[j].id >= 0 && res[j].id < nmodel && model[res[j].id] >= 0);
			unknown[rx_key(model[res[j].id])] = true;
			if (res[j].flags & MS_RES_REMOVED) {
				model[res[j].id] = -1;
				live--;
				group_changed();
			} else {
				held[res[j].id] = res[j].backlog;
			}
		}
		size_t total = 0;
		for (int k = 0; k < nmodel; k++)
			total += model[k] >= 0 ? held[k] : 0;
		CHECK(ms_group_backlog(wgroup) == total);
	}
	post_check_rx(unknown);
	npm = 0;
	/* The group's last sample may be a posted fan-out's (of the group as it was then):
	 * check_order looks only at samples newer than this. */
	if (ts_mode && !wgroup_freed) {
		static struct ms_ts_dest t[PMEMB];
		uint64_t call_ns = 0;
		CHECK(ms_group_ts_collect(wgroup) >= 0);
		if (ms_group_ts_last(wgroup, t, PMEMB, &call_ns) > 0)
			last_call_ns = call_ns;
	}
}

/* Offload's contract on a context of its own, once: a message over a quarter of the ring,
 * and a post log that overflows (the stuck socket fails every message: MS_POST_LOG_ENTRIES
 * and more, all accounted as entries or lost). */
static void post_selftest(struct ms_ctx *ctx)
{
	struct ms_group *g;
	CHECK(ms_group_new(ctx, &g) == 0);
	uint64_t s = 9;
	CHECK(ms_post(g, payload, 10, 0, &s) == 0 && s == 0); /* empty group */
	struct ms_dest d = { pool[stuck_q].fd, 0, NULL };
	int id = ms_group_add(g, &d);
	CHECK(id >= 0);
	CHECK(ms_post(g, payload, PMAXLEN + 1, MS_SEND_DONTWAIT, &s) == -EMSGSIZE && s == 0);
	struct ms_stats b = { .size = sizeof(b) }, a = { .size = sizeof(a) };
	CHECK(ms_ctx_stats(ctx, &b) == 0);
	unsigned posted = 0, refused = 0;
	for (int i = 0; posted < MS_POST_LOG_ENTRIES + 100 && i < 100000; i++) {
		int r = ms_post(g, payload, 1 + i % 64, MS_SEND_DONTWAIT, &s);
		CHECK(r == 1 || (r == -EAGAIN && s == 0));
		if (r == 1)
			CHECK(s == b.offload_msgs + ++posted);
		refused += r == -EAGAIN;
		if (r == -EAGAIN)
			usleep(20); /* the ring is full: let the offload thread run */
	}
	CHECK(ms_ctx_drain(ctx) == 0);
	CHECK(ms_ctx_stats(ctx, &a) == 0);
	CHECK(a.offload_msgs - b.offload_msgs == posted && a.offload_refused - b.offload_refused == refused);
	CHECK(a.err_again - b.err_again == posted && a.dests_failed - b.dests_failed == posted);
	static struct ms_post_error e[MS_POST_LOG_ENTRIES];
	uint64_t lost = 0, got = 0, last = b.offload_msgs;
	int n;
	while ((n = ms_ctx_post_errors(ctx, e, MS_POST_LOG_ENTRIES, NULL)) > 0)
		for (int j = 0; j < n; j++, got++) {
			CHECK(e[j].seq > last && e[j].id == id && e[j].status == -EAGAIN && e[j].g == g);
			last = e[j].seq;
		}
	CHECK(ms_ctx_post_errors(ctx, e, 0, &lost) == 0);
	if (got != MS_POST_LOG_ENTRIES || got + lost != posted)
		fprintf(stderr, "post log: %llu entries + %llu lost, %u posted\n",
			(unsigned long long)got, (unsigned long long)lost, posted);
	CHECK(got == MS_POST_LOG_ENTRIES && got + lost == posted);
	ms_group_free(g);
	int outq = 0;
	CHECK(ioctl(pool[stuck_q].fd, SIOCOUTQ, &outq) == 0 && outq == stuck_outq);
}

static void post_report(void)
{
	if (xdp_calls_total)
		fprintf(stderr, "fuzz-group: %llu xdp calls, %llu destinations sent as frames\n",
			(unsigned long long)xdp_calls_total, (unsigned long long)xdp_frames_total);
	fprintf(stderr, "fuzz-group: %llu messages posted, %llu refused (full ring)\n",
		(unsigned long long)n_posted_total, (unsigned long long)n_refused_total);
}

/* The end of a post-mode input: the group freed with the posts still queued (it sends them
 * first) or after they settled; the context freed (and made again by the next input) if the
 * input says so. */
static void post_finish(struct ms_ctx *ctx, struct ms_group **g, bool free_early)
{
	if (free_early) {
		ms_group_free(*g); /* waits for the posts */
		*g = NULL;
		wgroup_freed = true;
	}
	post_settle(ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	if (!ready) {
		/* The xdp mode's namespaces first: the pool is made in the sender's. */
		int peer_ns;
		bool own_ns = setup_netns(&peer_ns);
		if (peer_ns < 0)
			fprintf(stderr, "fuzz-group: %s: xdp mode inputs use another backend\n",
				own_ns ? "no veth" : "no network namespace of our own (not root?)");
		setup_pool();
		if (peer_ns >= 0)
			setup_veth_pool(peer_ns);
		atexit(post_report);
		ready = true;
	}
	struct in in = { data, size };
	/* The first byte: the backend, and workers (1..4, the calling thread and up to three of
	 * the library's; no cpus). */
	unsigned b0 = take(&in), backend = 1 + b0 % 3, shape = take(&in);
	workers = 1 + (b0 / 3) % 4;
	/* 228..239: offload (see "Offload" above). 240..255: MS_BACKEND_AUTO, which sends with
	 * every backend in turn while it measures them (the same oracle holds whichever sends). */
	post_mode = b0 / 12 == 19;
	auto_mode = b0 >= 240;
	/* 216..227: the xdp backend (see "xdp mode" below). */
	xdp_mode = b0 / 12 == 18;
	if (auto_mode)
		backend = MS_BACKEND_AUTO;
	if (xdp_mode)
		backend = MS_BACKEND_XDP;
	/* Timestamps: off, every fan-out's first and last destination, or all of them. */
	unsigned ts = (shape >> 3) % 3;
	/* Rotation: the send order starts one destination later on each fan-out. */
	unsigned rot = shape >> 7;
	/* The ring's size matters to io_uring alone; with workers, 1 or 8 (each worker has a
	 * ring of its own: fewer contexts to keep). */
	unsigned qd = backend != MS_BACKEND_IO_URING ? 0 : workers > 1 ? (shape & 1) * 3 : shape % 8;
	/* xdp: the slot io_uring's ring size has is copy mode only or zero copy tried first. */
	if (xdp_mode)
		qd = shape & 1;
	struct ms_config cfg = { .size = sizeof(cfg), .backend = backend,
				 .flags = MS_CFG_IGNORE_ENV | (rot ? MS_CFG_ROTATE : 0),
				 .queue_depth = 1u << qd, .workers = workers > 1 ? workers : 0,
				 .ts_sample = ts ? 1 : 0, .ts_flags = ts == 2 ? MS_TS_ALL_DESTS : 0 };
	if (xdp_mode) {
		cfg.xdp_ifname = have_veth ? XDP_IF : NULL; /* none: ms_ctx_new falls back */
		cfg.xdp_frames = XDP_FRAMES;
		cfg.flags |= qd ? MS_CFG_XDP_COPY : 0;
	}
	struct ms_ctx *ctx;
	struct ms_group *g;
	/* Contexts are kept from one input to the next (one per backend, ring size, sampling,
	 * rotation and workers): setting up a ring and its file table, or threads, costs more
	 * than most inputs, and a context outliving many groups is what a publisher does. */
	static struct ms_ctx *ctxs[5][8][3][2][4];
	static struct ms_ctx *post_ctxs[5][8][3][2][4];
	if (post_mode) {
		cfg.flags |= MS_CFG_OFFLOAD;
		cfg.offload_kib = RING >> 10;
	}
	static bool no_ts; /* the kernel cannot stamp per datagram: run without timestamps */
	if (no_ts) {
		ts = 0;
		cfg.ts_sample = cfg.ts_flags = 0;
	}
	struct ms_ctx *(*cs)[8][3][2][4] = post_mode ? post_ctxs : ctxs;
	struct ms_ctx **slot = &cs[cfg.backend][qd][ts][rot][workers - 1];
	bool fresh = !*slot;
	static bool xdp_works; /* an xdp context was made: every later one must be */
	/* Each xdp context on a queue of its own: an AF_XDP socket takes a queue, and the
	 * contexts are kept. */
	if (xdp_mode) {
		cfg.flags |= MS_CFG_XDP_QUEUE;
		cfg.xdp_queue = (uint32_t)(slot - &ctxs[MS_BACKEND_XDP][0][0][0][0]);
		CHECK(cfg.xdp_queue < XDP_QUEUES);
	}
	if (!*slot) {
		int r = ms_ctx_new(slot, &cfg);
		if (r == -ENOTSUP && ts) {
			no_ts = true;
			ts = 0;
			cfg.ts_sample = cfg.ts_flags = 0;
			slot = &cs[cfg.backend][qd][0][rot][workers - 1];
			fresh = !*slot;
			if (xdp_mode)
				cfg.xdp_queue = (uint32_t)(slot - &ctxs[MS_BACKEND_XDP][0][0][0][0]);
			r = *slot ? 0 : ms_ctx_new(slot, &cfg);
		}
		CHECK(r == 0);
	}
	ctx = *slot;
	xdp_ctx = ms_ctx_backend(ctx) == MS_BACKEND_XDP;
	CHECK(!xdp_ctx || (xdp_mode && have_veth));
	if (xdp_mode) {
		CHECK(xdp_ctx || !xdp_works);
		xdp_works |= xdp_ctx;
	}
	if (post_mode && fresh)
		post_selftest(ctx);
	window = false;
	npm = 0;
	wgroup_freed = false;
	bool free_early = false, free_ctx = false;
	CHECK(ms_group_new(ctx, &g) == 0);
	nmodel = 0;
	live = 0;
	kpath_all = false;
	memset(kpath, 0, sizeof(kpath));
	policy = MS_SLOW_BLOCK;
	memset(held, 0, sizeof(held));
	ts_mode = ts;
	rotating = rot;
	order_known = rot_known = false;
	last_call_ns = 0;

	for (int ops = 0; in.n && ops < 64; ops++) {
		unsigned ob = take(&in), op = ob % 8;
		if (post_mode && op >= 3) {
			unsigned sub = (ob >> 3) & 3;
			if (op == 7 && (ob & 0xc0) == 0xc0) {
				/* End here: the group freed with its posts queued. */
				free_early = true;
				free_ctx = ob & 0x20;
				break;
			}
			if ((op == 3 || op == 4) && (sub == 1 || sub == 2)) {
				do_post(ctx, g, &in, op == 4);
				continue; /* ms_group_size would wait for the posts */
			}
			if ((op == 3 || op == 4) && sub == 3) {
				do_post_sync(ctx, g, &in, op == 4);
				continue;
			}
			post_settle(ctx);
		}
		if (op == 5 && xdp_mode && (ob & 0x80)) {
			do_kernel_path(g, &in, ob & 0x40);
			continue;
		}
		if (op == 5) {
			do_set_slow(g, &in);
			continue;
		}
		if (op == 6) {
			do_flush(ctx, g);
			continue;
		}
		if (op == 7) {
			drain_lazy();
			continue;
		}
		if (op == 0 || op == 1) { /* add */
			/* xdp mode: the whole pool (with the veth entries) and the four invalid
			 * ones, the veth entries twice as likely (28..35 are them again);
			 * otherwise the base pool and the invalid ones, as before the veth. */
			unsigned pick = take(&in) % (xdp_mode ? NDEST + 4 + (NDEST - NBASE)
							      : NBASE + 4);
			if (!xdp_mode && pick >= NBASE)
				pick += NDEST - NBASE;
			if (pick >= NDEST + 4)
				pick -= 4 + (NDEST - NBASE);
			struct ms_dest d;
			int expect_ok = -1; /* pool index when it must succeed */
			if (pick >= (unsigned)npool && pick < NDEST)
				continue; /* a veth entry, without a veth */
			if (pick < (unsigned)npool) {
				const struct pdest *p = &pool[pick];
				/* An AF_UNIX receiver queues at most net.unix.max_dgram_qlen (10)
				 * datagrams and a blocking sender waits for room: keep each
				 * receiver's copies per send below that. A UDP receiver's 4 MiB
				 * buffer (8 MiB of truesize) holds 16 of the largest datagrams
				 * (128 KiB each at most): wider fan-outs on one socket, and parts
				 * for four workers. */
				int copies = 0;
				for (int k = 0; k < nmodel; k++)
					copies += model[k] >= 0 && pool[model[k]].rx == p->rx;
				if (copies >= (p->maxdgram && udp_big ? 16 : 8))
					continue;
				d = (struct ms_dest){ p->fd, p->addrlen,
						      p->addrlen ? (struct sockaddr *)&p->addr : NULL };
				expect_ok = (int)pick;
			} else if (pick == NDEST) {
				d = (struct ms_dest){ -1, 0, NULL };
			} else if (pick == NDEST + 1) {
				d = (struct ms_dest){ junk_pipe[1], 0, NULL };
			} else if (pick == NDEST + 2) {
				d = (struct ms_dest){ closed_fd, 0, NULL };
			} else { /* a pool socket with an address made of input bytes */
				static struct sockaddr_storage junk;
				memset(&junk, 0, sizeof(junk));
				socklen_t l = take(&in);
				for (size_t k = 0; k < sizeof(junk) && k < 24; k++)
					((unsigned char *)&junk)[k] = (unsigned char)take(&in);
				int base = xdp_mode ? npool : NBASE;
				d = (struct ms_dest){ pool[take(&in) % base].fd, l,
						      (struct sockaddr *)&junk };
			}
			int id = ms_group_add(g, &d);
			if (id >= 0) {
				CHECK(id < 256 && (id >= nmodel || model[id] < 0));
				while (nmodel <= id)
					model[nmodel++] = -1;
				/* A junk address that the library accepted is a real address of
				 * some family: nothing is delivered to the pool's receivers then,
				 * so stop checking arrivals by removing it again. */
				if (expect_ok < 0) {
					CHECK(ms_group_remove(g, id) == 0);
					group_changed();
					continue;
				}
				model[id] = expect_ok;
				kpath[id] = kpath_all;
				live++;
				group_changed();
			} else {
				CHECK(id == -EEXIST || expect_ok < 0);
				if (id == -EEXIST) {
					bool dup = false;
					for (int k = 0; k < nmodel; k++)
						dup |= model[k] >= 0 && pool[model[k]].fd == d.fd &&
						       !pool[model[k]].addrlen;
					CHECK(dup && !d.addr);
				}
			}
		} else if (op == 2) { /* remove */
			int id = (int)take(&in) - 8;
			int r = ms_group_remove(g, id);
			bool member = id >= 0 && id < nmodel && model[id] >= 0;
			CHECK(member ? r == 0 : r == -ENOENT);
			if (member) {
				model[id] = -1;
				held[id] = 0;
				live--;
				group_changed();
			}
		} else {
			do_send(ctx, g, &in, op == 4);
		}
		CHECK(ms_group_size(g) == live);
	}
	if (post_mode)
		post_finish(ctx, &g, free_early);
	if (g)
		ms_group_free(g);
	struct ms_stats st = { .size = sizeof(st) };
	CHECK(ms_ctx_stats(ctx, &st) == 0 && st.backlog_bytes == 0);
	/* Freeing the group accounted its last sample: every destination that asked for a stamp
	 * is stamped, missing or not stampable, and the histograms agree. */
	struct ms_snapshot sn = { .size = sizeof(sn) };
	CHECK(ms_ctx_snapshot(ctx, &sn) == 0);
	CHECK(sn.stats.ts_requested == sn.stats.ts_stamped + sn.stats.ts_missing + sn.stats.ts_unsupported);
	CHECK(sn.dest_lag.count == sn.stats.ts_stamped && sn.stats.fanouts == st.fanouts);
	CHECK(sn.first_last.count <= sn.call_first.count && sn.call_first.count <= sn.stats.ts_sampled);
	/* Whatever the kernel took for the small stream arrives; what the group still held was
	 * discarded with it. Next input starts from an empty stream. */
	drain_lazy();
	lazy_expect = lazy_got = 0;
	if (free_ctx) {
		ms_ctx_free(ctx);
		*slot = NULL;
	}
	return 0;
}
