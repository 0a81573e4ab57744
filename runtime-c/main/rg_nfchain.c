/* rg_nfchain.c - NF chains: loading, subscription resolution, event
 * collection and dispatch in chain order (see rg_nfchain.h). */
#include "rg_ctlsec.h"
#include "rg_nfchain.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rg/rg_nf_registry.h"
#include "rg/rg_obs.h"
#include "rg/rg_uidmap.h"
#include "rg_out.h"

/* ---- an arena for the copies of one batch (chunks never move) ---- */

typedef struct chunk {
    struct chunk *next;
    size_t size, used;
    uint8_t data[];
} chunk;

typedef struct arena {
    chunk *head; /* the chunk in use; older ones after it */
} arena;

enum { CHUNK = 64 * 1024 };

static void *arena_alloc(arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->size - a->head->used < n) {
        size_t sz = n > CHUNK ? n : CHUNK;
        chunk *c = malloc(sizeof *c + sz);
        if (!c) return NULL;
        c->next = a->head;
        c->size = sz;
        c->used = 0;
        a->head = c;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    return p;
}

/* Keep one standard chunk for the next batch, free the rest. */
static void arena_reset(arena *a)
{
    chunk *keep = NULL;
    for (chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        if (!keep && c->size == CHUNK) {
            keep = c;
            continue;
        }
        free(c);
    }
    if (keep) {
        keep->next = NULL;
        keep->used = 0;
    }
    a->head = keep;
}

