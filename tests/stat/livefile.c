/* SPDX-License-Identifier: MIT */
/*
 * livefile: the live-counter file (lib/obs/shm-format.h) against the program around it: its
 * descriptors, its forks, its exec, damage to the file, and the LD_PRELOAD shim sharing the
 * file with the program's own libmultisend. Run by tests/stat/stat-test.sh (suite 'stat');
 * each mode prints what it checked and exits 0, or says what failed and exits 1.
 *
 *   livefile fds DIR       no descriptor is kept for the file: a program that closes the number
 *                          the file would have had and opens a socket there keeps that socket
 *                          through a fork (atfork) and ms_ctx_free; a forked child that lives
 *                          on does not keep the file's lock (the parent's ms_ctx_free frees it)
 *   livefile damage DIR    an odd sequence word and garbage in the file's slot: ms_ctx_snapshot
 *                          and (offload) ms_ctx_stats return at once with the context's own
 *                          counts, and the next send (under offload: ms_post, sent by the
 *                          offload thread) rewrites a consistent slot
 *   livefile truncate DIR  the file truncated under a running publisher (to nothing, and to
 *                          its first page under a second context; also under offload): the
 *                          publisher lives on, its
 *                          counts and deliveries exact, and a new file takes the path with
 *                          every value (twice over: a second truncation is survived too); a
 *                          SIGBUS that is not about the file reaches the program's own handler
 *                          (sent, and a fault on a mapping of the program's), or without one
 *                          kills as it would have
 *   livefile shared DIR    under the shim, MULTISEND_STATS_SHM=DIR/shared: the program frees its
 *                          last context while the shim's slot is live, then makes another; the
 *                          file is the same, the shim's slot in it (prints the shim's calls;
 *                          the slot's sequence word is left odd, which the shim must not carry
 *                          on: stat-test.sh reads its final values)
 *   livefile shared-trunc DIR  under the shim, MULTISEND_STATS_SHM=DIR/shared-trunc: the file the
 *                          shim and the program share, truncated: both live on, and a new file
 *                          holds both slots at their old places, the context's with its count
 *                          (stat-test.sh reads the shim's final values)
 *   livefile shim-sigbus DIR  under the shim, MULTISEND_STATS_SHM=DIR/sigbus: the program sets
 *                          and reads its own SIGBUS handler (sigaction, signal) and never sees
 *                          the shim's, which still comes first: the file truncated twice is
 *                          made again each time, the program's own fault reaches its handler,
 *                          or with SIG_DFL kills it
 *   livefile exec DIR      under the shim, MULTISEND_STATS_SHM=DIR/exec-%p: a socket opened on
 *                          the number the shim's file would have had survives the shim's exec
 *                          path (checked by the new image: livefile exec-check FD)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <multisend.h>

#include "shm-format.h"

#define LIVETEST_NAME "livefile"
#include "livetest.h"

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	struct dirent *e;
	CHECK(d, "opendir /proc/self/fd: %s", strerror(errno));
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the directory's own */
}

/* The number the next open would get. */
static int lowest_free(void)
{
	int fd = open("/dev/null", O_RDONLY);
	CHECK(fd >= 0, "open /dev/null: %s", strerror(errno));
	close(fd);
	return fd;
}

static bool is_udp_socket(int fd)
{
	int type = 0;
	socklen_t len = sizeof(type);
	return fcntl(fd, F_GETFD) >= 0 &&
	       getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_DGRAM;
}

static struct ms_ctx *new_ctx(const char *path, uint32_t flags)
{
	struct ms_config c = { .size = sizeof(c), .backend = MS_BACKEND_LOOP, .stats_shm = path,
			       .flags = MS_CFG_IGNORE_ENV | flags };
	struct ms_ctx *ctx = NULL;
	int err = ms_ctx_new(&ctx, &c);
	CHECK(err == 0, "ms_ctx_new: %s", ms_strerror(err));
	return ctx;
}

