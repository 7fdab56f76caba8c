/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the LD_PRELOAD shim's configuration parser (shim/config.c, compiled in)
 * on arbitrary MULTISEND_* values and program names. config.c's shim_config_parse is the code
 * shim_config_load runs, with the environment replaced by a lookup over the input; shim_warn
 * (resolve.c in the shim) is replaced here by a hook that records each warning instead of
 * writing it to stderr.
 *
 * Input: byte 0 holds flags (bit 0: an AT_SECURE process, whose lookup finds nothing; bit 1:
 * program_invocation_short_name is NULL). The rest is chunks separated by NUL bytes (a value
 * in the environment cannot hold one; the last chunk needs no terminator). A chunk's first
 * byte is a tag: tag & 15 picks the slot (0..6 and 9 the variables below, 7 the name the
 * program was invoked as, 8 the executable's file name, others are ignored; 9 came last, so
 * that the corpus kept its meaning); a later chunk for a slot replaces an earlier one. With tag & 16 the value is stretched: the low six bits of the next
 * two bytes give a count (high bits first, 0..4095; the other bits are free, so that no byte
 * need be NUL) of copies of the byte after them, and the rest follows, so "0" x 3000 + "7",
 * or a 1024-byte MULTISEND_STATS, fit in a short input.
 *
 * Checks, for every input: no crash or sanitizer report; every field is within its
 * documented range or holds its default; the result and the warnings are exactly those of an
 * independent model of the documented rules (README's table of MULTISEND_* variables, the
 * comments in config.c): one warning per refused value, with its documented text, none for
 * an accepted or unset one; each variable is read at most once and the values are not
 * modified; and parsing the same input again gives the same configuration and warnings.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

#define CHECK(c)                                                                             \
	do {                                                                                 \
		if (!(c)) {                                                                  \
			fprintf(stderr, "fuzz-shim-config: check failed: %s (line %d)\n", #c, \
				__LINE__);                                                   \
			abort();                                                             \
		}                                                                            \
	} while (0)

enum { V_MODE, V_MAX, V_DELAY, V_DEFER, V_FANOUT, V_STATS, V_PROGRAMS, S_INVOKED, S_EXE,
       V_STATS_SHM, NSLOTS };

/* Indexed by slot: NULL for the two names that are not variables. */
static const char *const var_names[NSLOTS] = {
	"MULTISEND_PRELOAD_MODE", "MULTISEND_BATCH_MAX", "MULTISEND_BATCH_DELAY_US",
	"MULTISEND_DEFER_ERRORS", "MULTISEND_BATCH_FANOUT_END", "MULTISEND_STATS",
	"MULTISEND_PRELOAD_PROGRAMS", NULL, NULL, "MULTISEND_STATS_SHM",
};

/* ---- the warning hook ----------------------------------------------------------------------- */

enum { MAXWARN = 16, WARNLEN = 512 };
struct warnings {
	unsigned n;
	char text[MAXWARN][WARNLEN];
};
static struct warnings *warn_to;

/* Stands in for resolve.c's shim_warn, which formats into 512 bytes with the prefix
 * "libmultisend-preload: " and a newline: a warning must fit there whole. */
void shim_warn(const char *fmt, ...)
{
	char buf[WARNLEN];
	va_list ap;

	va_start(ap, fmt);
	int m = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	CHECK(m > 0 && (size_t)m + sizeof(SHIM_NAME ": ") - 1 <= WARNLEN - 2);
	CHECK(warn_to && warn_to->n < MAXWARN);
	memcpy(warn_to->text[warn_to->n++], buf, (size_t)m + 1);
}

/* ---- the input ------------------------------------------------------------------------------ */

struct env {
	bool secure;
	char *val[NSLOTS];   /* malloc'ed to size, so a read past a value's end is caught */
	size_t len[NSLOTS];
	unsigned asked[NSLOTS];
};

static const char *lookup(void *arg, const char *name)
{
	struct env *e = arg;

	CHECK(!strncmp(name, "MULTISEND_", 10));
	for (int i = 0; i < NSLOTS; i++) {
		if (!var_names[i] || strcmp(name, var_names[i]))
			continue;
		e->asked[i]++;
		return e->secure ? NULL : e->val[i];
	}
	return NULL;
}

