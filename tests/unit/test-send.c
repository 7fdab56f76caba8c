/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the send path on a fake kernel (fake-sys.h): per-destination results, exactly-once
 * delivery, the sendmmsg resume logic, chunking, statistics and group bookkeeping, for the loop
 * and sendmmsg backends. Every send goes through send_check(), which checks the whole contract
 * of ms_send against what the test scripted and what the fake kernel saw.
 *
 * Usage: test-send [NAME]   (all tests, or the one named)
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "multisend.h"
#include "fake-sys.h"

#define MAX_FDS 128
#define MMSG_MAX 1024u /* sendmmsg's per-call limit, from the header's backend description */
#define WANT_FULL INT_MIN /* want[h]: the whole message */
#define MSG_LEN 100

/* ---- harness ------------------------------------------------------------------------------ */

static struct {
	enum ms_backend be;
	struct ms_ctx *ctx;
	struct ms_group *g;
	int fds[MAX_FDS];
	int nfds;
	uint16_t next_port;
	/* per fake handle */
	int *id;   /* its id in the group, -1 when it is not in the group */
	int *want; /* the status it must get: WANT_FULL, bytes, or -errno */
	size_t cap;
	/* the message */
	bool flat; /* ms_send(iov[0]) rather than ms_sendv(iov, iovcnt) */
	const struct iovec *iov;
	int iovcnt;
	unsigned send_flags;
	char what[200]; /* the case being checked, for failure messages */
	/* the ids of the last send's results in order, to check that the group's order changes
	 * only with add and remove */
	int *order;
	size_t norder;
	bool reordered; /* an add or remove since that send */
	size_t max_size; /* the largest size the group has had */
} H;

static unsigned char body[4096];
static const struct iovec flat_msg[1] = { { body, MSG_LEN } };
static const struct iovec two_msg[2] = { { body + 1000, 16 }, { body + 2000, MSG_LEN - 16 } };

