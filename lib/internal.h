/* SPDX-License-Identifier: MIT */
/* Private structures shared by the core files. Names are ms__-prefixed; nothing here is ABI. */
#ifndef MS_INTERNAL_H
#define MS_INTERNAL_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "multisend.h"
#include "backend.h"

#define MS__NEXEC_G 5 /* = MS__NEXEC (below) */

/* One destination, stored in its socket's bucket. */
struct ms__dest {
	struct sockaddr_storage addr;
	socklen_t addrlen; /* 0: the socket's connected peer */
	int id;
	bool kpath;        /* by the kernel's path always (ms_group_kernel_path) */
};

/*
 * All destinations of a group that use one socket, so that the sendmmsg backend can hand the
 * kernel one contiguous array per socket. msgs[i] describes dests[i]; both are kept in step by
 * add and remove, and msgs[i].msg_hdr points at dests[i].addr and at the group's iovec copy,
 * so a send writes nothing per destination.
 */
struct ms__bucket {
	int fd;
	uint64_t ino;   /* the socket's inode: tells it apart from a later file with its number */
	int type;       /* SOCK_DGRAM, SOCK_STREAM, SOCK_SEQPACKET */
	int family;
	bool has_peer;  /* one of the destinations is the connected peer (addrlen 0) */
	bool fixed;     /* io_uring: fd is in the ring's registered file table */
	bool owned;     /* MS_CFG_CONNECT: the library made fd, and closes it with the bucket */
	uint32_t n, cap;
	uint32_t list_pos; /* index in group->buckets */
	struct ms__dest *dests;
	struct mmsghdr *msgs;
	/* Slow-consumer policy (lib/modes/slow.c); only connection-oriented sockets, which have one
	 * destination per bucket, are managed. */
	bool managed;   /* the group's policy applies: sends are non-blocking, results go to st */
	bool stalled;   /* backlog not empty: left out of the executor's ranges, slow.c sends */
	bool doomed;    /* the policy removes it at the end of this call */
	bool nonblock;  /* O_NONBLOCK when the bucket was made */
	int xflags;     /* extra send flags: MSG_DONTWAIT when managed or nonblock */
	int8_t ts_state; /* timestamps (lib/modes/tstamp.c): 0 not looked at, 1 set up by the library,
	                    2 the same with hardware stamps reported (MS_TS_HARDWARE), -1 not
	                    stampable (not UDP, or the caller's own SO_TIMESTAMPING) */
	uint32_t ts_epoch; /* the last collection that read this socket's error queue */
	struct {
		char *buf;
		size_t off, len, cap; /* pending bytes are buf[off, off + len) */
		size_t held;          /* message bytes among them (lib/modes/slow.c) */
	} bl;
};

struct ms__idslot {
	struct ms__bucket *b; /* NULL: id free */
	uint32_t pos;
};

/* Open-addressing map fd -> bucket (linear probing, backward-shift deletion). */
struct ms__fdmap {
	uint32_t cap; /* power of two or 0 */
	uint32_t n;
	struct ms__bucket **slots;
};

struct ms_group {
	struct ms_ctx *ctx;
	size_t size;                /* destinations */
	struct ms__bucket **buckets; /* group order: bucket by bucket, dests in bucket order */
	uint32_t nbuckets, capbuckets;
	struct ms__fdmap fdmap;
	struct ms__idslot *ids;
	uint32_t capids, nextid;    /* ids below nextid have been handed out */
	int *freeids;
	uint32_t nfreeids;
	struct iovec *iov;          /* IOV_MAX entries; every msg_hdr.msg_iov points here */
	int iovlen;                 /* current msg_iovlen of every msg_hdr */
	struct ms_slow_config slow; /* policy; .size unused */
	uint32_t nmanaged;          /* buckets the policy manages */
	size_t backlog;             /* bytes held in the buckets' backlogs */
	struct ms__tsgroup *ts;     /* timestamp sampling state (lib/modes/tstamp.c), NULL until used */
	uint64_t ts_calls;          /* fan-outs, for one in ts_sample */
	size_t rot_pos;             /* MS_CFG_ROTATE: where the next fan-out starts (mod size) */
	bool kpath_all;             /* ms_group_kernel_path(g, MS_GROUP_ALL, on): new ones too */
	/* The plan (lib/backend.h): room reserved by ms_group_add (the send path allocates
	 * nothing); written again by the first send after a change (plan_ok false). */
	struct ms__plan_entry *plan;
	size_t capplan;
	bool plan_ok;
	uint32_t plan_gen;          /* plans made so far (a backend's prepare hook compares it) */
	void *gdata[MS__NEXEC_G];   /* each backend's data for this group (its prepare hook), as
	                               ctx->exec */
	uint8_t shape;              /* MS_BACKEND_AUTO: its measurements' index, set with the plan */
	/* With a slow-consumer policy: the status array of a call made without one (capplan
	 * entries), where the policy finds its destinations' statuses. */
	struct ms_result *scratch;
	size_t capscratch;
	/* What the policy did in the last call (ms_group_slow_results): nslowres entries, in the
	 * call's group order; room for one per managed bucket, reserved when a bucket becomes
	 * managed (ms__slow_reserve_bucket, ms_group_set_slow), so that no send allocates. */
	struct ms_slow_result *slowres;
	size_t nslowres, capslowres;
};

