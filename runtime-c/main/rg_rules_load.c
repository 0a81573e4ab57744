/* rg_rules_load.c - swapping a context's rule set (rg_rules.h): global ids of rule names,
 * loading a rule set's shared object, the control socket's `rules` requests.
 *
 * Everything here runs on the packet loop's thread, between two packets (the control
 * socket's requests are applied there, rg_control_poll): the per-packet code reads the
 * active set without a lock. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rg/rg_rules.h"
#include "rg/rg_stats.h"
#include "rg_rules_ctl.h"

static rg_rules_rt *all_rt;                                /* every live context's */
static pthread_mutex_t all_mu = PTHREAD_MUTEX_INITIALIZER; /* workers create contexts */
static const char *so_path;                                /* --rules-so */
volatile sig_atomic_t rg_rules_hup;

static int load_one(rg_rules_rt *rt, const char *so, char *err, size_t errlen);

/* The global id of name, given when first seen; UINT32_MAX when out of memory. */
static uint32_t gid_of(rg_rules_rt *rt, const char *name)
{
    for (uint32_t i = 0; i < rt->ngid; i++)
        if (!strcmp(rt->gname[i], name)) return i;
    if (rt->ngid >= RG_RULES_MAX_NAMES) return UINT32_MAX;
    char **g = realloc(rt->gname, (rt->ngid + 1u) * sizeof *g);
    if (!g) return UINT32_MAX;
    rt->gname = g;
    uint16_t *gg = realloc(rt->ggen, (rt->ngid + 1u) * sizeof *gg);
    if (!gg) return UINT32_MAX;
    rt->ggen = gg;
    gg[rt->ngid] = 0;
    if (!(g[rt->ngid] = strdup(name))) return UINT32_MAX;
    return rt->ngid++;
}

int rg_rules_rt_install(rg_rules_rt *rt, const rg_rules_desc *d, void *dl, char *err,
                        unsigned errlen)
{
    if (d->abi != RG_RULES_ABI) {
        snprintf(err, errlen, "rule set ABI %u, this binary's is %u (rebuild one of them)", d->abi,
                 RG_RULES_ABI);
        return -1;
    }
    if (strcmp(d->fingerprint, rt->fingerprint) != 0) {
        snprintf(err, errlen,
                 "the rule set was compiled for another stack (fingerprint %.16s, this "
                 "binary's %.16s): compile it against %s",
                 d->fingerprint, rt->fingerprint, rt->stack_spec);
        return -1;
    }
    uint32_t *gid = calloc(d->n ? d->n : 1u, sizeof *gid);
    uint64_t *hits = calloc(d->n ? d->n : 1u, sizeof *hits);
    int32_t *lidx = NULL;
    if (!gid || !hits) goto oom;
    for (uint32_t i = 0; i < d->n; i++)
        if ((gid[i] = gid_of(rt, d->name[i])) == UINT32_MAX) goto oom;
    lidx = malloc((rt->ngid ? rt->ngid : 1u) * sizeof *lidx);
    if (!lidx) goto oom;
    for (uint32_t i = 0; i < rt->ngid; i++)
        lidx[i] = -1;
    int need_inst = 0;
    for (uint32_t i = 0; i < d->n; i++) {
        if (d->stateful[i]) lidx[gid[i]] = (int32_t)i; /* only stateful rules keep decisions */
        if (d->stateful[i] || !strcmp(d->action[i], "drop-flow")) need_inst = 1;
    }
    /* names without a stateful rule in d: their recorded decisions are forgotten for good */
    for (uint32_t i = 0; i < rt->ngid; i++)
        if (lidx[i] < 0) rt->ggen[i] = (uint16_t)((rt->ggen[i] + 1u) & 0x7fffu);
    /* the swap: the next packet runs d */
    if (rt->d) rt->reloads++;
    if (rt->dl) dlclose(rt->dl);
    free(rt->gid);
    free(rt->lidx);
    free(rt->hits);
    rt->d = d;
    rt->dl = dl;
    rt->gid = gid;
    rt->lidx = lidx;
    rt->hits = hits;
    rt->need_inst = need_inst;
    rt->csum_mask = d->csum_mask;
    if (rt->stats) {
        rt->stats->nrules = d->n;
        rt->stats->rule_name = d->name;
        rt->stats->rule_action = d->action;
        rt->stats->rule_hits = hits;
        rt->stats->rule_reloads = rt->reloads;
    }
    return 0;
oom:
    free(gid);
    free(hits);
    free(lidx);
    snprintf(err, errlen, "out of memory (or more than %u rule names since the start)",
             RG_RULES_MAX_NAMES);
    return -1;
}

