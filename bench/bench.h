/* SPDX-License-Identifier: MIT */
/*
 * multisend-bench: types shared by its files.
 *
 *   cli.c       the command line
 *   main.c      signals, the sending thread, the namespace's lifetime, the progress line
 *   env.c       the environment header (kernel, CPU, library, backends, sink)
 *   workload.c  the backends under test (the hand-written baselines and the library's),
 *               destination sets, and the inner send loops
 *   raw.c       the hand-written baselines: raw-sendto, raw-sendmmsg, raw-io_uring
 *   callgrind.c --callgrind: user-space instructions per destination under valgrind
 *   run.c       throughput runs: warm-up, interleaved rounds, timing, per-run samples
 *   latency.c   fixed-rate runs timed from each call's scheduled start
 *   capacity.c  the a + b*N fit and the capacity answer
 *   sink.c      loopback / deliver receivers; netns.c the netns-drop namespace
 *   kstat.c     kernel drop counters; hist.c the latency histogram
 *   report.c    table, JSON lines, CSV; charts.c the --report directory
 */
#ifndef BENCH_H
#define BENCH_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <multisend.h>

#include "hist.h"
#include "kstat.h"
#include "load.h"
#include "util.h"

#define BENCH_VERSION "0.1.0"
#define MAX_LIST 64
#define MAX_ROUNDS 1000

/* The hand-written baselines (no library: raw-sendto, the yardstick of every ratio, and the
 * opt-in raw-sendmmsg and raw-io_uring, each the library backend's shape written by hand),
 * then the library's backends, then their variants, so that a backend and its variant can run
 * interleaved in one set of rounds:
 *   "+ts"        kernel transmit timestamps sampled (--ts-sample, --ts-compare). It has its
 *                own context and its own sending sockets: timestamps are set up per socket and
 *                come back on its error queue, which two contexts must not share.
 *   "+dontwait"  (--compare-dontwait) every backend, baselines included: the library's
 *                ms_send with MS_SEND_DONTWAIT, the baselines' sends with MSG_DONTWAIT.
 *   "+rotate"    (--compare-rotate) the library's backends only, on a context made with
 *                MS_CFG_ROTATE (the baselines have nothing to rotate).
 *   "+connect"   (--compare-connect, unconnected shape only) the library's backends only, on
 *                a context made with MS_CFG_CONNECT: its group is built from the same
 *                addresses on the same unconnected socket, so the library makes one connected
 *                socket of its own per destination (bound to the plain socket's port, which
 *                the bench binds with SO_REUSEADDR for it); raw-sendto stays the plain
 *                unconnected loop, so "vs raw-sendto" is the connected fan-out against it.
 *   "+offload"   (--compare-offload) the library's backends only, on a context made with
 *                MS_CFG_OFFLOAD: ms_send hands the message to a library thread and returns;
 *                every timed batch ends with ms_ctx_drain, so the batch's time and process CPU
 *                include the sending, while the caller's CPU is its own (the drain excluded).
 *   "+zc"        (--compare-zc) io_uring only (the other backends never send with zero copy),
 *                on a context with ms_config.zc_min = 1 (or --zc-min): every message from
 *                that size goes with SEND_ZC; the plain io_uring it runs beside then has
 *                zc_min = 0 (never), so the two differ in zero copy alone.
 *   "+wK"        (--compare-workers K) the library's backends only, on a context made with
 *                ms_config.workers = K: each fan-out in K parts sent at the same time.
 *   "+wK+ts"     the same with --ts-sample or --ts-compare: sampled like the "+ts" variant
 *                (own sockets), and compared with it, so that the first-to-last skew of K
 *                threads and of one come from the same rounds.
 * A "+dontwait", "+rotate", "+offload", "+zc" or "+wK" variant has its own context (its own
 * counters and threads) but sends on the plain sockets; a "+connect" variant has its own
 * context and sends on the library's sockets; a "+wK+ts" variant, like "+ts", on sockets of
 * its own. */
