/* rg_flow.h - bidirectional flow / instance table.
 *
 * A table maps fixed-length opaque keys to instances.  Each instance owns a
 * fixed-size, zero-initialised payload (the generated per-instance struct:
 * perm variables, PSM state, per-direction sequences...), allocated from a
 * pool of `cap` records preallocated at creation (pages are touched lazily).
 *
 * Bidirectional tables store every instance under two keys, the forward key
 * (the creator's direction, RG_DIR_TO_PASSIVE) and the swapped key
 * (RG_DIR_TO_ACTIVE); the caller builds both.  One probe finds either and
 * reports the direction.  A key equal to its own swap is stored once and is
 * always reported as forward.
 *
 * Hash index: open addressing, linear probing, 8-byte slots (32-bit hash tag
 * + record index + direction bit), load factor <= 1/2, backward-shift delete
 * (no tombstones).  Keys live in the record, next to the payload.  The index
 * starts small (RG_FLOW_MIN_SLOTS) and doubles (rehash, amortised O(1)) when
 * the load would pass 1/2, up to the size the cap needs, so a table with a
 * large cap but few live instances stays in the cache.
 *
 * Recency is coarse: the list of instances is ordered by the tick of their
 * last touch (lookup, rg_flow_touch, creation; a tick is 2^RG_FLOW_TICK_SHIFT
 * ns of the packet clock, about 16.8 ms), and a touch moves an instance to
 * the recent end only when its last touch was in an earlier tick.  Most hits
 * so store the time and a touch serial in their own record and touch no
 * other record.  When the pool is full, rg_flow_create evicts the oldest
 * instance within that coarseness (the least recently touched tick; within
 * it, the one whose first touch in that tick came first), calling
 * on_remove(RG_FLOW_EVICTED) first; the memcap evict-oldest policy likewise.
 * rg_flow_expire and rg_flow_flush are exact: they remove instances in
 * exact least-recently-used order (last touch time, then touch serial), and
 * expiry happens at the exact idle time, not a tick later.
 *
 * Removal callbacks receive the payload while it is still valid; the table
 * removes the instance after the callback returns (the callback may also
 * delete it itself).  Callbacks must not create instances in the same table.
 *
 * Under AddressSanitizer, a deleted instance's payload is poisoned, so a
 * use after delete is reported. */
#ifndef RG_FLOW_H
#define RG_FLOW_H

#include <string.h>

#include "rg_common.h"
#include "rg_stats.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { RG_DIR_TO_PASSIVE = 0, RG_DIR_TO_ACTIVE = 1 };

/* Why on_remove is called. */
enum rg_flow_reason {
    RG_FLOW_EVICTED = 1, /* pool full: least recently used instance evicted */
    RG_FLOW_EXPIRED = 2, /* idle longer than the timeout given to rg_flow_expire */
    RG_FLOW_FLUSHED = 3, /* rg_flow_flush (end of capture / shutdown) */
};

struct rg_flow;
struct rg_seq_heap;
typedef void (*rg_flow_cb)(void *ctx, struct rg_flow *t, void *inst, int reason);

typedef struct rg_flow_cfg {
    uint32_t key_len;      /* bytes per key, 1..RG_FLOW_MAX_KEY */
    uint32_t payload_size; /* bytes of per-instance payload (may be 0) */
    uint32_t cap;          /* maximum live instances, 1..RG_FLOW_MAX_CAP */
    int bidir;             /* store forward and swapped keys */
    int no_evict;          /* when full: fail creation instead of evicting */
    uint64_t seed;         /* hash seed (use a random one against hash flooding) */
    rg_flow_cb on_remove;  /* eviction / expiry / flush callback (may be NULL) */
    void *cb_ctx;
    rg_inst_stats *stats; /* counters to update (NULL: table-internal) */
    /* the context's memory accountant (rg_seq.h; NULL: none): the table's
     * bytes (records touched, the index) are counted against its flow_cap,
     * and it may evict the table's instances for either memcap */
    struct rg_seq_heap *acct;
    uint16_t layer; /* the layer index the accountant's counters and events name */
    /* a closed table (spec linger:): its records are of instances already closed, so a
     * memcap eviction counts in rg_mem_stats.evicted_closed too */
    uint8_t closed;
} rg_flow_cfg;

#define RG_FLOW_MAX_KEY 1024u
#define RG_FLOW_MAX_CAP (1u << 28)
#define RG_FLOW_NIL     UINT32_MAX
/* Initial index slots (8 bytes each) unless the cap needs fewer. */
#define RG_FLOW_MIN_SLOTS 1024u

/* Record header; the keys and then the payload follow it in the record. */
typedef struct rg_flow_rec {
    uint32_t prev, next; /* LRU links (record indices); next also links the free list */
    uint32_t tag[2];     /* hash tags of the forward / swapped key */
    uint64_t last;       /* time of the last touch (ns) */
    uint32_t flags;      /* RG_FLOW_F_* */
    uint32_t seq;        /* touch serial (rg_flow.seq at the last touch): exact order */
} rg_flow_rec;

