/* SPDX-License-Identifier: MIT */
/*
 * The plan: a group compiled into one flat array in group order (lib/backend.h), the one
 * representation of the send order every backend reads. Rebuilt by the first send after a
 * change, into room ms_group_add reserved.
 */
#include "internal.h"

void ms__plan_build(struct ms_group *g)
{
	struct ms__plan_entry *f = g->plan;
	for (uint32_t k = 0; k < g->nbuckets; k++) {
		const struct ms__bucket *b = g->buckets[k];
		for (uint32_t j = 0; j < b->n; j++, f++)
			*f = (struct ms__plan_entry){
				.name = (const struct sockaddr *)b->msgs[j].msg_hdr.msg_name,
				.mm = &b->msgs[j],
				.run = b->n - j,
				.namelen = b->msgs[j].msg_hdr.msg_namelen,
				.fd = b->fd,
				.id = b->dests[j].id,
				.xflags = b->xflags,
				.cls = (b->type == SOCK_DGRAM ? MS__PLAN_DGRAM : 0) |
				       (b->fixed ? MS__PLAN_FIXED : 0) |
				       (b->xflags & MSG_DONTWAIT ? MS__PLAN_NOWAIT : 0) |
				       (b->family == AF_UNIX && b->type != SOCK_STREAM
						? MS__PLAN_UNIXMSG : 0),
				.zc = b->type == SOCK_DGRAM && b->family != AF_UNIX,
			};
	}
	if (g->ctx->autos)
		g->shape = ms__auto_shape(g);
	g->plan_gen++;
	g->plan_ok = true;
}