enum variant_id {
	V_RAW,
	V_RAW_SENDMMSG,
	V_RAW_IO_URING,
	V_LOOP,
	V_SENDMMSG,
	V_IO_URING,
	V_LOOP_TS,
	V_SENDMMSG_TS,
	V_IO_URING_TS,
	V_RAW_DW,
	V_RAW_SENDMMSG_DW,
	V_RAW_IO_URING_DW,
	V_LOOP_DW,
	V_SENDMMSG_DW,
	V_IO_URING_DW,
	V_LOOP_ROT,
	V_SENDMMSG_ROT,
	V_IO_URING_ROT,
	V_LOOP_CONN,
	V_SENDMMSG_CONN,
	V_IO_URING_CONN,
	V_LOOP_OFF,
	V_SENDMMSG_OFF,
	V_IO_URING_OFF,
	V_LOOP_ZC, /* only V_IO_URING_ZC runs; the range keeps variant_base's arithmetic */
	V_SENDMMSG_ZC,
	V_IO_URING_ZC,
	V_LOOP_W,
	V_SENDMMSG_W,
	V_IO_URING_W,
	V_LOOP_W_TS,
	V_SENDMMSG_W_TS,
	V_IO_URING_W_TS,
	/* The library's AUTO (MS_BACKEND_AUTO, "auto"): whatever backend the library chooses.
	 * Not a variant of a fixed backend (no "+ts", "+dontwait"... of its own; --dontwait and
	 * --rotate apply to it). Its context is made afresh for each configuration and kept
	 * across that configuration's rounds, after a warm-up of --auto-warmup seconds. */
	V_AUTO,
	/* Kernel bypass (--sink netns-xdp only): the library's MS_BACKEND_XDP ("xdp") and its
	 * hand-written AF_XDP twin ("raw-xdp", raw-xdp.c). Plain backends with no "+ts",
	 * "+dontwait"... variants of their own, after AUTO so that the variant arithmetic above
	 * stays as it is. */
	V_RAW_XDP,
	V_XDP,
	/* The kernel fan-out (--sink netns-xdp only): the library's MS_BACKEND_KFANOUT
	 * ("kfanout") through the tc egress program the bench attaches to the namespace's veth
	 * with multisend-kfanout (kfanout.c), its hand-written twin over the program's pinned
	 * maps ("raw-kfanout", raw-kfanout.c), and raw-sendto while that program is attached
	 * ("raw-sendto+hook"): what the hook costs traffic that is not a template. The program is
	 * on the device only while these run (kfanout.c, kf_hook). */
	V_RAW_KFANOUT,
	V_KFANOUT,
	V_RAW_HOOK,
	/* AUTO as an unprivileged publisher gets it where the kernel fan-out is attached
	 * ("auto+kfanout", --sink netns-xdp only): AUTO's context made as "auto" makes it (its
	 * warm-up too), with the program on the device like the kfanout variants, and with no
	 * capabilities in effect on the sending thread while its context and group are made and
	 * while it sends (kfanout.c, kf_unpriv: the effective set cleared, the permitted set kept
	 * to restore it for the bench's own work in between). Its context also names the veth for
	 * xdp (as "xdp" does), so that xdp is left out of AUTO's candidates for want of
	 * CAP_NET_RAW alone, as for an ordinary user in the pins' group: its candidates are loop,
	 * sendmmsg, io_uring and kfanout. A plain backend after the others, like them. */
	V_AUTO_KF,
	V_COUNT
};
#define V_FIRST_TS V_LOOP_TS
#define V_PLAIN_COUNT V_FIRST_TS /* the plain backends, the ones --backends names */
#define V_FIRST_DW V_RAW_DW
#define V_FIRST_ROT V_LOOP_ROT
#define V_FIRST_CONN V_LOOP_CONN
#define V_FIRST_OFF V_LOOP_OFF
#define V_FIRST_ZC V_LOOP_ZC
#define V_FIRST_W V_LOOP_W
#define V_FIRST_W_TS V_LOOP_W_TS
#define V_END_W V_AUTO /* one past the last "+wK" variant */

static inline bool variant_is_ts(enum variant_id v)
{
	return v >= V_FIRST_TS && v < V_FIRST_DW;
}

static inline bool variant_is_dw(enum variant_id v)
{
	return v >= V_FIRST_DW && v < V_FIRST_ROT;
}

static inline bool variant_is_rot(enum variant_id v)
{
	return v >= V_FIRST_ROT && v < V_FIRST_CONN;
}

static inline bool variant_is_conn(enum variant_id v)
{
	return v >= V_FIRST_CONN && v < V_FIRST_OFF;
}

static inline bool variant_is_off(enum variant_id v)
{
	return v >= V_FIRST_OFF && v < V_FIRST_ZC;
}

static inline bool variant_is_zc(enum variant_id v)
{
	return v >= V_FIRST_ZC && v < V_FIRST_W;
}

/* "+wK" and "+wK+ts" */
static inline bool variant_is_w(enum variant_id v)
{
	return v >= V_FIRST_W && v < V_END_W;
}

static inline bool variant_is_w_ts(enum variant_id v)
{
	return v >= V_FIRST_W_TS && v < V_END_W;
}

/* The variants whose context samples transmit timestamps, on sockets of their own. */
static inline bool variant_stamped(enum variant_id v)
{
	return variant_is_ts(v) || variant_is_w_ts(v);
}

/* The same backend without its variant (v itself for the plain ones). */
static inline enum variant_id variant_base(enum variant_id v)
{
	if (variant_is_ts(v))
		return (enum variant_id)(v - V_FIRST_TS + V_LOOP);
	if (variant_is_dw(v))
		return (enum variant_id)(v - V_FIRST_DW + V_RAW);
	if (variant_is_rot(v))
		return (enum variant_id)(v - V_FIRST_ROT + V_LOOP);
	if (variant_is_conn(v))
		return (enum variant_id)(v - V_FIRST_CONN + V_LOOP);
	if (variant_is_off(v))
		return (enum variant_id)(v - V_FIRST_OFF + V_LOOP);
	if (variant_is_zc(v))
		return (enum variant_id)(v - V_FIRST_ZC + V_LOOP);
	if (variant_is_w_ts(v))
		return (enum variant_id)(v - V_FIRST_W_TS + V_LOOP);
	if (variant_is_w(v))
		return (enum variant_id)(v - V_FIRST_W + V_LOOP);
	return v;
}

