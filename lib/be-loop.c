/* SPDX-License-Identifier: MIT */
/* The plain loop: one system call per destination. The reference the others must match. */
#include <errno.h>

#include "internal.h"
#include "sys.h"

/* One destination, any case: a gathered message, a timestamp request, a managed bucket. */
static void loop_dest(struct ms__send *s, struct ms__bucket *b, uint32_t j, size_t i, int flags)
{
	const struct msghdr *h = &b->msgs[j].msg_hdr;
	ssize_t r;
	do {
		s->syscalls++;
		if (s->iovcnt == 1 && (likely(!s->ts_armed) || !h->msg_control))
			r = ms__sys.sendto(b->fd, s->iov[0].iov_base, s->iov[0].iov_len, flags,
					   (const struct sockaddr *)h->msg_name, h->msg_namelen);
		else
			r = ms__sys.sendmsg(b->fd, h, flags);
	} while (r < 0 && errno == EINTR);
	ms__record(s, i, b->dests[j].id, r < 0 ? -errno : (int)r);
}

/* The fast path's first attempt did not take the whole message (r: its return, errno set). */
static __attribute__((noinline)) void loop_after(struct ms__send *s, struct ms__bucket *b,
						 uint32_t j, size_t i, int flags, ssize_t r)
{
	if (r < 0 && errno == EINTR)
		loop_dest(s, b, j, i, flags); /* nothing was sent: again */
	else
		ms__record(s, i, b->dests[j].id, r < 0 ? -errno : (int)r);
}

/* A part of a fan-out (or all of it) on the flattened list: positions [first, first + count)
 * of the send order, wrapping around. The common case (one buffer, no timestamp request)
 * with locals only, the counts added once at the end; otherwise each destination as
 * loop_dest sends it. */
static int loop_part(void *state, struct ms__send *s, size_t first, size_t count)
{
	struct ms_group *g = s->g;
	const struct ms__flat *const f = g->flat;
	const size_t n = g->size;
	const int base_flags = s->msg_flags;
	(void)state;

	if (unlikely(s->iovcnt != 1 || s->ts_armed)) {
		for (size_t i = first, left = count; left; left--, i = i + 1 == n ? 0 : i + 1) {
			const struct ms__idslot *id = &g->ids[f[i].id];
			loop_dest(s, id->b, id->pos, i, base_flags | f[i].xflags);
		}
		return 0;
	}
	const void *const buf = s->iov[0].iov_base;
	const size_t len = s->len;
	struct ms_result *const res = s->res;
	uint64_t ok = 0;

	for (size_t i = first, left = count; left; left--, i = i + 1 == n ? 0 : i + 1) {
		const struct ms__flat *e = &f[i];
		ssize_t r = ms__sys.sendto(e->fd, buf, len, base_flags | e->xflags, e->name,
					   e->namelen);
		if (unlikely((size_t)r != len)) {
			const struct ms__idslot *id = &g->ids[e->id];
			loop_after(s, id->b, id->pos, i, base_flags | e->xflags, r);
			continue; /* (loop_after counts its retries; this attempt is counted below) */
		}
		ok++;
		if (res)
			res[i] = (struct ms_result){ .id = e->id, .status = (int)len };
	}
	s->syscalls += count;
	s->accepted += (uint32_t)ok;
	s->bytes += ok * len;
	return 0;
}

static int loop_send(struct ms__send *s)
{
	if (likely(s->iovcnt == 1 && !s->ts_armed && !s->managed)) {
		if (unlikely(!s->g->flat_ok))
			ms__flat_build(s->g);
		return loop_part(NULL, s, s->base0 + s->j0, s->g->size);
	}
	struct ms__walk w;
	struct ms__run run;
	for (ms__walk_start(&w, s); ms__walk_next(&w, &run);) {
		struct ms__bucket *b = run.b;
		if (b->stalled) /* its backlog goes first: lib/slow.c */
			continue;
		for (uint32_t j = run.j0; j < run.j1; j++)
			loop_dest(s, b, j, run.base + j, s->msg_flags | b->xflags);
	}
	return 0;
}

const struct ms__backend ms__backend_loop = {
	.id = MS_BACKEND_LOOP,
	.name = "loop",
	.send = loop_send,
	.send_part = loop_part,
};
