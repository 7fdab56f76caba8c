/* SPDX-License-Identifier: MIT */
/*
 * multisend-stat's reading of a live-counter file's bytes and its outputs (bench/stat-file.h).
 * Everything here reads only the bytes it is given, never past the length it is given, and
 * trusts none of them: counts are clamped, names are copied with a terminator and escaped
 * when shown, a sequence word that never settles costs a bounded number of tries.
 */
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stat-file.h"
#include "core/counters.h"

#define ME "multisend-stat"

/* The lower ends of the histogram's buckets, to find the buckets min and max fall in. */
static uint64_t bucket_lo[MS_HIST_BUCKETS];

int stat_init(void)
{
	for (unsigned i = 0; i < MS_HIST_BUCKETS; i++) {
		uint64_t lo, hi;
		if (ms_hist_bucket_range(i, &lo, &hi) < 0)
			return -1;
		bucket_lo[i] = lo;
	}
	return 0;
}

/* A fixed-size name from the file, which need not be terminated. */
static void copy_name(char *dst, const char *src, size_t n)
{
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* ---- escaping --------------------------------------------------------------------------- */

/* The length of the valid UTF-8 sequence at p (n bytes left), or 0 (not valid: a stray
 * continuation byte, an overlong form, a surrogate, past U+10FFFF, cut short). *cp gets the
 * code point. */
static size_t utf8_len(const unsigned char *p, size_t n, uint32_t *cp)
{
	unsigned char c = p[0];
	size_t len;
	uint32_t v, min;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xc2 && c <= 0xdf)
		len = 2, v = c & 0x1f, min = 0x80;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3, v = c & 0x0f, min = 0x800;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4, v = c & 0x07, min = 0x10000;
	else
		return 0;
	if (n < len)
		return 0;
	for (size_t k = 1; k < len; k++) {
		if ((p[k] & 0xc0) != 0x80)
			return 0;
		v = v << 6 | (p[k] & 0x3f);
	}
	if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return len;
}

const char *stat_escape(char *dst, size_t cap, const char *src, bool json)
{
	const unsigned char *p = (const unsigned char *)src;
	size_t n = strlen(src), o = 0;

	if (!cap)
		return dst;
	for (size_t i = 0; i < n;) {
		char buf[16];
		uint32_t cp = 0;
		size_t len = utf8_len(p + i, n - i, &cp);
		const char *add = buf;
		size_t addlen;

		if (!len) { /* not UTF-8: one byte */
			if (json)
				snprintf(buf, sizeof(buf), "\\ufffd");
			else
				snprintf(buf, sizeof(buf), "\\x%02x", p[i]);
			len = 1;
		} else if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) {
			if (json || cp >= 0x80)
				snprintf(buf, sizeof(buf), "\\u%04x", (unsigned)cp);
			else
				snprintf(buf, sizeof(buf), "\\x%02x", (unsigned)cp);
		} else if (cp == '\\' || (json && cp == '"')) {
			snprintf(buf, sizeof(buf), "\\%c", (char)cp);
		} else {
			add = (const char *)p + i;
		}
		addlen = add == buf ? strlen(buf) : len;
		if (o + addlen >= cap)
			break; /* cut at a whole character */
		memcpy(dst + o, add, addlen);
		o += addlen;
		i += len;
	}
	dst[o] = '\0';
	return dst;
}

/* Escaped for a terminal, in one of a few rotating buffers (for a printf with several). */
static const char *tx(const char *s)
{
	static char buf[4][4 * PATH_MAX];
	static unsigned k;
	k = (k + 1) % 4;
	return stat_escape(buf[k], sizeof(buf[k]), s, false);
}

static void json_str(FILE *out, const char *p)
{
	static char buf[6 * PATH_MAX + 1];
	fprintf(out, "\"%s\"", stat_escape(buf, sizeof(buf), p, true));
}

/* ---- the header --------------------------------------------------------------------------- */

/* The bytes are a mapping (page aligned) or a caller's buffer, of which only 8-byte alignment
 * is promised (the fuzz target's): nothing here may need more. The header and slots are
 * uint64_t and uint32_t fields (alignment 8 at most) and the header's size keeps the slots
 * 8-aligned; bytes not 8-aligned are refused, never read through a misaligned pointer. */
#define STAT_ALIGN 8u
_Static_assert(_Alignof(struct ms_shm_header) <= STAT_ALIGN &&
		       _Alignof(struct ms_shm_slot) <= STAT_ALIGN &&
		       sizeof(struct ms_shm_header) % STAT_ALIGN == 0 &&
		       sizeof(struct ms_shm_slot) % STAT_ALIGN == 0,
	       "the file's structures need no more than 8-byte alignment");

static bool misaligned(const struct source *s, const unsigned char *map, char *why,
		       size_t whylen)
{
	if (!((uintptr_t)map % STAT_ALIGN))
		return false;
	snprintf(why, whylen, "%s: the bytes to read are not %u-byte aligned", tx(s->path),
		 STAT_ALIGN);
	return true;
}

int stat_check_header(const struct source *s, const unsigned char *map, size_t len, char *why,
		      size_t whylen)
{
	if (misaligned(s, map, why, whylen))
		return 1;
	const struct ms_shm_header *h = (const struct ms_shm_header *)map;

	if (len < sizeof(*h)) {
		snprintf(why, whylen, "%s: not a libmultisend live-counter file (%zu bytes, too short "
			 "for its header)", tx(s->path), len);
		return len == 0 ? 3 : 1;
	}
	uint64_t magic = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE);
	if (magic != MS_SHM_MAGIC) {
		snprintf(why, whylen, "%s: not a libmultisend live-counter file (no magic number)",
			 tx(s->path));
		return magic == 0 ? 3 : 1; /* 0: maybe a writer still setting it up */
	}
	if (h->version != MS_SHM_VERSION) {
		snprintf(why, whylen, "%s: live-counter file of format version %" PRIu32 "; this "
			 ME " reads version %u", tx(s->path), h->version, MS_SHM_VERSION);
		return 1;
	}
	if (h->header_size != sizeof(struct ms_shm_header) ||
	    h->slot_size != sizeof(struct ms_shm_slot) || h->nslots != MS_SHM_SLOTS) {
		snprintf(why, whylen, "%s: live-counter file with an unexpected layout (header %"
			 PRIu32 ", %" PRIu32 " slots of %" PRIu32 " bytes; this " ME " reads %zu, "
			 "%u of %zu)", tx(s->path), h->header_size, h->nslots, h->slot_size,
			 sizeof(struct ms_shm_header), MS_SHM_SLOTS, sizeof(struct ms_shm_slot));
		return 1;
	}
	if (len < MS_SHM_FILE_SIZE) {
		snprintf(why, whylen, "%s: live-counter file cut short (%zu of %zu bytes)",
			 tx(s->path), len, MS_SHM_FILE_SIZE);
		return 1;
	}
	return 0;
}

/* ---- reading ---------------------------------------------------------------------------- */

