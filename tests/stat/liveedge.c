/* SPDX-License-Identifier: MIT */
/*
 * liveedge: the live-counter file (lib/obs/shm-format.h) where the process around it is unusual.
 * Run by tests/stat/stat-test.sh (suite 'stat'); each mode prints what it checked and exits 0,
 * says what failed and exits 1, or exits 77 when it cannot be run here.
 *
 *   liveedge rawfork DIR   run with MULTISEND_STATS_SHM=DIR/rawfork, under the shim if it is
 *                          there: after sends through a context and through the shim, a child
 *                          made by _Fork() (no atfork handler: it still has the context's
 *                          pointer into a mapping it does not have, MADV_DONTFORK) sends on
 *                          the inherited context, frees it and leaves by exit() (the shim's
 *                          exit path); a child made by syscall(SYS_fork) execs /bin/true (the
 *                          shim's exec path). Both exit 0; the parent's file keeps its name,
 *                          its live owner and the parent's counts (prints the shim's calls for
 *                          stat-test.sh to compare with the closed file).
 *   liveedge noproc DIR    run where /proc/self/fd is missing (a mount over /proc or over
 *                          /proc/PID/fd, so that an O_TMPFILE file cannot be linked): a new file
 *                          is made and a stale one replaced all the same, under their names,
 *                          locked, with no temporary name left behind.
 *   liveedge hold FILE     publish in FILE (a context, one send-free slot), print "held PID"
 *                          and keep the file until a line (or EOF) on stdin; then free the
 *                          context and exit 0. (stat-test.sh pidns runs it in a PID namespace
 *                          of its own.)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <multisend.h>

#include "shm-format.h"

#define LIVETEST_NAME "liveedge"
#include "livetest.h"

/* A read-only copy of the file's header and slots. */
static void read_file(const char *path, struct ms_shm_header *h, struct ms_shm_slot *slots)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
	CHECK(pread(fd, h, sizeof(*h), 0) == (ssize_t)sizeof(*h), "read %s", path);
	CHECK(h->magic == MS_SHM_MAGIC && h->version == MS_SHM_VERSION,
	      "%s: not a live-counter file", path);
	if (slots)
		CHECK(pread(fd, slots, MS_SHM_SLOTS * sizeof(*slots), sizeof(*h)) ==
			      (ssize_t)(MS_SHM_SLOTS * sizeof(*slots)),
		      "read %s's slots", path);
	close(fd);
}

static const struct ms_shm_slot *named(const struct ms_shm_header *h,
				       const struct ms_shm_slot *slots, const char *name)
{
	for (unsigned i = 0; i < h->used && i < MS_SHM_SLOTS; i++)
		if (!strncmp(slots[i].name, name, strlen(name)))
			return &slots[i];
	return NULL;
}

static void wait_ok(pid_t pid, const char *what)
{
	int st = 0;
	CHECK(pid > 0, "%s: %s", what, strerror(errno));
	CHECK(waitpid(pid, &st, 0) == pid, "waitpid: %s", strerror(errno));
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: %s %d", what,
	      WIFSIGNALED(st) ? "killed by signal" : "exit status",
	      WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

/* ---- rawfork -------------------------------------------------------------------------------- */

static int rawfork(const char *dir)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/rawfork", dir);
	const char *env = getenv("MULTISEND_STATS_SHM");
	CHECK(env && !strcmp(env, path), "run with MULTISEND_STATS_SHM=%s", path);
	bool shim = getenv("LD_PRELOAD") && strstr(getenv("LD_PRELOAD"), "libmultisend-preload");
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
	send_n(g, 5);
	struct ms_shm_header h;
	static struct ms_shm_slot slots[MS_SHM_SLOTS];
	read_file(path, &h, slots);
	CHECK(h.pid == getpid(), "the file is not this process's");
	/* The shim publishes at its first send: the second slot of the same file. */
	while (shim && calls < 1000000) {
		read_file(path, &h, slots);
		if (named(&h, slots, "shim"))
			break;
		CHECK(sendto(s, "x", 1, 0, (struct sockaddr *)&a, sizeof(a)) == 1, "sendto");
		calls++;
	}
	CHECK(!shim || named(&h, slots, "shim"), "no slot named shim after %lu sends", calls);
	struct stat st1, st2;
	CHECK(stat(path, &st1) == 0, "stat %s", path);

	/* _Fork: no atfork handler runs in the child. */
	pid_t pid = _Fork();
	if (pid == 0) {
		send_n(g, 3); /* into its own memory; never into its parent's file */
		ms_group_free(g);
		ms_ctx_free(ctx);
		exit(0); /* the shim's exit path publishes its final totals */
	}
	wait_ok(pid, "the child made by _Fork()");

	/* A raw fork system call, then exec: the shim's exec path. */
	pid = (pid_t)syscall(SYS_fork);
	if (pid == 0) {
		execl("/bin/true", "true", (char *)NULL);
		_exit(126);
	}
	wait_ok(pid, "the child made by syscall(SYS_fork) that execs /bin/true");

	/* The parent's file: the same, locked, its slots live with the parent's counts. */
	send_n(g, 2);
	for (int k = 0; shim && k < 100; k++, calls++)
		CHECK(sendto(s, "x", 1, 0, (struct sockaddr *)&a, sizeof(a)) == 1, "sendto");
	CHECK(stat(path, &st2) == 0 && st2.st_ino == st1.st_ino && st2.st_dev == st1.st_dev,
	      "the file was replaced");
	CHECK(write_locked(path), "the file lost its live owner");
	read_file(path, &h, slots);
	const struct ms_shm_slot *cs = named(&h, slots, "ctx ");
	CHECK(h.pid == getpid() && cs && cs->state == MS_SHM_LIVE,
	      "the context's slot is not live in the parent's file");
	CHECK(!(cs->seq & 1) && cs->counter[0] == 7 && cs->counter[2] == 7,
	      "the file says %llu fanouts, %llu accepted (seq %llu), not 7",
	      (unsigned long long)cs->counter[0], (unsigned long long)cs->counter[2],
	      (unsigned long long)cs->seq);
	CHECK(!shim || named(&h, slots, "shim")->state == MS_SHM_LIVE, "the shim's slot is closed");
	CHECK(h.used == (shim ? 2u : 1u), "%u slots used", h.used);
	struct ms_stats stats = { .size = sizeof(stats) };
	CHECK(ms_ctx_stats(ctx, &stats) == 0 && stats.fanouts == 7, "ms_ctx_stats: %llu fanouts",
	      (unsigned long long)stats.fanouts);
	ms_group_free(g);
	ms_ctx_free(ctx);
	close(s);
	close(r);
	printf("liveedge rawfork: children of _Fork() and syscall(SYS_fork)+exec exited 0, "
	       "the parent's file intact\n");
	/* The shim's count: our sendto calls and the loop backend's 7 (one sendto a fan-out). */
	printf("liveedge rawfork: calls %lu\n", calls + 7);
	return 0;
}

