/* SPDX-License-Identifier: MIT */
/*
 * Sampled kernel transmit timestamps, snapshots and the live-counter file, once per backend:
 * `tstamp BACKEND`. On loopback every datagram is stamped twice by the kernel (TX_SCHED when it
 * enters the device's queue, TX_SOFTWARE in the driver) and once more on arrival (SO_TIMESTAMPNS
 * at the receiver): the test checks that the library's stamps, destination by destination,
 * agree with the receive stamps in order and spacing (every lag from the transmit stamp to the
 * receive stamp non-negative; transmit stamps increasing in send order, as the receive stamps
 * are), never absolute times. Counters and histograms must match what was asked, exactly.
 */
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <linux/ethtool.h>
#include <linux/net_tstamp.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "multisend.h"
#include "net.h"
#include "shm-format.h"

static enum ms_backend backend;

static struct ms_ctx *new_ctx(uint32_t sample, uint32_t tsflags, const char *shm)
{
	struct ms_config cfg = { .size = sizeof(cfg),
				 .backend = backend,
				 .flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV,
				 .ts_sample = sample,
				 .ts_flags = tsflags,
				 .stats_shm = shm };
	struct ms_ctx *ctx = NULL;
	assert_int_equal(ms_ctx_new(&ctx, &cfg), 0);
	return ctx;
}

static struct ms_snapshot snap(const struct ms_ctx *ctx)
{
	struct ms_snapshot s = { .size = sizeof(s) };
	assert_int_equal(ms_ctx_snapshot(ctx, &s), 0);
	return s;
}

/* Receive endpoint e's one datagram (waiting up to 5 s): checks its bytes, returns its
 * receive stamp (CLOCK_REALTIME ns). */
static uint64_t recv_stamped(const struct endpoint *e, const unsigned char *msg, size_t len)
{
	struct pollfd p = { .fd = e->rx, .events = POLLIN };
	assert_int_equal(poll(&p, 1, 5000), 1);
	unsigned char buf[2048];
	union {
		char b[CMSG_SPACE(sizeof(struct timespec))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
			    .msg_controllen = sizeof(ctl.b) };
	ssize_t r = recvmsg(e->rx, &m, MSG_DONTWAIT);
	assert_int_equal(r, (ssize_t)len);
	assert_memory_equal(buf, msg, len);
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
			struct timespec ts;
			memcpy(&ts, CMSG_DATA(c), sizeof(ts));
			return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
		}
	}
	fail_msg("no receive timestamp");
	return 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * The kernel turns receive stamping on for the whole system a little after the first socket
 * asks (a deferred static key); until then a datagram is stamped when it is read, not when it
 * arrives, and a burst straddling the switch looks reordered. Wait until a datagram to e comes
 * back stamped before it was read.
 */
