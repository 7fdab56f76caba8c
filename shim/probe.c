/* SPDX-License-Identifier: MIT */
/*
 * The program's memory, read only where the kernel would read it.
 *
 * A send whose buffer, address, message header or iovec array is not readable memory gets
 * EFAULT from the kernel; the shim must never be the one to touch it (it would die of SIGSEGV
 * where the program expects the error). Two ways keep that promise:
 *
 *  - the kernel goes first: a send that is passed through is made before the shim reads
 *    anything of it. When it succeeded, the kernel has read the header, the iovec array, the
 *    address and (when it took every byte) the payload, so they are readable. That costs
 *    nothing, and is what metrics mode (and every pass-through) does.
 *  - a probe: where the shim must read before the kernel does (a send it batches, or sends as
 *    a frame, or a failed send whose payload the counters want), one byte of every page the
 *    kernel would read is read first. Pages are the unit of mapping and protection, so one
 *    readable byte says the page is. A header is probed before it is parsed, its iovec array
 *    before that is, then the payload and the address together. Two ways to read that byte:
 *     - the shim reads it itself, with fault recovery (fault.c: shim_touch, whose fault the
 *       shim's SIGSEGV/SIGBUS handler turns into -EFAULT): no system call. In batch and
 *       bypass modes, wherever shim_fault_usable says it is safe;
 *     - else one process_vm_readv(2) of the process's own memory, for which the kernel
 *       answers EFAULT (or a short count) for a page that is not mapped readable, as its own
 *       copy would, without any signal: at most three calls (one for send, sendto and
 *       write). Kept where the touch cannot be used: inside a signal handler of the
 *       program's and wherever SIGSEGV or SIGBUS is blocked (a fault there kills, whatever
 *       the handler), in metrics mode (a failed send only), once the shim's handler has been
 *       replaced behind its back, and on other processors than x86-64 and aarch64.
 *
 * Lengths are judged as the kernel judges them (lib/iov_iter.c, net/socket.c): at most
 * UIO_MAXIOV segments, no segment longer than SSIZE_MAX (EINVAL), the total capped at
 * MAX_RW_COUNT (the kernel truncates past it), an address of at most sizeof(struct
 * sockaddr_storage) bytes. A send outside those limits is "odd": the shim reads nothing of it
 * and leaves it to the kernel, whose answer the program gets.
 *
 * A page that another thread unmaps while this thread's send is inside the shim is the
 * program's race (it unmaps a buffer that a call in progress is using): probes cannot close it.
 */
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shim.h"

#define PROBE_PAGE 4096u       /* the smallest page size Linux has: a stride that never skips */
#define PROBE_BATCH 128u       /* regions per process_vm_readv */
#define MAX_RW_COUNT ((size_t)INT_MAX & ~(size_t)(PROBE_PAGE - 1))

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

/* The process id for process_vm_readv, kept in a page the kernel wipes in a child however it
 * was forked (a raw clone too), so that a child never probes its parent's memory. */
static pid_t *_Atomic pid_page;
static _Atomic bool pid_page_failed;
static _Atomic bool probe_warned;

static pid_t self_pid(void)
{
	pid_t *pg = atomic_load_explicit(&pid_page, memory_order_acquire);
	if (likely(pg && *pg))
		return *pg;
	const pid_t pid = (pid_t)syscall(SYS_getpid);
	if (!pg && !atomic_load_explicit(&pid_page_failed, memory_order_relaxed)) {
		void *m = mmap(NULL, PROBE_PAGE, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED || madvise(m, PROBE_PAGE, MADV_WIPEONFORK)) {
			/* (a kernel before 4.14: ask every time) */
			if (m != MAP_FAILED)
				munmap(m, PROBE_PAGE);
			atomic_store_explicit(&pid_page_failed, true, memory_order_relaxed);
			return pid;
		}
		pid_t *none = NULL;
		if (!atomic_compare_exchange_strong(&pid_page, &none, (pid_t *)m)) {
			munmap(m, PROBE_PAGE); /* another thread's is there */
			pg = none;
		} else {
			pg = m;
		}
	}
	if (pg)
		__atomic_store_n(pg, pid, __ATOMIC_RELAXED);
	return pid;
}

/* Regions gathered for one or more process_vm_readv calls. */
struct probe {
	struct iovec r[PROBE_BATCH];
	unsigned n;
	bool ok;
};

