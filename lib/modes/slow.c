/* SPDX-License-Identifier: MIT */
/*
 * Slow consumers: a group's policy for connection-oriented destinations whose socket is full;
 * stages before and after the executor (lib/backend.h).
 *
 * A managed destination (stream or seqpacket socket in a group with a policy) is sent to
 * non-blocking by the executor like any other. Before it, the call gets a status array (the
 * caller's, or the group's scratch one); after it, ms__slow_after reads each managed
 * destination's status, applies the policy and records the outcome in its place (and, where
 * the policy acted, in the group's record that ms_group_slow_results reads). A
 * destination with a backlog is left out of the executor's ranges (its new message must queue
 * up behind the old bytes): here its backlog is written first, with plain non-blocking sends,
 * and then the new message if the backlog emptied. One rule keeps every stream framed: once
 * the kernel has taken part of a message, the rest is kept and sent before anything newer,
 * whatever the policy, unless the destination is removed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"
#include "sys.h"

#define QUEUE_LIMIT_DEFAULT (4u << 20)
#define QUEUE_LIMIT_MAX (1u << 30)
#define SLOW_CONFIG_MIN_SIZE (sizeof(uint32_t) * 4) /* the first released struct */

/* ---- backlogs ----------------------------------------------------------------------------- */
/*
 * A backlog is a byte buffer: for a stream, the bytes still to write; for a seqpacket socket,
 * whose every send is one message, records of a 4-byte length and the message. held counts the
 * message bytes alone (what the results and counters report).
 */

#define REC_HDR sizeof(uint32_t)
#define BUF_KEEP (64u << 10) /* an empty backlog keeps a buffer up to this size */

static void held_changed(struct ms_group *g, struct ms__bucket *b, size_t new_held)
{
	g->backlog = g->backlog - b->bl.held + new_held;
	g->ctx->c.backlog_bytes = g->ctx->c.backlog_bytes - b->bl.held + new_held;
	b->bl.held = new_held;
}

/* Append the message's bytes from offset skip on. Returns 0 or -ENOMEM (backlog unchanged). */
static int backlog_append(struct ms_group *g, struct ms__bucket *b, const struct ms__send *s,
			  size_t skip)
{
	size_t add = s->b.len - skip, hdr = b->type == SOCK_SEQPACKET ? REC_HDR : 0;
	if (b->bl.off && b->bl.off + b->bl.len + hdr + add > b->bl.cap) {
		memmove(b->bl.buf, b->bl.buf + b->bl.off, b->bl.len);
		b->bl.off = 0;
	}
	if (b->bl.len + hdr + add > b->bl.cap) {
		size_t need = b->bl.len + hdr + add;
		size_t ncap = b->bl.cap ? b->bl.cap : 4096;
		while (ncap < need)
			ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
		/* MS_CFG_MLOCK: best effort here (the README says so): the backlog holds the
		 * message either way, and a failed lock must not drop it. */
		if (ms__grow(g->ctx, &b->bl.buf, ncap) == -ENOMEM)
			return -ENOMEM;
		b->bl.cap = ncap;
	}
	char *dst = b->bl.buf + b->bl.off + b->bl.len;
	if (hdr) {
		uint32_t n = (uint32_t)add; /* a seqpacket message is never begun: skip is 0 */
		memcpy(dst, &n, REC_HDR);
		dst += REC_HDR;
	}
	for (int k = 0; k < s->b.iovcnt; k++) {
		size_t n = s->b.iov[k].iov_len;
		if (skip >= n) {
			skip -= n;
			continue;
		}
		memcpy(dst, (const char *)s->b.iov[k].iov_base + skip, n - skip);
		dst += n - skip;
		skip = 0;
	}
	b->bl.len += hdr + add;
	b->stalled = true;
	held_changed(g, b, b->bl.held + add);
	return 0;
}

static void backlog_discard(struct ms_group *g, struct ms__bucket *b)
{
	g->ctx->c.backlog_discarded += b->bl.held;
	held_changed(g, b, 0);
	b->bl.off = b->bl.len = 0;
	b->stalled = false;
}

