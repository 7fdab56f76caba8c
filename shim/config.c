/* SPDX-License-Identifier: MIT */
/*
 * MULTISEND_* variables. Read once, on the first intercepted call (never in a constructor),
 * with secure_getenv: in a setuid or otherwise AT_SECURE process every variable is ignored and
 * the defaults apply. Parsed strictly: a value that is not exactly right earns one line on
 * stderr and the default, never a guess. The parsing itself (shim_config_parse) takes its
 * variables from a lookup function and the program's names as arguments, so that
 * tests/fuzz/fuzz-shim-config.c can run it on arbitrary values.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "shim.h"

struct shim_config shim_cfg = {
	.mode = SHIM_METRICS,
	.asked = SHIM_METRICS,
	.batch_max = SHIM_BATCH_MAX_DEFAULT,
	.delay_us = SHIM_DELAY_US_DEFAULT,
	.fanout_end = true,
};

const char *shim_quote(struct shim_quoted *q, const char *v)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = 0;

	for (; *v; v++) {
		unsigned char c = (unsigned char)*v;
		size_t need = c == '\\' ? 2 : (c < 0x20 || c >= 0x7f) ? 4 : 1;
		if (n + need > SHIM_QUOTE_SHOWN) {
			memcpy(q->s + n, "...", 3);
			n += 3;
			break;
		}
		if (c == '\\') {
			q->s[n++] = '\\';
			q->s[n++] = '\\';
		} else if (need == 4) {
			q->s[n++] = '\\';
			q->s[n++] = 'x';
			q->s[n++] = hex[c >> 4];
			q->s[n++] = hex[c & 15];
		} else {
			q->s[n++] = (char)c;
		}
	}
	q->s[n] = '\0';
	return q->s;
}

/* "0" or "1" (an empty value is unset); anything else is refused. */
static void parse_bool(const char *name, const char *v, bool *out)
{
	if (!strcmp(v, "1"))
		*out = true;
	else if (!strcmp(v, "0"))
		*out = false;
	else if (*v)
		shim_warn("ignoring %s='%s': not 0 or 1 (using %d)", name,
			  shim_quote(&(struct shim_quoted){ 0 }, v), *out);
}

/* A decimal number from lo to hi, digits only; false (and a warning) otherwise. */
static bool parse_uint(const char *name, const char *v, unsigned lo, unsigned hi, unsigned *out)
{
	unsigned long x = 0;
	const char *p = v;

	if (!*p)
		goto bad;
	for (; *p; p++) {
		if (*p < '0' || *p > '9')
			goto bad;
		x = x * 10 + (unsigned long)(*p - '0');
		if (x > hi)
			goto bad;
	}
	if (x < lo)
		goto bad;
	*out = (unsigned)x;
	return true;
bad:
	shim_warn("ignoring %s='%s': not a whole number from %u to %u (using %u)", name,
		  shim_quote(&(struct shim_quoted){ 0 }, v), lo, hi, *out);
	return false;
}

/* Does the comma-separated list name this program? Entries are basenames. */
static bool listed(const char *list, const char *name)
{
	size_t n = strlen(name);

	if (!n)
		return false;
	for (const char *p = list; *p;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (len == n && !memcmp(p, name, n))
			return true;
		if (!end)
			break;
		p = end + 1;
	}
	return false;
}

/* Names longer than the buffer are cut: they only label the report and match the filter. */
static void copy_name(char *dst, size_t cap, const char *src)
{
	size_t n = strnlen(src, cap - 1);
	memcpy(dst, src, n);
	dst[n] = '\0';
}

static void program_names(char *exe, size_t exesz)
{
	char path[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);

	exe[0] = '\0';
	if (n > 0) {
		path[n] = '\0';
		const char *b = strrchr(path, '/');
		b = b ? b + 1 : path;
		copy_name(exe, exesz, b);
	}
}

