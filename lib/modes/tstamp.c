/* SPDX-License-Identifier: MIT */
/*
 * Sampled kernel transmit timestamps (the contract is in include/multisend.h, "Timestamps").
 *
 * A sampled fan-out puts a control message on the prebuilt message header of each destination
 * it stamps (SO_TIMESTAMPING with TX_SCHED | TX_SOFTWARE, and SCM_TS_OPT_ID with a key of its
 * own), so every backend sends those few with sendmsg and everything else as always; the
 * headers are cleared again as soon as the backend returns. Keys are consecutive within a
 * sample, so a stamp finds its destination by subtraction.
 *
 * Two samples per group: the one just sent, and the one before it. After a sampled fan-out
 * has gone out (never before: its subscribers must not wait for it), the sockets' error
 * queues are read and the sample before it is accounted; by then, K fan-outs later, even a
 * real NIC's completions have long arrived. Nothing but the sampled fan-outs pays for any of
 * this.
 *
 * Hardware stamps (MS_TS_HARDWARE): a destination also asks for TX_HARDWARE when the device it
 * leaves by (the kernel's route, lib/os/route.h, kept per destination until rtnetlink says
 * something changed) lists SOF_TIMESTAMPING_TX_HARDWARE (ethtool) and has hardware stamping of
 * transmitted packets on (SIOCGHWTSTAMP), which is read, never set.
 */
#include <errno.h>
#include <time.h> /* before linux/errqueue.h, which uses struct timespec */
#include <linux/errqueue.h>
#include <linux/ethtool.h>
#include <linux/net_tstamp.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "route.h"
#include "shm-format.h"
#include "sys.h"

#ifndef SCM_TS_OPT_ID
#define SCM_TS_OPT_ID 81 /* Linux 6.13, asm-generic/socket.h; newer than this system's headers */
#endif

#ifndef MSG_PROBE
#define MSG_PROBE 0x10 /* the kernel's name; glibc calls the bit MSG_PROXY */
#endif

#define TS_SOCKOPT (SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_OPT_ID | SOF_TIMESTAMPING_OPT_TSONLY)
/* With MS_TS_HARDWARE on a socket one of whose destinations has a device that stamps: the
 * device's stamps reported, and the software one too (OPT_TX_SWHW: otherwise the kernel skips
 * the software stamp of a datagram the device is to stamp). */
#define TS_SOCKOPT_HW (TS_SOCKOPT | SOF_TIMESTAMPING_RAW_HARDWARE | SOF_TIMESTAMPING_OPT_TX_SWHW)
#define TS_TXFLAGS (SOF_TIMESTAMPING_TX_SCHED | SOF_TIMESTAMPING_TX_SOFTWARE)

union ts_ctl {
	char buf[CMSG_SPACE(sizeof(uint32_t)) * 2];
	struct cmsghdr align;
};

struct ts_dest {
	struct ms__bucket *b; /* NULL once the socket has left the group */
	struct msghdr *hdr;   /* armed header, until ms__ts_end */
	int id;
	uint32_t pos;
	uint32_t ifindex; /* MS_TS_HARDWARE: its device, 0 unknown */
	uint32_t got; /* MS_TS_SCHED | MS_TS_SND (software) | MS_TS_HW (the device's) */
	uint64_t sched, snd; /* CLOCK_REALTIME ns */
	uint64_t hw;         /* the device's clock, ns */
};

struct sample {
	bool pending;        /* sent, waiting to be accounted */
	uint64_t t0;         /* its call's CLOCK_REALTIME */
	uint32_t key0;       /* its first key */
	uint32_t size;       /* the group's size then */
	uint32_t start;      /* the group position sent first (not 0 with MS_CFG_ROTATE) */
	uint32_t parts;      /* threads that sent it (workers): > 1, its ends are every part's */
	uint32_t n, cap;
	struct ts_dest *d;
	union ts_ctl *ctl;
};