/* A read-write mapping of the file (to look at it, and to damage it). */
static struct ms_shm_header *map(const char *path)
{
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
	void *m = mmap(NULL, MS_SHM_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	CHECK(m != MAP_FAILED, "mmap %s: %s", path, strerror(errno));
	struct ms_shm_header *h = m;
	CHECK(h->magic == MS_SHM_MAGIC && h->version == MS_SHM_VERSION, "%s: not a live-counter "
	      "file", path);
	return h;
}

static struct ms_shm_slot *slot_at(struct ms_shm_header *h, unsigned i)
{
	return (struct ms_shm_slot *)(h + 1) + i;
}

static struct ms_shm_slot *slot_named(struct ms_shm_header *h, const char *name)
{
	uint32_t used = __atomic_load_n(&h->used, __ATOMIC_ACQUIRE);
	for (unsigned i = 0; i < used && i < MS_SHM_SLOTS; i++)
		if (!strncmp(slot_at(h, i)->name, name, MS_SHM_NAME))
			return slot_at(h, i);
	return NULL;
}

/* ---- fds ------------------------------------------------------------------------------------ */

static int fds(const char *dir)
{
	char tmpl[4096], path[4096];
	snprintf(tmpl, sizeof(tmpl), "%s/fds-%%p", dir);
	snprintf(path, sizeof(path), "%s/fds-%d", dir, (int)getpid());
	int before = count_fds(), num = lowest_free();
	struct ms_ctx *ctx = new_ctx(tmpl, 0);
	struct ms_shm_header *h = map(path);
	CHECK(h->pid == getpid() && h->used == 1, "the file is not this process's");
	CHECK(count_fds() == before, "%d descriptors after ms_ctx_new, %d before", count_fds(),
	      before);
	CHECK(write_locked(path), "the file has no live owner");
	/* The program closes "our" number, whatever it was, and a socket takes it. */
	close(num);
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(s == num, "the socket got %d, not %d", s, num);
	pid_t pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0)
		_exit(is_udp_socket(s) ? 0 : 3);
	int st;
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "in a forked child, the socket on %d was closed (status %#x)", num, st);
	/* A child that lives on after the parent is done with the file holds no lock on it. */
	int go[2];
	CHECK(pipe(go) == 0, "pipe");
	pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		char c;
		close(go[1]);
		_exit(read(go[0], &c, 1) == 0 && is_udp_socket(s) ? 0 : 3);
	}
	close(go[0]);
	ms_ctx_free(ctx);
	CHECK(is_udp_socket(s), "ms_ctx_free closed the socket on %d", num);
	CHECK(slot_at(h, 0)->state == MS_SHM_CLOSED, "the slot is not closed");
	CHECK(!write_locked(path), "the file still has a live owner (the forked child)");
	close(go[1]);
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "the child's socket on %d was closed (status %#x)", num, st);
	close(s);
	CHECK(count_fds() == before, "%d descriptors at the end, %d before", count_fds(), before);
	munmap(h, MS_SHM_FILE_SIZE);
	unlink(path);
	printf("livefile fds: no descriptor kept; the socket on %d survived a fork and "
	       "ms_ctx_free; a forked child holds no lock\n", num);
	return 0;
}

/* ---- damage --------------------------------------------------------------------------------- */

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = "livefile damage: FAIL: a call did not return in 20 s\n";
	if (write(2, m, sizeof(m) - 1) < 0)
		_exit(1);
	_exit(1);
}

