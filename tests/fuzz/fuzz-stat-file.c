/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: multisend-stat's reader of live-counter files (bench/stat-file.c, compiled in):
 * stat_check_header and stat_read on any bytes, then both outputs of what they read.
 *
 * A file is over a megabyte, so the input describes one instead of being one. Bytes 0..3
 * (little-endian) give the file's length as the reader is told it: bit 31 set, the full size
 * (MS_SHM_FILE_SIZE); otherwise the value modulo MS_SHM_FILE_SIZE + 1. The file is zeros, with
 * the next sizeof(struct ms_shm_header) bytes of the input as its header, then patches: each
 * a 3-byte little-endian offset (modulo the file's length), a 1-byte length and that many
 * bytes, written there (cut at the file's end). The file sits at the very end of a static
 * buffer, so that a read past its length leaves the buffer (ASan reports it).
 *
 * Checks, for every input: no crash or sanitizer report; a file shorter than the format is
 * refused; what was read stays within the format (at most MS_SHM_SLOTS slots, counts within
 * their arrays, every name terminated); read twice (the second read gives rates), the JSON
 * line is one valid JSON object in valid UTF-8 with no control byte, and the screen has no
 * control byte but its newlines, no C1 control and nothing that is not UTF-8.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../bench/stat-file.h"

#define CHECK(c)                                                                        \
	do {                                                                            \
		if (!(c)) {                                                             \
			fprintf(stderr, "fuzz-stat-file: check failed: %s (line %d)\n", #c, \
				__LINE__);                                              \
			abort();                                                        \
		}                                                                       \
	} while (0)

static unsigned char file_buf[MS_SHM_FILE_SIZE] __attribute__((aligned(4096)));
static struct slot_view views[MS_SHM_SLOTS];

/* ---- output checks ------------------------------------------------------------------------ */

/* Valid UTF-8 (as the reader's escaping defines it: no overlong form, no surrogate). */
static bool valid_utf8(const unsigned char *p, size_t n, bool allow_c1)
{
	for (size_t i = 0; i < n;) {
		unsigned char c = p[i];
		size_t len;
		uint32_t v, min;
		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
			len = 2, v = c & 0x1f, min = 0x80;
		else if (c >= 0xe0 && c <= 0xef)
			len = 3, v = c & 0x0f, min = 0x800;
		else if (c >= 0xf0 && c <= 0xf4)
			len = 4, v = c & 0x07, min = 0x10000;
		else
			return false;
		if (n - i < len)
			return false;
		for (size_t k = 1; k < len; k++) {
			if ((p[i + k] & 0xc0) != 0x80)
				return false;
			v = v << 6 | (p[i + k] & 0x3f);
		}
		if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff) ||
		    (!allow_c1 && v <= 0x9f))
			return false;
		i += len;
	}
	return true;
}

/* A JSON syntax check (RFC 8259), recursive descent over p[*i..n). */
static bool j_value(const char *p, size_t n, size_t *i, int depth);

static void j_ws(const char *p, size_t n, size_t *i)
{
	while (*i < n && (p[*i] == ' ' || p[*i] == '\t' || p[*i] == '\n' || p[*i] == '\r'))
		(*i)++;
}

static bool j_string(const char *p, size_t n, size_t *i)
{
	if (*i >= n || p[*i] != '"')
		return false;
	for ((*i)++; *i < n; (*i)++) {
		unsigned char c = (unsigned char)p[*i];
		if (c == '"') {
			(*i)++;
			return true;
		}
		if (c < 0x20)
			return false;
		if (c == '\\') {
			if (++*i >= n)
				return false;
			c = (unsigned char)p[*i];
			if (c == 'u') {
				for (int k = 0; k < 4; k++) {
					if (++*i >= n || !strchr("0123456789abcdefABCDEF", p[*i]) ||
					    !p[*i])
						return false;
				}
			} else if (!strchr("\"\\/bfnrt", c) || !c) {
				return false;
			}
		}
	}
	return false;
}

static bool j_number(const char *p, size_t n, size_t *i)
{
	size_t s = *i;
	if (*i < n && p[*i] == '-')
		(*i)++;
	if (*i < n && p[*i] == '0')
		(*i)++;
	else if (*i < n && p[*i] >= '1' && p[*i] <= '9')
		while (*i < n && p[*i] >= '0' && p[*i] <= '9')
			(*i)++;
	else
		return false;
	if (*i < n && p[*i] == '.') {
		size_t d = ++*i;
		while (*i < n && p[*i] >= '0' && p[*i] <= '9')
			(*i)++;
		if (*i == d)
			return false;
	}
	if (*i < n && (p[*i] == 'e' || p[*i] == 'E')) {
		(*i)++;
		if (*i < n && (p[*i] == '+' || p[*i] == '-'))
			(*i)++;
		size_t d = *i;
		while (*i < n && p[*i] >= '0' && p[*i] <= '9')
			(*i)++;
		if (*i == d)
			return false;
	}
	return *i > s;
}

