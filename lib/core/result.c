/* SPDX-License-Identifier: MIT */
/* The after stage's arithmetic: error classes, adding tallies, a call's tally into the
 * context's counters (and their publication). */
#include <errno.h>

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

void ms__tally_add(struct ms__tally *to, const struct ms__tally *t)
{
#define ADD(n, h) to->n += t->n;
	MS__TALLY(ADD)
#undef ADD
	for (int c = 0; c < MS__ERR_NCLASSES; c++)
		to->err[c] += t->err[c];
	to->bytes += t->bytes;
	to->syscalls += t->syscalls;
	to->xdp |= t->xdp;
	to->kf |= t->kf;
}

void ms__commit(struct ms_ctx *ctx, const struct ms__send *s)
{
	struct ms__counters *c = &ctx->c;
	const struct ms__tally *t = &s->b.t;
	c->dests_attempted += t->accepted + t->partial + t->failed;
	c->dests_accepted += t->accepted;
	c->bytes += t->bytes;
	c->syscalls += t->syscalls;
	if (unlikely(t->zc_sends | t->zc_copied)) {
		c->zc_sends += t->zc_sends;
		c->zc_copied += t->zc_copied;
	}
	if (unlikely(t->xdp)) {
#define ADD(n, h) c->n += t->n;
		MS__XDP_COUNTERS(ADD)
#undef ADD
	}
	if (unlikely(t->kf)) {
#define ADD(n, h) c->n += t->n;
		MS__KF_COUNTERS(ADD)
#undef ADD
	}
	if (unlikely(t->partial || t->failed || s->g->nmanaged)) {
		c->dests_partial += t->partial;
		c->dests_failed += t->failed;
		for (int k = 0; k < MS__ERR_NCLASSES; k++)
			c->v[MS__K_err_again + k] += t->err[k];
		c->slow_queued += s->slow_queued;
		c->slow_dropped += s->slow_dropped;
		c->slow_removed += s->slow_removed;
	}
	/* A clean call, in a group without a policy (backlogs) and a context without timestamps
	 * (whose sampling changes counters of its own on the way), moved only five counters, and
	 * the kernel fan-out's own when it sent. */
	if (likely(!t->failed && !t->partial && !s->g->nmanaged && !ctx->ts_sample &&
		   !(t->zc_sends | t->zc_copied) && !s->counted && !t->xdp))
		ms__publish_sent(ctx, t->kf);
	else
		ms__publish(ctx);
}

