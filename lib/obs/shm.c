/* SPDX-License-Identifier: MIT */
/*
 * Live-counter files (lib/obs/shm-format.h): one per process and path, shared by the contexts (and
 * the shim) that publish there. Opening and closing take a mutex; publishing never does. No
 * descriptor is kept: the file's lock lives in the open file description that the mapping
 * holds, so the program can close and reuse any descriptor number without touching ours.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "sys.h"
#include "shm-format.h"

struct shm_file {
	char path[4096];
	struct ms_shm_header *h; /* NULL: entry unused (atomic: the SIGBUS handler reads it) */
	unsigned refs;           /* slots of ours open in it; 0 with h set: kept for the lock */
	bool owner;              /* our mapping's open file description holds a write lock */
	/* What the file was made with: its header and our slots' names, sizes and states, in
	 * private memory of the file's layout, from which a new file is made when this one is
	 * truncated under us (the slots' values come from the writers' next publications). */
	struct ms_shm_header *shadow;
	/* Set by the SIGBUS handler: the file was truncated under a store, and h is private
	 * memory now (atomic). */
	bool lost;
};

#define MAX_FILES 8
static pthread_mutex_t files_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shm_file files[MAX_FILES];
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* lib/internal.h (ms__shm_gen): bumped when a file is lost to truncation and when a new one
 * takes its place. */
unsigned ms__shm_gen_word;

/* Bumped in every forked child: a context set up before the fork must not write into its
 * parent's live-counter file (ms__own_slot), submit to its parent's io_uring ring, or count
 * on its parent's threads (lib/exec/workers.c). */
unsigned ms__fork_gen;

/* lib/internal.h (ms__shm_epoch): the "mappings valid in this process" word, in a page of its
 * own mapped MADV_WIPEONFORK (made with the first file; never unmapped). */
uint64_t *ms__shm_epoch_word;
/* The last value the word had in this process or its ancestors (inherited by any child, so
 * that a child's own value is one its parent's pointers never had). Under files_lock. */
static uint64_t epoch_last;

/* The word, made if need be (under files_lock). 0 or -errno. */
static int epoch_page(void)
{
	if (__atomic_load_n(&ms__shm_epoch_word, __ATOMIC_ACQUIRE))
		return 0;
	void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return -errno;
	/* Without it (Linux before 4.14) a child made without atfork handlers would write into
	 * memory it does not have: no live counters at all rather than that. */
	if (madvise(m, 4096, MADV_WIPEONFORK) < 0) {
		int e = -errno;
		munmap(m, 4096);
		return e == -EINVAL ? -EOPNOTSUPP : e;
	}
	*(uint64_t *)m = ++epoch_last;
	__atomic_store_n(&ms__shm_epoch_word, (uint64_t *)m, __ATOMIC_RELEASE);
	return 0;
}

/* A child made without the atfork handlers (_Fork, syscall(SYS_fork), clone) finds the word 0:
 * every entry of files[] is its parent's mapping, which it does not have (MADV_DONTFORK), and
 * files_lock may have been held by another of its parent's threads. Forget them all, never
 * touching or unmapping them (the range may hold something else of the child's by now), and
 * give the word a value of the child's own. Called before files_lock is taken. */
static void forget_inherited(void)
{
	uint64_t *w = __atomic_load_n(&ms__shm_epoch_word, __ATOMIC_ACQUIRE);
	uint64_t zero = 0;

	if (!w || __atomic_load_n(w, __ATOMIC_ACQUIRE))
		return;
	if (__atomic_compare_exchange_n(w, &zero, UINT64_MAX, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE)) {
		pthread_mutex_init(&files_lock, NULL);
		memset(files, 0, sizeof(files));
		__atomic_store_n(w, ++epoch_last, __ATOMIC_RELEASE);
		return;
	}
	while (__atomic_load_n(w, __ATOMIC_ACQUIRE) == UINT64_MAX) /* another thread's doing it */
		sched_yield();
}