/* (Not an initialiser: that would clear the whole array at every send.) */
static inline void probe_init(struct probe *p)
{
	p->n = 0;
	p->ok = true;
}

static void probe_flush(struct probe *p)
{
	static __thread char junk[PROBE_BATCH]; /* one byte per region, never looked at */

	if (!p->n || !p->ok) {
		p->n = 0;
		return;
	}
	/* Without a system call where the shim's fault handler may recover (fault.c). */
	if (likely(shim_fault_usable())) {
		if (shim_touch(p->r, p->n))
			p->ok = false;
		p->n = 0;
		return;
	}
	struct iovec local = { .iov_base = junk, .iov_len = p->n };
	ssize_t r = syscall(SYS_process_vm_readv, self_pid(), &local, 1UL, p->r,
			    (unsigned long)p->n, 0UL);
	if (unlikely(r < 0 && errno == ESRCH)) {
		/* A cached id that is not this process's (a child that shared its parent's
		 * memory made the page): ask again. */
		pid_t *pg = atomic_load_explicit(&pid_page, memory_order_acquire);
		if (pg)
			__atomic_store_n(pg, 0, __ATOMIC_RELAXED);
		r = syscall(SYS_process_vm_readv, self_pid(), &local, 1UL, p->r,
			    (unsigned long)p->n, 0UL);
	}
	if (r != (ssize_t)p->n) {
		if (r < 0 && errno != EFAULT &&
		    !atomic_exchange_explicit(&probe_warned, true, memory_order_relaxed))
			shim_warn("cannot check the program's buffers (process_vm_readv: %s): the "
				  "shim reads none of them, so it batches and frames nothing and "
				  "counts no fan-out run", strerrorname_np(errno));
		p->ok = false;
	}
	p->n = 0;
}

/* The pages of [base, base + len). */
static void probe_add(struct probe *p, const void *base, size_t len)
{
	uintptr_t a = (uintptr_t)base;

	if (!len || !p->ok)
		return;
	if (shim_bad_ptr(base, len)) { /* outside user space: EFAULT without a look */
		p->ok = false;
		return;
	}
	const uintptr_t end = a + len;
	for (;;) {
		if (p->n == PROBE_BATCH)
			probe_flush(p);
		p->r[p->n++] = (struct iovec){ .iov_base = (void *)a, .iov_len = 1 };
		a = (a & ~(uintptr_t)(PROBE_PAGE - 1)) + PROBE_PAGE;
		if (a >= end)
			break;
	}
}

bool shim_readable(const void *base, size_t len)
{
	struct probe p;
	probe_init(&p);
	int saved = errno;

	probe_add(&p, base, len);
	probe_flush(&p);
	errno = saved;
	return p.ok;
}

/* Sum iov[0..n) as the kernel does; false for a length it refuses or truncates. */
static bool iov_total(const struct iovec *iov, size_t n, size_t *total)
{
	size_t sum = 0;
	for (size_t i = 0; i < n; i++) {
		if (iov[i].iov_len > (size_t)SSIZE_MAX) /* EINVAL */
			return false;
		if (iov[i].iov_len > MAX_RW_COUNT - sum) /* the kernel would send less */
			return false;
		sum += iov[i].iov_len;
	}
	*total = sum;
	return true;
}

/*
 * Fill in s (iov, iovcnt, len, addr, alen, control) from what the program passed, and say
 * whether the shim may read them (s->loaded) and the payload and address too (s->readable).
 * taken >= 0: the kernel has just accepted the send and taken that many bytes (nothing is
 * probed: what it read is readable); < 0: nothing is known, everything is probed first.
 */
