// SPDX-License-Identifier: GPL-2.0
/* ClawFS per-agent network filter, attached to an agent's cgroup v2 directory:
 * cgroup/connect4 and connect6 (TCP and UDP connect), cgroup/sendmsg4 and sendmsg6 (UDP
 * datagrams sent to an address, which need no connect), cgroup/bind4 and bind6 (a port to listen
 * or receive on) and cgroup/sock_create (a new IPv4/IPv6 socket). Returning 0 makes the call fail
 * with EPERM, 1 lets it proceed.
 *
 * A destination is allowed when the ALLOWED trie holds a prefix of its key: the port (network
 * byte order), then the address, IPv4 as IPv4-mapped IPv6 (::ffff:a.b.c.d, so an IPv6 socket
 * sending to a mapped address meets the same entry). An entry for any host is the port alone
 * (prefix 16 bits); a network is the port and the network's bits. The cloud metadata addresses
 * (169.254.169.254, fd00:ec2::254) are refused whatever the mode, unless MODE says the allow list
 * names them. */
#include "common.h"

char LICENSE[] SEC("license") = "GPL";

/* Mirrored by the MODE_* constants in src/lib.rs. */
#define MODE_ALLOW_ALL 1   /* every destination (but the metadata addresses) */
#define MODE_NO_BIND 2     /* bind refused: nothing listens or receives on a chosen port */
#define MODE_NO_SOCKET 4   /* no IPv4/IPv6 socket at all (network = "none") */
#define MODE_METADATA_V4 8 /* 169.254.169.254 is named by the allow list */
#define MODE_METADATA_V6 16 /* fd00:ec2::254 is named by the allow list */

/* Index 0: flags (MODE_*). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} MODE SEC(".maps");

/* Mirrored by EndpointKey in src/lib.rs: aya's lpm_trie::Key<[u8; 20]>. */
struct endpoint {
	__u32 prefixlen;
	__u8 data[20]; /* port (big-endian), address (16 bytes), 2 zero bytes */
};

#define FULL_PREFIX (8 * 18)

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__type(key, struct endpoint);
	__type(value, __u8);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} ALLOWED SEC(".maps");

static __always_inline __u32 mode(void)
{
	__u32 zero = 0;
	__u32 *flags = bpf_map_lookup_elem(&MODE, &zero);
	return flags ? *flags : 0;
}

/* 169.254.169.254 as IPv4-mapped IPv6, and fd00:ec2::254. */
static __always_inline int metadata_refused(const __u8 *a, __u32 flags)
{
	int mapped = a[10] == 0xff && a[11] == 0xff;
	for (int i = 0; i < 10; i++)
		if (a[i])
			mapped = 0;
	if (mapped && a[12] == 169 && a[13] == 254 && a[14] == 169 && a[15] == 254)
		return !(flags & MODE_METADATA_V4);
	if (a[0] == 0xfd && a[1] == 0x00 && a[2] == 0x0e && a[3] == 0xc2 && a[14] == 0x02 &&
	    a[15] == 0x54) {
		for (int i = 4; i < 14; i++)
			if (a[i])
				return 0;
		return !(flags & MODE_METADATA_V6);
	}
	return 0;
}

static __always_inline int allowed(struct endpoint *ep)
{
	__u32 flags = mode();
	if (metadata_refused(&ep->data[2], flags))
		return 0;
	if (flags & MODE_ALLOW_ALL)
		return 1;
	return bpf_map_lookup_elem(&ALLOWED, ep) != 0;
}

static __always_inline void set_port(struct endpoint *ep, __u32 user_port)
{
	/* user_port holds the port in network byte order in its low 16 bits. */
	__u16 port = (__u16)user_port;
	__builtin_memcpy(&ep->data[0], &port, 2);
	ep->prefixlen = FULL_PREFIX;
}

static __always_inline int decide4(struct bpf_sock_addr *ctx)
{
	struct endpoint ep = {};
	__u32 ip = ctx->user_ip4; /* network byte order */
	ep.data[12] = 0xff;
	ep.data[13] = 0xff;
	__builtin_memcpy(&ep.data[14], &ip, 4);
	set_port(&ep, ctx->user_port);
	return allowed(&ep);
}

static __always_inline int decide6(struct bpf_sock_addr *ctx)
{
	struct endpoint ep = {};
	__u32 w0 = ctx->user_ip6[0], w1 = ctx->user_ip6[1], w2 = ctx->user_ip6[2],
	      w3 = ctx->user_ip6[3];
	__builtin_memcpy(&ep.data[2], &w0, 4);
	__builtin_memcpy(&ep.data[6], &w1, 4);
	__builtin_memcpy(&ep.data[10], &w2, 4);
	__builtin_memcpy(&ep.data[14], &w3, 4);
	set_port(&ep, ctx->user_port);
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

SEC("cgroup/bind4")
int clawfs_bind4(struct bpf_sock_addr *ctx)
{
	return !(mode() & (MODE_NO_BIND | MODE_NO_SOCKET));
}

SEC("cgroup/bind6")
int clawfs_bind6(struct bpf_sock_addr *ctx)
{
	return !(mode() & (MODE_NO_BIND | MODE_NO_SOCKET));
}

SEC("cgroup/sock_create")
int clawfs_sock_create(struct bpf_sock *sk)
{
	return !(mode() & MODE_NO_SOCKET);
}

/* A connection opened to the agent: a TCP segment with SYN and not ACK, arriving for one of its
 * sockets (a listener, whether bound explicitly or by listen() alone, which no bind hook sees).
 * Replies to its own connects carry SYN and ACK and pass. */
SEC("cgroup_skb/ingress")
int clawfs_ingress(struct __sk_buff *skb)
{
	if (!(mode() & (MODE_NO_BIND | MODE_NO_SOCKET)))
		return 1;
	__u8 proto = 0, flags = 0;
	__u32 tcp = 0;
	if (skb->protocol == bpf_htons(0x0800)) { /* IPv4 */
		__u8 vihl = 0;
		if (bpf_skb_load_bytes(skb, 0, &vihl, 1) || bpf_skb_load_bytes(skb, 9, &proto, 1))
			return 1;
		tcp = (vihl & 0x0f) * 4;
	} else if (skb->protocol == bpf_htons(0x86DD)) { /* IPv6, TCP right after the header */
		if (bpf_skb_load_bytes(skb, 6, &proto, 1))
			return 1;
		tcp = 40;
	} else {
		return 1;
	}
	if (proto != 6 || bpf_skb_load_bytes(skb, tcp + 13, &flags, 1))
		return 1;
	/* SYN = 0x02, ACK = 0x10 */
	return !((flags & 0x02) && !(flags & 0x10));
}
