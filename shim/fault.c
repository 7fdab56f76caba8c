/* SPDX-License-Identifier: MIT */
/*
 * Reading the program's memory with fault recovery, without a system call.
 *
 * probe.c must know, before the shim reads a buffer the kernel has not read yet, whether
 * every page of it is readable: the kernel's copy answers EFAULT where the shim's would die of
 * SIGSEGV. Asking the kernel (process_vm_readv) costs a system call per send. Here the shim
 * reads one byte of each page itself, in shim_touch (a few instructions of assembly below),
 * and a fault there is not the program's: the shim's SIGSEGV/SIGBUS handler sees that the
 * faulting instruction is shim_touch's load and resumes at its error exit, which returns
 * -EFAULT, as the kernel's own exception tables do for its copies from user memory. Every
 * other fault is the program's, and is given to the program's handler as the kernel would
 * have given it (its flags, its mask), or to the default action (the same core dump and exit
 * status).
 *
 * The handler is the shim's secret:
 *  - set lazily, the first time a send needs it (never before main, never in a constructor);
 *  - once it is set, the program's sigaction, signal, bsd_signal, sysv_signal for SIGSEGV and
 *    SIGBUS set and read a table here (the handler it chains to), never the kernel's;
 *  - a raw system call that replaces it (libc's syscall(), seen by its wrapper; an inline
 *    system call, seen by a check every SHIM_FAULT_EVERY (1024) uses of the touch) puts the shim
 *    back on the probe for good, and the program's handler is the kernel's, as it set it;
 *  - the live-counter file's SIGBUS recovery (lib/obs/shm.c) is one of the faults it
 *    recognises: one handler for both (ms__bus_host).
 *
 * A fault while SIGSEGV or SIGBUS is blocked kills the process whatever its handler: the
 * touch is used only when this thread is known not to block them (shim_fmask: read once, and
 * again after every change of the mask the shim sees: sigprocmask, pthread_sigmask, the
 * longjmp family, setcontext, swapcontext, syscall()), and never inside a signal handler,
 * whose mask the kernel widened (in batch and bypass modes the program's handlers are called
 * through a trampoline that says so; those it set before the shim's init are taken over when
 * the fault handler is set). Elsewhere the probe is used.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "internal.h"
#include "shim.h"

/* Under valgrind the probe: memcheck reports the touch of an unmapped page as the invalid
 * read it is (valgrind itself resumes at the error exit as the kernel does). The check is a
 * few instructions natively, and absent where valgrind's header is. */
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define UNDER_VALGRIND() RUNNING_ON_VALGRIND
#else
#define UNDER_VALGRIND() 0
#endif

#if defined(__x86_64__) || defined(__aarch64__)
#define HAVE_TOUCH 1
#else
#define HAVE_TOUCH 0
#endif

SHIM_TLS unsigned char shim_fmask;
SHIM_TLS unsigned shim_fault_uses;
_Atomic int shim_fault_state;

#if defined(__x86_64__)
/* int shim_touch(const struct iovec *r, unsigned n): one byte of each r[i].iov_base, 0; or
 * -EFAULT (-14) from shim_touch_fixup when shim_touch_load faulted. */
__asm__(".text\n"
	".p2align 4\n"
	".globl shim_touch\n"
	".hidden shim_touch\n"
	".type shim_touch, @function\n"
	"shim_touch:\n"
	"	xorl %eax, %eax\n"
	"	testl %esi, %esi\n"
	"	jz 2f\n"
	"1:	movq (%rdi), %rdx\n"
	".globl shim_touch_load\n"
	".hidden shim_touch_load\n"
	"shim_touch_load:\n"
	"	movzbl (%rdx), %ecx\n"
	"	addq $16, %rdi\n"
	"	decl %esi\n"
	"	jnz 1b\n"
	"2:	ret\n"
	".globl shim_touch_fixup\n"
	".hidden shim_touch_fixup\n"
	"shim_touch_fixup:\n"
	"	movl $-14, %eax\n"
	"	ret\n"
	".size shim_touch, .-shim_touch\n");
