/* rg_rules.h - rule sets that can be swapped while a stack runs (docs/rules.md, reload).
 *
 * A stack built with `rubikgen build --rules-reload` does not compile its rules into the
 * per-packet function: it calls the active rule set through one pointer at the function's
 * exit.  A rule set is a small unit of C generated from a rules file (rubikgen/backend/
 * rules_so.py): compiled into the stack for the set the run starts with, or into a shared
 * object that `rubikgen ctl SOCKET rules reload R.yaml` has the binary load
 * (main/rg_rules_load.c).  The unit reads only what this header describes (a view of the
 * headers parsed in the packet, by layer index, and a table of the stack's field setters),
 * so a shared object built for a stack works with every binary of that stack whose
 * fingerprint (a hash of the layer indexes, the fields' places and the setter table) is the
 * same.  The unit links against nothing.
 *
 * Decisions of stateful rules are recorded in the instances as a rule's *global id* (ids
 * are given to rule names, the same name keeping its id across reloads): after a reload, an
 * instance a rule took keeps that rule's decision when the new set has a stateful rule of
 * the same name (with the new set's action), and forgets it otherwise. */
#ifndef RG_RULES_H
#define RG_RULES_H

#include <signal.h>
#include <stdint.h>

#include "rg/rg_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RG_RULES_ABI 1u
/* the symbol a rule set's shared object exports (an rg_rules_desc) */
#define RG_RULES_SYMBOL "rg_rules_set_v1"

/* What a rule set sees of the packet: the headers the stack parsed in it. */
typedef struct rg_rules_view {
    void *ctx;                 /* the stack's context: the setters' first argument */
    const uint64_t *stamp;     /* by layer: the packet number its header last parsed in */
    const uint32_t *len;       /* by layer: the header bytes copied then */
    const uint8_t *const *hdr; /* by layer: that copy (the header's fixed part) */
    uint64_t pkt_no;           /* this packet's number */
    rg_verdict_slot *verdict;  /* the packet's verdict */
    const rg_flow_info *fi;    /* the deepest instance of the packet (drop-flow), or NULL */
    void (*const *set_num)(void *, uint64_t);          /* the stack's setters, by number */
    void (*const *set_bytes)(void *, const uint8_t *); /* ... of byte fields */
    /* by layer: LAYER.checksum_bad, 1 when a checksum of its header did not verify (set at the
     * parse for the layers of the active set's csum_mask) */
    const uint8_t *csum_bad;
} rg_rules_view;

/* A rule set (a unit generated from a rules file). */
typedef struct rg_rules_desc {
    uint32_t abi;            /* RG_RULES_ABI */
    const char *fingerprint; /* the stack interface it was generated for */
    const char *file;        /* the rules file */
    const char *digest;      /* sha256 of its text */
    uint32_t n;              /* rules */
    const char *const *name;
    const char *const *action;
    const uint8_t *stateful;
    /* the first rule whose match holds, n when none */
    unsigned (*match)(const rg_rules_view *v);
    /* the action of rule `rule` (rev: a reply of a stateful rewrite: mirrored fields) */
    void (*act)(const rg_rules_view *v, unsigned rule, int rev);
    uint64_t csum_mask; /* bit L: the set reads LAYER.checksum_bad of layer index L */
} rg_rules_desc;

/* The active set of one context and what maps its rules to global ids. */
typedef struct rg_rules_rt {
    const rg_rules_desc *d;
    uint32_t *gid; /* by rule of d: its global id */
    int32_t *lidx; /* by global id: the stateful rule of d with that name, -1 */
    uint32_t ngid; /* global ids given so far */
    char **gname;  /* by global id: the name */
    /* by global id: bumped by every set installed without a stateful rule of that name, so
     * that decisions recorded before are forgotten for good, even if a later set has one */
    uint16_t *ggen;
    uint64_t *hits; /* by rule of d, since it became active */
    uint64_t reloads;
    void *dl;                 /* the dlopen handle of d (NULL: compiled in) */
    struct rg_stats *stats;   /* the context's: nrules, names, hits follow the active set */
    const uint64_t *pkt_no;   /* the context's packet number (the last packet given) */
    const char *fingerprint;  /* the stack's */
    const char *stack_spec;   /* the stack spec the binary was built from */
    struct rg_rules_rt *next; /* every context's (the control socket reloads them all) */
    sig_atomic_t hup_seen;    /* rg_rules_hup when this context last reloaded --rules-so */
    /* d has stateful or drop-flow rules: the stack looks up the packet's instance and its
     * recorded decision (otherwise no decision can apply: skipped) */
    int need_inst;
    uint64_t csum_mask; /* d's: the layers whose checksums the stack verifies at the parse */
} rg_rules_rt;

