/* SPDX-License-Identifier: MIT */
/*
 * Batch mode: sends the shim can take are copied into a per-thread batch and the program gets
 * its byte count at once; the batch goes out as one sendmmsg per socket.
 *
 * What may be batched: sendto/send/sendmsg on a blocking UDP socket (fdtab.c says which), with
 * no flags (MSG_NOSIGNAL, meaningless for UDP, is allowed), no control data, a destination the
 * kernel takes without a route lookup deciding the outcome (family, length, port; not the
 * limited broadcast address, not a v4-mapped, scoped or flow-labelled IPv6 address) and a size
 * well inside the kernel's limits. Everything else passes through, after this thread's batch
 * (and any other thread's data for the same socket) has gone out, so the kernel sees the sends
 * in the order the program made them.
 *
 * How it goes out: directly through the core's system-call seam (ms__sys.sendmmsg, pointed at
 * the real sendmmsg), with the rule the core's sendmmsg backend follows: after a partial
 * return, resume at the first unsent message; a failure is recorded for that message alone,
 * so nothing is sent twice and nothing is skipped. The core's groups are not used: they are
 * built for long-lived destination sets (adding one costs two getsockopt calls) and ms_send
 * sends one payload to every member, whereas a batch holds whatever the program sent,
 * different payloads included, to destinations it names call by call.
 *
 * Order: messages go out in the order the thread sent them, each run of consecutive messages
 * on one socket as one sendmmsg. A run of one message is sent with sendto, which costs the
 * kernel less than a sendmmsg of one.
 *
 * Locking: each batch has a mutex. The owner takes it to append and flush; another thread
 * takes it only to flush (it is about to use a socket the batch has data for, or it is the
 * age flusher, or the process is exiting or exec'ing). Nobody holds two batch locks at once,
 * and the registry lock is only ever taken before a batch lock, never after.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71
#endif
#include <unistd.h>

#include "shim.h"
#include "sys.h"
#include "mmsg.h"

/* ---- destinations --------------------------------------------------------------------------- */

bool shim_dest_ok(uint32_t info, const struct sockaddr *addr, socklen_t alen)
{
	if (!addr)
		return (info & FD_CONNECTED) != 0; /* else EDESTADDRREQ: let the kernel say so */
	if (alen > sizeof(struct sockaddr_storage)) /* EINVAL */
		return false;
	if (!(info & FD_V6)) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
		/* EINVAL (short, port 0), EAFNOSUPPORT, EACCES without SO_BROADCAST */
		return alen >= sizeof(*in) && in->sin_family == AF_INET && in->sin_port != 0 &&
		       in->sin_addr.s_addr != htonl(INADDR_BROADCAST);
	}
	const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
	if (alen < 24 /* SIN6_LEN_RFC2133 */ || in6->sin6_family != AF_INET6)
		return false;
	return in6->sin6_port != 0 && !in6->sin6_flowinfo &&
	       !IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && !IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr) &&
	       !IN6_IS_ADDR_MC_LINKLOCAL(&in6->sin6_addr) &&
	       !IN6_IS_ADDR_MC_NODELOCAL(&in6->sin6_addr) &&
	       !(alen >= sizeof(*in6) && in6->sin6_scope_id);
}

void shim_dest_make(struct shim_dest *d, int fd, uint32_t info, const struct sockaddr *addr,
		    socklen_t alen)
{
	/* Normalised (padding cleared, scope and flow label known to be zero), and only what
	 * the kernel reads, so that the message header is the same for equal destinations. */
	d->fd = fd;
	if (!addr) {
		d->alen = 0;
	} else if (!(info & FD_V6)) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
		d->a.in = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = in->sin_port,
						.sin_addr = in->sin_addr };
		d->alen = sizeof(d->a.in);
	} else {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
		d->a.in6 = (struct sockaddr_in6){ .sin6_family = AF_INET6,
						  .sin6_port = in6->sin6_port,
						  .sin6_addr = in6->sin6_addr };
		d->alen = sizeof(d->a.in6);
	}
	(void)alen;
}

uint64_t shim_dest_key(int fd, const struct sockaddr *addr, socklen_t alen)
{
	uint64_t k = (uint64_t)(uint16_t)fd << 48;

	if (!addr || alen < sizeof(sa_family_t) || shim_bad_ptr(addr, alen))
		return k | 0xffffffffffffu; /* the connected peer */
	if (addr->sa_family == AF_INET && alen >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
		return k | (uint64_t)in->sin_port << 32 | in->sin_addr.s_addr;
	}
	uint64_t h = 0xcbf29ce484222325u;
	if (addr->sa_family == AF_INET6 && alen >= 24) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
		uint64_t a, b;
		memcpy(&a, &in6->sin6_addr, 8);
		memcpy(&b, (const uint8_t *)&in6->sin6_addr + 8, 8);
		h = (a * 0x9e3779b97f4a7c15u) ^ b ^ in6->sin6_port;
	} else {
		const uint8_t *p = (const uint8_t *)addr;
		for (socklen_t i = 0; i < alen && i < 128; i++)
			h = (h ^ p[i]) * 0x100000001b3u;
	}
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9u;
	h ^= h >> 32;
	return k ^ (h & 0xffffffffffffu);
}

