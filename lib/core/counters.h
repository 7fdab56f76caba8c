/* SPDX-License-Identifier: MIT */
/*
 * Every counter of a context, once. The table generates the context's counter fields (struct
 * ms__counters), their names in the live-counter file (what multisend-stat shows), the order
 * of the file's slot, the copy into struct ms_stats (whose fields have the same names, in the
 * same order: tests/abi checks the public struct's layout), and, for the part a call counts
 * (struct ms__tally), the sums over a fan-out's parts.
 *
 *   X(name)         a counter
 *   E(CLASS, name)  a failure class: counter err_<name>, enum MS__ERR_<CLASS> (ms__errclass)
 *
 * Adding a counter: one line here, its field at the same place in include/multisend.h's
 * struct ms_stats, and the code that counts it.
 */
#ifndef MS_COUNTERS_H
#define MS_COUNTERS_H

#include <stdint.h>

#define MS__ERRCLASSES(E)                                                                     \
	E(AGAIN, again)                                                                       \
	E(NOBUFS, nobufs)                                                                     \
	E(MSGSIZE, msgsize)                                                                   \
	E(UNREACH, unreach)                                                                   \
	E(CONN, conn)                                                                         \
	E(BADF, badf)                                                                         \
	E(OTHER, other)

/* The xdp backend's counters: in the context's counters and in a call's tally alike (its
 * executor counts them, ms__commit adds them). */
#define MS__XDP_COUNTERS(X)                                                                   \
	X(xdp_frames)                                                                         \
	X(xdp_kicks)                                                                          \
	X(xdp_fallback_local)                                                                 \
	X(xdp_fallback_iface)                                                                 \
	X(xdp_fallback_mtu)                                                                   \
	X(xdp_fallback_route)                                                                 \
	X(xdp_fallback_neigh)                                                                 \
	X(xdp_fallback_other)

/* The kfanout backend's (lib/be/kfanout/backend.c), kept the same way; at the end of the
 * table, as they are at the end of struct ms_stats. */
#define MS__KF_COUNTERS(X)                                                                    \
	X(kfanout_templates)                                                                  \
	X(kfanout_clones)                                                                     \
	X(kfanout_refused)                                                                    \
	X(kfanout_clone_err)                                                                  \
	X(kfanout_reclaimed)                                                                  \
	X(kfanout_fallback_local)                                                             \
	X(kfanout_fallback_iface)                                                             \
	X(kfanout_fallback_mtu)                                                               \
	X(kfanout_fallback_route)                                                             \
	X(kfanout_fallback_neigh)                                                             \
	X(kfanout_fallback_other)

#define MS__COUNTERS(X, E)                                                                    \
	X(fanouts)                                                                            \
	X(dests_attempted)                                                                    \
	X(dests_accepted)                                                                     \
	X(dests_partial)                                                                      \
	X(dests_failed)                                                                       \
	X(bytes)                                                                              \
	X(syscalls)                                                                           \
	MS__ERRCLASSES(E)                                                                     \
	X(slow_queued)                                                                        \
	X(slow_dropped)                                                                       \
	X(slow_removed)                                                                       \
	X(backlog_bytes)                                                                      \
	X(backlog_discarded)                                                                  \
	X(offload_msgs)                                                                       \
	X(offload_waits)                                                                      \
	X(offload_refused)                                                                    \
	X(zc_sends)                                                                           \
	X(zc_copied)                                                                          \
	X(ts_sampled)                                                                         \
	X(ts_requested)                                                                       \
	X(ts_stamped)                                                                         \
	X(ts_missing)                                                                         \
	X(ts_unsupported)                                                                     \
	X(ts_foreign)                                                                         \
	X(ts_late)                                                                            \
	X(auto_sampled)                                                                       \
	X(auto_explored)                                                                      \
	X(auto_decisions)                                                                     \
	X(auto_switches)                                                                      \
	X(auto_backend)                                                                       \
	X(auto_ns_loop)                                                                       \
	X(auto_ns_sendmmsg)                                                                   \
	X(auto_ns_io_uring)                                                                   \
	MS__XDP_COUNTERS(X)                                                                   \
	X(auto_ns_xdp)                                                                        \
	X(ts_hw_stamped)                                                                      \
	X(ts_hw_unavailable)                                                                  \
	X(fork_fallback)                                                                      \
	MS__KF_COUNTERS(X)                                                                    \
	X(auto_ns_kfanout)                                                                    \
	X(auto_clock_low)                                                                     \
	X(auto_cpu_ns_loop)                                                                   \
	X(auto_cpu_ns_sendmmsg)                                                               \
	X(auto_cpu_ns_io_uring)                                                               \
	X(auto_cpu_ns_xdp)                                                                    \
	X(auto_cpu_ns_kfanout)

/* Failure classes (ms_stats err_*). */
enum ms__errclass {
#define MS__E_ENUM(C, n) MS__ERR_##C,
	MS__ERRCLASSES(MS__E_ENUM)
#undef MS__E_ENUM
	MS__ERR_NCLASSES
};

/* Each counter's index in the slot and in struct ms__counters' v[]. */
enum {
#define MS__X_IDX(n) MS__K_##n,
#define MS__E_IDX(C, n) MS__K_err_##n,
	MS__COUNTERS(MS__X_IDX, MS__E_IDX)
#undef MS__X_IDX
#undef MS__E_IDX
	MS__NCOUNTERS
};

/* A context's counters, by name or by index (the offload ones are the pool's, filled in when
 * read: lib/exec/workers.c counts them on the posting thread). */
struct ms__counters {
	union {
		struct {
#define MS__X_FIELD(n) uint64_t n;
#define MS__E_FIELD(C, n) uint64_t err_##n;
			MS__COUNTERS(MS__X_FIELD, MS__E_FIELD)
#undef MS__X_FIELD
#undef MS__E_FIELD
		};
		uint64_t v[MS__NCOUNTERS];
	};
};
_Static_assert(sizeof(struct ms__counters) == 8 * MS__NCOUNTERS, "one word per counter");

/* What one executor run (or one whole call) did: the per-call part of the counters. X(name):
 * summed over a call's parts as they are. */
#define MS__TALLY(X)                                                                          \
	X(accepted)                                                                           \
	X(partial)                                                                            \
	X(failed)                                                                             \
	X(zc_sends)                                                                           \
	X(zc_copied)                                                                          \
	MS__XDP_COUNTERS(X)                                                                   \
	MS__KF_COUNTERS(X)

struct ms__tally {
#define MS__T_FIELD(n) uint32_t n;
	MS__TALLY(MS__T_FIELD)
#undef MS__T_FIELD
	uint32_t err[MS__ERR_NCLASSES];
	uint64_t bytes, syscalls;
	bool xdp; /* the xdp backend counted something in its fields */
	bool kf;  /* the kfanout backend did */
};

#endif
