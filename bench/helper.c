/*
 * bench/helper.c — tiny workload driver for bench/run.sh.
 *
 * One process does a whole workload, so process start-up cost does not
 * dominate the measurement. Compiled at run time by run.sh with `cc -O2`.
 *
 *   helper create  DIR N SIZE        create+write+close N files of SIZE bytes (f000000 …)
 *   helper stat    DIR N             lstat the N files made by `create`
 *   helper readdir DIR EXPECTED      list DIR (getdents via readdir(3)); fail unless EXPECTED entries
 *   helper tree    DIR NDIRS NFILES  write a source-like tree: NDIRS dirs in two levels, NFILES files
 *   helper randread FILE SECONDS BS [direct]  random BS-sized preads for SECONDS; prints IOPS
 *   helper statmiss DIR N            stat N names that do not exist; prints µs per call
 *   helper statmissat DIR N          the same, each one name beneath an open DIR (fstatat): what
 *                                    a FUSE daemon's own lookup in its backing store costs
 *   helper openclose FILE N          open(O_RDONLY)+close FILE N times; prints µs per pair
 *
 * Exit status is non-zero on any error, with a message on stderr.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what, const char *path)
{
    fprintf(stderr, "helper: %s %s: %s\n", what, path ? path : "", strerror(errno));
    exit(1);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

static int do_create(const char *dir, long n, long size)
{
    char *buf = malloc((size_t)size);
    char path[4096];
    if (!buf)
        die("malloc", NULL);
    for (long i = 0; i < size; i++)
        buf[i] = (char)('a' + i % 26);
    for (long i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/f%06ld", dir, i);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
            die("open", path);
        if (write_all(fd, buf, (size_t)size) < 0)
            die("write", path);
        if (close(fd) < 0)
            die("close", path);
    }
    free(buf);
    return 0;
}

static int do_stat(const char *dir, long n)
{
    char path[4096];
    struct stat st;
    for (long i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/f%06ld", dir, i);
        if (lstat(path, &st) < 0)
            die("lstat", path);
    }
    return 0;
}

static int do_readdir(const char *dir, long expected)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    long count = 0;
    if (!d)
        die("opendir", dir);
    errno = 0;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            count++;
        errno = 0;
    }
    if (errno)
        die("readdir", dir);
    closedir(d);
    if (expected >= 0 && count != expected) {
        fprintf(stderr, "helper: readdir %s: %ld entries, expected %ld\n", dir, count, expected);
        return 1;
    }
    return 0;
}

/* Source-like tree: d00/d00 … with NFILES files of ~1–3 KiB spread evenly.
 * Every 97th file contains the word CLAWFS_NEEDLE (so `grep -r` has hits). */
static int do_tree(const char *root, long ndirs, long nfiles)
{
    char path[4096], line[256];
    char *buf = malloc(8192);
    long top = 1;
    if (!buf)
        die("malloc", NULL);
    while (top * top < ndirs)
        top++;
    if (mkdir(root, 0755) < 0 && errno != EEXIST)
        die("mkdir", root);
    for (long d = 0; d < ndirs; d++) {
        snprintf(path, sizeof path, "%s/d%03ld", root, d / top);
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
            die("mkdir", path);
        snprintf(path, sizeof path, "%s/d%03ld/s%03ld", root, d / top, d % top);
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
            die("mkdir", path);
    }
    for (long i = 0; i < nfiles; i++) {
        long d = i % ndirs;
        size_t len = 0;
        int lines = 20 + (int)(i % 60);
        snprintf(path, sizeof path, "%s/d%03ld/s%03ld/file%05ld.c", root, d / top, d % top, i);
        for (int l = 0; l < lines; l++) {
            int m = snprintf(line, sizeof line, "static int f%ld_%d(int x) { return x * %d + %ld; } /* %s */\n",
                             i, l, l, i, (i % 97 == 0 && l == 7) ? "CLAWFS_NEEDLE" : "filler text");
            memcpy(buf + len, line, (size_t)m);
            len += (size_t)m;
        }
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
            die("open", path);
        if (write_all(fd, buf, len) < 0)
            die("write", path);
        if (close(fd) < 0)
            die("close", path);
    }
    free(buf);
    return 0;
}

