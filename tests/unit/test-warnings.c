/* SPDX-License-Identifier: MIT */
/*
 * The library's warnings on stderr never print an environment value raw (issue 26, item 11):
 * an escape sequence or a newline in MULTISEND_BACKEND, MULTISEND_AUTO_RECHECK,
 * MULTISEND_STATS_SHM or MULTISEND_XDP_IFACE (through MULTISEND_SHOW_BACKEND's lines) comes
 * out as \xNN, printable ASCII as it is, the backslash as \x5c, and a long value is cut with
 * its length said. Each case runs ms_ctx_new in a forked child (the warnings are once per
 * process) with its stderr on a pipe; what the child wrote is checked whole: the exact line
 * where the text is known, and always nothing but printable ASCII and line ends. And a child
 * forked after an io_uring context was made says the loop sends there, and counts it.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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
				 "one of auto, loop, sendmmsg, io_uring, xdp, kfanout; ignored\n");
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

/*
 * A child forked after an io_uring context was made sends by the loop (the ring is the
 * parent's) and says so: ms_ctx_backend, ms_ctx_describe, a MULTISEND_SHOW_BACKEND line
 * once, fork_fallback counting each destination; the parent's still io_uring, uncounted.
 */
static void test_fork_says_loop(void **state)
{
	(void)state;
	int p[2], sv[2];
	assert_int_equal(pipe(p), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM, 0, sv), 0);
	setenv("MULTISEND_SHOW_BACKEND", "1", 1);
	setenv("MULTISEND_BACKEND", "io_uring", 1);
	struct ms_config cfg = { .size = sizeof(cfg), .flags = MS_CFG_NO_FALLBACK };
	struct ms_ctx *ctx;
	int saved = dup(2);
	dup2(p[1], 2); /* the context's own line */
	int err = ms_ctx_new(&ctx, &cfg);
	dup2(saved, 2);
	close(saved);
	unsetenv("MULTISEND_SHOW_BACKEND");
	unsetenv("MULTISEND_BACKEND");
	if (err)
		skip(); /* no io_uring here */
	struct ms_group *g;
	assert_int_equal(ms_group_new(ctx, &g), 0);
	struct ms_dest d = { .fd = sv[1] };
	assert_true(ms_group_add(g, &d) >= 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(p[1], 2);
		char line[512];
		ms_ctx_describe(ctx, line, sizeof(line));
		if (ms_ctx_backend(ctx) != MS_BACKEND_LOOP ||
		    strstr(line, "loop: in a process forked") != line)
			_exit(4);
		for (int k = 0; k < 3; k++)
			if (ms_send(g, "abc", 3, 0, NULL) != 1)
				_exit(5);
		struct ms_stats st = { .size = sizeof(st) };
		if (ms_ctx_stats(ctx, &st) || st.fork_fallback != 3)
			_exit(6);
		fprintf(stderr, "child: %s\n", line);
		_exit(0);
	}
	close(p[1]);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	char out[4096];
	size_t n = 0;
	ssize_t r;
	while (n + 1 < sizeof(out) && (r = read(p[0], out + n, sizeof(out) - 1 - n)) > 0)
		n += (size_t)r;
	out[n] = '\0';
	close(p[0]);
	printf("%s", out);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	/* The context's line, then the child's line once for its three sends. */
	const char *c = strstr(out, "libmultisend: backend loop: in a process forked after the "
				    "context was made, the io_uring backend's state (its ring) is "
				    "the parent's");
	assert_non_null(c);
	assert_null(strstr(c + 1, "libmultisend: backend loop"));
	char buf[8];
	for (int k = 0; k < 3; k++)
		assert_int_equal(read(sv[0], buf, sizeof(buf)), 3);
	/* The parent: still io_uring, nothing counted. */
	assert_int_equal(ms_ctx_backend(ctx), MS_BACKEND_IO_URING);
	assert_int_equal(ms_send(g, "xyz", 3, 0, NULL), 1);
	assert_int_equal(read(sv[0], buf, sizeof(buf)), 3);
	struct ms_stats s2 = { .size = sizeof(s2) };
	assert_int_equal(ms_ctx_stats(ctx, &s2), 0);
	assert_int_equal(s2.fork_fallback, 0);
	ms_group_free(g);
	ms_ctx_free(ctx);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_backend_escape), cmocka_unit_test(test_backend_long),
		cmocka_unit_test(test_recheck_escape), cmocka_unit_test(test_shm_escape),
		cmocka_unit_test(test_show_escape),    cmocka_unit_test(test_fork_says_loop),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
