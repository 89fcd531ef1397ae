// SPDX-License-Identifier: GPL-2.0
/* ClawFS agent monitoring of processes whose cgroup (or one of its ancestors) is in WATCHED,
 * reported to the EVENTS ring buffer: exec, connect, opens with their outcome; path system calls
 * and connects
 * the kernel refused with EACCES or EPERM; and system calls refused by seccomp, seen as a
 * sys_exit without its sys_enter (seccomp answers before the syscall tracepoint). Connects and
 * UDP sends to an address (sendto, sendmsg) count as connects.
 *
 * The system call hooks are raw tracepoints: they run for every system call of the host while
 * attached, and a raw tracepoint hands the program the registers as they are, where a
 * `syscalls/` or `raw_syscalls/` tracepoint first copies a record for it on every call. Nothing
 * is read from the registers before the caller is known to be watched. */
#include "common.h"
#include <asm/unistd.h>
#include <bpf/bpf_core_read.h>

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

#define CLAWFS_AT_FDCWD -100

/* Deepest ancestor level looked at: agents run in clawfs/agent-NAME/run-PID. */
#define MAX_LEVEL 12

struct verdict {
	__u64 watched; /* the watched cgroup, 0 if none */
	__u32 agent;
	__u32 gen;     /* GEN when computed: a verdict of an older generation is recomputed */
};

/* Index 0: the generation of WATCHED, incremented by userspace whenever it changes. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} GEN SEC(".maps");

/* cgroup id -> watched_cgroup()'s answer: the system call tracepoints run for every process of
 * the host, and most are not agents. A plain hash (an LRU's lookups update its lists); when full,
 * verdicts of new cgroups are computed each time, not kept. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct verdict);
} CG_CACHE SEC(".maps");

struct last_verdict {
	__u64 cgroup;
	struct verdict v;
};

/* Per CPU, the last cgroup asked about and its verdict: consecutive system calls on a CPU mostly
 * come from one cgroup, so most calls need no hash lookup at all. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct last_verdict);
} LAST SEC(".maps");

/* Finds the watched cgroup of the current task: its own cgroup, else the nearest watched ancestor.
 * Returns 0 if none is watched. */
static __always_inline __u64 watched_cgroup(__u32 *agent)
{
	__u32 zero = 0;
	__u64 id = bpf_get_current_cgroup_id();
	__u32 *genp = bpf_map_lookup_elem(&GEN, &zero);
	__u32 gen = genp ? *genp : 0;
	struct last_verdict *last = bpf_map_lookup_elem(&LAST, &zero);
	if (last && last->cgroup == id && last->v.gen == gen) {
		*agent = last->v.agent;
		return last->v.watched;
	}
	struct verdict v = {};
	struct verdict *cached = bpf_map_lookup_elem(&CG_CACHE, &id);
	if (cached && cached->gen == gen) {
		v = *cached;
	} else {
		v.gen = gen;
		__u32 *a = bpf_map_lookup_elem(&WATCHED, &id);
		if (a) {
			v.watched = id;
			v.agent = *a;
		} else {
#pragma unroll
			for (int level = MAX_LEVEL; level >= 1; level--) {
				__u64 anc = bpf_get_current_ancestor_cgroup_id(level);
				if (anc == 0 || anc == id)
					continue;
				a = bpf_map_lookup_elem(&WATCHED, &anc);
				if (a) {
					v.watched = anc;
					v.agent = *a;
					break;
				}
			}
		}
		bpf_map_update_elem(&CG_CACHE, &id, &v, BPF_ANY);
	}
	if (last) {
		last->cgroup = id;
		last->v = v;
	}
	*agent = v.agent;
	return v.watched;
}

