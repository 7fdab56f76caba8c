/* SPDX-License-Identifier: MIT */
/*
 * raw-xdp: the library's xdp backend (MS_BACKEND_XDP) written by hand over the kernel's own
 * AF_XDP interface (linux/if_xdp.h; no libxdp, no libbpf, no library call), so that the
 * library's frames can be compared with the least a program must do to send them.
 *
 * Set-up (raw_xdp_open, on the sending thread, inside the bench's namespace): one AF_XDP
 * socket, a UMEM of RX_FRAMES frames of FRAME_SIZE bytes, fill and completion rings and a
 * transmit ring of RING entries, bound to NETNS_DEV's queue XDP_QUEUE with XDP_COPY (a veth has no
 * zero copy) and XDP_USE_NEED_WAKEUP. Per destination a 42-byte Ethernet + IPv4 + UDP
 * template (destination MAC: the sink's neighbour entry; source port: the rig's real UDP
 * socket's), the IPv4 header's checksum summed with tot_len 0, and the UDP checksum's sum over
 * the pseudo-header and header without the two lengths.
 *
 * Per fan-out: the payload's ones-complement sum and the lengths' contributions (IPv4 tot_len;
 * the UDP length twice, pseudo-header and header), once. Per destination: a free frame, the
 * template and the payload copied in, both lengths stored, each checksum finished with one
 * add and a fold, a transmit descriptor. The producer index is published when the ring is full
 * or the fan-out ends, and the kernel kicked (sendto with MSG_DONTWAIT, while the ring asks for
 * a wake-up) until it has consumed every descriptor: in copy mode it takes about 32 per kick.
 * Frames come back by the completion ring, reaped at every fan-out and whenever none is free:
 * none is reused before its completion.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/if_xdp.h>

#include "netns.h"
#include "raw.h"

#ifndef AF_XDP
#define AF_XDP 44
#endif
#ifndef SOL_XDP
#define SOL_XDP 283
#endif

#define XDP_FRAMES 4096u     /* UMEM frames */
#define XDP_FRAME_SIZE 2048u /* bytes each */
#define XDP_RING 2048u       /* transmit, completion and fill ring entries */
#define HDR_LEN 42u          /* Ethernet 14 + IPv4 20 + UDP 8 */
#define KICK_RETRIES 100000u /* kicks without progress before the socket counts as broken */
/* NETNS_DEV's queue: the library's xdp variant holds queue 0 for the whole run (its context
 * is made once), and two AF_XDP sockets cannot share a queue without sharing a UMEM; the
 * netns-xdp veth has two (netns.c). On a veth in copy mode the two queues cost the same. */
#define XDP_QUEUE 1u

/* One ring mapped from the socket: the kernel's producer and consumer indices, its flags
 * (XDP_RING_NEED_WAKEUP), the entries; prod/cons are this side's copies. */
struct xring {
	_Atomic uint32_t *producer, *consumer, *flags;
	void *desc;
	void *map;
	size_t map_len;
	uint32_t mask;
	uint32_t prod, cons;
};

/* One destination's precomputed frame head and partial sums. */
struct xdp_dest {
	unsigned char tmpl[HDR_LEN];
	uint32_t ip_sum;  /* IPv4 header words, tot_len and check 0 */
	uint32_t udp_sum; /* pseudo-header and header words, both lengths and check 0 */
};

struct raw_xdp {
	int fd;
	unsigned char *umem;
	struct xring tx, cq, fq;
	uint64_t *free; /* frame addresses the kernel has given back */
	uint32_t nfree;
	struct xdp_dest *d;
	int broken; /* a kick failed for good: every later send fails */
};

/* ---- checksums ------------------------------------------------------------------------------ */

/* The ones-complement sum of big-endian 16-bit words (a trailing byte padded with zero), in
 * 64 bits so that nothing carries out; fold16 makes it 16 bits. */
