/* SPDX-License-Identifier: MIT */
/*
 * libmultisend: send ONE message to MANY destinations in one call.
 *
 * This header is the whole public interface, and every contract of the library is written here,
 * once. Conventions that hold for every function below:
 *
 *  - Functions that can fail return an int: >= 0 on success, -errno on failure. There is no
 *    global error state and errno is not used to report errors (it may be changed by any call).
 *  - A context (struct ms_ctx) and the groups made from it belong to one thread at a time
 *    (ms_ctx_stats and ms_ctx_snapshot excepted: any thread may read the counters).
 *    Different contexts share nothing and may be used from different threads at once. With the
 *    io_uring backend the kernel ties the ring to the thread that makes the context's first
 *    send; after that, every call on the context and its groups must come from that thread
 *    (another thread's send is refused: -EEXIST for every destination the ring would send,
 *    nothing of it sent; with workers, the library threads' parts still go). A forked child
 *    never submits to its parent's ring: its sends on a context made before the fork go by
 *    the plain loop, which ms_ctx_backend and ms_ctx_describe then say and ms_stats counts
 *    (fork_fallback).
 *  - Structs marked "size-versioned" start with a uint32_t size that the caller sets to
 *    sizeof(the struct) as it was compiled; this lets old programs run against newer libraries
 *    and new programs detect old ones.
 */
#ifndef MULTISEND_H
#define MULTISEND_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(MS_BUILDING_LIBRARY) && defined(__GNUC__)
#define MS_EXPORT __attribute__((visibility("default")))
#else
#define MS_EXPORT
#endif

struct ms_ctx;
struct ms_group;

#define MS_VERSION_MAJOR 0
#define MS_VERSION_MINOR 1
#define MS_VERSION_PATCH 0
#define MS_VERSION_NUMBER ((MS_VERSION_MAJOR << 16) | (MS_VERSION_MINOR << 8) | MS_VERSION_PATCH)
#define MS_VERSION_STRING "0.1.0"

/* The library's version at run time, as MS_VERSION_NUMBER and MS_VERSION_STRING encode it. */
MS_EXPORT unsigned ms_version(void);
MS_EXPORT const char *ms_version_string(void);

/* ---------------------------------------------------------------------------------------------
 * Backends
 *
 * All of them give the same results for the same input; they differ in how many system calls
 * a fan-out costs, and the last in which path the datagrams take:
 *   MS_BACKEND_LOOP      one sendto/sendmsg per destination (always available).
 *   MS_BACKEND_SENDMMSG  one sendmmsg(2) per socket per run of up to 1024 destinations.
 *   MS_BACKEND_IO_URING  one io_uring_enter(2) per fan-out of up to queue_depth destinations,
 *                        across any number of sockets.
 *   MS_BACKEND_XDP       kernel bypass: UDP datagrams leave as frames the library builds
 *                        (Ethernet, IP, UDP) and hands to an AF_XDP socket on one interface's
 *                        transmit queue, one system call per batch the kernel takes; what it
 *                        cannot carry goes by the kernel's path, per destination (see "Kernel
 *                        bypass" below). Available only where an interface is named.
 *   MS_BACKEND_KFANOUT   kernel fan-out: one send of the message per slice of up to 256
 *                        UDP destinations, which a BPF program an administrator attached to
 *                        the egress interface replicates inside the kernel (see "Kernel
 *                        fan-out" below). Available only where an attachment is found and
 *                        the process may use it (no capability needed).
 *   MS_BACKEND_AUTO      measures them on the fan-outs the context sends and uses the cheapest
 *                        (see "Choosing a backend" at ms_ctx_new).
 */
enum ms_backend {
	MS_BACKEND_AUTO = 0,
	MS_BACKEND_LOOP = 1,
	MS_BACKEND_SENDMMSG = 2,
	MS_BACKEND_IO_URING = 3,
	MS_BACKEND_XDP = 4,
	MS_BACKEND_KFANOUT = 5,
};

/* "auto", "loop", "sendmmsg", "io_uring", "xdp", "kfanout"; NULL for a value outside the enum. */
MS_EXPORT const char *ms_backend_name(enum ms_backend b);

/* The backend a name stands for (the inverse of ms_backend_name), or -EINVAL. */
MS_EXPORT int ms_backend_from_name(const char *name);

/* ---------------------------------------------------------------------------------------------
 * Contexts
 */

/* Use exactly the backend asked for: ms_ctx_new fails with -ENOTSUP if it is unavailable or
 * disabled, instead of falling back. */
#define MS_CFG_NO_FALLBACK (1u << 0)
/* Ignore the MULTISEND_* environment variables (see below). */
#define MS_CFG_IGNORE_ENV (1u << 1)
/* Fairness: each fan-out of a group starts one destination later in the group's order than
 * the one before (wrapping around), so that no destination is always sent last; over any N
 * consecutive calls of an unchanged group of N, every destination is sent at every position
 * once. Results stay in group order (res[i] is still the i-th destination). Cost: none per
 * destination; with the sendmmsg backend, one more system call per fan-out whose start falls
 * inside a socket's run of destinations (its array is sent in two parts). */
#define MS_CFG_ROTATE (1u << 2)
/* Lock the library's memory (mlock(2)), which also faults it in, so that no page fault lands
 * on the send path: the context, its live-counter slot, the io_uring rings, every group's
 * arrays (message headers, addresses, ids), timestamp buffers, as they are allocated or grow.
 * A lock that fails fails the call that needed it, like an allocation: ms_ctx_new,
 * ms_group_new and ms_group_add return its error (-ENOMEM past RLIMIT_MEMLOCK, -EPERM) and
 * change nothing; a timestamp sample that cannot be locked is not taken; a slow consumer's
 * backlog, which grows on the send path, is locked when it grows if it can be. Memory the
 * library frees stays locked (it goes back to malloc); mappings it unmaps (rings) do not.
 * The caller's buffers, result arrays and the stack are the caller's: see the README for
 * mlockall(2) and isolated CPUs. */
#define MS_CFG_MLOCK (1u << 3)
/* Connected-socket fan-out: ms_group_add gives every address added on an unconnected UDP
 * socket (IPv4 or IPv6) a connected UDP socket of the library's own, so the kernel keeps the
 * route and the send skips its lookup (about a fifth less CPU per datagram, see the README),
 * and io_uring covers them all in one submission. The library's socket is made like the
 * caller's: the same family, O_NONBLOCK, SO_SNDBUF, SO_PRIORITY, SO_MARK, SO_BINDTODEVICE,
 * SO_BROADCAST, IP_TOS / IPV6_TCLASS, IP_TTL / IPV6_UNICAST_HOPS, IP_MTU_DISCOVER /
 * IPV6_MTU_DISCOVER, IP_RECVERR / IPV6_RECVERR, IPV6_V6ONLY, read when the address is added,
 * and bound to the caller's local address. If the caller's socket is bound to a port, the
 * library's sockets bind to that same port with SO_REUSEADDR, which the kernel allows only if
 * the caller's socket has SO_REUSEADDR too; otherwise the add fails with -EADDRINUSE. An
 * option that cannot be copied fails the add with its error (a value past the system's limit
 * for SO_SNDBUF needs CAP_NET_ADMIN, as for the caller). Connected UDP reports a subscriber
 * with no listener (-ECONNREFUSED on a later send) where an unconnected socket could not.
 * The socket is closed when its destination is removed or the group freed; one file
 * descriptor per destination (RLIMIT_NOFILE: -EMFILE). The caller's socket is not used for
 * these destinations and may be closed. Other destinations are added as they are. */
#define MS_CFG_CONNECT (1u << 4)
/* Offload: the context gets a library thread and a ring for ms_post and ms_postv, which copy
 * the message into the ring and return at once; the thread sends it. ms_send and ms_sendv
 * are unchanged. See "Workers and offload" below. */
#define MS_CFG_OFFLOAD (1u << 5)
/* MS_BACKEND_AUTO decides once per shape of group, from its first measurements, and never
 * measures or changes backend after (also MULTISEND_AUTO_FREEZE=1). See "Choosing a backend". */
#define MS_CFG_AUTO_FREEZE (1u << 6)
/* MS_BACKEND_XDP: bind the AF_XDP socket to transmit queue ms_config.xdp_queue (without
 * it, xdp_queue must be 0 and the library takes the queue the kernel's transmit packet steering
 * maps the calling CPU to, or queue 0). */
#define MS_CFG_XDP_QUEUE (1u << 7)
/* MS_BACKEND_XDP: copy mode only (without it, zero copy is tried first where the driver has
 * it, then copy mode). */
#define MS_CFG_XDP_COPY (1u << 8)
/* MS_BACKEND_XDP: frames may skip netfilter. Without it (or MULTISEND_XDP_NETFILTER=skip), the
 * backend takes no queue in a network namespace where netfilter filters output (an nftables
 * or iptables-nft base chain at the IPv4, IPv6 or inet output or postrouting hook, or netdev
 * egress; an iptables-legacy table), or where the library cannot list them (without
 * CAP_NET_ADMIN): the kernel's path sends, and the reason says why. Looked at when the
 * queue is taken (context creation, and after the interface came back), not at each send. */
#define MS_CFG_XDP_NETFILTER (1u << 9)
#define MS_CFG_ALL_FLAGS                                                                    \
	(MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV | MS_CFG_ROTATE | MS_CFG_MLOCK | MS_CFG_CONNECT | \
	 MS_CFG_OFFLOAD | MS_CFG_AUTO_FREEZE | MS_CFG_XDP_QUEUE | MS_CFG_XDP_COPY |             \
	 MS_CFG_XDP_NETFILTER)

/* Size-versioned. Zero-initialise it, set .size, then set what you need. Every field at zero
 * means "library default", and no default switches a feature on: a context made from an
 * all-zero config (or cfg NULL) sends from the calling thread alone, with no zero copy, no
 * timestamps and no live-counter file (unless the environment names one). Fields are grouped
 * by what they belong to; a field of a group that is not switched on (timestamps, library
 * threads) must stay zero (-EINVAL otherwise), so that a setting is never silently ignored.
 * The io_uring fields (queue_depth, zc_min) are taken with any backend: a fallback or
 * MULTISEND_BACKEND may choose io_uring after all. */
struct ms_config {
	uint32_t size;        /* sizeof(struct ms_config) */

