/* SPDX-License-Identifier: MIT */
/*
 * Destination groups. Destinations live in per-socket buckets (one contiguous mmsghdr array
 * per socket for sendmmsg); ids map to (bucket, position) so add and remove are O(1): remove
 * moves the bucket's last destination into the hole. Every allocation an add needs is made
 * before the group is changed, so a failed add leaves the group as it was.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <net/if.h>
#include <netinet/in.h>

#include "internal.h"

#define SIN6_LEN_RFC2133 24 /* the kernel accepts an IPv6 address without sin6_scope_id */

/* ---- fd -> bucket map --------------------------------------------------------------------- */

static uint32_t fd_slot(int fd, uint32_t mask)
{
	return ((uint32_t)fd * 2654435761u) & mask;
}

static struct ms__bucket *fdmap_get(const struct ms__fdmap *m, int fd)
{
	if (!m->cap)
		return NULL;
	uint32_t mask = m->cap - 1;
	for (uint32_t i = fd_slot(fd, mask);; i = (i + 1) & mask) {
		struct ms__bucket *b = m->slots[i];
		if (!b || b->fd == fd)
			return b;
	}
}

static void fdmap_insert(struct ms__fdmap *m, struct ms__bucket *b)
{
	uint32_t mask = m->cap - 1;
	uint32_t i = fd_slot(b->fd, mask);
	while (m->slots[i])
		i = (i + 1) & mask;
	m->slots[i] = b;
	m->n++;
}

/* Make room for one more entry (load factor at most 1/2). */
static int fdmap_reserve(const struct ms_ctx *ctx, struct ms__fdmap *m)
{
	if ((m->n + 1) * 2 <= m->cap)
		return 0;
	uint32_t ncap = m->cap ? m->cap * 2 : 16;
	if (ncap < m->cap)
		return -ENOMEM;
	struct ms__bucket **old = m->slots;
	uint32_t ocap = m->cap;
	int err;
	m->slots = ms__zalloc(ctx, ncap * sizeof(*m->slots), &err);
	if (err) {
		m->slots = old;
		return err;
	}
	m->cap = ncap;
	m->n = 0;
	for (uint32_t i = 0; i < ocap; i++)
		if (old[i])
			fdmap_insert(m, old[i]);
	free(old);
	return 0;
}

static void fdmap_delete(struct ms__fdmap *m, int fd)
{
	uint32_t mask = m->cap - 1;
	uint32_t i = fd_slot(fd, mask);
	while (m->slots[i]->fd != fd)
		i = (i + 1) & mask;
	m->slots[i] = NULL;
	m->n--;
	/* Backward-shift: pull later entries of the same probe run into the hole. */
	for (uint32_t j = (i + 1) & mask; m->slots[j]; j = (j + 1) & mask) {
		uint32_t home = fd_slot(m->slots[j]->fd, mask);
		bool between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
		if (!between) {
			m->slots[i] = m->slots[j];
			m->slots[j] = NULL;
			i = j;
		}
	}
}

/* ---- validation --------------------------------------------------------------------------- */

static int sock_info(int fd, int *type, int *family, uint64_t *ino)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	*ino = (uint64_t)st.st_ino; /* sockets share one st_dev (sockfs); the inode names one */
	socklen_t l = sizeof(*type);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, type, &l) < 0)
		return -errno;
	l = sizeof(*family);
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, family, &l) < 0)
		return -errno;
	if (*type != SOCK_DGRAM && *type != SOCK_STREAM && *type != SOCK_SEQPACKET)
		return -ESOCKTNOSUPPORT;
	if (*family != AF_INET && *family != AF_INET6 && *family != AF_UNIX)
		return -EAFNOSUPPORT;
	return 0;
}

/* The kernel's own rules for sendto's address, checked once here instead of per send. */
static int check_addr(int family, int type, const struct sockaddr *a, socklen_t len)
{
	if (type != SOCK_DGRAM)
		return -EINVAL; /* connection-oriented sockets take no address */
	if (len < sizeof(sa_family_t) || len > sizeof(struct sockaddr_storage))
		return -EINVAL;
	switch (a->sa_family) {
	case AF_INET:
		if (family != AF_INET && family != AF_INET6)
			return -EAFNOSUPPORT;
		return len >= sizeof(struct sockaddr_in) ? 0 : -EINVAL;
	case AF_INET6:
		if (family != AF_INET6)
			return -EAFNOSUPPORT;
		return len >= SIN6_LEN_RFC2133 ? 0 : -EINVAL;
	case AF_UNIX:
		if (family != AF_UNIX)
			return -EAFNOSUPPORT;
		return len > offsetof(struct sockaddr_un, sun_path) && len <= sizeof(struct sockaddr_un)
			       ? 0
			       : -EINVAL;
	default:
		return -EAFNOSUPPORT;
	}
}