static uint64_t sum16(const unsigned char *p, size_t len, uint64_t sum)
{
	for (; len >= 2; p += 2, len -= 2)
		sum += (uint32_t)p[0] << 8 | p[1];
	if (len)
		sum += (uint32_t)p[0] << 8;
	return sum;
}

static inline uint32_t fold16(uint64_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint32_t)sum;
}

/* The same for a 32-bit sum, in two steps (no loop): what each destination pays. */
static inline uint32_t fold32(uint32_t sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	return (sum & 0xffff) + (sum >> 16);
}

/* A big-endian 16-bit field, in one store. */
static inline void put16(unsigned char *p, uint32_t v)
{
	uint16_t be = htons((uint16_t)v);

	memcpy(p, &be, 2);
}

/* ---- set-up --------------------------------------------------------------------------------- */

static int map_ring(int fd, struct xring *r, const struct xdp_ring_offset *off, size_t entry,
		    off_t pgoff)
{
	r->map_len = off->desc + XDP_RING * entry;
	r->map = mmap(NULL, r->map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
		      pgoff);
	if (r->map == MAP_FAILED) {
		r->map = NULL;
		return -errno;
	}
	r->producer = (_Atomic uint32_t *)((char *)r->map + off->producer);
	r->consumer = (_Atomic uint32_t *)((char *)r->map + off->consumer);
	r->flags = (_Atomic uint32_t *)((char *)r->map + off->flags);
	r->desc = (char *)r->map + off->desc;
	r->mask = XDP_RING - 1;
	r->prod = atomic_load_explicit(r->producer, memory_order_relaxed);
	r->cons = atomic_load_explicit(r->consumer, memory_order_relaxed);
	return 0;
}

void raw_xdp_close(struct rig *r)
{
	struct raw_xdp *x = r->raw_xdp;

	if (!x)
		return;
	struct xring *rings[] = { &x->tx, &x->cq, &x->fq };

	for (size_t i = 0; i < ARRAY_SIZE(rings); i++)
		if (rings[i]->map)
			munmap(rings[i]->map, rings[i]->map_len);
	if (x->fd >= 0)
		close(x->fd);
	if (x->umem)
		munmap(x->umem, (size_t)XDP_FRAMES * XDP_FRAME_SIZE);
	free(x->free);
	free(x->d);
	free(x);
	r->raw_xdp = NULL;
}

bool raw_xdp_probe(enum sink_kind sink, char *detail, size_t len)
{
	if (sink != SINK_NETNS_XDP) {
		snprintf(detail, len, "skipped: needs --sink netns-xdp (AF_XDP transmits only on "
				      "the namespace's veth, whose peer must be up)");
		return false;
	}
	int fd = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);

	if (fd < 0) {
		snprintf(detail, len, "unavailable: socket(AF_XDP): %s (a kernel without "
				      "CONFIG_XDP_SOCKETS, or not root)",
			 strerror(errno));
		return false;
	}
	close(fd);
	snprintf(detail, len,
		 "hand-written AF_XDP, no library: %s queue %u (0 is xdp's), XDP_COPY, "
		 "NEED_WAKEUP; %u frames of %u B, rings of %u; per destination a 42-byte "
		 "template and partial checksums made once, per fan-out the payload's sum; "
		 "sendto kicks until the kernel took every frame",
		 NETNS_DEV, XDP_QUEUE, XDP_FRAMES, XDP_FRAME_SIZE, XDP_RING);
	return true;
}

static int fail(char *err, size_t errlen, const char *what, int e)
{
	snprintf(err, errlen, "raw-xdp: %s: %s", what, strerror(e));
	return -e;
}

/* The frame head and partial sums of destination i, from the local port of the rig's UDP
 * socket that sends to it and the device's MAC. */