#define CHECK(cond)                                                                          \
	do {                                                                                 \
		if (!(cond))                                                                 \
			fail_msg("[%s] %s:%d: %s is false", H.what, __FILE__, __LINE__, #cond); \
	} while (0)
#define CHECK_EQ(a, b)                                                                       \
	do {                                                                                 \
		long long a_ = (long long)(a), b_ = (long long)(b);                          \
		if (a_ != b_)                                                                \
			fail_msg("[%s] %s:%d: %s is %lld, expected %s = %lld", H.what, __FILE__, \
				 __LINE__, #a, a_, #b, b_);                                   \
	} while (0)

static void set_case(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_case(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(H.what, sizeof(H.what), fmt, ap);
	va_end(ap);
}

static const char *ename(int e)
{
	const char *s = strerrorname_np(e);
	return s ? s : "?";
}

static void use_flat(void)
{
	H.flat = true;
	H.iov = flat_msg;
	H.iovcnt = 1;
}

static void use_iov(const struct iovec *iov, int iovcnt)
{
	H.flat = false;
	H.iov = iov;
	H.iovcnt = iovcnt;
}

static size_t msg_len(void)
{
	size_t len = 0;
	for (int k = 0; k < H.iovcnt; k++)
		len += H.iov[k].iov_len;
	return len;
}

static void close_case(void)
{
	ms_group_free(H.g);
	ms_ctx_free(H.ctx);
	H.g = NULL;
	H.ctx = NULL;
	for (int i = 0; i < H.nfds; i++)
		close(H.fds[i]);
	H.nfds = 0;
	free(H.id);
	free(H.want);
	H.id = H.want = NULL;
	H.cap = 0;
	free(H.order);
	H.order = NULL;
	H.norder = 0;
	H.reordered = false;
	H.max_size = 0;
}

/* A fresh context, group and fake kernel on backend be. */
static void new_case(enum ms_backend be)
{
	close_case();
	fake_install();
	H.next_port = 20000;
	H.be = be;
	H.send_flags = 0;
	struct ms_config cfg = {
		.size = sizeof(cfg),
		.backend = be,
		.flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV,
	};
	assert_int_equal(ms_ctx_new(&H.ctx, &cfg), 0);
	assert_int_equal(ms_ctx_backend(H.ctx), be);
	assert_int_equal(ms_group_new(H.ctx, &H.g), 0);
}

static int setup(void **state)
{
	(void)state;
	memset(&H, 0, sizeof(H));
	for (size_t i = 0; i < sizeof(body); i++)
		body[i] = (unsigned char)(i * 131 + 7);
	use_flat();
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	close_case();
	fake_uninstall(); /* ms__sys_reset(): the real system calls again */
	return 0;
}

static const char *be_name(void)
{
	return ms_backend_name(H.be);
}

/* ---- sockets and destinations -------------------------------------------------------------- */

static int keep_fd(int fd)
{
	assert_true(fd >= 0);
	assert_true(H.nfds < MAX_FDS);
	H.fds[H.nfds++] = fd;
	return fd;
}

static struct sockaddr_in next_addr(void)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	sin.sin_port = htons(H.next_port++);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return sin;
}

/* An unbound UDP socket: ms_group_add accepts it; no packet ever leaves (the kernel is fake). */
static int udp_socket(void)
{
	return keep_fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
}

/* A UDP socket connected to 127.0.0.1 (no listener needed to connect). */
static int udp_connected(void)
{
	int fd = udp_socket();
	struct sockaddr_in sin = next_addr();
	assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	return fd;
}

static int stream_socket(void)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	keep_fd(sv[1]);
	return keep_fd(sv[0]);
}

static void track(int h)
{
	if ((size_t)h >= H.cap) {
		size_t ncap = H.cap ? H.cap * 2 : 256;
		while (ncap <= (size_t)h)
			ncap *= 2;
		H.id = realloc(H.id, ncap * sizeof(*H.id));
		H.want = realloc(H.want, ncap * sizeof(*H.want));
		assert_non_null(H.id);
		assert_non_null(H.want);
		for (size_t i = H.cap; i < ncap; i++) {
			H.id[i] = -1;
			H.want[i] = WANT_FULL;
		}
		H.cap = ncap;
	}
}

/* ms_group_add for a registered fake destination; returns what ms_group_add returned. */
static int group_add(int h)
{
	const struct fake_dest *d = &fk.d[h];
	struct ms_dest md = {
		.fd = d->fd,
		.addrlen = d->addrlen,
		.addr = d->addrlen ? (const struct sockaddr *)&d->addr : NULL,
	};
	int id = ms_group_add(H.g, &md);
	if (id >= 0) {
		for (size_t k = 0; k < fk.n; k++)
			if (H.id[k] == id)
				fail_msg("[%s] ms_group_add gave id %d, which destination %zu holds", H.what,
					 id, k);
		H.id[h] = id;
		H.reordered = true;
		/* the header: ids stay below the largest size the group has had */
		if (ms_group_size(H.g) > H.max_size)
			H.max_size = ms_group_size(H.g);
		if ((size_t)id >= H.max_size)
			fail_msg("[%s] id %d, but the group never had more than %zu destinations",
				 H.what, id, H.max_size);
	}
	return id;
}

static void group_remove(int h)
{
	CHECK(H.id[h] >= 0);
	CHECK_EQ(ms_group_remove(H.g, H.id[h]), 0);
	H.id[h] = -1;
	H.reordered = true;
}

/* Register (fd, next address) with the fake kernel; add it to the group unless !join. */
static int new_dest(int fd, bool join)
{
	struct sockaddr_in sin = next_addr();
	int h = fake_add(fd, (struct sockaddr *)&sin, sizeof(sin));
	track(h);
	if (join)
		CHECK(group_add(h) >= 0);
	return h;
}

static int new_peer(int fd, bool join)
{
	int h = fake_add(fd, NULL, 0);
	track(h);
	if (join)
		CHECK(group_add(h) >= 0);
	return h;
}

/* Script h: the next `times` attempts fail with err (FAKE_ALWAYS: all); want: its status. */
static void script(int h, int err, int times, int want)
{
	fake_fail(h, err, times);
	H.want[h] = want;
}

static void clear_scripts(void)
{
	fake_clear_scripts();
	for (size_t h = 0; h < fk.n; h++)
		H.want[h] = WANT_FULL;
}

/* The destination the kernel saw at position pos in the previous round. */
static int handle_at(long pos)
{
	for (size_t h = 0; h < fk.n; h++)
		if (H.id[h] >= 0 && fk.d[h].first_seq == pos)
			return (int)h;
	fail_msg("[%s] no destination was seen at position %ld", H.what, pos);
	return -1;
}

/* ---- models ------------------------------------------------------------------------------- */

enum { C_AGAIN, C_NOBUFS, C_MSGSIZE, C_UNREACH, C_CONN, C_BADF, C_OTHER, C_N };

/* The error classes of struct ms_stats, as the header lists them. */
static int errclass(int e)
{
	switch (e) {
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

static uint64_t class_count(const struct ms_stats *s, int k)
{
	const uint64_t v[C_N] = { s->err_again,   s->err_nobufs, s->err_msgsize, s->err_unreach,
				  s->err_conn,    s->err_badf,   s->err_other };
	return v[k];
}

/*
 * System calls a one-socket group costs on the sendmmsg backend: the kernel order is the one
 * of the previous round (needed only for scripted destinations), the failures are the current
 * scripts. A call sends up to 1024 messages
 * from the first one not yet settled; an error on its first message settles that message (or is
 * retried, for EINTR); an error further on is learnt by the next call, which starts there.
 */
static long model_mmsg_calls(void)
{
	size_t n = ms_group_size(H.g);
	int *left = calloc(n + 1, sizeof(*left)), *err = calloc(n + 1, sizeof(*err));
	assert_non_null(left);
	assert_non_null(err);
	for (size_t h = 0; h < fk.n; h++) {
		if (H.id[h] < 0 || !fk.d[h].fail_left)
			continue; /* the order matters only for scripted destinations */
		long s = fk.d[h].first_seq;
		CHECK(s >= 0 && (size_t)s < n);
		left[s] = fk.d[h].fail_left;
		err[s] = fk.d[h].fail_errno;
	}
	long calls = 0;
	size_t off = 0;
	while (off < n) {
		unsigned cap = (size_t)calls < fk.ncaps ? fk.caps[calls] : fk.cap_every;
		calls++;
		size_t end = n - off > MMSG_MAX ? off + MMSG_MAX : n, sent = 0;
		int e = 0;
		for (size_t i = off; i < end && !(cap && sent == cap); i++, sent++) {
			if (left[i]) {
				if (left[i] > 0)
					left[i]--;
				e = err[i];
				break;
			}
		}
		if (e && !sent)
			off += e != EINTR;
		else
			off += sent;
	}
	free(left);
	free(err);
	return calls;
}

/* The loop backend: one call per destination, plus one per EINTR to retry. */
static long model_loop_calls(void)
{
	long calls = 0;
	for (size_t h = 0; h < fk.n; h++) {
		if (H.id[h] < 0)
			continue;
		calls++;
		if (fk.d[h].fail_errno == EINTR && fk.d[h].fail_left > 0)
			calls += fk.d[h].fail_left;
	}
	return calls;
}

/* For a one-socket group (sendmmsg: after a round that fixed the kernel order). */
static long model_calls(void)
{
	return H.be == MS_BACKEND_LOOP ? model_loop_calls() : model_mmsg_calls();
}

/* ---- the contract, checked on one send ----------------------------------------------------- */

static struct ms_stats stats(void)
{
	struct ms_stats s;
	memset(&s, 0, sizeof(s));
	s.size = sizeof(s);
	assert_int_equal(ms_ctx_stats(H.ctx, &s), 0);
	return s;
}

static int do_send(struct ms_result *res)
{
	if (H.flat)
		return ms_send(H.g, H.iov[0].iov_base, H.iov[0].iov_len, H.send_flags, res);
	return ms_sendv(H.g, H.iov, H.iovcnt, H.send_flags, res);
}

/*
 * Send the current message to the group and check everything: the return value, every result
 * (each live destination exactly once, with its id and the status the test wants), exactly-once
 * delivery in the fake kernel, the payload, flags and headers the kernel saw, the statistics,
 * and (want_calls >= 0) the number of system calls. Returns ms_send's value.
 */
static int send_check(long want_calls)
{
	const size_t len = msg_len();
	const size_t n = ms_group_size(H.g);
	size_t live = 0;
	int maxid = -1;
	for (size_t h = 0; h < fk.n; h++) {
		if (H.id[h] >= 0) {
			live++;
			if (H.id[h] > maxid)
				maxid = H.id[h];
		}
	}
	CHECK_EQ(n, live);

	int *handle_of = malloc(((size_t)maxid + 2) * sizeof(*handle_of));
	bool *seen = calloc(fk.n + 1, sizeof(*seen));
	struct ms_result *res = malloc((n + 1) * sizeof(*res));
	assert_non_null(handle_of);
	assert_non_null(seen);
	assert_non_null(res);
	for (int i = 0; i <= maxid; i++)
		handle_of[i] = -1;
	for (size_t h = 0; h < fk.n; h++)
		if (H.id[h] >= 0)
			handle_of[H.id[h]] = (int)h;
	for (size_t i = 0; i <= n; i++)
		res[i] = (struct ms_result){ .id = -77, .status = 0x5eed };

	fake_new_round();
	fk.expect_iov = H.iov;
	fk.expect_iovcnt = H.iovcnt;
	fk.expect_flags = MSG_NOSIGNAL | ((H.send_flags & MS_SEND_DONTWAIT) ? MSG_DONTWAIT : 0);
	const struct ms_stats before = stats();
	const int r = do_send(res);
	const struct ms_stats after = stats();

	/* What the caller is told. */
	uint64_t accepted = 0, partial = 0, failed = 0, bytes = 0, cls[C_N] = { 0 };
	for (size_t i = 0; i < n; i++) {
		int id = res[i].id;
		if (id < 0 || id > maxid || handle_of[id] < 0)
			fail_msg("[%s] res[%zu].id = %d is not an id in the group", H.what, i, id);
		int h = handle_of[id];
		if (seen[h])
			fail_msg("[%s] res[%zu].id = %d appears twice", H.what, i, id);
		seen[h] = true;
		long want = H.want[h] == WANT_FULL ? (long)len : H.want[h];
		if (res[i].status != want)
			fail_msg("[%s] res[%zu] (id %d, destination %d, kernel position %ld): status %d "
				 "(%s), expected %ld",
				 H.what, i, id, h, fk.d[h].first_seq, res[i].status,
				 res[i].status < 0 ? ename(-res[i].status) : "bytes", want);
		if (want < 0) {
			failed++;
			cls[errclass((int)-want)]++;
		} else {
			bytes += (uint64_t)want;
			if ((size_t)want == len)
				accepted++;
			else
				partial++;
		}
	}
	CHECK_EQ(res[n].id, -77); /* nothing written past the group's size */
	CHECK_EQ(res[n].status, 0x5eed);
	if (!H.reordered && H.order) {
		CHECK_EQ(H.norder, n);
		for (size_t i = 0; i < n; i++)
			if (res[i].id != H.order[i])
				fail_msg("[%s] res[%zu].id = %d, but %d in the previous send, with no add or "
					 "remove in between", H.what, i, res[i].id, H.order[i]);
	}
	H.order = realloc(H.order, (n + 1) * sizeof(*H.order));
	assert_non_null(H.order);
	for (size_t i = 0; i < n; i++)
		H.order[i] = res[i].id;
	H.norder = n;
	H.reordered = false;
	CHECK_EQ(r, accepted);

	/* What the kernel saw. */
	for (size_t h = 0; h < fk.n; h++) {
		const struct fake_dest *d = &fk.d[h];
		if (H.id[h] < 0) {
			if (d->attempts)
				fail_msg("[%s] destination %zu is not in the group but was attempted %u "
					 "times", H.what, h, d->attempts);
			continue;
		}
		long want = H.want[h] == WANT_FULL ? (long)len : H.want[h];
		if (d->delivered != (want >= 0 ? 1u : 0u))
			fail_msg("[%s] destination %zu (id %d, position %ld) delivered %u times, "
				 "attempted %u times; expected %u delivery", H.what, h, H.id[h],
				 d->first_seq, d->delivered, d->attempts, want >= 0 ? 1u : 0u);
		/* at most one unreported failure, at most one scripted transient failure */
		CHECK(d->attempts >= 1 && d->attempts <= 2);
	}
	CHECK_EQ(fk.strays, 0);
	CHECK_EQ(fk.bad_headers, 0);
	CHECK_EQ(fk.bad_payloads, 0);
	CHECK_EQ(fk.bad_flags, 0);
	CHECK(fk.max_vlen <= MMSG_MAX);
	if (H.be == MS_BACKEND_LOOP)
		CHECK_EQ(fk.sendmmsg_calls, 0);
	else
		CHECK_EQ(fk.sendto_calls + fk.sendmsg_calls, 0);
	if (want_calls >= 0)
		CHECK_EQ(fake_syscalls(), want_calls);

	/* What the statistics say. */
	CHECK_EQ(ms_ctx_backend(H.ctx), H.be);
	CHECK_EQ(after.reserved, 0);
	CHECK_EQ(after.fanouts - before.fanouts, n ? 1 : 0);
	CHECK_EQ(after.dests_attempted - before.dests_attempted, n);
	CHECK_EQ(after.dests_accepted - before.dests_accepted, accepted);
	CHECK_EQ(after.dests_partial - before.dests_partial, partial);
	CHECK_EQ(after.dests_failed - before.dests_failed, failed);
	CHECK_EQ(after.bytes - before.bytes, bytes);
	CHECK_EQ(after.syscalls - before.syscalls, fake_syscalls());
	for (int k = 0; k < C_N; k++)
		if (class_count(&after, k) - class_count(&before, k) != cls[k])
			fail_msg("[%s] error class %d counted %llu, expected %llu", H.what, k,
				 (unsigned long long)(class_count(&after, k) - class_count(&before, k)),
				 (unsigned long long)cls[k]);

	free(handle_of);
	free(seen);
	free(res);
	return r;
}

/* ---- 2, 5: one failing destination, every errno, every position ---------------------------- */

static const int matrix_errnos[] = {
	EAGAIN, ENOBUFS, EMSGSIZE, ECONNREFUSED, EHOSTUNREACH, ENETUNREACH, ENETDOWN, EPIPE,
	ECONNRESET, EBADF, ENOTSOCK, EFAULT, EINVAL, ENOMEM, EACCES, EPERM,
};
#define NERRNOS (sizeof(matrix_errnos) / sizeof(matrix_errnos[0]))

/* n addresses on one socket; returns the first handle (handles are consecutive). */
static int one_socket_group(unsigned n)
{
	int fd = udp_socket();
	int first = new_dest(fd, true);
	for (unsigned i = 1; i < n; i++)
		new_dest(fd, true);
	return first;
}

static void set_message(int api)
{
	if (api == 0)
		use_flat();
	else
		use_iov(two_msg, 2);
}

static const char *api_name(int api)
{
	return api == 0 ? "ms_send" : "ms_sendv(2 iovecs)";
}

static void errno_matrix(enum ms_backend be, unsigned n, const unsigned *pos, size_t npos)
{
	for (int api = 0; api < 2; api++) {
		for (size_t e = 0; e < NERRNOS; e++) {
			for (size_t p = 0; p < npos; p++) {
				const int err = matrix_errnos[e];
				new_case(be);
				set_message(api);
				set_case("%s %s n=%u %s at position %u", ms_backend_name(be),
					 api_name(api), n, ename(err), pos[p]);
				one_socket_group(n);
				/* a clean round fixes the order in which the kernel sees them */
				CHECK_EQ(send_check(model_calls()), n);
				int h = handle_at(pos[p]);
				script(h, err, FAKE_ALWAYS, -err);
				/* sendmmsg, by hand: one failure at the first or the last position of
				 * a chunk costs one more call, elsewhere two more (the partial return,
				 * then the failing message alone) */
				long calls = n;
				if (be == MS_BACKEND_SENDMMSG && n <= MMSG_MAX)
					calls = pos[p] == 0 || pos[p] == n - 1 ? 2 : 3;
				else if (be == MS_BACKEND_SENDMMSG) /* 1030 = 1024 + 6 */
					calls = 3;
				CHECK_EQ(model_calls(), calls);
				CHECK_EQ(send_check(calls), n - 1);
				/* and the destination's next success is reported as such */
				clear_scripts();
				CHECK_EQ(send_check(model_calls()), n);
			}
		}
	}
}

static const unsigned pos10[] = { 0, 1, 5, 8, 9 };
static const unsigned pos1030[] = { 0, 1023, 1024, 1029 };

static void mmsg_errno_matrix_n10(void **state)
{
	(void)state;
	errno_matrix(MS_BACKEND_SENDMMSG, 10, pos10, 5);
}

static void mmsg_errno_matrix_n1030(void **state)
{
	(void)state;
	errno_matrix(MS_BACKEND_SENDMMSG, 1030, pos1030, 4);
}

static void loop_errno_matrix_n10(void **state)
{
	(void)state;
	errno_matrix(MS_BACKEND_LOOP, 10, pos10, 5);
}

static void loop_errno_matrix_n1030(void **state)
{
	(void)state;
	errno_matrix(MS_BACKEND_LOOP, 1030, pos1030, 4);
}

/* A single destination, alone in its chunk, failing: the matrix's errnos and the rest of those
 * the header's error classes name. */
static void one_dest_failing(void **state)
{
	(void)state;
	static const int more[] = { EHOSTDOWN, ENOTCONN, EDESTADDRREQ, EWOULDBLOCK, EIO, EOPNOTSUPP };
	const enum ms_backend bes[] = { MS_BACKEND_SENDMMSG, MS_BACKEND_LOOP };
	for (int b = 0; b < 2; b++) {
		for (size_t e = 0; e < NERRNOS + sizeof(more) / sizeof(more[0]); e++) {
			int err = e < NERRNOS ? matrix_errnos[e] : more[e - NERRNOS];
			new_case(bes[b]);
			set_case("%s n=1 %s", be_name(), ename(err));
			int h = one_socket_group(1);
			script(h, err, FAKE_ALWAYS, -err);
			CHECK_EQ(send_check(1), 0);
			/* and next to a connected destination on another socket */
			new_peer(udp_connected(), true);
			CHECK_EQ(send_check(2), 1);
		}
	}
}

/* ---- several failures in one call ---------------------------------------------------------- */

static void multi_failures(enum ms_backend be)
{
	static const struct {
		unsigned n;
		unsigned fail[8];
		unsigned nfail; /* ~0u: every destination fails */
	} cases[] = {
		{ 10, { 2, 3, 4 }, 3 },
		{ 10, { 0, 1 }, 2 },
		{ 10, { 8, 9 }, 2 },
		{ 10, { 0, 5, 9 }, 3 },
		{ 10, { 1, 3, 5, 7, 9 }, 5 },
		{ 10, { 0, 2, 4, 6, 8 }, 5 },
		{ 10, { 0 }, ~0u },
		{ 2, { 0 }, ~0u },
		{ 1030, { 1022, 1023, 1024, 1025 }, 4 },
		{ 1030, { 0, 1023, 1024, 1029 }, 4 },
		{ 1030, { 1, 2, 1028, 1029 }, 4 },
		{ 1030, { 0 }, ~0u },
	};
	for (int api = 0; api < 2; api++) {
		for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
			new_case(be);
			set_message(api);
			unsigned n = cases[c].n;
			bool all = cases[c].nfail == ~0u;
			set_case("%s %s multiple failures, case %zu (n=%u%s)", be_name(),
				 api_name(api), c, n, all ? ", all failing" : "");
			one_socket_group(n);
			CHECK_EQ(send_check(model_calls()), n);
			unsigned nfail = all ? n : cases[c].nfail;
			for (unsigned k = 0; k < nfail; k++) {
				int err = matrix_errnos[(c + k) % NERRNOS];
				int h = handle_at(all ? k : cases[c].fail[k]);
				script(h, err, FAKE_ALWAYS, -err);
			}
			CHECK_EQ(send_check(model_calls()), n - nfail);
		}
	}
}

static void mmsg_multiple_failures(void **state)
{
	(void)state;
	multi_failures(MS_BACKEND_SENDMMSG);
}

static void loop_multiple_failures(void **state)
{
	(void)state;
	multi_failures(MS_BACKEND_LOOP);
}

/* ---- transient errors (first attempt only) -------------------------------------------------- */

/*
 * sendmmsg: a transient error on the first message of a call is that message's status; further
 * on, the kernel only says "k sent", so the library sends the message again as the first of the
 * next call and reports what that attempt gives (here: success). The loop backend reports the
 * error of its one attempt (except EINTR, retried).
 */
static void transient_errors(void **state)
{
	(void)state;
	const enum ms_backend bes[] = { MS_BACKEND_SENDMMSG, MS_BACKEND_LOOP };
	for (int b = 0; b < 2; b++) {
		for (size_t e = 0; e < NERRNOS; e++) {
			for (size_t p = 0; p < 5; p++) {
				int err = matrix_errnos[e];
				new_case(bes[b]);
				set_case("%s n=10 %s once at position %u", be_name(), ename(err), pos10[p]);
				one_socket_group(10);
				CHECK_EQ(send_check(model_calls()), 10);
				int h = handle_at(pos10[p]);
				bool reported = bes[b] == MS_BACKEND_LOOP || pos10[p] == 0;
				script(h, err, 1, reported ? -err : WANT_FULL);
				long calls = model_calls();
				CHECK_EQ(send_check(calls), reported ? 9 : 10);
				CHECK_EQ(fk.d[h].attempts, bes[b] == MS_BACKEND_LOOP ? 1 : 1 + !reported);
			}
		}
	}
}

/* ---- 3: partial returns without error ------------------------------------------------------- */

static void mmsg_partial_returns(void **state)
{
	(void)state;
	static const unsigned seq1[] = { 1, 1, 2 };
	static const unsigned seq2[] = { 1000, 20, 0 };
	static const unsigned seq3[] = { 9 };
	static const struct {
		unsigned n, cap_every;
		const unsigned *caps;
		size_t ncaps;
		int fail_pos; /* -1: none */
		long calls;   /* counted by hand */
	} cases[] = {
		{ 10, 3, NULL, 0, -1, 4 },        /* 3 | 3 | 3 | 1 */
		{ 10, 1, NULL, 0, -1, 10 },       /* one at a time */
		{ 10, 9, NULL, 0, -1, 2 },        /* 9 | 1 */
		{ 10, 0, seq1, 3, -1, 4 },        /* 1 | 1 | 2 | 6 */
		{ 10, 0, seq3, 1, -1, 2 },        /* 9 | 1 */
		{ 10, 3, NULL, 0, 4, 5 },         /* 0-2 | 3, 4 fails | 4: -1 | 5-7 | 8-9 */
		{ 10, 3, NULL, 0, 3, 4 },         /* 0-2 | 3: -1 | 4-6 | 7-9 */
		{ 1030, 0, seq2, 3, -1, 3 },      /* 1000 | 20 of 30 | 10 */
		{ 1030, 500, NULL, 0, -1, 3 },    /* 500 | 500 | 30 */
		{ 1030, 1000, NULL, 0, 1023, 4 }, /* 1000 | 23, 1023 fails | 1023: -1 | 1024-1029 */
		{ 3000, 700, NULL, 0, 2047, 6 },  /* 700 | 700 | 647 | 2047: -1 | 700 | 252 */
	};
	const enum ms_backend be = MS_BACKEND_SENDMMSG;
	for (int api = 0; api < 2; api++) {
		for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
			new_case(be);
			set_message(api);
			set_case("%s partial returns, case %zu (n=%u)", api_name(api), c, cases[c].n);
			one_socket_group(cases[c].n);
			CHECK_EQ(send_check(model_calls()), cases[c].n);
			fk.cap_every = cases[c].cap_every;
			fk.caps = cases[c].caps;
			fk.ncaps = cases[c].ncaps;
			unsigned nfail = 0;
			if (cases[c].fail_pos >= 0) {
				script(handle_at(cases[c].fail_pos), EHOSTUNREACH, FAKE_ALWAYS,
				       -EHOSTUNREACH);
				nfail = 1;
			}
			CHECK_EQ(model_calls(), cases[c].calls);
			CHECK_EQ(send_check(cases[c].calls), cases[c].n - nfail);
			for (size_t k = 0; k < fk.ncalls; k++)
				CHECK(fk.calls[k].vlen > 0);
		}
	}
}

/* The comment's arithmetic above, checked without the model, for one case. */
static void mmsg_partial_three_of_ten(void **state)
{
	(void)state;
	new_case(MS_BACKEND_SENDMMSG);
	set_case("sendmmsg kernel sends only 3 of 10");
	one_socket_group(10);
	fk.cap_every = 3;
	CHECK_EQ(send_check(4), 10);
	const unsigned want_vlen[] = { 10, 7, 4, 1 };
	const int want_ret[] = { 3, 3, 3, 1 };
	CHECK_EQ(fk.ncalls, 4);
	for (int k = 0; k < 4; k++) {
		CHECK_EQ(fk.calls[k].vlen, want_vlen[k]);
		CHECK_EQ(fk.calls[k].ret, want_ret[k]);
	}
}

/* ---- 4: EINTR ---------------------------------------------------------------------------- */

static void eintr_case(enum ms_backend be, unsigned n, const unsigned *pos, size_t npos)
{
	for (int api = 0; api < 2; api++) {
		for (size_t p = 0; p < npos; p++) {
			new_case(be);
			set_message(api);
			set_case("%s %s n=%u EINTR once at position %u", be_name(), api_name(api), n,
				 pos[p]);
			one_socket_group(n);
			CHECK_EQ(send_check(model_calls()), n);
			script(handle_at(pos[p]), EINTR, 1, WANT_FULL);
			long calls = model_calls();
			if (H.be == MS_BACKEND_LOOP)
				CHECK_EQ(calls, n + 1);
			else /* one more call, unless it merely ends a call early (1023 of 1030) */
				CHECK_EQ(calls, (n + MMSG_MAX - 1) / MMSG_MAX + (pos[p] != 1023));
			CHECK_EQ(send_check(calls), n);
		}
		/* EINTR on every destination at once */
		new_case(be);
		set_message(api);
		set_case("%s %s n=%u EINTR once everywhere", be_name(), api_name(api), n);
		int first = one_socket_group(n);
		CHECK_EQ(send_check(model_calls()), n);
		for (unsigned i = 0; i < n; i++)
			script(first + (int)i, EINTR, 1, WANT_FULL);
		CHECK_EQ(send_check(model_calls()), n);
	}
}

static void mmsg_eintr(void **state)
{
	(void)state;
	eintr_case(MS_BACKEND_SENDMMSG, 10, pos10, 5);
	eintr_case(MS_BACKEND_SENDMMSG, 1030, pos1030, 4);
	/* EINTR at 1023 merely ends the first call early: the second covers 1023..1029 */
	new_case(MS_BACKEND_SENDMMSG);
	set_case("sendmmsg n=1030 EINTR at 1023: exact calls");
	one_socket_group(1030);
	CHECK_EQ(send_check(2), 1030);
	script(handle_at(1023), EINTR, 1, WANT_FULL);
	CHECK_EQ(send_check(2), 1030);
	CHECK_EQ(fk.calls[0].ret, 1023);
	CHECK_EQ(fk.calls[1].vlen, 7);
}

static void loop_eintr(void **state)
{
	(void)state;
	eintr_case(MS_BACKEND_LOOP, 10, pos10, 5);
	eintr_case(MS_BACKEND_LOOP, 1030, pos1030, 4);
}

/* ---- 6: chunking ------------------------------------------------------------------------- */

static void check_vlens(const unsigned *want, size_t n)
{
	CHECK_EQ(fk.ncalls, n);
	for (size_t k = 0; k < n; k++)
		CHECK_EQ(fk.calls[k].vlen, want[k]);
}

static void mmsg_chunking(void **state)
{
	(void)state;
	static const struct {
		unsigned n;
		unsigned vlen[3];
		size_t calls;
	} one_socket[] = {
		{ 1, { 1 }, 1 },
		{ 1023, { 1023 }, 1 },
		{ 1024, { 1024 }, 1 },
		{ 1025, { 1024, 1 }, 2 },
		{ 2048, { 1024, 1024 }, 2 },
		{ 3000, { 1024, 1024, 952 }, 3 },
	};
	for (size_t c = 0; c < sizeof(one_socket) / sizeof(one_socket[0]); c++) {
		new_case(MS_BACKEND_SENDMMSG);
		set_case("sendmmsg chunking n=%u", one_socket[c].n);
		one_socket_group(one_socket[c].n);
		CHECK_EQ(send_check((long)one_socket[c].calls), one_socket[c].n);
		check_vlens(one_socket[c].vlen, one_socket[c].calls);
	}

	new_case(MS_BACKEND_SENDMMSG);
	set_case("sendmmsg two sockets x 10 addresses");
	int a = udp_socket(), b = udp_socket();
	for (int i = 0; i < 10; i++) {
		new_dest(a, true);
		new_dest(b, true);
	}
	CHECK_EQ(send_check(2), 20);
	CHECK_EQ(fk.calls[0].vlen, 10);
	CHECK_EQ(fk.calls[1].vlen, 10);
	CHECK(fk.calls[0].fd != fk.calls[1].fd);

	new_case(MS_BACKEND_SENDMMSG);
	set_case("sendmmsg 5 connected sockets");
	for (int i = 0; i < 5; i++)
		new_peer(udp_connected(), true);
	CHECK_EQ(send_check(5), 5);
	for (int k = 0; k < 5; k++) {
		CHECK_EQ(fk.calls[k].vlen, 1);
		for (int j = 0; j < k; j++)
			CHECK(fk.calls[k].fd != fk.calls[j].fd);
	}

	new_case(MS_BACKEND_SENDMMSG);
	set_case("sendmmsg connected socket that also carries 3 addresses");
	int c = udp_connected();
	new_dest(c, true);
	new_peer(c, true);
	new_dest(c, true);
	new_dest(c, true);
	CHECK_EQ(send_check(1), 4);
	CHECK_EQ(fk.calls[0].vlen, 4);

	new_case(MS_BACKEND_SENDMMSG);
	set_case("sendmmsg 3 sockets x 1100 addresses");
	int s[3] = { udp_socket(), udp_socket(), udp_socket() };
	for (int i = 0; i < 1100; i++)
		for (int k = 0; k < 3; k++)
			new_dest(s[k], true);
	CHECK_EQ(send_check(6), 3300);
	/* 6 calls: per socket 1024 + 76, in some bucket order */
	for (size_t k = 0; k < fk.ncalls; k++)
		CHECK(fk.calls[k].vlen == 1024 || fk.calls[k].vlen == 76);

	new_case(MS_BACKEND_LOOP);
	set_case("loop n=1025: one call per destination");
	one_socket_group(1025);
	CHECK_EQ(send_check(1025), 1025);
	CHECK_EQ(fk.sendto_calls, 1025);
	use_iov(two_msg, 2);
	CHECK_EQ(send_check(1025), 1025);
	CHECK_EQ(fk.sendmsg_calls, 1025);
}

/* ---- 7: stream short writes ---------------------------------------------------------------- */

static void stream_short_write(void **state)
{
	(void)state;
	const enum ms_backend bes[] = { MS_BACKEND_SENDMMSG, MS_BACKEND_LOOP };
	for (int b = 0; b < 2; b++) {
		for (int api = 0; api < 2; api++) {
			new_case(bes[b]);
			set_message(api);
			set_case("%s %s stream short write", be_name(), api_name(api));
			int fd = udp_socket();
			new_dest(fd, true);
			int st = new_peer(stream_socket(), true);
			new_dest(fd, true);
			int st2 = new_peer(stream_socket(), true);
			new_peer(udp_connected(), true);
			fake_accept_bytes(st, 7);
			H.want[st] = 7;
			fake_accept_bytes(st2, MSG_LEN - 1);
			H.want[st2] = MSG_LEN - 1;
			/* 2 partial, 3 whole: the return value counts only the whole ones */
			CHECK_EQ(send_check(bes[b] == MS_BACKEND_LOOP ? 5 : 4), 3);
			/* a stream that takes all of it is an accepted destination again */
			fake_accept_bytes(st, MSG_LEN);
			H.want[st] = WANT_FULL;
			CHECK_EQ(send_check(-1), 4);
		}
	}
}

/* ---- 8: ms_sendv's iovecs ---------------------------------------------------------------- */

static void sendv_iovecs(void **state)
{
	(void)state;
	static const struct iovec v1[1] = { { body + 3, 40 } };
	static const struct iovec v2[2] = { { body + 100, 8 }, { body + 500, 1200 } };
	static const struct iovec v3[3] = { { body + 7, 1 }, { NULL, 0 }, { body + 3000, 33 } };
	static const struct iovec v3b[3] = { { body, 10 }, { body + 10, 10 }, { body + 50, 10 } };
	const struct {
		const struct iovec *iov;
		int cnt;
	} shapes[] = { { v1, 1 }, { v2, 2 }, { v3, 3 }, { v3b, 3 }, { NULL, 0 }, { v2, 2 }, { v1, 1 } };
	const enum ms_backend bes[] = { MS_BACKEND_SENDMMSG, MS_BACKEND_LOOP };
	for (int b = 0; b < 2; b++) {
		new_case(bes[b]);
		int fd = udp_socket();
		for (int i = 0; i < 3; i++)
			new_dest(fd, true);
		new_peer(udp_connected(), true);
		new_peer(udp_connected(), true);
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
			use_iov(shapes[s].iov, shapes[s].cnt);
			set_case("%s ms_sendv iovcnt=%d (shape %zu, %zu bytes)", be_name(),
				 shapes[s].cnt, s, msg_len());
			long n = (long)ms_group_size(H.g);
			CHECK_EQ(send_check(bes[b] == MS_BACKEND_LOOP ? n : 3), n);
			if (bes[b] == MS_BACKEND_LOOP && shapes[s].cnt != 1)
				CHECK_EQ(fk.sendmsg_calls, n);
			if (s == 2) {
				/* destinations added now get the current shape too */
				new_dest(fd, true);
				new_dest(fd, true);
				group_remove(0);
			}
		}
		/* and the flat call after vectors */
		use_flat();
		set_case("%s ms_send after ms_sendv", be_name());
		CHECK_EQ(send_check(-1), 6);
		/* an empty message on a flat call */
		static const struct iovec empty[1] = { { NULL, 0 } };
		use_iov(empty, 1);
		H.flat = true;
		set_case("%s ms_send(NULL, 0)", be_name());
		CHECK_EQ(send_check(-1), 6);
		/* as many iovecs as the header allows */
		static struct iovec many[IOV_MAX];
		for (int i = 0; i < IOV_MAX; i++)
			many[i] = (struct iovec){ body + (i * 7) % 4000, (size_t)(1 + i % 3) };
		use_iov(many, IOV_MAX);
		set_case("%s ms_sendv iovcnt=IOV_MAX", be_name());
		CHECK_EQ(send_check(bes[b] == MS_BACKEND_LOOP ? 6 : 3), 6);
	}
}

