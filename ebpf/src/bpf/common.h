/* Shared definitions of the ClawFS eBPF programs. Built with clang -target bpf, without vmlinux.h:
 * the tracepoint contexts below follow the stable tracefs formats
 * (/sys/kernel/tracing/events/<category>/<name>/format). */
#ifndef CLAWFS_EBPF_COMMON_H
#define CLAWFS_EBPF_COMMON_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define CLAWFS_PATH_LEN 256

/* Event kinds, mirrored by EventKind in src/lib.rs. */
#define EV_EXEC 1
#define EV_OPEN 2
#define EV_CONNECT 3
#define EV_REFUSED 4
#define EV_SECCOMP 5

#define CLAWFS_AF_UNIX 1
#define CLAWFS_AF_INET 2
#define CLAWFS_AF_INET6 10

/* Layout mirrored by RawEvent in src/lib.rs (repr(C), 344 bytes). */
struct clawfs_event {
	__u64 cgroup_id;   /* the watched cgroup (the process's own or an ancestor) */
	__u32 pid;         /* tgid */
	__u32 kind;        /* EV_* */
	__u32 agent;       /* agent index, value of WATCHED */
	__u16 family;      /* connect: address family */
	__u16 port;        /* connect: host byte order */
	__u8 addr[16];     /* connect: IPv4 in the first 4 bytes, or IPv6 */
	char path[CLAWFS_PATH_LEN]; /* exec filename, open path, connect AF_UNIX path */
	__u32 tid;         /* the calling thread */
	__s32 nr;          /* refused, seccomp: the system call number */
	__s32 err;         /* refused, seccomp: the errno returned (positive) */
	__u32 base_dev;    /* refused, relative path: device of the directory it is relative to */
	__u64 base_ino;    /* ... and its inode number (0: unknown) */
	__u64 start_ns;    /* refused: when the call entered (bpf_ktime_get_ns) */
	__u64 end_ns;      /* refused: when it returned */
	__s32 dirfd;       /* refused: the directory descriptor argument (-100: AT_FDCWD) */
	__u32 _pad;
};

#endif
