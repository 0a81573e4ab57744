/* test_flow.c - bidirectional flow / instance table. */
#include "rg_test.h"

#include "rg/rg_flow.h"

#ifdef RG_HAVE_ASAN
int __asan_address_is_poisoned(void const volatile *addr);
#endif

/* A TCP/IPv4-like key: saddr, daddr, sport, dport (12 bytes). */
typedef struct {
    uint8_t b[12];
} key12;

static key12 k12(uint32_t sa, uint32_t da, uint16_t sp, uint16_t dp)
{
    key12 k;
    memcpy(k.b, &sa, 4);
    memcpy(k.b + 4, &da, 4);
    memcpy(k.b + 8, &sp, 2);
    memcpy(k.b + 10, &dp, 2);
    return k;
}
static key12 k12_rev(const key12 *k)
{
    key12 r;
    memcpy(r.b, k->b + 4, 4);
    memcpy(r.b + 4, k->b, 4);
    memcpy(r.b + 8, k->b + 10, 2);
    memcpy(r.b + 10, k->b + 8, 2);
    return r;
}

typedef struct {
    uint64_t id;
    uint8_t state;
    uint8_t pad[45];
} payload;

/* Two lookups of one key in two tables kept alike found the same record in the same
 * direction, or both nothing; with del, a found record is deleted from both.  1: found. */
static int same_found(rg_flow *ta, payload *pa, int da, rg_flow *tb, payload *pb, int db, int del)
{
    assert_int_equal(pa == NULL, pb == NULL);
    if (!pa) return 0;
    assert_int_equal(pa->id, pb->id);
    assert_int_equal(da, db);
    if (del) {
        rg_flow_delete(ta, pa);
        rg_flow_delete(tb, pb);
    }
    return 1;
}

/* removal callback log */
typedef struct {
    int n;
    uint64_t ids[64];
    int reasons[64];
    int delete_self;
    int try_create;
    void *created;
} cblog;

static void on_remove(void *ctx, rg_flow *t, void *inst, int reason)
{
    cblog *l = ctx;
    payload *p = inst;
    if (l->n < 64) {
        l->ids[l->n] = p->id;
        l->reasons[l->n] = reason;
    }
    l->n++;
    if (l->try_create) {
        key12 k = k12(0xdead, 0xbeef, 1, 2), r = k12_rev(&k);
        l->created = rg_flow_create(t, k.b, r.b);
    }
    if (l->delete_self) rg_flow_delete(t, inst);
}

static rg_flow *mk(uint32_t cap, int bidir, cblog *log)
{
    rg_flow_cfg cfg = {.key_len = 12,
                       .payload_size = sizeof(payload),
                       .cap = cap,
                       .bidir = bidir,
                       .seed = 0x1234,
                       .on_remove = on_remove,
                       .cb_ctx = log};
    rg_flow *t = rg_flow_new(&cfg);
    assert_non_null(t);
    return t;
}

static void test_bad_config(void **state)
{
    (void)state;
    rg_flow_cfg cfg = {.key_len = 0, .cap = 10};
    assert_null(rg_flow_new(&cfg));
    cfg.key_len = 4;
    cfg.cap = 0;
    assert_null(rg_flow_new(&cfg));
    cfg.cap = RG_FLOW_MAX_CAP + 1;
    assert_null(rg_flow_new(&cfg));
    cfg.cap = 1;
    cfg.key_len = RG_FLOW_MAX_KEY + 1;
    assert_null(rg_flow_new(&cfg));
    assert_null(rg_flow_new(NULL));
    rg_flow_free(NULL);
}

static void test_both_directions(void **state)
{
    (void)state;
    cblog log = {0};
    rg_flow *t = mk(16, 1, &log);
    key12 f = k12(0x0a000001, 0x0a000002, 1234, 80), r = k12_rev(&f);
    int dir = -1;
    assert_null(rg_flow_lookup(t, f.b, &dir));
    payload *p = rg_flow_create(t, f.b, r.b);
    assert_non_null(p);
    assert_int_equal(((uintptr_t)p) % 16, 0);
    for (size_t i = 0; i < sizeof *p; i++)
        assert_int_equal(((uint8_t *)p)[i], 0); /* zeroed */
    p->id = 7;
    assert_ptr_equal(rg_flow_lookup(t, f.b, &dir), p);
    assert_int_equal(dir, RG_DIR_TO_PASSIVE);
    assert_ptr_equal(rg_flow_lookup(t, r.b, &dir), p);
    assert_int_equal(dir, RG_DIR_TO_ACTIVE);
    assert_ptr_equal(rg_flow_find(t, r.b, NULL), p);
    assert_memory_equal(rg_flow_key(t, p, 0), f.b, 12);
    assert_memory_equal(rg_flow_key(t, p, 1), r.b, 12);
    /* a different flow does not match */
    key12 g = k12(0x0a000001, 0x0a000002, 1235, 80);
    assert_null(rg_flow_lookup(t, g.b, &dir));
    assert_int_equal(rg_flow_live(t), 1);
    rg_flow_delete(t, p);
    assert_null(rg_flow_lookup(t, f.b, &dir));
    assert_null(rg_flow_lookup(t, r.b, &dir));
    assert_int_equal(rg_flow_live(t), 0);
    assert_int_equal(log.n, 0); /* explicit deletes do not call back */
    rg_flow_delete(t, p);       /* double delete: ignored */
    assert_int_equal(rg_flow_stats(t)->destroyed, 1);
    rg_flow_free(t);
}

static void test_unidirectional(void **state)
{
    (void)state;
    rg_flow *t = mk(4, 0, NULL);
    key12 f = k12(1, 2, 3, 4), r = k12_rev(&f);
    payload *p = rg_flow_create(t, f.b, r.b);
    int dir = -1;
    assert_ptr_equal(rg_flow_lookup(t, f.b, &dir), p);
    assert_int_equal(dir, 0);
    assert_null(rg_flow_lookup(t, r.b, &dir));
    assert_null(rg_flow_key(t, p, 1));
    rg_flow_delete(t, p);
    assert_null(rg_flow_lookup(t, f.b, &dir));
    rg_flow_free(t);
}

/* A key equal to its swap (same address and port on both sides). */
static void test_symmetric_key(void **state)
{
    (void)state;
    rg_flow *t = mk(4, 1, NULL);
    key12 f = k12(5, 5, 9, 9), r = k12_rev(&f);
    assert_memory_equal(f.b, r.b, 12);
    payload *p = rg_flow_create(t, f.b, r.b);
    int dir = -1;
    assert_ptr_equal(rg_flow_lookup(t, r.b, &dir), p);
    assert_int_equal(dir, RG_DIR_TO_PASSIVE);
    rg_flow_delete(t, p);
    assert_null(rg_flow_lookup(t, f.b, &dir));
    for (uint32_t i = 0; i < t->mask + 1; i++)
        assert_int_equal(t->slot[i], 0);
    rg_flow_free(t);
}

