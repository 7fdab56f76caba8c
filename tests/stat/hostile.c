/* SPDX-License-Identifier: MIT */
/*
 * hostile: write a live-counter file (lib/obs/shm-format.h) as an attacker would, in the
 * writer's format, hold its write lock (so that a reader takes it for a live publisher's) and
 * keep it until a line (or EOF) on stdin. Run by tests/stat/stat-test.sh (suite 'stat'),
 * usually as another user (setpriv), to prove what multisend-stat does with such files.
 *
 *   hostile FILE [distinct|same] [busy] [pid=N] [slots=N] [names=N]
 *     distinct  every counter and histogram of every slot has a name of its own (the
 *               default): slots x (names + 4) distinct metric names
 *     same      every slot has the same names (a large but honest file)
 *     busy      every slot's sequence word stays odd: a writer forever mid-update
 *     pid=N     the pid the header names (default: this process)
 *     slots=N   slots in use, 1..64 (default 64); names=N counters per slot (default 64)
 *     mode=OCT  the file's mode (default 644; 600: another user's private file)
 *
 * Prints "held PID" once the file is there and locked; exits 0 after the line on stdin,
 * leaving the file (the caller removes it), 1 on a failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <multisend.h>

#include "shm-format.h"

int main(int argc, char **argv)
{
	unsigned nslots = MS_SHM_SLOTS, nnames = MS_SHM_COUNTERS;
	int distinct = 1, busy = 0;
	long pid = getpid();
	mode_t fmode = 0644;

	if (argc < 2) {
		fprintf(stderr, "usage: hostile FILE [distinct|same] [busy] [pid=N] [slots=N] "
			"[names=N]\n");
		return 1;
	}
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "distinct"))
			distinct = 1;
		else if (!strcmp(argv[i], "same"))
			distinct = 0;
		else if (!strcmp(argv[i], "busy"))
			busy = 1;
		else if (!strncmp(argv[i], "pid=", 4))
			pid = strtol(argv[i] + 4, NULL, 10);
		else if (!strncmp(argv[i], "slots=", 6))
			nslots = (unsigned)strtoul(argv[i] + 6, NULL, 10);
		else if (!strncmp(argv[i], "mode=", 5))
			fmode = (mode_t)strtoul(argv[i] + 5, NULL, 8);
		else if (!strncmp(argv[i], "names=", 6))
			nnames = (unsigned)strtoul(argv[i] + 6, NULL, 10);
		else {
			fprintf(stderr, "hostile: unknown argument '%s'\n", argv[i]);
			return 1;
		}
	}
	if (!nslots || nslots > MS_SHM_SLOTS || nnames > MS_SHM_COUNTERS) {
		fprintf(stderr, "hostile: slots 1..%u, names 0..%u\n", MS_SHM_SLOTS,
			MS_SHM_COUNTERS);
		return 1;
	}
	unsigned char *buf = calloc(1, MS_SHM_FILE_SIZE);
	if (!buf)
		return 1;
	struct ms_shm_header *h = (struct ms_shm_header *)buf;
	struct ms_shm_slot *slot = (struct ms_shm_slot *)(buf + sizeof(*h));
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	h->magic = MS_SHM_MAGIC;
	h->version = MS_SHM_VERSION;
	h->header_size = sizeof(*h);
	h->slot_size = sizeof(*slot);
	h->nslots = MS_SHM_SLOTS;
	h->used = nslots;
	h->pid = (int32_t)pid;
	h->start_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
	snprintf(h->program, sizeof(h->program), "hostile");
	snprintf(h->lib_version, sizeof(h->lib_version), "%s", ms_version_string());
	for (unsigned i = 0; i < nslots; i++) {
		struct ms_shm_slot *s = &slot[i];
		s->seq = busy ? 1 : 2;
		s->state = MS_SHM_LIVE;
		s->ncounters = nnames;
		s->nhists = MS_SHM_HISTS;
		snprintf(s->name, sizeof(s->name), "ctx %u hostile", i);
		for (unsigned k = 0; k < nnames; k++) {
			snprintf(s->counter_name[k], MS_SHM_NAME, "c%u_%u", distinct ? i : 0, k);
			s->counter[k] = (uint64_t)i * 1000 + k + 1;
		}
		for (unsigned k = 0; k < MS_SHM_HISTS; k++) {
			struct ms_hist *hh = &s->hist[k];
			snprintf(s->hist_name[k], MS_SHM_NAME, "h%u_%u_ns", distinct ? i : 0, k);
			hh->count = 1;
			hh->sum_ns = hh->min_ns = hh->max_ns = 1000;
			for (unsigned b = 0; b < MS_HIST_BUCKETS; b++) {
				uint64_t lo, hi;
				if (ms_hist_bucket_range(b, &lo, &hi) == 0 && lo <= 1000 &&
				    1000 <= hi)
					hh->bucket[b] = 1;
			}
		}
	}
	int fd = open(argv[1], O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, fmode);
	if (fd < 0) {
		fprintf(stderr, "hostile: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_len = 1 };
	if (fchmod(fd, fmode) < 0 || write(fd, buf, MS_SHM_FILE_SIZE) != (ssize_t)MS_SHM_FILE_SIZE ||
	    fcntl(fd, F_OFD_SETLK, &l) < 0) {
		fprintf(stderr, "hostile: %s: %s\n", argv[1], strerror(errno));
		unlink(argv[1]);
		return 1;
	}
	printf("held %ld\n", (long)getpid());
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof(line), stdin))
		line[0] = '\0';
	close(fd);
	free(buf);
	return 0;
}