static void make_template(struct xdp_dest *d, const unsigned char src_mac[6],
			  const unsigned char dst_mac[6], struct in_addr saddr, struct in_addr daddr,
			  uint16_t sport, uint16_t dport)
{
	unsigned char *e = d->tmpl, *ip = e + 14, *udp = ip + 20;

	memset(d, 0, sizeof(*d));
	memcpy(e, dst_mac, 6);
	memcpy(e + 6, src_mac, 6);
	e[12] = 0x08; /* ETH_P_IP */
	e[13] = 0x00;
	ip[0] = 0x45;    /* version 4, 5 words */
	ip[6] = 0x40;    /* DF, no fragment offset; ID 0 (what the kernel sends with DF) */
	ip[8] = 64;      /* TTL */
	ip[9] = IPPROTO_UDP;
	memcpy(ip + 12, &saddr, 4);
	memcpy(ip + 16, &daddr, 4);
	memcpy(udp, &sport, 2);
	memcpy(udp + 2, &dport, 2);
	/* tot_len, check: 0 here; added per fan-out and per destination. */
	d->ip_sum = (uint32_t)sum16(ip, 20, 0);
	/* Pseudo-header (addresses, zero, protocol) and the header's ports; the UDP length
	 * (twice) and the payload come per fan-out. */
	d->udp_sum = (uint32_t)sum16(ip + 12, 8, IPPROTO_UDP) + (uint32_t)sum16(udp, 4, 0);
}