/* Eviction when the cap is hit: the least recently used instance goes (the
 * touches here are in different ticks, where the order is exact), lookups
 * count as use, the callback sees the victim before it is removed. */
static void test_cap_and_eviction(void **state)
{
    (void)state;
    cblog log = {0};
    rg_inst_stats st = {0};
    rg_flow_cfg cfg = {.key_len = 12,
                       .payload_size = sizeof(payload),
                       .cap = 4,
                       .bidir = 1,
                       .on_remove = on_remove,
                       .cb_ctx = &log,
                       .stats = &st};
    rg_flow *t = rg_flow_new(&cfg);
    key12 k[8], r[8];
    payload *p[8];
    for (int i = 0; i < 4; i++) {
        k[i] = k12(100 + i, 200, 1, 2);
        r[i] = k12_rev(&k[i]);
        rg_flow_set_time(t, (uint64_t)i << RG_FLOW_TICK_SHIFT);
        p[i] = rg_flow_create(t, k[i].b, r[i].b);
        p[i]->id = (uint64_t)i;
    }
    assert_int_equal(st.live, 4);
    /* use flow 0 (reverse direction) in a later tick: flow 1 is now the LRU */
    rg_flow_set_time(t, (uint64_t)4 << RG_FLOW_TICK_SHIFT);
    int dir;
    assert_ptr_equal(rg_flow_lookup(t, r[0].b, &dir), p[0]);
    k[4] = k12(104, 200, 1, 2);
    r[4] = k12_rev(&k[4]);
    p[4] = rg_flow_create(t, k[4].b, r[4].b);
    assert_non_null(p[4]);
    p[4]->id = 4;
    assert_int_equal(log.n, 1);
    assert_int_equal(log.ids[0], 1);
    assert_int_equal(log.reasons[0], RG_FLOW_EVICTED);
    assert_null(rg_flow_lookup(t, k[1].b, &dir));
    assert_null(rg_flow_lookup(t, r[1].b, &dir));
    assert_int_equal(st.evicted, 1);
    assert_int_equal(st.live, 4);
    assert_int_equal(st.created, 5);
    assert_int_equal(st.destroyed, 1);
    assert_int_equal(st.peak_live, 4);
    /* the victim's record is reused; the others are intact */
    rg_flow_set_time(t, (uint64_t)5 << RG_FLOW_TICK_SHIFT);
    for (int i = 0; i < 5; i++) {
        if (i == 1) continue;
        assert_ptr_equal(rg_flow_lookup(t, k[i].b, &dir), p[i]);
        assert_int_equal(dir, 0);
        assert_ptr_equal(rg_flow_lookup(t, r[i].b, &dir), p[i]);
        assert_int_equal(dir, 1);
        assert_int_equal(p[i]->id, (uint64_t)i);
    }
    /* LRU order now: 0, 2, 3, 4 (oldest first); evict three more */
    for (int i = 5; i < 8; i++) {
        k[i] = k12(100 + (uint32_t)i, 200, 1, 2);
        r[i] = k12_rev(&k[i]);
        p[i] = rg_flow_create(t, k[i].b, r[i].b);
        p[i]->id = (uint64_t)i;
    }
    assert_int_equal(log.n, 4);
    assert_int_equal(log.ids[1], 0);
    assert_int_equal(log.ids[2], 2);
    assert_int_equal(log.ids[3], 3);
    assert_int_equal(rg_flow_live(t), 4);
    rg_flow_free(t);
}

/* Within one tick the list order is the order of the first touch in that
 * tick: a later touch in the same tick does not move an instance, so the
 * eviction order is coarse there (documented in rg_flow.h); expiry and flush
 * still follow the exact order. */
static void test_coarse_order_within_tick(void **state)
{
    (void)state;
    cblog log = {0};
    rg_flow *t = mk(3, 1, &log);
    key12 k[4], r[4];
    payload *p[4];
    for (int i = 0; i < 3; i++) {
        k[i] = k12(300 + (uint32_t)i, 9, 1, 2);
        r[i] = k12_rev(&k[i]);
        rg_flow_set_time(t, 100 + (uint64_t)i);
        p[i] = rg_flow_create(t, k[i].b, r[i].b);
        p[i]->id = (uint64_t)i;
    }
    int dir;
    rg_flow_set_time(t, 200); /* the same tick */
    assert_ptr_equal(rg_flow_lookup(t, k[0].b, &dir), p[0]);
    assert_int_equal(rg_flow_last_seen(t, p[0]), 200);
    k[3] = k12(303, 9, 1, 2);
    r[3] = k12_rev(&k[3]);
    assert_non_null(rg_flow_create(t, k[3].b, r[3].b)); /* evicts 0: first touched in the tick */
    assert_int_equal(log.n, 1);
    assert_int_equal(log.ids[0], 0);
    /* flush: exact order (1 at 101, 2 at 102, 3 at 200 after them) */
    assert_ptr_equal(rg_flow_lookup(t, k[1].b, &dir), p[1]); /* 1 now at 200, after 3 */
    assert_int_equal(rg_flow_flush(t), 3);
    assert_int_equal(log.n, 4);
    assert_int_equal(log.ids[1], 2);
    assert_int_equal(log.ids[3], 1);
    rg_flow_free(t);
}

/* Expiry is exact across ticks: an instance touched in a later tick but
 * idle long enough goes, one touched within the idle time stays, however
 * the list orders them. */
static void test_expire_across_ticks(void **state)
{
    (void)state;
    cblog log = {0};
    rg_flow *t = mk(8, 1, &log);
    const uint64_t T = (uint64_t)1 << RG_FLOW_TICK_SHIFT;
    key12 k[3], r[3];
    for (int i = 0; i < 3; i++) {
        k[i] = k12(400 + (uint32_t)i, 9, 1, 2);
        r[i] = k12_rev(&k[i]);
        rg_flow_set_time(t, 10 * T + (uint64_t)i * (T / 4)); /* one tick */
        payload *p = rg_flow_create(t, k[i].b, r[i].b);
        p->id = (uint64_t)i;
    }
    int dir;
    rg_flow_set_time(t, 10 * T + 3 * (T / 4)); /* still that tick: 0 stays at the list's tail */
    assert_non_null(rg_flow_lookup(t, k[0].b, &dir));
    /* idle T/2 at 10T + 1.1T: due are 1 (10.25T) and 2 (10.5T); 0 (10.75T) is not */
    const uint64_t now = 11 * T + T / 10;
    assert_int_equal(rg_flow_expire(t, now, T / 2 + T / 10 - 1), 2);
    assert_int_equal(log.ids[0], 1);
    assert_int_equal(log.ids[1], 2);
    assert_int_equal(rg_flow_live(t), 1);
    assert_int_equal(rg_flow_expire(t, 11 * T + 3 * (T / 4), T), 1); /* exactly idle T */
    assert_int_equal(log.ids[2], 0);
    rg_flow_free(t);
}

