/* SPDX-License-Identifier: MIT */
/*
 * multisend-stat's file reader (bench/stat-file.c) assumes no more than 8-byte alignment of
 * the bytes it is given (a mapping is page aligned; the fuzz target's buffer only 8-aligned):
 * a whole live-counter file image at an address that is 8 but not 16, 32 or 64-byte aligned
 * is checked and read, every slot with its values (run under UBSan in the sanitizer build);
 * the same bytes not 8-aligned are refused with a reason, never read through a misaligned
 * pointer.
 *
 * And stat_metrics on sources of many names (issue 26, item 7): a source over the names budget
 * is left out whole and counted, one at the budget is exported whole, two names that make one
 * metric name give one series per slot (the first), and every series has the owner label.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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

/* A source read already: nslots slots of names counters each, counter k of slot i named
 * fmt(i, k) (distinct: "s<i>_<k>"; else "c<k>"), and one histogram per slot. */
static struct source *made(const char *path, unsigned nslots, unsigned names, bool distinct)
{
	struct source *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	s->slots = calloc(MS_SHM_SLOTS, sizeof(*s->slots));
	assert_non_null(s->slots);
	snprintf(s->path, sizeof(s->path), "%s", path);
	snprintf(s->program, sizeof(s->program), "p");
	s->pid = 7;
	s->uid = 1234; /* no owner name: the label shows the uid */
	s->used = nslots;
	for (unsigned i = 0; i < nslots; i++) {
		struct slot_view *v = &s->slots[i];
		v->named = v->have = true;
		v->state = MS_SHM_LIVE;
		v->ncounters = names;
		v->nhists = 1;
		snprintf(v->name, sizeof(v->name), "ctx %u", i);
		for (unsigned k = 0; k < names; k++) {
			if (distinct)
				snprintf(v->counter_name[k], MS_SHM_NAME, "s%u_%u", i, k);
			else
				snprintf(v->counter_name[k], MS_SHM_NAME, "c%u", k);
			v->counter[k] = i * 1000 + k;
		}
		snprintf(v->hist_name[0], MS_SHM_NAME, "h");
	}
	return s;
}

static void unmade(struct source *s)
{
	free(s->slots);
	free(s);
}

/* Lines of text that contain both a and b. */
static unsigned lines_with(const char *text, const char *a, const char *b)
{
	unsigned n = 0;
	for (const char *l = text; *l;) {
		const char *e = strchr(l, '\n');
		size_t len = e ? (size_t)(e - l) : strlen(l);
		char buf[1024];
		snprintf(buf, sizeof(buf), "%.*s", (int)len, l);
		n += strstr(buf, a) && strstr(buf, b);
		l += len + (e != NULL);
	}
	return n;
}

static void metrics_budgets(void **state)
{
	(void)state;
	assert_int_equal(stat_init(), 0);
	/* 64 x (MS_SHM_COUNTERS + 1) names of their own; 255 + 1 ("h"): at the budget; 256 + 1:
	 * past it; 64 slots of the same MS_SHM_COUNTERS names: big, and honest. */
	struct source *many = made("/many", MS_SHM_SLOTS, MS_SHM_COUNTERS, true);
	struct source *at = made("/at", 5, 51, true);
	struct source *past = made("/past", 4, 64, true);
	struct source *same = made("/same", MS_SHM_SLOTS, MS_SHM_COUNTERS, false);
	snprintf(same->owner, sizeof(same->owner), "alice");
	const struct source *v[] = { many, at, past, same };
	uint64_t skipped[STAT_SKIP_N] = { 0 };
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	assert_non_null(out);
	stat_metrics(out, v, 4, true, skipped);
	assert_int_equal(fclose(out), 0);
	assert_int_equal(skipped[STAT_SKIP_NAMES], 2);
	assert_int_equal(skipped[STAT_SKIP_BUDGET], 0);
	assert_int_equal(lines_with(text, "file=\"/many\"", ""), 0);
	assert_int_equal(lines_with(text, "file=\"/past\"", ""), 0);
	assert_int_equal(lines_with(text, "_total{", "file=\"/at\",owner=\"1234\""), 5 * 51);
	assert_int_equal(lines_with(text, "_total{", "file=\"/same\",owner=\"alice\""),
			 MS_SHM_SLOTS * MS_SHM_COUNTERS);
	assert_int_equal(lines_with(text, "multisend_h_seconds_count{", "file=\"/same\""), 64);
	assert_int_equal(lines_with(text, "multisend_stat_files_skipped_total{reason=\"names\"} 2",
				    ""), 1);
	assert_int_equal(lines_with(text, "multisend_c63_total{", "slot=\"63\",context=\"ctx 63\"} 63063"), 1);
	assert_non_null(strstr(text, "# EOF\n"));
	free(text);
	unmade(many);
	unmade(at);
	unmade(past);
	unmade(same);
}

/* Two names that make one metric name: the first of its slot only; a counter whose metric
 * name a histogram took first (or the other way): left out, as before the hash. */
static void metrics_first_of_slot(void **state)
{
	(void)state;
	assert_int_equal(stat_init(), 0);
	struct source *s = made("/dup", 2, 3, false);
	for (unsigned i = 0; i < 2; i++) {
		struct slot_view *v = &s->slots[i];
		snprintf(v->counter_name[0], MS_SHM_NAME, "a.b");
		snprintf(v->counter_name[1], MS_SHM_NAME, "a_b");
		snprintf(v->counter_name[2], MS_SHM_NAME, "h_ns"); /* the histogram "h"'s name */
		v->hist[0].count = 1;
	}
	const struct source *v[] = { s };
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	assert_non_null(out);
	stat_metrics(out, v, 1, false, NULL);
	assert_int_equal(fclose(out), 0);
	assert_int_equal(lines_with(text, "multisend_a_b_total{", "slot=\"0\""), 1);
	assert_int_equal(lines_with(text, "multisend_a_b_total{", "context=\"ctx 0\"} 0"), 1);
	assert_int_equal(lines_with(text, "multisend_a_b_total{", "context=\"ctx 1\"} 1000"), 1);
	/* the counter came first: the histogram of that name is left out */
	assert_int_equal(lines_with(text, "multisend_h_seconds_total{", ""), 2);
	assert_int_equal(lines_with(text, "multisend_h_seconds_count", ""), 0);
	assert_null(strstr(text, "skipped"));
	free(text);
	unmade(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(aligned_8_only),
		cmocka_unit_test(misaligned_refused),
		cmocka_unit_test(metrics_budgets),
		cmocka_unit_test(metrics_first_of_slot),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
