/* SPDX-License-Identifier: MIT */
/*
 * xdp: kernel bypass. A UDP destination leaves as a frame this file builds (Ethernet, IPv4 or
 * IPv6, UDP, the message) in packet memory shared with the kernel, handed to an AF_XDP socket
 * bound to one transmit queue of the interface the context names. The kernel's UDP/IP path and
 * its per-datagram system call are skipped; one sendto(2) on the AF_XDP socket (a "kick")
 * makes the kernel take a batch of frames (copy mode: at most 32 per kick).
 *
 * Why the kernel's own interface (linux/if_xdp.h) and not libxdp/libbpf: transmitting needs no
 * XDP program, and what libxdp adds for a TX-only socket (ring helpers, loading a redirect
 * program) is either a few lines here or unwanted (a program attached to the caller's
 * interface). So no dependency beyond the kernel headers, and nothing attached to any device.
 *
 * - Memory: one UMEM of `frames` chunks (ms_config.xdp_frames, 2048 or 4096 bytes each, the
 *   latter when the MTU needs it), a TX ring and a completion ring with as many entries, so
 *   that the completion ring can never overflow and a free frame always has a TX slot. Frames
 *   are a stack of free addresses: taken per destination, returned when the completion ring
 *   says the kernel is done with them (reaped at every call and whenever none is free).
 * - Per group (prepare): one 128-byte record per plan position, made when the plan changes,
 *   when the kernel reports a change of link, address, route or neighbour (rtnetlink
 *   notifications, read at most every CHECK_NS), and when a socket option read for it has
 *   changed (up to REVAL_BUCKETS sockets re-read every REVAL_NS): the frame's headers as the
 *   kernel would write them (the
 *   route, source address and next hop's MAC from lib/os/route.c; ports, TOS, TTL, DF from
 *   the socket), the partial sums of both checksums, and the largest message one frame
 *   carries; or the reason the destination goes by the kernel's path (the contract in
 *   multisend.h, "Kernel bypass"). The routes asked (route_for) and the sockets read
 *   (sock_slot) are kept across plans, so a group that changes asks only about what is new.
 * - Per call: the message's ones' complement sum once; per destination a 64-byte copy of its
 *   headers, the message, two lengths and two checksums finished with one add and a fold each,
 *   and a TX descriptor. Then the producer index is published and the kernel kicked until it
 *   has consumed every descriptor of the call: a destination's status is its length once its
 *   descriptor is consumed (the frame is then the kernel's). If the kernel stops taking them
 *   (a kick fails for good: the interface went down, -ENETDOWN, -ENXIO; or nothing taken for
 *   WAIT_NS), the socket is closed, so that they can never leave later, and the destinations
 *   not consumed go by the kernel's path, which answers for them as it would have; a later
 *   call makes a new socket when the interface is back, and meanwhile the routes decide.
 * - Destinations that go by the kernel's path are sent by the loop executor, in the call, in
 *   order with the rest (runs of them at once).
 * - No frame: with MS_SEND_DONTWAIT the rest of the call's frames get -EAGAIN after one kick
 *   that did not free any; otherwise the call kicks and waits in poll(2) (1 ms at a time) for
 *   the kernel to release frames, and after WAIT_NS without any it sends the rest by the
 *   kernel's path rather than wait forever.
 * - A forked child never touches the parent's socket or rings: MS__CAP_FORK_UNSAFE (the loop
 *   sends there), and the mappings are MADV_DONTFORK.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/udp.h>
#include <poll.h>
#include <linux/if_xdp.h>
#include <linux/net_tstamp.h>

#include "internal.h"
#include "netfilter.h"
#include "route.h"
#include "xdp.h"
#include "sys.h"

#ifndef AF_XDP
#define AF_XDP 44
#endif
#ifndef SOL_XDP
#define SOL_XDP 283
#endif
#ifndef SO_BINDTOIFINDEX
#define SO_BINDTOIFINDEX 62
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

#define FILL_ENTRIES 64u                  /* the fill ring must exist; nothing is received */
#define CHECK_NS (5ull * 1000 * 1000)     /* rtnetlink notifications read at most this often */
#define REVAL_NS (1000ull * 1000 * 1000)  /* socket options read again this often */
#define WAIT_NS (1000ull * 1000 * 1000)   /* no frame released for this long: the kernel's path */
#define BIND_BUSY_TRIES 500               /* 1 ms each: a queue just released (xsk_open) */
#define ETH_HLEN 14u
#define HDR4 42u /* Ethernet + IPv4 + UDP */
#define HDR6 62u /* Ethernet + IPv6 + UDP */

/* Why a destination goes by the kernel's path (struct xdest.why; 0: by frame): xdp.h's. */
enum {
	BY_FRAME,
	FB_LOCAL = MS__XDP_LOCAL,
	FB_IFACE = MS__XDP_IFACE,
	FB_MTU = MS__XDP_MTU,
	FB_ROUTE = MS__XDP_ROUTE,
	FB_NEIGH = MS__XDP_NEIGH,
	FB_OTHER = MS__XDP_OTHER,
	FB_SOCKOPT = MS__XDP_SOCKOPT,
};

struct ring {
	uint32_t *prod, *cons, *flags;
	void *desc;      /* struct xdp_desc (TX) or __u64 (completion) entries */
	uint32_t mask;
	uint32_t head;   /* TX: the next entry to fill; completion: the next to read */
	void *map;
	size_t maplen;
};

struct xstate {
	const struct ms_ctx *ctx; /* for MS_CFG_MLOCK; NULL for a port (below) */
	bool copy_only, queue_set;
	bool nf_skip;          /* frames may skip netfilter's output hooks (the caller said so) */
	uint32_t queue_want;
	int fd;                /* the AF_XDP socket; -1 after the interface went away */
	unsigned char *umem;
	size_t umem_len;
	uint32_t frame_size, nframes;
	struct ring tx, cq;
	uint64_t *freel;       /* free frames' addresses (nfree of them) */
	uint32_t nfree;
	int ifindex;
	uint32_t queue, mtu;
	bool zerocopy;
	char ifname[IF_NAMESIZE];
	struct ms__nl *nl;
	uint32_t net_gen;      /* bumped when the kernel reported a change */
	uint64_t next_check;   /* when to read notifications next (CLOCK_MONOTONIC_COARSE) */
	uint64_t next_reopen;  /* fd < 0: when to try to make the socket again */
	uint64_t sys;          /* system calls made outside send (prepare), added by send */
	struct rentry *routes; /* routes asked of the kernel, valid for routes_gen (route_for) */
	uint32_t nroutes, caproutes, routes_gen;
	unsigned deps[2];      /* MS__DEP_*: the ports IPv4 [0] and IPv6 [1] answers depend on */
	bool deps_known;       /* ... read for routes_gen */
	struct sentry *socks;  /* groups' sockets read, by fd and inode (sock_get) */
	uint32_t nsocks, capsocks;
};

/* One plan position: 128 bytes, the headers first. */
struct xdest {
	unsigned char hdr[64]; /* Ethernet, IP and UDP headers: hlen bytes */
	uint32_t sum_ip;       /* IPv4 header's sum with tot_len, id and check 0 */
	uint32_t sum_udp;      /* pseudo-header addresses and protocol, and the ports */
	uint32_t lim;          /* by frame: 1 + the largest message one frame carries to it;
	                          0 for the kernel's path (so one test says both) */
	uint8_t hlen;          /* HDR4 or HDR6 */
	uint8_t why;           /* BY_FRAME, or FB_*: the kernel's path, and why */
	uint8_t v6;
	uint8_t idctr;         /* IPv4: the IP ID counts (no DF, or a connected socket) */
	uint8_t pad[48];
};
_Static_assert(sizeof(struct xdest) == 128, "two cache lines per destination");

struct xgroup {
	uint32_t plan_gen, net_gen;
	uint64_t reval_at;     /* when to read the sockets' options again */
	size_t cap;
	struct xdest *d;       /* per plan position */
	uint32_t reval_next;   /* the bucket the next re-read of options starts at */
	uint16_t ip_id;
	bool v4plain;          /* every by-frame record is IPv4 without an IP ID counter */
};

static __thread char why_buf[256]; /* ctx_init's reason (ctx->init_why), copied at once */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- checksums ------------------------------------------------------------------------------ */

/* Ones' complement sum of n bytes, as a sum of native 16-bit words (not folded; the caller
 * folds). Starting at an even offset of the checksummed data. */
static uint64_t sum_bytes(const unsigned char *p, size_t n, uint64_t s)
{
	for (; n >= 8; p += 8, n -= 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		s += w;
		s += s < w; /* end-around carry */
	}
	if (n) { /* the tail in place, zero after it: an odd byte is padded as the sum wants */
		uint64_t w = 0;
		memcpy(&w, p, n);
		s += w;
		s += s < w;
	}
	return s;
}

static uint32_t fold(uint64_t s)
{
	s = (s & 0xffffffffu) + (s >> 32);
	s = (s & 0xffffffffu) + (s >> 32);
	s = (s & 0xffffu) + (s >> 16);
	s = (s & 0xffffu) + (s >> 16);
	return (uint32_t)s;
}

static uint16_t swab16(uint32_t v)
{
	return (uint16_t)(((v & 0xffu) << 8) | ((v >> 8) & 0xffu));
}

/* The message's sum, over its iovecs as one byte stream (a piece at an odd offset counts with
 * its bytes swapped). Folded to 16 bits. */
static uint32_t sum_message(const struct iovec *iov, int iovcnt)
{
	uint32_t s = 0;
	size_t off = 0;
	for (int k = 0; k < iovcnt; k++) {
		uint32_t part = fold(sum_bytes(iov[k].iov_base, iov[k].iov_len, 0));
		s += off & 1 ? swab16(part) : part;
		off += iov[k].iov_len;
	}
	return fold(s);
}

static void put16(unsigned char *p, uint16_t v)
{
	memcpy(p, &v, 2);
}

/* FNV-1a over n bytes, from h (FNV_SEED to start): the caches' keys, the options' signature. */
#define FNV_SEED 1469598103934665603ull
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;
	for (size_t k = 0; k < n; k++)
		h = (h ^ c[k]) * 1099511628211ull;
	return h;
}

/* ---- the AF_XDP socket ---------------------------------------------------------------------- */

static int xdp_probe(const char **why)
{
	int fd = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int err = -errno;
		*why = err == -EPERM || err == -EACCES
			       ? "an AF_XDP socket needs CAP_NET_RAW"
			       : "this kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS)";
		return err;
	}
	close(fd);
	return 0;
}

/* Unmap a ring; its head stays (a call in progress counts its frames by it). */
static void ring_unmap(struct ring *r)
{
	const uint32_t head = r->head;
	if (r->map)
		munmap(r->map, r->maplen);
	memset(r, 0, sizeof(*r));
	r->head = head;
}