static void decode(struct env *e, const uint8_t *data, size_t size)
{
	memset(e, 0, sizeof(*e));
	if (!size)
		return;
	e->secure = data[0] & 1;
	size_t i = 1;
	while (i < size) {
		const uint8_t *end = memchr(data + i, 0, size - i);
		size_t clen = end ? (size_t)(end - (data + i)) : size - i;
		const uint8_t *c = data + i;
		i += clen + 1;
		if (!clen)
			continue;
		unsigned slot = c[0] & 15, stretch = c[0] & 16;
		c++, clen--;
		size_t reps = 0;
		uint8_t fill = '0';
		if (stretch && clen >= 3) {
			reps = (size_t)(c[0] & 63) << 6 | (c[1] & 63);
			fill = c[2];
			c += 3, clen -= 3;
		}
		if (slot >= NSLOTS)
			continue;
		char *v = malloc(reps + clen + 1);
		CHECK(v);
		memset(v, fill, reps);
		memcpy(v + reps, c, clen);
		v[reps + clen] = '\0';
		free(e->val[slot]);
		e->val[slot] = v;
		e->len[slot] = reps + clen;
	}
	if (data[0] & 2) {
		free(e->val[S_INVOKED]);
		e->val[S_INVOKED] = NULL;
	} else if (!e->val[S_INVOKED]) {
		e->val[S_INVOKED] = strdup("fuzz-shim-config");
		CHECK(e->val[S_INVOKED]);
	}
}

/* ---- the model: what the documentation says the result is ---------------------------------- */

static struct shim_config documented_defaults(void)
{
	struct shim_config c;
	memset(&c, 0, sizeof(c));
	c.mode = SHIM_METRICS;
	c.asked = SHIM_METRICS;
	c.batch_max = 1024;
	c.delay_us = 500;
	c.defer_errors = false;
	c.fanout_end = true;
	return c;
}

static void expect_warning(struct warnings *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void expect_warning(struct warnings *w, const char *fmt, ...)
{
	va_list ap;
	CHECK(w->n < MAXWARN);
	va_start(ap, fmt);
	vsnprintf(w->text[w->n++], WARNLEN, fmt, ap);
	va_end(ap);
}

/* The value shown in a warning (shim.h, shim_quote): each byte as itself when it is printable
 * ASCII other than a backslash, a backslash doubled, any other byte as \x and two lowercase
 * hex digits; as many whole bytes as fit in 128 characters, then "..." if any are left. */
static const char *shown(const char *v)
{
	static char buf[128 + 4];
	size_t n = 0;
	for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
		char one[5];
		if (*p == '\\')
			strcpy(one, "\\\\");
		else if (*p >= ' ' && *p <= '~')
			one[0] = (char)*p, one[1] = '\0';
		else
			snprintf(one, sizeof(one), "\\x%02x", *p);
		if (n + strlen(one) > 128) {
			strcpy(buf + n, "...");
			return buf;
		}
		strcpy(buf + n, one);
		n += strlen(one);
	}
	buf[n] = '\0';
	return buf;
}

/* A whole number from lo to hi: digits only (leading zeros allowed), at least one. */
static bool model_uint(const char *v, unsigned long lo, unsigned long hi, unsigned *out)
{
	if (!*v || strspn(v, "0123456789") != strlen(v))
		return false;
	while (v[0] == '0' && v[1])
		v++;
	if (strlen(v) > 7) /* hi is at most 1000000 */
		return false;
	unsigned long x = strtoul(v, NULL, 10);
	if (x < lo || x > hi)
		return false;
	*out = (unsigned)x;
	return true;
}

static void model_bool(const char *name, const char *v, bool *out, struct warnings *w)
{
	if (!strcmp(v, "0") || !strcmp(v, "1"))
		*out = v[0] == '1';
	else if (*v) /* empty: unset */
		expect_warning(w, "ignoring %s='%s': not 0 or 1 (using %d)", name, shown(v), *out);
}

/* The name as the shim keeps it: its first 63 bytes. */
static void cut(char out[64], const char *s)
{
	size_t n = strnlen(s, 63);
	memcpy(out, s, n);
	out[n] = '\0';
}

