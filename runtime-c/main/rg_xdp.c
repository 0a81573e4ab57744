/* rg_xdp.c - --xdp OBJ: the stack's XDP program (rubikgen build --xdp; docs/xdp.md) on the
 * capture interface, fed by the run's flow verdicts.
 *
 * An observer wrapped around the run's (the one the stack calls) notes the instances each
 * packet touches; at the packet's end (the feeder's batch_end, after the NF chain's) an
 * instance that now carries RG_FI_DROP or RG_FI_BYPASS (rules, handlers, NFs, a memcap
 * drop-flow) or was bypassed by a memcap policy gets its key into rg_drop or rg_bypass: the
 * key the program computes (its layer's index, its length, the smaller of the forward and the
 * swapped key), so its later frames, both ways, stop in the kernel.  When the instance ends
 * in user space (idle timeout, eviction, the final flush) the entry is read and deleted, and
 * the frames the kernel counted are shown to the observers the stack's record has (per
 * direction, the flow layer's input bytes) before its close: the records (flowstats, eve,
 * conv...) carry every packet of the flow.  Later frames of a flow whose entry went find no
 * entry and reach user space again (a new instance).
 *
 * The program is attached through a BPF link: the kernel detaches it when the link's last
 * descriptor closes, at the end of the run or when the process dies. */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rg/rg_uidmap.h"
#include "rg_xdp.h"

#define KEY_MAX 40 /* RGX_KEY_MAX */

struct xkey { /* struct rgx_key */
    uint32_t layer, len;
    uint8_t k[KEY_MAX];
};
struct fcount { /* struct rgx_fcount */
    uint64_t packets, bytes, dir_packets[2], dir_bytes[2];
};

/* an instance the current packet touched, with its key (valid in the callback only) */
typedef struct touched {
    const rg_flow_info *f;
    uint64_t uid;
    uint64_t ts;
    struct xkey key;
    uint8_t swapped; /* key_a is the larger key: the program's direction 1 is key_a's */
} touched;

/* an instance whose key is in a flow map */
typedef struct offl {
    struct xkey key;
    int fd;
    uint8_t swapped;
    uint64_t ts; /* its last packet user space saw */
} offl;

struct rg_xdp {
    rg_obs obs, in;
    const rg_stack_desc *stack;
    struct bpf_object *bo;
    int link_fd;
    int fd_drop, fd_bypass, fd_stats;
    uint8_t *want; /* per layer index: the program keys it */
    rg_nf_map offl;
    touched *t;
    size_t nt, tcap;
    void (*next_end)(void *self);
    void *next_self;
    rg_xdp_counts c;
};

/* libbpf's messages: the last one kept for the error (a verifier log is long) */
static char last_msg[2048];

static int on_libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
    if (level == LIBBPF_DEBUG) return 0;
    char line[1024];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(last_msg), m = strlen(line);
    if (n + m >= sizeof last_msg) n = 0; /* keep the latest lines */
    memcpy(last_msg + n, line, m + 1);
    return 0;
}

static void note(rg_xdp *x, const rg_flow_info *f, uint64_t ts)
{
    if (f->layer >= x->stack->nlayers || !x->want[f->layer]) return;
    for (size_t i = 0; i < x->nt; i++)
        if (x->t[i].uid == f->uid && x->t[i].f) {
            x->t[i].f = f;
            x->t[i].ts = ts;
            return;
        }
    if (x->nt == x->tcap) {
        size_t cap = x->tcap ? x->tcap * 2 : 16;
        touched *p = realloc(x->t, cap * sizeof *p);
        if (!p) return;
        x->t = p;
        x->tcap = cap;
    }
    touched *t = &x->t[x->nt++];
    memset(t, 0, sizeof *t);
    t->f = f;
    t->uid = f->uid;
    t->ts = ts;
    const uint16_t kl = x->stack->layers[f->layer].key_len;
    const uint8_t *a = f->key_a, *p = f->key_p ? f->key_p : f->key_a;
    t->swapped = a && memcmp(a, p, kl) > 0;
    t->key.layer = f->layer;
    t->key.len = kl;
    if (a) memcpy(t->key.k, t->swapped ? p : a, kl);
}

