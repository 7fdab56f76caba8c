/* SPDX-License-Identifier: MIT */
/* The plain loop: one system call per destination. The reference the others must match. */
#include <errno.h>

#include "internal.h"
#include "sys.h"

/* Position i, any case: a gathered message, control messages, an interrupted first try. */
static __attribute__((noinline)) void loop_one(struct ms__batch *b, size_t i)
{
	const struct ms__plan_entry *e = &b->plan[i];
	const struct msghdr *h = &e->mm->msg_hdr;
	const int flags = b->msg_flags | e->xflags;
	ssize_t r;
	do {
		b->t.syscalls++;
		if (b->iovcnt == 1 && !h->msg_control)
			r = ms__sys.sendto(e->fd, b->iov[0].iov_base, b->iov[0].iov_len, flags,
					   e->name, e->namelen);
		else
			r = ms__sys.sendmsg(e->fd, h, flags);
	} while (r < 0 && errno == EINTR);
	ms__status(b, i, r < 0 ? -errno : (int)r);
}

/* The common case (one buffer, no control message) with locals only, the counts added once
 * at the end; anything else, and any send that did not take the whole message, as loop_one
 * sends it. */
static int loop_send(void *state, struct ms__batch *b, size_t first, size_t count)
{
	const struct ms__plan_entry *const plan = b->plan;
	const size_t n = b->n;
	const int base_flags = b->msg_flags;
	(void)state;

	if (unlikely(b->hdr)) {
		for (MS__EACH(i, left, first, count, n))
			loop_one(b, i);
		return 0;
	}
	const void *const buf = b->iov[0].iov_base;
	const size_t len = b->len;
	struct ms_result *const res = b->res;
	uint64_t ok = 0;

	for (int part = 0; part < 2; part++) {
		for (size_t i = ms__span_from(first, part), end = ms__span_to(first, count, n, part);
		     i < end; i++) {
			const struct ms__plan_entry *e = &plan[i];
			ssize_t r = ms__sys.sendto(e->fd, buf, len, base_flags | e->xflags, e->name,
						   e->namelen);
			if (unlikely((size_t)r != len)) {
				if (r < 0 && errno == EINTR) /* nothing was sent: again */
					loop_one(b, i);
				else
					ms__status(b, i, r < 0 ? -errno : (int)r);
				continue;
			}
			ok++;
			if (res)
				res[i] = (struct ms_result){ .id = e->id, .status = (int)len };
		}
	}
	b->t.syscalls += count; /* first attempts; loop_one counts its own */
	b->t.accepted += (uint32_t)ok;
	b->t.bytes += ok * len;
	return 0;
}

const struct ms__backend ms__backend_loop = {
	.id = MS_BACKEND_LOOP,
	.name = "loop",
	.caps = MS__CAP_HDR,
	.send = loop_send,
};