/* The file's slot, read the way a reader does: true when consistent, with its fanouts. */
static bool file_fanouts(struct ms_shm_slot *sl, uint64_t *v)
{
	uint64_t seq = __atomic_load_n(&sl->seq, __ATOMIC_ACQUIRE);
	*v = __atomic_load_n(&sl->counter[0], __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return !(seq & 1) && __atomic_load_n(&sl->seq, __ATOMIC_RELAXED) == seq;
}

/* n messages: posted (ms_post, sent by the offload thread) on an offload context, else sent. */
static void send_or_post(struct ms_group *g, int n, uint32_t flags)
{
	if (!(flags & MS_CFG_OFFLOAD)) {
		send_n(g, n);
		return;
	}
	for (int k = 0; k < n; k++)
		CHECK(ms_post(g, "live", 4, 0, NULL) == 1, "ms_post");
}

static void damage_one(const char *dir, const char *name, uint32_t flags)
{
	char tmpl[4096], path[4096];
	snprintf(tmpl, sizeof(tmpl), "%s/%s-%%p", dir, name);
	snprintf(path, sizeof(path), "%s/%s-%d", dir, name, (int)getpid());
	struct sockaddr_in a;
	int r = receiver(&a), s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ms_ctx *ctx = new_ctx(tmpl, flags);
	struct ms_group *g;
	CHECK(ms_group_new(ctx, &g) == 0, "ms_group_new");
	struct ms_dest d = { .fd = s, .addr = (struct sockaddr *)&a, .addrlen = sizeof(a) };
	CHECK(ms_group_add(g, &d) >= 0, "ms_group_add");
	send_or_post(g, 5, flags);
	ms_ctx_drain(ctx);
	struct ms_shm_header *h = map(path);
	struct ms_shm_slot *sl = slot_at(h, 0);
	uint64_t v = 0;
	CHECK(file_fanouts(sl, &v) && v == 5, "the file says %llu fanouts, not 5",
	      (unsigned long long)v);

	/* Damage: a sequence word that stays odd, garbage values. */
	__atomic_store_n(&sl->seq, 12345, __ATOMIC_RELEASE);
	for (unsigned k = 0; k < MS_SHM_COUNTERS; k++)
		sl->counter[k] = 0xdeadbeefdeadbeefull;
	alarm(20);
	struct ms_snapshot snap = { .size = sizeof(snap) };
	CHECK(ms_ctx_snapshot(ctx, &snap) == 0, "ms_ctx_snapshot failed");
	CHECK(snap.stats.fanouts == 5 && snap.stats.dests_accepted == 5,
	      "the snapshot says %llu fanouts, not its own 5",
	      (unsigned long long)snap.stats.fanouts);
	struct ms_stats st = { .size = sizeof(st) };
	CHECK(ms_ctx_stats(ctx, &st) == 0 && st.fanouts == 5 && st.dests_accepted == 5,
	      "ms_ctx_stats says %llu fanouts, not 5", (unsigned long long)st.fanouts);
	alarm(0);

	/* The next send writes a consistent slot again, from the context's own counts. */
	send_or_post(g, 1, flags);
	ms_ctx_drain(ctx);
	CHECK(file_fanouts(sl, &v) && v == 6, "after a send, the file says %llu fanouts (seq "
	      "%llu), not 6", (unsigned long long)v, (unsigned long long)sl->seq);
	CHECK(sl->counter[1] == 6 && sl->counter[2] == 6, "dests_attempted/accepted not mirrored");
	ms_group_free(g);
	ms_ctx_free(ctx);
	munmap(h, MS_SHM_FILE_SIZE);
	unlink(path);
	close(s);
	close(r);
}

static int damage(const char *dir)
{
	signal(SIGALRM, on_alarm);
	damage_one(dir, "damage", 0);
	damage_one(dir, "damage-offload", MS_CFG_OFFLOAD);
	printf("livefile damage: an odd sequence word and garbage in the file: snapshot and stats "
	       "(also under offload) gave the context's own counts at once, the next send "
	       "rewrote the slot\n");
	return 0;
}

/* ---- truncate ------------------------------------------------------------------------------- */

/* The slot's counter by that name. */
static uint64_t counter(const struct ms_shm_slot *sl, const char *name)
{
	for (unsigned k = 0; k < sl->ncounters && k < MS_SHM_COUNTERS; k++)
		if (!strncmp(sl->counter_name[k], name, MS_SHM_NAME))
			return sl->counter[k];
	CHECK(0, "no counter named %s", name);
	return 0;
}

/* The file at path, as a reader finds it: a full-size live-counter file with a live owner,
 * this process's, not the inode *ino was (which it then becomes); the slots before idx the other
 * contexts', slot idx ours, read consistently. */
static void check_new_file(const char *path, ino_t *ino, unsigned idx, uint64_t fanouts,
			   const char *when)
{
	struct stat st;
	CHECK(stat(path, &st) == 0, "%s: no file at %s: %s", when, path, strerror(errno));
	CHECK(st.st_ino != *ino, "%s: the path still names the truncated file (size %lld)", when,
	      (long long)st.st_size);
	CHECK((size_t)st.st_size == MS_SHM_FILE_SIZE, "%s: the new file has %lld bytes", when,
	      (long long)st.st_size);
	CHECK(write_locked(path), "%s: the new file has no live owner", when);
	struct ms_shm_header *h = map(path);
	CHECK(h->pid == getpid() && h->used == idx + 1, "%s: pid %d, used %u", when, (int)h->pid,
	      h->used);
	for (unsigned i = 0; i < idx; i++)
		CHECK(slot_at(h, i)->state == MS_SHM_LIVE && !strncmp(slot_at(h, i)->name, "ctx ", 4),
		      "%s: slot %u of the other context is not in the new file", when, i);
	struct ms_shm_slot *sl = slot_at(h, idx);
	uint64_t v = 0;
	CHECK(sl->state == MS_SHM_LIVE && !strncmp(sl->name, "ctx ", 4) &&
		      !strcmp(sl->counter_name[0], "fanouts") && sl->ncounters > 4,
	      "%s: the new file's slot is not the context's (state %u, name '%.32s')", when,
	      sl->state, sl->name);
	CHECK(sl->backend == MS_BACKEND_LOOP, "%s: the new file's slot says backend %u, not loop's",
	      when, sl->backend);
	CHECK(file_fanouts(sl, &v) && v == fanouts, "%s: the new file says %llu fanouts, not %llu",
	      when, (unsigned long long)v, (unsigned long long)fanouts);
	uint64_t att = counter(sl, "dests_attempted"), acc = counter(sl, "dests_accepted"),
		 bytes = counter(sl, "bytes");
	CHECK(att == fanouts && acc == fanouts && bytes == 4 * fanouts,
	      "%s: attempted %llu, accepted %llu, bytes %llu", when, (unsigned long long)att,
	      (unsigned long long)acc, (unsigned long long)bytes);
	*ino = st.st_ino;
	munmap(h, MS_SHM_FILE_SIZE);
}

/* Every datagram the receiver has: n of them, each "live". */
static void drain_n(int r, int n)
{
	char buf[16];
	for (int k = 0; k < n; k++) {
		ssize_t got = recv(r, buf, sizeof(buf), MSG_DONTWAIT);
		CHECK(got == 4 && !memcmp(buf, "live", 4), "datagram %d of %d: %zd bytes", k + 1, n,
		      got);
	}
	CHECK(recv(r, buf, sizeof(buf), MSG_DONTWAIT) < 0 && errno == EAGAIN, "more than %d", n);
}

/* cut: the size the file is truncated to (a store is noticed only where it falls in a page
 * cut off: slot 0's counters are in the first page, which any size but 0 keeps); first: a
 * context before ours, so that ours is in slot 1 (from the second page on). */
static void truncate_one(const char *dir, const char *name, uint32_t flags, off_t cut,
			 bool first)
{
	char tmpl[4096], path[4096], what[64];
	snprintf(tmpl, sizeof(tmpl), "%s/%s-%%p", dir, name);
	snprintf(path, sizeof(path), "%s/%s-%d", dir, name, (int)getpid());
	struct sockaddr_in a;
	int r = receiver(&a), s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ms_ctx *other = first ? new_ctx(tmpl, 0) : NULL;
	struct ms_ctx *ctx = new_ctx(tmpl, flags);
	struct ms_group *g;
	CHECK(ms_group_new(ctx, &g) == 0, "ms_group_new");
	struct ms_dest d = { .fd = s, .addr = (struct sockaddr *)&a, .addrlen = sizeof(a) };
	CHECK(ms_group_add(g, &d) >= 0, "ms_group_add");
	send_or_post(g, 5, flags);
	ms_ctx_drain(ctx);
	struct stat st;
	CHECK(stat(path, &st) == 0, "stat %s", path);
	ino_t ino = st.st_ino;
	uint64_t total = 5;
	for (int round = 1; round <= 2; round++) {
		/* What an operator's `truncate -s` does to the file under the publisher. */
		CHECK(truncate(path, cut) == 0, "truncate: %s", strerror(errno));
		send_or_post(g, 3, flags);
		ms_ctx_drain(ctx);
		total += 3;
		struct ms_stats sts = { .size = sizeof(sts) };
		CHECK(ms_ctx_stats(ctx, &sts) == 0 && sts.fanouts == total &&
			      sts.dests_accepted == total && sts.dests_failed == 0,
		      "round %d: ms_ctx_stats says %llu fanouts, %llu failed, not %llu", round,
		      (unsigned long long)sts.fanouts, (unsigned long long)sts.dests_failed,
		      (unsigned long long)total);
		snprintf(what, sizeof(what), "%s, truncation %d", name, round);
		check_new_file(path, &ino, first, total, what);
	}
	drain_n(r, (int)total);
	ms_group_free(g);
	ms_ctx_free(ctx);
	ms_ctx_free(other);
	CHECK(!write_locked(path), "%s: the file keeps a live owner after ms_ctx_free", name);
	unlink(path);
	close(s);
	close(r);
}

static volatile sig_atomic_t own_bus;
static volatile void *own_addr;
static sigjmp_buf own_jmp;

static void on_own_bus(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	own_bus++;
	own_addr = si->si_addr;
	if (si->si_code > 0)
		siglongjmp(own_jmp, 1);
}

/* A mapping of a file of the program's own, truncated: the store faults. */
static volatile char *own_mapping(const char *dir)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/own-%d", dir, (int)getpid());
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0 && ftruncate(fd, 4096) == 0, "%s: %s", path, strerror(errno));
	void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(m != MAP_FAILED, "mmap: %s", strerror(errno));
	CHECK(ftruncate(fd, 0) == 0, "ftruncate");
	close(fd);
	unlink(path);
	return m;
}

