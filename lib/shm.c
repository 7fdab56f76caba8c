/* SPDX-License-Identifier: MIT */
/*
 * Live-counter files (lib/shm-format.h): one per process and path, shared by the contexts (and
 * the shim) that publish there. Opening and closing take a lock; publishing never does.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
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
#include "shm-format.h"

struct shm_file {
	char path[4096];
	struct ms_shm_header *h;
	unsigned refs;
	pid_t pid; /* the process that mapped it (a forked child maps its own) */
};

#define MAX_FILES 8
static pthread_mutex_t files_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shm_file files[MAX_FILES];

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

/* Is the file's publisher, other than us, still running? */
static bool owner_alive(const struct ms_shm_header *h)
{
	if (h->magic != MS_SHM_MAGIC || h->pid <= 0 || h->pid == getpid())
		return false;
	return kill(h->pid, 0) == 0 || errno == EPERM;
}

static struct ms_shm_header *map_file(const char *path, int *err)
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
		goto out;
	}
	if ((size_t)st.st_size >= sizeof(struct ms_shm_header)) {
		/* Someone's file: ours to take over only if it is this format and its owner
		 * has gone. This process's own (another copy of this code in it, the shim's
		 * and the program's library, say) is shared as it is. */
		struct ms_shm_header old;
		if (pread(fd, &old, sizeof(old), 0) != (ssize_t)sizeof(old)) {
			*err = -EIO;
			goto out;
		}
		if (old.magic != MS_SHM_MAGIC) {
			*err = -EEXIST;
			goto out;
		}
		if (owner_alive(&old)) {
			*err = -EBUSY;
			goto out;
		}
		if (old.pid == getpid() && (size_t)st.st_size == MS_SHM_FILE_SIZE &&
		    old.version == MS_SHM_VERSION && old.slot_size == sizeof(struct ms_shm_slot)) {
			m = mmap(NULL, MS_SHM_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			if (m == MAP_FAILED)
				*err = -errno;
			goto out;
		}
	}
	/* Start from zeros: a reader must never see the previous owner's slots as ours. */
	if (ftruncate(fd, 0) < 0 || ftruncate(fd, (off_t)MS_SHM_FILE_SIZE) < 0) {
		*err = -errno;
		goto out;
	}
	m = mmap(NULL, MS_SHM_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		*err = -errno;
		goto out;
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
out:
	close(fd);
	return m == MAP_FAILED ? NULL : m;
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
	pthread_mutex_lock(&files_lock);
	struct shm_file *f = NULL, *free_f = NULL;
	for (unsigned k = 0; k < MAX_FILES; k++) {
		if (files[k].refs && files[k].pid != getpid()) {
			/* Inherited across fork: the parent's file, not ours to write. */
			munmap(files[k].h, MS_SHM_FILE_SIZE);
			files[k].refs = 0;
		}
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
		struct ms_shm_header *h = map_file(path, &e);
		if (!h)
			goto unlock;
		f = free_f;
		snprintf(f->path, sizeof(f->path), "%s", path);
		f->h = h;
		f->pid = getpid();
	}
	/* Atomic: another copy of this code in the process may be taking slots too. */
	uint32_t used = __atomic_load_n(&f->h->used, __ATOMIC_RELAXED);
	do {
		if (used >= MS_SHM_SLOTS) {
			e = -ENOSPC;
			if (!f->refs)
				munmap(f->h, MS_SHM_FILE_SIZE);
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
		if (!f->refs || f->pid != getpid() || (char *)slot < base ||
		    (char *)slot >= base + MS_SHM_FILE_SIZE)
			continue;
		__atomic_store_n(&slot->state, MS_SHM_CLOSED, __ATOMIC_RELEASE);
		if (--f->refs == 0)
			munmap(f->h, MS_SHM_FILE_SIZE);
		break;
	}
	pthread_mutex_unlock(&files_lock);
}
