/* rg_nf_signatures.c - the "signatures" NF: Hyperscan rules matched on every reassembled flow
 * direction, one JSON line per (flow, direction, rule) that matches.
 *
 * Rules file: the NF's parameter "rules" (a chain file's params, `rubikgen ctl attach
 * signatures rules=FILE`), else the environment variable RG_SIGNATURES (for --nf signatures,
 * whose options are flags); one rule per line, `NAME PATTERN` (NAME: letters, digits, '_',
 * '-', '.'; then spaces or tabs; PATTERN: a Hyperscan/PCRE regular expression, to the end of
 * the line),
 * '#' comments and blank lines ignored.  Patterns are compiled in streaming mode with
 * HS_FLAG_DOTALL | HS_FLAG_MULTILINE | HS_FLAG_SINGLEMATCH: '.' matches '\n', '^'/'$' match
 * at line starts and ends, and each rule is reported once per flow direction.
 *
 * Data: the byte argument "data" of handler calls on layers with reassembly (has_seq: TCP's
 * in-order bytes, whatever the handler is called), one Hyperscan stream per instance and
 * direction, so a match does not depend on how the bytes were cut into segments.  Calls made
 * when an instance ends (gap-recovery drains) are scanned too.  The stream is closed when the
 * instance closes (matches needing the end of the data, '$', are reported then).
 *
 * Output OUT/signatures.jsonl: {"rule":NAME,"id":LINE,"layer":L,"uid":U,"dir":"c2s"|"s2c",
 * "src","dst","sport","dport" (the sender's side first),"offset":END (bytes of the direction
 * up to the end of the match),"pkt":N}.
 *
 * Hyperscan is optional: this file is compiled with it when <hs.h> or <hs/hs.h> is found,
 * and the library is loaded with dlopen when the NF is created (so binaries link nothing
 * more); without it, --nf signatures fails with a message saying so. */
#include "rg_nf_int.h"

#include <stdlib.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<hs.h>)
#define RG_HAVE_HS 1
#include <hs.h>
#elif __has_include(<hs/hs.h>) /* Debian's libhyperscan-dev */
#define RG_HAVE_HS 1
#include <hs/hs.h>
#endif
#endif

rg_nf *rg_nf_signatures_new(const rg_stack_desc *stack, const char *outdir, char *err,
                            size_t errlen)
{
    return rg_nf_signatures_open(stack, outdir, NULL, err, errlen);
}

#ifndef RG_HAVE_HS
rg_nf *rg_nf_signatures_open(const rg_stack_desc *stack, const char *outdir, const char *rules,
                             char *err, size_t errlen)
{
    (void)stack;
    (void)outdir;
    (void)rules;
    snprintf(err, errlen, "signatures: built without Hyperscan (install libhyperscan-dev)");
    return NULL;
}
#else
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>

/* the Hyperscan functions this NF uses, from dlopen */
typedef struct hs_api {
    void *lib;
    hs_error_t (*compile_multi)(const char *const *, const unsigned *, const unsigned *, unsigned,
                                unsigned, const hs_platform_info_t *, hs_database_t **,
                                hs_compile_error_t **);
    hs_error_t (*free_compile_error)(hs_compile_error_t *);
    hs_error_t (*alloc_scratch)(const hs_database_t *, hs_scratch_t **);
    hs_error_t (*free_scratch)(hs_scratch_t *);
    hs_error_t (*free_database)(hs_database_t *);
    hs_error_t (*open_stream)(const hs_database_t *, unsigned, hs_stream_t **);
    hs_error_t (*scan_stream)(hs_stream_t *, const char *, unsigned, unsigned, hs_scratch_t *,
                              match_event_handler, void *);
    hs_error_t (*close_stream)(hs_stream_t *, hs_scratch_t *, match_event_handler, void *);
} hs_api;

typedef struct sig_flow {
    hs_stream_t *s[2];
    uint64_t uid;
    uint16_t layer;
    rg_nf_endpoints ep;
} sig_flow;