/* Recency granularity of the list order (eviction): 2^24 ns, about 16.8 ms. */
#define RG_FLOW_TICK_SHIFT 24

#define RG_FLOW_F_LIVE   1u
#define RG_FLOW_F_SINGLE 2u /* only one key stored */

/* The table.  Fields are exposed for the inline fast paths; treat them as
 * private. */
typedef struct rg_flow {
    uint64_t *slot;    /* hash index; 0 = empty */
    uint32_t mask;     /* nslots - 1 */
    uint32_t nkeys;    /* keys stored in the index */
    uint32_t max_mask; /* nslots - 1 of the largest index (sized for cap) */
    uint32_t key_len;
    uint32_t key_off;     /* offset of the keys in a record */
    uint32_t payload_off; /* offset of the payload in a record */
    uint32_t stride;      /* bytes per record */
    uint32_t payload_size;
    uint32_t cap;
    uint32_t nlive;
    uint32_t hwm;       /* records ever used (pool high-water mark) */
    uint32_t free_head; /* free list of released records */
    uint32_t lru_head;  /* most recent tick */
    uint32_t lru_tail;  /* least recent tick */
    uint32_t iter_next; /* fixed up by delete during rg_flow_foreach */
    uint32_t seq;       /* touch serial of the next touch */
    uint32_t memo;      /* record index + 1 of rg_flow_lookup_memo_n's last hit; 0: none */
    int bidir;
    int no_evict;
    uint8_t closed; /* rg_flow_cfg.closed */
    int in_cb;      /* inside on_remove: creation refused */
    uint64_t seed;
    uint64_t now;
    uint8_t *pool;
    rg_flow_cb on_remove;
    void *cb_ctx;
    rg_inst_stats *stats;
    rg_inst_stats own_stats;
    struct rg_seq_heap *acct; /* memcaps (rg_flow_cfg.acct) */
    size_t acct_bytes;        /* bytes counted there: hwm records + the index */
    uint16_t layer;
    void *order;        /* scratch of rg_flow_expire / rg_flow_flush (exact order) */
    uint32_t order_cap; /* its entries */
} rg_flow;

/* ---- hashing ---- */
RG_INLINE uint64_t rg_hash_mix64(uint64_t h)
{
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    h *= UINT64_C(0xc4ceb9fe1a85ec53);
    h ^= h >> 33;
    return h;
}

#if defined(__GNUC__) && !defined(__clang__)
/* GCC cannot see that a runtime n equals the key's size and warns about the
 * branches for longer keys when a caller's key is a small object. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overread"
#endif

/* Fast 64-bit hash of n bytes (xxhash-style rounds, murmur finaliser; 9 to
 * 16 bytes: wyhash-style multiplies where the compiler has 128-bit products).  Inline
 * so that a compile-time constant n unrolls completely.  From 8 bytes on,
 * the last round reads the last 8 bytes (overlapping the word before when n
 * is not a multiple of 8): ceil(n / 8) rounds and no byte-wise tail, which
 * keeps a runtime n (rg_flow_hash) cheap too. */
#if defined(__SIZEOF_INT128__)
/* 64x64 -> 128-bit multiply, halves folded (wyhash's mum). */
RG_INLINE uint64_t rg_hash_mum(uint64_t a, uint64_t b)
{
    const __uint128_t m = (__uint128_t)a * b;
    return (uint64_t)m ^ (uint64_t)(m >> 64);
}
#endif

RG_INLINE uint64_t rg_hash_bytes(const void *key, size_t n, uint64_t seed)
{
    const uint8_t *p = (const uint8_t *)key;
#if defined(__SIZEOF_INT128__)
    /* 9 to 16 bytes (IPv4 flow and fragment keys): two overlapping words and
     * two multiplies, wyhash's short-input construction (about 11
     * instructions with a constant n, against 25 for the rounds below). */
    if (n > 8 && n <= 16) {
        uint64_t a, b;
        memcpy(&a, p, 8);
        memcpy(&b, p + n - 8, 8);
        return rg_hash_mum(UINT64_C(0xe7037ed1a0b428db) ^ (uint64_t)n,
                           rg_hash_mum(a ^ UINT64_C(0xe7037ed1a0b428db), b ^ seed));
    }
#endif
    uint64_t h = seed ^ (UINT64_C(0x9E3779B97F4A7C15) * (uint64_t)(n + 1));
    if (n >= 8) {
        const uint8_t *last = p + n - 8;
        uint64_t w;
        for (; p < last; p += 8) {
            memcpy(&w, p, 8);
            h ^= w * UINT64_C(0xC2B2AE3D27D4EB4F);
            h = (h << 31 | h >> 33) * UINT64_C(0x9E3779B97F4A7C15);
        }
        memcpy(&w, last, 8);
        h ^= w * UINT64_C(0xC2B2AE3D27D4EB4F);
        h = (h << 31 | h >> 33) * UINT64_C(0x9E3779B97F4A7C15);
    } else if (n) {
        uint64_t w = 0;
        if (n >= 4) {
            uint32_t a, b;
            memcpy(&a, p, 4);
            memcpy(&b, p + n - 4, 4);
            w = (uint64_t)a << 32 | b;
        } else {
            w = (uint64_t)p[0] << 16 | (uint64_t)p[n >> 1] << 8 | p[n - 1];
        }
        h ^= w * UINT64_C(0xC2B2AE3D27D4EB4F);
        h = (h << 31 | h >> 33) * UINT64_C(0x9E3779B97F4A7C15);
    }
    return rg_hash_mix64(h);
}