/* ---- buckets ------------------------------------------------------------------------------ */

static void set_name(struct ms__bucket *b, uint32_t i)
{
	struct msghdr *h = &b->msgs[i].msg_hdr;
	h->msg_name = b->dests[i].addrlen ? &b->dests[i].addr : NULL;
	h->msg_namelen = b->dests[i].addrlen;
}

/* Room for one more destination. With MS_CFG_MLOCK the capacity grows only once the grown
 * arrays are locked. Either array may have moved all the same, even when this fails: realloc
 * moved it, then mlock refused the new block (-ENOMEM past RLIMIT_MEMLOCK, the same errno as
 * a failed realloc). So the messages' names, which point into dests, are set again whatever
 * happened, and the caller makes the plan again (it points into both: add_one). */
static int bucket_reserve(const struct ms_ctx *ctx, struct ms__bucket *b)
{
	if (b->n < b->cap)
		return 0;
	uint32_t ncap = b->cap ? b->cap * 2 : 4;
	if (ncap <= b->cap)
		return -ENOMEM;
	int err = ms__grow(ctx, &b->dests, (size_t)ncap * sizeof(*b->dests));
	for (uint32_t i = 0; i < b->n; i++)
		set_name(b, i);
	if (!err)
		err = ms__grow(ctx, &b->msgs, (size_t)ncap * sizeof(*b->msgs));
	if (err)
		return err;
	b->cap = ncap;
	return 0;
}

static void bucket_free(struct ms__bucket *b)
{
	free(b->bl.buf);
	free(b->dests);
	free(b->msgs);
	free(b);
}

/* ---- groups ------------------------------------------------------------------------------- */

int ms_group_new(struct ms_ctx *ctx, struct ms_group **out)
{
	if (!ctx || !out)
		return -EINVAL;
	int err;
	struct ms_group *g = ms__zalloc(ctx, sizeof(*g), &err);
	if (!g)
		return err;
	g->iov = ms__zalloc(ctx, IOV_MAX * sizeof(*g->iov), &err);
	if (!g->iov) {
		free(g);
		return err;
	}
	g->ctx = ctx;
	g->iovlen = 1;
	ctx->ngroups++;
	*out = g;
	return 0;
}

/* A socket leaves every backend of the context (the first `upto` of them). */
static void bucket_unhook(struct ms_ctx *ctx, struct ms__bucket *b, unsigned upto)
{
	if (ms__forked(ctx))
		return;
	for (unsigned k = 0; k < upto; k++)
		if (ctx->exec[k].be->bucket_removed)
			ctx->exec[k].be->bucket_removed(ctx->exec[k].state, b);
}

/* ... and joins them all, or none. 0 or -errno. */
static int bucket_hook(struct ms_ctx *ctx, struct ms__bucket *b)
{
	if (ms__forked(ctx))
		return 0;
	for (unsigned k = 0; k < ctx->nexec; k++) {
		const struct ms__backend *be = ctx->exec[k].be;
		int err = be->bucket_added ? be->bucket_added(ctx, ctx->exec[k].state, b) : 0;
		if (err) {
			bucket_unhook(ctx, b, k);
			return err;
		}
	}
	return 0;
}

static void bucket_drop(struct ms_group *g, struct ms__bucket *b)
{
	ms__ts_bucket_gone(g, b);
	bucket_unhook(g->ctx, b, g->ctx->nexec);
	ms__slow_bucket_fini(g, b);
	fdmap_delete(&g->fdmap, b->fd);
	struct ms__bucket *last = g->buckets[--g->nbuckets];
	g->buckets[b->list_pos] = last;
	last->list_pos = b->list_pos;
	if (b->owned)
		close(b->fd);
	bucket_free(b);
}

void ms_group_free(struct ms_group *g)
{
	if (!g)
		return;
	ms__quiesce(g->ctx); /* offload: its messages are sent first */
	ms__ts_group_free(g); /* first: its pending sample is read and accounted */
	while (g->nbuckets)
		bucket_drop(g, g->buckets[g->nbuckets - 1]);
	for (unsigned k = 0; k < g->ctx->nexec; k++)
		if (g->gdata[k] && g->ctx->exec[k].be->group_fini)
			g->ctx->exec[k].be->group_fini(g->ctx->exec[k].state, g->gdata[k]);
	g->ctx->ngroups--;
	ms__publish(g->ctx); /* backlogs discarded */
	free(g->buckets);
	free(g->fdmap.slots);
	free(g->ids);
	free(g->freeids);
	free(g->plan);
	free(g->scratch);
	free(g->slowres);
	free(g->iov);
	free(g);
}

