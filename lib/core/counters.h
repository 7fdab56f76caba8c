/* SPDX-License-Identifier: MIT */
/*
 * Every counter of a context, once. The table generates the context's counter fields (struct
 * ms__counters), their names in the live-counter file (what multisend-stat shows), the order
 * of the file's slot, the copy into struct ms_stats (whose fields have the same names, in the
 * same order: tests/abi checks the public struct's layout), and, for the part a call counts
 * (struct ms__tally), the sums over a fan-out's parts.
 *
 *   X(name, help)         a counter, and what it counts (multisend-stat's HELP line; in
 *                         the words of struct ms_stats' comment, standing alone)
 *   E(CLASS, name, help)  a failure class: counter err_<name>, enum MS__ERR_<CLASS>
 *                         (ms__errclass)
 *
 * Adding a counter: one line here, its field at the same place in include/multisend.h's
 * struct ms_stats, and the code that counts it.
 */
#ifndef MS_COUNTERS_H
#define MS_COUNTERS_H

#include <stdint.h>

#define MS__ERRCLASSES(E)                                                                     \
	E(AGAIN, again, "destinations that failed with EAGAIN")                               \
	E(NOBUFS, nobufs, "destinations that failed with ENOBUFS, ENOMEM: local drops the "   \
	                  "kernel reported")                                                  \
	E(MSGSIZE, msgsize, "destinations that failed with EMSGSIZE")                         \
	E(UNREACH, unreach, "destinations that failed with ECONNREFUSED, EHOSTUNREACH, "      \
	                    "ENETUNREACH, ENETDOWN, EHOSTDOWN")                               \
	E(CONN, conn, "destinations that failed with EPIPE, ECONNRESET, ENOTCONN, "           \
	              "EDESTADDRREQ")                                                         \
	E(BADF, badf, "destinations that failed with EBADF, ENOTSOCK")                        \
	E(OTHER, other, "destinations that failed with any other error")

/* The xdp backend's counters: in the context's counters and in a call's tally alike (its
 * executor counts them, ms__commit adds them). */
#define MS__XDP_COUNTERS(X)                                                                   \
	X(xdp_frames, "destinations sent as frames through the AF_XDP socket")                \
	X(xdp_kicks, "system calls that asked the kernel to take AF_XDP frames")              \
	X(xdp_fallback_local, "xdp: destinations sent by the kernel's path: local or "        \
	                      "loopback address, broadcast, multicast looped back")           \
	X(xdp_fallback_iface, "xdp: destinations sent by the kernel's path: leaving by "      \
	                      "another interface than the context's")                         \
	X(xdp_fallback_mtu, "xdp: destinations sent by the kernel's path: a message larger "  \
	                    "than the path's MTU")                                            \
	X(xdp_fallback_route, "xdp: destinations sent by the kernel's path: no usable "       \
	                      "route")                                                        \
	X(xdp_fallback_neigh, "xdp: destinations sent by the kernel's path: the neighbour "   \
	                      "not resolved yet")                                             \
	X(xdp_fallback_other, "xdp: destinations sent by the kernel's path: not UDP, opted "  \
	                      "out, control messages, socket options frames cannot honour, "  \
	                      "the interface gone")

/* The kfanout backend's (lib/be/kfanout/backend.c), kept the same way; at the end of the
 * table, as they are at the end of struct ms_stats. */
