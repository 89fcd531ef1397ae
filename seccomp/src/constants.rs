//! Named constants a whitelist may use in argument rules, errno names for actions, and the width
//! of the syscall arguments the kernel reads as 32-bit integers.

/// Constants usable in `rules` values (x86_64 / generic Linux values).
const CONSTANTS: &[(&str, u64)] = &[
    // Address families (socket, socketpair: arg0).
    ("AF_UNSPEC", 0),
    ("AF_UNIX", 1),
    ("AF_LOCAL", 1),
    ("AF_INET", 2),
    ("AF_AX25", 3),
    ("AF_IPX", 4),
    ("AF_APPLETALK", 5),
    ("AF_NETROM", 6),
    ("AF_BRIDGE", 7),
    ("AF_ATMPVC", 8),
    ("AF_X25", 9),
    ("AF_INET6", 10),
    ("AF_ROSE", 11),
    ("AF_DECnet", 12),
    ("AF_NETBEUI", 13),
    ("AF_SECURITY", 14),
    ("AF_KEY", 15),
    ("AF_NETLINK", 16),
    ("AF_ROUTE", 16),
    ("AF_PACKET", 17),
    ("AF_ECONET", 19),
    ("AF_ATMSVC", 20),
    ("AF_RDS", 21),
    ("AF_IRDA", 23),
    ("AF_PPPOX", 24),
    ("AF_WANPIPE", 25),
    ("AF_LLC", 26),
    ("AF_IB", 27),
    ("AF_MPLS", 28),
    ("AF_CAN", 29),
    ("AF_TIPC", 30),
    ("AF_BLUETOOTH", 31),
    ("AF_IUCV", 32),
    ("AF_RXRPC", 33),
    ("AF_ISDN", 34),
    ("AF_PHONET", 35),
    ("AF_IEEE802154", 36),
    ("AF_CAIF", 37),
    ("AF_ALG", 38),
    ("AF_NFC", 39),
    ("AF_VSOCK", 40),
    ("AF_KCM", 41),
    ("AF_QIPCRTR", 42),
    ("AF_SMC", 43),
    ("AF_XDP", 44),
    ("AF_MCTP", 45),
    // clone(2) flags (clone: arg0).
    ("CSIGNAL", 0x0000_00ff),
    ("CLONE_NEWTIME", 0x0000_0080),
    ("CLONE_VM", 0x0000_0100),
    ("CLONE_FS", 0x0000_0200),
    ("CLONE_FILES", 0x0000_0400),
    ("CLONE_SIGHAND", 0x0000_0800),
    ("CLONE_PIDFD", 0x0000_1000),
    ("CLONE_PTRACE", 0x0000_2000),
    ("CLONE_VFORK", 0x0000_4000),
    ("CLONE_PARENT", 0x0000_8000),
    ("CLONE_THREAD", 0x0001_0000),
    ("CLONE_NEWNS", 0x0002_0000),
    ("CLONE_SYSVSEM", 0x0004_0000),
    ("CLONE_SETTLS", 0x0008_0000),
    ("CLONE_PARENT_SETTID", 0x0010_0000),
    ("CLONE_CHILD_CLEARTID", 0x0020_0000),
    ("CLONE_DETACHED", 0x0040_0000),
    ("CLONE_UNTRACED", 0x0080_0000),
    ("CLONE_CHILD_SETTID", 0x0100_0000),
    ("CLONE_NEWCGROUP", 0x0200_0000),
    ("CLONE_NEWUTS", 0x0400_0000),
    ("CLONE_NEWIPC", 0x0800_0000),
    ("CLONE_NEWUSER", 0x1000_0000),
    ("CLONE_NEWPID", 0x2000_0000),
    ("CLONE_NEWNET", 0x4000_0000),
    ("CLONE_IO", 0x8000_0000),
    // personality(2) (personality: arg0).
    ("PER_LINUX", 0x0000),
    ("PER_LINUX_32BIT", 0x0080_0000),
    ("PER_LINUX32", 0x0008),
    ("ADDR_NO_RANDOMIZE", 0x0004_0000),
    ("READ_IMPLIES_EXEC", 0x0040_0000),
    ("UNAME26", 0x0002_0000),
    ("PER_QUERY", 0xffff_ffff),
    // Terminal ioctls (ioctl: arg1).
    ("TCGETS", 0x5401),
    ("TCSETS", 0x5402),
    ("TCSETSW", 0x5403),
    ("TCSETSF", 0x5404),
    ("TIOCSCTTY", 0x540e),
    ("TIOCGPGRP", 0x540f),
    ("TIOCSPGRP", 0x5410),
    ("TIOCSTI", 0x5412),
    ("TIOCGWINSZ", 0x5413),
    ("TIOCSWINSZ", 0x5414),
    ("FIONREAD", 0x541b),
    ("TIOCLINUX", 0x541c),
    ("TIOCCONS", 0x541d),
    ("TIOCSETD", 0x5423),
    ("FIONBIO", 0x5421),
    ("FIOCLEX", 0x5451),
    ("FIONCLEX", 0x5450),
];

