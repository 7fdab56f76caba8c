/* SPDX-License-Identifier: MIT */
/*
 * The kernel fan-out's contract between its three parties: the BPF program on the egress of
 * an interface (lib/be/kfanout/kfanout.bpf.c), the administrator's tool that loads it and pins
 * its maps (tools/multisend-kfanout.c), and the library backend that publishes through it
 * (lib/be/kfanout/backend.c). Included by all three; the program is built with clang -target
 * bpf, so only fixed-size types, no libc.
 *
 * How a fan-out goes (the backend's side):
 *   1. A publisher claims a slot (kf_slots[k].owner: compare-and-swap from 0 in the mmap'ed
 *      map) and records its socket's cookie (SO_COOKIE) in it.
 *   2. At add/remove time it writes the slot's destinations, kf_dests[k * KF_SLICE_MAX + i]:
 *      next hop's MAC, address, port (route and neighbour from lib/os/route.c).
 *   3. Per call: count, then state = KF_STATE(seq, KF_ARMED) (a release store), then ONE
 *      send of the message on the publisher's own socket to the slot's template address
 *      (kf_tmpl4/kf_tmpl6 below: the slot and the sequence number are in the address and the
 *      port, so a template delayed by anything cannot be mistaken for a later call's), naming
 *      ctl.ifindex as its outgoing interface (sendmsg with IP_PKTINFO, or IPV6_PKTINFO on an
 *      IPv6 socket): once the tool has removed the template routes, a template still sent
 *      goes nowhere, never by another route off the host. While the routes exist but the
 *      program does not (detached by anyone), the tool's backstop program, last on the same
 *      hook, drops templates (KF_STAT_BACKSTOP), so none leaves on the wire.
 *   4. The program, on the egress hook, in the sender's context, before the send returns: knows
 *      the template by its address, checks the socket cookie and moves the state ARMED ->
 *      RUNNING with a compare-and-swap (never twice), then for each destination i < count:
 *      policy check, rewrite MAC, IP destination and checksum, UDP port and checksum,
 *      bpf_clone_redirect to ctl.ifindex's egress, and kf_status[k * KF_SLICE_MAX + i] =
 *      its result (0 or -errno; -EPERM refused by the policy). Then state = DONE, and the
 *      template is consumed (TC_ACT_STOLEN: the sendto sees success).
 *   5. After sendto: state DONE with the same seq: the statuses are the results. Still ARMED:
 *      the program did not run (detached, another route): compare-and-swap ARMED -> IDLE and,
 *      if that wins, every destination of the slice goes by the kernel's path; if it loses,
 *      the program is running: wait for DONE.
 *
 * Multicast replication (no library involved): the tool writes kf_groups[{group, port}] = k
 * for a slot it owns (owner KF_OWNER_GROUP, cookie KF_COOKIE_ANY) and the slot's members in
 * kf_dests; every UDP datagram any program sends to that group and port out of the interface
 * is cloned to each member (same policy), and the original goes on unless KF_GROUP_CONSUME.
 */
#ifndef MS_KFANOUT_ABI_H
#define MS_KFANOUT_ABI_H

#include <linux/types.h>

#define KF_ABI_VERSION 1u

/* Pins: KF_PIN_ROOT "/" ifname "/" map name. The tool makes the directory and the maps with
 * the owner group and mode the administrator gives (who may publish); kf_policy and kf_groups
 * are root's alone (0600). */
#define KF_PIN_ROOT "/sys/fs/bpf/multisend"
#define KF_MAP_CTL "kf_ctl"       /* ARRAY[1] struct kf_ctl; group read, root write */
#define KF_MAP_SLOTS "kf_slots"   /* ARRAY[KF_SLOTS] struct kf_slot, BPF_F_MMAPABLE; group rw */
#define KF_MAP_DESTS "kf_dests"   /* ARRAY[KF_SLOTS * KF_SLICE_MAX] struct kf_dest, MMAPABLE */
#define KF_MAP_STATUS "kf_status" /* ARRAY[KF_SLOTS * KF_SLICE_MAX] __s64, MMAPABLE */
/* __s64, not __s32: an array map's elements are value_size rounded up to 8 bytes apart, in the
 * mmap too, so a __s32 status would sit at every other 32-bit word of the mapping. */
#define KF_MAP_STATS "kf_stats"   /* PERCPU_ARRAY[KF_STAT_N] __u64; group read */
#define KF_MAP_POLICY "kf_policy" /* LPM_TRIE struct kf_prefix -> struct kf_ports; root only */
#define KF_MAP_GROUPS "kf_groups" /* HASH struct kf_gkey -> __u32 slot; root only */

