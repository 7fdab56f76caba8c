/* SPDX-License-Identifier: MIT */
/*
 * Memory for the send path: every block a send may touch comes from here, so that
 * MS_CFG_MLOCK (lock it, and so fault it in, before any send uses it) is one rule in one place.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

int ms__mlock(const struct ms_ctx *ctx, const void *p, size_t n)
{
	if (!(ctx->flags & MS_CFG_MLOCK) || !n)
		return 0;
	return mlock(p, n) ? -errno : 0;
}

void *ms__zalloc(const struct ms_ctx *ctx, size_t n, int *err)
{
	void *p = calloc(1, n ? n : 1);
	*err = p ? ms__mlock(ctx, p, n) : -ENOMEM;
	if (*err) {
		free(p);
		return NULL;
	}
	return p;
}

void *ms__zalloc_aligned(const struct ms_ctx *ctx, size_t align, size_t n, int *err)
{
	void *p = NULL;
	*err = posix_memalign(&p, align, n ? n : 1) ? -ENOMEM : 0;
	if (!*err) {
		memset(p, 0, n);
		*err = ms__mlock(ctx, p, n);
	}
	if (*err) {
		free(p);
		return NULL;
	}
	return p;
}

int ms__grow(const struct ms_ctx *ctx, void *pp, size_t n)
{
	void *p = realloc(*(void **)pp, n ? n : 1);
	if (!p)
		return -ENOMEM;
	*(void **)pp = p;
	return ms__mlock(ctx, p, n);
}
