/* SPDX-License-Identifier: MIT */
/*
 * segv: the shim's SIGSEGV/SIGBUS handler (shim/fault.c) is invisible to the program. Each
 * case sends fan-outs of good datagrams to three local receivers (so that batch mode reads
 * the program's memory before the kernel does, with its touch) with bad ones among them, then
 * does what the case is about, and prints one line per fact. Run without the shim and under
 * multisend-run: the outputs (and, for the cases that die, the way the process ends) must be
 * identical.
 *
 *   segv handler siginfo|plain before|after   the program's own SIGSEGV handler (set before
 *          the first send, or after the shim's is set): two faults on purpose (one the
 *          handler repairs with mprotect, one it leaves with siglongjmp) and a raise(): same
 *          si_addr, si_code and count; sigaction and signal read back what it set
 *   segv iov          sendmsg whose middle iovec is unmapped, or runs into an unmapped page:
 *          EFAULT, and no signal reaches the program's handler
 *   segv die|die-ign|die-raise   no handler (or SIG_IGN): a fault after the sends kills the
 *          child with SIGSEGV; the parent prints how (signal, core)
 *   segv raw|rawasm   a handler set by a raw rt_sigaction (libc's syscall(), or an inline
 *          system call) after the shim's: bad sends still get EFAULT, the faults its handler
 *   segv altstack     an SA_ONSTACK handler runs on the thread's alternate stack
 *   segv resethand    an SA_RESETHAND handler runs once; sigaction then reads SIG_DFL, and the
 *          next fault kills (a child) with SIGSEGV
 *   segv nodefer      an SA_NODEFER handler that faults again inside itself is called again
 *          (depth 2), SIGSEGV not blocked there
 *   segv fork         a child forked after the sends: its handler, its bad sends, as the parent's
 *   segv early        a SIGUSR1 handler whose mask blocks every signal, set first thing in
 *          main (before any call the shim sees), sends a bad pointer from inside: EFAULT, as
 *          for a handler set later (the shim takes over handlers set before it looked)
 *   segv exec         SIGSEGV ignored and SIGBUS handled, then exec of this program: SIGSEGV
 *          is still ignored there, SIGBUS is SIG_DFL, and the new image's sends are the same
 *
 * Exit status 0 when every line printed and every good datagram arrived.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define NDEST 3
#define PAGE 4096

static int tx, rx[NDEST];
static struct sockaddr_in dest[NDEST];
static long sent;
static char *region; /* three pages: readable, PROT_NONE, unmapped */

static volatile sig_atomic_t count;
static volatile uintptr_t last_addr;
static volatile int last_code, last_sig;
static sigjmp_buf jb;
static volatile bool jump, raising;
static char *alt_lo, *alt_hi;      /* the alternate stack (altstack case) */
static volatile int on_alt = -1;   /* did the handler run there? */
static volatile int blk_segv = -1, blk_usr2 = -1; /* the mask inside the handler */
static volatile int depth, max_depth;             /* nested calls (SA_NODEFER) */
static volatile bool nest;                        /* fault again inside the handler */