/* ---- noproc --------------------------------------------------------------------------------- */

static unsigned leftovers(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	unsigned n = 0;
	CHECK(d, "opendir %s: %s", dir, strerror(errno));
	while ((e = readdir(d)))
		n += !strncmp(e->d_name, ".multisend-new-", 15);
	closedir(d);
	return n;
}

static struct ms_ctx *new_ctx(const char *path)
{
	struct ms_config c = { .size = sizeof(c), .backend = MS_BACKEND_LOOP, .stats_shm = path,
			       .flags = MS_CFG_IGNORE_ENV };
	struct ms_ctx *ctx = NULL;
	int err = ms_ctx_new(&ctx, &c);
	CHECK(err == 0, "ms_ctx_new: %s", ms_strerror(err));
	return ctx;
}

static int noproc(const char *dir)
{
	char path[4096], stale[4096];
	struct stat st;
	if (stat("/proc/self/fd", &st) == 0 && S_ISDIR(st.st_mode)) {
		DIR *d = opendir("/proc/self/fd");
		bool empty = true;
		struct dirent *e;
		while (d && (e = readdir(d)))
			empty &= e->d_name[0] == '.';
		if (d)
			closedir(d);
		if (!empty) {
			fprintf(stderr, "liveedge noproc: /proc/self/fd is there: run it without\n");
			return 77;
		}
	}
	snprintf(path, sizeof(path), "%s/noproc-new", dir);
	snprintf(stale, sizeof(stale), "%s/noproc-stale", dir);

	/* A new file. */
	struct ms_ctx *ctx = new_ctx(path);
	struct ms_shm_header h;
	CHECK(stat(path, &st) == 0, "no %s: %s", path, strerror(errno));
	read_file(path, &h, NULL);
	CHECK(h.pid == getpid() && h.used == 1, "the new file is not this process's");
	CHECK(write_locked(path), "the new file has no live owner");

	/* A stale one (a copy of the live one: the lock is not copied) replaced. */
	int in = open(path, O_RDONLY | O_CLOEXEC);
	int out = open(stale, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	static char buf[MS_SHM_FILE_SIZE];
	CHECK(in >= 0 && out >= 0 && read(in, buf, sizeof(buf)) == (ssize_t)sizeof(buf) &&
		      write(out, buf, sizeof(buf)) == (ssize_t)sizeof(buf),
	      "copy to %s: %s", stale, strerror(errno));
	close(in);
	close(out);
	struct stat old;
	CHECK(stat(stale, &old) == 0 && !write_locked(stale), "the copy is locked");
	struct ms_ctx *ctx2 = new_ctx(stale);
	CHECK(stat(stale, &st) == 0 && st.st_ino != old.st_ino, "the stale file was not replaced");
	CHECK(write_locked(stale), "the replacement has no live owner");
	read_file(stale, &h, NULL);
	CHECK(h.pid == getpid() && h.used == 1, "the replacement is not this process's");
	CHECK(leftovers(dir) == 0, "%u temporary names left in %s", leftovers(dir), dir);
	ms_ctx_free(ctx2);
	ms_ctx_free(ctx);
	CHECK(!write_locked(path) && !write_locked(stale), "a lock kept after ms_ctx_free");
	unlink(path);
	unlink(stale);
	printf("liveedge noproc: without /proc/self/fd, a new file made and a stale one replaced, "
	       "locked, no temporary name left\n");
	return 0;
}

/* ---- hold ----------------------------------------------------------------------------------- */

static int hold(const char *file)
{
	struct ms_ctx *ctx = new_ctx(file);
	char line[64];
	CHECK(write_locked(file), "%s has no live owner", file);
	printf("held %d\n", (int)getpid());
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		line[0] = '\0';
	ms_ctx_free(ctx);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: liveedge rawfork|noproc DIR | hold FILE\n");
		return 2;
	}
	mode = argv[1];
	if (!strcmp(mode, "rawfork"))
		return rawfork(argv[2]);
	if (!strcmp(mode, "noproc"))
		return noproc(argv[2]);
	if (!strcmp(mode, "hold"))
		return hold(argv[2]);
	fprintf(stderr, "liveedge: unknown mode %s\n", mode);
	return 2;
}