/* SIGHUPs received (--rules-so: each context reloads the file at its next packet) */
extern volatile sig_atomic_t rg_rules_hup;
void rg_rules_hup_reload(rg_rules_rt *rt);

/* A context's rule sets, starting with d (the compiled-in one); NULL: out of memory. */
rg_rules_rt *rg_rules_rt_new(const rg_rules_desc *d, struct rg_stats *st, const uint64_t *pkt_no,
                             const char *fingerprint, const char *stack_spec);
void rg_rules_rt_free(rg_rules_rt *rt);
/* Make d (loaded with handle dl) the active set of rt, at a packet boundary; 0, or -1 with
 * the reason in err (the old set stays). */
int rg_rules_rt_install(rg_rules_rt *rt, const rg_rules_desc *d, void *dl, char *err,
                        unsigned errlen);

/* A field of a header copy: `width` bits at bit `bit`, big-endian (order 0) or a whole
 * little-endian number of bytes (order 1). */
static inline uint64_t rg_rules_get(const uint8_t *h, unsigned bit, unsigned width, int little)
{
    uint64_t v = 0;
    const unsigned first = bit / 8u, last = (bit + width - 1u) / 8u;
    if (little) {
        for (unsigned i = last + 1u; i-- > first;)
            v = (v << 8) | h[i];
        return v;
    }
    for (unsigned i = first; i <= last && i < first + 9u; i++)
        v = (v << 8) | h[i];
    const unsigned tail = (last + 1u) * 8u - (bit + width);
    if (last - first + 1u > 8u) { /* 9 bytes: 64 bits not byte aligned */
        /* v holds the low 64 bits of the 72 read; the leading byte's bits are above them */
        return (v >> tail) | ((uint64_t)h[first] << (64u - tail));
    }
    v >>= tail;
    return width >= 64u ? v : v & ((UINT64_C(1) << width) - 1u);
}

/* A recorded decision: 1 + global id (bits 0-15), its generation (16-30), the direction of
 * the packet that took it (31). */
#define RG_RULES_REC(gid, gen, dir)                                                                \
    (((uint32_t)(gid) + 1u) | ((uint32_t)(gen) << 16) | ((uint32_t)(dir) << 31))
#define RG_RULES_MAX_NAMES 65535u

/* The packet's rules: the recorded decision of its instance (rec, RG_RULES_REC; slot: where
 * the instance keeps it, NULL for an ended one), else the first match.  Runs the action and
 * counts the hit. */
static inline void rg_rules_run(rg_rules_rt *rt, const rg_rules_view *v, uint32_t *slot,
                                uint32_t rec, uint32_t pdir)
{
    if (RG_UNLIKELY(rt->hup_seen != rg_rules_hup)) rg_rules_hup_reload(rt);
    const rg_rules_desc *d = rt->d;
    unsigned best;
    int rev = 0;
    if (rec) {
        const uint32_t g = (rec & 0xffffu) - 1u;
        const int32_t l = g < rt->ngid && rt->ggen[g] == ((rec >> 16) & 0x7fffu) ? rt->lidx[g] : -1;
        if (l >= 0) {
            best = (unsigned)l;
            rev = (rec >> 31) != pdir;
            rt->hits[best]++;
            d->act(v, best, rev);
            return;
        }
        if (slot) *slot = 0; /* its rule is gone (a reload): forgotten */
    }
    best = d->match(v);
    if (best >= d->n) return;
    if (slot && d->stateful[best])
        *slot = RG_RULES_REC(rt->gid[best], rt->ggen[rt->gid[best]], pdir);
    rt->hits[best]++;
    d->act(v, best, 0);
}

#ifdef __cplusplus
}
#endif
#endif /* RG_RULES_H */
