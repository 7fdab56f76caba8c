/* SPDX-License-Identifier: MIT */
/*
 * The kernel fan-out's program: tc egress (tcx or clsact) on one Ethernet device. It follows
 * abi.h, whose top comment is the contract; what is here is how.
 *
 * Every packet the device sends passes through here, the clones this program makes among them
 * (bpf_clone_redirect re-enters the same egress hook), so the first thing done is the cheapest
 * rejection: an IPv4 or IPv6 UDP datagram whose destination is neither in the template prefix
 * nor a multicast group goes on untouched after one map lookup (an array: inlined by the
 * verifier) and two compares.
 *
 * A template that cannot be run (another socket's, a stale sequence, a malformed header, a
 * fragment) is dropped without touching the slot's state: the publisher then finds its slot
 * still ARMED and sends the slice by the kernel's path, so nothing is lost and nothing goes
 * twice. Once the state is RUNNING, every destination is attempted and its result written.
 *
 * Built with clang -target bpf -mcpu=v3 (32-bit compare-and-swap on the slot's state).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "abi.h"

#define KF_IPPROTO_UDP 17
#define KF_AF_INET 2
#define KF_AF_INET6 10
#define KF_EPERM 1
#define KF_ENOBUFS 105
#define KF_NET_XMIT_CN 2
#define KF_IP_MF 0x2000
#define KF_IP_OFFSET 0x1fff

#define KF_ETH_LEN 14u
#define KF_IP4_LEN 20u
#define KF_IP6_LEN 40u
#define KF_UDP_CSUM 6u /* offsetof(struct udphdr, check) */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kf_ctl);
} kf_ctl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KF_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct kf_slot);
} kf_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KF_SLOTS * KF_SLICE_MAX);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct kf_dest);
} kf_dests SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KF_SLOTS * KF_SLICE_MAX);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __s64);
} kf_status SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KF_STAT_N);
	__type(key, __u32);
	__type(value, __u64);
} kf_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, KF_POLICY_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct kf_prefix);
	__type(value, struct kf_ports);
} kf_policy SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KF_GROUPS_MAX);
	__type(key, struct kf_gkey);
	__type(value, __u32);
} kf_groups SEC(".maps");

/*
 * One run over a slot's destinations. bpf_loop's context, on the stack, holds only what stays
 * the same for the whole run; what changes per destination (the packet's current address and
 * port, the counts) is in a per-CPU scratch map the verifier does not track, or it would walk
 * the callback once per value of each count (it did: a million instructions, refused).
 */
struct kf_run {
	struct __sk_buff *skb;
	struct kf_work *w;
	__u32 base;     /* slot * KF_SLICE_MAX */
	__u32 ifindex;
	__u32 l4;       /* offset of the UDP header */
	__u32 v6;
	__u32 group;    /* a multicast group's slot: no statuses */
};

struct kf_work {
	__u32 busy;     /* a run on this CPU is under way (a clone that re-entered: not ours) */
	__u32 attempted;
	__u32 clones, errors, refused, malformed;
	__be16 cur_port; /* what the packet holds now */
	__u16 pad;
	__be32 cur4;
	__u8 cur6[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kf_work);
} kf_work SEC(".maps");

static __always_inline void kf_stat(__u32 i, __u64 n)
{
	__u64 *v;

	if (!n)
		return;
	v = bpf_map_lookup_elem(&kf_stats, &i);
	if (v)
		*v += n;
}

/* The policy: an LPM lookup of the destination, then its port in the entry's range. */
static __always_inline int kf_allowed(const struct kf_dest *d, __u32 v6)
{
	struct kf_prefix key = {};
	struct kf_ports *p;
	__u16 port = bpf_ntohs(d->port);

	if (v6) {
		key.prefixlen = 32 + 128;
		key.family = KF_AF_INET6;
		__builtin_memcpy(key.addr, d->addr.v6, 16);
	} else {
		key.prefixlen = 32 + 32;
		key.family = KF_AF_INET;
		__builtin_memcpy(key.addr, &d->addr.v4, 4);
	}
	p = bpf_map_lookup_elem(&kf_policy, &key);
	return p && port >= p->lo && port <= p->hi;
}

