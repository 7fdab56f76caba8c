/* SPDX-License-Identifier: MIT */
/*
 * Backend selection: explicit choices, fallbacks, MS_CFG_NO_FALLBACK, the MULTISEND_*
 * environment, and io_uring made unavailable by a seccomp filter (as container runtimes do),
 * each scenario in its own process because the io_uring probe is cached once per process.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "multisend.h"

static bool have_uring;

static int new_ctx(enum ms_backend b, uint32_t flags, struct ms_ctx **ctx)
{
	struct ms_config cfg = { .size = sizeof(cfg), .backend = b, .flags = flags };
	*ctx = NULL;
	return ms_ctx_new(ctx, &cfg);
}

/* Run fn in a child with stderr captured into buf; returns the child's exit status. */
static int in_child(void (*fn)(void), char *buf, size_t len)
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(p[1], 2);
		close(p[0]);
		close(p[1]);
		fn();
		_exit(0);
	}
	close(p[1]);
	size_t have = 0;
	ssize_t r;
	while (have + 1 < len && (r = read(p[0], buf + have, len - 1 - have)) > 0)
		have += (size_t)r;
	buf[have] = 0;
	close(p[0]);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#define CHILD_CHECK(cond)                                                                   \
	do {                                                                                \
		if (!(cond)) {                                                              \
			fprintf(stderr, "child check failed: %s (line %d)\n", #cond, __LINE__); \
			_exit(1);                                                           \
		}                                                                           \
	} while (0)

static void deny_syscall_with(int nr, int err)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };
	CHILD_CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0);
	CHILD_CHECK(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0);
}

static void deny_syscall(int nr)
{
	deny_syscall_with(nr, EPERM);
}

/* io_uring blocked before the first probe: it is skipped quietly, with the reason shown. */
static void child_seccomp(void)
{
	struct ms_ctx *ctx;
	deny_syscall(__NR_io_uring_setup);
	setenv("MULTISEND_SHOW_BACKEND", "1", 1);
	CHILD_CHECK(new_ctx(MS_BACKEND_IO_URING, MS_CFG_NO_FALLBACK, &ctx) == -ENOTSUP);
	CHILD_CHECK(new_ctx(MS_BACKEND_IO_URING, 0, &ctx) == 0);
	CHILD_CHECK(ms_ctx_backend(ctx) == MS_BACKEND_LOOP);
	ms_ctx_free(ctx);
	CHILD_CHECK(new_ctx(MS_BACKEND_AUTO, 0, &ctx) == 0);
	CHILD_CHECK(ms_ctx_backend(ctx) != MS_BACKEND_IO_URING);
	ms_ctx_free(ctx);
	setenv("MULTISEND_NO_LOOP", "1", 1);
	CHILD_CHECK(new_ctx(MS_BACKEND_AUTO, 0, &ctx) == 0);
	CHILD_CHECK(ms_ctx_backend(ctx) == MS_BACKEND_SENDMMSG);
	ms_ctx_free(ctx);
}

static void test_seccomp_fallback(void **state)
{
	(void)state;
	char out[4096];
	int st = in_child(child_seccomp, out, sizeof(out));
	printf("%s", out);
	assert_int_equal(st, 0);
	if (have_uring)
		assert_non_null(strstr(out, "io_uring skipped: io_uring_setup is not permitted"));
	else
		assert_non_null(strstr(out, "io_uring skipped: not built"));
	assert_non_null(strstr(out, "libmultisend: backend loop (asked for io_uring)"));
	assert_non_null(strstr(out, "loop skipped: disabled by MULTISEND_NO_LOOP"));
}

/* io_uring probed as available, then blocked: setting up the ring fails and the context falls
 * back, naming the error. */
static void child_late_seccomp(void)
{
	struct ms_ctx *ctx;
	CHILD_CHECK(new_ctx(MS_BACKEND_IO_URING, 0, &ctx) == 0);
	ms_ctx_free(ctx);
	deny_syscall(__NR_io_uring_setup);
	setenv("MULTISEND_SHOW_BACKEND", "1", 1);
	CHILD_CHECK(new_ctx(MS_BACKEND_IO_URING, MS_CFG_NO_FALLBACK, &ctx) == -EPERM);
	CHILD_CHECK(new_ctx(MS_BACKEND_IO_URING, 0, &ctx) == 0);
	CHILD_CHECK(ms_ctx_backend(ctx) == MS_BACKEND_LOOP);
	ms_ctx_free(ctx);
}

static void test_ring_setup_failure(void **state)
{
	(void)state;
	if (!have_uring)
		skip();
	char out[4096];
	int st = in_child(child_late_seccomp, out, sizeof(out));
	printf("%s", out);
	assert_int_equal(st, 0);
	assert_non_null(strstr(out, "io_uring skipped: setup failed: Operation not permitted"));
}