static int ring_map(int fd, struct ring *r, const struct xdp_ring_offset *o, uint32_t entries,
		    size_t esize, off_t pgoff)
{
	r->maplen = o->desc + entries * esize;
	void *m = mmap(NULL, r->maplen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
		       pgoff);
	if (m == MAP_FAILED) {
		r->map = NULL;
		return -errno;
	}
	(void)madvise(m, r->maplen, MADV_DONTFORK);
	r->map = m;
	r->prod = (uint32_t *)((char *)m + o->producer);
	r->cons = (uint32_t *)((char *)m + o->consumer);
	r->flags = (uint32_t *)((char *)m + o->flags);
	r->desc = (char *)m + o->desc;
	r->mask = entries - 1;
	r->head = 0;
	return 0;
}

static void xsk_close(struct xstate *st)
{
	ring_unmap(&st->tx);
	ring_unmap(&st->cq);
	if (st->fd >= 0)
		close(st->fd);
	st->fd = -1;
	if (st->umem)
		munmap(st->umem, st->umem_len);
	st->umem = NULL;
	st->nfree = 0;
}

/* The transmit queue: the one asked for; else the one transmit packet steering maps this CPU
 * to (/sys/class/net/IF/queues/tx-N/xps_cpus); else 0. */
static uint32_t pick_queue(const struct xstate *st)
{
	if (st->queue_set)
		return st->queue_want;
	int cpu = sched_getcpu();
	for (uint32_t q = 0; cpu >= 0 && q < 256; q++) {
		char path[96], mask[512];
		snprintf(path, sizeof(path), "/sys/class/net/%s/queues/tx-%u/xps_cpus", st->ifname, q);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			break;
		ssize_t n = read(fd, mask, sizeof(mask) - 1);
		close(fd);
		if (n <= 0)
			continue;
		mask[n] = '\0';
		/* Hex words separated by commas, most significant first. */
		int bit = 0;
		for (ssize_t k = n - 1; k >= 0; k--) {
			char c = mask[k];
			int v;
			if (c >= '0' && c <= '9')
				v = c - '0';
			else if (c >= 'a' && c <= 'f')
				v = c - 'a' + 10;
			else if (c >= 'A' && c <= 'F')
				v = c - 'A' + 10;
			else
				continue;
			if (cpu >= bit && cpu < bit + 4 && (v >> (cpu - bit)) & 1)
				return q;
			bit += 4;
		}
	}
	return 0;
}

/* Make the socket, its UMEM and rings, and bind it (zero copy first unless asked not to). On
 * failure why_buf says what failed. 0 or -errno. */
/* Frames skip netfilter: where a firewall's output rule would see the kernel's datagram, or
 * where that cannot be known, no queue is taken unless the caller accepted it (nf_skip), so
 * that kernel bypass never quietly passes the host's firewall. Asked at every (re)open. */
static int netfilter_ok(const struct xstate *st)
{
	if (st->nf_skip)
		return 0;
	char what[112];
	const int rc = ms__nf_output_hooks(what, sizeof(what));
	if (rc == 0)
		return 0;
	const char *knob = st->ctx ? "MS_CFG_XDP_NETFILTER or MULTISEND_XDP_NETFILTER=skip"
				   : "multisend-run --xdp-skip-netfilter";
	if (rc > 0)
		snprintf(why_buf, sizeof(why_buf),
			 "netfilter filters output here (%s); frames would skip it (%s accepts that)",
			 what, knob);
	else
		snprintf(why_buf, sizeof(why_buf),
			 "frames would skip netfilter, and its output rules here are unknown: %s "
			 "(%s accepts that)", what, knob);
	return -EPERM;
}

static int xsk_open(struct xstate *st)
{
	int err = netfilter_ok(st);
	if (err)
		return err;
	st->fd = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);
	if (st->fd < 0) {
		err = -errno;
		snprintf(why_buf, sizeof(why_buf), "AF_XDP socket: %s", ms_strerror(err));
		return err;
	}
	st->umem_len = (size_t)st->nframes * st->frame_size;
	st->umem = mmap(NULL, st->umem_len, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (st->umem == MAP_FAILED) {
		st->umem = NULL;
		err = -errno;
		snprintf(why_buf, sizeof(why_buf), "packet memory (%zu bytes): %s", st->umem_len,
			 ms_strerror(err));
		goto fail;
	}
	(void)madvise(st->umem, st->umem_len, MADV_DONTFORK);
	if (st->ctx && (err = ms__mlock(st->ctx, st->umem, st->umem_len))) {
		snprintf(why_buf, sizeof(why_buf), "locking packet memory: %s", ms_strerror(err));
		goto fail;
	}
	struct xdp_umem_reg reg = {
		.addr = (uintptr_t)st->umem,
		.len = st->umem_len,
		.chunk_size = st->frame_size,
	};
	uint32_t fill = FILL_ENTRIES, n = st->nframes;
	if (setsockopt(st->fd, SOL_XDP, XDP_UMEM_REG, &reg, sizeof(reg))) {
		err = -errno;
		if (err == -ENOBUFS || err == -ENOMEM || err == -EPERM)
			snprintf(why_buf, sizeof(why_buf),
				 "XDP_UMEM_REG: %s: %zu bytes of packet memory do not fit the "
				 "locked-memory limit (ulimit -l; or CAP_IPC_LOCK, or fewer xdp_frames)",
				 ms_strerror(err), st->umem_len);
		else
			snprintf(why_buf, sizeof(why_buf), "XDP_UMEM_REG: %s", ms_strerror(err));
		goto fail;
	}
	const char *step = "XDP_UMEM_FILL_RING";
	if (setsockopt(st->fd, SOL_XDP, XDP_UMEM_FILL_RING, &fill, sizeof(fill)) ||
	    (step = "XDP_UMEM_COMPLETION_RING",
	     setsockopt(st->fd, SOL_XDP, XDP_UMEM_COMPLETION_RING, &n, sizeof(n))) ||
	    (step = "XDP_TX_RING", setsockopt(st->fd, SOL_XDP, XDP_TX_RING, &n, sizeof(n)))) {
		err = -errno;
		snprintf(why_buf, sizeof(why_buf), "%s: %s", step, ms_strerror(err));
		goto fail;
	}
	struct xdp_mmap_offsets off;
	socklen_t olen = sizeof(off);
	if (getsockopt(st->fd, SOL_XDP, XDP_MMAP_OFFSETS, &off, &olen)) {
		err = -errno;
		snprintf(why_buf, sizeof(why_buf), "XDP_MMAP_OFFSETS: %s", ms_strerror(err));
		goto fail;
	}
	if ((err = ring_map(st->fd, &st->tx, &off.tx, n, sizeof(struct xdp_desc),
			    XDP_PGOFF_TX_RING)) ||
	    (err = ring_map(st->fd, &st->cq, &off.cr, n, sizeof(uint64_t),
			    (off_t)XDP_UMEM_PGOFF_COMPLETION_RING))) {
		snprintf(why_buf, sizeof(why_buf), "mapping the rings: %s", ms_strerror(err));
		goto fail;
	}
	struct sockaddr_xdp sa = {
		.sxdp_family = AF_XDP,
		.sxdp_ifindex = (uint32_t)st->ifindex,
		.sxdp_queue_id = st->queue,
		.sxdp_flags = XDP_USE_NEED_WAKEUP | (st->copy_only ? XDP_COPY : XDP_ZEROCOPY),
	};
	st->zerocopy = !st->copy_only;
	int rc = bind(st->fd, (struct sockaddr *)&sa, sizeof(sa));
	if (rc && st->zerocopy && errno != EBUSY) {
		sa.sxdp_flags = XDP_USE_NEED_WAKEUP | XDP_COPY; /* the driver has no zero copy */
		st->zerocopy = false;
		rc = bind(st->fd, (struct sockaddr *)&sa, sizeof(sa));
	}
	/* The queue chosen for this CPU is another socket's (another process on the same
	 * interface, a child of a process that has one): any other queue of the device will do
	 * as well, unless one was asked for. Queue numbers end where bind says EINVAL. */
	const uint32_t first_q = sa.sxdp_queue_id;
	for (uint32_t q = 0; rc && errno == EBUSY && !st->queue_set && q < 256; q++) {
		if (q == first_q)
			continue;
		sa.sxdp_queue_id = q;
		rc = bind(st->fd, (struct sockaddr *)&sa, sizeof(sa));
		if (rc && errno != EBUSY && sa.sxdp_flags & XDP_ZEROCOPY) {
			sa.sxdp_flags = XDP_USE_NEED_WAKEUP | XDP_COPY;
			st->zerocopy = false;
			rc = bind(st->fd, (struct sockaddr *)&sa, sizeof(sa));
		}
		if (rc && errno != EBUSY) {
			errno = EBUSY; /* no such queue: every one there is was taken */
			break;
		}
	}
	if (rc)
		sa.sxdp_queue_id = first_q;
	else
		st->queue = sa.sxdp_queue_id;
	/* A queue whose AF_XDP socket was just closed (a context freed and made again) stays
	 * taken until the kernel's deferred release runs, a few milliseconds: wait for it, a
	 * bounded time (a queue another socket holds stays EBUSY). */
	for (int tries = 0; rc && errno == EBUSY && tries < BIND_BUSY_TRIES; tries++) {
		struct timespec ms = { 0, 1000000 };
		nanosleep(&ms, NULL);
		rc = bind(st->fd, (struct sockaddr *)&sa, sizeof(sa));
		if (rc && errno != EBUSY && sa.sxdp_flags & XDP_ZEROCOPY) {
			sa.sxdp_flags = XDP_USE_NEED_WAKEUP | XDP_COPY;
			st->zerocopy = false;
			rc = bind(st->fd, (struct sockaddr *)&sa, sizeof(sa));
		}
	}
	if (rc) {
		err = -errno;
		snprintf(why_buf, sizeof(why_buf), "binding an AF_XDP socket to %s queue %u: %s%s",
			 st->ifname, st->queue, ms_strerror(err),
			 err == -EBUSY ? " (another AF_XDP socket has that queue)" : "");
		goto fail;
	}
	for (uint32_t k = 0; k < st->nframes; k++)
		st->freel[k] = (uint64_t)(st->nframes - 1 - k) * st->frame_size;
	st->nfree = st->nframes;
	return 0;
fail:
	xsk_close(st);
	return err;
}

static void xdp_ctx_fini(void *state)
{
	struct xstate *st = state;
	if (!st)
		return;
	xsk_close(st);
	if (st->nl)
		ms__nl_close(st->nl);
	free(st->freel);
	free(st->routes);
	free(st->socks);
	free(st);
}

/* Set up st (ifname, settings and ctx set) on its interface: the link, the packet memory,
 * the socket (unless lazy: a port takes its queue at its first frame, ms__xport_send). 0, or
 * -errno with why_buf saying what failed. */