/* rg_flow_lookup_nt / rg_flow_create_nt (the generated code's) against rg_flow_set_time before
 * rg_flow_lookup_n / rg_flow_create_n on every packet: with a clock that never goes back, the
 * same instances, the same records' times (the removal order at eviction, expiry and flush
 * says them; each record's time checked after each touch), though the empty table's time is
 * not set. */
static void test_lookup_nt_same_as_set_time(void **state)
{
    (void)state;
    cblog la = {0}, lb = {0};
    rg_flow *a = mk(6, 1, &la), *b = mk(6, 1, &lb);
    const uint64_t T = (uint64_t)1 << RG_FLOW_TICK_SHIFT;
    uint64_t now = 5 * T, x = 99;
    for (uint64_t i = 0; i < 4000; i++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        const uint32_t r = (uint32_t)(x >> 33);
        now += (r % 5 == 0) ? (r >> 8) % (3 * T) : (r >> 8) % (T / 8); /* never back */
        key12 k = k12(r % 9, 7, 1, 2), kr = k12_rev(&k);
        const int rev = (r >> 4) & 1;
        const uint8_t *key = rev ? kr.b : k.b;
        int da = -1, db = -1;
        rg_flow_set_time(a, now);
        payload *pa = rg_flow_lookup_n(a, key, 12, &da);
        payload *pb = rg_flow_lookup_nt(b, key, 12, &db, now);
        assert_true((pa == NULL) == (pb == NULL));
        if (pa) {
            assert_int_equal(da, db);
            assert_int_equal(pa->id, pb->id);
            /* touched at the same time (its tick orders evictions, its time expiry) */
            assert_int_equal(rg_flow__rec_of(a, pa)->last, rg_flow__rec_of(b, pb)->last);
            assert_int_equal(rg_flow__rec_of(b, pb)->last, now);
            if ((r >> 6) % 11 == 0) { /* an instance ends */
                rg_flow_delete(a, pa);
                rg_flow_delete(b, pb);
            }
        } else if ((r >> 6) % 3 != 0) { /* a packet that creates (6 records: evictions) */
            rg_flow_set_time(a, now);
            pa = rg_flow_create_n(a, k.b, kr.b, 12);
            pb = rg_flow_create_nt(b, k.b, kr.b, 12, now);
            assert_non_null(pa);
            assert_non_null(pb);
            pa->id = pb->id = i;
            assert_int_equal(rg_flow__rec_of(b, pb)->last, now);
        }
        if ((r >> 12) % 50 == 0) /* expiry as the driver calls it, idle T..2T */
            assert_int_equal(rg_flow_expire(a, now, T + (r >> 16) % T),
                             rg_flow_expire(b, now, T + (r >> 16) % T));
        assert_int_equal(rg_flow_live(a), rg_flow_live(b));
    }
    rg_flow_flush(a);
    rg_flow_flush(b);
    assert_true(la.n > 64); /* evictions, expiries and the flush happened */
    assert_int_equal(la.n, lb.n);
    for (int i = 0; i < 64; i++) {
        assert_int_equal(la.ids[i], lb.ids[i]);
        assert_int_equal(la.reasons[i], lb.reasons[i]);
    }
    rg_flow_free(a);
    rg_flow_free(b);
}

static void test_no_evict(void **state)
{
    (void)state;
    rg_flow_cfg cfg = {.key_len = 12, .payload_size = 8, .cap = 2, .bidir = 1, .no_evict = 1};
    rg_flow *t = rg_flow_new(&cfg);
    key12 a = k12(1, 2, 3, 4), b = k12(1, 2, 3, 5), c = k12(1, 2, 3, 6);
    key12 ar = k12_rev(&a), br = k12_rev(&b), cr = k12_rev(&c);
    assert_non_null(rg_flow_create(t, a.b, ar.b));
    void *pb = rg_flow_create(t, b.b, br.b);
    assert_non_null(pb);
    assert_null(rg_flow_create(t, c.b, cr.b));
    assert_int_equal(rg_flow_stats(t)->create_failed, 1);
    rg_flow_delete(t, pb);
    assert_non_null(rg_flow_create(t, c.b, cr.b));
    rg_flow_free(t);
}

/* Delete then create under ASan: the deleted payload is poisoned, the
 * record is reused without stale keys, no use after free anywhere. */
static void test_delete_then_create(void **state)
{
    (void)state;
    cblog log = {0};
    rg_flow *t = mk(2, 1, &log);
    key12 a = k12(1, 1, 1, 1), ar = k12_rev(&a);
    key12 b = k12(2, 2, 2, 3), br = k12_rev(&b);
    payload *pa = rg_flow_create(t, a.b, ar.b);
    pa->id = 11;
    rg_flow_delete(t, pa);
#ifdef RG_HAVE_ASAN
    assert_true(__asan_address_is_poisoned(&pa->id));
#endif
    payload *pb = rg_flow_create(t, b.b, br.b);
    assert_ptr_equal(pb, pa); /* LIFO reuse of the freed record */
#ifdef RG_HAVE_ASAN
    assert_false(__asan_address_is_poisoned(&pb->id));
#endif
    assert_int_equal(pb->id, 0);
    int dir;
    assert_null(rg_flow_lookup(t, a.b, &dir));
    assert_null(rg_flow_lookup(t, ar.b, &dir));
    assert_ptr_equal(rg_flow_lookup(t, br.b, &dir), pb);
    /* eviction whose callback deletes the victim itself */
    log.delete_self = 1;
    payload *pc = rg_flow_create(t, a.b, ar.b);
    pc->id = 12;
    key12 c = k12(3, 3, 3, 4), cr = k12_rev(&c);
    payload *pd = rg_flow_create(t, c.b, cr.b); /* evicts pb (LRU) */
    assert_non_null(pd);
    assert_int_equal(log.n, 1);
    assert_int_equal(rg_flow_live(t), 2);
    assert_int_equal(rg_flow_stats(t)->destroyed, 2);
    /* a callback may not create in the same table */
    log.delete_self = 0;
    log.try_create = 1;
    key12 e = k12(4, 4, 4, 5), er = k12_rev(&e);
    assert_non_null(rg_flow_create(t, e.b, er.b));
    assert_null(log.created);
    assert_int_equal(rg_flow_live(t), 2);
    rg_flow_free(t);
}

/* Random operations against a reference, on a small table with many
 * collisions: exercises probing and backward-shift deletion. */