/* "Cannot take it now": the socket is full, or short of memory for a moment. */
static bool transient(int err)
{
	return err == EAGAIN || err == ENOBUFS || err == ENOMEM;
}

/* The stream itself has failed (or its socket is gone): no later send can succeed. */
static bool dead(int err)
{
	enum ms__errclass c = ms__errclass(err);
	return c == MS__ERR_CONN || c == MS__ERR_UNREACH || c == MS__ERR_BADF || err == ETIMEDOUT;
}

/* The socket the bucket was made for still has its number (the caller may have closed it
 * and another file taken the number; io_uring's registered file would still reach the old
 * one, so the plain sends here must not go to the new one). */
static bool same_socket(const struct ms__bucket *b)
{
	struct stat st;
	return fstat(b->fd, &st) == 0 && (uint64_t)st.st_ino == b->ino;
}

/* Write as much of the backlog as the socket takes now. Returns 0 (b->stalled says whether
 * some is left) or the -errno of a send that failed for another reason than a full socket;
 * *sent gets the message bytes written. A seqpacket record the socket refuses for a reason
 * of its own (EMSGSIZE...) is dropped, counted as discarded, and the next one tried. */
static int backlog_write(struct ms_group *g, struct ms__bucket *b, uint64_t *syscalls,
			 size_t *sent)
{
	size_t hdr = b->type == SOCK_SEQPACKET ? REC_HDR : 0;
	*sent = 0;
	if (!same_socket(b))
		return -EBADF;
	while (b->bl.len) {
		const char *p = b->bl.buf + b->bl.off;
		size_t n = b->bl.len;
		if (hdr) {
			uint32_t rec;
			memcpy(&rec, p, REC_HDR);
			p += REC_HDR;
			n = rec;
		}
		ssize_t r;
		do {
			(*syscalls)++;
			r = ms__sys.sendto(b->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT, NULL, 0);
		} while (r < 0 && errno == EINTR);
		if (r < 0 && hdr && !transient(errno) && !dead(errno)) {
			b->bl.off += hdr + n;
			b->bl.len -= hdr + n;
			g->ctx->c.backlog_discarded += n;
			held_changed(g, b, b->bl.held - n);
			continue;
		}
		if (r < 0)
			return transient(errno) ? 0 : -errno;
		if (r == 0 && n)
			return 0; /* cannot happen; do not spin on it */
		size_t took = hdr ? hdr + n : (size_t)r; /* a seqpacket send is all or nothing */
		b->bl.off += took;
		b->bl.len -= took;
		*sent += took - hdr;
		held_changed(g, b, b->bl.held - (took - hdr));
	}
	b->bl.off = 0;
	b->stalled = false;
	if (b->bl.cap > BUF_KEEP) { /* a burst's buffer is given back once it has drained */
		free(b->bl.buf);
		b->bl.buf = NULL;
		b->bl.cap = 0;
	}
	return 0;
}

void ms__slow_bucket_init(struct ms_group *g, struct ms__bucket *b)
{
	b->managed = g->slow.policy != MS_SLOW_BLOCK && b->type != SOCK_DGRAM;
	/* io_uring waits for room whatever the socket's O_NONBLOCK says (it polls for it): the
	 * flag read when the socket joined makes every backend's sends non-blocking alike. */
	b->xflags = b->managed || b->nonblock ? MSG_DONTWAIT : 0;
	if (b->managed)
		g->nmanaged++;
}

void ms__slow_bucket_fini(struct ms_group *g, struct ms__bucket *b)
{
	backlog_discard(g, b);
	free(b->bl.buf);
	b->bl.buf = NULL;
	b->bl.cap = 0;
	if (b->managed)
		g->nmanaged--;
	b->managed = false;
}

/* ---- the policy --------------------------------------------------------------------------- */

static bool removes_slow(const struct ms_slow_config *p)
{
	return p->policy == MS_SLOW_DISCONNECT ||
	       (p->policy == MS_SLOW_QUEUE && p->overflow == MS_SLOW_DISCONNECT);
}