static int xstate_open(struct xstate *st, bool lazy)
{
	st->fd = -1;
	int err = ms__nl_open(&st->nl);
	if (err) {
		snprintf(why_buf, sizeof(why_buf), "rtnetlink: %s", ms_strerror(err));
		return err;
	}
	/* The backend's: changes then cost no system call until one comes. Not a port's: the
	 * shim must know each descriptor it holds (ms__xport_fds), and a ring is one more. */
	if (!lazy)
		(void)ms__nl_watch(st->nl, MS__NL_BACKSTOP_NS);
	uint8_t mac[6];
	bool running;
	err = ms__link_get(st->nl, st->ifname, &st->ifindex, &st->mtu, mac, &running);
	if (err) {
		snprintf(why_buf, sizeof(why_buf), "interface %s: %s", st->ifname,
			 err == -ENODEV ? "no such interface"
			 : err == -EPROTONOSUPPORT ? "not an Ethernet device"
						  : ms_strerror(err));
		return err;
	}
	if (!running) {
		snprintf(why_buf, sizeof(why_buf),
			 "interface %s is down or has no carrier (a veth needs its peer up)",
			 st->ifname);
		return -ENETDOWN;
	}
	st->frame_size = st->mtu + ETH_HLEN <= 2048 ? 2048 : 4096;
	st->queue = pick_queue(st);
	st->freel = calloc(st->nframes, sizeof(*st->freel));
	if (!st->freel)
		return -ENOMEM;
	if (st->ctx && (err = ms__mlock(st->ctx, st->freel, st->nframes * sizeof(*st->freel))))
		return err;
	if (lazy)
		st->next_reopen = UINT64_MAX; /* made by the first frame, not by xstate_tick */
	else if ((err = xsk_open(st)))
		return err;
	st->next_check = now_ns() + CHECK_NS;
	return 0;
}

static int xdp_ctx_init(struct ms_ctx *ctx, void **state)
{
	*state = NULL;
	why_buf[0] = '\0';
	if (ctx->xdp.ifname_bad) {
		ctx->init_why = "MULTISEND_XDP_IFACE is not an interface name";
		return -ENOTSUP;
	}
	if (!ctx->xdp.ifname[0]) {
		ctx->init_why = "no interface named (ms_config.xdp_ifname or MULTISEND_XDP_IFACE)";
		return -ENOTSUP;
	}
	struct xstate *st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->ctx = ctx;
	snprintf(st->ifname, sizeof(st->ifname), "%s", ctx->xdp.ifname);
	st->copy_only = ctx->xdp.copy_only;
	st->nf_skip = ctx->xdp.nf_skip;
	st->queue_set = ctx->xdp.queue_set;
	st->queue_want = ctx->xdp.queue;
	st->nframes = ctx->xdp.frames;
	int err = xstate_open(st, false);
	if (err) {
		if (why_buf[0])
			ctx->init_why = why_buf;
		xdp_ctx_fini(st);
		return err;
	}
	*state = st;
	return 0;
}

static void xdp_describe(const struct ms_ctx *ctx, const void *state, char *buf, size_t len)
{
	const struct xstate *st = state;
	(void)ctx;
	snprintf(buf, len,
		 "AF_XDP on %s queue %u, %s mode, need_wakeup, %u frames of %u bytes, MTU %u%s",
		 st->ifname, st->queue, st->zerocopy ? "zero-copy" : "copy", st->nframes,
		 st->frame_size, st->mtu, st->fd < 0 ? " (closed: the interface went away)" : "");
}

/* ---- the group's frames, made by prepare ---------------------------------------------------- */

/* What the kernel's path would take from a socket for its datagrams. */
struct sockinfo {
	int family, type, proto;
	struct sockaddr_storage local, peer;
	bool has_peer;
	int tos, ttl, mttl, mloop, pmtu, recverr;  /* IPv4 level (also for v4-mapped traffic) */
	int tclass, hops, mhops, mloop6, pmtu6, recverr6, mif6;
	struct in_addr mif4;
	int oif;
	uint32_t mark;
	uint32_t uid;  /* the socket's owner (sk_uid: fstat's st_uid), for uidrange rules */
	bool has_uid;
	int prio;      /* SO_PRIORITY (a port sends none but priority 0 as frames) */
	bool v6only;   /* IPV6_V6ONLY: an IPv4 destination is the kernel's error */
	bool unsup;    /* an option frames cannot honour (FB_SOCKOPT; xdp.h) */
	uint64_t sig;
};

static int opt(int fd, int level, int name, int dflt, uint64_t *sys)
{
	int v = dflt;
	socklen_t l = sizeof(v);
	(*sys)++;
	if (getsockopt(fd, level, name, &v, &l))
		return dflt;
	if (l == 1) /* IP_MULTICAST_TTL / LOOP may answer in one byte */
		v = *(unsigned char *)&v;
	return v;
}

static bool port_zero(const struct sockaddr_storage *a)
{
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_port == 0;
	if (a->ss_family == AF_INET6)
		return ((const struct sockaddr_in6 *)a)->sin6_port == 0;
	return true;
}

/* Read what a frame needs of the socket; an unbound UDP socket is bound first (as its first
 * sendto would be) so that the frames carry its port. false: not a UDP socket. */
static bool sock_read(int fd, bool has_peer, struct sockinfo *si, uint64_t *sys)
{
	memset(si, 0, sizeof(*si));
	si->family = opt(fd, SOL_SOCKET, SO_DOMAIN, -1, sys);
	si->type = opt(fd, SOL_SOCKET, SO_TYPE, -1, sys);
	si->proto = opt(fd, SOL_SOCKET, SO_PROTOCOL, -1, sys);
	if ((si->family != AF_INET && si->family != AF_INET6) || si->type != SOCK_DGRAM ||
	    si->proto != IPPROTO_UDP)
		return false;
	socklen_t l = sizeof(si->local);
	(*sys)++;
	if (getsockname(fd, (struct sockaddr *)&si->local, &l))
		return false;
	if (port_zero(&si->local)) {
		struct sockaddr_storage any;
		memset(&any, 0, sizeof(any));
		any.ss_family = (sa_family_t)si->family;
		(*sys) += 2;
		if (bind(fd, (struct sockaddr *)&any,
			 si->family == AF_INET ? sizeof(struct sockaddr_in)
					       : sizeof(struct sockaddr_in6)) &&
		    errno != EINVAL) /* EINVAL: bound meanwhile */
			return false;
		l = sizeof(si->local);
		if (getsockname(fd, (struct sockaddr *)&si->local, &l) || port_zero(&si->local))
			return false;
	}
	if (has_peer) {
		l = sizeof(si->peer);
		(*sys)++;
		si->has_peer = !getpeername(fd, (struct sockaddr *)&si->peer, &l);
	}
	si->tos = opt(fd, IPPROTO_IP, IP_TOS, 0, sys);
	si->ttl = opt(fd, IPPROTO_IP, IP_TTL, 64, sys);
	si->mttl = opt(fd, IPPROTO_IP, IP_MULTICAST_TTL, 1, sys);
	si->mloop = opt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, 1, sys);
	si->pmtu = opt(fd, IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_WANT, sys);
	si->recverr = opt(fd, IPPROTO_IP, IP_RECVERR, 0, sys);
	l = sizeof(si->mif4);
	(*sys)++;
	if (getsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &si->mif4, &l))
		si->mif4.s_addr = 0;
	if (si->family == AF_INET6) {
		si->tclass = opt(fd, IPPROTO_IPV6, IPV6_TCLASS, 0, sys);
		si->hops = opt(fd, IPPROTO_IPV6, IPV6_UNICAST_HOPS, 64, sys);
		si->mhops = opt(fd, IPPROTO_IPV6, IPV6_MULTICAST_HOPS, 1, sys);
		si->mloop6 = opt(fd, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, 1, sys);
		si->pmtu6 = opt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_WANT, sys);
		si->recverr6 = opt(fd, IPPROTO_IPV6, IPV6_RECVERR, 0, sys);
		si->mif6 = opt(fd, IPPROTO_IPV6, IPV6_MULTICAST_IF, 0, sys);
	}
	si->oif = opt(fd, SOL_SOCKET, SO_BINDTOIFINDEX, 0, sys);
	si->mark = (uint32_t)opt(fd, SOL_SOCKET, SO_MARK, 0, sys);
	/* The uid the kernel's lookup matches uidrange rules on is the socket's (sk_uid, set
	 * from its inode's owner and changed with it by fchown): not necessarily ours. */
	struct stat sb;
	(*sys)++;
	if (!fstat(fd, &sb)) {
		si->uid = (uint32_t)sb.st_uid;
		si->has_uid = true;
	}
	si->prio = opt(fd, SOL_SOCKET, SO_PRIORITY, 0, sys);
	/* Options whose datagrams are not one plain frame each: corked (appended to), split
	 * into segments (UDP_SEGMENT), IP options in the header, transmit timestamps looped
	 * back to the error queue, errors queued (IP_RECVERR). */
	unsigned char ipopts[40];
	l = sizeof(ipopts);
	(*sys)++;
	const bool has_opts = !getsockopt(fd, IPPROTO_IP, IP_OPTIONS, ipopts, &l) && l > 0;
	const int tsflags = opt(fd, SOL_SOCKET, SO_TIMESTAMPING, 0, sys);
	si->unsup = si->recverr || (si->family == AF_INET6 && si->recverr6) || has_opts ||
		    opt(fd, IPPROTO_UDP, UDP_CORK, 0, sys) ||
		    opt(fd, IPPROTO_UDP, UDP_SEGMENT, 0, sys) ||
		    (tsflags & (SOF_TIMESTAMPING_TX_HARDWARE | SOF_TIMESTAMPING_TX_SOFTWARE |
				SOF_TIMESTAMPING_TX_SCHED | SOF_TIMESTAMPING_TX_ACK));
	if (si->family == AF_INET6)
		si->v6only = opt(fd, IPPROTO_IPV6, IPV6_V6ONLY, 0, sys);
	/* What a later change must be noticed in (FNV-1a over the fields read). */
	const int v[] = { si->tos, si->ttl, si->mttl, si->mloop, si->pmtu, si->recverr,
			  (int)si->mif4.s_addr, si->tclass, si->hops, si->mhops, si->mloop6,
			  si->pmtu6, si->recverr6, si->mif6, si->oif, (int)si->mark, si->prio,
			  si->v6only, si->unsup, (int)si->uid, si->has_uid };
	si->sig = fnv(fnv(FNV_SEED, v, sizeof(v)), &si->local, sizeof(si->local));
	return true;
}

/* The device that has IPv4 address a (what IP_MULTICAST_IF by address selects), or 0. */
static int addr_ifindex(struct in_addr a, uint64_t *sys)
{
	struct ifaddrs *all, *i;
	int index = 0;
	(*sys)++;
	if (getifaddrs(&all))
		return 0;
	for (i = all; i && !index; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
		    ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == a.s_addr)
			index = (int)if_nametoindex(i->ifa_name);
	freeifaddrs(all);
	return index;
}

static bool is_v4mapped(const struct sockaddr *a)
{
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)a;
	return a->sa_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr);
}

static bool wildcard(const struct sockaddr_storage *a)
{
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
	const struct in6_addr *x = &((const struct sockaddr_in6 *)a)->sin6_addr;
	return IN6_IS_ADDR_UNSPECIFIED(x) ||
	       (IN6_IS_ADDR_V4MAPPED(x) && !memcmp(&x->s6_addr[12], "\0\0\0\0", 4));
}

static uint16_t sa_port(const struct sockaddr *a)
{
	return a->sa_family == AF_INET ? ((const struct sockaddr_in *)a)->sin_port
				       : ((const struct sockaddr_in6 *)a)->sin6_port;
}

/* Make d: the frame's headers for destination `to` from socket si, or the reason it goes by
 * the kernel's path. rt is its route (route.h). */