static void test_random_vs_reference(void **state)
{
    (void)state;
    enum { NK = 300, CAP = 128 };
    rg_rng rng = {99};
    rg_flow_cfg cfg = {.key_len = 13, .payload_size = 16, .cap = CAP, .bidir = 1, .no_evict = 1};
    rg_flow *t = rg_flow_new(&cfg);
    uint8_t keys[NK][13], revs[NK][13];
    void *live[NK];
    memset(live, 0, sizeof live);
    for (int i = 0; i < NK; i++) {
        for (int j = 0; j < 13; j++)
            keys[i][j] = (uint8_t)rng_next(&rng);
        keys[i][12] = (uint8_t)i;
        for (int j = 0; j < 13; j++)
            revs[i][j] = keys[i][12 - j];
        revs[i][0] ^= 0x80; /* never equal to any forward key */
    }
    int nlive = 0;
    for (int step = 0; step < 200000; step++) {
        int i = (int)rng_below(&rng, NK);
        int op = (int)rng_below(&rng, 3);
        int dir = -1;
        if (op == 0) {
            void *p = rg_flow_lookup(t, keys[i], &dir);
            assert_ptr_equal(p, live[i]);
            if (p) assert_int_equal(dir, 0);
            p = rg_flow_find(t, revs[i], &dir);
            assert_ptr_equal(p, live[i]);
            if (p) assert_int_equal(dir, 1);
        } else if (op == 1) {
            if (live[i]) continue;
            void *p = rg_flow_create(t, keys[i], revs[i]);
            if (nlive == CAP) {
                assert_null(p);
                continue;
            }
            assert_non_null(p);
            memcpy(p, &i, sizeof i);
            live[i] = p;
            nlive++;
        } else if (live[i]) {
            int id;
            memcpy(&id, live[i], sizeof id);
            assert_int_equal(id, i);
            rg_flow_delete(t, live[i]);
            live[i] = NULL;
            nlive--;
        }
        assert_int_equal(rg_flow_live(t), (uint32_t)nlive);
    }
    rg_flow_free(t);
}

/* The last-hit memo of tunnels' outer tables (rg_flow_lookup_memo_n): a
 * removed record is forgotten although its key bytes stay in the free
 * record, a reused record answers only for its new key. */
static void test_memo_forgets_removed(void **state)
{
    (void)state;
    rg_flow *t = mk(4, 1, NULL);
    key12 a = k12(1, 2, 3, 4), ar = k12_rev(&a), b = k12(5, 6, 7, 8), br = k12_rev(&b);
    payload *pa = rg_flow_create(t, a.b, ar.b);
    payload *px = rg_flow_create(t, b.b, br.b); /* keeps the table non-empty */
    int dir = -1;
    assert_ptr_equal(rg_flow_lookup_memo_n(t, ar.b, 12, &dir), pa); /* probe: sets the memo */
    assert_int_equal(dir, 1);
    assert_int_equal(t->memo, 1);
    assert_ptr_equal(rg_flow_lookup_memo_n(t, a.b, 12, &dir), pa); /* memo hit, other side */
    assert_int_equal(dir, 0);
    rg_flow_delete(t, pa);
    assert_int_equal(t->memo, 0);
    assert_null(rg_flow_lookup_memo_n(t, a.b, 12, &dir));
    assert_null(rg_flow_lookup_memo_n(t, ar.b, 12, &dir));
    assert_ptr_equal(rg_flow_lookup_memo_n(t, br.b, 12, &dir), px);
    key12 c = k12(9, 9, 9, 9); /* symmetric: one index entry, direction 0 */
    payload *pc = rg_flow_create(t, c.b, c.b);
    assert_ptr_equal(rg_flow_lookup_memo_n(t, c.b, 12, &dir), pc);
    assert_int_equal(dir, 0);
    assert_ptr_equal(rg_flow_lookup_memo_n(t, c.b, 12, &dir), pc); /* memo hit */
    assert_int_equal(dir, 0);
    rg_flow_free(t);
}

/* Random creates, deletes, evictions and lookups (runs of one key, either
 * side, as on a tunnel) on two tables, one looked up through the memo and
 * one plainly: same answers, directions, evictions and expiry order (the
 * memo's hits touch as the probe's do). */
static void test_memo_same_as_plain(void **state)
{
    (void)state;
    for (int bidir = 0; bidir < 2; bidir++) {
        enum { NK = 40, CAP = 16 };
        rg_rng rng = {7 + (uint64_t)bidir};
        cblog la = {0}, lb = {0};
        rg_flow *ta = mk(CAP, bidir, &la), *tb = mk(CAP, bidir, &lb);
        key12 keys[NK], revs[NK];
        for (int i = 0; i < NK; i++) {
            keys[i] = i % 8 == 0 ? k12((uint32_t)i, (uint32_t)i, 5, 5)
                                 : k12(rng_next(&rng), rng_next(&rng), (uint16_t)i, 80);
            revs[i] = k12_rev(&keys[i]);
        }
        uint64_t now = 0, next_id = 1;
        int cur = 0;
        for (int step = 0; step < 100000; step++) {
            now += rng_below(&rng, 3) * (UINT64_C(1) << 22);
            rg_flow_set_time(ta, now);
            rg_flow_set_time(tb, now);
            if (rng_below(&rng, 4) == 0) cur = (int)rng_below(&rng, NK); /* runs of one key */
            const uint8_t *k = rng_below(&rng, 2) ? revs[cur].b : keys[cur].b;
            int op = (int)rng_below(&rng, 8), da = -1, db = -1;
            payload *pa = rg_flow_lookup_memo_n(ta, k, 12, &da);
            payload *pb = rg_flow_lookup_n(tb, k, 12, &db);
            if (!same_found(ta, pa, da, tb, pb, db, op == 0) && op < 4) {
                /* evicts the least recent one when full */
                pa = rg_flow_create(ta, keys[cur].b, revs[cur].b);
                pb = rg_flow_create(tb, keys[cur].b, revs[cur].b);
                pa->id = pb->id = next_id++;
            }
            assert_int_equal(rg_flow_live(ta), rg_flow_live(tb));
        }
        assert_int_equal(la.n, lb.n);
        assert_true(la.n > 0); /* evictions happened */
        la.n = lb.n = 0;
        rg_flow_expire(ta, now + 3600 * UINT64_C(1000000000), 1);
        rg_flow_expire(tb, now + 3600 * UINT64_C(1000000000), 1);
        assert_int_equal(la.n, lb.n);
        for (int i = 0; i < la.n && i < 64; i++)
            assert_int_equal(la.ids[i], lb.ids[i]);
        rg_flow_free(ta);
        rg_flow_free(tb);
    }
}

