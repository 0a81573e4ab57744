/* rg_flow.c - bidirectional flow / instance table (see rg_flow.h). */
#include "rg/rg_flow.h"

#include <stdlib.h>

#include "rg/rg_seq.h"
#include <sys/mman.h>

#define ALIGN_UP(x, a) (((x) + ((a)-1)) & ~((size_t)(a)-1))

/* Large arrays (the index and the pool of a big table) come from anonymous
 * mappings with transparent huge pages requested: fewer TLB misses on random
 * flow access.  Zero pages are mapped lazily, so only used records cost
 * memory.  Small ones use calloc. */
#define RG_FLOW_BIG (4u << 20)

static void *big_zalloc(size_t n)
{
    if (n < RG_FLOW_BIG) return calloc(1, n);
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, n, MADV_HUGEPAGE);
#endif
    return p;
}

static void big_free(void *p, size_t n)
{
    if (!p) return;
    if (n < RG_FLOW_BIG)
        free(p);
    else
        munmap(p, n);
}

static size_t pool_bytes(const rg_flow *t)
{
    return (size_t)t->cap * t->stride;
}

static size_t index_bytes(const rg_flow *t);

/* The per-layer memory counters of the table's layer (NULL without stats). */
static rg_mem_stats *flow_mem(const rg_flow *t)
{
    const rg_seq_heap *h = t->acct;
    return h && h->stats && t->layer < h->stats->nlayers ? &h->stats->layer[t->layer].mem : NULL;
}

/* n more bytes touched by the table (records, index). */
static void acct_add(rg_flow *t, size_t n)
{
    rg_seq_heap *h = t->acct;
    if (!h || !n) return;
    t->acct_bytes += n;
    h->flow_cur += n;
    if (h->flow_cur > h->flow_peak) {
        h->flow_peak = h->flow_cur;
        if (h->stats && h->flow_peak > h->stats->mem_flow_peak)
            h->stats->mem_flow_peak = h->flow_peak;
    }
    rg_mem_stats *m = flow_mem(t);
    if (m) {
        m->flow_bytes += n;
        if (m->flow_bytes > m->flow_peak) m->flow_peak = m->flow_bytes;
    }
}

static size_t index_bytes(const rg_flow *t)
{
    return ((size_t)t->mask + 1) * sizeof(uint64_t);
}

static size_t slots_bytes(uint32_t mask)
{
    return ((size_t)mask + 1) * sizeof(uint64_t);
}

static uint64_t slot_make(uint32_t tag, uint32_t idx, uint32_t dir)
{
    return (uint64_t)tag << 32 | (uint64_t)(((idx + 1) << 1) | dir);
}

rg_flow *rg_flow_new(const rg_flow_cfg *cfg)
{
    if (!cfg || cfg->key_len == 0 || cfg->key_len > RG_FLOW_MAX_KEY || cfg->cap == 0 ||
        cfg->cap > RG_FLOW_MAX_CAP || cfg->payload_size > (1u << 30))
        return NULL;
    rg_flow *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->key_len = cfg->key_len;
    t->bidir = cfg->bidir ? 1 : 0;
    t->no_evict = cfg->no_evict ? 1 : 0;
    t->cap = cfg->cap;
    t->payload_size = cfg->payload_size;
    t->seed = cfg->seed;
    t->on_remove = cfg->on_remove;
    t->cb_ctx = cfg->cb_ctx;
    t->stats = cfg->stats ? cfg->stats : &t->own_stats;
    t->closed = cfg->closed;
    t->key_off = (uint32_t)sizeof(rg_flow_rec);
    size_t keys = (size_t)cfg->key_len * (t->bidir ? 2 : 1);
    t->payload_off = (uint32_t)ALIGN_UP(t->key_off + keys, 16);
    t->stride = (uint32_t)ALIGN_UP((size_t)t->payload_off + cfg->payload_size, 16);

    /* the largest index keeps the load <= 1/2 with every key of a full
     * pool; the first one is small and grows with the live keys */
    size_t nkeys = (size_t)cfg->cap * (t->bidir ? 2 : 1);
    size_t nslots = 16;
    while (nslots < nkeys * 2)
        nslots <<= 1;
    t->max_mask = (uint32_t)(nslots - 1);
    t->mask = (uint32_t)((nslots < RG_FLOW_MIN_SLOTS ? nslots : RG_FLOW_MIN_SLOTS) - 1);
    t->slot = big_zalloc(index_bytes(t));
    t->pool = big_zalloc(pool_bytes(t));
    if (!t->slot || !t->pool) {
        big_free(t->slot, index_bytes(t));
        big_free(t->pool, pool_bytes(t));
        free(t);
        return NULL;
    }
    t->stats->record_bytes = t->stride;
    t->layer = cfg->layer;
    if (cfg->acct && cfg->acct->ntables < RG_MEM_MAX_TABLES) {
        t->acct = cfg->acct;
        t->acct->tables[t->acct->ntables++] = t;
        acct_add(t, index_bytes(t));
    }
    t->free_head = RG_FLOW_NIL;
    t->lru_head = t->lru_tail = RG_FLOW_NIL;
    t->iter_next = RG_FLOW_NIL;
    return t;
}