static void arena_free(arena *a)
{
    for (chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
}

/* ---- per-flow records: uid -> the states of the chain's NFs ---- */

typedef struct fent {
    void *st;        /* the NF's state for this flow (NULL: none yet) */
    uint64_t unsub;  /* subscriptions this NF dropped for this flow (bit = sub index) */
    uint8_t nobytes; /* bit d: this NF wants no more bytes of direction d */
} fent;

typedef struct frec {
    uint8_t nobytes_req; /* bit d: no NF wants direction d: set in the instance's no_bytes */
    uint8_t n;           /* entries in e: grown to the highest slot index that needed one */
    fent e[];            /* by slot index */
} frec;

static frec *fmap_add(rg_nf_map *m, uint64_t uid)
{
    frec *r = calloc(1, sizeof *r);
    if (r && rg_nf_map_put(m, uid, r)) {
        free(r);
        return NULL;
    }
    return r;
}

/* Slot index idx's entry of uid's record, or NULL: none (create = 0) or out of memory. The
 * record is created, or grown to idx + 1 entries, on demand (records stay as small as the
 * chain: a flow costs what the NFs that keep something for it need). */
static fent *fent_of(rg_nf_map *m, uint64_t uid, unsigned idx, int create)
{
    frec *r = rg_nf_map_get(m, uid);
    if (r && idx < r->n) return &r->e[idx];
    if (!create) return NULL;
    if (!r && !(r = fmap_add(m, uid))) return NULL;
    frec *big = realloc(r, sizeof *r + (idx + 1) * sizeof(fent));
    if (!big) return NULL;
    memset(&big->e[big->n], 0, (idx + 1 - big->n) * sizeof(fent));
    big->n = (uint8_t)(idx + 1);
    *rg_nf_map_slot(m, uid) = big;
    return &big->e[idx];
}

/* ---- the chain ---- */

typedef struct slot {
    char name[64];
    char *source; /* the stock name or the .so path */
    void *dl;     /* dlopen handle; NULL for a stock NF */
    const rg_nf_abi *abi;
    void *self;
    int16_t *call_sub; /* per handler: the subscription serving it, -1 none */
    int16_t *bsub;     /* per (kind, layer): RG_NF_EV_KINDS * nlayers entries */
    int16_t clock_sub; /* clock_jump's subscription, -1 none */
    int uses_flow_rec; /* flow_state_size > 0 or a per-flow unsubscription was made */
    /* events between NFs: the chain's events (bit = id) its chain item lets it raise and
     * subscribe to, and per event the subscription serving it (-1 none) */
    uint64_t raises, subscribes;
    int16_t usub[RG_CHAIN_EVENTS];
} slot;

/* An event of the chain file (events between NFs): its payload's fields and their kinds */
typedef struct uevent {
    char *name;
    unsigned nfields;
    char *fnames[RG_CHAIN_EV_FIELDS];
    uint8_t kinds[RG_CHAIN_EV_FIELDS]; /* RG_VAL_* */
} uevent;

typedef struct qev {
    rg_nf_ev ev;
    rg_call call;
    rg_flow_info flow;
    uint64_t uid;       /* 0: no flow */
    rg_flow_info *live; /* the instance itself (valid unless it closed in this batch) */
    unsigned uev;       /* RG_NF_EV_NF: the chain's event id */
    unsigned raiser;    /* RG_NF_EV_NF: the chain position of the NF that raised it */
    rg_val *fields;     /* RG_NF_EV_NF: the payload (in the arena) */
} qev;

struct rg_chain {
    const rg_stack_desc *stack;
    char *outdir;
    slot *slots[RG_CHAIN_MAX]; /* chain order */
    unsigned n;
    int used_idx[RG_CHAIN_MAX]; /* frec indices in use */
    unsigned idx_of[RG_CHAIN_MAX];
    /* the union of the slots' subscriptions: what to collect */
    uint8_t *want_call; /* per handler */
    int16_t *data_arg;  /* per handler: its "data" argument, -1 none (rg_obs.h) */
    uint8_t *want_b;    /* per (kind, layer) */
    uint8_t want_clock;
    qev *q;
    size_t nq, capq;
    /* events raised by NFs in this batch, in raise order: in the arena, so an event stays
     * where it is while an NF handling it raises another (only this list of them grows) */
    qev **rq;
    size_t nrq, caprq;
    uevent uev[RG_CHAIN_EVENTS]; /* the chain file's events */
    unsigned nuev;
    arena ar;
    int oom;              /* events lost to memory exhaustion (reported once) */
    rg_nf_map flows;      /* uid -> frec */
    size_t nobytes_flows; /* frecs with nobytes_req set */
    int verdict;
    unsigned inject;       /* RG_INJECT_* the NFs asked for in this packet (rg_chain_take_inject) */
    rg_verdict_slot *slot; /* the context's verdict slot (rg_call.verdict): one per context */
    rg_nf_host host;
    /* --workers: the input's frame number of the packet (rg_chain_set_pkt), 0: the context's */
    uint64_t gpkt;
    rg_wdirs *wdirs; /* --workers: the directories to merge (rg_chain_set_worker) */
    char wsub[32];   /* --workers: this worker's subdirectory of every "out" */
};

typedef struct dispatch_ref {
    rg_chain *ch;
    unsigned idx; /* the slot's frec index */
    unsigned pos; /* the slot's chain position */
    uint64_t uid;
    const qev *e; /* the event being dispatched */
} dispatch_ref;

static int host_subscribe(const rg_nf_ev *ev, unsigned sub, int on);
static int host_no_more_bytes(const rg_nf_ev *ev, int dir);
static void *host_out_open(const rg_nf_host *host, const char *path, char *err, size_t errlen);
static int host_out_write(void *out, const char *rec, size_t len);
static int host_out_close(void *out, char *err, size_t errlen);
static int host_raise(const rg_nf_ev *ev, const char *event, const rg_val *fields,
                      unsigned nfields);
static int host_inject(const rg_nf_ev *ev, unsigned what);

rg_chain *rg_chain_new(const rg_stack_desc *stack, const char *outdir)
{
    rg_chain *ch = calloc(1, sizeof *ch);
    if (!ch) return NULL;
    ch->stack = stack;
    ch->outdir = strdup(outdir ? outdir : "rg-out");
    ch->want_call = calloc(stack->nhandlers + 1u, 1);
    ch->want_b = calloc((size_t)RG_NF_EV_KINDS * (stack->nlayers + 1u), 1);
    ch->data_arg = rg_obs_data_args(stack);
    ch->host = (rg_nf_host){
        RG_NF_ABI_VERSION, sizeof(rg_nf_host), host_subscribe, host_no_more_bytes, 0,          1,
        host_out_open,     host_out_write,     host_out_close, host_raise,         host_inject};
    if (!ch->outdir || !ch->want_call || !ch->want_b || !ch->data_arg) {
        free(ch->data_arg);
        free(ch->outdir);
        free(ch->want_call);
        free(ch->want_b);
        free(ch);
        return NULL;
    }
    return ch;
}

unsigned rg_chain_size(const rg_chain *ch)
{
    return ch->n;
}

int rg_chain_verdict(const rg_chain *ch)
{
    return ch->verdict;
}

unsigned rg_chain_take_inject(rg_chain *ch)
{
    unsigned what = ch ? ch->inject : 0;
    if (ch) ch->inject = 0;
    return what;
}

static void recompute_wants(rg_chain *ch)
{
    const rg_stack_desc *s = ch->stack;
    memset(ch->want_call, 0, s->nhandlers + 1u);
    memset(ch->want_b, 0, (size_t)RG_NF_EV_KINDS * (s->nlayers + 1u));
    ch->want_clock = 0;
    for (unsigned k = 0; k < ch->n; k++) {
        const slot *sl = ch->slots[k];
        for (unsigned h = 0; h < s->nhandlers; h++)
            if (sl->call_sub[h] >= 0) ch->want_call[h] = 1;
        for (size_t i = 0; i < (size_t)RG_NF_EV_KINDS * s->nlayers; i++)
            if (sl->bsub[i] >= 0) ch->want_b[i] = 1;
        if (sl->clock_sub >= 0) ch->want_clock = 1;
    }
    /* a close event frees per-flow states: collected whenever a slot keeps some */
    for (unsigned k = 0; k < ch->n; k++)
        if (ch->slots[k]->abi->flow_state_size)
            for (unsigned l = 0; l < s->nlayers; l++)
                ch->want_b[(size_t)RG_NF_EV_CLOSE * s->nlayers + l] = 1;
}

/* ---- resolution of subscriptions against the stack ---- */

static int builtin_kind(const char *ev)
{
    /* indexed by enum rg_nf_ev_kind */
    static const char *const names[] = {NULL,      RG_NF_OPEN,       RG_NF_PACKET, RG_NF_CLOSE,
                                        RG_NF_GAP, RG_NF_CLOCK_JUMP, RG_NF_MEMCAP, RG_NF_OVERLAP};
    for (int k = 1; k < (int)(sizeof names / sizeof names[0]); k++)
        if (!strcmp(ev, names[k])) return k;
    return 0;
}

static int layer_matches(const rg_layer_desc *l, const char *want)
{
    return !want || !strcmp(want, "*") || !strcmp(l->name, want) ||
           (l->protocol && !strcmp(l->protocol, want));
}

/* A list of the stack's layers (or of the handlers on the matched layers) for
 * an error message. */
static void list_layers(const rg_stack_desc *s, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (unsigned i = 0; i < s->nlayers && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", s->layers[i].name);
}

static void list_handlers(const rg_stack_desc *s, const char *layer, char *buf, size_t n)
{
    size_t k = 0;
    int any = 0;
    buf[0] = 0;
    for (unsigned h = 0; h < s->nhandlers && k < n; h++) {
        if (!layer_matches(&s->layers[s->handlers[h].layer], layer)) continue;
        k += (size_t)snprintf(buf + k, n - k, "%s%s", any ? ", " : "", s->handlers[h].name);
        any = 1;
    }
    if (!any) snprintf(buf, n, "none");
}

/* Whether handler h hooks the event called name (rg_handler_desc.events: its `with`,
 * space-separated), so an NF subscribes to a user-defined event by its name. */
static int hooks(const rg_handler_desc *h, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = h->events; p && *p;) {
        while (*p == ' ')
            p++;
        size_t k = strcspn(p, " ");
        if (k == n && !strncmp(p, name, n)) return 1;
        p += k;
    }
    return 0;
}

int rg_chain_event_id(const rg_chain *ch, const char *name)
{
    for (unsigned i = 0; i < ch->nuev; i++)
        if (!strcmp(ch->uev[i].name, name)) return (int)i;
    return -1;
}

int rg_chain_declare_event(rg_chain *ch, const char *name, unsigned nfields,
                           const char *const *fnames, const uint8_t *kinds, char *err,
                           size_t errlen)
{
    if (rg_chain_event_id(ch, name) >= 0) {
        snprintf(err, errlen, "the chain declares the event '%s' twice", name);
        return RG_EINVAL;
    }
    if (ch->nuev == RG_CHAIN_EVENTS || nfields > RG_CHAIN_EV_FIELDS) {
        snprintf(err, errlen, "too many %s (%d events, %d fields each at most)",
                 nfields > RG_CHAIN_EV_FIELDS ? "fields" : "events", RG_CHAIN_EVENTS,
                 RG_CHAIN_EV_FIELDS);
        return RG_EINVAL;
    }
    uevent *u = &ch->uev[ch->nuev];
    memset(u, 0, sizeof *u);
    u->name = strdup(name);
    int oom = !u->name;
    for (unsigned i = 0; i < nfields; i++) {
        u->fnames[i] = strdup(fnames[i]);
        u->kinds[i] = kinds[i];
        oom |= !u->fnames[i];
        u->nfields = i + 1;
    }
    ch->nuev++; /* freed with the chain, even when half made */
    if (oom) {
        snprintf(err, errlen, "out of memory");
        return RG_ENOMEM;
    }
    return RG_OK;
}

int rg_chain_event_field_check(const rg_chain *ch, int id, const char *field, const char *type)
{
    if (id < 0 || (unsigned)id >= ch->nuev) return RG_EINVAL;
    const uevent *u = &ch->uev[id];
    for (unsigned i = 0; i < u->nfields; i++)
        if (!strcmp(u->fnames[i], field))
            return !strcmp(type, u->kinds[i] == RG_VAL_NUM ? "num" : "bytes") ? RG_OK : RG_EINVAL;
    return RG_EINVAL;
}

/* Subscription k of sl names the chain's event id: served when sl's chain item subscribes
 * to it (the chain file is the contract: rubikgen validate checks its order and types). */
static int resolve_uev(const rg_chain *ch, slot *sl, unsigned k, int id, char *err, size_t errlen)
{
    const rg_nf_sub *sub = &sl->abi->subs[k];
    if (!(sl->subscribes >> id & 1)) {
        snprintf(err, errlen,
                 "subscription %u (%s.%s): '%s' is an event of the chain file: list it under "
                 "`subscribes` in this NF's chain item",
                 k, sub->layer ? sub->layer : "*", sub->event, sub->event);
        return RG_EINVAL;
    }
    unsigned nl = 0;
    for (unsigned l = 0; l < ch->stack->nlayers; l++)
        nl += layer_matches(&ch->stack->layers[l], sub->layer);
    if (!nl) {
        snprintf(err, errlen, "subscription %u (%s.%s): stack %s has no layer or protocol '%s'", k,
                 sub->layer, sub->event, ch->stack->name, sub->layer);
        return RG_EINVAL;
    }
    if (sl->usub[id] < 0) sl->usub[id] = (int16_t)k;
    return RG_OK;
}

static int resolve(const rg_chain *ch, slot *sl, char *err, size_t errlen)
{
    const rg_stack_desc *s = ch->stack;
    const rg_nf_abi *a = sl->abi;
    char list[512];
    for (unsigned i = 0; i < RG_CHAIN_EVENTS; i++)
        sl->usub[i] = -1;
    for (unsigned h = 0; h < s->nhandlers; h++)
        sl->call_sub[h] = -1;
    for (size_t i = 0; i < (size_t)RG_NF_EV_KINDS * s->nlayers; i++)
        sl->bsub[i] = -1;
    sl->clock_sub = -1;
    for (unsigned k = 0; k < a->nsubs && k < INT16_MAX; k++) {
        const rg_nf_sub *sub = &a->subs[k];
        const char *lw = sub->layer, *ew = sub->event;
        int optional = (sub->flags & RG_NF_SUB_OPTIONAL) || (lw && !strcmp(lw, "*"));
        if (!ew || !sub->fn) {
            snprintf(err, errlen, "subscription %u has no event name or no callback", k);
            return RG_EINVAL;
        }
        int uid = rg_chain_event_id(ch, ew);
        if (uid >= 0) {
            if (resolve_uev(ch, sl, k, uid, err, errlen)) return RG_EINVAL;
            continue;
        }
        int kind = builtin_kind(ew);
        if (kind == RG_NF_EV_CLOCK_JUMP) {
            if (sl->clock_sub < 0) sl->clock_sub = (int16_t)k;
            continue;
        }
        unsigned nl = 0, matched = 0;
        for (unsigned l = 0; l < s->nlayers; l++) {
            const rg_layer_desc *ld = &s->layers[l];
            if (!layer_matches(ld, lw)) continue;
            nl++;
            if (kind) {
                if (!ld->has_instance ||
                    ((kind == RG_NF_EV_GAP || kind == RG_NF_EV_OVERLAP) && !ld->has_seq))
                    continue;
                int16_t *b = &sl->bsub[(size_t)kind * s->nlayers + l];
                if (*b < 0) *b = (int16_t)k;
                matched++;
                continue;
            }
            for (unsigned h = 0; h < s->nhandlers; h++) {
                if (s->handlers[h].layer != l) continue;
                if (strcmp(ew, "*") && strcmp(ew, s->handlers[h].name) &&
                    !hooks(&s->handlers[h], ew))
                    continue;
                if (sl->call_sub[h] < 0) sl->call_sub[h] = (int16_t)k;
                matched++;
            }
        }
        if (optional || matched) continue;
        if (!nl) {
            list_layers(s, list, sizeof list);
            snprintf(err, errlen,
                     "subscription %u (%s.%s): stack %s has no layer or protocol '%s' "
                     "(layers: %s)",
                     k, lw, ew, s->name, lw, list);
        } else if (kind) {
            snprintf(err, errlen, "subscription %u (%s.%s): no layer '%s' of stack %s has %s", k,
                     lw, ew, lw ? lw : "*", s->name,
                     kind == RG_NF_EV_GAP       ? "reassembly (gap events)"
                     : kind == RG_NF_EV_OVERLAP ? "reassembly (overlap events)"
                                                : "instances (a selector)");
        } else if (strcmp(ew, "*")) {
            list_handlers(s, lw, list, sizeof list);
            snprintf(err, errlen,
                     "subscription %u (%s.%s): stack %s has no event '%s' on layer '%s' "
                     "(handlers there: %s)",
                     k, lw ? lw : "*", ew, s->name, ew, lw ? lw : "*", list);
        } else {
            snprintf(err, errlen, "subscription %u (%s.*): layer '%s' of stack %s has no handlers",
                     k, lw, lw, s->name);
        }
        return RG_EINVAL;
    }
    return RG_OK;
}

/* ---- --workers ---- */

uint64_t rg_chain_uid(const rg_chain *ch, uint64_t uid)
{
    return rg_uid_global(uid, ch->host.worker, ch->host.nworkers);
}

void rg_chain_set_pkt(rg_chain *ch, uint64_t pkt_no)
{
    ch->gpkt = pkt_no;
}

/* out's part for this worker (OUT/.rg-worker-K, created), out remembered in ch->wdirs for the
 * merge; NULL with err. */
static char *worker_dir(rg_chain *ch, const char *out, char *err, size_t errlen)
{
    size_t n = strlen(out) + strlen(ch->wsub) + 2;
    char *d = malloc(n);
    if (!d || rg_wdirs_add(ch->wdirs, out)) {
        free(d);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(d, n, "%s/%s", out, ch->wsub);
    if (rg_mkdirs(d, err, errlen)) {
        free(d);
        return NULL;
    }
    return d;
}

int rg_chain_set_worker(rg_chain *ch, unsigned worker, unsigned nworkers, rg_wdirs *dirs, char *err,
                        size_t errlen)
{
    ch->host.worker = worker;
    ch->host.nworkers = nworkers;
    ch->wdirs = dirs;
    snprintf(ch->wsub, sizeof ch->wsub, RG_WORKER_DIR "%u", worker);
    /* a part left by a run that did not end must not be merged into this one's */
    size_t n = strlen(ch->outdir) + strlen(ch->wsub) + 2;
    char *stale = malloc(n);
    if (stale) {
        snprintf(stale, n, "%s/%s", ch->outdir, ch->wsub);
        rg_rmtree(stale);
        free(stale);
    }
    char *d = worker_dir(ch, ch->outdir, err, errlen);
    if (!d) return RG_EIO;
    free(ch->outdir);
    ch->outdir = d;
    return RG_OK;
}

/* ---- attach / detach ---- */

static int is_path(const char *nf)
{
    size_t n = strlen(nf);
    return strchr(nf, '/') || (n > 3 && !strcmp(nf + n - 3, ".so"));
}

static void slot_free(slot *sl)
{
    if (!sl) return;
    if (sl->dl) dlclose(sl->dl);
    free(sl->source);
    free(sl->call_sub);
    free(sl->bsub);
    free(sl);
}

/* The descriptor of nf (loaded into sl->dl for a path); NULL with err. */
static const rg_nf_abi *load(slot *sl, const char *nf, char *err, size_t errlen)
{
    if (!is_path(nf)) {
        const rg_nf_desc *d = rg_nf_find(rg_nf_table, nf);
        if (d) return d->abi;
        char names[256];
        size_t k = 0;
        names[0] = 0;
        for (const rg_nf_desc *const *t = rg_nf_table; *t && k < sizeof names; t++)
            k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", k ? ", " : "",
                                  rg_nf_desc_name(*t));
        snprintf(err, errlen, "unknown NF '%s' (stock NFs: %s; or a path to an NF's .so)", nf,
                 names);
        return NULL;
    }
    /* one rule for every .so (rg_ctlsec.h): a path, never the library search path */
    char so[4096];
    if (rg_so_resolve(NULL, nf, so, sizeof so, err, errlen)) return NULL;
    dlerror();
    sl->dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!sl->dl) {
        const char *why = dlerror();
        snprintf(err, errlen, "%s: cannot load: %s", nf, why ? why : "dlopen failed");
        return NULL;
    }
    const rg_nf_abi *a = dlsym(sl->dl, RG_NF_SYMBOL);
    if (!a) {
        snprintf(err, errlen,
                 "%s: no symbol '" RG_NF_SYMBOL "': not an NF of this ABI (an NF exports its "
                 "descriptor with RG_NF_EXPORT, rg_nf_api.h)",
                 nf);
        return NULL;
    }
    if (a->abi_version != RG_NF_ABI_VERSION) {
        snprintf(err, errlen,
                 "%s: NF ABI version %u, this driver speaks version %d: rebuild the NF "
                 "against this rubikgen's rg_nf_api.h",
                 nf, (unsigned)a->abi_version, RG_NF_ABI_VERSION);
        return NULL;
    }
    if (a->size < offsetof(rg_nf_abi, flow_free) || !a->init || !a->fini || !a->name) {
        snprintf(err, errlen,
                 "%s: malformed descriptor '" RG_NF_SYMBOL "' (size %u, name, "
                 "init and fini are required)",
                 nf, (unsigned)a->size);
        return NULL;
    }
    return a;
}

