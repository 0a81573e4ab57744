/* rg_flowdump.c - `rubikgen ctl SOCK flows`: each worker's open instances, tracked by an
 * observer wrapped around the chain's (on_open / on_packet / on_close; only with --control,
 * so a run without a control socket pays nothing), listed as JSON lines between two bursts
 * on the worker's own thread (rg_live.c), with a small filter language:
 *
 *     EXPR := TERM { ("and" | "&&") TERM }
 *     TERM := FIELD OP VALUE          OP: == != < <= > >=
 *     FIELD := [PROTO "."] NAME       NAME: layer proto state src dst sport dport port
 *                                     worker uid packets bytes age idle verdict
 *
 * PROTO (tcp.dport) also requires the instance's protocol or layer to be PROTO; "port" is
 * either port, "packets"/"bytes" both directions added; age and idle are seconds of packet
 * time; text fields compare as text (== and != only), numbers as numbers. */
#include <arpa/inet.h>
#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "rg/rg_json.h"
#include "rg/rg_uidmap.h"
#include "rg_live.h"
#include "rg_nfchain.h" /* rg_uid_global */

/* An open instance as last seen.  The stack's record is not always where its callbacks
 * point: an instance created lazily (fast-destroy) is built in a scratch record reused by the
 * next one, its keys in the packet's buffers.  So the keys are copied while a callback holds
 * them, and the state and verdict marks at the end of each packet that touched the instance
 * (the PSM moves after on_packet), when the record its callbacks named still holds it.  That
 * record may have been freed in the packet without a close (an instance moved to the linger
 * table): its pool memory stays, with the uid and the last state it had, which is what is
 * wanted; sanitized builds, where the freed record is poisoned, keep the callback's copy. */
typedef struct ftrec {
    rg_flow_info fi;       /* the copy: key_a and key_p point into key */
    const rg_flow_info *f; /* where this packet's callbacks found it (valid until its end) */
    uint64_t first_ts, last_ts;
    uint64_t pkts[2], bytes[2];
    int touched;   /* in the table's touched list */
    uint8_t key[]; /* the forward then the swapped key */
} ftrec;

struct rg_flowtab {
    rg_obs obs; /* what the stack calls */
    rg_obs in;  /* the chain's */
    const rg_stack_desc *stack;
    unsigned worker, nworkers;
    rg_nf_map map; /* uid -> ftrec (the context's uids; shown as the run's, rg_uid_global) */
    uint64_t now;  /* the latest packet time seen */
    /* the uids the current packet touched, refreshed at its end (rg_flowtab_packet_end) */
    uint64_t *touched;
    size_t ntouched, touched_cap;
    /* Instances opened during the current packet, kept here until its end: most end with
     * the packet that opened them (an unfragmented datagram's IP instance), and those cost
     * no allocation and no map insert.  Slots of slot_size bytes (an ftrec and two keys of the
     * stack's longest); a slot whose uid is 0 was closed in the packet. */
    uint8_t *pend;
    size_t npend, pend_cap, slot_size;
    void (*next_end)(void *self); /* the feeder's batch_end it runs before */
    void *next_self;
};

/* The copy of what f says now (its keys only at creation: they do not change). */
static void refresh(ftrec *r, const rg_flow_info *f)
{
    r->fi.state = f->state;
    r->fi.flags = f->flags;
    r->fi.linger = f->linger;
    r->fi.memcap = f->memcap;
}

static void touch(rg_flowtab *t, ftrec *r, const rg_flow_info *f)
{
    r->f = f;
    refresh(r, f);
    if (r->touched) return;
    if (t->ntouched == t->touched_cap) {
        size_t cap = t->touched_cap ? t->touched_cap * 2 : 16;
        uint64_t *p = realloc(t->touched, cap * sizeof *p);
        if (!p) return; /* its copy stays as of this callback */
        t->touched = p;
        t->touched_cap = cap;
    }
    t->touched[t->ntouched++] = f->uid;
    r->touched = 1;
}

static ftrec *pend_slot(const rg_flowtab *t, size_t i)
{
    return (ftrec *)(void *)(t->pend + i * t->slot_size);
}

/* The slot of an instance opened in this packet, or NULL. */
static ftrec *pend_find(const rg_flowtab *t, uint64_t uid)
{
    for (size_t i = t->npend; i-- > 0;) {
        ftrec *r = pend_slot(t, i);
        if (r->fi.uid == uid) return r;
    }
    return NULL;
}

