/* peer.c - the common harness of the benchmark peers: see peer.h. */
#include "peer.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_S UINT64_C(1000000000)

void peer_count_set(peer_counts *c, const char *name, uint64_t value)
{
    for (unsigned i = 0; i < c->n; i++) {
        if (!strcmp(c->name[i], name)) {
            c->value[i] = value;
            return;
        }
    }
    if (c->n < PEER_MAX_COUNTERS) {
        c->name[c->n] = name;
        c->value[c->n] = value;
        c->n++;
    }
}

static uint64_t count_of(const peer_counts *c, const char *name)
{
    for (unsigned i = 0; i < c->n; i++)
        if (!strcmp(c->name[i], name)) return c->value[i];
    return 0;
}

static int same_counts(const peer_counts *a, const peer_counts *b)
{
    if (a->n != b->n) return 0;
    for (unsigned i = 0; i < a->n; i++)
        if (strcmp(a->name[i], b->name[i]) || a->value[i] != b->value[i]) return 0;
    return 1;
}

static uint64_t now_ns(clockid_t clk)
{
    struct timespec t;
    clock_gettime(clk, &t);
    return (uint64_t)t.tv_sec * NS_PER_S + (uint64_t)t.tv_nsec;
}

/* One pass: set-up, the timed loop, tear-down.  0 on success. */
typedef struct pass_result {
    uint64_t cpu_ns, wall_ns;
    peer_counts counts;
} pass_result;

static int run_pass(const peer_ops *ops, const rg_capture *cap, const peer_opts *o, pass_result *r)
{
    memset(r, 0, sizeof *r);
    if (ops->setup(cap, o)) return -1;
    uint64_t c0 = now_ns(CLOCK_THREAD_CPUTIME_ID), w0 = now_ns(CLOCK_MONOTONIC);
    ops->run(cap);
    uint64_t c1 = now_ns(CLOCK_THREAD_CPUTIME_ID), w1 = now_ns(CLOCK_MONOTONIC);
    r->cpu_ns = c1 - c0;
    r->wall_ns = w1 - w0;
    ops->teardown(&r->counts);
    return 0;
}

/* The pass in a child process; the result comes back through a pipe (the
 * counter names are static strings of the peer, valid in both processes). */