rg_rules_rt *rg_rules_rt_new(const rg_rules_desc *d, struct rg_stats *st, const uint64_t *pkt_no,
                             const char *fingerprint, const char *stack_spec)
{
    rg_rules_rt *rt = calloc(1, sizeof *rt);
    if (!rt) return NULL;
    rt->stats = st;
    rt->pkt_no = pkt_no;
    rt->fingerprint = fingerprint;
    rt->stack_spec = stack_spec;
    char err[256];
    if (rg_rules_rt_install(rt, d, NULL, err, sizeof err)) {
        free(rt);
        return NULL;
    }
    rt->hup_seen = rg_rules_hup;
    if (so_path && load_one(rt, so_path, err, sizeof err)) { /* --rules-so */
        fprintf(stderr, "--rules-so: %s\n", err);
        rg_rules_rt_free(rt);
        return NULL;
    }
    rt->reloads = 0; /* the set the run starts with */
    if (st) st->rule_reloads = 0;
    pthread_mutex_lock(&all_mu);
    rt->next = all_rt;
    all_rt = rt;
    pthread_mutex_unlock(&all_mu);
    return rt;
}

void rg_rules_rt_free(rg_rules_rt *rt)
{
    if (!rt) return;
    pthread_mutex_lock(&all_mu);
    for (rg_rules_rt **p = &all_rt; *p; p = &(*p)->next)
        if (*p == rt) {
            *p = rt->next;
            break;
        }
    pthread_mutex_unlock(&all_mu);
    if (rt->stats) { /* the names die with the set: the summary is printed before */
        rt->stats->nrules = 0;
        rt->stats->rule_hits = NULL;
    }
    if (rt->dl) dlclose(rt->dl);
    for (uint32_t i = 0; i < rt->ngid; i++)
        free(rt->gname[i]);
    free(rt->gname);
    free(rt->ggen);
    free(rt->gid);
    free(rt->lidx);
    free(rt->hits);
    free(rt);
}

/* dlopen of a private copy of so: dlopen hands back the object already loaded for a path,
 * so a file rewritten in place (SIGHUP) would never be read again; NULL (err) on failure. */
static void *open_copy(const char *so, char *err, size_t errlen)
{
    int in = open(so, O_RDONLY);
    if (in < 0) {
        snprintf(err, errlen, "%s: %s", so, strerror(errno));
        return NULL;
    }
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/rg-rules-XXXXXX.so", tmp && *tmp ? tmp : "/tmp");
    int out = mkstemps(path, 3);
    if (out < 0) {
        snprintf(err, errlen, "%s: cannot copy it: %s", so, strerror(errno));
        close(in);
        return NULL;
    }
    char buf[65536];
    ssize_t k;
    int bad = 0;
    while ((k = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)k) != k) bad = 1;
    if (k < 0) bad = 1;
    close(in);
    if (close(out)) bad = 1;
    void *dl = bad ? NULL : dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *why = bad ? "cannot copy it" : dlerror();
        snprintf(err, errlen, "%s: cannot load: %s", so, why ? why : "dlopen failed");
    }
    unlink(path); /* mapped: the copy's name is not needed any more */
    return dl;
}

