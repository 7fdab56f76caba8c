/* SPDX-License-Identifier: MIT */
/*
 * libmultisend-preload: private declarations shared by the shim's files.
 *
 *   resolve.c    the real functions (dlsym RTLD_NEXT under pthread_once), raw fallbacks
 *   config.c     MULTISEND_* variables, read lazily with secure_getenv, parsed strictly
 *   fdtab.c      what each descriptor is (UDP? blocking? connected?), cached per fd number
 *   thread.c     per-thread state: registry, thread exit, fork, exec, process exit
 *   batch.c      batch mode: append, flush as sendmmsg per socket, the age-bound flusher
 *   metrics.c    counters, fan-out runs, the system calls batching would need
 *   report.c     the report at exit (text or JSON)
 *   live.c       live counters: the "shim" slot of the MULTISEND_STATS_SHM file
 *   errfd.c      whether descriptor 2 is still the process's stderr (the report's fallback)
 *   intercept.c  the exported wrappers, and nothing else is exported
 *
 * Rules every file keeps (they are why a shim survives other people's programs):
 *  - Nothing runs before the first intercepted call: no constructor, no allocation, no thread,
 *    no getenv. (One exception: errfd.c's constructor makes one fstat of descriptor 2, and
 *    nothing else.) Memory comes from mmap, never malloc, so a send made from a signal
 *    handler that interrupted malloc cannot deadlock in the shim.
 *  - shim_guard (initial-exec TLS) is non-zero while this thread touches shim state. A call
 *    that finds it set (a signal handler that interrupted the shim, or a call the shim itself
 *    makes) takes no lock and touches no shared state: it goes straight to the real function,
 *    or, for a send that must not overtake this thread's batch, into a lock-free per-thread
 *    ring that the batch drains (batch.c).
 *  - errno is saved at entry and restored whenever the program's call succeeds.
 */
#ifndef MS_SHIM_H
#define MS_SHIM_H

#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>

#include "xdp.h" /* MS__XDP_* (lib/be/xdp.h) */
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define SHIM_EXPORT __attribute__((visibility("default")))
#define SHIM_TLS __thread __attribute__((tls_model("initial-exec")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define SHIM_NAME "libmultisend-preload"

/* ---- resolve.c ------------------------------------------------------------------------------ */

/* The next definition of every intercepted function (libc's, or another preload's). */
struct shim_real {
	ssize_t (*send)(int, const void *, size_t, int);
	ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
	ssize_t (*sendmsg)(int, const struct msghdr *, int);
	int (*sendmmsg)(int, struct mmsghdr *, unsigned int, int);
	ssize_t (*write)(int, const void *, size_t);
	ssize_t (*writev)(int, const struct iovec *, int);
	ssize_t (*recv)(int, void *, size_t, int);
	ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
	ssize_t (*recvmsg)(int, struct msghdr *, int);
	int (*recvmmsg)(int, struct mmsghdr *, unsigned int, int, struct timespec *);
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*readv)(int, const struct iovec *, int);
	int (*poll)(struct pollfd *, nfds_t, int);
	int (*ppoll)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
	int (*select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
	int (*pselect)(int, fd_set *, fd_set *, fd_set *, const struct timespec *,
		       const sigset_t *);
	int (*epoll_wait)(int, struct epoll_event *, int, int);
	int (*epoll_pwait)(int, struct epoll_event *, int, int, const sigset_t *);
	int (*epoll_pwait2)(int, struct epoll_event *, int, const struct timespec *,
			    const sigset_t *);
	int (*nanosleep)(const struct timespec *, struct timespec *);
	int (*clock_nanosleep)(clockid_t, int, const struct timespec *, struct timespec *);
	int (*usleep)(useconds_t);
	unsigned (*sleep)(unsigned);
	int (*close)(int);
	int (*dup2)(int, int);
	int (*dup3)(int, int, int);
	int (*close_range)(unsigned, unsigned, int);
	int (*socket)(int, int, int);
	int (*accept)(int, struct sockaddr *, socklen_t *);
	int (*accept4)(int, struct sockaddr *, socklen_t *, int);
	int (*connect)(int, const struct sockaddr *, socklen_t);
	int (*bind)(int, const struct sockaddr *, socklen_t);
	int (*shutdown)(int, int);
	int (*setsockopt)(int, int, int, const void *, socklen_t);
	int (*getsockname)(int, struct sockaddr *, socklen_t *);
	pid_t (*fork)(void);
	int (*execve)(const char *, char *const[], char *const[]);
	int (*execv)(const char *, char *const[]);
	int (*execvp)(const char *, char *const[]);
	int (*execvpe)(const char *, char *const[], char *const[]);
	int (*fexecve)(int, char *const[], char *const[]);
	int (*execveat)(int, const char *, char *const[], char *const[], int);
	void (*exit)(int) __attribute__((noreturn));
	void (*_exit)(int) __attribute__((noreturn));
	void (*_Exit)(int) __attribute__((noreturn));
	ssize_t (*recv_chk)(int, void *, size_t, size_t, int);
	ssize_t (*recvfrom_chk)(int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *);
	ssize_t (*read_chk)(int, void *, size_t, size_t);
	int (*poll_chk)(struct pollfd *, nfds_t, int, size_t);
	int (*ppoll_chk)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *,
			 size_t);
};

extern struct shim_real shim_real;
extern SHIM_TLS int shim_guard;

/* Resolve the real functions and read the configuration, once per process (pthread_once).
 * Call only with shim_guard set. */
void shim_init(void);
/* Called by init: resolve every NEXT() target of intercept.c's synchronisation, signal,
 * namespace and fcntl wrappers. */
void shim_resolve_next(void);
/* Called by init: the thread-exit key and the atfork handlers (thread.c). */
void shim_thread_setup(void);

/* Re-entered paths (shim_guard set) must not wait for pthread_once: they use the resolved
 * pointer when it is there, or the system call itself. */
