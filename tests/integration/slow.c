/* SPDX-License-Identifier: MIT */
/*
 * Slow-consumer policies on real TCP (and AF_UNIX seqpacket) receivers, run once per backend:
 * `slow BACKEND`. Receivers that keep reading, one that stops reading and resumes, one that
 * vanishes. Every message is framed (length, sequence number, a pattern derived from both), so
 * the receiving side proves the stream stayed framed: whole messages, in order, byte for byte,
 * and exactly the ones the results said were sent or queued; the dropped ones never arrive.
 * The sending sockets are BLOCKING: a policy must make the library's sends non-blocking, and
 * an alarm fails the test if a send ever blocks.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "multisend.h"
#include "net.h"

static enum ms_backend backend;

enum { HDR = 8, MAXMSG = 4096, NRX = 3 };

/* ---- framed messages ---------------------------------------------------------------------- */

static uint8_t pat(uint32_t seq, size_t k)
{
	return (uint8_t)(seq * 131u + k * 7u + (k >> 8));
}

static size_t msg_len(uint32_t seq)
{
	return HDR + 200 + (seq * 37u) % 1800u; /* 208..2007 bytes */
}

static void make_msg(unsigned char *m, uint32_t seq)
{
	uint32_t len = (uint32_t)msg_len(seq);
	memcpy(m, &len, 4);
	memcpy(m + 4, &seq, 4);
	for (size_t k = HDR; k < len; k++)
		m[k] = pat(seq, k);
}

/* The receiving end of one stream: reads what is there, splits it into messages, checks each. */
struct rx {
	int fd;
	unsigned char buf[2 * MAXMSG];
	size_t have;
	uint32_t *seqs; /* sequence numbers received, in order */
	size_t nseqs;
	bool seqpacket;
};

static void rx_init(struct rx *r, int fd, bool seqpacket)
{
	memset(r, 0, sizeof(*r));
	r->fd = fd;
	r->seqpacket = seqpacket;
	r->seqs = calloc(100000, sizeof(*r->seqs));
	assert_non_null(r->seqs);
}

static void rx_free(struct rx *r)
{
	if (r->fd >= 0)
		close(r->fd);
	free(r->seqs);
}

static void rx_parse(struct rx *r)
{
	size_t off = 0;
	while (r->have - off >= HDR) {
		uint32_t len, seq;
		memcpy(&len, r->buf + off, 4);
		memcpy(&seq, r->buf + off + 4, 4);
		assert_int_equal(len, msg_len(seq)); /* a frame starts exactly here */
		if (r->have - off < len)
			break;
		for (size_t k = HDR; k < len; k++)
			if (r->buf[off + k] != pat(seq, k))
				fail_msg("message %u corrupt at byte %zu", seq, k);
		if (r->nseqs)
			assert_true(seq > r->seqs[r->nseqs - 1]); /* in order, no repeats */
		r->seqs[r->nseqs++] = seq;
		off += len;
	}
	memmove(r->buf, r->buf + off, r->have - off);
	r->have -= off;
}