static void make_dest(struct xdest *d, const struct xstate *st, const struct sockinfo *si,
		      const struct sockaddr *to, const struct ms__route *rt)
{
	memset(d, 0, sizeof(*d));
	switch (rt->kind) {
	case MS__RT_OK:
		break;
	case MS__RT_NEIGH:
		d->why = FB_NEIGH;
		return;
	case MS__RT_LOCAL:
	case MS__RT_BCAST:
		d->why = FB_LOCAL;
		return;
	case MS__RT_UNREACH:
		d->why = FB_ROUTE;
		return;
	default:
		d->why = FB_OTHER;
		return;
	}
	if (rt->ifindex != st->ifindex) {
		d->why = FB_IFACE;
		return;
	}
	const bool v6 = rt->family == AF_INET6;
	if (rt->multicast && (v6 ? si->mloop6 : si->mloop)) {
		d->why = FB_LOCAL; /* the kernel would also deliver it here */
		return;
	}
	unsigned char *h = d->hdr;
	memcpy(h, rt->dst_mac, 6);
	memcpy(h + 6, rt->src_mac, 6);
	uint64_t s;
	const uint16_t sport = sa_port((const struct sockaddr *)&si->local);
	const uint16_t dport = sa_port(to);
	if (!v6) {
		struct in_addr dst;
		if (to->sa_family == AF_INET)
			dst = ((const struct sockaddr_in *)to)->sin_addr;
		else
			memcpy(&dst, &((const struct sockaddr_in6 *)to)->sin6_addr.s6_addr[12], 4);
		const bool df = si->pmtu == IP_PMTUDISC_WANT || si->pmtu == IP_PMTUDISC_DO ||
				si->pmtu == IP_PMTUDISC_PROBE;
		put16(h + 12, htons(0x0800));
		unsigned char *ip = h + ETH_HLEN;
		ip[0] = 0x45;
		ip[1] = (uint8_t)si->tos;
		put16(ip + 6, htons(df ? 0x4000 : 0));
		ip[8] = (uint8_t)(rt->multicast ? si->mttl : si->ttl);
		ip[9] = IPPROTO_UDP;
		memcpy(ip + 12, &rt->src.v4, 4);
		memcpy(ip + 16, &dst, 4);
		d->sum_ip = fold(sum_bytes(ip, 20, 0));
		/* The kernel's IP ID: 0 with DF on an unconnected socket, else a counter. */
		d->idctr = !df || si->has_peer;
		unsigned char *udp = ip + 20;
		put16(udp, sport);
		put16(udp + 2, dport);
		s = sum_bytes(ip + 12, 8, 0) + htons(IPPROTO_UDP);
		d->hlen = HDR4;
		d->lim = rt->mtu > 28 ? rt->mtu - 28 : 0;
	} else {
		const struct in6_addr *dst = &((const struct sockaddr_in6 *)to)->sin6_addr;
		put16(h + 12, htons(0x86dd));
		unsigned char *ip = h + ETH_HLEN;
		uint32_t vtf = htonl(6u << 28 | (uint32_t)(si->tclass & 0xff) << 20);
		memcpy(ip, &vtf, 4);
		ip[6] = IPPROTO_UDP;
		int hops = rt->multicast ? si->mhops : si->hops;
		ip[7] = (uint8_t)(hops < 0 ? 64 : hops);
		memcpy(ip + 8, &rt->src.v6, 16);
		memcpy(ip + 24, dst, 16);
		unsigned char *udp = ip + 40;
		put16(udp, sport);
		put16(udp + 2, dport);
		s = sum_bytes(ip + 8, 32, 0) + htons(IPPROTO_UDP);
		d->v6 = 1;
		d->hlen = HDR6;
		d->lim = rt->mtu > 48 ? rt->mtu - 48 : 0;
	}
	d->sum_udp = fold(s + sport + dport);
	const uint32_t room = st->frame_size - d->hlen;
	if (d->lim > room)
		d->lim = room;
	d->lim++;
}

static int grow(const struct ms_ctx *ctx, void **pp, size_t n, size_t size)
{
	int err = 0;
	void *p = ms__zalloc_aligned(ctx, 64, n * size, &err);
	if (!p)
		return err;
	free(*pp);
	*pp = p;
	return 0;
}

/* ---- what a plan is made from, kept between plans ---- */

/* A route asked of the kernel: until it reports a change (net_gen: links, addresses, routes,
 * rules, neighbours), every destination with the same flow uses it, so a group that changes
 * asks only for its new destinations. The key is everything the lookup carried (route.h's
 * ms__flow, both addresses) and the ports where they can matter (ms__route_deps: a rule on
 * sport or dport, multipath hashing on them): policy rules can match on any of it (sport,
 * dport, uidrange, fwmark, tos, oif), so two destinations that differ in any part may route
 * differently. */
struct rentry {
	bool used;
	struct ms__flow fl;
	unsigned char dst[24], src[24]; /* addr_key: address, and port where it matters */
	struct ms__route rt;
};
#define ROUTES_MAX 65536u /* entries; full, the cache starts again from empty */

static bool addr_key(const struct sockaddr *to, socklen_t len, unsigned char key[24]);

static bool flow_eq(const struct ms__flow *a, const struct ms__flow *b)
{
	return a->oif == b->oif && a->mark == b->mark && a->has_uid == b->has_uid &&
	       (!a->has_uid || a->uid == b->uid) && a->tos == b->tos;
}

static const struct ms__route *route_for(struct xstate *st, const struct sockaddr *to,
					 socklen_t tolen, const struct sockaddr_storage *src,
					 const struct ms__flow *fl)
{
	static const struct ms__route other = { .kind = MS__RT_OTHER };
	struct rentry k = { .used = true, .fl = *fl };
	if (!addr_key(to, tolen, k.dst) ||
	    !addr_key((const struct sockaddr *)src, sizeof(*src), k.src))
		return &other;
	if (st->routes_gen != st->net_gen || st->nroutes >= st->caproutes * 3 / 4) {
		uint32_t cap = st->caproutes ? st->caproutes : 64;
		if (st->nroutes >= st->caproutes * 3 / 4 && cap < ROUTES_MAX)
			cap *= 2;
		if (cap != st->caproutes || !st->routes) {
			struct rentry *e = calloc(cap, sizeof(*e));
			if (!e)
				return &other;
			free(st->routes);
			st->routes = e;
			st->caproutes = cap;
		} else {
			memset(st->routes, 0, cap * sizeof(*st->routes));
		}
		st->nroutes = 0;
		if (st->routes_gen != st->net_gen || !st->deps_known) {
			/* Which ports the answers depend on, until the next change. Unknown
			 * (netlink failed): both, which is only slower. */
			for (int v = 0; v < 2; v++) {
				st->sys += 2;
				if (ms__route_deps(st->nl, v ? AF_INET6 : AF_INET, &st->deps[v]))
					st->deps[v] = MS__DEP_SPORT | MS__DEP_DPORT;
			}
			st->deps_known = true;
		}
		st->routes_gen = st->net_gen;
	}
	/* A port no rule matches and no multipath route hashes on routes every destination
	 * alike: left out of the key, so that destinations on one host share one lookup. */
	const bool v4 = to->sa_family == AF_INET || is_v4mapped(to);
	if (!(st->deps[!v4] & MS__DEP_DPORT))
		memset(k.dst + 2, 0, 2);
	if (!(st->deps[!v4] & MS__DEP_SPORT))
		memset(k.src + 2, 0, 2);
	/* Field by field: the struct's padding is not part of the key. */
	const uint32_t f[] = { (uint32_t)fl->oif, fl->mark, fl->uid, fl->has_uid, fl->tos };
	const uint64_t h = fnv(fnv(fnv(FNV_SEED, k.dst, 24), k.src, 24), f, sizeof(f));
	const uint32_t mask = st->caproutes - 1;
	for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
		struct rentry *e = &st->routes[i];
		if (e->used) {
			if (flow_eq(&e->fl, fl) && !memcmp(e->dst, k.dst, 24) &&
			    !memcmp(e->src, k.src, 24))
				return &e->rt;
			continue;
		}
		st->sys += 2;
		/* An address the lookup refuses (or netlink failing): the kernel's path, which
		 * gives its own answer. The source goes whole, wildcard or not: its port is the
		 * flow's source port. */
		if (ms__route_get(st->nl, to, tolen, (const struct sockaddr *)src, &k.fl, &k.rt))
			k.rt = other;
		*e = k;
		st->nroutes++;
		return &e->rt;
	}
}

/* A group's socket as last read: by fd and inode (a later socket with the number is another
 * entry), until a re-read finds its options changed. */
struct sentry {
	int fd; /* -1: free */
	uint64_t ino;
	bool udp;
	struct sockinfo si;
};
#define SOCKS_MAX 65536u

static uint32_t sock_hash(int fd, uint64_t ino)
{
	return (uint32_t)fnv(fnv(FNV_SEED, &fd, sizeof(fd)), &ino, sizeof(ino));
}

static struct sentry *sock_slot(struct xstate *st, const struct ms__bucket *b)
{
	if (st->nsocks >= st->capsocks * 3 / 4) {
		uint32_t cap = st->capsocks ? st->capsocks * 2 : 64;
		if (cap > SOCKS_MAX)
			cap = SOCKS_MAX; /* full at the largest: start again from empty */
		struct sentry *e = calloc(cap, sizeof(*e));
		if (!e)
			return NULL;
		for (uint32_t i = 0; i < cap; i++)
			e[i].fd = -1;
		/* Entries move: rehash what there is (when it grew). */
		for (uint32_t i = 0; cap != st->capsocks && i < st->capsocks; i++) {
			if (st->socks[i].fd < 0)
				continue;
			uint32_t j = sock_hash(st->socks[i].fd, st->socks[i].ino) & (cap - 1);
			while (e[j].fd >= 0)
				j = (j + 1) & (cap - 1);
			e[j] = st->socks[i];
		}
		if (cap == st->capsocks)
			st->nsocks = 0;
		free(st->socks);
		st->socks = e;
		st->capsocks = cap;
	}
	const uint32_t mask = st->capsocks - 1;
	for (uint32_t i = sock_hash(b->fd, b->ino) & mask;; i = (i + 1) & mask) {
		struct sentry *e = &st->socks[i];
		if (e->fd == b->fd && e->ino == b->ino)
			return e;
		if (e->fd < 0) {
			e->fd = b->fd;
			e->ino = b->ino;
			e->udp = b->type == SOCK_DGRAM && b->family != AF_UNIX &&
				 sock_read(b->fd, b->has_peer, &e->si, &st->sys);
			st->nsocks++;
			return e;
		}
	}
}

#define REVAL_BUCKETS 256u /* sockets whose options are read again per REVAL_NS, at most */

/* Read again the options of up to REVAL_BUCKETS sockets of g (a window that moves on each
 * time, so that every socket is read again within nbuckets / 256 seconds); true if one
 * changed (its entry then holds the new options). */