static unsigned bucket_of(uint64_t v)
{
	unsigned lo = 0, hi = MS_HIST_BUCKETS - 1;

	while (lo < hi) { /* the last bucket whose lower end is <= v */
		unsigned mid = (lo + hi + 1) / 2;
		if (bucket_lo[mid] <= v)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* Copy the slot's values into v, all from one moment: the copy counts only if the sequence
 * word was even and the same before and after. Only the buckets from min's to max's are
 * copied (the others are zero by definition), which keeps the copy short and so the chance
 * of overlapping a write small. Returns false when the writer was always busy, or when the
 * clock passed deadline (0: none; looked at every 64 tries) with the slot still busy: a
 * sequence word that anyone who can write the file keeps odd costs a bounded time. */
static bool read_values(const struct ms_shm_slot *s, struct slot_view *v, unsigned max_tries,
			uint64_t deadline, bool *late)
{
	uint32_t nc = v->ncounters, nh = v->nhists;

	for (unsigned tries = 0; tries < max_tries; tries++) {
		if (deadline && tries % 64 == 63) {
			struct timespec t;
			clock_gettime(CLOCK_MONOTONIC, &t);
			if ((uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec >= deadline) {
				*late = true;
				return false;
			}
		}
		uint64_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
		if (seq & 1) {
			if (tries % 64 == 63)
				sched_yield();
			continue;
		}
		v->updated_ns = s->updated_ns;
		v->backend = __atomic_load_n(&s->backend, __ATOMIC_RELAXED);
		memcpy(v->counter, s->counter, nc * sizeof(v->counter[0]));
		for (unsigned k = 0; k < nh; k++) {
			struct ms_hist *d = &v->hist[k];
			const struct ms_hist *h = &s->hist[k];
			d->count = h->count;
			d->sum_ns = h->sum_ns;
			d->min_ns = h->min_ns;
			d->max_ns = h->max_ns;
			memset(d->bucket, 0, sizeof(d->bucket));
			if (d->count) {
				unsigned a = bucket_of(d->min_ns), b = bucket_of(d->max_ns);
				if (a <= b)
					memcpy(&d->bucket[a], &h->bucket[a],
					       (b - a + 1) * sizeof(d->bucket[0]));
			}
		}
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) == seq)
			return true;
		if (tries % 64 == 63)
			sched_yield();
	}
	return false;
}

void stat_forget(struct source *s)
{
	memset(s->slots, 0, MS_SHM_SLOTS * sizeof(*s->slots));
	s->used = 0;
	s->owner_gone = s->done = s->said_done = false;
}

int stat_read(struct source *s, const unsigned char *map, size_t len, unsigned tries,
	      uint64_t now_mono, char *why, size_t whylen)
{
	if (misaligned(s, map, why, whylen))
		return 1;
	const struct ms_shm_header *h = (const struct ms_shm_header *)map;

	s->stale = 0;
	s->over_time = false;
	if (len < MS_SHM_FILE_SIZE || __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != MS_SHM_MAGIC ||
	    h->version != MS_SHM_VERSION || h->header_size != sizeof(*h) ||
	    h->slot_size != sizeof(struct ms_shm_slot) || h->nslots != MS_SHM_SLOTS) {
		snprintf(why, whylen, "%s: header changed: being set up by a new owner?",
			 tx(s->path));
		return 1;
	}
	if (h->pid != s->pid || h->start_ns != s->start_ns) {
		/* A new owner: its counters start from zero, so rates start over too. */
		stat_forget(s);
		s->pid = h->pid;
		s->start_ns = h->start_ns;
		s->pid_start = h->pid_start;
		copy_name(s->program, h->program, sizeof(h->program));
		copy_name(s->lib_version, h->lib_version, sizeof(h->lib_version));
	}
	uint32_t used = __atomic_load_n(&h->used, __ATOMIC_ACQUIRE);
	if (used > MS_SHM_SLOTS)
		used = MS_SHM_SLOTS;
	s->used = used;
	const struct ms_shm_slot *slots =
		(const struct ms_shm_slot *)(map + sizeof(struct ms_shm_header));
	unsigned unclosed = 0;
	for (uint32_t i = 0; i < used; i++) {
		const struct ms_shm_slot *src = &slots[i];
		struct slot_view *v = &s->slots[i];
		uint32_t state = __atomic_load_n(&src->state, __ATOMIC_ACQUIRE);

		if (state == MS_SHM_FREE)
			continue;
		if (!v->named) {
			/* Written once before the state left FREE (release), never again. */
			copy_name(v->name, src->name, MS_SHM_NAME);
			v->ncounters = src->ncounters < MS_SHM_COUNTERS ? src->ncounters
									: MS_SHM_COUNTERS;
			v->nhists = src->nhists < MS_SHM_HISTS ? src->nhists : MS_SHM_HISTS;
			for (unsigned k = 0; k < v->ncounters; k++)
				copy_name(v->counter_name[k], src->counter_name[k], MS_SHM_NAME);
			for (unsigned k = 0; k < v->nhists; k++)
				copy_name(v->hist_name[k], src->hist_name[k], MS_SHM_NAME);
			v->named = true;
		}
		v->state = state;
		if (state == MS_SHM_LIVE)
			unclosed++;
		uint64_t keep[MS_SHM_COUNTERS];
		static struct ms_hist keep_hist[MS_SHM_HISTS]; /* big: not on the stack */
		memcpy(keep, v->counter, sizeof(keep));
		memcpy(keep_hist, v->hist, v->nhists * sizeof(keep_hist[0]));
		/* Past the file's budget, the slots left keep their earlier values. */
		if (s->over_time || !read_values(src, v, tries, s->deadline_ns, &s->over_time)) {
			v->stale = true;
			s->stale++;
			memcpy(v->counter, keep, sizeof(keep));
			memcpy(v->hist, keep_hist, v->nhists * sizeof(keep_hist[0]));
			continue;
		}
		v->stale = false;
		if (v->have) {
			memcpy(v->prev, keep, sizeof(keep));
			memcpy(v->prev_hist, keep_hist, v->nhists * sizeof(keep_hist[0]));
			v->prev_read_ns = v->read_ns;
			v->have_prev = true;
		}
		v->read_ns = now_mono;
		v->have = true;
	}
	s->unclosed = unclosed;
	return 0;
}

/* Per second over the last interval; negative (a counter that went down: never for a
 * counter, so someone reset it) means unknown. */
static double rate(const struct slot_view *v, unsigned k)
{
	if (!v->have_prev || v->read_ns <= v->prev_read_ns || v->counter[k] < v->prev[k])
		return -1;
	return (double)(v->counter[k] - v->prev[k]) * 1e9 / (double)(v->read_ns - v->prev_read_ns);
}

/* The histogram of the values recorded between the last two reads of the slot: the buckets'
 * differences. Its own min and max are not in the file: the ends of its first and last
 * non-empty buckets, within the whole histogram's. false when there is none: no earlier read,
 * no new value, or a count that went down (never, but for a damaged file). */
static bool interval_hist(const struct slot_view *v, unsigned k, struct ms_hist *d)
{
	const struct ms_hist *a = &v->prev_hist[k], *b = &v->hist[k];
	unsigned first = MS_HIST_BUCKETS, last = 0;
	uint64_t lo, hi, n = 0;

	if (!v->have_prev || b->count <= a->count)
		return false;
	memset(d, 0, sizeof(*d));
	for (unsigned i = 0; i < MS_HIST_BUCKETS; i++) {
		if (b->bucket[i] < a->bucket[i])
			return false;
		d->bucket[i] = b->bucket[i] - a->bucket[i];
		if (d->bucket[i]) {
			if (first == MS_HIST_BUCKETS)
				first = i;
			last = i;
			n += d->bucket[i];
		}
	}
	if (!n)
		return false;
	d->count = b->count - a->count;
	d->sum_ns = b->sum_ns >= a->sum_ns ? b->sum_ns - a->sum_ns : 0;
	ms_hist_bucket_range(first, &lo, &hi);
	d->min_ns = lo > b->min_ns ? lo : b->min_ns;
	ms_hist_bucket_range(last, &lo, &hi);
	d->max_ns = hi < b->max_ns ? hi : b->max_ns;
	if (d->min_ns > d->max_ns)
		d->min_ns = d->max_ns;
	return true;
}

/* The name of the backend a slot says it sends with, or NULL (0, the shim's slot, or a value
 * this multisend-stat does not know: anyone can write the file). */
static const char *slot_backend(const struct slot_view *v)
{
	return v->backend && v->backend <= INT_MAX ? ms_backend_name((enum ms_backend)v->backend)
						   : NULL;
}

static const char *state_name(uint32_t st)
{
	return st == MS_SHM_LIVE ? "live" : st == MS_SHM_CLOSED ? "closed" : "unknown";
}

/* ---- JSON ------------------------------------------------------------------------------- */

void stat_json(FILE *out, const struct source *s, uint64_t now_real)
{
	fprintf(out, "{\"time\":%.3f,\"file\":", (double)now_real / 1e9);
	json_str(out, s->path);
	if (s->problem) {
		fprintf(out, ",\"error\":");
		json_str(out, s->problem);
		fprintf(out, "}\n");
		return;
	}
	fprintf(out, ",\"pid\":%" PRId32 ",\"program\":", s->pid);
	json_str(out, s->program);
	fprintf(out, ",\"lib_version\":");
	json_str(out, s->lib_version);
	fprintf(out, ",\"uptime_s\":%.3f,\"alive\":%s,\"pid_verified\":%s,\"slots\":[",
	       now_real > s->start_ns ? (double)(now_real - s->start_ns) / 1e9 : 0.0,
	       s->owner_gone ? "false" : "true", s->pid_verified ? "true" : "false");
	const char *sep = "";
	for (uint32_t i = 0; i < s->used; i++) {
		const struct slot_view *v = &s->slots[i];
		if (!v->have)
			continue;
		fprintf(out, "%s{\"slot\":%" PRIu32 ",\"name\":", sep, i);
		json_str(out, v->name);
		if (slot_backend(v))
			fprintf(out, ",\"backend\":\"%s\"", slot_backend(v));
		else
			fputs(",\"backend\":null", out);
		fprintf(out, ",\"state\":\"%s\",\"stale\":%s,\"updated\":%.3f,\"counters\":{",
		       state_name(v->state), v->stale ? "true" : "false",
		       (double)v->updated_ns / 1e9);
		for (unsigned k = 0; k < v->ncounters; k++) {
			fprintf(out, "%s", k ? "," : "");
			json_str(out, v->counter_name[k]);
			fprintf(out, ":%" PRIu64, v->counter[k]);
		}
		fprintf(out, "},\"rates\":{");
		for (unsigned k = 0; k < v->ncounters; k++) {
			double r = rate(v, k);
			fprintf(out, "%s", k ? "," : "");
			json_str(out, v->counter_name[k]);
			if (r < 0)
				fprintf(out, ":null");
			else
				fprintf(out, ":%.1f", r);
		}
		fprintf(out, "},\"histograms\":{");
		for (unsigned k = 0; k < v->nhists; k++) {
			const struct ms_hist *hh = &v->hist[k];
			fprintf(out, "%s", k ? "," : "");
			json_str(out, v->hist_name[k]);
			fprintf(out, ":{\"count\":%" PRIu64 ",\"mean\":%.1f,\"min\":%" PRIu64
			       ",\"p50\":%" PRIu64 ",\"p90\":%" PRIu64 ",\"p99\":%" PRIu64
			       ",\"p999\":%" PRIu64 ",\"max\":%" PRIu64,
			       hh->count, hh->count ? (double)hh->sum_ns / (double)hh->count : 0.0,
			       hh->min_ns, ms_hist_quantile(hh, 0.5), ms_hist_quantile(hh, 0.9),
			       ms_hist_quantile(hh, 0.99), ms_hist_quantile(hh, 0.999), hh->max_ns);
			/* Added in schema 1 (a new member): the values since the previous read. */
			static struct ms_hist d;
			if (interval_hist(v, k, &d))
				fprintf(out, ",\"interval\":{\"count\":%" PRIu64 ",\"p50\":%" PRIu64
				       ",\"p90\":%" PRIu64 ",\"p99\":%" PRIu64 ",\"p999\":%"
				       PRIu64 "}}", d.count, ms_hist_quantile(&d, 0.5),
				       ms_hist_quantile(&d, 0.9), ms_hist_quantile(&d, 0.99),
				       ms_hist_quantile(&d, 0.999));
			else
				fprintf(out, ",\"interval\":null}");
		}
		fprintf(out, "}}");
		sep = ",";
	}
	fprintf(out, "]}\n");
}

/* ---- the screen ------------------------------------------------------------------------- */

/* The page one source gets (stat_screen_setup): lines and columns, and the counters chosen. */
static unsigned scr_rows = 22, scr_cols = 79;
static const char *const *scr_pick;
static size_t scr_npick;

void stat_screen_setup(unsigned rows, unsigned cols, const char *const *counters, size_t n)
{
	scr_rows = rows < 3 ? 3 : rows;
	scr_cols = cols < 20 ? 20 : cols;
	scr_pick = counters;
	scr_npick = counters ? n : 0;
}

/* The bytes of s that make up its first `cols` characters (s is UTF-8 or escaped ASCII; a
 * character counts one column). */
static size_t fit(const char *s, unsigned cols)
{
	size_t i = 0;
	for (unsigned c = 0; s[i] && c < cols; c++) {
		i++;
		while (((unsigned char)s[i] & 0xc0) == 0x80)
			i++;
	}
	return i;
}

/* A string cut at a byte count: without the cut character's first bytes at its end. */
static void utf8_trim(char *s)
{
	size_t n = strlen(s), i = n;
	uint32_t cp;

	while (i > 0 && n - i < 4 && ((unsigned char)s[i - 1] & 0xc0) == 0x80)
		i--;
	if (i > 0 && (unsigned char)s[i - 1] >= 0xc0 &&
	    !utf8_len((const unsigned char *)s + i - 1, n - i + 1, &cp))
		s[i - 1] = '\0';
}

/* The lines of one page: written while there is room; the last one is held back, to be
 * replaced by "N more lines" when more come than fit. */
struct page {
	FILE *out;
	unsigned left; /* lines that may still be written */
	unsigned lost; /* lines that did not fit (after the held one) */
	bool held;
	char last[1024];
};

static void vline(struct page *p, const char *fmt, va_list ap)
{
	char buf[sizeof(p->last)];

	if (!p->left) {
		p->lost++;
		return;
	}
	if (vsnprintf(buf, sizeof(buf), fmt, ap) >= (int)sizeof(buf))
		utf8_trim(buf);
	buf[fit(buf, scr_cols)] = '\0';
	if (--p->left) {
		fprintf(p->out, "%s\n", buf);
		return;
	}
	memcpy(p->last, buf, sizeof(buf));
	p->held = true;
}

static void line(struct page *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(struct page *p, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vline(p, fmt, ap);
	va_end(ap);
}

static void page_end(struct page *p)
{
	char buf[64];

	if (!p->held)
		return;
	if (p->lost) {
		snprintf(buf, sizeof(buf), "... %u more lines: a taller terminal", p->lost + 1);
		buf[fit(buf, scr_cols)] = '\0';
		fprintf(p->out, "%s\n", buf);
	} else {
		fprintf(p->out, "%s\n", p->last);
	}
}

void stat_screen_line(FILE *out, const char *fmt, ...)
{
	struct page p = { .out = out, .left = 1 };
	va_list ap;
	va_start(ap, fmt);
	vline(&p, fmt, ap);
	va_end(ap);
	page_end(&p);
}

/* "812ns", "12.4us", "3.10ms", "1.25s": nanoseconds for a column. */
static const char *fmt_ns(char *buf, size_t len, uint64_t ns)
{
	if (ns < 1000)
		snprintf(buf, len, "%" PRIu64 "ns", ns);
	else if (ns < 1000000)
		snprintf(buf, len, "%.1fus", (double)ns / 1e3);
	else if (ns < 1000000000)
		snprintf(buf, len, "%.2fms", (double)ns / 1e6);
	else
		snprintf(buf, len, "%.2fs", (double)ns / 1e9);
	return buf;
}

/* v with an SI prefix and three significant digits: "812", "1.23 k", "45.6 M" (unit after the
 * prefix: "1.23 MB/s"). Below 1000, whole numbers stay whole ("812 /s"). */
static const char *fmt_si(char *buf, size_t len, double v, const char *unit)
{
	static const char pre[] = " kMGTPE";
	unsigned k = 0;

	while (v >= 999.5 && k + 1 < sizeof(pre) - 1) {
		v /= 1000;
		k++;
	}
	const char *sp = *unit || k ? " " : "";
	char p[2] = { pre[k], '\0' };
	if (!k)
		p[0] = '\0';
	if (!k && v == (double)(uint64_t)v)
		snprintf(buf, len, "%.0f%s%s%s", v, sp, p, unit);
	else if (v < 9.995)
		snprintf(buf, len, "%.2f%s%s%s", v, sp, p, unit);
	else if (v < 99.95)
		snprintf(buf, len, "%.1f%s%s%s", v, sp, p, unit);
	else
		snprintf(buf, len, "%.0f%s%s%s", v, sp, p, unit);
	return buf;
}

/* A counter's value for an 8-column field: exact while it fits, else with an SI prefix. */
static const char *fmt_count(char *buf, size_t len, uint64_t v, bool bytes)
{
	if (v < 100000000u && !(bytes && v >= 100000u))
		snprintf(buf, len, "%" PRIu64 "%s", v, bytes ? " B" : "");
	else
		fmt_si(buf, len, (double)v, bytes ? "B" : "");
	return buf;
}

/* Counters whose values are bytes: their rates are bytes per second. */
static bool is_bytes(const char *name)
{
	return strstr(name, "bytes") != NULL;
}

/* The characters of an escaped name (a character counts one column). */
static unsigned chars_of(const char *s)
{
	unsigned n = 0;
	for (; *s; s++)
		n += ((unsigned char)*s & 0xc0) != 0x80;
	return n;
}

/* The counters that are not counts of events (struct ms_stats' comments): levels, a backend
 * number, measured costs. */
static bool is_gauge(const char *n)
{
	return !strcmp(n, "backlog_bytes") || !strcmp(n, "auto_backend") ||
	       !strncmp(n, "auto_ns_", 8) || !strncmp(n, "auto_cpu_ns_", 12);
}

/* A counter as a cell of the counter table: its name in w columns (cut, and marked '~', when
 * longer), its value in 8, its rate in 9. A gauge has no rate (a level or a cost changes, it
 * does not accumulate), and auto_backend shows the backend's name. */
#define CELL_REST 19 /* " %8s %9s" */
static void cell(char *dst, size_t cap, const struct slot_view *v, unsigned k, unsigned w)
{
	char name[4 * MS_SHM_NAME + 8], val[24], r[24];
	double x = rate(v, k);
	bool bytes = is_bytes(v->counter_name[k]);

	stat_escape(name, sizeof(name), v->counter_name[k], false);
	if (chars_of(name) > w) /* a longer name keeps its start and says it was cut */
		snprintf(name + fit(name, w - 1), 2, "~");
	const char *backend = !strcmp(v->counter_name[k], "auto_backend") &&
				      v->counter[k] <= INT_MAX
			      ? ms_backend_name((enum ms_backend)v->counter[k])
			      : NULL;

	if (backend)
		snprintf(val, sizeof(val), "%s", backend);
	else
		fmt_count(val, sizeof(val), v->counter[k], bytes);
	if (is_gauge(v->counter_name[k]))
		r[0] = '\0';
	else if (x < 0)
		snprintf(r, sizeof(r), "-");
	else
		fmt_si(r, sizeof(r), x, bytes ? "B/s" : "/s");
	unsigned c = chars_of(name); /* %-*s would count bytes: pad by characters */
	snprintf(dst, cap, "%s%*s %8s %9s", name, c < w ? (int)(w - c) : 0, "", val, r);
}

/* The width of column c of a table read down, then across, of rows rows: its longest name
 * (nw[j]: the name widths of the n cells), at least 8. */
static unsigned col_width(const unsigned *nw, unsigned n, unsigned rows, unsigned c)
{
	unsigned w = 8;
	for (unsigned j = c * rows; j < n && j < (c + 1) * rows; j++)
		w = nw[j] > w ? nw[j] : w;
	return w;
}

/* The counters to show of slot v, in order, into idx; returns how many, and *zero how many
 * were left out for being zero (the chosen ones are shown zero or not). */
static unsigned pick(const struct slot_view *v, unsigned idx[MS_SHM_COUNTERS], unsigned *zero)
{
	unsigned n = 0;

	*zero = 0;
	if (scr_pick) {
		for (size_t j = 0; j < scr_npick; j++)
			for (unsigned k = 0; k < v->ncounters; k++)
				if (!strcmp(v->counter_name[k], scr_pick[j])) {
					idx[n++] = k;
					break;
				}
		return n;
	}
	for (unsigned k = 0; k < v->ncounters; k++) {
		if (v->counter[k])
			idx[n++] = k;
		else
			(*zero)++;
	}
	return n;
}

void stat_screen(FILE *out, const struct source *s, uint64_t now_real)
{
	struct page p = { .out = out, .left = scr_rows };

	if (s->problem) {
		line(&p, "%s", tx(s->path));
		line(&p, "  %s", tx(s->problem));
		page_end(&p);
		return;
	}
	uint64_t up = now_real > s->start_ns ? (now_real - s->start_ns) / 1000000000u : 0;
	/* what matters most first: the line may be cut at the terminal's width */
	line(&p, "%s: pid %" PRId32 " (%s)%s, up %" PRIu64 ":%02" PRIu64 ":%02" PRIu64 ", lib %s",
	     tx(s->path), s->pid, tx(s->program),
	     s->owner_gone ? ", EXITED" : s->pid_verified ? "" : ", pid not seen in /proc",
	     up / 3600, up / 60 % 60, up % 60, tx(s->lib_version));

	/* What each slot needs: its line, its histograms (a header and one line each with
	 * samples), and its counters (rows of ncol); the counters get the rows left over,
	 * shared out between the slots, and a slot whose counters do not all fit says how many
	 * more there are on its last row. */
	unsigned need[MS_SHM_SLOTS] = { 0 }, give[MS_SHM_SLOTS] = { 0 }, nslot = 0, fixed = 1;
	static unsigned idx[MS_SHM_SLOTS][MS_SHM_COUNTERS];
	unsigned nidx[MS_SHM_SLOTS] = { 0 }, zero[MS_SHM_SLOTS] = { 0 };
	unsigned ncol[MS_SHM_SLOTS] = { 0 }, namew[MS_SHM_SLOTS] = { 0 };
	for (uint32_t i = 0; i < s->used; i++) {
		const struct slot_view *v = &s->slots[i];
		if (!v->have)
			continue;
		nslot++;
		fixed++;
		unsigned h = 0;
		for (unsigned k = 0; k < v->nhists; k++)
			h += v->hist[k].count != 0;
		fixed += h ? h + 1 : 0;
		nidx[i] = pick(v, idx[i], &zero[i]);
		/* As many columns of cells as fit (" " cell "  " cell ...), each column's names
		 * as wide as its longest (so one long name widens one column, not all): one
		 * column, names cut, when even two do not fit. */
		unsigned nw[MS_SHM_COUNTERS], w = 8;
		for (unsigned j = 0; j < nidx[i]; j++) {
			char e[4 * MS_SHM_NAME + 1];
			nw[j] = chars_of(stat_escape(e, sizeof(e), v->counter_name[idx[i][j]], false));
			w = nw[j] > w ? nw[j] : w;
		}
		ncol[i] = 1;
		for (unsigned nc = (scr_cols + 1) / (8 + CELL_REST + 2); nc >= 2; nc--) {
			unsigned rows = (nidx[i] + nc - 1) / nc, width = 1;
			if (nidx[i] <= (nc - 1) * rows)
				continue; /* fewer columns hold them */
			for (unsigned c = 0; c < nc; c++)
				width += (c ? 2 : 0) + col_width(nw, nidx[i], rows, c) + CELL_REST;
			if (width <= scr_cols) {
				ncol[i] = nc;
				break;
			}
		}
		if (ncol[i] == 1 && w + CELL_REST + 1 > scr_cols)
			w = scr_cols > CELL_REST + 9 ? scr_cols - CELL_REST - 1 : 8;
		namew[i] = w; /* one column's */
		need[i] = (nidx[i] + ncol[i] - 1) / ncol[i];
	}
	unsigned left = scr_rows > fixed ? scr_rows - fixed : 0;
	for (unsigned pass = 0; pass < 2; pass++) {
		unsigned share = nslot ? left / nslot : 0;
		for (uint32_t i = 0; i < s->used; i++) {
			unsigned want = need[i] - give[i];
			unsigned cap = pass ? left : share;
			unsigned g = want < cap ? want : cap;
			give[i] += g;
			left -= g;
		}
	}

	for (uint32_t i = 0; i < s->used; i++) {
		const struct slot_view *v = &s->slots[i];
		char b[8][24];

		if (!v->have)
			continue;
		char more[64] = "";
		if (zero[i])
			snprintf(more, sizeof(more), ", %u counter%s at zero not shown", zero[i],
				 zero[i] == 1 ? "" : "s");
		char be[32] = "";
		if (slot_backend(v))
			snprintf(be, sizeof(be), " (%s)", slot_backend(v));
		line(&p, "slot %" PRIu32 " \"%s\"%s: %s%s%s", i, tx(v->name), be,
		     state_name(v->state), v->stale ? " (busy: earlier values)" : "", more);
		/* The counters: row r holds cells r, r + rows, ... (read down, then across). */
		unsigned rows = give[i], shown = nidx[i];
		if (rows < need[i]) /* the last cell says how many more */
			shown = rows ? rows * ncol[i] - 1 : 0;
		unsigned nw[MS_SHM_COUNTERS], cw[MS_SHM_COUNTERS], used = 1;
		for (unsigned j = 0; j < shown; j++) {
			char e[4 * MS_SHM_NAME + 1];
			nw[j] = chars_of(stat_escape(e, sizeof(e), v->counter_name[idx[i][j]], false));
		}
		for (unsigned c = 0; c < ncol[i]; c++) {
			cw[c] = ncol[i] == 1 ? namew[i] : col_width(nw, shown, rows, c);
			used += (c ? 2 : 0) + cw[c] + CELL_REST;
		}
		if (ncol[i] > 1 && used > scr_cols) /* rows were cut: other cells in each column */
			for (unsigned c = 0; c < ncol[i]; c++)
				cw[c] = (scr_cols + 1) / ncol[i] - CELL_REST - 2;
		for (unsigned r = 0; r < rows; r++) {
			char buf[1024] = " ";
			size_t o = 1;
			for (unsigned c = 0; c < ncol[i]; c++) {
				unsigned j = c * rows + r;
				char one[512];
				if (j < shown)
					cell(one, sizeof(one), v, idx[i][j], cw[c]);
				else if (j == shown && shown < nidx[i])
					snprintf(one, sizeof(one),
						 "... %u more: --counters a,b,...",
						 nidx[i] - shown);
				else
					break;
				o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s%s",
						      c ? "  " : "", one);
				if (o >= sizeof(buf))
					break;
			}
			line(&p, "%s", buf);
		}
		bool hdr = false;
		for (unsigned k = 0; k < v->nhists; k++) {
			const struct ms_hist *hh = &v->hist[k];
			static struct ms_hist d;
			if (!hh->count)
				continue;
			if (!hdr)
				line(&p, " %-16s %7s %7s %7s %7s | %7s %7s %7s", "histogram",
				     "count", "p50", "p99", "max", "interval", "p50", "p99");
			hdr = true;
			bool di = interval_hist(v, k, &d);
			char name[80];
			stat_escape(name, sizeof(name), v->hist_name[k], false);
			name[fit(name, 16)] = '\0';
			line(&p, " %-16s %7s %7s %7s %7s | %7s %7s %7s", name,
			     fmt_si(b[0], sizeof(b[0]), (double)hh->count, ""),
			     fmt_ns(b[1], sizeof(b[1]), ms_hist_quantile(hh, 0.5)),
			     fmt_ns(b[2], sizeof(b[2]), ms_hist_quantile(hh, 0.99)),
			     fmt_ns(b[3], sizeof(b[3]), hh->max_ns),
			     di ? fmt_si(b[4], sizeof(b[4]), (double)d.count, "") : "0",
			     di ? fmt_ns(b[5], sizeof(b[5]), ms_hist_quantile(&d, 0.5)) : "-",
			     di ? fmt_ns(b[6], sizeof(b[6]), ms_hist_quantile(&d, 0.99)) : "-");
		}
	}
	if (!nslot)
		line(&p, "  (no slot in use yet)");
	page_end(&p);
}

/* ---- metrics: the Prometheus and OpenMetrics text formats ------------------------------- */

/* Families: every counter of every slot by name (one family per name, all slots' series in
 * it, as both formats want a family's lines together), every histogram likewise, and three
 * of this program's own about the files and slots. A family's type and unit come from the
 * counter's name: the file says nothing of either. */
enum fam_kind { FAM_COUNTER, FAM_GAUGE, FAM_HIST, FAM_ALIVE, FAM_VERIFIED, FAM_START,
		FAM_SLOT_LIVE, FAM_BACKEND };

#define FAM_NAME 96
struct family {
	char name[FAM_NAME]; /* without _total for a counter */
	const char *help;    /* its HELP text (NULL: the kind's generic one) */
	enum fam_kind kind;
	bool seconds;        /* the file's values are ns: exported in seconds */
	uint64_t mark_c, mark_h; /* the slot (file * MS_SHM_SLOTS + slot + 1) whose counter /
	                            histogram took it last: one series per slot */
};

/* What each library counter counts (lib/core/counters.h: the table the library's counters are
 * made from) and each histogram measures; NULL for a name neither has (the shim's slot, or a
 * publisher of another version): its kind's generic HELP then. */
static const struct {
	const char *name, *help;
} counter_help[] = {
#define HELP(n, h) { #n, h },
#define ERR_HELP(C, n, h) { "err_" #n, h },
	MS__COUNTERS(HELP, ERR_HELP)
#undef HELP
#undef ERR_HELP
	{ "call_first_ns", "ms_send to the first destination's transmit timestamp, in seconds" },
	{ "call_last_ns", "ms_send to the last destination's transmit timestamp, in seconds" },
	{ "first_last_ns", "first to last destination's transmit timestamp: the skew, in seconds" },
	{ "dest_lag_ns", "ms_send to each stamped destination's transmit timestamp, in seconds" },
};

static const char *help_of(const char *name)
{
	for (size_t i = 0; i < sizeof(counter_help) / sizeof(counter_help[0]); i++)
		if (!strcmp(counter_help[i].name, name))
			return counter_help[i].help;
	return NULL;
}

/* name made a metric name: "multisend_" and the name with every character outside
 * [a-zA-Z0-9_] made '_'; "ns" as one of its words (a value in nanoseconds) taken out and
 * "_seconds" put at the end instead (*seconds set); a counter's "_total" left off (the format
 * adds it to the sample); backlog_discarded (bytes) gets "_bytes". */
static void metric_name(char *dst, const char *name, bool hist, bool *seconds)
{
	char w[MS_SHM_NAME + 1];
	size_t o = 0;

	for (size_t i = 0; name[i] && o + 1 < sizeof(w); i++) {
		char c = name[i];
		w[o++] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
				 ? c : '_';
	}
	w[o] = '\0';
	*seconds = hist;
	char *ns;
	if (o >= 3 && !strcmp(w + o - 3, "_ns")) {
		w[o - 3] = '\0';
		*seconds = true;
	} else if ((ns = strstr(w, "_ns_"))) {
		memmove(ns, ns + 3, strlen(ns + 3) + 1);
		*seconds = true;
	} else if (!strncmp(w, "ns_", 3)) {
		memmove(w, w + 3, strlen(w + 3) + 1);
		*seconds = true;
	}
	size_t l = strlen(w);
	if (!hist && l >= 6 && !strcmp(w + l - 6, "_total"))
		w[l - 6] = '\0';
	snprintf(dst, FAM_NAME, "multisend_%s%s%s", w,
		 !strcmp(name, "backlog_discarded") ? "_bytes" : "", *seconds ? "_seconds" : "");
}

/* A label value: '\' '"' and newline escaped as both formats say; a byte that is not UTF-8,
 * and any other control character (neither format has an escape for them), become U+FFFD. */
static void label_value(FILE *out, const char *src)
{
	const unsigned char *p = (const unsigned char *)src;
	size_t n = strlen(src);

	for (size_t i = 0; i < n;) {
		uint32_t cp = 0;
		size_t len = utf8_len(p + i, n - i, &cp);
		if (!len || (cp < 0x20 && cp != '\n') || (cp >= 0x7f && cp <= 0x9f))
			fputs("\xef\xbf\xbd", out);
		else if (cp == '\n')
			fputs("\\n", out);
		else if (cp == '\\' || cp == '"')
			fprintf(out, "\\%c", (char)cp);
		else
			fwrite(p + i, 1, len, out);
		i += len ? len : 1;
	}
}

/* The series' labels; and key="val" last when key is not NULL (le, backend: values of this
 * program's own, never escaped). */
static void labels(FILE *out, const struct source *s, int slot, const char *key, const char *val)
{
	fprintf(out, "{pid=\"%" PRId32 "\",program=\"", s->pid);
	label_value(out, s->program);
	fputs("\",file=\"", out);
	label_value(out, s->path);
	/* Whose file it is: the pid and program labels are whatever its writer put there. */
	if (s->owner[0]) {
		fputs("\",owner=\"", out);
		label_value(out, s->owner);
		fputc('"', out);
	} else {
		fprintf(out, "\",owner=\"%lu\"", (unsigned long)s->uid);
	}
	if (slot >= 0) {
		fprintf(out, ",slot=\"%d\",context=\"", slot);
		label_value(out, s->slots[slot].name);
		fputc('"', out);
	}
	if (key)
		fprintf(out, ",%s=\"%s\"", key, val);
	fputc('}', out);
}

/* ns as seconds, exactly: "0.000001023", "12", "1.5". */
static const char *seconds(char *buf, size_t len, uint64_t ns)
{
	snprintf(buf, len, "%" PRIu64 ".%09" PRIu64, ns / 1000000000u, ns % 1000000000u);
	char *e = buf + strlen(buf) - 1;
	while (*e == '0')
		*e-- = '\0';
	if (*e == '.')
		*e = '\0';
	return buf;
}

static void value(FILE *out, uint64_t v, bool secs)
{
	char b[48];
	if (secs)
		fprintf(out, " %s\n", seconds(b, sizeof(b), v));
	else
		fprintf(out, " %" PRIu64 "\n", v);
}

/* The histogram's exported bounds: the upper end of every power of two's last bucket
 * (values are whole nanoseconds, so a bucket [lo, hi] is exactly "<= hi"): 15 ns, 31 ns, ...
 * 2^39 - 1 ns, then +Inf. Cumulative counts at these bounds are exact; the finer buckets
 * between them are summed. */
static bool exported_bound(unsigned i)
{
	return i % MS_HIST_SUB == MS_HIST_SUB - 1 && i + 1 < MS_HIST_BUCKETS;
}

static void hist_series(FILE *out, const struct family *f, const struct source *s, int slot,
			const struct ms_hist *h)
{
	char le[48];
	uint64_t cum = 0;

	for (unsigned i = 0; i < MS_HIST_BUCKETS; i++) {
		cum += h->bucket[i];
		if (!exported_bound(i))
			continue;
		uint64_t lo, hi;
		ms_hist_bucket_range(i, &lo, &hi);
		fprintf(out, "%s_bucket", f->name);
		labels(out, s, slot, "le", seconds(le, sizeof(le), hi));
		/* the count is the bound for every bucket: only a damaged file has more */
		value(out, cum < h->count ? cum : h->count, false);
	}
	fprintf(out, "%s_bucket", f->name);
	labels(out, s, slot, "le", "+Inf");
	value(out, h->count, false);
	fprintf(out, "%s_count", f->name);
	labels(out, s, slot, NULL, NULL);
	value(out, h->count, false);
	fprintf(out, "%s_sum", f->name);
	labels(out, s, slot, NULL, NULL);
	value(out, h->sum_ns, true);
}

static void family_head(FILE *out, const struct family *f, bool om)
{
	static const char *const type[] = { [FAM_COUNTER] = "counter", [FAM_GAUGE] = "gauge",
					    [FAM_HIST] = "histogram", [FAM_ALIVE] = "gauge",
					    [FAM_VERIFIED] = "gauge",
					    [FAM_START] = "gauge", [FAM_SLOT_LIVE] = "gauge",
					    [FAM_BACKEND] = "gauge" };
	static const char *const help[] = {
		[FAM_COUNTER] = "libmultisend live counter",
		[FAM_GAUGE] = "libmultisend live value",
		[FAM_HIST] = "libmultisend histogram, in seconds",
		[FAM_ALIVE] = "1 while the live-counter file has a live owner (its publisher)",
		[FAM_VERIFIED] = "1 when /proc shows the process the file names, as its maker",
		[FAM_START] = "when the publisher set up its live-counter file",
		[FAM_SLOT_LIVE] = "1 while the slot's context is live, 0 once it is closed",
		[FAM_BACKEND] = "1 for the backend the slot's context sends with now (label "
				"backend; it changes with MS_BACKEND_AUTO's choice)",
	};
	const char *suffix = !om && f->kind == FAM_COUNTER ? "_total" : "";
	size_t l = strlen(f->name);

	fprintf(out, "# HELP %s%s %s\n", f->name, suffix, f->help ? f->help : help[f->kind]);
	fprintf(out, "# TYPE %s%s %s\n", f->name, suffix, type[f->kind]);
	if (om && l > 8 && !strcmp(f->name + l - 8, "_seconds"))
		fprintf(out, "# UNIT %s seconds\n", f->name);
	else if (om && l > 6 && !strcmp(f->name + l - 6, "_bytes"))
		fprintf(out, "# UNIT %s bytes\n", f->name);
}

volatile sig_atomic_t *stat_stop;

const char *const stat_skip_reason[STAT_SKIP_N] = {
	[STAT_SKIP_OWNER] = "owner",
	[STAT_SKIP_NAMES] = "names",
	[STAT_SKIP_BUSY] = "busy",
	[STAT_SKIP_BUDGET] = "budget",
};

/* The families of one scrape, found by name through a hash (open addressing, at most half
 * full), so that each name costs one lookup whatever the number of families: a file of many
 * distinct names must cost time linear in them, never their square. */
struct families {
	struct family *f;
	size_t n, cap;
	uint32_t *slot; /* index + 1 into f, 0: empty */
	size_t nslot;   /* a power of two */
};

/* FNV-1a from a start of this process's own (the clock's, once): names chosen to collide
 * in one run collide in no other. */
static uint32_t name_hash(const char *p)
{
	static uint32_t seed;
	if (!seed) {
		struct timespec t;
		clock_gettime(CLOCK_MONOTONIC, &t);
		seed = (uint32_t)t.tv_nsec ^ (uint32_t)t.tv_sec * 2654435761u;
		seed |= 1;
	}
	uint32_t h = 2166136261u ^ seed;
	for (; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	return h;
}

/* The family called name: its index, or else a new one of that kind (the first kind to take
 * a name keeps it), or -1 when there is no room (out of memory). */
static long family_of(struct families *t, const char *name, enum fam_kind kind, bool secs)
{
	if (2 * (t->n + 1) > t->nslot) {
		size_t ns = t->nslot ? 2 * t->nslot : 256;
		uint32_t *sl = calloc(ns, sizeof(*sl));
		if (!sl)
			return -1;
		for (size_t i = 0; i < t->n; i++) {
			size_t j = name_hash(t->f[i].name) & (ns - 1);
			while (sl[j])
				j = (j + 1) & (ns - 1);
			sl[j] = (uint32_t)i + 1;
		}
		free(t->slot);
		t->slot = sl;
		t->nslot = ns;
	}
	size_t j = name_hash(name) & (t->nslot - 1);
	for (; t->slot[j]; j = (j + 1) & (t->nslot - 1))
		if (!strcmp(t->f[t->slot[j] - 1].name, name))
			return (long)t->slot[j] - 1;
	if (t->n == t->cap) {
		size_t nc = t->cap ? 2 * t->cap : 64;
		struct family *f = realloc(t->f, nc * sizeof(*f));
		if (!f)
			return -1;
		t->f = f;
		t->cap = nc;
	}
	struct family *f = &t->f[t->n];
	memset(f, 0, sizeof(*f));
	snprintf(f->name, sizeof(f->name), "%s", name);
	f->kind = kind;
	f->seconds = secs;
	t->slot[j] = (uint32_t)t->n + 1;
	return (long)t->n++;
}

/* One series of a counter or histogram: which family, file, slot and entry. */
struct series {
	uint32_t fam;
	uint32_t src;
	uint8_t slot, k;
	bool hist;
};

/* Lines a histogram's series takes: its exported bounds, +Inf, _count and _sum. */
static unsigned hist_lines(void)
{
	unsigned n = 3;
	for (unsigned i = 0; i < MS_HIST_BUCKETS; i++)
		n += exported_bound(i);
	return n;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* The distinct metric names of a source (a sorted copy: n log n), and the lines its series
 * take. names holds MS_SHM_SLOTS * (MS_SHM_COUNTERS + MS_SHM_HISTS) names. */
static unsigned source_names(const struct source *s, char (*names)[FAM_NAME], size_t *lines)
{
	size_t n = 0, hl = hist_lines();
	bool secs;

	*lines = 0;
	for (uint32_t j = 0; j < s->used; j++) {
		const struct slot_view *v = &s->slots[j];
		if (!v->have)
			continue;
		*lines += 2 + v->ncounters + v->nhists * hl; /* slot_live, backend_info */
		for (unsigned k = 0; k < v->ncounters; k++)
			metric_name(names[n++], v->counter_name[k], false, &secs);
		for (unsigned k = 0; k < v->nhists; k++)
			metric_name(names[n++], v->hist_name[k], true, &secs);
	}
	qsort(names, n, sizeof(names[0]), cmp_names);
	unsigned distinct = 0;
	for (size_t i = 0; i < n; i++)
		distinct += !i || strcmp(names[i], names[i - 1]);
	return distinct;
}

static void skipped_family(FILE *out, const uint64_t *skipped, bool om)
{
	const char *name = "multisend_stat_files_skipped";

	fprintf(out, "# HELP %s%s live-counter files this multisend-stat left out, by reason\n",
		name, om ? "" : "_total");
	fprintf(out, "# TYPE %s%s counter\n", name, om ? "" : "_total");
	for (unsigned r = 0; r < STAT_SKIP_N; r++)
		fprintf(out, "%s_total{reason=\"%s\"} %" PRIu64 "\n", name, stat_skip_reason[r],
			skipped[r]);
}

/* As node_exporter's node_exporter_build_info: the version of the libmultisend this
 * multisend-stat runs with (each publisher's own is its files' lib_version). */
static void build_info_family(FILE *out)
{
	fputs("# HELP multisend_build_info the libmultisend version multisend-stat runs with\n", out);
	fputs("# TYPE multisend_build_info gauge\n", out);
	fputs("multisend_build_info{version=\"", out);
	label_value(out, ms_version_string());
	fputs("\"} 1\n", out);
}

void stat_metrics(FILE *out, const struct source *const *s, size_t n, bool om,
		  uint64_t *skipped)
{
	static char (*names)[FAM_NAME]; /* a source's names, for its budget (kept: 400 KiB) */
	struct families t = { 0 };
	struct series *ser = NULL;
	size_t nser = 0, capser = 0, lines = 0;
	bool *out_of = calloc(n ? n : 1, sizeof(*out_of)); /* left out: over a budget */
	char m[FAM_NAME];
	bool secs;

	if (!names)
		names = malloc(MS_SHM_SLOTS * (MS_SHM_COUNTERS + MS_SHM_HISTS) * sizeof(*names));
	if (!out_of || !names)
		goto done; /* out of memory: only what there is room for */
	family_of(&t, "multisend_publisher_alive", FAM_ALIVE, false);
	family_of(&t, "multisend_publisher_pid_verified", FAM_VERIFIED, false);
	family_of(&t, "multisend_publisher_start_time_seconds", FAM_START, true);
	family_of(&t, "multisend_slot_live", FAM_SLOT_LIVE, false);
	family_of(&t, "multisend_backend_info", FAM_BACKEND, false);
	for (size_t i = 0; i < n; i++) {
		if (s[i]->problem)
			continue;
		/* The file's budget, and the scrape's: over either, the file is left out whole
		 * (never half of its series). */
		size_t its_lines;
		unsigned distinct = source_names(s[i], names, &its_lines);
		if (distinct > STAT_FILE_NAMES_MAX) {
			out_of[i] = true;
			if (skipped)
				skipped[STAT_SKIP_NAMES]++;
			continue;
		}
		if (t.n + distinct > STAT_SCRAPE_FAMILIES_MAX ||
		    lines + its_lines > STAT_SCRAPE_LINES_MAX) {
			out_of[i] = true;
			if (skipped)
				skipped[STAT_SKIP_BUDGET]++;
			continue;
		}
		lines += its_lines;
		/* Every counter and histogram that belongs to a family: the first of its slot
		 * with that metric name (two names may make one), of the family's kind. Marks
		 * (file and slot, + 1) on each family say which slot took it last. */
		for (uint32_t j = 0; j < s[i]->used; j++) {
			const struct slot_view *v = &s[i]->slots[j];
			uint64_t stamp = (uint64_t)i * MS_SHM_SLOTS + j + 1;
			if (!v->have)
				continue;
			for (unsigned k = 0; k < v->ncounters + v->nhists; k++) {
				bool hist = k >= v->ncounters;
				unsigned e = hist ? k - v->ncounters : k;
				const char *name = hist ? v->hist_name[e] : v->counter_name[e];
				metric_name(m, name, hist, &secs);
				long f = family_of(&t, m,
						   hist ? FAM_HIST
							: is_gauge(name) ? FAM_GAUGE : FAM_COUNTER,
						   hist ? true : secs);
				if (f < 0)
					continue;
				if (!t.f[f].help)
					t.f[f].help = help_of(name);
				uint64_t *mark = hist ? &t.f[f].mark_h : &t.f[f].mark_c;
				if (*mark == stamp)
					continue; /* not the first of its slot */
				*mark = stamp;
				enum fam_kind kind = t.f[f].kind;
				if (hist ? kind != FAM_HIST
					 : kind != (is_gauge(name) ? FAM_GAUGE : FAM_COUNTER))
					continue; /* the name is another kind's */
				if (nser == capser) {
					size_t nc = capser ? 2 * capser : 1024;
					struct series *x = realloc(ser, nc * sizeof(*x));
					if (!x)
						continue;
					ser = x;
					capser = nc;
				}
				ser[nser++] = (struct series){ .fam = (uint32_t)f, .src = (uint32_t)i,
							       .slot = (uint8_t)j, .k = (uint8_t)e,
							       .hist = hist };
			}
		}
	}
done:;
	/* The series by family, in the order they came (a counting sort: stable, linear). */
	size_t *first = calloc(t.n + 1, sizeof(*first));
	struct series *by = nser ? malloc(nser * sizeof(*by)) : NULL;
	if (first && (by || !nser)) {
		for (size_t i = 0; i < nser; i++)
			first[ser[i].fam + 1]++;
		for (size_t f = 0; f < t.n; f++)
			first[f + 1] += first[f];
		size_t *at = calloc(t.n + 1, sizeof(*at));
		if (at) {
			memcpy(at, first, (t.n + 1) * sizeof(*at));
			for (size_t i = 0; i < nser; i++)
				by[at[ser[i].fam]++] = ser[i];
			free(at);
		} else {
			nser = 0;
			memset(first, 0, (t.n + 1) * sizeof(*first));
		}
	} else {
		nser = 0;
	}
	for (size_t f = 0; f < t.n && first && !(stat_stop && *stat_stop); f++) {
		const struct family *F = &t.f[f];
		family_head(out, F, om);
		if (F->kind == FAM_ALIVE || F->kind == FAM_VERIFIED || F->kind == FAM_START ||
		    F->kind == FAM_SLOT_LIVE || F->kind == FAM_BACKEND) {
			for (size_t i = 0; i < n; i++) {
				const struct source *src = s[i];
				if (src->problem || (out_of && out_of[i]))
					continue;
				if (F->kind != FAM_SLOT_LIVE && F->kind != FAM_BACKEND) {
					fputs(F->name, out);
					labels(out, src, -1, NULL, NULL);
					if (F->kind == FAM_ALIVE)
						value(out, !src->owner_gone, false);
					else if (F->kind == FAM_VERIFIED)
						value(out, src->pid_verified, false);
					else
						value(out, src->start_ns, true);
					continue;
				}
				for (uint32_t j = 0; j < src->used; j++) {
					const struct slot_view *v = &src->slots[j];
					if (!v->have)
						continue;
					if (F->kind == FAM_BACKEND) {
						if (!slot_backend(v))
							continue; /* the shim's slot */
						fputs(F->name, out);
						labels(out, src, (int)j, "backend", slot_backend(v));
						value(out, 1, false);
						continue;
					}
					fputs(F->name, out);
					labels(out, src, (int)j, NULL, NULL);
					value(out, v->state == MS_SHM_LIVE, false);
				}
			}
			continue;
		}
		for (size_t i = first[f]; i < first[f + 1] && !(stat_stop && *stat_stop); i++) {
			const struct series *x = &by[i];
			const struct source *src = s[x->src];
			const struct slot_view *v = &src->slots[x->slot];
			if (x->hist) {
				hist_series(out, F, src, x->slot, &v->hist[x->k]);
				continue;
			}
			fprintf(out, "%s%s", F->name, F->kind == FAM_COUNTER ? "_total" : "");
			labels(out, src, x->slot, NULL, NULL);
			value(out, v->counter[x->k], F->seconds);
		}
	}
	if (skipped)
		skipped_family(out, skipped, om);
	build_info_family(out);
	if (om)
		fputs("# EOF\n", out);
	free(first);
	free(by);
	free(ser);
	free(out_of);
	free(t.f);
	free(t.slot);
}