static void receive_stamps_on_arrival(const struct endpoint *e)
{
	struct sockaddr_storage to;
	socklen_t tolen = sizeof(to);
	assert_int_equal(getsockname(e->rx, (struct sockaddr *)&to, &tolen), 0);
	int fd = socket(to.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	for (int tries = 0;; tries++) {
		assert_true(tries < 1000);
		unsigned char b = 0;
		ssize_t sent = sendto(fd, &b, 1, 0, (const struct sockaddr *)&to, tolen);
		if (sent != 1)
			fail_msg("sendto: %s", strerror(errno));
		struct timespec pause = { 0, 1000000 };
		nanosleep(&pause, NULL);
		uint64_t before = now_ns();
		if (recv_stamped(e, &b, 1) < before)
			break;
	}
	close(fd);
}

/* Every destination stamped, checked against the receivers' own stamps. */
static void all_dests(enum kind k)
{
	enum { N = 16 };
	struct ms_ctx *ctx = new_ctx(1, MS_TS_ALL_DESTS, NULL);
	struct ms_group *g;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, k, N), 0);
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	int on = 1;
	for (size_t i = 0; i < N; i++)
		assert_int_equal(setsockopt(nt.ep[i].rx, SOL_SOCKET, SO_TIMESTAMPNS, &on,
					    sizeof(on)), 0);
	receive_stamps_on_arrival(&nt.ep[0]);

	unsigned char msg[200];
	make_payload(msg, sizeof(msg), 1);
	struct ms_result res[N];
	assert_int_equal(ms_send(g, msg, sizeof(msg), 0, res), N);
	/* Nothing is accounted before the stamps are read. */
	assert_int_equal(snap(ctx).stats.ts_stamped, 0);
	assert_true(ms_group_ts_collect(g) >= N); /* at least one stamp each */

	struct ms_ts_dest td[N + 1];
	uint64_t t0 = 0;
	assert_int_equal(ms_group_ts_last(g, td, N + 1, &t0), N);
	assert_true(t0 > 0);
	uint64_t rx[N];
	for (size_t i = 0; i < N; i++) {
		/* In send order, each with both stamps, TX_SCHED no later than TX_SOFTWARE. */
		assert_int_equal(td[i].pos, i);
		assert_int_equal(td[i].id, res[i].id);
		assert_int_equal(td[i].flags, MS_TS_SCHED | MS_TS_SND);
		assert_true(td[i].sched_ns >= 0);
		assert_true(td[i].snd_ns >= td[i].sched_ns);
		if (i)
			assert_true(td[i].snd_ns >= td[i - 1].snd_ns);
		long e = net_find(&nt, td[i].id);
		assert_true(e >= 0);
		rx[i] = recv_stamped(&nt.ep[e], msg, sizeof(msg));
		/* It arrived after it left. */
		assert_true(rx[i] >= t0 + (uint64_t)td[i].snd_ns);
		/* ... and the receivers saw them in the order they were sent: the same order
		 * and (non-negative) spacing both ways. */
		if (i)
			assert_true(rx[i] >= rx[i - 1]);
	}
	struct ms_snapshot s = snap(ctx);
	assert_int_equal(s.stats.ts_sampled, 1);
	assert_int_equal(s.stats.ts_requested, N);
	assert_int_equal(s.stats.ts_stamped, N);
	assert_int_equal(s.stats.ts_missing, 0);
	assert_int_equal(s.stats.ts_unsupported, 0);
	assert_int_equal(s.stats.ts_foreign, 0);
	assert_int_equal(s.stats.ts_late, 0);
	assert_int_equal(s.dest_lag.count, N);
	assert_int_equal(s.call_first.count, 1);
	assert_int_equal(s.call_last.count, 1);
	assert_int_equal(s.first_last.count, 1);
	assert_int_equal(s.call_first.min_ns, (uint64_t)td[0].snd_ns);
	assert_int_equal(s.call_last.max_ns, (uint64_t)td[N - 1].snd_ns);
	assert_int_equal(s.first_last.sum_ns, (uint64_t)(td[N - 1].snd_ns - td[0].snd_ns));
	assert_int_equal(s.stats.fanouts, 1);
	assert_int_equal(s.stats.dests_accepted, N);

	ms_group_free(g);
	net_free(&nt);
	ms_ctx_free(ctx);
}

static void test_all_shared(void **state)
{
	(void)state;
	all_dests(K_UDP4);
}

static void test_all_connected(void **state)
{
	(void)state;
	all_dests(K_UDP4_CONN);
}

static void test_all_ipv6(void **state)
{
	(void)state;
	if (!net_have_ipv6())
		skip();
	all_dests(K_UDP6);
}