static int find_slot(const rg_chain *ch, const char *name)
{
    for (unsigned k = 0; k < ch->n; k++)
        if (!strcmp(ch->slots[k]->name, name)) return (int)k;
    return -1;
}

int rg_chain_attach(rg_chain *ch, const char *nf, const char *name, const rg_nf_kv *cfg,
                    unsigned ncfg, char *err, size_t errlen)
{
    return rg_chain_attach_ev(ch, nf, name, cfg, ncfg, 0, 0, err, errlen);
}

int rg_chain_attach_ev(rg_chain *ch, const char *nf, const char *name, const rg_nf_kv *cfg,
                       unsigned ncfg, uint64_t raises, uint64_t subscribes, char *err,
                       size_t errlen)
{
    char why[512];
    const rg_stack_desc *s = ch->stack;
    if (ch->n == RG_CHAIN_MAX) {
        snprintf(err, errlen, "%s: the chain is full (%d NFs)", nf, RG_CHAIN_MAX);
        return RG_EINVAL;
    }
    slot *sl = calloc(1, sizeof *sl);
    if (sl) {
        sl->source = strdup(nf);
        sl->call_sub = malloc((s->nhandlers + 1u) * sizeof *sl->call_sub);
        sl->bsub = malloc(((size_t)RG_NF_EV_KINDS * s->nlayers + 1) * sizeof *sl->bsub);
    }
    if (!sl || !sl->source || !sl->call_sub || !sl->bsub) {
        slot_free(sl);
        snprintf(err, errlen, "%s: out of memory", nf);
        return RG_ENOMEM;
    }
    sl->abi = load(sl, nf, why, sizeof why);
    if (!sl->abi) {
        snprintf(err, errlen, "%s", why);
        slot_free(sl);
        return RG_EINVAL;
    }
    const char *iname = name ? name : sl->abi->name;
    if (strlen(iname) >= sizeof sl->name || find_slot(ch, iname) >= 0) {
        snprintf(err, errlen, "%s: the chain has an NF called '%s' already (name this one)", nf,
                 iname);
        slot_free(sl);
        return RG_EINVAL;
    }
    snprintf(sl->name, sizeof sl->name, "%s", iname);
    sl->raises = raises;
    sl->subscribes = subscribes;
    if (resolve(ch, sl, why, sizeof why)) {
        snprintf(err, errlen, "NF '%s' (%s): %s", sl->abi->name, nf, why);
        slot_free(sl);
        return RG_EINVAL;
    }
    /* the configuration, with "out" added unless given */
    rg_nf_kv *kv = malloc((ncfg + 1) * sizeof *kv);
    if (!kv) {
        snprintf(err, errlen, "%s: out of memory", nf);
        slot_free(sl);
        return RG_ENOMEM;
    }
    for (unsigned i = 0; i < ncfg; i++)
        kv[i] = cfg[i];
    unsigned n = ncfg;
    if (!rg_nf_cfg_get(cfg, ncfg, "out", NULL)) kv[n++] = (rg_nf_kv){"out", ch->outdir};
    char *wout = NULL; /* --workers: a given "out" becomes this worker's part of it */
    if (ch->wdirs && rg_nf_cfg_get(cfg, ncfg, "out", NULL)) {
        const char *out = rg_nf_cfg_get(cfg, ncfg, "out", NULL);
        wout = worker_dir(ch, out, why, sizeof why);
        if (!wout) {
            snprintf(err, errlen, "NF '%s' (%s): %s", sl->abi->name, nf, why);
            free(kv);
            slot_free(sl);
            return RG_EINVAL;
        }
        kv[n++] = (rg_nf_kv){"out", wout};
    }
    why[0] = 0;
    /* the folder exists for any NF, not only for the stock ones that create it themselves */
    const char *out_dir = rg_nf_cfg_get(kv, n, "out", NULL);
    if (wout) out_dir = wout;
    if (is_path(nf) && out_dir && rg_mkdirs(out_dir, why, sizeof why)) {
        snprintf(err, errlen, "NF '%s' (%s): %s", sl->abi->name, nf, why);
        free(kv);
        free(wout);
        slot_free(sl);
        return RG_EIO;
    }
    if (rg_nf_cfg_get(cfg, ncfg, "out", NULL)) rg_wrote_dir(rg_nf_cfg_get(cfg, ncfg, "out", NULL));
    sl->self = sl->abi->init(s, kv, n, &ch->host, why, sizeof why);
    free(kv);
    free(wout);
    if (!sl->self) {
        snprintf(err, errlen, "NF '%s' (%s): %s", sl->abi->name, nf, why[0] ? why : "init failed");
        slot_free(sl);
        return RG_EINVAL;
    }
    sl->uses_flow_rec = sl->abi->flow_state_size > 0;
    unsigned idx = 0;
    while (ch->used_idx[idx])
        idx++;
    ch->used_idx[idx] = 1;
    ch->idx_of[ch->n] = idx;
    ch->slots[ch->n++] = sl;
    recompute_wants(ch);
    return RG_OK;
}

