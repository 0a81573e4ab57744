/* rg_wmerge.c - --workers N: what the NFs did not write through the line outputs, gathered
 * at the end (see rg_nfchain.h, docs/nf.md "NFs on several workers").
 *
 * Line records (every stock NF's .jsonl, eve.json, and any NF's written with the host's
 * out_write) go to one shared file while the run goes on (rg_out.c): nothing of them is
 * left here.  What remains in OUT/.rg-worker-K at the end is each worker's own files:
 *
 * - NAME.json (one flat object: a summary such as streams.json, written by each worker's
 *   fini): numbers added up, other members from the first worker that has them not null;
 * - NAME.jsonl of an NF that writes its records itself (an NF compiled before the line
 *   outputs, or one that does not use them): the workers' lines in worker order, a flow's
 *   records (a top-level numeric "uid" or "flow") with "worker": K as a last member;
 * - any other file (streams' per-flow payload, streams/17-c2s.bin: its name is the flow's
 *   uid, unique in the run) moved into OUT; one written by several workers (such as
 *   streams/noflow.bin) is their concatenation in worker order.
 *
 * uids need no renumbering: they are unique in the run when written (rg_uid_global). */
#define _XOPEN_SOURCE 700 /* nftw */
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rg_nfchain.h"
#include "rg_out.h"
#include "rg_wmerge.h"

/* ---- small helpers ---- */

static int rm_one(const char *path, const struct stat *st, int type, struct FTW *ftw);

void rg_rmtree(const char *dir)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int rg_wdirs_add(rg_wdirs *d, const char *dir)
{
    int rc = RG_OK;
    if (d->mu) pthread_mutex_lock(d->mu);
    unsigned i = 0;
    while (i < d->n && strcmp(d->dir[i], dir))
        i++;
    if (i == d->n) {
        if (d->n == RG_WDIRS_MAX || !(d->dir[d->n] = strdup(dir)))
            rc = RG_ENOMEM;
        else
            d->n++;
    }
    if (d->mu) pthread_mutex_unlock(d->mu);
    return rc;
}

/* ---- text buffers ---- */

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static int bput(buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return RG_ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return RG_OK;
}

static int bnum(buf *b, uint64_t v)
{
    char t[24];
    int n = snprintf(t, sizeof t, "%" PRIu64, v);
    return bput(b, t, (size_t)n);
}

static const char *skip_string(const char *s, const char *end)
{
    for (s++; s < end && *s != '"'; s++)
        if (*s == '\\') s++;
    return s < end ? s + 1 : end;
}

/* ---- one merge ---- */

typedef struct part {
    char *rel;  /* the merged file's path relative to OUT (uids renumbered) */
    char *path; /* the worker's file */
    unsigned worker;
} part;

typedef struct merge {
    const char *prog;
    part *parts;
    size_t n, cap;
    unsigned cur; /* the worker being listed */
    size_t root_len;
    int failed;
} merge;

static merge *listing; /* nftw has no user pointer: the one being listed (one merge at a time) */

static int list_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    merge *m = listing;
    if (type != FTW_F) return 0;
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        part *p = realloc(m->parts, cap * sizeof *p);
        if (!p) return -1;
        m->parts = p;
        m->cap = cap;
    }
    const char *rel = path + m->root_len + 1;
    part *p = &m->parts[m->n];
    if (!(p->rel = strdup(rel))) return -1;
    p->path = strdup(path);
    p->worker = m->cur;
    if (!p->path) {
        free(p->rel);
        return -1;
    }
    m->n++;
    return 0;
}

static int part_cmp(const void *a, const void *b)
{
    const part *x = a, *y = b;
    int c = strcmp(x->rel, y->rel);
    return c ? c : x->worker < y->worker ? -1 : x->worker > y->worker;
}

static int ends_with(const char *s, const char *t)
{
    size_t n = strlen(s), k = strlen(t);
    return n >= k && !strcmp(s + n - k, t);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    buf b = {0};
    char tmp[65536];
    size_t k;
    while ((k = fread(tmp, 1, sizeof tmp, f)) > 0)
        if (bput(&b, tmp, k)) {
            free(b.p);
            fclose(f);
            return NULL;
        }
    fclose(f);
    if (!b.p && bput(&b, "", 0)) return NULL;
    *len = b.n;
    return b.p;
}