/* One in K fan-outs, first and last destination; every copy still delivered once. */
static void test_one_in_k(void **state)
{
	(void)state;
	enum { N = 8, K = 4, CALLS = 10 };
	struct ms_ctx *ctx = new_ctx(K, 0, NULL);
	struct ms_group *g;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UDP4_CONN, N / 2), 0);
	assert_int_equal(net_add(&nt, K_UDP4, N / 2), 0);
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	for (unsigned c = 0; c < CALLS; c++) {
		unsigned char msg[64];
		make_payload(msg, sizeof(msg), c);
		assert_int_equal(ms_send(g, msg, sizeof(msg), 0, NULL), N);
		for (size_t i = 0; i < N; i++)
			assert_true(expect_one(&nt.ep[i], msg, sizeof(msg), 5000));
	}
	ms_group_ts_collect(g);
	struct ms_snapshot s = snap(ctx);
	unsigned sampled = (CALLS + K - 1) / K; /* calls 0, 4, 8 */
	assert_int_equal(s.stats.ts_sampled, sampled);
	assert_int_equal(s.stats.ts_requested, 2 * sampled);
	assert_int_equal(s.stats.ts_stamped, 2 * sampled);
	assert_int_equal(s.stats.ts_missing + s.stats.ts_unsupported + s.stats.ts_late + s.stats.ts_foreign, 0);
	assert_int_equal(s.call_first.count, sampled);
	assert_int_equal(s.call_last.count, sampled);
	assert_int_equal(s.first_last.count, sampled);
	assert_int_equal(s.dest_lag.count, 2 * sampled);
	assert_true(s.call_last.max_ns >= s.call_first.min_ns);
	struct ms_ts_dest td[2];
	assert_int_equal(ms_group_ts_last(g, td, 2, NULL), 2);
	assert_int_equal(td[0].pos, 0);
	assert_int_equal(td[1].pos, N - 1);
	ms_group_free(g);
	net_free(&nt);
	ms_ctx_free(ctx);
}

/* Sockets that are not stamped: not UDP, or with the caller's own SO_TIMESTAMPING (which the
 * library leaves as it was); the option the library set is cleared when the socket leaves. */
static void test_unsupported_and_restored(void **state)
{
	(void)state;
	struct ms_ctx *ctx = new_ctx(1, MS_TS_ALL_DESTS, NULL);
	struct ms_group *g;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UDP4_CONN, 2), 0);
	assert_int_equal(net_add(&nt, K_UNIX, 1), 0);
	assert_int_equal(net_add(&nt, K_TCP4, 1), 0);
	int theirs = SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_RX_SOFTWARE, v = 0;
	socklen_t len = sizeof(v);
	assert_int_equal(setsockopt(nt.ep[1].tx, SOL_SOCKET, SO_TIMESTAMPING, &theirs,
				    sizeof(theirs)), 0);
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	unsigned char msg[100];
	make_payload(msg, sizeof(msg), 7);
	assert_int_equal(ms_send(g, msg, sizeof(msg), 0, NULL), 4);
	for (size_t i = 0; i < 4; i++)
		assert_true(expect_one(&nt.ep[i], msg, sizeof(msg), 5000));
	assert_int_equal(getsockopt(nt.ep[0].tx, SOL_SOCKET, SO_TIMESTAMPING, &v, &len), 0);
	assert_int_not_equal(v, 0); /* set by the library while in the group */
	ms_group_ts_collect(g);
	struct ms_snapshot s = snap(ctx);
	assert_int_equal(s.stats.ts_requested, 4);
	assert_int_equal(s.stats.ts_unsupported, 3);
	assert_int_equal(s.stats.ts_stamped, 1);
	assert_int_equal(s.stats.ts_missing, 0);
	/* The fan-out's last destination (TCP) was not stamped: no call-to-last or skew figure
	 * is made up from another destination. */
	assert_int_equal(s.call_first.count, 1);
	assert_int_equal(s.call_last.count, 0);
	assert_int_equal(s.first_last.count, 0);
	len = sizeof(v);
	assert_int_equal(getsockopt(nt.ep[1].tx, SOL_SOCKET, SO_TIMESTAMPING, &v, &len), 0);
	assert_int_equal(v, theirs);
	/* The library's setting stays when the socket leaves (it stamps nothing by itself), and
	 * another context sampling on the socket uses it. */
	int tx0 = nt.ep[0].tx;
	assert_int_equal(ms_group_remove(g, nt.ep[0].id), 0);
	len = sizeof(v);
	assert_int_equal(getsockopt(tx0, SOL_SOCKET, SO_TIMESTAMPING, &v, &len), 0);
	assert_int_equal(v, SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_OPT_ID |
				    SOF_TIMESTAMPING_OPT_TSONLY);
	struct ms_ctx *ctx2 = new_ctx(1, 0, NULL);
	struct ms_group *g2;
	assert_int_equal(ms_group_new(ctx2, &g2), 0);
	struct ms_dest d = { .fd = tx0 };
	assert_true(ms_group_add(g2, &d) >= 0);
	assert_int_equal(ms_send(g2, msg, sizeof(msg), 0, NULL), 1);
	assert_true(expect_one(&nt.ep[0], msg, sizeof(msg), 5000));
	ms_group_ts_collect(g2);
	s = snap(ctx2);
	assert_int_equal(s.stats.ts_stamped, 1);
	assert_int_equal(s.stats.ts_unsupported, 0);
	ms_group_free(g2);
	ms_ctx_free(ctx2);
	ms_group_free(g);
	net_free(&nt);
	ms_ctx_free(ctx);
}