/*
 * Rewrite the packet's destination to d (MAC, address, port), the checksums incrementally:
 * the IPv4 header's over the address, UDP's over the address (pseudo-header) and the port.
 * BPF_F_MARK_MANGLED_0 on every update, both families: a checksum that an update makes zero
 * is written 0xffff, as the stack writes it (an incremental update lands on 0x0000, which
 * IPv6 receivers drop as a checksum error and IPv4 ones read as "no checksum"; and a 0 left
 * by the address's update would make the port's update skip the field). An IPv4 checksum of
 * 0 (none) stays 0; so does an IPv6 one (UDP_NO_CHECK6_TX: the sender's choice).
 * With CHECKSUM_PARTIAL (offload) the helpers update only the pseudo-header sum, as they must.
 */
static __always_inline int kf_rewrite(struct kf_run *r, const __u8 *mac, const void *addr,
				      __be16 port)
{
	struct __sk_buff *skb = r->skb;
	const __u64 mangled = BPF_F_MARK_MANGLED_0;
	__u32 csum = r->l4 + KF_UDP_CSUM;

	if (bpf_skb_store_bytes(skb, 0, mac, 6, 0))
		return -1;
	if (r->v6) {
		__s64 diff = bpf_csum_diff((__be32 *)r->w->cur6, 16, (__be32 *)addr, 16, 0);

		if (diff < 0 ||
		    bpf_l4_csum_replace(skb, csum, 0, diff, BPF_F_PSEUDO_HDR | mangled) ||
		    bpf_skb_store_bytes(skb, KF_ETH_LEN + offsetof(struct ipv6hdr, daddr), addr,
					16, 0))
			return -1;
		__builtin_memcpy(r->w->cur6, addr, 16);
	} else {
		__be32 to = *(const __be32 *)addr;

		if (to != r->w->cur4) {
			if (bpf_l3_csum_replace(skb, KF_ETH_LEN + offsetof(struct iphdr, check),
						r->w->cur4, to, 4) ||
			    bpf_l4_csum_replace(skb, csum, r->w->cur4, to,
						BPF_F_PSEUDO_HDR | mangled | 4) ||
			    bpf_skb_store_bytes(skb, KF_ETH_LEN + offsetof(struct iphdr, daddr), &to,
						4, 0))
				return -1;
			r->w->cur4 = to;
		}
	}
	if (port != r->w->cur_port) {
		if (bpf_l4_csum_replace(skb, csum, r->w->cur_port, port, mangled | 2) ||
		    bpf_skb_store_bytes(skb, r->l4 + offsetof(struct udphdr, dest), &port, 2, 0))
			return -1;
		r->w->cur_port = port;
	}
	return 0;
}

/* One destination: bpf_loop's callback. Returns 1 to stop (a map index out of range). */
static long kf_one(__u32 i, void *arg)
{
	struct kf_run *r = arg;
	__u32 idx = r->base + i;
	struct kf_dest *d;
	__s64 *st;
	long ret;

	d = bpf_map_lookup_elem(&kf_dests, &idx);
	st = bpf_map_lookup_elem(&kf_status, &idx);
	if (!d || !st)
		return 1;
	r->w->attempted = i + 1;
	if (d->flags & KF_DEST_SKIP)
		return 0;
	if (!kf_allowed(d, r->v6)) {
		r->w->refused++;
		if (!r->group)
			*st = -KF_EPERM;
		return 0;
	}
	if (kf_rewrite(r, d->mac, &d->addr, d->port)) {
		/* The helpers fail only on a packet they cannot write (not linear, too short):
		 * the same for every destination, so stop here; the rest keep no status. */
		r->w->malformed++;
		if (!r->group)
			*st = -KF_ENOBUFS;
		r->w->attempted = i;
		return 1;
	}
	ret = bpf_clone_redirect(r->skb, r->ifindex, 0);
	/*
	 * dev_queue_xmit's NET_XMIT_* come back as they are (net/core/filter.c: __bpf_tx_skb
	 * returns them unconverted): NET_XMIT_DROP (1), a full queue or backlog, the clone
	 * freed. The kernel's own UDP path turns them into errnos with net_xmit_errno():
	 * NET_XMIT_CN is success, anything else positive -ENOBUFS. So do the same.
	 */
	if (ret > 0)
		ret = ret == KF_NET_XMIT_CN ? 0 : -KF_ENOBUFS;
	if (ret)
		r->w->errors++;
	else
		r->w->clones++;
	if (!r->group)
		*st = ret;
	return 0;
}