static int run_pass_forked(const peer_ops *ops, const rg_capture *cap, const peer_opts *o,
                           pass_result *r)
{
    int fd[2];
    if (pipe(fd)) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    if (pid == 0) {
        close(fd[0]);
        pass_result res;
        int rc = run_pass(ops, cap, o, &res);
        if (!rc && write(fd[1], &res, sizeof res) != (ssize_t)sizeof res) rc = -1;
        close(fd[1]);
        _exit(rc ? 1 : 0);
    }
    close(fd[1]);
    size_t got = 0;
    while (got < sizeof *r) {
        ssize_t n = read(fd[0], (char *)r + got, sizeof *r - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return got == sizeof *r && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static void usage(FILE *out, const char *prog, const char *name)
{
    fprintf(out,
            "usage: %s CAPTURE [--passes N] [--fork] [--cap N] [--patterns FILE]\n"
            "Benchmark peer %s: load CAPTURE into memory, process it N times (default 3),\n"
            "each pass from a fresh state, and print one JSON line (best pass).\n"
            "  --passes N   passes (the best one counts)\n"
            "  --fork       run every pass in a fresh child process\n"
            "  --cap N      table size (flows) instead of the peer's default\n"
            "  --burst N    frames per burst (parse_only, parse_hash; default 32)\n"
            "  --patterns FILE  pattern file (signature-matching peers only)\n",
            prog, name);
}

static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (*s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max) return -1;
    *out = v;
    return 0;
}

int peer_main(int argc, char **argv, const peer_ops *ops)
{
    const char *prog = argc > 0 ? argv[0] : ops->name;
    const char *capture = NULL;
    uint64_t passes = 3;
    int use_fork = 0;
    peer_opts o = {.burst = 32};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout, prog, ops->name);
            return 0;
        } else if (!strcmp(a, "--passes") && i + 1 < argc) {
            if (parse_u64(argv[++i], 1, 1000000, &passes)) {
                fprintf(stderr, "%s: invalid --passes '%s'\n", prog, argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--cap") && i + 1 < argc) {
            if (parse_u64(argv[++i], 1, UINT64_C(1) << 28, &o.cap)) {
                fprintf(stderr, "%s: invalid --cap '%s'\n", prog, argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--burst") && i + 1 < argc) {
            if (parse_u64(argv[++i], 1, 256, &o.burst)) {
                fprintf(stderr, "%s: invalid --burst '%s'\n", prog, argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--patterns") && i + 1 < argc && ops->patterns_default) {
            o.patterns = argv[++i];
        } else if (!strcmp(a, "--fork")) {
            use_fork = 1;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "%s: unknown option '%s'\n", prog, a);
            usage(stderr, prog, ops->name);
            return 2;
        } else if (!capture) {
            capture = a;
        } else {
            fprintf(stderr, "%s: expected one CAPTURE argument\n", prog);
            return 2;
        }
    }
    if (!capture) {
        usage(stderr, prog, ops->name);
        return 2;
    }
    if (use_fork && ops->extra_json) {
        fprintf(stderr, "%s: --fork is not supported by this peer\n", prog);
        return 2;
    }
    if (!o.patterns) o.patterns = ops->patterns_default;

    char err[512];
    rg_capture cap;
    if (rg_capture_load(capture, &cap, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return 1;
    }
    if (ops->prepare && ops->prepare(&cap, &o)) {
        rg_capture_free(&cap);
        return 1;
    }
    uint64_t best_cpu = UINT64_MAX, best_wall = UINT64_MAX;
    pass_result first, r;
    int consistent = 1;
    for (uint64_t pass = 0; pass < passes; pass++) {
        int rc = use_fork ? run_pass_forked(ops, &cap, &o, &r) : run_pass(ops, &cap, &o, &r);
        if (rc) {
            fprintf(stderr, "%s: pass %" PRIu64 " failed\n", prog, pass + 1);
            rg_capture_free(&cap);
            return 1;
        }
        if (r.cpu_ns < best_cpu) best_cpu = r.cpu_ns;
        if (r.wall_ns < best_wall) best_wall = r.wall_ns;
        if (pass == 0)
            first = r;
        else if (!same_counts(&first.counts, &r.counts))
            consistent = 0;
    }
    if (!consistent) fprintf(stderr, "%s: passes disagree on their counters\n", prog);

    double pkts = cap.count ? (double)cap.count : 1.0;
    printf("{\"peer\":\"%s\",\"pkts\":%zu,\"passes\":%" PRIu64
           ",\"cpu_ns_per_pkt\":%.2f,\"wall_ns_per_pkt\":%.2f,\"payload_bytes\":%" PRIu64
           ",\"flows_opened\":%" PRIu64 ",\"flows_closed\":%" PRIu64,
           ops->name, cap.count, passes, (double)best_cpu / pkts, (double)best_wall / pkts,
           count_of(&r.counts, "payload_bytes"), count_of(&r.counts, "flows_opened"),
           count_of(&r.counts, "flows_closed"));
    for (unsigned i = 0; i < r.counts.n; i++) {
        const char *n = r.counts.name[i];
        if (strcmp(n, "payload_bytes") && strcmp(n, "flows_opened") && strcmp(n, "flows_closed"))
            printf(",\"%s\":%" PRIu64, n, r.counts.value[i]);
    }
    if (ops->extra_json) ops->extra_json(stdout);
    printf(",\"wire_bytes\":%" PRIu64 ",\"mode\":\"%s\",\"consistent\":%s}\n", cap.bytes,
           use_fork ? "fork" : "in-process", consistent ? "true" : "false");
    fflush(stdout);
    rg_capture_free(&cap);
    return consistent ? 0 : 1;
}