static ftrec *rec_of(rg_flowtab *t, const rg_flow_info *f, uint64_t ts)
{
    ftrec *r = t->npend ? pend_find(t, f->uid) : NULL;
    if (!r) r = rg_nf_map_get(&t->map, f->uid);
    if (r) {
        touch(t, r, f);
        return r;
    }
    if (t->npend == t->pend_cap) {
        size_t cap = t->pend_cap ? t->pend_cap * 2 : 8;
        uint8_t *p = realloc(t->pend, cap * t->slot_size);
        if (!p) return NULL;
        t->pend = p;
        t->pend_cap = cap;
    }
    r = pend_slot(t, t->npend++);
    const uint16_t kl = f->layer < t->stack->nlayers ? t->stack->layers[f->layer].key_len : 0;
    memset(r, 0, sizeof *r);
    r->fi.uid = f->uid;
    r->fi.layer = f->layer;
    if (kl && f->key_a) memcpy(r->key, f->key_a, kl);
    if (kl && f->key_p) memcpy(r->key + kl, f->key_p, kl);
    /* key_a/key_p are set when the slot becomes a record (slots move as the array grows);
     * unidirectional: both point to the one key */
    r->fi.key_p = f->key_p == f->key_a ? NULL : r->key;
    r->first_ts = r->last_ts = ts;
    touch(t, r, f);
    return r;
}

/* This packet's instances still open become records of the table. */
static void pend_commit(rg_flowtab *t)
{
    for (size_t i = 0; i < t->npend; i++) {
        const ftrec *s = pend_slot(t, i);
        if (!s->fi.uid) continue; /* opened and closed in the packet */
        const uint16_t kl =
            s->fi.layer < t->stack->nlayers ? t->stack->layers[s->fi.layer].key_len : 0;
        ftrec *r = malloc(sizeof *r + 2u * kl);
        if (!r) continue;
        memcpy(r, s, sizeof *r + 2u * kl);
        r->fi.key_a = r->key;
        r->fi.key_p = s->fi.key_p ? r->key + kl : r->key;
        if (rg_nf_map_put(&t->map, r->fi.uid, r)) free(r);
    }
    t->npend = 0;
}

void rg_flowtab_packet_end(void *self)
{
    rg_flowtab *t = self;
    if (t->npend) pend_commit(t);
    for (size_t i = 0; i < t->ntouched; i++) {
        ftrec *r = rg_nf_map_get(&t->map, t->touched[i]);
        if (!r) continue; /* closed in the packet */
        if (r->f && !RG_POISONED(r->f, sizeof *r->f) && r->f->uid == r->fi.uid) refresh(r, r->f);
        r->touched = 0;
        r->f = NULL;
    }
    t->ntouched = 0;
    if (t->next_end) t->next_end(t->next_self);
}

void rg_flowtab_chain_end(rg_flowtab *ft, void (*end)(void *self), void *self)
{
    ft->next_end = end;
    ft->next_self = self;
}

static void t_open(void *self, const rg_flow_info *f, uint64_t ts)
{
    rg_flowtab *t = self;
    rec_of(t, f, ts);
    if (ts > t->now) t->now = ts;
    if (t->in.on_open) t->in.on_open(t->in.self, f, ts);
}

static void t_packet(void *self, const rg_flow_info *f, int dir, uint32_t len, uint64_t ts)
{
    rg_flowtab *t = self;
    ftrec *r = rec_of(t, f, ts);
    if (r) {
        r->pkts[dir != 0]++;
        r->bytes[dir != 0] += len;
        r->last_ts = ts;
    }
    if (ts > t->now) t->now = ts;
    if (t->in.on_packet) t->in.on_packet(t->in.self, f, dir, len, ts);
}

static void t_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts)
{
    rg_flowtab *t = self;
    if (t->in.on_close) t->in.on_close(t->in.self, f, reason, complete, ts);
    ftrec *p = t->npend ? pend_find(t, f->uid) : NULL;
    if (p)
        p->fi.uid = 0;
    else
        free(rg_nf_map_del(&t->map, f->uid));
}

static void t_call(void *self, const rg_call *c)
{
    rg_flowtab *t = self;
    t->in.on_call(t->in.self, c);
}

static void t_gap(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                  uint32_t at, uint64_t ts)
{
    rg_flowtab *t = self;
    t->in.on_gap(t->in.self, f, dir, seq, len, at, ts);
}

