/* SPDX-License-Identifier: MIT */
/*
 * Live-counter files (lib/shm-format.h): one per process and path, shared by the contexts (and
 * the shim) that publish there. Opening and closing take a lock; publishing never does.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "shm-format.h"

struct shm_file {
	char path[4096];
	struct ms_shm_header *h;
	unsigned refs;
	int fd; /* held open: its exclusive flock says the file has a live owner */
};

#define MAX_FILES 8
static pthread_mutex_t files_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shm_file files[MAX_FILES];
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* Bumped in every forked child: a context set up before the fork must not write into its
 * parent's live-counter file (ms__own_slot), submit to its parent's io_uring ring, or count
 * on its parent's threads (lib/workers.c). */
unsigned ms__fork_gen;

static void after_fork_child(void)
{
	/* The parent's files are the parent's: forget them (the mappings stay, unused, so that a
	 * context still pointing there never touches unmapped memory) and drop the copies of
	 * their descriptors, which would otherwise hold the parent's lock past its death. */
	pthread_mutex_init(&files_lock, NULL);
	for (unsigned k = 0; k < MAX_FILES; k++) {
		if (files[k].refs) {
			close(files[k].fd);
			files[k].refs = 0;
		}
	}
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

/*
 * Map the file at path, setting it up unless this process already publishes there (another
 * copy of this code in it: the shim's and the program's library). Ownership is an exclusive
 * flock held as long as the mapping (it works across pid namespaces and survives pid reuse):
 * a file whose lock is free has no live owner and is set up from zeros; a locked one belongs
 * to a running process and is left alone. Only a file of ours (our uid, not writable by others)
 * that is empty or already a live-counter file is ever taken.
 */
static struct ms_shm_header *map_file(const char *path, int *fd_out, int *err)
{
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0) {
		*err = -errno;
		return NULL;
	}
	struct stat st;
	void *m = MAP_FAILED;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		*err = -EINVAL;
		goto fail;
	}
	if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
		*err = -EPERM; /* someone else could truncate it under us: SIGBUS in ms_send */
		goto fail;
	}
	struct ms_shm_header old = { 0 };
	if ((size_t)st.st_size >= sizeof(old) &&
	    pread(fd, &old, sizeof(old), 0) != (ssize_t)sizeof(old)) {
		*err = -EIO;
		goto fail;
	}
	bool ours = old.magic == MS_SHM_MAGIC && old.version == MS_SHM_VERSION &&
		    old.slot_size == sizeof(struct ms_shm_slot) &&
		    old.header_size == sizeof(struct ms_shm_header) &&
		    (size_t)st.st_size == MS_SHM_FILE_SIZE;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno != EWOULDBLOCK) {
			*err = -errno;
			goto fail;
		}
		/* Held: by a live process. If that is this one, share the file as it is. */
		if (!ours || old.pid != getpid()) {
			*err = -EBUSY;
			goto fail;
		}
		m = mmap(NULL, MS_SHM_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED) {
			*err = -errno;
			goto fail;
		}
		*fd_out = fd; /* holds no lock: the owner copy's descriptor does */
		return m;
	}
	if (st.st_size > 0 && old.magic != MS_SHM_MAGIC) {
		*err = -EEXIST; /* somebody's data: never ours to truncate */
		goto fail;
	}
	/* Start from zeros: a reader must never see the previous owner's slots as ours. */
	if (ftruncate(fd, 0) < 0 || ftruncate(fd, (off_t)MS_SHM_FILE_SIZE) < 0) {
		*err = -errno;
		goto fail;
	}
	m = mmap(NULL, MS_SHM_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		*err = -errno;
		goto fail;
	}
	struct ms_shm_header *h = m;
	h->version = MS_SHM_VERSION;
	h->header_size = sizeof(*h);
	h->slot_size = sizeof(struct ms_shm_slot);
	h->nslots = MS_SHM_SLOTS;
	h->pid = getpid();
	h->start_ns = ms__realtime_ns();
	prctl(PR_GET_NAME, h->program);
	snprintf(h->lib_version, sizeof(h->lib_version), "%s", MS_VERSION_STRING);
	/* Last: a reader that sees the magic sees the rest. */
	__atomic_store_n(&h->magic, MS_SHM_MAGIC, __ATOMIC_RELEASE);
	*fd_out = fd;
	return h;
fail:
	close(fd);
	return NULL;
}

static void copy_name(char *dst, const char *src)
{
	snprintf(dst, MS_SHM_NAME, "%s", src ? src : "");
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
	pthread_mutex_lock(&files_lock);
	struct shm_file *f = NULL, *free_f = NULL;
	for (unsigned k = 0; k < MAX_FILES; k++) {
		if (files[k].refs && !strcmp(files[k].path, path))
			f = &files[k];
		else if (!files[k].refs && !free_f)
			free_f = &files[k];
	}
	if (!f) {
		if (!free_f) {
			e = -EMFILE;
			goto unlock;
		}
		int fd = -1;
		struct ms_shm_header *h = map_file(path, &fd, &e);
		if (!h)
			goto unlock;
		f = free_f;
		snprintf(f->path, sizeof(f->path), "%s", path);
		f->h = h;
		f->fd = fd;
	}
	/* Atomic: another copy of this code in the process may be taking slots too. */
	uint32_t used = __atomic_load_n(&f->h->used, __ATOMIC_RELAXED);
	do {
		if (used >= MS_SHM_SLOTS) {
			e = -ENOSPC;
			if (!f->refs) {
				munmap(f->h, MS_SHM_FILE_SIZE);
				close(f->fd);
			}
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
	pthread_mutex_lock(&files_lock);
	for (unsigned k = 0; k < MAX_FILES; k++) {
		struct shm_file *f = &files[k];
		char *base = (char *)f->h;
		if (!f->refs || (char *)slot < base || (char *)slot >= base + MS_SHM_FILE_SIZE)
			continue;
		__atomic_store_n(&slot->state, MS_SHM_CLOSED, __ATOMIC_RELEASE);
		if (--f->refs == 0) {
			munmap(f->h, MS_SHM_FILE_SIZE);
			close(f->fd); /* and the lock goes with it */
		}
		break;
	}
	pthread_mutex_unlock(&files_lock);
}
