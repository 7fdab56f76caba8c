/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

extern char **environ;

int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;

	if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);

	if (errno || *end || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

int parse_double(const char *s, double min, double max, double *out)
{
	char *end;

	if (!s || !*s || *s == ' ')
		return -EINVAL;
	errno = 0;
	double v = strtod(s, &end);

	if (errno || *end || !isfinite(v) || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

int parse_u64_list(const char *s, uint64_t min, uint64_t max, bool si, uint64_t *out,
		   size_t cap)
{
	size_t n = 0;
	const char *p = s;

	if (!s || !*s)
		return -EINVAL;
	for (;;) {
		char item[32];
		size_t len = strcspn(p, ",");

		if (!len || len >= sizeof(item) || n == cap)
			return -EINVAL;
		memcpy(item, p, len);
		item[len] = 0;
		uint64_t mult = 1;

		if (si && (item[len - 1] == 'k' || item[len - 1] == 'K'))
			mult = 1000;
		else if (si && (item[len - 1] == 'm' || item[len - 1] == 'M'))
			mult = 1000000;
		if (mult > 1)
			item[len - 1] = 0;
		uint64_t v;

		if (parse_u64(item, 0, UINT64_MAX / mult, &v) || v * mult < min || v * mult > max)
			return -EINVAL;
		out[n++] = v * mult;
		p += len;
		if (!*p)
			break;
		p++; /* the comma; an empty item after it is refused above */
	}
	return (int)n;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

void summarize(double *v, size_t n, struct summary *out)
{
	memset(out, 0, sizeof(*out));
	if (!n)
		return;
	qsort(v, n, sizeof(*v), cmp_double);
	out->min = v[0];
	out->max = v[n - 1];
	out->median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

const char *fmt_si(char *buf, size_t len, double v)
{
	if (v >= 999.95e6)
		snprintf(buf, len, "%.2fG", v / 1e9);
	else if (v >= 99.995e6)
		snprintf(buf, len, "%.0fM", v / 1e6);
	else if (v >= 999.95e3)
		snprintf(buf, len, "%.2fM", v / 1e6);
	else if (v >= 99.995e3)
		snprintf(buf, len, "%.0fk", v / 1e3);
	else if (v >= 999.5)
		snprintf(buf, len, "%.2fk", v / 1e3);
	else
		snprintf(buf, len, "%.0f", v);
	return buf;
}

void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p == '\n')
			fputs("\\n", f);
		else if (*p == '\t')
			fputs("\\t", f);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

void json_num(FILE *f, double v)
{
	if (!isfinite(v))
		fputs("null", f);
	else if (v == floor(v) && fabs(v) < 1e15)
		fprintf(f, "%.0f", v);
	else
		fprintf(f, "%.6g", v);
}

void html_str(FILE *f, const char *s)
{
	for (; s && *s; s++) {
		switch (*s) {
		case '<':
			fputs("&lt;", f);
			break;
		case '>':
			fputs("&gt;", f);
			break;
		case '&':
			fputs("&amp;", f);
			break;
		case '"':
			fputs("&quot;", f);
			break;
		default:
			fputc(*s, f);
		}
	}
}

int run_command(char *const argv[], const char *cwd, const char *log)
{
	posix_spawnattr_t attr;
	posix_spawn_file_actions_t fa;
	sigset_t none, all;
	pid_t pid;
	int err, status;

	if ((err = posix_spawnattr_init(&attr)))
		return -err;
	if ((err = posix_spawn_file_actions_init(&fa))) {
		posix_spawnattr_destroy(&attr);
		return -err;
	}
	sigemptyset(&none);
	sigfillset(&all);
	err = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
						      POSIX_SPAWN_SETPGROUP);
	if (!err)
		err = posix_spawnattr_setsigmask(&attr, &none);
	if (!err)
		err = posix_spawnattr_setsigdefault(&attr, &all);
	if (!err)
		err = posix_spawnattr_setpgroup(&attr, 0);
	if (!err && cwd)
		err = posix_spawn_file_actions_addchdir_np(&fa, cwd);
	if (!err && log) {
		err = posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND,
						       0644);
		if (!err)
			err = posix_spawn_file_actions_adddup2(&fa, 1, 2);
	}
	if (!err)
		err = posix_spawnp(&pid, argv[0], &fa, &attr, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (err)
		return -err;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

bool have_program(const char *name)
{
	const char *path = getenv("PATH");
	char buf[4096];

	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
	while (*path) {
		size_t len = strcspn(path, ":");

		if (len && len + strlen(name) + 2 < sizeof(buf)) {
			memcpy(buf, path, len);
			buf[len] = '/';
			strcpy(buf + len + 1, name);
			if (!access(buf, X_OK))
				return true;
		}
		path += len;
		if (*path)
			path++;
	}
	return false;
}

int read_file(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, len - 1);
	int err = n < 0 ? -errno : 0;

	close(fd);
	if (err)
		return err;
	buf[n] = 0;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = 0;
	return 0;
}

int grow(void **v, size_t *cap, size_t n, size_t size, size_t first)
{
	if (n < *cap)
		return 0;
	size_t ncap = *cap ? *cap * 2 : first;
	void *p = realloc(*v, ncap * size);
	if (!p)
		return -ENOMEM;
	*v = p;
	*cap = ncap;
	return 0;
}