/* Release slot position k's per-flow states (flow_free) and unsubscriptions. */
static void drop_flow_states(rg_chain *ch, unsigned k)
{
    const slot *sl = ch->slots[k];
    unsigned idx = ch->idx_of[k];
    for (size_t i = 0; i < ch->flows.cap; i++) {
        frec *r = ch->flows.keys[i] ? ch->flows.vals[i] : NULL;
        if (!r || idx >= r->n) continue;
        if (r->e[idx].st && sl->abi->flow_free) sl->abi->flow_free(sl->self, r->e[idx].st);
        free(r->e[idx].st);
        r->e[idx] = (fent){NULL, 0, 0};
    }
}

static int detach_at(rg_chain *ch, unsigned k, char *err, size_t errlen)
{
    slot *sl = ch->slots[k];
    drop_flow_states(ch, k);
    char why[512] = "";
    int rc = sl->abi->fini(sl->self, why, sizeof why);
    if (rc) snprintf(err, errlen, "NF '%s': %s", sl->name, why[0] ? why : "fini failed");
    ch->used_idx[ch->idx_of[k]] = 0;
    for (unsigned j = k; j + 1 < ch->n; j++) {
        ch->slots[j] = ch->slots[j + 1];
        ch->idx_of[j] = ch->idx_of[j + 1];
    }
    ch->n--;
    slot_free(sl);
    recompute_wants(ch);
    return rc ? RG_EIO : RG_OK;
}