/* ---- routes --------------------------------------------------------------------------------- */

/*
 * A sendto to an address with no route fails at once (ENETUNREACH, EHOSTUNREACH, EACCES for a
 * prohibit route or a broadcast address without SO_BROADCAST, EINVAL for a blackhole); a
 * batched send would have told the program "sent". So before the first batched send to a
 * destination, the shim asks the kernel the same question with a probe socket made like the
 * program's (family, bound address, device, mark, SO_BROADCAST): a UDP connect() does the
 * route lookup a send does, and sends nothing. A destination that passes is remembered for
 * its socket (fd number and generation); one that fails is never batched, so every send to
 * it gets the kernel's answer itself. A route removed later shows as an error at flush.
 */
#define ROUTE_SLOTS 8192u
#define ROUTE_PROBE 8u
static uint64_t *route_tab;
static pthread_once_t route_once = PTHREAD_ONCE_INIT;

static void route_map(void)
{
	void *m = mmap(NULL, ROUTE_SLOTS * sizeof(uint64_t), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m != MAP_FAILED)
		route_tab = m;
}

static int copy_int_opt(int from, int to, int level, int opt)
{
	int v = 0;
	socklen_t l = sizeof(v);
	if (getsockopt(from, level, opt, &v, &l) < 0)
		return -1;
	return v ? setsockopt(to, level, opt, &v, sizeof(v)) : 0;
}

/* 0: the kernel has a route for a send from fd to addr; else the errno a send would get (or
 * -1: cannot tell, do not batch). */
static int route_probe(int fd, uint32_t info, const struct sockaddr *addr, socklen_t alen)
{
	int fam = info & FD_V6 ? AF_INET6 : AF_INET;
	int p = socket(fam, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP);
	int err = -1;

	if (p < 0)
		return -1;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (copy_int_opt(fd, p, SOL_SOCKET, SO_BROADCAST) < 0 ||
	    copy_int_opt(fd, p, SOL_SOCKET, SO_MARK) < 0 ||
	    copy_int_opt(fd, p, SOL_SOCKET, SO_BINDTOIFINDEX) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
		goto out;
	/* A socket bound to one of the host's addresses routes from it. */
	if (fam == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;
		in->sin_port = 0;
		if (in->sin_addr.s_addr != htonl(INADDR_ANY) &&
		    bind(p, (struct sockaddr *)in, sizeof(*in)) < 0)
			goto out;
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
		in6->sin6_port = 0;
		if (!IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr) &&
		    bind(p, (struct sockaddr *)in6, sizeof(*in6)) < 0)
			goto out;
	}
	/* The probe lives in the calling thread's network namespace; the program's socket may
	 * live in another (made before a setns): then the probe says nothing about it. */
	uint64_t c1 = 0, c2 = 0;
	socklen_t cl1 = sizeof(c1), cl2 = sizeof(c2);
	if (getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &c1, &cl1) == 0 &&
	    (getsockopt(p, SOL_SOCKET, SO_NETNS_COOKIE, &c2, &cl2) < 0 || c1 != c2))
		goto out;
	err = connect(p, addr, alen) == 0 ? 0 : errno;
out:
	close(p);
	return err;
}

bool shim_route_ok(int fd, struct shim_fd *e, uint32_t info, uint64_t key,
		   const struct sockaddr *addr, socklen_t alen)
{
	uint64_t gen = __atomic_load_n(&e->gen, __ATOMIC_RELAXED);
	uint64_t h = (key ^ (gen * 0x9e3779b97f4a7c15u)) * 0xbf58476d1ce4e5b9u;
	h ^= h >> 31;
	h |= 1; /* 0 is an empty slot */

	pthread_once(&route_once, route_map);
	if (!route_tab)
		return false;
	uint32_t i0 = (uint32_t)(h >> 40) % ROUTE_SLOTS;
	for (uint32_t k = 0; k < ROUTE_PROBE; k++)
		if (__atomic_load_n(&route_tab[(i0 + k) % ROUTE_SLOTS], __ATOMIC_RELAXED) == h)
			return true;
	int saved = errno;
	int err = route_probe(fd, info, addr, alen);
	errno = saved;
	if (err)
		return false;
	uint32_t slot = i0;
	for (uint32_t k = 0; k < ROUTE_PROBE; k++) {
		if (!__atomic_load_n(&route_tab[(i0 + k) % ROUTE_SLOTS], __ATOMIC_RELAXED)) {
			slot = (i0 + k) % ROUTE_SLOTS;
			break;
		}
	}
	__atomic_store_n(&route_tab[slot], h, __ATOMIC_RELAXED);
	return true;
}