#define MS__KF_COUNTERS(X)                                                                    \
	X(kfanout_templates, "kfanout: template sends the attached program replicated")       \
	X(kfanout_clones, "kfanout: destinations whose copy the device took")                 \
	X(kfanout_refused, "kfanout: destinations outside the attachment's policy (EPERM)")   \
	X(kfanout_clone_err, "kfanout: copies the device refused (ENOBUFS for a full "        \
	                     "queue)")                                                        \
	X(kfanout_reclaimed, "kfanout: destinations of template sends the program did not "   \
	                     "run for, sent by the kernel's path in the same call")           \
	X(kfanout_fallback_local, "kfanout: destinations sent by the kernel's path: local, "  \
	                          "loopback or broadcast")                                    \
	X(kfanout_fallback_iface, "kfanout: destinations sent by the kernel's path: "         \
	                          "leaving by an interface with no attachment")               \
	X(kfanout_fallback_mtu, "kfanout: destinations sent by the kernel's path: a "         \
	                        "message larger than the path's MTU")                         \
	X(kfanout_fallback_route, "kfanout: destinations sent by the kernel's path: no "      \
	                          "usable route")                                             \
	X(kfanout_fallback_neigh, "kfanout: destinations sent by the kernel's path: next "    \
	                          "hop not resolved yet")                                     \
	X(kfanout_fallback_other, "kfanout: destinations sent by the kernel's path: not "     \
	                          "UDP, connected, opted out, multicast, socket options "     \
	                          "copies cannot honour, the template route gone")

#define MS__COUNTERS(X, E)                                                                    \
	X(fanouts, "ms_send/ms_sendv calls that attempted at least one destination")          \
	X(dests_attempted, "destinations attempted, summed over calls")                       \
	X(dests_accepted, "destinations that accepted the whole message")                     \
	X(dests_partial, "destinations that accepted part of the message (stream sockets), "  \
	                 "or whose message a slow-consumer policy queued")                    \
	X(dests_failed, "destinations that reported an error (the err_* counters by class)")  \
	X(bytes, "bytes accepted by the kernel, over all destinations")                       \
	X(syscalls, "send-family system calls and io_uring_enter calls made (with xdp also "  \
	            "its kicks, poll, and the calls that make a plan)")                       \
	MS__ERRCLASSES(E)                                                                     \
	X(slow_queued, "messages a slow-consumer policy put, whole or in part, in a "         \
	               "destination's backlog")                                               \
	X(slow_dropped, "messages a slow-consumer policy skipped for a destination")          \
	X(slow_removed, "destinations a slow-consumer policy removed")                        \
	X(backlog_bytes, "bytes held in slow-consumer backlogs now, over all groups")         \
	X(backlog_discarded, "bytes discarded from backlogs: failed or removed streams")      \
	X(offload_msgs, "messages posted to the offload ring (ms_post, ms_postv)")            \
	X(offload_waits, "posted messages for which the caller had to wait for room in the "  \
	                 "ring")                                                              \
	X(offload_refused, "calls refused with EAGAIN: the offload ring was full and the "    \
	                   "call had MS_SEND_DONTWAIT")                                       \
	X(zc_sends, "destinations sent with io_uring SEND_ZC")                                \
	X(zc_copied, "zero-copy destinations whose data the kernel reported it copied "       \
	             "anyway")                                                                \
	X(ts_sampled, "fan-outs sampled for transmit timestamps")                             \
	X(ts_requested, "destinations that asked for transmit timestamps")                    \
	X(ts_stamped, "destinations asked for a timestamp whose stamp was read back")         \
	X(ts_missing, "destinations asked for a timestamp for which none came (the send "     \
	              "failed, or the datagram was dropped before any stamp point)")          \
	X(ts_unsupported, "sampled destinations not stamped: not UDP, or a socket with its "  \
	                  "own SO_TIMESTAMPING setting")                                      \
	X(ts_foreign, "error-queue entries read that were not this library's timestamps")     \
	X(ts_late, "timestamps that came after their fan-out was accounted, ignored")         \
	X(auto_sampled, "fan-outs whose cost MS_BACKEND_AUTO measured")                       \
	X(auto_explored, "fan-outs AUTO sent by another backend than the one in use, to "     \
	                 "measure it")                                                        \
	X(auto_decisions, "backend choices AUTO made (first ones, re-checks, after a "        \
	                  "drift)")                                                           \
	X(auto_switches, "AUTO's choices that changed the backend in use")                    \
	X(auto_backend, "the backend AUTO uses now (enum ms_backend: 1 loop, 2 sendmmsg, 3 "  \
	                "io_uring, 4 xdp, 5 kfanout)")                                        \
	X(auto_ns_loop, "time on the CPU per destination the loop backend cost at AUTO's "    \
	                "last decision (0: not measured)")                                    \
	X(auto_ns_sendmmsg, "time on the CPU per destination the sendmmsg backend cost at "   \
	                    "AUTO's last decision (0: not measured)")                         \
	X(auto_ns_io_uring, "time on the CPU per destination the io_uring backend cost at "   \
	                    "AUTO's last decision (0: not measured)")                         \
	MS__XDP_COUNTERS(X)                                                                   \
	X(auto_ns_xdp, "time on the CPU per destination the xdp backend cost at AUTO's "      \
	               "last decision (0: not measured)")                                     \
	X(ts_hw_stamped, "timestamps read back from a device's hardware clock")               \
	X(ts_hw_unavailable, "stamped destinations whose device does not stamp in "           \
	                     "hardware, or has it off")                                       \
	X(fork_fallback, "destinations the loop sent in a forked child because the "          \
	                 "context's backend keeps state that is the parent's")                \
	MS__KF_COUNTERS(X)                                                                    \
	X(auto_ns_kfanout, "time on the CPU per destination the kfanout backend cost at "     \
	                   "AUTO's last decision (0: not measured)")                          \
	X(auto_clock_low, "fan-outs AUTO measured whose threads never slept yet whose CPU "   \
	                  "clocks charged under 80% of their time on the CPU")                \
	X(auto_cpu_ns_loop, "time per destination by the thread CPU clock alone the loop "    \
	                    "backend cost at AUTO's last decision")                           \
	X(auto_cpu_ns_sendmmsg, "time per destination by the thread CPU clock alone the "     \
	                        "sendmmsg backend cost at AUTO's last decision")              \
	X(auto_cpu_ns_io_uring, "time per destination by the thread CPU clock alone the "     \
	                        "io_uring backend cost at AUTO's last decision")              \
	X(auto_cpu_ns_xdp, "time per destination by the thread CPU clock alone the xdp "      \
	                   "backend cost at AUTO's last decision")                            \
	X(auto_cpu_ns_kfanout, "time per destination by the thread CPU clock alone the "      \
	                       "kfanout backend cost at AUTO's last decision")