int raw_xdp_open(const struct session *s, struct rig *r, char *err, size_t errlen)
{
	struct raw_xdp *x = calloc(1, sizeof(*x));
	struct xdp_mmap_offsets off;
	socklen_t optlen = sizeof(off);
	int ring = XDP_RING, e;

	if (!x)
		return fail(err, errlen, "set-up", ENOMEM);
	x->fd = -1;
	r->raw_xdp = x;
	if (r->size + HDR_LEN > XDP_FRAME_SIZE || r->size > 1500 - 28) {
		snprintf(err, errlen,
			 "raw-xdp: a %llu-byte datagram does not fit one frame (at most %u B: the "
			 "veth's MTU of 1500, less 28 of headers)",
			 (unsigned long long)r->size, 1500 - 28);
		return -EMSGSIZE;
	}
	x->d = calloc(r->n, sizeof(*x->d));
	x->free = malloc(XDP_FRAMES * sizeof(*x->free));
	if (!x->d || !x->free)
		return fail(err, errlen, "set-up", ENOMEM);
	x->fd = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);
	if (x->fd < 0)
		return fail(err, errlen, "socket(AF_XDP)", errno);
	if (s->ns && (e = netns_check_socket(s->ns, x->fd))) {
		/* Never transmit from outside the namespace: refuse the whole run. */
		snprintf(err, errlen, "raw-xdp: the AF_XDP socket is not in namespace %s (%s); "
				      "refusing",
			 s->ns->name, strerror(-e));
		return e;
	}
	x->umem = mmap(NULL, (size_t)XDP_FRAMES * XDP_FRAME_SIZE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (x->umem == MAP_FAILED) {
		x->umem = NULL;
		return fail(err, errlen, "the UMEM's memory", errno);
	}
	struct xdp_umem_reg reg = {
		.addr = (uintptr_t)x->umem,
		.len = (uint64_t)XDP_FRAMES * XDP_FRAME_SIZE,
		.chunk_size = XDP_FRAME_SIZE,
	};

	if (setsockopt(x->fd, SOL_XDP, XDP_UMEM_REG, &reg, sizeof(reg)))
		return fail(err, errlen, "XDP_UMEM_REG", errno);
	/* The fill ring is never used (nothing is received) but bind wants one. */
	if (setsockopt(x->fd, SOL_XDP, XDP_UMEM_FILL_RING, &ring, sizeof(ring)) ||
	    setsockopt(x->fd, SOL_XDP, XDP_UMEM_COMPLETION_RING, &ring, sizeof(ring)) ||
	    setsockopt(x->fd, SOL_XDP, XDP_TX_RING, &ring, sizeof(ring)))
		return fail(err, errlen, "ring sizes", errno);
	if (getsockopt(x->fd, SOL_XDP, XDP_MMAP_OFFSETS, &off, &optlen))
		return fail(err, errlen, "XDP_MMAP_OFFSETS", errno);
	if ((e = map_ring(x->fd, &x->tx, &off.tx, sizeof(struct xdp_desc), XDP_PGOFF_TX_RING)) ||
	    (e = map_ring(x->fd, &x->cq, &off.cr, sizeof(uint64_t),
			  XDP_UMEM_PGOFF_COMPLETION_RING)) ||
	    (e = map_ring(x->fd, &x->fq, &off.fr, sizeof(uint64_t), XDP_UMEM_PGOFF_FILL_RING)))
		return fail(err, errlen, "mapping the rings", -e);

	unsigned ifindex = if_nametoindex(NETNS_DEV);
	struct sockaddr_xdp sxdp = {
		.sxdp_family = AF_XDP,
		.sxdp_flags = XDP_USE_NEED_WAKEUP | XDP_COPY,
		.sxdp_ifindex = ifindex,
		.sxdp_queue_id = XDP_QUEUE,
	};

	if (!ifindex)
		return fail(err, errlen, "if_nametoindex(" NETNS_DEV ")", errno);
	/* The socket of the configuration before, closed just now, frees its hold on the
	 * queue only after an RCU grace period and a work item (EBUSY until then). */
	for (int tries = 0; bind(x->fd, (struct sockaddr *)&sxdp, sizeof(sxdp)); tries++) {
		struct timespec ms = { 0, 1000000 };

		if (errno != EBUSY || tries == 2000)
			return fail(err, errlen, "bind to " NETNS_DEV " queue 1", errno);
		nanosleep(&ms, NULL);
	}
	for (uint32_t k = 0; k < XDP_FRAMES; k++)
		x->free[x->nfree++] = (uint64_t)k * XDP_FRAME_SIZE;

	/* The template: the device's MAC (from any socket of the namespace), the neighbour's
	 * MAC, addresses, and each destination's source port (its real UDP socket). */
	struct ifreq ifr;
	unsigned char src_mac[6], dst_mac[6];
	struct in_addr saddr, daddr;
	int any = r->connected ? r->conn[0] : r->shared;

	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", NETNS_DEV);
	if (ioctl(any, SIOCGIFHWADDR, &ifr))
		return fail(err, errlen, "SIOCGIFHWADDR " NETNS_DEV, errno);
	memcpy(src_mac, ifr.ifr_hwaddr.sa_data, 6);
	if (sscanf(NETNS_REMOTE_MAC, "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &dst_mac[0], &dst_mac[1],
		   &dst_mac[2], &dst_mac[3], &dst_mac[4], &dst_mac[5]) != 6 ||
	    inet_pton(AF_INET, NETNS_LOCAL, &saddr) != 1)
		return fail(err, errlen, "addresses", EINVAL);
	for (uint64_t i = 0; i < r->n; i++) {
		struct sockaddr_in a;
		socklen_t alen = sizeof(a);
		int fd = r->connected ? r->conn[i] : r->shared;

		/* Bind a port as the first sendto would, so the frames carry a real one. */
		if (getsockname(fd, (struct sockaddr *)&a, &alen))
			return fail(err, errlen, "getsockname", errno);
		if (!a.sin_port) {
			struct sockaddr_in any4 = { .sin_family = AF_INET };

			alen = sizeof(a);
			if (bind(fd, (struct sockaddr *)&any4, sizeof(any4)) ||
			    getsockname(fd, (struct sockaddr *)&a, &alen))
				return fail(err, errlen, "binding the UDP socket's port", errno);
		}
		daddr = r->dests[i].sin_addr;
		make_template(&x->d[i], src_mac, dst_mac, saddr, daddr, a.sin_port,
			      r->dests[i].sin_port);
	}
	return 0;
}

