/* SPDX-License-Identifier: MIT */
/* The public send calls: validate, hand the fan-out to the backend, add up what it recorded. */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/types.h>

#include "internal.h"

enum ms__errclass ms__errclass(int err)
{
	switch (err) {
	case EAGAIN:
		return MS__ERR_AGAIN;
	case ENOBUFS:
	case ENOMEM:
		return MS__ERR_NOBUFS;
	case EMSGSIZE:
		return MS__ERR_MSGSIZE;
	case ECONNREFUSED:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case ENETDOWN:
	case EHOSTDOWN:
		return MS__ERR_UNREACH;
	case EPIPE:
	case ECONNRESET:
	case ENOTCONN:
	case EDESTADDRREQ:
		return MS__ERR_CONN;
	case EBADF:
	case ENOTSOCK:
		return MS__ERR_BADF;
	default:
		return MS__ERR_OTHER;
	}
}

void ms__commit(struct ms_ctx *ctx, const struct ms__send *s)
{
	struct ms__counters *c = &ctx->c;
	c->attempted += s->accepted + s->partial + s->failed;
	c->accepted += s->accepted;
	c->bytes += s->bytes;
	c->syscalls += s->syscalls;
	if (unlikely(s->zc_sends | s->zc_copied)) {
		c->zc_sends += s->zc_sends;
		c->zc_copied += s->zc_copied;
	}
	if (unlikely(s->partial || s->failed || s->g->nmanaged)) {
		c->partial += s->partial;
		c->failed += s->failed;
		for (int k = 0; k < MS__ERR_NCLASSES; k++)
			c->err[k] += s->err[k];
		c->slow_queued += s->slow_queued;
		c->slow_dropped += s->slow_dropped;
		c->slow_removed += s->slow_removed;
	}
	/* A clean call, in a group without a policy (backlogs) and a context without timestamps
	 * (whose sampling changes counters of its own on the way), moved only five counters. */
	if (likely(!s->failed && !s->partial && !s->g->nmanaged && !ctx->ts_sample &&
		   !(s->zc_sends | s->zc_copied)))
		ms__publish_sent(ctx);
	else
		ms__publish(ctx);
}

/* MS_CFG_ROTATE: this call starts where the group's cursor is, and moves it on by one. */
static void rotate(struct ms_group *g, struct ms__send *s)
{
	if (!g->rot_ok) { /* the group changed: find the cursor's bucket again */
		size_t p = g->rot_pos % g->size, base = 0;
		uint32_t k = 0;
		while (p - base >= g->buckets[k]->n)
			base += g->buckets[k++]->n;
		g->rot_k = k;
		g->rot_j = (uint32_t)(p - base);
		g->rot_base = base;
		g->rot_ok = true;
	}
	s->k0 = g->rot_k;
	s->j0 = g->rot_j;
	s->base0 = g->rot_base;
	g->rot_pos = g->rot_base + g->rot_j + 1;
	if (++g->rot_j >= g->buckets[g->rot_k]->n) {
		g->rot_base += g->buckets[g->rot_k]->n;
		g->rot_j = 0;
		if (++g->rot_k == g->nbuckets) {
			g->rot_k = 0;
			g->rot_base = 0;
		}
	}
	if (g->rot_pos == g->size)
		g->rot_pos = 0;
}