/* ---- the planner ---------------------------------------------------------------------------- */

void shim_plan_reset(struct shim_plan *p)
{
	/* The predictor's state survives a flush: it describes the program, not the batch. */
	p->n = 0;
	p->nfds = 0;
}

bool shim_plan_needs_room(const struct shim_plan *p, int fd)
{
	if (p->nfds < SHIM_BATCH_FDS)
		return false;
	for (uint32_t k = 0; k < p->nfds; k++)
		if (p->fds[k] == fd)
			return false;
	return true;
}

/* ---- the age-bound flusher ------------------------------------------------------------------ */

/*
 * One thread per process, started when the first batch is left pending after a send (never
 * in a constructor, never for a program whose sends all go straight out). It sleeps until the
 * oldest pending batch is delay_us old, flushes what is due, and sleeps without a deadline
 * when nothing is pending, so it makes no system call while the program's batches are all
 * flushed by the program's own calls. It runs at the program's priority: at SCHED_IDLE a
 * loaded machine starved it and batches waited hundreds of milliseconds past the bound.
 *
 * It can be stopped and joined (shim_flusher_quiesce) before a call that needs the process to
 * be single-threaded (unshare or setns of a user namespace); the next batch starts it again.
 */
static _Atomic int flusher_started; /* 0: no thread; 1: running (or starting) */
static _Atomic int flusher_word;    /* futex: bumped to wake the flusher */
static _Atomic bool flusher_idle;   /* asleep with no deadline: a new batch must wake it */
static _Atomic bool flusher_stop;
static pthread_t flusher_thread;
static pthread_mutex_t flusher_ctl = PTHREAD_MUTEX_INITIALIZER; /* start and stop */

static void futex_wake(_Atomic int *w)
{
	syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void futex_wait(_Atomic int *w, int val, const struct timespec *rel)
{
	syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, val, rel, NULL, 0);
}

/* The oldest pending batch's start (0: none). Registry lock held. */
static uint64_t oldest_pending(void)
{
	uint64_t oldest = 0;
	for (struct shim_thread *t = shim_registry; t; t = t->next) {
		if (!t->in_use || !t->b)
			continue;
		uint64_t f = __atomic_load_n(&t->b->first_ns, __ATOMIC_RELAXED);
		if (f && (!oldest || f < oldest))
			oldest = f;
	}
	return oldest;
}

static void *flusher_main(void *arg)
{
	(void)arg;
	shim_guard = 1; /* whatever this thread calls goes straight through */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0); /* wake at the deadline, not 50 us after */
	/* Flushed at three quarters of the bound, so that waking up late (a timer's slack, a
	 * busy CPU) still keeps a batch within it on a machine with a free CPU. */
	uint64_t delay = (uint64_t)shim_cfg.delay_us * 750u;

	while (!atomic_load(&flusher_stop)) {
		int word = atomic_load(&flusher_word);
		uint64_t now = shim_now_ns();

		pthread_mutex_lock(&shim_registry_lock);
		for (struct shim_thread *t = shim_registry; t; t = t->next) {
			if (!t->in_use || !t->b)
				continue;
			uint64_t first = __atomic_load_n(&t->b->first_ns, __ATOMIC_RELAXED);
			/* A batch being appended to or flushed is its owner's business now. */
			if (first && now - first >= delay &&
			    pthread_mutex_trylock(&t->b->lock) == 0) {
				first = t->b->first_ns;
				if (first && now - first >= delay)
					shim_flush_locked(t, FLUSH_AGE);
				pthread_mutex_unlock(&t->b->lock);
			}
		}
		uint64_t oldest = oldest_pending();
		if (!oldest) {
			/* Either a thread starting a batch sees idle and wakes us, or we see its
			 * batch here (its first_ns store, fence, idle load pairs with this). */
			atomic_store(&flusher_idle, true);
			atomic_thread_fence(memory_order_seq_cst);
			oldest = oldest_pending();
			if (oldest)
				atomic_store(&flusher_idle, false);
		}
		pthread_mutex_unlock(&shim_registry_lock);

		if (!oldest) {
			/* A batch started after the registry was read has bumped the word. */
			futex_wait(&flusher_word, word, NULL);
			atomic_store(&flusher_idle, false);
			continue;
		}
		now = shim_now_ns();
		uint64_t due = oldest + delay, wait = due > now ? due - now : 0;
		if (wait) {
			struct timespec ts = { .tv_sec = (time_t)(wait / 1000000000u),
					       .tv_nsec = (long)(wait % 1000000000u) };
			futex_wait(&flusher_word, word, &ts);
		}
	}
	return NULL;
}