/* Failure classes (ms_stats err_*). */
enum ms__errclass {
#define MS__E_ENUM(C, n, h) MS__ERR_##C,
	MS__ERRCLASSES(MS__E_ENUM)
#undef MS__E_ENUM
	MS__ERR_NCLASSES
};

/* Each counter's index in the slot and in struct ms__counters' v[]. */
enum {
#define MS__X_IDX(n, h) MS__K_##n,
#define MS__E_IDX(C, n, h) MS__K_err_##n,
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
#define MS__X_FIELD(n, h) uint64_t n;
#define MS__E_FIELD(C, n, h) uint64_t err_##n;
			MS__COUNTERS(MS__X_FIELD, MS__E_FIELD)
#undef MS__X_FIELD
#undef MS__E_FIELD
		};
		uint64_t v[MS__NCOUNTERS];
	};
};
_Static_assert(sizeof(struct ms__counters) == 8 * MS__NCOUNTERS, "one word per counter");

/* What one executor run (or one whole call) did: the per-call part of the counters. X(name,
 * help): summed over a call's parts as they are (the tally's own fields have no help). */
#define MS__TALLY(X)                                                                          \
	X(accepted, "")                                                                       \
	X(partial, "")                                                                        \
	X(failed, "")                                                                         \
	X(zc_sends, "destinations sent with io_uring SEND_ZC")                                \
	X(zc_copied, "zero-copy destinations whose data the kernel reported it copied "       \
	             "anyway")                                                                \
	MS__XDP_COUNTERS(X)                                                                   \
	MS__KF_COUNTERS(X)

struct ms__tally {
#define MS__T_FIELD(n, h) uint32_t n;
	MS__TALLY(MS__T_FIELD)
#undef MS__T_FIELD
	uint32_t err[MS__ERR_NCLASSES];
	uint64_t bytes, syscalls;
	bool xdp; /* the xdp backend counted something in its fields */
	bool kf;  /* the kfanout backend did */
};

#endif