/* Key equality, inline: 8-byte words (the last one overlapping the one
 * before when n is not a multiple of 8), 4-byte halves below 8 bytes, no
 * early exit (the tag matched, so the keys are almost always equal).  A
 * compile-time constant n unrolls completely; a runtime n costs a short
 * loop instead of a libc call. */
RG_INLINE int rg_flow__keyeq(const void *a, const void *b, size_t n)
{
    const uint8_t *x = (const uint8_t *)a, *y = (const uint8_t *)b;
    if (n >= 8) {
        uint64_t u, v, d = 0;
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
            memcpy(&u, x + i, 8);
            memcpy(&v, y + i, 8);
            d |= u ^ v;
        }
        if (i < n) {
            memcpy(&u, x + n - 8, 8);
            memcpy(&v, y + n - 8, 8);
            d |= u ^ v;
        }
        return d == 0;
    }
    if (n >= 4) {
        uint32_t u0, v0, u1, v1;
        memcpy(&u0, x, 4);
        memcpy(&v0, y, 4);
        memcpy(&u1, x + n - 4, 4);
        memcpy(&v1, y + n - 4, 4);
        return ((u0 ^ v0) | (u1 ^ v1)) == 0;
    }
    uint32_t d = 0;
    for (size_t i = 0; i < n; i++)
        d |= (uint32_t)(x[i] ^ y[i]);
    return d == 0;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* Tag stored in the index: never used as an empty marker (the low 32 bits of
 * a slot are never 0 for a used slot), so any value is fine. */
RG_INLINE uint32_t rg_flow_tag(uint64_t h)
{
    return (uint32_t)(h ^ (h >> 32));
}

RG_INLINE uint64_t rg_flow_hash(const rg_flow *t, const void *key)
{
    return rg_hash_bytes(key, t->key_len, t->seed);
}

/* ---- record access ---- */
RG_INLINE rg_flow_rec *rg_flow__rec(const rg_flow *t, uint32_t idx)
{
    return (rg_flow_rec *)(void *)(t->pool + (size_t)idx * t->stride);
}
RG_INLINE void *rg_flow__payload(const rg_flow *t, rg_flow_rec *r)
{
    return (uint8_t *)r + t->payload_off;
}
RG_INLINE rg_flow_rec *rg_flow__rec_of(const rg_flow *t, const void *inst)
{
    return (rg_flow_rec *)(void *)((uint8_t *)(uintptr_t)inst - t->payload_off);
}
RG_INLINE uint32_t rg_flow__idx_of(const rg_flow *t, const rg_flow_rec *r)
{
    return (uint32_t)(((const uint8_t *)r - t->pool) / t->stride);
}

/* Move a record that is not the head to the head of the list (inline: a
 * hit does this for its first touch in a tick). */
RG_INLINE void rg_flow__lru_move_front(rg_flow *t, uint32_t idx, rg_flow_rec *r)
{
    const uint32_t prev = r->prev, next = r->next, head = t->lru_head;
    rg_flow__rec(t, prev)->next = next; /* not the head: prev is valid */
    if (next != RG_FLOW_NIL)
        rg_flow__rec(t, next)->prev = prev;
    else
        t->lru_tail = prev;
    r->prev = RG_FLOW_NIL;
    r->next = head;
    rg_flow__rec(t, head)->prev = idx;
    t->lru_head = idx;
}

/* A touch: the list moves only on the first touch in a tick (the list stays
 * ordered by the tick of the last touch); the serial keeps the exact order. */
RG_INLINE void rg_flow__touch(rg_flow *t, uint32_t idx, rg_flow_rec *r)
{
    const uint64_t now = t->now;
    if (((r->last ^ now) >> RG_FLOW_TICK_SHIFT) != 0 && t->lru_head != idx)
        rg_flow__lru_move_front(t, idx, r);
    r->last = now;
    r->seq = t->seq++;
}

/* ---- API ---- */
/* NULL when cfg is invalid or memory is short. */
rg_flow *rg_flow_new(const rg_flow_cfg *cfg);
/* Free the table without calling on_remove (call rg_flow_flush first). */
void rg_flow_free(rg_flow *t);

/* Packet clock used to stamp touches; monotonic (older times are ignored). */
RG_INLINE void rg_flow_set_time(rg_flow *t, uint64_t now_ns)
{
    if (now_ns > t->now) t->now = now_ns;
}