/* A message the destination cannot take at all now (nothing of it written). */
static int cannot_take(struct ms__send *s, struct ms__bucket *b, int status, uint32_t *flags)
{
	const struct ms_slow_config *p = &s->g->slow;
	if (!s->b.len && b->type == SOCK_STREAM)
		return 0; /* nothing to send: a stream takes an empty message whole, even when full */
	size_t hdr = b->type == SOCK_SEQPACKET ? REC_HDR : 0; /* memory, not just message bytes */
	if (p->policy == MS_SLOW_QUEUE && b->bl.len + hdr + s->b.len <= p->queue_limit &&
	    backlog_append(s->g, b, s, 0) == 0) {
		*flags |= MS_RES_QUEUED;
		return 0;
	}
	if (removes_slow(p))
		*flags |= MS_RES_REMOVED;
	else
		*flags |= MS_RES_DROPPED;
	return status;
}

/* Apply the policy to this call's outcome for one managed destination; returns the status to
 * report and sets *flags. */
static int apply(struct ms__send *s, struct ms__bucket *b, int status, uint32_t *flags)
{
	const struct ms_slow_config *p = &s->g->slow;

	if (status >= 0 && (size_t)status == s->b.len)
		return status;
	if (status >= 0) {
		/* Part of the message went: the rest must follow, or the stream is cut. */
		if (p->policy == MS_SLOW_DISCONNECT) {
			*flags |= MS_RES_REMOVED;
			return status;
		}
		if (backlog_append(s->g, b, s, (size_t)status) < 0) {
			*flags |= MS_RES_REMOVED; /* no room for the rest: cut it off cleanly */
			return status;
		}
		*flags |= MS_RES_QUEUED;
		return status;
	}
	if (transient(-status))
		return cannot_take(s, b, status, flags);
	if (dead(-status) || b->stalled) {
		/* A failed stream, or a backlog that cannot be written (a stream whose rest can
		 * no longer follow): it is removed, whatever the policy, so that no later message
		 * goes out on a stream that is gone or cut. */
		*flags |= MS_RES_REMOVED;
	}
	return status;
}

/* A non-blocking send of the call's message to a destination the backend skipped. */
static int send_direct(struct ms__send *s, struct ms__bucket *b)
{
	struct msghdr h = { .msg_iov = (struct iovec *)s->b.iov, .msg_iovlen = (size_t)s->b.iovcnt };
	ssize_t r;
	do {
		s->b.t.syscalls++;
		r = ms__sys.sendmsg(b->fd, &h, s->b.msg_flags | MSG_DONTWAIT);
	} while (r < 0 && errno == EINTR);
	return r < 0 ? -errno : (int)r;
}

/* The call's outcome for a destination that held a backlog when it began. */
static int stalled_dest(struct ms__send *s, struct ms__bucket *b, int be_err, uint32_t *flags)
{
	if (be_err)
		return be_err; /* the call was refused; the backlog waits */
	size_t sent;
	int err = backlog_write(s->g, b, &s->b.t.syscalls, &sent);
	s->b.t.bytes += sent;
	if (err)
		return apply(s, b, err, flags);
	if (b->stalled)
		return cannot_take(s, b, -EAGAIN, flags);
	return apply(s, b, send_direct(s, b), flags);
}

/* The call's outcome for managed bucket b at position pos: its status in res (if any), and an
 * entry in the group's record when the policy acted on it (flags, or a backlog it held when
 * the call began: had_backlog). */
static void record(struct ms_group *g, struct ms_result *res, size_t pos, struct ms__bucket *b,
		   int status, uint32_t flags, bool had_backlog)
{
	if (res)
		res[pos] = (struct ms_result){ .id = b->dests[0].id, .status = status };
	if (flags || had_backlog) {
		/* Room for one entry per managed bucket (ms__slow_reserve_bucket). */
		g->slowres[g->nslowres++] = (struct ms_slow_result){
			.id = b->dests[0].id,
			.status = status,
			.flags = flags,
			.pos = (uint32_t)pos,
			/* A removed destination's backlog is discarded when the call ends. */
			.backlog = (flags & MS_RES_REMOVED) ? 0 : b->bl.held,
		};
	}
	if (flags & MS_RES_REMOVED)
		b->doomed = true;
}