/* Is name (non-empty) one of the comma-separated entries of list? */
static bool model_listed(const char *list, const char *name)
{
	if (!*name)
		return false;
	char *copy = strdup(list), *rest = copy, *entry;
	CHECK(copy);
	bool found = false;
	while ((entry = strsep(&rest, ",")))
		found |= !strcmp(entry, name);
	free(copy);
	return found;
}

static void model(const struct env *e, struct shim_config *c, struct warnings *w)
{
	const char *v[NSLOTS];
	for (int i = 0; i < NSLOTS; i++)
		v[i] = e->secure || !var_names[i] ? NULL : e->val[i];

	*c = documented_defaults();
	memset(w, 0, sizeof(*w));
	char exe[64], prog[64];
	cut(exe, e->val[S_EXE] ? e->val[S_EXE] : "");
	cut(prog, e->val[S_INVOKED] ? e->val[S_INVOKED] : exe);
	strcpy(c->program, prog);

	if (v[V_MODE] && *v[V_MODE]) {
		if (!strcmp(v[V_MODE], "metrics"))
			c->asked = SHIM_METRICS;
		else if (!strcmp(v[V_MODE], "batch"))
			c->asked = SHIM_BATCH;
		else if (!strcmp(v[V_MODE], "bypass"))
			c->asked = SHIM_BYPASS;
		else if (!strcmp(v[V_MODE], "off"))
			c->asked = SHIM_OFF;
		else
			expect_warning(w, "ignoring MULTISEND_PRELOAD_MODE='%s': not metrics, batch, "
				       "bypass or off (using metrics)", shown(v[V_MODE]));
	}
	c->mode = c->asked;
	if (v[V_MAX] && !model_uint(v[V_MAX], 1, 1024, &c->batch_max))
		expect_warning(w, "ignoring MULTISEND_BATCH_MAX='%s': not a whole number from 1 "
			       "to 1024 (using 1024)", shown(v[V_MAX]));
	if (v[V_DELAY] && !model_uint(v[V_DELAY], 10, 1000000, &c->delay_us))
		expect_warning(w, "ignoring MULTISEND_BATCH_DELAY_US='%s': not a whole number "
			       "from 10 to 1000000 (using 500)", shown(v[V_DELAY]));
	if (v[V_DEFER])
		model_bool("MULTISEND_DEFER_ERRORS", v[V_DEFER], &c->defer_errors, w);
	if (v[V_FANOUT])
		model_bool("MULTISEND_BATCH_FANOUT_END", v[V_FANOUT], &c->fanout_end, w);
	if (v[V_STATS] && *v[V_STATS]) {
		size_t n = e->len[V_STATS];
		if (n > 1023) {
			expect_warning(w, "ignoring MULTISEND_STATS: path longer than 1023 bytes "
				       "(using stderr)");
		} else {
			memcpy(c->stats_path, v[V_STATS], n + 1);
			c->json = n >= 5 && !memcmp(v[V_STATS] + n - 5, ".json", 5);
		}
	}
	if (v[V_STATS_SHM] && *v[V_STATS_SHM]) {
		if (e->len[V_STATS_SHM] > 1023)
			expect_warning(w, "ignoring MULTISEND_STATS_SHM: path longer than 1023 bytes "
				       "(no live counters)");
		else
			memcpy(c->stats_shm, v[V_STATS_SHM], e->len[V_STATS_SHM] + 1);
	}
	if (v[V_PROGRAMS] && *v[V_PROGRAMS] && !model_listed(v[V_PROGRAMS], prog) &&
	    !model_listed(v[V_PROGRAMS], exe))
		c->mode = SHIM_OFF;
}

/* ---- the target ----------------------------------------------------------------------------- */

static void parse(struct env *e, struct shim_config *c, struct warnings *w)
{
	*c = documented_defaults();
	memset(w, 0, sizeof(*w));
	memset(e->asked, 0, sizeof(e->asked));
	warn_to = w;
	shim_config_parse(c, lookup, e, e->val[S_INVOKED], e->val[S_EXE] ? e->val[S_EXE] : "");
	warn_to = NULL;
	for (int i = 0; i < NSLOTS; i++)
		CHECK(e->asked[i] <= 1);
}