/* ---- flags and invalid calls ---------------------------------------------------------------- */

static void dontwait_flag(void **state)
{
	(void)state;
	const enum ms_backend bes[] = { MS_BACKEND_SENDMMSG, MS_BACKEND_LOOP };
	for (int b = 0; b < 2; b++) {
		for (int api = 0; api < 2; api++) {
			new_case(bes[b]);
			set_message(api);
			set_case("%s %s MS_SEND_DONTWAIT", be_name(), api_name(api));
			int fd = udp_socket();
			for (int i = 0; i < 4; i++)
				new_dest(fd, true);
			int p = new_peer(udp_connected(), true);
			H.send_flags = MS_SEND_DONTWAIT;
			script(p, EAGAIN, FAKE_ALWAYS, -EAGAIN);
			CHECK_EQ(send_check(-1), 4);
			H.send_flags = 0;
			clear_scripts();
			CHECK_EQ(send_check(-1), 5);
		}
	}
}

static void invalid_calls_attempt_nothing(void **state)
{
	(void)state;
	const enum ms_backend bes[] = { MS_BACKEND_SENDMMSG, MS_BACKEND_LOOP };
	for (int b = 0; b < 2; b++) {
		new_case(bes[b]);
		set_case("%s invalid calls", be_name());
		/* an empty group: nothing to do, not a fan-out */
		struct ms_stats before = stats();
		struct ms_result r0 = { -5, -5 };
		CHECK_EQ(ms_send(H.g, body, 10, 0, &r0), 0);
		CHECK_EQ(r0.id, -5);
		int fd = udp_socket();
		new_dest(fd, true);
		new_dest(fd, true);
		struct ms_result res[2];
		struct iovec bad[2] = { { body, 4 }, { NULL, 4 } };
		fake_new_round();
		CHECK_EQ(ms_send(H.g, body, 10, ~MS_SEND_ALL_FLAGS, res), -EINVAL);
		CHECK_EQ(ms_send(H.g, NULL, 10, 0, res), -EINVAL);
		CHECK_EQ(ms_send(NULL, body, 10, 0, res), -EINVAL);
		CHECK_EQ(ms_sendv(H.g, two_msg, -1, 0, res), -EINVAL);
		CHECK_EQ(ms_sendv(H.g, NULL, 1, 0, res), -EINVAL);
		CHECK_EQ(ms_sendv(H.g, bad, 2, 0, res), -EINVAL);
		CHECK_EQ(ms_sendv(H.g, two_msg, IOV_MAX + 1, 0, res), -EINVAL);
		CHECK_EQ(ms_sendv(H.g, two_msg, 2, 1u << 31, res), -EINVAL);
		CHECK_EQ(fake_syscalls(), 0);
		struct ms_stats after = stats();
		CHECK_EQ(after.fanouts, before.fanouts);
		CHECK_EQ(after.dests_attempted, before.dests_attempted);
		CHECK_EQ(after.syscalls, before.syscalls);
		/* res may be NULL: the destinations are still sent to and counted */
		fake_new_round();
		CHECK_EQ(ms_send(H.g, body, 10, 0, NULL), 2);
		CHECK_EQ(fk.d[0].delivered + fk.d[1].delivered, 2);
		CHECK_EQ(stats().dests_accepted, before.dests_accepted + 2);
	}
}