static int write_file(const char *path, const char *s, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return RG_EIO;
    int bad = fwrite(s, 1, n, f) != n;
    bad |= fclose(f) != 0;
    return bad ? RG_EIO : RG_OK;
}

/* NAME.jsonl from parts p[0..k): the lines in worker order, flow records tagged. */
static int merge_jsonl(const part *p, size_t k, const char *to)
{
    FILE *f = fopen(to, "wb");
    if (!f) return RG_EIO;
    int rc = RG_OK;
    for (size_t i = 0; i < k && !rc; i++) {
        size_t len;
        char *text = slurp(p[i].path, &len);
        if (!text) {
            rc = RG_EIO;
            break;
        }
        for (char *s = text, *end = text + len; s < end && !rc;) {
            char *nl = memchr(s, '\n', (size_t)(end - s));
            size_t ln = nl ? (size_t)(nl - s) : (size_t)(end - s), tl;
            char *t = rg_out_tag_line(s, ln, p[i].worker, &tl);
            if (!t || fwrite(t, 1, tl, f) != tl || fputc('\n', f) == EOF) rc = RG_EIO;
            free(t);
            s += ln + 1;
        }
        free(text);
    }
    if (fclose(f)) rc = RG_EIO;
    return rc;
}

/* A flat JSON object's members: key and raw value spans. */
typedef struct member {
    const char *k, *v;
    size_t kl, vl;
} member;

/* The members of the object in s; -1 when s is not one flat object. */
static int members(const char *s, size_t n, member *ms, int max)
{
    const char *p = s, *end = s + n;
    int k = 0;
    while (p < end && *p != '{')
        p++;
    if (p++ >= end) return -1;
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\n' || *p == ',' || *p == '\t'))
            p++;
        if (p < end && *p == '}') return k;
        if (p >= end || *p != '"' || k == max) return -1;
        const char *ke = skip_string(p, end);
        ms[k].k = p;
        ms[k].kl = (size_t)(ke - p);
        p = ke;
        while (p < end && (*p == ' ' || *p == ':'))
            p++;
        const char *v = p;
        if (p < end && *p == '"')
            p = skip_string(p, end);
        else
            while (p < end && *p != ',' && *p != '}' && *p != '{' && *p != '[')
                p++;
        if (p < end && (*p == '{' || *p == '[')) return -1; /* not flat */
        ms[k].v = v;
        ms[k].vl = (size_t)(p - v);
        while (ms[k].vl && (v[ms[k].vl - 1] == ' ' || v[ms[k].vl - 1] == '\n'))
            ms[k].vl--;
        k++;
    }
}

static int is_uint(const char *v, size_t n)
{
    if (!n) return 0;
    for (size_t i = 0; i < n; i++)
        if (v[i] < '0' || v[i] > '9') return 0;
    return 1;
}

/* NAME.json (a summary object) from parts p[0..k); not one flat object: concatenated. */
static int merge_json(merge *m, const part *p, size_t k, const char *to)
{
    enum { MAXM = 128 };
    char **texts = calloc(k, sizeof *texts);
    member(*ms)[MAXM] = calloc(k, sizeof *ms);
    int *nm = calloc(k, sizeof *nm);
    int rc = texts && ms && nm ? RG_OK : RG_ENOMEM, flat = 1;
    for (size_t i = 0; i < k && !rc; i++) {
        size_t len;
        if (!(texts[i] = slurp(p[i].path, &len)))
            rc = RG_EIO;
        else if ((nm[i] = members(texts[i], len, ms[i], MAXM)) < 0)
            flat = 0;
    }
    buf b = {0};
    for (int j = 0; !rc && flat && j < nm[0]; j++) {
        const member *a = &ms[0][j];
        uint64_t sum = 0;
        int nums = 1;
        const member *pick = NULL;
        for (size_t i = 0; i < k; i++)
            for (int q = 0; q < nm[i]; q++) {
                const member *x = &ms[i][q];
                if (x->kl != a->kl || memcmp(x->k, a->k, a->kl)) continue;
                if (is_uint(x->v, x->vl))
                    sum += strtoull(x->v, NULL, 10);
                else
                    nums = 0;
                if (!pick && !(x->vl == 4 && !memcmp(x->v, "null", 4))) pick = x;
            }
        if (!pick) pick = a;
        if (bput(&b, j ? "," : "{", 1) || bput(&b, a->k, a->kl) || bput(&b, ":", 1) ||
            (nums ? bnum(&b, sum) : bput(&b, pick->v, pick->vl)))
            rc = RG_ENOMEM;
    }
    if (!rc && flat && nm[0] >= 0) {
        if (bput(&b, nm[0] ? "}\n" : "{}\n", nm[0] ? 2 : 3)) rc = RG_ENOMEM;
        if (!rc) rc = write_file(to, b.p, b.n);
    }
    free(b.p);
    for (size_t i = 0; texts && i < k; i++)
        free(texts[i]);
    free(texts);
    free(ms);
    free(nm);
    (void)m;
    if (!rc && !flat) return RG_EINVAL; /* the caller concatenates */
    return rc;
}

