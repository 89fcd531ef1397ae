// SPDX-License-Identifier: GPL-2.0
/* ClawFS per-agent egress filter, attached to an agent's cgroup v2 directory:
 * cgroup/connect4 and connect6 (TCP and UDP connect), cgroup/sendmsg4 and sendmsg6 (UDP
 * datagrams sent to an address, which need no connect). Returning 0 makes the call fail with
 * EPERM, 1 lets it proceed. A destination is allowed when ALLOWED holds its address and port, or
 * the port with the all-zero address (any host). IPv4 addresses are keyed as IPv4-mapped IPv6
 * (::ffff:a.b.c.d), so an IPv6 socket sending to a mapped address meets the same entry. */
#include "common.h"

char LICENSE[] SEC("license") = "GPL";

#define MODE_ALLOW_ALL 1

/* Index 0: flags (MODE_ALLOW_ALL). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} MODE SEC(".maps");

/* Mirrored by EndpointKey in src/lib.rs. */
struct endpoint {
	__u8 addr[16]; /* IPv6, or IPv4-mapped; all zero: any host */
	__u16 port;    /* host byte order */
	__u16 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct endpoint);
	__type(value, __u8);
} ALLOWED SEC(".maps");

static __always_inline int allowed(struct endpoint *ep)
{
	__u32 zero = 0;
	__u32 *flags = bpf_map_lookup_elem(&MODE, &zero);
	if (flags && (*flags & MODE_ALLOW_ALL))
		return 1;
	if (bpf_map_lookup_elem(&ALLOWED, ep))
		return 1;
	struct endpoint any = {};
	any.port = ep->port;
	return bpf_map_lookup_elem(&ALLOWED, &any) != 0;
}

static __always_inline int decide4(struct bpf_sock_addr *ctx)
{
	struct endpoint ep = {};
	__u32 ip = ctx->user_ip4; /* network byte order */
	ep.addr[10] = 0xff;
	ep.addr[11] = 0xff;
	__builtin_memcpy(&ep.addr[12], &ip, 4);
	ep.port = bpf_ntohs((__u16)ctx->user_port);
	return allowed(&ep);
}

static __always_inline int decide6(struct bpf_sock_addr *ctx)
{
	struct endpoint ep = {};
	__u32 w0 = ctx->user_ip6[0], w1 = ctx->user_ip6[1], w2 = ctx->user_ip6[2],
	      w3 = ctx->user_ip6[3];
	__builtin_memcpy(&ep.addr[0], &w0, 4);
	__builtin_memcpy(&ep.addr[4], &w1, 4);
	__builtin_memcpy(&ep.addr[8], &w2, 4);
	__builtin_memcpy(&ep.addr[12], &w3, 4);
	ep.port = bpf_ntohs((__u16)ctx->user_port);
	return allowed(&ep);
}

SEC("cgroup/connect4")
int clawfs_connect4(struct bpf_sock_addr *ctx)
{
	return decide4(ctx);
}

SEC("cgroup/connect6")
int clawfs_connect6(struct bpf_sock_addr *ctx)
{
	return decide6(ctx);
}

SEC("cgroup/sendmsg4")
int clawfs_sendmsg4(struct bpf_sock_addr *ctx)
{
	return decide4(ctx);
}

SEC("cgroup/sendmsg6")
int clawfs_sendmsg6(struct bpf_sock_addr *ctx)
{
	return decide6(ctx);
}