static void test_expire(void **state)
{
    (void)state;
    cblog log = {0};
    rg_flow *t = mk(8, 1, &log);
    key12 k[4], r[4];
    payload *p[4];
    for (int i = 0; i < 4; i++) {
        k[i] = k12(7, 8, (uint16_t)i, 80);
        r[i] = k12_rev(&k[i]);
        rg_flow_set_time(t, 1000 + (uint64_t)i * 100);
        p[i] = rg_flow_create(t, k[i].b, r[i].b);
        p[i]->id = (uint64_t)i;
    }
    /* touch flow 0 at t = 1500 */
    rg_flow_set_time(t, 1500);
    int dir;
    rg_flow_lookup(t, r[0].b, &dir);
    assert_int_equal(rg_flow_last_seen(t, p[0]), 1500);
    rg_flow_set_time(t, 10); /* the clock never goes back */
    assert_int_equal(t->now, 1500);
    /* idle 300: flows 1 (1100) and 2 (1200) at 1500 */
    assert_int_equal(rg_flow_expire(t, 1500, 300), 2);
    assert_int_equal(log.n, 2);
    assert_int_equal(log.ids[0], 1);
    assert_int_equal(log.ids[1], 2);
    assert_int_equal(log.reasons[0], RG_FLOW_EXPIRED);
    assert_int_equal(rg_flow_stats(t)->expired, 2);
    assert_int_equal(rg_flow_expire(t, 1500, 300), 0);
    assert_int_equal(rg_flow_expire(t, 1799, 300), 1); /* flow 3 at 1300 */
    assert_int_equal(rg_flow_expire(t, 1799, 0), 0);   /* disabled */
    assert_int_equal(rg_flow_expire(t, 1800, 300), 1); /* flow 0 at 1500 */
    assert_int_equal(rg_flow_live(t), 0);
    rg_flow_free(t);
}

typedef struct {
    int visited;
    int delete_every_other;
    int delete_next; /* also delete the instance that would be visited next */
} iterctx;

static void iter_fn(void *ctx, rg_flow *t, void *inst)
{
    iterctx *c = ctx;
    if (c->delete_next) {
        payload *p = inst;
        key12 k = k12((uint32_t)p->id + 1, 1, 2, 3);
        void *nx = rg_flow_find(t, k.b, NULL);
        if (nx) rg_flow_delete(t, nx);
    }
    if (c->delete_every_other && (c->visited & 1)) rg_flow_delete(t, inst);
    c->visited++;
}

static void test_foreach_and_flush(void **state)
{
    (void)state;
    cblog log = {0};
    rg_flow *t = mk(64, 1, &log);
    for (int i = 0; i < 50; i++) {
        key12 k = k12((uint32_t)i, 1, 2, 3), r = k12_rev(&k);
        payload *p = rg_flow_create(t, k.b, r.b);
        p->id = (uint64_t)i;
    }
    iterctx c = {0, 1, 0};
    assert_int_equal(rg_flow_foreach(t, iter_fn, &c), 50);
    assert_int_equal(rg_flow_live(t), 25);
    c.visited = 0;
    c.delete_every_other = 0;
    assert_int_equal(rg_flow_foreach(t, iter_fn, &c), 25);
    /* deleting another instance (the next to visit) during iteration */
    rg_flow *t2 = mk(64, 1, NULL);
    for (int i = 0; i < 10; i++) {
        key12 k = k12((uint32_t)i, 1, 2, 3), r = k12_rev(&k);
        payload *p = rg_flow_create(t2, k.b, r.b);
        p->id = (uint64_t)i;
    }
    iterctx c2 = {0, 0, 1};
    assert_int_equal(rg_flow_foreach(t2, iter_fn, &c2), 5); /* visits 0, 2, 4, 6, 8 */
    assert_int_equal(rg_flow_live(t2), 5);
    rg_flow_free(t2);
    assert_int_equal(rg_flow_flush(t), 25);
    assert_int_equal(log.n, 25);
    assert_int_equal(log.reasons[0], RG_FLOW_FLUSHED);
    assert_int_equal(log.ids[0], 0); /* oldest first */
    assert_int_equal(rg_flow_live(t), 0);
    for (uint32_t i = 0; i <= t->mask; i++)
        assert_int_equal(t->slot[i], 0);
    rg_flow_free(t);
}

/* Many flows: all found in both directions; memory per flow is small. */
static void test_many_flows(void **state)
{
    (void)state;
    enum { N = 100000 };
    rg_inst_stats st = {0};
    rg_flow_cfg cfg = {.key_len = 12, .payload_size = 64, .cap = N, .bidir = 1, .stats = &st};
    rg_flow *t = rg_flow_new(&cfg);
    assert_non_null(t);
    assert_int_equal(rg_flow_record_size(t), 32 + 32 + 64);
    for (uint32_t i = 0; i < N; i++) {
        key12 k = k12(i, ~i, (uint16_t)i, 443), r = k12_rev(&k);
        uint32_t *p = rg_flow_create(t, k.b, r.b);
        assert_non_null(p);
        *p = i;
    }
    int dir;
    for (uint32_t i = 0; i < N; i++) {
        key12 k = k12(i, ~i, (uint16_t)i, 443), r = k12_rev(&k);
        uint32_t *p = rg_flow_lookup(t, (i & 1) ? r.b : k.b, &dir);
        assert_non_null(p);
        assert_int_equal(*p, i);
        assert_int_equal(dir, (int)(i & 1));
        if (i % 3 == 0) rg_flow_delete(t, p);
    }
    for (uint32_t i = 0; i < N; i++) {
        key12 k = k12(i, ~i, (uint16_t)i, 443);
        uint32_t *p = rg_flow_find(t, k.b, &dir);
        if (i % 3 == 0)
            assert_null(p);
        else
            assert_int_equal(*p, i);
    }
    assert_int_equal(st.live, N - (N + 2) / 3);
    rg_flow_free(t);
}

/* Burst stage 1, pass B: the candidate a slot leads to is the record the lookup finds (both
 * keys of a flow), an absent or deleted key leads nowhere, and hints kept across changes of
 * the table (deletes, creates, index growth) stay harmless (ASan builds check the reads). */
