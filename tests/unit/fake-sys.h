/* SPDX-License-Identifier: MIT */
/*
 * A fake kernel behind the library's system-call table (lib/os/sys.h).
 *
 * Destinations are registered as (fd, address) or (fd, connected peer). The fakes of sendto,
 * sendmsg and sendmmsg look every message up, apply its destination's script and count, per
 * destination, how often it was attempted and how often it was delivered (sent successfully).
 * sendmmsg follows the kernel: messages in order, at most UIO_MAXIOV per call; a failing message
 * stops the call, which returns -1 with errno if it was the first, else the count sent so far;
 * msg_len is set for sent messages only (the others are poisoned, since the kernel leaves them
 * undefined for the caller).
 */
#ifndef FAKE_SYS_H
#define FAKE_SYS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define FAKE_ALWAYS (-1)          /* fail_left: fail on every attempt */
#define FAKE_MSG_LEN_POISON 0x7fff0bad

struct fake_dest {
	int fd;
	socklen_t addrlen; /* 0: the socket's connected peer */
	struct sockaddr_storage addr;
	/* script */
	int fail_errno;
	int fail_left;     /* attempts still to fail; FAKE_ALWAYS: all of them */
	long accept_bytes; /* >= 0: a stream that takes at most this many bytes per send */
	/* counters, cleared by fake_new_round */
	unsigned attempts, delivered;
	long first_seq;    /* order of this destination's first attempt in the round; -1: none */
};

struct fake_mmsg_call {
	int fd;
	unsigned vlen;
	int flags;
	int ret;
};

struct fake_kernel {
	struct fake_dest *d;
	size_t n, cap;

	/* What the library did since fake_new_round. */
	unsigned sendto_calls, sendmsg_calls, sendmmsg_calls;
	struct fake_mmsg_call *calls; /* every sendmmsg call, in order */
	size_t ncalls, capcalls;
	unsigned max_vlen;
	unsigned strays;       /* messages to no registered destination */
	unsigned bad_headers;  /* control data, or a name on a message that must have none */
	unsigned bad_payloads; /* bytes or iovec layout differ from the expected message */
	unsigned bad_flags;    /* flags other than expect_flags */
	long next_seq;

	/* What the library must do (set by the test; kept by fake_new_round). */
	const struct iovec *expect_iov; /* NULL: payload not checked */
	int expect_iovcnt;
	int expect_flags;               /* exact send flags; MSG_NOSIGNAL after fake_install */
	/* Partial returns without error ("the kernel sent only 3 of 10"): call k of the round sends
	 * at most caps[k] messages (0: no limit); calls past ncaps use cap_every (0: no limit). */
	const unsigned *caps;
	size_t ncaps;
	unsigned cap_every;
};

extern struct fake_kernel fk;

/* Point ms__sys at the fakes, forget every destination and script. */
void fake_install(void);
/* ms__sys_reset() and free everything. */
void fake_uninstall(void);

/* Register a destination; addr NULL means fd's connected peer. Returns its handle (index in
 * fk.d). AF_INET addresses must have distinct ports. */
int fake_add(int fd, const struct sockaddr *addr, socklen_t addrlen);
/* The next `times` attempts of h fail with err (FAKE_ALWAYS: every attempt; 0: none). */
void fake_fail(int h, int err, int times);
/* h is a stream that accepts at most `bytes` bytes of each message (-1: all of them). */
void fake_accept_bytes(int h, long bytes);
/* Clear every script (the destinations stay registered). */
void fake_clear_scripts(void);
/* Clear the counters and the call log of the previous round (scripts stay). */
void fake_new_round(void);
/* Every system call the library made in this round. */
unsigned fake_syscalls(void);

#endif