static bool socks_changed(struct xstate *st, const struct ms_group *g, struct xgroup *x)
{
	bool changed = false;
	for (uint32_t n = 0; n < REVAL_BUCKETS && n < g->nbuckets; n++) {
		const uint32_t k = x->reval_next++ % g->nbuckets;
		const struct ms__bucket *b = g->buckets[k];
		struct sentry *e = sock_slot(st, b);
		if (!e)
			return true;
		struct sockinfo si;
		const bool udp = b->type == SOCK_DGRAM && b->family != AF_UNIX &&
				 sock_read(b->fd, b->has_peer, &si, &st->sys);
		if (udp != e->udp || (udp && si.sig != e->si.sig)) {
			e->udp = udp;
			e->si = si;
			changed = true;
		}
	}
	return changed;
}

/* Make d: the record for destination `to` (NULL: the connected peer) of UDP socket si, as the
 * kernel's path would send to it: headers, or the reason it goes by that path. */
static void dest_for(struct xstate *st, const struct sockinfo *sip, const struct sockaddr *to,
		     struct xdest *d)
{
	memset(d, 0, sizeof(*d));
	if (sip->unsup) {
		d->why = FB_SOCKOPT;
		return;
	}
	if (!to) {
		if (!sip->has_peer) {
			d->why = FB_ROUTE; /* not connected: the kernel says so */
			return;
		}
		to = (const struct sockaddr *)&sip->peer;
	}
	if (sip->v6only && is_v4mapped(to)) {
		d->why = FB_SOCKOPT;
		return;
	}
	socklen_t tolen = to->sa_family == AF_INET ? sizeof(struct sockaddr_in)
						   : sizeof(struct sockaddr_in6);
	/* The source the kernel would route from: the bound address, or for a multicast IPv4
	 * group the socket's IP_MULTICAST_IF address. */
	struct sockaddr_storage src = sip->local;
	bool mcast4 = (to->sa_family == AF_INET &&
		       IN_MULTICAST(ntohl(((const struct sockaddr_in *)to)->sin_addr.s_addr))) ||
		      (is_v4mapped(to) &&
		       ((const struct sockaddr_in6 *)to)->sin6_addr.s6_addr[12] >= 224 &&
		       ((const struct sockaddr_in6 *)to)->sin6_addr.s6_addr[12] <= 239);
	int oif = sip->oif;
	if (mcast4 && sip->mif4.s_addr) {
		/* The kernel sends a group out of IP_MULTICAST_IF's device, from its address
		 * unless the socket is bound to one. */
		if (!oif)
			oif = addr_ifindex(sip->mif4, &st->sys);
		if (wildcard(&sip->local)) {
			memset(&src, 0, sizeof(src));
			struct sockaddr_in *s4 = (struct sockaddr_in *)&src;
			s4->sin_family = AF_INET;
			s4->sin_addr = sip->mif4;
		}
	}
	if (to->sa_family == AF_INET6 && !is_v4mapped(to) &&
	    IN6_IS_ADDR_MULTICAST(&((const struct sockaddr_in6 *)to)->sin6_addr) && !oif)
		oif = sip->mif6;
	/* The flow as the kernel's lookup has it: the TOS is IP_TOS's for an IPv4 destination
	 * (a v4-mapped one too), IPV6_TCLASS's for IPv6. */
	const bool dst6 = to->sa_family == AF_INET6 && !is_v4mapped(to);
	const struct ms__flow fl = { .oif = oif,
				     .mark = sip->mark,
				     .uid = sip->uid,
				     .has_uid = sip->has_uid,
				     .tos = (uint8_t)(dst6 ? sip->tclass : sip->tos) };
	const struct ms__route *rt = route_for(st, to, tolen, &src, &fl);
	make_dest(d, st, sip, to, rt);
}

/* Make every position's record. */
static int build(struct xstate *st, struct ms_group *g, struct xgroup *x)
{
	int err;
	if (g->size > x->cap) {
		if ((err = grow(st->ctx, (void **)&x->d, g->size, sizeof(*x->d))))
			return err;
		x->cap = g->size;
	}
	size_t pos = 0;
	x->v4plain = true;
	for (uint32_t k = 0; k < g->nbuckets; k++) {
		const struct ms__bucket *b = g->buckets[k];
		const struct sentry *se = sock_slot(st, b);
		if (!se)
			return -ENOMEM;
		const bool udp = se->udp;
		const struct sockinfo *const sip = &se->si;
		for (uint32_t j = 0; j < b->n; j++, pos++) {
			struct xdest *d = &x->d[pos];
			const struct ms__dest *dst = &b->dests[j];
			if (!udp || dst->kpath) {
				memset(d, 0, sizeof(*d));
				d->why = FB_OTHER;
				continue;
			}
			dest_for(st, sip, dst->addrlen ? (const struct sockaddr *)&dst->addr : NULL, d);
			if (d->lim && (d->v6 || d->idctr))
				x->v4plain = false;
		}
	}
	return 0;
}

/* What the send path does for the network's sake, at most every CHECK_NS: read the kernel's
 * notifications (a change bumps net_gen) and, when the interface went away, take it again
 * once it is back. True when the socket was made again. */
static bool xstate_tick(struct xstate *st, uint64_t now)
{
	if (now >= st->next_check) {
		st->next_check = now + CHECK_NS;
		if (ms__nl_changed(st->nl, &st->sys))
			st->net_gen++;
	}
	if (st->fd >= 0 || now < st->next_reopen)
		return false;
	uint8_t mac[6];
	bool running = false;
	st->next_reopen = now + CHECK_NS;
	st->sys += 2;
	return !ms__link_get(st->nl, st->ifname, &st->ifindex, &st->mtu, mac, &running) &&
	       running && !xsk_open(st);
}

static int xdp_prepare(struct ms_ctx *ctx, void *state, struct ms_group *g, uint32_t plan_gen,
		       void **gdata)
{
	struct xstate *st = state;
	struct xgroup *x = *gdata;
	(void)ctx;
	const uint64_t now = now_ns();
	bool stale = xstate_tick(st, now) || !x || x->plan_gen != plan_gen ||
		     x->net_gen != st->net_gen;
	if (!stale && now >= x->reval_at) {
		x->reval_at = now + REVAL_NS;
		stale = socks_changed(st, g, x);
	}
	if (!stale)
		return 0;
	if (!x) {
		x = calloc(1, sizeof(*x));
		if (!x)
			return -ENOMEM;
		*gdata = x;
	}
	/* What is pending now is older than what build reads. */
	(void)ms__nl_changed(st->nl, &st->sys);
	int err = build(st, g, x);
	if (err)
		return err;
	x->plan_gen = plan_gen;
	x->net_gen = st->net_gen;
	x->reval_at = now + REVAL_NS;
	return 0;
}

static void xdp_group_fini(void *state, void *gdata)
{
	struct xgroup *x = gdata;
	(void)state;
	if (!x)
		return;
	free(x->d);
	free(x);
}

/* ---- sending -------------------------------------------------------------------------------- */

/* Frames the kernel is done with, back to the free stack. */
static void reap(struct xstate *st)
{
	struct ring *r = &st->cq;
	const uint32_t prod = __atomic_load_n(r->prod, __ATOMIC_ACQUIRE);
	uint32_t c = r->head;
	if (c == prod)
		return;
	const uint64_t *addr = r->desc;
	const uint64_t mask = ~(uint64_t)(st->frame_size - 1);
	uint64_t *const freel = st->freel;
	uint32_t nfree = st->nfree;
	const uint32_t rmask = r->mask;
	while (c != prod)
		freel[nfree++] = addr[c++ & rmask] & mask;
	st->nfree = nfree;
	r->head = c;
	__atomic_store_n(r->cons, c, __ATOMIC_RELEASE);
}

/* Positions for the kernel's path, sent by the loop executor a run at a time: consecutive
 * positions with one reason. */
struct krun {
	size_t start, len;
	unsigned why;
};

/* What one call shares: its range, the lengths and the message's sum, the outcome so far. */
struct call {
	const struct xgroup *x;
	size_t first, count;
	uint32_t head0;        /* the TX ring's head when the call began */
	uint16_t ulen, tot4;   /* UDP length, IPv4 total length (network order) */
	uint32_t add_udp;      /* the message's sum and both UDP lengths */
	uint32_t failed;       /* frames the kernel did not take (sent by its path instead) */
	bool dry;              /* no frame for the rest of the call: the kernel's path */
	bool again;            /* MS_SEND_DONTWAIT and none free: -EAGAIN for the rest */
	uint16_t ip_id;
	struct krun k;
};

/* Does position i go by frame when frames are to be had? (The call's frames are, in order,
 * the first of these positions: so the k-th frame's position is found again.) */
static bool by_frame(const struct ms__batch *b, const struct xdest *d, size_t i)
{
	return b->len < d->lim && !(b->hdr && b->plan[i].mm->msg_hdr.msg_control);
}

/* The call's frames [from, to) (ordinals) were not taken by the kernel, and never will be
 * (their socket is closed): their destinations go by the kernel's path, which gives them the
 * kernel's own answer (the route that went down with the interface: -ENETUNREACH). */
static uint32_t resend_frames(struct ms__batch *b, const struct call *c, uint32_t from,
			      uint32_t to)
{
	uint32_t k = 0;
	for (MS__EACH(i, left, c->first, c->count, b->n)) {
		if (k >= to)
			break;
		if (!by_frame(b, &c->x->d[i], i))
			continue;
		if (k++ >= from) {
			b->t.xdp_fallback_other++;
			ms__backend_loop.send(NULL, b, i, 1);
		}
	}
	return to - from;
}

/* Publish the TX entries written and kick until the kernel has consumed them all: 0, or, when
 * it stops taking them (a kick that fails for good: the interface went down, -ENETDOWN,
 * -ENXIO; or nothing taken for WAIT_NS), the error, with *cons the consumer index it reached
 * and the socket closed, so that what it did not take can never leave later. System calls
 * and kicks are counted in t. */
static int kick_all(struct xstate *st, struct ms__tally *t, uint32_t *cons_out,
		    struct pollfd *pf, nfds_t npf)
{
	struct ring *r = &st->tx;
	const uint32_t head = r->head;
	__atomic_store_n(r->prod, head, __ATOMIC_RELEASE);
	uint64_t idle_since = 0;
	int err = 0;
	for (;;) {
		const uint32_t cons = __atomic_load_n(r->cons, __ATOMIC_ACQUIRE);
		if (cons == head)
			break;
		if (__atomic_load_n(r->flags, __ATOMIC_RELAXED) & XDP_RING_NEED_WAKEUP) {
			t->syscalls++;
			t->xdp_kicks++;
			if (npf) {
				/* A port's kick: poll(2) drives the transmit in copy mode too, and
				 * reports the other descriptors' state in the same call. If the
				 * kernel took nothing, a sendto kick below says why. */
				pf[0].fd = st->fd;
				pf[0].events = POLLOUT;
				if (poll(pf, npf, 0) >= 0 &&
				    __atomic_load_n(r->cons, __ATOMIC_ACQUIRE) != cons) {
					idle_since = 0;
					continue;
				}
				t->syscalls++;
				t->xdp_kicks++;
			}
			if (ms__sys.sendto(st->fd, NULL, 0, MSG_DONTWAIT, NULL, 0) < 0 &&
			    errno != EAGAIN && errno != EBUSY && errno != ENOBUFS && errno != EINTR) {
				/* EAGAIN: one batch taken, or the driver busy; EBUSY: a frame the
				 * driver dropped (consumed all the same). Anything else: gone. */
				err = errno;
				break;
			}
			if (__atomic_load_n(r->cons, __ATOMIC_ACQUIRE) != cons) {
				idle_since = 0;
				continue;
			}
			reap(st);
		}
		/* No progress (zero copy: the driver consumes in its own time). */
		const uint64_t now = now_ns();
		if (!idle_since) {
			idle_since = now;
		} else if (now - idle_since > WAIT_NS) {
			err = ETIMEDOUT;
			break;
		}
		struct pollfd p = { .fd = st->fd, .events = POLLOUT };
		t->syscalls++;
		(void)poll(&p, 1, 1);
	}
	if (!err) {
		reap(st);
		return 0;
	}
	*cons_out = __atomic_load_n(r->cons, __ATOMIC_ACQUIRE);
	xsk_close(st);
	st->next_reopen = 0;
	st->net_gen++; /* routes are read again: the kernel knows what is down */
	return err;
}