static void test_prefetch_rec(void **state)
{
    (void)state;
    enum { N = 3000 };
    rg_flow_cfg cfg = {.key_len = 12, .payload_size = 200, .cap = 2 * N, .bidir = 1, .seed = 77};
    rg_flow *t = rg_flow_new(&cfg);
    assert_non_null(t);
    for (uint32_t i = 0; i < N; i++) {
        key12 k = k12(i, ~i, (uint16_t)i, 80), r = k12_rev(&k);
        uint32_t *p = rg_flow_create(t, k.b, r.b);
        assert_non_null(p);
        *p = i;
    }
    uint32_t hits = 0;
    for (uint32_t i = 0; i < N; i++) {
        key12 k = k12(i, ~i, (uint16_t)i, 80), r = k12_rev(&k);
        for (int d = 0; d < 2; d++) {
            const void *key = d ? r.b : k.b;
            const void *want = rg_flow_find(t, key, NULL);
            const void *got = rg_flow_prefetch_rec(t, rg_flow_hash(t, key));
            assert_non_null(want);
            /* a hint is the flow's record or nothing (beyond the probe limit) */
            if (got) assert_ptr_equal(got, want);
            hits += got != NULL;
        }
        /* never found: no record with that tag near its slot */
        key12 a = k12(i, i, 7, 7);
        assert_null(rg_flow_find(t, a.b, NULL));
        assert_null(rg_flow_prefetch_rec(t, rg_flow_hash(t, a.b)));
    }
    /* load <= 1/2: almost every key sits within RG_FLOW_PREFETCH_PROBE slots of its home */
    assert_true(hits >= 2 * N * 95 / 100);

    /* pass A's hints, then the table changes before pass B (as stage 2 of earlier frames of a
     * burst would change it for later ones): deleted keys lead nowhere, the rest still runs */
    rg_flow_hints hs = {0};
    for (uint32_t i = 0; i < N; i++) {
        key12 k = k12(i, ~i, (uint16_t)i, 80);
        key12 r = k12_rev(&k);
        rg_flow_prefetch_hint(&hs, t, k.b, r.b, 12);
    }
    assert_int_equal(hs.n, RG_FLOW_HINTS); /* the rest dropped */
    for (uint32_t i = 0; i < N; i += 2) {
        key12 k = k12(i, ~i, (uint16_t)i, 80);
        rg_flow_delete(t, rg_flow_find(t, k.b, NULL));
        assert_null(rg_flow_prefetch_rec(t, rg_flow_hash(t, k.b)));
    }
    const uint32_t mask0 = t->mask;
    for (uint32_t i = N; i < 2 * N + N / 2; i++) { /* grows the index */
        key12 k = k12(i, ~i, (uint16_t)i, 80), r = k12_rev(&k);
        assert_non_null(rg_flow_create(t, k.b, r.b));
    }
    assert_true(t->mask > mask0);
    assert_int_equal(hs.done, RG_FLOW_HINTS - RG_FLOW_HINT_LAG); /* pass B, lagging */
    rg_flow_prefetch_hints(&hs);
    assert_int_equal(hs.n, 0);
    assert_int_equal(hs.done, 0);
    key12 k0 = k12(1, ~1u, 1, 80), r0 = k12_rev(&k0);
    rg_flow_prefetch_hint(NULL, t, k0.b, r0.b, 12); /* no pass B: nothing kept */
    for (uint32_t i = 1; i < N; i += 2) { /* after growth the candidates are still right */
        key12 k = k12(i, ~i, (uint16_t)i, 80);
        const void *got = rg_flow_prefetch_rec(t, rg_flow_hash(t, k.b));
        if (got) assert_ptr_equal(got, rg_flow_find(t, k.b, NULL));
    }
    rg_flow_free(t);
}

static void test_hash(void **state)
{
    (void)state;
    /* exact-size heap buffers: ASan catches any over-read in the tail code */
    for (size_t n = 1; n <= 64; n++) {
        uint8_t *a = malloc(n);
        for (size_t i = 0; i < n; i++)
            a[i] = (uint8_t)(i * 31 + n);
        uint64_t h1 = rg_hash_bytes(a, n, 0), h2 = rg_hash_bytes(a, n, 0);
        assert_true(h1 == h2);
        assert_true(rg_hash_bytes(a, n, 1) != h1);
        a[n - 1] ^= 1;
        assert_true(rg_hash_bytes(a, n, 0) != h1);
        a[n - 1] ^= 1;
        a[0] ^= 0x80;
        assert_true(rg_hash_bytes(a, n, 0) != h1);
        free(a);
    }
    /* rough spread: tags of sequential keys hit most buckets */
    enum { B = 1024 };
    int hit[B] = {0}, used = 0;
    for (uint32_t i = 0; i < B; i++) {
        key12 k = k12(0x0a000000 + i, 0x0a000001, 80, 1234);
        uint32_t tag = rg_flow_tag(rg_hash_bytes(k.b, 12, 0));
        if (!hit[tag % B]++) used++;
    }
    assert_true(used > B / 2);
    /* the short-key path (9 to 16 bytes): sequential values in any one 16-bit
     * field of an IPv4 fragment, flow or longer key spread over the buckets
     * (a random function fills about 63% of them) */
    for (size_t n = 9; n <= 16; n++) {
        for (size_t at = 0; at + 2 <= n; at++) {
            int h2[B] = {0}, u2 = 0;
            for (uint32_t i = 0; i < B; i++) {
                uint8_t k[16] = {10, 0, 0, 1, 10, 0, 0, 2, 0x04, 0xd2, 0, 80, 6, 0, 0, 0};
                k[at] = (uint8_t)(i >> 8);
                k[at + 1] = (uint8_t)i;
                uint32_t tag = rg_flow_tag(rg_hash_bytes(k, n, 0x1234));
                if (!h2[tag & (B - 1)]++) u2++;
            }
            assert_true(u2 > B / 2);
        }
    }
}

/* ---- adaptive index ---- */
/* Key of a given length from an id: the id's bytes at both ends, a filler in
 * between, so keys differ in their first and in their last bytes. */
static void idkey(uint8_t *k, size_t n, uint32_t id, int rev)
{
    uint32_t v = id * 2 + (rev ? 1 : 0);
    for (size_t i = 0; i < n; i++)
        k[i] = (uint8_t)(0x5a + i);
    for (size_t i = 0; i < 4 && i < n; i++)
        k[i] ^= (uint8_t)(v >> (8 * i));
    for (size_t i = 0; i < 4 && n >= 8; i++)
        k[n - 1 - i] ^= (uint8_t)(v >> (8 * i));
}

/* The index starts small, doubles while instances are added (load <= 1/2),
 * and every live key stays findable in both directions through random
 * creates and deletes; deleted keys are gone.  Key lengths cover the word
 * compare's shapes (1..3 bytes, 4..7, multiples of 8, overlapping tails). */
