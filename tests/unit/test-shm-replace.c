/* SPDX-License-Identifier: MIT */
/*
 * Two writers replacing the same stale live-counter file (lib/obs/shm.c create_file): each saw
 * the file without a live owner; the first put its new file under the name; the second,
 * which judged the same stale file, must not rename over the first's live file (which would
 * lose its name while its owner publishes into it). The race is made deterministic by
 * calling the replacement twice in a row, in this process, with the stale file's identity the
 * second writer saw: the second gives up (-EAGAIN: look again), the name still names the
 * first's file, locked, and no temporary name is left. Both ways are checked: the atomic
 * exchange, and the check before and after a plain rename (file systems without exchange).
 * lib/obs/shm.c is compiled into this test, to reach its static functions.
 */
#include "shm.c"

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

static char dir[64];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/shm-replace.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[4096];
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.' || e->d_name[1] == 'm') {
			snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
			unlink(p);
		}
	if (d)
		closedir(d);
	return rmdir(dir);
}

static unsigned entries(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	unsigned n = 0;
	assert_non_null(d);
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return n;
}

static bool locked(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	bool l = write_locked(fd);
	close(fd);
	return l;
}

/* A stale live-counter file at path (a header with the magic, nobody's lock); its identity. */
static void make_stale(const char *path, struct stat *st)
{
	struct ms_shm_header h = { .magic = MS_SHM_MAGIC, .version = MS_SHM_VERSION,
				   .header_size = sizeof(h), .slot_size = sizeof(struct ms_shm_slot),
				   .nslots = MS_SHM_SLOTS, .pid = 1 };
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	assert_int_equal(ftruncate(fd, (off_t)MS_SHM_FILE_SIZE), 0);
	assert_int_equal(fstat(fd, st), 0);
	close(fd);
}

static void twice(bool exchange)
{
	char path[128];
	struct stat stale, st1, st;
	int err = 0;

	no_exchange = !exchange;
	snprintf(path, sizeof(path), "%s/f", dir);
	make_stale(path, &stale);
	assert_false(locked(path));

	/* Both writers judged `stale` replaceable; the first replaces it. */
	struct ms_shm_header *h1 = create_file(path, 0644, &stale, &err);
	assert_non_null(h1);
	assert_int_equal(err, 0);
	assert_int_equal(stat(path, &st1), 0);
	assert_false(st1.st_ino == stale.st_ino);
	assert_true(locked(path));
	assert_int_equal(entries(), 1);

	/* The second, late: it must not take the name from the first's live file. */
	err = 0;
	struct ms_shm_header *h2 = create_file(path, 0644, &stale, &err);
	assert_null(h2);
	assert_int_equal(err, -EAGAIN);
	assert_int_equal(stat(path, &st), 0);
	assert_true(st.st_ino == st1.st_ino && st.st_dev == st1.st_dev);
	assert_true(locked(path));
	assert_int_equal(entries(), 1); /* no temporary name left behind */
	assert_true(h1->magic == MS_SHM_MAGIC && h1->pid == getpid());

	/* Looked at again (map_file), the path has a live owner: this process's, joined. */
	bool owner = false;
	struct ms_shm_header *h3 = map_file(path, &owner, &err);
	assert_non_null(h3);
	assert_int_equal(stat(path, &st), 0);
	assert_true(st.st_ino == st1.st_ino);
	munmap(h3, MS_SHM_FILE_SIZE);
	munmap(h1, MS_SHM_FILE_SIZE);
	assert_false(locked(path));
	unlink(path);
}

static void replace_twice_exchange(void **state)
{
	(void)state;
	twice(true);
}

static void replace_twice_rename(void **state)
{
	(void)state;
	twice(false);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(replace_twice_exchange, setup, teardown),
		cmocka_unit_test_setup_teardown(replace_twice_rename, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