/* ---- 9: group bookkeeping ----------------------------------------------------------------- */

static void remove_and_readd(void **state)
{
	(void)state;
	const enum ms_backend bes[] = { MS_BACKEND_SENDMMSG, MS_BACKEND_LOOP };
	for (int b = 0; b < 2; b++) {
		new_case(bes[b]);
		set_case("%s remove in the middle", be_name());
		int fd = udp_socket();
		int h[10];
		for (int i = 0; i < 10; i++)
			h[i] = new_dest(fd, true);
		int p[3];
		for (int i = 0; i < 3; i++)
			p[i] = new_peer(udp_connected(), true);
		CHECK_EQ(send_check(-1), 13);

		int old = H.id[h[4]];
		group_remove(h[4]);
		CHECK_EQ(ms_group_remove(H.g, old), -ENOENT);
		CHECK_EQ(ms_group_size(H.g), 12);
		/* the destination moved into the hole keeps its own results */
		script(h[9], ECONNREFUSED, FAKE_ALWAYS, -ECONNREFUSED);
		script(h[5], EMSGSIZE, FAKE_ALWAYS, -EMSGSIZE);
		CHECK_EQ(send_check(-1), 10);

		set_case("%s re-add", be_name());
		CHECK(group_add(h[4]) >= 0);
		CHECK_EQ(ms_group_size(H.g), 13);
		CHECK_EQ(send_check(-1), 11);

		set_case("%s connected sockets", be_name());
		group_remove(p[1]);
		CHECK_EQ(send_check(-1), 10);
		CHECK(group_add(p[1]) >= 0);
		struct ms_dest dup = { .fd = fk.d[p[1]].fd };
		CHECK_EQ(ms_group_add(H.g, &dup), -EEXIST);
		CHECK_EQ(ms_group_size(H.g), 13);
		CHECK_EQ(send_check(-1), 11);

		set_case("%s connected socket that also carries addresses", be_name());
		int c = udp_connected();
		int cp = new_peer(c, true), ca = new_dest(c, true), cb = new_dest(c, true);
		CHECK_EQ(send_check(-1), 14);
		group_remove(ca); /* an address leaves: the peer is still there */
		struct ms_dest cdup = { .fd = c };
		CHECK_EQ(ms_group_add(H.g, &cdup), -EEXIST);
		group_remove(cp); /* the peer leaves, the socket stays in the group */
		CHECK_EQ(send_check(-1), 12);
		CHECK(group_add(cp) >= 0);
		CHECK_EQ(ms_group_add(H.g, &cdup), -EEXIST);
		CHECK(group_add(ca) >= 0);
		CHECK_EQ(send_check(-1), 14);

		set_case("%s remove everything", be_name());
		for (int i = 0; i < 10; i++)
			group_remove(h[i]);
		for (int i = 0; i < 3; i++)
			group_remove(p[i]);
		group_remove(ca);
		group_remove(cb);
		group_remove(cp);
		CHECK_EQ(ms_group_size(H.g), 0);
		CHECK_EQ(send_check(0), 0);
		CHECK(group_add(h[3]) >= 0);
		CHECK(group_add(p[2]) >= 0);
		clear_scripts();
		CHECK_EQ(send_check(-1), 2);
	}
}

