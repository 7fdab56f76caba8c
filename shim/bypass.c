/* SPDX-License-Identifier: MIT */
/*
 * Kernel bypass: the process's AF_XDP port (lib/be/xdp.h), and bypass mode's sends.
 *
 * Bypass mode (MULTISEND_PRELOAD_MODE=bypass, multisend-run --bypass) sends each datagram the
 * port can carry at once, as a frame, inside the program's own call: the port hands it to the
 * kernel (one kick, a poll(2) on the AF_XDP socket) before the call returns, and the call
 * returns what the kernel's path would have returned, the length. Nothing is deferred and no
 * thread is started, so the order of a program's datagrams, on one socket or many, in one
 * thread or several, is the order of its calls, as without the shim. Every datagram the port
 * cannot or must not carry goes to the real function in the same call, counted by reason:
 * the kernel's answer, errno included, is the program's. What the port decides by (route,
 * neighbour, MTU, socket options, a connected socket's pending error) is in lib/be/xdp.c and
 * multisend-run(1).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "shim.h"

const char *const shim_xreason_name[SHIM_XR_N] = {
	[MS__XDP_LOCAL] = "local",   [MS__XDP_IFACE] = "iface",
	[MS__XDP_MTU] = "mtu",       [MS__XDP_ROUTE] = "route",
	[MS__XDP_NEIGH] = "neigh",   [MS__XDP_OTHER] = "other",
	[MS__XDP_SOCKOPT] = "sockopt", [MS__XDP_ERROR] = "error",
	[SHIM_XR_NOT_UDP] = "not_udp", [SHIM_XR_FLAGS] = "flags",
	[SHIM_XR_CONTROL] = "control", [SHIM_XR_REENTERED] = "reentered",
	[SHIM_XR_UNAVAILABLE] = "unavailable",
};

#ifdef MS_HAVE_XDP
static struct ms__xport *xport;
static _Atomic int xport_state; /* 0 not tried, 1 being made, 2 made or failed for good */
static char xport_ifname[IF_NAMESIZE];
static _Atomic bool xport_gone; /* lost its descriptors (dup2 onto one), a forked child, or
                                   its queue could not be taken */

/* The port if it is made and still this process's own, else NULL (nothing is made here). */
static struct ms__xport *port_now(void)
{
	if (atomic_load_explicit(&xport_state, memory_order_acquire) != 2 ||
	    atomic_load_explicit(&xport_gone, memory_order_relaxed))
		return NULL;
	return xport;
}

static _Atomic bool queue_failed; /* the port could not take its queue (said once) */
#endif

void shim_xport_check(struct ms__xport *p, uint64_t *fb, uint64_t other0)
{
#ifdef MS_HAVE_XDP
	/* The port takes its queue with its first frame (lib/be/xdp.h): if that failed, say so
	 * once, as an open that failed would have, and the port is no more. What the call just
	 * skipped for want of the queue (the port's "other") is the shim's "unavailable", as
	 * every send after it. */
	char why[320];
	if (likely(ms__xport_queue(p, why, sizeof(why)) >= 0))
		return;
	const uint64_t d = fb[MS__XDP_OTHER] - other0;
	fb[MS__XDP_OTHER] -= d;
	fb[SHIM_XR_UNAVAILABLE] += d;
	if (!atomic_exchange_explicit(&queue_failed, true, memory_order_relaxed)) {
		shim_warn("kernel bypass on %s unavailable, %s: %s", xport_ifname,
			  shim_cfg.mode == SHIM_BYPASS ? "sends go by the kernel's path"
						       : "batches go by sendmmsg", why);
		atomic_store_explicit(&xport_gone, true, memory_order_relaxed);
	}
#else
	(void)p, (void)fb, (void)other0;
#endif
}

const char *shim_xport_queue_state(void)
{
#ifdef MS_HAVE_XDP
	if (atomic_load_explicit(&queue_failed, memory_order_relaxed))
		return "failed";
	if (atomic_load_explicit(&xport_state, memory_order_acquire) == 2 && xport &&
	    ms__xport_queue(xport, NULL, 0) > 0)
		return "taken";
#endif
	return "none";
}

