// SPDX-License-Identifier: GPL-2.0
/* ClawFS agent monitoring: exec, openat and connect of processes whose cgroup (or one of its
 * ancestors) is in WATCHED, reported to the EVENTS ring buffer. */
#include "common.h"

char LICENSE[] SEC("license") = "GPL";

/* cgroup v2 id (inode number of the cgroup directory) -> agent index. Filled by userspace. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u32);
} WATCHED SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} EVENTS SEC(".maps");

/* Deepest ancestor level looked at: agents run in clawfs/agent-NAME/run-PID. */
#define MAX_LEVEL 12

/* Finds the watched cgroup of the current task: its own cgroup, else the nearest watched ancestor.
 * Returns 0 if none is watched. */
static __always_inline __u64 watched_cgroup(__u32 *agent)
{
	__u64 id = bpf_get_current_cgroup_id();
	__u32 *a = bpf_map_lookup_elem(&WATCHED, &id);
	if (a) {
		*agent = *a;
		return id;
	}
#pragma unroll
	for (int level = MAX_LEVEL; level >= 1; level--) {
		__u64 anc = bpf_get_current_ancestor_cgroup_id(level);
		if (anc == 0 || anc == id)
			continue;
		a = bpf_map_lookup_elem(&WATCHED, &anc);
		if (a) {
			*agent = *a;
			return anc;
		}
	}
	return 0;
}

static __always_inline struct clawfs_event *reserve(__u32 kind)
{
	__u32 agent = 0;
	__u64 cg = watched_cgroup(&agent);
	if (!cg)
		return 0;
	struct clawfs_event *e = bpf_ringbuf_reserve(&EVENTS, sizeof(*e), 0);
	if (!e)
		return 0;
	e->cgroup_id = cg;
	e->pid = bpf_get_current_pid_tgid() >> 32;
	e->kind = kind;
	e->agent = agent;
	e->family = 0;
	e->port = 0;
	__builtin_memset(e->addr, 0, sizeof(e->addr));
	e->path[0] = 0;
	e->_pad = 0;
	return e;
}

/* sched/sched_process_exec */
struct tp_sched_process_exec {
	__u64 common;
	__u32 filename_loc; /* __data_loc char[]: offset in the low 16 bits, length in the high 16 */
	__s32 pid;
	__s32 old_pid;
};

SEC("tracepoint/sched/sched_process_exec")
int clawfs_exec(struct tp_sched_process_exec *ctx)
{
	struct clawfs_event *e = reserve(EV_EXEC);
	if (!e)
		return 0;
	__u32 off = ctx->filename_loc & 0xFFFF;
	bpf_probe_read_kernel_str(e->path, sizeof(e->path), (char *)ctx + off);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* syscalls/sys_enter_openat */
struct tp_sys_enter_openat {
	__u64 common;
	__s32 syscall_nr;
	__u32 pad;
	__u64 dfd;
	const char *filename;
	__u64 flags;
	__u64 mode;
};

SEC("tracepoint/syscalls/sys_enter_openat")
int clawfs_openat(struct tp_sys_enter_openat *ctx)
{
	struct clawfs_event *e = reserve(EV_OPEN);
	if (!e)
		return 0;
	bpf_probe_read_user_str(e->path, sizeof(e->path), ctx->filename);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* syscalls/sys_enter_connect */
struct tp_sys_enter_connect {
	__u64 common;
	__s32 syscall_nr;
	__u32 pad;
	__u64 fd;
	const void *uservaddr;
	__u64 addrlen;
};

struct clawfs_sockaddr_in {
	__u16 family;
	__u16 port; /* network byte order */
	__u8 addr[4];
};

struct clawfs_sockaddr_in6 {
	__u16 family;
	__u16 port;
	__u32 flowinfo;
	__u8 addr[16];
};

SEC("tracepoint/syscalls/sys_enter_connect")
int clawfs_connect(struct tp_sys_enter_connect *ctx)
{
	__u16 family = 0;
	if (bpf_probe_read_user(&family, sizeof(family), ctx->uservaddr))
		return 0;
	if (family != CLAWFS_AF_INET && family != CLAWFS_AF_INET6 && family != CLAWFS_AF_UNIX)
		return 0;
	struct clawfs_event *e = reserve(EV_CONNECT);
	if (!e)
		return 0;
	e->family = family;
	if (family == CLAWFS_AF_INET) {
		struct clawfs_sockaddr_in sin = {};
		bpf_probe_read_user(&sin, sizeof(sin), ctx->uservaddr);
		e->port = bpf_ntohs(sin.port);
		__builtin_memcpy(e->addr, sin.addr, 4);
	} else if (family == CLAWFS_AF_INET6) {
		struct clawfs_sockaddr_in6 sin6 = {};
		bpf_probe_read_user(&sin6, sizeof(sin6), ctx->uservaddr);
		e->port = bpf_ntohs(sin6.port);
		__builtin_memcpy(e->addr, sin6.addr, 16);
	} else {
		/* sun_path follows the 2-byte family; may be abstract (leading NUL). */
		bpf_probe_read_user_str(e->path, 108, (const char *)ctx->uservaddr + 2);
	}
	bpf_ringbuf_submit(e, 0);
	return 0;
}