static void die(const char *what) __attribute__((noreturn));
static void die(const char *what)
{
	fprintf(stderr, "FAIL: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

/* An address as the output shows it: its offset in region, or where it is not in region. */
static long rel(uintptr_t a)
{
	return a - (uintptr_t)region < 3 * PAGE ? (long)(a - (uintptr_t)region) : -1;
}

static void setup(void)
{
	tx = socket(AF_INET, SOCK_DGRAM, 0);
	if (tx < 0)
		die("socket");
	for (int i = 0; i < NDEST; i++) {
		rx[i] = socket(AF_INET, SOCK_DGRAM, 0);
		dest[i] = (struct sockaddr_in){ .sin_family = AF_INET,
						.sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t l = sizeof(dest[i]);
		if (rx[i] < 0 || bind(rx[i], (struct sockaddr *)&dest[i], l) ||
		    getsockname(rx[i], (struct sockaddr *)&dest[i], &l))
			die("receiver");
		int big = 1 << 20;
		setsockopt(rx[i], SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	}
	/* Far from where mmap places memory, so that no mapping (the shim's) fills the hole. */
	region = NULL;
	for (uintptr_t h = (uintptr_t)1 << 34; !region && h < (uintptr_t)1 << 46;
	     h += (uintptr_t)1 << 32) {
		void *p = mmap((void *)h, 3 * PAGE, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
		if (p == (void *)h)
			region = p;
		else if (p != MAP_FAILED)
			munmap(p, 3 * PAGE);
	}
	if (!region)
		die("no room for the hole");
	memset(region, 'r', PAGE);
	if (mprotect(region + PAGE, PAGE, PROT_NONE) || munmap(region + 2 * PAGE, PAGE))
		die("mprotect/munmap");
}

/* n fan-outs of good datagrams to the three receivers. */
static void fanouts(int n)
{
	char msg[64];
	for (int k = 0; k < n; k++) {
		for (int i = 0; i < NDEST; i++) {
			memset(msg, 'a' + i, sizeof(msg));
			if (sendto(tx, msg, sizeof(msg), 0, (struct sockaddr *)&dest[i],
				   sizeof(dest[i])) != (ssize_t)sizeof(msg))
				die("good sendto");
			sent++;
		}
	}
}

static void result(const char *name, ssize_t r)
{
	if (r < 0)
		say("%-26s %s", name, strerrorname_np(errno));
	else
		say("%-26s %zd", name, r);
}

/* Bad sends in the middle of a fan-out (batch mode is batching then). */
static void bad_sends(const char *tag)
{
	char name[64];
	struct sockaddr *d = (struct sockaddr *)&dest[1];
	fanouts(3);
	snprintf(name, sizeof(name), "%s sendto PROT_NONE", tag);
	result(name, sendto(tx, region + PAGE, 64, 0, d, sizeof(dest[1])));
	fanouts(1);
	snprintf(name, sizeof(name), "%s sendto unmapped", tag);
	result(name, sendto(tx, region + 2 * PAGE + 8, 64, 0, d, sizeof(dest[1])));
	fanouts(1);
	snprintf(name, sizeof(name), "%s sendto straddle", tag);
	result(name, sendto(tx, region + PAGE - 32, 64, 0, d, sizeof(dest[1])));
	fanouts(1);
}

static void drain(void)
{
	long got = 0;
	char buf[128];
	for (int i = 0; i < NDEST; i++)
		while (recv(rx[i], buf, sizeof(buf), MSG_DONTWAIT) > 0)
			got++;
	if (got != sent) {
		fprintf(stderr, "FAIL: %ld of %ld good datagrams arrived\n", got, sent);
		exit(1);
	}
	say("good datagrams arrived: %ld", got);
}

/* What the kernel blocked for the handler: its sa_mask, and the signal unless SA_NODEFER. */
static void note_mask(void)
{
	sigset_t cur;
	if (!pthread_sigmask(SIG_BLOCK, NULL, &cur)) {
		blk_segv = sigismember(&cur, SIGSEGV);
		blk_usr2 = sigismember(&cur, SIGUSR2);
	}
}

static void on_segv_info(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	char here;
	count++;
	note_mask();
	if (++depth > max_depth)
		max_depth = depth;
	if (nest && depth == 1) {
		/* SA_NODEFER: the same fault inside the handler reaches it again (depth 2),
		 * which repairs the page; without it the kernel would kill. */
		(void)*(volatile char *)(region + PAGE + 200);
	}
	if (alt_lo)
		on_alt = &here >= alt_lo && &here < alt_hi;
	last_sig = sig;
	last_addr = (uintptr_t)si->si_addr;
	last_code = si->si_code;
	if (si->si_code > 0 && (uintptr_t)si->si_addr - (uintptr_t)region - PAGE < PAGE) {
		if (jump) {
			depth = 0;
			siglongjmp(jb, 1);
		}
		mprotect(region + PAGE, PAGE, PROT_READ); /* repaired: the load is made again */
	}
	depth--;
}

static volatile sig_atomic_t usr1s;
static void on_usr1(int sig)
{
	(void)sig;
	usr1s++;
}

static void on_segv_plain(int sig)
{
	count++;
	note_mask();
	last_sig = sig;
	last_addr = 0;
	last_code = 0;
	if (raising)
		return;
	if (jump)
		siglongjmp(jb, 1);
	mprotect(region + PAGE, PAGE, PROT_READ);
}

static const char *code_name(int c)
{
	switch (c) {
	case SEGV_MAPERR:
		return "SEGV_MAPERR";
	case SEGV_ACCERR:
		return "SEGV_ACCERR";
	case SI_TKILL:
		return "SI_TKILL";
	case SI_USER:
		return "SI_USER";
	default:
		return "other";
	}
}

static void show_fault(const char *what)
{
	say("%-26s count %d sig %d addr %ld code %s blocked in the handler SEGV %d USR2 %d", what,
	    (int)count, last_sig, rel(last_addr), code_name(last_code), blk_segv, blk_usr2);
}

static void set_handler(bool siginfo)
{
	struct sigaction sa = { 0 };
	if (siginfo) {
		sa.sa_sigaction = on_segv_info;
		sa.sa_flags = SA_SIGINFO | SA_RESTART;
	} else {
		sa.sa_handler = on_segv_plain;
		sa.sa_flags = SA_RESTART;
	}
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGUSR2);
	if (sigaction(SIGSEGV, &sa, NULL))
		die("sigaction");
}

static void readback(bool siginfo)
{
	struct sigaction o;
	if (sigaction(SIGSEGV, NULL, &o))
		die("sigaction read");
	bool fn = siginfo ? (o.sa_flags & SA_SIGINFO) && o.sa_sigaction == on_segv_info
			  : !(o.sa_flags & SA_SIGINFO) && o.sa_handler == on_segv_plain;
	say("readback handler %s flags %s mask USR2 %d USR1 %d", fn ? "ours" : "NOT OURS",
	    (o.sa_flags & (SA_SIGINFO | SA_RESTART | SA_ONSTACK | SA_NODEFER | SA_RESETHAND)) ==
			    (siginfo ? SA_SIGINFO | SA_RESTART : SA_RESTART)
		    ? "as set"
		    : "CHANGED",
	    sigismember(&o.sa_mask, SIGUSR2), sigismember(&o.sa_mask, SIGUSR1));
	/* signal() gives the old one back and sets the new one; then it is put back. */
	sighandler_t prev = signal(SIGSEGV, SIG_DFL);
	say("signal() returned %s",
	    prev == (siginfo ? (sighandler_t)(void (*)(void))on_segv_info : on_segv_plain)
		    ? "ours"
		    : "NOT OURS");
	sighandler_t now = signal(SIGSEGV, prev);
	say("signal() then returned %s", now == SIG_DFL ? "SIG_DFL" : "NOT SIG_DFL");
	set_handler(siginfo);
}

/* Fault on purpose: a load from the PROT_NONE page. */
static int poke(void)
{
	return *(volatile char *)(region + PAGE + 100);
}

static int handler_case(bool siginfo, bool before)
{
	if (before)
		set_handler(siginfo);
	bad_sends("first");
	if (!before)
		set_handler(siginfo);
	readback(siginfo);
	/* Repaired by the handler: the load is made again and reads 0. */
	int v = poke();
	show_fault("fault repaired");
	say("value read after repair %d", v);
	mprotect(region + PAGE, PAGE, PROT_NONE);
	bad_sends("second");
	/* Left by siglongjmp, which puts back the mask of sigsetjmp. */
	jump = true;
	if (!sigsetjmp(jb, 1)) {
		poke();
		say("no fault: FAIL");
	}
	jump = false;
	show_fault("fault left by siglongjmp");
	bad_sends("after longjmp");
	/* A SIGSEGV that is sent, not a fault. */
	raising = true;
	raise(SIGSEGV);
	raising = false;
	show_fault("raised");
	bad_sends("third");
	readback(siginfo);
	drain();
	return 0;
}

static int iov_case(void)
{
	struct sigaction sa = { .sa_sigaction = on_segv_info, .sa_flags = SA_SIGINFO };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, NULL);
	sigaction(SIGBUS, &sa, NULL);
	char a[16], c[16];
	memset(a, 'x', sizeof(a));
	memset(c, 'z', sizeof(c));
	struct iovec v[3] = { { a, sizeof(a) }, { region + 2 * PAGE, 16 }, { c, sizeof(c) } };
	struct msghdr m = { .msg_name = &dest[0], .msg_namelen = sizeof(dest[0]),
			    .msg_iov = v, .msg_iovlen = 3 };
	for (int k = 0; k < 3; k++) {
		fanouts(2);
		v[1].iov_base = k == 0 ? region + 2 * PAGE : k == 1 ? region + PAGE - 8
								    : region + PAGE;
		result(k == 0 ? "sendmsg iov unmapped" : k == 1 ? "sendmsg iov straddle"
								: "sendmsg iov PROT_NONE",
		       sendmsg(tx, &m, 0));
		fanouts(2);
	}
	v[1].iov_base = region;
	fanouts(2);
	result("sendmsg iov good", sendmsg(tx, &m, 0));
	sent++;
	fanouts(2);
	say("signals to the program %d", (int)count);
	drain();
	return 0;
}

/* The sends (the shim's handler is set by them), then a child that faults; the parent says
 * how it ended. */
static int die_case(const char *how)
{
	bad_sends("before fork");
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		/* A core, where the test gives a directory for it: the same with and without
		 * the shim (the kernel's, not a handler's). */
		const char *dir = getenv("SEGV_CORE_DIR");
		struct rlimit rl;
		if (dir && *dir && !chdir(dir) && !getrlimit(RLIMIT_CORE, &rl)) {
			rl.rlim_cur = rl.rlim_max < (16u << 20) ? rl.rlim_max : (16u << 20);
			setrlimit(RLIMIT_CORE, &rl);
		}
		if (!strcmp(how, "die-ign"))
			signal(SIGSEGV, SIG_IGN);
		if (!strcmp(how, "die-raise")) {
			raise(SIGSEGV);
			say("child: raise returned: FAIL");
		} else {
			poke();
			say("child: no fault: FAIL");
		}
		_exit(3);
	}
	int st;
	if (waitpid(pid, &st, 0) != pid)
		die("waitpid");
	if (WIFSIGNALED(st))
		say("child killed by signal %d core %d", WTERMSIG(st), WCOREDUMP(st) ? 1 : 0);
	else
		say("child exited %d", WEXITSTATUS(st));
	bad_sends("after child");
	drain();
	return 0;
}

/* The kernel's struct for rt_sigaction. */
struct ksa {
	void *handler;
	unsigned long flags;
	void *restorer;
	uint64_t mask;
};
#ifndef SA_RESTORER
#define SA_RESTORER 0x04000000
#endif

static long raw_rt_sigaction(bool inline_asm, int sig, const struct ksa *a, struct ksa *o)
{
#if defined(__x86_64__)
	if (inline_asm) {
		long r;
		register long r10 __asm__("r10") = 8;
		__asm__ volatile("syscall"
				 : "=a"(r)
				 : "0"((long)SYS_rt_sigaction), "D"((long)sig), "S"(a), "d"(o),
				   "r"(r10)
				 : "rcx", "r11", "memory");
		return r;
	}
#else
	(void)inline_asm;
#endif
	return syscall(SYS_rt_sigaction, sig, a, o, 8);
}

static int raw_case(bool inline_asm)
{
	bad_sends("before raw");
	/* libc's restorer, from what the kernel has (the shim's handler, or SIG_DFL: then none
	 * is there to copy, and glibc's is found through a libc sigaction of another signal). */
	struct ksa k, o;
	struct sigaction tmp = { .sa_handler = SIG_IGN };
	sigemptyset(&tmp.sa_mask);
	sigaction(SIGURG, &tmp, NULL);
	if (raw_rt_sigaction(false, SIGURG, NULL, &o))
		die("rt_sigaction read");
	k = (struct ksa){ .handler = (void *)on_segv_info,
			  .flags = SA_SIGINFO | (o.flags & SA_RESTORER),
			  .restorer = o.restorer };
	if (raw_rt_sigaction(inline_asm, SIGSEGV, &k, NULL))
		die("rt_sigaction set");
	/* Enough good sends for the shim's periodic look (every SHIM_FAULT_EVERY = 1024 touches,
	 * shim/shim.h) to see an inline one. */
	fanouts(400);
	bad_sends("after raw");
	int v = poke();
	show_fault("fault repaired");
	say("value read after repair %d", v);
	drain();
	return 0;
}

static int altstack_case(void)
{
	static char alt[1 << 16];
	stack_t ss = { .ss_sp = alt, .ss_size = sizeof(alt) };
	if (sigaltstack(&ss, NULL))
		die("sigaltstack");
	alt_lo = alt;
	alt_hi = alt + sizeof(alt);
	struct sigaction sa = { .sa_sigaction = on_segv_info, .sa_flags = SA_SIGINFO | SA_ONSTACK };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, NULL);
	bad_sends("altstack");
	jump = true;
	if (!sigsetjmp(jb, 1))
		poke();
	jump = false;
	show_fault("fault");
	say("handler ran on the alternate stack: %d", on_alt);
	bad_sends("after");
	drain();
	return 0;
}

/* What sigaction reads back: the handler and the flags the program can set. (After
 * SA_RESETHAND the kernel puts SIG_DFL in the handler and leaves the flags as they were.) */
static const char *disposition(int sig)
{
	static char out[128];
	struct sigaction o;
	if (sigaction(sig, NULL, &o))
		return "sigaction failed";
	const void *h = (o.sa_flags & SA_SIGINFO) ? (const void *)o.sa_sigaction
						   : (const void *)o.sa_handler;
	snprintf(out, sizeof(out), "%s flags%s%s%s%s%s",
		 h == (const void *)SIG_DFL ? "SIG_DFL"
		 : h == (const void *)SIG_IGN ? "SIG_IGN"
		 : h == (const void *)on_segv_info ? "on_segv_info"
		 : h == (const void *)on_segv_plain ? "on_segv_plain"
		 : h == (const void *)on_usr1 ? "on_usr1" : "another handler",
		 o.sa_flags & SA_SIGINFO ? " SIGINFO" : "", o.sa_flags & SA_RESETHAND ? " RESETHAND" : "",
		 o.sa_flags & SA_NODEFER ? " NODEFER" : "", o.sa_flags & SA_RESTART ? " RESTART" : "",
		 o.sa_flags & SA_ONSTACK ? " ONSTACK" : "");
	return out;
}

/* A child that faults: how it ended (the kernel's default action, core or not). */
static void child_fault(void)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		struct rlimit rl = { 0, 0 }; /* no core file from this one */
		setrlimit(RLIMIT_CORE, &rl);
		poke();
		say("child: no fault: FAIL");
		_exit(3);
	}
	int st;
	if (waitpid(pid, &st, 0) != pid)
		die("waitpid");
	if (WIFSIGNALED(st))
		say("child killed by signal %d", WTERMSIG(st));
	else
		say("child exited %d", WEXITSTATUS(st));
}