void rg_flow_free(rg_flow *t)
{
    if (!t) return;
    if (t->acct) { /* the context goes away: its accountant forgets the table */
        rg_seq_heap *h = t->acct;
        h->flow_cur -= t->acct_bytes;
        for (uint32_t i = 0; i < h->ntables; i++)
            if (h->tables[i] == t) h->tables[i] = h->tables[--h->ntables];
    }
    RG_UNPOISON(t->pool, pool_bytes(t));
    big_free(t->slot, index_bytes(t));
    big_free(t->pool, pool_bytes(t));
    free(t->order);
    free(t);
}

/* ---- LRU list (moving to the front is inline in rg_flow.h) ---- */
static void lru_unlink(rg_flow *t, rg_flow_rec *r)
{
    if (r->prev != RG_FLOW_NIL)
        rg_flow__rec(t, r->prev)->next = r->next;
    else
        t->lru_head = r->next;
    if (r->next != RG_FLOW_NIL)
        rg_flow__rec(t, r->next)->prev = r->prev;
    else
        t->lru_tail = r->prev;
    r->prev = r->next = RG_FLOW_NIL;
}

static void lru_push_front(rg_flow *t, uint32_t idx, rg_flow_rec *r)
{
    r->prev = RG_FLOW_NIL;
    r->next = t->lru_head;
    if (t->lru_head != RG_FLOW_NIL)
        rg_flow__rec(t, t->lru_head)->prev = idx;
    else
        t->lru_tail = idx;
    t->lru_head = idx;
}

/* ---- hash index ---- */
static void slots_put(uint64_t *slot, uint32_t mask, uint64_t s)
{
    uint32_t i = (uint32_t)(s >> 32) & mask;
    while (slot[i])
        i = (i + 1) & mask;
    slot[i] = s;
}

/* Double the index (rehash every key).  On allocation failure the old one
 * stays: it still has room (see room_for). */
static int index_grow(rg_flow *t)
{
    uint32_t nmask = t->mask * 2 + 1;
    uint64_t *ns = big_zalloc(slots_bytes(nmask));
    if (!ns) return -1;
    for (uint32_t i = 0; i <= t->mask; i++)
        if (t->slot[i]) slots_put(ns, nmask, t->slot[i]);
    acct_add(t, slots_bytes(nmask) - index_bytes(t)); /* counted, not capped: 16-32 B/instance */
    big_free(t->slot, index_bytes(t));
    t->slot = ns;
    t->mask = nmask;
    return 0;
}

/* Make room for n more keys: grow while the load would pass 1/2.  Fails
 * only when the index cannot grow (memory) and would be more than 3/4 full
 * (probe lengths explode; an empty slot must always remain). */
static int room_for(rg_flow *t, uint32_t n)
{
    while ((uint64_t)(t->nkeys + n) * 2 > (uint64_t)t->mask + 1) {
        if (t->mask >= t->max_mask || index_grow(t)) {
            if ((uint64_t)(t->nkeys + n) * 4 > (uint64_t)(t->mask + 1) * 3) return -1;
            break;
        }
    }
    return 0;
}

static void index_insert(rg_flow *t, uint32_t tag, uint32_t idx, uint32_t dir)
{
    slots_put(t->slot, t->mask, slot_make(tag, idx, dir));
    t->nkeys++;
}

/* Remove the exact slot value s (backward-shift deletion). */
static void index_remove(rg_flow *t, uint64_t s)
{
    uint32_t mask = t->mask;
    uint32_t i = (uint32_t)(s >> 32) & mask;
    while (t->slot[i] != s) {
        if (!t->slot[i]) return; /* not present: nothing to do */
        i = (i + 1) & mask;
    }
    t->nkeys--;
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        uint64_t sj = t->slot[j];
        if (!sj) break;
        uint32_t home = (uint32_t)(sj >> 32) & mask;
        /* move sj back to i unless its home lies cyclically in (i, j] */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            t->slot[i] = sj;
            i = j;
        }
    }
    t->slot[i] = 0;
}