/* kick_all for a call: the frames the kernel did not take go by the kernel's path (every
 * entry not consumed is this call's: a call ends with all of its own consumed). Returns how
 * many of the call's frames were not sent as frames. */
static uint32_t flush(struct xstate *st, struct ms__batch *b, const struct call *c)
{
	uint32_t cons;
	const uint32_t head = st->tx.head;
	if (!kick_all(st, &b->t, &cons, NULL, 0))
		return 0;
	return resend_frames(b, c, cons - c->head0, head - c->head0);
}

/* No free frame after the kernel took all it was given: wait in poll(2), 1 ms at a time, for
 * it to release some, at most WAIT_NS. True when one is free. */
static bool poll_frames(struct xstate *st, struct ms__tally *t)
{
	const uint64_t start = now_ns();
	while (!st->nfree && now_ns() - start <= WAIT_NS) {
		struct pollfd p = { .fd = st->fd, .events = POLLOUT };
		t->syscalls++;
		(void)poll(&p, 1, 1);
		reap(st);
	}
	return st->nfree != 0;
}

/* No free frame: hand the kernel what is written and take back what it released; without
 * MS_SEND_DONTWAIT, wait for it to release some (poll, 1 ms at a time, at most WAIT_NS).
 * false: none (or the socket is gone). */
static bool wait_frame(struct xstate *st, struct ms__batch *b, struct call *c)
{
	c->failed += flush(st, b, c);
	if (st->fd < 0)
		return false;
	if (st->nfree)
		return true;
	return !(b->msg_flags & MSG_DONTWAIT) && poll_frames(st, &b->t);
}

static void count_fallback(struct ms__tally *t, unsigned why, uint32_t n)
{
	switch (why) {
	case FB_LOCAL: t->xdp_fallback_local += n; break;
	case FB_IFACE: t->xdp_fallback_iface += n; break;
	case FB_MTU: t->xdp_fallback_mtu += n; break;
	case FB_ROUTE: t->xdp_fallback_route += n; break;
	case FB_NEIGH: t->xdp_fallback_neigh += n; break;
	default: t->xdp_fallback_other += n; break;
	}
}

static void krun_flush(struct ms__batch *b, struct krun *k)
{
	if (!k->len)
		return;
	count_fallback(&b->t, k->why, (uint32_t)k->len);
	ms__backend_loop.send(NULL, b, k->start, k->len);
	k->len = 0;
}

static void krun_add(struct ms__batch *b, struct krun *k, size_t i, unsigned why)
{
	if (k->len && (why != k->why || (k->start + k->len) % b->n != i))
		krun_flush(b, k);
	if (!k->len++) {
		k->start = i;
		k->why = why;
	}
}

/* Copy the message (gathered, or in one piece) into a frame after its headers. */
static void copy_message(unsigned char *to, const struct iovec *iov, int iovcnt)
{
	for (int k = 0; k < iovcnt; k++) {
		if (!iov[k].iov_len) /* its base may be NULL, which memcpy may not be given */
			continue;
		memcpy(to, iov[k].iov_base, iov[k].iov_len);
		to += iov[k].iov_len;
	}
}

/* Write destination d's frame into f, but for the message: its headers, both lengths and
 * both checksums (one add and a fold each). v4: the caller knows d is IPv4 without an IP ID
 * counter (a constant, so that the common case has no test for it). */
static inline __attribute__((always_inline)) void
build_headers(unsigned char *f, const struct xdest *d, bool v4, uint16_t ulen, uint16_t tot4,
	      uint32_t add_udp, uint16_t *ip_id)
{
	memcpy(f, d->hdr, 64); /* the message overwrites what lies past the headers */
	uint32_t s;
	if (v4 || !d->v6) {
		unsigned char *ip = f + ETH_HLEN;
		s = d->sum_ip + tot4;
		if (!v4 && unlikely(d->idctr)) {
			const uint16_t id = htons((*ip_id)++);
			put16(ip + 4, id);
			s += id;
		}
		put16(ip + 2, tot4);
		s = (s & 0xffff) + (s >> 16);
		s += s >> 16;
		put16(ip + 10, (uint16_t)~s);
	} else {
		put16(f + ETH_HLEN + 4, ulen);
	}
	unsigned char *udp = f + (v4 ? HDR4 : d->hlen) - 8;
	put16(udp + 4, ulen);
	s = d->sum_udp + add_udp;
	s = (s & 0xffff) + (s >> 16);
	s += s >> 16;
	const uint16_t sum = (uint16_t)~s;
	put16(udp + 6, sum ? sum : 0xffff);
}

/* The slow paths' frame (one_slow, the port): a free frame filled with d's headers and the
 * message, queued on the TX ring (room is certain: the ring has an entry per frame). The
 * plain case in xdp_send does the same on locals. */
static void queue_frame(struct xstate *st, const struct xdest *d, const struct iovec *iov,
			int iovcnt, size_t len, uint16_t ulen, uint16_t tot4, uint32_t add_udp,
			uint16_t *ip_id)
{
	const uint64_t addr = st->freel[--st->nfree];
	unsigned char *f = st->umem + addr;
	build_headers(f, d, false, ulen, tot4, add_udp, ip_id);
	copy_message(f + d->hlen, iov, iovcnt);
	((struct xdp_desc *)st->tx.desc)[st->tx.head++ & st->tx.mask] =
		(struct xdp_desc){ .addr = addr, .len = (uint32_t)(d->hlen + len) };
}

/* Position i when it is not the plain case: the kernel's path (and why), a gathered message
 * or one with control messages, no free frame. */
static __attribute__((noinline)) void one_slow(struct xstate *st, struct ms__batch *b,
					       const struct xdest *d, size_t i, struct call *c)
{
	unsigned why = d->why;
	if (!why && !by_frame(b, d, i))
		why = b->len >= d->lim ? FB_MTU : FB_OTHER; /* control messages: the kernel's */
	if (!why && !st->nfree) {
		if (c->dry || c->again || !wait_frame(st, b, c)) {
			if (st->fd >= 0 && (b->msg_flags & MSG_DONTWAIT))
				c->again = true;
			else
				c->dry = true;
		}
		if (c->again) {
			ms__status(b, i, -EAGAIN); /* exactly those that did not fit */
			return;
		}
		if (c->dry)
			why = FB_OTHER;
	}
	if (why) {
		krun_add(b, &c->k, i, why);
		return;
	}
	queue_frame(st, d, b->iov, b->iovcnt, b->len, c->ulen, c->tot4, c->add_udp, &c->ip_id);
	if (b->res)
		b->res[i] = (struct ms_result){ .id = b->plan[i].id, .status = (int)b->len };
}

static int xdp_send(void *state, struct ms__batch *b, size_t first, size_t count)
{
	struct xstate *st = state;
	struct xgroup *x = b->gdata;
	const size_t n = b->n, len = b->len;
	b->t.xdp = true;
	b->t.syscalls += st->sys;
	st->sys = 0;

	/* Per call: the message's sum and the lengths every frame shares. */
	const uint16_t ulen = htons((uint16_t)(8 + len)), tot4 = htons((uint16_t)(20 + 8 + len));
	const uint32_t add_udp = sum_message(b->iov, b->iovcnt) + 2u * ulen;
	struct call c = { .x = x, .first = first, .count = count, .head0 = st->tx.head,
			  .ulen = ulen, .tot4 = tot4, .add_udp = add_udp, .dry = st->fd < 0,
			  .ip_id = x->ip_id };
	if (st->fd >= 0)
		reap(st);
	/* The plain case inline, on locals (stores into frames may alias anything reached
	 * through st): a message in one piece (no prepared header needed), a destination by
	 * frame that it fits, a free frame. Without a socket (the interface went away) nfree is
	 * 0, so every position goes to one_slow. */
	static const char none; /* an empty message's buffer may be NULL: memcpy needs a pointer */
	const void *const buf = len ? b->iov[0].iov_base : &none;
	const struct ms__plan_entry *const plan = b->plan;
	struct ms_result *const res = b->res;
	unsigned char *const umem = st->umem;
	const uint64_t *const freel = st->freel;
	struct xdp_desc *const ring = st->tx.desc;
	const uint32_t mask = st->tx.mask;
	uint32_t nfree = b->hdr ? 0 : st->nfree, head = st->tx.head;
	uint16_t ip_id = c.ip_id;
	/* One loop for groups whose frames are all IPv4 without an IP ID counter, one for any. */
#define XDP_LOOP(V4)                                                                          \
	for (int part = 0; part < 2; part++) {                                                \
		for (size_t i = ms__span_from(first, part),                                   \
			    end = ms__span_to(first, count, n, part); i < end; i++) {         \
			const struct xdest *d = &x->d[i];                                     \
			if (likely(nfree != 0) && likely(len < d->lim)) {                     \
				const uint64_t addr = freel[--nfree];                         \
				unsigned char *f = umem + addr;                               \
				build_headers(f, d, V4, ulen, tot4, add_udp, &ip_id);         \
				memcpy(f + (V4 ? HDR4 : d->hlen), buf, len);                  \
				ring[head++ & mask] = (struct xdp_desc){                      \
					.addr = addr,                                         \
					.len = (uint32_t)((V4 ? HDR4 : d->hlen) + len) };     \
				if (res)                                                      \
					res[i] = (struct ms_result){ .id = plan[i].id,        \
								     .status = (int)len };    \
				continue;                                                     \
			}                                                                     \
			if (!b->hdr)                                                          \
				st->nfree = nfree;                                            \
			st->tx.head = head;                                                   \
			c.ip_id = ip_id;                                                      \
			one_slow(st, b, d, i, &c);                                            \
			nfree = b->hdr ? 0 : st->nfree; /* 0 without a socket */             \
			head = st->tx.head;                                                   \
			ip_id = c.ip_id;                                                      \
		}                                                                             \
	}
	if (x->v4plain)
		XDP_LOOP(true)
	else
		XDP_LOOP(false)
#undef XDP_LOOP
	if (!b->hdr)
		st->nfree = nfree;
	st->tx.head = head;
	const uint32_t frames = head - c.head0;
	if (st->fd >= 0 && frames)
		c.failed += flush(st, b, &c);
	krun_flush(b, &c.k);
	x->ip_id = ip_id;
	b->t.xdp_frames += frames - c.failed;
	b->t.accepted += frames - c.failed;
	b->t.bytes += (uint64_t)(frames - c.failed) * len;
	return 0;
}

