// SPDX-License-Identifier: GPL-2.0
/* ClawFS per-agent network policy: cgroup/connect4 and cgroup/connect6 programs attached to an
 * agent's cgroup v2 directory. Returning 0 makes connect(2) fail with EPERM, 1 lets it proceed. */
#include "common.h"

char LICENSE[] SEC("license") = "GPL";

#define POLICY_ALLOW_ALL 1

/* Index 0: flags (POLICY_ALLOW_ALL). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} POLICY SEC(".maps");

/* Destination ports (host byte order) allowed when POLICY_ALLOW_ALL is not set. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u16);
	__type(value, __u8);
} ALLOWED_PORTS SEC(".maps");

static __always_inline int decide(struct bpf_sock_addr *ctx)
{
	__u32 zero = 0;
	__u32 *flags = bpf_map_lookup_elem(&POLICY, &zero);
	if (flags && (*flags & POLICY_ALLOW_ALL))
		return 1;
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	if (bpf_map_lookup_elem(&ALLOWED_PORTS, &port))
		return 1;
	return 0;
}

SEC("cgroup/connect4")
int clawfs_connect4(struct bpf_sock_addr *ctx)
{
	return decide(ctx);
}

SEC("cgroup/connect6")
int clawfs_connect6(struct bpf_sock_addr *ctx)
{
	return decide(ctx);
}
