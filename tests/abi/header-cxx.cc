// SPDX-License-Identifier: MIT
// The public header in strict C++11 (meson.build adds -std=c++11 -pedantic-errors -Wall
// -Wextra -Werror), linked against libmultisend: the calls below only link if the header
// declares the functions extern "C".
#include <multisend.h>

#include <cstdio>
#include <cstring>

int main()
{
	ms_config cfg = ms_config();
	cfg.size = sizeof cfg;
	cfg.backend = MS_BACKEND_LOOP;
	cfg.flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV;
	ms_ctx *ctx = nullptr;
	int fails = 0;

	if (ms_version() != MS_VERSION_NUMBER) {
		std::printf("ms_version() = %#x, header says %#x\n", ms_version(), MS_VERSION_NUMBER);
		fails++;
	}
	if (std::strcmp(ms_version_string(), MS_VERSION_STRING) != 0) {
		std::printf("ms_version_string() = %s, header says %s\n", ms_version_string(),
			    MS_VERSION_STRING);
		fails++;
	}
	const char *name = ms_backend_name(MS_BACKEND_IO_URING);
	if (!name || std::strcmp(name, "io_uring") != 0) {
		std::printf("ms_backend_name(MS_BACKEND_IO_URING) = %s\n", name ? name : "NULL");
		fails++;
	}
	int rc = ms_ctx_new(&ctx, &cfg);
	if (rc < 0 || ms_ctx_backend(ctx) != MS_BACKEND_LOOP) {
		std::printf("ms_ctx_new(loop) = %d (%s)\n", rc, ms_strerror(rc));
		fails++;
	}
	ms_ctx_free(ctx);
	std::printf("C++ %ld: libmultisend %s, %s\n", static_cast<long>(__cplusplus),
		    ms_version_string(), fails ? "FAIL" : "ok");
	return fails ? 1 : 0;
}