RG_INLINE int rg_flow__keyeq_w(const void *a, const uint64_t *w, size_t n); /* below */

/* The record index + 1 of a key (0: absent); *dir gets the direction.  The key is its bytes,
 * or with `words` (a constant at each call) the 8-byte words of rg_flow_lookup_wt. */
RG_INLINE uint32_t rg_flow__probe_k(const rg_flow *t, const void *key, size_t key_len, uint64_t h,
                                    uint32_t *dir, int words)
{
    if (RG_UNLIKELY(t->nlive == 0)) return 0; /* e.g. IP: instances only for fragments */
    const uint32_t tag = rg_flow_tag(h), mask = t->mask;
    const uint64_t *slot = t->slot;
    uint32_t i = tag & mask;
    for (;;) {
        uint64_t s = slot[i];
        if (RG_LIKELY(s == 0)) return 0;
        if ((uint32_t)(s >> 32) == tag) {
            uint32_t low = (uint32_t)s;
            uint32_t d = low & 1u;
            const uint8_t *k = t->pool + (size_t)((low >> 1) - 1) * t->stride + t->key_off;
            const int eq = words ? rg_flow__keyeq_w(k + d * key_len, (const uint64_t *)key, key_len)
                                 : rg_flow__keyeq(k + d * key_len, key, key_len);
            if (RG_LIKELY(eq)) {
                *dir = d;
                return low >> 1;
            }
        }
        i = (i + 1) & mask;
    }
}

RG_INLINE uint32_t rg_flow__probe(const rg_flow *t, const void *key, size_t key_len, uint64_t h,
                                  uint32_t *dir)
{
    return rg_flow__probe_k(t, key, key_len, h, dir, 0);
}

/* Probe with a precomputed hash and an explicit key length (pass a constant
 * equal to the table's key_len to let the compiler unroll the comparison).
 * Returns the payload or NULL; *dir (optional) gets the direction. No touch. */
RG_INLINE void *rg_flow_find_hn(const rg_flow *t, const void *key, size_t key_len, uint64_t h,
                                int *dir)
{
    uint32_t d;
    uint32_t i1 = rg_flow__probe(t, key, key_len, h, &d);
    if (!i1) return NULL;
    if (dir) *dir = (int)d;
    return rg_flow__payload(t, rg_flow__rec(t, i1 - 1));
}

/* Lookup and touch (LRU + last-seen time). */
RG_INLINE void *rg_flow_lookup_hn(rg_flow *t, const void *key, size_t key_len, uint64_t h, int *dir)
{
    uint32_t d;
    uint32_t i1 = rg_flow__probe(t, key, key_len, h, &d);
    if (!i1) return NULL;
    if (dir) *dir = (int)d;
    rg_flow_rec *r = rg_flow__rec(t, i1 - 1);
    rg_flow__touch(t, i1 - 1, r);
    return rg_flow__payload(t, r);
}

/* Lookup with an explicit key length (pass a constant equal to the table's
 * key_len: hash and compare unroll); an empty table costs no hashing. */
RG_INLINE void *rg_flow_lookup_n(rg_flow *t, const void *key, size_t key_len, int *dir)
{
    if (t->nlive == 0) return NULL;
    return rg_flow_lookup_hn(t, key, key_len, rg_hash_bytes(key, key_len, t->seed), dir);
}

/* rg_flow_lookup_n for the tables of a tunnel's outer layers (the generator
 * picks it for a layer with an instance table below another one): their
 * instance is shared by every flow inside the tunnel, so consecutive packets
 * hit the same record far more often than at an inner layer.  The record of
 * the last hit is compared first, in both directions, before any hashing.
 * Same result, direction and touch as rg_flow_lookup_n (keys are unique in
 * the table; a record whose two keys are equal answers direction 0, as its
 * one index entry does); removing the record forgets it (rg_flow.c). */
RG_INLINE void *rg_flow_lookup_memo_n(rg_flow *t, const void *key, size_t key_len, int *dir)
{
    if (t->nlive == 0) return NULL;
    const uint32_t m = t->memo;
    if (RG_LIKELY(m != 0)) {
        rg_flow_rec *r = rg_flow__rec(t, m - 1);
        const uint8_t *k = (const uint8_t *)r + t->key_off;
        int d = -1;
        if (rg_flow__keyeq(k, key, key_len))
            d = 0;
        else if (!(r->flags & RG_FLOW_F_SINGLE) && rg_flow__keyeq(k + key_len, key, key_len))
            d = 1;
        if (d >= 0) {
            if (dir) *dir = d;
            rg_flow__touch(t, m - 1, r);
            return rg_flow__payload(t, r);
        }
    }
    uint32_t d;
    const uint32_t i1 = rg_flow__probe(t, key, key_len, rg_hash_bytes(key, key_len, t->seed), &d);
    if (!i1) return NULL;
    t->memo = i1;
    if (dir) *dir = (int)d;
    rg_flow_rec *r = rg_flow__rec(t, i1 - 1);
    rg_flow__touch(t, i1 - 1, r);
    return rg_flow__payload(t, r);
}