/* Remove the destinations the policy disconnected, after the results are written so that the
 * group's order does not change under them. Removing bucket k moves the last bucket, already
 * visited, into its place, so walking down visits each bucket once. */
static void remove_doomed(struct ms_group *g)
{
	for (uint32_t k = g->nbuckets; k-- > 0;)
		if (g->buckets[k]->doomed)
			ms__group_remove(g, g->buckets[k]->dests[0].id);
}

/* Take back what the executor counted for a status (its after-the-fact outcome replaces it). */
static void uncount(struct ms__tally *t, size_t len, int status)
{
	if (status >= 0) {
		t->bytes -= (unsigned)status;
		if ((size_t)status == len)
			t->accepted--;
		else
			t->partial--;
	} else {
		t->failed--;
		t->err[ms__errclass(-status)]--;
	}
}

void ms__slow_before(struct ms__send *s)
{
	if (!s->b.res)
		s->b.res = s->g->scratch; /* reserved for every destination (ms__slow_reserve) */
}

void ms__slow_after(struct ms__send *s, int be_err)
{
	struct ms_group *g = s->g;
	struct ms__tally *t = &s->b.t;
	struct ms_result *res = s->b.res;
	size_t i = 0;
	bool doomed = false;

	for (uint32_t k = 0; k < g->nbuckets; i += g->buckets[k]->n, k++) {
		struct ms__bucket *b = g->buckets[k];
		if (!b->managed)
			continue;
		uint32_t flags = 0;
		int status;
		bool had_backlog = b->stalled;
		if (had_backlog) {
			status = stalled_dest(s, b, be_err, &flags);
		} else {
			int st = res[i].status; /* the executor's */
			uncount(t, s->b.len, st);
			if (be_err && st == be_err)
				status = be_err; /* it could not be attempted: not the consumer's doing */
			else
				status = apply(s, b, st, &flags);
		}
		record(g, res, i, b, status, flags, had_backlog);
		if (flags & MS_RES_QUEUED) {
			/* Taken in part or not at all yet: never "accepted", even when empty. */
			t->partial++;
			t->bytes += status > 0 ? (unsigned)status : 0;
		} else {
			ms__tally_status(t, s->b.len, status);
		}
		s->slow_queued += (flags & MS_RES_QUEUED) != 0;
		s->slow_dropped += (flags & MS_RES_DROPPED) != 0;
		s->slow_removed += (flags & MS_RES_REMOVED) != 0;
		doomed |= b->doomed;
	}
	if (doomed)
		remove_doomed(g);
}

static int record_reserve(struct ms_group *g, size_t cap)
{
	if (cap <= g->capslowres)
		return 0;
	size_t ncap = g->capslowres ? g->capslowres * 2 : 8;
	if (ncap < cap)
		ncap = cap;
	int err = ms__grow(g->ctx, &g->slowres, ncap * sizeof(*g->slowres));
	if (err)
		return err;
	g->capslowres = ncap;
	return 0;
}

int ms__slow_reserve_bucket(struct ms_group *g, int type)
{
	if (g->slow.policy == MS_SLOW_BLOCK || type == SOCK_DGRAM)
		return 0;
	return record_reserve(g, (size_t)g->nmanaged + 1);
}

int ms__slow_reserve(struct ms_group *g, size_t cap)
{
	if (cap <= g->capscratch)
		return 0;
	int err = ms__grow(g->ctx, &g->scratch, cap * sizeof(*g->scratch));
	if (err)
		return err;
	g->capscratch = cap;
	return 0;
}

/* ---- public calls ------------------------------------------------------------------------- */