int rg_chain_detach(rg_chain *ch, const char *name, char *err, size_t errlen)
{
    int k = find_slot(ch, name);
    if (k < 0) {
        snprintf(err, errlen, "no NF called '%s' in the chain", name);
        return RG_EINVAL;
    }
    return detach_at(ch, (unsigned)k, err, errlen);
}

unsigned rg_chain_list(const rg_chain *ch, char *buf, size_t n)
{
    size_t k = 0;
    if (n) buf[0] = 0;
    for (unsigned i = 0; i < ch->n && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s\t%s\n", ch->slots[i]->name, ch->slots[i]->source);
    return ch->n;
}

int rg_chain_free(rg_chain *ch, const char *prog)
{
    if (!ch) return RG_OK;
    int rc = RG_OK;
    while (ch->n) {
        char err[600];
        if (detach_at(ch, 0, err, sizeof err)) {
            fprintf(stderr, "%s: %s\n", prog, err);
            rc = RG_EIO;
        }
    }
    for (size_t i = 0; i < ch->flows.cap; i++)
        if (ch->flows.keys[i]) free(ch->flows.vals[i]);
    rg_nf_map_free(&ch->flows);
    arena_free(&ch->ar);
    free(ch->q);
    free(ch->rq);
    for (unsigned i = 0; i < ch->nuev; i++) {
        free(ch->uev[i].name);
        for (unsigned f = 0; f < ch->uev[i].nfields; f++)
            free(ch->uev[i].fnames[f]);
    }
    free(ch->want_call);
    free(ch->want_b);
    free(ch->data_arg);
    free(ch->outdir);
    free(ch);
    return rc;
}

/* ---- collection ---- */

static void *copy_bytes(rg_chain *ch, const void *p, size_t n)
{
    if (!n) return NULL;
    void *d = arena_alloc(&ch->ar, n);
    if (d) memcpy(d, p, n);
    return d;
}

/* A new queued event for kind on flow f (NULL: none); NULL when out of memory. */
static qev *push(rg_chain *ch, int kind, const rg_flow_info *f, uint64_t ts_ns)
{
    if (ch->nq == ch->capq) {
        size_t cap = ch->capq ? ch->capq * 2 : 64;
        qev *q = realloc(ch->q, cap * sizeof *q);
        if (!q) {
            ch->oom = 1;
            return NULL;
        }
        ch->q = q;
        ch->capq = cap;
    }
    qev *e = &ch->q[ch->nq];
    memset(e, 0, sizeof *e);
    e->ev.kind = (uint16_t)kind;
    e->ev.ts_ns = ts_ns;
    if (f) {
        /* a snapshot: the instance may close (and its keys go) before dispatch */
        const rg_layer_desc *l =
            f->layer < ch->stack->nlayers ? &ch->stack->layers[f->layer] : NULL;
        size_t klen = l ? l->key_len : 0;
        e->flow = *f;
        e->flow.uid = rg_chain_uid(ch, f->uid); /* what the NFs see: unique in the run */
        e->uid = f->uid;
        e->live = (rg_flow_info *)f; /* the instance's own record: only no_bytes is written */
        e->ev.layer = f->layer;
        if (f->key_a && klen) {
            e->flow.key_a = copy_bytes(ch, f->key_a, klen);
            e->flow.key_p = f->key_p == f->key_a ? e->flow.key_a
                            : f->key_p           ? copy_bytes(ch, f->key_p, klen)
                                                 : NULL;
            if (!e->flow.key_a || (f->key_p && !e->flow.key_p)) {
                ch->oom = 1;
                return NULL;
            }
        }
    }
    ch->nq++;
    return e;
}

/* A flow whose bytes no NF wants: the stack's flag, set again on the instance's current record
 * (a lazily created instance moves from the scratch record into the table after its packet). */
static void apply_nobytes(rg_chain *ch, const rg_flow_info *f)
{
    const frec *r = rg_nf_map_get(&ch->flows, f->uid);
    if (r && (r->nobytes_req & ~f->no_bytes)) ((rg_flow_info *)f)->no_bytes |= r->nobytes_req;
}

static void c_call(void *self, const rg_call *c)
{
    rg_chain *ch = self;
    if (c->verdict) ch->slot = c->verdict;
    if (RG_UNLIKELY(ch->nobytes_flows) && c->flow) apply_nobytes(ch, c->flow);
    if (c->handler >= ch->stack->nhandlers || !ch->want_call[c->handler]) return;
    qev *e = push(ch, RG_NF_EV_CALL, c->flow, c->ts_ns);
    if (!e) return;
    const rg_handler_desc *h = &ch->stack->handlers[c->handler];
    e->call = *c;
    if (ch->gpkt) e->call.pkt_no = ch->gpkt; /* --workers: the input's frame number */
    e->ev.layer = c->layer;
    e->ev.dir = c->dir;
    e->ev.end = c->end;
    e->ev.pkt_no = e->call.pkt_no;
    rg_val *args = h->nargs ? arena_alloc(&ch->ar, h->nargs * sizeof *args) : NULL;
    if (h->nargs && !args) goto oom;
    for (unsigned i = 0; i < h->nargs; i++) {
        args[i] = c->args[i];
        if (args[i].kind == RG_VAL_BYTES && args[i].bytes.len) {
            args[i].bytes.ptr = copy_bytes(ch, c->args[i].bytes.ptr, c->args[i].bytes.len);
            if (!args[i].bytes.ptr) goto oom;
        }
    }
    e->call.args = args;
    return;
oom:
    ch->oom = 1;
    ch->nq--;
}

static int want_b(const rg_chain *ch, int kind, unsigned layer)
{
    return layer < ch->stack->nlayers && ch->want_b[(size_t)kind * ch->stack->nlayers + layer];
}

static void c_open(void *self, const rg_flow_info *f, uint64_t ts_ns)
{
    rg_chain *ch = self;
    if (RG_UNLIKELY(ch->nobytes_flows)) apply_nobytes(ch, f);
    if (want_b(ch, RG_NF_EV_OPEN, f->layer)) push(ch, RG_NF_EV_OPEN, f, ts_ns);
}

static void c_packet(void *self, const rg_flow_info *f, int dir, uint32_t len, uint64_t ts_ns)
{
    rg_chain *ch = self;
    if (RG_UNLIKELY(ch->nobytes_flows)) apply_nobytes(ch, f);
    if (!want_b(ch, RG_NF_EV_PACKET, f->layer)) return;
    qev *e = push(ch, RG_NF_EV_PACKET, f, ts_ns);
    if (!e) return;
    e->ev.dir = (uint8_t)dir;
    e->ev.len = len;
}

static void c_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns)
{
    rg_chain *ch = self;
    if (!want_b(ch, RG_NF_EV_CLOSE, f->layer)) {
        /* nobody listens, but states may exist (an unsubscription made one) */
        if (rg_nf_map_get(&ch->flows, f->uid) && push(ch, RG_NF_EV_CLOSE, f, ts_ns))
            ch->q[ch->nq - 1].ev.reason = reason;
        return;
    }
    qev *e = push(ch, RG_NF_EV_CLOSE, f, ts_ns);
    if (!e) return;
    e->ev.reason = reason;
    e->ev.complete = complete;
}