/* With the table's key length; an empty table costs no hashing. */
RG_INLINE void *rg_flow_find(const rg_flow *t, const void *key, int *dir)
{
    if (t->nlive == 0) return NULL;
    return rg_flow_find_hn(t, key, t->key_len, rg_flow_hash(t, key), dir);
}
RG_INLINE void *rg_flow_lookup(rg_flow *t, const void *key, int *dir)
{
    return rg_flow_lookup_n(t, key, t->key_len, dir);
}

/* Bytes of index and live records from which a table is taken to have left
 * the L2 cache: burst stage 1 runs only when a table of the stack is that big
 * (below it, parsing twice costs more than the misses it hides). */
#define RG_FLOW_PREFETCH_MIN_BYTES (UINT64_C(1) << 20)
RG_INLINE int rg_flow_cold(const rg_flow *t)
{
    return (uint64_t)t->nlive * t->stride + ((uint64_t)t->mask + 1) * sizeof(uint64_t) >=
           RG_FLOW_PREFETCH_MIN_BYTES;
}

/* Burst stage 1: prefetch the index slot where a key's probe starts (the
 * lookup itself follows in stage 2).  Hashes the key; touches nothing. */
RG_INLINE void rg_flow_prefetch_h(const rg_flow *t, uint64_t h)
{
#if defined(__GNUC__)
    __builtin_prefetch(&t->slot[rg_flow_tag(h) & t->mask]);
#else
    (void)t;
    (void)h;
#endif
}
RG_INLINE void rg_flow_prefetch(const rg_flow *t, const void *key, size_t key_len)
{
    rg_flow_prefetch_h(t, rg_hash_bytes(key, key_len, t->seed));
}

/* Burst stage 1, pass B: the index slot of hash h (prefetched in pass A) is
 * read, and every record whose tag matches it (keys not compared: a tag
 * collision costs one useless prefetch) is prefetched, its whole record up to
 * RG_FLOW_PREFETCH_LINES cache lines (header, keys, payload: stage 2 touches
 * all three on a hit).  Reads only the index, which holds live records only,
 * and never a record: it is safe on any table state.  A hint only: the table
 * may change before the lookup (stage 2 recomputes everything).  Probes at
 * most RG_FLOW_PREFETCH_PROBE slots.  Returns the first candidate's payload
 * (NULL: none), for tests. */
#define RG_FLOW_PREFETCH_PROBE 4u
#ifndef RG_FLOW_PREFETCH_LINES
#define RG_FLOW_PREFETCH_LINES 8u
#endif
RG_INLINE const void *rg_flow_prefetch_rec(const rg_flow *t, uint64_t h)
{
    const uint32_t tag = rg_flow_tag(h), mask = t->mask;
    const uint8_t *first = NULL;
    uint32_t i = tag & mask;
    size_t span =
        t->stride < RG_FLOW_PREFETCH_LINES * 64u ? t->stride : RG_FLOW_PREFETCH_LINES * 64u;
    for (unsigned k = 0; k < RG_FLOW_PREFETCH_PROBE; k++, i = (i + 1) & mask) {
        const uint64_t s = t->slot[i];
        if (s == 0) break;
        if ((uint32_t)(s >> 32) != tag) continue;
        const uint8_t *r = t->pool + (size_t)(((uint32_t)s >> 1) - 1) * t->stride;
#if defined(__GNUC__)
        /* every line the record spans (records are 16-byte aligned, not 64) */
        const uintptr_t end = (uintptr_t)r + span - 1;
        for (uintptr_t a = (uintptr_t)r & ~(uintptr_t)63; a <= end; a += 64)
            __builtin_prefetch((const void *)a, 1);
#endif
        if (!first) first = r + t->payload_off;
    }
    return first;
}

/* The hints pass A leaves for pass B: each table lookup stage 1 reaches (a
 * table, the key's hash).  Kept in the stack's context; a burst's hints are
 * used and dropped before its stage 2 starts. */
#define RG_FLOW_HINTS 256u
#ifndef RG_FLOW_HINT_LAG
#define RG_FLOW_HINT_LAG 8u
#endif
typedef struct rg_flow_hints {
    uint32_t n, done;
    struct {
        const rg_flow *t;
        uint64_t h;
    } e[RG_FLOW_HINTS];
} rg_flow_hints;

/* Pass A keeps the hash h of t for pass B, which runs RG_FLOW_HINT_LAG lookups behind: that
 * slot has had time to arrive. */
RG_INLINE void rg_flow__hint_keep(rg_flow_hints *hs, const rg_flow *t, uint64_t h)
{
    if (hs->n < RG_FLOW_HINTS) {
        hs->e[hs->n].t = t;
        hs->e[hs->n].h = h;
        hs->n++;
    }
    if (hs->n - hs->done > RG_FLOW_HINT_LAG) {
        (void)rg_flow_prefetch_rec(hs->e[hs->done].t, hs->e[hs->done].h);
        hs->done++;
    }
}