#ifdef MS_HAVE_XDP

/* The device of the IPv4 default route (the first with the lowest metric), from
 * /proc/net/route: no allocation, no netlink. false: none. */
static bool default_iface(char *name, size_t size)
{
	int fd = open("/proc/net/route", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	char buf[4096], line[256];
	size_t ll = 0;
	unsigned long best = ULONG_MAX;
	bool found = false, first = true;
	ssize_t n;
	while ((n = shim_raw_read(fd, buf, sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] != '\n') {
				if (ll < sizeof(line) - 1)
					line[ll++] = buf[i];
				continue;
			}
			line[ll] = '\0';
			ll = 0;
			if (first) { /* the column titles */
				first = false;
				continue;
			}
			/* Iface Destination Gateway Flags RefCnt Use Metric Mask ... */
			char ifn[IF_NAMESIZE];
			unsigned long dst, gw, flags, ref, use, metric, mask;
			const char *p = line;
			size_t k = 0;
			while (*p && *p != '\t' && *p != ' ' && k < sizeof(ifn) - 1)
				ifn[k++] = *p++;
			ifn[k] = '\0';
			char *end;
			unsigned long *f[] = { &dst, &gw, &flags, &ref, &use, &metric, &mask };
			bool ok = k > 0;
			for (size_t j = 0; ok && j < sizeof(f) / sizeof(f[0]); j++) {
				*f[j] = strtoul(p, &end, j < 3 || j == 6 ? 16 : 10);
				ok = end != p;
				p = end;
			}
			if (ok && dst == 0 && mask == 0 && (flags & 1) && metric < best) {
				best = metric;
				found = true;
				snprintf(name, size, "%s", ifn);
			}
		}
	}
	shim_raw_close(fd);
	return found;
}
#endif

struct ms__xport *shim_xport(void)
{
#ifdef MS_HAVE_XDP
	int v = atomic_load_explicit(&xport_state, memory_order_acquire);
	if (v == 2)
		return port_now();
	if (shim_cfg.mode != SHIM_BYPASS && !shim_cfg.xdp_iface[0])
		return NULL;
	if (v == 0 && atomic_compare_exchange_strong(&xport_state, &v, 1)) {
		char why[320];
		struct ms__xport *p = NULL;
		const char *what = shim_cfg.mode == SHIM_BYPASS ? "sends go by the kernel's path"
								: "batches go by sendmmsg";
		if (shim_cfg.xdp_iface[0])
			snprintf(xport_ifname, sizeof(xport_ifname), "%s", shim_cfg.xdp_iface);
		if (!xport_ifname[0] && !default_iface(xport_ifname, sizeof(xport_ifname))) {
			shim_warn("kernel bypass unavailable, %s: no interface named "
				  "(MULTISEND_PRELOAD_XDP_IFACE, multisend-run --xdp-iface) and no IPv4 "
				  "default route", what);
		} else {
			int err = ms__xport_open(xport_ifname, 0,
						 shim_cfg.xdp_nf_skip ? MS__XPORT_NF_SKIP : 0, &p, why,
						 sizeof(why));
			if (err) {
				shim_warn("kernel bypass on %s unavailable, %s: %s", xport_ifname, what,
					  why);
				p = NULL;
			}
		}
		xport = p;
		atomic_store_explicit(&xport_state, 2, memory_order_release);
		return xport;
	}
#endif
	return NULL; /* another thread is making it: this send goes by the kernel's path */
}

const char *shim_xport_ifname(void)
{
#ifdef MS_HAVE_XDP
	if (atomic_load_explicit(&xport_state, memory_order_acquire) == 2)
		return xport_ifname;
#endif
	return shim_cfg.xdp_iface;
}

bool shim_xport_owns(int fd)
{
#ifdef MS_HAVE_XDP
	struct ms__xport *p = port_now();
	return p && ms__xport_owns(p, fd);
#else
	(void)fd;
	return false;
#endif
}

void shim_xport_recheck(bool now)
{
#ifdef MS_HAVE_XDP
	struct ms__xport *p = port_now();
	if (p)
		ms__xport_recheck(p, now);
#else
	(void)now;
#endif
}