/* agent index -> events lost because the ring buffer was full (userspace reports the growth). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} LOST SEC(".maps");

static __always_inline struct clawfs_event *reserve(__u32 kind)
{
	__u32 agent = 0;
	__u64 cg = watched_cgroup(&agent);
	if (!cg)
		return 0;
	struct clawfs_event *e = bpf_ringbuf_reserve(&EVENTS, sizeof(*e), 0);
	if (!e) {
		__u64 *lost = bpf_map_lookup_elem(&LOST, &agent);
		if (lost)
			__sync_fetch_and_add(lost, 1);
		return 0;
	}
	e->cgroup_id = cg;
	e->pid = bpf_get_current_pid_tgid() >> 32;
	e->kind = kind;
	e->agent = agent;
	e->family = 0;
	e->port = 0;
	__builtin_memset(e->addr, 0, sizeof(e->addr));
	e->path[0] = 0;
	e->tid = (__u32)bpf_get_current_pid_tgid();
	e->nr = 0;
	e->err = 0;
	e->base_dev = 0;
	e->base_ino = 0;
	e->start_ns = 0;
	e->end_ns = 0;
	e->dirfd = CLAWFS_AT_FDCWD;
	e->_pad = 0;
	return e;
}

struct linux_binprm {
	const char *filename;
} __attribute__((preserve_access_index));

/* sched/sched_process_exec: (struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm) */
SEC("raw_tracepoint/sched_process_exec")
int clawfs_exec(struct bpf_raw_tracepoint_args *ctx)
{
	struct clawfs_event *e = reserve(EV_EXEC);
	if (!e)
		return 0;
	struct linux_binprm *bprm = (struct linux_binprm *)ctx->args[2];
	bpf_probe_read_kernel_str(e->path, sizeof(e->path), BPF_CORE_READ(bprm, filename));
	bpf_ringbuf_submit(e, 0);
	return 0;
}

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

/* Fills the destination of a connect or send from the user's sockaddr; false if not inet or
 * Unix. */
static __always_inline int fill_sockaddr(struct clawfs_event *e, const void *uaddr,
					 int unspec_is_inet)
{
	__u16 family = 0;
	if (bpf_probe_read_user(&family, sizeof(family), uaddr))
		return 0;
	/* An IPv4 datagram socket takes AF_UNSPEC for AF_INET. */
	if (family == 0 && unspec_is_inet)
		family = CLAWFS_AF_INET;
	e->family = family;
	if (family == CLAWFS_AF_INET) {
		struct clawfs_sockaddr_in sin = {};
		bpf_probe_read_user(&sin, sizeof(sin), uaddr);
		e->port = bpf_ntohs(sin.port);
		__builtin_memcpy(e->addr, sin.addr, 4);
	} else if (family == CLAWFS_AF_INET6) {
		struct clawfs_sockaddr_in6 sin6 = {};
		bpf_probe_read_user(&sin6, sizeof(sin6), uaddr);
		e->port = bpf_ntohs(sin6.port);
		__builtin_memcpy(e->addr, sin6.addr, 16);
	} else if (family == CLAWFS_AF_UNIX) {
		/* sun_path follows the 2-byte family; may be abstract (leading NUL). */
		bpf_probe_read_user_str(e->path, 108, (const char *)uaddr + 2);
	} else {
		return 0;
	}
	return 1;
}

/* ---- refusals ---------------------------------------------------------------------------- */

/* Kernel types read with CO-RE: only the fields used, relocated against the running kernel's
 * BTF when the object is loaded. */
struct super_block {
	__u32 s_dev;
} __attribute__((preserve_access_index));

struct inode {
	unsigned long i_ino;
	struct super_block *i_sb;
} __attribute__((preserve_access_index));

struct dentry {
	struct inode *d_inode;
} __attribute__((preserve_access_index));

struct path {
	void *mnt;
	struct dentry *dentry;
} __attribute__((preserve_access_index));

struct fs_struct {
	struct path pwd;
} __attribute__((preserve_access_index));

struct file {
	struct path f_path;
} __attribute__((preserve_access_index));

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
} __attribute__((preserve_access_index));