static int resethand_case(void)
{
	bad_sends("before");
	struct sigaction sa = { .sa_sigaction = on_segv_info,
				.sa_flags = SA_SIGINFO | SA_RESETHAND };
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGUSR2);
	if (sigaction(SIGSEGV, &sa, NULL))
		die("sigaction");
	say("SIGSEGV before the fault: %s", disposition(SIGSEGV));
	int v = poke();
	show_fault("fault repaired");
	say("value read after repair %d", v);
	say("SIGSEGV after the fault: %s", disposition(SIGSEGV));
	mprotect(region + PAGE, PAGE, PROT_NONE);
	bad_sends("after");
	child_fault();
	say("count after the child %d", (int)count);
	/* Another signal's SA_RESETHAND handler (batch mode calls it through its trampoline). */
	struct sigaction u = { .sa_handler = on_usr1, .sa_flags = SA_RESETHAND | SA_RESTART };
	sigemptyset(&u.sa_mask);
	if (sigaction(SIGUSR1, &u, NULL))
		die("sigaction SIGUSR1");
	say("SIGUSR1 before: %s", disposition(SIGUSR1));
	raise(SIGUSR1);
	say("SIGUSR1 after one: %s, handler ran %d", disposition(SIGUSR1), (int)usr1s);
	bad_sends("after SIGUSR1");
	drain();
	return 0;
}