static uint64_t rng_state;

static uint32_t rnd(uint32_t n)
{
	/* xorshift64*, seeded per test: the same sequence on every run */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t)((rng_state * 2685821657736338717ull) >> 32) % n;
}

/* Move fd to a random free number in [100, 1000): socket numbers far apart collide in the
 * group's fd map, where consecutive small ones never do. */
static int renumber(int fd)
{
	int to;
	do
		to = 100 + (int)rnd(900);
	while (fcntl(to, F_GETFD) >= 0);
	CHECK_EQ(dup3(fd, to, O_CLOEXEC), to);
	for (int i = 0; i < H.nfds; i++)
		if (H.fds[i] == fd)
			H.fds[i] = to;
	close(fd);
	return to;
}

/* One sendmmsg per socket in use (none has 1024 destinations), one sendto per destination. */
static long clean_calls(const int *pool, int npool)
{
	if (H.be == MS_BACKEND_LOOP)
		return (long)ms_group_size(H.g);
	int fds[MAX_FDS], nfds = 0;
	for (int k = 0; k < npool; k++) {
		int d = pool[k], j = 0;
		if (H.id[d] < 0)
			continue;
		while (j < nfds && fds[j] != fk.d[d].fd)
			j++;
		if (j == nfds)
			fds[nfds++] = fk.d[d].fd;
	}
	return nfds;
}