/* Read everything available now. Returns the bytes read; 0 at end of stream. */
static size_t rx_drain(struct rx *r)
{
	size_t total = 0;
	for (;;) {
		ssize_t n = recv(r->fd, r->buf + r->have, sizeof(r->buf) - r->have, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (r->seqpacket)
			assert_int_equal((size_t)n, msg_len(*(uint32_t *)(r->buf + r->have + 4)));
		r->have += (size_t)n;
		total += (size_t)n;
		rx_parse(r);
	}
	return total;
}

/* ---- sockets ------------------------------------------------------------------------------ */

/* A loopback TCP connection with small buffers; *tx is blocking. */
static void tcp_pair(int *tx, int *rx)
{
	int small = 4096;
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(l >= 0);
	assert_int_equal(setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(l, 4), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
	*tx = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(*tx >= 0);
	assert_int_equal(setsockopt(*tx, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	assert_int_equal(connect(*tx, (struct sockaddr *)&a, sizeof(a)), 0);
	*rx = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	assert_true(*rx >= 0);
	close(l);
}

static void seqpacket_pair(int *tx, int *rx)
{
	int sv[2], small = 16384;
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	*tx = sv[0];
	*rx = sv[1];
}

/* ---- fixture ------------------------------------------------------------------------------ */

struct fix {
	struct ms_ctx *ctx;
	struct ms_group *g;
	int tx[NRX];
	int id[NRX];
	uint32_t pos[NRX]; /* each slot's position in the last send's res (the group order) */
	struct rx rx[NRX];
};

static void fix_open(struct fix *f, const struct ms_slow_config *cfg, bool seqpacket)
{
	struct ms_config c = { .size = sizeof(c),
			       .backend = backend,
			       .flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV };
	assert_int_equal(ms_ctx_new(&f->ctx, &c), 0);
	assert_int_equal(ms_group_new(f->ctx, &f->g), 0);
	if (cfg)
		assert_int_equal(ms_group_set_slow(f->g, cfg), 0);
	for (int k = 0; k < NRX; k++) {
		int rxfd;
		if (seqpacket)
			seqpacket_pair(&f->tx[k], &rxfd);
		else
			tcp_pair(&f->tx[k], &rxfd);
		rx_init(&f->rx[k], rxfd, seqpacket);
		struct ms_dest d = { .fd = f->tx[k] };
		f->id[k] = ms_group_add(f->g, &d);
		assert_true(f->id[k] >= 0);
	}
}

static void fix_close(struct fix *f)
{
	ms_group_free(f->g);
	ms_ctx_free(f->ctx);
	for (int k = 0; k < NRX; k++) {
		if (f->tx[k] >= 0)
			close(f->tx[k]);
		rx_free(&f->rx[k]);
	}
}

static struct ms_stats stats(struct ms_ctx *ctx)
{
	struct ms_stats s = { .size = sizeof(s) };
	assert_int_equal(ms_ctx_stats(ctx, &s), 0);
	return s;
}

static int slot_of(const struct fix *f, int id)
{
	for (int k = 0; k < NRX; k++)
		if (f->id[k] == id)
			return k;
	fail_msg("result for unknown id %d", id);
	return -1;
}

/* What the results said about one receiver's messages. */
struct tally {
	uint32_t sent[100000];  /* sequence numbers the receiver must get, in order */
	size_t nsent;
	size_t full, queued, dropped, removed;
};

static struct tally tallies[NRX];

/* The group's record of the last call (ms_group_slow_results), checked against that call's
 * results: ascending positions within the call's n destinations, each entry's id and status
 * those of res at its position. Returns the number of entries. */
static int slow_record(struct ms_group *g, struct ms_slow_result *sr, size_t cap,
		       const struct ms_result *res, size_t n)
{
	memset(sr, 0x5a, cap * sizeof(*sr));
	int nsr = ms_group_slow_results(g, sr, cap);
	assert_true(nsr >= 0 && (size_t)nsr <= cap && (size_t)nsr <= n);
	assert_int_equal(ms_group_slow_results(g, NULL, 0), nsr);
	for (int j = 0; j < nsr; j++) {
		assert_true(sr[j].pos < n);
		if (j)
			assert_true(sr[j].pos > sr[j - 1].pos);
		if (res) {
			assert_int_equal(sr[j].id, res[sr[j].pos].id);
			assert_int_equal(sr[j].status, res[sr[j].pos].status);
		}
		assert_int_equal(sr[j].flags & ~(uint32_t)(MS_RES_QUEUED | MS_RES_DROPPED |
							    MS_RES_REMOVED), 0);
	}
	return nsr;
}

/*
 * Send message seq (as a header and a payload iovec, so a partial write can end inside
 * either) and check every result, with what the group's record says the policy did, against
 * the policy's rules. Returns the slot removed in this call, or -1.
 */
static int send_one(struct fix *f, uint32_t seq, unsigned policy, uint32_t limit)
{
	static unsigned char m[MAXMSG];
	make_msg(m, seq);
	size_t len = msg_len(seq);
	struct iovec iov[2] = { { m, HDR + 3 }, { m + HDR + 3, len - HDR - 3 } };
	struct ms_result res[NRX];
	size_t n = ms_group_size(f->g);
	memset(res, 0xa5, sizeof(res));
	int whole = ms_sendv(f->g, iov, 2, 0, res);
	struct ms_slow_result sr[NRX];
	int nsr = slow_record(f->g, sr, NRX, res, n), j = 0;
	int removed = -1, nwhole = 0;
	uint64_t held = 0;
	for (size_t i = 0; i < n; i++) {
		int k = slot_of(f, res[i].id);
		struct tally *t = &tallies[k];
		f->pos[k] = (uint32_t)i;
		const struct ms_result *r = &res[i];
		/* The policy's part: an entry at this position, or nothing (no backlog then). */
		const struct ms_slow_result *e = j < nsr && sr[j].pos == i ? &sr[j++] : NULL;
		uint32_t flags = e ? e->flags : 0;
		uint64_t backlog = e ? e->backlog : 0;
		held += backlog;
		if (r->status == (int)len) {
			assert_int_equal(flags, 0);
			assert_int_equal(backlog, 0);
			t->sent[t->nsent++] = seq;
			t->full++;
			nwhole++;
		} else if (flags & MS_RES_QUEUED) {
			assert_true(policy == MS_SLOW_QUEUE || policy == MS_SLOW_DROP);
			assert_true(r->status >= 0 && r->status < (int)len);
			assert_true(backlog >= len - (size_t)r->status);
			if (policy == MS_SLOW_DROP)
				assert_true(r->status > 0); /* only the rest of a begun message */
			else
				assert_true(backlog <= limit + len);
			t->sent[t->nsent++] = seq;
			t->queued++;
		} else if (flags & MS_RES_DROPPED) {
			assert_true(policy == MS_SLOW_DROP || policy == MS_SLOW_QUEUE);
			assert_int_equal(r->status, -EAGAIN);
			t->dropped++;
		} else if (flags & MS_RES_REMOVED) {
			assert_true(policy == MS_SLOW_DISCONNECT || policy == MS_SLOW_QUEUE);
			assert_true(r->status == -EAGAIN || (r->status >= 0 && r->status < (int)len));
			assert_int_equal(backlog, 0);
			t->removed++;
			removed = k;
		} else {
			fail_msg("message %u to slot %d: status %d flags %u", seq, k, r->status,
				 flags);
		}
	}
	assert_int_equal(j, nsr); /* every entry at a position of the call */
	/* Only a destination with an entry can hold a backlog after the call. */
	assert_int_equal(held, ms_group_backlog(f->g));
	assert_int_equal(whole, nwhole);
	return removed;
}

/* Resume reading the stalled receiver and flush until the backlog is gone. */
static void resume(struct fix *f, int k)
{
	struct ms_slow_result sr[NRX], again[NRX];
	for (int round = 0; ms_group_backlog(f->g) && round < 100000; round++) {
		rx_drain(&f->rx[k]);
		size_t before = ms_group_backlog(f->g);
		int n = ms_group_flush(f->g, sr, NRX);
		assert_true(n == 1); /* only the stalled receiver holds a backlog */
		assert_int_equal(sr[0].id, f->id[k]);
		assert_int_equal(sr[0].pos, f->pos[k]);
		assert_true(sr[0].status >= 0);
		assert_int_equal(sr[0].flags, sr[0].backlog ? MS_RES_QUEUED : 0);
		assert_int_equal(sr[0].backlog, ms_group_backlog(f->g));
		assert_int_equal(before - (size_t)sr[0].status, sr[0].backlog); /* bytes sent */
		/* The record is the flush's, and stays until the next call. */
		assert_int_equal(slow_record(f->g, again, NRX, NULL, ms_group_size(f->g)), 1);
		assert_memory_equal(again, sr, sizeof(sr[0]));
		if (ms_group_backlog(f->g))
			poll(&(struct pollfd){ .fd = f->tx[k], .events = POLLOUT }, 1, 100);
	}
	assert_int_equal(ms_group_backlog(f->g), 0);
	assert_int_equal(ms_group_flush(f->g, sr, NRX), 0);
	assert_int_equal(ms_group_slow_results(f->g, sr, NRX), 0); /* replaced: empty */
	for (int round = 0; round < 50; round++)
		if (!rx_drain(&f->rx[k]))
			poll(&(struct pollfd){ .fd = f->rx[k].fd, .events = POLLIN }, 1, 20);
}

/* The receiver got exactly what the results promised, whole and in order. */
static void check_received(const struct fix *f, int k)
{
	const struct tally *t = &tallies[k];
	const struct rx *r = &f->rx[k];
	assert_int_equal(r->have, 0); /* no torn message left over */
	assert_int_equal(r->nseqs, t->nsent);
	for (size_t i = 0; i < t->nsent; i++)
		assert_int_equal(r->seqs[i], t->sent[i]);
}

/* Send until the stalled receiver (slot 0) has been pushed into the policy, the healthy ones
 * (slots 1, 2) reading after every message; returns the messages sent. */
static uint32_t run(struct fix *f, unsigned policy, uint32_t limit, uint32_t count,
		    int *removed_at)
{
	memset(tallies, 0, sizeof(tallies));
	*removed_at = -1;
	alarm(120); /* a send that blocks fails the test */
	for (uint32_t seq = 0; seq < count; seq++) {
		int removed = send_one(f, seq, policy, limit);
		if (removed >= 0) {
			assert_int_equal(removed, 0);
			assert_int_equal(*removed_at, -1); /* reported once */
			*removed_at = (int)seq;
		}
		for (int k = 1; k < NRX; k++)
			rx_drain(&f->rx[k]);
	}
	alarm(0);
	return count;
}

static void check_healthy(struct fix *f, uint32_t count)
{
	for (int k = 1; k < NRX; k++) {
		for (int round = 0; f->rx[k].nseqs < count && round < 200; round++) {
			poll(&(struct pollfd){ .fd = f->rx[k].fd, .events = POLLIN }, 1, 20);
			rx_drain(&f->rx[k]);
		}
		assert_int_equal(tallies[k].full, count);
		check_received(f, k);
	}
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_drop(void **state)
{
	(void)state;
	struct ms_slow_config cfg = { .size = sizeof(cfg), .policy = MS_SLOW_DROP };
	struct fix f;
	fix_open(&f, &cfg, false);
	int removed_at;
	uint32_t n = run(&f, MS_SLOW_DROP, 0, 3000, &removed_at);
	assert_int_equal(removed_at, -1);
	struct tally *t = &tallies[0];
	assert_true(t->dropped > 0); /* the stall really happened */
	assert_true(t->full > 0);
	/* A DROP backlog only ever holds the rest of one message. */
	assert_true(ms_group_backlog(f.g) < MAXMSG);
	struct ms_stats s = stats(f.ctx);
	assert_int_equal(s.slow_dropped, t->dropped);
	assert_int_equal(s.slow_queued, t->queued);
	assert_int_equal(s.slow_removed, 0);
	assert_int_equal(s.backlog_bytes, ms_group_backlog(f.g));
	assert_int_equal(s.err_again, t->dropped);
	resume(&f, 0);
	check_received(&f, 0);
	check_healthy(&f, n);
	/* After the stall, the receiver keeps up again: every message arrives whole. */
	size_t before = t->nsent;
	for (uint32_t seq = n; seq < n + 20; seq++) {
		assert_int_equal(send_one(&f, seq, MS_SLOW_DROP, 0), -1);
		rx_drain(&f.rx[0]);
	}
	assert_int_equal(t->nsent, before + 20);
	resume(&f, 0);
	check_received(&f, 0);
	assert_int_equal(stats(f.ctx).backlog_bytes, 0);
	assert_int_equal(stats(f.ctx).backlog_discarded, 0);
	fix_close(&f);
}

static void queue_case(uint32_t limit, uint32_t count, bool expect_drops)
{
	struct ms_slow_config cfg = { .size = sizeof(cfg), .policy = MS_SLOW_QUEUE,
				      .queue_limit = limit };
	struct fix f;
	fix_open(&f, &cfg, false);
	int removed_at;
	uint32_t n = run(&f, MS_SLOW_QUEUE, limit, count, &removed_at);
	assert_int_equal(removed_at, -1);
	struct tally *t = &tallies[0];
	assert_true(t->queued > 0);
	if (expect_drops)
		assert_true(t->dropped > 0);
	else
		assert_int_equal(t->dropped, 0);
	assert_true(ms_group_backlog(f.g) <= limit + MAXMSG);
	struct ms_stats s = stats(f.ctx);
	assert_int_equal(s.slow_queued, t->queued);
	assert_int_equal(s.slow_dropped, t->dropped);
	assert_int_equal(s.backlog_bytes, ms_group_backlog(f.g));
	resume(&f, 0);
	check_received(&f, 0);
	check_healthy(&f, n);
	if (!expect_drops)
		assert_int_equal(f.rx[0].nseqs, n); /* everything, late but whole and in order */
	assert_int_equal(stats(f.ctx).backlog_discarded, 0);
	fix_close(&f);
}

static void test_queue_bounded(void **state)
{
	(void)state;
	queue_case(64 * 1024, 3000, true);
}

static void test_queue_everything(void **state)
{
	(void)state;
	queue_case(16u << 20, 3000, false);
}

static void test_queue_overflow_disconnect(void **state)
{
	(void)state;
	struct ms_slow_config cfg = { .size = sizeof(cfg), .policy = MS_SLOW_QUEUE,
				      .overflow = MS_SLOW_DISCONNECT, .queue_limit = 32 * 1024 };
	struct fix f;
	fix_open(&f, &cfg, false);
	int removed_at;
	uint32_t n = run(&f, MS_SLOW_QUEUE, cfg.queue_limit, 2000, &removed_at);
	assert_true(removed_at >= 0);
	assert_int_equal(ms_group_size(f.g), NRX - 1);
	assert_int_equal(ms_group_remove(f.g, f.id[0]), -ENOENT); /* already gone */
	assert_int_equal(ms_group_backlog(f.g), 0);
	struct ms_stats s = stats(f.ctx);
	assert_int_equal(s.slow_removed, 1);
	assert_int_equal(s.slow_dropped, 0);
	assert_true(s.backlog_discarded > 0); /* what it still held, counted */
	assert_int_equal(s.backlog_bytes, 0);
	/* The stalled receiver got a prefix of the queued messages, in order. */
	struct rx *r = &f.rx[0];
	for (int round = 0; round < 50; round++)
		if (!rx_drain(r))
			poll(&(struct pollfd){ .fd = r->fd, .events = POLLIN }, 1, 10);
	assert_true(r->nseqs <= tallies[0].nsent);
	for (size_t i = 0; i < r->nseqs; i++)
		assert_int_equal(r->seqs[i], tallies[0].sent[i]);
	check_healthy(&f, n);
	fix_close(&f);
}

static void test_disconnect(void **state)
{
	(void)state;
	struct ms_slow_config cfg = { .size = sizeof(cfg), .policy = MS_SLOW_DISCONNECT };
	struct fix f;
	fix_open(&f, &cfg, false);
	int removed_at;
	uint32_t n = run(&f, MS_SLOW_DISCONNECT, 0, 2000, &removed_at);
	assert_true(removed_at > 0);
	assert_int_equal(tallies[0].removed, 1);
	assert_int_equal(tallies[0].queued + tallies[0].dropped, 0);
	assert_int_equal(tallies[0].full, (size_t)removed_at); /* whole until the stall */
	assert_int_equal(ms_group_size(f.g), NRX - 1);
	struct ms_stats s = stats(f.ctx);
	assert_int_equal(s.slow_removed, 1);
	assert_int_equal(s.backlog_bytes + s.backlog_discarded, 0); /* never queues */
	check_healthy(&f, n);
	/* The id is free again: a new destination may take it. */
	int tx, rxfd;
	tcp_pair(&tx, &rxfd);
	struct ms_dest d = { .fd = tx };
	assert_int_equal(ms_group_add(f.g, &d), f.id[0]);
	assert_int_equal(ms_group_remove(f.g, f.id[0]), 0);
	close(tx);
	close(rxfd);
	fix_close(&f);
}

/* A subscriber that vanishes while its backlog is full: the stream's error is reported, the
 * destination removed (whatever the overflow action), its backlog discarded and counted. */
static void vanish_case(uint32_t overflow)
{
	struct ms_slow_config cfg = { .size = sizeof(cfg), .policy = MS_SLOW_QUEUE,
				      .overflow = overflow, .queue_limit = 1u << 20 };
	struct fix f;
	fix_open(&f, &cfg, false);
	int removed_at;
	run(&f, MS_SLOW_QUEUE, cfg.queue_limit, 300, &removed_at);
	assert_int_equal(removed_at, -1);
	size_t held = ms_group_backlog(f.g);
	assert_true(held > 0);
	/* Closing with unread data makes the kernel reset the connection. */
	close(f.rx[0].fd);
	f.rx[0].fd = -1;
	struct ms_result res[NRX];
	struct ms_slow_result sr[NRX];
	int err = 0;
	for (int round = 0; round < 200 && !err; round++) {
		int n = ms_group_flush(f.g, sr, NRX);
		assert_int_equal(n, 1);
		assert_int_equal(sr[0].id, f.id[0]);
		if (sr[0].status < 0) {
			err = -sr[0].status;
			assert_int_equal(sr[0].flags, MS_RES_REMOVED);
			assert_int_equal(sr[0].backlog, 0);
			/* Removed, yet its id is in the record. */
			assert_int_equal(ms_group_slow_results(f.g, sr, NRX), 1);
			assert_int_equal(sr[0].id, f.id[0]);
			assert_int_equal(ms_group_remove(f.g, f.id[0]), -ENOENT);
		}
		if (!err)
			poll(NULL, 0, 5);
	}
	if (err != EPIPE && err != ECONNRESET)
		fail_msg("the vanished stream reported %d (%s)", err, ms_strerror(err));
	assert_int_equal(ms_group_backlog(f.g), 0);
	struct ms_stats s = stats(f.ctx);
	assert_int_equal(s.backlog_bytes, 0);
	assert_true(s.backlog_discarded > 0 && s.backlog_discarded <= held);
	/* A failed stream is removed whatever the policy; the others keep receiving. */
	assert_int_equal(ms_group_size(f.g), NRX - 1);
	assert_int_equal(s.slow_removed, 1);
	static unsigned char m[MAXMSG];
	make_msg(m, 100000 - 1);
	size_t len = msg_len(100000 - 1);
	assert_int_equal(ms_send(f.g, m, len, 0, res), NRX - 1);
	for (int i = 0; i < NRX - 1; i++)
		assert_true(res[i].id != f.id[0]);
	assert_int_equal(ms_group_slow_results(f.g, sr, NRX), 0); /* the policy did nothing */
	fix_close(&f);
}

static void test_vanish_queue(void **state)
{
	(void)state;
	vanish_case(MS_SLOW_DROP);
}

static void test_vanish_disconnect(void **state)
{
	(void)state;
	vanish_case(MS_SLOW_DISCONNECT);
}

/* Seqpacket keeps message boundaries: a full socket takes a message whole or not at all. */
static void test_seqpacket_queue(void **state)
{
	(void)state;
	struct ms_slow_config cfg = { .size = sizeof(cfg), .policy = MS_SLOW_QUEUE,
				      .queue_limit = 8u << 20 };
	struct fix f;
	fix_open(&f, &cfg, true);
	int removed_at;
	uint32_t n = run(&f, MS_SLOW_QUEUE, cfg.queue_limit, 500, &removed_at);
	assert_true(tallies[0].queued > 0);
	assert_int_equal(tallies[0].dropped, 0);
	resume(&f, 0);
	check_received(&f, 0);
	assert_int_equal(f.rx[0].nseqs, n);
	check_healthy(&f, n);
	fix_close(&f);
}

/* Datagram destinations in the same group are not managed: a full one just drops (-EAGAIN). */
static void test_datagrams_untouched(void **state)
{
	(void)state;
	struct ms_slow_config cfg = { .size = sizeof(cfg), .policy = MS_SLOW_QUEUE };
	struct fix f;
	fix_open(&f, &cfg, false);
	int sv[2], small = 4096;
	assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	struct ms_dest d = { .fd = sv[0] };
	int id = ms_group_add(f.g, &d);
	assert_true(id >= 0);
	unsigned char m[1000];
	memset(m, 7, sizeof(m));
	struct ms_result res[NRX + 1];
	int full = 0;
	for (int r = 0; r < 200 && !full; r++) {
		assert_true(ms_send(f.g, m, sizeof(m), MS_SEND_DONTWAIT, res) >= 0);
		struct ms_slow_result sr[NRX + 1];
		int nsr = slow_record(f.g, sr, NRX + 1, res, NRX + 1);
		for (int j = 0; j < nsr; j++)
			assert_true(sr[j].id != id); /* never the policy's */
		for (int i = 0; i <= NRX; i++) {
			if (res[i].id != id)
				continue;
			if (res[i].status == -EAGAIN)
				full = 1;
			else
				assert_int_equal(res[i].status, (int)sizeof(m));
		}
		for (int k = 0; k < NRX; k++) {
			struct rx *rx = &f.rx[k];
			unsigned char sink[8192];
			while (recv(rx->fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
				;
		}
	}
	assert_true(full);
	assert_int_equal(stats(f.ctx).slow_dropped, 0);
	close(sv[0]);
	close(sv[1]);
	assert_int_equal(ms_group_remove(f.g, id), 0);
	fix_close(&f);
}

static void test_bad_config(void **state)
{
	(void)state;
	struct fix f;
	fix_open(&f, NULL, false);
	struct ms_slow_config c = { .size = sizeof(c), .policy = MS_SLOW_QUEUE };
	assert_int_equal(ms_group_set_slow(NULL, &c), -EINVAL);
	assert_int_equal(ms_group_set_slow(f.g, NULL), -EINVAL);
	struct {
		struct ms_slow_config c;
		uint32_t extra;
	} big = { c, 0 };
	big.c.size = sizeof(big);
	assert_int_equal(ms_group_set_slow(f.g, &big.c), 0); /* zero tail: fine */
	big.extra = 1;
	assert_int_equal(ms_group_set_slow(f.g, &big.c), -EINVAL);
	c.size = 8;
	assert_int_equal(ms_group_set_slow(f.g, &c), -EINVAL);
	c.size = 8192;
	assert_int_equal(ms_group_set_slow(f.g, &c), -EINVAL);
	c.size = sizeof(c);
	c.policy = 4;
	assert_int_equal(ms_group_set_slow(f.g, &c), -EINVAL);
	c.policy = MS_SLOW_QUEUE;
	c.overflow = MS_SLOW_QUEUE;
	assert_int_equal(ms_group_set_slow(f.g, &c), -EINVAL);
	c.overflow = MS_SLOW_DISCONNECT;
	c.queue_limit = (1u << 30) + 1;
	assert_int_equal(ms_group_set_slow(f.g, &c), -EINVAL);
	c.queue_limit = 1u << 30;
	assert_int_equal(ms_group_set_slow(f.g, &c), 0);
	c.policy = MS_SLOW_DROP; /* overflow and limit mean nothing for DROP */
	assert_int_equal(ms_group_set_slow(f.g, &c), -EINVAL);
	struct ms_slow_result sr[1];
	assert_int_equal(ms_group_flush(NULL, NULL, 0), -EINVAL);
	assert_int_equal(ms_group_flush(NULL, sr, 1), -EINVAL);
	assert_int_equal(ms_group_flush(f.g, NULL, 1), -EINVAL);
	assert_int_equal(ms_group_flush(f.g, NULL, 0), 0);
	assert_int_equal(ms_group_slow_results(NULL, sr, 1), -EINVAL);
	assert_int_equal(ms_group_slow_results(NULL, NULL, 0), -EINVAL);
	assert_int_equal(ms_group_slow_results(f.g, NULL, 1), -EINVAL);
	assert_int_equal(ms_group_slow_results(f.g, NULL, 0), 0);
	assert_int_equal(ms_group_backlog(NULL), 0);

	/* While a backlog is held the policy cannot change; once flushed it can. */
	c = (struct ms_slow_config){ .size = sizeof(c), .policy = MS_SLOW_QUEUE };
	assert_int_equal(ms_group_set_slow(f.g, &c), 0);
	int removed_at;
	run(&f, MS_SLOW_QUEUE, 4u << 20, 200, &removed_at);
	assert_true(ms_group_backlog(f.g) > 0);
	struct ms_slow_config none = { .size = sizeof(none) };
	assert_int_equal(ms_group_set_slow(f.g, &none), -EBUSY);
	resume(&f, 0);
	check_received(&f, 0);
	assert_int_equal(ms_group_set_slow(f.g, &none), 0);
	fix_close(&f);
}

/* Removing a destination that holds a backlog discards it, counted; freeing the group too. */
static void test_remove_with_backlog(void **state)
{
	(void)state;
	struct ms_slow_config cfg = { .size = sizeof(cfg), .policy = MS_SLOW_QUEUE };
	struct fix f;
	fix_open(&f, &cfg, false);
	int removed_at;
	run(&f, MS_SLOW_QUEUE, 4u << 20, 200, &removed_at);
	size_t held = ms_group_backlog(f.g);
	assert_true(held > 0);
	assert_int_equal(ms_group_remove(f.g, f.id[0]), 0);
	assert_int_equal(ms_group_backlog(f.g), 0);
	struct ms_stats s = stats(f.ctx);
	assert_int_equal(s.backlog_discarded, held);
	assert_int_equal(s.backlog_bytes, 0);
	/* Another stall, then free the group with the backlog in it. */
	struct ms_group *g2;
	assert_int_equal(ms_group_new(f.ctx, &g2), 0);
	assert_int_equal(ms_group_set_slow(g2, &cfg), 0);
	struct ms_dest d = { .fd = f.tx[0] };
	assert_true(ms_group_add(g2, &d) >= 0);
	static unsigned char m[MAXMSG];
	make_msg(m, 0);
	struct ms_result res[1];
	for (int r = 0; r < 200; r++)
		ms_send(g2, m, msg_len(0), 0, res);
	assert_true(ms_group_backlog(g2) > 0);
	ms_group_free(g2);
	s = stats(f.ctx);
	assert_int_equal(s.backlog_bytes, 0);
	assert_true(s.backlog_discarded > held);
	fix_close(&f);
}

/* The policy's flags for the last call on a group of one destination (r its result). */
static uint32_t one_flags(struct ms_group *g, const struct ms_result *r)
{
	struct ms_slow_result sr[1];
	return slow_record(g, sr, 1, r, 1) ? sr[0].flags : 0;
}

/* A seqpacket message queued whole that the socket then refuses on its own account (larger
 * than its send buffer allows): dropped from the backlog and counted, the rest flows. Empty
 * seqpacket messages count against the queue limit too (each is a record in memory). */
static void test_seqpacket_refused_and_empty(void **state)
{
	(void)state;
	struct ms_ctx *ctx;
	struct ms_group *g;
	struct ms_config c = { .size = sizeof(c), .backend = backend,
			       .flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV };
	assert_int_equal(ms_ctx_new(&ctx, &c), 0);
	assert_int_equal(ms_group_new(ctx, &g), 0);
	struct ms_slow_config cfg = { .size = sizeof(cfg), .policy = MS_SLOW_QUEUE,
				      .queue_limit = 64 * 1024 };
	assert_int_equal(ms_group_set_slow(g, &cfg), 0);
	int sv[2], small = 4096;
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	struct ms_dest d = { .fd = sv[0] };
	assert_true(ms_group_add(g, &d) >= 0);
	static char big[10000], one[100];
	memset(big, 'b', sizeof(big));
	memset(one, 'o', sizeof(one));
	struct ms_result r;
	/* Straight to the socket, too big: its own error, nothing queued. */
	assert_int_equal(ms_send(g, big, sizeof(big), 0, &r), 0);
	assert_int_equal(r.status, -EMSGSIZE);
	assert_int_equal(one_flags(g, &r), 0);
	/* Fill it, then the big one goes to the backlog, then a small one behind it. */
	int sent_small = 0;
	for (int i = 0; i < 1000 && !(one_flags(g, &r) & MS_RES_QUEUED); i++) {
		ms_send(g, one, sizeof(one), 0, &r);
		sent_small += r.status == (int)sizeof(one);
	}
	assert_true(one_flags(g, &r) & MS_RES_QUEUED);
	int queued_small = 1;
	assert_int_equal(ms_send(g, big, sizeof(big), 0, &r), 0);
	assert_int_equal(one_flags(g, &r), MS_RES_QUEUED);
	assert_int_equal(ms_send(g, one, sizeof(one), 0, &r), 0);
	assert_int_equal(one_flags(g, &r), MS_RES_QUEUED);
	queued_small++;
	/* Read everything, flush: the big record is refused and discarded, the small ones go. */
	char buf[20000];
	int got = 0;
	for (int round = 0; round < 100 && ms_group_backlog(g); round++) {
		for (ssize_t n; (n = recv(sv[1], buf, sizeof(buf), MSG_DONTWAIT)) > 0;) {
			assert_int_equal(n, (ssize_t)sizeof(one));
			got++;
		}
		struct ms_slow_result fr[1];
		assert_true(ms_group_flush(g, fr, 1) >= 0);
	}
	for (ssize_t n; (n = recv(sv[1], buf, sizeof(buf), MSG_DONTWAIT)) > 0;) {
		assert_int_equal(n, (ssize_t)sizeof(one));
		got++;
	}
	assert_int_equal(got, sent_small + queued_small);
	assert_int_equal(ms_group_size(g), 1);
	struct ms_stats st = { .size = sizeof(st) };
	assert_int_equal(ms_ctx_stats(ctx, &st), 0);
	assert_int_equal(st.backlog_discarded, sizeof(big));
	assert_int_equal(st.backlog_bytes, 0);
	/* Empty messages: fill the socket with them, then the limit bounds how many queue. */
	struct ms_slow_config tiny = { .size = sizeof(tiny), .policy = MS_SLOW_QUEUE,
				       .queue_limit = 64 };
	assert_int_equal(ms_group_set_slow(g, &tiny), 0);
	unsigned queued = 0, dropped = 0;
	for (int i = 0; i < 5000; i++) {
		int n = ms_send(g, "", 0, 0, &r);
		if (one_flags(g, &r) & MS_RES_QUEUED) {
			assert_int_equal(n, 0); /* queued is not "took it" */
			queued++;
		}
		dropped += (one_flags(g, &r) & MS_RES_DROPPED) != 0;
	}
	assert_int_equal(queued, 64 / 4);
	assert_true(dropped > 0);
	ms_group_free(g);
	ms_ctx_free(ctx);
	close(sv[0]);
	close(sv[1]);
}

/* The caller closes a stalled destination's socket and another takes its number: the
 * backlog is never written to the newcomer; the destination is removed with -EBADF. */
static void test_closed_with_backlog(void **state)
{
	(void)state;
	struct ms_slow_config cfg = { .size = sizeof(cfg), .policy = MS_SLOW_QUEUE };
	struct fix f;
	fix_open(&f, &cfg, false);
	int removed_at;
	run(&f, MS_SLOW_QUEUE, 4u << 20, 200, &removed_at);
	assert_true(ms_group_backlog(f.g) > 0);
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(dup2(sv[0], f.tx[0]), f.tx[0]); /* closes the original, takes its number */
	struct ms_slow_result sr[NRX];
	int n = ms_group_flush(f.g, sr, NRX);
	assert_int_equal(n, 1);
	assert_int_equal(sr[0].id, f.id[0]);
	assert_int_equal(sr[0].status, -EBADF);
	assert_int_equal(sr[0].flags, MS_RES_REMOVED);
	assert_int_equal(sr[0].backlog, 0);
	assert_int_equal(ms_group_size(f.g), NRX - 1);
	char c;
	assert_true(recv(sv[1], &c, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN); /* nothing leaked */
	assert_int_equal(stats(f.ctx).backlog_bytes, 0);
	close(sv[0]);
	close(sv[1]);
	fix_close(&f);
}

/* ---- the policy's record (ms_group_slow_results) ---------------------------------------- */

enum { RLEN = 1000 };

/* Read and count what a seqpacket receiver holds now. */
static int drain_count(int fd)
{
	char buf[RLEN * 2];
	int got = 0;
	for (ssize_t n; (n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0;) {
		assert_int_equal(n, RLEN);
		got++;
	}
	return got;
}

/* Send one RLEN-byte message to g (n destinations); read what the receivers in `keep` hold
 * (the ones that keep up). Returns the record's entries (in sr) and fills res; checks that
 * every destination without an entry took the whole message. */
static int rec_send(struct ms_group *g, size_t n, struct ms_result *res,
		    struct ms_slow_result *sr, const int *keep, int nkeep, int *whole)
{
	static char m[RLEN];
	memset(m, 'r', sizeof(m));
	memset(res, 0xa5, n * sizeof(*res));
	*whole = ms_send(g, m, sizeof(m), 0, res);
	int nsr = slow_record(g, sr, n, res, n), j = 0, took = 0;
	for (size_t i = 0; i < n; i++) {
		if (j < nsr && sr[j].pos == i) {
			took += res[i].status == RLEN && !sr[j].flags;
			j++;
			continue;
		}
		assert_int_equal(res[i].status, RLEN);
		took++;
	}
	assert_int_equal(*whole, took);
	for (int k = 0; k < nkeep; k++)
		drain_count(keep[k]);
	return nsr;
}

static size_t pos_of(const struct ms_result *res, size_t n, int id)
{
	for (size_t i = 0; i < n; i++)
		if (res[i].id == id)
			return i;
	fail_msg("id %d not in the results", id);
	return 0;
}

/* A stalled seqpacket receiver (never read) among a healthy one and a datagram destination:
 * the record says exactly what the policy did, call by call, and nothing when it did
 * nothing; a removed destination's id is in the record of the call that removed it; every
 * call (ms_send or ms_group_flush) replaces the record. */
static void test_record(void **state)
{
	(void)state;
	struct ms_ctx *ctx;
	struct ms_config c = { .size = sizeof(c), .backend = backend,
			       .flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV };
	assert_int_equal(ms_ctx_new(&ctx, &c), 0);
	const uint32_t limit = 3 * (RLEN + 4); /* three seqpacket records */
	struct ms_slow_config cfgs[] = {
		{ .size = sizeof(cfgs[0]), .policy = MS_SLOW_QUEUE,
		  .overflow = MS_SLOW_DISCONNECT, .queue_limit = limit },
		{ .size = sizeof(cfgs[0]), .policy = MS_SLOW_DROP },
	};
	for (size_t ci = 0; ci < sizeof(cfgs) / sizeof(cfgs[0]); ci++) {
		const bool queue = cfgs[ci].policy == MS_SLOW_QUEUE;
		struct ms_group *g;
		assert_int_equal(ms_group_new(ctx, &g), 0);
		assert_int_equal(ms_group_set_slow(g, &cfgs[ci]), 0);
		int dg[2], stall_tx, stall_rx, ok_tx, ok_rx;
		assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, dg), 0);
		seqpacket_pair(&stall_tx, &stall_rx);
		seqpacket_pair(&ok_tx, &ok_rx);
		int ids[3];
		struct ms_dest d0 = { .fd = dg[0] }, d1 = { .fd = stall_tx }, d2 = { .fd = ok_tx };
		assert_true((ids[0] = ms_group_add(g, &d0)) >= 0);
		assert_true((ids[1] = ms_group_add(g, &d1)) >= 0);
		assert_true((ids[2] = ms_group_add(g, &d2)) >= 0);
		const int stalled = ids[1], keep[2] = { dg[1], ok_rx };
		struct ms_result res[3];
		struct ms_slow_result sr[3];
		int whole;

		/* Everyone keeps up: the policy does nothing, the record is empty. */
		assert_int_equal(rec_send(g, 3, res, sr, keep, 2, &whole), 0);
		assert_int_equal(whole, 3);
		const size_t sp = pos_of(res, 3, stalled);

		/* Fill the stalled socket: calls in which it took the message record nothing;
		 * the first it cannot take records exactly one entry, its own. */
		int nsr = 0, calls = 1;
		for (; calls < 10000 && !(nsr = rec_send(g, 3, res, sr, keep, 2, &whole)); calls++)
			assert_int_equal(whole, 3);
		assert_int_equal(nsr, 1);
		assert_int_equal(whole, 2);
		assert_int_equal(sr[0].id, stalled);
		assert_int_equal(sr[0].pos, sp);
		struct ms_stats st = { .size = sizeof(st) };
		if (queue) {
			assert_int_equal(sr[0].status, 0); /* nothing taken now: all of it queued */
			assert_int_equal(sr[0].flags, MS_RES_QUEUED);
			assert_int_equal(sr[0].backlog, RLEN);
			assert_int_equal(ms_group_backlog(g), RLEN);
			/* Still stalled: the next message queues behind, the backlog grows. */
			assert_int_equal(rec_send(g, 3, res, sr, keep, 2, &whole), 1);
			assert_int_equal(whole, 2);
			assert_true(sr[0].id == stalled && sr[0].pos == sp && sr[0].status == 0);
			assert_int_equal(sr[0].flags, MS_RES_QUEUED);
			assert_int_equal(sr[0].backlog, 2 * RLEN);
			/* A flush that can write nothing: its own record replaces the send's. */
			assert_int_equal(ms_group_flush(g, sr, 3), 1);
			assert_true(sr[0].id == stalled && sr[0].pos == sp && sr[0].status == 0);
			assert_int_equal(sr[0].flags, MS_RES_QUEUED);
			assert_int_equal(sr[0].backlog, 2 * RLEN);
			assert_int_equal(ms_group_flush(g, NULL, 0), 1); /* count only */
			assert_int_equal(rec_send(g, 3, res, sr, keep, 2, &whole), 1);
			assert_int_equal(sr[0].flags, MS_RES_QUEUED);
			assert_int_equal(sr[0].backlog, 3 * RLEN); /* the limit: three records */
			/* The fourth does not fit: overflow DISCONNECT removes it. */
			assert_int_equal(rec_send(g, 3, res, sr, keep, 2, &whole), 1);
			assert_int_equal(whole, 2);
			assert_int_equal(sr[0].id, stalled);
			assert_int_equal(sr[0].pos, sp);
			assert_int_equal(sr[0].status, -EAGAIN);
			assert_int_equal(sr[0].flags, MS_RES_REMOVED);
			assert_int_equal(sr[0].backlog, 0);
			assert_int_equal(ms_group_size(g), 2);
			assert_int_equal(ms_group_remove(g, stalled), -ENOENT);
			assert_int_equal(ms_group_backlog(g), 0);
			/* The removed id stays in the record until the next call. */
			memset(sr, 0, sizeof(sr));
			assert_int_equal(ms_group_slow_results(g, sr, 3), 1);
			assert_true(sr[0].id == stalled && sr[0].flags == MS_RES_REMOVED);
			assert_int_equal(ms_ctx_stats(ctx, &st), 0);
			assert_int_equal(st.slow_queued, 3);
			assert_int_equal(st.slow_removed, 1);
			assert_int_equal(st.backlog_discarded, 3 * RLEN);
			/* Which the next call replaces: the policy does nothing, empty record. */
			assert_int_equal(rec_send(g, 2, res, sr, keep, 2, &whole), 0);
			assert_int_equal(whole, 2);
			assert_int_equal(ms_group_flush(g, sr, 3), 0);
		} else {
			assert_int_equal(sr[0].status, -EAGAIN);
			assert_int_equal(sr[0].flags, MS_RES_DROPPED);
			assert_int_equal(sr[0].backlog, 0);
			assert_int_equal(rec_send(g, 3, res, sr, keep, 2, &whole), 1);
			assert_true(sr[0].id == stalled && sr[0].pos == sp);
			assert_true(sr[0].status == -EAGAIN && sr[0].flags == MS_RES_DROPPED);
			assert_int_equal(ms_ctx_stats(ctx, &st), 0);
			assert_int_equal(st.slow_dropped, 2);
			/* The receiver reads again: it got every message up to the stall, and the
			 * next call records nothing. */
			assert_int_equal(drain_count(stall_rx), calls);
			assert_int_equal(rec_send(g, 3, res, sr, keep, 2, &whole), 0);
			assert_int_equal(whole, 3);
			assert_int_equal(drain_count(stall_rx), 1);
		}
		ms_group_free(g);
		close(dg[0]), close(dg[1]), close(stall_tx), close(stall_rx);
		close(ok_tx), close(ok_rx);
	}

	/* A destination that held a backlog when the call began gets an entry even when the
	 * backlog empties and the message goes whole (flags 0, backlog 0); the call after has
	 * none. */
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	struct ms_slow_config q = { .size = sizeof(q), .policy = MS_SLOW_QUEUE };
	assert_int_equal(ms_group_set_slow(g, &q), 0);
	int tx, rx;
	seqpacket_pair(&tx, &rx);
	struct ms_dest d = { .fd = tx };
	int id = ms_group_add(g, &d);
	assert_true(id >= 0);
	struct ms_result r;
	struct ms_slow_result sr[1];
	int whole, sent = 0;
	for (int i = 0; i < 10000 && !rec_send(g, 1, &r, sr, NULL, 0, &whole); i++)
		sent++;
	assert_true(sr[0].id == id && sr[0].pos == 0 && sr[0].flags == MS_RES_QUEUED);
	assert_int_equal(sr[0].backlog, RLEN);
	assert_int_equal(drain_count(rx), sent);
	assert_int_equal(rec_send(g, 1, &r, sr, NULL, 0, &whole), 1);
	assert_int_equal(whole, 1);
	assert_true(sr[0].id == id && sr[0].status == RLEN && sr[0].flags == 0);
	assert_int_equal(sr[0].backlog, 0);
	assert_int_equal(drain_count(rx), 2); /* the queued one, then this one */
	assert_int_equal(rec_send(g, 1, &r, sr, NULL, 0, &whole), 0);
	assert_int_equal(drain_count(rx), 1);
	/* Stall it again, then remove it: the record stays the last call's until a send to
	 * the now empty group replaces it with nothing; a refused call changes nothing. */
	for (int i = 0; i < 10000 && !rec_send(g, 1, &r, sr, NULL, 0, &whole); i++)
		;
	assert_true(sr[0].id == id && sr[0].flags == MS_RES_QUEUED);
	assert_int_equal(ms_group_remove(g, id), 0);
	assert_int_equal(ms_group_slow_results(g, sr, 1), 1);
	assert_int_equal(ms_send(g, "x", 1, ~0u, NULL), -EINVAL);
	assert_int_equal(ms_group_slow_results(g, sr, 1), 1);
	assert_int_equal(sr[0].id, id);
	assert_int_equal(ms_send(g, "x", 1, 0, NULL), 0);
	assert_int_equal(ms_group_slow_results(g, sr, 1), 0);
	ms_group_free(g);
	close(tx);
	close(rx);
	ms_ctx_free(ctx);
}

int main(int argc, char **argv)
{
	/* Before any socket: a loopback of its own, where no other test's datagram can reach
	 * a receiver on an ephemeral port (net.c). */
	net_private_netns("slow");
	backend = net_backend_arg(argc, argv, (struct ms_config){ 0 }, NULL, 0);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_drop),
		cmocka_unit_test(test_queue_bounded),
		cmocka_unit_test(test_queue_everything),
		cmocka_unit_test(test_queue_overflow_disconnect),
		cmocka_unit_test(test_disconnect),
		cmocka_unit_test(test_vanish_queue),
		cmocka_unit_test(test_vanish_disconnect),
		cmocka_unit_test(test_seqpacket_queue),
		cmocka_unit_test(test_datagrams_untouched),
		cmocka_unit_test(test_bad_config),
		cmocka_unit_test(test_remove_with_backlog),
		cmocka_unit_test(test_seqpacket_refused_and_empty),
		cmocka_unit_test(test_closed_with_backlog),
		cmocka_unit_test(test_record),
	};
	char group[64];
	snprintf(group, sizeof(group), "slow-%s", argv[1]);
	return _cmocka_run_group_tests(group, tests, sizeof(tests) / sizeof(tests[0]), NULL, NULL);
}