#elif defined(__aarch64__)
__asm__(".text\n"
	".p2align 4\n"
	".globl shim_touch\n"
	".hidden shim_touch\n"
	".type shim_touch, %function\n"
	"shim_touch:\n"
	"	mov x3, x0\n"
	"	mov w0, #0\n"
	"	cbz w1, 2f\n"
	"1:	ldr x4, [x3], #16\n"
	".globl shim_touch_load\n"
	".hidden shim_touch_load\n"
	"shim_touch_load:\n"
	"	ldrb w5, [x4]\n"
	"	subs w1, w1, #1\n"
	"	b.ne 1b\n"
	"2:	ret\n"
	".globl shim_touch_fixup\n"
	".hidden shim_touch_fixup\n"
	"shim_touch_fixup:\n"
	"	mov w0, #-14\n"
	"	ret\n"
	".size shim_touch, .-shim_touch\n");
#endif

#if HAVE_TOUCH
extern const char shim_touch_load[], shim_touch_fixup[];

static uintptr_t uc_pc(const ucontext_t *uc)
{
#if defined(__x86_64__)
	return (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#else
	return (uintptr_t)uc->uc_mcontext.pc;
#endif
}

static void uc_set_pc(ucontext_t *uc, const void *pc)
{
#if defined(__x86_64__)
	uc->uc_mcontext.gregs[REG_RIP] = (greg_t)(uintptr_t)pc;
#else
	uc->uc_mcontext.pc = (uintptr_t)pc;
#endif
}
#else
int shim_touch(const struct iovec *r, unsigned n)
{
	(void)r;
	(void)n;
	return -ENOSYS; /* (never called: shim_fault_usable is false) */
}
#endif

/* ---- the program's dispositions ----------------------------------------------------------
 *
 * prog[sig] is what the program set for sig, for every signal whose kernel disposition is the
 * shim's (wrapped[sig]): SIGSEGV and SIGBUS once the fault handler is set, and, in batch and
 * bypass modes, any signal the program gave a handler (the trampoline). Changed under
 * tab_lock with every signal blocked in the thread; read by the handlers as they stand. */
#define NSIGS 65
static struct sigaction prog[NSIGS];
static bool wrapped[NSIGS]; /* only through __atomic_load_n/__atomic_store_n */
static atomic_flag tab_lock = ATOMIC_FLAG_INIT;

static int (*real_sigaction)(int, const struct sigaction *, struct sigaction *);
static int (*real_sigmask)(int, const sigset_t *, sigset_t *);

static bool resolve(void)
{
	if (!__atomic_load_n(&real_sigaction, __ATOMIC_ACQUIRE)) {
		void *m = dlsym(RTLD_NEXT, "pthread_sigmask");
		void *a = dlsym(RTLD_NEXT, "sigaction");
		if (!a || !m)
			return false;
		__atomic_store_n(&real_sigmask, (__typeof__(real_sigmask))m, __ATOMIC_RELAXED);
		__atomic_store_n(&real_sigaction, (__typeof__(real_sigaction))a, __ATOMIC_RELEASE);
	}
	return true;
}

static void lock(sigset_t *old)
{
	sigset_t all;
	sigfillset(&all);
	real_sigmask(SIG_BLOCK, &all, old);
	while (atomic_flag_test_and_set_explicit(&tab_lock, memory_order_acquire))
		;
}

static void unlock(const sigset_t *old)
{
	atomic_flag_clear_explicit(&tab_lock, memory_order_release);
	real_sigmask(SIG_SETMASK, old, NULL);
}

/* (The kernel looks at the pointer only, SA_SIGINFO or not: SIG_DFL and SIG_IGN are 0 and 1
 * in sa_sigaction too, which shares sa_handler's place.) */
static bool is_handler(const struct sigaction *a)
{
	return a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN && a->sa_handler != SIG_ERR;
}

/* Call the program's handler p for sig, inside which the touch is not used (the kernel
 * widened the mask). mask: block what the kernel would have, its mask and, unless SA_NODEFER,
 * the signal (the fault handler is set with SA_NODEFER and no mask, so the thread's mask is
 * still the interrupted code's there; the trampoline has the program's, the kernel did it). */
static void call_prog(int sig, const struct sigaction *p, siginfo_t *si, void *uc, bool mask)
{
	sigset_t m = p->sa_mask, old;
	if (mask) {
		if (!(p->sa_flags & SA_NODEFER))
			sigaddset(&m, sig);
		real_sigmask(SIG_BLOCK, &m, &old);
	}
	shim_fmask = SHIM_FMASK_HANDLER;
	if (p->sa_flags & SA_SIGINFO)
		p->sa_sigaction(sig, si, uc);
	else
		p->sa_handler(sig);
	if (mask)
		real_sigmask(SIG_SETMASK, &old, NULL);
	/* Look again at the next send: the mask is the interrupted code's once this returns
	 * (or whatever the handler put in uc, or where it jumped to). */
	shim_fmask = SHIM_FMASK_UNKNOWN;
}

/* SA_RESETHAND: the handler is SIG_DFL from the moment it is called. Only the handler: the
 * kernel leaves the flags and the mask as they were (sigaction reads them back so). */
static struct sigaction take(int sig)
{
	struct sigaction p = prog[sig];
	if ((p.sa_flags & SA_RESETHAND) && is_handler(&p))
		prog[sig].sa_handler = SIG_DFL;
	return p;
}

/* The program's handler for a signal of the trampoline (not SIGSEGV/SIGBUS). */
static void trampoline(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;
	if (sig <= 0 || sig >= NSIGS)
		return;
	/* (With SA_RESETHAND the kernel has reset the trampoline to SIG_DFL, keeping its flags,
	 * SA_SIGINFO among them, which the program may not have set: the table still answers
	 * the program's sigaction, with its own flags.) */
	struct sigaction p = take(sig);
	errno = saved;
	if (is_handler(&p))
		call_prog(sig, &p, si, uc, false);
}

/* Not a fault of ours: the program's handler, or what the kernel would have done. */
static void chain(int sig, siginfo_t *si, void *uc)
{
	struct sigaction p = take(sig);

	if (is_handler(&p)) {
		call_prog(sig, &p, si, uc, true);
		return;
	}
	/* SIG_IGN for a signal someone sent: ignored. A fault cannot be ignored (the kernel
	 * resets the disposition and kills), and SIG_DFL is death with a core: the default
	 * disposition back at the kernel, then the fault happens again as the instruction is
	 * made again, or the signal is sent again. */
	if (si->si_code <= 0 && p.sa_handler == SIG_IGN)
		return;
	atomic_store_explicit(&shim_fault_state, SHIM_FAULT_LOST, memory_order_relaxed);
	struct sigaction d = { .sa_handler = SIG_DFL };
	sigemptyset(&d.sa_mask);
	real_sigaction(sig, &d, NULL);
	__atomic_store_n(&wrapped[sig], false, __ATOMIC_RELAXED);
	if (si->si_code <= 0)
		raise(sig);
}

static void on_fault(int sig, siginfo_t *si, void *ucv)
{
	int saved = errno;
#if HAVE_TOUCH
	ucontext_t *uc = ucv;
	if (si->si_code > 0 && uc_pc(uc) == (uintptr_t)shim_touch_load) {
		uc_set_pc(uc, shim_touch_fixup);
		return;
	}
#endif
	if (sig == SIGBUS && ms__shm_bus_fault(si)) {
		errno = saved;
		return;
	}
	errno = saved;
	chain(sig, si, ucv);
}

static bool trampolines(void);

/* The handlers the program set before the shim looked (before init: its sigaction passed
 * straight to the kernel), through the trampoline from now on, as if set now: one whose mask
 * blocks SIGSEGV or SIGBUS would otherwise run a send with the touch where a fault kills. */
static void adopt_locked(void)
{
	if (!trampolines())
		return;
	for (int sig = 1; sig < NSIGS; sig++) {
		struct sigaction k;
		if (sig == SIGSEGV || sig == SIGBUS || sig == SIGKILL || sig == SIGSTOP ||
		    __atomic_load_n(&wrapped[sig], __ATOMIC_RELAXED) ||
		    real_sigaction(sig, NULL, &k) || !is_handler(&k) ||
		    ((k.sa_flags & SA_SIGINFO) && k.sa_sigaction == trampoline))
			continue;
		struct sigaction t = k;
		t.sa_sigaction = trampoline;
		t.sa_flags |= SA_SIGINFO;
		prog[sig] = k;
		if (!real_sigaction(sig, &t, NULL))
			__atomic_store_n(&wrapped[sig], true, __ATOMIC_RELAXED);
	}
}

/* Set the fault handler for SIGSEGV and SIGBUS (under tab_lock): what the kernel had becomes
 * the program's. */
static void install_locked(void)
{
	struct sigaction ours = { .sa_sigaction = on_fault };
	struct sigaction was[2];
	static const int sigs[2] = { SIGSEGV, SIGBUS };

	if (atomic_load_explicit(&shim_fault_state, memory_order_relaxed) != SHIM_FAULT_NONE)
		return;
	for (int i = 0; i < 2; i++) {
		if (real_sigaction(sigs[i], NULL, &was[i])) {
			atomic_store_explicit(&shim_fault_state, SHIM_FAULT_LOST,
					      memory_order_relaxed);
			return;
		}
	}
	adopt_locked();
	for (int i = 0; i < 2; i++) {
		prog[sigs[i]] = was[i];
		__atomic_store_n(&wrapped[sigs[i]], true, __ATOMIC_RELAXED);
		/* On the alternate stack when the thread has one (a stack overflow's fault must
		 * reach a program's handler that relies on it). SA_RESTART as the program's: a
		 * SIGBUS or SIGSEGV sent by kill interrupts system calls as it would have. */
		ours.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER |
				(was[i].sa_flags & SA_RESTART);
		sigemptyset(&ours.sa_mask);
		if (real_sigaction(sigs[i], &ours, NULL)) {
			/* (Put back what was there: the program's.) */
			for (int j = 0; j <= i; j++) {
				real_sigaction(sigs[j], &was[j], NULL);
				__atomic_store_n(&wrapped[sigs[j]], false, __ATOMIC_RELAXED);
			}
			atomic_store_explicit(&shim_fault_state, SHIM_FAULT_LOST,
					      memory_order_relaxed);
			return;
		}
	}
	atomic_store_explicit(&shim_fault_state, SHIM_FAULT_READY, memory_order_release);
}

static bool install(void)
{
	sigset_t old;
	if (!resolve())
		return false;
	lock(&old);
	install_locked();
	unlock(&old);
	return atomic_load_explicit(&shim_fault_state, memory_order_acquire) == SHIM_FAULT_READY;
}

/* lib/obs/shm.c's SIGBUS recovery goes through the same handler. */
static bool bus_host(void)
{
	if (atomic_load_explicit(&shim_fault_state, memory_order_acquire) == SHIM_FAULT_NONE)
		install();
	return atomic_load_explicit(&shim_fault_state, memory_order_acquire) == SHIM_FAULT_READY;
}

void shim_fault_setup(void)
{
	ms__bus_host = bus_host;
}

/* Is the handler still the kernel's for both signals? (A raw system call may have replaced
 * it.) If not, the probe from now on. */
static bool verify(void)
{
	struct sigaction k;
	static const int sigs[2] = { SIGSEGV, SIGBUS };
	for (int i = 0; i < 2; i++) {
		if (real_sigaction(sigs[i], NULL, &k) ||
		    !(k.sa_flags & SA_SIGINFO) || k.sa_sigaction != on_fault) {
			shim_fault_lost();
			return false;
		}
	}
	return true;
}

void shim_fault_lost(void)
{
	if (atomic_exchange_explicit(&shim_fault_state, SHIM_FAULT_LOST, memory_order_relaxed) ==
	    SHIM_FAULT_READY) {
		/* The kernel's disposition is the program's now, whatever the table said. */
		__atomic_store_n(&wrapped[SIGSEGV], false, __ATOMIC_RELAXED);
		__atomic_store_n(&wrapped[SIGBUS], false, __ATOMIC_RELAXED);
	}
}

bool shim_fault_usable_slow(void)
{
	if (!HAVE_TOUCH || shim_fmask == SHIM_FMASK_HANDLER ||
	    (shim_cfg.mode != SHIM_BATCH && shim_cfg.mode != SHIM_BYPASS))
		return false;
	int st = atomic_load_explicit(&shim_fault_state, memory_order_acquire);
	if (st == SHIM_FAULT_NONE) {
		if (UNDER_VALGRIND()) {
			atomic_store_explicit(&shim_fault_state, SHIM_FAULT_LOST,
					      memory_order_relaxed);
			return false;
		}
		if (!install())
			return false;
	} else if (st != SHIM_FAULT_READY) {
		return false;
	}
	if (shim_fmask == SHIM_FMASK_UNKNOWN) {
		sigset_t cur;
		if (real_sigmask(SIG_BLOCK, NULL, &cur))
			return false;
		shim_fmask = sigismember(&cur, SIGSEGV) || sigismember(&cur, SIGBUS)
				     ? SHIM_FMASK_BLOCKED
				     : SHIM_FMASK_CLEAR;
	}
	if (shim_fmask != SHIM_FMASK_CLEAR)
		return false;
	shim_fault_uses = 0;
	return verify();
}

bool shim_fault_verify(void)
{
	return verify();
}

/* ---- the program's sigaction and its relatives -------------------------------------------- */

/* The trampoline: only where it can matter (the touch is used in batch and bypass modes). */
static bool trampolines(void)
{
	return HAVE_TOUCH && (shim_cfg.mode == SHIM_BATCH || shim_cfg.mode == SHIM_BYPASS);
}

int shim_fault_sigaction(int sig, const struct sigaction *act, struct sigaction *old,
			 bool *done)
{
	*done = false;
	if (sig <= 0 || sig >= NSIGS || sig == SIGKILL || sig == SIGSTOP)
		return 0;
	const bool fault = sig == SIGSEGV || sig == SIGBUS;
	if (!fault && !__atomic_load_n(&wrapped[sig], __ATOMIC_RELAXED) &&
	    !(act && is_handler(act) && trampolines()))
		return 0; /* the kernel's own: nothing of ours there, nor to be */
	if (fault && atomic_load_explicit(&shim_fault_state, memory_order_acquire) !=
			     SHIM_FAULT_READY)
		return 0;
	if (!resolve())
		return 0;
	sigset_t m;
	int r = 0;
	lock(&m);
	*done = true;
	if (fault && atomic_load_explicit(&shim_fault_state, memory_order_relaxed) ==
			     SHIM_FAULT_READY) {
		/* The table only; the kernel keeps ours (its SA_RESTART following the
		 * program's, for a signal sent to it). */
		struct sigaction was = prog[sig];
		if (act) {
			prog[sig] = *act;
			if ((act->sa_flags ^ was.sa_flags) & SA_RESTART) {
				struct sigaction ours = { .sa_sigaction = on_fault };
				ours.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER |
						(act->sa_flags & SA_RESTART);
				sigemptyset(&ours.sa_mask);
				real_sigaction(sig, &ours, NULL);
			}
		}
		if (old)
			*old = was;
	} else if (fault) {
		*done = false; /* lost meanwhile: the kernel's */
	} else {
		struct sigaction k, kold;
		const struct sigaction *put = act;
		const bool wrap = act && is_handler(act) && trampolines();
		if (wrap) {
			k = *act;
			k.sa_sigaction = trampoline;
			k.sa_flags |= SA_SIGINFO;
			/* (SA_RESETHAND stays the kernel's: it resets the trampoline itself.) */
			put = &k;
		}
		r = real_sigaction(sig, put, &kold);
		if (!r) {
			/* The trampoline, or the SIG_DFL the kernel put in its place after an
			 * SA_RESETHAND call (take() did the same in the table). */
			const bool was_wrapped =
				__atomic_load_n(&wrapped[sig], __ATOMIC_RELAXED) &&
				(((kold.sa_flags & SA_SIGINFO) && kold.sa_sigaction == trampoline) ||
				 (kold.sa_handler == SIG_DFL && prog[sig].sa_handler == SIG_DFL));
			if (old)
				*old = was_wrapped ? prog[sig] : kold;
			if (act) {
				prog[sig] = *act;
				__atomic_store_n(&wrapped[sig], wrap, __ATOMIC_RELAXED);
			}
		}
	}
	unlock(&m);
	return r;
}

/* After a call that may have changed this thread's mask: look again before the next touch. */
void shim_fault_mask_changed(void)
{
	if (shim_fmask != SHIM_FMASK_HANDLER)
		shim_fmask = SHIM_FMASK_UNKNOWN;
}

/* A longjmp (or setcontext) may leave a handler of the program's that call_prog called, in
 * which case call_prog never says that the handler is over: whether the thread is in a
 * handler or not, the mask it has now is what the touch needs to know, so look at it. (The
 * jump out of a handler that siglongjmp makes to go on after a fault is common: a program
 * that does it would otherwise be on the probe for good.) */
void shim_fault_jumped(void)
{
	shim_fmask = SHIM_FMASK_UNKNOWN;
}

/* syscall(): a raw rt_sigaction that sets SIGSEGV's or SIGBUS's handler, or a handler the
 * shim then never sees, gives them to the program: the probe from then on. */
void shim_fault_syscall(long nr, long a1, long a2)
{
	if (nr == SYS_rt_sigprocmask) {
		shim_fault_mask_changed();
	} else if (nr == SYS_rt_sigaction && a2) {
		/* SIGSEGV's or SIGBUS's: the program's at the kernel. Another signal's: its
		 * handler is not the trampoline's, so a send from it may find the fault signals
		 * blocked by its mask, where the touch would kill. The probe, for good. */
		if (a1 > 0 && a1 < NSIGS && a1 != SIGSEGV && a1 != SIGBUS)
			__atomic_store_n(&wrapped[a1], false, __ATOMIC_RELAXED);
		shim_fault_lost();
	}
}

/* Before exec: the kernel keeps an ignored SIGSEGV or SIGBUS ignored and resets handlers; the
 * program's SIG_IGN must be what it finds. */
void shim_fault_exec(bool before)
{
	static const int sigs[2] = { SIGSEGV, SIGBUS };
	if (atomic_load_explicit(&shim_fault_state, memory_order_acquire) != SHIM_FAULT_READY)
		return;
	for (int i = 0; i < 2; i++) {
		int s = sigs[i];
		if (prog[s].sa_handler != SIG_IGN)
			continue;
		if (before) {
			struct sigaction ign = { .sa_handler = SIG_IGN };
			sigemptyset(&ign.sa_mask);
			real_sigaction(s, &ign, NULL);
		} else { /* the exec failed: ours again */
			struct sigaction ours = { .sa_sigaction = on_fault };
			ours.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
			sigemptyset(&ours.sa_mask);
			real_sigaction(s, &ours, NULL);
		}
	}
}