struct ms__tsgroup {
	struct sample s[2];
	unsigned cur;        /* s[cur]: the latest sample; s[cur ^ 1]: the one before */
	/* the last accounted sample, for ms_group_ts_last */
	uint64_t last_t0;
	uint32_t last_n, last_cap;
	struct ms_ts_dest *last;
	/* MS_TS_HARDWARE: each destination's device by id, ifindex + 1 (0: not looked up), as of
	 * the context's tshw->gen == hwgen. */
	uint32_t *hwdev, hwcap;
	unsigned hwgen;
};

/* The context's side of MS_TS_HARDWARE: its rtnetlink sockets (one thread at a time: the
 * context's) and what the devices it has seen can do. */
#define HW_DEVS 16
struct ms__tshw {
	struct ms__nl *nl; /* NULL: could not be opened, nothing is looked up */
	bool tried;        /* nl was tried */
	unsigned gen;      /* bumped by every change rtnetlink reports: look everything up again */
	struct {
		uint32_t ifindex;
		int8_t hw; /* 1: stamps transmitted packets in hardware now; 0: cannot or off */
	} dev[HW_DEVS];
	unsigned ndev, next;
};

/* ---- the probe ------------------------------------------------------------------------------ */

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int probe_result;

static void fill_ctl(union ts_ctl *c, uint32_t key, bool hw)
{
	struct msghdr m = { .msg_control = c->buf, .msg_controllen = sizeof(c->buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	uint32_t v = TS_TXFLAGS | (hw ? SOF_TIMESTAMPING_TX_HARDWARE : 0);

	memset(c, 0, sizeof(*c));
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SO_TIMESTAMPING;
	cm->cmsg_len = CMSG_LEN(sizeof(v));
	memcpy(CMSG_DATA(cm), &v, sizeof(v));
	cm = CMSG_NXTHDR(&m, cm);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_TS_OPT_ID;
	cm->cmsg_len = CMSG_LEN(sizeof(key));
	memcpy(CMSG_DATA(cm), &key, sizeof(key));
}

static void probe(void)
{
	/* MSG_PROBE parses the control messages and looks up the route, then sends nothing. A
	 * kernel that does not know SCM_TS_OPT_ID says EINVAL; any other outcome (a namespace
	 * without loopback: ENETUNREACH) came after it was accepted. */
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int opt = TS_SOCKOPT;
	probe_result = -ENOTSUP;
	if (fd < 0)
		return;
	if (setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &opt, sizeof(opt)) == 0) {
		union ts_ctl c;
		struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(9),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		char byte = 0;
		struct iovec iov = { &byte, 1 };
		struct msghdr m = { .msg_name = &to, .msg_namelen = sizeof(to), .msg_iov = &iov,
				    .msg_iovlen = 1, .msg_control = c.buf,
				    .msg_controllen = sizeof(c.buf) };
		fill_ctl(&c, 0, false);
		if (sendmsg(fd, &m, MSG_PROBE | MSG_DONTWAIT) == 0 || errno != EINVAL)
			probe_result = 0;
	}
	close(fd);
}

int ms__ts_probe(void)
{
	pthread_once(&probe_once, probe);
	return probe_result;
}

/* ---- reading stamps ------------------------------------------------------------------------- */

static uint64_t ts_ns(const struct timespec *t)
{
	return (uint64_t)t->tv_sec * 1000000000u + (uint64_t)t->tv_nsec;
}

/* One error-queue entry of b's socket. */
static void take(struct ms_ctx *ctx, struct ms__tsgroup *t, struct ms__bucket *b,
		 struct msghdr *m)
{
	const struct sock_extended_err *ee = NULL;
	const struct scm_timestamping *st = NULL;

	for (struct cmsghdr *cm = CMSG_FIRSTHDR(m); cm; cm = CMSG_NXTHDR(m, cm)) {
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPING &&
		    cm->cmsg_len >= CMSG_LEN(sizeof(*st)))
			st = (const struct scm_timestamping *)CMSG_DATA(cm);
		else if (((cm->cmsg_level == SOL_IP && cm->cmsg_type == IP_RECVERR) ||
			  (cm->cmsg_level == SOL_IPV6 && cm->cmsg_type == IPV6_RECVERR)) &&
			 cm->cmsg_len >= CMSG_LEN(sizeof(*ee)))
			ee = (const struct sock_extended_err *)CMSG_DATA(cm);
	}
	if (!st || !ee || ee->ee_errno != ENOMSG || ee->ee_origin != SO_EE_ORIGIN_TIMESTAMPING ||
	    (ee->ee_info != SCM_TSTAMP_SCHED && ee->ee_info != SCM_TSTAMP_SND)) {
		ctx->c.ts_foreign++;
		return;
	}
	struct ts_dest *d = NULL;
	for (int k = 0; k < 2 && !d; k++) {
		struct sample *x = &t->s[k];
		uint32_t idx = ee->ee_data - x->key0;
		if (x->pending && idx < x->n && x->d[idx].b == b)
			d = &x->d[idx];
	}
	if (!d) {
		ctx->c.ts_late++;
		return;
	}
	if (ee->ee_info == SCM_TSTAMP_SND) {
		/* The software stamp in ts[0], the device's in ts[2]: each comes on its own. */
		if (st->ts[2].tv_sec || st->ts[2].tv_nsec) {
			d->hw = ts_ns(&st->ts[2]);
			d->got |= MS_TS_HW;
		}
		if (st->ts[0].tv_sec || st->ts[0].tv_nsec) {
			d->snd = ts_ns(&st->ts[0]);
			d->got |= MS_TS_SND;
		}
	} else {
		d->sched = ts_ns(&st->ts[0]);
		d->got |= MS_TS_SCHED;
	}
}