#define KF_SLOTS 1024u     /* slots (templates in flight at once) per attachment */
#define KF_SLICE_MAX 256u  /* destinations per template, at most (ctl.slice may be less) */
#define KF_POLICY_MAX 1024u
#define KF_GROUPS_MAX 256u

/* The attachment, written once by the tool. */
struct kf_ctl {
	__u32 abi;        /* KF_ABI_VERSION */
	__u32 ifindex;    /* the device the program is attached to, and clones go out of */
	__u32 slice;      /* destinations per template on this device (measured at attach) */
	__u32 flags;      /* KF_CTL_* */
	__be32 tmpl4;     /* IPv4 template prefix (a /16: its low 16 bits are the slot) */
	__u8 tmpl6[16];   /* IPv6 template prefix (a /64: its low 32 bits are the slot) */
	__u8 tmpl_mac[6]; /* the template gateway's permanent neighbour entry (never on a wire) */
	__u16 pad;
	__u64 attached_ns; /* CLOCK_REALTIME of the attach, for status */
};
#define KF_CTL_V4 1u /* tmpl4 routed out of ifindex (the tool made the route and neighbour) */
#define KF_CTL_V6 2u

/* Template of slot k, call sequence seq: IPv4 tmpl4 | k (k < 65536), IPv6 tmpl6 with its last
 * 32 bits = k; UDP destination port KF_SEQ_PORT(seq) (never 0). */
#define KF_SEQ_PORT(seq) ((__u16)(((seq) & 0x7fffu) | 0x8000u))

/* One slot: 64 bytes. */
struct kf_slot {
	__u64 owner;  /* 0 free; KF_OWNER_GROUP; else a publisher's claim: (pid << 32) | the low
	                 32 bits of its start time in clock ticks (/proc/PID/stat field 22), so
	                 a claim left by a process that died can be recognised and taken over */
	__u64 cookie; /* the only socket whose templates run (SO_COOKIE); KF_COOKIE_ANY: group */
	__u32 state;  /* KF_STATE(seq, KF_IDLE/ARMED/RUNNING/DONE): changed by compare-and-swap */
	__u32 count;  /* destinations of this call, <= ctl.slice */
	__u32 done;   /* destinations the last run attempted (== count unless it stopped early) */
	__u32 flags;  /* KF_GROUP_CONSUME for a group slot */
	__u8 pad[32];
};
#define KF_OWNER_GROUP 1ull
#define KF_COOKIE_ANY (~0ull)
#define KF_GROUP_CONSUME 1u
#define KF_IDLE 0u
#define KF_ARMED 1u
#define KF_RUNNING 2u
#define KF_DONE 3u
#define KF_STATE(seq, st) ((((seq) & 0x7fffu) << 2) | (st))
#define KF_STATE_SEQ(v) (((v) >> 2) & 0x7fffu)
#define KF_STATE_ST(v) ((v) & 3u)

/* One destination: 32 bytes. The family is the template's. */
struct kf_dest {
	__u8 mac[6];   /* next hop's link-layer address */
	__be16 port;   /* UDP destination port */
	union {
		__be32 v4;
		__u8 v6[16];
	} addr;
	__u32 flags;   /* KF_DEST_SKIP: not this call (the kernel's path sends it) */
	__u32 pad;
};
#define KF_DEST_SKIP 1u

/* Policy: where clones may go. Empty: nowhere. */
struct kf_prefix {
	__u32 prefixlen; /* LPM key: 32 + address bits; the first byte below is the family */
	__u8 family;     /* AF_INET 2, AF_INET6 10 */
	__u8 pad[3];
	__u8 addr[16];
};
struct kf_ports {
	__u16 lo, hi; /* host order, inclusive; 0-65535 for any */
};

struct kf_gkey {
	__u8 family;
	__u8 pad;
	__be16 port;
	__u8 addr[16]; /* the group; IPv4 in the first 4 bytes, the rest 0 */
};

/* kf_stats indexes (per CPU; readers add them up). */
enum {
	KF_STAT_TEMPLATES,  /* templates run */
	KF_STAT_CLONES,     /* clones the device took */
	KF_STAT_CLONE_ERR,  /* clones bpf_clone_redirect refused (status has the errno) */
	KF_STAT_POLICY,     /* destinations refused by the policy (-EPERM) */
	KF_STAT_NOT_OWNER,  /* templates from a socket whose cookie is not the slot's (dropped) */
	KF_STAT_STALE,      /* templates whose slot was not ARMED with their seq (dropped) */
	KF_STAT_MALFORMED,  /* templates the program could not parse or rewrite (dropped) */
	KF_STAT_GROUP_PKTS, /* multicast datagrams replicated */
	KF_STAT_BACKSTOP,   /* templates the backstop dropped: kf_egress was not there to take
	                       them (detached), so they did not leave on the wire */
	KF_STAT_N = 16
};

#endif