static void flusher_start(void)
{
	if (atomic_load_explicit(&flusher_started, memory_order_relaxed))
		return;
	pthread_mutex_lock(&flusher_ctl);
	if (!atomic_load(&flusher_started)) {
		pthread_attr_t attr;
		sigset_t all, old;

		/* No signal of the program's is ever delivered to the shim's thread, except the
		 * ones its own faults raise (blocked, a fault kills without any handler: the
		 * SIGBUS of a truncated live-counter file is one, lib/obs/shm.c). */
		sigfillset(&all);
		sigdelset(&all, SIGBUS);
		sigdelset(&all, SIGSEGV);
		sigdelset(&all, SIGFPE);
		sigdelset(&all, SIGILL);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		pthread_attr_init(&attr);
		pthread_attr_setstacksize(&attr, 64 * 1024);
		atomic_store(&flusher_stop, false);
		atomic_store(&flusher_idle, false);
		if (pthread_create(&flusher_thread, &attr, flusher_main, NULL) == 0)
			atomic_store(&flusher_started, 1);
		else
			shim_warn("cannot start the batch flusher thread: batches wait for the next "
				  "call");
		pthread_attr_destroy(&attr);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	pthread_mutex_unlock(&flusher_ctl);
}

/* A batch just took its first message: make sure the flusher is watching. */
static void flusher_poke(void)
{
	atomic_thread_fence(memory_order_seq_cst); /* first_ns is stored before idle is read */
	if (atomic_load_explicit(&flusher_idle, memory_order_relaxed) &&
	    atomic_exchange(&flusher_idle, false)) {
		atomic_fetch_add(&flusher_word, 1);
		futex_wake(&flusher_word);
	}
}

bool shim_flusher_quiesce(void)
{
	bool stopped = false;

	pthread_mutex_lock(&flusher_ctl);
	if (atomic_load(&flusher_started)) {
		atomic_store(&flusher_stop, true);
		atomic_fetch_add(&flusher_word, 1);
		futex_wake(&flusher_word);
		pthread_join(flusher_thread, NULL);
		atomic_store(&flusher_started, 0);
		stopped = true;
	}
	pthread_mutex_unlock(&flusher_ctl);
	return stopped;
}

void shim_flusher_resume(void)
{
	pthread_mutex_lock(&shim_registry_lock);
	bool any = oldest_pending() != 0;
	pthread_mutex_unlock(&shim_registry_lock);
	if (any)
		flusher_start();
}

void shim_batch_after_fork_child(void)
{
	/* The flusher thread does not exist in the child; the first batch starts another. */
	atomic_store(&flusher_started, 0);
	atomic_store(&flusher_idle, false);
	atomic_store(&flusher_stop, false);
	pthread_mutex_init(&flusher_ctl, NULL);
}

/* ---- flushing ------------------------------------------------------------------------------- */

static void drain_sigq_locked(struct shim_thread *t);

static bool sigq_empty(const struct shim_batch *b)
{
	return atomic_load_explicit(&b->sigq_head, memory_order_relaxed) ==
		       atomic_load_explicit(&b->sigq_tail, memory_order_acquire) &&
	       atomic_load_explicit(&b->ovf_out, memory_order_relaxed) ==
		       atomic_load_explicit(&b->ovf_in, memory_order_acquire);
}

/* The batch is empty: clear its age stamp, unless a handler queued something meanwhile (that
 * must reach the age flusher). */
static void first_ns_settle(struct shim_batch *b)
{
	__atomic_store_n(&b->first_ns, 0, __ATOMIC_SEQ_CST);
	if (unlikely(!sigq_empty(b)))
		__atomic_store_n(&b->first_ns, shim_now_ns(), __ATOMIC_RELAXED);
}

static void flush_error(struct shim_thread *t, int fd, int err)
{
	shim_count_flush_error(t, fd, err);
	if (shim_cfg.defer_errors) {
		struct shim_fd *e = shim_fd_get(fd);
		int zero = 0;
		if (e)
			atomic_compare_exchange_strong(&e->deferred, &zero, err);
	}
}

static void count_flush_syscalls(struct shim_thread *t, int fd, uint64_t n)
{
	struct shim_sockrow *r =
		(unsigned)fd < SHIM_SOCK_SLOTS ? &t->rows[fd] : &t->rows[SHIM_SOCK_SLOTS];
	r->c.fsyscalls += n;
}

/* A socket the shim batched as blocking was made non-blocking behind its back (another
 * process sharing the file): the program's send would have waited for room, so the flush
 * does. False if the socket cannot be waited for. */
static bool wait_room(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	int r;
	do
		r = shim_real.poll ? shim_real.poll(&pfd, 1, -1) : -1;
	while (r < 0 && errno == EINTR);
	return r > 0 && !(pfd.revents & (POLLERR | POLLNVAL));
}

/* Send cnt prepared messages of one socket, in order, each exactly once (lib/mmsg.h), by the
 * kernel's path. */
static void send_kernel(struct shim_thread *t, int fd, struct mmsghdr *mm, uint32_t cnt)
{
	if (cnt == 1) {
		const struct msghdr *h = &mm[0].msg_hdr;
		ssize_t r;
		for (;;) {
			count_flush_syscalls(t, fd, 1);
			t->fc.single_sends++;
			r = ms__sys.sendto(fd, h->msg_iov[0].iov_base, h->msg_iov[0].iov_len, 0,
					   h->msg_name, h->msg_namelen);
			if (r >= 0 || (errno != EINTR && (errno != EAGAIN || !wait_room(fd))))
				break;
		}
		if (r < 0)
			flush_error(t, fd, errno);
		return;
	}
	uint64_t calls = 0;
	for (uint32_t off = 0; off < cnt;) {
		calls++;
		int r = ms__sendmmsg_step(fd, mm + off, cnt - off, 0);
		if (r > 0) {
			off += (uint32_t)r;
		} else if (r != -EINTR && (r != -EAGAIN || !wait_room(fd))) {
			flush_error(t, fd, -r);
			off++;
		}
	}
	count_flush_syscalls(t, fd, calls);
	t->fc.sendmmsg_calls += calls;
}


/* Send a run of one socket's messages: as AF_XDP frames where the port carries them (kernel
 * bypass), the rest, in order, by the kernel's path. */
static void send_group(struct shim_thread *t, int fd, struct mmsghdr *mm, uint32_t cnt)
{
#ifdef MS_HAVE_XDP
	struct ms__xport *xp = shim_xport();
	if (xp) {
		const struct shim_fd *e = shim_fd_peek(fd);
		const uint32_t gen = e ? __atomic_load_n(&e->gen, __ATOMIC_RELAXED) : 0;
		for (uint32_t off = 0; off < cnt;) {
			struct ms__xport_counts xc = { 0 };
			uint32_t skip = 0;
			const uint64_t other0 = t->fc.xdp_fallback[MS__XDP_OTHER];
			uint32_t k = ms__xport_send(xp, fd, gen, mm + off, cnt - off, 0, &skip,
						    t->fc.xdp_fallback, &xc);
			if (unlikely(!k))
				shim_xport_check(xp, t->fc.xdp_fallback, other0);
			t->fc.xdp_frames += xc.frames;
			t->fc.xdp_kicks += xc.kicks;
			count_flush_syscalls(t, fd, xc.syscalls);
			off += k;
			if (skip)
				send_kernel(t, fd, mm + off, skip);
			off += skip;
		}
		return;
	}
#endif
	send_kernel(t, fd, mm, cnt);
}

void shim_flush_locked(struct shim_thread *t, enum shim_reason why)
{
	struct shim_batch *b = t->b;
	struct shim_plan *p = &b->plan;
	int cancel;

	if (b->flushing)
		return;
	if (unlikely(!sigq_empty(b)) && !b->draining)
		drain_sigq_locked(t);
	if (!p->n) {
		if (!b->draining)
			first_ns_settle(b);
		return;
	}
	b->flushing = true;
	/* Cancellation inside sendmmsg would leave the lock held for ever. */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	int saved = errno;

	/* In the order the program sent: each run of consecutive messages on one socket is one
	 * sendmmsg. (Grouping by socket instead reordered a, b, a sent on two sockets to the
	 * same destination.) */
	for (uint32_t i = 0; i < p->n; i++) {
		const struct shim_msg *m = &t->msgs[i];
		t->iov[i] = (struct iovec){ .iov_base = t->arena + m->off, .iov_len = m->len };
		t->mm[i].msg_hdr = (struct msghdr){
			.msg_name = m->d.alen ? (void *)&m->d.a : NULL,
			.msg_namelen = m->d.alen,
			.msg_iov = &t->iov[i],
			.msg_iovlen = 1,
		};
		t->mm[i].msg_len = 0;
	}
	for (uint32_t i = 0, run; i < p->n; i += run) {
		int fd = t->msgs[i].d.fd;
		for (run = 1; i + run < p->n && t->msgs[i + run].d.fd == fd; run++)
			;
		send_group(t, fd, t->mm + i, run);
	}
	for (uint32_t k = 0; k < p->nfds; k++) {
		struct shim_fd *e = shim_fd_get(p->fds[k]);
		struct shim_thread *me = t;
		if (e)
			atomic_compare_exchange_strong(&e->pending, &me, NULL);
	}
	t->flushes[why]++;
	shim_plan_reset(p);
	b->arena_used = 0;
	b->last_valid = false;
	first_ns_settle(b);
	errno = saved;
	pthread_setcancelstate(cancel, NULL);
	b->flushing = false;
}

void shim_flush_thread(struct shim_thread *t, enum shim_reason why)
{
	if (!t->b || (!__atomic_load_n(&t->b->first_ns, __ATOMIC_RELAXED) && sigq_empty(t->b)))
		return;
	pthread_mutex_lock(&t->b->lock);
	shim_flush_locked(t, why);
	pthread_mutex_unlock(&t->b->lock);
}

void shim_flush_own(enum shim_reason why)
{
	struct shim_thread *t = shim_self;
	if (t)
		shim_flush_thread(t, why);
}

void shim_flush_fd(int fd, enum shim_reason why)
{
	shim_flush_own(why);
	struct shim_fd *e = shim_fd_peek(fd);
	struct shim_thread *p = e ? atomic_load_explicit(&e->pending, memory_order_acquire) : NULL;
	if (p && p != shim_self)
		shim_flush_thread(p, FLUSH_OTHER_THREAD);
}

/* ---- taking a send -------------------------------------------------------------------------- */

static bool payload_eq(const uint8_t *buf, const struct iovec *iov, int iovcnt)
{
	for (int i = 0; i < iovcnt; i++) {
		if (!shim_bytes_eq(buf, iov[i].iov_base, iov[i].iov_len))
			return false;
		buf += iov[i].iov_len;
	}
	return true;
}

static void payload_copy(uint8_t *buf, const struct iovec *iov, int iovcnt)
{
	for (int i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len)
			memcpy(buf, iov[i].iov_base, iov[i].iov_len);
		buf += iov[i].iov_len;
	}
}