#define RX_BATCH 32

/* Read everything on b's error queue. Returns the entries read. */
static int drain(struct ms_ctx *ctx, struct ms__tsgroup *t, struct ms__bucket *b)
{
	struct mmsghdr mm[RX_BATCH];
	union {
		char buf[256];
		struct cmsghdr align;
	} ctl[RX_BATCH];
	int total = 0;

	for (;;) {
		for (int k = 0; k < RX_BATCH; k++)
			mm[k].msg_hdr = (struct msghdr){ .msg_control = ctl[k].buf,
							 .msg_controllen = sizeof(ctl[k].buf) };
		int r = recvmmsg(b->fd, mm, RX_BATCH, MSG_ERRQUEUE | MSG_DONTWAIT, NULL);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return total;
		for (int k = 0; k < r; k++)
			take(ctx, t, b, &mm[k].msg_hdr);
		total += r;
		if (r < RX_BATCH)
			return total;
	}
}

/* Does b's fd still name the socket it was added as? (Teardown: "close, then free the group"
 * is common, and another thread may own the number by then.) */
static bool same_socket(const struct ms__bucket *b)
{
	struct stat st;
	return fstat(b->fd, &st) == 0 && (uint64_t)st.st_ino == b->ino;
}

/* Read the error queues of every socket a pending sample stamped (checked: only at teardown,
 * where the sockets may already be closed). */
static int collect_checked(struct ms_group *g, bool checked)
{
	struct ms_ctx *ctx = g->ctx;
	struct ms__tsgroup *t = g->ts;
	uint32_t epoch = ++ctx->ts_epoch;
	int n = 0;

	for (int k = 0; t && k < 2; k++) {
		const struct sample *x = &t->s[k];
		for (uint32_t i = 0; x->pending && i < x->n; i++) {
			struct ms__bucket *b = x->d[i].b;
			if (b && b->ts_epoch != epoch) {
				b->ts_epoch = epoch;
				if (!checked || same_socket(b))
					n += drain(ctx, t, b);
			}
		}
	}
	return n;
}