static void x_open(void *self, const rg_flow_info *f, uint64_t ts)
{
    rg_xdp *x = self;
    note(x, f, ts);
    if (x->in.on_open) x->in.on_open(x->in.self, f, ts);
}

static void x_packet(void *self, const rg_flow_info *f, int dir, uint32_t len, uint64_t ts)
{
    rg_xdp *x = self;
    note(x, f, ts);
    if (x->in.on_packet) x->in.on_packet(x->in.self, f, dir, len, ts);
}

/* The kernel's frames of an instance handed over, shown as its packets, then the entry gone. */
static void give_back(rg_xdp *x, const rg_flow_info *f, offl *o)
{
    struct fcount v;
    memset(&v, 0, sizeof v);
    if (bpf_map_lookup_elem(o->fd, &o->key, &v) == 0) bpf_map_delete_elem(o->fd, &o->key);
    x->c.kernel_packets += v.packets;
    x->c.kernel_bytes += v.bytes;
    if (!x->in.on_packet) return;
    for (int i = 0; i < 2; i++) {
        /* direction 1 of the program: the frame's own key is the larger */
        const int dir = i ? !o->swapped : o->swapped;
        const uint64_t n = v.dir_packets[i], b = v.dir_bytes[i];
        for (uint64_t k = 0; k < n; k++) {
            const uint64_t len = b / n + (k == 0 ? b % n : 0);
            x->in.on_packet(x->in.self, f, dir, (uint32_t)(len > UINT32_MAX ? UINT32_MAX : len),
                            o->ts);
        }
    }
}

static void x_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts)
{
    rg_xdp *x = self;
    for (size_t i = 0; i < x->nt; i++)
        if (x->t[i].uid == f->uid) x->t[i].f = NULL; /* gone before the packet's end */
    offl *o = rg_nf_map_del(&x->offl, f->uid);
    if (o) {
        give_back(x, f, o);
        free(o);
    }
    if (x->in.on_close) x->in.on_close(x->in.self, f, reason, complete, ts);
}

/* A flow in rg_bypass loses its bypass mark in user space: the frames already on their way
 * up (between the verdict and the entry) are inspected and counted on its record as before the
 * verdict; with the mark they would stop at the lookup, counted nowhere on the record.  (The
 * record is the stack's, writable: only observers see it const.) */
static void unmark(const rg_flow_info *f)
{
    ((rg_flow_info *)(uintptr_t)f)->flags &= (uint8_t)~RG_FI_BYPASS;
}

static void xdp_packet_end(void *self)
{
    rg_xdp *x = self;
    if (x->next_end) x->next_end(x->next_self); /* the chain's NFs: their verdicts first */
    for (size_t i = 0; i < x->nt; i++) {
        touched *t = &x->t[i];
        const rg_flow_info *f = t->f;
        if (!f || RG_POISONED(f, sizeof *f) || f->uid != t->uid) continue;
        const int bypass = (f->flags & RG_FI_BYPASS) || (f->memcap & RG_FLOW_MEMCAP_BYPASSED);
        if (!(f->flags & RG_FI_DROP) && !bypass) continue;
        const offl *had = rg_nf_map_get(&x->offl, t->uid);
        if (had) { /* a frame from before the entry: the NF gave the verdict again */
            if (had->fd == x->fd_bypass) unmark(f);
            continue;
        }
        offl *o = malloc(sizeof *o);
        if (!o) continue;
        o->key = t->key;
        o->fd = f->flags & RG_FI_DROP ? x->fd_drop : x->fd_bypass;
        o->swapped = t->swapped;
        o->ts = t->ts;
        struct fcount zero;
        memset(&zero, 0, sizeof zero);
        if (bpf_map_update_elem(o->fd, &o->key, &zero, BPF_ANY) ||
            rg_nf_map_put(&x->offl, t->uid, o)) {
            x->c.map_errors++;
            bpf_map_delete_elem(o->fd, &o->key);
            free(o);
            continue;
        }
        if (o->fd == x->fd_drop) {
            x->c.drop_flows++;
        } else {
            x->c.bypass_flows++;
            unmark(f);
        }
    }
    x->nt = 0;
}

static void x_call(void *self, const rg_call *c)
{
    rg_xdp *x = self;
    x->in.on_call(x->in.self, c);
}

