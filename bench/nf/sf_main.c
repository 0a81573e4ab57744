/* sf_main.c - the SF benchmark binary of a generated stack: the stack's own
 * capture driver (rg_main, every option of `BINARY --help`, --bench
 * included) with the SF network function (rg_nf_sf.h) attached to every
 * stack context, after the observer the driver attaches (--nf count by
 * default).  Built by `make -C bench sf STACK=S STACK_DIR=DIR` from the
 * generated DIR/S_gen.c and DIR/S_handlers.c with the compiler flags of
 * `rubikgen build`, into DIR/S-sf.
 *
 *   S-sf CAPTURE [--patterns FILE] [driver options]
 *
 * How it attaches without changing the driver: rg_main gets a copy of the
 * stack descriptor whose ctx_new creates a fresh SF NF and hands the real
 * ctx_new an observer that calls the driver's observer, then the NF's; its
 * ctx_free (after the driver's flush, so every stream has closed) records
 * what the NF counted.  The driver creates one context per --bench pass, so
 * every pass starts with new streams, and the per-packet path is the
 * stack's own.
 *
 * The SF counts go into the driver's output line: rg_main's stdout is
 * collected (in a memory file) and, when its last line is a JSON object (the
 * --bench line, or --summary json), the fields of sf_counts_json (sf_hs.h)
 * and "sf_noflow_calls" are added to that object; otherwise (text summary) they
 * follow as "sf_* value" lines.  The driver has no hook for an external
 * NF's output. */
#define _GNU_SOURCE /* memfd_create */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rg/rg_api.h"
#include "rg_nf_sf.h"

#ifndef RG_STACK_DESC
#error "compile with -DRG_STACK_DESC=<stack>_desc"
#endif
#ifndef SF_PATTERNS_DEFAULT
#define SF_PATTERNS_DEFAULT "bench/sf_patterns.txt"
#endif
extern const rg_stack_desc RG_STACK_DESC;

/* One stack context and its NF (the driver has one context at a time). */
typedef struct sf_pass {
    rg_obs chain;
    const rg_obs *inner; /* the driver's observer, or NULL */
    rg_nf_sf *nf;
    void *ctx;
} sf_pass;

static struct {
    sf_db db;
    sf_pass *live;
    uint64_t passes, noflow_calls;
    sf_counts first, last;
    int consistent;
} g;

static void chain_call(void *self, const rg_call *c)
{
    const sf_pass *p = self;
    if (p->inner->on_call) p->inner->on_call(p->inner->self, c);
    const rg_obs *o = rg_nf_sf_obs(p->nf);
    o->on_call(o->self, c);
}

static void chain_open(void *self, const rg_flow_info *f, uint64_t ts_ns)
{
    const sf_pass *p = self;
    p->inner->on_open(p->inner->self, f, ts_ns); /* set only when the driver's is */
}

static void chain_packet(void *self, const rg_flow_info *f, int dir, uint32_t len, uint64_t ts_ns)
{
    const sf_pass *p = self;
    p->inner->on_packet(p->inner->self, f, dir, len, ts_ns); /* likewise */
}

static void chain_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns)
{
    const sf_pass *p = self;
    if (p->inner->on_close) p->inner->on_close(p->inner->self, f, reason, complete, ts_ns);
    const rg_obs *o = rg_nf_sf_obs(p->nf);
    o->on_close(o->self, f, reason, complete, ts_ns);
}

static void *sf_ctx_new(const rg_ctx_cfg *cfg)
{
    char err[256];
    if (g.live) {
        fprintf(stderr, "sf: a second stack context at once is not supported\n");
        return NULL;
    }
    sf_pass *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->nf = rg_nf_sf_new(&RG_STACK_DESC, &g.db, err, sizeof err);
    if (!p->nf) {
        fprintf(stderr, "sf: %s\n", err);
        free(p);
        return NULL;
    }
    rg_ctx_cfg c = *cfg;
    p->inner = cfg->obs;
    if (p->inner) {
        p->chain.self = p;
        p->chain.on_call = chain_call;
        p->chain.on_open = p->inner->on_open ? chain_open : NULL;
        p->chain.on_packet = p->inner->on_packet ? chain_packet : NULL;
        p->chain.on_close = chain_close;
        c.obs = &p->chain;
    } else {
        c.obs = rg_nf_sf_obs(p->nf);
    }
    p->ctx = RG_STACK_DESC.ctx_new(&c);
    if (!p->ctx) {
        rg_nf_sf_free(p->nf);
        free(p);
        return NULL;
    }
    g.live = p;
    return p->ctx;
}