static void c_gap(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                  uint32_t at, uint64_t ts_ns)
{
    rg_chain *ch = self;
    if (!want_b(ch, RG_NF_EV_GAP, f->layer)) return;
    qev *e = push(ch, RG_NF_EV_GAP, f, ts_ns);
    if (!e) return;
    e->ev.dir = (uint8_t)dir;
    e->ev.seq = seq;
    e->ev.len = len;
    e->ev.at = at;
}

static void c_clock_jump(void *self, uint64_t pkt_no, uint64_t pkt_ts_ns, uint64_t clock_ns,
                         int fwd)
{
    rg_chain *ch = self;
    if (!ch->want_clock) return;
    qev *e = push(ch, RG_NF_EV_CLOCK_JUMP, NULL, clock_ns);
    if (!e) return;
    e->ev.pkt_no = pkt_no;
    e->ev.pkt_ts_ns = pkt_ts_ns;
    e->ev.fwd = fwd;
}

static void c_memcap(void *self, const rg_flow_info *f, unsigned layer, int policy, uint64_t asked,
                     uint64_t ts_ns)
{
    rg_chain *ch = self;
    if (!want_b(ch, RG_NF_EV_MEMCAP, layer)) return;
    qev *e = push(ch, RG_NF_EV_MEMCAP, f, ts_ns);
    if (!e) return;
    e->ev.layer = (uint16_t)layer; /* f is NULL when a new instance was asked for */
    e->ev.reason = policy;
    e->ev.asked = asked;
}

static void c_overlap(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                      uint32_t new_bytes, uint32_t old_len, uint32_t new_len, int policy,
                      uint64_t ts_ns)
{
    rg_chain *ch = self;
    if (!want_b(ch, RG_NF_EV_OVERLAP, f->layer)) return;
    qev *e = push(ch, RG_NF_EV_OVERLAP, f, ts_ns);
    if (!e) return;
    e->ev.dir = (uint8_t)dir;
    e->ev.seq = seq;
    e->ev.len = len;
    e->ev.new_bytes = new_bytes;
    e->ev.old_len = old_len;
    e->ev.new_len = new_len;
    e->ev.reason = policy;
}