ssize_t shim_raw_sendto(int fd, const void *buf, size_t len, int flags,
			const struct sockaddr *addr, socklen_t alen);
ssize_t shim_raw_sendmsg(int fd, const struct msghdr *msg, int flags);
int shim_raw_sendmmsg(int fd, struct mmsghdr *msgs, unsigned int n, int flags);
ssize_t shim_raw_write(int fd, const void *buf, size_t len);
ssize_t shim_raw_writev(int fd, const struct iovec *iov, int n);
ssize_t shim_raw_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *addr,
			  socklen_t *alen);
ssize_t shim_raw_recvmsg(int fd, struct msghdr *msg, int flags);
int shim_raw_recvmmsg(int fd, struct mmsghdr *m, unsigned n, int flags, struct timespec *t);
ssize_t shim_raw_read(int fd, void *buf, size_t len);
ssize_t shim_raw_readv(int fd, const struct iovec *iov, int n);
int shim_raw_close(int fd);

/* A function that is neither resolved nor a plain system call, needed from a re-entered
 * path (a signal handler that interrupted the shim's own start-up): dlsym it now. */
void *shim_resolve_one(const char *name);

/* ---- config.c ------------------------------------------------------------------------------- */

enum shim_mode { SHIM_OFF = 0, SHIM_METRICS = 1, SHIM_BATCH = 2, SHIM_BYPASS = 3 };

#define SHIM_BATCH_MAX_LIMIT 1024u /* UIO_MAXIOV: one sendmmsg */
#define SHIM_BATCH_MAX_DEFAULT 1024u
#define SHIM_DELAY_US_DEFAULT 500u
#define SHIM_DELAY_US_MIN 10u
#define SHIM_DELAY_US_MAX 1000000u

struct shim_config {
	enum shim_mode mode;    /* after the program filter: SHIM_OFF for filtered programs */
	enum shim_mode asked;   /* what MULTISEND_PRELOAD_MODE said */
	unsigned batch_max;     /* messages per batch, 1..1024 */
	unsigned delay_us;      /* age bound of a batch */
	bool defer_errors;      /* MULTISEND_DEFER_ERRORS=1 */
	bool fanout_end;        /* flush at a predicted fan-out's end (MULTISEND_BATCH_FANOUT_END) */
	bool secure;            /* AT_SECURE: the environment was ignored */
	bool json;              /* the stats path ends in .json */
	char stats_path[1024];  /* "" = stderr */
	char stats_shm[1024];   /* live-counter file (MULTISEND_STATS_SHM); "" = none */
	char xdp_iface[16];     /* batch mode: send batches as AF_XDP frames on this interface;
	                           bypass mode: every send (MULTISEND_PRELOAD_XDP_IFACE); "" =
	                           none (bypass mode: the IPv4 default route's device) */
	bool xdp_nf_skip;       /* frames may skip netfilter (MULTISEND_PRELOAD_XDP_NETFILTER=skip) */
	char program[64];       /* the program's name, for the report */
};

extern struct shim_config shim_cfg;
/* A value from the environment (or anything else a program controls) as a warning shows it,
 * so that it cannot break the line or reach the terminal as an escape sequence: printable
 * ASCII as it is, a backslash as two, every other byte (control characters, bytes >= 0x7f)
 * as \xNN; at most SHIM_QUOTE_SHOWN characters of that, then "..." when some of the value is
 * left out (it is read no further). Returns q->s. Every shim_warn of such a value goes
 * through this; shim_warn itself also escapes whatever reaches it. */
#define SHIM_QUOTE_SHOWN 128
struct shim_quoted {
	char s[SHIM_QUOTE_SHOWN + 4];
};
const char *shim_quote(struct shim_quoted *q, const char *v);
/* Fill shim_cfg from the environment (secure_getenv) and this process's names. */
void shim_config_load(void);
/* What shim_config_load does after finding the process's names: parse the MULTISEND_*
 * variables get(arg, name) returns (NULL: unset) over what c holds (the defaults), warning
 * about each value it refuses. invoked is the name the program was run as (NULL: use the
 * executable's), exe_name the executable's file name (the other name the program filter
 * matches); both are cut to 63 bytes. Sets every field but secure. */
typedef const char *(*shim_config_get_fn)(void *arg, const char *name);
void shim_config_parse(struct shim_config *c, shim_config_get_fn get, void *arg,
		       const char *invoked, const char *exe_name);

/* ---- fdtab.c -------------------------------------------------------------------------------- */

/* What a descriptor is, cached per fd number (bits of struct shim_fd.info). */
#define FD_KNOWN     (1u << 0)  /* classified */
#define FD_SOCKET    (1u << 1)
#define FD_UDP       (1u << 2)  /* AF_INET or AF_INET6, SOCK_DGRAM, IPPROTO_UDP */
#define FD_V6        (1u << 3)
#define FD_CONNECTED (1u << 4)
#define FD_BATCHABLE (1u << 5)  /* UDP with no option that makes a send's outcome depend on
                                   more than its size and address (see fdtab.c) */
#define FD_STREAM    (1u << 6)
#define FD_UNIX      (1u << 7)
#define FD_INET      (1u << 8)  /* AF_INET or AF_INET6, any type */
#define FD_NONBLOCK  (1u << 9)  /* O_NONBLOCK when classified (fcntl F_SETFL and ioctl FIONBIO
                                   through the shim forget the entry) */
#define FD_MORE      (1u << 10) /* bypass mode: the program used MSG_MORE on it (its sends then
                                   go by the kernel's path, which holds the corked data) */

#define SHIM_FDTAB_MAX 65536 /* descriptors above are never batched, nor counted per socket */

struct shim_thread;

/* Why a datagram went by the kernel's path under kernel bypass: the port's reasons
 * (MS__XDP_*, lib/be/xdp.h), then the shim's own (bypass mode). Names: shim_xreason_name. */