static int nodefer_case(void)
{
	bad_sends("before");
	struct sigaction sa = { .sa_sigaction = on_segv_info, .sa_flags = SA_SIGINFO | SA_NODEFER };
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGUSR2);
	if (sigaction(SIGSEGV, &sa, NULL))
		die("sigaction");
	nest = true;
	int v = poke();
	nest = false;
	show_fault("faults (one nested)");
	say("deepest nesting %d, value read after repair %d", (int)max_depth, v);
	mprotect(region + PAGE, PAGE, PROT_NONE);
	bad_sends("after");
	drain();
	return 0;
}

static int fork_case(void)
{
	set_handler(true);
	bad_sends("parent");
	drain();
	sent = 0;
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		bad_sends("child");
		readback(true);
		int v = poke();
		show_fault("child fault repaired");
		say("child value read after repair %d", v);
		mprotect(region + PAGE, PAGE, PROT_NONE);
		bad_sends("child after");
		drain();
		fflush(stdout);
		exit(0);
	}
	int st;
	if (waitpid(pid, &st, 0) != pid)
		die("waitpid");
	say("child: %s %d", WIFSIGNALED(st) ? "killed by signal" : "exited",
	    WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	bad_sends("parent after");
	int v = poke();
	show_fault("parent fault repaired");
	say("parent value read after repair %d", v);
	drain();
	return 0;
}