	/* The backend. */
	uint32_t backend;     /* enum ms_backend; MS_BACKEND_AUTO measures and picks */
	uint32_t flags;       /* MS_CFG_* */
	uint32_t queue_depth; /* io_uring submission entries, 1..32768, rounded up to a power of
	                         two; 0 = 4096. A fan-out to more destinations than this takes
	                         one io_uring_enter per queue_depth destinations. */
	uint32_t zc_min;      /* io_uring: a message of at least zc_min bytes (one buffer),
	                         1..65536, goes to UDP destinations with zero copy, see "Zero
	                         copy"; 0 = never (the default). MS_ZC_MIN_DEFAULT is the
	                         recommended value where the device really takes the pages. */

	/* Timestamps (see "Timestamps"): ts_flags only with ts_sample. */
	uint32_t ts_sample;   /* kernel transmit timestamps on one fan-out in ts_sample of each
	                         group, 1..1000000000; 0 = off */
	uint32_t ts_flags;    /* MS_TS_*; 0 unless ts_sample is set */

	/* Library threads (see "Workers and offload"): there are some when workers >= 2 or
	 * flags has MS_CFG_OFFLOAD; all 0: the calling thread sends, alone. offload_kib only
	 * with MS_CFG_OFFLOAD; spin_us, ncpus and cpus only with library threads. */
	uint32_t workers;     /* threads that send each fan-out together, 1..64; 0 = 1 */
	uint32_t offload_kib; /* MS_CFG_OFFLOAD: the hand-over ring's size in KiB, 64..1048576,
	                         rounded up to a power of two; 0 = 4096 (4 MiB) */
	uint32_t spin_us;     /* how long an idle library thread polls for work before it sleeps,
	                         1..1000000 microseconds; 0 = 50 */
	uint32_t ncpus;       /* entries in cpus: 1..the number of library threads; 0 with cpus
	                         NULL */
	const int *cpus;      /* pin the library's threads: the i-th to CPU cpus[i]; threads past
	                         ncpus, and all of them when cpus is NULL, inherit the CPU
	                         affinity of the thread that calls ms_ctx_new (a publisher that
	                         pinned its own thread first should list them all) */

	/* Live counters (see "Live counters"). */
	const char *stats_shm; /* publish live counters in this file; NULL: the
	                          MULTISEND_STATS_SHM variable, or nowhere */

	/* Kernel bypass (MS_BACKEND_XDP, see "Kernel bypass"). */
	const char *xdp_ifname; /* the interface whose transmit queue the context takes (an
	                           AF_XDP socket bound to it); NULL: the MULTISEND_XDP_IFACE
	                           variable, or none, and then the xdp backend is unavailable
	                           (nor measured by MS_BACKEND_AUTO) */
	uint32_t xdp_queue;     /* with MS_CFG_XDP_QUEUE: the queue; 0 otherwise */
	uint32_t xdp_frames;    /* packet buffers (UMEM frames), 64..65536, a power of two; the
	                           transmit and completion rings have as many entries; 0 = 2048
	                           (4 MiB of packet memory at an MTU of 1500) */
};

/* The recommended zc_min, to set explicitly for a device that takes the pages (not loopback,
 * nor a veth into another namespace: there the kernel copies anyway and zero copy only costs
 * two completions per destination until the first report turns it off, see "Zero copy").
 * The library never applies it by itself: zc_min = 0 means never. */
#define MS_ZC_MIN_DEFAULT 4096u

/* ms_config.ts_flags: stamp every destination of a sampled fan-out (default: the first and the
 * last, which is enough for the call-to-first, call-to-last and skew histograms). */
#define MS_TS_ALL_DESTS (1u << 0)
/* ms_config.ts_flags: a stamped destination whose device stamps transmitted packets in
 * hardware gets the device's stamp (see "Timestamps"); the others software stamps, as without
 * it. */
#define MS_TS_HARDWARE (1u << 1)
#define MS_TS_ALL_FLAGS (MS_TS_ALL_DESTS | MS_TS_HARDWARE)

/*
 * Create a context. cfg may be NULL (all defaults).
 *
 * Returns 0 and sets *out, or:
 *   -EINVAL   out is NULL; or one of these rules about *cfg is broken:
 *             - size: at least sizeof(struct ms_config), at most 4096, and the bytes past
 *               the struct this library knows all zero;
 *             - flags: MS_CFG_* only, MS_CFG_AUTO_FREEZE only with MS_BACKEND_AUTO;
 *               backend: inside enum ms_backend;
 *             - queue_depth: at most 32768; zc_min: at most 65536;
 *             - ts_sample: at most 1000000000; ts_flags: MS_TS_* only, and 0 unless
 *               ts_sample is set;
 *             - workers: at most 64; offload_kib: 0, or 64..1048576 with MS_CFG_OFFLOAD;
 *               spin_us: 0, or 1..1000000 with library threads (workers >= 2 or
 *               MS_CFG_OFFLOAD); ncpus: 0, or at most the number of library threads
 *               (workers - 1, plus one with MS_CFG_OFFLOAD) with cpus set; cpus: NULL
 *               exactly when ncpus is 0; each listed CPU one the process may run on;
 *             - stats_shm: NULL, or a path that is not empty and at most 4095 bytes once
 *               %p is expanded (such a MULTISEND_STATS_SHM value is only warned about);
 *             - xdp_queue: 0 unless MS_CFG_XDP_QUEUE; xdp_frames: 0, or a power of two in
 *               64..65536; xdp_ifname: NULL, or a name an interface can have (not empty,
 *               at most 15 bytes, no '/' or ' ').
 *   -EAGAIN   a library thread could not be started (pthread_create).
 *   -ENOTSUP  ts_sample set and the kernel cannot key transmit timestamps per datagram
 *             (SCM_TS_OPT_ID, Linux 6.13 and later).
 *   -ENOTSUP  MS_CFG_NO_FALLBACK and the requested backend is unavailable or disabled, or
 *             every backend is disabled by the environment.
 *   other     MS_CFG_NO_FALLBACK and setting up the requested backend failed: its error (for
 *             io_uring, what io_uring_setup returned, e.g. -EPERM or -ENOMEM).
 *   -ENOMEM   out of memory.
 *
 * Choosing a backend: an explicit backend is used when available; otherwise (unless
 * MS_CFG_NO_FALLBACK) the first available of loop, io_uring, sendmmsg (loop always is; xdp
 * is never a fallback). An explicit backend stays fixed and deterministic. Availability of
 * io_uring is probed once per process; seccomp filters, kernel.io_uring_disabled and old
 * kernels make it unavailable, quietly. xdp is available only where an interface is named
 * (xdp_ifname, MULTISEND_XDP_IFACE; see "Kernel bypass" at ms_group_kernel_path), and then
 * AUTO measures it beside the others. kfanout is available where an administrator attached
 * the kernel fan-out to an interface of this network namespace and this process may open its
 * pinned maps (see "Kernel fan-out"), and then AUTO measures it beside the others; it is
 * never a fallback.
 *
 * MS_BACKEND_AUTO measures instead of assuming: which backend costs least per destination
 * depends on the host (system-call entry cost, mitigations, caches, the neighbours' load), on
 * the shape of the group and on its size, and no fixed order is right everywhere. An AUTO
 * context sets up every available backend and, while it sends real fan-outs, times a few of
 * them (the sending threads' CPU time per destination, kernel time included) on each backend
 * in turn, then sends with the cheapest (backends within 3% of the cheapest cost the same: of
 * those it keeps the one in use, else takes the one that makes the fewest system calls, so
 * that noise neither switches it nor makes two runs choose differently). It keeps one
 * decision per shape of group (datagrams
 * on few sockets, that is 8 or more destinations per socket; datagrams on many sockets;
 * streams) and size class (1-15, 16-127, 128-1023, 1024 or more destinations); it re-checks
 * every backend once per period (a second of fan-outs, and at least 512), and explores from
 * scratch when the chosen backend's own cost moves by more than 25% (the load changed).
 *   - Results, errors, order and counters are the same whichever backend sends a call (every
 *     backend keeps the same contract); only system-call counts differ.
 *   - What it minimises: the time the sending threads spend on the CPU per destination,
 *     kernel time included. The thread's CPU clock alone is not trusted for it (on some hosts
 *     it under-charges some backends' kernel work): a timed fan-out on a thread that never
 *     slept is measured from outside that clock, by its wall time less what it waited on a run
 *     queue (/proc/thread-self/schedstat) when it was preempted; only a thread that slept is
 *     measured by its CPU clock, corrected by the ratio that clock was seen to charge.
 *     auto_ns_* are these figures, auto_cpu_ns_* the CPU clock's alone, auto_clock_low counts
 *     the fan-outs whose clock charged under 80% of their time on the CPU.
 *   - Cost: an untimed fan-out costs one counter decrement. A timed one (8 per period, plus
 *     one per backend in each re-check, plus the first decision's rounds) reads the thread's
 *     CPU clock, its context switches (getrusage) and the monotonic clock twice, and
 *     /proc/thread-self/schedstat once, twice when it was preempted (about 6 system calls;
 *     the same on each library thread sending a part). The share of fan-outs sent by another backend than the chosen one, to
 *     measure it, is at most 4 in 512 once decided; the first decision takes 4 to 12 rounds
 *     of two fan-outs per backend. ms_stats counts all of it (auto_*), and
 *     docs/performance.md has AUTO measured beside the fixed backends.
 *   - MS_CFG_AUTO_FREEZE (or MULTISEND_AUTO_FREEZE=1): decide once per shape, then never time
 *     or explore again. MS_CFG_AUTO_FREEZE with another backend than AUTO is -EINVAL.
 *   - ms_ctx_backend says the backend AUTO's last decision chose (before any, the first of
 *     the order above); ms_ctx_describe and MULTISEND_SHOW_BACKEND give each shape's choice
 *     and the figures it was made on.
 *   - A child forked after the context was made sends with what its parent had chosen, and
 *     measures nothing.
 *
 * Environment (read with secure_getenv, so ignored in setuid programs; ignored entirely with
 * MS_CFG_IGNORE_ENV):
 *   MULTISEND_BACKEND=auto|loop|sendmmsg|io_uring|xdp|kfanout  replaces cfg->backend (an unknown
 *     name is ignored, with one warning on stderr per process).
 *   MULTISEND_NO_LOOP=1, MULTISEND_NO_SENDMMSG=1, MULTISEND_NO_IO_URING=1, MULTISEND_NO_XDP=1,
 *     MULTISEND_NO_KFANOUT=1 disable one.
 *   MULTISEND_XDP_IFACE=name  when cfg->xdp_ifname is NULL: the xdp backend's interface.
 *   MULTISEND_XDP_NETFILTER=skip  as MS_CFG_XDP_NETFILTER.
 *   MULTISEND_SHOW_BACKEND=1  print to stderr the backend chosen and why others were skipped;
 *     with AUTO, also each decision as it is made (first per shape, and every change).
 *   MULTISEND_AUTO_FREEZE=1  as MS_CFG_AUTO_FREEZE.
 *   MULTISEND_AUTO_RECHECK=N  AUTO re-checks every N fan-outs (16..100000000) instead of once
 *     a second (an invalid value is ignored, with one warning on stderr per process).
 *   MULTISEND_STATS_SHM=path  when cfg->stats_shm is NULL: publish live counters there.
 * A live-counter file that cannot be created is not an error: the context works without it,
 * and says so once on stderr.
 */
