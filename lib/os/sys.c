/* SPDX-License-Identifier: MIT */
#include "sys.h"

struct ms__sys ms__sys = {
	.sendto = sendto,
	.sendmsg = sendmsg,
	.sendmmsg = sendmmsg,
	.sigaction = sigaction,
};

void ms__sys_reset(void)
{
	ms__sys.sendto = sendto;
	ms__sys.sendmsg = sendmsg;
	ms__sys.sendmmsg = sendmmsg;
	ms__sys.sigaction = sigaction;
}