static int exec_case(char **argv)
{
	bad_sends("before exec");
	drain();
	struct sigaction sa = { .sa_sigaction = on_segv_info, .sa_flags = SA_SIGINFO };
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, NULL) || signal(SIGSEGV, SIG_IGN) == SIG_ERR)
		die("sigaction");
	say("before exec: SIGSEGV %s, SIGBUS %s", disposition(SIGSEGV), disposition(SIGBUS));
	fflush(stdout);
	char *args[] = { argv[0], "exec-image", NULL };
	execv("/proc/self/exe", args);
	die("execv");
}

static int exec_image_case(void)
{
	say("after exec: SIGSEGV %s, SIGBUS %s", disposition(SIGSEGV), disposition(SIGBUS));
	bad_sends("after exec");
	say("after the sends: SIGSEGV %s, SIGBUS %s", disposition(SIGSEGV), disposition(SIGBUS));
	drain();
	return 0;
}

static volatile int usr1_errno = -1;
static void on_usr1_send(int sig)
{
	(void)sig;
	int saved = errno;
	usr1_errno = sendto(tx, region + PAGE, 64, 0, (struct sockaddr *)&dest[1],
			    sizeof(dest[1])) < 0 ? errno : 0;
	errno = saved;
}

static void early_handler(void)
{
	struct sigaction sa = { .sa_handler = on_usr1_send, .sa_flags = SA_RESTART };
	sigfillset(&sa.sa_mask); /* SIGSEGV and SIGBUS blocked while it runs */
	if (sigaction(SIGUSR1, &sa, NULL))
		die("sigaction SIGUSR1");
}