/* A baseline written without the library (its "+dontwait" variant too). */
static inline bool variant_is_raw(enum variant_id v)
{
	return variant_base(v) <= V_RAW_IO_URING || v == V_RAW_XDP || v == V_RAW_KFANOUT ||
	       v == V_RAW_HOOK;
}

/* The kernel fan-out's variants: they need the program attached (kfanout.c). */
static inline bool variant_is_kfanout(enum variant_id v)
{
	return v == V_RAW_KFANOUT || v == V_KFANOUT || v == V_RAW_HOOK || v == V_AUTO_KF;
}

/* The library's AUTO: "auto", and "auto+kfanout" (unprivileged, the program on the device).
 * Both get --auto-warmup, a new context per configuration and its ms_ctx_describe. */
static inline bool variant_is_auto(enum variant_id v)
{
	return v == V_AUTO || v == V_AUTO_KF;
}


/* The kernel-bypass backends: their frames leave by an AF_XDP socket, not the UDP stack. */
static inline bool variant_is_xdp(enum variant_id v)
{
	return v == V_RAW_XDP || v == V_XDP;
}

/* The backends that run only with --sink netns-xdp and have no "+ts", "+dontwait"... variants
 * of their own. */
static inline bool variant_netns_xdp_only(enum variant_id v)
{
	return variant_is_xdp(v) || variant_is_kfanout(v);
}

/* A plain backend's variants (v itself where it has none: "+ts", "+rotate" and "+connect" are
 * the library backends' only). */
static inline enum variant_id variant_ts(enum variant_id v)
{
	return v >= V_LOOP && v < V_FIRST_TS ? (enum variant_id)(v - V_LOOP + V_FIRST_TS) : v;
}

static inline enum variant_id variant_dw(enum variant_id v)
{
	return v < V_PLAIN_COUNT ? (enum variant_id)(v + V_FIRST_DW) : v;
}

static inline enum variant_id variant_rot(enum variant_id v)
{
	return v >= V_LOOP && v < V_FIRST_TS ? (enum variant_id)(v - V_LOOP + V_FIRST_ROT) : v;
}

static inline enum variant_id variant_conn(enum variant_id v)
{
	return v >= V_LOOP && v < V_FIRST_TS ? (enum variant_id)(v - V_LOOP + V_FIRST_CONN) : v;
}

static inline enum variant_id variant_off(enum variant_id v)
{
	return v >= V_LOOP && v < V_FIRST_TS ? (enum variant_id)(v - V_LOOP + V_FIRST_OFF) : v;
}

/* io_uring's alone: the only backend that sends with zero copy. */
static inline enum variant_id variant_zc(enum variant_id v)
{
	return v == V_IO_URING ? V_IO_URING_ZC : v;
}

static inline enum variant_id variant_w(enum variant_id v)
{
	return v >= V_LOOP && v < V_FIRST_TS ? (enum variant_id)(v - V_LOOP + V_FIRST_W) : v;
}

static inline enum variant_id variant_w_ts(enum variant_id v)
{
	return v >= V_LOOP && v < V_FIRST_TS ? (enum variant_id)(v - V_LOOP + V_FIRST_W_TS) : v;
}

/* What a variant is measured against in the same rounds ("vs plain"): its plain backend, but
 * for a "+wK+ts" variant the backend's "+ts" variant, sampled the same way on one thread, so
 * that the ratio is the workers' alone and the skews compare. v itself for the plain ones. */
static inline enum variant_id variant_ref(enum variant_id v)
{
	if (v == V_RAW_HOOK)
		return V_RAW; /* the same sends without the program on the device */
	return variant_is_w_ts(v) ? variant_ts(variant_base(v)) : variant_base(v);
}

/* A library backend's hand-written twin, the same fan-out without the library (loop: raw-sendto,
 * sendmmsg: raw-sendmmsg, io_uring: raw-io_uring; a "+ts", "+rotate", "+connect", "+offload"
 * or "+wK" variant: its plain backend's; a "+dontwait" variant: the twin's "+dontwait"); -1
 * for the baselines themselves. */
static inline int variant_twin(enum variant_id v)
{
	int t;

	switch (variant_base(v)) {
	case V_LOOP:
		t = V_RAW;
		break;
	case V_SENDMMSG:
		t = V_RAW_SENDMMSG;
		break;
	case V_IO_URING:
		t = V_RAW_IO_URING;
		break;
	case V_XDP:
		return V_RAW_XDP;
	case V_KFANOUT:
		return V_RAW_KFANOUT;
	default:
		return -1;
	}
	return variant_is_dw(v) ? (int)variant_dw((enum variant_id)t) : t;
}

/* SINK_TCP (--tcp): N TCP connections over loopback, read by receiver threads that discard
 * every byte and count them (sink.h). */
/* SINK_NETNS_XDP (--sink netns-xdp): netns-drop's namespace and addresses with the veth's
 * peer up, so that an AF_XDP socket can transmit on it (a veth without carrier takes no
 * frame), and the frames dropped on arrival at the peer (netns.h). */
enum sink_kind { SINK_LOOPBACK, SINK_NETNS_DROP, SINK_DELIVER, SINK_TCP, SINK_NETNS_XDP };