/* Load the rule set of a shared object into rt; 0 or -1 (err). */
static int load_one(rg_rules_rt *rt, const char *so, char *err, size_t errlen)
{
    /* a handle per context: each install owns (and closes) its own */
    void *dl = open_copy(so, err, errlen);
    if (!dl) return -1;
    const rg_rules_desc *d = (const rg_rules_desc *)dlsym(dl, RG_RULES_SYMBOL);
    if (!d) {
        snprintf(err, errlen, "%s: no %s: not a rule set", so, RG_RULES_SYMBOL);
        dlclose(dl);
        return -1;
    }
    char why[512];
    if (rg_rules_rt_install(rt, d, dl, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", so, why);
        dlclose(dl);
        return -1;
    }
    return 0;
}

/* Load the rule set of a shared object into every context; 0 or -1 (err). */
static int load_so(const char *so, const struct rg_stats *st, char *err, size_t errlen)
{
    if (!all_rt) {
        snprintf(err, errlen,
                 "this binary's rules cannot be reloaded (build it with "
                 "--rules-reload)");
        return -1;
    }
    for (rg_rules_rt *rt = all_rt; rt; rt = rt->next)
        if ((!st || rt->stats == st) && load_one(rt, so, err, errlen)) return -1;
    return 0;
}

/* The context of st (NULL: the first); NULL when it has no reloadable rules. */
static rg_rules_rt *rt_of(const struct rg_stats *st)
{
    for (rg_rules_rt *rt = all_rt; rt; rt = rt->next)
        if (!st || rt->stats == st) return rt;
    return NULL;
}

/* SIGHUP (rg_main.c's handler, which also reopens the outputs) reloads so_path */
void rg_rules_so_option(const char *path)
{
    so_path = path;
}

void rg_rules_hup_reload(rg_rules_rt *rt)
{
    rt->hup_seen = rg_rules_hup;
    if (!so_path) return;
    char err[1024];
    if (load_one(rt, so_path, err, sizeof err))
        fprintf(stderr, "rules: SIGHUP: %s (the rules in force are kept)\n", err);
    else
        fprintf(stderr,
                "rules: SIGHUP: loaded %" PRIu32 " rules of %s after packet %" PRIu64
                " (reload %" PRIu64 ")\n",
                rt->d->n, rt->d->file, *rt->pkt_no - 1u, rt->reloads);
}

int rg_rules_control(char **f, unsigned n, char *reply, size_t size, const struct rg_stats *st)
{
    rg_rules_rt *rt = rt_of(st);
    if (n == 2 && !strcmp(f[1], "info")) {
        if (!rt) {
            snprintf(reply, size,
                     "error: this binary's rules cannot be reloaded (build it "
                     "with --rules-reload)\n");
            return 0;
        }
        snprintf(reply, size,
                 "ok\nstack\t%s\nfingerprint\t%s\nrules\t%s\nnrules\t%" PRIu32 "\nreloads\t%" PRIu64
                 "\npackets\t%" PRIu64 "\n",
                 rt->stack_spec, rt->fingerprint, rt->d->file, rt->d->n, rt->reloads, *rt->pkt_no);
        return 0;
    }
    if (n == 3 && !strcmp(f[1], "load")) {
        char err[1024];
        if (!rt || load_so(f[2], st, err, sizeof err)) {
            if (!rt)
                snprintf(err, sizeof err,
                         "this binary's rules cannot be reloaded (build it "
                         "with --rules-reload)");
            snprintf(reply, size, "error: %s (the rules in force are kept)\n", err);
            return 0;
        }
        /* packets: the last packet judged by the old set (the new one takes the next) */
        snprintf(reply, size,
                 "ok\nloaded %" PRIu32 " rules of %s after packet %" PRIu64 " (reload %" PRIu64
                 ")\n",
                 rt->d->n, rt->d->file, *rt->pkt_no, rt->reloads);
        return 0;
    }
    snprintf(reply, size, "error: unknown request (rules info, rules load SO)\n");
    return 0;
}
