/* SPDX-License-Identifier: MIT */
/*
 * A program whose descriptor 2 is not (or no longer) its stderr: the shim's exit report and
 * its warnings must not go into its data (iperf3 --logfile run with 2>&-). It sends five
 * datagrams to a socket of its own (127.0.0.1, a port the kernel picks), receives them back,
 * writes three lines of data to DATA, and exits.
 *
 *   shim-stderrdata close|closed|reopen|redirect|keep DATA
 *
 *   close     closes 2 first thing, then opens DATA, which gets number 2
 *   closed    started with 2 closed (2>&-): DATA gets number 2
 *   reopen    closes 2 and opens DATA, the very file its stderr was (2>>DATA): same file, but
 *             the program closed its stderr, so the report must still not go there
 *   redirect  opens DATA at 3, then dup2(DATA, 2): the program's own new stderr, where the
 *             report then goes (its data goes to stdout instead)
 *   keep      leaves 2 alone; DATA is opened at 3 or above (the report goes to stderr)
 *
 * The data is written to the descriptor it was opened at (stdout for redirect). Exit status:
 * 0 done, 1 failure (said on stdout: stderr may be gone).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static void die(const char *what)
{
	printf("FAIL: stderrdata: %s: %s\n", what, strerror(errno));
	fflush(stdout);
	_exit(1);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		printf("usage: shim-stderrdata close|closed|reopen|redirect|keep DATA\n");
		return 2;
	}
	const char *how = argv[1], *path = argv[2];
	int data;

	if (!strcmp(how, "close") || !strcmp(how, "reopen")) {
		if (close(2) < 0)
			die("close(2)");
	}
	if (!strcmp(how, "reopen")) {
		data = open(path, O_WRONLY | O_APPEND);
	} else {
		data = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	}
	if (data < 0)
		die("open DATA");
	if (strcmp(how, "keep") && strcmp(how, "redirect") && data != 2) {
		errno = 0;
		die("DATA did not get descriptor 2");
	}
	if (!strcmp(how, "redirect")) {
		if (dup2(data, 2) != 2)
			die("dup2(DATA, 2)");
		close(data);
		data = 1;
	}

	int rx = socket(AF_INET, SOCK_DGRAM, 0), tx = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	struct timeval tv = { 10, 0 }; /* a safety net only: loopback delivers at once */
	if (rx < 0 || tx < 0 || bind(rx, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockname(rx, (struct sockaddr *)&a, &alen) < 0 ||
	    setsockopt(rx, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		die("sockets");
	for (int i = 0; i < 5; i++) {
		char msg[32];
		int n = snprintf(msg, sizeof(msg), "datagram %d", i);
		if (sendto(tx, msg, (size_t)n, 0, (struct sockaddr *)&a, sizeof(a)) != n)
			die("sendto");
	}
	for (int i = 0; i < 5; i++) {
		char msg[32], want[32];
		int n = snprintf(want, sizeof(want), "datagram %d", i);
		ssize_t r = recv(rx, msg, sizeof(msg), 0);
		if (r != n || memcmp(msg, want, (size_t)n)) {
			if (r >= 0)
				errno = EPROTO;
			die("recv");
		}
	}
	for (int i = 1; i <= 3; i++) {
		char line[32];
		int n = snprintf(line, sizeof(line), "data line %d\n", i);
		if (write(data, line, (size_t)n) != n)
			die("write DATA");
	}
	return 0;
}