static int truncate_mode(const char *dir)
{
	/* The program's own SIGBUS handler, set before the library's. */
	struct sigaction sa = { .sa_sigaction = on_own_bus, .sa_flags = SA_SIGINFO };
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGBUS, &sa, NULL) == 0, "sigaction");
	signal(SIGALRM, on_alarm);
	alarm(60);
	truncate_one(dir, "trunc-empty", 0, 0, false);
	truncate_one(dir, "trunc-page", 0, 4096, true);
	truncate_one(dir, "trunc-offload", MS_CFG_OFFLOAD, 0, false);
	CHECK(own_bus == 0, "the program's handler saw %d SIGBUS", (int)own_bus);

	/* A signal that is not about the file still reaches the program's handler: sent... */
	struct ms_ctx *ctx = new_ctx(NULL, 0); /* (no file: the handler is installed already) */
	raise(SIGBUS);
	CHECK(own_bus == 1, "a SIGBUS sent to the program reached its handler %d times",
	      (int)own_bus);
	/* ...and a fault on a mapping of its own, with that mapping's address. */
	volatile char *m = own_mapping(dir);
	if (!sigsetjmp(own_jmp, 1))
		m[10] = 1;
	CHECK(own_bus == 2 && own_addr == m + 10, "the program's own fault: %d calls, address "
	      "%p, not %p", (int)own_bus, (void *)own_addr, (void *)(m + 10));
	munmap((void *)m, 4096);
	ms_ctx_free(ctx);

	/* Without a handler of the program's, such a fault kills as it would have. */
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		signal(SIGBUS, SIG_DFL);
		char tmpl[4096];
		snprintf(tmpl, sizeof(tmpl), "%s/trunc-child-%%p", dir);
		new_ctx(tmpl, 0); /* the library's handler, chained to SIG_DFL */
		volatile char *cm = own_mapping(dir);
		cm[10] = 1;
		_exit(0); /* not reached */
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid && WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS,
	      "a fault on the program's own mapping under the library's handler: status %#x, "
	      "not killed by SIGBUS", st);
	char child[4096];
	snprintf(child, sizeof(child), "%s/trunc-child-%d", dir, (int)pid);
	unlink(child);
	alarm(0);
	printf("livefile truncate: truncated to nothing, to one page, under offload, twice "
	       "each: the publisher lived on with exact counts and a new file took the path; the "
	       "program's own SIGBUS (sent, and a fault of its own) reached its handler, and "
	       "without one killed the process\n");
	return 0;
}