static int collect(struct ms_group *g)
{
	return collect_checked(g, false);
}

static uint64_t lag(uint64_t stamp, uint64_t t0)
{
	return stamp > t0 ? stamp - t0 : 0;
}

static uint64_t best(const struct ts_dest *d)
{
	return (d->got & MS_TS_HW) ? d->hw : (d->got & MS_TS_SND) ? d->snd : d->sched;
}

/* Account a pending sample: counters, histograms, and the copy ms_group_ts_last reads. */
static void account(struct ms_ctx *ctx, struct ms__tsgroup *tg, struct sample *t)
{
	struct ms_shm_slot *sl = ms__own_slot(ctx);

	if (!t->pending)
		return;
	t->pending = false;
	if (t->n > tg->last_cap) {
		if (!ms__grow(ctx, &tg->last, t->n * sizeof(*tg->last)))
			tg->last_cap = t->n; /* else no copy this time */
	}
	tg->last_n = t->n <= tg->last_cap ? t->n : 0;
	tg->last_t0 = t->t0;

	ms__shm_begin(&sl->seq);
	for (uint32_t i = 0; i < t->n; i++) {
		const struct ts_dest *d = &t->d[i];
		bool hw = d->got & MS_TS_HW;
		if (tg->last_n)
			tg->last[i] = (struct ms_ts_dest){
				.id = d->id,
				.flags = d->got | (hw ? MS_TS_SND : 0),
				.pos = d->pos,
				.ifindex = d->ifindex,
				.sched_ns = (d->got & MS_TS_SCHED) ? (int64_t)(d->sched - t->t0) : 0,
				.snd_ns = hw ? (int64_t)(d->hw - t->t0)
				      : (d->got & MS_TS_SND) ? (int64_t)(d->snd - t->t0) : 0,
			};
		if (!d->got) {
			ctx->c.ts_missing++;
			continue;
		}
		ctx->c.ts_stamped++;
		ctx->c.ts_hw_stamped += hw;
		ms__hist_add(&sl->hist[MS__H_DEST_LAG], lag(best(d), t->t0));
	}
	/* The first and the last destination are the sample's first and last entries (the
	 * fan-out's ends, when they could be stamped). */
	if (t->n && t->parts > 1) {
		/* Parts sent at once: the first destination out is the earliest of the parts'
		 * ends, the last the latest; only a sample with every end stamped counts. */
		uint64_t lo = UINT64_MAX, hi = 0;
		bool all = true;
		for (uint32_t i = 0; i < t->n; i++) {
			const struct ts_dest *d = &t->d[i];
			all = all && d->got;
			if (d->got) {
				lo = best(d) < lo ? best(d) : lo;
				hi = best(d) > hi ? best(d) : hi;
			}
		}
		if (all) {
			ms__hist_add(&sl->hist[MS__H_CALL_FIRST], lag(lo, t->t0));
			ms__hist_add(&sl->hist[MS__H_CALL_LAST], lag(hi, t->t0));
			ms__hist_add(&sl->hist[MS__H_FIRST_LAST], hi - lo);
		}
	} else if (t->n) {
		/* Only the fan-out's own ends count: a first or last destination that could not
		 * be stamped leaves its histogram alone rather than lend it a neighbour. */
		const struct ts_dest *f = &t->d[0], *l = &t->d[t->n - 1];
		uint32_t lpos = (t->start ? t->start : t->size) - 1;
		bool fok = f->got && f->pos == t->start, lok = l->got && l->pos == lpos;
		if (fok)
			ms__hist_add(&sl->hist[MS__H_CALL_FIRST], lag(best(f), t->t0));
		if (lok)
			ms__hist_add(&sl->hist[MS__H_CALL_LAST], lag(best(l), t->t0));
		if (fok && lok)
			ms__hist_add(&sl->hist[MS__H_FIRST_LAST], lag(best(l), best(f)));
	}
	__atomic_store_n(&sl->updated_ns, ms__realtime_ns(), __ATOMIC_RELAXED);
	ms__publish_counters(ctx); /* the counters and the histograms move together */
	ms__shm_end(&sl->seq);
	ms__publish_all(ctx);
}