/* Pass A: hash a key, prefetch its index slot, keep the hash for pass B in
 * hs (NULL: no pass B; dropped when the burst has more lookups than
 * RG_FLOW_HINTS).  rev (a bidirectional table's swapped key, or NULL): its
 * slot is prefetched too, as creating an instance inserts there and deleting
 * one removes from there. */
RG_INLINE void rg_flow_prefetch_hint(rg_flow_hints *hs, const rg_flow *t, const void *key,
                                     const void *rev, size_t key_len)
{
    const uint64_t h = rg_hash_bytes(key, key_len, t->seed);
    rg_flow_prefetch_h(t, h);
    if (rev) rg_flow_prefetch_h(t, rg_hash_bytes(rev, key_len, t->seed));
    if (hs) rg_flow__hint_keep(hs, t, h); /* else no pass B */
}

/* The rest of pass B: the hints pass A's lag left (rg_flow_prefetch_rec
 * each), then drop them all. */
void rg_flow_prefetch_hints(rg_flow_hints *hs);

/* Create an instance for a key that is not in the table (the caller looked
 * it up first; duplicates are not detected).  rev is read only for
 * bidirectional tables.  hf / hr are the keys' hashes (rg_flow_hash).
 * Returns the zeroed payload, or NULL when the pool is full and eviction is
 * disabled, or when called from a removal callback. */
void *rg_flow_create_h(rg_flow *t, const void *fwd, uint64_t hf, const void *rev, uint64_t hr);
/* Create with an explicit key length (a constant: the hashes unroll). */
RG_INLINE void *rg_flow_create_n(rg_flow *t, const void *fwd, const void *rev, size_t key_len)
{
    return rg_flow_create_h(t, fwd, rg_hash_bytes(fwd, key_len, t->seed), rev,
                            (t->bidir && rev) ? rg_hash_bytes(rev, key_len, t->seed) : 0);
}
RG_INLINE void *rg_flow_create(rg_flow *t, const void *fwd, const void *rev)
{
    return rg_flow_create_n(t, fwd, rev, t->key_len);
}

/* rg_flow_set_time(t, now) then rg_flow_lookup_n, except that an empty table's time is not
 * set: only records (a touch), creates and expiry read it, and rg_flow_create_nt and
 * rg_flow_expire set it first, so with a packet clock that never goes back (rg_clock) every
 * read sees the same time.  (An IPv4 layer's table is empty but for fragments.) */
RG_INLINE void *rg_flow_lookup_nt(rg_flow *t, const void *key, size_t key_len, int *dir,
                                  uint64_t now_ns)
{
    if (t->nlive == 0) return NULL;
    rg_flow_set_time(t, now_ns);
    return rg_flow_lookup_hn(t, key, key_len, rg_hash_bytes(key, key_len, t->seed), dir);
}
/* rg_flow_set_time(t, now) then rg_flow_create_n: the create of rg_flow_lookup_nt's users. */
RG_INLINE void *rg_flow_create_nt(rg_flow *t, const void *fwd, const void *rev, size_t key_len,
                                  uint64_t now_ns)
{
    rg_flow_set_time(t, now_ns);
    return rg_flow_create_n(t, fwd, rev, key_len);
}

/* ---- keys passed as words (no store-forwarding stall) ----
 * Generated code writes a key with narrow stores (2- and 4-byte fields) and
 * the hash then reads it 8 bytes at a time: the store buffer cannot forward
 * several narrow stores into one wide load, so every lookup stalled on its
 * first read.  These entry points take the key as the words the hash and the
 * compare read, assembled in registers from the parsed fields, and give the
 * same hash, record and direction as the byte-key versions.
 *
 * RG_KW_WORDS(n) words: for n >= 8, word i holds key bytes [8i, 8i + 8) and
 * the last one bytes [n - 8, n) (overlapping the one before when n is not a
 * multiple of 8), as rg_hash_bytes and rg_flow__keyeq read them; below 8
 * bytes one word holding the n bytes, zeros above.  A word is the value a
 * memcpy of those 8 bytes into a uint64_t gives (host byte order). */
#define RG_KW_WORDS(n) ((n) < 8 ? 1u : ((n) + 7u) / 8u)
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define RG_KW_BE 1
#else
#define RG_KW_BE 0
#endif

/* Byte offset in the key of word i of an n-byte key (n >= 8). */
RG_INLINE size_t rg_kw_off(size_t n, size_t i)
{
    return 8 * i + 8 <= n ? 8 * i : n - 8;
}

/* The k bytes of a word image x from its byte `from` on, moved to byte `pos`
 * of a word (k + from <= 8, k + pos <= 8).  An image is a word as a memcpy
 * of bytes gives it: byte 0 is the low byte on a little-endian host. */
RG_INLINE uint64_t rg_kw_put(uint64_t x, unsigned from, unsigned k, unsigned pos)
{
#if RG_KW_BE
    return ((x << (8 * from)) & ~(~UINT64_C(0) >> 1 >> (8 * k - 1))) >> (8 * pos);
#else
    const uint64_t m = k >= 8 ? ~UINT64_C(0) : (UINT64_C(1) << (8 * k)) - 1;
    return ((x >> (8 * from)) & m) << (8 * pos);
#endif
}