/* The sinks in the bench's private namespace: no receivers, nothing to drain. */
static inline bool sink_netns(enum sink_kind k)
{
	return k == SINK_NETNS_DROP || k == SINK_NETNS_XDP;
}

/* The sinks whose receiver threads read concurrently: every run waits until what was sent
 * arrived (sent = received + kernel drops), and their CPU is not the sender's. */
static inline bool sink_reads(enum sink_kind k)
{
	return k == SINK_DELIVER || k == SINK_TCP;
}
enum {
	MODE_COMPARE = 1,
	MODE_SWEEP = 2,
	MODE_LATENCY = 4,
	MODE_CAPACITY = 8,
};

struct opts {
	unsigned modes;
	enum variant_id order[V_COUNT]; /* interleaving order */
	unsigned nvariants;
	uint64_t fanouts[MAX_LIST];
	unsigned nfanouts; /* 0: the mode's default */
	uint64_t sizes[MAX_LIST];
	unsigned nsizes;
	enum sink_kind sink;
	bool connected;
	bool verify_payload; /* deliver: receivers compare every byte, not only the head */
	double duration;     /* seconds per mode, 0: the mode's default */
	uint64_t iterations; /* fan-outs per timed run, 0: from duration */
	unsigned rounds;     /* 0: default */
	uint64_t rates[MAX_LIST];
	unsigned nrates;
	int cpu; /* -1: not pinned */
	const char *json, *csv, *report;
	bool quick, progress;
	double cpu_budget;   /* fraction of one core */
	double p99_bound_us; /* 0: none */
	uint64_t subscribers;
	unsigned relay_cores;
	/* Capacity with IP multicast: the subscribers spread over this many network segments,
	 * each reached by one group address (0: not asked), plus unicast more reached one by
	 * one. */
	uint64_t segments, unicast;
	/* Kernel transmit timestamps: the "+ts" variants sample one fan-out in ts_sample (0: no
	 * such variant). ts_compare: each library backend also runs without them, interleaved
	 * (otherwise the "+ts" variants replace the plain ones). */
	uint32_t ts_sample;
	bool ts_compare, ts_all, ts_hist;
	/* --rotate: every library context has MS_CFG_ROTATE; --dontwait: every send passes
	 * MS_SEND_DONTWAIT (library) or MSG_DONTWAIT (baselines). --compare-dontwait,
	 * --compare-rotate: each backend also runs as its "+dontwait" / "+rotate" variant,
	 * interleaved, with the CPU ratio to the plain backend. */
	bool rotate, dontwait, compare_dw, compare_rot;
	/* --lib-connect: every library context has MS_CFG_CONNECT (the raw baselines unchanged);
	 * --compare-connect: each library backend also runs as its "+connect" variant,
	 * interleaved. Both need the unconnected shape (not --connected). */
	bool lib_connect, compare_conn;
	/* The library's threads (multisend.h, "Workers and offload"). --workers K: every library
	 * context's ms_config.workers (0: not given); --offload: every library context with
	 * MS_CFG_OFFLOAD. --compare-offload: each library backend also runs as "+offload";
	 * --compare-workers K: as "+wK" (0: not given), with timestamps "+wK+ts". --offload-kib,
	 * --spin-us, --cpus: ms_config.offload_kib, spin_us, cpus/ncpus of every context that
	 * has threads (0 / none: the library's defaults). */
	uint32_t workers, compare_workers, offload_kib, spin_us;
	bool offload, compare_off;
	/* Zero copy (multisend.h, "Zero copy"): --zc-min N, every library context's
	 * ms_config.zc_min (0: not given or "never": the library's default, no zero copy;
	 * zc_never says "never" was given); --compare-zc: io_uring also runs as "+zc" (zc_min =
	 * --zc-min, else 1) beside plain io_uring with zc_min 0. --mtu: the netns-drop veth's MTU
	 * (0: the default, 1500), so that a large datagram leaves unfragmented (fragments are
	 * copied). */
	uint32_t zc_min, mtu;
	bool zc_never, compare_zc;
	/* --tcp: the sink is SINK_TCP and the shape connected (one TCP socket per destination,
	 * TCP_NODELAY). */
	bool tcp;
	int cpus[MAX_LIST];
	unsigned ncpus;
	/* --callgrind: instructions per destination of each backend under valgrind's callgrind
	 * (callgrind.c), files kept in callgrind_out when given. The bench re-executes itself
	 * there once per backend and configuration with --callgrind-child (cg_child): warm-up
	 * fan-outs cg_warmup, then --iterations counted ones, and nothing else. */
	bool callgrind, cg_child, backends_given;
	const char *callgrind_out;
	uint64_t cg_warmup;
	const char *cg_conflict; /* an option given that --callgrind has no use for */
	/* AUTO (--backends auto): seconds of real sends before its first measured round in each
	 * configuration (--auto-warmup; default 2, 0 allowed). */
	double auto_warmup;
	/* --background-load K: K worker processes (0: none) doing short system calls and memory
	 * traffic; --load-from: seconds after the start (load_from_half: half of the expected
	 * run; in --timeline, of each timeline) before they start working. */
	unsigned bg_load;
	double load_from;
	bool load_from_half, load_from_given;
	/* --timeline SECONDS (0: not given): run that instead of the modes (which keep their
	 * default): each variant keeps its context and group for the whole time, sending in
	 * slices of about 150 ms in an order rotated every turn. */
	double timeline;
};