/* ---- shared --------------------------------------------------------------------------------- */

static int shared(const char *dir)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/shared", dir);
	const char *env = getenv("MULTISEND_STATS_SHM");
	CHECK(env && !strcmp(env, path), "run with MULTISEND_STATS_SHM=%s", path);
	struct sockaddr_in a;
	int r = receiver(&a), s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	unsigned long calls = 0;

	struct ms_config c = { .size = sizeof(c), .backend = MS_BACKEND_LOOP };
	struct ms_ctx *ctx = NULL;
	CHECK(ms_ctx_new(&ctx, &c) == 0, "ms_ctx_new");
	struct ms_shm_header *h = map(path);
	CHECK(h->pid == getpid(), "the file is not this process's");
	/* The shim publishes at its first send: it takes the second slot of the same file. */
	while (!slot_named(h, "shim") && calls < 1000000) {
		CHECK(sendto(s, "x", 1, 0, (struct sockaddr *)&a, sizeof(a)) == 1, "sendto");
		calls++;
	}
	CHECK(slot_named(h, "shim"), "no slot named shim after %lu sends: run under the shim "
	      "(metrics mode) with MULTISEND_STATS_SHM", calls);
	/* Damage the shim's slot: a sequence word left odd. The shim writes its own count
	 * there at its next publication (at exit at the latest), never carrying ours on. */
	__atomic_store_n(&slot_named(h, "shim")->seq, 12345, __ATOMIC_RELEASE);
	struct stat st1, st2;
	CHECK(stat(path, &st1) == 0, "stat");
	/* The program's last context goes while the shim still publishes. */
	ms_ctx_free(ctx);
	bool locked = write_locked(path);
	CHECK(ms_ctx_new(&ctx, &c) == 0, "ms_ctx_new again");
	CHECK(stat(path, &st2) == 0 && st2.st_ino == st1.st_ino && st2.st_dev == st1.st_dev,
	      "the file was replaced under the shim");
	CHECK(h->used == 3 && slot_at(h, 0)->state == MS_SHM_CLOSED &&
		      slot_named(h, "shim")->state == MS_SHM_LIVE &&
		      slot_at(h, 2)->state == MS_SHM_LIVE && !strncmp(slot_at(h, 2)->name, "ctx ", 4),
	      "the file was set up again under the shim (used %u)", h->used);
	CHECK(locked, "the file lost its live owner while the shim's slot was live");
	for (int k = 0; k < 100; k++, calls++)
		CHECK(sendto(s, "x", 1, 0, (struct sockaddr *)&a, sizeof(a)) == 1, "sendto");
	ms_ctx_free(ctx);
	munmap(h, MS_SHM_FILE_SIZE);
	close(r);
	printf("livefile shared: calls %lu\n", calls);
	return 0;
}