MS_EXPORT int ms_ctx_new(struct ms_ctx **out, const struct ms_config *cfg);

/* Free a context. Its groups must have been freed first. NULL is a no-op. With
 * MS_CFG_OFFLOAD, the messages posted are sent first (see ms_ctx_drain). */
MS_EXPORT void ms_ctx_free(struct ms_ctx *ctx);

/* The backend the context uses (never MS_BACKEND_AUTO): with AUTO, the one its last decision
 * chose (see "Choosing a backend"). In a child forked after the context was made, the backend
 * that sends there: MS_BACKEND_LOOP where the context's is io_uring or xdp (their ring and
 * AF_XDP socket are the parent's), and ms_ctx_describe says so and why. */
MS_EXPORT enum ms_backend ms_ctx_backend(const struct ms_ctx *ctx);

/* One line describing how the backend is set up (for io_uring: ring size and flags, file
 * registration, how addresses are sent; with AUTO, the backends it measures, each shape's
 * choice with every backend's CPU ns per destination, and how many fan-outs were explored
 * and timed), as MULTISEND_SHOW_BACKEND prints it. Writes at most
 * len bytes including the terminating NUL, like snprintf, and returns the length of the whole
 * line, or -EINVAL (ctx NULL, or buf NULL with len > 0). */
MS_EXPORT int ms_ctx_describe(const struct ms_ctx *ctx, char *buf, size_t len);

/* ---------------------------------------------------------------------------------------------
 * Destination groups
 */

/*
 * One destination: a socket and, for a socket that is not connected, the address to send to.
 *   - addr == NULL, addrlen == 0: fd is connected (UDP, TCP, AF_UNIX...); the message goes to
 *     its peer. A connected socket may appear at most once per group.
 *   - addr != NULL: sendto(fd, ..., addr, addrlen). The address is copied; the caller may reuse
 *     its memory at once. The same socket may carry any number of addresses.
 * Supported: AF_INET, AF_INET6 and AF_UNIX sockets of type SOCK_DGRAM, SOCK_STREAM or
 * SOCK_SEQPACKET. Stream sockets take no address.
 *
 * An IPv4 or IPv6 multicast group address on a UDP socket is one destination like any other:
 * one copy leaves, and the network delivers it to every member of the segment (what
 * multisend-bench --segments costs, and what examples/md-publisher --dest sends to). How far
 * and where it goes are the caller's socket options, set before the send, which the library
 * honours as sendto(2) would: IP_MULTICAST_TTL / IPV6_MULTICAST_HOPS (default 1: this
 * segment only), IP_MULTICAST_LOOP / IPV6_MULTICAST_LOOP (default on: members on this host get
 * a copy too), IP_MULTICAST_IF / IPV6_MULTICAST_IF (the outgoing device; default the route's).
 * Tested by the examples suite (md-mcast-ipv4, md-mcast-ipv6: loop on and off, members across
 * a veth) and the topology suite (10 IPv4 and 5 IPv6 members across a bridge).
 *
 * The library never closes fd and does not change its options (the xdp backend binds an
 * unbound UDP socket to an ephemeral port at its first send, as that sendto would have: see
 * "Kernel bypass"). fd must stay open while it is
 * in a group: remove it first, then close it. If it is closed anyway, the loop and sendmmsg
 * backends report -EBADF for it (or send on whatever file later takes the number), and the
 * io_uring backend, which holds a registered reference to the socket, keeps sending on the
 * original socket until the destination is removed. A socket that later takes the number is
 * not mistaken for the closed one where the library can tell: adding it to the same group
 * fails with -ESTALE; with io_uring, another group of the context sends to it as itself; a
 * slow-consumer backlog is never written to it (the destination is removed, -EBADF).
 *
 * A socket's O_NONBLOCK flag is read when it joins the group (when the group's first
 * destination on it is added): if set then, every send on it is non-blocking on every backend,
 * as with MS_SEND_DONTWAIT (io_uring would otherwise wait for room whatever the flag says).
 * Set it before adding the socket: set later, it makes loop and sendmmsg sends non-blocking
 * but not io_uring's.
 */
struct ms_dest {
	int fd;
	socklen_t addrlen;
	const struct sockaddr *addr;
};

/* Create an empty group bound to ctx. Returns 0, -EINVAL (NULL argument) or -ENOMEM. */
MS_EXPORT int ms_group_new(struct ms_ctx *ctx, struct ms_group **out);

/* Free a group (not its sockets). NULL is a no-op. */
MS_EXPORT void ms_group_free(struct ms_group *g);

/*
 * Add a destination in O(1) (amortised). Returns its id (>= 0), stable until it is removed;
 * the id of a removed destination may be given to a later one. Ids are small: always below
 * the largest size the group has had, so they can index the caller's own arrays. Errors:
 *   -EINVAL        g or d is NULL; addr NULL with addrlen != 0, or addr set with addrlen
 *                  shorter than its family's address or longer than struct sockaddr_storage;
 *                  an address on a stream socket.
 *   -EBADF         fd < 0 or not an open file.
 *   -ENOTSOCK      fd is not a socket.
 *   -ESOCKTNOSUPPORT  a socket type other than DGRAM, STREAM or SEQPACKET.
 *   -EAFNOSUPPORT  a socket family other than AF_INET, AF_INET6, AF_UNIX, or an address whose
 *                  family the socket cannot send to (an AF_INET6 socket may send to AF_INET
 *                  addresses, as sendto allows).
 *   -EEXIST        this connected socket is already in the group.
 *   -ESTALE        the group holds destinations on a socket that was closed while in the
 *                  group, and fd is a different file with the same number: remove them first.
 *   -ENOSPC        the group already holds INT32_MAX destinations.
 *   -ENOMEM        out of memory. (io_uring: if the kernel refuses to register the socket
 *                  in the ring's file table, that is not an error; the socket is then used
 *                  by its plain fd.)
 *   other          with MS_CFG_MLOCK, what mlock said (-ENOMEM, -EPERM); with MS_CFG_CONNECT,
 *                  what making the library's socket said: socket (-EMFILE, -ENFILE), copying
 *                  an option (-EPERM), bind (-EADDRINUSE: the caller's port cannot be
 *                  shared), connect (-ENETUNREACH...).
 * On error the group is unchanged (and no socket of the library's is left open).
 */
MS_EXPORT int ms_group_add(struct ms_group *g, const struct ms_dest *d);

/* Remove a destination in O(1). Returns 0, -EINVAL (g NULL) or -ENOENT (no such id). The
 * order of the remaining destinations may change (see ms_send). */
MS_EXPORT int ms_group_remove(struct ms_group *g, int id);

