/* test_timer.c - idle timeouts. */
#include "rg_test.h"

#include "rg/rg_flow.h"
#include "rg/rg_timer.h"

typedef struct {
    int id;
    rg_tnode node;
} item;

typedef struct {
    int n;
    int ids[256];
    uint32_t cls[256];
    rg_timer *tm;
    item *also_remove; /* removed by the callback as well */
    int free_items;    /* the callback frees the item (instance destroyed) */
} log_t;

static void on_expire(void *ctx, rg_tnode *n, uint32_t cls)
{
    log_t *l = ctx;
    item *it = RG_TIMER_CONTAINER(n, item, node);
    assert_false(rg_timer_linked(n)); /* unlinked before the callback */
    if (l->n < 256) {
        l->ids[l->n] = it->id;
        l->cls[l->n] = cls;
    }
    l->n++;
    rg_timer_remove(l->tm, n); /* destroy path removes again: no-op */
    if (l->also_remove) {
        rg_timer_remove(l->tm, &l->also_remove->node);
        l->also_remove = NULL;
    }
    if (l->free_items) free(it);
}

static void test_single_class(void **state)
{
    (void)state;
    rg_timer tm;
    uint64_t to[1] = {1000};
    assert_int_equal(rg_timer_init(&tm, to, 1), RG_OK);
    item it[5];
    memset(it, 0, sizeof it);
    for (int i = 0; i < 5; i++) {
        it[i].id = i;
        rg_timer_set_time(&tm, (uint64_t)i * 100);
        rg_timer_touch(&tm, &it[i].node, 0);
    }
    assert_int_equal(rg_timer_count(&tm, 0), 5);
    /* touch item 0 at 450: now the most recent */
    rg_timer_set_time(&tm, 450);
    rg_timer_touch(&tm, &it[0].node, 0);
    rg_timer_touch(&tm, &it[0].node, 0); /* already the head */
    assert_int_equal(rg_timer_next_deadline(&tm), 1100);
    log_t l = {0};
    l.tm = &tm;
    assert_int_equal(rg_timer_expire(&tm, 1099, on_expire, &l, 0), 0);
    assert_false(rg_timer_due(&tm, 1099)); /* exact after an expire */
    assert_true(rg_timer_due(&tm, 1100));
    assert_int_equal(rg_timer_expire(&tm, 1300, on_expire, &l, 0), 3); /* 1, 2, 3 */
    assert_int_equal(l.ids[0], 1);
    assert_int_equal(l.ids[1], 2);
    assert_int_equal(l.ids[2], 3);
    assert_int_equal(rg_timer_count(&tm, 0), 2);
    /* max limits the batch */
    assert_int_equal(rg_timer_expire(&tm, 5000, on_expire, &l, 1), 1); /* 4 */
    assert_int_equal(l.ids[3], 4);
    assert_int_equal(rg_timer_expire(&tm, 5000, on_expire, &l, 0), 1); /* 0 */
    assert_int_equal(l.ids[4], 0);
    assert_int_equal(rg_timer_total(&tm), 0);
    assert_int_equal(rg_timer_next_deadline(&tm), UINT64_MAX);
}

static void test_remove(void **state)
{
    (void)state;
    rg_timer tm;
    uint64_t to[2] = {10, 20};
    rg_timer_init(&tm, to, 2);
    item a = {1, {0}}, b = {2, {0}}, z = {3, {0}};
    rg_timer_remove(&tm, &z.node); /* never linked: no-op */
    rg_timer_touch(&tm, &a.node, 0);
    rg_timer_touch(&tm, &b.node, 1);
    rg_timer_remove(&tm, &a.node);
    rg_timer_remove(&tm, &a.node); /* twice: no-op */
    assert_false(rg_timer_linked(&a.node));
    log_t l = {0};
    l.tm = &tm;
    assert_int_equal(rg_timer_expire(&tm, 1000, on_expire, &l, 0), 1);
    assert_int_equal(l.ids[0], 2);
    assert_int_equal(l.cls[0], 1);
    /* out-of-range class: ignored */
    rg_timer_touch(&tm, &z.node, 7);
    assert_false(rg_timer_linked(&z.node));
    assert_int_equal(rg_timer_init(&tm, to, RG_TIMER_MAX_CLASSES + 1), RG_EINVAL);
}