/* Under the shim: the file the shim and the program share, truncated. Both copies of the code
 * live on and each puts its slot, at its old place, into one new file. */
static int shared_trunc(const char *dir)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/shared-trunc", dir);
	const char *env = getenv("MULTISEND_STATS_SHM");
	CHECK(env && !strcmp(env, path), "run with MULTISEND_STATS_SHM=%s", path);
	struct sockaddr_in a;
	int r = receiver(&a), s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	unsigned long calls = 0;
	struct ms_config c = { .size = sizeof(c), .backend = MS_BACKEND_LOOP };
	struct ms_ctx *ctx = NULL;
	CHECK(ms_ctx_new(&ctx, &c) == 0, "ms_ctx_new");
	struct ms_group *g;
	CHECK(ms_group_new(ctx, &g) == 0, "ms_group_new");
	struct ms_dest d = { .fd = s, .addr = (struct sockaddr *)&a, .addrlen = sizeof(a) };
	CHECK(ms_group_add(g, &d) >= 0, "ms_group_add");
	struct ms_shm_header *h = map(path);
	while (!slot_named(h, "shim") && calls < 1000000) {
		CHECK(sendto(s, "x", 1, 0, (struct sockaddr *)&a, sizeof(a)) == 1, "sendto");
		calls++;
	}
	CHECK(slot_named(h, "shim") == slot_at(h, 1), "no slot named shim (slot 1) after %lu "
	      "sends: run under the shim (metrics mode) with MULTISEND_STATS_SHM", calls);
	munmap(h, MS_SHM_FILE_SIZE);
	struct stat st;
	CHECK(stat(path, &st) == 0, "stat");
	ino_t ino = st.st_ino;
	CHECK(truncate(path, 0) == 0, "truncate: %s", strerror(errno));
	/* Until both have written into a new file: the context at its next send, the shim at
	 * its next publication. */
	uint64_t sent = 0;
	for (;;) {
		CHECK(ms_send(g, "live", 4, 0, NULL) == 1, "ms_send");
		sent++;
		CHECK(sendto(s, "x", 1, 0, (struct sockaddr *)&a, sizeof(a)) == 1, "sendto");
		calls++;
		if (stat(path, &st) == 0 && st.st_ino != ino &&
		    (size_t)st.st_size == MS_SHM_FILE_SIZE) {
			h = map(path);
			bool both = h->used == 2 && slot_at(h, 0)->state == MS_SHM_LIVE &&
				    slot_at(h, 1)->state == MS_SHM_LIVE;
			if (both)
				break;
			munmap(h, MS_SHM_FILE_SIZE);
		}
		CHECK(calls < 1000000, "no new file with both slots after %lu sends", calls);
	}
	CHECK(!strncmp(slot_at(h, 0)->name, "ctx ", 4) && !strcmp(slot_at(h, 1)->name, "shim"),
	      "the new file's slots are '%.32s' and '%.32s'", slot_at(h, 0)->name,
	      slot_at(h, 1)->name);
	CHECK(write_locked(path), "the new file has no live owner");
	for (int k = 0; k < 100; k++, calls++)
		CHECK(sendto(s, "x", 1, 0, (struct sockaddr *)&a, sizeof(a)) == 1, "sendto");
	uint64_t v = 0;
	CHECK(file_fanouts(slot_at(h, 0), &v) && v == sent, "the context's slot says %llu "
	      "fanouts, not %llu", (unsigned long long)v, (unsigned long long)sent);
	ms_group_free(g);
	ms_ctx_free(ctx);
	munmap(h, MS_SHM_FILE_SIZE);
	close(r);
	printf("livefile shared-trunc: calls %lu\n", calls + sent);
	return 0;
}