/* The image of a number stored big-endian in `size` bytes (1..8; higher
 * bits dropped, as rg__put_be does). */
RG_INLINE uint64_t rg_kw_be(uint64_t v, unsigned size)
{
#if RG_KW_BE
    return v << (8 * (8 - size));
#elif defined(__GNUC__)
    /* the width's own swap: a field loaded big-endian (rg_load_be16/32) swaps back to
     * its raw load */
    if (size == 1) return v & 0xffu;
    if (size == 2) return __builtin_bswap16((uint16_t)v);
    if (size == 4) return __builtin_bswap32((uint32_t)v);
    return __builtin_bswap64(v) >> (8 * (8 - size));
#else
    uint64_t x = 0;
    for (unsigned i = 0; i < size; i++)
        x |= ((v >> (8 * (size - 1 - i))) & 0xffu) << (8 * i);
    return x;
#endif
}

/* The image of bytes [from, from + k) (k <= 8) of a byte field of `size`
 * bytes stored as rg_bytes_store stores it (truncated, zero-padded). */
RG_INLINE uint64_t rg_kw_bytes(rg_bytes v, size_t size, size_t from, size_t k)
{
    uint64_t x = 0;
    if (RG_LIKELY(v.len >= from + k && v.ptr)) { /* from + k <= size */
        memcpy(&x, v.ptr + from, k);
    } else {
        const size_t n = v.ptr ? (v.len < size ? v.len : size) : 0;
        if (n > from) memcpy(&x, v.ptr + from, n - from);
    }
    return x;
}

/* Byte i and the 4 bytes from i of a word image (keys below 8 bytes). */
RG_INLINE uint64_t rg_kw__byte(uint64_t x, size_t i)
{
    return RG_KW_BE ? (x >> (56 - 8 * i)) & 0xffu : (x >> (8 * i)) & 0xffu;
}
RG_INLINE uint32_t rg_kw__u32(uint64_t x, size_t i)
{
    return RG_KW_BE ? (uint32_t)(x >> (32 - 8 * i)) : (uint32_t)(x >> (8 * i));
}

/* rg_hash_bytes of the key whose words are w. */
RG_INLINE uint64_t rg_hash_words(const uint64_t *w, size_t n, uint64_t seed)
{
#if defined(__SIZEOF_INT128__)
    if (n > 8 && n <= 16)
        return rg_hash_mum(UINT64_C(0xe7037ed1a0b428db) ^ (uint64_t)n,
                           rg_hash_mum(w[0] ^ UINT64_C(0xe7037ed1a0b428db), w[1] ^ seed));
#endif
    uint64_t h = seed ^ (UINT64_C(0x9E3779B97F4A7C15) * (uint64_t)(n + 1));
    if (n >= 8) {
        const size_t nw = RG_KW_WORDS(n);
        for (size_t i = 0; i < nw; i++) {
            h ^= w[i] * UINT64_C(0xC2B2AE3D27D4EB4F);
            h = (h << 31 | h >> 33) * UINT64_C(0x9E3779B97F4A7C15);
        }
    } else if (n) {
        uint64_t x;
        if (n >= 4)
            x = (uint64_t)rg_kw__u32(w[0], 0) << 32 | rg_kw__u32(w[0], n - 4);
        else
            x = rg_kw__byte(w[0], 0) << 16 | rg_kw__byte(w[0], n >> 1) << 8 |
                rg_kw__byte(w[0], n - 1);
        h ^= x * UINT64_C(0xC2B2AE3D27D4EB4F);
        h = (h << 31 | h >> 33) * UINT64_C(0x9E3779B97F4A7C15);
    }
    return rg_hash_mix64(h);
}

/* rg_flow__keyeq of the stored key a and the key whose words are w. */
RG_INLINE int rg_flow__keyeq_w(const void *a, const uint64_t *w, size_t n)
{
    const uint8_t *x = (const uint8_t *)a;
    if (n >= 8) {
        uint64_t u, d = 0;
        for (size_t i = 0; i < RG_KW_WORDS(n); i++) {
            memcpy(&u, x + rg_kw_off(n, i), 8);
            d |= u ^ w[i];
        }
        return d == 0;
    }
    if (n >= 4) {
        uint32_t u0, u1;
        memcpy(&u0, x, 4);
        memcpy(&u1, x + n - 4, 4);
        return ((u0 ^ rg_kw__u32(w[0], 0)) | (u1 ^ rg_kw__u32(w[0], n - 4))) == 0;
    }
    uint64_t d = 0;
    for (size_t i = 0; i < n; i++)
        d |= x[i] ^ rg_kw__byte(w[0], i);
    return d == 0;
}