/* ---- create / delete ---- */
static void remove_rec(rg_flow *t, uint32_t idx, rg_flow_rec *r)
{
    index_remove(t, slot_make(r->tag[0], idx, 0));
    if (!(r->flags & RG_FLOW_F_SINGLE)) index_remove(t, slot_make(r->tag[1], idx, 1));
    if (t->iter_next == idx) t->iter_next = r->prev;
    if (t->memo == idx + 1) t->memo = 0; /* its key bytes stay behind in the free record */
    lru_unlink(t, r);
    r->flags = 0;
    r->next = t->free_head;
    t->free_head = idx;
    t->nlive--;
    t->stats->live--;
    t->stats->destroyed++;
    RG_POISON(rg_flow__payload(t, r), t->payload_size);
}

static void remove_with_cb(rg_flow *t, uint32_t idx, int reason)
{
    rg_flow_rec *r = rg_flow__rec(t, idx);
    if (t->on_remove) {
        t->in_cb++;
        t->on_remove(t->cb_ctx, t, rg_flow__payload(t, r), reason);
        t->in_cb--;
    }
    if (r->flags & RG_FLOW_F_LIVE) remove_rec(t, idx, r);
}

/* May the evict-oldest policy evict record idx now?  Not if the current
 * packet touched it (the generated code may hold it), nor from inside a
 * removal callback of its table. */
static int evictable(const rg_flow *t, uint32_t idx)
{
    if (idx == RG_FLOW_NIL || t->in_cb) return 0;
    const rg_seq_heap *h = t->acct;
    if (h && h->now) return rg_flow__rec(t, idx)->last < *h->now;
    return rg_flow__rec(t, idx)->seq != t->seq - 1u; /* not the last touched */
}

static void evict_for_memcap(rg_flow *t, uint32_t idx)
{
    rg_seq_heap *h = t->acct;
    rg_mem_stats *m = flow_mem(t);
    h->evicted++;
    if (m) m->evicted++;
    if (m && t->closed) m->evicted_closed++;
    t->stats->evicted++;
    h->busy++; /* the drain may allocate: not refused, not reclaimed for */
    remove_with_cb(t, idx, RG_FLOW_EVICTED);
    h->busy--;
}

/* Bytes a new record (none free) adds: the record and any index growth it causes (the index
 * only grows with the records ever used, so a reused record never grows it). */
static size_t new_bytes(const rg_flow *t)
{
    const uint32_t nk = t->bidir ? 2u : 1u;
    size_t n = t->stride;
    if ((uint64_t)(t->nkeys + nk) * 2 > (uint64_t)t->mask + 1 && t->mask < t->max_mask)
        n += slots_bytes(t->mask * 2 + 1) - index_bytes(t);
    return n;
}

/* A new record would pass the flow memcap: apply the policy.  0: create. */
static int flow_memcap(rg_flow *t)
{
    rg_seq_heap *h = t->acct;
    const unsigned pol = h->policy < RG_MEMCAP_POLICIES ? h->policy : RG_MEMCAP_DROP_FLOW;
    rg_mem_stats *m = flow_mem(t);
    h->flow_hits++;
    if (m) m->cap_hits++;
    int rc = -1;
    if (pol == RG_MEMCAP_IGNORE) {
        rc = 0;
    } else if (pol == RG_MEMCAP_EVICT_OLDEST && evictable(t, t->lru_tail)) {
        evict_for_memcap(t, t->lru_tail); /* its record is reused: nothing more touched */
        rc = t->free_head != RG_FLOW_NIL ? 0 : -1;
    }
    h->act[pol]++;
    if (m) m->act[pol]++;
    if (h->on_hit) h->on_hit(h->cb, t->layer, NULL, (int)pol, t->stride);
    return rc;
}

size_t rg_flow_reclaim(rg_seq_heap *h, size_t need)
{
    size_t n = 0;
    if (h->busy) return 0;
    while (h->cur + need > h->cap && n < 4096) {
        rg_flow *best = NULL;
        for (uint32_t i = 0; i < h->ntables; i++) {
            rg_flow *t = h->tables[i];
            /* a closed table's records hold no sequence bytes: evicting them frees nothing */
            if (t->closed || t->nlive == 0 || !evictable(t, t->lru_tail)) continue;
            if (!best ||
                rg_flow__rec(t, t->lru_tail)->last < rg_flow__rec(best, best->lru_tail)->last)
                best = t;
        }
        if (!best) break;
        evict_for_memcap(best, best->lru_tail);
        n++;
    }
    return n;
}