/* ---- arming a sample ------------------------------------------------------------------------ */

/* May this socket be stamped? Sets it up on first use. */
static bool stampable(struct ms__bucket *b)
{
	if (b->ts_state)
		return b->ts_state > 0;
	b->ts_state = -1;
	if (b->type != SOCK_DGRAM || (b->family != AF_INET && b->family != AF_INET6))
		return false;
	int cur = 0, opt = TS_SOCKOPT;
	socklen_t len = sizeof(cur);
	if (getsockopt(b->fd, SOL_SOCKET, SO_TIMESTAMPING, &cur, &len) < 0)
		return false;
	/* Set by this library already (another group or context on the socket), or set now;
	 * anything else is the caller's own setting, not ours to change. */
	if (cur == TS_SOCKOPT_HW) {
		b->ts_state = 2;
		return true;
	}
	if (cur != TS_SOCKOPT &&
	    (cur != 0 || setsockopt(b->fd, SOL_SOCKET, SO_TIMESTAMPING, &opt, sizeof(opt)) < 0))
		return false;
	b->ts_state = 1;
	return true;
}

/* ---- hardware stamps (MS_TS_HARDWARE) --------------------------------------------------------- */

/* Does device ifindex stamp transmitted packets in hardware now? Its capabilities (ethtool)
 * and its setting (SIOCGHWTSTAMP; a driver that cannot say is given the benefit of the
 * doubt: asking costs nothing where no stamp comes). */
static bool dev_stamps(uint32_t ifindex)
{
	char name[IF_NAMESIZE];
	struct ethtool_ts_info info = { .cmd = ETHTOOL_GET_TS_INFO };
	struct hwtstamp_config cfg = { 0 };
	struct ifreq ifr;
	bool ok = false;

	if (!ifindex || !if_indextoname(ifindex, name))
		return false;
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, name, sizeof(ifr.ifr_name));
	ifr.ifr_data = (void *)&info;
	if (ioctl(fd, SIOCETHTOOL, &ifr) == 0 && (info.so_timestamping & SOF_TIMESTAMPING_TX_HARDWARE)) {
		ifr.ifr_data = (void *)&cfg;
		ok = ioctl(fd, SIOCGHWTSTAMP, &ifr) < 0 ? errno == EOPNOTSUPP || errno == EINVAL
							 : cfg.tx_type != HWTSTAMP_TX_OFF;
	}
	close(fd);
	return ok;
}

/* The context's look-ups, ready for this sample (NULL: none can be made: a forked child shares
 * its parent's netlink socket, or rtnetlink cannot be opened). */
static struct ms__tshw *hw_ready(struct ms_ctx *ctx)
{
	if (ms__forked(ctx))
		return NULL;
	if (!ctx->tshw) {
		int err;
		ctx->tshw = ms__zalloc(ctx, sizeof(*ctx->tshw), &err);
		if (!ctx->tshw)
			return NULL;
	}
	struct ms__tshw *h = ctx->tshw;
	if (!h->tried) {
		h->tried = true;
		if (ms__nl_open(&h->nl))
			h->nl = NULL;
	}
	if (!h->nl)
		return NULL;
	uint64_t sys = 0; /* (not counted: the stamps' own reads are not the send's) */
	if (ms__nl_changed(h->nl, &sys)) { /* links, addresses, routes, neighbours: all again */
		h->gen++;
		h->ndev = 0;
	}
	return h;
}

