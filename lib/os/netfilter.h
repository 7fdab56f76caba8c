/* SPDX-License-Identifier: MIT */
/*
 * Does netfilter see what this network namespace sends? Frames handed to an AF_XDP socket
 * skip it (and the kernel's fan-out's clones do too), so a firewall's output rule that would
 * refuse a datagram of the kernel's path would not see the frame: the kernel bypass asks this
 * before it takes a queue (lib/be/xdp.c).
 */
#ifndef MS_NETFILTER_H
#define MS_NETFILTER_H

#include <stddef.h>

/* Hooks that a datagram sent from this host passes and a frame would skip, in the calling
 * thread's network namespace: nftables base chains (native or iptables-nft) at IPv4, IPv6 or
 * inet output or postrouting, or netdev egress; iptables-legacy or ip6tables-legacy tables.
 * 1: there are (what, len bytes, names the first: "nftables chain ip bt out (output)"); 0:
 * none; -errno: cannot tell (-EPERM: listing nftables needs CAP_NET_ADMIN), what says why. */
int ms__nf_output_hooks(char *what, size_t len);

#endif