static void t_clock(void *self, uint64_t pkt_no, uint64_t pkt_ts, uint64_t clock_ns, int fwd)
{
    rg_flowtab *t = self;
    t->in.on_clock_jump(t->in.self, pkt_no, pkt_ts, clock_ns, fwd);
}

static void t_memcap(void *self, const rg_flow_info *f, unsigned layer, int policy, uint64_t asked,
                     uint64_t ts)
{
    rg_flowtab *t = self;
    t->in.on_memcap(t->in.self, f, layer, policy, asked, ts);
}

static void t_overlap(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                      uint32_t new_bytes, uint32_t old_len, uint32_t new_len, int policy,
                      uint64_t ts)
{
    rg_flowtab *t = self;
    t->in.on_overlap(t->in.self, f, dir, seq, len, new_bytes, old_len, new_len, policy, ts);
}

rg_flowtab *rg_flowtab_new(const rg_stack_desc *stack, unsigned worker, unsigned nworkers,
                           const rg_obs *inner)
{
    rg_flowtab *t = calloc(1, sizeof *t);
    if (!t || rg_nf_map_init(&t->map)) {
        free(t);
        return NULL;
    }
    t->nworkers = nworkers;
    t->stack = stack;
    t->worker = worker;
    uint16_t maxkl = 0;
    for (unsigned i = 0; i < stack->nlayers; i++)
        if (stack->layers[i].key_len > maxkl) maxkl = stack->layers[i].key_len;
    t->slot_size = (sizeof(ftrec) + 2u * maxkl + 7u) & ~(size_t)7u;
    t->in = *inner;
    /* the callbacks the chain has, passed on; open, packet and close always */
    t->obs = (rg_obs){.self = t,
                      .on_call = inner->on_call ? t_call : NULL,
                      .on_open = t_open,
                      .on_packet = t_packet,
                      .on_close = t_close,
                      .on_gap = inner->on_gap ? t_gap : NULL,
                      .on_clock_jump = inner->on_clock_jump ? t_clock : NULL,
                      .on_memcap = inner->on_memcap ? t_memcap : NULL,
                      .on_overlap = inner->on_overlap ? t_overlap : NULL,
                      /* one-packet instances are no open flows: left out as the chain says */
                      .quiet_transient = inner->quiet_transient};
    return t;
}

const rg_obs *rg_flowtab_obs(rg_flowtab *ft)
{
    return &ft->obs;
}

static void free_val(void *ctx, void *v)
{
    (void)ctx;
    free(v);
}

void rg_flowtab_free(rg_flowtab *ft)
{
    if (!ft) return;
    rg_nf_map_drain(&ft->map, free_val, NULL);
    free(ft->touched);
    free(ft->pend);
    free(ft);
}

/* ---- the key as text ---- */

typedef struct flowtext {
    char src[48], dst[48];
    int sport, dport; /* -1: none */
} flowtext;

static void addr_text(const uint8_t *p, uint16_t size, char *out, size_t n)
{
    if (!inet_ntop(size == 4 ? AF_INET : AF_INET6, p, out, (socklen_t)n)) out[0] = 0;
}