struct files_struct {
	struct fdtable *fdt;
} __attribute__((preserve_access_index));

struct task_struct {
	struct fs_struct *fs;
	struct files_struct *files;
} __attribute__((preserve_access_index));

/* The user registers a system call entered with: its number and arguments. */
#if defined(__TARGET_ARCH_x86)
struct pt_regs {
	unsigned long di, si, dx, r10, r8, orig_ax;
} __attribute__((preserve_access_index));
#define SYSCALL_NR(r) BPF_CORE_READ(r, orig_ax)
#define SYSCALL_ARG0(r) BPF_CORE_READ(r, di)
#define SYSCALL_ARG1(r) BPF_CORE_READ(r, si)
#define SYSCALL_ARG2(r) BPF_CORE_READ(r, dx)
#define SYSCALL_ARG3(r) BPF_CORE_READ(r, r10)
#define SYSCALL_ARG4(r) BPF_CORE_READ(r, r8)
#elif defined(__TARGET_ARCH_arm64)
struct user_pt_regs {
	__u64 regs[31];
} __attribute__((preserve_access_index));
struct pt_regs {
	struct user_pt_regs user_regs;
	__u64 orig_x0;
	__s32 syscallno;
} __attribute__((preserve_access_index));
#define SYSCALL_NR(r) BPF_CORE_READ(r, syscallno)
#define SYSCALL_ARG0(r) BPF_CORE_READ(r, orig_x0)
#define SYSCALL_ARG1(r) BPF_CORE_READ(r, user_regs.regs[1])
#define SYSCALL_ARG2(r) BPF_CORE_READ(r, user_regs.regs[2])
#define SYSCALL_ARG3(r) BPF_CORE_READ(r, user_regs.regs[3])
#define SYSCALL_ARG4(r) BPF_CORE_READ(r, user_regs.regs[4])
#else
#error "the monitor reads system call registers of x86_64 and arm64 only"
#endif

#define CLAWFS_EACCES 13
#define CLAWFS_EPERM 1
#define NO_CALL -1

/* What sys_enter saw of a watched thread's system call in progress. */
struct inflight {
	__u64 arg;      /* path syscalls: the path pointer; connect: the sockaddr pointer */
	__u64 start_ns;
	__s64 nr;       /* NO_CALL between a sys_exit and the next sys_enter */
	__s32 dirfd;
	__u32 _pad;
};

/* thread id -> its system call in progress. A thread's first sys_exit only creates its entry:
 * what entered before the monitor saw the thread is not judged. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct inflight);
} INFLIGHT SEC(".maps");

/* Which argument of system call `nr` is a path and which a directory descriptor it is relative
 * to (-1: AT_FDCWD). Returns 0 for calls without a path. Queries (access, faccessat) are left
 * out: they ask, they do not attempt. */
static __always_inline int path_args(long nr, int *path, int *dirfd)
{
	*dirfd = -1;
	switch (nr) {
#ifdef __NR_open
	case __NR_open:
	case __NR_creat:
	case __NR_mkdir:
	case __NR_rmdir:
	case __NR_unlink:
	case __NR_rename:
	case __NR_chmod:
	case __NR_chown:
	case __NR_lchown:
	case __NR_mknod:
	case __NR_stat:
	case __NR_lstat:
#endif
	case __NR_truncate:
	case __NR_execve:
	case __NR_chdir:
	case __NR_setxattr:
	case __NR_lsetxattr:
	case __NR_removexattr:
	case __NR_lremovexattr:
		*path = 0;
		return 1;
#ifdef __NR_symlink
	case __NR_symlink:
	case __NR_link: /* the new name: where a refused link was to be made */
		*path = 1;
		return 1;
#endif
	case __NR_openat:
	case __NR_openat2:
	case __NR_mkdirat:
	case __NR_unlinkat:
#ifdef __NR_renameat
	case __NR_renameat:
#endif
	case __NR_renameat2:
	case __NR_fchmodat:
#ifdef __NR_fchmodat2
	case __NR_fchmodat2:
#endif
	case __NR_fchownat:
	case __NR_execveat:
	case __NR_mknodat:
#ifdef __NR_newfstatat
	case __NR_newfstatat:
#endif
	case __NR_statx:
	case __NR_utimensat:
		*dirfd = 0;
		*path = 1;
		return 1;
	case __NR_symlinkat:
		*dirfd = 1;
		*path = 2;
		return 1;
	case __NR_inotify_add_watch: /* refused by the kernel's own check (ACLs), never asked of ClawFS */
		*path = 1;
		return 1;
	case __NR_linkat: /* the new name and its directory */
		*dirfd = 2;
		*path = 3;
		return 1;
	}
	return 0;
}