/* MS_CFG_CONNECT (lib/modes/connect.c): a connected UDP socket for addr, made like the
 * caller's fd. The new fd, or -errno. */
int ms__connect_own(int fd, int family, const struct sockaddr *addr, socklen_t alen);

/* Remove destination id (valid), as ms_group_remove does, from inside the library. */
void ms__group_remove(struct ms_group *g, int id);

/* Make g->plan current (no allocation: ms_group_add reserved the room). */
void ms__plan_build(struct ms_group *g);

/* AUTO's clocks at the start of a timed piece of work on one thread (lib/modes/auto.c). */
struct ms__clocks {
	uint64_t slept;    /* the thread's voluntary context switches (UINT64_MAX: unknown) */
	uint64_t preempted; /* ... involuntary ones */
	uint64_t waited_ns; /* ... its time waiting on a run queue (UINT64_MAX: unknown) */
	uint64_t wall_ns;  /* CLOCK_MONOTONIC */
	uint64_t cpu_ns;   /* CLOCK_THREAD_CPUTIME_ID */
};

/* What timed pieces cost, summed: by the threads' CPU clocks, and, for the pieces whose thread
 * never slept, the time it was on the CPU as seen from outside that clock (its wall time, less
 * what it waited on a run queue when it was preempted); a thread that slept has only its CPU
 * clock. */
struct ms__cost {
	uint64_t cpu_seen, oncpu_seen; /* pieces whose thread never slept */
	uint64_t cpu_unseen;           /* pieces whose thread slept */
};

/* A sampled call's clocks: the calling thread's at the start, and what the library threads'
 * parts took. */
struct ms__sample {
	struct ms__clocks clk;
	struct ms__cost parts;
};

/* One ms_send call in progress: the executor's batch, and what the stages around it keep. */
struct ms__send {
	struct ms__batch b;
	struct ms_group *g;
	size_t first;            /* the send order's first position (MS_CFG_ROTATE; else 0) */
	uint32_t parts;          /* threads sending this fan-out (lib/exec/workers.c): 1, or the
	                            parts of ms__part_range */
	bool managed;            /* the group has buckets a slow-consumer policy manages */
	bool ts_armed;           /* timestamps armed some headers' control messages */
	const struct ms__exec *x; /* the executor of this call: ctx->exec[0], or AUTO's pick */
	bool sampled;            /* AUTO times this call: the sending threads' CPU time */
	bool counted;            /* AUTO counted something (ms__commit publishes everything) */
	struct ms__sample *smp;  /* ... its clocks (in ms__do_send's frame; written only for a
	                            sampled call, so that the others pay nothing for them) */
	uint32_t slow_queued, slow_dropped, slow_removed;
};

/* Part p of `parts` of a fan-out of n destinations: `count` positions of the send order from
 * `off` (added to the fan-out's first position, wrapping around the group). Equal shares, the
 * first parts one larger when n does not divide. */
static inline void ms__part_range(size_t n, uint32_t parts, uint32_t p, size_t *off, size_t *count)
{
	size_t q = n / parts, r = n % parts;
	*off = p * q + (p < r ? p : r);
	*count = q + (p < r);
}

/* ---- memory (lib/mem.c): what the send path uses, locked with MS_CFG_MLOCK ---- */
/* Zeroed memory of n bytes (aligned to align, a power of two), locked when the context asks;
 * NULL with *err set (-ENOMEM, or mlock's error). */