/* Under the shim (no context of the program's): the file made again after each truncation,
 * the shim's slot back in it. */
static unsigned long renewed_under_shim(const char *path, int s, const struct sockaddr_in *a)
{
	struct stat st;
	CHECK(stat(path, &st) == 0, "stat");
	ino_t ino = st.st_ino;
	CHECK(truncate(path, 0) == 0, "truncate: %s", strerror(errno));
	for (unsigned long calls = 1;; calls++) {
		CHECK(sendto(s, "x", 1, 0, (const struct sockaddr *)a, sizeof(*a)) == 1, "sendto");
		if (stat(path, &st) == 0 && st.st_ino != ino &&
		    (size_t)st.st_size == MS_SHM_FILE_SIZE) {
			struct ms_shm_header *h = map(path);
			bool back = slot_named(h, "shim") &&
				    slot_named(h, "shim")->state == MS_SHM_LIVE;
			munmap(h, MS_SHM_FILE_SIZE);
			if (back)
				return calls;
		}
		CHECK(calls < 1000000, "no new file with the shim's slot after %lu sends", calls);
	}
}

/* Under the shim, MULTISEND_STATS_SHM=DIR/sigbus: the program's SIGBUS handler is its own to
 * set and read, the shim's is never seen, and still chains to it. */