/* A backend under test: raw-sendto (no library) or one of the library's. */
struct variant {
	const char *name;
	bool wanted, available;
	char detail[320]; /* ms_ctx_describe, or why it is unavailable */
	struct ms_ctx *ctx;
};

/* The library's own counters (struct ms_stats) over some sends, as deltas; all zero for
 * raw-sendto, which does not use the library. */
struct lib_count {
	uint64_t fanouts, attempted, accepted, failed, bytes, syscalls;
	/* MS_CFG_OFFLOAD: messages handed over, of which the caller waited for room in the ring;
	 * calls refused (-EAGAIN, MS_SEND_DONTWAIT with the ring full: nothing sent, so not in
	 * attempted, and counted by the bench as n failed destinations). */
	uint64_t off_msgs, off_waits, off_refused;
	/* io_uring zero copy: destinations sent with SEND_ZC, of which the kernel reported it
	 * copied the data anyway (the first such report turns zero copy off for the ring). */
	uint64_t zc_sends, zc_copied;
	/* xdp: destinations sent as frames, kicks (also in syscalls), and destinations the
	 * backend sent by the kernel's path instead (the six xdp_fallback_* summed). */
	uint64_t xdp_frames, xdp_kicks, xdp_fallback;
	/* kfanout: template sends the program replicated, destinations whose copy the device
	 * took, and destinations that went by the kernel's path instead (kfanout_reclaimed and
	 * the six kfanout_fallback_* summed) or were refused (kfanout_refused, _clone_err). */
	uint64_t kf_templates, kf_clones, kf_kernel_path, kf_refused;
};

/* A "+ts" variant's transmit-timestamp figures over some sends (its rounds): the deltas of
 * two ms_ctx_snapshot calls, the histograms bucket by bucket. */
enum { TS_CALL_FIRST, TS_CALL_LAST, TS_FIRST_LAST, TS_DEST_LAG, TS_NHIST };
struct ts_count {
	uint64_t sampled, requested, stamped, missing, unsupported, foreign, late; /* ts_* */
};
struct ts_result {
	struct ts_count c;
	struct ms_hist h[TS_NHIST];
	/* A "+wK+ts" variant whose "+ts" variant (variant_ref) ran in the same rounds: its
	 * first-to-last skew over that one thread's, p50, p99 and mean of the two histograms. */
	bool have_ref;
	double skew_ratio[3];
};
enum { SKEW_P50, SKEW_P99, SKEW_MEAN };

/* One timed run of one backend. */
struct sample {
	uint64_t fanouts, dests, failed;
	uint64_t wall_ns, proc_ns, thread_ns, rx_ns;
	/* MS_CFG_OFFLOAD: the sending thread's CPU inside ms_ctx_drain at the end of each batch:
	 * not in thread_ns (the caller's CPU is the publishing alone), and taken out of the
	 * process figure, as the bench's own wait, which a publisher would not make. */
	uint64_t drain_ns;
	uint64_t syscalls;
	uint64_t preempted; /* involuntary context switches of the sending thread while timed */
	uint64_t softirqd_ns; /* ksoftirqd CPU time over the run (all CPUs) */
	uint64_t drops; /* datagrams dropped: at the sink's sockets, or in netns-drop's namespace */
	struct kstat k; /* namespace-wide counter deltas over the run */
	uint64_t received, lost, late, bad, corrupt; /* deliver; tcp: received only */
	uint64_t rx_bytes; /* tcp: bytes the receivers read */
	uint64_t foreign; /* deliver: datagrams from other programs at the receivers, ignored */
	int64_t unaccounted;                /* deliver: sent - received - kernel drops */
	struct lib_count lib;
};

/* One backend at one configuration, over all rounds. */
struct result {
	unsigned mode;
	enum variant_id v;
	uint64_t n, size;
	unsigned rounds;
	uint64_t iterations; /* fan-outs per run */
	struct sample *s;    /* rounds of them */
	struct summary fanouts_s, dests_s, cpu_proc, cpu_caller, syscalls, wall_dest, softirqd;
	bool have_ratio; /* raw-sendto ran in the same rounds */
	struct summary r_fanouts_s, r_dests_s, r_cpu_proc, r_cpu_caller, r_syscalls;
	/* A variant ("+ts", "+dontwait", "+rotate", "+connect") whose plain backend ran in the
	 * same rounds: ratios to it, round by round, as for raw-sendto: what the variant costs. */
	bool have_base;
	struct summary b_dests_s, b_cpu_proc, b_cpu_caller;
	/* An "+offload" variant while the library's plain loop ran in the same rounds: its caller
	 * CPU per destination over the loop's, round by round: what offload leaves the
	 * publishing thread of what the plain loop costs it. */
	bool have_loop;
	struct summary l_cpu_caller;
	/* A library backend whose hand-written twin (variant_twin) ran in the same rounds: CPU per
	 * destination over the twin's, round by round: what the library adds to that shape. */
	bool have_twin;
	struct summary t_cpu_proc, t_cpu_caller;
	struct ts_result *ts; /* "+ts" variants only, else NULL */
	struct kstat k; /* summed over rounds */
	uint64_t failed, dests, received, lost, late, bad, corrupt, foreign, preempted, drops;
	uint64_t rx_bytes;
	int64_t unaccounted;
	struct lib_count lib; /* summed over rounds */
	/* The warm-up's sends, summed: not timed, but sent, received and accounted for like the
	 * rounds' (the deliver sink checks them too). */
	struct sample warm;
	/* AUTO: its first auto_first_s seconds of sends (--auto-warmup), before the rounds, as a
	 * timed sample of their own; and its context's ms_ctx_describe after the rounds. */
	bool have_auto_first;
	double auto_first_s;
	struct sample auto_first;
	char auto_desc[512];
	int auto_backend; /* ms_ctx_backend after the rounds (its last decision), -1: none */
	/* --sink netns-xdp: the wall time of single fan-out calls, from the call to its return
	 * (for these backends: the last destination taken by the kernel), CLOCK_MONOTONIC
	 * around each, over call_wall_n calls made after the rounds (run.c, call_wall). */
	bool have_call_wall;
	uint64_t call_wall_n;
	double call_wall_p50_ns, call_wall_p99_ns;
};