void *ms__zalloc(const struct ms_ctx *ctx, size_t n, int *err);
void *ms__zalloc_aligned(const struct ms_ctx *ctx, size_t align, size_t n, int *err);
/* Resize *(T **)pp to n bytes and lock it: 0, or -errno with *pp what realloc left (the old
 * block when it failed, the new one when only the lock did): a capacity grows only on 0. */
int ms__grow(const struct ms_ctx *ctx, void *pp, size_t n);
/* Lock memory allocated elsewhere (io_uring's rings, the context itself, counter slots). 0 or
 * -errno; 0 without MS_CFG_MLOCK. */
int ms__mlock(const struct ms_ctx *ctx, const void *p, size_t n);
/* s escaped for a warning (lib/api/ctx.c): printable ASCII as is, anything else and the
 * backslash as \xNN, at most max bytes of s (then "... (N bytes)"); buf of MS__ESC_CAP(max)
 * bytes or more. Returns buf. */
#define MS__ESC_MAX 128 /* bytes of an environment value a warning shows */
#define MS__ESC_CAP(max) (4 * (size_t)(max) + 32)
const char *ms__esc(char *buf, size_t cap, const char *s, size_t max);
void ms__group_set_iovlen(struct ms_group *g, int iovcnt);
/* Add a call's counts to its context's counters. */
void ms__commit(struct ms_ctx *ctx, const struct ms__send *s);

/* Slow-consumer policy (lib/modes/slow.c). */
void ms__slow_bucket_init(struct ms_group *g, struct ms__bucket *b);
void ms__slow_bucket_fini(struct ms_group *g, struct ms__bucket *b);
/* Before the executor: a call without a result array gets the group's scratch one. */
void ms__slow_before(struct ms__send *s);
/* Room for cap statuses in the scratch array (a group with a policy). 0 or -errno. */
int ms__slow_reserve(struct ms_group *g, size_t cap);
/* Room in the policy's record for a bucket of this socket type about to join the group, if
 * the policy would manage it (bucket_new, before anything is committed). 0 or -errno. */
int ms__slow_reserve_bucket(struct ms_group *g, int type);
/* After the executor: apply the policy to the managed buckets (whose statuses the executor
 * wrote into s->b.res), record their results, remove the destinations the policy
 * disconnects. be_err: the executor's own failure, or 0. */
void ms__slow_after(struct ms__send *s, int be_err);

/* Add one tally to another (the parts of a call). */
void ms__tally_add(struct ms__tally *to, const struct ms__tally *t);

/* A backend a context has set up, and its state (lib/backend.h). */
struct ms__exec {
	const struct ms__backend *be;
	void *state;
};
#define MS__NEXEC 5 /* loop, sendmmsg, io_uring, xdp, kfanout: what one context can hold at once */
#define MS__BACKEND_LAST MS_BACKEND_KFANOUT
_Static_assert(MS__NEXEC == MS__NEXEC_G, "one gdata per backend a context holds");

struct ms_ctx {
	uint32_t flags;
	uint32_t queue_depth;
	uint32_t zc_min;    /* io_uring zero copy from this message length on; 0: never */
	struct {            /* the xdp backend's settings (ms_config, MULTISEND_XDP_IFACE) */
		char ifname[16]; /* "": none named */
		bool ifname_bad; /* the environment's name cannot be an interface's */
		bool queue_set, copy_only;
		bool nf_skip;    /* MS_CFG_XDP_NETFILTER, MULTISEND_XDP_NETFILTER=skip */
		uint32_t queue, frames;
	} xdp;
	unsigned ngroups;
	unsigned gen;       /* ms__fork_gen when the context was made (see ms__forked) */
	bool be_fork_unsafe; /* exec_caps has MS__CAP_FORK_UNSAFE (one test per call) */
	bool show;          /* MULTISEND_SHOW_BACKEND: also says, in a forked child, that the
	                       loop sends there (once per process: shown_gen) */
	unsigned shown_gen;
	unsigned modes;     /* MS__MODE_*: what the stages before the executor have to do */
	struct ms__counters c; /* lib/core/counters.h */
	/* The backends set up: the one asked for (or its fallback), or with MS_BACKEND_AUTO
	 * every one available, in preference order; and the union of their capabilities. */
	struct ms__exec exec[MS__NEXEC];
	unsigned nexec;
	unsigned exec_caps;
	struct ms__auto *autos; /* AUTO's measurements and choices (lib/modes/auto.c); NULL
	                           with a fixed backend */
	uint32_t ts_sample, ts_flags;
	uint32_t ts_key;    /* the next SCM_TS_OPT_ID key */
	uint32_t ts_epoch;  /* collections so far */
	struct ms__tshw *tshw; /* MS_TS_HARDWARE: devices and routes (lib/modes/tstamp.c); NULL
	                          until the first sample */
	/* What ms_ctx_snapshot reads, from any thread: counters and histograms under a seqlock,
	 * in the context's own memory (the publishing code in ctx.c). */
	struct ms_shm_slot *own;
	/* Its mirror in a live-counter file, written after each update and never read; NULL:
	 * none (also in a forked child). */
	struct ms_shm_slot *pub;
	uint64_t pub_seq;        /* pub's sequence word, as we last wrote it */
	unsigned slot_gen;       /* ms__fork_gen when pub was opened */
	uint64_t pub_epoch;      /* ms__shm_epoch() when pub was opened */
	unsigned pub_gen;        /* ms__shm_gen() when pub was last written in full */
	struct ms__pool *pool;   /* workers and offload (lib/exec/workers.c); NULL: neither */
	const char *init_why;    /* a backend's ctx_init may set a reason it failed (static) */
};

