/* SPDX-License-Identifier: MIT */
/* The plain loop: one system call per destination. The reference the others must match. */
#include <errno.h>

#include "internal.h"
#include "sys.h"

static int loop_send(struct ms__send *s)
{
	struct ms__walk w;
	struct ms__run run;

	for (ms__walk_start(&w, s); ms__walk_next(&w, &run);) {
		struct ms__bucket *b = run.b;
		int flags = s->msg_flags | b->xflags;
		if (b->stalled) /* its backlog goes first: lib/slow.c */
			continue;
		for (uint32_t j = run.j0; j < run.j1; j++) {
			const struct ms__dest *d = &b->dests[j];
			ssize_t r;
			do {
				s->syscalls++;
				if (s->iovcnt == 1 &&
				    (likely(!s->ts_armed) || !b->msgs[j].msg_hdr.msg_control))
					r = ms__sys.sendto(b->fd, s->iov[0].iov_base, s->iov[0].iov_len,
							   flags,
							   d->addrlen ? (const struct sockaddr *)&d->addr
								      : NULL,
							   d->addrlen);
				else
					r = ms__sys.sendmsg(b->fd, &b->msgs[j].msg_hdr, flags);
			} while (r < 0 && errno == EINTR);
			ms__record(s, run.base + j, d->id, r < 0 ? -errno : (int)r);
		}
	}
	return 0;
}

const struct ms__backend ms__backend_loop = {
	.id = MS_BACKEND_LOOP,
	.name = "loop",
	.send = loop_send,
};