/* Classes with different timeouts expire in deadline order. */
static void test_classes_order(void **state)
{
    (void)state;
    rg_timer tm;
    uint64_t to[3] = {300, 100, 0}; /* class 2 never expires */
    rg_timer_init(&tm, to, 3);
    item it[6];
    memset(it, 0, sizeof it);
    /* deadlines: 0:c0@0->300, 1:c1@50->150, 2:c0@100->400, 3:c1@250->350, 4:c2, 5:c1@260->360 */
    const uint64_t at[6] = {0, 50, 100, 250, 0, 260};
    const uint32_t cl[6] = {0, 1, 0, 1, 2, 1};
    for (int i = 0; i < 6; i++) {
        it[i].id = i;
        rg_timer_set_time(&tm, at[i]);
        rg_timer_touch(&tm, &it[i].node, cl[i]);
    }
    log_t l = {0};
    l.tm = &tm;
    assert_int_equal(rg_timer_expire(&tm, 10000, on_expire, &l, 0), 5);
    const int want[5] = {1, 0, 3, 5, 2};
    for (int i = 0; i < 5; i++)
        assert_int_equal(l.ids[i], want[i]);
    assert_true(rg_timer_linked(&it[4].node));
    /* flush takes the rest */
    assert_int_equal(rg_timer_flush(&tm, on_expire, &l), 1);
    assert_int_equal(l.ids[5], 4);
}

/* Moving a node to another class (e.g. a TCP flow entering "closing"). */
static void test_class_change(void **state)
{
    (void)state;
    rg_timer tm;
    uint64_t to[2] = {1000, 10};
    rg_timer_init(&tm, to, 2);
    item a = {1, {0}};
    rg_timer_set_time(&tm, 100);
    rg_timer_touch(&tm, &a.node, 0);
    rg_timer_set_time(&tm, 200);
    rg_timer_touch(&tm, &a.node, 1);
    assert_int_equal(rg_timer_count(&tm, 0), 0);
    assert_int_equal(rg_timer_count(&tm, 1), 1);
    log_t l = {0};
    l.tm = &tm;
    assert_true(rg_timer_due(&tm, 210));
    assert_int_equal(rg_timer_expire(&tm, 210, on_expire, &l, 0), 1);
    assert_int_equal(l.cls[0], 1);
}

/* Timestamps going backwards do not move the clock back. */
static void test_clock_monotonic(void **state)
{
    (void)state;
    rg_timer tm;
    uint64_t to[1] = {100};
    rg_timer_init(&tm, to, 1);
    item a = {1, {0}};
    rg_timer_set_time(&tm, 1000);
    rg_timer_set_time(&tm, 500);
    rg_timer_touch(&tm, &a.node, 0);
    assert_int_equal(a.node.t, 1000);
    log_t l = {0};
    l.tm = &tm;
    assert_int_equal(rg_timer_expire(&tm, 600, on_expire, &l, 0), 0);
    assert_int_equal(rg_timer_expire(&tm, 1100, on_expire, &l, 0), 1);
    /* changing a timeout applies at the next expire */
    item b = {2, {0}};
    rg_timer_touch(&tm, &b.node, 0);
    rg_timer_set_timeout(&tm, 0, 5);
    assert_int_equal(rg_timer_expire(&tm, 1105, on_expire, &l, 0), 1);
}

/* The callback destroys the instance holding the node (and removes another
 * one): no use after free (upstream bugs 5 and 6), under ASan. */
