/* SPDX-License-Identifier: MIT */
/*
 * fork with a batch pending. The parent sends messages 1..K to every subscriber (batch mode
 * keeps them: the delay is long and nothing flushes), then forks. The child sends K+1..M and
 * exits; the parent waits for it and exits. Every subscriber must get 1..M exactly once in
 * order: the parent's batch went out before the fork, and the child never sent it again.
 *
 * "raw": fork with the raw system call, which runs no atfork handler, so nothing is flushed
 * before it. The child closes the socket (a flush point: it would send any batch it had) and
 * exits at once; the parent then sends K+1..M. The child's copy of the batch must be empty
 * (MADV_WIPEONFORK), or the subscribers see duplicates.
 */
#include <sys/syscall.h>
#include <sys/wait.h>

#include "shimtest.h"

int main(int argc, char **argv)
{
	struct st_args a;
	int x = st_args(argc, argv, &a);
	bool raw = x < argc && !strcmp(argv[x], "raw");
	uint64_t k = a.m / 2;
	int fd = st_udp(), status;

	for (uint64_t seq = 1; seq <= k; seq++)
		for (uint32_t i = 0; i < a.n; i++)
			st_send(fd, &a, seq, i, true);

	pid_t pid = raw ? (pid_t)syscall(SYS_fork) : fork();
	if (pid < 0)
		st_die("fork: %s", strerror(errno));
	if (pid == 0) {
		if (raw) {
			close(fd);
			syscall(SYS_exit_group, 0);
		}
		for (uint64_t seq = k + 1; seq <= a.m; seq++)
			for (uint32_t i = 0; i < a.n; i++)
				st_send(fd, &a, seq, i, true);
		exit(0);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		st_die("child failed");
	if (raw)
		for (uint64_t seq = k + 1; seq <= a.m; seq++)
			for (uint32_t i = 0; i < a.n; i++)
				st_send(fd, &a, seq, i, true);
	printf("forkbatch%s: parent sent 1..%llu, %s sent the rest\n", raw ? " (raw)" : "",
	       (unsigned long long)k, raw ? "then the parent" : "the child");
	return 0;
}