/* One backend at one configuration and offered rate. */
struct lat_result {
	enum variant_id v;
	uint64_t n, size, rate;
	/* The rate asked for when it was above what the host can sustain and rate is the cap
	 * (0: not capped); the fan-outs per second the fastest backend (host_rate) and this one
	 * (backend_rate) sustained flat out at this configuration, measured before the runs. */
	uint64_t requested_rate;
	double host_rate, backend_rate;
	unsigned rounds;
	double achieved; /* fan-outs per second actually started */
	struct hist lat; /* ns from scheduled start to return */
	struct hist svc; /* ns from actual start to return */
	uint64_t failed;
	uint64_t preempted; /* involuntary context switches of the sending thread while running */
	uint64_t drops;     /* as in struct sample */
	struct kstat k;
	char hgrm[128]; /* file name in the report directory, when written */
	struct ts_result *ts; /* "+ts" variants only, else NULL */
};

/* Capacity answer for one backend. */
struct cap_row {
	enum variant_id v;
	double a, b, dev;        /* process CPU ns per fan-out = a + b*N; max relative deviation */
	double aw, bw;           /* wall ns per fan-out, same form */
	uint64_t n_cpu, n_lat;   /* limits from the CPU budget and from the p99 bound (model) */
	uint64_t n_max;          /* the answer: largest N per core meeting both */
	bool verified;           /* n_max was measured at the rate, not only modelled */
	double p99_us;           /* measured p99 at n_max (verified) */
	uint64_t preempted;      /* the sending thread's involuntary switches in that measurement */
	/* The row's noise: the larger of its CPU/dest min-max over rounds / median (the median
	 * over the sweep) and the fit's deviation dev: how far apart two N must be to differ. */
	double spread;
	bool tied;               /* within the noise of the largest N (recommend.h) */
	char note[160];
};

struct capacity {
	bool done;
	uint64_t rate, size;
	double budget, bound_us;
	struct cap_row row[V_COUNT];
	unsigned nrows;
	int best; /* index into row, -1: none */
	char rule[320];        /* why best was chosen (recommend.h), "" when none */
	/* --subscribers M with unicast alone: cores of the best backend, or relay hosts of
	 * relay_cores cores in a one-level tree (0: not asked or no best). */
	uint64_t cores, relays;
	unsigned relay_cores;
	/* --segments S (--unicast U): S group addresses + U unicast = mc_dests destinations per
	 * message; cores of the best backend for that, and the share of one core it uses (from
	 * the fit, at the rate). */
	uint64_t mc_dests, mc_cores;
	double mc_share;
	char sentence[1024];
	char multicast[512];   /* the multicast answer, "" when not asked */
};

/* --timeline: one variant at one configuration over the whole run and each half. */
enum { TL_WHOLE, TL_FIRST, TL_SECOND, TL_NPART };
struct tl_result {
	enum variant_id v;
	uint64_t n, size;
	double seconds;           /* the timeline's length */
	unsigned slices[TL_NPART];
	struct sample part[TL_NPART]; /* summed over the slices that started in that part */
	double cpu[TL_NPART];     /* process CPU ns per destination */
	double caller[TL_NPART];  /* the sending thread's */
	/* Over the best (lowest CPU/dest) fixed library backend of the same part (loop,
	 * sendmmsg, io_uring and their variants; not raw-*, not auto): 0 when none ran. */
	double vs_best[TL_NPART];
	int best[TL_NPART];       /* that backend, -1: none */
	bool load_on[TL_NPART];   /* the background load ran during (some of) that part */
	char auto_desc[512];      /* AUTO: its context's ms_ctx_describe at the end */
	int auto_backend;         /* ... and ms_ctx_backend, -1: none */
};

struct env_info {
	char kernel[4 * 65 + 8]; /* four utsname fields */
	char cpu_model[128];
	long cores_online, cores_allowed;
	char clocksource[32];
	double thread_clock_ns; /* one clock_gettime(CLOCK_THREAD_CPUTIME_ID): what AUTO pays twice
	                           per timed fan-out (median of 7 runs of 2000 reads) */
	bool hypervisor;
	char loadavg[64];
	char date[32];
	char host[65];
	char lib_version[32];
	uint64_t nofile;
};