bool shim_batchable(const struct shim_send *s, uint32_t info, bool dest_ok)
{
	if (!s->loaded || !(info & FD_BATCHABLE) || (s->flags & ~MSG_NOSIGNAL) || s->control ||
	    s->len > SHIM_PAYLOAD_MAX || !dest_ok || s->call == CALL_SENDMMSG)
		return false;
	return s->readable; /* else EFAULT is the kernel's to give */
}

/*
 * Append one message to t's batch (lock held): consecutive identical payloads share one copy.
 * Returns true when the batch was flushed because of it (full, or the end of a fan-out).
 */
static bool append_locked(struct shim_thread *t, const struct shim_dest *d, uint64_t key,
			  const struct iovec *iov, int iovcnt, size_t len, bool *started)
{
	struct shim_batch *b = t->b;
	struct shim_plan *p = &b->plan;

	if (shim_plan_needs_room(p, d->fd))
		shim_flush_locked(t, FLUSH_SOCKETS);
	bool same = b->last_valid && b->last_len == len &&
		    payload_eq(t->arena + b->last_off, iov, iovcnt);
	if (!same) {
		if (b->arena_used + len > SHIM_ARENA)
			shim_flush_locked(t, FLUSH_ARENA);
		payload_copy(t->arena + b->arena_used, iov, iovcnt);
		b->last_off = b->arena_used;
		b->last_len = (uint32_t)len;
		b->last_valid = true;
		b->arena_used += (uint32_t)len;
	}
	struct shim_msg *m = &t->msgs[p->n];
	m->d = *d;
	m->off = b->last_off;
	m->len = b->last_len;
	if (p->n == 0) {
		__atomic_store_n(&b->first_ns, shim_now_ns(), __ATOMIC_RELAXED);
		*started = true;
	}
	enum shim_reason why = FLUSH_FULL;
	if (shim_plan_take(p, d->fd, key, shim_cfg.batch_max, &why)) {
		shim_flush_locked(t, why);
		return true;
	}
	return false;
}