static void x_gap(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                  uint32_t at, uint64_t ts)
{
    rg_xdp *x = self;
    x->in.on_gap(x->in.self, f, dir, seq, len, at, ts);
}

static void x_clock(void *self, uint64_t pkt_no, uint64_t pkt_ts, uint64_t clock_ns, int fwd)
{
    rg_xdp *x = self;
    x->in.on_clock_jump(x->in.self, pkt_no, pkt_ts, clock_ns, fwd);
}

static void x_memcap(void *self, const rg_flow_info *f, unsigned layer, int policy, uint64_t asked,
                     uint64_t ts)
{
    rg_xdp *x = self;
    x->in.on_memcap(x->in.self, f, layer, policy, asked, ts);
}

static void x_overlap(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                      uint32_t new_bytes, uint32_t old_len, uint32_t new_len, int policy,
                      uint64_t ts)
{
    rg_xdp *x = self;
    x->in.on_overlap(x->in.self, f, dir, seq, len, new_bytes, old_len, new_len, policy, ts);
}

/* The layers --xdp-flows names (NULL: each with a selector the program can key); RG_OK or 1. */
static int want_layers(rg_xdp *x, const char *flows, char *err, size_t errlen)
{
    const rg_stack_desc *s = x->stack;
    for (unsigned i = 0; i < s->nlayers && !flows; i++)
        x->want[i] = s->layers[i].has_instance && s->layers[i].key_len <= KEY_MAX;
    while (flows && *flows) {
        size_t n = strcspn(flows, ",");
        unsigned i = 0;
        while (i < s->nlayers &&
               (strlen(s->layers[i].name) != n || strncmp(s->layers[i].name, flows, n) != 0))
            i++;
        if (i == s->nlayers || !s->layers[i].has_instance || s->layers[i].key_len > KEY_MAX) {
            snprintf(err, errlen, "--xdp-flows: %.*s is no layer of %s with a selector", (int)n,
                     flows, s->name);
            return 1;
        }
        x->want[i] = 1;
        flows += n + (flows[n] == ',');
    }
    return RG_OK;
}

static void xdp_close(rg_xdp *x);

