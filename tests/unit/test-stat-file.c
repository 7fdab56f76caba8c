/* SPDX-License-Identifier: MIT */
/*
 * multisend-stat's file reader (bench/stat-file.c) assumes no more than 8-byte alignment of
 * the bytes it is given (a mapping is page aligned; the fuzz target's buffer only 8-aligned):
 * a whole live-counter file image at an address that is 8 but not 16, 32 or 64-byte aligned
 * is checked and read, every slot with its values (run under UBSan in the sanitizer build);
 * the same bytes not 8-aligned are refused with a reason, never read through a misaligned
 * pointer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "stat-file.h"

static struct slot_view views[MS_SHM_SLOTS];

/* A file image at buf + off: a header and two live slots with counters and a histogram. */
static unsigned char *image(unsigned char *buf, size_t off)
{
	unsigned char *p = buf + off;
	struct ms_shm_header h = { .magic = MS_SHM_MAGIC, .version = MS_SHM_VERSION,
				   .header_size = sizeof(h), .slot_size = sizeof(struct ms_shm_slot),
				   .nslots = MS_SHM_SLOTS, .used = 2, .pid = 42, .start_ns = 1,
				   .program = "aligntest", .lib_version = "0.1.0" };
	memset(p, 0, MS_SHM_FILE_SIZE);
	memcpy(p, &h, sizeof(h));
	for (unsigned i = 0; i < 2; i++) {
		static struct ms_shm_slot sl;
		memset(&sl, 0, sizeof(sl));
		sl.state = MS_SHM_LIVE;
		sl.ncounters = 2;
		sl.nhists = 1;
		snprintf(sl.name, sizeof(sl.name), "slot %u", i);
		snprintf(sl.counter_name[0], MS_SHM_NAME, "a");
		snprintf(sl.counter_name[1], MS_SHM_NAME, "b");
		snprintf(sl.hist_name[0], MS_SHM_NAME, "h");
		sl.counter[0] = 100 + i;
		sl.counter[1] = 200 + i;
		sl.hist[0].count = 1;
		sl.hist[0].sum_ns = sl.hist[0].min_ns = sl.hist[0].max_ns = 1000;
		for (unsigned b = 0; b < MS_HIST_BUCKETS; b++)
			sl.hist[0].bucket[b] = 1; /* those between min's and max's are read */
		memcpy(p + sizeof(h) + i * sizeof(sl), &sl, sizeof(sl));
	}
	return p;
}

static void init_source(struct source *s)
{
	memset(s, 0, sizeof(*s));
	memset(views, 0, sizeof(views));
	snprintf(s->path, sizeof(s->path), "/dev/shm/aligntest");
	s->fd = -1;
	s->pid = -1;
	s->slots = views;
}

static void read_at(size_t off, bool ok)
{
	void *mem = NULL;
	assert_int_equal(posix_memalign(&mem, 64, MS_SHM_FILE_SIZE + 128), 0);
	unsigned char *buf = mem;
	unsigned char *p = image(buf, off);
	struct source s;
	char why[PATH_MAX + 256] = "";
	init_source(&s);
	int rc = stat_check_header(&s, p, MS_SHM_FILE_SIZE, why, sizeof(why));
	if (!ok) {
		assert_int_equal(rc, 1);
		assert_non_null(strstr(why, "aligned"));
		why[0] = '\0';
		assert_int_equal(stat_read(&s, p, MS_SHM_FILE_SIZE, 2, 1000000000u, why,
					   sizeof(why)), 1);
		assert_non_null(strstr(why, "aligned"));
		free(buf);
		return;
	}
	assert_int_equal(rc, 0);
	assert_int_equal(stat_read(&s, p, MS_SHM_FILE_SIZE, 2, 1000000000u, why, sizeof(why)), 0);
	assert_int_equal(s.pid, 42);
	assert_int_equal(s.used, 2);
	assert_int_equal(s.stale, 0);
	for (unsigned i = 0; i < 2; i++) {
		assert_true(views[i].have);
		assert_int_equal(views[i].counter[0], 100 + i);
		assert_int_equal(views[i].counter[1], 200 + i);
		assert_int_equal(views[i].hist[0].count, 1);
		uint64_t sum = 0;
		for (unsigned b = 0; b < MS_HIST_BUCKETS; b++)
			sum += views[i].hist[0].bucket[b];
		assert_int_equal(sum, 1); /* min = max: one bucket */
		assert_int_equal(views[i].hist[0].max_ns, 1000);
	}
	FILE *out = fopen("/dev/null", "w");
	assert_non_null(out);
	stat_json(out, &s, 2000000000u);
	stat_screen(out, &s, 2000000000u);
	fclose(out);
	free(buf);
}

static void aligned_8_only(void **state)
{
	(void)state;
	assert_int_equal(stat_init(), 0);
	read_at(8, true);  /* 8 mod 16 */
	read_at(24, true); /* 8 mod 32 */
	read_at(40, true); /* 8 mod 64 */
	read_at(0, true);
}

static void misaligned_refused(void **state)
{
	(void)state;
	assert_int_equal(stat_init(), 0);
	read_at(4, false);
	read_at(1, false);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(aligned_8_only),
		cmocka_unit_test(misaligned_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