/// errno names accepted in `errno:NAME` actions.
const ERRNOS: &[(&str, i32)] = &[
    ("EPERM", libc::EPERM),
    ("ENOENT", libc::ENOENT),
    ("EIO", libc::EIO),
    ("EBADF", libc::EBADF),
    ("EAGAIN", libc::EAGAIN),
    ("ENOMEM", libc::ENOMEM),
    ("EACCES", libc::EACCES),
    ("EFAULT", libc::EFAULT),
    ("EBUSY", libc::EBUSY),
    ("EEXIST", libc::EEXIST),
    ("ENODEV", libc::ENODEV),
    ("EINVAL", libc::EINVAL),
    ("ENOTTY", libc::ENOTTY),
    ("EROFS", libc::EROFS),
    ("ENOSYS", libc::ENOSYS),
    ("EOPNOTSUPP", libc::EOPNOTSUPP),
    ("ENOTSUP", libc::ENOTSUP),
    ("EAFNOSUPPORT", libc::EAFNOSUPPORT),
    ("EPROTONOSUPPORT", libc::EPROTONOSUPPORT),
];

/// The value of a named constant.
pub(crate) fn constant(name: &str) -> Option<u64> {
    CONSTANTS.iter().find(|(n, _)| *n == name).map(|&(_, v)| v)
}

/// An errno by name.
pub(crate) fn errno_by_name(name: &str) -> Option<i32> {
    ERRNOS.iter().find(|(n, _)| *n == name).map(|&(_, v)| v)
}

/// The name of an errno, if it has one here.
pub(crate) fn errno_name(errno: i32) -> Option<&'static str> {
    ERRNOS.iter().find(|&&(_, v)| v == errno).map(|&(n, _)| n)
}

/// Arguments the kernel declares as `int` / `unsigned int` (it ignores their upper 32 bits, so a
/// filter must too: comparing all 64 bits would let `0xffffffff_00005412` through a rule meant
/// to refuse `TIOCSTI`). From the kernel's `SYSCALL_DEFINE` signatures.
const INT_ARGS: &[(&str, &[u32])] = &[
    ("socket", &[0, 1, 2]),
    ("socketpair", &[0, 1, 2]),
    ("ioctl", &[0, 1]),
    ("personality", &[0]),
    ("prctl", &[0]),
    ("fcntl", &[0, 1]),
    ("setsockopt", &[0, 1, 2]),
    ("getsockopt", &[0, 1, 2]),
    ("kill", &[1]),
    ("tgkill", &[2]),
    ("tkill", &[1]),
    ("madvise", &[2]),
    ("openat", &[0, 2]),
    ("open", &[1]),
    ("mmap", &[4]),
    // clone() reads its flags with lower_32_bits() on every architecture.
    ("clone", &[0]),
    ("unshare", &[0]),
    ("setns", &[0, 1]),
];

/// Whether the kernel reads argument `arg` of `syscall` as a 32-bit integer. When this crate does
/// not know, a rule compares 64 bits for `in` and the low 32 for `not_in`: both fail closed.
pub(crate) fn known_int_arg(syscall: &str, arg: u32) -> bool {
    INT_ARGS
        .iter()
        .any(|(s, args)| *s == syscall && args.contains(&arg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve() {
        assert_eq!(constant("TIOCSTI"), Some(0x5412));
        assert_eq!(constant("CLONE_NEWUSER"), Some(libc::CLONE_NEWUSER as u64));
        assert_eq!(constant("CLONE_NEWNET"), Some(libc::CLONE_NEWNET as u64));
        assert_eq!(
            constant("CLONE_NEWCGROUP"),
            Some(libc::CLONE_NEWCGROUP as u64)
        );
        assert_eq!(constant("AF_NETLINK"), Some(libc::AF_NETLINK as u64));
        assert_eq!(constant("AF_INET6"), Some(libc::AF_INET6 as u64));
        assert_eq!(constant("AF_PACKET"), Some(libc::AF_PACKET as u64));
        assert_eq!(constant("TIOCLINUX"), Some(libc::TIOCLINUX));
        assert_eq!(constant("TIOCSTI"), Some(libc::TIOCSTI));
        assert_eq!(constant("nope"), None);
        assert_eq!(errno_by_name("ENOSYS"), Some(38));
        assert_eq!(errno_name(1), Some("EPERM"));
        assert!(known_int_arg("ioctl", 1));
        assert!(!known_int_arg("ioctl", 2));
    }
}