/* What holds whatever the input: ranges, terminators, the mode filter's only effect. */
static void check_ranges(const struct shim_config *c)
{
	CHECK(c->asked == SHIM_OFF || c->asked == SHIM_METRICS || c->asked == SHIM_BATCH ||
	      c->asked == SHIM_BYPASS);
	CHECK(c->mode == c->asked || c->mode == SHIM_OFF);
	CHECK(c->batch_max >= 1 && c->batch_max <= SHIM_BATCH_MAX_LIMIT);
	CHECK(c->delay_us >= SHIM_DELAY_US_MIN && c->delay_us <= SHIM_DELAY_US_MAX);
	CHECK(!c->secure);
	size_t n = strnlen(c->stats_path, sizeof(c->stats_path));
	CHECK(n < sizeof(c->stats_path));
	CHECK(c->json == (n >= 5 && !strcmp(c->stats_path + n - 5, ".json")));
	CHECK(strnlen(c->stats_shm, sizeof(c->stats_shm)) < sizeof(c->stats_shm));
	CHECK(strnlen(c->program, sizeof(c->program)) < sizeof(c->program));
}

static bool same_config(const struct shim_config *a, const struct shim_config *b)
{
	return a->mode == b->mode && a->asked == b->asked && a->batch_max == b->batch_max &&
	       a->delay_us == b->delay_us && a->defer_errors == b->defer_errors &&
	       a->fanout_end == b->fanout_end && a->secure == b->secure && a->json == b->json &&
	       !strcmp(a->stats_path, b->stats_path) && !strcmp(a->stats_shm, b->stats_shm) &&
	       !strcmp(a->program, b->program);
}

static bool same_warnings(const struct warnings *a, const struct warnings *b)
{
	if (a->n != b->n)
		return false;
	for (unsigned i = 0; i < a->n; i++)
		if (strcmp(a->text[i], b->text[i]))
			return false;
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* The shim's own defaults (config.c's initializer of shim_cfg) are the documented ones. */
	struct shim_config d = documented_defaults();
	CHECK(same_config(&shim_cfg, &d) && !shim_cfg.stats_path[0] && !shim_cfg.stats_shm[0] &&
	      !shim_cfg.program[0]);

	static struct env e;
	decode(&e, data, size);
	char *saved[NSLOTS];
	for (int i = 0; i < NSLOTS; i++) {
		saved[i] = e.val[i] ? strdup(e.val[i]) : NULL;
		CHECK(!e.val[i] || saved[i]);
	}

	static struct shim_config got, again, want;
	static struct warnings wgot, wagain, wwant;
	parse(&e, &got, &wgot);
	check_ranges(&got);
	for (int i = 0; i < NSLOTS; i++) /* the values are the environment's: read only */
		CHECK(!e.val[i] == !saved[i] && (!saved[i] || !strcmp(e.val[i], saved[i])));

	model(&e, &want, &wwant);
	if (!same_config(&got, &want) || !same_warnings(&wgot, &wwant)) {
		fprintf(stderr, "fuzz-shim-config: parsed mode %d/%d max %u delay %u defer %d "
			"fanout %d json %d program '%s', %u warning(s)\n", got.mode, got.asked,
			got.batch_max, got.delay_us, got.defer_errors, got.fanout_end, got.json,
			got.program, wgot.n);
		for (unsigned i = 0; i < wgot.n; i++)
			fprintf(stderr, "  got:  %s\n", wgot.text[i]);
		fprintf(stderr, "model: mode %d/%d max %u delay %u defer %d fanout %d json %d "
			"program '%s', %u warning(s)\n", want.mode, want.asked, want.batch_max,
			want.delay_us, want.defer_errors, want.fanout_end, want.json, want.program,
			wwant.n);
		for (unsigned i = 0; i < wwant.n; i++)
			fprintf(stderr, "  want: %s\n", wwant.text[i]);
		CHECK(!"the parse agrees with the documented rules");
	}

	/* Deterministic: the same input again, same result, byte for byte. */
	parse(&e, &again, &wagain);
	CHECK(!memcmp(&got, &again, sizeof(got)) && same_warnings(&wgot, &wagain));

	for (int i = 0; i < NSLOTS; i++) {
		free(e.val[i]);
		free(saved[i]);
		e.val[i] = NULL;
	}
	return 0;
}
