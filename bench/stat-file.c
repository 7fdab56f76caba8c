/* SPDX-License-Identifier: MIT */
/*
 * multisend-stat's reading of a live-counter file's bytes and its outputs (bench/stat-file.h).
 * Everything here reads only the bytes it is given, never past the length it is given, and
 * trusts none of them: counts are clamped, names are copied with a terminator and escaped
 * when shown, a sequence word that never settles costs a bounded number of tries.
 */
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "stat-file.h"

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
 * of overlapping a write small. Returns false when the writer was always busy. */
static bool read_values(const struct ms_shm_slot *s, struct slot_view *v, unsigned max_tries)
{
	uint32_t nc = v->ncounters, nh = v->nhists;

	for (unsigned tries = 0; tries < max_tries; tries++) {
		uint64_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
		if (seq & 1) {
			if (tries % 64 == 63)
				sched_yield();
			continue;
		}
		v->updated_ns = s->updated_ns;
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
		memcpy(keep, v->counter, sizeof(keep));
		if (!read_values(src, v, tries)) {
			v->stale = true;
			s->stale++;
			memcpy(v->counter, keep, sizeof(keep));
			continue;
		}
		v->stale = false;
		if (v->have) {
			memcpy(v->prev, keep, sizeof(keep));
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
			       ",\"p999\":%" PRIu64 ",\"max\":%" PRIu64 "}",
			       hh->count, hh->count ? (double)hh->sum_ns / (double)hh->count : 0.0,
			       hh->min_ns, ms_hist_quantile(hh, 0.5), ms_hist_quantile(hh, 0.9),
			       ms_hist_quantile(hh, 0.99), ms_hist_quantile(hh, 0.999), hh->max_ns);
		}
		fprintf(out, "}}");
		sep = ",";
	}
	fprintf(out, "]}\n");
}

/* ---- the screen ------------------------------------------------------------------------- */

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

void stat_screen(FILE *out, const struct source *s, uint64_t now_real)
{
	if (s->problem) {
		fprintf(out, "%s\n  %s\n\n", tx(s->path), s->problem);
		return;
	}
	uint64_t up = now_real > s->start_ns ? (now_real - s->start_ns) / 1000000000u : 0;
	fprintf(out, "%s: pid %" PRId32 " (%s), up %" PRIu64 ":%02" PRIu64 ":%02" PRIu64
	       ", libmultisend %s%s\n", tx(s->path), s->pid, tx(s->program), up / 3600, up / 60 % 60,
	       up % 60, tx(s->lib_version),
	       s->owner_gone ? ", EXITED" : s->pid_verified ? "" : ", pid not seen in /proc");
	bool any = false;
	for (uint32_t i = 0; i < s->used; i++) {
		const struct slot_view *v = &s->slots[i];
		char b[6][24];

		if (!v->have)
			continue;
		any = true;
		fprintf(out, "  slot %" PRIu32 " \"%s\": %s%s\n", i, tx(v->name), state_name(v->state),
		       v->stale ? " (busy: values from an earlier interval)" : "");
		fprintf(out, "    %-32s %20s %14s\n", "counter", "value", "per second");
		for (unsigned k = 0; k < v->ncounters; k++) {
			double r = rate(v, k);
			if (r < 0)
				fprintf(out, "    %-32s %20" PRIu64 " %14s\n", tx(v->counter_name[k]),
				       v->counter[k], "-");
			else
				fprintf(out, "    %-32s %20" PRIu64 " %14.1f\n", tx(v->counter_name[k]),
				       v->counter[k], r);
		}
		bool hdr = false;
		for (unsigned k = 0; k < v->nhists; k++) {
			const struct ms_hist *hh = &v->hist[k];
			if (!hh->count)
				continue;
			if (!hdr)
				fprintf(out, "    %-20s %12s %9s %9s %9s %9s %9s\n", "histogram", "count",
				       "p50", "p90", "p99", "p99.9", "max");
			hdr = true;
			fprintf(out, "    %-20s %12" PRIu64 " %9s %9s %9s %9s %9s\n", tx(v->hist_name[k]),
			       hh->count, fmt_ns(b[0], sizeof(b[0]), ms_hist_quantile(hh, 0.5)),
			       fmt_ns(b[1], sizeof(b[1]), ms_hist_quantile(hh, 0.9)),
			       fmt_ns(b[2], sizeof(b[2]), ms_hist_quantile(hh, 0.99)),
			       fmt_ns(b[3], sizeof(b[3]), ms_hist_quantile(hh, 0.999)),
			       fmt_ns(b[4], sizeof(b[4]), hh->max_ns));
		}
		if (!hdr && v->nhists)
			fprintf(out, "    (no histogram has samples yet)\n");
	}
	if (!any)
		fprintf(out, "  (no slot in use yet)\n");
	fprintf(out, "\n");
}