static void test_callback_frees(void **state)
{
    (void)state;
    rg_timer tm;
    uint64_t to[1] = {10};
    rg_timer_init(&tm, to, 1);
    item *it[50];
    for (int i = 0; i < 50; i++) {
        it[i] = calloc(1, sizeof(item));
        it[i]->id = i;
        rg_timer_set_time(&tm, (uint64_t)i);
        rg_timer_touch(&tm, &it[i]->node, 0);
    }
    log_t l = {0};
    l.tm = &tm;
    l.free_items = 1;
    l.also_remove = it[1]; /* expiring 0 also removes 1 (still alive, freed below) */
    /* the clock is already at 49: deadlines i + 10 <= 49 expire */
    assert_int_equal(rg_timer_expire(&tm, 30, on_expire, &l, 0), 39); /* 0, 2..39 */
    assert_int_equal(l.ids[0], 0);
    assert_int_equal(l.ids[1], 2);
    assert_int_equal(l.ids[38], 39);
    free(it[1]);
    assert_int_equal(rg_timer_count(&tm, 0), 10);
    assert_int_equal(rg_timer_flush(&tm, on_expire, &l), 10);
}

/* Flow table + timer as generated code uses them: the node lives in the
 * instance payload; expiry destroys the flow; new flows reuse the records. */
typedef struct {
    rg_tnode tn;
    uint32_t id;
} flowpl;

typedef struct {
    rg_flow *t;
    rg_timer *tm;
    int expired;
} env;

static void flow_expire_cb(void *ctx, rg_tnode *n, uint32_t cls)
{
    (void)cls;
    env *e = ctx;
    flowpl *p = RG_TIMER_CONTAINER(n, flowpl, tn);
    rg_timer_remove(e->tm, &p->tn); /* the destroy path */
    rg_flow_delete(e->t, p);
    e->expired++;
}

static void flow_evict_cb(void *ctx, rg_flow *t, void *inst, int reason)
{
    (void)t;
    (void)reason;
    env *e = ctx;
    flowpl *p = inst;
    rg_timer_remove(e->tm, &p->tn);
}

static void test_flow_integration(void **state)
{
    (void)state;
    rg_timer tm;
    uint64_t to[1] = {5000};
    rg_timer_init(&tm, to, 1);
    env e = {0};
    e.tm = &tm;
    rg_flow_cfg cfg = {.key_len = 4,
                       .payload_size = sizeof(flowpl),
                       .cap = 64,
                       .on_remove = flow_evict_cb,
                       .cb_ctx = &e};
    rg_flow *t = rg_flow_new(&cfg);
    e.t = t;
    rg_rng rng = {5};
    uint64_t now = 0;
    for (int pkt = 0; pkt < 50000; pkt++) {
        now += rng_below(&rng, 40);
        /* first many flows (cap pressure: evictions), then few (old ones expire) */
        uint32_t key = rng_below(&rng, pkt < 25000 ? 200 : 30);
        rg_flow_set_time(t, now);
        rg_timer_set_time(&tm, now);
        if (rg_timer_due(&tm, now)) rg_timer_expire(&tm, now, flow_expire_cb, &e, 0);
        flowpl *p = rg_flow_lookup(t, &key, NULL);
        if (!p) {
            p = rg_flow_create(t, &key, NULL); /* may evict */
            assert_non_null(p);
            p->id = key;
        }
        assert_int_equal(p->id, key);
        rg_timer_touch(&tm, &p->tn, 0);
        if (rng_below(&rng, 50) == 0) { /* e.g. a RST: destroy now */
            rg_timer_remove(&tm, &p->tn);
            rg_flow_delete(t, p);
        }
        assert_int_equal(rg_timer_total(&tm), rg_flow_live(t));
    }
    assert_true(e.expired > 0);
    assert_true(rg_flow_stats(t)->evicted > 0);
    rg_flow_free(t);
}

#define S_ UINT64_C(1000000000)

/* The clock guard: a future packet does not move the clock, later packets follow on from it,
 * a backward jump is counted and the clock never runs backwards. */