/*
 * Kernel bypass (MS_BACKEND_XDP)
 *
 * The xdp backend sends a UDP destination (IPv4 or IPv6; an address on an unconnected socket,
 * or a connected UDP socket's peer) as a frame it builds itself, Ethernet, IP and UDP headers
 * and the message, in packet memory shared with the kernel (an AF_XDP socket's UMEM, bound to
 * one transmit queue of the interface ms_config.xdp_ifname names). The kernel's UDP and IP
 * layers, and the per-datagram system call, are skipped: one system call hands the kernel a
 * batch of frames (in copy mode the kernel takes about 32 per call). Zero copy where the
 * driver has it, copy mode otherwise (veth, and any driver without XDP support).
 *
 * What the receiver sees is what the kernel's path would have sent: the source address and
 * port of the caller's socket (an unbound socket is bound first, to an ephemeral port, as the
 * first sendto would, so replies and ICMP errors reach it: the one change the library makes
 * to a caller's socket, at its first send by this backend), the socket's IP_TOS /
 * IPV6_TCLASS, IP_TTL / IPV6_UNICAST_HOPS (IP_MULTICAST_TTL / IPV6_MULTICAST_HOPS for a
 * group), DF as the socket's IP_MTU_DISCOVER says, and correct IP and UDP checksums. What
 * differs: the IPv4 ID where the kernel counts one (no DF, or a connected socket) is the
 * library's own count, IPv6 frames carry flow label 0, and DF is set under
 * IP_PMTUDISC_WANT even on a route whose MTU is locked. The route, the source address and the
 * next hop's link-layer address are the kernel's (asked over rtnetlink when the group
 * changes, again when the kernel reports a change of link, address, route, policy rule or
 * neighbour, read at most every 5 ms, and when a socket option read for the plan has changed,
 * checked for up to 256 of the group's sockets a second), looked up with everything the
 * kernel's own lookup carries (ports, protocol, the socket's owner, SO_MARK, TOS, bound
 * device), so policy rules match frames as they match the kernel's path. The bypass uses the neighbour entry as the kernel has it and never confirms it
 * itself: a next hop that changes its address without announcing it is learnt when the
 * kernel learns it. A multicast group leaves by IP_MULTICAST_IF's device when it was set by
 * address (an interface index alone cannot be read back: the routing table decides then) or
 * IPV6_MULTICAST_IF's.
 *
 * A destination the bypass cannot carry goes by the kernel's path (a sendto on its socket),
 * in the same call, with the same meaning, counted in ms_stats by reason:
 *   xdp_fallback_local   the destination is on this host (local or loopback address),
 *                        a broadcast address, or a multicast group the socket loops back to
 *                        (IP_MULTICAST_LOOP / IPV6_MULTICAST_LOOP on, the default);
 *   xdp_fallback_iface   the route (or the socket's multicast interface) leaves by another
 *                        interface than xdp_ifname;
 *   xdp_fallback_mtu     the message does not fit the path's MTU in one frame (the kernel
 *                        fragments it, or returns -EMSGSIZE as it would);
 *   xdp_fallback_route   no usable route: the kernel's send gives the error (-ENETUNREACH...);
 *   xdp_fallback_neigh   the next hop's link-layer address is not known yet: the kernel's
 *                        send makes it resolve, and once it is, the frames go by the bypass;
 *   xdp_fallback_other   not a UDP socket (TCP, AF_UNIX), opted out (ms_group_kernel_path),
 *                        a sampled fan-out's stamped destinations (transmit timestamps are
 *                        the kernel's path's), a socket with an option frames cannot
 *                        honour (IP_RECVERR / IPV6_RECVERR, UDP_CORK, UDP_SEGMENT,
 *                        IP_OPTIONS, SO_TIMESTAMPING for sends; IPV6_V6ONLY with an IPv4
 *                        destination), a device without an Ethernet header or a route the
 *                        lookup refuses,
 *                        no AF_XDP socket (the interface went away), no frame released for
 *                        a second (below).
 *
 * What the bypass skips, plainly: netfilter rules (OUTPUT, POSTROUTING: NAT, marks,
 * filtering), traffic control (qdiscs, shaping, tc filters), IPsec policies, the socket's
 * SO_PRIORITY and SO_MARK as packet metadata, and the kernel's UDP counters (the frames are
 * counted by the interface). A destination that needs any of them must stay on the kernel's
 * path: ms_group_kernel_path. Netfilter is guarded: where it filters the namespace's output,
 * or where the library cannot tell, the backend is not set up (MS_CFG_XDP_NETFILTER).
 *
 * Results keep their meaning: a destination's status is its length once the kernel has taken
 * its frame off the transmit ring (every call waits for that: in copy mode the kicks
 * themselves). No frame free: with MS_SEND_DONTWAIT, the destinations for which none was
 * (the kernel has not yet released enough of the frames sent before) get -EAGAIN; without it
 * the call waits in poll(2), 1 ms at a time, and after a second without a frame sends the
 * rest of the call by the kernel's path. Frames the kernel stops taking (the interface went
 * down, or nothing taken for a second) go by the kernel's path too, which answers as it would
 * have (-ENETUNREACH once the route is gone), after the AF_XDP socket is closed so that they
 * can never leave twice; the backend makes a new socket once the interface is back, and
 * meanwhile the routes decide. ms_stats.xdp_frames counts the destinations sent as frames,
 * xdp_kicks the system calls that handed frames over (also in syscalls, with the backend's
 * other calls: poll, rtnetlink, getsockopt when a plan is made).
 *
 * The xdp backend sends each fan-out whole from one thread (an AF_XDP socket is one transmit
 * queue: library workers do not split its fan-outs). It needs CAP_NET_RAW, room for its
 * packet memory under RLIMIT_MEMLOCK (xdp_frames times 2 KiB, 4 KiB past an MTU of 2034; or
 * CAP_IPC_LOCK), and an interface that is up with a carrier when the context is made (a
 * veth's peer must be up). Unavailable, ms_ctx_new falls back, or under MS_CFG_NO_FALLBACK
 * fails with -ENOTSUP (not built, disabled, no CAP_NET_RAW, no interface named) or the set-up's
 * own error (-ENODEV no such interface, -EPROTONOSUPPORT not an Ethernet device, -ENETDOWN
 * down or no carrier, -EBUSY its queue taken by another AF_XDP socket, -ENOBUFS the
 * locked-memory limit); MULTISEND_SHOW_BACKEND=1 says why. A queue released by a context just
 * freed is waited for (up to half a second). In a child forked after the context was made,
 * the loop sends (ms_ctx_backend says loop; counted in fork_fallback).
 */

/* Send destination id (or, with id == MS_GROUP_ALL, every destination of the group, present
 * and future) by the kernel's path even when the backend could bypass it (on nonzero), or
 * allow the bypass again (on = 0). Meaningful with MS_BACKEND_XDP (and AUTO measuring it);
 * with other backends every destination goes by the kernel's path anyway, and the setting is
 * kept. Returns 0, -EINVAL (g NULL, id < 0 and not MS_GROUP_ALL) or -ENOENT (no such id). */
#define MS_GROUP_ALL (-1)
MS_EXPORT int ms_group_kernel_path(struct ms_group *g, int id, int on);

/*
 * Kernel fan-out (MS_BACKEND_KFANOUT)
 *
 * The kfanout backend sends the UDP destinations of an unconnected IPv4 or IPv6 socket whose
 * route leaves by an interface where an administrator attached the kernel fan-out
 * (`multisend-kfanout attach IFACE`, docs/kfanout.md) with one sendmsg(2) per slice of up to
 * 256 of them (the slice size is the attachment's): the message goes once, on the caller's
 * own socket, to a reserved template address, naming the attachment's interface as its
 * outgoing one (so that without its route it goes nowhere else); the attached BPF program,
 * on the interface's egress, in the caller's context and before the send returns, copies it
 * to each destination of the slice (rewriting the Ethernet, IP and UDP destinations and
 * checksums) and writes each copy's result where the library reads it. So a destination's status is what the
 * device said of its copy: its length, -ENOBUFS for exactly the copies a full queue did not
 * take, or -EPERM for a destination outside the prefixes and ports the administrator allowed
 * (kfanout_refused). Never twice, never skipped: a template the program did not run for
 * (detached meanwhile, a route that changed, a send that failed) is taken back and its slice
 * goes by the kernel's path in the same call (kfanout_reclaimed).
 *
 * The copies are the template's: the socket's source address and port (an unbound socket is
 * bound by the template's send, as by any first send), TOS/TCLASS, TTL/hop limit and DF,
 * and one IPv4 ID for the slice. What they skip, plainly: routing per destination (the
 * library checks when the group or the network changes that each destination's route leaves
 * by the attachment's interface, from the template's source address, with a resolved next
 * hop, whose link-layer address it writes into the destination's record: kept current as the
 * xdp backend keeps its frames' headers, by rtnetlink notifications looked for at most every
 * 5 ms),
 * netfilter (OUTPUT and POSTROUTING rules see the template only), IPsec policies, and the
 * kernel's UDP counters; they do pass the device's root qdisc and taps. A destination that
 * needs any of them must stay on the kernel's path: ms_group_kernel_path.
 *
 * A destination the kernel fan-out cannot carry goes by the kernel's path (sendmmsg runs) in
 * the same call, with the same meaning, counted by reason: kfanout_fallback_local (local,
 * loopback, broadcast), _iface (its route leaves by an interface without an attachment),
 * _mtu (the message does not fit the path's MTU in one datagram), _route (no usable route),
 * _neigh (next hop not resolved yet: the kernel's send resolves it), _other (not UDP, a
 * connected socket, opted out, a multicast group, a socket with IP_RECVERR / IPV6_RECVERR,
 * UDP_CORK, UDP_SEGMENT, IP_OPTIONS or SO_TIMESTAMPING for sends, IPV6_V6ONLY with an IPv4
 * destination, a route whose source address is not the template's, an attachment whose
 * template route is gone). A gathered message (ms_sendv with several pieces) goes by the
 * loop backend as a whole.
 *
 * Who may use it: anyone who may open the attachment's pinned maps (KF_PIN_ROOT/IFACE/ in
 * bpffs: their owner group and mode are the administrator's choice); no capability. The
 * context finds every attachment of its network namespace when it is made (the ones added
 * later are not seen). Unavailable, ms_ctx_new falls back quietly, or under
 * MS_CFG_NO_FALLBACK fails with -ENOTSUP (not built, disabled, no attachment here), -EACCES
 * (the pins exist but this user may not open them), -EPERM (bpf(2) refused: a kernel before
 * 6.5 with kernel.unprivileged_bpf_disabled refuses every call without CAP_BPF), -ENOSYS or
 * -EINVAL (a kernel without bpf(2) or mmap-able maps, before 5.5); MULTISEND_SHOW_BACKEND=1
 * says why. A context holds one slot of the attachment (1024 in all) per socket and slice of
 * each group, claimed when a group is sent first after a change and released when the group
 * or context is freed (a process that dies leaves claims a later one takes over). Fan-outs
 * are sent whole from one thread (workers do not split them); in a child forked after the
 * context was made, the loop sends (fork_fallback).
 */

/* Number of destinations in the group (0 for NULL). */
MS_EXPORT size_t ms_group_size(const struct ms_group *g);

/* ---------------------------------------------------------------------------------------------
 * Sending
 */

/* Do not block on any destination for this call: a full socket gives -EAGAIN for that
 * destination only. */
#define MS_SEND_DONTWAIT (1u << 0)
#define MS_SEND_ALL_FLAGS (MS_SEND_DONTWAIT)

/* What happened to one destination in one call: 8 bytes, so that a fan-out's result array
 * costs the caller 8 bytes per destination. What a slow-consumer policy did is not in it (it
 * concerns few destinations, only in groups with a policy): ms_group_slow_results has it. */
struct ms_result {
	int id;     /* the destination's id, as ms_group_add returned it */
	int status; /* bytes of this message the kernel accepted in this call (== the message
	               length unless a stream socket took only part of it), or -errno */
};