static void growth_run(uint32_t key_len, uint32_t cap, uint64_t seed)
{
    rg_flow_cfg cfg = {
        .key_len = key_len, .payload_size = sizeof(payload), .cap = cap, .bidir = 1, .seed = seed};
    rg_flow *t = rg_flow_new(&cfg);
    assert_non_null(t);
    size_t first = rg_flow_index_bytes(t);
    assert_true(first <= RG_FLOW_MIN_SLOTS * sizeof(uint64_t));
    uint32_t nid = key_len >= 3 ? 3 * cap : 1u << (8 * key_len - 1); /* ids that fit */
    if (nid > 3 * cap) nid = 3 * cap;
    void **live = calloc(nid, sizeof *live);
    uint8_t *k = malloc(key_len), *r = malloc(key_len); /* exact size: ASan sees over-reads */
    assert_non_null(live);
    rg_rng rng = {seed};
    uint32_t nlive = 0;
    size_t grew = first;
    for (int step = 0; step < 60000; step++) {
        uint32_t id = rng_below(&rng, nid);
        idkey(k, key_len, id, 0);
        idkey(r, key_len, id, 1);
        int dir = -1;
        void *f = rg_flow_find(t, k, &dir);
        assert_ptr_equal(f, live[id]);
        if (f) assert_int_equal(dir, RG_DIR_TO_PASSIVE);
        dir = -1;
        f = rg_flow_lookup(t, r, &dir);
        assert_ptr_equal(f, live[id]);
        if (f) assert_int_equal(dir, RG_DIR_TO_ACTIVE);
        /* grow phase first (mostly creates), then churn */
        int create = step < 30000 ? rng_below(&rng, 8) != 0 : rng_below(&rng, 2);
        if (!live[id] && create && nlive < cap) {
            payload *p = rg_flow_create(t, k, r);
            assert_non_null(p);
            p->id = id;
            live[id] = p;
            nlive++;
        } else if (live[id] && !create) {
            rg_flow_delete(t, live[id]);
            live[id] = NULL;
            nlive--;
        }
        assert_int_equal(rg_flow_live(t), nlive);
        assert_true((size_t)t->nkeys * 2 <= (size_t)t->mask + 1); /* load <= 1/2 */
        assert_true(t->mask <= t->max_mask);
        if (rg_flow_index_bytes(t) > grew) grew = rg_flow_index_bytes(t);
    }
    if (cap > 2000 && nid > 2000) assert_true(grew > first); /* it grew */
    /* every live instance is found with its payload intact */
    for (uint32_t id = 0; id < nid; id++) {
        idkey(k, key_len, id, 0);
        payload *p = rg_flow_find_hn(t, k, key_len, rg_flow_hash(t, k), NULL);
        assert_ptr_equal(p, live[id]);
        if (p) assert_int_equal(p->id, id);
    }
    /* an empty table finds nothing (and answers without probing) */
    rg_flow_flush(t);
    assert_int_equal(t->nkeys, 0);
    for (uint32_t id = 0; id < 100; id++) {
        idkey(k, key_len, id, 0);
        assert_null(rg_flow_lookup(t, k, NULL));
    }
    free(k);
    free(r);
    free(live);
    rg_flow_free(t);
}

static void test_index_growth(void **state)
{
    (void)state;
    static const uint32_t lens[] = {1, 2, 3, 4, 5, 7, 8, 11, 12, 13, 16, 36, 37};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        growth_run(lens[i], 5000, 100 + i);
    growth_run(12, 40, 7);       /* a cap smaller than the first index */
    growth_run(12, 1u << 18, 9); /* the benchmark default: small index, large cap */
}

/* The word compare agrees with memcmp for every length and every position of
 * a difference (exact-size buffers). */
static void test_keyeq(void **state)
{
    (void)state;
    for (size_t n = 1; n <= 72; n++) {
        uint8_t *a = malloc(n), *b = malloc(n);
        for (size_t i = 0; i < n; i++)
            a[i] = b[i] = (uint8_t)(i * 13 + n);
        assert_true(rg_flow__keyeq(a, b, n));
        for (size_t i = 0; i < n; i++) {
            b[i] ^= (uint8_t)(1u << (i % 8));
            assert_false(rg_flow__keyeq(a, b, n));
            assert_int_equal(rg_flow__keyeq(a, b, n), memcmp(a, b, n) == 0);
            b[i] = a[i];
        }
        free(a);
        free(b);
    }
}

/* The table reports its record size through the layer counters. */
static void test_record_bytes_in_stats(void **state)
{
    (void)state;
    rg_inst_stats st = {0};
    rg_flow_cfg cfg = {.key_len = 12, .payload_size = 100, .cap = 10, .bidir = 1, .stats = &st};
    rg_flow *t = rg_flow_new(&cfg);
    assert_non_null(t);
    assert_int_equal(st.record_bytes, rg_flow_record_size(t));
    assert_int_equal(st.record_bytes, 32 + 32 + 112); /* header, 2 keys (16-aligned), payload */
    rg_flow_free(t);
}

/* ---- keys as words (rg_flow_lookup_wt and friends) ---- */

/* The words of an n-byte key by their definition: the memcpy of each window. */
static void words_of(const uint8_t *key, size_t n, uint64_t *w)
{
    if (n < 8) {
        w[0] = 0;
        memcpy(&w[0], key, n);
        return;
    }
    for (size_t i = 0; i < RG_KW_WORDS(n); i++)
        memcpy(&w[i], key + (8 * i + 8 <= n ? 8 * i : n - 8), 8);
}

/* A key of random fields (numbers of 1..8 bytes stored big-endian, byte fields
 * of 1..20 bytes, some short or NULL: zero-padded) assembled as the generator
 * does (keywords.py: rg_kw_put of rg_kw_be / rg_kw_bytes per window) must give
 * the words of its bytes (stored as rg__put_be / rg_bytes_store store them). */
static void test_words_assembled_like_bytes(void **state)
{
    (void)state;
    rg_rng rng = {99};
    for (int iter = 0; iter < 20000; iter++) {
        enum { MAXF = 8 };
        uint8_t key[RG_FLOW_MAX_KEY] = {0}, src[MAXF][24];
        size_t off[MAXF], size[MAXF];
        int isnum[MAXF];
        uint64_t num[MAXF];
        rg_bytes bv[MAXF];
        size_t n = 0;
        const int nf = 1 + (int)rng_below(&rng, MAXF);
        int f = 0;
        for (; f < nf; f++) {
            isnum[f] = (int)rng_below(&rng, 2);
            size[f] = isnum[f] ? 1 + rng_below(&rng, 8) : 1 + rng_below(&rng, 20);
            if (n + size[f] > 64) break;
            off[f] = n;
            if (isnum[f]) {
                num[f] = rng_next(&rng); /* bits above size: dropped */
                for (size_t i = size[f], v = 0; i-- > 0; v++)
                    key[n + i] = (uint8_t)(num[f] >> (8 * v));
            } else {
                for (int i = 0; i < 24; i++)
                    src[f][i] = (uint8_t)rng_next(&rng);
                size_t len = size[f];
                const unsigned pick = rng_below(&rng, 8);
                if (pick == 0) len = rng_below(&rng, (uint32_t)size[f] + 1); /* short */
                if (pick == 1) len = size[f] + 3;                            /* longer */
                bv[f] = (rg_bytes){pick == 2 ? NULL : src[f], len};
                const size_t m = bv[f].ptr ? (len < size[f] ? len : size[f]) : 0;
                memcpy(key + n, src[f], m);
            }
            n += size[f];
        }
        const int nfields = f;
        if (n == 0) continue;
        uint64_t want[RG_KW_WORDS(64)], got[RG_KW_WORDS(64)];
        words_of(key, n, want);
        for (size_t i = 0; i < RG_KW_WORDS(n); i++) {
            const size_t wo = n < 8 ? 0 : rg_kw_off(n, i), wl = n < 8 ? n : 8;
            uint64_t w = 0;
            for (int g = 0; g < nfields; g++) {
                const size_t s = off[g] > wo ? off[g] : wo;
                const size_t e = off[g] + size[g] < wo + wl ? off[g] + size[g] : wo + wl;
                if (s >= e) continue;
                const unsigned k = (unsigned)(e - s), pos = (unsigned)(s - wo);
                if (isnum[g])
                    w |= rg_kw_put(rg_kw_be(num[g], (unsigned)size[g]), (unsigned)(s - off[g]), k,
                                   pos);
                else
                    w |= rg_kw_put(rg_kw_bytes(bv[g], size[g], s - off[g], k), 0, k, pos);
            }
            got[i] = w;
        }
        for (size_t i = 0; i < RG_KW_WORDS(n); i++)
            assert_int_equal(got[i], want[i]);
    }
}