static __always_inline void kf_count(struct kf_run *r)
{
	kf_stat(KF_STAT_CLONES, r->w->clones);
	kf_stat(KF_STAT_CLONE_ERR, r->w->errors);
	kf_stat(KF_STAT_POLICY, r->w->refused);
	kf_stat(KF_STAT_MALFORMED, r->w->malformed);
}

/*
 * What is not ours goes on, and to whatever else is on the hook: the next tcx program and the
 * classic tc filters (TCX_NEXT under tcx, "continue" under clsact, both TC_ACT_UNSPEC). Not
 * TC_ACT_OK, which under tcx is TCX_PASS and would skip them: the backstop below, and any
 * filter an administrator has on the device.
 */
#define KF_PASS TC_ACT_UNSPEC

/*
 * The template consumed, and the sender told success. TC_ACT_STOLEN does that under clsact, but
 * tcx knows only NEXT, PASS, DROP and REDIRECT and takes any other code as NEXT: the template,
 * rewritten to the last destination, went on (a duplicate, found by the end-to-end test).
 * TC_ACT_SHOT (DROP) would be ENOBUFS to a socket with IP_RECVERR and an SndbufErrors count
 * for every other. REDIRECT to no device (ifindex 0) is consumed under both, and egress
 * returns NET_XMIT_SUCCESS for it (net/core/dev.c: sch_handle_egress, skb_do_redirect).
 */
static __always_inline int kf_consume(void)
{
	return bpf_redirect(0, 0);
}

/*
 * A template: slot k, sequence seq (from the port). Owner's cookie, then ARMED -> RUNNING by
 * compare-and-swap, run, DONE. Returns the tc verdict.
 */
static __always_inline int kf_template(struct kf_run *r, const struct kf_ctl *ctl, __u32 k,
				       __u16 dport)
{
	struct kf_slot *s;
	__u32 armed, running, n;

	if (!(dport & 0x8000) || k >= KF_SLOTS) {
		kf_stat(KF_STAT_MALFORMED, 1);
		return TC_ACT_SHOT;
	}
	s = bpf_map_lookup_elem(&kf_slots, &k);
	if (!s) {
		kf_stat(KF_STAT_MALFORMED, 1);
		return TC_ACT_SHOT;
	}
	if (s->cookie != bpf_get_socket_cookie(r->skb)) {
		kf_stat(KF_STAT_NOT_OWNER, 1);
		return TC_ACT_SHOT;
	}
	n = s->count;
	if (n > ctl->slice || n > KF_SLICE_MAX) {
		kf_stat(KF_STAT_MALFORMED, 1);
		return TC_ACT_SHOT;
	}
	armed = KF_STATE(dport, KF_ARMED);
	running = KF_STATE(dport, KF_RUNNING);
	if (__sync_val_compare_and_swap(&s->state, armed, running) != armed) {
		kf_stat(KF_STAT_STALE, 1);
		return TC_ACT_SHOT;
	}
	r->base = k * KF_SLICE_MAX;
	/* Once, so that a multi-queue device picks a queue without dissecting each clone. */
	bpf_set_hash(r->skb, 0x9e3779b9u ^ k);
	r->w->busy = 1;
	bpf_loop(n, kf_one, r, 0);
	r->w->busy = 0;
	s->done = r->w->attempted;
	kf_count(r);
	kf_stat(KF_STAT_TEMPLATES, 1);
	/* Release: the statuses and done are visible before DONE (a full barrier). */
	__sync_val_compare_and_swap(&s->state, running, KF_STATE(dport, KF_DONE));
	return kf_consume();
}

/*
 * A datagram to a multicast group with members: a clone per member, then the original
 * restored (MAC, address, port) and passed on, unless the slot says KF_GROUP_CONSUME.
 */