/* Argument i (0..3) of the call. */
static __always_inline __u64 arg_of(const __u64 args[4], int i)
{
	return i == 0 ? args[0] : i == 1 ? args[1] : i == 2 ? args[2] : i == 3 ? args[3] : 0;
}

/* A connect's destination, reported as it enters (its refusal is reported again as it
 * returns). Only inet and Unix destinations are reported. */
static __always_inline void report_connect(const void *uaddr)
{
	__u16 family = 0;
	if (bpf_probe_read_user(&family, sizeof(family), uaddr))
		return;
	if (family != CLAWFS_AF_INET && family != CLAWFS_AF_INET6 && family != CLAWFS_AF_UNIX)
		return;
	struct clawfs_event *e = reserve(EV_CONNECT);
	if (!e)
		return;
	fill_sockaddr(e, uaddr, 0);
	bpf_ringbuf_submit(e, 0);
}

/* raw_syscalls/sys_enter: (struct pt_regs *regs, long id) */
SEC("raw_tracepoint/sys_enter")
int clawfs_sys_enter(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 agent = 0;
	if (!watched_cgroup(&agent))
		return 0;
	struct pt_regs *regs = (struct pt_regs *)ctx->args[0];
	__s64 id = (__s64)ctx->args[1];
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct inflight f = {};
	f.nr = id;
	f.start_ns = bpf_ktime_get_ns();
	f.dirfd = CLAWFS_AT_FDCWD;
	int path = -1, dirfd = -1;
	__u64 args[4];
	args[0] = SYSCALL_ARG0(regs);
	args[1] = SYSCALL_ARG1(regs);
	args[2] = SYSCALL_ARG2(regs);
	args[3] = SYSCALL_ARG3(regs);
	if (id == __NR_connect || id == __NR_bind) {
		f.arg = args[1];
		if (id == __NR_connect)
			report_connect((const void *)args[1]);
	} else if (id == __NR_socket) {
		f.arg = args[0]; /* the family: nonzero for every socket the network filter judges */
	} else if (id == __NR_sendto) {
		f.arg = SYSCALL_ARG4(regs); /* the destination, NULL on a connected socket */
	} else if (id == __NR_sendmsg || id == __NR_sendmmsg) {
		/* msg_name, the first field of struct msghdr (and of the first mmsghdr) */
		void *name = 0;
		bpf_probe_read_user(&name, sizeof(name), (const void *)args[1]);
		f.arg = (__u64)name;
	} else if (path_args(id, &path, &dirfd)) {
		f.arg = arg_of(args, path);
		if (dirfd >= 0)
			f.dirfd = (__s32)arg_of(args, dirfd);
	}
	bpf_map_update_elem(&INFLIGHT, &tid, &f, BPF_ANY);
	return 0;
}

/* The device and inode of the directory a relative path of the current task is resolved from:
 * its working directory, or the directory open as `dirfd`. */