/* The kernel fan-out's attachment for the kfanout variants (kfanout.c): made by main with
 * multisend-kfanout on the namespace's veth before the sending thread starts, removed by main
 * after it ends (every exit path, SIGINT too); the program is put on and off the device by
 * the sending thread around the variants that need it (kf_hook). */
struct kf_bench {
	bool wanted;      /* a kfanout variant was asked for with --sink netns-xdp */
	bool attached;    /* multisend-kfanout attach and policy add succeeded */
	char why[300];    /* why the kfanout variants are unavailable ("" when attached) */
	char tool[512];   /* the multisend-kfanout that ran */
	char object[512]; /* its --object ("": the tool's own default, the installed one) */
	char nspath[128]; /* the namespace the tool ran in */
	uint64_t attach_ns, detach_ns; /* how long the tool's attach (+ policy) and detach took */
	/* Sending thread: the attachment's program and link (pins), its backstop's (the tool
	 * puts it last on the hook: docs/kfanout.md), the device, and whether they are on it
	 * now. Toggles: times the hook was put on or off, and their total. */
	int prog_fd, link_fd, bprog_fd, blink_fd, ifindex;
	bool hook_ready, hook_on, hook_fixed;
	char hook_why[200];
	uint64_t toggles, toggle_ns;
	/* auto+kfanout (kf_unpriv): the sending thread's effective capabilities cleared now; the
	 * set to restore; times they were cleared, and every effective set read back right after
	 * (OR-ed: 0 when each clearing held). Checked under those credentials when its context
	 * was last made: socket(AF_XDP)'s errno (0: it succeeded), and ms_ctx_new of xdp alone
	 * with the settings AUTO's context names (ms_ctx_new's result). */
	bool unpriv_on;
	uint32_t unpriv_saved[2];
	uint64_t unpriv_drops, unpriv_eff_seen;
	bool unpriv_checked;
	int unpriv_xsk_errno, unpriv_xdp_err;
};

struct session {
	const struct opts *o;
	struct variant var[V_COUNT];
	struct env_info env;
	const struct netns *ns; /* netns-drop only */
	struct kf_bench kf;     /* netns-xdp with a kfanout variant */
	struct ksoftirqd ksoftirqd;
	char sink_desc[512];
	char shape_desc[256];
	char method_desc[1024]; /* the method, with the order (up to 511 characters) */

	struct result *res;
	size_t nres, capres;
	struct lat_result *lat;
	size_t nlat, caplat;
	struct capacity cap;
	struct tl_result *tl;
	size_t ntl, captl;
	struct bg_load *load;  /* --background-load, else NULL */
	double expected_s;     /* the run's expected length (for --load-from half) */
	double load_at_s;      /* when main sets the load on, s after started_ns; < 0: not main's */
	char loadavg_end[64];  /* /proc/loadavg's three averages after the run */

	FILE *table; /* the human-readable output: stdout, or stderr under --json - */
	FILE *json;
	FILE *csv;
	unsigned table_mode;  /* the mode whose table heading was printed last */
	bool latency_heading; /* the latency table's heading was printed */

	int *stop; /* read and written with request_stop() and stopped() only */
	pthread_mutex_t out_lock; /* table output and the progress line share the terminal */
	/* Progress, under out_lock: main draws it, the sending thread updates it between runs. */
	double work_total, work_done; /* within the current mode */
	unsigned mode_index, nmodes;  /* modes run so far, of */
	uint64_t started_ns;
	char progress_label[128];
	bool progress_shown;
	bool output_failed; /* writing the table, JSON or CSV failed: the run was stopped */
	uint64_t mode_started_ns; /* when the current mode began (the progress line's time left) */
	/* Everything written to table, also kept here (main.c's tee), so that the --report page
	 * carries every table and warning line the terminal showed, word for word. */
	FILE *transcript;
	char *transcript_buf;
	size_t transcript_len;
	/* Why the run ended early, for a report of what finished ("" when it did not). */
	char cut_short[128];
};

/* cli.c: 0 to run, 1 to exit successfully (--help, --version), -EINVAL for bad usage. */
int parse_args(int argc, char **argv, struct opts *o);

/* workload.c */
const char *variant_name(enum variant_id v);
/* A backend's name as --backends takes it: raw-sendto or a library backend, not "+ts". */
int variant_from_name(const char *name);
/* Name the "+ts" variants after the sampling interval ("loop+ts/64") and the "+wK" ones after
 * K ("loop+w2", "loop+w2+ts/64"); once, before use. */
void variants_name(const struct opts *o);
/* Whether v's context has MS_CFG_OFFLOAD (--offload, "+offload"), and its ms_config.workers
 * (--workers, "+wK"; 0: not set, one thread). */
bool variant_offloads(const struct opts *o, enum variant_id v);
/* v's ms_config.zc_min: 1 or --zc-min for "+zc", 0 (never) for the plain io_uring beside it
 * (--compare-zc), else --zc-min (0: the library's default). */