enum {
	SHIM_XR_NOT_UDP = MS__XDP_NREASONS, /* not a UDP socket */
	SHIM_XR_FLAGS,       /* send flags frames cannot honour (MSG_MORE...), or a socket that
	                        used MSG_MORE */
	SHIM_XR_CONTROL,     /* sendmsg or sendmmsg with ancillary data */
	SHIM_XR_REENTERED,   /* a send from a handler that interrupted the shim */
	SHIM_XR_UNAVAILABLE, /* no AF_XDP port */
	SHIM_XR_N
};
extern const char *const shim_xreason_name[SHIM_XR_N];

/* What flushes did (batch mode), per thread; added up as a whole (shim_fcounts_add). The
 * xdp ones when batches go out as AF_XDP frames (MULTISEND_PRELOAD_XDP_IFACE), and in bypass
 * mode for every send. */
struct shim_fcounts {
	uint64_t sendmmsg_calls, single_sends;
	uint64_t xdp_frames, xdp_kicks;
	uint64_t xdp_fallback[SHIM_XR_N]; /* by reason ([0] unused) */
};
static inline void shim_fcounts_add(struct shim_fcounts *to, const struct shim_fcounts *f)
{
	uint64_t *a = (uint64_t *)to;
	const uint64_t *b = (const uint64_t *)f;
	for (size_t k = 0; k < sizeof(*f) / sizeof(uint64_t); k++)
		a[k] += b[k];
}

struct __attribute__((aligned(8))) shim_fd {
	uint32_t info;                         /* FD_* bits; 0 = not classified yet */
	uint32_t gen;                          /* bumped whenever the number may change meaning
	                                          (info then gen, 8-byte aligned: see metrics.c) */
	struct shim_thread *_Atomic pending;   /* a thread whose batch holds data for this fd */
	_Atomic int deferred;                  /* an error found at flush, for the next send */
};

extern struct shim_fd *shim_fdtab;
struct shim_fd *shim_fd_map(int fd);
uint32_t shim_fd_classify(int fd, struct shim_fd *e);

/* The entry for fd, or NULL when fd is out of range or the table could not be mapped. */
static inline struct shim_fd *shim_fd_get(int fd)
{
	if (unlikely((unsigned)fd >= SHIM_FDTAB_MAX))
		return NULL;
	return likely(shim_fdtab != NULL) ? &shim_fdtab[fd] : shim_fd_map(fd);
}

/* The entry if the table exists (a flush point in a program that never sent maps nothing). */
static inline struct shim_fd *shim_fd_peek(int fd)
{
	return (unsigned)fd < SHIM_FDTAB_MAX && shim_fdtab ? &shim_fdtab[fd] : NULL;
}

/* Classify fd now if needed; returns its FD_* bits (0 when fd is not open). */
static inline uint32_t shim_fd_info(int fd, struct shim_fd *e)
{
	uint32_t info = e ? __atomic_load_n(&e->info, __ATOMIC_RELAXED) : 0;
	return likely(info) ? info : shim_fd_classify(fd, e);
}
/* The number may now name another file (close, dup2, socket...): forget what it was. */
void shim_fd_forget(int fd);
void shim_fd_forget_range(unsigned first, unsigned last);
/* O_NONBLOCK changed on some file: every UDP descriptor may share it (dup, fork, SCM_RIGHTS),
 * so all are classified again. */
void shim_fd_forget_udp(void);
/* "udp4", "tcp6", "unix", ... for the report. */
const char *shim_fd_kind(uint32_t info);

/* ---- metrics.c: counters -------------------------------------------------------------------- */

enum shim_call { CALL_SEND, CALL_SENDTO, CALL_SENDMSG, CALL_SENDMMSG, CALL_WRITE, CALL_WRITEV,
		 CALL_N };

enum shim_reason {
	FLUSH_FULL, FLUSH_ARENA, FLUSH_FANOUT, FLUSH_SOCKETS, FLUSH_SEND, FLUSH_RECV, FLUSH_READ,
	FLUSH_POLL, FLUSH_SLEEP, FLUSH_CLOSE, FLUSH_WRITE, FLUSH_SOCKOPT, FLUSH_SOCKET,
	FLUSH_OTHER_THREAD, FLUSH_AGE, FLUSH_FORK, FLUSH_EXEC, FLUSH_THREAD_EXIT, FLUSH_EXIT,
	FLUSH_SYNC, FLUSH_SIGNAL, FLUSH_NAMESPACE,
	FLUSH_N
};
extern const char *const shim_reason_name[FLUSH_N];
extern const char *const shim_call_name[CALL_N];

#define SHIM_ERRNO_MAX 160 /* errs[0] counts anything larger */

/* Live counters each thread adds up for itself (live.c): 13 totals, then the calls by kind
 * and the flushes by reason. */
#define SHIM_LIVE_THREAD_N (13 + CALL_N + FLUSH_N + 2 + SHIM_XR_N - 1)

/* Counters of one socket (or of everything): written by one thread, added up at the end. */
struct shim_counts {
	uint64_t calls;         /* send-family calls the program made */
	uint64_t datagrams;     /* messages in them (sendmmsg: vlen) */
	uint64_t bytes;         /* bytes the program was told were sent */
	uint64_t batched;       /* datagrams that went into a batch */
	uint64_t passed;        /* calls passed through untouched */
	uint64_t errors;        /* failures the program saw, plus failures found at flush */
	uint64_t flush_errors;  /* ... of which found at flush (the program was told success) */
	uint64_t syscalls;      /* send-family system calls made by passing calls through */
	uint64_t fsyscalls;     /* ... and by flushing batches (written under the batch lock) */
	uint64_t syscalls_est;  /* metrics mode: what batch mode would have made */
	uint64_t runs;          /* fan-out runs: 2+ consecutive identical payloads, new dests */
	uint64_t run_dests;     /* destinations in those runs */
	uint64_t run_max;       /* the longest run */
	int last_errno;
};