/* The ring refuses a submission (here: a seccomp filter denies io_uring_enter): every
 * destination gets the error, nothing is sent, and the refused requests leave the queue, so
 * the next call reports exactly its own destinations again. */
static void child_ring_refuses(void)
{
	enum { N = 5 };
	int sv[N][2];
	struct ms_ctx *ctx;
	struct ms_group *g;
	struct ms_config cfg = { .size = sizeof(cfg), .backend = MS_BACKEND_IO_URING,
				 .flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV, .queue_depth = 8 };
	CHILD_CHECK(ms_ctx_new(&ctx, &cfg) == 0);
	CHILD_CHECK(ms_group_new(ctx, &g) == 0);
	for (int i = 0; i < N; i++) {
		CHILD_CHECK(socketpair(AF_UNIX, SOCK_DGRAM, 0, sv[i]) == 0);
		struct ms_dest d = { .fd = sv[i][1] };
		CHILD_CHECK(ms_group_add(g, &d) == i);
	}
	struct ms_result res[N];
	char buf[16];
	CHILD_CHECK(ms_send(g, "before", 6, 0, res) == N);
	for (int i = 0; i < N; i++)
		CHILD_CHECK(recv(sv[i][0], buf, sizeof(buf), MSG_DONTWAIT) == 6);
	deny_syscall(__NR_io_uring_enter);
	for (int round = 1; round <= 3; round++) {
		CHILD_CHECK(ms_send(g, "refused", 7, 0, res) == -EPERM);
		for (int i = 0; i < N; i++) {
			CHILD_CHECK(res[i].id == i && res[i].status == -EPERM);
			CHILD_CHECK(recv(sv[i][0], buf, sizeof(buf), MSG_DONTWAIT) < 0 && errno == EAGAIN);
		}
		struct ms_stats st = { .size = sizeof(st) };
		CHILD_CHECK(ms_ctx_stats(ctx, &st) == 0);
		CHILD_CHECK(st.dests_failed == (uint64_t)N * round);
		CHILD_CHECK(st.dests_attempted == (uint64_t)N * (round + 1));
		CHILD_CHECK(st.err_other == (uint64_t)N * round);
	}
	ms_group_free(g);
	ms_ctx_free(ctx);
}

/* The ring refusing with an errno a full socket also gives (-ENOMEM) is the backend's failure,
 * not the consumer's: a slow-consumer policy must not drop, queue or disconnect for it. */
static void child_ring_refuses_managed(void)
{
	enum { N = 3 };
	int sv[N][2];
	struct ms_ctx *ctx;
	struct ms_group *g;
	struct ms_config cfg = { .size = sizeof(cfg), .backend = MS_BACKEND_IO_URING,
				 .flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV };
	CHILD_CHECK(ms_ctx_new(&ctx, &cfg) == 0);
	CHILD_CHECK(ms_group_new(ctx, &g) == 0);
	struct ms_slow_config slow = { .size = sizeof(slow), .policy = MS_SLOW_DISCONNECT };
	CHILD_CHECK(ms_group_set_slow(g, &slow) == 0);
	for (int i = 0; i < N; i++) {
		CHILD_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv[i]) == 0);
		struct ms_dest d = { .fd = sv[i][1] };
		CHILD_CHECK(ms_group_add(g, &d) == i);
	}
	struct ms_result res[N];
	char buf[16];
	CHILD_CHECK(ms_send(g, "before", 6, 0, res) == N);
	for (int i = 0; i < N; i++)
		CHILD_CHECK(recv(sv[i][0], buf, sizeof(buf), MSG_DONTWAIT) == 6);
	deny_syscall_with(__NR_io_uring_enter, ENOMEM);
	CHILD_CHECK(ms_send(g, "refused", 7, 0, res) == -ENOMEM);
	for (int i = 0; i < N; i++)
		CHILD_CHECK(res[i].status == -ENOMEM);
	/* Not the consumers' doing: the policy acted on no destination. */
	CHILD_CHECK(ms_group_slow_results(g, NULL, 0) == 0);
	CHILD_CHECK(ms_group_size(g) == N);
	struct ms_stats st = { .size = sizeof(st) };
	CHILD_CHECK(ms_ctx_stats(ctx, &st) == 0);
	CHILD_CHECK(st.slow_removed == 0 && st.slow_dropped == 0 && st.slow_queued == 0);
	ms_group_free(g);
	ms_ctx_free(ctx);
}

static void test_ring_refuses_submission(void **state)
{
	(void)state;
	if (!have_uring)
		skip();
	char out[4096];
	int st = in_child(child_ring_refuses, out, sizeof(out));
	printf("%s", out);
	assert_int_equal(st, 0);
	st = in_child(child_ring_refuses_managed, out, sizeof(out));
	printf("%s", out);
	assert_int_equal(st, 0);
}