typedef struct nf_sig {
    rg_nf base;
    FILE *out;
    hs_api hs;
    hs_database_t *db;
    hs_scratch_t *scratch;
    unsigned n;
    char **names;
    unsigned *lines;
    rg_nf_map flows; /* uid -> sig_flow */
    int *data_arg;   /* per handler: index of a byte argument "data" on a has_seq layer, -1 */
    uint64_t pkt_no, errors;
} nf_sig;

/* what a match callback needs */
typedef struct sig_ctx {
    nf_sig *nf;
    sig_flow *f;
    int dir;
} sig_ctx;

static int load_api(hs_api *a, char *err, size_t errlen)
{
    const char *names[] = {"libhs.so.5", "libhs.so"};
    for (size_t i = 0; i < 2 && !a->lib; i++)
        a->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!a->lib) {
        snprintf(err, errlen, "signatures: Hyperscan library not found (libhs.so.5): %s",
                 dlerror());
        return -1;
    }
#define SYM(field, sym)                                                                            \
    do {                                                                                           \
        *(void **)(&a->field) = dlsym(a->lib, sym);                                                \
        if (!a->field) {                                                                           \
            snprintf(err, errlen, "signatures: %s missing from the Hyperscan library", sym);       \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)
    SYM(compile_multi, "hs_compile_multi");
    SYM(free_compile_error, "hs_free_compile_error");
    SYM(alloc_scratch, "hs_alloc_scratch");
    SYM(free_scratch, "hs_free_scratch");
    SYM(free_database, "hs_free_database");
    SYM(open_stream, "hs_open_stream");
    SYM(scan_stream, "hs_scan_stream");
    SYM(close_stream, "hs_close_stream");
#undef SYM
    return 0;
}

/* Room for one more rule; 0 or -1 (out of memory). */
static int grow(nf_sig *nf, char ***expr, unsigned **flags, unsigned **ids, unsigned *cap)
{
    if (nf->n < *cap) return 0;
    unsigned c = *cap ? 2 * *cap : 16;
    char **e2 = realloc(*expr, c * sizeof *e2);
    if (e2) *expr = e2;
    char **n2 = realloc(nf->names, c * sizeof *n2);
    if (n2) nf->names = n2;
    unsigned *f2 = realloc(*flags, c * sizeof *f2);
    if (f2) *flags = f2;
    unsigned *i2 = realloc(*ids, c * sizeof *i2);
    if (i2) *ids = i2;
    unsigned *l2 = realloc(nf->lines, c * sizeof *l2);
    if (l2) nf->lines = l2;
    if (!e2 || !n2 || !f2 || !i2 || !l2) return -1;
    *cap = c;
    return 0;
}