static bool dev_hw(struct ms__tshw *h, uint32_t ifindex)
{
	for (unsigned k = 0; k < h->ndev; k++)
		if (h->dev[k].ifindex == ifindex)
			return h->dev[k].hw > 0;
	bool hw = dev_stamps(ifindex);
	unsigned k = h->ndev < HW_DEVS ? h->ndev++ : h->next++ % HW_DEVS;
	h->dev[k].ifindex = ifindex;
	h->dev[k].hw = hw;
	return hw;
}

/* The device destination j of b leaves by: the kernel's route from the socket (its bound
 * address and port, device, mark, owner and TOS), 0 when there is none. */
static uint32_t route_dev(struct ms__tshw *h, const struct ms__bucket *b, uint32_t j)
{
	struct sockaddr_storage peer, self;
	const struct sockaddr *dst = (const struct sockaddr *)&b->dests[j].addr;
	socklen_t dlen = b->dests[j].addrlen, slen = sizeof(self), plen = sizeof(peer);
	int oif = 0;
	uint32_t mark = 0;
	socklen_t ol = sizeof(oif), ml = sizeof(mark);
	struct ms__route r;

	if (!dlen) { /* the connected peer */
		if (getpeername(b->fd, (struct sockaddr *)&peer, &plen) < 0)
			return 0;
		dst = (const struct sockaddr *)&peer;
		dlen = plen;
	}
	if (getsockname(b->fd, (struct sockaddr *)&self, &slen) < 0)
		slen = 0;
	if (getsockopt(b->fd, SOL_SOCKET, SO_BINDTOIFINDEX, &oif, &ol) < 0)
		oif = 0;
	if (getsockopt(b->fd, SOL_SOCKET, SO_MARK, &mark, &ml) < 0)
		mark = 0;
	/* The rest of what the kernel's lookup matches policy rules on: the socket's owner
	 * and its TOS / traffic class (that of the destination's family). */
	struct ms__flow fl = { .oif = oif, .mark = mark };
	struct stat sb;
	if (fstat(b->fd, &sb) == 0) {
		fl.uid = (uint32_t)sb.st_uid;
		fl.has_uid = true;
	}
	int tos = 0;
	socklen_t tl = sizeof(tos);
	const bool v6 = dst->sa_family == AF_INET6 &&
			!IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)dst)->sin6_addr);
	if (getsockopt(b->fd, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_TCLASS : IP_TOS, &tos,
		       &tl) == 0 && tos > 0)
		fl.tos = (uint8_t)tos;
	if (ms__route_get(h->nl, dst, dlen, slen ? (const struct sockaddr *)&self : NULL, &fl,
			  &r) < 0)
		return 0;
	return r.ifindex > 0 ? (uint32_t)r.ifindex : 0;
}

/* Destination j of b (id `id`, never negative): its device, looked up once per change. */
static uint32_t dest_dev(struct ms_ctx *ctx, struct ms__tsgroup *tg, struct ms__tshw *h,
			 const struct ms__bucket *b, uint32_t j, int id)
{
	if (tg->hwgen != h->gen) {
		if (tg->hwdev)
			memset(tg->hwdev, 0, tg->hwcap * sizeof(*tg->hwdev));
		tg->hwgen = h->gen;
	}
	if ((uint32_t)id >= tg->hwcap) {
		uint32_t cap = tg->hwcap ? tg->hwcap : 64;
		while (cap <= (uint32_t)id)
			cap *= 2;
		if (ms__grow(ctx, &tg->hwdev, cap * sizeof(*tg->hwdev)))
			return route_dev(h, b, j);
		memset(tg->hwdev + tg->hwcap, 0, (cap - tg->hwcap) * sizeof(*tg->hwdev));
		tg->hwcap = cap;
	}
	if (!tg->hwdev[id])
		tg->hwdev[id] = route_dev(h, b, j) + 1;
	return tg->hwdev[id] - 1;
}

/* Both samples, older first. */
static void account_all(struct ms_group *g)
{
	struct ms__tsgroup *t = g->ts;
	account(g->ctx, t, &t->s[t->cur ^ 1]);
	account(g->ctx, t, &t->s[t->cur]);
}