/* A sampled destination whose send fails has no stamp: counted missing, not stamped. */
static void test_failed_send_missing(void **state)
{
	(void)state;
	struct ms_ctx *ctx = new_ctx(1, MS_TS_ALL_DESTS, NULL);
	struct ms_group *g;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UDP4, 2), 0);
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	static unsigned char big[70000]; /* more than one UDP datagram can carry */
	struct ms_result res[2];
	assert_int_equal(ms_send(g, big, sizeof(big), 0, res), 0);
	assert_int_equal(res[0].status, -EMSGSIZE);
	assert_int_equal(res[1].status, -EMSGSIZE);
	/* The next sampled fan-out accounts the previous one. */
	unsigned char msg[32];
	make_payload(msg, sizeof(msg), 3);
	assert_int_equal(ms_send(g, msg, sizeof(msg), 0, NULL), 2);
	ms_group_ts_collect(g);
	struct ms_snapshot s = snap(ctx);
	assert_int_equal(s.stats.ts_sampled, 2);
	assert_int_equal(s.stats.ts_requested, 4);
	assert_int_equal(s.stats.ts_missing, 2);
	assert_int_equal(s.stats.ts_stamped, 2);
	assert_int_equal(s.dest_lag.count, 2);
	ms_group_free(g);
	net_free(&nt);
	ms_ctx_free(ctx);
}

/* Snapshots from another thread while the owner sends: each one consistent (taken between two
 * calls), and the counters only ever rise. */
struct reader {
	struct ms_ctx *ctx;
	bool stop; /* atomic */
	unsigned long taken, bad;
	uint64_t n;
};

static void *read_loop(void *arg)
{
	struct reader *r = arg;
	uint64_t last = 0;
	while (!__atomic_load_n(&r->stop, __ATOMIC_RELAXED)) {
		struct ms_snapshot s = { .size = sizeof(s) };
		if (ms_ctx_snapshot(r->ctx, &s) ||
		    s.stats.dests_attempted != s.stats.fanouts * r->n ||
		    s.stats.dests_accepted != s.stats.dests_attempted ||
		    s.stats.bytes != s.stats.dests_accepted * 64 || s.stats.fanouts < last ||
		    s.dest_lag.count > s.stats.ts_stamped)
			r->bad++;
		last = s.stats.fanouts;
		r->taken++;
	}
	return NULL;
}

static void test_snapshot_from_another_thread(void **state)
{
	(void)state;
	enum { N = 4, CALLS = 20000 };
	/* valgrind runs one thread at a time: a reader spinning on snapshots can keep the sender
	 * from its 20,000 sends for many minutes. ThreadSanitizer runs this test (scripts/test). */
	const char *pre = getenv("LD_PRELOAD");
	if (pre && strstr(pre, "vgpreload"))
		skip();
	struct ms_ctx *ctx = new_ctx(16, 0, NULL);
	struct ms_group *g;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UDP4, N), 0);
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	struct reader r = { .ctx = ctx, .n = N };
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, read_loop, &r), 0);
	unsigned char msg[64];
	make_payload(msg, sizeof(msg), 9);
	for (unsigned c = 0; c < CALLS; c++) {
		assert_int_equal(ms_send(g, msg, sizeof(msg), 0, NULL), N);
		if (c % 64 == 63) /* keep the receive queues short */
			for (size_t i = 0; i < N; i++)
				while (recv(nt.ep[i].rx, msg + 0, 0, MSG_DONTWAIT | MSG_TRUNC) >= 0)
					;
	}
	__atomic_store_n(&r.stop, true, __ATOMIC_RELAXED);
	pthread_join(th, NULL);
	printf("  %lu snapshots taken while sending, %lu inconsistent\n", r.taken, r.bad);
	assert_true(r.taken > 0);
	assert_int_equal(r.bad, 0);
	assert_int_equal(snap(ctx).stats.fanouts, CALLS);
	ms_group_free(g);
	net_free(&nt);
	ms_ctx_free(ctx);
}