/*
 * Send the len bytes at buf to every destination of g, each attempted exactly once: never
 * skipped, never sent twice (a slow-consumer policy may queue or skip the message for one
 * destination, and ms_group_slow_results says so). One destination's failure never stops the others
 * and is never reported against another destination.
 *
 * Returns the number of destinations that accepted the WHOLE message (0 for an empty group),
 * or a negative errno only when the call itself is invalid and nothing was attempted:
 *   -EINVAL  g NULL; buf NULL with len > 0; len > SSIZE_MAX; unknown flags.
 *   If the backend itself fails (for io_uring: the ring refuses a submission), the
 *   destinations it could not attempt get that error as their status (and count in
 *   dests_failed); ms_send returns the error when no destination accepted anything.
 *
 * res, if not NULL, must have room for ms_group_size(g) entries; res[i] describes the i-th
 * destination in the group's current order (which add and remove may change; res[i].id says
 * which destination it is). Per-destination statuses, as the kernel gives them, for example:
 *   -EAGAIN       the socket is full (non-blocking socket or MS_SEND_DONTWAIT);
 *   -EMSGSIZE     the message is larger than this socket can send as one datagram;
 *   -EBADF        the socket was closed (loop and sendmmsg backends, see struct ms_dest);
 *   -ECONNREFUSED a connected UDP socket's peer had no listener for an earlier message;
 *   -EPIPE, -ECONNRESET  a stream's peer went away (never SIGPIPE: MSG_NOSIGNAL is set).
 * Interrupted calls (EINTR) are retried inside the library. A stream socket may accept part
 * of the message (a status below len; a blocking socket does so only when interrupted by a
 * signal); without a slow-consumer policy the library does not send the rest, and the stream
 * is no longer framed; with one (ms_group_set_slow) the rest is always sent first, before any
 * later message. A status always fits in an int: the kernel takes at most 0x7ffff000 bytes in
 * one call.
 *
 * The backends agree on what is sent; on a transient error (EAGAIN, ENOBUFS) they may not
 * agree on the status: when sendmmsg stops inside a batch the kernel does not say why, so the
 * library sends that message again by itself, and if the condition has passed it succeeds.
 *
 * UDP sockets hide local drops (ENOBUFS) unless IP_RECVERR/IPV6_RECVERR is set on them; the
 * library does not set it. An unconnected UDP socket does not report that a destination has
 * no listener.
 *
 * On return the library holds no reference to buf, whatever the backend: buf may be reused.
 *
 * On a context with MS_CFG_OFFLOAD, ms_send first waits until every message posted before it
 * (ms_post) has been sent, whatever its flags, then sends as above; see "Workers and offload".
 */
MS_EXPORT int ms_send(struct ms_group *g, const void *buf, size_t len, unsigned flags,
		      struct ms_result *res);

/*
 * ms_send for a message gathered from iovcnt buffers (for example a header and a payload,
 * without copying them together). Same contract as ms_send, plus:
 *   -EINVAL  iov NULL with iovcnt > 0; iovcnt < 0 or > IOV_MAX; a NULL base with a non-zero
 *            length; total length > SSIZE_MAX.
 */
MS_EXPORT int ms_sendv(struct ms_group *g, const struct iovec *iov, int iovcnt, unsigned flags,
		       struct ms_result *res);

/* ---------------------------------------------------------------------------------------------
 * Workers and offload
 *
 * ms_config.workers = K (2..64) splits each fan-out in K parts, each a contiguous run of the
 * send order (rotated or not) with an equal share of the destinations, sent at the same time:
 * the calling thread sends the first part and K - 1 threads of the library's, started by
 * ms_ctx_new, one part each; ms_send returns when every part is done, with the same results,
 * counters and contract as one thread's. The last destination leaves about K times sooner;
 * CPU per destination does not fall (the same sends happen on more cores), so give the
 * threads cores of their own (cpus). Each library thread sends with the context's backend on
 * state of its own (io_uring: its own ring, which sends by plain file descriptor; the calling
 * thread keeps the context's ring and its registered files). Sent by the calling thread
 * alone: a group with fewer than 8 destinations per part uses fewer parts (a group of 8 to 15
 * uses one); so do fan-outs of a group with a slow-consumer policy on a connection-oriented
 * destination, and messages of 4 GiB or more.
 *
 * Offload (MS_CFG_OFFLOAD): ms_post and ms_postv hand a message over and return at once; the
 * context's offload thread, started by ms_ctx_new, sends it (without MS_CFG_OFFLOAD there is
 * no such thread, and ms_post fails with -ENOTSUP). Like uv_udp_send next to
 * uv_udp_try_send: ms_send is the synchronous call with its results, ms_post the
 * asynchronous one with its own contract:
 *  - The message is copied into a ring the context owns (offload_kib); the caller's buffers
 *    are free when ms_post returns. The offload thread sends it with everything the context
 *    is configured for (with workers = K, K library threads share each fan-out). Posted
 *    messages leave in the order they were posted, each to every destination its group has
 *    when the offload thread takes it (the group cannot change in between: see below).
 *  - ms_post returns when the message is handed over, not sent: the number of destinations
 *    it will be attempted on (the group's size), and sets *seq (if seq is not NULL) to the
 *    message's post number: the context's posted messages are numbered 1, 2, 3 ... in order
 *    (the n-th has number n, which offload_msgs in ms_ctx_stats counts). A full ring makes
 *    the call wait for room (offload_waits); with MS_SEND_DONTWAIT it returns -EAGAIN
 *    instead, and nothing of the message is sent or numbered (offload_refused). A message
 *    longer than a quarter of the ring: -EMSGSIZE. An empty group: 0, nothing handed over,
 *    *seq = 0. MS_SEND_DONTWAIT also makes the message's sends non-blocking, as in ms_send.
 *  - What each destination did: every destination that did not accept the whole message
 *    (a status other than the message length in what would be ms_send's res, or one that
 *    a slow-consumer policy queued, dropped or removed: flags in ms_group_slow_results) is
 *    written to the context's post log, with the post number, the group, the destination's
 *    id, its status and the policy's flags; ms_ctx_post_errors reads it. The log holds
 *    MS_POST_LOG_ENTRIES entries; while it is full, further entries are dropped and counted,
 *    so read it as often as failures may come (after ms_ctx_drain it is complete). A log
 *    rather than a completion callback: the caller's thread reads it when it chooses, no
 *    caller code runs on the library's thread, and a burst of failures costs a bounded
 *    amount of memory. The counters (ms_ctx_stats, ms_ctx_snapshot, the live counters) count
 *    posted messages' destinations as ms_send's, as the offload thread sends.
 *  - ms_ctx_drain waits until every posted message has been sent; ms_ctx_free drains first.
 *    Messages posted but not yet sent when the process exits are lost: drain before exit.
 *  - ms_send and ms_sendv on the context stay synchronous, with their own return value and
 *    res: each first waits until the messages posted before it have been sent, then sends
 *    from the calling thread (with workers, the calling thread sends the first part). With
 *    the io_uring backend, whose ring accepts submissions from one thread only, the offload
 *    thread sends it instead, from the caller's own buffers, while the caller waits: the
 *    results and the contract are the same.
 *  - Every other call on a group of the context (ms_group_add, _remove, _free, _size,
 *    _kernel_path, _set_slow, _flush, _slow_results, _backlog, _ts_collect, _ts_last) first
 *    waits until the posted messages have been sent, so a group only ever changes between
 *    two fan-outs.
 *  - ms_ctx_stats reports what the sending threads have published (it does not wait).
 *  - Timestamps (ts_sample) time a posted fan-out from the moment the offload thread begins it.
 *
 * Library threads poll for work for spin_us after their last job, then sleep; waking a
 * sleeping one costs the waker a futex(2) call. A forked child has none of its parent's
 * threads: there, the context's calls send from the calling thread alone (ms_post sends the
 * message before it returns, numbers it and logs it as above; the parent's messages posted
 * before the fork are not sent by the child). io_uring with offload: the ring belongs to
 * the offload thread, so a socket added after the first fan-out is used by its plain fd.
 */

/* Post the len bytes at buf to every destination of g (see above). Returns the group's size
 * (0 for an empty group, nothing posted), or:
 *   -EINVAL    g NULL; buf NULL with len > 0; len > SSIZE_MAX; unknown flags.
 *   -ENOTSUP   the context was made without MS_CFG_OFFLOAD (nothing is sent).
 *   -EMSGSIZE  len is more than a quarter of the offload ring.
 *   -EAGAIN    MS_SEND_DONTWAIT and the ring has no room now (nothing is sent).
 * seq may be NULL; otherwise it gets the post number, or 0 when nothing was posted. */
MS_EXPORT int ms_post(struct ms_group *g, const void *buf, size_t len, unsigned flags,
		      uint64_t *seq);

/* ms_post for a message gathered from iovcnt buffers; the same contract, plus ms_sendv's
 * -EINVAL cases for iov and iovcnt. */
MS_EXPORT int ms_postv(struct ms_group *g, const struct iovec *iov, int iovcnt, unsigned flags,
		       uint64_t *seq);

/* Wait until every message posted to the context (ms_post) has been sent to all its
 * destinations, and its outcomes are in the post log. Returns 0 (at once without offload),
 * or -EINVAL (ctx NULL). */
MS_EXPORT int ms_ctx_drain(struct ms_ctx *ctx);

/* One destination of a posted message that did not accept all of it. */
struct ms_post_error {
	uint64_t seq;        /* the message's post number, as ms_post set it */
	int id;              /* the destination's id, as ms_group_add returned it */
	int status;          /* as ms_result.status: -errno, or the bytes of the message the
	                        kernel took (fewer than its length, or with MS_RES_QUEUED) */
	uint32_t flags;      /* MS_RES_*: what the group's slow-consumer policy did, as
	                        ms_group_slow_results would report it for this message; 0 when
	                        it did nothing (or the group has no policy) */
	uint32_t pad;
	struct ms_group *g;  /* the group it was posted to (to compare only: the group may have
	                        been freed since) */
};

#define MS_POST_LOG_ENTRIES 4096u

/*
 * Take up to n entries from the context's post log, oldest first, into out; they leave the
 * log. Entries come in the order of the messages, and within one message in the group's
 * order (as in ms_send's res). lost, if not NULL, gets the number of entries dropped since
 * the previous call that asked (which resets it): because the log was full, or (rarely)
 * because the offload thread had no memory for the message's results. Context thread only, like ms_post.
 * Returns the number of entries copied (0 without offload, *lost = 0), or -EINVAL (ctx NULL,
 * or out NULL with n > 0).
 */
MS_EXPORT int ms_ctx_post_errors(struct ms_ctx *ctx, struct ms_post_error *out, size_t n,
				 uint64_t *lost);