int ms_group_set_slow(struct ms_group *g, const struct ms_slow_config *cfg)
{
	if (!g || !cfg || cfg->size < SLOW_CONFIG_MIN_SIZE || cfg->size > 4096)
		return -EINVAL;
	ms__quiesce(g->ctx);
	for (size_t k = sizeof(*cfg); k < cfg->size; k++)
		if (((const unsigned char *)cfg)[k])
			return -EINVAL;
	struct ms_slow_config c;
	memset(&c, 0, sizeof(c));
	memcpy(&c, cfg, cfg->size < sizeof(c) ? cfg->size : sizeof(c));
	if (c.policy > MS_SLOW_DISCONNECT)
		return -EINVAL;
	if (c.overflow != 0 && c.overflow != MS_SLOW_DROP && c.overflow != MS_SLOW_DISCONNECT)
		return -EINVAL;
	if (c.queue_limit > QUEUE_LIMIT_MAX)
		return -EINVAL;
	if (c.policy != MS_SLOW_QUEUE && (c.overflow || c.queue_limit))
		return -EINVAL; /* settings that would do nothing are a mistake worth reporting */
	for (uint32_t k = 0; k < g->nbuckets; k++)
		if (g->buckets[k]->stalled)
			return -EBUSY;
	size_t nconn = 0; /* the buckets the policy will manage */
	for (uint32_t k = 0; k < g->nbuckets; k++)
		nconn += g->buckets[k]->type != SOCK_DGRAM;
	int err = c.policy != MS_SLOW_BLOCK ? ms__slow_reserve(g, g->capplan) : 0;
	if (!err && c.policy != MS_SLOW_BLOCK)
		err = record_reserve(g, nconn);
	if (err)
		return err;
	if (c.policy == MS_SLOW_QUEUE) {
		if (!c.overflow)
			c.overflow = MS_SLOW_DROP;
		if (!c.queue_limit)
			c.queue_limit = QUEUE_LIMIT_DEFAULT;
	}
	g->slow = c;
	g->plan_ok = false; /* the buckets' send flags change */
	g->nmanaged = 0;
	for (uint32_t k = 0; k < g->nbuckets; k++)
		ms__slow_bucket_init(g, g->buckets[k]);
	return 0;
}

/* Copy the record's first min(n, count) entries; returns count. */
static int record_copy(const struct ms_group *g, struct ms_slow_result *out, size_t n)
{
	size_t k = g->nslowres < n ? g->nslowres : n;
	if (k)
		memcpy(out, g->slowres, k * sizeof(*out));
	return (int)g->nslowres; /* at most one per managed bucket: below INT32_MAX */
}

int ms_group_flush(struct ms_group *g, struct ms_slow_result *out, size_t n)
{
	if (!g || (!out && n))
		return -EINVAL;
	ms__quiesce(g->ctx);
	g->nslowres = 0; /* this call's record */
	if (!g->nmanaged)
		return 0;
	struct ms__send s = { .g = g };
	size_t i = 0;
	bool doomed = false;
	for (uint32_t k = 0; k < g->nbuckets; i += g->buckets[k]->n, k++) {
		struct ms__bucket *b = g->buckets[k];
		if (!b->stalled)
			continue;
		size_t sent;
		uint32_t flags = 0;
		int err = backlog_write(g, b, &s.b.t.syscalls, &sent);
		s.b.t.bytes += sent;
		if (err)
			flags |= MS_RES_REMOVED; /* the backlog cannot be written: see apply() */
		else if (b->stalled)
			flags |= MS_RES_QUEUED;
		int status = err ? err : sent > INT32_MAX ? INT32_MAX : (int)sent;
		record(g, NULL, i, b, status, flags, true);
		s.slow_removed += (flags & MS_RES_REMOVED) != 0;
		doomed |= b->doomed;
	}
	ms__commit(g->ctx, &s);
	if (doomed) {
		remove_doomed(g);
		ms__publish(g->ctx); /* what the removed destinations held is discarded */
	}
	return record_copy(g, out, n);
}

int ms_group_slow_results(const struct ms_group *g, struct ms_slow_result *out, size_t n)
{
	if (!g || (!out && n))
		return -EINVAL;
	ms__quiesce(g->ctx);
	return record_copy(g, out, n);
}

size_t ms_group_backlog(const struct ms_group *g)
{
	if (!g)
		return 0;
	ms__quiesce(g->ctx);
	return g->backlog;
}