size_t ms_group_size(const struct ms_group *g)
{
	if (!g)
		return 0;
	ms__quiesce(g->ctx);
	return g->size;
}

static int ids_reserve(struct ms_group *g)
{
	if (g->nfreeids || g->nextid < g->capids)
		return 0;
	if (g->nextid >= (uint32_t)INT32_MAX)
		return -ENOSPC;
	uint32_t ncap = g->capids ? g->capids * 2 : 16;
	if (ncap > (uint32_t)INT32_MAX)
		ncap = INT32_MAX;
	int err;
	if ((err = ms__grow(g->ctx, &g->ids, (size_t)ncap * sizeof(*g->ids))) ||
	    (err = ms__grow(g->ctx, &g->freeids, (size_t)ncap * sizeof(*g->freeids))))
		return err;
	g->capids = ncap;
	return 0;
}

/* Room for one more entry in the plan (and, with a policy, in the scratch status array; with
 * offload, in the offload thread's result array). */
static int plan_reserve(struct ms_group *g)
{
	if (g->size < g->capplan)
		return 0;
	size_t ncap = g->capplan ? g->capplan * 2 : 16;
	g->plan_ok = false; /* it may move */
	int err = ms__grow(g->ctx, &g->plan, ncap * sizeof(*g->plan));
	if (!err && g->slow.policy != MS_SLOW_BLOCK)
		err = ms__slow_reserve(g, ncap);
	if (!err)
		err = ms__offload_reserve(g->ctx, ncap);
	if (err)
		return err;
	g->capplan = ncap;
	return 0;
}


static int buckets_reserve(struct ms_group *g)
{
	if (g->nbuckets < g->capbuckets)
		return 0;
	uint32_t ncap = g->capbuckets ? g->capbuckets * 2 : 8;
	int err = ms__grow(g->ctx, &g->buckets, (size_t)ncap * sizeof(*g->buckets));
	if (err)
		return err;
	g->capbuckets = ncap;
	return 0;
}

/* A new bucket for fd, entered in the group's list and map (room reserved by the caller). */
static int bucket_new(struct ms_group *g, int fd, int type, int family, uint64_t ino,
		      struct ms__bucket **out)
{
	int err;
	if ((err = fdmap_reserve(g->ctx, &g->fdmap)) || (err = buckets_reserve(g)) ||
	    (err = ms__slow_reserve_bucket(g, type)))
		return err;
	struct ms__bucket *b = ms__zalloc(g->ctx, sizeof(*b), &err);
	if (!b)
		return err;
	b->fd = fd;
	b->ino = ino;
	int fl = fcntl(fd, F_GETFL);
	b->nonblock = fl >= 0 && (fl & O_NONBLOCK);
	b->type = type;
	b->family = family;
	if ((err = bucket_reserve(g->ctx, b))) {
		bucket_free(b);
		return err;
	}
	if ((err = bucket_hook(g->ctx, b))) {
		bucket_free(b);
		return err;
	}
	ms__slow_bucket_init(g, b);
	b->list_pos = g->nbuckets;
	g->buckets[g->nbuckets++] = b;
	fdmap_insert(&g->fdmap, b);
	*out = b;
	return 0;
}

/* Add d (validated; its socket's type, family and inode given). owned: d->fd is the
 * library's, to close on failure or with its bucket. */
static int add_one(struct ms_group *g, const struct ms_dest *d, int type, int family,
		   uint64_t ino, bool owned)
{
	int err;
	struct ms__bucket *b = fdmap_get(&g->fdmap, d->fd);
	if (b && b->ino != ino)
		err = -ESTALE; /* the group's socket under this number was closed behind its back */
	else if (b && !d->addr && b->has_peer)
		err = -EEXIST;
	else if (!(err = ids_reserve(g)) && !(err = plan_reserve(g)))
		err = b ? bucket_reserve(g->ctx, b) : bucket_new(g, d->fd, type, family, ino, &b);
	if (err) {
		/* Refused, the group as it was; but an array a reserve grew may have moved
		 * (bucket_reserve), and the plan points into them: made again by the next send. */
		g->plan_ok = false;
		if (owned)
			close(d->fd);
		return err;
	}
	if (owned)
		b->owned = true; /* a new bucket: the socket is new */

	int id = g->nfreeids ? g->freeids[--g->nfreeids] : (int)g->nextid++;
	uint32_t pos = b->n++;
	struct ms__dest *dst = &b->dests[pos];
	memset(dst, 0, sizeof(*dst));
	if (d->addr)
		memcpy(&dst->addr, d->addr, d->addrlen);
	dst->addrlen = d->addr ? d->addrlen : 0;
	dst->id = id;
	dst->kpath = g->kpath_all;
	memset(&b->msgs[pos], 0, sizeof(b->msgs[pos]));
	b->msgs[pos].msg_hdr.msg_iov = g->iov;
	b->msgs[pos].msg_hdr.msg_iovlen = (size_t)g->iovlen;
	set_name(b, pos);
	if (!d->addr)
		b->has_peer = true;
	g->ids[id].b = b;
	g->ids[id].pos = pos;
	g->size++;
	g->plan_ok = false;
	return id;
}

