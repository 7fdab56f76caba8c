/* SPDX-License-Identifier: MIT */
/*
 * The library's warnings on stderr never print an environment value raw (issue 26, item 11):
 * an escape sequence or a newline in MULTISEND_BACKEND, MULTISEND_AUTO_RECHECK,
 * MULTISEND_STATS_SHM or MULTISEND_XDP_IFACE (through MULTISEND_SHOW_BACKEND's lines) comes
 * out as \xNN, printable ASCII as it is, the backslash as \x5c, and a long value is cut with
 * its length said. Each case runs ms_ctx_new in a forked child (the warnings are once per
 * process) with its stderr on a pipe; what the child wrote is checked whole: the exact line
 * where the text is known, and always nothing but printable ASCII and line ends.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "multisend.h"

/* Run ms_ctx_new (default config, environment honoured) in a child with env set (NULL-ended
 * name, value pairs); what it wrote to stderr, NUL-terminated, in out. */
static size_t child_stderr(const char *const *env, char *out, size_t cap)
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		if (dup2(p[1], 2) < 0)
			_exit(2);
		static const char *const clear[] = { "MULTISEND_BACKEND", "MULTISEND_AUTO_RECHECK",
						     "MULTISEND_STATS_SHM", "MULTISEND_XDP_IFACE",
						     "MULTISEND_SHOW_BACKEND" };
		for (size_t k = 0; k < sizeof(clear) / sizeof(clear[0]); k++)
			unsetenv(clear[k]);
		for (size_t k = 0; env[k]; k += 2)
			setenv(env[k], env[k + 1], 1);
		struct ms_ctx *ctx = NULL;
		int err = ms_ctx_new(&ctx, NULL);
		ms_ctx_free(ctx);
		_exit(err ? 3 : 0);
	}
	close(p[1]);
	size_t n = 0;
	ssize_t r;
	while (n + 1 < cap && (r = read(p[0], out + n, cap - 1 - n)) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		assert_true(r > 0);
		n += (size_t)r;
	}
	out[n] = '\0';
	close(p[0]);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	return n;
}

/* Nothing but printable ASCII and line ends. */
static void printable(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c != '\n' && (c < 0x20 || c >= 0x7f))
			fail_msg("byte %zu of stderr (%zu bytes) is 0x%02x", i, n, c);
	}
}

static void test_backend_escape(void **state)
{
	(void)state;
	char out[4096];
	const char *const env[] = { "MULTISEND_BACKEND", "\033[2J\nfake\\", NULL };
	size_t n = child_stderr(env, out, sizeof(out));
	printf("%s", out);
	printable(out, n);
	assert_string_equal(out, "libmultisend: MULTISEND_BACKEND=\\x1b[2J\\x0afake\\x5c is not "
				 "one of auto, loop, sendmmsg, io_uring, xdp; ignored\n");
}

static void test_backend_long(void **state)
{
	(void)state;
	char v[5002], out[8192];
	memset(v, 'A', 5000);
	v[5000] = '\033';
	v[5001] = '\0';
	const char *const env[] = { "MULTISEND_BACKEND", v, NULL };
	size_t n = child_stderr(env, out, sizeof(out));
	printable(out, n);
	printf("%zu bytes: %.60s...%s", n, out, out + n - 80);
	/* One line, the value cut to 128 bytes and its length said. */
	assert_non_null(strstr(out, "AAAA... (5001 bytes) is not one of"));
	assert_true(n < 300);
	assert_ptr_equal(strchr(out, '\n'), out + n - 1);
}

static void test_recheck_escape(void **state)
{
	(void)state;
	char out[4096];
	const char *const env[] = { "MULTISEND_BACKEND", "auto", "MULTISEND_AUTO_RECHECK",
				    "7\033]0;pwned\a", NULL };
	size_t n = child_stderr(env, out, sizeof(out));
	printf("%s", out);
	printable(out, n);
	assert_non_null(strstr(out, "libmultisend: MULTISEND_AUTO_RECHECK=7\\x1b]0;pwned\\x07 is "
				    "not a number of fan-outs 16..100000000; ignored\n"));
}

static void test_shm_escape(void **state)
{
	(void)state;
	char out[4096];
	const char *const env[] = { "MULTISEND_STATS_SHM", "/nonexistent-dir\033[31m/x\ny", NULL };
	size_t n = child_stderr(env, out, sizeof(out));
	printf("%s", out);
	printable(out, n);
	assert_non_null(strstr(out, "live counters not published in "
				    "/nonexistent-dir\\x1b[31m/x\\x0ay: "));
}

static void test_show_escape(void **state)
{
	(void)state;
	char out[8192];
	const char *const env[] = { "MULTISEND_BACKEND", "xdp", "MULTISEND_XDP_IFACE",
				    "x\033[2J", "MULTISEND_SHOW_BACKEND", "1", NULL };
	size_t n = child_stderr(env, out, sizeof(out));
	printf("%s", out);
	printable(out, n);
	/* Where the xdp backend is built and may be tried, its reason names the interface. */
	const char *why = strstr(out, "xdp skipped: interface ");
	if (why)
		assert_non_null(strstr(why, "interface x\\x1b[2J: "));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_backend_escape), cmocka_unit_test(test_backend_long),
		cmocka_unit_test(test_recheck_escape), cmocka_unit_test(test_shm_escape),
		cmocka_unit_test(test_show_escape),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