rg_obs rg_chain_obs(rg_chain *ch)
{
    rg_obs o;
    memset(&o, 0, sizeof o);
    o.self = ch;
    o.on_call = c_call;
    o.on_open = c_open;
    o.on_packet = c_packet;
    o.on_close = c_close;
    o.on_gap = c_gap;
    o.on_clock_jump = c_clock_jump;
    o.on_memcap = c_memcap;
    o.on_overlap = c_overlap;
    return o;
}

/* ---- dispatch ---- */

static int16_t sub_of(const rg_chain *ch, const slot *sl, const qev *e)
{
    switch (e->ev.kind) {
    case RG_NF_EV_CALL:
        return sl->call_sub[e->call.handler];
    case RG_NF_EV_CLOCK_JUMP:
        return sl->clock_sub;
    case RG_NF_EV_NF: {
        int16_t k = sl->usub[e->uev];
        const char *lw = k >= 0 ? sl->abi->subs[k].layer : NULL;
        /* the layer the subscription names: that of the flow the event was raised for */
        if (k < 0 || !lw || !strcmp(lw, "*")) return k;
        return e->ev.layer < ch->stack->nlayers &&
                       layer_matches(&ch->stack->layers[e->ev.layer], lw)
                   ? k
                   : -1;
    }
    default:
        return e->ev.layer < ch->stack->nlayers
                   ? sl->bsub[(size_t)e->ev.kind * ch->stack->nlayers + e->ev.layer]
                   : -1;
    }
}

static void free_flow(rg_chain *ch, uint64_t uid)
{
    frec *r = rg_nf_map_del(&ch->flows, uid);
    if (!r) return;
    if (r->nobytes_req) ch->nobytes_flows--;
    for (unsigned k = 0; k < ch->n; k++) {
        if (ch->idx_of[k] >= r->n) continue;
        fent *fe = &r->e[ch->idx_of[k]];
        if (fe->st && ch->slots[k]->abi->flow_free)
            ch->slots[k]->abi->flow_free(ch->slots[k]->self, fe->st);
        free(fe->st);
    }
    free(r);
}

/* The instance of queued event e, unless it ended in this batch (its record may be reused). */
static rg_flow_info *live_of(const rg_chain *ch, const qev *e)
{
    if (!e->uid) return NULL;
    for (size_t i = 0; i < ch->nq; i++)
        if (ch->q[i].ev.kind == RG_NF_EV_CLOSE && ch->q[i].uid == e->uid) return NULL;
    return e->live->uid == e->uid ? e->live : NULL;
}

/* Give e to slot position k (if it subscribed), raising *verdict to what it returns. */
static void deliver(rg_chain *ch, unsigned k, qev *e, int *verdict, const rg_flow_info **vflow)
{
    slot *sl = ch->slots[k];
    unsigned idx = ch->idx_of[k];
    int16_t sub = sub_of(ch, sl, e);
    if (sub < 0) return;
    void *st = NULL;
    if (e->uid && sl->uses_flow_rec) {
        fent *fe = fent_of(&ch->flows, e->uid, idx, sl->abi->flow_state_size > 0);
        if (fe && (fe->unsub >> (sub & 63) & 1) && sub < 64) return;
        /* the data of a direction this NF wants no more bytes of */
        if (fe && (fe->nobytes >> (e->ev.dir & 1) & 1) && e->ev.kind == RG_NF_EV_CALL &&
            ch->data_arg[e->call.handler] >= 0)
            return;
        if (sl->abi->flow_state_size) {
            if (fe && !fe->st) fe->st = calloc(1, sl->abi->flow_state_size);
            if (!fe || !fe->st) {
                ch->oom = 1;
                return; /* the NF cannot run without its state */
            }
            st = fe->st;
        }
    }
    e->ev.flow = e->uid ? &e->flow : NULL;
    e->call.flow = e->ev.flow;
    e->ev.call = e->ev.kind == RG_NF_EV_CALL ? &e->call : NULL;
    e->ev.sub = (uint16_t)sub;
    e->ev.host = &ch->host;
    if (e->ev.kind == RG_NF_EV_NF) {
        const uevent *u = &ch->uev[e->uev];
        e->ev.nf_event = u->name;
        e->ev.field_names = (const char *const *)u->fnames;
        e->ev.fields = e->fields;
        e->ev.nfields = u->nfields;
        e->ev.raiser = e->raiser;
    }
    dispatch_ref ref = {ch, idx, k, e->uid, e};
    e->ev.host_ref = &ref;
    int v = sl->abi->subs[sub].fn(sl->self, &e->ev, st);
    e->ev.host_ref = NULL;
    if (v > *verdict && v <= RG_REJECT_MAX) { /* others: not a verdict */
        *verdict = v;
        *vflow = live_of(ch, e);
    }
}

void rg_chain_batch_end(void *self)
{
    rg_chain *ch = self;
    int verdict = RG_PASS;
    const rg_flow_info *vflow = NULL; /* the instance of the strongest verdict */
    if (ch->oom) {
        fprintf(stderr, "rg: NF chain: out of memory: events lost\n");
        ch->oom = 0;
    }
    for (unsigned k = 0; k < ch->n && verdict < RG_DROP; k++) {
        for (size_t i = 0; i < ch->nq; i++)
            deliver(ch, k, &ch->q[i], &verdict, &vflow);
        /* then what the NFs before it raised (nrq grows while an NF raises) */
        for (size_t i = 0; i < ch->nrq; i++)
            if (ch->rq[i]->raiser < k) deliver(ch, k, ch->rq[i], &verdict, &vflow);
    }
    /* closed flows: their states go, whether or not every NF saw the close */
    for (size_t i = 0; i < ch->nq; i++)
        if (ch->q[i].ev.kind == RG_NF_EV_CLOSE && ch->q[i].uid) free_flow(ch, ch->q[i].uid);
    ch->nq = 0;
    ch->nrq = 0;
    arena_reset(&ch->ar);
    ch->verdict = verdict;
    /* the packet's verdict, with the handlers' (the driver reads it after the packet) */
    rg_verdict_give(ch->slot, vflow, verdict);
}

/* ---- host functions ---- */

/* The chain whose host this is (host is a member of rg_chain). */
static rg_chain *chain_of_host(const rg_nf_host *host)
{
    return (rg_chain *)(void *)((char *)(uintptr_t)host - offsetof(rg_chain, host));
}

static void *host_out_open(const rg_nf_host *host, const char *path, char *err, size_t errlen)
{
    if (!host || !path) {
        snprintf(err, errlen, "out_open: no path");
        return NULL;
    }
    const rg_chain *ch = chain_of_host(host);
    /* --workers (even 1): flow records name their worker, as the merge of old did */
    return rg_out_open(path, host->worker, ch->wdirs ? RG_OUT_TAG : 0, err, errlen);
}