/* rg_flow__probe with the key as words. */
RG_INLINE uint32_t rg_flow__probe_w(const rg_flow *t, const uint64_t *w, size_t key_len, uint64_t h,
                                    uint32_t *dir)
{
    return rg_flow__probe_k(t, w, key_len, h, dir, 1);
}

/* rg_flow_lookup_nt with the key as words (same record, direction, touch). */
RG_INLINE void *rg_flow_lookup_wt(rg_flow *t, const uint64_t *w, size_t key_len, int *dir,
                                  uint64_t now_ns)
{
    if (t->nlive == 0) return NULL;
    rg_flow_set_time(t, now_ns);
    uint32_t d;
    const uint32_t i1 = rg_flow__probe_w(t, w, key_len, rg_hash_words(w, key_len, t->seed), &d);
    if (!i1) return NULL;
    if (dir) *dir = (int)d;
    rg_flow_rec *r = rg_flow__rec(t, i1 - 1);
    rg_flow__touch(t, i1 - 1, r);
    return rg_flow__payload(t, r);
}

/* rg_flow_prefetch_hint with the keys as words (rev NULL: none). */
RG_INLINE void rg_flow_prefetch_hint_w(rg_flow_hints *hs, const rg_flow *t, const uint64_t *w,
                                       const uint64_t *rev, size_t key_len)
{
    const uint64_t h = rg_hash_words(w, key_len, t->seed);
    rg_flow_prefetch_h(t, h);
    if (rev) rg_flow_prefetch_h(t, rg_hash_words(rev, key_len, t->seed));
    if (hs) rg_flow__hint_keep(hs, t, h);
}

/* Remove an instance: both keys, the LRU entry, the record.  The payload is
 * invalid afterwards.  Deleting a pointer that is not live is ignored. */
void rg_flow_delete(rg_flow *t, void *inst);

/* Explicit LRU touch (lookup already touches). */
RG_INLINE void rg_flow_touch(rg_flow *t, void *inst)
{
    rg_flow_rec *r = rg_flow__rec_of(t, inst);
    rg_flow__touch(t, rg_flow__idx_of(t, r), r);
}

/* Remove every instance idle for at least idle_ns at time now (least recently
 * used first, exact), calling on_remove(RG_FLOW_EXPIRED).  O(1) when no
 * instance's tick is due; otherwise it sorts the due ticks' instances.
 * Returns the number removed.  idle_ns == 0 disables. */
size_t rg_flow_expire(rg_flow *t, uint64_t now, uint64_t idle_ns);

/* Call fn on every live instance in list order (least recent tick first; see
 * the top).  fn may delete any instance (deleted ones are not visited);
 * instances it creates, or looks up for the first time in the current tick,
 * move to the recent end and are visited again.  Returns the count visited. */
typedef void (*rg_flow_iter_fn)(void *ctx, rg_flow *t, void *inst);
size_t rg_flow_foreach(rg_flow *t, rg_flow_iter_fn fn, void *ctx);

/* Memcap evict-oldest (rg_seq_heap): evict the least recently active
 * instances of the accountant's tables (on_remove(RG_FLOW_EVICTED)), oldest
 * first across tables (within a tick: see the top), until the reassembly bytes plus `need` fit its
 * cap or nothing more may go (instances touched at the current flow clock, tables inside a removal
 * callback; at most 4096 per call).  Returns the number evicted. */
size_t rg_flow_reclaim(struct rg_seq_heap *h, size_t need);

/* Remove all instances, calling on_remove(RG_FLOW_FLUSHED) for each, least
 * recently used first (exact order). */
size_t rg_flow_flush(rg_flow *t);

/* ---- accessors ---- */
RG_INLINE uint32_t rg_flow_live(const rg_flow *t)
{
    return t->nlive;
}
RG_INLINE uint32_t rg_flow_cap(const rg_flow *t)
{
    return t->cap;
}
/* The stored key of one direction (NULL for the swapped key of a
 * unidirectional table). */
const void *rg_flow_key(const rg_flow *t, const void *inst, int dir);
/* Last touch time of an instance. */
RG_INLINE uint64_t rg_flow_last_seen(const rg_flow *t, const void *inst)
{
    return rg_flow__rec_of(t, inst)->last;
}
/* Stable small integer id of a live instance (its pool index, < cap). */
RG_INLINE uint32_t rg_flow_id(const rg_flow *t, const void *inst)
{
    return rg_flow__idx_of(t, rg_flow__rec_of(t, inst));
}
/* Counters (the external ones if cfg.stats was given). */
RG_INLINE const rg_inst_stats *rg_flow_stats(const rg_flow *t)
{
    return t->stats;
}
/* Bytes of memory per instance (record stride) and the index size (now:
 * the index grows with the number of live instances). */
RG_INLINE size_t rg_flow_record_size(const rg_flow *t)
{
    return t->stride;
}
RG_INLINE size_t rg_flow_index_bytes(const rg_flow *t)
{
    return ((size_t)t->mask + 1) * sizeof(uint64_t);
}

#ifdef __cplusplus
}
#endif
#endif /* RG_FLOW_H */