/* Parse the rules file and compile it; 0 or -1 with a message naming file:line. */
static int load_rules(nf_sig *nf, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "signatures: %s: %s", path, strerror(errno));
        return -1;
    }
    char **expr = NULL, *line = NULL;
    unsigned *flags = NULL, *ids = NULL, cap = 0, lineno = 0;
    size_t lcap = 0;
    ssize_t len;
    int rc = 0;
    while (!rc && (len = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = 0;
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p || *p == '#') continue;
        char *name = p;
        while (*p && (isalnum((unsigned char)*p) || *p == '_' || *p == '-' || *p == '.'))
            p++;
        if (p == name || (*p != ' ' && *p != '\t')) {
            snprintf(err, errlen, "signatures: %s:%u: expected 'NAME PATTERN'", path, lineno);
            rc = -1;
            break;
        }
        *p++ = 0;
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p) {
            snprintf(err, errlen, "signatures: %s:%u: rule '%s' has no pattern", path, lineno,
                     name);
            rc = -1;
            break;
        }
        if (grow(nf, &expr, &flags, &ids, &cap)) {
            snprintf(err, errlen, "out of memory");
            rc = -1;
            break;
        }
        expr[nf->n] = strdup(p);
        nf->names[nf->n] = strdup(name);
        if (!expr[nf->n] || !nf->names[nf->n]) {
            free(expr[nf->n]);
            free(nf->names[nf->n]);
            snprintf(err, errlen, "out of memory");
            rc = -1;
            break;
        }
        flags[nf->n] = HS_FLAG_DOTALL | HS_FLAG_MULTILINE | HS_FLAG_SINGLEMATCH;
        ids[nf->n] = nf->n;
        nf->lines[nf->n] = lineno;
        nf->n++;
    }
    free(line);
    fclose(f);
    if (!rc && !nf->n) {
        snprintf(err, errlen, "signatures: %s: no rules", path);
        rc = -1;
    }
    if (!rc) {
        hs_compile_error_t *ce = NULL;
        if (nf->hs.compile_multi((const char *const *)expr, flags, ids, nf->n, HS_MODE_STREAM, NULL,
                                 &nf->db, &ce) != HS_SUCCESS) {
            if (ce && ce->expression >= 0)
                snprintf(err, errlen, "signatures: %s:%u: rule '%s': %s", path,
                         nf->lines[ce->expression], nf->names[ce->expression], ce->message);
            else
                snprintf(err, errlen, "signatures: %s: %s", path, ce ? ce->message : "failed");
            if (ce) nf->hs.free_compile_error(ce);
            nf->db = NULL;
            rc = -1;
        } else if (nf->hs.alloc_scratch(nf->db, &nf->scratch) != HS_SUCCESS) {
            snprintf(err, errlen, "signatures: hs_alloc_scratch failed");
            rc = -1;
        }
    }
    for (unsigned i = 0; i < nf->n; i++)
        free(expr[i]);
    free(expr);
    free(flags);
    free(ids);
    return rc;
}

static int on_match(unsigned id, unsigned long long from, unsigned long long to, unsigned hsflags,
                    void *vctx)
{
    (void)from;
    (void)hsflags;
    sig_ctx *x = vctx;
    nf_sig *nf = x->nf;
    if (id >= nf->n) return 0;
    rg_nf_endpoints ep = x->f->ep;
    if (x->dir) rg_nf_endpoints_reverse(&x->f->ep, &ep);
    const rg_layer_desc *l = rg_nf_layer(nf->base.stack, x->f->layer);
    fputs("{\"rule\":", nf->out);
    rg_json_string(nf->out, nf->names[id]);
    fprintf(nf->out, ",\"id\":%u,\"layer\":", nf->lines[id]);
    rg_json_string(nf->out, l ? l->name : NULL);
    fprintf(nf->out, ",\"uid\":%" PRIu64 ",\"dir\":\"%s\"", x->f->uid, x->dir ? "s2c" : "c2s");
    rg_nf_json_endpoints(nf->out, &ep);
    fprintf(nf->out, ",\"offset\":%llu,\"pkt\":%" PRIu64 "}\n", to, nf->pkt_no);
    return 0;
}

static sig_flow *flow_of(nf_sig *nf, const rg_flow_info *fi)
{
    int created;
    sig_flow *f =
        rg_nf_flow_of(&nf->base, &nf->flows, fi, sizeof *f, offsetof(sig_flow, ep), &created);
    if (f && created) {
        f->uid = fi->uid;
        f->layer = fi->layer;
    }
    return f;
}

static void on_call(void *self, const rg_call *c)
{
    nf_sig *nf = self;
    if (c->handler >= nf->base.stack->nhandlers || !c->flow) return;
    int a = nf->data_arg[c->handler];
    if (a < 0 || !c->args[a].bytes.len) return;
    sig_flow *f = flow_of(nf, c->flow);
    if (!f) return;
    int d = c->dir != 0;
    nf->pkt_no = c->pkt_no;
    if (!f->s[d] && nf->hs.open_stream(nf->db, 0, &f->s[d]) != HS_SUCCESS) {
        f->s[d] = NULL;
        nf->errors++;
        return;
    }
    sig_ctx x = {nf, f, d};
    const uint8_t *p = c->args[a].bytes.ptr;
    size_t len = c->args[a].bytes.len;
    while (len) { /* hs_scan_stream takes an unsigned length */
        unsigned part = len > UINT_MAX ? UINT_MAX : (unsigned)len;
        if (nf->hs.scan_stream(f->s[d], (const char *)p, part, 0, nf->scratch, on_match, &x) !=
            HS_SUCCESS)
            nf->errors++;
        p += part;
        len -= part;
    }
}

