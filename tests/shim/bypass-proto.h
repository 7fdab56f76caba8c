/* SPDX-License-Identifier: MIT */
/*
 * The bypass tests' datagrams, as tests/shim/bypass-recv.py checks them: "BPT1", u32 stream,
 * u32 seq, u32 length (little-endian), then length - 16 bytes, byte k =
 * (seq * 7 + k * 13 + stream) & 0xff. seq 0xffffffff, length 16: the end marker.
 */
#ifndef BYPASS_PROTO_H
#define BYPASS_PROTO_H

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define BP_HDR 16
#define BP_END 0xffffffffu

static inline void bp_make(uint8_t *buf, uint32_t stream, uint32_t seq, uint32_t len)
{
	uint32_t w[3] = { htole32(stream), htole32(seq), htole32(len) };

	memcpy(buf, "BPT1", 4);
	memcpy(buf + 4, w, sizeof(w));
	for (uint32_t k = 0; k + BP_HDR < len; k++)
		buf[BP_HDR + k] = (uint8_t)(seq * 7 + k * 13 + stream);
}

/* A send's result as the tests print it: the byte count, or the errno's name. */
static inline const char *bp_result(long r, int e, char *buf, size_t n)
{
	if (r >= 0) {
		snprintf(buf, n, "%ld", r);
		return buf;
	}
	const char *name = strerrorname_np(e);
	snprintf(buf, n, "%s", name ? name : "E?");
	return buf;
}

#endif
