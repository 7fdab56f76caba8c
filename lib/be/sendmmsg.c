/* SPDX-License-Identifier: MIT */
/*
 * sendmmsg(2): one call per run of up to 1024 consecutive positions of one socket, on the
 * message headers the group keeps prepared (they carry a gathered message and control
 * messages as they are). The exactly-once loop is lib/mmsg.h's. A run ends where its socket's
 * destinations do, where the order wraps around or the range ends; so with MS_CFG_ROTATE a
 * socket's destinations may go in two runs.
 */
#include <errno.h>

#include "internal.h"
#include "mmsg.h"

/* Positions [i, i + cnt) went out; msg_len says how much each took (a stream may take part). */
static __attribute__((noinline)) void sent(struct ms__batch *b, size_t i, uint32_t cnt)
{
	const struct ms__plan_entry *e = &b->plan[i];
	struct ms_result *const res = b->res;
	const size_t len = b->len;
	uint32_t ok = 0;
	for (uint32_t k = 0; k < cnt; k++) {
		unsigned got = e[k].mm->msg_len;
		if (likely(got == len)) {
			ok++;
			if (res)
				res[i + k] = (struct ms_result){ .id = e[k].id, .status = (int)got };
		} else {
			ms__status(b, i + k, (int)got);
		}
	}
	b->t.accepted += ok;
	b->t.bytes += (uint64_t)ok * len;
}

static int mmsg_send(void *state, struct ms__batch *b, size_t first, size_t count)
{
	const struct ms__plan_entry *const plan = b->plan;
	const size_t n = b->n;
	const int base_flags = b->msg_flags;
	const bool whole = !b->res; /* whole datagrams need nothing per message */
	uint64_t sys = 0, ok = 0;
	(void)state;

	for (int part = 0; part < 2; part++) {
		size_t i = ms__span_from(first, part), end = ms__span_to(first, count, n, part);
		while (i < end) { /* the exactly-once loop of lib/mmsg.h */
			const struct ms__plan_entry *e = &plan[i];
			uint32_t cnt = e->run < end - i ? e->run : (uint32_t)(end - i);
			sys++;
			int r = ms__sendmmsg_step(e->fd, e->mm, cnt, base_flags | e->xflags);
			if (likely(r > 0)) {
				if (whole && (e->cls & MS__PLAN_DGRAM))
					ok += (uint32_t)r;
				else
					sent(b, i, (uint32_t)r);
				i += (uint32_t)r;
				continue;
			}
			if (r == -EINTR)
				continue;
			ms__status(b, i, r);
			i++;
		}
	}
	b->t.syscalls += sys;
	b->t.accepted += (uint32_t)ok;
	b->t.bytes += ok * b->len;
	return 0;
}

const struct ms__backend ms__backend_sendmmsg = {
	.id = MS_BACKEND_SENDMMSG,
	.name = "sendmmsg",
	.caps = MS__CAP_HDR,
	.send = mmsg_send,
};
