/* rg_uidmap.h - a uid -> pointer map (open addressing, linear probing, backward-shift
 * deletion): the stock NFs' per-instance records (handlers/nf) and the NF chain's per-flow
 * records (main/rg_nfchain.c) both keep theirs in one, here in the runtime that both use.  Uids are
 * the instances' (from 1, consecutive within a context: a multiplicative hash spreads them). */
#ifndef RG_UIDMAP_H
#define RG_UIDMAP_H

#include <stddef.h>
#include <stdint.h>

#include "rg_common.h" /* RG_OK, RG_ENOMEM */

typedef struct rg_nf_map {
    uint64_t *keys; /* 0 = empty slot (uids start at 1) */
    void **vals;
    size_t cap; /* power of two */
    size_t n;
} rg_nf_map;

/* A map may start zeroed (no table until the first put) or from rg_nf_map_init (RG_OK or
 * RG_ENOMEM: a table of 64 slots now).  Free: the table (not the values). */
int rg_nf_map_init(rg_nf_map *m);
void rg_nf_map_free(rg_nf_map *m);
void *rg_nf_map_get(const rg_nf_map *m, uint64_t uid);
/* Where uid's value is stored (to replace it), NULL if absent; valid until the next put or del. */
void **rg_nf_map_slot(const rg_nf_map *m, uint64_t uid);
/* RG_OK or RG_ENOMEM; uid must not be present. */
int rg_nf_map_put(rg_nf_map *m, uint64_t uid, void *val);
/* Remove and return the value (NULL if absent). */
void *rg_nf_map_del(rg_nf_map *m, uint64_t uid);
/* Call fn(ctx, value) for every entry, in uid order (in table order if
 * sorting runs out of memory), then free the map: instances still open at
 * the end are reported, deterministically. */
void rg_nf_map_drain(rg_nf_map *m, void (*fn)(void *ctx, void *val), void *ctx);

#endif /* RG_UIDMAP_H */
