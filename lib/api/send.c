/* SPDX-License-Identifier: MIT */
/* The public send calls and the stages around the executor (lib/backend.h tells the whole). */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/types.h>

#include "internal.h"

/* MS_CFG_ROTATE: this call starts where the group's cursor is, and moves it on by one. */
static size_t rotate(struct ms_group *g)
{
	size_t p = g->rot_pos % g->size; /* the group may have changed since */
	g->rot_pos = p + 1 == g->size ? 0 : p + 1;
	return p;
}

/* Positions a slow-consumer policy holds back (a backlog that must go first) are left out of
 * the executor's ranges: the plan's order from s->first, cut around them. */
static int execute_around(const struct ms__backend *be, void *st, struct ms__send *s)
{
	const struct ms_group *g = s->g;
	const size_t n = s->b.n;
	size_t start = s->first, run = 0;
	int err = 0, e;

	for (MS__EACH(i, left, s->first, n, n)) {
		if (!g->ids[g->plan[i].id].b->stalled) {
			if (!run++)
				start = i;
			continue;
		}
		if (run && (e = be->send(st, &s->b, start, run)) && !err)
			err = e;
		run = 0;
	}
	if (run && (e = be->send(st, &s->b, start, run)) && !err)
		err = e;
	return err;
}

/* The executor stage: K parts on K threads, or the calling thread alone. The loop takes over
 * what the backend cannot do (its capabilities, lib/backend.h): a call that needs prepared
 * headers, or a child forked after the context was made when the state is the parent's. */
static int execute(struct ms_ctx *ctx, struct ms__send *s)
{
	if (s->parts > 1)
		return ms__pool_send(s);
	const struct ms__backend *be = s->x->be;
	void *st = s->x->state;
	if (unlikely(s->b.hdr | ctx->be_fork_unsafe)) {
		if (ms__fork_loop(ctx, be)) {
			ms__fork_fallback(ctx, be, s->b.n);
			s->counted = true; /* ms__commit publishes every counter */
			be = &ms__backend_loop;
			st = NULL;
		} else if (s->b.hdr && !(be->caps & MS__CAP_HDR)) {
			be = &ms__backend_loop;
			st = NULL;
		}
	}
	if (unlikely(be->prepare != NULL)) {
		void **gd = &s->g->gdata[s->x - ctx->exec];
		int err = be->prepare(ctx, st, s->g, s->g->plan_gen, gd);
		if (err) {
			for (MS__EACH(i, left, s->first, s->b.n, s->b.n))
				ms__status(&s->b, i, err);
			return err;
		}
		s->b.gdata = *gd;
	}
	if (unlikely(s->managed))
		return execute_around(be, st, s);
	return be->send(st, &s->b, s->first, s->b.n);
}

/* The stages before the executor, for a context with a mode (ctx->modes) or a group with a
 * policy: AUTO's choice of executor, rotation's first position, the parts, a timestamp
 * sample, the policy's status array; last, when AUTO times the call, the clock. */
static void before(struct ms_ctx *ctx, struct ms__send *s)
{
	struct ms_group *g = s->g;
	if (ctx->modes & MS__MODE_AUTO)
		ms__auto_pick(ctx, s);
	if (ctx->modes & MS__MODE_ROTATE)
		s->first = rotate(g);
	if (ctx->modes & MS__MODE_POOL)
		s->parts = ms__pool_parts(ctx, s);
	/* (timestamps ride on control messages: only a backend that sends prepared headers) */
	if ((ctx->modes & MS__MODE_TS) && g->ts_calls++ % ctx->ts_sample == 0 &&
	    (s->x->be->caps & MS__CAP_HDR))
		ms__ts_begin(s);
	if (s->managed)
		ms__slow_before(s);
	if (s->sampled)
		ms__auto_start(s);
}

int ms__do_send(struct ms_group *g, const struct iovec *iov, int iovcnt, size_t len,
		unsigned flags, struct ms_result *res)
{
	if (flags & ~MS_SEND_ALL_FLAGS)
		return -EINVAL;
	g->nslowres = 0; /* the policy's record is this call's (ms__slow_after fills it) */
	if (!g->size)
		return 0;

	/* The message headers all point at the group's iovec array (see struct ms__bucket). */
	if (likely(iovcnt == 1))
		g->iov[0] = iov[0];
	else if (iovcnt)
		memcpy(g->iov, iov, (size_t)iovcnt * sizeof(*iov));
	ms__group_set_iovlen(g, iovcnt);
	if (unlikely(!g->plan_ok))
		ms__plan_build(g);

	struct ms_ctx *ctx = g->ctx;
	struct ms__sample smp; /* written only when AUTO samples the call */
	struct ms__send s = {
		.b = {
			.plan = g->plan,
			.n = g->size,
			.iov = g->iov,
			.iovcnt = iovcnt,
			.hdr = (iovcnt != 1) | (len > UINT32_MAX),
			.msg_flags = MSG_NOSIGNAL | ((flags & MS_SEND_DONTWAIT) ? MSG_DONTWAIT : 0),
			.len = len,
			.res = res,
		},
		.g = g,
		.parts = 1,
		.managed = g->nmanaged > 0,
		.x = &ctx->exec[0],
		.smp = &smp,
	};
	/* before (one test for the common call: no mode of the context's, no policy) */
	if (unlikely(ctx->modes | s.managed))
		before(ctx, &s);
	int err = execute(ctx, &s);
	/* after */
	if (unlikely(s.ts_armed | s.managed | s.sampled)) {
		if (s.sampled)
			ms__auto_done(ctx, &s);
		if (s.ts_armed)
			ms__ts_end(&s);
		if (s.managed)
			ms__slow_after(&s, err);
	}
	ctx->c.fanouts++;
	ms__commit(ctx, &s);

	if (err < 0 && !s.b.t.accepted && !s.b.t.partial)
		return err;
	return (int)s.b.t.accepted;
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
 * the messages posted before (lib/exec/workers.c). */
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