/* ---------------------------------------------------------------------------------------------
 * Zero copy (io_uring backend)
 *
 * Off unless ms_config.zc_min is set (MS_ZC_MIN_DEFAULT is the recommended value). It is not
 * on by default because where it cannot pay (loopback, a veth, any socket of this host) it
 * costs: every SEND_ZC completes twice until the kernel's first copy report turns it off,
 * and a context cannot know beforehand which kind of device its destinations are behind.
 *
 * A message of at least ms_config.zc_min bytes, sent with ms_send (one buffer) on a fan-out
 * without a timestamp request, is copied once into one of two buffers the ring has registered
 * and goes to every UDP destination (AF_INET, AF_INET6 datagram sockets) with IORING_OP_SEND_ZC
 * from there: the kernel hands the same pages to the device for every destination instead of
 * copying the message into each datagram. Other destinations go as always. Results, counters
 * and the buffer contract are unchanged (the caller's buffer is free on return). Zero copy
 * never waits for the kernel to let go of a buffer: a fan-out that finds both busy is sent
 * the ordinary way. Each such send completes twice (its result, then a notification), so it
 * pays only where the device really takes the pages: the kernel copies anyway on loopback,
 * to a socket of this host (through a veth into another namespace too), for a datagram the
 * MTU makes it fragment, and for devices without scatter-gather, and says so
 * in the notification (REPORT_USAGE, Linux 6.2): the first such report turns zero copy off
 * for the ring (zc_copied counts it; MULTISEND_SHOW_BACKEND says "zero copy off"). A kernel
 * without SEND_ZC (before 6.0) or without REPORT_USAGE sends plainly (the latter after one
 * refused request per ring, sent again plainly). Every ring of the context (workers' too)
 * decides for itself.
 */

/* ---------------------------------------------------------------------------------------------
 * Slow consumers
 *
 * A destination on a connection-oriented socket (SOCK_STREAM, SOCK_SEQPACKET) whose socket
 * buffer is full either blocks the whole fan-out (a blocking socket) or takes part or none of a
 * message (a non-blocking one, or MS_SEND_DONTWAIT), which leaves a byte stream cut in the
 * middle of a message. A group's slow-consumer policy decides instead, per destination, and
 * never blocks: with a policy set, every send to such a destination is non-blocking, and a
 * message the kernel took only part of is always completed (from a backlog, before anything
 * newer) unless the destination is removed, so a stream stays framed message by message.
 * Datagram destinations are not affected: a full datagram socket already drops (-EAGAIN).
 */
enum ms_slow_policy {
	MS_SLOW_BLOCK = 0,      /* no policy (the default): the socket's own mode decides */
	MS_SLOW_DROP = 1,       /* skip the message for a destination that cannot take it now
	                           (status -EAGAIN, MS_RES_DROPPED); a message it took part of is
	                           completed first */
	MS_SLOW_QUEUE = 2,      /* keep what it cannot take in a per-destination backlog of at
	                           most queue_limit bytes (plus the rest of one message begun
	                           within it; seqpacket messages count 4 bytes more each); a
	                           message that does not fit gets the overflow action */
	MS_SLOW_DISCONNECT = 3, /* remove the destination (MS_RES_REMOVED) as soon as it cannot
	                           take a whole message */
};

/* Size-versioned; zero-initialise, set .size and what you need. */
struct ms_slow_config {
	uint32_t size;        /* sizeof(struct ms_slow_config) */
	uint32_t policy;      /* enum ms_slow_policy */
	uint32_t overflow;    /* MS_SLOW_QUEUE: MS_SLOW_DROP (also 0) or MS_SLOW_DISCONNECT, for a
	                         message that would take the backlog past queue_limit */
	uint32_t queue_limit; /* MS_SLOW_QUEUE: bytes per destination, 1..1 GiB; 0 = 4 MiB */
};

/*
 * Set the group's slow-consumer policy, for the connection-oriented destinations it has and
 * will have. Returns 0, or:
 *   -EINVAL  g or cfg NULL; cfg->size too small, larger than 4096, or with non-zero bytes past
 *            the struct this library knows; policy, overflow or queue_limit out of range;
 *   -EBUSY   a destination still holds a backlog (flush it, or remove it, first).
 *
 * How the calls report it: ms_group_slow_results says, destination by destination, what the
 * policy did in the group's last call (ms_send's res has only id and status). A status counts
 * only the bytes of this message the kernel took in this call (0 when all of it was
 * queued), and ms_send's return value counts only the
 * destinations that took the whole message (a queued message counts in dests_partial). A
 * destination the policy removes is reported once, with MS_RES_REMOVED; the library does not
 * close its socket. Removed, whatever the policy: a destination whose stream fails (-EPIPE,
 * -ECONNRESET, -ECONNREFUSED, -EHOSTUNREACH, -ETIMEDOUT, -EBADF...), and one whose backlog
 * cannot be written or kept (an error other than a full socket, or no memory for the rest of
 * a message begun: status the bytes taken), so that no later message goes out on a stream
 * that is gone or cut. A seqpacket message in a backlog that the socket refuses on its own
 * account (-EMSGSIZE) is dropped and counted in backlog_discarded. What a removed destination
 * held is discarded and counted in backlog_discarded, as by ms_group_remove and ms_group_free.
 *
 * Policies frame by SOCK_STREAM as a byte stream (TCP, AF_UNIX stream) and by SOCK_SEQPACKET as
 * messages. Framing holds within a group: a stream socket in two groups with policies could
 * have one group's message written into the other's unfinished one.
 *
 * Backlogs are memory the library allocates on the send path, as needed, up to the limit; a
 * backlog's buffer above 64 KiB is freed when it drains.
 */
MS_EXPORT int ms_group_set_slow(struct ms_group *g, const struct ms_slow_config *cfg);

/* ms_slow_result.flags (and ms_post_error.flags): what the policy did for a destination. */
#define MS_RES_QUEUED (1u << 0)  /* all or the rest of this message waits in the destination's
                                    backlog; later calls send it, in order, before anything
                                    newer */
#define MS_RES_DROPPED (1u << 1) /* the policy skipped this message for this destination
                                    (status -EAGAIN, or -ENOBUFS/-ENOMEM: the socket could
                                    not take it now); nothing of it was sent */
#define MS_RES_REMOVED (1u << 2) /* the policy removed the destination from the group (status
                                    says why); its id may be reused once the call returns */

/* What the policy did for one destination in one call (see ms_group_slow_results). */
struct ms_slow_result {
	int id;           /* the destination's id in that call (it may be removed since) */
	int status;       /* as ms_result.status in that call; for ms_group_flush, the bytes of
	                     its backlog sent in the call, or -errno */
	uint32_t flags;   /* MS_RES_*; 0: it held a backlog when the call began and the policy
	                     did nothing more (the backlog was written and the message went
	                     whole; for ms_group_flush, the backlog emptied; or status is the
	                     error that stopped the whole call, see ms_send) */
	uint32_t pos;     /* its position in that call's group order: res[pos] of ms_send */
	uint64_t backlog; /* bytes the destination holds in its backlog after the call (0 when
	                     removed: what it held is discarded) */
};

/*
 * The group's record of what its slow-consumer policy did in the group's last call that
 * attempted anything: ms_send, ms_sendv, ms_group_flush, or (MS_CFG_OFFLOAD) the last posted
 * message sent. Every such call replaces the record, so read it before the next one. A call
 * refused with -EINVAL leaves it alone; a send to an empty group empties it.
 *
 * The record has one entry, in that call's group order (ascending pos), for each destination
 * the policy acted on: its message was queued (MS_RES_QUEUED), dropped (MS_RES_DROPPED), or
 * it was removed (MS_RES_REMOVED: its id is in the record though no longer in the group), or
 * it held a backlog when the call began (which was written first; flags 0 if it emptied and
 * the new message went whole). Every other destination took the whole message or failed
 * without the policy (its status in res says which) and has no entry: a call in which the
 * policy did nothing leaves the record empty, and so does every call of a group without a
 * policy. At most one entry per connection-oriented destination, so the record needs no
 * memory on the send path: its room is reserved when such destinations are added (or the
 * policy set), and ms_send's result array stays 8 bytes per destination with or without a
 * policy.
 *
 * Copies the first min(n, count) entries to out and returns count, the number of entries the
 * record has; -EINVAL: g NULL, or out NULL with n > 0. Context thread only; under offload it
 * first waits until the posted messages have been sent (like every group call).
 */
MS_EXPORT int ms_group_slow_results(const struct ms_group *g, struct ms_slow_result *out,
				    size_t n);

/*
 * Send what the group's backlogs hold, without blocking and without a new message (ms_send does
 * the same, first, for each destination it sends to). It replaces the group's record (see
 * ms_group_slow_results) with one entry per destination that held a backlog: status = bytes
 * sent from its backlog in this call, or -errno; flags MS_RES_QUEUED while some remains,
 * MS_RES_REMOVED if the policy removed it (its backlog could not be written), 0 if it
 * emptied; backlog = bytes it still holds. Copies the first min(n, count) of those entries to
 * out, as ms_group_slow_results would, and returns count (0 when no destination held a
 * backlog), or -EINVAL (g NULL, or out NULL with n > 0; nothing is sent). Call it when a
 * backlogged destination's socket polls writable (POLLOUT), or on a timer.
 */
MS_EXPORT int ms_group_flush(struct ms_group *g, struct ms_slow_result *out, size_t n);

/* Bytes the group's destinations hold in their backlogs (0 for NULL). */
MS_EXPORT size_t ms_group_backlog(const struct ms_group *g);

/* ---------------------------------------------------------------------------------------------
 * Statistics and errors
 */

/*
 * Two calls read a context's observations, one a subset of the other:
 *   ms_ctx_stats     struct ms_stats: every counter (the same values, in the same order, as the
 *                    live-counter file's counters; the order of its fields here is free).
 *   ms_ctx_snapshot  struct ms_snapshot: who and when (backend, ts_sample, the time), the four
 *                    timestamp histograms, and a struct ms_stats, all from one moment.
 * Both are taken the same way, from the context's own memory: ms_ctx_stats(ctx, &st) gives
 * what ms_ctx_snapshot would put in its .stats at that moment. Both may be called from any
 * thread while the context's own thread keeps sending (the sender never waits for a reader).
 * Both out structs are size-versioned; new counters are only ever appended to struct
 * ms_stats, which is the last member of struct ms_snapshot, so both grow at their ends and
 * struct ms_snapshot's own fields never move.
 */