static int early_case(void)
{
	bad_sends("before");
	fanouts(2);
	raise(SIGUSR1);
	say("send from the handler: %s", usr1_errno < 0 ? "not run" : usr1_errno ? strerrorname_np(usr1_errno) : "sent");
	bad_sends("after");
	drain();
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	if (!strcmp(argv[1], "early"))
		early_handler(); /* before anything the shim intercepts */
	setvbuf(stdout, NULL, _IOLBF, 0);
	setup();
	const char *c = argv[1];
	if (!strcmp(c, "handler") && argc == 4)
		return handler_case(!strcmp(argv[2], "siginfo"), !strcmp(argv[3], "before"));
	if (!strcmp(c, "iov"))
		return iov_case();
	if (!strncmp(c, "die", 3))
		return die_case(c);
	if (!strcmp(c, "raw") || !strcmp(c, "rawasm"))
		return raw_case(!strcmp(c, "rawasm"));
	if (!strcmp(c, "altstack"))
		return altstack_case();
	if (!strcmp(c, "resethand"))
		return resethand_case();
	if (!strcmp(c, "nodefer"))
		return nodefer_case();
	if (!strcmp(c, "fork"))
		return fork_case();
	if (!strcmp(c, "exec"))
		return exec_case(argv);
	if (!strcmp(c, "early"))
		return early_case();
	if (!strcmp(c, "exec-image"))
		return exec_image_case();
	fprintf(stderr, "usage: %s handler siginfo|plain before|after | iov | die | die-ign | "
			"die-raise | raw | rawasm | altstack | resethand | nodefer | fork | exec | early\n", argv[0]);
	return 2;
}