/*
 * Random adds and removes against a model (which destinations are in the group, under which
 * id), with a checked send every 10 operations and one with failures and EINTRs every 50.
 * Sockets get scattered numbers and few destinations each, so that sockets keep leaving and
 * rejoining the group and its fd map sees collisions, wrap-arounds and deletions.
 */
static void random_ops(enum ms_backend be, uint64_t seed)
{
	enum { NBIG = 2, PER_BIG = 30, NSMALL = 12, PER_SMALL = 3, NCONN = 12, PER_CONN = 2 };
	enum { OPS = 2000, NPOOL = NBIG * PER_BIG + NSMALL * PER_SMALL + NCONN * (1 + PER_CONN) };
	new_case(be);
	rng_state = seed;
	int pool[NPOOL], npool = 0;
	for (int s = 0; s < NBIG; s++) {
		int fd = renumber(udp_socket());
		for (int i = 0; i < PER_BIG; i++)
			pool[npool++] = new_dest(fd, false);
	}
	for (int s = 0; s < NSMALL; s++) {
		int fd = renumber(udp_socket());
		for (int i = 0; i < PER_SMALL; i++)
			pool[npool++] = new_dest(fd, false);
	}
	for (int s = 0; s < NCONN; s++) {
		int fd = renumber(udp_connected());
		pool[npool++] = new_peer(fd, false);
		for (int i = 0; i < PER_CONN; i++)
			pool[npool++] = new_dest(fd, false);
	}
	CHECK_EQ(npool, NPOOL);

	size_t live = 0;
	int sends = 0;
	for (int op = 1; op <= OPS; op++) {
		set_case("%s random ops, seed %llu, op %d", be_name(), (unsigned long long)seed, op);
		int h = pool[rnd((uint32_t)npool)];
		uint32_t what = rnd(100);
		if (what < 50) {
			if (H.id[h] >= 0 && fk.d[h].addrlen == 0) {
				struct ms_dest dup = { .fd = fk.d[h].fd };
				CHECK_EQ(ms_group_add(H.g, &dup), -EEXIST);
			} else if (H.id[h] < 0) {
				CHECK(group_add(h) >= 0);
				live++;
			}
		} else if (what < 88) {
			if (H.id[h] >= 0) {
				group_remove(h);
				live--;
			}
		} else if (what < 94) {
			/* h's socket leaves the group */
			for (int k = 0; k < npool; k++) {
				if (H.id[pool[k]] >= 0 && fk.d[pool[k]].fd == fk.d[h].fd) {
					group_remove(pool[k]);
					live--;
				}
			}
		} else {
			/* an id nobody holds */
			int id = (int)rnd(200);
			bool held = false;
			for (int k = 0; k < npool; k++)
				held |= H.id[pool[k]] == id;
			if (!held)
				CHECK_EQ(ms_group_remove(H.g, id), -ENOENT);
		}
		CHECK_EQ(ms_group_size(H.g), live);

		if (op % 10 == 0) {
			set_message(rnd(2));
			CHECK_EQ(send_check(clean_calls(pool, npool)), live);
		}
		if (op % 50)
			continue;
		/* some destinations fail, some are interrupted once */
		for (int k = 0; k < npool; k++) {
			int d = pool[k];
			if (H.id[d] < 0)
				continue;
			uint32_t x = rnd(100);
			if (x < 10) {
				int err = matrix_errnos[rnd(NERRNOS)];
				script(d, err, FAKE_ALWAYS, -err);
			} else if (x < 15) {
				script(d, EINTR, 1, WANT_FULL);
			}
		}
		set_message(sends++ % 2);
		send_check(be == MS_BACKEND_LOOP ? model_loop_calls() : -1);
		clear_scripts();
	}
	CHECK_EQ(sends, OPS / 50);
}