static int host_out_write(void *out, const char *rec, size_t len)
{
    return out && rec ? rg_out_write(out, rec, len) : RG_EINVAL;
}

static int host_out_close(void *out, char *err, size_t errlen)
{
    return rg_out_close(out, err, errlen);
}

static int host_subscribe(const rg_nf_ev *ev, unsigned sub, int on)
{
    const dispatch_ref *ref = ev ? ev->host_ref : NULL;
    if (!ref || !ref->uid || sub >= 64) return RG_EINVAL;
    rg_chain *ch = ref->ch;
    slot *sl = ch->slots[ref->pos];
    if (sub >= sl->abi->nsubs) return RG_EINVAL;
    fent *fe = fent_of(&ch->flows, ref->uid, ref->idx, !on);
    if (!fe) return on ? RG_OK : RG_ENOMEM;
    if (on)
        fe->unsub &= ~(UINT64_C(1) << sub);
    else
        fe->unsub |= UINT64_C(1) << sub;
    sl->uses_flow_rec = 1;
    /* its state goes at close: collect the close even if nobody subscribed it */
    return RG_OK;
}

/* Slot position k still wants the bytes of direction dir of layer l's flow r: it subscribed
 * to a handler of that layer, did not drop all such subscriptions for the flow, and did not
 * say no_more_bytes. */
static int wants_bytes(const rg_chain *ch, unsigned k, const frec *r, unsigned l, int dir)
{
    const slot *sl = ch->slots[k];
    const fent *fe = r && ch->idx_of[k] < r->n ? &r->e[ch->idx_of[k]] : NULL;
    if (fe && (fe->nobytes >> dir & 1)) return 0;
    for (unsigned h = 0; h < ch->stack->nhandlers; h++) {
        if (ch->stack->handlers[h].layer != l || sl->call_sub[h] < 0) continue;
        unsigned sub = (unsigned)sl->call_sub[h];
        if (!fe || sub >= 64 || !(fe->unsub >> sub & 1)) return 1;
    }
    return 0;
}

static int host_no_more_bytes(const rg_nf_ev *ev, int dir)
{
    const dispatch_ref *ref = ev ? ev->host_ref : NULL;
    if (!ref || !ref->uid || (dir != 0 && dir != 1)) return RG_EINVAL;
    rg_chain *ch = ref->ch;
    const qev *e = ref->e;
    unsigned l = e->flow.layer;
    if (l >= ch->stack->nlayers || !ch->stack->layers[l].has_seq) return RG_EINVAL;
    fent *fe = fent_of(&ch->flows, ref->uid, ref->idx, 1);
    if (!fe) return RG_ENOMEM;
    frec *r = rg_nf_map_get(&ch->flows, ref->uid); /* after fent_of: it may have moved */
    ch->slots[ref->pos]->uses_flow_rec = 1;
    fe->nobytes |= (uint8_t)(1u << dir);
    if (r->nobytes_req >> dir & 1) return RG_OK;
    for (unsigned k = 0; k < ch->n; k++)
        if (wants_bytes(ch, k, r, l, dir)) return RG_OK; /* recorded: the last one decides */
    if (!r->nobytes_req) ch->nobytes_flows++;
    r->nobytes_req |= (uint8_t)(1u << dir);
    rg_flow_info *live = live_of(ch, e);
    if (live) apply_nobytes(ch, live);
    return RG_OK;
}

static int host_raise(const rg_nf_ev *ev, const char *event, const rg_val *fields, unsigned nfields)
{
    const dispatch_ref *ref = ev ? ev->host_ref : NULL;
    if (!ref || !event || (nfields && !fields)) return RG_EINVAL;
    rg_chain *ch = ref->ch;
    int id = rg_chain_event_id(ch, event);
    if (id < 0 || !(ch->slots[ref->pos]->raises >> id & 1)) return RG_EINVAL;
    const uevent *u = &ch->uev[id];
    if (nfields != u->nfields) return RG_EINVAL;
    for (unsigned i = 0; i < nfields; i++)
        if (fields[i].kind != u->kinds[i]) return RG_EINVAL;
    if (ch->nrq == ch->caprq) {
        size_t cap = ch->caprq ? ch->caprq * 2 : 16;
        qev **rq = realloc(ch->rq, cap * sizeof *rq);
        if (!rq) return RG_ENOMEM;
        ch->rq = rq;
        ch->caprq = cap;
    }
    const qev *src = ref->e;
    qev *e = arena_alloc(&ch->ar, sizeof *e);
    rg_val *vals = nfields ? arena_alloc(&ch->ar, nfields * sizeof *vals) : NULL;
    if (!e || (nfields && !vals)) return RG_ENOMEM;
    memset(e, 0, sizeof *e);
    e->ev.kind = RG_NF_EV_NF;
    e->ev.dir = src->ev.dir;
    e->ev.layer = src->ev.layer;
    e->ev.ts_ns = src->ev.ts_ns;
    e->ev.pkt_no = src->ev.pkt_no;
    e->flow = src->flow; /* its keys are in the arena already */
    e->uid = src->uid;
    e->live = src->live;
    e->uev = (unsigned)id;
    e->raiser = ref->pos;
    for (unsigned i = 0; i < nfields; i++) {
        vals[i] = fields[i];
        vals[i].bytes.ptr = NULL;
        if (fields[i].kind == RG_VAL_BYTES && fields[i].bytes.len) {
            vals[i].bytes.ptr = copy_bytes(ch, fields[i].bytes.ptr, fields[i].bytes.len);
            if (!vals[i].bytes.ptr) return RG_ENOMEM;
        } else if (fields[i].kind == RG_VAL_BYTES) {
            vals[i].bytes.len = 0;
        }
    }
    e->fields = vals;
    ch->rq[ch->nrq++] = e;
    return RG_OK;
}

static int host_inject(const rg_nf_ev *ev, unsigned what)
{
    const dispatch_ref *ref = ev ? ev->host_ref : NULL;
    if (!ref || !what || (what & ~(unsigned)(RG_INJECT_RST_SENDER | RG_INJECT_RST_RECEIVER)))
        return RG_EINVAL;
    const qev *e = ref->e;
    /* only what a packet brought has a frame to build from; a batch without one (expiry, the
     * final flush) would put the frames after the next packet */
    if (e->ev.kind == RG_NF_EV_CLOSE || e->ev.kind == RG_NF_EV_CLOCK_JUMP || e->ev.end ||
        (e->ev.kind == RG_NF_EV_CALL && e->call.end))
        return RG_EINVAL;
    ref->ch->inject |= what;
    return RG_OK;
}