/* Fallback when fio is missing: one thread, pread, uniform random aligned offsets. */
static int do_randread(const char *file, double seconds, long bs, int direct)
{
    int fd = open(file, O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
    struct stat st;
    void *buf;
    long ops = 0;
    if (fd < 0)
        die("open", file);
    if (fstat(fd, &st) < 0)
        die("fstat", file);
    if (posix_memalign(&buf, 4096, (size_t)bs))
        die("posix_memalign", NULL);
    long blocks = st.st_size / bs;
    if (blocks <= 0) {
        fprintf(stderr, "helper: %s is smaller than one block\n", file);
        return 1;
    }
    unsigned long long x = 88172645463325252ULL;
    double start = now(), end = start + seconds, t = start;
    while (t < end) {
        for (int k = 0; k < 256; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            off_t off = (off_t)(x % (unsigned long long)blocks) * bs;
            if (pread(fd, buf, (size_t)bs, off) != bs)
                die("pread", file);
            ops++;
        }
        t = now();
    }
    printf("%.0f\n", ops / (t - start));
    close(fd);
    free(buf);
    return 0;
}

/* Per-call latency probes (bench/floor.sh): one system call that costs exactly one FUSE
 * round trip on a FUSE mount (a stat of a missing, uncached name), and the open+close pair. */
static int do_statmiss(const char *dir, long n)
{
    char path[4096];
    struct stat st;
    double t0 = now();
    for (long i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/missing-%d-%ld", dir, (int)getpid(), i);
        if (lstat(path, &st) == 0 || errno != ENOENT)
            die("lstat (expected ENOENT)", path);
    }
    printf("%.2f\n", (now() - t0) * 1e6 / n);
    return 0;
}

static int do_statmissat(const char *dir, long n)
{
    char name[64];
    struct stat st;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        die("open", dir);
    double t0 = now();
    for (long i = 0; i < n; i++) {
        snprintf(name, sizeof name, "missing-at-%d-%ld", (int)getpid(), i);
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT)
            die("fstatat (expected ENOENT)", name);
    }
    printf("%.2f\n", (now() - t0) * 1e6 / n);
    close(dfd);
    return 0;
}

static int do_openclose(const char *file, long n)
{
    double t0 = now();
    for (long i = 0; i < n; i++) {
        int fd = open(file, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            die("open", file);
        close(fd);
    }
    printf("%.2f\n", (now() - t0) * 1e6 / n);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && !strcmp(argv[1], "create"))
        return do_create(argv[2], atol(argv[3]), atol(argv[4]));
    if (argc >= 4 && !strcmp(argv[1], "stat"))
        return do_stat(argv[2], atol(argv[3]));
    if (argc >= 4 && !strcmp(argv[1], "readdir"))
        return do_readdir(argv[2], atol(argv[3]));
    if (argc >= 5 && !strcmp(argv[1], "tree"))
        return do_tree(argv[2], atol(argv[3]), atol(argv[4]));
    if (argc >= 5 && !strcmp(argv[1], "randread"))
        return do_randread(argv[2], atof(argv[3]), atol(argv[4]), argc >= 6 && !strcmp(argv[5], "direct"));
    if (argc >= 4 && !strcmp(argv[1], "statmiss"))
        return do_statmiss(argv[2], atol(argv[3]));
    if (argc >= 4 && !strcmp(argv[1], "statmissat"))
        return do_statmissat(argv[2], atol(argv[3]));
    if (argc >= 4 && !strcmp(argv[1], "openclose"))
        return do_openclose(argv[2], atol(argv[3]));
    fprintf(stderr, "usage: helper create|stat|readdir|tree|randread|statmiss|statmissat|openclose ...\n");
    return 2;
}