static void child_env(void)
{
	struct ms_ctx *ctx;
	setenv("MULTISEND_BACKEND", "sendmmsg", 1);
	CHILD_CHECK(new_ctx(MS_BACKEND_LOOP, 0, &ctx) == 0);
	CHILD_CHECK(ms_ctx_backend(ctx) == MS_BACKEND_SENDMMSG); /* the operator wins */
	ms_ctx_free(ctx);
	CHILD_CHECK(new_ctx(MS_BACKEND_LOOP, MS_CFG_IGNORE_ENV, &ctx) == 0);
	CHILD_CHECK(ms_ctx_backend(ctx) == MS_BACKEND_LOOP); /* unless the program opts out */
	ms_ctx_free(ctx);
	setenv("MULTISEND_NO_SENDMMSG", "1", 1);
	CHILD_CHECK(new_ctx(MS_BACKEND_LOOP, MS_CFG_NO_FALLBACK, &ctx) == -ENOTSUP);
	CHILD_CHECK(new_ctx(MS_BACKEND_LOOP, 0, &ctx) == 0);
	CHILD_CHECK(ms_ctx_backend(ctx) != MS_BACKEND_SENDMMSG);
	ms_ctx_free(ctx);
	setenv("MULTISEND_NO_LOOP", "1", 1);
	setenv("MULTISEND_NO_IO_URING", "yes", 1);
	CHILD_CHECK(new_ctx(MS_BACKEND_AUTO, 0, &ctx) == -ENOTSUP); /* nothing left */
	setenv("MULTISEND_NO_LOOP", "0", 1);                       /* "0" means not disabled */
	CHILD_CHECK(new_ctx(MS_BACKEND_AUTO, 0, &ctx) == 0);
	CHILD_CHECK(ms_ctx_backend(ctx) == MS_BACKEND_LOOP);
	ms_ctx_free(ctx);
	setenv("MULTISEND_BACKEND", "no-such-backend", 1);
	unsetenv("MULTISEND_NO_SENDMMSG");
	CHILD_CHECK(new_ctx(MS_BACKEND_SENDMMSG, 0, &ctx) == 0);
	CHILD_CHECK(ms_ctx_backend(ctx) == MS_BACKEND_SENDMMSG); /* a typo changes nothing ... */
	ms_ctx_free(ctx);
}

static void test_environment(void **state)
{
	(void)state;
	char out[4096];
	int st = in_child(child_env, out, sizeof(out));
	printf("%s", out);
	assert_int_equal(st, 0);
	/* ... but is not silent either. */
	assert_non_null(strstr(out, "MULTISEND_BACKEND=no-such-backend is not one of"));
}

static void test_explicit_choices(void **state)
{
	(void)state;
	struct ms_ctx *ctx;
	for (int b = MS_BACKEND_LOOP; b <= MS_BACKEND_IO_URING; b++) {
		int err = new_ctx((enum ms_backend)b, MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV, &ctx);
		if (b == MS_BACKEND_IO_URING && !have_uring) {
			assert_int_equal(err, -ENOTSUP);
			continue;
		}
		assert_int_equal(err, 0);
		assert_int_equal(ms_ctx_backend(ctx), b);
		struct ms_snapshot s = { .size = sizeof(s) };
		assert_int_equal(ms_ctx_snapshot(ctx, &s), 0);
		assert_int_equal(s.backend, b);
		ms_ctx_free(ctx);
	}
	/* AUTO takes the head of the preference order. */
	assert_int_equal(new_ctx(MS_BACKEND_AUTO, MS_CFG_IGNORE_ENV, &ctx), 0);
	assert_int_equal(ms_ctx_backend(ctx), MS_BACKEND_LOOP);
	ms_ctx_free(ctx);
}

int main(void)
{
	struct ms_ctx *ctx;
	/* Whether this build and kernel have io_uring, asked in a child so that this process's
	 * cached probe stays unused until the tests. */
	pid_t pid = fork();
	if (pid == 0) {
		struct ms_config cfg = { .size = sizeof(cfg), .backend = MS_BACKEND_IO_URING,
					 .flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV };
		_exit(ms_ctx_new(&ctx, &cfg) == 0 ? 0 : 1);
	}
	int st;
	waitpid(pid, &st, 0);
	have_uring = WIFEXITED(st) && WEXITSTATUS(st) == 0;
	unsetenv("MULTISEND_BACKEND");
	unsetenv("MULTISEND_NO_LOOP");
	unsetenv("MULTISEND_NO_SENDMMSG");
	unsetenv("MULTISEND_NO_IO_URING");
	unsetenv("MULTISEND_SHOW_BACKEND");
	/* The children inherit this process's probe cache: the ones that need a fresh probe run
	 * before anything here creates a context. */
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_seccomp_fallback),
		cmocka_unit_test(test_environment),
		cmocka_unit_test(test_ring_setup_failure),
		cmocka_unit_test(test_ring_refuses_submission),
		cmocka_unit_test(test_explicit_choices),
	};
	return cmocka_run_group_tests_name("select", tests, NULL, NULL);
}
