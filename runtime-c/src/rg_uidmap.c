/* rg_uidmap.c - the uid -> pointer map of the stock NFs and of the NF chain (rg_uidmap.h). */
#include "rg/rg_uidmap.h"

#include <stdlib.h>

enum { INITIAL_CAP = 64 };

static size_t slot_of(uint64_t uid, size_t cap)
{
    /* uids are consecutive: a multiplicative hash spreads them */
    return (size_t)((uid * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & (cap - 1);
}

int rg_nf_map_init(rg_nf_map *m)
{
    m->cap = INITIAL_CAP;
    m->n = 0;
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->vals = calloc(m->cap, sizeof *m->vals);
    if (m->keys && m->vals) return RG_OK;
    rg_nf_map_free(m);
    return RG_ENOMEM;
}

void rg_nf_map_free(rg_nf_map *m)
{
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->cap = m->n = 0;
}

/* m->cap > 0 */
static size_t find(const rg_nf_map *m, uint64_t uid)
{
    size_t i = slot_of(uid, m->cap);
    while (m->keys[i] && m->keys[i] != uid)
        i = (i + 1) & (m->cap - 1);
    return i;
}

void **rg_nf_map_slot(const rg_nf_map *m, uint64_t uid)
{
    if (!m->cap) return NULL;
    size_t i = find(m, uid);
    return m->keys[i] ? &m->vals[i] : NULL;
}

void *rg_nf_map_get(const rg_nf_map *m, uint64_t uid)
{
    void **v = rg_nf_map_slot(m, uid);
    return v ? *v : NULL;
}

int rg_nf_map_put(rg_nf_map *m, uint64_t uid, void *val)
{
    if ((m->n + 1) * 2 > m->cap) { /* keep the load at most 1/2 */
        size_t cap = m->cap ? m->cap * 2 : INITIAL_CAP;
        rg_nf_map big = {calloc(cap, sizeof *m->keys), calloc(cap, sizeof *m->vals), cap, m->n};
        if (!big.keys || !big.vals) {
            rg_nf_map_free(&big);
            return RG_ENOMEM;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i]) continue;
            size_t j = find(&big, m->keys[i]);
            big.keys[j] = m->keys[i];
            big.vals[j] = m->vals[i];
        }
        rg_nf_map_free(m);
        *m = big;
    }
    size_t i = find(m, uid);
    m->keys[i] = uid;
    m->vals[i] = val;
    m->n++;
    return RG_OK;
}

void *rg_nf_map_del(rg_nf_map *m, uint64_t uid)
{
    if (!m->cap) return NULL;
    size_t mask = m->cap - 1, i = find(m, uid);
    if (!m->keys[i]) return NULL;
    void *v = m->vals[i];
    /* backward-shift deletion: move later entries of the probe run into the
     * hole unless their home slot lies cyclically in (hole, their slot] */
    for (size_t j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
        size_t home = slot_of(m->keys[j], m->cap);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            i = j;
        }
    }
    m->keys[i] = 0;
    m->vals[i] = NULL;
    m->n--;
    return v;
}

typedef struct uid_val {
    uint64_t uid;
    void *val;
} uid_val;

static int by_uid(const void *a, const void *b)
{
    uint64_t x = ((const uid_val *)a)->uid, y = ((const uid_val *)b)->uid;
    return (x > y) - (x < y);
}

void rg_nf_map_drain(rg_nf_map *m, void (*fn)(void *ctx, void *val), void *ctx)
{
    uid_val *tmp = m->n ? malloc(m->n * sizeof *tmp) : NULL;
    if (tmp) {
        size_t k = 0;
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i]) tmp[k++] = (uid_val){m->keys[i], m->vals[i]};
        qsort(tmp, k, sizeof *tmp, by_uid);
        for (size_t i = 0; i < k; i++)
            fn(ctx, tmp[i].val);
        free(tmp);
    } else {
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i]) fn(ctx, m->vals[i]);
    }
    rg_nf_map_free(m);
}