static void end_flow(nf_sig *nf, sig_flow *f)
{
    for (int d = 0; d < 2; d++) {
        if (!f->s[d]) continue;
        sig_ctx x = {nf, f, d};
        if (nf->hs.close_stream(f->s[d], nf->scratch, on_match, &x) != HS_SUCCESS) nf->errors++;
        f->s[d] = NULL;
    }
}

static void on_close(void *self, const rg_flow_info *fi, int reason, int complete, uint64_t ts)
{
    (void)reason;
    (void)complete;
    (void)ts;
    nf_sig *nf = self;
    sig_flow *f = rg_nf_map_del(&nf->flows, fi->uid);
    if (!f) return;
    end_flow(nf, f);
    free(f);
}

static void drain_one(void *self, void *v)
{
    end_flow(self, v);
    free(v);
}

/* free what the NF holds besides its output and flows */
static void free_rules(nf_sig *nf)
{
    if (nf->scratch) nf->hs.free_scratch(nf->scratch);
    if (nf->db) nf->hs.free_database(nf->db);
    for (unsigned i = 0; i < nf->n; i++)
        free(nf->names[i]);
    free(nf->names);
    free(nf->lines);
    free(nf->data_arg);
    /* the library stays loaded: a run has no later use for unloading it */
}

static int finish(rg_nf *base)
{
    nf_sig *nf = (nf_sig *)base;
    rg_nf_map_drain(&nf->flows, drain_one, nf);
    if (nf->errors) fprintf(stderr, "signatures: %" PRIu64 " Hyperscan errors\n", nf->errors);
    rg_nf_close_out(base, nf->out, "signatures.jsonl");
    free_rules(nf);
    return nf->errors ? RG_EIO : RG_OK;
}

rg_nf *rg_nf_signatures_open(const rg_stack_desc *stack, const char *outdir, const char *rules,
                             char *err, size_t errlen)
{
    if (!rules || !*rules) rules = getenv("RG_SIGNATURES");
    if (!rules || !*rules) {
        snprintf(err, errlen,
                 "signatures: no rules file (parameter rules, or the RG_SIGNATURES variable)");
        return NULL;
    }
    nf_sig *nf = calloc(1, sizeof *nf);
    if (!nf) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    nf->base.stack = stack;
    int ok = !load_api(&nf->hs, err, errlen) && !load_rules(nf, rules, err, errlen);
    if (ok) {
        nf->data_arg = malloc((stack->nhandlers + 1u) * sizeof *nf->data_arg);
        ok = nf->data_arg && !rg_nf_map_init(&nf->flows);
        if (!ok) snprintf(err, errlen, "out of memory");
    }
    if (ok) {
        for (unsigned h = 0; h < stack->nhandlers; h++) {
            const rg_handler_desc *d = &stack->handlers[h];
            const rg_layer_desc *l = rg_nf_layer(stack, d->layer);
            nf->data_arg[h] = -1;
            for (unsigned i = 0; l && l->has_seq && i < d->nargs; i++)
                if (d->arg_kinds[i] == RG_VAL_BYTES && !strcmp(d->arg_names[i], "data"))
                    nf->data_arg[h] = (int)i;
        }
        ok = !rg_mkdirs(outdir, err, errlen) &&
             (nf->out = rg_nf_open_out(outdir, "signatures.jsonl", err, errlen)) != NULL;
    }
    if (!ok) {
        free_rules(nf);
        rg_nf_map_free(&nf->flows);
        free(nf);
        return NULL;
    }
    nf->base.obs.on_call = on_call;
    nf->base.obs.on_close = on_close;
    nf->base.finish = finish;
    return &nf->base;
}
#endif