static void after_fork_child(void)
{
	/* The parent's files are the parent's: the child has no mapping of them (MADV_DONTFORK,
	 * so it never holds their locks either) and no descriptor (none is kept). Forget them. */
	pthread_mutex_init(&files_lock, NULL);
	memset(files, 0, sizeof(files));
	ms__fork_gen++;
}

static void register_atfork(void)
{
	pthread_atfork(NULL, NULL, after_fork_child);
}

void ms__fork_watch(void)
{
	pthread_once(&atfork_once, register_atfork);
}

uint64_t ms__realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int ms__shm_expand(char *out, size_t cap, const char *tmpl)
{
	size_t n = 0;
	if (!tmpl || !*tmpl)
		return -EINVAL;
	for (const char *p = tmpl; *p; p++) {
		char num[16];
		const char *add = p;
		size_t len = 1;
		if (p[0] == '%' && p[1] == 'p') {
			len = (size_t)snprintf(num, sizeof(num), "%d", (int)getpid());
			add = num;
			p++;
		}
		if (n + len >= cap)
			return -EINVAL;
		memcpy(out + n, add, len);
		n += len;
	}
	out[n] = '\0';
	return 0;
}

/* This process's start time (/proc/self/stat field 22), 0 if unknown. */
static uint64_t self_start(void)
{
	char buf[1024];
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *p = strrchr(buf, ')'); /* the name may hold spaces and ')' */
	if (!p)
		return 0;
	/* after ')': state is field 3, starttime field 22 */
	for (int field = 2; field < 22 && p; field++)
		p = strchr(p + 1, ' ');
	return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* Does some open file description hold a write lock on the file? (A read lock, which any
 * reader may take, does not count.) */
static bool write_locked(int fd)
{
	struct flock l = { .l_type = F_RDLCK, .l_whence = SEEK_SET };
	return fcntl(fd, F_OFD_GETLK, &l) == 0 && l.l_type != F_UNLCK;
}

/* Map fd shared, never inherited by a forked child. */
static struct ms_shm_header *map_fd(int fd, int *err)
{
	void *m = mmap(NULL, MS_SHM_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		*err = -errno;
		return NULL;
	}
	if (madvise(m, MS_SHM_FILE_SIZE, MADV_DONTFORK) < 0) {
		*err = -errno;
		munmap(m, MS_SHM_FILE_SIZE);
		return NULL;
	}
	return m;
}

static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* renameat2(RENAME_EXCHANGE) said EINVAL once: this file system has no exchange (tests set it
 * to take the other way). */
static bool no_exchange;

/* The new file (named tmp, open as fd) takes path from the stale file `stale` that the caller
 * judged replaceable. Another writer may have judged the same file stale and replaced it
 * first: its file must keep the path. With an atomic exchange, what we displaced is looked
 * at, and given back unless it is the stale file; without one, the path is checked before and
 * after the rename. 0; -EAGAIN: the path names another file now (look again); -EBUSY: our
 * file lost the path to another one right after the rename; or the system's error. tmp is
 * gone on return, whatever happened (unless it names another's file we could not give
 * back, which is left as it is). */
static int replace_stale(const char *tmp, const char *path, const struct stat *stale, int fd)
{
	struct stat mine, there;

	if (fstat(fd, &mine) < 0) {
		int e = -errno;
		unlink(tmp);
		return e;
	}
	if (!__atomic_load_n(&no_exchange, __ATOMIC_RELAXED)) {
		if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_EXCHANGE) == 0) {
			/* tmp names what path named: the stale file, or one that took its place. */
			if (lstat(tmp, &there) == 0 && same_file(&there, stale)) {
				unlink(tmp);
				return 0;
			}
			/* Not the file we judged: give it its name back. */
			if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_EXCHANGE) == 0 &&
			    lstat(tmp, &there) == 0 && same_file(&there, &mine))
				unlink(tmp);
			return -EAGAIN;
		}
		int e = errno;
		if (e == ENOENT) { /* the stale file went meanwhile */
			unlink(tmp);
			return -EAGAIN;
		}
		if (e != EINVAL && e != ENOSYS && e != EOPNOTSUPP) {
			unlink(tmp);
			return -e;
		}
		__atomic_store_n(&no_exchange, true, __ATOMIC_RELAXED);
	}
	/* No exchange here: is the path still the stale file? Rename; is it ours now? (Only a
	 * replacement between the check and the rename can still be lost; the later check tells
	 * the loser, which then publishes nowhere rather than under a name that is not its.) */
	if (lstat(path, &there) < 0 || !same_file(&there, stale)) {
		unlink(tmp);
		return -EAGAIN;
	}
	if (rename(tmp, path) < 0) {
		int e = -errno;
		unlink(tmp);
		return e;
	}
	if (stat(path, &there) < 0 || !same_file(&there, &mine))
		return -EBUSY;
	return 0;
}