/* Size-versioned. Cumulative counters for a context, over all its groups, since ms_ctx_new. */
struct ms_stats {
	uint32_t size;            /* set by the caller to sizeof(struct ms_stats); in a snapshot,
	                             set by the library to the bytes of it filled in */
	uint32_t reserved;        /* 0 */
	uint64_t fanouts;         /* ms_send/ms_sendv calls that attempted at least one dest */
	uint64_t dests_attempted; /* sum over calls of the destinations attempted */
	uint64_t dests_accepted;  /* ... that accepted the whole message */
	uint64_t dests_partial;   /* ... that accepted part of it (stream sockets), or whose
	                             message a slow-consumer policy queued */
	uint64_t dests_failed;    /* ... that reported an error */
	uint64_t bytes;           /* bytes accepted by the kernel, over all destinations */
	uint64_t syscalls;        /* send-family system calls and io_uring_enter calls made (with
	                             xdp also its kicks, poll, and the calls that make a plan) */
	/* Failures by class (they add up to dests_failed): */
	uint64_t err_again;       /* EAGAIN */
	uint64_t err_nobufs;      /* ENOBUFS, ENOMEM: local drops the kernel reported */
	uint64_t err_msgsize;     /* EMSGSIZE */
	uint64_t err_unreach;     /* ECONNREFUSED, EHOSTUNREACH, ENETUNREACH, ENETDOWN, EHOSTDOWN */
	uint64_t err_conn;        /* EPIPE, ECONNRESET, ENOTCONN, EDESTADDRREQ */
	uint64_t err_badf;        /* EBADF, ENOTSOCK */
	uint64_t err_other;       /* anything else */
	/* Slow-consumer policies (see ms_group_set_slow); these overlap the counts above: */
	uint64_t slow_queued;     /* messages put, whole or in part, in a destination's backlog */
	uint64_t slow_dropped;    /* messages a policy skipped for a destination */
	uint64_t slow_removed;    /* destinations a policy removed */
	uint64_t backlog_bytes;   /* bytes held in backlogs now, over all groups */
	uint64_t backlog_discarded; /* bytes discarded from backlogs: failed or removed streams */
	/* MS_CFG_OFFLOAD (see "Workers and offload"): */
	uint64_t offload_msgs;    /* messages posted (ms_post, ms_postv) */
	uint64_t offload_waits;   /* ... of which the caller had to wait for room in the ring */
	uint64_t offload_refused; /* calls refused with -EAGAIN: the ring was full and the call
	                             had MS_SEND_DONTWAIT (nothing of the message was sent) */
	/* io_uring zero copy (see "Zero copy"): */
	uint64_t zc_sends;        /* destinations sent with SEND_ZC */
	uint64_t zc_copied;       /* ... whose data the kernel reported it copied anyway (which
	                             turns zero copy off for the ring that sent them) */
	/* Timestamps (see "Timestamps"), with ms_config.ts_sample: */
	uint64_t ts_sampled;      /* fan-outs sampled */
	uint64_t ts_requested;    /* destinations that asked for stamps */
	uint64_t ts_stamped;      /* ... of which a stamp was read back */
	uint64_t ts_missing;      /* ... of which no stamp came: the send failed, or the datagram
	                             was dropped before any stamp point */
	uint64_t ts_unsupported;  /* sampled destinations not stamped: not UDP, or the socket had
	                             its own SO_TIMESTAMPING setting */
	uint64_t ts_foreign;      /* error-queue entries read that were not this library's stamps */
	uint64_t ts_late;         /* stamps that came after their fan-out was accounted, ignored */
	/* MS_BACKEND_AUTO (see "Choosing a backend"; all 0 for a backend asked for by name) */
	uint64_t auto_sampled;    /* fan-outs whose cost AUTO measured */
	uint64_t auto_explored;   /* fan-outs sent by another backend than the one in use, to
	                             measure it */
	uint64_t auto_decisions;  /* choices made (first ones, re-checks, after a drift) */
	uint64_t auto_switches;   /* ... that changed the backend in use */
	uint64_t auto_backend;    /* enum ms_backend: the one in use now */
	uint64_t auto_ns_loop;    /* ns on the CPU per destination each backend cost at the last */
	uint64_t auto_ns_sendmmsg; /* decision (medians of its measured fan-outs; the figures */
	uint64_t auto_ns_io_uring; /* AUTO decides by, see "Choosing a backend"); 0: not
	                             measured (unavailable, or no decision yet) */
	/* MS_BACKEND_XDP (see "Kernel bypass"): */
	uint64_t xdp_frames;      /* destinations sent as frames through the AF_XDP socket */
	uint64_t xdp_kicks;       /* system calls that asked the kernel to take frames */
	uint64_t xdp_fallback_local; /* destinations sent by the kernel's path instead: local or
	                             loopback address, broadcast, multicast looped back */
	uint64_t xdp_fallback_iface; /* ... leaving by another interface than the context's */
	uint64_t xdp_fallback_mtu;   /* ... a message larger than the path's MTU */
	uint64_t xdp_fallback_route; /* ... no usable route (the kernel's error is the result) */
	uint64_t xdp_fallback_neigh; /* ... its neighbour not resolved yet (the kernel's send
	                             makes the kernel resolve it) */
	uint64_t xdp_fallback_other; /* ... not UDP, opted out (ms_group_kernel_path), control
	                             messages, socket options frames cannot honour, the
	                             interface gone */
	uint64_t auto_ns_xdp;     /* as auto_ns_loop, for the xdp backend */
	/* Hardware timestamps (MS_TS_HARDWARE, see "Timestamps"): */
	uint64_t ts_hw_stamped;   /* stamps read back from a device's hardware clock */
	uint64_t ts_hw_unavailable; /* stamped destinations whose device does not stamp in
	                             hardware, or has it off (software stamps instead) */
	/* A process forked after the context was made: */
	uint64_t fork_fallback;   /* destinations the loop sent because the context's backend
	                             (io_uring, xdp) keeps state that is the parent's (its ring,
	                             its AF_XDP socket); ms_ctx_backend then says loop */
	/* MS_BACKEND_KFANOUT (see "Kernel fan-out"): */
	uint64_t kfanout_templates; /* template sends the attached program replicated */
	uint64_t kfanout_clones;  /* destinations whose copy the device took (status 0) */
	uint64_t kfanout_refused; /* destinations outside the attachment's policy (-EPERM) */
	uint64_t kfanout_clone_err; /* clones the device refused (-ENOBUFS for a full queue...) */
	uint64_t kfanout_reclaimed; /* destinations of template sends the program did not run
	                             for (detached, another route, the send failed): sent by the
	                             kernel's path in the same call */
	uint64_t kfanout_fallback_local; /* destinations sent by the kernel's path instead: local,
	                             loopback or broadcast */
	uint64_t kfanout_fallback_iface; /* ... leaving by an interface with no attachment */
	uint64_t kfanout_fallback_mtu;   /* ... a message larger than the path's MTU */
	uint64_t kfanout_fallback_route; /* ... no usable route (the kernel's error is the result) */
	uint64_t kfanout_fallback_neigh; /* ... next hop not resolved yet */
	uint64_t kfanout_fallback_other; /* ... not UDP, a connected socket, opted out, multicast,
	                             a socket option clones cannot honour, a source address the
	                             template would not have, the attachment's template route gone */
	uint64_t auto_ns_kfanout; /* as auto_ns_loop, for the kfanout backend */
	/* MS_BACKEND_AUTO's clocks (see "Choosing a backend"): */
	uint64_t auto_clock_low;  /* measured fan-outs whose threads never slept, yet whose
	                             CPU clocks charged less than 80% of their time on the CPU */
	uint64_t auto_cpu_ns_loop; /* as auto_ns_loop, by the threads' CPU clocks alone */
	uint64_t auto_cpu_ns_sendmmsg;
	uint64_t auto_cpu_ns_io_uring;
	uint64_t auto_cpu_ns_xdp;
	uint64_t auto_cpu_ns_kfanout;
};

/*
 * Copy the context's counters into *out: exactly what ms_ctx_snapshot would put in its
 * .stats at that moment (see above), without the histograms. out->size must be set; the
 * library fills the fields that fit in min(out->size, sizeof(struct ms_stats)) and leaves the
 * rest alone. Returns 0, or -EINVAL (NULL argument or out->size < 8), or ms_ctx_snapshot's
 * -EBUSY.
 */
MS_EXPORT int ms_ctx_stats(const struct ms_ctx *ctx, struct ms_stats *out);