/* The signal queue's next message (ring first, then the overflow chain), or NULL. */
static const struct shim_sigmsg *sigq_peek(struct shim_thread *t, bool *from_ring)
{
	struct shim_batch *b = t->b;
	uint32_t head = atomic_load_explicit(&b->sigq_head, memory_order_relaxed);

	if (head != atomic_load_explicit(&b->sigq_tail, memory_order_acquire)) {
		*from_ring = true;
		return &t->sigq[head % SHIM_SIGQ];
	}
	*from_ring = false;
	for (;;) {
		struct shim_sigseg *seg = atomic_load_explicit(&b->ovf_head, memory_order_acquire);
		if (!seg)
			return NULL;
		if (b->ovf_pos < atomic_load_explicit(&seg->count, memory_order_acquire))
			return &seg->m[b->ovf_pos];
		struct shim_sigseg *next = atomic_load_explicit(&seg->next, memory_order_acquire);
		if (b->ovf_pos < SHIM_SIGSEG || !next)
			return NULL;
		/* The producer linked the next one, so it is done with this one. */
		atomic_store_explicit(&b->ovf_head, next, memory_order_relaxed);
		b->ovf_pos = 0;
		munmap(seg, sizeof(*seg));
	}
}

static void sigq_pop(struct shim_batch *b, bool from_ring)
{
	if (from_ring) {
		uint32_t head = atomic_load_explicit(&b->sigq_head, memory_order_relaxed);
		atomic_store_explicit(&b->sigq_head, head + 1, memory_order_release);
	} else {
		b->ovf_pos++;
		atomic_fetch_add_explicit(&b->ovf_out, 1, memory_order_release);
	}
}

/*
 * Move what signal handlers queued into the batch, in their order (lock held). An append can
 * flush the batch; that flush does not come back here (b->draining), so this loop is the
 * only one taking messages out and the stack stays flat however long the queue is.
 */