/* rg_hash_words / rg_flow__keyeq_w equal rg_hash_bytes / rg_flow__keyeq at
 * every key length, on equal keys and on keys one byte apart. */
static void test_hash_words_same_as_bytes(void **state)
{
    (void)state;
    rg_rng rng = {5};
    for (size_t n = 1; n <= RG_FLOW_MAX_KEY; n = n < 80 ? n + 1 : n * 2 + 3) {
        for (int iter = 0; iter < 200; iter++) {
            uint8_t a[RG_FLOW_MAX_KEY], b[RG_FLOW_MAX_KEY];
            uint64_t w[RG_KW_WORDS(RG_FLOW_MAX_KEY)];
            for (size_t i = 0; i < n; i++)
                a[i] = (uint8_t)rng_next(&rng);
            memcpy(b, a, n);
            if (iter & 1) b[rng_below(&rng, (uint32_t)n)] ^= (uint8_t)(1u << rng_below(&rng, 8));
            words_of(b, n, w);
            const uint64_t seed = rng_next(&rng);
            assert_int_equal(rg_hash_words(w, n, seed), rg_hash_bytes(b, n, seed));
            assert_int_equal(rg_flow__keyeq_w(a, w, n), rg_flow__keyeq(a, b, n));
            assert_int_equal(rg_flow__keyeq_w(a, w, n), memcmp(a, b, n) == 0);
        }
    }
}

/* Word lookups find the same record in the same direction as
 * the byte lookups, on random traffic with creates, deletes and evictions,
 * at key lengths on both sides of the 8- and 16-byte forms; the prefetch
 * hint keeps the same hash. */
static void test_lookup_words_same_as_bytes(void **state)
{
    (void)state;
    static const uint32_t lens[] = {3, 5, 8, 11, 12, 13, 16, 17, 36, RG_FLOW_MAX_KEY};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const uint32_t n = lens[li];
        for (int bidir = 0; bidir < 2; bidir++) {
            enum { NK = 40, CAP = 16 };
            rg_rng rng = {11 + n * 2 + (uint64_t)bidir};
            rg_flow_cfg cfg = {.key_len = n,
                               .payload_size = sizeof(payload),
                               .cap = CAP,
                               .bidir = bidir,
                               .seed = 0x77};
            rg_flow *ta = rg_flow_new(&cfg), *tb = rg_flow_new(&cfg);
            assert_non_null(ta);
            assert_non_null(tb);
            uint8_t keys[NK][RG_FLOW_MAX_KEY], revs[NK][RG_FLOW_MAX_KEY];
            for (int i = 0; i < NK; i++) {
                for (uint32_t j = 0; j < n; j++)
                    keys[i][j] = (uint8_t)(i % 8 == 0 ? j : rng_next(&rng));
                for (uint32_t j = 0; j < n; j++) /* the reverse: halves swapped */
                    revs[i][j] = keys[i][(j + n / 2) % n];
            }
            uint64_t now = 0, next_id = 1;
            int cur = 0;
            for (int step = 0; step < 20000; step++) {
                now += rng_below(&rng, 3) * (UINT64_C(1) << 22);
                if (rng_below(&rng, 4) == 0) cur = (int)rng_below(&rng, NK);
                const uint8_t *k = rng_below(&rng, 2) ? revs[cur] : keys[cur];
                uint64_t w[RG_KW_WORDS(RG_FLOW_MAX_KEY)];
                words_of(k, n, w);
                int da = -1, db = -1;
                payload *pa = rg_flow_lookup_wt(ta, w, n, &da, now);
                payload *pb = rg_flow_lookup_nt(tb, k, n, &db, now);
                const int op = (int)rng_below(&rng, 8);
                if (!same_found(ta, pa, da, tb, pb, db, op == 0) && op < 4) {
                    pa = rg_flow_create_nt(ta, keys[cur], revs[cur], n, now);
                    pb = rg_flow_create_nt(tb, keys[cur], revs[cur], n, now);
                    pa->id = pb->id = next_id++;
                }
                assert_int_equal(rg_flow_live(ta), rg_flow_live(tb));
                if (step % 97 == 0) { /* the hint records the byte key's hash */
                    rg_flow_hints ha = {0}, hb = {0};
                    uint64_t wr[RG_KW_WORDS(RG_FLOW_MAX_KEY)];
                    words_of(revs[cur], n, wr);
                    rg_flow_prefetch_hint_w(&ha, ta, w, wr, n);
                    rg_flow_prefetch_hint(&hb, tb, k, revs[cur], n);
                    assert_int_equal(ha.n, 1);
                    assert_int_equal(ha.e[0].h, hb.e[0].h);
                    assert_int_equal(ha.e[0].h, rg_flow_hash(tb, k));
                }
            }
            assert_true(next_id > 1);
            rg_flow_free(ta);
            rg_flow_free(tb);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_index_growth),
        cmocka_unit_test(test_keyeq),
        cmocka_unit_test(test_record_bytes_in_stats),
        cmocka_unit_test(test_both_directions),
        cmocka_unit_test(test_unidirectional),
        cmocka_unit_test(test_symmetric_key),
        cmocka_unit_test(test_cap_and_eviction),
        cmocka_unit_test(test_coarse_order_within_tick),
        cmocka_unit_test(test_expire_across_ticks),
        cmocka_unit_test(test_lookup_nt_same_as_set_time),
        cmocka_unit_test(test_no_evict),
        cmocka_unit_test(test_delete_then_create),
        cmocka_unit_test(test_random_vs_reference),
        cmocka_unit_test(test_memo_forgets_removed),
        cmocka_unit_test(test_memo_same_as_plain),
        cmocka_unit_test(test_expire),
        cmocka_unit_test(test_foreach_and_flush),
        cmocka_unit_test(test_many_flows),
        cmocka_unit_test(test_hash),
        cmocka_unit_test(test_prefetch_rec),
        cmocka_unit_test(test_words_assembled_like_bytes),
        cmocka_unit_test(test_hash_words_same_as_bytes),
        cmocka_unit_test(test_lookup_words_same_as_bytes),
    };
    return cmocka_run_group_tests_name("rg_flow", tests, NULL, NULL);
}