/* ---------------------------------------------------------------------------------------------
 * Timestamps, histograms and snapshots
 *
 * With ms_config.ts_sample = K, one fan-out in K of each group (its 1st, K+1th, ...) asks the
 * kernel for software transmit timestamps (SO_TIMESTAMPING: TX_SCHED, when the datagram enters
 * the device's queue, and TX_SOFTWARE, when the driver takes it) for its first and last
 * destination, or all of them with MS_TS_ALL_DESTS. Only UDP destinations (AF_INET,
 * AF_INET6 datagram sockets) are stamped; others are counted in ts_unsupported. The other
 * fan-outs cost nothing more than one counter test.
 *
 * What it does to the sockets: on a socket's first stamped send the library sets
 * SO_TIMESTAMPING to SOFTWARE | OPT_ID | OPT_TSONLY, if the socket has no SO_TIMESTAMPING
 * setting (a socket with a setting of its own is never stamped, and counted in
 * ts_unsupported), and leaves it set: it stamps nothing unless a send asks, and another group
 * or context may be sampling on the socket. Do not change SO_TIMESTAMPING on a socket while a
 * sampling group holds it: its sampled sends would then fail with -EINVAL (the kernel refuses
 * a per-datagram key without OPT_ID), reported as that destination's status. Each stamped datagram
 * carries its own key (SCM_TS_OPT_ID) and the stamps come back on the socket's error queue,
 * which the library reads (recvmmsg with MSG_ERRQUEUE) once the group's next sampled fan-out
 * has gone out (never before it, so its subscribers do not wait for that), or in
 * ms_group_ts_collect; never on the other fan-outs. Anything else on that error queue
 * (IP_RECVERR errors) is read and discarded there, counted in ts_foreign. A socket with
 * stamps waiting polls POLLERR.
 *
 * The times are the kernel's CLOCK_REALTIME stamps minus the CLOCK_REALTIME read when ms_send
 * began: call_first and call_last say how long the first and the last destination waited,
 * first_last the skew between them, dest_lag every stamped destination's wait. The stamp used
 * is TX_SOFTWARE, or TX_SCHED for a datagram that got no TX_SOFTWARE stamp (a device that
 * does not stamp, or a drop in its queue). A sampled destination whose send failed, or whose
 * stamps never came (the datagram was dropped before the device, or its stamps did not fit
 * the socket's error queue, which SO_RCVBUF bounds: about 128 destinations per socket at the
 * default size with MS_TS_ALL_DESTS), counts in ts_missing. (These counters are the ts_*
 * fields of struct ms_stats.)
 *
 * Hardware stamps (MS_TS_HARDWARE): for each destination it stamps, the library finds the
 * device the datagram leaves by (the kernel's route for it, asked over rtnetlink once per
 * destination and again after any change of links, addresses, routes or neighbours) and
 * whether that device stamps transmitted packets in hardware: the ethtool ioctl
 * (SIOCETHTOOL, ETHTOOL_GET_TS_INFO) must list SOF_TIMESTAMPING_TX_HARDWARE and the device's
 * hardware stamping must be on for transmitted packets (SIOCGHWTSTAMP: tx_type is not
 * HWTSTAMP_TX_OFF). The library reads that setting and never changes it: switching it on is
 * the machine's business (hwstamp_ctl, ptp4l), it is one setting for the whole device. Such a
 * destination's datagram also asks for TX_HARDWARE (the socket's SO_TIMESTAMPING gains
 * RAW_HARDWARE | OPT_TX_SWHW), and when the device's stamp comes, its entry in ms_group_ts_last
 * has MS_TS_HW, snd_ns is the device's stamp minus the call's start, and the histograms use
 * it (ts_hw_stamped counts these). The device stamps with its own clock (its PTP hardware
 * clock): the difference means something only on a host that keeps that clock synchronised
 * to CLOCK_REALTIME (phc2sys), which is what MS_TS_HARDWARE is for. A destination whose
 * device cannot stamp in hardware, or has it off, gets software stamps as without the flag,
 * and counts in ts_hw_unavailable (loopback, veth and most virtual devices). Every entry
 * names its device (ifindex; 0: not looked up, without MS_TS_HARDWARE or when rtnetlink
 * cannot be asked). The look-ups cost a few system calls the first time a destination is
 * stamped, on the sampled fan-outs only, and the context two rtnetlink sockets
 * (close-on-exec), opened at its first sample.
 */

/* A log-linear histogram of nanoseconds: values below 16 have a bucket each; above, each
 * power of two is split in 16 equal buckets (at most 6.25% apart); the last bucket also holds
 * everything from 2^40 ns (about 18 minutes) up. */
#define MS_HIST_SUB 16
#define MS_HIST_BUCKETS 592
struct ms_hist {
	uint64_t count;
	uint64_t sum_ns;
	uint64_t min_ns; /* 0 when count is 0 */
	uint64_t max_ns;
	uint64_t bucket[MS_HIST_BUCKETS];
};

/* The range of values bucket i holds: [*lo, *hi]. Returns 0, or -EINVAL (i out of range or
 * a NULL pointer). */
MS_EXPORT int ms_hist_bucket_range(unsigned i, uint64_t *lo, uint64_t *hi);

/* The value at quantile q (0..1) of h: the upper end of the bucket holding it, clamped to
 * [min_ns, max_ns]; 0 for an empty histogram or NULL. */
MS_EXPORT uint64_t ms_hist_quantile(const struct ms_hist *h, double q);

/* Size-versioned. Everything ms_ctx_snapshot reports, taken consistently: struct ms_stats and
 * what only a snapshot has. */
struct ms_snapshot {
	uint32_t size;        /* set by the caller to sizeof(struct ms_snapshot) */
	uint32_t backend;     /* enum ms_backend in use, as ms_ctx_backend says */
	uint32_t ts_sample;   /* the context's ms_config.ts_sample */
	uint32_t reserved;    /* 0 */
	uint64_t taken_ns;    /* CLOCK_REALTIME when the snapshot was taken */
	struct ms_hist call_first; /* ms_send to the first destination's stamp */
	struct ms_hist call_last;  /* ms_send to the last destination's stamp */
	struct ms_hist first_last; /* first to last destination: the skew */
	struct ms_hist dest_lag;   /* ms_send to each stamped destination's stamp */
	struct ms_stats stats;     /* as ms_ctx_stats; last, so that it may grow */
};

/*
 * Copy the context's counters and histograms into *out, consistently (all from one moment
 * between two ms_send calls). Unlike most calls (and like ms_ctx_stats), it may be made from
 * any thread while the context's own thread keeps sending: the sending thread never waits
 * for it (a reader that overlaps a send tries again). It reads the context's own memory,
 * never the live-counter file, so nothing done to that file changes what it returns or how
 * long it takes. out->size must be set; fields past it are left alone, and out->stats.size
 * says how many bytes of out->stats were filled in (when it fits in out->size).
 * Returns 0, or -EINVAL (NULL argument, or out->size smaller than 16), or -EBUSY when the
 * sending thread stayed in the middle of an update through 100000 tries (descheduled: try
 * again); it never waits longer.
 */
MS_EXPORT int ms_ctx_snapshot(const struct ms_ctx *ctx, struct ms_snapshot *out);

/* One destination of a sampled fan-out, as ms_group_ts_last reports it. */
#define MS_TS_SCHED (1u << 0) /* sched_ns is set */
#define MS_TS_SND (1u << 1)   /* snd_ns is set */
#define MS_TS_HW (1u << 2)    /* snd_ns is the device's hardware stamp (MS_TS_HARDWARE) */
struct ms_ts_dest {
	int id;           /* the destination's id */
	uint32_t flags;   /* MS_TS_SCHED, MS_TS_SND, MS_TS_HW; 0: no stamp came */
	uint32_t pos;     /* its position in the group order (res[pos]); with MS_CFG_ROTATE the
	                     first destination sent is not position 0 */
	uint32_t ifindex; /* with MS_TS_HARDWARE: the device it left by; 0: not looked up */
	int64_t sched_ns; /* TX_SCHED stamp minus the call's start */
	int64_t snd_ns;   /* TX_SOFTWARE stamp (with MS_TS_HW: the device's) minus the call's
	                     start */
};

/*
 * Read the stamps waiting on the group's sockets now and account for the group's pending
 * sampled fan-outs (ms_send does both after the group's next sampled fan-out). Call it after the
 * last send, or when idle, to see the last sample in the histograms. Context thread only.
 * Returns the number of stamps read, or -EINVAL (g NULL).
 */
MS_EXPORT int ms_group_ts_collect(struct ms_group *g);

/*
 * The group's most recent accounted sample, destination by destination in the order they
 * were sent: copies at most n entries to out and returns how many the sample has (0 when
 * there is none yet), and sets *call_ns (if not NULL) to the CLOCK_REALTIME at which that
 * ms_send began. Context thread only. -EINVAL: g NULL, or out NULL with n > 0.
 */
MS_EXPORT int ms_group_ts_last(const struct ms_group *g, struct ms_ts_dest *out, size_t n,
			       uint64_t *call_ns);

/* ---------------------------------------------------------------------------------------------
 * Live counters
 *
 * With ms_config.stats_shm (or MULTISEND_STATS_SHM) set to a path, the context publishes what
 * ms_ctx_snapshot reports in that file, a shared-memory mapping (put it in /dev/shm), updated
 * after every ms_send at the cost of a few stores, never a system call. "%p" in the path is
 * replaced by the process id. Several contexts of one process share the file (one slot each,
 * named "ctx N" for the context's life, with the backend it sends with now beside the name,
 * which AUTO's choice changes; 64 over the life of the process: a freed context's slot keeps its
 * last values, marked closed, and is not reused); several processes each need their own file
 * (use %p). The file is only a copy: the context keeps its counters in its own memory (what
 * ms_ctx_snapshot and ms_ctx_stats read) and writes them to the file without ever reading
 * it back, so a damaged file changes nothing the context does or reports. No descriptor is
 * kept for it: the program may close and reuse any descriptor number. While a process
 * publishes there the file has a live owner, an open-file-description write lock held by the
 * process's mapping of it (only the owner or root can take one; a reader's lock of any kind
 * never stops a publisher). A file without a live owner is replaced by a new one put in its
 * place (never truncated or rewritten in place; when two processes replace the same stale file
 * at once, one keeps the name and the other publishes nowhere), provided it is a regular file, empty or a
 * live-counter file, belongs to this user and is not writable by others (a missing one is
 * created, mode 0644); a file with a live owner in another process, and any other file, is
 * left alone and the context publishes nowhere (one warning on stderr). The LD_PRELOAD shim
 * and the program's own libmultisend share the file, which keeps its owner while any of the
 * process's slots is live. The file stays until deleted. A forked child that keeps using a
 * context publishes only into its private memory, never into its parent's file (nor does it
 * hold the parent's lock), however it was made: fork(), _Fork(), syscall(SYS_fork) or clone()
 * (a child that ran no atfork handler finds the mappings gone by a MADV_WIPEONFORK page: Linux
 * 4.14 or later, else no live counters). /proc is not needed (without it the new file gets a
 * temporary name first). Truncating the file under a running publisher (only its owner or
 * root can) does not stop it: the first store into a page cut off raises SIGBUS, which a
 * handler the library installs with its first file (SA_SIGINFO, chained: any SIGBUS that is
 * not about one of its files goes to the handler installed before it, or takes the default
 * action) turns into private memory in the file's place; the next publication makes a new
 * file under the same path (at most one try a second while the path is not free) holding
 * every slot and all its values. A truncation that keeps the pages the publisher writes
 * (the first slots are in the first page: any size but 0) is not noticed, and readers find
 * the file short until the publisher exits. A program that sets its own SIGBUS handler after
 * its first context with a live-counter file replaces the library's: then truncation is
 * fatal again, as for any file it maps. The library's threads never block SIGBUS, SIGSEGV,
 * SIGFPE or SIGILL (a blocked fault kills without any handler). To get rid of a live file,
 * delete or rename it. multisend-stat reads it live; the format and the protocol are
 * lib/obs/shm-format.h.
 */

/* A message for a negative errno as this library returns it (also for positive errno values).
 * Never NULL; the string is static. */
MS_EXPORT const char *ms_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif /* MULTISEND_H */