static bool grow(const struct ms_ctx *ctx, struct sample *t, uint32_t n)
{
	if (n <= t->cap)
		return true;
	if (ms__grow(ctx, &t->d, n * sizeof(*t->d)) || ms__grow(ctx, &t->ctl, n * sizeof(*t->ctl)))
		return false; /* this sample is not taken; the next one tries again */
	t->cap = n;
	return true;
}

static void arm_one(struct ms__send *s, struct sample *t, struct ms__bucket *b, uint32_t j,
		    uint32_t pos)
{
	struct ms_ctx *ctx = s->g->ctx;

	ctx->c.ts_requested++;
	if (!stampable(b)) {
		ctx->c.ts_unsupported++;
		return;
	}
	uint32_t i = t->n++, ifindex = 0;
	bool hw = false;
	if (ctx->ts_flags & MS_TS_HARDWARE) {
		struct ms__tshw *th = hw_ready(ctx);
		if (th) {
			ifindex = dest_dev(ctx, s->g->ts, th, b, j, b->dests[j].id);
			hw = dev_hw(th, ifindex);
		}
		/* The device's stamps reported on this socket from now on. */
		if (hw && b->ts_state == 1) {
			int opt = TS_SOCKOPT_HW;
			if (setsockopt(b->fd, SOL_SOCKET, SO_TIMESTAMPING, &opt, sizeof(opt)) == 0)
				b->ts_state = 2;
		}
		hw = hw && b->ts_state == 2;
		ctx->c.ts_hw_unavailable += !hw;
	}
	struct msghdr *h = &b->msgs[j].msg_hdr;
	fill_ctl(&t->ctl[i], t->key0 + i, hw);
	h->msg_control = t->ctl[i].buf;
	h->msg_controllen = sizeof(t->ctl[i].buf);
	t->d[i] = (struct ts_dest){ .b = b, .hdr = h, .id = b->dests[j].id, .pos = pos,
				    .ifindex = ifindex };
}

/* The destination at plan position i, unless its backlog goes first (lib/modes/slow.c). */
static void arm_pos(struct ms__send *s, struct sample *t, size_t i)
{
	const struct ms__idslot *id = &s->g->ids[s->g->plan[i].id];
	if (!id->b->stalled)
		arm_one(s, t, id->b, id->pos, (uint32_t)i);
}

void ms__ts_begin(struct ms__send *s)
{
	struct ms_group *g = s->g;
	struct ms_ctx *ctx = g->ctx;

	if (!g->ts) {
		int err;
		g->ts = ms__zalloc(ctx, sizeof(*g->ts), &err);
		if (!g->ts)
			return; /* not sampled this time; the send goes on */
	}
	struct ms__tsgroup *tg = g->ts;
	tg->cur ^= 1;
	struct sample *t = &tg->s[tg->cur];
	if (t->pending) { /* not accounted after its own fan-out (no memory then) */
		collect(g);
		account(ctx, tg, t);
	}

	bool all = ctx->ts_flags & MS_TS_ALL_DESTS;
	uint32_t want = all ? (uint32_t)g->size : s->parts > 1 ? 2 * s->parts
								 : (g->size > 1 ? 2 : 1);
	if (!grow(ctx, t, want))
		return;
	t->n = 0;
	t->size = (uint32_t)g->size;
	t->key0 = ctx->ts_key;
	t->start = (uint32_t)s->first;
	t->parts = s->parts;
	ctx->c.ts_sampled++;
	/* In send order (rotated or not): the entries' first and last are the fan-out's; a
	 * destination whose backlog goes first is not sent by the executor. */
	const size_t n = g->size;
	if (all) {
		for (MS__EACH(i, left, s->first, n, n))
			arm_pos(s, t, i);
	} else {
		/* Each part's first and last (one part: the fan-out's). */
		for (uint32_t p = 0; p < s->parts; p++) {
			size_t off, cnt;
			ms__part_range(n, s->parts, p, &off, &cnt);
			arm_pos(s, t, (t->start + off) % n);
			if (cnt > 1)
				arm_pos(s, t, (t->start + off + cnt - 1) % n);
		}
	}
	ctx->ts_key += t->n;
	if (!t->n)
		return;
	t->pending = true;
	s->ts_armed = true;
	s->b.hdr = true; /* the armed headers must go with sendmsg */
	t->t0 = ms__realtime_ns(); /* last: the wait measured is the backend's alone */
}