static void test_clock_guard(void **state)
{
    (void)state;
    rg_clock c;
    rg_clock_init(&c, 300 * S_);
    assert_int_equal(c.max_jump, 300 * S_);
    assert_int_equal(rg_clock_packet(&c, 1000 * S_), 0); /* the first packet sets it */
    assert_int_equal(c.now, 1000 * S_);
    assert_int_equal(rg_clock_packet(&c, 1010 * S_), 0);
    assert_int_equal(c.now, 1010 * S_);
    assert_int_equal(rg_clock_packet(&c, 1005 * S_), 0); /* small reordering: no move back */
    assert_int_equal(c.now, 1010 * S_);
    assert_int_equal(rg_clock_packet(&c, 1310 * S_), 0); /* exactly the bound: trusted */
    assert_int_equal(c.now, 1310 * S_);
    /* a year ahead: a jump, the clock stays */
    assert_int_equal(rg_clock_packet(&c, (1310 + 31536000) * S_), 1);
    assert_int_equal(c.jumps_fwd, 1);
    assert_int_equal(c.last_fwd, 1);
    assert_int_equal(c.now, 1310 * S_);
    /* the correct time again: within the bound by the offset from before the jump, which comes
     * back (no second jump: the bogus packet was a lone one) */
    assert_int_equal(rg_clock_packet(&c, 1311 * S_), 0);
    assert_int_equal(c.jumps_back, 0);
    assert_int_equal(c.now, 1311 * S_);
    assert_int_equal(rg_clock_packet(&c, 1371 * S_), 0);
    assert_int_equal(c.now, 1371 * S_);
    rg_clock_tick(&c, 1381 * S_); /* an expiry tick within the bound moves it */
    assert_int_equal(c.now, 1381 * S_);
    rg_clock_tick(&c, 99999 * S_); /* one beyond it does not, and is no jump */
    assert_int_equal(c.now, 1381 * S_);
    assert_int_equal(c.jumps_fwd + c.jumps_back, 1);
    /* a clock set back by a day for good: one jump, then the clock advances again */
    assert_int_equal(rg_clock_packet(&c, (1382 - 86400) * S_), 1);
    assert_int_equal(c.jumps_back, 1);
    assert_int_equal(c.last_fwd, 0);
    assert_int_equal(c.now, 1381 * S_);
    assert_int_equal(rg_clock_packet(&c, (1391 - 86400) * S_), 0);
    assert_int_equal(c.now, 1390 * S_);
    /* timestamps that wrap around 2^64 are jumps, not a clock at the end of time */
    assert_int_equal(rg_clock_packet(&c, UINT64_MAX), 1);
    assert_int_equal(c.now, 1390 * S_);
    assert_int_equal(rg_clock_packet(&c, 10000 * S_), 1);
    assert_int_equal(c.now, 1390 * S_);
    assert_int_equal(c.jumps_fwd + c.jumps_back, 4);
}

/* A jump followed by a jump back that does not fit the old offset: both counted. */
static void test_clock_two_jumps(void **state)
{
    (void)state;
    rg_clock c;
    rg_clock_init(&c, 300 * S_);
    assert_int_equal(rg_clock_packet(&c, 1000 * S_), 0);
    assert_int_equal(rg_clock_packet(&c, 5000 * S_), 1); /* forward */
    assert_int_equal(rg_clock_packet(&c, 5010 * S_), 0); /* the new pace */
    assert_int_equal(c.now, 1010 * S_);
    assert_int_equal(rg_clock_packet(&c, 2000 * S_), 1); /* fits neither offset: backward */
    assert_int_equal(c.jumps_fwd, 1);
    assert_int_equal(c.jumps_back, 1);
    assert_int_equal(c.now, 1010 * S_);
    assert_int_equal(rg_clock_packet(&c, 2005 * S_), 0);
    assert_int_equal(c.now, 1015 * S_);
}

/* A sustained shift is followed: RG_CLOCK_RESYNC_PKTS packets agreeing with the jump's offset
 * confirm it (the old base is then forgotten), while a lone outlier between normal packets is
 * dismissed and never resyncs. */
