/* bench/tools_helper.c — per-call latency of ClawFS agent tools, for bench/tools.sh.
 *
 *   tools_helper call MNT TOOL REQ_FILE [REQ_FILE2] RUNS WARMUP
 *       RUNS calls of tools/call/TOOL, each: open O_RDWR, write the request, read the response
 *       to EOF, close. With REQ_FILE2 the two requests alternate (apply_patch forth and back).
 *       Every response must contain "ok":true.
 *   tools_helper cat FILE RUNS WARMUP
 *       RUNS times: open, read to EOF (64 KiB reads), close — what `cat FILE` does, without
 *       the process start.
 *   tools_helper spawn RUNS WARMUP PROGRAM ARGS...
 *       RUNS times: posix_spawn PROGRAM with stdout to /dev/null and wait for it (`cat FILE`
 *       as a shell runs it).
 *
 * Prints "p50_us p99_us mean_us bytes" (bytes: of the last response or file).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <spawn.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static char *slurp(const char *path, size_t *len) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) { perror(path); exit(1); }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n == cap) buf = realloc(buf, cap *= 2);
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) { perror(path); exit(1); }
        if (r == 0) break;
        n += r;
    }
    close(fd);
    *len = n;
    return buf;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(double *t, int runs, size_t bytes) {
    double sum = 0;
    for (int i = 0; i < runs; i++) sum += t[i];
    qsort(t, runs, sizeof *t, cmp);
    int p99 = (int)(0.99 * runs + 0.999999) - 1;
    if (p99 < 0) p99 = 0;
    printf("%.1f %.1f %.1f %zu\n", t[(runs - 1) / 2], t[p99], sum / runs, bytes);
}

static char rbuf[1 << 16];
static char *resp;
static size_t resp_cap;

/* One call; returns the response length (response in resp). */
static size_t one_call(const char *path, const char *req, size_t len) {
    int fd = open(path, O_RDWR);
    if (fd < 0) { perror(path); exit(1); }
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, req + off, len - off);
        if (w < 0) { perror("write request"); exit(1); }
        off += w;
    }
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, rbuf, sizeof rbuf);
        if (r < 0) { perror("read response"); exit(1); }
        if (r == 0) break;
        if (n + r + 1 > resp_cap) resp = realloc(resp, resp_cap = (n + r + 1) * 2);
        memcpy(resp + n, rbuf, r);
        n += r;
    }
    resp[n] = 0;
    close(fd);
    if (!strstr(resp, "\"ok\":true")) {
        fprintf(stderr, "tool call failed: %.400s\n", resp);
        exit(1);
    }
    return n;
}

static int do_call(int argc, char **argv) {
    const char *mnt = argv[2], *tool = argv[3];
    int two = argc == 8;
    int runs = atoi(argv[two ? 6 : 5]), warmup = atoi(argv[two ? 7 : 6]);
    size_t len[2];
    char *req[2];
    req[0] = slurp(argv[4], &len[0]);
    if (two) req[1] = slurp(argv[5], &len[1]);
    else { req[1] = req[0]; len[1] = len[0]; }
    char path[4096];
    snprintf(path, sizeof path, "%s/tools/call/%s", mnt, tool);
    double *t = calloc(runs, sizeof *t);
    size_t bytes = 0;
    for (int i = 0; i < warmup + runs; i++) {
        int k = i & 1;
        double t0 = now_us();
        bytes = one_call(path, req[k], len[k]);
        double t1 = now_us();
        if (i >= warmup) t[i - warmup] = t1 - t0;
    }
    report(t, runs, bytes);
    return 0;
}

static int do_cat(char **argv) {
    const char *file = argv[2];
    int runs = atoi(argv[3]), warmup = atoi(argv[4]);
    double *t = calloc(runs, sizeof *t);
    size_t bytes = 0;
    for (int i = 0; i < warmup + runs; i++) {
        double t0 = now_us();
        int fd = open(file, O_RDONLY);
        if (fd < 0) { perror(file); return 1; }
        size_t n = 0;
        for (;;) {
            ssize_t r = read(fd, rbuf, sizeof rbuf);
            if (r < 0) { perror(file); return 1; }
            if (r == 0) break;
            n += r;
        }
        close(fd);
        double t1 = now_us();
        bytes = n;
        if (i >= warmup) t[i - warmup] = t1 - t0;
    }
    report(t, runs, bytes);
    return 0;
}

extern char **environ;

static int do_spawn(int argc, char **argv) {
    int runs = atoi(argv[2]), warmup = atoi(argv[3]);
    char **child = argv + 4;
    (void)argc;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    double *t = calloc(runs, sizeof *t);
    for (int i = 0; i < warmup + runs; i++) {
        double t0 = now_us();
        pid_t pid;
        int rc = posix_spawnp(&pid, child[0], &fa, NULL, child, environ);
        if (rc) { fprintf(stderr, "spawn %s: %s\n", child[0], strerror(rc)); return 1; }
        int status;
        if (waitpid(pid, &status, 0) < 0) { perror("waitpid"); return 1; }
        double t1 = now_us();
        if (!WIFEXITED(status) || WEXITSTATUS(status)) {
            fprintf(stderr, "%s failed (status %d)\n", child[0], status);
            return 1;
        }
        if (i >= warmup) t[i - warmup] = t1 - t0;
    }
    report(t, runs, 0);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 5 && !strcmp(argv[1], "spawn")) return do_spawn(argc, argv);
    if ((argc == 7 || argc == 8) && !strcmp(argv[1], "call")) return do_call(argc, argv);
    if (argc == 5 && !strcmp(argv[1], "cat")) return do_cat(argv);
    fprintf(stderr,
            "usage: tools_helper call MNT TOOL REQ_FILE [REQ_FILE2] RUNS WARMUP\n"
            "       tools_helper cat FILE RUNS WARMUP\n"
            "       tools_helper spawn RUNS WARMUP PROGRAM ARGS...\n");
    return 2;
}
