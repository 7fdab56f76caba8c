/* SPDX-License-Identifier: MIT */
/*
 * exec with a batch pending: send messages 1..K (pending in batch mode), then exec this very
 * program, which sends K+1..M. Without the flush at exec, 1..K would vanish with the old image.
 * execl goes to execve inside libc, past the shim's execve: it has its own wrapper.
 */
#include "shimtest.h"

int main(int argc, char **argv)
{
	struct st_args a;
	int x = st_args(argc, argv, &a);
	bool second = x < argc && !strcmp(argv[x], "second");
	uint64_t k = a.m / 2;
	int fd = st_udp();

	for (uint64_t seq = second ? k + 1 : 1; seq <= (second ? a.m : k); seq++)
		for (uint32_t i = 0; i < a.n; i++)
			st_send(fd, &a, seq, i, true);
	if (!second) {
		execl("/proc/self/exe", argv[0], argv[1], argv[2], argv[3], "second", (char *)NULL);
		st_die("execl: %s", strerror(errno));
	}
	printf("execbatch: sent 1..%llu, exec'd, sent the rest\n", (unsigned long long)k);
	return 0;
}