/* A socket's row in a thread's table. */
struct shim_sockrow {
	uint32_t info;          /* info and gen as in struct shim_fd, in the same order, so the */
	uint32_t gen;           /* fast path compares both at once */
	int fd;                 /* -1: the row of every fd past SHIM_SOCK_SLOTS */
	struct shim_counts c;
};

#define SHIM_SOCK_SLOTS 1024 /* per-thread rows indexed by fd; larger fds share row "other" */

/* ---- batch.c: the planner that both modes share --------------------------------------------- */

#define SHIM_BATCH_FDS 16        /* sockets per batch; one more forces a flush */
#define SHIM_ARENA (1u << 20)    /* payload bytes per batch */
#define SHIM_PAYLOAD_MAX 65000u  /* larger datagrams pass through (close to the kernel's
                                    limits, where its answer depends on IP options) */
#define SHIM_LAST_MAX 65536u

/* A destination as stored in a batch: the socket and its address (or none). */
struct shim_dest {
	int fd;
	socklen_t alen; /* 0: the connected peer */
	union {
		struct sockaddr sa;
		struct sockaddr_in in;
		struct sockaddr_in6 in6;
	} a;
};

/* One pending datagram. */
struct shim_msg {
	struct shim_dest d;
	uint32_t off, len; /* payload in the arena */
};

/*
 * Where a batch (or, in metrics mode, the batch that would have been) stands: its sockets,
 * its size, and the fan-out predictor. Publishers send the same subscriber list over and
 * over; once a cycle has been seen (the first destination comes round again), the batch is
 * flushed as soon as the cycle's last destination is appended, so a fan-out goes out as one
 * sendmmsg right after its last sendto, even when the program then spins without making any
 * call the shim sees.
 */
struct shim_plan {
	uint32_t n;
	uint32_t nfds;
	int fds[SHIM_BATCH_FDS];
	uint64_t cycle_first;         /* first destination of the current cycle (a key) */
	uint64_t pred_last;           /* last destination of the previous cycle */
	uint64_t last_seen;           /* the latest destination */
	uint32_t cycle_len, pred_len;
};

/* A send made by a signal handler that interrupted this thread inside the shim, while the
 * batch may hold earlier data for the same socket: it cannot touch the batch (the interrupted
 * code may be half way through it) and must not overtake it, so it waits here, in a
 * single-producer ring (the producer is only ever a handler on the owning thread; the
 * consumer is whoever next holds the batch lock).
 *
 * A handler may send many times while its thread stays inside the shim (a timer firing faster
 * than its handler runs keeps the thread in handlers), so a full ring continues in overflow
 * segments the handler maps itself (mmap is a plain system call): one chain, in order after
 * the ring. The producer writes the ring only while the chain holds nothing unconsumed, and
 * starts the chain only when the ring is full, so every message in the ring is older than
 * every message in the chain; the consumer takes the ring first, then the chain. The consumer
 * unmaps a segment once it has moved past it (the producer is done with a segment when it
 * links the next one); the last segment stays for the thread's next overflow. */
#define SHIM_SIGQ 64u
#define SHIM_SIGSEG 64u
#define SHIM_SIGQ_PAYLOAD 2048u
struct shim_sigmsg {
	struct shim_dest d;
	uint64_t key;
	uint32_t len;
	uint8_t data[SHIM_SIGQ_PAYLOAD];
};
struct shim_sigseg {
	struct shim_sigseg *_Atomic next; /* set by the producer once this one is full */
	_Atomic uint32_t count;           /* slots filled (producer) */
	struct shim_sigmsg m[SHIM_SIGSEG];
};

/* Per-thread batch header, in its own page mapped MADV_WIPEONFORK: in a child, however it was
 * forked (fork, vfork, _Fork, a raw clone), the page reads as zeros, so the lock is free and
 * the batch is empty. That is what guarantees the child never sends its parent's batch. */
struct shim_batch {
	pthread_mutex_t lock;
	struct shim_plan plan;
	uint64_t first_ns;          /* CLOCK_MONOTONIC of the first pending message */
	uint32_t arena_used;
	uint32_t last_off, last_len; /* the last payload appended (shared by identical ones) */
	bool last_valid;
	bool flushing;
	bool draining;               /* moving the signal queue into the batch */
	_Atomic uint32_t sigq_head, sigq_tail; /* the signal queue (struct shim_sigmsg) */
	/* its overflow chain: the segment being consumed and the position in it (consumer);
	 * the segment being filled (producer); messages put in and taken out */
	struct shim_sigseg *_Atomic ovf_head;
	uint32_t ovf_pos;
	struct shim_sigseg *ovf_tail;
	_Atomic uint64_t ovf_in, ovf_out;
};

/* ---- thread.c ------------------------------------------------------------------------------- */

struct shim_thread {
	struct shim_thread *next;     /* registry, under shim_registry_lock */
	bool in_use;
	bool counted;                 /* made at least one intercepted send */
	struct shim_batch *b;         /* WIPEONFORK page; NULL until batch mode needs it */
	struct shim_msg *msgs;        /* [SHIM_BATCH_MAX_LIMIT] */
	uint8_t *arena;               /* [SHIM_ARENA] */
	struct mmsghdr *mm;           /* flush scratch [SHIM_BATCH_MAX_LIMIT] */
	struct iovec *iov;            /* flush scratch [SHIM_BATCH_MAX_LIMIT] */
	struct shim_sigmsg *sigq;     /* [SHIM_SIGQ]; its indices are in the batch header */
	volatile sig_atomic_t sigq_busy; /* a handler is enqueueing (a nested one passes) */