/* The live-counter file: header, a slot per context, counters as the snapshot says. */
static const struct ms_shm_slot *slot_at(const struct ms_shm_header *h, unsigned i)
{
	return (const struct ms_shm_slot *)((const char *)h + h->header_size) + i;
}

static uint64_t counter(const struct ms_shm_slot *sl, const char *name)
{
	for (unsigned k = 0; k < sl->ncounters; k++)
		if (!strcmp(sl->counter_name[k], name))
			return __atomic_load_n(&sl->counter[k], __ATOMIC_ACQUIRE);
	fail_msg("no counter %s", name);
	return 0;
}

static void test_shm_file(void **state)
{
	(void)state;
	char dir[] = "/tmp/ms-tstamp-XXXXXX", tmpl[64], path[64];
	assert_non_null(mkdtemp(dir));
	snprintf(tmpl, sizeof(tmpl), "%s/stats-%%p", dir);
	snprintf(path, sizeof(path), "%s/stats-%d", dir, (int)getpid());
	struct ms_ctx *a = new_ctx(1, 0, tmpl), *b = new_ctx(0, 0, tmpl);
	struct ms_group *g;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UDP4, 3), 0);
	assert_int_equal(ms_group_new(a, &g), 0);
	assert_int_equal(net_join(&nt, g, 0), 0);
	unsigned char msg[64];
	make_payload(msg, sizeof(msg), 2);
	for (int c = 0; c < 5; c++)
		assert_int_equal(ms_send(g, msg, sizeof(msg), 0, NULL), 3);
	ms_group_ts_collect(g);

	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal((size_t)st.st_size, MS_SHM_FILE_SIZE);
	const struct ms_shm_header *h = mmap(NULL, MS_SHM_FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(h != MAP_FAILED);
	close(fd);
	assert_true(h->magic == MS_SHM_MAGIC);
	assert_int_equal(h->version, MS_SHM_VERSION);
	assert_int_equal(h->slot_size, sizeof(struct ms_shm_slot));
	assert_int_equal(h->pid, getpid());
	assert_int_equal(h->used, 2);
	const struct ms_shm_slot *sa = slot_at(h, 0), *sb = slot_at(h, 1);
	assert_int_equal(sa->state, MS_SHM_LIVE);
	/* "ctx N" for the context's life; the backend it sends with is the slot's own field. */
	assert_int_equal(strncmp(sa->name, "ctx ", 4), 0);
	assert_null(strchr(sa->name + 4, ' '));
	assert_int_equal(sa->backend, (uint32_t)backend);
	assert_int_equal(counter(sa, "fanouts"), 5);
	assert_int_equal(counter(sa, "dests_accepted"), 15);
	assert_int_equal(counter(sa, "ts_stamped"), 10); /* first and last, 5 times */
	assert_int_equal(counter(sb, "fanouts"), 0);
	assert_string_equal(sa->hist_name[2], "first_last_ns");
	assert_int_equal(sa->hist[2].count, 5);
	/* A second process may not take a live process's file: a child that tries publishes
	 * nowhere, and its context works. */
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct ms_config c = { .size = sizeof(c), .backend = backend, .stats_shm = path,
				       .flags = MS_CFG_IGNORE_ENV };
		struct ms_ctx *x = NULL;
		_exit(ms_ctx_new(&x, &c) == 0 && x ? 0 : 1);
	}
	int wst;
	assert_int_equal(waitpid(pid, &wst, 0), pid);
	assert_true(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
	assert_int_equal(h->used, 2);
	assert_int_equal(h->pid, getpid());
	/* A child that keeps using the parent's context publishes privately, also after it
	 * opened a file of its own: the parent's slot never moves. */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char mine[80];
		snprintf(mine, sizeof(mine), "%s/child-%%p", dir);
		struct ms_config c = { .size = sizeof(c), .backend = MS_BACKEND_LOOP,
				       .stats_shm = mine, .flags = MS_CFG_IGNORE_ENV };
		struct ms_ctx *x = NULL;
		bool ok = ms_ctx_new(&x, &c) == 0;
		for (int k = 0; k < 3; k++) /* (an io_uring ring refuses the child: counted all
					       the same) */
			ms_send(g, msg, sizeof(msg), 0, NULL);
		struct ms_snapshot cs = { .size = sizeof(cs) };
		ok &= ms_ctx_snapshot(a, &cs) == 0 && cs.stats.fanouts == 8;
		ms_ctx_free(x);
		snprintf(mine, sizeof(mine), "%s/child-%d", dir, (int)getpid());
		unlink(mine);
		_exit(ok ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &wst, 0), pid);
	assert_true(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
	assert_int_equal(counter(sa, "fanouts"), 5);
	ms_group_free(g);
	ms_ctx_free(a);
	assert_int_equal(sa->state, MS_SHM_CLOSED);
	assert_int_equal(counter(sa, "fanouts"), 5); /* the last values stay */
	ms_ctx_free(b);
	munmap((void *)h, MS_SHM_FILE_SIZE);

	/* The file of a process that is gone (the child's pid, reaped) is taken over, from
	 * zero; a file that is not a live-counter file is left alone. */
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	int32_t dead = pid;
	assert_int_equal(pwrite(fd, &dead, sizeof(dead), offsetof(struct ms_shm_header, pid)),
			 (ssize_t)sizeof(dead));
	close(fd);
	char fixed[80];
	snprintf(fixed, sizeof(fixed), "%s", path);
	struct ms_ctx *c2 = new_ctx(0, 0, fixed);
	fd = open(path, O_RDONLY);
	h = mmap(NULL, MS_SHM_FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	assert_true(h != MAP_FAILED);
	assert_int_equal(h->pid, getpid());
	assert_int_equal(h->used, 1);
	assert_int_equal(slot_at(h, 0)->state, MS_SHM_LIVE);
	munmap((void *)h, MS_SHM_FILE_SIZE);
	ms_ctx_free(c2);
	unlink(path);
	char other[80];
	snprintf(other, sizeof(other), "%s/not-ours", dir);
	fd = open(other, O_RDWR | O_CREAT, 0600);
	char junk[250];
	memset(junk, 'x', sizeof(junk));
	assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);
	struct ms_ctx *c3 = new_ctx(0, 0, other); /* works, publishes nowhere */
	ms_ctx_free(c3);
	struct stat st2;
	assert_int_equal(stat(other, &st2), 0);
	assert_int_equal(st2.st_size, 250);
	unlink(other);
	rmdir(dir);
	net_free(&nt);
}