int ms__do_send(struct ms_group *g, const struct iovec *iov, int iovcnt, size_t len,
		unsigned flags, struct ms_result *res)
{
	if (flags & ~MS_SEND_ALL_FLAGS)
		return -EINVAL;
	if (!g->size)
		return 0;

	/* The message headers all point at the group's iovec array (see struct ms__bucket). */
	if (likely(iovcnt == 1))
		g->iov[0] = iov[0];
	else if (iovcnt)
		memcpy(g->iov, iov, (size_t)iovcnt * sizeof(*iov));
	ms__group_set_iovlen(g, iovcnt);

	struct ms__send s = {
		.g = g,
		.iov = g->iov,
		.iovcnt = iovcnt,
		.len = len,
		.msg_flags = MSG_NOSIGNAL | ((flags & MS_SEND_DONTWAIT) ? MSG_DONTWAIT : 0),
		.res = res,
		.managed = g->nmanaged > 0,
	};
	struct ms_ctx *ctx = g->ctx;
	if (ctx->flags & MS_CFG_ROTATE)
		rotate(g, &s);
	s.parts = 1;
	if (unlikely(ctx->pool != NULL) && (s.parts = ms__pool_parts(ctx, &s)) > 1 && !g->flat_ok)
		ms__flat_build(g); /* before the parts read it (and timestamps arm by it) */
	if (unlikely(ctx->ts_sample) && g->ts_calls++ % ctx->ts_sample == 0)
		ms__ts_begin(&s);
	int err = s.parts > 1 ? ms__pool_send(&s) : ctx->be->send(&s);
	if (unlikely(s.ts_armed))
		ms__ts_end(&s);
	if (s.managed)
		ms__slow_after(&s, err);
	ctx->c.fanouts++;
	ms__commit(ctx, &s);

	if (err < 0 && !s.accepted && !s.partial)
		return err;
	return (int)s.accepted;
}

/* The checks ms_sendv and ms_postv share; sets *len. */
static int check_iov(const struct iovec *iov, int iovcnt, size_t *len)
{
	if (iovcnt < 0 || iovcnt > IOV_MAX || (!iov && iovcnt))
		return -EINVAL;
	size_t sum = 0;
	for (int i = 0; i < iovcnt; i++) {
		if (!iov[i].iov_base && iov[i].iov_len)
			return -EINVAL;
		if (iov[i].iov_len > (size_t)SSIZE_MAX - sum)
			return -EINVAL;
		sum += iov[i].iov_len;
	}
	*len = sum;
	return 0;
}

/* ms_send and ms_sendv: always synchronous; on a context whose offload thread runs, after
 * the messages posted before (lib/workers.c). */
static int send_now(struct ms_group *g, const struct iovec *iov, int iovcnt, size_t len,
		    unsigned flags, struct ms_result *res)
{
	if (unlikely(g->ctx->pool != NULL) && ms__offloaded(g->ctx))
		return ms__offload_send(g, iov, iovcnt, len, flags, res);
	return ms__do_send(g, iov, iovcnt, len, flags, res);
}

int ms_send(struct ms_group *g, const void *buf, size_t len, unsigned flags,
	    struct ms_result *res)
{
	if (!g || (!buf && len) || len > SSIZE_MAX)
		return -EINVAL;
	struct iovec one = { .iov_base = (void *)buf, .iov_len = len };
	return send_now(g, &one, 1, len, flags, res);
}

int ms_sendv(struct ms_group *g, const struct iovec *iov, int iovcnt, unsigned flags,
	     struct ms_result *res)
{
	size_t len;
	if (!g || check_iov(iov, iovcnt, &len))
		return -EINVAL;
	return send_now(g, iov, iovcnt, len, flags, res);
}

int ms_post(struct ms_group *g, const void *buf, size_t len, unsigned flags, uint64_t *seq)
{
	if (seq)
		*seq = 0;
	if (!g || (!buf && len) || len > SSIZE_MAX)
		return -EINVAL;
	struct iovec one = { .iov_base = (void *)buf, .iov_len = len };
	return ms__offload_post(g, &one, 1, len, flags, seq);
}

int ms_postv(struct ms_group *g, const struct iovec *iov, int iovcnt, unsigned flags,
	     uint64_t *seq)
{
	size_t len;
	if (seq)
		*seq = 0;
	if (!g || check_iov(iov, iovcnt, &len))
		return -EINVAL;
	return ms__offload_post(g, iov, iovcnt, len, flags, seq);
}