static int concat(const part *p, size_t k, const char *to)
{
    if (k == 1) {
        if (!rename(p[0].path, to)) return RG_OK;
        if (errno != EXDEV) return RG_EIO;
    }
    FILE *f = fopen(to, "wb");
    if (!f) return RG_EIO;
    int rc = RG_OK;
    char tmp[65536];
    for (size_t i = 0; i < k && !rc; i++) {
        FILE *in = fopen(p[i].path, "rb");
        if (!in) {
            rc = RG_EIO;
            break;
        }
        size_t n;
        while ((n = fread(tmp, 1, sizeof tmp, in)) > 0)
            if (fwrite(tmp, 1, n, f) != n) rc = RG_EIO;
        fclose(in);
    }
    if (fclose(f)) rc = RG_EIO;
    return rc;
}

static int rm_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    remove(path);
    return 0;
}

static int merge_dir(merge *m, const char *out, unsigned nw)
{
    size_t olen = strlen(out);
    char *root = malloc(olen + sizeof RG_WORKER_DIR + 12);
    if (!root) return RG_ENOMEM;
    m->n = 0;
    for (unsigned k = 0; k < nw; k++) {
        sprintf(root, "%s/" RG_WORKER_DIR "%u", out, k);
        m->cur = k;
        m->root_len = strlen(root);
        listing = m;
        if (nftw(root, list_one, 16, FTW_PHYS) && errno != ENOENT) {
            fprintf(stderr, "%s: --workers: cannot list %s\n", m->prog, root);
            m->failed = 1;
        }
    }
    if (m->n) qsort(m->parts, m->n, sizeof *m->parts, part_cmp);
    for (size_t i = 0, j; i < m->n; i = j) {
        for (j = i + 1; j < m->n && !strcmp(m->parts[j].rel, m->parts[i].rel); j++) {
        }
        size_t k = j - i;
        const part *p = &m->parts[i];
        size_t tl = olen + strlen(p->rel) + 2;
        char *to = malloc(tl);
        if (!to) {
            m->failed = 1;
            continue;
        }
        snprintf(to, tl, "%s/%s", out, p->rel);
        char *slash = strrchr(to, '/'), why[512];
        *slash = 0;
        int rc = rg_mkdirs(to, why, sizeof why);
        *slash = '/';
        if (!rc) {
            if (ends_with(p->rel, ".jsonl"))
                rc = merge_jsonl(p, k, to);
            else if (ends_with(p->rel, ".json") && (rc = merge_json(m, p, k, to)) == RG_EINVAL)
                rc = concat(p, k, to);
            else if (!ends_with(p->rel, ".json"))
                rc = concat(p, k, to);
        }
        if (rc) {
            fprintf(stderr, "%s: --workers: cannot merge the workers' %s into %s\n", m->prog,
                    p->rel, to);
            m->failed = 1;
        }
        free(to);
    }
    for (size_t i = 0; i < m->n; i++) {
        free(m->parts[i].rel);
        free(m->parts[i].path);
    }
    for (unsigned k = 0; k < nw && !m->failed; k++) { /* kept after a failure: nothing lost */
        sprintf(root, "%s/" RG_WORKER_DIR "%u", out, k);
        nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    }
    free(root);
    return m->failed ? RG_EIO : RG_OK;
}

int rg_wmerge(const rg_wdirs *dirs, unsigned nw, const char *prog)
{
    merge m = {.prog = prog};
    int rc = RG_OK;
    for (unsigned i = 0; i < dirs->n; i++)
        if (merge_dir(&m, dirs->dir[i], nw)) rc = RG_EIO;
    free(m.parts);
    return rc;
}