static bool j_value(const char *p, size_t n, size_t *i, int depth)
{
	if (depth > 16)
		return false;
	j_ws(p, n, i);
	if (*i >= n)
		return false;
	char c = p[*i];
	if (c == '{' || c == '[') {
		char close = c == '{' ? '}' : ']';
		(*i)++;
		j_ws(p, n, i);
		if (*i < n && p[*i] == close) {
			(*i)++;
			return true;
		}
		for (;;) {
			if (c == '{') {
				j_ws(p, n, i);
				if (!j_string(p, n, i))
					return false;
				j_ws(p, n, i);
				if (*i >= n || p[*i] != ':')
					return false;
				(*i)++;
			}
			if (!j_value(p, n, i, depth + 1))
				return false;
			j_ws(p, n, i);
			if (*i < n && p[*i] == ',') {
				(*i)++;
				continue;
			}
			if (*i < n && p[*i] == close) {
				(*i)++;
				return true;
			}
			return false;
		}
	}
	if (c == '"')
		return j_string(p, n, i);
	for (const char *const *w = (const char *const[]){ "true", "false", "null", NULL }; *w;
	     w++) {
		size_t l = strlen(*w);
		if (n - *i >= l && !memcmp(p + *i, *w, l)) {
			*i += l;
			return true;
		}
	}
	return j_number(p, n, i);
}

/* One sample line of the Prometheus / OpenMetrics text formats: a metric name, labels whose
 * values escape only backslash, quote and newline, a space and a value without spaces. */
static bool metric_line(const char *p, size_t n)
{
	size_t i = 0;
	if (!n || !(p[0] == '_' || p[0] == ':' || ((p[0] | 0x20) >= 'a' && (p[0] | 0x20) <= 'z')))
		return false;
	while (i < n && (p[i] == '_' || p[i] == ':' || (p[i] >= '0' && p[i] <= '9') ||
			 ((p[i] | 0x20) >= 'a' && (p[i] | 0x20) <= 'z')))
		i++;
	if (i < n && p[i] == '{') {
		for (i++; i < n && p[i] != '}';) {
			size_t k = i;
			while (i < n && (p[i] == '_' || (p[i] >= '0' && p[i] <= '9') ||
					 ((p[i] | 0x20) >= 'a' && (p[i] | 0x20) <= 'z')))
				i++;
			if (i == k || i + 1 >= n || p[i] != '=' || p[i + 1] != '"')
				return false;
			for (i += 2; i < n && p[i] != '"'; i++)
				if (p[i] == '\\' && (++i >= n || (p[i] != '\\' && p[i] != '"' && p[i] != 'n')))
					return false;
			if (i >= n)
				return false;
			i++;
			if (i < n && p[i] == ',')
				i++;
		}
		if (i >= n)
			return false;
		i++;
	}
	if (i >= n || p[i] != ' ' || i + 1 >= n)
		return false;
	for (i++; i < n; i++)
		if (p[i] == ' ')
			return false;
	return true;
}

/* Both metrics formats of s: valid UTF-8 without control bytes, every line a comment or a
 * sample, OpenMetrics ending in "# EOF". */
static void check_metrics(const struct source *s)
{
	for (int om = 0; om <= 1; om++) {
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);
		CHECK(f);
		/* with the skip counts (om) or without: a file over the names budget is left
		 * out and counted, and the count is a sample line like any other */
		uint64_t skipped[STAT_SKIP_N] = { 0 };
		stat_metrics(f, &s, 1, om, om ? skipped : NULL);
		CHECK(fclose(f) == 0);
		CHECK(valid_utf8((const unsigned char *)buf, len, false));
		for (size_t k = 0; k < len; k++)
			CHECK(buf[k] == '\n' || ((unsigned char)buf[k] >= 0x20 && buf[k] != 0x7f));
		CHECK(!len || buf[len - 1] == '\n');
		const char *last = NULL;
		for (size_t a = 0; a < len;) {
			const char *nl = memchr(buf + a, '\n', len - a);
			size_t n = (size_t)(nl - (buf + a));
			last = buf + a;
			CHECK(buf[a] == '#' || metric_line(buf + a, n));
			a += n + 1;
		}
		if (om)
			CHECK(last && !strncmp(last, "# EOF\n", 6));
		CHECK(skipped[STAT_SKIP_NAMES] <= 1 && skipped[STAT_SKIP_BUDGET] == 0);
		free(buf);
	}
}