	/* metrics, written by the owner (and by flushes, under b->lock); totals are the sum of
	 * the rows */
	uint64_t calls_by[CALL_N];
	uint64_t errs[SHIM_ERRNO_MAX];  /* failures the program saw, by errno */
	uint64_t ferrs[SHIM_ERRNO_MAX]; /* failures found at flush, by errno (batch lock) */
	uint64_t flushes[FLUSH_N];
	struct shim_fcounts fc;       /* what this thread's flushes did */
	struct shim_sockrow *rows;    /* [SHIM_SOCK_SLOTS + 1]; the last is "other" */

	/* fan-out run detection: the previous payload and destination */
	uint8_t *lastbuf;             /* [SHIM_LAST_MAX] */
	size_t last_len;              /* SIZE_MAX: none yet */
	uint64_t last_key;            /* destination key of the previous send */
	uint64_t run_len;
	struct shim_sockrow *run_row;
	struct shim_plan est;         /* metrics mode: the batch batch mode would have */

	/* live counters (live.c), written by the owner; other threads read only live_pub */
	uint32_t live_tick, live_every; /* calls since the last clock check, and how many to
	                                   make between two checks */
	uint64_t live_check_ns, live_pub_ns; /* coarse clock at the last check / publication */
	uint32_t rows_hi;             /* rows[0, rows_hi) have been used (and the "other" row) */
	struct shim_counts live_gone; /* rows this thread retired (their fd number was reused) */
	_Atomic uint64_t live_pub[SHIM_LIVE_THREAD_N]; /* this thread's totals, as published */
};

extern pthread_mutex_t shim_registry_lock;
extern struct shim_thread *shim_registry;
extern SHIM_TLS struct shim_thread *shim_self;

struct shim_thread *shim_thread_new(void);
/* This thread's state, created on first use; NULL when memory could not be had (the shim then
 * passes everything through). */
static inline struct shim_thread *shim_thread(void)
{
	struct shim_thread *t = shim_self;
	return likely(t != NULL) ? t : shim_thread_new();
}
/* Batch storage for t (batch mode); false if it cannot be had. */
bool shim_thread_batch(struct shim_thread *t);
/* The report's view: every thread's counters, including exited ones. */
struct shim_thread *shim_retired(void);

/* Flush every thread's batch (exec, exit). */
void shim_flush_all(enum shim_reason why);
/* Process exit: flush everything, stop batching, write the report. */
void shim_exit_hook(void);
/* fork: flush this thread's batch; the atfork handlers keep the registry consistent. */
void shim_before_fork(void);
void shim_after_fork_child(void);
void shim_after_fork_parent(void);

/* In a forked child: the flusher thread is gone (batch.c). */
void shim_batch_after_fork_child(void);

/* True once the program has a second thread (pthread_create or thrd_create through the
 * shim, or a second thread making an intercepted call): from then on a process-private lock
 * is a flush point too (intercept.c). */
extern _Atomic bool shim_program_threaded;

/* True once the process is exiting: everything passes through from then on. */
extern _Atomic bool shim_exiting;

/* ---- batch.c -------------------------------------------------------------------------------- */

/* What the send wrappers pass to the shared send path: the arguments as the program gave
 * them, which the shim does not read (they may not be readable memory: the kernel answers
 * EFAULT), and what shim_send_load makes of them once it may. */
struct shim_send {
	enum shim_call call;
	int fd;
	int flags;
	/* the arguments, as given */
	const void *buf;                /* send, sendto, write */
	const struct sockaddr *uaddr;   /* sendto */
	socklen_t ualen;
	const struct iovec *uiov;       /* writev */
	int uiovcnt;
	const struct msghdr *msg;       /* sendmsg: the program's header, passed on as is */
	/* loaded (shim_send_load), or set by the caller where it knows them: */
	const struct iovec *iov;
	int iovcnt;
	size_t len;                     /* send, sendto, write: the argument, always set */
	const struct sockaddr *addr;
	socklen_t alen;
	bool control; /* sendmsg with control data */
	bool loaded;   /* iov, iovcnt, len, addr, alen and control are set, and the header, the
	                  iovec array and the address may be read */
	bool readable; /* ... and the payload too */
	struct iovec one;
};

/* probe.c: fill in s's loaded fields and say whether the payload may be read (s->readable;
 * s->loaded: the rest may). taken >= 0: the kernel has just accepted the send, taking that
 * many bytes (no system call); < 0: probe (one process_vm_readv call for send, sendto and
 * write, two for writev, three for sendmsg; a payload over SHIM_LAST_MAX is not probed, and
 * not readable).
 * Keeps errno; async-signal-safe. */
bool shim_send_load(struct shim_send *s, ssize_t taken);
/* Is [p, p + len) readable (one process_vm_readv; none when len is 0)? */
bool shim_readable(const void *p, size_t len);
/* Is every message of msgs[0..n) one the kernel takes as it is, all of it readable? */
bool shim_mmsg_readable(const struct mmsghdr *msgs, unsigned n);

/* Try to take the send (loaded and readable: probe.c) into this thread's batch (can:
 * shim_batchable said yes). Returns 1 (batched: the program gets len) or 0 (send it for real,
 * after whatever had to be flushed first). (A deferred error is shim_batch_deferred's; err is
 * unused.) */
int shim_batch_send(struct shim_thread *t, const struct shim_send *s, struct shim_fd *e,
		    uint32_t info, uint64_t key, bool can, int *err);
/* MULTISEND_DEFER_ERRORS: the error a flush found for e's socket, taken (0: none). */
int shim_batch_deferred(struct shim_fd *e);
/* Will the next send of t pass whatever its destination (no fan-out pattern known, nothing
 * pending)? Then it is made first and looked at after (shim_count_made). */
bool shim_batch_surely_passes(const struct shim_thread *t);
/* The predictor sees a destination that a send bound to pass went to. */
void shim_batch_observe(struct shim_thread *t, uint64_t key);
/* Could this send be batched, as far as the cached socket facts tell (metrics mode's
 * estimate; batch mode also asks the kernel whether the socket is blocking)? */