void rg_flow_prefetch_hints(rg_flow_hints *hs)
{
    /* the last lookups of the burst, which pass A's lag left (see rg_flow_prefetch_hint) */
    for (uint32_t i = hs->done; i < hs->n; i++)
        (void)rg_flow_prefetch_rec(hs->e[i].t, hs->e[i].h);
    hs->n = hs->done = 0;
}

void *rg_flow_create_h(rg_flow *t, const void *fwd, uint64_t hf, const void *rev, uint64_t hr)
{
    if (RG_UNLIKELY(t->in_cb)) return NULL;
    if (RG_UNLIKELY(t->acct != NULL) && t->free_head == RG_FLOW_NIL && t->nlive < t->cap &&
        t->acct->flow_cap && t->acct->flow_cur + new_bytes(t) > t->acct->flow_cap &&
        !t->acct->busy && flow_memcap(t) < 0) {
        t->stats->create_failed++;
        return NULL;
    }
    if (RG_UNLIKELY(t->nlive >= t->cap)) {
        if (t->no_evict) {
            t->stats->create_failed++;
            return NULL;
        }
        uint32_t victim = t->lru_tail;
        t->stats->evicted++;
        remove_with_cb(t, victim, RG_FLOW_EVICTED);
        if (t->nlive >= t->cap) { /* the callback kept it alive somehow */
            t->stats->create_failed++;
            return NULL;
        }
    }
    if (RG_UNLIKELY(room_for(t, t->bidir ? 2u : 1u))) { /* index full, out of memory */
        t->stats->create_failed++;
        return NULL;
    }
    uint32_t idx;
    if (t->free_head != RG_FLOW_NIL) {
        idx = t->free_head;
        t->free_head = rg_flow__rec(t, idx)->next;
    } else {
        idx = t->hwm++;
        acct_add(t, t->stride); /* a record touched for the first time */
    }
    rg_flow_rec *r = rg_flow__rec(t, idx);
    uint8_t *keys = (uint8_t *)r + t->key_off;
    memcpy(keys, fwd, t->key_len);
    r->flags = RG_FLOW_F_LIVE;
    r->tag[0] = rg_flow_tag(hf);
    r->seq = t->seq++;
    r->last = t->now;
    index_insert(t, r->tag[0], idx, 0);
    if (t->bidir) {
        if (!rev || rg_flow__keyeq(fwd, rev, t->key_len)) {
            r->flags |= RG_FLOW_F_SINGLE;
            r->tag[1] = r->tag[0];
            memcpy(keys + t->key_len, fwd, t->key_len);
        } else {
            memcpy(keys + t->key_len, rev, t->key_len);
            r->tag[1] = rg_flow_tag(hr);
            index_insert(t, r->tag[1], idx, 1);
        }
    } else {
        r->flags |= RG_FLOW_F_SINGLE;
        r->tag[1] = r->tag[0];
    }
    lru_push_front(t, idx, r);
    void *payload = rg_flow__payload(t, r);
    RG_UNPOISON(payload, t->payload_size);
    memset(payload, 0, t->payload_size);
    t->nlive++;
    t->stats->live++;
    t->stats->created++;
    if (t->stats->live > t->stats->peak_live) t->stats->peak_live = t->stats->live;
    return payload;
}

void rg_flow_delete(rg_flow *t, void *inst)
{
    if (!inst) return;
    const uint8_t *p = (const uint8_t *)inst;
    if (p < t->pool + t->payload_off || p >= t->pool + (size_t)t->hwm * t->stride) return;
    rg_flow_rec *r = rg_flow__rec_of(t, inst);
    uint32_t idx = rg_flow__idx_of(t, r);
    if (rg_flow__payload(t, rg_flow__rec(t, idx)) != inst) return;
    if (!(r->flags & RG_FLOW_F_LIVE)) return;
    remove_rec(t, idx, r);
}

/* ---- exact order for expiry and flush ----
 * The list is ordered by tick only; these sort the instances concerned by
 * (last touch, touch serial), which is the exact least-recently-used order. */
typedef struct {
    uint64_t last;
    uint32_t seq;
    uint32_t idx;
} order_ent;

static int order_cmp(const void *a, const void *b)
{
    const order_ent *x = a, *y = b;
    if (x->last != y->last) return x->last < y->last ? -1 : 1;
    /* equal times: touched by consecutive packets, so the serials are close
     * and the wrapping difference orders them */
    const int32_t d = (int32_t)(x->seq - y->seq);
    return (d > 0) - (d < 0);
}