/* ---- workers and offload (lib/exec/workers.c) ---- */
struct ms__pool;
/* Start the context's threads (ctx->exec set). 0 or -errno. */
int ms__pool_start(struct ms_ctx *ctx, const struct ms_config *c);
/* Drain the offload ring, stop and join the threads, free the pool. */
void ms__pool_stop(struct ms_ctx *ctx);
/* How many parts this call may be sent in (1: the caller alone; also after a fork). */
uint32_t ms__pool_parts(const struct ms_ctx *ctx, const struct ms__send *s);
/* Send s in s->parts parts: the calling thread the first, library threads the others. */
int ms__pool_send(struct ms__send *s);
/* ms_post: hand the message over (in a forked child: send it now, logging what failed);
 * returns the group's size or -errno, and sets *seq (if not NULL) to its post number. */
int ms__offload_post(struct ms_group *g, const struct iovec *iov, int iovcnt, size_t len,
		     unsigned flags, uint64_t *seq);
/* ms_send and ms_sendv on a context whose offload thread runs (the contract is in
 * multisend.h): after the posted messages, from the calling thread, or for io_uring, whose
 * ring takes submissions from one thread only, by the offload thread on the caller's behalf. */
int ms__offload_send(struct ms_group *g, const struct iovec *iov, int iovcnt, size_t len,
		     unsigned flags, struct ms_result *res);
/* ms_ctx_post_errors (the contract is in multisend.h). */
int ms__post_errors(struct ms_ctx *ctx, struct ms_post_error *out, size_t n, uint64_t *lost);
/* Offload: wait until every message handed over has been sent (no-op without offload, in
 * the library's own thread, and in a forked child). */
void ms__quiesce(const struct ms_ctx *ctx);
bool ms__offloaded(const struct ms_ctx *ctx);
/* The offload counters: messages, waits, refusals. */
void ms__offload_counts(const struct ms_ctx *ctx, uint64_t v[3]);
/* Room for n results in the offload thread's array (a group grew to n; no-op without offload).
 * Called with the context quiesced (ms_group_add). 0 or -errno. */
int ms__offload_reserve(struct ms_ctx *ctx, size_t n);
void ms__pool_describe(const struct ms_ctx *ctx, char *buf, size_t len);
/* The send path shared by ms_send, ms_sendv, ms_post (forked child) and the offload thread. */
int ms__do_send(struct ms_group *g, const struct iovec *iov, int iovcnt, size_t len,
		unsigned flags, struct ms_result *res);

/* ---- timestamps (lib/modes/tstamp.c) and histograms (lib/obs/hist.c) ---- */
enum { MS__H_CALL_FIRST, MS__H_CALL_LAST, MS__H_FIRST_LAST, MS__H_DEST_LAG, MS__H_N };
unsigned ms__hist_index(uint64_t v);
void ms__hist_add(struct ms_hist *h, uint64_t v);
/* Can this kernel key stamps per datagram? 0 or -ENOTSUP (probed once per process). */
int ms__ts_probe(void);
/* Before the backend, on a sampled fan-out: account the previous sample, arm this one. */
void ms__ts_begin(struct ms__send *s);
/* After the backend: disarm the message headers. */
void ms__ts_end(struct ms__send *s);
/* A socket leaves the group (its last destination): read its pending stamps while its fd
 * still names it, then forget them. */