/* What the device's driver says it can stamp (ethtool's SOF_TIMESTAMPING_* capabilities), read
 * here independently of the library. */
static uint32_t dev_caps(const char *name)
{
	struct ethtool_ts_info info = { .cmd = ETHTOOL_GET_TS_INFO };
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	ifr.ifr_data = (void *)&info;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(ioctl(fd, SIOCETHTOOL, &ifr), 0);
	close(fd);
	return info.so_timestamping;
}

/*
 * MS_TS_HARDWARE where the device cannot stamp in hardware: every stamped destination gets the
 * software stamps it gets without the flag, names the device it left by, and counts in
 * ts_hw_unavailable; the sockets' SO_TIMESTAMPING is the software one. eps: the endpoints
 * (their receivers get every datagram byte for byte), dev: the device they are reached by.
 */
static void hw_fallback(struct net *nt, size_t n, const char *dev)
{
	uint32_t caps = dev_caps(dev);
	/* The premise: a device that stamps in software and not in hardware. */
	assert_true(caps & SOF_TIMESTAMPING_TX_SOFTWARE);
	assert_false(caps & SOF_TIMESTAMPING_TX_HARDWARE);
	unsigned ifindex = if_nametoindex(dev);
	assert_true(ifindex > 0);

	struct ms_ctx *ctx = new_ctx(1, MS_TS_ALL_DESTS | MS_TS_HARDWARE, NULL);
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	assert_int_equal(net_join(nt, g, 0), 0);
	unsigned char msg[300];
	for (int round = 1; round <= 2; round++) {
		make_payload(msg, sizeof(msg), (unsigned)round);
		struct ms_result res[64];
		assert_true(n <= 64);
		assert_int_equal(ms_send(g, msg, sizeof(msg), 0, res), (int)n);
		assert_true(ms_group_ts_collect(g) >= (int)n);
		struct ms_ts_dest td[64];
		assert_int_equal(ms_group_ts_last(g, td, 64, NULL), (int)n);
		for (size_t i = 0; i < n; i++) {
			assert_int_equal(td[i].flags, MS_TS_SCHED | MS_TS_SND);
			assert_int_equal(td[i].ifindex, ifindex);
			assert_true(td[i].snd_ns >= td[i].sched_ns && td[i].sched_ns >= 0);
			long e = net_find(nt, td[i].id);
			assert_true(e >= 0);
			/* The datagram itself, intact, at its receiver. */
			struct pollfd p = { .fd = nt->ep[e].rx, .events = POLLIN };
			assert_int_equal(poll(&p, 1, 5000), 1);
			unsigned char buf[512];
			assert_int_equal(recv(nt->ep[e].rx, buf, sizeof(buf), MSG_DONTWAIT),
					 (ssize_t)sizeof(msg));
			assert_memory_equal(buf, msg, sizeof(msg));
			/* Software stamping only on the socket: nothing asks the device. */
			int opt = 0;
			socklen_t len = sizeof(opt);
			assert_int_equal(getsockopt(nt->ep[e].tx, SOL_SOCKET, SO_TIMESTAMPING, &opt,
						    &len), 0);
			assert_false(opt & SOF_TIMESTAMPING_RAW_HARDWARE);
		}
		struct ms_snapshot s = snap(ctx);
		assert_int_equal(s.stats.ts_requested, round * n);
		assert_int_equal(s.stats.ts_stamped, round * n);
		assert_int_equal(s.stats.ts_hw_unavailable, round * n);
		assert_int_equal(s.stats.ts_hw_stamped, 0);
		assert_int_equal(s.stats.ts_missing, 0);
	}
	ms_group_free(g);
	ms_ctx_free(ctx);
}