static void drain_sigq_locked(struct shim_thread *t)
{
	struct shim_batch *b = t->b;
	const struct shim_sigmsg *q;
	bool from_ring, started = false;

	b->draining = true;
	while ((q = sigq_peek(t, &from_ring))) {
		/* Marked pending before it leaves the queue: a handler that looks in between
		 * must still see that it has something to queue behind. */
		struct shim_fd *e = shim_fd_get(q->d.fd);
		struct shim_thread *none = NULL;
		if (e)
			atomic_compare_exchange_strong(&e->pending, &none, t);
		/* Appended straight from its slot, which the producer cannot reuse before the
		 * pop below. */
		struct iovec iov = { .iov_base = (void *)q->data, .iov_len = q->len };
		shim_plan_observe(&b->plan, q->key);
		append_locked(t, &q->d, q->key, &iov, 1, q->len, &started);
		sigq_pop(b, from_ring);
	}
	b->draining = false;
}

_Atomic uint64_t shim_sigoverflow, shim_sigunordered;

/* A slot for the producer: the ring's next one, or the overflow chain's (mapping a segment
 * when needed). *seg_out is the segment to publish, *fresh whether it is new. NULL: no
 * memory. */
static struct shim_sigmsg *sigq_slot(struct shim_batch *b, struct shim_thread *t,
				     struct shim_sigseg **seg_out, bool *fresh)
{
	struct shim_sigseg *seg = b->ovf_tail;
	bool chain_empty = atomic_load_explicit(&b->ovf_in, memory_order_relaxed) ==
			   atomic_load_explicit(&b->ovf_out, memory_order_acquire);
	uint32_t tail = atomic_load_explicit(&b->sigq_tail, memory_order_relaxed);

