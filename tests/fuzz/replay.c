/* SPDX-License-Identifier: MIT */
/*
 * Runs a fuzz target over files and directories of inputs without libFuzzer, so every test
 * run replays the committed corpus with the ordinary compiler (and under the sanitizer and
 * valgrind builds). Usage: TARGET-replay PATH...
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static long replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		exit(1);
	}
	static uint8_t buf[1 << 20];
	size_t n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	/* A copy of exactly the input's size, so reads past the end are caught. */
	uint8_t *copy = malloc(n ? n : 1);
	if (!copy)
		exit(1);
	memcpy(copy, buf, n);
	LLVMFuzzerTestOneInput(copy, n);
	free(copy);
	return 1;
}

static long replay(const char *path)
{
	struct stat st;
	if (stat(path, &st)) {
		perror(path);
		exit(1);
	}
	if (!S_ISDIR(st.st_mode))
		return replay_file(path);
	DIR *d = opendir(path);
	if (!d) {
		perror(path);
		exit(1);
	}
	long n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char sub[4096];
		snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
		n += replay(sub);
	}
	closedir(d);
	return n;
}

int main(int argc, char **argv)
{
	long n = 0;
	for (int i = 1; i < argc; i++)
		n += replay(argv[i]);
	printf("replayed %ld inputs\n", n);
	return n ? 0 : 1;
}