int ms_group_add(struct ms_group *g, const struct ms_dest *d)
{
	int type, family, err;

	if (!g || !d)
		return -EINVAL;
	ms__quiesce(g->ctx); /* offload: the group changes between two fan-outs */
	if (d->fd < 0)
		return -EBADF;
	if (!d->addr && d->addrlen)
		return -EINVAL;
	uint64_t ino = 0;
	if ((err = sock_info(d->fd, &type, &family, &ino)))
		return err;
	if (d->addr && (err = check_addr(family, type, d->addr, d->addrlen)))
		return err;

	/* MS_CFG_CONNECT: the address gets a connected socket of the library's own. */
	if ((g->ctx->flags & MS_CFG_CONNECT) && d->addr && type == SOCK_DGRAM &&
	    family != AF_UNIX) {
		/* Everything that can fail without a socket first: ids, plan, the map and
		 * the bucket list (bucket_new reserves them too, harmlessly). */
		if ((err = ids_reserve(g)) || (err = plan_reserve(g)) ||
		    (err = fdmap_reserve(g->ctx, &g->fdmap)) || (err = buckets_reserve(g)))
			return err;
		int own = ms__connect_own(d->fd, family, d->addr, d->addrlen);
		if (own < 0)
			return own;
		if ((err = sock_info(own, &type, &family, &ino))) {
			close(own);
			return err;
		}
		const struct ms_dest c = { .fd = own };
		return add_one(g, &c, type, family, ino, true);
	}
	return add_one(g, d, type, family, ino, false);
}

int ms_group_remove(struct ms_group *g, int id)
{
	if (!g)
		return -EINVAL;
	ms__quiesce(g->ctx);
	if (id < 0 || (uint32_t)id >= g->nextid || !g->ids[id].b)
		return -ENOENT;
	ms__group_remove(g, id);
	return 0;
}

int ms_group_kernel_path(struct ms_group *g, int id, int on)
{
	if (!g || (id < 0 && id != MS_GROUP_ALL))
		return -EINVAL;
	ms__quiesce(g->ctx);
	if (id == MS_GROUP_ALL) {
		g->kpath_all = on != 0;
		for (uint32_t k = 0; k < g->nbuckets; k++)
			for (uint32_t i = 0; i < g->buckets[k]->n; i++)
				g->buckets[k]->dests[i].kpath = on != 0;
	} else {
		if ((uint32_t)id >= g->nextid || !g->ids[id].b)
			return -ENOENT;
		g->ids[id].b->dests[g->ids[id].pos].kpath = on != 0;
	}
	g->plan_ok = false; /* a backend that bypasses the kernel makes its plan again */
	return 0;
}

void ms__group_remove(struct ms_group *g, int id)
{
	struct ms__bucket *b = g->ids[id].b;
	uint32_t pos = g->ids[id].pos, last = b->n - 1;

	if (!b->dests[pos].addrlen)
		b->has_peer = false;
	if (pos != last) {
		b->dests[pos] = b->dests[last];
		b->msgs[pos] = b->msgs[last];
		set_name(b, pos);
		g->ids[b->dests[pos].id].pos = pos;
	}
	b->n--;
	g->ids[id].b = NULL;
	g->freeids[g->nfreeids++] = id;
	g->size--;
	g->plan_ok = false;
	if (!b->n) {
		bucket_drop(g, b);
		ms__publish(g->ctx); /* a backlog it held is discarded */
	}
}

/* Make every message header gather iovcnt buffers: only when the count changes, so a program
 * that always sends the same shape writes nothing per destination. */
void ms__group_set_iovlen(struct ms_group *g, int iovcnt)
{
	if (g->iovlen == iovcnt)
		return;
	for (uint32_t k = 0; k < g->nbuckets; k++) {
		struct ms__bucket *b = g->buckets[k];
		for (uint32_t i = 0; i < b->n; i++)
			b->msgs[i].msg_hdr.msg_iovlen = (size_t)iovcnt;
	}
	g->iovlen = iovcnt;
}