	*seg_out = NULL;
	*fresh = false;
	if (chain_empty &&
	    tail - atomic_load_explicit(&b->sigq_head, memory_order_acquire) < SHIM_SIGQ)
		return &t->sigq[tail % SHIM_SIGQ];
	if (seg) {
		uint32_t n = atomic_load_explicit(&seg->count, memory_order_relaxed);
		if (n < SHIM_SIGSEG) {
			*seg_out = seg;
			return &seg->m[n];
		}
	}
	void *m = mmap(NULL, sizeof(struct shim_sigseg), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	*seg_out = m; /* zeroed: no next, no messages */
	*fresh = true;
	return &(*seg_out)->m[0];
}

int shim_batch_signal_send(struct shim_send *s)
{
	struct shim_thread *t = shim_self;
	struct shim_dest d;

	if (!t || !t->b || shim_cfg.mode != SHIM_BATCH || t->sigq_busy ||
	    atomic_load_explicit(&shim_exiting, memory_order_relaxed) ||
	    s->call > CALL_SENDMSG || (s->call != CALL_SENDMSG && s->len > SHIM_SIGQ_PAYLOAD))
		return 0;
	struct shim_fd *e = shim_fd_peek(s->fd);
	uint32_t info = e ? __atomic_load_n(&e->info, __ATOMIC_RELAXED) : 0;
	struct shim_batch *b = t->b;
	/* Nothing of this thread's to overtake: straight through keeps the order. */
	if (!e || (atomic_load_explicit(&e->pending, memory_order_relaxed) != t && sigq_empty(b)))
		return 0;
	/* Read only once probed (a system call: async-signal-safe), so that a bad pointer
	 * goes to the kernel, which answers EFAULT. Never by the touch (fault.c): a handler's
	 * mask may block SIGSEGV, and a fault then kills. */
	const unsigned char fm = shim_fmask;
	shim_fmask = SHIM_FMASK_HANDLER;
	const bool loaded = shim_send_load(s, -1);
	shim_fmask = fm;
	if (!(info & FD_BATCHABLE) || !loaded || s->len > SHIM_SIGQ_PAYLOAD ||
	    !shim_batchable(s, info, shim_dest_ok(info, s->addr, s->alen)))
		return 0;
	shim_dest_make(&d, s->fd, info, s->addr, s->alen);
	t->sigq_busy = 1;
	atomic_signal_fence(memory_order_seq_cst);
	int saved = errno;
	struct shim_sigseg *seg;
	bool fresh;
	struct shim_sigmsg *q = sigq_slot(b, t, &seg, &fresh);
	if (q) {
		q->d = d;
		q->key = shim_dest_key(s->fd, s->addr, s->alen);
		q->len = (uint32_t)s->len;
		payload_copy(q->data, s->iov, s->iovcnt);
		if (!seg) {
			uint32_t tail = atomic_load_explicit(&b->sigq_tail, memory_order_relaxed);
			atomic_store_explicit(&b->sigq_tail, tail + 1, memory_order_release);
		} else {
			uint32_t n = atomic_load_explicit(&seg->count, memory_order_relaxed);
			atomic_store_explicit(&seg->count, n + 1, memory_order_release);
			if (fresh) {
				if (b->ovf_tail)
					atomic_store_explicit(&b->ovf_tail->next, seg,
							      memory_order_release);
				else
					atomic_store_explicit(&b->ovf_head, seg,
							      memory_order_release);
				b->ovf_tail = seg;
			}
			atomic_fetch_add_explicit(&b->ovf_in, 1, memory_order_release);
			atomic_fetch_add_explicit(&shim_sigoverflow, 1, memory_order_relaxed);
		}
		/* Published first, then the age stamp: a flush that clears the stamp either sees
		 * this message and stamps again, or cleared it before this sets it. */
		uint64_t zero = 0;
		__atomic_compare_exchange_n(&b->first_ns, &zero, shim_now_ns(), false,
					    __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
		flusher_poke();
	} else {
		/* No memory to queue it: it goes now, perhaps ahead of earlier data (counted). */
		atomic_fetch_add_explicit(&shim_sigunordered, 1, memory_order_relaxed);
	}
	errno = saved;
	atomic_signal_fence(memory_order_seq_cst);
	t->sigq_busy = 0;
	return q != NULL;
}

int shim_batch_deferred(struct shim_fd *e)
{
	if (shim_cfg.defer_errors && atomic_load_explicit(&e->deferred, memory_order_relaxed))
		return atomic_exchange(&e->deferred, 0);
	return 0;
}

bool shim_batch_surely_passes(const struct shim_thread *t)
{
	/* What shim_batch_send decides after the predictor has seen this send's destination:
	 * with fewer than two messages in the cycle so far, no destination can make the
	 * predicted fan-out two or longer (shim_plan_observe). */
	if (!shim_cfg.fanout_end)
		return false;
	if (!t->b)
		return true;
	const struct shim_plan *p = &t->b->plan;
	return p->pred_len < 2 && p->cycle_len < 2 &&
	       !__atomic_load_n(&t->b->first_ns, __ATOMIC_RELAXED);
}

void shim_batch_observe(struct shim_thread *t, uint64_t key)
{
	if (shim_thread_batch(t))
		shim_plan_observe(&t->b->plan, key);
}

int shim_batch_send(struct shim_thread *t, const struct shim_send *s, struct shim_fd *e,
		    uint32_t info, uint64_t key, bool can, int *err)
{
	(void)err;
	if (!can || !shim_thread_batch(t))
		goto pass;

	struct shim_batch *b = t->b;
	struct shim_plan *p = &b->plan;
	/* Only the owner touches the predictor, so it needs no lock. */
	shim_plan_observe(p, key);
	/* Nothing is held back on a guess: a batch starts only once the program's fan-out
	 * pattern is known (its first destination came round again, after two or more others).
	 * Until then, and for a program that sends to one destination, every send goes straight
	 * out: no copy, no flusher thread, not one system call more than without the shim. */
	if (shim_cfg.fanout_end && p->pred_len < 2 &&
	    !__atomic_load_n(&b->first_ns, __ATOMIC_RELAXED))
		goto pass;
	/* An error a route lookup would give (no route, unreachable, prohibited, a broadcast
	 * address without SO_BROADCAST) must reach the program at call time. */
	if (s->addr && !shim_route_ok(s->fd, e, info, key, s->addr, s->alen))
		goto pass;

	/* Another thread's data for this socket goes first. */
	struct shim_thread *other = atomic_load_explicit(&e->pending, memory_order_acquire);
	if (other && other != t)
		shim_flush_thread(other, FLUSH_OTHER_THREAD);

	bool started = false;

	pthread_mutex_lock(&b->lock);
	if (unlikely(!sigq_empty(b)))
		drain_sigq_locked(t);
	struct shim_dest d;
	shim_dest_make(&d, s->fd, info, s->addr, s->alen);
	bool flushed = append_locked(t, &d, key, s->iov, s->iovcnt, s->len, &started);
	pthread_mutex_unlock(&b->lock);

	if (started && !flushed) {
		flusher_start();
		flusher_poke();
	}
	/* Say who holds data for this socket, so that another thread about to use it flushes
	 * this batch first. Checked after every append that stays pending, not only for a
	 * socket new to the batch: an append can flush the batch before adding its message (no
	 * payload space left), which clears the mark. Two threads batching on one socket take
	 * turns. */
	while (!flushed) {
		struct shim_thread *cur = atomic_load_explicit(&e->pending, memory_order_relaxed);
		if (cur == t)
			break;
		if (!cur) {
			if (atomic_compare_exchange_strong(&e->pending, &cur, t))
				break;
			continue;
		}
		shim_flush_thread(cur, FLUSH_OTHER_THREAD);
		/* cur's batch may have been empty already: then the mark was stale */
		atomic_compare_exchange_strong(&e->pending, &cur, NULL);
	}
	return 1;

pass:
	/* Sent for real: whatever is pending for it, here or in another thread, goes first. */
	shim_flush_fd(s->fd, FLUSH_SEND);
	return 0;
}