static void sf_ctx_free(void *ctx)
{
    sf_pass *p = g.live;
    RG_STACK_DESC.ctx_free(ctx);
    if (!p || p->ctx != ctx) return;
    rg_nf_sf_end(p->nf);
    const sf_counts *c = rg_nf_sf_counts(p->nf);
    if (g.passes == 0)
        sf_counts_copy(&g.first, c);
    else if (!sf_counts_equal(&g.first, c))
        g.consistent = 0;
    sf_counts_copy(&g.last, c);
    g.noflow_calls = rg_nf_sf_noflow_calls(p->nf);
    g.passes++;
    rg_nf_sf_free(p->nf);
    free(p);
    g.live = NULL;
}

/* Everything written to fd since offset 0, NUL-terminated; NULL on error. */
static char *slurp(int fd, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf || lseek(fd, 0, SEEK_SET) < 0) {
        free(buf);
        return NULL;
    }
    for (;;) {
        if (n + 1 >= cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                return NULL;
            }
            buf = b;
        }
        ssize_t r = read(fd, buf + n, cap - n - 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static void sf_fields_json(FILE *out, const char *patterns)
{
    sf_counts_json(out, &g.last, g.consistent, patterns);
    fprintf(out, ",\"sf_noflow_calls\":%" PRIu64, g.noflow_calls);
}

/* The driver's output with the SF counts added (see the top of the file). */
static void emit(const char *text, size_t n, const char *patterns)
{
    while (n && (text[n - 1] == '\n' || text[n - 1] == ' '))
        n--;
    const char *last = text + n;
    while (last > text && last[-1] != '\n')
        last--;
    if (g.passes && n && *last == '{' && text[n - 1] == '}') {
        fwrite(text, 1, n - 1, stdout);
        sf_fields_json(stdout, patterns);
        fputs("}\n", stdout);
        return;
    }
    if (n) {
        fwrite(text, 1, n, stdout);
        fputc('\n', stdout);
    }
    if (!g.passes) return;
    printf("sf_matches     %" PRIu64 "  (%u of %u patterns matched, %s)\n"
           "sf_streams     %" PRIu64 "\n"
           "sf_scanned     %" PRIu64 " bytes in %" PRIu64 " chunks\n",
           g.last.matches, sf_counts_patterns_hit(&g.last), g.last.n, patterns, g.last.streams,
           g.last.bytes, g.last.chunks);
}

int main(int argc, char **argv)
{
    const char *patterns = SF_PATTERNS_DEFAULT;
    int help = 0, k = 1;
    /* take --patterns out; every other argument is the driver's */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--patterns") && i + 1 < argc) {
            patterns = argv[++i];
        } else if (!strncmp(argv[i], "--patterns=", 11)) {
            patterns = argv[i] + 11;
        } else {
            if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) help = 1;
            argv[k++] = argv[i];
        }
    }
    argv[k] = NULL;
    argc = k;

    char err[512];
    if (!help && sf_db_load(&g.db, patterns, err, sizeof err)) {
        fprintf(stderr, "%s: --patterns: %s\n", argv[0], err);
        return 1;
    }
    unsigned n = help ? 0 : g.db.n;
    if (sf_counts_init(&g.first, n) || sf_counts_init(&g.last, n)) {
        fprintf(stderr, "%s: out of memory\n", argv[0]);
        return 1;
    }
    g.consistent = 1;
    rg_stack_desc stack = RG_STACK_DESC;
    stack.ctx_new = sf_ctx_new;
    stack.ctx_free = sf_ctx_free;

    /* rg_main's stdout into a memory file (memfd: no file name to draw, and
     * no clock read, which would shift run.py's callgrind dump parts) */
    fflush(stdout);
    int mem = memfd_create("sf-stdout", 0), saved = dup(STDOUT_FILENO);
    if (mem < 0 || saved < 0 || dup2(mem, STDOUT_FILENO) < 0) {
        fprintf(stderr, "%s: cannot collect the driver's output: %s\n", argv[0], strerror(errno));
        return 1;
    }
    int rc = rg_main(argc, argv, &stack);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    size_t len = 0;
    char *text = slurp(mem, &len);
    close(mem);
    if (!text) {
        fprintf(stderr, "%s: cannot read the driver's output back\n", argv[0]);
        return 1;
    }
    emit(text, len, patterns);
    if (help)
        printf("SF (signature matching, bench/nf/sf_main.c):\n"
               "  --patterns FILE  Hyperscan patterns, one per line (default %s)\n",
               SF_PATTERNS_DEFAULT);
    fflush(stdout);
    free(text);
    if (!g.consistent) fprintf(stderr, "%s: passes disagree on the SF counts\n", argv[0]);
    if (!rc && (!g.consistent || g.last.errors)) rc = 1;
    sf_counts_free(&g.first);
    sf_counts_free(&g.last);
    sf_db_free(&g.db);
    return rc;
}