const struct ms__backend ms__backend_xdp = {
	.id = MS_BACKEND_XDP,
	.name = "xdp",
	.caps = MS__CAP_HDR | MS__CAP_FORK_UNSAFE | MS__CAP_WHOLE,
	.probe = xdp_probe,
	.ctx_init = xdp_ctx_init,
	.ctx_fini = xdp_ctx_fini,
	.prepare = xdp_prepare,
	.group_fini = xdp_group_fini,
	.send = xdp_send,
	.describe = xdp_describe,
};

/* ---- a port: datagrams that are not a group's (lib/be/xdp.h) ------------------------------- */

/* What the port knows of a descriptor (per number, valid for the caller's generation). */
struct pfd {
	uint32_t gen;          /* the caller's generation + 1 when read; 0: never */
	bool udp;
	uint8_t err;           /* connected: ERR_UNKNOWN, ERR_CLEAR or ERR_PENDING (POLLERR) */
	struct sockinfo si;
	/* The last destination sent to, byte for byte as the caller gave it, and its cache slot
	 * (valid while the cache's epoch is last_epoch): a loop to one destination skips the
	 * key and the hash. */
	uint32_t last_slot, last_epoch;
	socklen_t last_len;    /* 0: the connected peer */
	unsigned char last_raw[sizeof(struct sockaddr_in6)];
};
enum { ERR_UNKNOWN, ERR_CLEAR, ERR_PENDING };

/* One (socket, destination): its frame's record, for the network state it was made in. */
struct pdest {
	int fd;                /* -1: a free slot */
	uint32_t fdgen;
	uint32_t net_gen;
	uint64_t sig;          /* the socket's options it was made with */
	unsigned char key[24]; /* family, port, address, scope (addr_key) */
	struct xdest d;
};

#define PORT_CACHE_MIN 256u
#define PORT_CACHE_MAX 16384u /* entries; a full cache starts again from empty */

struct ms__xport {
	uintptr_t lock;        /* 0 free; else the owner thread's token (a handler that re-enters
	                          finds its own id: the kernel's path for it) */
	unsigned fork_gen;     /* ms__fork_gen when made: a child never touches the socket */
	struct xstate st;
	struct pfd *fds;
	uint32_t nfds;
	struct pdest *cache;
	uint32_t cap, used;
	uint16_t ip_id;
	uint32_t epoch;        /* bumped whenever the cache is made again (pfd.last_slot) */
	bool lost;             /* ms__xport_lose: its descriptors are not its own any more */
	int queue;             /* 0: no queue taken yet (no frame made); 1 taken; -errno: taking
	                          it failed, queue_why says why (every message skipped since) */
	char queue_why[256];
	uint64_t nl_poll_at;   /* when a kick polls the rtnetlink listener next (port_kick) */
	bool recheck;          /* read the notifications at the next send (atomic) */
};

/* A destination's identity: family, port, address (scope for IPv6); the rest of a sockaddr
 * (sin_zero, a flow label) does not change the frame. false: not IPv4 or IPv6. */
static bool addr_key(const struct sockaddr *to, socklen_t len, unsigned char key[24])
{
	memset(key, 0, 24);
	if (!to)
		return true; /* the connected peer: all zero */
	if (to->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)to;
		key[0] = AF_INET;
		memcpy(key + 2, &a->sin_port, 2);
		memcpy(key + 4, &a->sin_addr, 4);
		return true;
	}
	if (to->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)to;
		key[0] = AF_INET6;
		memcpy(key + 2, &a->sin6_port, 2);
		memcpy(key + 4, &a->sin6_addr, 16);
		memcpy(key + 20, &a->sin6_scope_id, 4);
		return true;
	}
	return false;
}

/* The port's hash, on every send: three multiply-xorshift rounds over the key's words (FNV's
 * byte at a time cost more than the rest of the lookup). */
static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= UINT64_C(0xff51afd7ed558ccd);
	x ^= x >> 33;
	return x;
}

static uint32_t key_hash(int fd, uint32_t fdgen, const unsigned char key[24])
{
	uint64_t w[3];
	memcpy(w, key, sizeof(w));
	const uint64_t h = mix64(w[0] ^ mix64(w[1] ^ mix64(w[2] ^ ((uint64_t)(uint32_t)fd << 32 | fdgen))));
	return (uint32_t)(h ^ (h >> 32));
}

