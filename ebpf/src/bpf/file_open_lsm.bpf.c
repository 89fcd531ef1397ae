// SPDX-License-Identifier: GPL-2.0
/* ClawFS file-open enforcement as a BPF LSM program: opens of inodes in DENY_INODES fail with
 * EPERM. Needs CONFIG_BPF_LSM and "bpf" in the active LSM list; refused at load elsewhere.
 * No vmlinux.h: the two kernel structures read are declared with CO-RE relocations, resolved by
 * the loader against the running kernel's BTF. */
#include "common.h"
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

#define CLAWFS_EPERM 1

struct super_block {
	__u32 s_dev; /* kernel dev_t: major << 20 | minor */
} __attribute__((preserve_access_index));

struct inode {
	unsigned long i_ino;
	struct super_block *i_sb;
} __attribute__((preserve_access_index));

struct file {
	struct inode *f_inode;
} __attribute__((preserve_access_index));

/* Mirrored by InodeKey in src/lib.rs. */
struct inode_key {
	__u64 dev; /* kernel encoding */
	__u64 ino;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct inode_key);
	__type(value, __u8);
} DENY_INODES SEC(".maps");

/* int file_open(struct file *file), with the previous LSM's return value as the last argument. */
SEC("lsm/file_open")
int clawfs_file_open(unsigned long long *ctx)
{
	struct file *file = (struct file *)ctx[0];
	int prev = (int)ctx[1];
	if (prev != 0)
		return prev;
	struct inode_key key = {};
	key.ino = BPF_CORE_READ(file, f_inode, i_ino);
	key.dev = BPF_CORE_READ(file, f_inode, i_sb, s_dev);
	if (bpf_map_lookup_elem(&DENY_INODES, &key))
		return -CLAWFS_EPERM;
	return 0;
}