/* The first n records from the list's tail, sorted; NULL when memory is short. */
static order_ent *order_of(rg_flow *t, uint32_t n)
{
    if (n > t->order_cap) {
        void *p = realloc(t->order, (size_t)n * sizeof(order_ent));
        if (!p) return NULL;
        t->order = p;
        t->order_cap = n;
    }
    order_ent *e = t->order;
    uint32_t idx = t->lru_tail;
    int sorted = 1;
    for (uint32_t i = 0; i < n; i++) {
        const rg_flow_rec *r = rg_flow__rec(t, idx);
        e[i] = (order_ent){r->last, r->seq, idx};
        if (i && order_cmp(&e[i - 1], &e[i]) > 0) sorted = 0;
        idx = r->prev;
    }
    if (!sorted) qsort(e, n, sizeof *e, order_cmp);
    return e;
}

/* Remove the listed records that are still live (a callback may have deleted
 * some; none is reused meanwhile, callbacks cannot create) and, for expiry,
 * still idle (a callback may have touched some). */
static size_t remove_listed(rg_flow *t, const order_ent *e, uint32_t n, int reason,
                            uint64_t idle_ns)
{
    size_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        rg_flow_rec *r = rg_flow__rec(t, e[i].idx);
        if (!(r->flags & RG_FLOW_F_LIVE)) continue;
        if (reason == RG_FLOW_EXPIRED) {
            if (t->now - r->last < idle_ns) continue;
            t->stats->expired++;
        }
        remove_with_cb(t, e[i].idx, reason);
        k++;
    }
    return k;
}

size_t rg_flow_expire(rg_flow *t, uint64_t now, uint64_t idle_ns)
{
    rg_flow_set_time(t, now);
    if (idle_ns == 0 || t->now < idle_ns || t->lru_tail == RG_FLOW_NIL) return 0;
    /* an instance is due when last <= now - idle: only the ticks up to that
     * time's hold due instances, and they are the list's tail */
    const uint64_t lim = (t->now - idle_ns) >> RG_FLOW_TICK_SHIFT;
    uint32_t n = 0;
    for (uint32_t idx = t->lru_tail; idx != RG_FLOW_NIL; idx = rg_flow__rec(t, idx)->prev) {
        if ((rg_flow__rec(t, idx)->last >> RG_FLOW_TICK_SHIFT) > lim) break;
        n++;
    }
    if (n == 0) return 0;
    const order_ent *e = order_of(t, n);
    if (e) return remove_listed(t, e, n, RG_FLOW_EXPIRED, idle_ns);
    /* no memory for the order: expire in list order (exact times, coarse order) */
    size_t k = 0;
    uint32_t saved = t->iter_next, idx = t->lru_tail;
    while (idx != RG_FLOW_NIL && n--) {
        rg_flow_rec *r = rg_flow__rec(t, idx);
        t->iter_next = r->prev;
        if (t->now - r->last >= idle_ns) {
            t->stats->expired++;
            remove_with_cb(t, idx, RG_FLOW_EXPIRED);
            k++;
        }
        idx = t->iter_next;
    }
    t->iter_next = saved;
    return k;
}

size_t rg_flow_foreach(rg_flow *t, rg_flow_iter_fn fn, void *ctx)
{
    size_t n = 0;
    uint32_t saved = t->iter_next;
    uint32_t idx = t->lru_tail;
    while (idx != RG_FLOW_NIL) {
        rg_flow_rec *r = rg_flow__rec(t, idx);
        t->iter_next = r->prev;
        fn(ctx, t, rg_flow__payload(t, r));
        n++;
        idx = t->iter_next;
    }
    t->iter_next = saved;
    return n;
}

size_t rg_flow_flush(rg_flow *t)
{
    const uint32_t live = t->nlive;
    const order_ent *e = live ? order_of(t, live) : NULL;
    size_t n = e ? remove_listed(t, e, live, RG_FLOW_FLUSHED, 0) : 0;
    /* without memory for the order: list order */
    while (t->lru_tail != RG_FLOW_NIL) {
        uint32_t idx = t->lru_tail;
        remove_with_cb(t, idx, RG_FLOW_FLUSHED);
        if (t->lru_tail == idx) break;
        n++;
    }
    return n;
}

const void *rg_flow_key(const rg_flow *t, const void *inst, int dir)
{
    rg_flow_rec *r = rg_flow__rec_of(t, inst);
    if (dir && !t->bidir) return NULL;
    return (const uint8_t *)r + t->key_off + (dir ? t->key_len : 0);
}