bool shim_batchable(const struct shim_send *s, uint32_t info, bool dest_ok);

/* A send re-entering the shim from a signal handler (shim_guard set). Returns 1 when it was
 * queued behind this thread's batch (the caller reports len), 0 when it may go straight
 * through. Async-signal-safe: no lock; memory only from mmap, when the ring is full. */
int shim_batch_signal_send(struct shim_send *s);
/* Of the queued ones: how many went to the overflow chain; and sends that had to be queued
 * but found no memory for it, so went straight through, possibly ahead of earlier data. */
extern _Atomic uint64_t shim_sigoverflow, shim_sigunordered;

/* Flush this thread's own batch, if it has anything. */
void shim_flush_own(enum shim_reason why);
/* Flush whatever any other thread has pending for fd (and this thread's own batch). */
void shim_flush_fd(int fd, enum shim_reason why);
/* Flush t's batch (any thread may call; takes t's lock). */
void shim_flush_thread(struct shim_thread *t, enum shim_reason why);
void shim_flush_locked(struct shim_thread *t, enum shim_reason why);


/* May a send from fd (entry e) to addr be batched as far as routing goes: has the kernel a
 * route for it (asked once per destination and socket, then remembered)? */
bool shim_route_ok(int fd, struct shim_fd *e, uint32_t info, uint64_t key,
		   const struct sockaddr *addr, socklen_t alen);
/* Stop and join the flusher thread, so the process has only the program's threads (before
 * unshare or setns). Returns whether there was one. The next batch starts it again. */
bool shim_flusher_quiesce(void);
/* After it: start the flusher again if a batch is pending. */
void shim_flusher_resume(void);

/* Would adding a message for fd need a flush first (too many sockets)? */
bool shim_plan_needs_room(const struct shim_plan *p, int fd);
void shim_plan_reset(struct shim_plan *p);

/* Would the kernel's answer for a send on a socket (FD_* info) to addr/alen (addr NULL: the
 * connected peer) be known without a route lookup, so that the send may be batched? */
bool shim_dest_ok(uint32_t info, const struct sockaddr *addr, socklen_t alen);
/* The destination as a batch stores it (normalised); only for one shim_dest_ok accepted. */
void shim_dest_make(struct shim_dest *d, int fd, uint32_t info, const struct sockaddr *addr,
		    socklen_t alen);
/* A 64-bit key that tells destinations apart (socket and address; exact for IPv4, hashed
 * otherwise). Fan-out runs and the fan-out predictor compare keys: a collision costs a
 * miscounted run or an early flush, never a wrong datagram. */
uint64_t shim_dest_key(int fd, const struct sockaddr *addr, socklen_t alen);

/* ---- fault.c -------------------------------------------------------------------------------- */

/* Reading the program's memory with fault recovery (fault.c says how): shim_touch reads one
 * byte at each r[i].iov_base and returns 0, or -EFAULT where one is not readable, without a
 * signal reaching the program. Only when shim_fault_usable() said yes in this thread just
 * before. */
int shim_touch(const struct iovec *r, unsigned n);

enum { SHIM_FAULT_NONE, SHIM_FAULT_READY, SHIM_FAULT_LOST };
/* This thread's mask, as far as the touch cares: not known (look), neither SIGSEGV nor SIGBUS
 * blocked, one of them blocked, or inside a signal handler of the program's (never touch). */
enum { SHIM_FMASK_UNKNOWN, SHIM_FMASK_CLEAR, SHIM_FMASK_BLOCKED, SHIM_FMASK_HANDLER };
extern SHIM_TLS unsigned char shim_fmask;
extern SHIM_TLS unsigned shim_fault_uses;
extern _Atomic int shim_fault_state;
bool shim_fault_usable_slow(void);
bool shim_fault_verify(void);
/* Touches between two looks at the kernel's handler: two rt_sigaction, 0.002 system calls a
 * send (at 128, measure-bypass.sh counted 0.016: more system calls than the plain program). */
#define SHIM_FAULT_EVERY 1024u

/* May this thread use shim_touch now? Sets the handler the first time (batch and bypass
 * modes), reads the mask when it is not known; every SHIM_FAULT_EVERY uses, checks that the
 * handler is still the kernel's (two system calls). Async-signal-safe. */
static inline bool shim_fault_usable(void)
{
	if (likely(atomic_load_explicit(&shim_fault_state, memory_order_relaxed) ==
			   SHIM_FAULT_READY &&
		   shim_fmask == SHIM_FMASK_CLEAR)) {
		if (likely(++shim_fault_uses < SHIM_FAULT_EVERY))
			return true;
		shim_fault_uses = 0;
		return shim_fault_verify();
	}
	return shim_fault_usable_slow();
}

/* Has init run? (resolve.c; never runs it.) */
bool shim_ready(void);
/* At init: lib/obs/shm.c's SIGBUS recovery runs inside the shim's handler. */
void shim_fault_setup(void);
/* The wrappers of sigaction and its relatives: *done when the call was the shim's (its
 * result returned), else the caller makes the real call. */
int shim_fault_sigaction(int sig, const struct sigaction *act, struct sigaction *old,
			 bool *done);
/* After a call that may have changed this thread's signal mask. */
void shim_fault_mask_changed(void);
/* Around a longjmp, setcontext or swapcontext: also out of a signal handler. */
void shim_fault_jumped(void);
/* syscall(nr, a1, a2, ...) is about to be made. */
void shim_fault_syscall(long nr, long a1, long a2);
/* The handler is no longer the kernel's: the probe from now on. */
void shim_fault_lost(void);
/* Around an exec (before: true; after a failed one: false). */
void shim_fault_exec(bool before);

/* Can p .. p + len not be the program's memory: in the first page (which no process maps:
 * vm.mmap_min_addr), past the largest user address (five-level paging), or wrapping? The
 * kernel answers such a call with EFAULT without a look. Other bad pointers, into unmapped
 * user memory, need a probe (probe.c). */