void ms__ts_end(struct ms__send *s)
{
	struct ms__tsgroup *tg = s->g->ts;
	struct sample *t = &tg->s[tg->cur];
	for (uint32_t i = 0; i < t->n; i++) {
		t->d[i].hdr->msg_control = NULL;
		t->d[i].hdr->msg_controllen = 0;
		t->d[i].hdr = NULL;
	}
	s->ts_armed = false;
	/* The fan-out has gone: now the previous sample's stamps are read and accounted. */
	if (tg->s[tg->cur ^ 1].pending) {
		collect(s->g);
		account(s->g->ctx, tg, &tg->s[tg->cur ^ 1]);
	}
}

/* ---- group changes -------------------------------------------------------------------------- */

void ms__ts_bucket_gone(struct ms_group *g, struct ms__bucket *b)
{
	struct ms__tsgroup *tg = g->ts;
	bool drained = false;
	for (int k = 0; tg && k < 2; k++) {
		for (uint32_t i = 0; tg->s[k].pending && i < tg->s[k].n; i++) {
			if (tg->s[k].d[i].b != b)
				continue;
			/* Its stamps can no longer be read through this group: read them now,
			 * unless the socket was closed first and its number names another file. */
			if (!drained && same_socket(b))
				drain(g->ctx, tg, b);
			drained = true;
			tg->s[k].d[i].b = NULL;
		}
	}
	/* SO_TIMESTAMPING stays set: without a request on a send it stamps nothing, and another
	 * group or context may be sampling on the same socket. */
}

void ms__ts_group_free(struct ms_group *g)
{
	struct ms__tsgroup *t = g->ts;
	if (!t)
		return;
	collect_checked(g, true);
	account_all(g);
	ms__publish(g->ctx);
	for (int k = 0; k < 2; k++) {
		free(t->s[k].d);
		free(t->s[k].ctl);
	}
	free(t->last);
	free(t->hwdev);
	free(t);
	g->ts = NULL;
}

void ms__ts_ctx_free(struct ms_ctx *ctx)
{
	if (!ctx->tshw)
		return;
	/* A forked child's context shares the socket numbers with its parent's: its own copies
	 * are closed all the same (they are its). */
	if (ctx->tshw->nl)
		ms__nl_close(ctx->tshw->nl);
	free(ctx->tshw);
	ctx->tshw = NULL;
}

/* ---- public calls --------------------------------------------------------------------------- */

int ms_group_ts_collect(struct ms_group *g)
{
	if (!g)
		return -EINVAL;
	ms__quiesce(g->ctx);
	if (!g->ts)
		return 0;
	int n = collect(g);
	account_all(g);
	ms__publish(g->ctx);
	return n;
}

int ms_group_ts_last(const struct ms_group *g, struct ms_ts_dest *out, size_t n,
		     uint64_t *call_ns)
{
	if (!g || (!out && n))
		return -EINVAL;
	ms__quiesce(g->ctx);
	const struct ms__tsgroup *t = g->ts;
	uint32_t have = t ? t->last_n : 0;
	if (call_ns)
		*call_ns = have ? t->last_t0 : 0;
	for (size_t i = 0; i < have && i < n; i++)
		out[i] = t->last[i];
	return (int)have;
}