static void tmp_name(char *tmp, size_t cap, const char *dir, unsigned k)
{
	snprintf(tmp, cap, "%s/.multisend-new-%d-%llu-%u", dir, (int)getpid(),
		 (unsigned long long)ms__realtime_ns(), k);
}

/* create_file's work, with O_TMPFILE (which needs /proc/self/fd to be given a name) or with
 * a temporary name from the start. *noproc: the O_TMPFILE file could not be named. */
static struct ms_shm_header *create_file1(const char *path, mode_t mode,
					  const struct stat *stale, bool tmpfile, int *err,
					  bool *noproc)
{
	char dir[4096], tmp[4096 + 64], fdpath[64];
	const char *slash = strrchr(path, '/');
	struct ms_shm_header *h = NULL;
	bool named = false;
	int fd = -1;

	if (slash)
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path + (slash == path)), path);
	else
		snprintf(dir, sizeof(dir), ".");
	if (tmpfile)
		fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, mode);
	else
		errno = EOPNOTSUPP;
	for (unsigned k = 0; fd < 0 && k < 16; k++) {
		/* No O_TMPFILE here: a temporary name nobody can have opened yet (O_EXCL), so
		 * that nobody can hold a lock on it before ours. */
		if (errno != EOPNOTSUPP && errno != EISDIR && errno != EEXIST && errno != EINVAL)
			break;
		tmp_name(tmp, sizeof(tmp), dir, k);
		fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
		named = fd >= 0;
	}
	if (fd < 0) {
		*err = -errno;
		return NULL;
	}
	struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_len = 1 }; /* byte 0 */
	if (ftruncate(fd, (off_t)MS_SHM_FILE_SIZE) < 0 || fcntl(fd, F_OFD_SETLK, &l) < 0) {
		*err = -errno;
		goto fail;
	}
	h = map_fd(fd, err);
	if (!h)
		goto fail;
	h->version = MS_SHM_VERSION;
	h->header_size = sizeof(*h);
	h->slot_size = sizeof(struct ms_shm_slot);
	h->nslots = MS_SHM_SLOTS;
	h->pid = getpid();
	h->pid_start = self_start();
	h->start_ns = ms__realtime_ns();
	prctl(PR_GET_NAME, h->program);
	snprintf(h->lib_version, sizeof(h->lib_version), "%s", MS_VERSION_STRING);
	/* Last: a reader that sees the magic sees the rest. */
	__atomic_store_n(&h->magic, MS_SHM_MAGIC, __ATOMIC_RELEASE);

	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", fd);
	if (!named && !stale) {
		if (linkat(AT_FDCWD, fdpath, AT_FDCWD, path, AT_SYMLINK_FOLLOW) < 0) {
			*err = -errno;
			*noproc = errno == ENOENT || errno == EACCES;
			goto fail;
		}
		close(fd);
		return h;
	}
	for (unsigned k = 0; !named; k++) {
		tmp_name(tmp, sizeof(tmp), dir, k);
		if (linkat(AT_FDCWD, fdpath, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) == 0) {
			named = true;
		} else if (errno != EEXIST || k >= 16) {
			*err = -errno;
			*noproc = errno == ENOENT || errno == EACCES;
			goto fail;
		}
	}
	named = false; /* from here on, tmp is dealt with below */
	if (stale) {
		*err = replace_stale(tmp, path, stale, fd);
	} else {
		*err = link(tmp, path) < 0 ? -errno : 0;
		unlink(tmp);
	}
	if (*err)
		goto fail;
	close(fd);
	return h;