uint32_t variant_zc_min(const struct opts *o, enum variant_id v);
uint32_t variant_workers(const struct opts *o, enum variant_id v);
/* Create the library contexts for the wanted backends; unavailable ones get a reason. */
int variants_open(struct session *s);
/* Replace v's context with a new one made the same way (AUTO, once per configuration, so its
 * decisions are that configuration's). 0 or -errno (v then unavailable for the rest). */
int variant_renew(struct session *s, enum variant_id v);
void variants_close(struct session *s);

/* run.c */
int run_throughput(struct session *s, unsigned mode, const uint64_t *fanouts, unsigned nf,
		   const uint64_t *sizes, unsigned ns);
/* The mean wall ns per fan-out of each variant at (n, size), measured briefly (for default
 * latency rates and capacity). */
int run_probe_rate(struct session *s, uint64_t n, uint64_t size, double ns_per_fanout[V_COUNT]);
/* Transmit timestamps over a stretch of sends of a "+ts" variant: ts_begin reads what the
 * group's sockets hold and snapshots the context (into *mark, allocated); ts_end does the same
 * and leaves the difference in *out (allocated), freeing *mark. NULL/no-op for the other
 * variants. 0 or -errno. */
int ts_begin(struct session *s, struct ms_group *g, enum variant_id v, struct ms_snapshot **mark);
int ts_end(struct session *s, struct ms_group *g, enum variant_id v, struct ms_snapshot **mark,
	   struct ts_result **out);
/* Add planned work units for the progress line. */
void progress_plan(struct session *s, double units);
void progress_step(struct session *s, double units, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
bool stopped(const struct session *s);
void request_stop(struct session *s);

/* latency.c */
int run_latency(struct session *s, const uint64_t *fanouts, unsigned nf, const uint64_t *sizes,
		unsigned ns);
/* Latency of one variant at (n, size, rate) for about seconds, for capacity's verification:
 * the median p99 (ns) of three consecutive parts, and the sending thread's preemptions. */
int latency_probe(struct session *s, enum variant_id v, uint64_t n, uint64_t size,
		  uint64_t rate, double seconds, double *p99_ns, uint64_t *preempted);

/* run.c: --timeline */
int run_timeline(struct session *s, const uint64_t *fanouts, unsigned nf, const uint64_t *sizes,
		 unsigned ns);

/* capacity.c */
int run_capacity(struct session *s);

/* callgrind.c: the --callgrind parent (runs the children, prints the table; an exit status),
 * and a child's measurement on the sending thread (0 or -errno). */
int callgrind_main(const struct opts *o, const struct env_info *env);
int callgrind_child(struct session *s);

/* env.c */
void env_collect(struct env_info *e);
/* The 1, 5 and 15 minute load averages, as /proc/loadavg says them ("" if unreadable). */
void loadavg_now(char *buf, size_t len);

/* report.c */
void report_header(struct session *s);
void report_result(struct session *s, const struct result *r);
/* After a configuration's rows (s->res[first], n of them): AUTO over the best fixed library
 * backend of the same rounds, when auto ran. */
void report_auto_best(struct session *s, size_t first, unsigned n);
void report_results_done(struct session *s, unsigned mode, uint64_t size);
/* After one configuration's rows (s->res or s->lat [first, first + n)): the "+ts" variants'
 * transmit-timestamp figures, and with --ts-hist their skew histograms. */
void report_ts(struct session *s, size_t first, size_t n);
void report_ts_latency(struct session *s, size_t first, size_t n);
/* After one configuration's rows: the call wall section (--sink netns-xdp). */
void report_call_wall(struct session *s, size_t first, size_t n);
void report_latency(struct session *s, const struct lat_result *l);
void report_capacity(struct session *s);
void report_timeline(struct session *s, size_t first, size_t n);
void json_timeline(FILE *f, const struct session *s, const struct tl_result *t);
/* After the run: each configuration's AUTO ms_ctx_describe, the load that ran and when, and
 * the load average at the end. */
void report_end(struct session *s);
void report_skip(struct session *s, const char *what, const char *why);
void report_legend(struct session *s);
/* A "!" line under the table. */
void report_note(struct session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void json_result(FILE *f, const struct session *s, const struct result *r);
void json_latency(FILE *f, const struct session *s, const struct lat_result *l);
void json_capacity(FILE *f, const struct session *s);
void json_env(FILE *f, const struct session *s);
void csv_header(FILE *f);
void csv_result(FILE *f, const struct session *s, const struct result *r);
void csv_latency(FILE *f, const struct session *s, const struct lat_result *l);
void text_header(FILE *f, const struct session *s);
const char *sink_name(enum sink_kind k);
/* The header's "sends" line: --dontwait, --rotate, --compare-dontwait, --compare-rotate,
 * --lib-connect, --compare-connect, the library's threads (--workers, --offload,
 * --compare-offload, --compare-workers, --cpus ...), or what holds without them; and the same
 * as a JSON member ,"send_options":{...}. */
const char *send_options_desc(const struct opts *o, char *buf, size_t len);
void json_send_options(FILE *f, const struct opts *o);
const char *mode_name(unsigned mode);

/* charts.c: the --report directory made and a first index.html written before anything is
 * measured (a directory that cannot be written is found before the run, not after it); then
 * the report itself. 0 or -errno, the reason on stderr. */
int report_dir_prepare(const struct session *s);
int report_dir_write(struct session *s);

#endif