static void check_outputs(const struct source *s)
{
	check_metrics(s);
	char *buf = NULL;
	size_t len = 0;

	FILE *f = open_memstream(&buf, &len);
	CHECK(f);
	stat_json(f, s, 1796400000000000000ull);
	CHECK(fclose(f) == 0);
	CHECK(len > 0 && buf[len - 1] == '\n');
	CHECK(memchr(buf, '\n', len) == buf + len - 1); /* one line */
	for (size_t k = 0; k + 1 < len; k++)
		CHECK((unsigned char)buf[k] >= 0x20 && buf[k] != 0x7f);
	CHECK(valid_utf8((const unsigned char *)buf, len, true));
	size_t i = 0;
	CHECK(buf[0] == '{' && j_value(buf, len - 1, &i, 0));
	j_ws(buf, len - 1, &i);
	CHECK(i == len - 1);
	free(buf);

	buf = NULL;
	f = open_memstream(&buf, &len);
	CHECK(f);
	stat_screen(f, s, 1796400000000000000ull);
	CHECK(fclose(f) == 0);
	for (size_t k = 0; k < len; k++)
		CHECK(buf[k] == '\n' || ((unsigned char)buf[k] >= 0x20 && buf[k] != 0x7f));
	CHECK(valid_utf8((const unsigned char *)buf, len, false));
	free(buf);
}

static void check_views(const struct source *s)
{
	CHECK(s->used <= MS_SHM_SLOTS);
	for (uint32_t i = 0; i < MS_SHM_SLOTS; i++) {
		const struct slot_view *v = &s->slots[i];
		CHECK(v->ncounters <= MS_SHM_COUNTERS && v->nhists <= MS_SHM_HISTS);
		CHECK(memchr(v->name, 0, sizeof(v->name)));
		for (unsigned k = 0; k < MS_SHM_COUNTERS; k++)
			CHECK(memchr(v->counter_name[k], 0, sizeof(v->counter_name[k])));
		for (unsigned k = 0; k < MS_SHM_HISTS; k++)
			CHECK(memchr(v->hist_name[k], 0, sizeof(v->hist_name[k])));
	}
	CHECK(memchr(s->program, 0, sizeof(s->program)));
	CHECK(memchr(s->lib_version, 0, sizeof(s->lib_version)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	if (!ready) {
		CHECK(stat_init() == 0);
		ready = true;
	}
	if (size < 4)
		return 0;
	uint32_t sel = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 |
		       (uint32_t)data[3] << 24;
	size_t len = (sel & 0x80000000u) ? MS_SHM_FILE_SIZE : sel % (MS_SHM_FILE_SIZE + 1);
	/* At the end of the buffer, so that a read past len is caught, as far as the 8-byte
	 * alignment a mapping (page-aligned) always gives allows. */
	unsigned char *file = file_buf + ((MS_SHM_FILE_SIZE - len) & ~(size_t)7);
	/* What this input writes, to be zeroed again after: the header, then the patches. */
	struct { size_t off, n; } dirty[1024];
	unsigned ndirty = 0;
	data += 4;
	size -= 4;

	size_t h = size < sizeof(struct ms_shm_header) ? size : sizeof(struct ms_shm_header);
	if (h > len)
		h = len;
	memcpy(file, data, h);
	dirty[ndirty].off = 0;
	dirty[ndirty++].n = h;
	data += size < sizeof(struct ms_shm_header) ? size : sizeof(struct ms_shm_header);
	size -= size < sizeof(struct ms_shm_header) ? size : sizeof(struct ms_shm_header);
	while (size >= 4 && len && ndirty < 1024) {
		size_t off = ((size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16) % len;
		size_t n = data[3];
		data += 4;
		size -= 4;
		if (n > size)
			n = size;
		size_t w = n < len - off ? n : len - off;
		memcpy(file + off, data, w);
		dirty[ndirty].off = off;
		dirty[ndirty++].n = w;
		data += n;
		size -= n;
	}

	struct source s;
	char why[PATH_MAX + 256];
	memset(&s, 0, sizeof(s));
	memset(views, 0, sizeof(views));
	snprintf(s.path, sizeof(s.path), "/dev/shm/fuzz\x1b[2J\xff");
	s.fd = -1;
	s.pid = -1;
	s.slots = views;
	int rc = stat_check_header(&s, file, len, why, sizeof(why));
	CHECK(rc == 0 || rc == 1 || rc == 3);
	CHECK(rc != 0 || len >= MS_SHM_FILE_SIZE);
	if (rc) {
		s.problem = why;
		check_outputs(&s);
	} else {
		for (int round = 1; round <= 2; round++) {
			rc = stat_read(&s, file, len, 2, (uint64_t)round * 1000000000u, why,
				       sizeof(why));
			CHECK(rc == 0 || rc == 1);
			s.problem = rc ? why : NULL;
			check_views(&s);
			check_outputs(&s);
		}
	}
	for (unsigned k = 0; k < ndirty; k++)
		memset(file + dirty[k].off, 0, dirty[k].n);
	return 0;
}