fail:
	if (named)
		unlink(tmp);
	if (h)
		munmap(h, MS_SHM_FILE_SIZE);
	close(fd);
	return NULL;
}

/* A new live-counter file under path: made without a name (or under a fresh temporary one),
 * locked, mapped and filled in before it gets the path, by replacing the stale file `stale`
 * (replace_stale), else by link (which fails with -EEXIST if a file appeared meanwhile).
 * Without /proc (a chroot, a minimal root), an O_TMPFILE file cannot be given a name: then a
 * temporary name from the start. The descriptor is closed before returning: the mapping holds
 * the lock. */
static struct ms_shm_header *create_file(const char *path, mode_t mode, const struct stat *stale,
					 int *err)
{
	bool noproc = false;
	struct ms_shm_header *h = create_file1(path, mode, stale, true, err, &noproc);
	if (!h && noproc)
		h = create_file1(path, mode, stale, false, err, &noproc);
	return h;
}

/*
 * Map the live-counter file at path (lib/obs/shm-format.h says the protocol): join it when another
 * copy of this code in this process already publishes there (*owner false), else set up a new
 * file (*owner true: our mapping holds its lock). No descriptor is kept: every one opened here
 * is closed before returning. A file with a live owner that is not this process is -EBUSY;
 * one that is not ours to replace (another user's, writable by others, not a live-counter
 * file, not a regular file) is left alone.
 */
static struct ms_shm_header *map_file(const char *path, bool *owner, int *err)
{
	for (unsigned tries = 0; tries < 8; tries++) {
		int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		if (fd < 0) {
			if (errno != ENOENT) {
				*err = errno == ELOOP ? -EEXIST : -errno;
				return NULL;
			}
			*owner = true;
			struct ms_shm_header *h = create_file(path, 0644, NULL, err);
			if (h || (*err != -EEXIST && *err != -EAGAIN))
				return h;
			continue; /* somebody made it meanwhile: look at it */
		}
		struct stat st;
		struct ms_shm_header *h = NULL;
		if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
			*err = -EINVAL;
			goto done;
		}
		if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
			*err = -EPERM; /* another user's, or others could truncate it */
			goto done;
		}
		struct ms_shm_header old = { 0 };
		if ((size_t)st.st_size >= sizeof(old) &&
		    pread(fd, &old, sizeof(old), 0) != (ssize_t)sizeof(old)) {
			*err = -EIO;
			goto done;
		}
		if (write_locked(fd)) {
			/* A live owner: this process (another copy of this code), else busy. */
			bool ours = old.magic == MS_SHM_MAGIC && old.version == MS_SHM_VERSION &&
				    old.slot_size == sizeof(struct ms_shm_slot) &&
				    old.header_size == sizeof(struct ms_shm_header) &&
				    old.nslots == MS_SHM_SLOTS &&
				    (size_t)st.st_size == MS_SHM_FILE_SIZE && old.pid == getpid() &&
				    old.pid_start == self_start();
			*err = -EBUSY;
			if (ours && (h = map_fd(fd, err))) {
				/* A lock of our own too, on a byte past the end that is this copy's,
				 * so that the file keeps a live owner as long as we map it (if a
				 * reader's read lock stops it, we publish all the same). */
				struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
						   .l_start = (off_t)(MS_SHM_FILE_SIZE + 1 +
								      ((uintptr_t)files >> 4 &
								       0xffffff)),
						   .l_len = 1 };
				*owner = fcntl(fd, F_OFD_SETLK, &l) == 0;
			}
			goto done;
		}
		if (st.st_size > 0 && old.magic != MS_SHM_MAGIC) {
			*err = -EEXIST; /* somebody's data: never ours to replace */
			goto done;
		}
		/* Stale (or empty): a new file takes its name; whoever still maps the old one
		 * keeps an intact file. */
		*owner = true;
		h = create_file(path, st.st_mode & 0755, &st, err);
		if (!h && *err == -EAGAIN) {
			close(fd);
			continue; /* another file has the path now: look at it */
		}
	done:
		close(fd);
		return h;
	}
	*err = -EBUSY;
	return NULL;
}