static inline bool shim_bad_ptr(const void *p, size_t len)
{
	const uintptr_t a = (uintptr_t)p;
	return len && (a < 4096 || a + len < a || a + len > ((uintptr_t)1 << 56));
}

/* memcmp for the short payloads of the hot path, inlined (16 bytes a step with SSE2). */
static inline bool shim_bytes_eq(const uint8_t *a, const uint8_t *b, size_t n)
{
	if (n > 512)
		return __builtin_memcmp(a, b, n) == 0;
#ifdef __SSE2__
	for (; n >= 16; a += 16, b += 16, n -= 16) {
		__m128i x = _mm_loadu_si128((const __m128i *)(const void *)a);
		__m128i y = _mm_loadu_si128((const __m128i *)(const void *)b);
		if (_mm_movemask_epi8(_mm_cmpeq_epi8(x, y)) != 0xffff)
			return false;
	}
#endif
	for (; n >= 8; a += 8, b += 8, n -= 8) {
		uint64_t x, y;
		__builtin_memcpy(&x, a, 8);
		__builtin_memcpy(&y, b, 8);
		if (x != y)
			return false;
	}
	for (; n; n--)
		if (*a++ != *b++)
			return false;
	return true;
}

/* The fan-out predictor sees the program send to key (whether or not it is batched). */
#define CYCLE_MAX 65536u /* a "cycle" longer than this is no fan-out pattern: stop predicting */

static inline void shim_plan_observe(struct shim_plan *p, uint64_t key)
{
	/* The cycle's first destination came round again: the cycle before was one fan-out,
	 * and it ended with the destination seen just before this one. */
	if (p->cycle_len && key == p->cycle_first) {
		p->pred_len = p->cycle_len;
		p->pred_last = p->last_seen;
		p->cycle_len = 0;
	}
	if (p->cycle_len == 0)
		p->cycle_first = key;
	if (unlikely(++p->cycle_len > CYCLE_MAX)) {
		p->cycle_first = key;
		p->cycle_len = 1;
		p->pred_len = 0;
	}
	p->last_seen = key;
}

/* A message for fd (destination key, already observed) joins the plan. Returns true when the
 * plan says "flush now" after it (batch full, or the end of a predicted fan-out); *why says
 * which. */
static inline bool shim_plan_take(struct shim_plan *p, int fd, uint64_t key, unsigned batch_max,
				  enum shim_reason *why)
{
	if (unlikely(p->nfds != 1 || p->fds[0] != fd)) { /* one socket is the common case */
		uint32_t k;
		for (k = 0; k < p->nfds; k++)
			if (p->fds[k] == fd)
				break;
		if (k == p->nfds)
			p->fds[p->nfds++] = fd;
	}
	p->n++;
	if (shim_cfg.fanout_end && p->pred_len && p->cycle_len == p->pred_len &&
	    key == p->pred_last) {
		*why = FLUSH_FANOUT;
		return true;
	}
	if (p->n >= batch_max) {
		*why = FLUSH_FULL;
		return true;
	}
	return false;
}

/* ---- metrics.c ------------------------------------------------------------------------------ */

/* metrics mode's fast path for send and sendto: the common case (a socket already seen, an
 * IPv4 or connected destination) counted and passed through with no call the shim makes
 * itself, so errno needs no saving. Returns SHIM_SLOW when the general path must run. */
#define SHIM_SLOW (-2)
ssize_t shim_metrics_fast(int fd, const void *buf, size_t len, int flags,
			  const struct sockaddr *addr, socklen_t alen, enum shim_call call);

/* Count one send the program made (before it is carried out or batched): fan-out runs and,
 * in metrics mode, the estimate. Returns the socket's row. */
struct shim_sockrow *shim_count_send(struct shim_thread *t, const struct shim_send *s,
				     struct shim_fd *e, uint64_t key, uint32_t info,
				     bool batchable);
/* A send the kernel has just made (r, and err when r < 0), counted as shim_count_send and
 * shim_count_result would: the shim reads what the kernel read, probes the rest unless the
 * kernel said EFAULT. observe: batch mode, a send that was bound to pass: the fan-out
 * predictor sees its destination now. */
void shim_count_made(struct shim_thread *t, struct shim_send *s, struct shim_fd *e,
		     uint32_t info, ssize_t r, int err, bool observe);
/* Count the outcome seen by the program: r >= 0 bytes, or -1 with err. */
void shim_count_result(struct shim_thread *t, struct shim_sockrow *row, ssize_t r, int err,
		       uint64_t datagrams, bool batched, uint64_t syscalls);
/* Bypass mode: one datagram of len bytes sent as a frame (neither batched nor passed
 * through), with the system calls that took. */
void shim_count_framed(struct shim_sockrow *row, size_t len, uint64_t syscalls);
/* Count a failure found at flush (under the batch lock; any thread). */
void shim_count_flush_error(struct shim_thread *t, int fd, int err);
/* Metrics mode: a call that would have flushed a batch ends the estimated batch. */
void shim_count_boundary(struct shim_thread *t);
/* The thread is exiting: its fan-out run in progress and metrics mode's estimated batch end
 * now, so that they count (the report adds those of running threads at exit itself). */
void shim_count_thread_end(struct shim_thread *t);
/* The row for (fd, its generation) in t's table (e: fd's entry, or NULL). */
struct shim_sockrow *shim_row(struct shim_thread *t, int fd, struct shim_fd *e, uint32_t info);

void shim_counts_add(struct shim_counts *to, const struct shim_counts *from);

/* Send-family calls that re-entered the shim (shim_guard set: a signal handler that
 * interrupted the shim) and went straight to the kernel or into the batch's signal queue.
 * They cannot touch a thread's rows, so they are counted here, with relaxed atomics only
 * (async-signal-safe, no lock), and the report adds them to its totals (not to any socket's
 * row). Every field is an _Atomic uint64_t (shim_reentry_reset clears them as an array). */