int ms__xport_open(const char *ifname, uint32_t frames, unsigned flags, struct ms__xport **out,
		   char *why, size_t whylen)
{
	*out = NULL;
	why_buf[0] = '\0';
	if (!ifname || !*ifname || strlen(ifname) >= IF_NAMESIZE || strchr(ifname, '/')) {
		snprintf(why, whylen, "'%s' is not an interface name", ifname ? ifname : "");
		return -EINVAL;
	}
	const char *pwhy = "";
	int err = xdp_probe(&pwhy);
	if (err) {
		snprintf(why, whylen, "%s", pwhy);
		return err;
	}
	struct ms__xport *p = calloc(1, sizeof(*p));
	if (!p) {
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	p->fork_gen = __atomic_load_n(&ms__fork_gen, __ATOMIC_RELAXED);
	struct xstate *st = &p->st;
	snprintf(st->ifname, sizeof(st->ifname), "%s", ifname);
	st->copy_only = flags & MS__XPORT_COPY;
	st->nf_skip = flags & MS__XPORT_NF_SKIP;
	st->nframes = frames ? frames : 2048;
	err = xstate_open(st, true);
	if (!err) {
		p->cap = PORT_CACHE_MIN;
		p->epoch = 1; /* a pfd's last_epoch 0 never matches */
		p->cache = calloc(p->cap, sizeof(*p->cache));
		if (!p->cache)
			err = -ENOMEM;
		for (uint32_t k = 0; p->cache && k < p->cap; k++)
			p->cache[k].fd = -1;
	}
	if (err) {
		snprintf(why, whylen, "%s", why_buf[0] ? why_buf : ms_strerror(err));
		ms__xport_close(p);
		return err;
	}
	*out = p;
	return 0;
}

void ms__xport_close(struct ms__xport *p)
{
	if (!p)
		return;
	if (p->fork_gen == __atomic_load_n(&ms__fork_gen, __ATOMIC_RELAXED))
		xsk_close(&p->st);
	if (p->st.nl)
		ms__nl_close(p->st.nl);
	free(p->st.freel);
	free(p->st.routes);
	free(p->st.socks);
	free(p->fds);
	free(p->cache);
	free(p);
}

void ms__xport_describe(const struct ms__xport *p, char *buf, size_t len)
{
	if (p->queue <= 0)
		snprintf(buf, len, "AF_XDP on %s: no queue taken%s%s", p->st.ifname,
			 p->queue < 0 ? ": " : " (no frame yet)", p->queue < 0 ? p->queue_why : "");
	else
		xdp_describe(NULL, &p->st, buf, len);
}

int ms__xport_queue(const struct ms__xport *p, char *why, size_t whylen)
{
	const int q = __atomic_load_n(&p->queue, __ATOMIC_ACQUIRE);
	if (q < 0 && why)
		snprintf(why, whylen, "%s", p->queue_why);
	return q;
}

/* The port's first frame: take the queue now (lock held). false: taking it failed, for good. */
static bool take_queue(struct ms__xport *p, uint64_t now)
{
	struct xstate *st = &p->st;
	why_buf[0] = '\0';
	st->queue = pick_queue(st);
	const int err = xsk_open(st);
	if (err) {
		snprintf(p->queue_why, sizeof(p->queue_why), "%s",
			 why_buf[0] ? why_buf : ms_strerror(err));
		__atomic_store_n(&p->queue, err, __ATOMIC_RELEASE);
		return false;
	}
	st->next_check = now + CHECK_NS;
	__atomic_store_n(&p->queue, 1, __ATOMIC_RELEASE);
	return true;
}

/* The socket's record, read again when the caller's generation changed. */
static struct pfd *port_fd(struct ms__xport *p, int fd, uint32_t fdgen, struct ms__tally *t)
{
	if ((uint32_t)fd >= p->nfds) {
		uint32_t n = p->nfds ? p->nfds : 64;
		while (n <= (uint32_t)fd)
			n *= 2;
		struct pfd *f = realloc(p->fds, n * sizeof(*f));
		if (!f)
			return NULL;
		memset(f + p->nfds, 0, (n - p->nfds) * sizeof(*f));
		p->fds = f;
		p->nfds = n;
	}
	struct pfd *f = &p->fds[fd];
	if (f->gen != fdgen + 1) {
		uint64_t sys = 0;
		f->udp = sock_read(fd, true, &f->si, &sys);
		t->syscalls += sys;
		f->gen = fdgen + 1;
		f->err = ERR_UNKNOWN;
		f->last_epoch = 0;
	}
	return f;
}

/* The record for (fd, to): from the cache if made for this socket, its options and the
 * network as they are, else made now. NULL: no memory. */
/* The priority IP_TOS gives a socket with it (the kernel's rt_tos2priority: its ip_tos2prio
 * table by the TOS field's bits 1-4: best effort 0, bulk 2, interactive 6, interactive bulk 4). */
static int tos_priority(int tos)
{
	static const unsigned char prio[8] = { 0, 0, 2, 2, 6, 6, 4, 4 };
	return prio[((unsigned)tos & 0x1e) >> 2];
}

static struct pdest *port_lookup(struct ms__xport *p, int fd, uint32_t fdgen,
				 const struct pfd *f, const struct sockaddr *to, socklen_t tolen,
				 struct ms__tally *t)
{
	unsigned char key[24];
	if (!addr_key(to, tolen, key))
		return NULL;
	/* What the kernel refuses or reads differently: another family than the socket's
	 * (an IPv4 address on an IPv6 socket is the kernel's IPv4 path), a short IPv6 address,
	 * port 0 (EINVAL). */
	if (to && (to->sa_family != f->si.family ||
		   (to->sa_family == AF_INET6 && tolen < sizeof(struct sockaddr_in6)) ||
		   !sa_port(to)))
		return NULL;
	if (p->used >= p->cap * 3 / 4) {
		/* Full: grow, or start again from empty (every entry is remade on use). */
		uint32_t cap = p->cap < PORT_CACHE_MAX ? p->cap * 2 : p->cap;
		struct pdest *c = cap != p->cap ? calloc(cap, sizeof(*c)) : p->cache;
		if (!c)
			return NULL;
		if (c != p->cache)
			free(p->cache);
		p->cache = c;
		p->cap = cap;
		p->used = 0;
		p->epoch++;
		for (uint32_t k = 0; k < cap; k++)
			c[k].fd = -1;
	}
	const uint32_t mask = p->cap - 1;
	uint32_t h = key_hash(fd, fdgen, key) & mask;
	struct pdest *e;
	for (;; h = (h + 1) & mask) {
		e = &p->cache[h];
		if (e->fd < 0)
			break;
		if (e->fd == fd && e->fdgen == fdgen && !memcmp(e->key, key, sizeof(key))) {
			if (e->net_gen == p->st.net_gen && e->sig == f->si.sig)
				return e;
			goto make;
		}
	}
	e->fd = fd;
	e->fdgen = fdgen;
	memcpy(e->key, key, sizeof(key));
	p->used++;
make:
	e->net_gen = p->st.net_gen;
	e->sig = f->si.sig;
	if (f->si.prio && f->si.prio != tos_priority(f->si.tos)) {
		/* A priority the program set maps to a queue, a VLAN priority, a traffic class:
		 * the kernel's path keeps what it asked for. (IP_TOS sets the priority too, to
		 * the one its TOS implies: that alone is no reason.) */
		memset(&e->d, 0, sizeof(e->d));
		e->d.why = FB_SOCKOPT;
		return e;
	}
	const uint64_t sys0 = p->st.sys;
	dest_for(&p->st, &f->si, to, &e->d);
	t->syscalls += p->st.sys - sys0;
	p->st.sys = sys0;
	return e;
}
/* The record for (fd, to): the last destination's again, or port_lookup's. */
static const struct xdest *port_dest(struct ms__xport *p, int fd, uint32_t fdgen,
				     struct pfd *f, const struct sockaddr *to,
				     socklen_t tolen, struct ms__tally *t)
{
	if (!to)
		tolen = 0;
	if (f->last_epoch == p->epoch && tolen == f->last_len &&
	    (!tolen || !memcmp(f->last_raw, to, tolen))) {
		struct pdest *e = &p->cache[f->last_slot];
		if (e->fd == fd && e->fdgen == fdgen && e->net_gen == p->st.net_gen &&
		    e->sig == f->si.sig)
			return &e->d;
	}
	struct pdest *e = port_lookup(p, fd, fdgen, f, to, tolen, t);
	if (!e)
		return NULL;
	if (tolen <= sizeof(f->last_raw)) {
		f->last_slot = (uint32_t)(e - p->cache);
		f->last_epoch = p->epoch;
		f->last_len = tolen;
		if (tolen)
			memcpy(f->last_raw, to, tolen);
	}
	return &e->d;
}


/* A thread's token for the port's lock: the address of a thread-local byte (no system call,
 * unlike gettid, which glibc does not cache). */
static __thread char port_token;

static bool port_lock(struct ms__xport *p)
{
	const uintptr_t me = (uintptr_t)&port_token;
	for (;;) {
		uintptr_t v = 0;
		if (__atomic_compare_exchange_n(&p->lock, &v, me, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			return true;
		if (v == me)
			return false; /* re-entered from a signal handler on this thread */
		sched_yield();
	}
}

static void port_unlock(struct ms__xport *p)
{
	__atomic_store_n(&p->lock, 0, __ATOMIC_RELEASE);
}

/* Why m goes by the kernel's path (MS__XDP_*), or 0 when it can go as a frame. */
static unsigned port_why(const struct xdest *d, const struct msghdr *h, size_t *lenp)
{
	size_t len = 0;
	for (size_t i = 0; i < h->msg_iovlen; i++)
		len += h->msg_iov[i].iov_len;
	*lenp = len;
	if (!d)
		return MS__XDP_OTHER;
	if (d->why)
		return d->why;
	if (len >= d->lim)
		return MS__XDP_MTU;
	return h->msg_control ? MS__XDP_OTHER : 0;
}

/* A port's kick: poll the AF_XDP socket (transmit) and, in the same call, a connected socket
 * (an error it received) and, at most every NL_POLL_NS, the rtnetlink listener (a change to
 * read before the next frame is made: the notification socket is read only when it has
 * something, or after a pause of CHECK_NS without such a poll). */
#define NL_POLL_NS (1000ull * 1000)
static int port_kick(struct ms__xport *p, struct pfd *f, int fd, uint64_t now,
		     struct ms__tally *t, uint32_t *cons)
{
	struct xstate *st = &p->st;
	struct pollfd pf[3] = { { .fd = st->fd } };
	nfds_t n = 1, k_err = 0, k_nl = 0;
	if (f->si.has_peer) {
		k_err = n;
		pf[n++] = (struct pollfd){ .fd = fd, .revents = -1 };
	}
	if (now >= p->nl_poll_at) {
		int nl[2];
		ms__nl_fds(st->nl, nl);
		k_nl = n;
		pf[n++] = (struct pollfd){ .fd = nl[1], .events = POLLIN, .revents = -1 };
	}
	const int err = kick_all(st, t, cons, pf, n);
	if (k_nl) {
		/* -1: not polled (zero copy needs no kick): read them at the next send */
		if (pf[k_nl].revents == -1 || (pf[k_nl].revents & (POLLIN | POLLERR))) {
			st->next_check = 0;
		} else {
			st->next_check = now + CHECK_NS;
			p->nl_poll_at = now + NL_POLL_NS;
		}
	}
	if (k_err)
		f->err = err || pf[k_err].revents == -1 ? ERR_UNKNOWN
			 : pf[k_err].revents & POLLERR  ? ERR_PENDING
							: ERR_CLEAR;
	return err;
}

uint32_t ms__xport_send(struct ms__xport *p, int fd, uint32_t fdgen, const struct mmsghdr *m,
			uint32_t cnt, int flags, uint32_t *skip, uint64_t fb[MS__XDP_NREASONS],
			struct ms__xport_counts *c)
{
	*skip = 0;
	if (!cnt)
		return 0;
	if (p->lost || p->fork_gen != __atomic_load_n(&ms__fork_gen, __ATOMIC_RELAXED) ||
	    !port_lock(p)) {
		/* A forked child, or a handler inside a send: the kernel's path for all. */
		*skip = cnt;
		fb[MS__XDP_OTHER] += cnt;
		return 0;
	}
	struct xstate *st = &p->st;
	struct ms__tally t = { 0 };
	const uint64_t now = now_ns();
	if (unlikely(__atomic_load_n(&p->recheck, __ATOMIC_RELAXED))) {
		__atomic_store_n(&p->recheck, false, __ATOMIC_RELAXED);
		st->next_check = 0;
	}
	const uint64_t check0 = st->next_check;
	(void)xstate_tick(st, now);
	if (st->next_check != check0)
		p->nl_poll_at = now + NL_POLL_NS; /* read just now */
	t.syscalls += st->sys;
	st->sys = 0;
	uint32_t k = 0;
	const uint32_t head0 = st->tx.head;
	/* (before its first frame a port has no socket, and decides as it would with one) */
	struct pfd *f = st->fd >= 0 || !p->queue ? port_fd(p, fd, fdgen, &t) : NULL;
	if (!f || !f->udp) {
		*skip = cnt;
		fb[MS__XDP_OTHER] += cnt;
		goto out;
	}
	if (f->si.has_peer && f->err != ERR_CLEAR) {
		if (f->err == ERR_UNKNOWN) {
			struct pollfd pf = { .fd = fd };
			t.syscalls++;
			f->err = poll(&pf, 1, 0) >= 0 && !(pf.revents & POLLERR) ? ERR_CLEAR
										 : ERR_PENDING;
		}
		if (f->err == ERR_PENDING) {
			/* The kernel's path returns the error (and clears it) instead of sending
			 * this one; what follows is known again after it. */
			f->err = ERR_UNKNOWN;
			*skip = 1;
			fb[MS__XDP_ERROR]++;
			goto out;
		}
	}
	if (st->fd >= 0)
		reap(st);
	unsigned why = 0; /* why m[k] stopped the frames */
	for (; k < cnt; k++) {
		const struct msghdr *h = &m[k].msg_hdr;
		size_t len;
		const struct xdest *d = port_dest(p, fd, fdgen, f, h->msg_name, h->msg_namelen, &t);
		why = port_why(d, h, &len);
		if (why)
			break;
		if (unlikely(st->fd < 0)) {
			/* A program that never sends a datagram the interface would carry (only
			 * to loopback, say) never holds one of its queues. */
			if (!take_queue(p, now)) {
				why = MS__XDP_OTHER;
				*skip = cnt - k;
				fb[why] += *skip;
				break;
			}
		}
		if (!st->nfree) {
			uint32_t cons;
			if (port_kick(p, f, fd, now, &t, &cons)) {
				k = cons - head0;
				goto gone;
			}
			if (!st->nfree && ((flags & MSG_DONTWAIT) || !poll_frames(st, &t))) {
				/* none free (for a second, or at once under MSG_DONTWAIT): the rest by
				 * the kernel's path */
				why = MS__XDP_OTHER;
				*skip = cnt - k;
				fb[why] += *skip;
				break;
			}
		}
		const uint16_t ulen = htons((uint16_t)(8 + len));
		queue_frame(st, d, h->msg_iov, (int)h->msg_iovlen, len, ulen,
			    htons((uint16_t)(20 + 8 + len)),
			    sum_message(h->msg_iov, (int)h->msg_iovlen) + 2u * ulen, &p->ip_id);
	}
	if (st->tx.head != head0) {
		uint32_t cons;
		if (port_kick(p, f, fd, now, &t, &cons)) {
			k = cons - head0; /* not taken: the kernel's path from there */
			goto gone;
		}
	}
	if (k < cnt && !*skip) {
		/* The run of messages after the frames that go by the kernel's path, classified
		 * without sending: the caller sends them together. */
		uint32_t j = k;
		for (; j < cnt; j++) {
			const struct msghdr *h = &m[j].msg_hdr;
			size_t len;
			unsigned w = j == k ? why
				   : port_why(port_dest(p, fd, fdgen, f, h->msg_name,
							h->msg_namelen, &t), h, &len);
			if (!w)
				break;
			fb[w]++;
		}
		*skip = j - k;
	}
	goto out;
gone:
	*skip = cnt - k;
	fb[MS__XDP_OTHER] += *skip;
out:
	if (*skip && f)
		f->err = ERR_UNKNOWN; /* the kernel's path may take or leave an error */
	c->frames += k;
	c->kicks += t.xdp_kicks;
	c->syscalls += t.syscalls;
	port_unlock(p);
	return k;
}

void ms__xport_recheck(struct ms__xport *p, bool now)
{
	if (now || now_ns() >= __atomic_load_n(&p->nl_poll_at, __ATOMIC_RELAXED))
		__atomic_store_n(&p->recheck, true, __ATOMIC_RELAXED);
}

bool ms__xport_owns(const struct ms__xport *p, int fd)
{
	if (fd < 0 || p->lost)
		return false;
	int nl[2] = { -1, -1 };
	if (p->st.nl)
		ms__nl_fds(p->st.nl, nl);
	return fd == p->st.fd || fd == nl[0] || fd == nl[1];
}

int ms__xport_fds(const struct ms__xport *p, int fds[3])
{
	int n = 0, nl[2] = { -1, -1 };
	if (p->lost)
		return 0;
	if (p->st.nl)
		ms__nl_fds(p->st.nl, nl);
	const int all[3] = { p->st.fd, nl[0], nl[1] };
	for (int k = 0; k < 3; k++)
		if (all[k] >= 0)
			fds[n++] = all[k];
	return n;
}

void ms__xport_lose(struct ms__xport *p)
{
	(void)port_lock(p);
	p->lost = true;
	p->st.fd = -1;
	if (p->st.nl)
		ms__nl_abandon(p->st.nl);
	p->st.nl = NULL;
	port_unlock(p);
}