void shim_config_parse(struct shim_config *c, shim_config_get_fn get, void *arg,
		       const char *invoked, const char *exe_name)
{
	const char *v;
	char exe[64];

	copy_name(exe, sizeof(exe), exe_name);
	copy_name(c->program, sizeof(c->program), invoked ? invoked : exe);

	v = get(arg, "MULTISEND_PRELOAD_MODE");
	if (v && *v) {
		if (!strcmp(v, "metrics"))
			c->asked = SHIM_METRICS;
		else if (!strcmp(v, "batch"))
			c->asked = SHIM_BATCH;
		else if (!strcmp(v, "bypass"))
			c->asked = SHIM_BYPASS;
		else if (!strcmp(v, "off"))
			c->asked = SHIM_OFF;
		else
			shim_warn("ignoring MULTISEND_PRELOAD_MODE='%s': not metrics, batch, bypass "
				  "or off (using metrics)", shim_quote(&(struct shim_quoted){ 0 }, v));
	}
	c->mode = c->asked;

	v = get(arg, "MULTISEND_BATCH_MAX");
	if (v)
		parse_uint("MULTISEND_BATCH_MAX", v, 1, SHIM_BATCH_MAX_LIMIT, &c->batch_max);
	v = get(arg, "MULTISEND_BATCH_DELAY_US");
	if (v)
		parse_uint("MULTISEND_BATCH_DELAY_US", v, SHIM_DELAY_US_MIN, SHIM_DELAY_US_MAX,
			   &c->delay_us);
	v = get(arg, "MULTISEND_DEFER_ERRORS");
	if (v)
		parse_bool("MULTISEND_DEFER_ERRORS", v, &c->defer_errors);
	v = get(arg, "MULTISEND_BATCH_FANOUT_END");
	if (v)
		parse_bool("MULTISEND_BATCH_FANOUT_END", v, &c->fanout_end);

	v = get(arg, "MULTISEND_STATS");
	if (v && *v) {
		size_t n = strlen(v);
		if (n >= sizeof(c->stats_path)) {
			shim_warn("ignoring MULTISEND_STATS: path longer than %zu bytes (using "
				  "stderr)", sizeof(c->stats_path) - 1);
		} else {
			memcpy(c->stats_path, v, n + 1);
			c->json = n >= 5 && !strcmp(v + n - 5, ".json");
		}
	}

	/* Live counters (live.c): the path as given; %p is expanded when the file is made. */
	v = get(arg, "MULTISEND_STATS_SHM");
	if (v && *v) {
		size_t n = strlen(v);
		if (n >= sizeof(c->stats_shm))
			shim_warn("ignoring MULTISEND_STATS_SHM: path longer than %zu bytes (no live "
				  "counters)", sizeof(c->stats_shm) - 1);
		else
			memcpy(c->stats_shm, v, n + 1);
	}

	/* Kernel bypass (bypass.c) for batch mode's batches or bypass mode's sends: an interface
	 * name, checked here for its form, by the library when the first send needs it. */
	v = get(arg, "MULTISEND_PRELOAD_XDP_IFACE");
	if (v && *v) {
		size_t n = strlen(v);
		if (n >= sizeof(c->xdp_iface) || strchr(v, '/') || strchr(v, ' '))
			shim_warn("ignoring MULTISEND_PRELOAD_XDP_IFACE='%s': not an interface name",
				  shim_quote(&(struct shim_quoted){ 0 }, v));
		else
			memcpy(c->xdp_iface, v, n + 1);
	}

	/* Frames skip netfilter: by default the port takes no queue where it filters output
	 * (lib/os/netfilter.h); this says the operator accepts that. */
	v = get(arg, "MULTISEND_PRELOAD_XDP_NETFILTER");
	c->xdp_nf_skip = v && !strcmp(v, "skip");

	/* Children inherit LD_PRELOAD; the filter keeps every program not named untouched. */
	v = get(arg, "MULTISEND_PRELOAD_PROGRAMS");
	if (v && *v && !listed(v, c->program) && !listed(v, exe))
		c->mode = SHIM_OFF;
}

static const char *env_get(void *arg, const char *name)
{
	(void)arg;
	return secure_getenv(name);
}

void shim_config_load(void)
{
	char exe[64];

	shim_cfg.secure = getauxval(AT_SECURE) != 0;
	program_names(exe, sizeof(exe));
	shim_config_parse(&shim_cfg, env_get, NULL, program_invocation_short_name, exe);
}