static void group_random_ops_mmsg(void **state)
{
	(void)state;
	random_ops(MS_BACKEND_SENDMMSG, 0x9e3779b97f4a7c15ull);
	random_ops(MS_BACKEND_SENDMMSG, 42);
}

static void group_random_ops_loop(void **state)
{
	(void)state;
	random_ops(MS_BACKEND_LOOP, 0x9e3779b97f4a7c15ull);
	random_ops(MS_BACKEND_LOOP, 42);
}

/* ---- messages longer than an int ----------------------------------------------------------- */

/*
 * Any len up to SSIZE_MAX is attempted: a stream socket may take part of it, and the kernel
 * takes at most MAX_RW_COUNT = INT_MAX & PAGE_MASK bytes per call, which fits the int status.
 */
#define KERNEL_MAX_RW 0x7ffff000L

static void len_above_int_max(void **state)
{
	(void)state;
	const enum ms_backend bes[] = { MS_BACKEND_SENDMMSG, MS_BACKEND_LOOP };
	for (int b = 0; b < 2; b++) {
		for (int api = 0; api < 2; api++) {
			new_case(bes[b]);
			set_case("%s %s len = INT_MAX + 1 on a stream", be_name(), api ? "ms_sendv" : "ms_send");
			int h = new_peer(stream_socket(), true);
			fake_accept_bytes(h, KERNEL_MAX_RW);
			fake_new_round();
			fk.expect_iov = NULL; /* the fake must not read 2 GiB from body */
			struct ms_result res = { -1, 0 };
			/* nobody reads these bytes: the kernel is fake */
			struct iovec big[2] = { { body, (size_t)INT_MAX }, { body, 1 } };
			int r = api ? ms_sendv(H.g, big, 2, 0, &res)
				    : ms_send(H.g, body, (size_t)INT_MAX + 1, 0, &res);
			CHECK_EQ(r, 0); /* no destination took the whole message */
			CHECK_EQ(res.id, H.id[h]);
			CHECK_EQ(res.status, KERNEL_MAX_RW);
			CHECK_EQ(fk.d[h].delivered, 1);
		}
	}
}

/* ------------------------------------------------------------------------------------------ */

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		T(mmsg_errno_matrix_n10),
		T(mmsg_errno_matrix_n1030),
		T(loop_errno_matrix_n10),
		T(loop_errno_matrix_n1030),
		T(one_dest_failing),
		T(mmsg_multiple_failures),
		T(loop_multiple_failures),
		T(transient_errors),
		T(mmsg_partial_returns),
		T(mmsg_partial_three_of_ten),
		T(mmsg_eintr),
		T(loop_eintr),
		T(mmsg_chunking),
		T(stream_short_write),
		T(sendv_iovecs),
		T(dontwait_flag),
		T(invalid_calls_attempt_nothing),
		T(remove_and_readd),
		T(group_random_ops_mmsg),
		T(group_random_ops_loop),
		T(len_above_int_max),
	};
	if (argc < 2)
		return cmocka_run_group_tests(tests, NULL, NULL);
	/* one test by its exact name: a name that matches nothing must not pass quietly */
	cmocka_set_test_filter(argv[1]);
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
		if (!strcmp(tests[i].name, argv[1]))
			return cmocka_run_group_tests(tests, NULL, NULL);
	fprintf(stderr, "no test named %s\n", argv[1]);
	return 2;
}