static __always_inline int kf_group(struct kf_run *r, struct kf_gkey *key, const __u8 *dst)
{
	__u32 *kp, k, n;
	struct kf_slot *s;
	__u8 mac[6];
	__u8 addr[16];
	__be16 port = key->port;

	kp = bpf_map_lookup_elem(&kf_groups, key);
	if (!kp)
		return KF_PASS;
	k = *kp;
	s = bpf_map_lookup_elem(&kf_slots, &k);
	if (!s || k >= KF_SLOTS)
		return KF_PASS;
	n = s->count;
	if (n > KF_SLICE_MAX)
		n = KF_SLICE_MAX;
	__builtin_memcpy(mac, dst, 6);
	__builtin_memcpy(addr, key->addr, 16);
	r->base = k * KF_SLICE_MAX;
	r->group = 1;
	bpf_set_hash(r->skb, 0x9e3779b9u ^ k);
	r->w->busy = 1;
	bpf_loop(n, kf_one, r, 0);
	r->w->busy = 0;
	kf_count(r);
	kf_stat(KF_STAT_GROUP_PKTS, 1);
	if (s->flags & KF_GROUP_CONSUME)
		return kf_consume();
	if (kf_rewrite(r, mac, addr, port)) {
		kf_stat(KF_STAT_MALFORMED, 1);
		return TC_ACT_SHOT;
	}
	return KF_PASS;
}

/* The CPU's scratch, zeroed for a run; NULL when a run is under way on this CPU already (a
 * clone re-entered the hook and looks like a template or group datagram: never run nested). */
/* In the IPv4 template prefix (a /16: its low 16 bits are the slot). */
static __always_inline int kf_tmpl4(const struct kf_ctl *ctl, __be32 daddr)
{
	return ctl->tmpl4 && (daddr & bpf_htonl(0xffff0000)) == ctl->tmpl4;
}

/* In the IPv6 template prefix: the /64 (words 0-1), or a template's exact form (words 0-2:
 * the next 32 bits zero, the last the slot). */
static __always_inline int kf_tmpl6(const struct kf_ctl *ctl, const __u32 *a, int exact)
{
	const __u32 *t = (const __u32 *)ctl->tmpl6;

	return (t[0] | t[1]) && a[0] == t[0] && a[1] == t[1] && (!exact || a[2] == t[2]);
}

static __always_inline struct kf_work *kf_work_get(void)
{
	__u32 zero = 0;
	struct kf_work *w = bpf_map_lookup_elem(&kf_work, &zero);

	if (!w || w->busy)
		return NULL;
	__builtin_memset(w, 0, sizeof(*w));
	return w;
}