static void test_hardware_loopback(void **state)
{
	(void)state;
	struct net nt;
	net_init(&nt);
	assert_int_equal(net_add(&nt, K_UDP4, 3), 0);
	assert_int_equal(net_add(&nt, K_UDP4_CONN, 2), 0);
	hw_fallback(&nt, 5, "lo");
	net_free(&nt);
}

/*
 * The same across a veth pair into another network namespace, which tests/integration/
 * tstamp-veth.sh makes (MS_TEST_NS_R: the receivers' namespace, 10.77.0.2 on its end): the
 * destinations leave by xs0, in this namespace.
 */
static void test_hardware_veth(void **state)
{
	(void)state;
	const char *nsr = getenv("MS_TEST_NS_R");
	int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	int there = open(nsr, O_RDONLY | O_CLOEXEC);
	assert_true(self >= 0 && there >= 0);
	enum { N = 4 };
	struct net nt;
	net_init(&nt);
	nt.ep = calloc(N, sizeof(*nt.ep));
	assert_non_null(nt.ep);
	nt.cap = N;
	int shared = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(shared >= 0);
	for (size_t i = 0; i < N; i++) {
		/* The receiver in R, the sender here: half on the shared unconnected socket, half
		 * on connected sockets of their own. */
		struct endpoint *e = &nt.ep[nt.n++];
		struct sockaddr_in a = { .sin_family = AF_INET };
		socklen_t alen = sizeof(a);
		inet_pton(AF_INET, "10.77.0.2", &a.sin_addr);
		assert_int_equal(setns(there, CLONE_NEWNET), 0);
		e->rx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		assert_int_equal(bind(e->rx, (struct sockaddr *)&a, sizeof(a)), 0);
		assert_int_equal(getsockname(e->rx, (struct sockaddr *)&a, &alen), 0);
		assert_int_equal(setns(self, CLONE_NEWNET), 0);
		e->kind = i % 2 ? K_UDP4_CONN : K_UDP4;
		memcpy(&e->addr, &a, sizeof(a));
		e->addrlen = sizeof(a);
		if (i % 2) {
			e->tx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
			assert_int_equal(connect(e->tx, (struct sockaddr *)&a, sizeof(a)), 0);
			e->own_tx = true;
		} else {
			e->tx = shared;
		}
	}
	hw_fallback(&nt, N, "xs0");
	net_free(&nt);
	close(shared);
	close(self);
	close(there);
}