static int shim_sigbus(const char *dir)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/sigbus", dir);
	const char *env = getenv("MULTISEND_STATS_SHM");
	CHECK(env && !strcmp(env, path), "run with MULTISEND_STATS_SHM=%s", path);
	struct sockaddr_in a;
	int r = receiver(&a), s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	unsigned long calls = 0;
	struct sigaction sa = { .sa_sigaction = on_own_bus, .sa_flags = SA_SIGINFO }, o;
	sigemptyset(&sa.sa_mask);
	/* The program's handler, set at its start (before the shim's first publication). */
	CHECK(sigaction(SIGBUS, &sa, NULL) == 0, "sigaction");
	struct stat st;
	while (stat(path, &st) != 0 && calls < 1000000) {
		CHECK(sendto(s, "x", 1, 0, (struct sockaddr *)&a, sizeof(a)) == 1, "sendto");
		calls++;
	}
	CHECK(stat(path, &st) == 0, "no %s after %lu sends: run under the shim", path, calls);
	CHECK(sigaction(SIGBUS, NULL, &o) == 0 && (o.sa_flags & SA_SIGINFO) &&
		      o.sa_sigaction == on_own_bus,
	      "the program asks for its SIGBUS handler and gets another (flags %#x)", o.sa_flags);
	calls += renewed_under_shim(path, s, &a);
	CHECK(own_bus == 0, "the truncation reached the program's handler");
	volatile char *m = own_mapping(dir);
	if (!sigsetjmp(own_jmp, 1))
		m[10] = 1;
	CHECK(own_bus == 1 && own_addr == m + 10, "the program's own fault: %d calls, address "
	      "%p, not %p", (int)own_bus, (void *)own_addr, (void *)(m + 10));
	munmap((void *)m, 4096);
	/* signal() gives the handler back and sets the default, which the program then reads. */
	sighandler_t prev = signal(SIGBUS, SIG_DFL);
	CHECK(prev == (sighandler_t)(void (*)(void))on_own_bus, "signal() returned another handler");
	CHECK(sigaction(SIGBUS, NULL, &o) == 0 && !(o.sa_flags & SA_SIGINFO) &&
		      o.sa_handler == SIG_DFL, "after signal(SIGBUS, SIG_DFL) the program reads "
	      "another handler");
	calls += renewed_under_shim(path, s, &a);
	/* With the program's SIGBUS at its default, its own fault kills it. */
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		volatile char *cm = own_mapping(dir);
		cm[10] = 1;
		_exit(0); /* not reached */
	}
	int wst;
	CHECK(waitpid(pid, &wst, 0) == pid && WIFSIGNALED(wst) && WTERMSIG(wst) == SIGBUS,
	      "the program's own fault with its SIGBUS at the default: status %#x", wst);
	close(r);
	printf("livefile shim-sigbus: calls %lu\n", calls);
	return 0;
}

/* ---- exec ----------------------------------------------------------------------------------- */

static int exec_check(const char *arg)
{
	int fd = atoi(arg);
	CHECK(is_udp_socket(fd), "after exec, descriptor %d is no longer the program's socket",
	      fd);
	printf("livefile exec: the socket on %d survived the shim's exec path\n", fd);
	return 0;
}

static int exec_mode(const char *dir, const char *self)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/exec-%d", dir, (int)getpid());
	struct sockaddr_in a;
	int r = receiver(&a), s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int before = count_fds(), num = lowest_free();
	struct stat st;
	unsigned long calls = 0;
	while (stat(path, &st) != 0 && calls < 1000000) {
		CHECK(sendto(s, "x", 1, 0, (struct sockaddr *)&a, sizeof(a)) == 1, "sendto");
		calls++;
	}
	CHECK(stat(path, &st) == 0, "no %s after %lu sends: run under the shim with "
	      "MULTISEND_STATS_SHM", path, calls);
	CHECK(count_fds() == before, "the shim keeps a descriptor: %d, %d before", count_fds(),
	      before);
	close(num);
	int t = socket(AF_INET, SOCK_DGRAM, 0); /* inherited by the new image */
	CHECK(t == num, "the socket got %d, not %d", t, num);
	close(r);
	char fdarg[16];
	snprintf(fdarg, sizeof(fdarg), "%d", t);
	execl(self, self, "exec-check", fdarg, (char *)NULL);
	CHECK(0, "exec %s: %s", self, strerror(errno));
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: livefile fds|damage|truncate|shared|shared-trunc|shim-sigbus|exec DIR | exec-check FD\n");
		return 2;
	}
	mode = argv[1];
	if (!strcmp(mode, "fds"))
		return fds(argv[2]);
	if (!strcmp(mode, "damage"))
		return damage(argv[2]);
	if (!strcmp(mode, "truncate"))
		return truncate_mode(argv[2]);
	if (!strcmp(mode, "shim-sigbus"))
		return shim_sigbus(argv[2]);
	if (!strcmp(mode, "shared-trunc"))
		return shared_trunc(argv[2]);
	if (!strcmp(mode, "shared"))
		return shared(argv[2]);
	if (!strcmp(mode, "exec"))
		return exec_mode(argv[2], "/proc/self/exe");
	if (!strcmp(mode, "exec-check"))
		return exec_check(argv[2]);
	fprintf(stderr, "livefile: unknown mode %s\n", mode);
	return 2;
}
