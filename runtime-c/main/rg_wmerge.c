/* rg_wmerge.c - --workers N: the workers' NF outputs merged into the files one context
 * writes (see rg_nfchain.h, docs/nf.md "NFs on several workers").
 *
 * Every worker's NFs write into OUT/.rg-worker-K.  At the end (every worker flushed, every
 * NF's fini done) each directory is merged into OUT:
 *
 * - flow uids: each context numbers its instances 1, 2, ... in creation order.  The workers
 *   record for each of theirs the input's frame that created it (rg_wuids); ranking all of
 *   them by (frame, worker's own order) gives every instance the uid one context reading the
 *   whole input gives it.  Top-level JSON members "uid" and "flow" of .jsonl records, the
 *   leading number of a file name ("17-c2s.bin") and such names in "file" members are
 *   renumbered.
 * - NAME.jsonl: the records of all workers, ordered by ("pkt" member, uid, the worker's own
 *   order; a missing member counts as 0; records with neither by their text): records of
 *   one flow stay in their order, and the order is the same whatever the number of workers.
 *   A flow's records (those with a uid) get the worker that processed it as a last member,
 *   "worker": K.
 * - NAME.json (one flat object: a summary): numbers added up, other members from the first
 *   worker that has them not null.
 * - any other file: moved; one written by several workers is their concatenation in worker
 *   order. */
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

int rg_wuids_note(rg_wuids *u, uint64_t uid_max, uint64_t key)
{
    while (u->n < uid_max) {
        if (u->n == u->cap) {
            size_t cap = u->cap ? u->cap * 2 : 1024;
            uint64_t *k = realloc(u->key, cap * sizeof *k);
            if (!k) return RG_ENOMEM;
            u->key = k;
            u->cap = cap;
        }
        u->key[u->n++] = key;
    }
    return RG_OK;
}

void rg_wuids_free(rg_wuids *u)
{
    free(u->key);
    free(u->g);
    memset(u, 0, sizeof *u);
}

/* The global uids: every worker's instances ranked by (key, worker) in a k-way merge (each
 * worker's keys do not decrease). */
static int rank_uids(rg_wuids *u, unsigned nw)
{
    size_t *at = calloc(nw, sizeof *at);
    if (!at) return RG_ENOMEM;
    for (unsigned k = 0; k < nw; k++)
        if (!(u[k].g = malloc((u[k].n ? u[k].n : 1) * sizeof *u[k].g))) {
            free(at);
            return RG_ENOMEM;
        }
    for (uint64_t next = 1;; next++) {
        int best = -1;
        for (unsigned k = 0; k < nw; k++)
            if (at[k] < u[k].n && (best < 0 || u[k].key[at[k]] < u[best].key[at[best]]))
                best = (int)k;
        if (best < 0) break;
        u[best].g[at[best]++] = next;
    }
    free(at);
    return RG_OK;
}