void ms__ts_bucket_gone(struct ms_group *g, struct ms__bucket *b);
void ms__ts_group_free(struct ms_group *g);
/* What the context's timestamps keep beside its groups' (MS_TS_HARDWARE's devices). */
void ms__ts_ctx_free(struct ms_ctx *ctx);
/* Copy the counters into the published slot (under its seqlock). */
void ms__publish(struct ms_ctx *ctx);
/* The same for a call in which only fanouts, attempted, accepted, bytes and syscalls can
 * have changed (the common send: 5 values instead of all). */
void ms__publish_sent(struct ms_ctx *ctx, bool kf);
/* The same, for a caller already inside the slot's seqlock (ms__shm_begin); the file's copy
 * is written by the next ms__publish* call. */
void ms__publish_counters(struct ms_ctx *ctx);
/* Copy everything (counters, histograms) from the private slot into the file's. */
void ms__publish_all(struct ms_ctx *ctx);
/* The context's private slot, which every update writes (and, after a fork, the file's
 * mirror forgotten). */
struct ms_shm_slot *ms__own_slot(struct ms_ctx *ctx);
extern unsigned ms__fork_gen;
#define MS__MODE_ROTATE 1u /* MS_CFG_ROTATE */
#define MS__MODE_POOL 2u   /* library threads (workers, offload) */
#define MS__MODE_TS 4u     /* ts_sample */
#define MS__MODE_AUTO 8u   /* MS_BACKEND_AUTO: a backend picked per call (lib/modes/auto.c) */

/* ---- MS_BACKEND_AUTO (lib/modes/auto.c) ---- */
struct ms__auto;
/* AUTO's state for a context with ctx->nexec backends; freeze: decide once per shape, then
 * never measure again; recheck: fan-outs between re-checks (0: one second's worth, at least
 * 512). 0 or -errno. */
int ms__auto_new(struct ms_ctx *ctx, bool freeze, uint32_t recheck);
void ms__auto_free(struct ms_ctx *ctx);
/* The group's shape (which of AUTO's measurements its calls use), set with its plan. */
uint8_t ms__auto_shape(const struct ms_group *g);
/* Before the other stages: the executor for this call (s->x), and whether
 * to time it (s->sampled: then ms__auto_start is the last thing before the executor). */
void ms__auto_pick(struct ms_ctx *ctx, struct ms__send *s);
/* A sampled call's start: s->smp zeroed, the calling thread's clocks into it. */
void ms__auto_start(struct ms__send *s);
/* The calling thread's clocks now, switches first and its CPU clock last (so that reading
 * them is outside the piece ms__cost_add measures). */
void ms__clocks_start(struct ms__clocks *c);
/* The piece of work begun at *start on this thread, added to *acc. */
void ms__cost_add(struct ms__cost *acc, const struct ms__clocks *start);
/* After the executor, for a sampled call: the call's cost (the calling thread's time on the
 * CPU, the library threads' parts added), counted into the shape's measurements. */
void ms__auto_done(struct ms_ctx *ctx, struct ms__send *s);
/* The backend AUTO uses now (its last decision; before any, the first it sends with). */
enum ms_backend ms__auto_now(const struct ms_ctx *ctx);
/* Is b one of the backends AUTO measures? */
bool ms__auto_has(const struct ms_ctx *ctx, enum ms_backend b);
/* MULTISEND_SHOW_BACKEND: print each decision on stderr as it is made. */
void ms__auto_show(struct ms_ctx *ctx);
/* What AUTO decided, per shape, for ms_ctx_describe. */
void ms__auto_describe(const struct ms_ctx *ctx, char *buf, size_t len);

/* Is this a child forked after ctx was made? (Checked once per call, in lib/api/send.c.) */
static inline bool ms__forked(const struct ms_ctx *ctx)
{
	return ctx->gen != __atomic_load_n(&ms__fork_gen, __ATOMIC_RELAXED);
}
/* In a child forked after ctx was made, backend be cannot send (its state is the parent's:
 * MS__CAP_FORK_UNSAFE), and the loop sends instead (lib/api/send.c). */