/* A file whose lock we hold stays mapped while any slot in it is live: another copy of this
 * code in the process may still publish there (lib/obs/shm-format.h). */
static bool any_live(const struct ms_shm_header *h)
{
	uint32_t used = __atomic_load_n(&h->used, __ATOMIC_ACQUIRE);
	const struct ms_shm_slot *s = (const struct ms_shm_slot *)(h + 1);
	for (uint32_t i = 0; i < used && i < MS_SHM_SLOTS; i++)
		if (__atomic_load_n(&s[i].state, __ATOMIC_ACQUIRE) == MS_SHM_LIVE)
			return true;
	return false;
}

/* Unmap the files none of whose slots is ours and none is live any more (under files_lock). */
static void sweep(void)
{
	for (unsigned k = 0; k < MAX_FILES; k++) {
		struct shm_file *f = &files[k];
		if (f->h && !f->refs && !(f->owner && any_live(f->h))) {
			struct ms_shm_header *h = f->h;
			__atomic_store_n(&f->h, NULL, __ATOMIC_RELEASE); /* the handler's */
			munmap(h, MS_SHM_FILE_SIZE); /* and the lock goes with it */
			if (f->shadow)
				munmap(f->shadow, MS_SHM_FILE_SIZE);
			memset(f, 0, sizeof(*f));
		}
	}
}

static void copy_name(char *dst, const char *src)
{
	snprintf(dst, MS_SHM_NAME, "%s", src ? src : "");
}

/* ---- truncation: SIGBUS ------------------------------------------------------------------
 *
 * Truncating a file that we map makes our next store into the part cut off fault with
 * SIGBUS. The publisher must not die because a monitoring file was damaged, and a file is
 * written on the send path with plain stores (no system call), so the fault itself is where
 * the truncation is noticed: a handler, installed with the first file, recognises an address
 * in one of our mappings, puts private memory in its place (the faulting store then completes
 * there, and the file's lock goes with the old mapping), and returns. The next publication
 * finds ms__shm_gen changed and calls ms__shm_renew, which makes a new file under the path
 * and moves it to the same address, so every slot pointer stays valid. A signal that is not
 * for us goes where it went before: the handler installed before ours, or the default action.
 */
static struct sigaction bus_prev;
static bool bus_installed;

/* The handler before ours, called as the kernel would have: its mask (and the signal, unless
 * SA_NODEFER) blocked while it runs, reset first with SA_RESETHAND. */
static void bus_call(const struct sigaction *p, int sig, siginfo_t *si, void *uc)
{
	sigset_t m = p->sa_mask, old;

	if (!(p->sa_flags & SA_NODEFER))
		sigaddset(&m, sig);
	sigprocmask(SIG_BLOCK, &m, &old);
	if (p->sa_flags & SA_NODEFER) {
		sigset_t self;
		sigemptyset(&self);
		sigaddset(&self, sig);
		sigprocmask(SIG_UNBLOCK, &self, NULL);
	}
	if (p->sa_flags & SA_RESETHAND) {
		memset(&bus_prev, 0, sizeof(bus_prev)); /* SIG_DFL */
		sigemptyset(&bus_prev.sa_mask);
	}
	if (p->sa_flags & SA_SIGINFO)
		p->sa_sigaction(sig, si, uc);
	else
		p->sa_handler(sig);
	sigprocmask(SIG_SETMASK, &old, NULL);
}