static uint64_t map_uid(const rg_wuids *u, uint64_t uid)
{
    return uid >= 1 && uid <= u->n ? u->g[uid - 1] : uid;
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

/* A path or file name whose last component starts with a uid ("17-c2s.bin", "17.bin") with
 * the uid renumbered, into b. */
static int put_name(buf *b, const char *s, size_t n, const rg_wuids *u)
{
    size_t base = n;
    while (base && s[base - 1] != '/')
        base--;
    size_t d = base;
    uint64_t v = 0;
    while (d < n && s[d] >= '0' && s[d] <= '9' && d - base < 19)
        v = v * 10 + (uint64_t)(s[d++] - '0');
    if (d == base || d == n || (s[d] != '-' && s[d] != '.') || v < 1 || v > u->n)
        return bput(b, s, n);
    if (bput(b, s, base) || bnum(b, map_uid(u, v))) return RG_ENOMEM;
    return bput(b, s + d, n - d);
}

/* ---- .jsonl records ---- */

typedef struct rec {
    uint64_t pkt, uid, idx;
    unsigned worker;
    char *text; /* with its newline */
    size_t len;
} rec;

static const char *skip_string(const char *s, const char *end)
{
    for (s++; s < end && *s != '"'; s++)
        if (*s == '\\') s++;
    return s < end ? s + 1 : end;
}

/* Rewrite one record (line without its newline) of worker u into r. */
static int rewrite(const char *s, size_t n, const rg_wuids *u, rec *r)
{
    buf b = {0};
    const char *end = s + n, *p = s, *copied = s;
    int depth = 0, got_uid = 0;
    while (p < end) {
        if (*p == '{' || *p == '[') {
            depth++;
            p++;
        } else if (*p == '}' || *p == ']') {
            depth--;
            p++;
        } else if (*p != '"') {
            p++;
        } else {
            const char *k = p + 1, *ke = skip_string(p, end);
            p = ke;
            if (depth != 1) continue;
            const char *q = p;
            while (q < end && (*q == ' ' || *q == '\t'))
                q++;
            if (q >= end || *q != ':') continue; /* a value, not a key */
            q++;
            while (q < end && (*q == ' ' || *q == '\t'))
                q++;
            size_t kl = (size_t)(ke - 1 - k);
            int is_uid = (kl == 3 && !memcmp(k, "uid", 3)) || (kl == 4 && !memcmp(k, "flow", 4));
            int is_pkt = kl == 3 && !memcmp(k, "pkt", 3);
            int is_file = kl == 4 && !memcmp(k, "file", 4);
            if ((is_uid || is_pkt) && q < end && *q >= '0' && *q <= '9') {
                const char *ve = q;
                uint64_t v = 0;
                while (ve < end && *ve >= '0' && *ve <= '9')
                    v = v * 10 + (uint64_t)(*ve++ - '0');
                if (is_pkt) {
                    r->pkt = v;
                } else {
                    v = map_uid(u, v);
                    if (!got_uid) r->uid = v;
                    got_uid = 1;
                    if (bput(&b, copied, (size_t)(q - copied)) || bnum(&b, v)) goto oom;
                    copied = ve;
                }
                p = ve;
            } else if (is_file && q < end && *q == '"') {
                const char *ve = skip_string(q, end);
                if (bput(&b, copied, (size_t)(q + 1 - copied)) ||
                    put_name(&b, q + 1, (size_t)(ve - 1 - (q + 1)), u) || bput(&b, "\"", 1))
                    goto oom;
                copied = p = ve;
            }
        }
    }
    /* a flow's record: the worker that processed the flow, as a last member */
    const char *last = end;
    while (last > copied && (last[-1] == ' ' || last[-1] == '\r'))
        last--;
    if (got_uid && last > copied && last[-1] == '}') {
        char w[32];
        int wl = snprintf(w, sizeof w, ",\"worker\":%u}", r->worker);
        if (bput(&b, copied, (size_t)(last - 1 - copied)) || bput(&b, w, (size_t)wl)) goto oom;
        copied = end;
    }
    if (bput(&b, copied, (size_t)(end - copied)) || bput(&b, "\n", 1)) goto oom;
    r->text = b.p;
    r->len = b.n;
    return RG_OK;
oom:
    free(b.p);
    return RG_ENOMEM;
}

static int rec_cmp(const void *a, const void *b)
{
    const rec *x = a, *y = b;
    if (x->pkt != y->pkt) return x->pkt < y->pkt ? -1 : 1;
    if (x->uid != y->uid) return x->uid < y->uid ? -1 : 1;
    if (!x->pkt && !x->uid) { /* neither packet nor flow: by content, whatever the worker */
        int c = strcmp(x->text, y->text);
        if (c) return c;
    }
    if (x->idx != y->idx) return x->idx < y->idx ? -1 : 1;
    return x->worker < y->worker ? -1 : x->worker > y->worker;
}

/* ---- one merge ---- */

typedef struct part {
    char *rel;  /* the merged file's path relative to OUT (uids renumbered) */
    char *path; /* the worker's file */
    unsigned worker;
} part;

typedef struct merge {
    const char *prog;
    const rg_wuids *u; /* per worker */
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
    buf b = {0};
    if (put_name(&b, rel, strlen(rel), &m->u[m->cur])) return -1;
    part *p = &m->parts[m->n];
    p->rel = b.p;
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

/* NAME.jsonl from parts p[0..k). */
static int merge_jsonl(merge *m, const part *p, size_t k, const char *to)
{
    rec *rs = NULL;
    size_t nr = 0, cap = 0;
    int rc = RG_OK;
    char **texts = calloc(k, sizeof *texts);
    if (!texts) return RG_ENOMEM;
    for (size_t i = 0; i < k && !rc; i++) {
        size_t len;
        texts[i] = slurp(p[i].path, &len);
        if (!texts[i]) {
            rc = RG_EIO;
            break;
        }
        uint64_t idx = 0;
        for (char *s = texts[i], *end = texts[i] + len; s < end && !rc;) {
            char *nl = memchr(s, '\n', (size_t)(end - s));
            size_t ln = nl ? (size_t)(nl - s) : (size_t)(end - s);
            if (nr == cap) {
                cap = cap ? cap * 2 : 1024;
                rec *r2 = realloc(rs, cap * sizeof *r2);
                if (!r2) {
                    rc = RG_ENOMEM;
                    break;
                }
                rs = r2;
            }
            rec *r = &rs[nr];
            memset(r, 0, sizeof *r);
            r->idx = idx++;
            r->worker = p[i].worker; /* before rewrite: it writes it into flow records */
            if (rewrite(s, ln, &m->u[p[i].worker], r)) {
                rc = RG_ENOMEM;
                break;
            }
            nr++;
            s += ln + 1;
        }
    }
    if (!rc) {
        if (nr) qsort(rs, nr, sizeof *rs, rec_cmp); /* rs is NULL without records */
        FILE *f = fopen(to, "wb");
        if (!f) rc = RG_EIO;
        for (size_t i = 0; f && i < nr; i++)
            if (fwrite(rs[i].text, 1, rs[i].len, f) != rs[i].len) rc = RG_EIO;
        if (f && fclose(f)) rc = RG_EIO;
    }
    for (size_t i = 0; i < nr; i++)
        free(rs[i].text);
    for (size_t i = 0; i < k; i++)
        free(texts[i]);
    free(texts);
    free(rs);
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
                rc = merge_jsonl(m, p, k, to);
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

int rg_wmerge(const rg_wdirs *dirs, unsigned nw, rg_wuids *uids, const char *prog)
{
    if (rank_uids(uids, nw)) {
        fprintf(stderr, "%s: --workers: out of memory merging the outputs\n", prog);
        return RG_ENOMEM;
    }
    merge m = {.prog = prog, .u = uids};
    int rc = RG_OK;
    for (unsigned i = 0; i < dirs->n; i++)
        if (merge_dir(&m, dirs->dir[i], nw)) rc = RG_EIO;
    free(m.parts);
    return rc;
}
