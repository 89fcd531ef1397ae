/* Makes the syscalls named on the command line and prints "name rc errno" for each (rc -1: the call
 * failed with errno; rc 0 or 1: it succeeded), or "name signal N" if the check was killed. Each
 * check runs in a child of its own (fork), so that one that succeeds (unshare, ptrace) cannot
 * change the next; with --nofork they run in this process, so that a kill ends the probe.
 * Compiled by tests/kernel.rs; raw syscall(2) so that libc wrappers cannot paper over a refusal.
 * Every check is harmless when it is NOT filtered (bad pointers, missing paths, invalid
 * descriptors), so running the probe unfiltered shows what the filter changes. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

static long clone_flags(unsigned long flags) {
    long r = syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0);
    if (r == 0) _exit(0);
    if (r > 0) waitpid((pid_t)r, 0, 0);
    return r;
}

static long sock(int family, int type) {
    long r = syscall(SYS_socket, family, type, 0);
    if (r >= 0) close((int)r);
    return r;
}

static void *thread_main(void *arg) { return arg; }

static long run(const char *n) {
    int p[2];
    char c = 'x';
    if (!strcmp(n, "ptrace")) return syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0);
    if (!strcmp(n, "mount")) return syscall(SYS_mount, "none", "/nonexistent-clawfs-probe", "tmpfs", 0, 0);
    if (!strcmp(n, "umount2")) return syscall(SYS_umount2, "/nonexistent-clawfs-probe", 0);
    if (!strcmp(n, "pivot_root")) return syscall(SYS_pivot_root, "/nonexistent-a", "/nonexistent-b");
    if (!strcmp(n, "fsopen")) return syscall(430, "nonexistent-clawfs-fs", 0);
    if (!strcmp(n, "open_tree")) return syscall(428, -1, "", 0);
    if (!strcmp(n, "move_mount")) return syscall(429, -1, "", -1, "", 0);
    if (!strcmp(n, "unshare_user")) return syscall(SYS_unshare, CLONE_NEWUSER);
    if (!strcmp(n, "unshare_net")) return syscall(SYS_unshare, CLONE_NEWNET);
    if (!strcmp(n, "setns")) return syscall(SYS_setns, -1, 0);
    if (!strcmp(n, "bpf")) return syscall(SYS_bpf, 0, 0, 0);
    if (!strcmp(n, "keyctl")) return syscall(SYS_keyctl, 0 /* GET_KEYRING_ID */, -3 /* session */, 0);
    if (!strcmp(n, "add_key")) return syscall(SYS_add_key, 0, 0, 0, 0, -3);
    if (!strcmp(n, "request_key")) return syscall(SYS_request_key, 0, 0, 0, -3);
    if (!strcmp(n, "io_uring_setup")) return syscall(425, 1, 0);
    if (!strcmp(n, "io_uring_enter")) return syscall(426, -1, 0, 0, 0, 0, 0);
    if (!strcmp(n, "perf_event_open")) return syscall(SYS_perf_event_open, 0, 0, -1, -1, 0);
    if (!strcmp(n, "userfaultfd")) {
        long r = syscall(SYS_userfaultfd, O_CLOEXEC | 1 /* UFFD_USER_MODE_ONLY */);
        if (r >= 0) close((int)r);
        return r;
    }
    if (!strcmp(n, "process_vm_readv")) return syscall(SYS_process_vm_readv, getpid(), 0, 0, 0, 0, 0);
    if (!strcmp(n, "finit_module")) return syscall(SYS_finit_module, -1, "", 0);
    if (!strcmp(n, "delete_module")) return syscall(SYS_delete_module, "nonexistent_clawfs_module", O_NONBLOCK);
    if (!strcmp(n, "clone_newnet")) return clone_flags(CLONE_NEWNET);
    if (!strcmp(n, "clone_newuser")) return clone_flags(CLONE_NEWUSER);
    if (!strcmp(n, "clone_newns")) return clone_flags(CLONE_NEWNS);
    if (!strcmp(n, "clone_plain")) return clone_flags(0);
    if (!strcmp(n, "clone3")) return syscall(435, 0, 0);
    if (!strcmp(n, "thread")) {
        pthread_t t;
        int e = pthread_create(&t, 0, thread_main, 0);
        if (e) { errno = e; return -1; }
        return pthread_join(t, 0);
    }
    if (!strcmp(n, "fork")) {
        pid_t pid = fork();
        if (pid == 0) _exit(0);
        if (pid > 0) waitpid(pid, 0, 0);
        return pid < 0 ? -1 : 0;
    }
    if (!strcmp(n, "socket_unix")) return sock(AF_UNIX, SOCK_STREAM);
    if (!strcmp(n, "socket_inet")) return sock(AF_INET, SOCK_STREAM);
    if (!strcmp(n, "socket_inet6")) return sock(AF_INET6, SOCK_DGRAM);
    if (!strcmp(n, "socket_netlink")) return sock(AF_NETLINK, SOCK_RAW);
    if (!strcmp(n, "socket_packet")) return sock(AF_PACKET, SOCK_RAW);
    if (!strcmp(n, "socket_inet_hi")) return syscall(SYS_socket, 0x100000000UL | AF_INET, SOCK_STREAM, 0);
    if (!strcmp(n, "tiocsti") || !strcmp(n, "tiocsti_hi") || !strcmp(n, "tcgets") || !strcmp(n, "fionread")) {
        int avail = 0;
        long r;
        struct termios t;
        if (pipe(p)) return -1;
        if (!strcmp(n, "tiocsti")) r = syscall(SYS_ioctl, p[0], TIOCSTI, &c);
        else if (!strcmp(n, "tiocsti_hi")) r = syscall(SYS_ioctl, p[0], 0xffffffff00000000UL | TIOCSTI, &c);
        else if (!strcmp(n, "tcgets")) r = syscall(SYS_ioctl, p[0], TCGETS, &t);
        else r = syscall(SYS_ioctl, p[0], FIONREAD, &avail);
        int saved = errno;
        close(p[0]);
        close(p[1]);
        errno = saved;
        return r;
    }
    if (!strcmp(n, "personality_query")) return syscall(SYS_personality, 0xffffffffUL);
    if (!strcmp(n, "personality_linux")) return syscall(SYS_personality, PER_LINUX);
    if (!strcmp(n, "personality_32")) {
        long r = syscall(SYS_personality, PER_LINUX32);
        int saved = errno;
        if (r >= 0) syscall(SYS_personality, PER_LINUX);
        errno = saved;
        return r;
    }
    if (!strcmp(n, "chroot")) return syscall(SYS_chroot, "/nonexistent-clawfs-probe");
    if (!strcmp(n, "x32_getpid")) return syscall(0x40000000 | SYS_getpid);
    if (!strcmp(n, "getpid")) return syscall(SYS_getpid) > 0 ? 0 : -1;
    fprintf(stderr, "probe: unknown check %s\n", n);
    _exit(2);
}

static void report(const char *name, long r) {
    printf("%s %ld %d\n", name, r < 0 ? -1L : r > 0 ? 1L : 0L, r < 0 ? errno : 0);
    fflush(stdout);
}

int main(int argc, char **argv) {
    int nofork = argc > 1 && !strcmp(argv[1], "--nofork");
    for (int i = 1 + nofork; i < argc; i++) {
        if (nofork) {
            errno = 0;
            long r = run(argv[i]);
            report(argv[i], r);
            continue;
        }
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
            perror("probe: fork");
            return 1;
        }
        if (pid == 0) {
            errno = 0;
            long r = run(argv[i]);
            report(argv[i], r);
            _exit(0);
        }
        int status = 0;
        if (waitpid(pid, &status, 0) < 0) {
            perror("probe: waitpid");
            return 1;
        }
        if (WIFSIGNALED(status)) {
            printf("%s signal %d\n", argv[i], WTERMSIG(status));
            fflush(stdout);
        }
    }
    return 0;
}