static void bus_chain(int sig, siginfo_t *si, void *uc)
{
	struct sigaction p = bus_prev;

	if ((p.sa_flags & SA_SIGINFO) ? p.sa_sigaction != NULL
				      : p.sa_handler != SIG_DFL && p.sa_handler != SIG_IGN) {
		bus_call(&p, sig, si, uc);
		return;
	}
	/* The default action (or SIG_IGN for a signal someone sent: ignored; a fault cannot
	 * be ignored, the kernel would have killed us). A fault re-executes the store and
	 * faults again, now with the default action; a sent signal is sent again. */
	if (si->si_code <= 0 && p.sa_handler == SIG_IGN)
		return;
	struct sigaction d = { .sa_handler = SIG_DFL };
	sigemptyset(&d.sa_mask);
	ms__sys.sigaction(sig, &d, NULL);
	if (si->si_code <= 0)
		raise(sig);
}

bool ms__shm_bus_fault(const siginfo_t *si)
{
	int saved = errno;
	uintptr_t a = (uintptr_t)si->si_addr;

	if (si->si_code <= 0) /* not the kernel's: no fault */
		return false;
	for (unsigned k = 0; k < MAX_FILES; k++) {
		struct shm_file *f = &files[k];
		uintptr_t base = (uintptr_t)__atomic_load_n(&f->h, __ATOMIC_ACQUIRE);
		if (!base || a - base >= MS_SHM_FILE_SIZE)
			continue;
		if (!__atomic_exchange_n(&f->lost, true, __ATOMIC_ACQ_REL)) {
			/* Private memory in its place, never inherited, like the file's. */
			if (mmap((void *)base, MS_SHM_FILE_SIZE, PROT_READ | PROT_WRITE,
				 MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED) {
				__atomic_store_n(&f->lost, false, __ATOMIC_RELEASE);
				break; /* no memory: the fault stays what it was */
			}
			madvise((void *)base, MS_SHM_FILE_SIZE, MADV_DONTFORK);
			__atomic_add_fetch(&ms__shm_gen_word, 1, __ATOMIC_RELEASE);
		}
		/* (Another thread's fault on it may be replacing it right now: the store
		 * faults again until it is done.) */
		errno = saved;
		return true;
	}
	errno = saved;
	return false;
}

static void on_bus(int sig, siginfo_t *si, void *uc)
{
	if (!ms__shm_bus_fault(si))
		bus_chain(sig, si, uc);
}

bool (*ms__bus_host)(void);

/* With the first file (under files_lock). */
static void bus_install(void)
{
	struct sigaction sa = { .sa_sigaction = on_bus };

	if (__atomic_load_n(&bus_installed, __ATOMIC_RELAXED))
		return;
	/* A host with a handler of its own (the LD_PRELOAD shim) calls ms__shm_bus_fault from
	 * it, and hides it from the program. */
	bool (*host)(void) = __atomic_load_n(&ms__bus_host, __ATOMIC_ACQUIRE);
	if (host && host()) {
		__atomic_store_n(&bus_installed, true, __ATOMIC_RELEASE);
		return;
	}
	ms__sys.sigaction(SIGBUS, NULL, &bus_prev);
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | (bus_prev.sa_flags & SA_RESTART);
	sigemptyset(&sa.sa_mask);
	ms__sys.sigaction(SIGBUS, &sa, NULL);
	__atomic_store_n(&bus_installed, true, __ATOMIC_RELEASE);
}

/* The shadow of a file just mapped at h: its header (under files_lock). NULL if no memory:
 * then a truncated file is not made again. */
static struct ms_shm_header *shadow_new(const struct ms_shm_header *h)
{
	void *m = mmap(NULL, MS_SHM_FILE_SIZE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	madvise(m, MS_SHM_FILE_SIZE, MADV_DONTFORK);
	memcpy(m, h, sizeof(*h));
	((struct ms_shm_header *)m)->used = 0;
	return m;
}

static struct ms_shm_slot *slot_at(struct ms_shm_header *h, uint32_t i)
{
	return (struct ms_shm_slot *)(h + 1) + i;
}

/* What a slot is set up with once (its names and how many of each), from s to d. */
static void slot_names(struct ms_shm_slot *d, const struct ms_shm_slot *s)
{
	memcpy(d->name, s->name, sizeof(d->name));
	memcpy(d->counter_name, s->counter_name, sizeof(d->counter_name));
	memcpy(d->hist_name, s->hist_name, sizeof(d->hist_name));
	d->ncounters = s->ncounters;
	d->nhists = s->nhists;
}

/* Our slot i of f, as its shadow has it, into the file at n; its values from f's mapping
 * (whatever the writers stored since the fault). State last, as ms__shm_open does. */
static void slot_remake(struct ms_shm_header *n, const struct shm_file *f, uint32_t i)
{
	const struct ms_shm_slot *v = slot_at(f->h, i);
	struct ms_shm_slot *d = slot_at(n, i);

	slot_names(d, slot_at(f->shadow, i));
	memcpy(d->counter, v->counter, sizeof(d->counter));
	memcpy(d->hist, v->hist, sizeof(d->hist));
	d->updated_ns = v->updated_ns;
	__atomic_store_n(&d->seq, __atomic_load_n(&v->seq, __ATOMIC_RELAXED) & ~UINT64_C(1),
			 __ATOMIC_RELAXED);
	__atomic_store_n(&d->state, slot_at(f->shadow, i)->state, __ATOMIC_RELEASE);
}

static struct ms_shm_header *map_file(const char *path, bool *owner, int *err);

/* Don't try to make a lost file again more often than this (its path may be taken). */
#define RENEW_GAP_NS 1000000000ull
static uint64_t renew_next_ns;

int ms__shm_renew(void)
{
	bool tried = false;
	int ret = 0;

	forget_inherited();
	/* Never wait on the send path: a renewal under way, or a context being made or freed,
	 * is looked at again by the next publication. */
	if (pthread_mutex_trylock(&files_lock))
		return -EAGAIN;
	uint64_t now = ms__realtime_ns();
	for (unsigned k = 0; k < MAX_FILES; k++) {
		struct shm_file *f = &files[k];
		if (!f->h || !__atomic_load_n(&f->lost, __ATOMIC_ACQUIRE))
			continue;
		if (!f->shadow || now < renew_next_ns) {
			ret = -EAGAIN;
			continue;
		}
		bool owner = false;
		int err = 0;
		tried = true;
		struct ms_shm_header *n = map_file(f->path, &owner, &err);
		if (!n) {
			ret = err ? err : -EBUSY;
			continue;
		}
		uint32_t used = __atomic_load_n(&f->shadow->used, __ATOMIC_RELAXED);
		for (uint32_t i = 0; i < used && i < MS_SHM_SLOTS; i++)
			if (__atomic_load_n(&slot_at(f->shadow, i)->state, __ATOMIC_RELAXED) !=
			    MS_SHM_FREE)
				slot_remake(n, f, i);
		/* Our slots keep their places: the slots before them are someone else's
		 * (another copy of this code in this process) or nobody's. */
		uint32_t u = __atomic_load_n(&n->used, __ATOMIC_RELAXED);
		while (u < used && !__atomic_compare_exchange_n(&n->used, &u, used, false,
								__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			;
		/* The new file where the old one was: every pointer into it stays good. The move
		 * takes the process's mappings lock, so a store either lands before (in the
		 * private memory) or after (in the new file). */
		if (mremap(n, MS_SHM_FILE_SIZE, MS_SHM_FILE_SIZE, MREMAP_MAYMOVE | MREMAP_FIXED,
			   f->h) == MAP_FAILED) {
			ret = -errno;
			munmap(n, MS_SHM_FILE_SIZE);
			continue;
		}
		f->owner = owner;
		__atomic_store_n(&f->lost, false, __ATOMIC_RELEASE);
		__atomic_add_fetch(&ms__shm_gen_word, 1, __ATOMIC_RELEASE);
	}
	if (ret && tried)
		renew_next_ns = now + RENEW_GAP_NS;
	pthread_mutex_unlock(&files_lock);
	return ret;
}

bool ms__shm_caught_up(unsigned *gen)
{
	unsigned g = ms__shm_gen(); /* before: a truncation during the renewal is seen next time */

	if (ms__shm_renew())
		return false;
	*gen = g;
	return true;
}

struct ms_shm_slot *ms__shm_open(const char *tmpl, const char *name,
				 const char *const *counters, unsigned nc,
				 const char *const *hists, unsigned nh, int *err)
{
	char path[4096];
	int e = ms__shm_expand(path, sizeof(path), tmpl);
	struct ms_shm_slot *slot = NULL;

	if (e)
		goto fail;
	if (nc > MS_SHM_COUNTERS || nh > MS_SHM_HISTS) {
		e = -EINVAL;
		goto fail;
	}
	ms__fork_watch();
	forget_inherited();
	pthread_mutex_lock(&files_lock);
	struct shm_file *f = NULL, *free_f = NULL;
	sweep();
	for (unsigned k = 0; k < MAX_FILES; k++) {
		if (files[k].h && !strcmp(files[k].path, path))
			f = &files[k];
		else if (!files[k].h && !free_f)
			free_f = &files[k];
	}
	if (!f) {
		if (!free_f) {
			e = -EMFILE;
			goto unlock;
		}
		bool owner = false;
		struct ms_shm_header *h = NULL;
		if ((e = epoch_page()) || !(h = map_file(path, &owner, &e)))
			goto unlock;
		f = free_f;
		snprintf(f->path, sizeof(f->path), "%s", path);
		f->owner = owner;
		f->lost = false;
		f->shadow = shadow_new(h);
		bus_install();
		__atomic_store_n(&f->h, h, __ATOMIC_RELEASE);
	}
	/* Atomic: another copy of this code in the process may be taking slots too. */
	uint32_t used = __atomic_load_n(&f->h->used, __ATOMIC_RELAXED);
	do {
		if (used >= MS_SHM_SLOTS) {
			e = -ENOSPC;
			sweep();
			goto unlock;
		}
	} while (!__atomic_compare_exchange_n(&f->h->used, &used, used + 1, false,
					      __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
	f->refs++;
	slot = (struct ms_shm_slot *)((char *)f->h + sizeof(*f->h)) + used;
	copy_name(slot->name, name);
	for (unsigned k = 0; k < nc; k++)
		copy_name(slot->counter_name[k], counters[k]);
	for (unsigned k = 0; k < nh; k++)
		copy_name(slot->hist_name[k], hists[k]);
	slot->ncounters = nc;
	slot->nhists = nh;
	if (f->shadow) { /* what a new file would be made with */
		struct ms_shm_slot *sh = slot_at(f->shadow, used);
		slot_names(sh, slot);
		sh->state = MS_SHM_LIVE;
		if (f->shadow->used < used + 1)
			f->shadow->used = used + 1;
	}
	/* Last: a reader that sees the slot live sees its names. */
	__atomic_store_n(&slot->state, MS_SHM_LIVE, __ATOMIC_RELEASE);
unlock:
	pthread_mutex_unlock(&files_lock);
	if (slot)
		return slot;
fail:
	if (err)
		*err = e;
	return NULL;
}

void ms__shm_close(struct ms_shm_slot *slot)
{
	if (!slot)
		return;
	forget_inherited(); /* a slot of our parent's is then in no entry: never touched */
	pthread_mutex_lock(&files_lock);
	for (unsigned k = 0; k < MAX_FILES; k++) {
		struct shm_file *f = &files[k];
		char *base = (char *)f->h;
		if (!f->refs || (char *)slot < base || (char *)slot >= base + MS_SHM_FILE_SIZE)
			continue;
		__atomic_store_n(&slot->state, MS_SHM_CLOSED, __ATOMIC_RELEASE);
		if (f->shadow)
			slot_at(f->shadow, (uint32_t)(slot - slot_at(f->h, 0)))->state =
				MS_SHM_CLOSED;
		f->refs--;
		break;
	}
	sweep();
	pthread_mutex_unlock(&files_lock);
}