static rg_xdp *xdp_open(const rg_xdp_cfg *cfg, const rg_stack_desc *stack, const rg_obs *inner,
                        char *err, size_t errlen)
{
    rg_xdp *x = calloc(1, sizeof *x);
    if (!x || !(x->want = calloc(stack->nlayers ? stack->nlayers : 1, 1)) ||
        rg_nf_map_init(&x->offl)) {
        if (x) free(x->want);
        free(x);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    x->link_fd = -1;
    x->stack = stack;
    x->in = *inner;
    if (want_layers(x, cfg->flows, err, errlen)) goto fail;
    libbpf_set_print(on_libbpf_print);
    last_msg[0] = 0;
    const unsigned ifx = if_nametoindex(cfg->iface);
    if (!ifx) {
        snprintf(err, errlen, "--xdp: no interface %s", cfg->iface);
        goto fail;
    }
    x->bo = bpf_object__open_file(cfg->obj, NULL);
    if (!x->bo) {
        snprintf(err, errlen, "--xdp %s: cannot open it: %s", cfg->obj, strerror(errno));
        goto fail;
    }
    if (bpf_object__load(x->bo)) {
        const int e = errno;
        size_t n = strlen(last_msg);
        while (n && last_msg[n - 1] == '\n')
            last_msg[--n] = 0;
        const char *tail = n > 600 ? last_msg + n - 600 : last_msg;
        snprintf(err, errlen, "--xdp %s: the kernel refused the program: %s%s%s", cfg->obj,
                 strerror(e),
                 e == EPERM ? " (loading BPF needs root, or CAP_BPF and CAP_NET_ADMIN)" : "",
                 e == EPERM || !*tail ? "" : "\n");
        if (e != EPERM && *tail) {
            size_t k = strlen(err);
            snprintf(err + k, errlen - k, "%s", tail);
        }
        goto fail;
    }
    struct bpf_program *prog = bpf_object__find_program_by_name(x->bo, "rg_xdp");
    x->fd_drop = bpf_object__find_map_fd_by_name(x->bo, "rg_drop");
    x->fd_bypass = bpf_object__find_map_fd_by_name(x->bo, "rg_bypass");
    x->fd_stats = bpf_object__find_map_fd_by_name(x->bo, "rg_stats");
    const int fd_conf = bpf_object__find_map_fd_by_name(x->bo, "rg_conf");
    if (!prog || x->fd_drop < 0 || x->fd_bypass < 0 || x->fd_stats < 0 || fd_conf < 0) {
        snprintf(err, errlen,
                 "--xdp %s: not a program of rubikgen build --xdp (no rg_xdp, rg_drop, "
                 "rg_bypass, rg_stats or rg_conf)",
                 cfg->obj);
        goto fail;
    }
    const uint32_t zero = 0, bd = cfg->bypass_drop ? 1 : 0;
    if (bpf_map_update_elem(fd_conf, &zero, &bd, BPF_ANY)) {
        snprintf(err, errlen, "--xdp: rg_conf: %s", strerror(errno));
        goto fail;
    }
    LIBBPF_OPTS(bpf_link_create_opts, lo,
                .flags = cfg->mode == RG_XDP_GENERIC  ? XDP_FLAGS_SKB_MODE
                         : cfg->mode == RG_XDP_NATIVE ? XDP_FLAGS_DRV_MODE
                                                      : 0);
    x->link_fd = bpf_link_create(bpf_program__fd(prog), (int)ifx, BPF_XDP, &lo);
    if (x->link_fd < 0) {
        const int e = errno;
        snprintf(err, errlen, "--xdp: cannot attach the program to %s%s: %s%s", cfg->iface,
                 cfg->mode == RG_XDP_GENERIC  ? " (generic)"
                 : cfg->mode == RG_XDP_NATIVE ? " (native)"
                                              : "",
                 strerror(e),
                 e == EBUSY        ? " (it has an XDP program already: ip link set dev IF xdp off)"
                 : e == EOPNOTSUPP ? " (its driver has no native XDP: --xdp-mode generic)"
                                   : "");
        goto fail;
    }
    LIBBPF_OPTS(bpf_xdp_query_opts, q);
    x->c.mode = cfg->mode == RG_XDP_GENERIC ? "generic" : "native";
    if (cfg->mode == RG_XDP_AUTO && bpf_xdp_query((int)ifx, 0, &q) == 0)
        x->c.mode = q.attach_mode == XDP_ATTACHED_SKB ? "generic" : "native";
    x->obs = (rg_obs){.self = x,
                      .on_call = inner->on_call ? x_call : NULL,
                      .on_open = x_open,
                      .on_packet = x_packet,
                      .on_close = x_close,
                      .on_gap = inner->on_gap ? x_gap : NULL,
                      .on_clock_jump = inner->on_clock_jump ? x_clock : NULL,
                      .on_memcap = inner->on_memcap ? x_memcap : NULL,
                      .on_overlap = inner->on_overlap ? x_overlap : NULL,
                      .quiet_transient = inner->quiet_transient};
    return x;
fail:
    xdp_close(x);
    return NULL;
}

static const rg_obs *xdp_obs(rg_xdp *x)
{
    return &x->obs;
}

static void xdp_chain_end(rg_xdp *x, void (*end)(void *self), void *self)
{
    x->next_end = end;
    x->next_self = self;
}

static void xdp_counts(rg_xdp *x, rg_xdp_counts *out)
{
    for (uint32_t i = 0; i < RG_XDP_NSTATS; i++) {
        uint64_t v = 0;
        if (bpf_map_lookup_elem(x->fd_stats, &i, &v) == 0) x->c.stat[i] = v;
    }
    *out = x->c;
}

static void free_offl(void *ctx, void *v)
{
    (void)ctx;
    free(v);
}

static void xdp_close(rg_xdp *x)
{
    if (!x) return;
    if (x->link_fd >= 0) close(x->link_fd); /* the last descriptor: the kernel detaches */
    if (x->bo) bpf_object__close(x->bo);
    rg_nf_map_drain(&x->offl, free_offl, NULL);
    free(x->t);
    free(x->want);
    free(x);
}

const rg_xdp_ops rg_xdp_impl = {
    .open = xdp_open,
    .obs = xdp_obs,
    .packet_end = xdp_packet_end,
    .chain_end = xdp_chain_end,
    .counts = xdp_counts,
    .close = xdp_close,
};