bool shim_send_load(struct shim_send *s, ssize_t taken)
{
	const bool trusted = taken >= 0;
	struct probe p;
	probe_init(&p);
	int saved = errno;

	s->loaded = s->readable = false;
	switch (s->call) {
	case CALL_SEND:
	case CALL_SENDTO:
	case CALL_WRITE:
		s->one = (struct iovec){ .iov_base = (void *)s->buf, .iov_len = s->len };
		s->iov = &s->one;
		s->iovcnt = 1;
		if (s->call != CALL_SENDTO || !s->uaddr) {
			s->addr = NULL;
			s->alen = 0;
		} else {
			s->addr = s->uaddr;
			s->alen = s->ualen;
		}
		if (s->alen > sizeof(struct sockaddr_storage))
			goto out; /* EINVAL */
		break;
	case CALL_WRITEV:
		if (s->uiovcnt < 0 || s->uiovcnt > UIO_MAXIOV)
			goto out; /* EINVAL */
		if (!trusted) {
			probe_add(&p, s->uiov, (size_t)s->uiovcnt * sizeof(struct iovec));
			probe_flush(&p);
			if (!p.ok)
				goto out;
		}
		s->iov = s->uiov;
		s->iovcnt = s->uiovcnt;
		s->addr = NULL;
		s->alen = 0;
		break;
	case CALL_SENDMSG: {
		const struct msghdr *m = s->msg;
		if (!trusted) {
			probe_add(&p, m, sizeof(*m));
			probe_flush(&p);
			if (!p.ok || !m)
				goto out;
		}
		if (m->msg_iovlen > UIO_MAXIOV || (int)m->msg_namelen < 0)
			goto out; /* EMSGSIZE, EINVAL */
		if (!trusted) {
			probe_add(&p, m->msg_iov, m->msg_iovlen * sizeof(struct iovec));
			probe_flush(&p);
			if (!p.ok || (m->msg_iovlen && !m->msg_iov))
				goto out;
		}
		s->iov = m->msg_iov;
		s->iovcnt = (int)m->msg_iovlen;
		s->control = m->msg_controllen != 0;
		if (m->msg_name && m->msg_namelen) {
			s->addr = m->msg_name;
			/* (the kernel reads no more than this much of a longer one) */
			s->alen = m->msg_namelen < sizeof(struct sockaddr_storage)
					  ? m->msg_namelen
					  : (socklen_t)sizeof(struct sockaddr_storage);
		} else {
			s->addr = NULL;
			s->alen = 0;
		}
		break;
	}
	default:
		goto out;
	}
	if (s->call == CALL_WRITEV || s->call == CALL_SENDMSG) {
		if (!iov_total(s->iov, (size_t)s->iovcnt, &s->len))
			goto out;
	} else if (s->len > MAX_RW_COUNT) {
		goto out;
	}
	if (trusted) {
		s->loaded = true;
		s->readable = (size_t)taken == s->len;
		goto out;
	}
	/* The address and the payload in one call: a send is worth reading only whole. (A
	 * payload longer than anything the shim reads is not probed: SHIM_LAST_MAX.) */
	if (s->len > SHIM_LAST_MAX)
		goto out;
	probe_add(&p, s->addr, s->alen);
	for (int i = 0; i < s->iovcnt; i++)
		probe_add(&p, s->iov[i].iov_base, s->iov[i].iov_len);
	probe_flush(&p);
	s->loaded = s->readable = p.ok;
out:
	errno = saved;
	return s->readable;
}

/*
 * sendmmsg's vector (bypass mode, which reads every message before the kernel does): is
 * every message in msgs[0..n) one the kernel takes as it is (limits as for sendmsg), with
 * its header, iovec array, address and payload readable?
 */
bool shim_mmsg_readable(const struct mmsghdr *msgs, unsigned n)
{
	struct probe p;
	probe_init(&p);
	int saved = errno;
	bool ok = false;

	if (!n)
		return true;
	probe_add(&p, msgs, (size_t)n * sizeof(*msgs));
	probe_flush(&p);
	if (!p.ok || !msgs)
		goto out;
	for (unsigned i = 0; i < n; i++) {
		const struct msghdr *h = &msgs[i].msg_hdr;
		if (h->msg_iovlen > UIO_MAXIOV || (int)h->msg_namelen < 0 ||
		    h->msg_namelen > sizeof(struct sockaddr_storage) ||
		    (h->msg_iovlen && !h->msg_iov))
			goto out;
		probe_add(&p, h->msg_iov, h->msg_iovlen * sizeof(struct iovec));
		if (h->msg_name)
			probe_add(&p, h->msg_name, h->msg_namelen);
	}
	probe_flush(&p);
	if (!p.ok)
		goto out;
	for (unsigned i = 0; i < n; i++) {
		const struct msghdr *h = &msgs[i].msg_hdr;
		size_t len;
		if (!iov_total(h->msg_iov, h->msg_iovlen, &len))
			goto out;
		for (size_t j = 0; j < h->msg_iovlen; j++)
			probe_add(&p, h->msg_iov[j].iov_base, h->msg_iov[j].iov_len);
	}
	probe_flush(&p);
	ok = p.ok;
out:
	errno = saved;
	return ok;
}