SEC("tc")
int kf_egress(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct kf_run r = {};
	struct kf_gkey gkey = {};
	struct kf_ctl *ctl;
	struct kf_work *w;
	struct udphdr *udp;
	__u32 zero = 0;

	if ((void *)(eth + 1) > end)
		return KF_PASS;
	ctl = bpf_map_lookup_elem(&kf_ctl, &zero);
	if (!ctl)
		return KF_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		int tmpl, group;

		if ((void *)(ip + 1) > end)
			return KF_PASS;
		tmpl = (ctl->flags & KF_CTL_V4) && kf_tmpl4(ctl, ip->daddr);
		group = (ip->daddr & bpf_htonl(0xf0000000)) == bpf_htonl(0xe0000000);
		if (!tmpl && !group)
			return KF_PASS;
		if (ip->protocol != KF_IPPROTO_UDP)
			return tmpl ? TC_ACT_SHOT : KF_PASS;
		/* Options, fragments, GSO: not ours to rewrite (a template's slot stays ARMED,
		 * the publisher sends by the kernel's path; a group's datagram goes on as it is). */
		if (ip->ihl != 5 || (ip->frag_off & bpf_htons(KF_IP_MF | KF_IP_OFFSET)) ||
		    skb->gso_segs > 1) {
			if (!tmpl)
				return KF_PASS;
			kf_stat(KF_STAT_MALFORMED, 1);
			return TC_ACT_SHOT;
		}
		udp = (void *)(ip + 1);
		if ((void *)(udp + 1) > end) {
			kf_stat(KF_STAT_MALFORMED, 1);
			return tmpl ? TC_ACT_SHOT : KF_PASS;
		}
		w = kf_work_get();
		if (!w) {
			kf_stat(KF_STAT_MALFORMED, 1);
			return tmpl ? TC_ACT_SHOT : KF_PASS;
		}
		r.skb = skb;
		r.w = w;
		r.ifindex = ctl->ifindex;
		r.l4 = KF_ETH_LEN + KF_IP4_LEN;
		w->cur4 = ip->daddr;
		w->cur_port = udp->dest;
		if (tmpl)
			return kf_template(&r, ctl, bpf_ntohl(ip->daddr) & 0xffff,
					   bpf_ntohs(udp->dest));
		gkey.family = KF_AF_INET;
		gkey.port = udp->dest;
		__builtin_memcpy(gkey.addr, &ip->daddr, 4);
		return kf_group(&r, &gkey, eth->h_dest);
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		const __u32 *a;
		int tmpl, group;

		if ((void *)(ip6 + 1) > end)
			return KF_PASS;
		a = (const __u32 *)&ip6->daddr;
		tmpl = (ctl->flags & KF_CTL_V6) && kf_tmpl6(ctl, a, 1);
		group = ip6->daddr.in6_u.u6_addr8[0] == 0xff;
		if (!tmpl && !group)
			return KF_PASS;
		/* Extension headers (a fragment header among them): not ours, as for IPv4. */
		if (ip6->nexthdr != KF_IPPROTO_UDP || skb->gso_segs > 1) {
			if (!tmpl)
				return KF_PASS; /* ICMPv6 to ff02::, say: not a group datagram */
			kf_stat(KF_STAT_MALFORMED, 1);
			return TC_ACT_SHOT;
		}
		udp = (void *)(ip6 + 1);
		if ((void *)(udp + 1) > end) {
			kf_stat(KF_STAT_MALFORMED, 1);
			return tmpl ? TC_ACT_SHOT : KF_PASS;
		}
		w = kf_work_get();
		if (!w) {
			kf_stat(KF_STAT_MALFORMED, 1);
			return tmpl ? TC_ACT_SHOT : KF_PASS;
		}
		r.skb = skb;
		r.w = w;
		r.ifindex = ctl->ifindex;
		r.l4 = KF_ETH_LEN + KF_IP6_LEN;
		r.v6 = 1;
		__builtin_memcpy(w->cur6, &ip6->daddr, 16);
		w->cur_port = udp->dest;
		if (tmpl)
			return kf_template(&r, ctl, bpf_ntohl(a[3]), bpf_ntohs(udp->dest));
		gkey.family = KF_AF_INET6;
		gkey.port = udp->dest;
		__builtin_memcpy(gkey.addr, &ip6->daddr, 16);
		return kf_group(&r, &gkey, eth->h_dest);
	}
	return KF_PASS;
}

/*
 * The backstop: after kf_egress on the same hook (tcx: kf_egress first, this last; clsact: a
 * filter of lower priority), attached before the template routes exist and detached after
 * they are gone. A template that reaches it was not taken by kf_egress (detached, or removed
 * by anyone): it must not leave on the wire, where its MAC is no one's and a switch would
 * flood it, message and all, to every port. Dropped and counted (KF_STAT_BACKSTOP); the
 * publisher finds its slot still ARMED and sends by the kernel's path. Everything else goes on.
 */
SEC("tc")
int kf_backstop(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct kf_ctl *ctl;
	__u32 zero = 0;

	if ((void *)(eth + 1) > end)
		return KF_PASS;
	ctl = bpf_map_lookup_elem(&kf_ctl, &zero);
	if (!ctl)
		return KF_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > end || !kf_tmpl4(ctl, ip->daddr))
			return KF_PASS;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > end || !kf_tmpl6(ctl, (const __u32 *)&ip6->daddr, 0))
			return KF_PASS;
	} else {
		return KF_PASS;
	}
	kf_stat(KF_STAT_BACKSTOP, 1);
	return TC_ACT_SHOT;
}

/* The kernel wants a GPL-compatible licence string for some helpers; the source is MIT, which
 * is compatible, and "Dual MIT/GPL" is the string the kernel knows for that. */
char LICENSE[] SEC("license") = "Dual MIT/GPL";
