/* SPDX-License-Identifier: MIT */
/* The public header on its own, in strict C99, without _GNU_SOURCE (meson.build adds
 * -std=c99 -pedantic-errors -Wall -Wextra -Werror -U_GNU_SOURCE): if the header stops
 * compiling so, the build fails. It also links and checks the version numbers agree.
 * Only multisend.h is included, to prove it is self-contained. Exit codes: 0 ok, 1 version
 * number differs, 2 version string differs, 3 bad backend name. */
#include <multisend.h>

#if defined(_GNU_SOURCE)
#error "_GNU_SOURCE is defined: this test must compile the header without it"
#endif
#if !defined(__STDC_VERSION__) || __STDC_VERSION__ != 199901L
#error "not compiled as C99"
#endif

static int same(const char *a, const char *b)
{
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

int main(void)
{
	struct ms_config cfg = { sizeof(struct ms_config), MS_BACKEND_AUTO, MS_CFG_ALL_FLAGS, 0,
				 MS_ZC_MIN_DEFAULT, 64, MS_TS_ALL_FLAGS, 2, 64, 0, 0, (const int *)0,
				 (const char *)0, (const char *)0, 0, 0 };
	struct ms_ts_dest td = { 0, MS_TS_SCHED | MS_TS_SND | MS_TS_HW, 0, 0, 0, 0 };
	struct ms_stats st = { sizeof(struct ms_stats), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
			       0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
			       0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
			       0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
			       0, 0, 0, 0, 0, 0 };
	struct ms_slow_config slow = { sizeof(struct ms_slow_config), MS_SLOW_QUEUE, MS_SLOW_DROP, 0 };
	struct ms_dest d = { -1, (socklen_t)0, (const struct sockaddr *)0 };
	struct ms_result r = { 0, 0 };
	struct ms_slow_result sr = { 0, 0, MS_RES_QUEUED | MS_RES_DROPPED | MS_RES_REMOVED, 0, 0 };
	struct iovec iov = { (void *)0, 0 };
	enum ms_backend b = MS_BACKEND_SENDMMSG;
	unsigned flags = MS_SEND_ALL_FLAGS | MS_SEND_DONTWAIT;

	(void)cfg, (void)td, (void)st, (void)slow, (void)d, (void)r, (void)sr, (void)iov, (void)b;
	(void)flags;
	if (ms_version() != MS_VERSION_NUMBER)
		return 1;
	if (!same(ms_version_string(), MS_VERSION_STRING))
		return 2;
	if (!same(ms_backend_name(MS_BACKEND_LOOP), "loop") || ms_backend_name((enum ms_backend)99))
		return 3;
	return 0;
}