static __always_inline void fill_base(struct clawfs_event *e, __s32 dirfd)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct inode *inode = 0;
	if (dirfd == CLAWFS_AT_FDCWD) {
		inode = BPF_CORE_READ(task, fs, pwd.dentry, d_inode);
	} else if (dirfd >= 0) {
		struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
		unsigned int max = BPF_CORE_READ(fdt, max_fds);
		if ((unsigned int)dirfd >= max)
			return;
		struct file **fds = BPF_CORE_READ(fdt, fd);
		struct file *file = 0;
		if (bpf_probe_read_kernel(&file, sizeof(file), &fds[dirfd]) || !file)
			return;
		inode = BPF_CORE_READ(file, f_path.dentry, d_inode);
	}
	if (!inode)
		return;
	e->base_ino = BPF_CORE_READ(inode, i_ino);
	e->base_dev = BPF_CORE_READ(inode, i_sb, s_dev);
}

/* raw_syscalls/sys_exit: (struct pt_regs *regs, long ret) */
SEC("raw_tracepoint/sys_exit")
int clawfs_sys_exit(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 agent = 0;
	if (!watched_cgroup(&agent))
		return 0;
	struct pt_regs *regs = (struct pt_regs *)ctx->args[0];
	__s64 id = SYSCALL_NR(regs);
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct inflight *f = bpf_map_lookup_elem(&INFLIGHT, &tid);
	if (!f) {
		struct inflight first = {};
		first.nr = NO_CALL;
		bpf_map_update_elem(&INFLIGHT, &tid, &first, BPF_ANY);
		return 0;
	}
	__s64 ret = (__s64)ctx->args[1];
	if (f->nr == NO_CALL) {
		/* No sys_enter: seccomp refused the call before it ran. */
		if (ret < 0 && ret > -4096) {
			struct clawfs_event *e = reserve(EV_SECCOMP);
			if (e) {
				e->nr = (__s32)id;
				e->err = (__s32)-ret;
				bpf_ringbuf_submit(e, 0);
			}
		}
		return 0;
	}
	int is_open = id == __NR_openat || id == __NR_openat2
#ifdef __NR_open
		      || id == __NR_open || id == __NR_creat
#endif
		;
	int refused = ret == -CLAWFS_EACCES || ret == -CLAWFS_EPERM;
	if (is_open && !refused && f->nr == id && f->arg) {
		/* An open and its outcome (refusals are reported below, as such). */
		struct clawfs_event *e = reserve(EV_OPEN);
		if (e) {
			e->err = ret < 0 ? (__s32)-ret : 0;
			bpf_probe_read_user_str(e->path, sizeof(e->path), (const char *)f->arg);
			bpf_ringbuf_submit(e, 0);
		}
	}
	if (refused && f->nr == id && f->arg) {
		int path = -1, dirfd = -1;
		int is_send = id == __NR_sendto || id == __NR_sendmsg ||
			      id == __NR_sendmmsg;
		int is_connect = id == __NR_connect || id == __NR_bind || is_send;
		int is_socket = id == __NR_socket &&
				(f->arg == CLAWFS_AF_INET || f->arg == CLAWFS_AF_INET6);
		if (is_connect || is_socket || path_args(id, &path, &dirfd)) {
			struct clawfs_event *e = reserve(EV_REFUSED);
			if (e) {
				e->nr = (__s32)id;
				e->err = (__s32)-ret;
				e->start_ns = f->start_ns;
				e->end_ns = bpf_ktime_get_ns();
				if (is_connect) {
					fill_sockaddr(e, (const void *)f->arg, is_send);
				} else if (is_socket) {
					/* A socket refused before it had an address: the family alone. */
					e->family = (__u16)f->arg;
				} else {
					long n = bpf_probe_read_user_str(e->path, sizeof(e->path),
									 (const char *)f->arg);
					e->dirfd = f->dirfd;
					if (n > 0 && e->path[0] != '/')
						fill_base(e, f->dirfd);
				}
				bpf_ringbuf_submit(e, 0);
			}
		}
	}
	f->nr = NO_CALL;
	f->arg = 0;
	return 0;
}