static void test_bad_config(void **state)
{
	(void)state;
	struct ms_ctx *ctx = NULL;
	struct ms_config c = { .size = sizeof(c), .backend = backend, .ts_sample = 1000000001 };
	assert_int_equal(ms_ctx_new(&ctx, &c), -EINVAL);
	c.ts_sample = 1;
	c.ts_flags = MS_TS_ALL_FLAGS + 1; /* a flag nobody defined */
	assert_int_equal(ms_ctx_new(&ctx, &c), -EINVAL);
	c.ts_flags = 0;
	c.stats_shm = "";
	assert_int_equal(ms_ctx_new(&ctx, &c), -EINVAL);
	static char longpath[5000];
	memset(longpath, 'a', sizeof(longpath) - 1);
	c.stats_shm = longpath;
	assert_int_equal(ms_ctx_new(&ctx, &c), -EINVAL);
	assert_null(ctx);
	/* ts_flags qualify a sampling that is on: without ts_sample they are refused. */
	c.stats_shm = NULL;
	c.ts_sample = 0;
	c.ts_flags = MS_TS_ALL_DESTS;
	assert_int_equal(ms_ctx_new(&ctx, &c), -EINVAL);
	assert_null(ctx);
	/* No size that cuts the struct short (stats_shm is a pointer): the layouts before the
	 * timestamp and the workers fields were never released. */
	struct ms_config old = { .size = 0, .backend = backend };
	for (old.size = 0; old.size < sizeof(old); old.size++)
		assert_int_equal(ms_ctx_new(&ctx, &old), -EINVAL);
	/* A bad MULTISEND_STATS_SHM is the environment's problem, not the program's: warned
	 * about, never a failure. */
	setenv("MULTISEND_STATS_SHM", "", 1);
	struct ms_config env = { .size = sizeof(env), .backend = backend };
	assert_int_equal(ms_ctx_new(&ctx, &env), 0);
	ms_ctx_free(ctx);
	ctx = NULL;
	unsetenv("MULTISEND_STATS_SHM");
	struct ms_snapshot s = { .size = 8 };
	assert_int_equal(ms_ctx_snapshot(NULL, &s), -EINVAL);
	assert_int_equal(ms_group_ts_collect(NULL), -EINVAL);
	assert_int_equal(ms_group_ts_last(NULL, NULL, 0, NULL), -EINVAL);
}

int main(int argc, char **argv)
{
	/* Before any socket, but not under tstamp-veth.sh, which runs it in the namespace
	 * holding its veth: a loopback of its own, where no other test's datagram can reach a
	 * receiver whose stamps are compared with the sender's (net.c). */
	if (!getenv("MS_TEST_NS_R"))
		net_private_netns("tstamp");
	backend = net_backend_arg(argc, argv, (struct ms_config){ .ts_sample = 1 }, NULL, 0);
	if (getenv("MS_TEST_NS_R")) { /* tstamp-veth.sh, in the senders' namespace */
		const struct CMUnitTest veth[] = { cmocka_unit_test(test_hardware_veth) };
		return cmocka_run_group_tests_name(argv[1], veth, NULL, NULL);
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_all_shared),
		cmocka_unit_test(test_all_connected),
		cmocka_unit_test(test_all_ipv6),
		cmocka_unit_test(test_one_in_k),
		cmocka_unit_test(test_unsupported_and_restored),
		cmocka_unit_test(test_failed_send_missing),
		cmocka_unit_test(test_snapshot_from_another_thread),
		cmocka_unit_test(test_shm_file),
		cmocka_unit_test(test_hardware_loopback),
		cmocka_unit_test(test_bad_config),
	};
	return cmocka_run_group_tests_name(argv[1], tests, NULL, NULL);
}