int shim_xport_fds(int fds[3])
{
	int n = 0;
#ifdef MS_HAVE_XDP
	struct ms__xport *p = port_now();
	if (p)
		n = ms__xport_fds(p, fds);
	for (int i = 1; i < n; i++) /* ascending */
		for (int j = i; j > 0 && fds[j] < fds[j - 1]; j--) {
			int x = fds[j];
			fds[j] = fds[j - 1];
			fds[j - 1] = x;
		}
#else
	(void)fds;
#endif
	return n;
}

void shim_xport_lose(void)
{
#ifdef MS_HAVE_XDP
	struct ms__xport *p = port_now();
	if (p) {
		ms__xport_lose(p);
		atomic_store_explicit(&xport_gone, true, memory_order_relaxed);
	}
#endif
}

void shim_xport_after_fork_child(void)
{
#ifdef MS_HAVE_XDP
	/* The child cannot use its parent's port (the packet memory is not mapped here, and the
	 * queue is the parent's): it sends by the kernel's path, and closes its copies of the
	 * port's descriptors, which are not its program's (untouched: the port's memory, which
	 * a parent's thread may have been inside at fork). */
	struct ms__xport *p = port_now();
	if (!p)
		return;
	int fds[3];
	const int n = ms__xport_fds(p, fds);
	atomic_store_explicit(&xport_gone, true, memory_order_relaxed);
	for (int k = 0; k < n; k++)
		shim_raw_close(fds[k]);
#endif
}

/* The flags a frame honours: MSG_DONTWAIT (no waiting for a free frame), MSG_NOSIGNAL (UDP
 * raises no SIGPIPE), MSG_CONFIRM (a hint to the neighbour layer, which frames skip). */
#define BYPASS_FLAGS (MSG_DONTWAIT | MSG_NOSIGNAL | MSG_CONFIRM)

/* Why s cannot go as frames whatever the port says (a SHIM_XR_* reason), or 0. */
static unsigned shim_why(struct shim_fd *e, uint32_t info, int flags, bool control)
{
	if ((info & (FD_UDP | FD_SOCKET)) != (FD_UDP | FD_SOCKET))
		return SHIM_XR_NOT_UDP;
	if (flags & ~BYPASS_FLAGS) {
		if ((flags & MSG_MORE) && e)
			__atomic_fetch_or(&e->info, FD_MORE, __ATOMIC_RELAXED);
		return SHIM_XR_FLAGS;
	}
	if (info & FD_MORE)
		return SHIM_XR_FLAGS;
	if (control)
		return SHIM_XR_CONTROL;
	return 0;
}

/* The port for a send the shim would let it carry (why 0), or NULL with *why set: the
 * reason it goes by the kernel's path, counted n times. */
static struct ms__xport *gate(struct shim_thread *t, unsigned *why, uint64_t n)
{
	struct ms__xport *p = *why ? NULL : shim_xport();
	if (!p) {
		if (!*why)
			*why = SHIM_XR_UNAVAILABLE;
		t->fc.xdp_fallback[*why] += n;
	}
	return p;
}

static void add_counts(struct shim_thread *t, const struct ms__xport_counts *xc,
		       uint64_t *syscalls)
{
	t->fc.xdp_frames += xc->frames;
	t->fc.xdp_kicks += xc->kicks;
	*syscalls += xc->syscalls;
}