static inline bool ms__fork_loop(const struct ms_ctx *ctx, const struct ms__backend *be)
{
	return (be->caps & MS__CAP_FORK_UNSAFE) && ms__forked(ctx);
}
/* A call's destinations that the loop sends for that reason: counted (fork_fallback), and
 * said once per process under MULTISEND_SHOW_BACKEND (lib/api/ctx.c). */
void ms__fork_fallback(struct ms_ctx *ctx, const struct ms__backend *be, uint64_t n);
/* Start counting forks in ms__fork_gen (once per process; every ms_ctx_new calls it). */
void ms__fork_watch(void);

/* ---- live counters (lib/obs/shm.c, lib/obs/shm-format.h) ---- */
struct ms_shm_slot;
uint64_t ms__realtime_ns(void);
/* Expand %p (the process id) in tmpl into out[cap]. 0, or -EINVAL (empty, or too long). */
int ms__shm_expand(char *out, size_t cap, const char *tmpl);
/* A slot in the live-counter file at tmpl (%p expanded), named, with its counter and histogram
 * names set; NULL with *err on failure (-EBUSY: the file belongs to a live process; -EEXIST:
 * it is not a live-counter file; -ENOSPC: no slot left; or the system's error). */
struct ms_shm_slot *ms__shm_open(const char *tmpl, const char *name,
				 const char *const *counters, unsigned nc,
				 const char *const *hists, unsigned nh, int *err);
/* Mark the slot closed and drop the file's mapping when its last slot closes. A slot opened
 * in another process (a child made without the atfork handlers) is never touched. */
void ms__shm_close(struct ms_shm_slot *slot);
/* The files' mappings are MADV_DONTFORK: a child does not have them. A child made by fork(3)
 * learns it from the atfork handler, but one made by _Fork(), syscall(SYS_fork), vfork-less
 * clone() runs no handler, and still holds its parent's pointers. So this word, in a page of
 * its own mapped MADV_WIPEONFORK, names the mappings valid in this process: nonzero once a file
 * was mapped here, zero in any child however it was made (until the child maps a file of its
 * own: then a value its parent never had). A pointer into a file is usable only while
 * ms__shm_epoch() is the value it was when the pointer was obtained (ms__shm_here). */
extern uint64_t *ms__shm_epoch_word;
static inline uint64_t ms__shm_epoch(void)
{
	uint64_t *w = __atomic_load_n(&ms__shm_epoch_word, __ATOMIC_ACQUIRE);
	return w ? __atomic_load_n(w, __ATOMIC_ACQUIRE) : 0;
}
static inline bool ms__shm_here(uint64_t epoch)
{
	return epoch && epoch != UINT64_MAX && ms__shm_epoch() == epoch;
}
/* Truncation (lib/obs/shm.c): a file truncated under us is noticed by the fault of the next
 * store into it, which a SIGBUS handler turns into private memory in its place, bumping this
 * word; ms__shm_renew makes a new file under the same path at the same address (bumping it
 * again). A writer that finds the word changed since it last looked calls ms__shm_renew and,
 * when it returns 0, writes all its values again. */
extern unsigned ms__shm_gen_word;
static inline unsigned ms__shm_gen(void)
{
	return __atomic_load_n(&ms__shm_gen_word, __ATOMIC_ACQUIRE);
}
/* The LD_PRELOAD shim owns SIGBUS itself (shim/fault.c): when ms__bus_host is set, the first
 * file calls it instead of setting a handler of its own, and the host's handler calls
 * ms__shm_bus_fault first, which is true when the fault was a truncated file's and is
 * repaired (the store may be made again). ms__bus_host returns false when it has no handler:
 * then this file sets its own. */
extern bool (*ms__bus_host)(void);
bool ms__shm_bus_fault(const siginfo_t *si);
/* Every file of this process lost to truncation made again (at most once a second per try):
 * 0 when none is lost (any more), else -errno (try again later). */
int ms__shm_renew(void);
/* For a writer that found ms__shm_gen() moved from *gen: the renewal, then true (and *gen
 * updated) when every value is to be written again, into the new file; false: try again at
 * the next publication. Out of line and cold: the send path only compares the word. */
__attribute__((cold)) bool ms__shm_caught_up(unsigned *gen);
/* The writer's side of a slot's seqlock: values change only between begin and end. */
static inline void ms__shm_begin(uint64_t *seq)
{
	__atomic_store_n(seq, *seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}
static inline void ms__shm_end(uint64_t *seq)
{
	__atomic_store_n(seq, *seq + 1, __ATOMIC_RELEASE);
}

#endif