static uint64_t num_of(const uint8_t *p, uint16_t size)
{
    uint64_t v = 0;
    for (uint16_t i = 0; i < size && i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* The endpoints, by the rule of the stock NFs' records (rg_nf.h rg_nf_endpoints). */
static void text_of(const rg_layer_desc *l, const rg_flow_info *f, flowtext *x)
{
    memset(x, 0, sizeof *x);
    x->sport = x->dport = -1;
    int addrs = 0;
    for (uint16_t i = 0; i < l->nparts; i++) {
        const rg_keypart *k = &l->parts[i];
        if (k->kind == RG_VAL_BYTES && (k->size == 4 || k->size == 16) && k->common != 1) {
            if (!addrs && l->bidir) {
                addr_text(f->key_a + k->off, k->size, x->src, sizeof x->src);
                addr_text(f->key_p + k->off, k->size, x->dst, sizeof x->dst);
            } else if (!l->bidir) {
                addr_text(f->key_a + k->off, k->size, addrs ? x->dst : x->src, sizeof x->src);
            }
            addrs++;
        } else if (k->kind == RG_VAL_NUM && k->size == 2 && k->common == 0 && l->bidir &&
                   x->sport < 0) {
            x->sport = (int)num_of(f->key_a + k->off, 2);
            x->dport = (int)num_of(f->key_p + k->off, 2);
        }
    }
}

static const char *state_of(const rg_layer_desc *l, const rg_flow_info *f)
{
    return l->has_psm && f->state < l->nstates ? l->states[f->state] : NULL;
}

static const char *verdict_of(const rg_flow_info *f)
{
    return f->flags & RG_FI_DROP ? "drop" : f->flags & RG_FI_BYPASS ? "bypass" : "pass";
}

/* ---- the filter ---- */

enum field {
    F_LAYER,
    F_PROTO,
    F_STATE,
    F_SRC,
    F_DST,
    F_SPORT,
    F_DPORT,
    F_PORT,
    F_WORKER,
    F_UID,
    F_PACKETS,
    F_BYTES,
    F_AGE,
    F_IDLE,
    F_VERDICT,
    F_N
};
static const char *const field_names[F_N] = {"layer",   "proto", "state", "src",    "dst",
                                             "sport",   "dport", "port",  "worker", "uid",
                                             "packets", "bytes", "age",   "idle",   "verdict"};
enum { OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE };

typedef struct term {
    char scope[32]; /* "" or the PROTO of PROTO.FIELD */
    int field, op;
    char text[64];
    double num;
} term;

struct rg_flowfilter {
    unsigned n;
    term t[16];
};

static int is_text(int field)
{
    return field <= F_DST || field == F_VERDICT;
}

/* The next word of s at *i (letters, digits, '_', '.', ':', '-'; or a quoted string). */
static int word(const char *s, size_t *i, char *out, size_t n)
{
    size_t k = 0;
    if (s[*i] == '"' || s[*i] == '\'') {
        char q = s[(*i)++];
        while (s[*i] && s[*i] != q) {
            if (k + 1 >= n) return -1;
            out[k++] = s[(*i)++];
        }
        if (s[*i] != q) return -1;
        (*i)++;
    } else {
        while (s[*i] && (isalnum((unsigned char)s[*i]) || strchr("_.:-/", s[*i]))) {
            if (k + 1 >= n) return -1;
            out[k++] = s[(*i)++];
        }
        if (!k) return -1;
    }
    out[k] = 0;
    return 0;
}

static void skip_ws(const char *s, size_t *i)
{
    while (s[*i] == ' ')
        (*i)++;
}

rg_flowfilter *rg_flowfilter_parse(const char *s, char *err, size_t errlen)
{
    rg_flowfilter *f = calloc(1, sizeof *f);
    size_t i = 0;
    if (!f) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (;;) {
        skip_ws(s, &i);
        if (f->n == sizeof f->t / sizeof f->t[0]) {
            snprintf(err, errlen, "at column %zu: more than 16 terms", i + 1);
            goto bad;
        }
        term *t = &f->t[f->n];
        char name[96];
        size_t at = i;
        if (word(s, &i, name, sizeof name) || name[0] == '"') {
            snprintf(err, errlen, "at column %zu: expected a field (%s, ...)", at + 1,
                     "layer, proto, state, src, dst, sport, dport, port, worker, uid, packets, "
                     "bytes, age, idle, verdict");
            goto bad;
        }
        char *dot = strrchr(name, '.');
        const char *fname = name;
        if (dot) {
            *dot = 0;
            if (strlen(name) >= sizeof t->scope) {
                snprintf(err, errlen, "at column %zu: '%s' is too long", at + 1, name);
                goto bad;
            }
            strcpy(t->scope, name);
            fname = dot + 1;
        }
        t->field = -1;
        for (int k = 0; k < F_N; k++)
            if (!strcmp(fname, field_names[k])) t->field = k;
        if (t->field < 0) {
            snprintf(err, errlen,
                     "at column %zu: unknown field '%s' (layer, proto, state, src, dst, sport, "
                     "dport, port, worker, uid, packets, bytes, age, idle, verdict)",
                     at + 1 + (size_t)(fname - name), fname);
            goto bad;
        }
        skip_ws(s, &i);
        static const char *const ops[] = {"==", "!=", "<=", ">=", "<", ">"};
        static const int opv[] = {OP_EQ, OP_NE, OP_LE, OP_GE, OP_LT, OP_GT};
        int op = -1;
        for (int k = 0; k < 6 && op < 0; k++)
            if (!strncmp(s + i, ops[k], strlen(ops[k]))) {
                op = opv[k];
                i += strlen(ops[k]);
            }
        if (op < 0) {
            snprintf(err, errlen, "at column %zu: expected an operator (== != < <= > >=)", i + 1);
            goto bad;
        }
        t->op = op;
        skip_ws(s, &i);
        at = i;
        if (word(s, &i, t->text, sizeof t->text)) {
            snprintf(err, errlen, "at column %zu: expected a value", at + 1);
            goto bad;
        }
        if (is_text(t->field)) {
            if (op != OP_EQ && op != OP_NE) {
                snprintf(err, errlen, "at column %zu: %s is text: == or != only", at + 1,
                         field_names[t->field]);
                goto bad;
            }
        } else {
            char *end;
            t->num = strtod(t->text, &end);
            if (*end || end == t->text) {
                snprintf(err, errlen, "at column %zu: %s takes a number, not '%s'", at + 1,
                         field_names[t->field], t->text);
                goto bad;
            }
        }
        f->n++;
        skip_ws(s, &i);
        if (!s[i]) return f;
        if (!strncmp(s + i, "and", 3) && (s[i + 3] == ' ' || s[i + 3] == '(')) {
            i += 3;
        } else if (!strncmp(s + i, "&&", 2)) {
            i += 2;
        } else {
            snprintf(err, errlen, "at column %zu: expected 'and' or the end", i + 1);
            goto bad;
        }
    }
bad:
    free(f);
    return NULL;
}

void rg_flowfilter_free(rg_flowfilter *f)
{
    free(f);
}

static int cmp_num(double a, int op, double b)
{
    switch (op) {
    case OP_EQ:
        return a == b;
    case OP_NE:
        return a != b;
    case OP_LT:
        return a < b;
    case OP_LE:
        return a <= b;
    case OP_GT:
        return a > b;
    default:
        return a >= b;
    }
}

typedef struct flowview {
    const rg_layer_desc *l;
    const ftrec *r;
    const flowtext *x;
    const char *state;
    unsigned worker;
    uint64_t uid; /* the run's (rg_uid_global) */
    double age, idle;
} flowview;

static int term_takes(const term *t, const flowview *v)
{
    if (t->scope[0] && strcmp(t->scope, v->l->protocol) && strcmp(t->scope, v->l->name)) return 0;
    const char *s = NULL;
    double n = 0;
    switch (t->field) {
    case F_LAYER:
        s = v->l->name;
        break;
    case F_PROTO:
        s = v->l->protocol;
        break;
    case F_STATE:
        s = v->state ? v->state : "";
        break;
    case F_SRC:
        s = v->x->src;
        break;
    case F_DST:
        s = v->x->dst;
        break;
    case F_VERDICT:
        s = verdict_of(&v->r->fi);
        break;
    case F_SPORT:
    case F_DPORT:
    case F_PORT: {
        const int a = v->x->sport, b = v->x->dport;
        if (a < 0) return 0;
        if (t->field == F_PORT) /* either port: != means neither */
            return t->op == OP_NE ? cmp_num(a, OP_NE, t->num) && cmp_num(b, OP_NE, t->num)
                                  : cmp_num(a, t->op, t->num) || cmp_num(b, t->op, t->num);
        n = t->field == F_SPORT ? a : b;
        break;
    }
    case F_WORKER:
        n = v->worker;
        break;
    case F_UID:
        n = (double)v->uid;
        break;
    case F_PACKETS:
        n = (double)(v->r->pkts[0] + v->r->pkts[1]);
        break;
    case F_BYTES:
        n = (double)(v->r->bytes[0] + v->r->bytes[1]);
        break;
    case F_AGE:
        n = v->age;
        break;
    default:
        n = v->idle;
        break;
    }
    if (s) return (strcmp(s, t->text) == 0) == (t->op == OP_EQ);
    return cmp_num(n, t->op, t->num);
}

/* ---- the listing ---- */

static int by_uid(const void *a, const void *b)
{
    const ftrec *x = *(const ftrec *const *)a, *y = *(const ftrec *const *)b;
    return x->fi.uid < y->fi.uid ? -1 : x->fi.uid > y->fi.uid;
}

static void key_json(rg_sbuf *b, const rg_layer_desc *l, const rg_flow_info *f)
{
    rg_sbuf_printf(b, "{");
    for (uint16_t i = 0; i < l->nparts; i++) {
        const rg_keypart *k = &l->parts[i];
        const uint8_t *p = f->key_a + k->off;
        rg_sbuf_printf(b, "%s\"%s\":", i ? "," : "", k->name);
        if (k->kind == RG_VAL_NUM && k->size <= 8) {
            rg_sbuf_printf(b, "%" PRIu64, num_of(p, k->size));
        } else if (k->size == 4 || k->size == 16) {
            char t[48];
            addr_text(p, k->size, t, sizeof t);
            rg_sbuf_printf(b, "\"%s\"", t);
        } else {
            rg_sbuf_printf(b, "\"");
            for (uint16_t j = 0; j < k->size; j++)
                rg_sbuf_printf(b, "%02x", p[j]);
            rg_sbuf_printf(b, "\"");
        }
    }
    rg_sbuf_printf(b, "}");
}

/* "src":..,"dst":..,"sport":..,"dport":..,"key":.. of an instance (x: its text_of). */
static void endpoints_json(rg_sbuf *b, const rg_layer_desc *l, const rg_flow_info *f,
                           const flowtext *x)
{
    rg_sbuf_printf(b, "\"src\":%s%s%s,\"dst\":%s%s%s", x->src[0] ? "\"" : "",
                   x->src[0] ? x->src : "null", x->src[0] ? "\"" : "", x->dst[0] ? "\"" : "",
                   x->dst[0] ? x->dst : "null", x->dst[0] ? "\"" : "");
    if (x->sport >= 0)
        rg_sbuf_printf(b, ",\"sport\":%d,\"dport\":%d", x->sport, x->dport);
    else
        rg_sbuf_printf(b, ",\"sport\":null,\"dport\":null");
    rg_sbuf_printf(b, ",\"key\":");
    key_json(b, l, f);
}

uint64_t rg_flowtab_dump(const rg_flowtab *ft, const char *layer, const rg_flowfilter *filter,
                         uint64_t limit, rg_sbuf *out)
{
    const rg_nf_map *m = &ft->map;
    ftrec **all = m->n ? malloc(m->n * sizeof *all) : NULL;
    size_t n = 0;
    if (m->n && !all) {
        out->oom = 1;
        return 0;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i]) all[n++] = m->vals[i];
    qsort(all, n, sizeof *all, by_uid);
    uint64_t k = 0;
    for (size_t i = 0; i < n && k < limit; i++) {
        const ftrec *r = all[i];
        const rg_flow_info *f = &r->fi;
        if (f->layer >= ft->stack->nlayers) continue;
        const rg_layer_desc *l = &ft->stack->layers[f->layer];
        if (layer && strcmp(layer, l->name)) continue;
        flowtext x;
        text_of(l, f, &x);
        flowview v = {l,
                      r,
                      &x,
                      state_of(l, f),
                      ft->worker,
                      rg_uid_global(f->uid, ft->worker, ft->nworkers),
                      (double)(ft->now - r->first_ts) / 1e9,
                      (double)(ft->now - r->last_ts) / 1e9};
        int take = 1;
        for (unsigned j = 0; filter && take && j < filter->n; j++)
            take = term_takes(&filter->t[j], &v);
        if (!take) continue;
        k++;
        rg_sbuf_printf(out, "{\"worker\":%u,\"layer\":\"%s\",\"proto\":\"%s\",\"uid\":%" PRIu64,
                       ft->worker, l->name, l->protocol, v.uid);
        rg_sbuf_printf(out, ",");
        endpoints_json(out, l, f, &x);
        rg_sbuf_printf(out,
                       ",\"state\":%s%s%s,\"packets\":[%" PRIu64 ",%" PRIu64 "],\"bytes\":[%" PRIu64
                       ",%" PRIu64 "],\"first_ts\":%" PRIu64 ",\"last_ts\":%" PRIu64
                       ",\"age_s\":%.3f,\"idle_s\":%.3f,\"verdict\":\"%s\",\"lingering\":%s}\n",
                       v.state ? "\"" : "", v.state ? v.state : "null", v.state ? "\"" : "",
                       r->pkts[0], r->pkts[1], r->bytes[0], r->bytes[1], r->first_ts, r->last_ts,
                       v.age, v.idle, verdict_of(f), f->linger ? "true" : "false");
    }
    free(all);
    return k;
}

void rg_key_json(rg_sbuf *b, const rg_layer_desc *l, const uint8_t *key_a, const uint8_t *key_p)
{
    rg_flow_info f;
    memset(&f, 0, sizeof f);
    f.key_a = key_a;
    f.key_p = key_p;
    flowtext x;
    text_of(l, &f, &x);
    endpoints_json(b, l, &f, &x);
}