/* ---- the fan-out ---------------------------------------------------------------------------- */

/* Frames the kernel is done with back to the free list. */
static inline void reap(struct raw_xdp *x)
{
	uint32_t prod = atomic_load_explicit(x->cq.producer, memory_order_acquire);
	const uint64_t *addr = x->cq.desc;

	while (x->cq.cons != prod)
		x->free[x->nfree++] = addr[x->cq.cons++ & x->cq.mask];
	atomic_store_explicit(x->cq.consumer, x->cq.cons, memory_order_release);
}

/* One kick: the kernel takes what it can of the transmit ring. 0, or -errno for good. */
static inline int kick(struct rig *r, struct raw_xdp *x)
{
	if (!(atomic_load_explicit(x->tx.flags, memory_order_relaxed) & XDP_RING_NEED_WAKEUP))
		return 0; /* the driver is at it already (zero copy): nothing to ask */
	r->raw_syscalls++;
	if (sendto(x->fd, NULL, 0, MSG_DONTWAIT, NULL, 0) >= 0)
		return 0;
	/* EAGAIN: it took its batch and wants another kick; EBUSY, ENOBUFS: the device or the
	 * completion ring had no room for now. Retried after reaping. */
	if (errno == EAGAIN || errno == EBUSY || errno == ENOBUFS || errno == EINTR)
		return 0;
	return -errno;
}

uint64_t bench_raw_xdp_fanout(struct rig *r)
{
	struct raw_xdp *x = r->raw_xdp;
	const unsigned char *msg = r->msg;
	const size_t len = r->size;
	const uint32_t tot_len = (uint32_t)(len + 28), udp_len = (uint32_t)(len + 8);
	struct xdp_desc *ring = x->tx.desc;
	uint64_t i = 0;
	unsigned idle = 0;

	if (x->broken)
		return r->n;
	reap(x);
	/* Once per fan-out: the payload's sum and the UDP length, which both checksum places
	 * (pseudo-header and header) carry. */
	const uint32_t fan = fold16(sum16(msg, len, 0)) + 2 * udp_len;
	uint32_t cons = atomic_load_explicit(x->tx.consumer, memory_order_acquire);

	for (;;) {
		uint32_t room = XDP_RING - (x->tx.prod - cons);

		for (; i < r->n && room && x->nfree; i++, room--) {
			const struct xdp_dest *d = &x->d[i];
			uint64_t addr = x->free[--x->nfree];
			unsigned char *f = x->umem + addr;
			struct xdp_desc *desc = &ring[x->tx.prod++ & x->tx.mask];

			memcpy(f, d->tmpl, HDR_LEN);
			memcpy(f + HDR_LEN, msg, len);
			put16(f + 16, tot_len);
			put16(f + 38, udp_len);
			put16(f + 24, ~fold32(d->ip_sum + tot_len) & 0xffff);
			uint32_t c = ~fold32(d->udp_sum + fan) & 0xffff;

			put16(f + 40, c ? c : 0xffff);
			desc->addr = addr;
			desc->len = (uint32_t)(HDR_LEN + len);
			desc->options = 0;
		}
		atomic_store_explicit(x->tx.producer, x->tx.prod, memory_order_release);
		if (i == r->n && cons == x->tx.prod)
			break;
		int e = kick(r, x);
		uint32_t was = cons;

		reap(x);
		cons = atomic_load_explicit(x->tx.consumer, memory_order_acquire);
		if (!e && cons == was && (!x->nfree || i == r->n) && ++idle > KICK_RETRIES)
			e = -ETIMEDOUT;
		else if (cons != was)
			idle = 0;
		if (e) {
			/* What the kernel has not taken is lost to us: count it failed, and what
			 * this fan-out never put in the ring. */
			x->broken = e;
			return (x->tx.prod - cons) + (r->n - i);
		}
	}
	return 0;
}
