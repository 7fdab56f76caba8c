/* SPDX-License-Identifier: MIT */
/*
 * sendmmsg(2): one call per socket per run of up to 1024 destinations, on the message headers
 * the group keeps prebuilt. The kernel returns how many messages went out and reports an error
 * only when the FIRST message of the call failed; so after a partial return we resume at the
 * first unsent message, and the next call either sends it or fails with that message's own
 * error, which is recorded for it alone before moving past it. Nothing is sent twice: a
 * message is resent only when the kernel said it was not sent. With MS_CFG_ROTATE a socket's
 * destinations may go in two runs (the order wraps around inside its array): one more call.
 */
#include <errno.h>

#include "internal.h"
#include "sys.h"

/* Messages [off, off + n) of b went out; msg_len says how much of each. */
static inline void record_sent(struct ms__send *s, const struct ms__bucket *b, size_t base,
			       uint32_t off, uint32_t n)
{
	if (unlikely(s->managed)) {
		for (uint32_t j = off; j < off + n; j++)
			ms__record(s, base + j, b->dests[j].id, (int)b->msgs[j].msg_len);
		return;
	}
	/* A datagram is taken whole: without a result array there is nothing to do per message. */
	const size_t len = s->len;
	struct ms_result *const res = s->res;
	if (!res && b->type != SOCK_STREAM) {
		s->accepted += n;
		s->bytes += (uint64_t)n * len;
		return;
	}
	uint32_t ok = 0;
	for (uint32_t j = off; j < off + n; j++) {
		unsigned got = b->msgs[j].msg_len;
		if (res)
			res[base + j] = (struct ms_result){ .id = b->dests[j].id, .status = (int)got };
		if (likely(got == len))
			ok++;
		else
			ms__account(s, (int)got); /* a stream took part of it */
	}
	s->accepted += ok;
	s->bytes += (uint64_t)ok * len;
}

/* A part of a fan-out (or all of it) on the flattened list: positions [first, first + count)
 * of the send order, wrapping around; one call per run of a socket's destinations (a run
 * ends where its bucket does, where the order wraps around or the part ends, or at 1024).
 * The prepared headers carry a gathered message and timestamp requests as they are. */
static int mmsg_part(void *state, struct ms__send *s, size_t first, size_t count)
{
	struct ms_group *g = s->g;
	const struct ms__flat *const f = g->flat;
	const size_t n = g->size;
	const int base_flags = s->msg_flags;
	const bool whole = !s->res; /* whole datagrams need nothing per message */
	uint64_t sys = 0, ok = 0;
	(void)state;

	for (int part = 0; part < 2; part++) {
		/* [first, end) up to the group's end, then what wraps around to the start */
		size_t i = part ? 0 : first;
		size_t end = part ? (first + count > n ? first + count - n : 0)
				  : (first + count < n ? first + count : n);
		while (i < end) {
			const struct ms__flat *e = &f[i];
			uint32_t chunk = e->run;
			if (chunk > end - i)
				chunk = (uint32_t)(end - i);
			if (chunk > MS__MMSG_MAX)
				chunk = MS__MMSG_MAX;
			sys++;
			int r = ms__sys.sendmmsg(e->fd, e->mm, chunk, base_flags | e->xflags);
			if (likely(r > 0 && (uint32_t)r <= chunk)) {
				if (whole && (e->cls & MS__FLAT_DGRAM)) {
					ok += (uint32_t)r;
					i += (uint32_t)r;
					continue;
				}
				const struct ms__idslot *id = &g->ids[e->id];
				record_sent(s, id->b, i - id->pos, id->pos, (uint32_t)r);
				i += (uint32_t)r;
				continue;
			}
			if (r < 0 && errno == EINTR)
				continue;
			/* An error is the first message's own (see the top of this file); a
			 * return the kernel cannot give blames only the message we cannot vouch
			 * for. */
			ms__record(s, i, e->id, r < 0 ? -errno : -EIO);
			i++;
		}
	}
	s->syscalls += sys;
	s->accepted += (uint32_t)ok;
	s->bytes += ok * s->len;
	return 0;
}

static int mmsg_send(struct ms__send *s)
{
	if (likely(s->iovcnt == 1 && !s->ts_armed && !s->managed)) {
		if (unlikely(!s->g->flat_ok))
			ms__flat_build(s->g);
		return mmsg_part(NULL, s, s->base0 + s->j0, s->g->size);
	}
	struct ms__walk w;
	struct ms__run run;

	for (ms__walk_start(&w, s); ms__walk_next(&w, &run);) {
		struct ms__bucket *b = run.b;
		size_t base = run.base;
		uint32_t off = run.j0, end = run.j1;
		if (b->stalled) /* its backlog goes first: lib/slow.c */
			continue;
		while (off < end) {
			uint32_t chunk = end - off;
			if (chunk > MS__MMSG_MAX)
				chunk = MS__MMSG_MAX;
			s->syscalls++;
			int r = ms__sys.sendmmsg(b->fd, b->msgs + off, chunk, s->msg_flags | b->xflags);
			if (r < 0) {
				if (errno == EINTR)
					continue;
				ms__record(s, base + off, b->dests[off].id, -errno);
				off++;
				continue;
			}
			if (r == 0 || (uint32_t)r > chunk) {
				/* The kernel sends at least one message or fails; anything else
				 * is a broken seam. Blame only the message we cannot vouch for. */
				ms__record(s, base + off, b->dests[off].id, -EIO);
				off++;
				continue;
			}
			record_sent(s, b, base, off, (uint32_t)r);
			off += (uint32_t)r;
		}
	}
	return 0;
}

const struct ms__backend ms__backend_sendmmsg = {
	.id = MS_BACKEND_SENDMMSG,
	.name = "sendmmsg",
	.send = mmsg_send,
	.send_part = mmsg_part,
};