bool shim_bypass_send(struct shim_thread *t, struct shim_send *s, struct shim_fd *e,
		      uint32_t info, uint64_t *syscalls, ssize_t *r)
{
	*syscalls = 0;
	unsigned why = shim_why(e, info, s->flags, false);
	struct ms__xport *p = gate(t, &why, 1);
	if (!p)
		return false;
	/* The kernel's to judge: a header, buffer or address it would refuse (EFAULT, and
	 * lengths past its limits: nothing of it is read here, probe.c); a number past the
	 * table, whose changes the shim does not see; a write of nothing, which sends nothing
	 * on a socket (a send of nothing sends an empty datagram). */
	if (!e || !shim_send_load(s, -1) || s->iovcnt > IOV_MAX ||
	    (s->len == 0 && (s->call == CALL_WRITE || s->call == CALL_WRITEV)))
		why = MS__XDP_OTHER;
	else if (s->control)
		why = SHIM_XR_CONTROL;
	if (why) {
		t->fc.xdp_fallback[why]++;
		return false;
	}
	struct mmsghdr m = { .msg_hdr = {
		.msg_name = (void *)s->addr, .msg_namelen = s->addr ? s->alen : 0,
		.msg_iov = (struct iovec *)s->iov, .msg_iovlen = (size_t)s->iovcnt } };
	struct ms__xport_counts xc = { 0 };
	uint32_t skip = 0;
	const int pflags = (s->flags & MSG_DONTWAIT) || (info & FD_NONBLOCK) ? MSG_DONTWAIT : 0;
	const uint32_t gen = __atomic_load_n(&e->gen, __ATOMIC_RELAXED); /* e: checked above */
	const uint64_t other0 = t->fc.xdp_fallback[MS__XDP_OTHER];
	uint32_t k = ms__xport_send(p, s->fd, gen, &m, 1, pflags, &skip, t->fc.xdp_fallback, &xc);
	add_counts(t, &xc, syscalls);
	if (unlikely(!k))
		shim_xport_check(p, t->fc.xdp_fallback, other0);
	if (k == 1) {
		*r = (ssize_t)s->len;
		return true;
	}
	return false;
}

int shim_bypass_mmsg(struct shim_thread *t, int fd, struct shim_fd *e, uint32_t info,
		     struct mmsghdr *msgs, unsigned n, int flags, uint64_t *syscalls)
{
	*syscalls = 0;
	if (n > UIO_MAXIOV)
		n = UIO_MAXIOV; /* as the kernel does */
	unsigned why = shim_why(e, info, flags, false);
	/* Every message read only once probed: one the kernel would refuse (EFAULT, a length
	 * past its limits) sends the whole call by its path, which answers as it does. */
	bool control = false, odd = false;
	if (!why && n) {
		odd = !shim_mmsg_readable(msgs, n);
		for (unsigned i = 0; !odd && i < n; i++)
			control |= msgs[i].msg_hdr.msg_controllen != 0;
		if (control)
			why = SHIM_XR_CONTROL;
	}
	if (!why && (odd || !e))
		why = MS__XDP_OTHER;
	struct ms__xport *p = n ? gate(t, &why, n) : NULL;
	if (!p) {
		*syscalls += 1;
		return shim_real.sendmmsg(fd, msgs, n, flags);
	}
	const int pflags = (flags & MSG_DONTWAIT) || (info & FD_NONBLOCK) ? MSG_DONTWAIT : 0;
	const uint32_t gen = __atomic_load_n(&e->gen, __ATOMIC_RELAXED); /* e: checked above */
	unsigned off = 0;
	while (off < n) {
		struct ms__xport_counts xc = { 0 };
		uint32_t skip = 0;
		const uint64_t other0 = t->fc.xdp_fallback[MS__XDP_OTHER];
		uint32_t k = ms__xport_send(p, fd, gen, msgs + off, n - off, pflags, &skip,
					    t->fc.xdp_fallback, &xc);
		add_counts(t, &xc, syscalls);
		if (unlikely(!k))
			shim_xport_check(p, t->fc.xdp_fallback, other0);
		for (uint32_t i = 0; i < k; i++) {
			const struct msghdr *h = &msgs[off + i].msg_hdr;
			size_t len = 0;
			for (size_t j = 0; j < h->msg_iovlen; j++)
				len += h->msg_iov[j].iov_len;
			msgs[off + i].msg_len = (unsigned)len;
		}
		off += k;
		if (!skip)
			continue;
		*syscalls += 1;
		int r = shim_real.sendmmsg(fd, msgs + off, skip, flags);
		if (r < 0)
			return off ? (int)off : -1; /* as the kernel: the error is lost after a send */
		off += (unsigned)r;
		if ((uint32_t)r < skip)
			return (int)off;
	}
	return (int)off;
}