struct shim_reentry {
	_Atomic uint64_t calls, datagrams, bytes, batched, passed, errors;
	_Atomic uint64_t calls_by[CALL_N];
	_Atomic uint64_t errs[SHIM_ERRNO_MAX]; /* failures the program saw, by errno */
};
extern struct shim_reentry shim_re;
/* Count one re-entered send of one datagram: r its result (the length when queued; -1 with
 * errno set when it failed). Returns r; errno is left as it is. */
ssize_t shim_count_reentered(enum shim_call call, ssize_t r, bool queued);
/* ... of a re-entered sendmmsg that went straight through: r its result. */
int shim_count_reentered_mmsg(int r, const struct mmsghdr *msgs);
/* A forked child: the parent's re-entered sends are not the child's. */
void shim_reentry_reset(void);

/* ---- report.c ------------------------------------------------------------------------------- */

void shim_report_write(void);
/* Keep the counts of a socket whose number now names another (registry lock held). */
void shim_report_retire_row(const struct shim_sockrow *r);
/* ... of all of t's sockets (thread exit); NULL: forget them all (forked child). */
void shim_report_retire_rows(struct shim_thread *t);

/* ---- bypass.c ------------------------------------------------------------------------------ */

/* The process's AF_XDP port (batch mode with an interface; bypass mode), made by the first send
 * that needs it; NULL when there is none (said once, on stderr). */
struct ms__xport *shim_xport(void);
/* After a send through port p that made no frame (fb: the fallback counters it added to,
 * other0: fb[MS__XDP_OTHER] before it): did taking its queue (which its first frame does)
 * fail? Then what it skipped for that counts unavailable, the failure is said once, and the
 * port is no more. */
void shim_xport_check(struct ms__xport *p, uint64_t *fb, uint64_t other0);
/* For the report: "none" (no queue taken: no datagram went as a frame), "taken", "failed". */
const char *shim_xport_queue_state(void);
/* close, dup2, close_range: is fd the port's own? (Then the program never had it.) */
bool shim_xport_owns(int fd);
/* The port's interface ("" until the first send that needs it names one). */
const char *shim_xport_ifname(void);
/* The port's descriptors, ascending, into fds[3]; returns how many (0: no port). */
int shim_xport_fds(int fds[3]);
/* Bypass mode: the network may have changed (ms__xport_recheck); a no-op without a port. */
void shim_xport_recheck(bool now);
/* The program put another file on one of the port's numbers: it gives them up. */
void shim_xport_lose(void);
/* In a forked child: the parent's port is not the child's (its sends go by the kernel's path,
 * counted unavailable); the child's copies of its descriptors are closed. */
void shim_xport_after_fork_child(void);
/* Bypass mode: send s now as an AF_XDP frame if it can go as one. true: sent, *r is the length;
 * false: the caller sends it by the kernel's path (the reason is counted). Guard set. */
bool shim_bypass_send(struct shim_thread *t, struct shim_send *s, struct shim_fd *e,
		      uint32_t info, uint64_t *syscalls, ssize_t *r);
/* Bypass mode's sendmmsg: what the kernel's sendmmsg would return, errno set on -1. */
int shim_bypass_mmsg(struct shim_thread *t, int fd, struct shim_fd *e, uint32_t info,
		     struct mmsghdr *msgs, unsigned n, int flags, uint64_t *syscalls);

/* ---- live.c -------------------------------------------------------------------------------- */

/* Set once at init when MULTISEND_STATS_SHM names a file; cleared when it cannot be used. */
extern bool shim_live_enabled;
void shim_live_setup(void);
/* Every live_every calls: look at the clock, publish when due (no lock waited for, no
 * system call but the first publication's, which creates the file). Keeps errno. */
void shim_live_tick(struct shim_thread *t);
/* One send-family call made by t (guard set): the cheap part of the check. */
static inline void shim_live_count(struct shim_thread *t)
{
	if (unlikely(__atomic_load_n(&shim_live_enabled, __ATOMIC_RELAXED)) &&
	    ++t->live_tick >= t->live_every)
		shim_live_tick(t);
}
/* Any other intercepted call by a thread that has sent (guard set): a thread about to wait
 * publishes what it sent since its last publication, if that was PERIOD_NS ago, so that a
 * burst's end does not wait for the next burst. One look at the coarse clock. */
void shim_live_idle(struct shim_thread *t);
/* Thread exit (its own thread, its batch flushed): its totals move to the retired ones. */
void shim_live_retire(struct shim_thread *t);
/* Process exit or exec: publish the final totals and close the slot. may_wait: false when
 * called from a signal handler that may have interrupted a publication on this thread.
 * reopen: a failed exec continues, and publishes again in a fresh file. */
void shim_live_final(bool may_wait, bool reopen);
/* In a forked child: the parent's slot is not ours; start over, as the counters do. */
void shim_live_after_fork_child(void);

/* ---- errfd.c: is descriptor 2 still the process's stderr? ----------------------------------- */

/* True while descriptor 2 is open and is the file it was when the shim was loaded (or the one
 * the program last dup2'd or dup3'd onto it). The report and shim_warn write to 2 only then. */
bool shim_stderr_ok(void);
/* The close wrapper, before closing 2; the dup2/dup3 wrappers, after one onto 2 succeeded. */
void shim_stderr_closed(void);
void shim_stderr_replaced(void);
static inline void shim_stderr_close(int fd)
{
	if (unlikely(fd == 2))
		shim_stderr_closed();
}
static inline void shim_stderr_dup(int to, int r)
{
	if (unlikely(to == 2) && r >= 0)
		shim_stderr_replaced();
}

/* ---- small helpers -------------------------------------------------------------------------- */

uint64_t shim_now_ns(void);
/* A one-line message to stderr, with the real write (no stdio: it may be locked). */
void shim_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