static void test_clock_resync(void **state)
{
    (void)state;
    rg_clock c;
    rg_clock_init(&c, 300 * S_);
    assert_int_equal(rg_clock_packet(&c, 1000 * S_), 0);
    /* a lone outlier ten years ahead, then normal traffic: dismissed */
    assert_int_equal(rg_clock_packet(&c, (1000 + 10 * 31536000) * S_), RG_CLOCK_JUMP);
    for (unsigned i = 1; i <= 2 * RG_CLOCK_RESYNC_PKTS; i++)
        assert_int_equal(rg_clock_packet(&c, (1000 + i) * S_), 0);
    assert_int_equal(c.resyncs, 0);
    assert_int_equal(c.steady, 1);
    /* the capture's time moves a year ahead for good, one packet per ms */
    const uint64_t y = 2000 * S_ + 31536000 * S_, ms = S_ / 1000;
    const uint64_t now0 = c.now;
    assert_int_equal(rg_clock_packet(&c, y), RG_CLOCK_JUMP);
    for (unsigned i = 1; i < RG_CLOCK_RESYNC_PKTS; i++)
        assert_int_equal(rg_clock_packet(&c, y + i * ms), 0);
    assert_int_equal(c.resyncs, 0);
    assert_int_equal(rg_clock_packet(&c, y + RG_CLOCK_RESYNC_PKTS * ms), RG_CLOCK_RESYNC);
    assert_int_equal(c.resyncs, 1);
    assert_int_equal(c.base, y);
    /* the clock kept the pace across the shift (expiry sees 16 ms, not a year) */
    assert_int_equal(c.now, now0 + RG_CLOCK_RESYNC_PKTS * ms);
    /* the old base is forgotten: a packet dated in it now is a jump of its own */
    assert_int_equal(rg_clock_packet(&c, 1100 * S_), RG_CLOCK_JUMP);
    assert_int_equal(c.jumps_back, 1);
    assert_int_equal(rg_clock_packet(&c, y + 20 * ms), 0); /* and the new base dismisses it */
    assert_int_equal(c.resyncs, 1);
    /* RG_CLOCK_RESYNC_NS of agreeing clock time confirm too, with fewer packets */
    const uint64_t z = y + 86400 * S_;
    assert_int_equal(rg_clock_packet(&c, z), RG_CLOCK_JUMP);
    assert_int_equal(rg_clock_packet(&c, z + RG_CLOCK_RESYNC_NS / 2), 0);
    assert_int_equal(rg_clock_packet(&c, z + RG_CLOCK_RESYNC_NS), RG_CLOCK_RESYNC);
    assert_int_equal(c.base, z);
    assert_int_equal(c.resyncs, 2);
}

/* max_jump = UINT64_MAX: no guard, the clock is the maximum timestamp seen. */
static void test_clock_unguarded(void **state)
{
    (void)state;
    rg_clock c;
    rg_clock_init(&c, UINT64_MAX);
    assert_int_equal(rg_clock_packet(&c, 10 * S_), 0);
    assert_int_equal(rg_clock_packet(&c, UINT64_C(1) << 62), 0);
    assert_int_equal(c.now, UINT64_C(1) << 62);
    assert_int_equal(rg_clock_packet(&c, 5 * S_), 0);
    assert_int_equal(c.now, UINT64_C(1) << 62);
    assert_int_equal(c.jumps_fwd + c.jumps_back, 0);
    rg_clock_init(&c, 0); /* 0: the default */
    assert_int_equal(c.max_jump, RG_CLOCK_DEFAULT_MAX_JUMP);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_class),     cmocka_unit_test(test_remove),
        cmocka_unit_test(test_classes_order),    cmocka_unit_test(test_class_change),
        cmocka_unit_test(test_clock_monotonic),  cmocka_unit_test(test_callback_frees),
        cmocka_unit_test(test_flow_integration), cmocka_unit_test(test_clock_guard),
        cmocka_unit_test(test_clock_unguarded),  cmocka_unit_test(test_clock_two_jumps),
        cmocka_unit_test(test_clock_resync),
    };
    return cmocka_run_group_tests_name("rg_timer", tests, NULL, NULL);
}
