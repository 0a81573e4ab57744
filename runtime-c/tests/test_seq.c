/* test_seq.c - reassembly sequences. */
#include "rg_test.h"

#include "rg/rg_flow.h"
#include "rg/rg_seq.h"
#include "ref_seq.h"

/* ---- helpers ---- */
static const rg_seq_cfg CFG_FIRST = {.policy = RG_SEQ_FIRST, .buffer_data = 1};
static const rg_seq_cfg CFG_LAST = {.policy = RG_SEQ_LAST, .buffer_data = 1};
static const rg_seq_cfg CFG_FIRST0 = {.policy = RG_SEQ_FIRST, .buffer_data = 1, .zero_based = 1};
static const rg_seq_cfg CFG_LAST0 = {.policy = RG_SEQ_LAST, .buffer_data = 1, .zero_based = 1};
static const rg_seq_cfg CFG_META0 = {.buffer_data = 0, .zero_based = 1};

/* Pattern byte of a stream at relative offset i. */
static uint8_t pat(uint32_t i)
{
    return (uint8_t)(i * 7u + 13u + (i >> 8));
}

static uint8_t *make_stream(size_t n)
{
    uint8_t *b = malloc(n ? n : 1);
    assert_non_null(b);
    for (size_t i = 0; i < n; i++)
        b[i] = pat((uint32_t)i);
    return b;
}

/* Collected output. */
typedef struct {
    uint8_t *buf;
    size_t len, cap;
} sink;

static void sink_put(sink *k, rg_bytes b)
{
    assert_non_null(b.ptr); /* never NULL, even when empty */
    if (k->len + b.len > k->cap) {
        k->cap = (k->len + b.len) * 2 + 64;
        k->buf = realloc(k->buf, k->cap);
        assert_non_null(k->buf);
    }
    if (b.len) memcpy(k->buf + k->len, b.ptr, b.len);
    k->len += b.len;
}

/* Assemble until nothing is pending. */
static void drain(rg_seq *s, const rg_seq_cfg *cfg, sink *k, rg_seq_res *res)
{
    int guard = 0;
    while (rg_seq_pending(s)) {
        sink_put(k, rg_seq_assemble(s, cfg, res));
        assert_true(++guard < 100000);
    }
}

/* Bytes allocated for data (block buffers and the held view). */
static size_t data_bytes(const rg_seq *s)
{
    if (!s->st) return 0;
    size_t n = s->st->view_cap;
    for (uint32_t k = 0; k < s->nblk; k++)
        n += s->st->blk[k].cap;
    return n;
}

static uint32_t ins(rg_seq *s, const rg_seq_cfg *cfg, uint32_t seq, const uint8_t *d, uint32_t len,
                    rg_seq_res *res)
{
    return rg_seq_insert(s, cfg, seq, d, len, len, NULL, 0, res);
}

/* ---- basic / fast paths ---- */
/* rg_seq_insert_fresh on a fresh sequence against rg_seq_insert on another:
 * when it takes the segment, the two sequences, results and what assemble,
 * settle and the statistics then give are identical; when it refuses, it
 * changed nothing (the caller then runs rg_seq_insert). */
static void test_insert_fresh_equals_insert(void **state)
{
    (void)state;
    static const rg_seq_cfg CFG_CAP = {.buffer_data = 1, .max_bytes = 64};
    static const rg_seq_cfg CFG_CAP0 = {.buffer_data = 1, .max_bytes = 64, .zero_based = 1};
    static const rg_seq_cfg CFG_METACAP = {.buffer_data = 0, .max_bytes = 64};
    const rg_seq_cfg *cfgs[] = {&CFG_FIRST, &CFG_LAST, &CFG_FIRST0, &CFG_META0,
                                &CFG_CAP,   &CFG_CAP0, &CFG_METACAP};
    const uint32_t seqs[] = {0, 1, 1234, 0x7FFFFFFFu, 0xFFFFFFF0u};
    const uint32_t lens[] = {0, 1, 63, 64, 65, 1500};
    const int dtakes[] = {0, 1, 40,
                          -1}; /* takeup - len: none, a FIN, an end past data, truncated */
    const rg_seq_win wins[] = {
        {0, 0, 0, 0}, {0, 0xFFFFFFFFu, 0, 0}, {1234, 1234 + 64, 0, 0}, {1235, 5000, 0, 0}};
    uint8_t *data = make_stream(1500);
    unsigned taken = 0, refused = 0;
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++)
        for (size_t q = 0; q < sizeof seqs / sizeof *seqs; q++)
            for (size_t l = 0; l < sizeof lens / sizeof *lens; l++)
                for (size_t t = 0; t < sizeof dtakes / sizeof *dtakes; t++)
                    for (int w = -1; w < (int)(sizeof wins / sizeof *wins); w++)
                        for (unsigned fl = 0; fl < 4; fl++) { /* BORROW, NULL data */
                            const rg_seq_cfg *cfg = cfgs[c];
                            const uint32_t len = lens[l];
                            if (dtakes[t] < 0 && len == 0) continue;
                            const uint32_t takeup = (uint32_t)((int)len + dtakes[t]);
                            const rg_seq_win *win = w < 0 ? NULL : &wins[w];
                            const unsigned iflags = (fl & 1) ? RG_SEQ_BORROW : 0;
                            const uint8_t *d = (fl & 2) ? NULL : data;
                            if (d == NULL && len) continue; /* callers pass data for len */
                            rg_seq a, b;
                            rg_seq_res ra, rb;
                            memset(&a, 0, sizeof a);
                            memset(&b, 0, sizeof b);
                            memset(&ra, 0, sizeof ra);
                            memset(&rb, 0, sizeof rb);
                            const uint32_t s0 = seqs[q];
                            const int got =
                                rg_seq_insert_fresh(&a, cfg, s0, d, len, takeup, win, iflags, &ra);
                            const uint32_t fb =
                                rg_seq_insert(&b, cfg, s0, d, len, takeup, win, iflags, &rb);
                            if (!got) {
                                rg_seq z;
                                rg_seq_res zr;
                                memset(&z, 0, sizeof z);
                                memset(&zr, 0, sizeof zr);
                                assert_memory_equal(&a, &z, sizeof a);
                                assert_memory_equal(&ra, &zr, sizeof ra);
                                refused++;
                                rg_seq_free(&b);
                                continue;
                            }
                            taken++;
                            /* what the generated code reads after the fast form */
                            assert_int_equal(fb, 0);
                            assert_int_equal(rb.new_bytes, len);
                            assert_memory_equal(&a, &b, sizeof a);
                            assert_memory_equal(&ra, &rb, sizeof ra);
                            assert_null(a.st);
                            if ((q + l) & 1) { /* settled before the assemble: the copy */
                                rg_seq_settle(&a, cfg);
                                rg_seq_settle(&b, cfg);
                                assert_int_equal(rg_seq_buffered(&a), rg_seq_buffered(&b));
                            }
                            rg_bytes oa = rg_seq_assemble(&a, cfg, &ra);
                            rg_bytes ob = rg_seq_assemble(&b, cfg, &rb);
                            assert_int_equal(oa.len, ob.len);
                            assert_int_equal(oa.len, cfg->buffer_data ? len : 0);
                            if (oa.len) assert_memory_equal(oa.ptr, ob.ptr, oa.len);
                            assert_int_equal(rg_seq_next(&a), rg_seq_next(&b));
                            assert_int_equal(a.flags, b.flags);
                            assert_memory_equal(&ra, &rb, sizeof ra);
                            rg_seq_stats sa, sb;
                            memset(&sa, 0, sizeof sa);
                            memset(&sb, 0, sizeof sb);
                            rg_seq_stats_add(&sa, &ra);
                            rg_seq_stats_add(&sb, &rb);
                            assert_memory_equal(&sa, &sb, sizeof sa);
                            rg_seq_free(&a);
                            rg_seq_free(&b);
                        }
    /* every precondition was exercised both ways */
    assert_true(taken > 100);
    assert_true(refused > 100);
    free(data);
}

/* The fast form refuses what only rg_seq_insert handles, one case each. */
static void test_insert_fresh_refuses(void **state)
{
    (void)state;
    uint8_t *data = make_stream(100);
    rg_seq s;
    rg_seq_res r;
    static const rg_seq_cfg CFG_CAP = {.buffer_data = 1, .max_bytes = 64};
    const rg_seq_win left = {11, 500, 0, 0}, right = {0, 50, 0, 0};
    memset(&s, 0, sizeof s);
    memset(&r, 0, sizeof r);
    assert_false(rg_seq_insert_fresh(&s, &CFG_FIRST0, 8, data, 10, 10, NULL, RG_SEQ_BORROW, &r));
    assert_false(rg_seq_insert_fresh(&s, &CFG_FIRST, 8, data, 10, 11, NULL, RG_SEQ_BORROW, &r));
    assert_false(rg_seq_insert_fresh(&s, &CFG_FIRST, 8, data, 0, 0, NULL, RG_SEQ_BORROW, &r));
    assert_false(rg_seq_insert_fresh(&s, &CFG_FIRST, 8, data, 10, 10, NULL, 0, &r));
    assert_false(rg_seq_insert_fresh(&s, &CFG_CAP, 8, data, 65, 65, NULL, RG_SEQ_BORROW, &r));
    assert_false(rg_seq_insert_fresh(&s, &CFG_FIRST, 10, data, 10, 10, &left, RG_SEQ_BORROW, &r));
    assert_false(rg_seq_insert_fresh(&s, &CFG_FIRST, 45, data, 10, 10, &right, RG_SEQ_BORROW, &r));
    assert_int_equal(s.flags, 0);
    assert_int_equal(r.new_bytes, 0);
    /* and takes the plain case: an unfragmented datagram at offset 0 */
    assert_true(rg_seq_insert_fresh(&s, &CFG_FIRST0, 0, data, 100, 100, NULL, RG_SEQ_BORROW, &r));
    rg_bytes o = rg_seq_assemble(&s, &CFG_FIRST0, &r);
    assert_ptr_equal(o.ptr, data); /* borrowed: no copy */
    assert_int_equal(o.len, 100);
    assert_int_equal(r.adv_bytes, 100);
    assert_int_equal(r.new_bytes, 100);
    rg_seq_free(&s);
    free(data);
}

static void test_zero_struct_is_empty(void **state)
{
    (void)state;
    rg_seq s;
    if (sizeof(void *) == 8) assert_int_equal(sizeof(rg_seq), 40); /* small per-flow state */
    memset(&s, 0, sizeof s);
    assert_true(rg_seq_empty(&s));
    assert_true(rg_seq_ready(&s));
    assert_false(rg_seq_pending(&s));
    rg_bytes b = rg_seq_assemble(&s, &CFG_FIRST, NULL);
    assert_non_null(b.ptr);
    assert_int_equal(b.len, 0);
    rg_seq_free(&s);
    rg_seq_free(&s); /* idempotent */
}

static void test_fast_path_no_copy(void **state)
{
    (void)state;
    uint8_t *st = make_stream(3000);
    rg_seq s;
    rg_seq_init(&s);
    rg_bytes out;
    rg_seq_res r = {0};
    uint32_t isn = 1000;
    assert_true(rg_seq_fast(&s, &CFG_FIRST, isn, st, 1000, 1000, NULL, &out, &r));
    assert_ptr_equal(out.ptr, st);
    assert_int_equal(out.len, 1000);
    assert_true(rg_seq_fast(&s, &CFG_FIRST, isn + 1000, st + 1000, 2000, 2000, NULL, &out, &r));
    assert_ptr_equal(out.ptr, st + 1000);
    assert_int_equal(rg_seq_next(&s), isn + 3000);
    assert_null(s.st); /* nothing was allocated */
    assert_int_equal(r.new_bytes, 3000);
    assert_int_equal(r.adv_bytes, 3000);
    assert_int_equal(r.flags, 0);
    /* misaligned: refused, state untouched */
    assert_false(rg_seq_fast(&s, &CFG_FIRST, isn + 3001, st, 10, 10, NULL, &out, NULL));
    /* phantom bytes: refused */
    assert_false(rg_seq_fast(&s, &CFG_FIRST, isn + 3000, st, 10, 11, NULL, &out, NULL));
    /* window that would trim: refused; window that arms gap skipping: refused */
    rg_seq_win w = {isn + 3000, isn + 3005, 0, 0};
    assert_false(rg_seq_fast(&s, &CFG_FIRST, isn + 3000, st, 10, 10, &w, &out, NULL));
    w.left = isn + 3001;
    w.right = isn + 9000;
    assert_false(rg_seq_fast(&s, &CFG_FIRST, isn + 3000, st, 10, 10, &w, &out, NULL));
    w.left = isn + 2000;
    assert_true(rg_seq_fast(&s, &CFG_FIRST, isn + 3000, st, 10, 10, &w, &out, NULL));
    /* with a buffered block: refused */
    ins(&s, &CFG_FIRST, isn + 3020, st, 5, NULL);
    assert_false(rg_seq_fast(&s, &CFG_FIRST, isn + 3010, st, 10, 10, NULL, &out, NULL));
    assert_int_equal(rg_seq_next(&s), isn + 3010);
    rg_seq_free(&s);
    free(st);
}

static void test_fast_path_metadata_only(void **state)
{
    (void)state;
    uint8_t d[8] = {0};
    rg_seq s;
    rg_seq_init(&s);
    rg_bytes out;
    assert_true(rg_seq_fast(&s, &CFG_META0, 0, d, 8, 8, NULL, &out, NULL));
    assert_non_null(out.ptr);
    assert_int_equal(out.len, 0);
    assert_int_equal(rg_seq_next(&s), 8);
    /* zero-based: a first segment not at 0 is not aligned */
    rg_seq t;
    rg_seq_init(&t);
    assert_false(rg_seq_fast(&t, &CFG_META0, 5, d, 8, 8, NULL, &out, NULL));
    rg_seq_free(&s);
}

static void test_borrow_zero_copy(void **state)
{
    (void)state;
    uint8_t *st = make_stream(100);
    rg_seq s;
    rg_seq_init(&s);
    rg_seq_res r = {0};
    rg_seq_insert(&s, &CFG_FIRST, 7, st, 40, 40, NULL, RG_SEQ_BORROW, &r);
    assert_null(s.st);
    assert_false(rg_seq_empty(&s));
    assert_true(rg_seq_ready(&s));
    rg_bytes b = rg_seq_assemble(&s, &CFG_FIRST, &r);
    assert_ptr_equal(b.ptr, st);
    assert_int_equal(b.len, 40);
    assert_int_equal(rg_seq_next(&s), 47);
    assert_null(s.st);
    rg_seq_free(&s);
    free(st);
}

/* A borrowed block followed by another insert in the same packet is copied;
 * the caller's buffer may then go away. */
static void test_borrow_then_insert_copies(void **state)
{
    (void)state;
    uint8_t *st = make_stream(100);
    uint8_t *pkt = malloc(30);
    memcpy(pkt, st, 30);
    rg_seq s;
    rg_seq_init(&s);
    rg_seq_insert(&s, &CFG_FIRST0, 0, pkt, 30, 30, NULL, RG_SEQ_BORROW, NULL);
    rg_seq_insert(&s, &CFG_FIRST0, 40, st + 40, 10, 10, NULL, RG_SEQ_BORROW, NULL);
    memset(pkt, 0xEE, 30);
    free(pkt);
    rg_bytes b = rg_seq_assemble(&s, &CFG_FIRST0, NULL);
    assert_int_equal(b.len, 30);
    assert_memory_equal(b.ptr, st, 30);
    /* settle: borrowed then the packet goes away before assemble */
    pkt = malloc(10);
    memcpy(pkt, st + 30, 10);
    rg_seq_insert(&s, &CFG_FIRST0, 30, pkt, 10, 10, NULL, RG_SEQ_BORROW, NULL);
    /* not borrowed: there was a buffered block, so it was copied */
    rg_seq_settle(&s, &CFG_FIRST0);
    free(pkt);
    b = rg_seq_assemble(&s, &CFG_FIRST0, NULL);
    assert_int_equal(b.len, 20);
    assert_memory_equal(b.ptr, st + 30, 20);
    /* settle on a real borrow */
    pkt = malloc(10);
    memcpy(pkt, st + 50, 10);
    rg_seq_insert(&s, &CFG_FIRST0, 50, pkt, 10, 10, NULL, RG_SEQ_BORROW, NULL);
    assert_ptr_equal(s.borrow, pkt);
    rg_seq_settle(&s, &CFG_FIRST0);
    assert_null(s.borrow);
    free(pkt);
    b = rg_seq_assemble(&s, &CFG_FIRST0, NULL);
    assert_int_equal(b.len, 10);
    assert_memory_equal(b.ptr, st + 50, 10);
    rg_seq_free(&s);
    free(st);
}

static void test_in_order_copy_path(void **state)
{
    (void)state;
    uint8_t *st = make_stream(5000);
    rg_seq s;
    rg_seq_init(&s);
    sink k = {0};
    for (uint32_t off = 0; off < 5000; off += 500) {
        rg_seq_res r = {0};
        ins(&s, &CFG_FIRST, 0xABCD0000u + off, st + off, 500, &r);
        assert_int_equal(r.flags, 0);
        assert_int_equal(r.new_bytes, 500);
        sink_put(&k, rg_seq_assemble(&s, &CFG_FIRST, &r));
        assert_int_equal(r.adv_bytes, 500);
    }
    assert_int_equal(k.len, 5000);
    assert_memory_equal(k.buf, st, 5000);
    free(k.buf);
    rg_seq_free(&s);
    free(st);
}

/* ---- out of order ---- */
static int next_perm(int *a, int n)
{
    int i = n - 2;
    while (i >= 0 && a[i] >= a[i + 1])
        i--;
    if (i < 0) return 0;
    int j = n - 1;
    while (a[j] <= a[i])
        j--;
    int t = a[i];
    a[i] = a[j];
    a[j] = t;
    for (int l = i + 1, r = n - 1; l < r; l++, r--) {
        t = a[l];
        a[l] = a[r];
        a[r] = t;
    }
    return 1;
}

/* Five segments in every one of the 120 orders, both policies, assembling
 * after each insert: every byte delivered exactly once, in order. */
static void test_five_segments_all_orders(void **state)
{
    (void)state;
    const uint32_t segoff[6] = {0, 13, 40, 41, 90, 150};
    uint8_t *st = make_stream(150);
    const rg_seq_cfg *cfgs[2] = {&CFG_FIRST, &CFG_LAST};
    int orders = 0;
    for (int c = 0; c < 2; c++) {
        int perm[5] = {0, 1, 2, 3, 4};
        do {
            rg_seq s;
            rg_seq_init(&s);
            rg_seq_set_base(&s, 0xFFFFFFB0u); /* also crosses 2^32 */
            sink k = {0};
            uint32_t total_new = 0;
            for (int i = 0; i < 5; i++) {
                int g = perm[i];
                rg_seq_res r = {0};
                ins(&s, cfgs[c], 0xFFFFFFB0u + segoff[g], st + segoff[g], segoff[g + 1] - segoff[g],
                    &r);
                assert_int_equal(r.flags & (RG_SEQ_EV_REXMIT | RG_SEQ_EV_OVERLAP), 0);
                total_new += r.new_bytes;
                sink_put(&k, rg_seq_assemble(&s, cfgs[c], &r));
                assert_int_equal(rg_seq_ready(&s), rg_seq_empty(&s));
            }
            assert_int_equal(total_new, 150);
            assert_int_equal(k.len, 150);
            assert_memory_equal(k.buf, st, 150);
            assert_true(rg_seq_empty(&s));
            assert_int_equal(rg_seq_next(&s), 0xFFFFFFB0u + 150);
            free(k.buf);
            rg_seq_free(&s);
            orders++;
        } while (next_perm(perm, 5));
    }
    assert_int_equal(orders, 240);
    free(st);
}

/* Several holes, filled out of order: ready() only when no hole is left; the
 * delivered data is complete and correct (upstream bug 1). */
static void test_holes(void **state)
{
    (void)state;
    uint8_t *st = make_stream(50);
    rg_seq s;
    rg_seq_init(&s);
    sink k = {0};
    ins(&s, &CFG_FIRST0, 0, st, 10, NULL);       /* [0,10) */
    ins(&s, &CFG_FIRST0, 20, st + 20, 10, NULL); /* [20,30) */
    ins(&s, &CFG_FIRST0, 40, st + 40, 10, NULL); /* [40,50) */
    assert_false(rg_seq_ready(&s));
    sink_put(&k, rg_seq_assemble(&s, &CFG_FIRST0, NULL));
    assert_int_equal(k.len, 10);
    assert_false(rg_seq_pending(&s));
    assert_int_equal(rg_seq_blocks(&s), 2);
    assert_int_equal(rg_seq_buffered(&s), 20);
    ins(&s, &CFG_FIRST0, 30, st + 30, 10, NULL); /* fills the second hole */
    assert_false(rg_seq_ready(&s));
    assert_int_equal(rg_seq_blocks(&s), 1);
    rg_bytes none = rg_seq_assemble(&s, &CFG_FIRST0, NULL);
    assert_int_equal(none.len, 0);
    ins(&s, &CFG_FIRST0, 10, st + 10, 10, NULL); /* fills the first */
    assert_true(rg_seq_ready(&s));
    sink_put(&k, rg_seq_assemble(&s, &CFG_FIRST0, NULL));
    assert_int_equal(k.len, 50);
    assert_memory_equal(k.buf, st, 50);
    free(k.buf);
    rg_seq_free(&s);
    free(st);
}

/* The "no hole up to X" half of a virtual condition: IP fragments F3, F1, F2. */
static void test_ready_upto(void **state)
{
    (void)state;
    uint8_t *st = make_stream(30);
    rg_seq s;
    rg_seq_init(&s);
    assert_false(rg_seq_ready_upto(&s, 0)); /* nothing inserted yet */
    ins(&s, &CFG_LAST0, 20, st + 20, 10, NULL);
    assert_false(rg_seq_ready_upto(&s, 30));
    ins(&s, &CFG_LAST0, 0, st, 10, NULL);
    assert_true(rg_seq_ready_upto(&s, 10));
    assert_false(rg_seq_ready_upto(&s, 11));
    ins(&s, &CFG_LAST0, 10, st + 10, 10, NULL);
    assert_true(rg_seq_ready_upto(&s, 30));
    assert_false(rg_seq_ready_upto(&s, 31)); /* no end marker: a byte not seen */
    rg_bytes all = rg_seq_assemble(&s, &CFG_LAST0, NULL);
    assert_int_equal(all.len, 30);
    assert_true(rg_seq_ready_upto(&s, 30)); /* delivered counts as present */
    rg_seq_free(&s);

    /* a FIN (phantom byte) at 1000 + 5: ready up to the marker, not past the data */
    rg_seq_init(&s);
    assert_int_equal(rg_seq_insert(&s, &CFG_FIRST, 1000, st, 5, 6, NULL, 0, NULL) & RG_SEQ_EV_END,
                     RG_SEQ_EV_END);
    assert_true(rg_seq_ready_upto(&s, 1006));
    rg_seq_free(&s);
    rg_seq_init(&s);
    rg_seq_insert(&s, &CFG_FIRST, 1000, st, 0, 0, NULL, 0, NULL);     /* a bare SYN sets the base */
    rg_seq_insert(&s, &CFG_FIRST, 1005, st + 5, 5, 6, NULL, 0, NULL); /* FIN after a hole */
    assert_false(rg_seq_ready_upto(&s, 1011));
    rg_seq_insert(&s, &CFG_FIRST, 1000, st, 5, 5, NULL, 0, NULL);
    assert_true(rg_seq_ready_upto(&s, 1011));
    rg_seq_free(&s);
    free(st);
}

/* ---- overlap shapes ---- */
/* An existing block B = [10, 20) of 'A' behind a hole [0, 5); insert N of 'B'
 * with the given shape; then fill the hole and read everything back. */
typedef struct {
    const char *name;
    uint32_t a, b;   /* new segment [a, b) */
    uint32_t flags;  /* expected REXMIT / OVERLAP flags */
    uint32_t dup;    /* expected duplicate bytes */
    uint32_t blocks; /* expected blocks after the insert */
} shape;

static void check_shape(const shape *sh, const rg_seq_cfg *cfg)
{
    uint8_t A[64], B[64];
    memset(A, 'A', sizeof A);
    memset(B, 'B', sizeof B);
    rg_seq s;
    rg_seq_init(&s);
    ins(&s, cfg, 10, A, 10, NULL);
    rg_seq_res r = {0};
    ins(&s, cfg, sh->a, B, sh->b - sh->a, &r);
    if ((r.flags & (RG_SEQ_EV_REXMIT | RG_SEQ_EV_OVERLAP)) != sh->flags || r.dup_bytes != sh->dup ||
        rg_seq_blocks(&s) != sh->blocks)
        fail_msg("%s/%s: flags %x dup %u blocks %u", sh->name,
                 cfg->policy == RG_SEQ_LAST ? "last" : "first", r.flags, r.dup_bytes,
                 rg_seq_blocks(&s));
    assert_int_equal(r.new_bytes, (sh->b - sh->a) - sh->dup);
    if (sh->dup) {
        assert_true(r.flags & RG_SEQ_EV_CONFLICT); /* 'A' vs 'B' */
        assert_int_equal(r.dup_seq, sh->a > 10 ? sh->a : 10);
    }
    /* expected content over [0, 40) */
    char want[40];
    uint32_t lo = 0, hi = 0;
    memset(want, 0, sizeof want);
    for (uint32_t i = 0; i < 40; i++) {
        int in_a = i >= 10 && i < 20, in_b = i >= sh->a && i < sh->b;
        if (in_a && in_b)
            want[i] = cfg->policy == RG_SEQ_LAST ? 'B' : 'A';
        else if (in_a)
            want[i] = 'A';
        else if (in_b)
            want[i] = 'B';
    }
    /* fill every byte of [0, end) that neither copy covers, so everything
     * becomes contiguous; the filler never overlaps */
    uint8_t Z[40];
    memset(Z, 'Z', sizeof Z);
    uint32_t end = sh->b > 20 ? sh->b : 20;
    for (uint32_t i = 0; i < end;) {
        if (want[i]) {
            i++;
            continue;
        }
        lo = i;
        while (i < end && !want[i])
            want[i++] = 'Z';
        hi = i;
        rg_seq_res zr = {0};
        ins(&s, cfg, lo, Z, hi - lo, &zr);
        assert_int_equal(zr.dup_bytes, 0);
    }
    sink k = {0};
    drain(&s, cfg, &k, NULL);
    assert_int_equal(k.len, end);
    if (memcmp(k.buf, want, end) != 0)
        fail_msg("%s/%s: content %.*s", sh->name, cfg->policy == RG_SEQ_LAST ? "last" : "first",
                 (int)end, (const char *)k.buf);
    free(k.buf);
    rg_seq_free(&s);
}

static void test_overlap_shapes(void **state)
{
    (void)state;
    static const shape shapes[] = {
        {"left", 5, 15, RG_SEQ_EV_OVERLAP, 5, 1},
        {"right", 15, 25, RG_SEQ_EV_OVERLAP, 5, 1},
        {"inner", 12, 18, RG_SEQ_EV_REXMIT, 6, 1},
        {"outer", 5, 25, RG_SEQ_EV_OVERLAP, 10, 1},
        {"exact", 10, 20, RG_SEQ_EV_REXMIT, 10, 1},
        {"same-start", 10, 15, RG_SEQ_EV_REXMIT, 5, 1},
        {"same-end", 15, 20, RG_SEQ_EV_REXMIT, 5, 1},
        {"start-longer", 10, 25, RG_SEQ_EV_OVERLAP, 10, 1},
        {"end-longer", 5, 20, RG_SEQ_EV_OVERLAP, 10, 1},
        {"adjacent-left", 5, 10, 0, 0, 1},
        {"adjacent-right", 20, 25, 0, 0, 1},
        {"disjoint-left", 2, 8, 0, 0, 2},
        {"disjoint-right", 22, 30, 0, 0, 2},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        rg_seq_cfg f = CFG_FIRST0, l = CFG_LAST0;
        check_shape(&shapes[i], &f);
        check_shape(&shapes[i], &l);
    }
}

/* A segment spanning two blocks and the hole between them. */
static void test_overlap_spanning_blocks(void **state)
{
    (void)state;
    for (int pol = 0; pol < 2; pol++) {
        const rg_seq_cfg *cfg = pol ? &CFG_LAST0 : &CFG_FIRST0;
        uint8_t A[10], C[10], B[40], Z[10];
        memset(A, 'A', 10);
        memset(C, 'C', 10);
        memset(B, 'B', 40);
        memset(Z, 'Z', 10);
        rg_seq s;
        rg_seq_init(&s);
        ins(&s, cfg, 10, A, 10, NULL);
        ins(&s, cfg, 30, C, 10, NULL);
        ins(&s, cfg, 50, C, 5, NULL);
        rg_seq_res r = {0};
        ins(&s, cfg, 15, B, 20, &r); /* [15, 35) */
        assert_int_equal(r.dup_bytes, 10);
        assert_int_equal(r.dup_seq, 15);
        assert_int_equal(r.new_bytes, 10);
        assert_true(r.flags & RG_SEQ_EV_OVERLAP);
        assert_int_equal(rg_seq_blocks(&s), 2);
        ins(&s, cfg, 0, Z, 10, NULL);
        sink k = {0};
        sink_put(&k, rg_seq_assemble(&s, cfg, NULL));
        assert_int_equal(k.len, 40);
        const char *want = pol ? "ZZZZZZZZZZAAAAABBBBBBBBBBBBBBBBBBBBCCCCC"
                               : "ZZZZZZZZZZAAAAAAAAAABBBBBBBBBBCCCCCCCCCC";
        assert_memory_equal(k.buf, want, 40);
        free(k.buf);
        rg_seq_free(&s);
    }
}

/* Same content overlapping: no conflict. */
static void test_overlap_same_content(void **state)
{
    (void)state;
    uint8_t *st = make_stream(100);
    rg_seq s;
    rg_seq_init(&s);
    ins(&s, &CFG_FIRST0, 50, st + 50, 30, NULL);
    rg_seq_res r = {0};
    ins(&s, &CFG_FIRST0, 40, st + 40, 50, &r);
    assert_true(r.flags & RG_SEQ_EV_OVERLAP);
    assert_false(r.flags & RG_SEQ_EV_CONFLICT);
    rg_seq_free(&s);
    free(st);
}

/* ---- before the assembled offset (upstream bug 2) ---- */
static void test_below_next_keeps_new_bytes(void **state)
{
    (void)state;
    uint8_t *st = make_stream(100);
    rg_seq s;
    rg_seq_init(&s);
    sink k = {0};
    ins(&s, &CFG_FIRST, 500, st, 10, NULL);
    sink_put(&k, rg_seq_assemble(&s, &CFG_FIRST, NULL));
    rg_seq_res r = {0};
    ins(&s, &CFG_FIRST, 505, st + 5, 10, &r); /* [505, 515): 5 old, 5 new */
    assert_int_equal(r.dup_bytes, 5);
    assert_int_equal(r.dup_seq, 505);
    assert_int_equal(r.new_bytes, 5);
    assert_true(r.flags & RG_SEQ_EV_OVERLAP);
    assert_false(r.flags & RG_SEQ_EV_REXMIT);
    sink_put(&k, rg_seq_assemble(&s, &CFG_FIRST, NULL));
    assert_int_equal(k.len, 15);
    assert_memory_equal(k.buf, st, 15);
    /* wholly old: retransmission, nothing changes */
    memset(&r, 0, sizeof r);
    ins(&s, &CFG_FIRST, 500, st, 15, &r);
    assert_int_equal(r.flags, RG_SEQ_EV_REXMIT);
    assert_int_equal(r.dup_bytes, 15);
    assert_int_equal(rg_seq_next(&s), 515);
    assert_true(rg_seq_empty(&s));
    free(k.buf);
    rg_seq_free(&s);
    free(st);
}

/* ---- wraparound ---- */
static void test_wraparound(void **state)
{
    (void)state;
    uint8_t *st = make_stream(4096);
    for (uint32_t isn = 0xFFFFF000u; isn != 0x00001000u; isn += 0x400u) {
        rg_seq s;
        rg_seq_init(&s);
        sink k = {0};
        /* first packet sets the base; then out of order around 2^32 */
        ins(&s, &CFG_FIRST, isn, st, 100, NULL);
        ins(&s, &CFG_FIRST, isn + 3000, st + 3000, 1096, NULL);
        ins(&s, &CFG_FIRST, isn + 1000, st + 1000, 2000, NULL);
        rg_seq_res r = {0};
        ins(&s, &CFG_FIRST, isn + 50, st + 50, 1000, &r); /* overlaps both sides */
        assert_int_equal(r.dup_bytes, 100);
        assert_int_equal(r.new_bytes, 900);
        assert_true(r.flags & RG_SEQ_EV_OVERLAP);
        drain(&s, &CFG_FIRST, &k, NULL);
        assert_int_equal(k.len, 4096);
        assert_memory_equal(k.buf, st, 4096);
        assert_int_equal(rg_seq_next(&s), isn + 4096);
        /* old data from before the wrap is a retransmission, not new data */
        memset(&r, 0, sizeof r);
        ins(&s, &CFG_FIRST, isn, st, 10, &r);
        assert_true(r.flags & RG_SEQ_EV_REXMIT);
        free(k.buf);
        rg_seq_free(&s);
    }
    free(st);
}

/* Serial arithmetic: a segment 2^31 or more ahead counts as old. */
static void test_serial_halfspace(void **state)
{
    (void)state;
    uint8_t d[4] = {1, 2, 3, 4};
    rg_seq s;
    rg_seq_init(&s);
    rg_seq_set_base(&s, 100);
    rg_seq_res r = {0};
    ins(&s, &CFG_FIRST, 100u + 0x80000000u, d, 4, &r);
    assert_true(r.flags & RG_SEQ_EV_REXMIT);
    assert_true(rg_seq_empty(&s));
    rg_seq_free(&s);
}

/* ---- caps ---- */
static void test_byte_cap(void **state)
{
    (void)state;
    rg_seq_cfg cfg = {.buffer_data = 1, .zero_based = 1, .max_bytes = 100};
    uint8_t *st = make_stream(1000);
    rg_seq s;
    rg_seq_init(&s);
    rg_seq_res r = {0};
    ins(&s, &cfg, 50, st + 50, 100, &r); /* [50,150): 50 past the cap */
    assert_true(r.flags & RG_SEQ_EV_BUFFER_FULL);
    assert_int_equal(r.cap_bytes, 50);
    assert_int_equal(r.new_bytes, 50);
    memset(&r, 0, sizeof r);
    ins(&s, &cfg, 200, st + 200, 10, &r); /* wholly past */
    assert_int_equal(r.flags, RG_SEQ_EV_BUFFER_FULL);
    assert_int_equal(r.cap_bytes, 10);
    assert_int_equal(rg_seq_buffered(&s), 50);
    assert_true(data_bytes(&s) <= 100);
    /* the cap moves with next: deliver [0,100), then [100,200) fits */
    ins(&s, &cfg, 0, st, 50, NULL);
    sink k = {0};
    sink_put(&k, rg_seq_assemble(&s, &cfg, NULL));
    memset(&r, 0, sizeof r);
    ins(&s, &cfg, 100, st + 100, 100, &r);
    assert_int_equal(r.cap_bytes, 0);
    sink_put(&k, rg_seq_assemble(&s, &cfg, NULL));
    assert_int_equal(k.len, 200);
    assert_memory_equal(k.buf, st, 200);
    /* a single in-order segment larger than the cap is trimmed, same as fast path refusal */
    rg_bytes out;
    assert_false(rg_seq_fast(&s, &cfg, 200, st + 200, 150, 150, NULL, &out, NULL));
    memset(&r, 0, sizeof r);
    ins(&s, &cfg, 200, st + 200, 150, &r);
    assert_int_equal(r.cap_bytes, 50);
    free(k.buf);
    rg_seq_free(&s);
    free(st);
}

static void test_block_cap(void **state)
{
    (void)state;
    rg_seq_cfg cfg = {.buffer_data = 1, .zero_based = 1, .max_blocks = 3};
    uint8_t *st = make_stream(100);
    rg_seq s;
    rg_seq_init(&s);
    ins(&s, &cfg, 10, st + 10, 5, NULL);
    ins(&s, &cfg, 20, st + 20, 5, NULL);
    ins(&s, &cfg, 30, st + 30, 5, NULL);
    rg_seq_res r = {0};
    ins(&s, &cfg, 40, st + 40, 5, &r);
    assert_true(r.flags & RG_SEQ_EV_BUFFER_FULL);
    assert_int_equal(r.cap_bytes, 5);
    assert_int_equal(rg_seq_blocks(&s), 3);
    /* merging is always possible */
    memset(&r, 0, sizeof r);
    ins(&s, &cfg, 15, st + 15, 5, &r);
    assert_int_equal(r.flags, 0);
    assert_int_equal(rg_seq_blocks(&s), 2);
    ins(&s, &cfg, 40, st + 40, 5, &r);
    assert_int_equal(rg_seq_blocks(&s), 3);
    ins(&s, &cfg, 0, st, 10, NULL);
    ins(&s, &cfg, 25, st + 25, 5, NULL);
    ins(&s, &cfg, 35, st + 35, 5, NULL);
    sink k = {0};
    drain(&s, &cfg, &k, NULL);
    assert_int_equal(k.len, 45);
    assert_memory_equal(k.buf, st, 45);
    free(k.buf);
    rg_seq_free(&s);
    free(st);
}

/* ---- any segment size ---- */
static void test_large_segments(void **state)
{
    (void)state;
    const uint32_t n = 300000;
    uint8_t *st = make_stream(n);
    rg_seq s;
    rg_seq_init(&s);
    sink k = {0};
    /* a 64 KiB+ segment out of order, then the rest */
    ins(&s, &CFG_FIRST, 7, st + 70000, 100000, NULL);     /* base := 7 */
    rg_seq_set_base(&s, 0);                               /* (drops it: start again, zero base) */
    ins(&s, &CFG_FIRST, 70000, st + 70000, 100000, NULL); /* 100 KB ahead */
    ins(&s, &CFG_FIRST, 170000, st + 170000, 130000, NULL);
    assert_false(rg_seq_ready(&s));
    ins(&s, &CFG_FIRST, 0, st, 70000, NULL);
    assert_true(rg_seq_ready(&s));
    drain(&s, &CFG_FIRST, &k, NULL);
    assert_int_equal(k.len, n);
    assert_memory_equal(k.buf, st, n);
    /* one in-order 256 KiB segment through the copy path */
    k.len = 0;
    ins(&s, &CFG_FIRST, n, st, 262144, NULL);
    sink_put(&k, rg_seq_assemble(&s, &CFG_FIRST, NULL));
    assert_int_equal(k.len, 262144);
    assert_memory_equal(k.buf, st, 262144);
    free(k.buf);
    rg_seq_free(&s);
    free(st);
}

/* ---- end markers ---- */
static void test_syn_and_fin_phantoms(void **state)
{
    (void)state;
    uint8_t *st = make_stream(100);
    rg_seq s;
    rg_seq_init(&s);
    const uint32_t isn = 0xFFFFFFFFu; /* SYN at 2^32 - 1: data starts at 0 */
    rg_seq_res r = {0};
    rg_seq_insert(&s, &CFG_FIRST, isn, NULL, 0, 1, NULL, 0, &r); /* SYN */
    assert_int_equal(r.flags, 0);
    assert_int_equal(rg_seq_next(&s), 0);
    assert_false(rg_seq_has_end(&s));
    /* SYN retransmission */
    rg_seq_insert(&s, &CFG_FIRST, isn, NULL, 0, 1, NULL, 0, &r);
    assert_true(r.flags & RG_SEQ_EV_REXMIT);
    sink k = {0};
    ins(&s, &CFG_FIRST, 0, st, 40, NULL);
    sink_put(&k, rg_seq_assemble(&s, &CFG_FIRST, NULL));
    /* FIN with data overtakes the segment before it */
    memset(&r, 0, sizeof r);
    rg_seq_insert(&s, &CFG_FIRST, 60, st + 60, 40, 41, NULL, 0, &r);
    assert_true(r.flags & RG_SEQ_EV_END);
    assert_true(rg_seq_has_end(&s));
    assert_int_equal(rg_seq_end(&s), 100);
    assert_false(rg_seq_ready(&s));
    assert_false(rg_seq_complete(&s));
    rg_bytes b = rg_seq_assemble(&s, &CFG_FIRST, NULL);
    assert_int_equal(b.len, 0);
    /* data past the end marker is dropped */
    memset(&r, 0, sizeof r);
    ins(&s, &CFG_FIRST, 95, st, 20, &r);
    assert_true(r.flags & RG_SEQ_EV_OUT_OF_WINDOW);
    assert_int_equal(r.oow_bytes, 15);
    /* a different end marker is ignored */
    memset(&r, 0, sizeof r);
    rg_seq_insert(&s, &CFG_FIRST, 120, NULL, 0, 1, NULL, 0, &r);
    assert_true(r.flags & RG_SEQ_EV_END_MISMATCH);
    assert_int_equal(rg_seq_end(&s), 100);
    /* the missing segment */
    ins(&s, &CFG_FIRST, 40, st + 40, 20, NULL);
    assert_true(rg_seq_ready(&s));
    assert_true(rg_seq_complete(&s));
    memset(&r, 0, sizeof r);
    sink_put(&k, rg_seq_assemble(&s, &CFG_FIRST, &r));
    assert_true(r.flags & RG_SEQ_EV_DONE);
    assert_true(rg_seq_done(&s));
    assert_int_equal(rg_seq_next(&s), 101); /* the FIN consumed its number */
    assert_int_equal(k.len, 100);
    assert_memory_equal(k.buf, st, 100);
    /* FIN retransmission */
    memset(&r, 0, sizeof r);
    rg_seq_insert(&s, &CFG_FIRST, 100, NULL, 0, 1, NULL, 0, &r);
    assert_true(r.flags & RG_SEQ_EV_REXMIT);
    assert_false(rg_seq_pending(&s));
    free(k.buf);
    rg_seq_free(&s);
    free(st);
}

/* An end marker below data already buffered is ignored. */
static void test_end_below_data_ignored(void **state)
{
    (void)state;
    uint8_t *st = make_stream(100);
    rg_seq s;
    rg_seq_init(&s);
    ins(&s, &CFG_FIRST0, 50, st + 50, 10, NULL);
    rg_seq_res r = {0};
    rg_seq_insert(&s, &CFG_FIRST0, 30, st + 30, 10, 11, NULL, 0, &r); /* "FIN" at 40 < 60 */
    assert_true(r.flags & RG_SEQ_EV_END_MISMATCH);
    assert_false(r.flags & RG_SEQ_EV_END);
    assert_false(rg_seq_has_end(&s));
    /* an end marker exactly at the last buffered byte is fine */
    memset(&r, 0, sizeof r);
    rg_seq_insert(&s, &CFG_FIRST0, 60, NULL, 0, 1, NULL, 0, &r);
    assert_true(r.flags & RG_SEQ_EV_END);
    assert_int_equal(rg_seq_end(&s), 60);
    rg_seq_free(&s);
    free(st);
}

/* A data-less FIN at next: end marker, then done. */
static void test_bare_fin(void **state)
{
    (void)state;
    uint8_t *st = make_stream(10);
    rg_seq s;
    rg_seq_init(&s);
    ins(&s, &CFG_FIRST, 1000, st, 10, NULL);
    (void)rg_seq_assemble(&s, &CFG_FIRST, NULL);
    rg_seq_res r = {0};
    rg_seq_insert(&s, &CFG_FIRST, 1010, NULL, 0, 1, NULL, 0, &r);
    assert_true(r.flags & RG_SEQ_EV_END);
    assert_true(rg_seq_complete(&s));
    assert_true(rg_seq_pending(&s));
    rg_bytes b = rg_seq_assemble(&s, &CFG_FIRST, &r);
    assert_int_equal(b.len, 0);
    assert_true(rg_seq_done(&s));
    assert_int_equal(rg_seq_next(&s), 1011);
    rg_seq_free(&s);
    free(st);
}

/* IP-fragment style: zero-based, the last fragment marks the end with a
 * phantom byte; F1, F3, F2 must not be "ready" before F2 (upstream bug 3). */
static void test_fragments_end_marker(void **state)
{
    (void)state;
    uint8_t *st = make_stream(24);
    static const int orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                     {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (int o = 0; o < 6; o++) {
        rg_seq s;
        rg_seq_init(&s);
        for (int i = 0; i < 3; i++) {
            int f = orders[o][i];
            uint32_t off = (uint32_t)f * 8, last = f == 2;
            rg_seq_insert(&s, &CFG_FIRST0, off, st + off, 8, 8 + last, NULL, 0, NULL);
            assert_int_equal(rg_seq_complete(&s), i == 2);
        }
        rg_bytes b = rg_seq_assemble(&s, &CFG_FIRST0, NULL);
        assert_int_equal(b.len, 24);
        assert_memory_equal(b.ptr, st, 24);
        rg_seq_free(&s);
    }
    /* without an end marker, a hole is still a hole */
    rg_seq s;
    rg_seq_init(&s);
    ins(&s, &CFG_FIRST0, 0, st, 8, NULL);
    ins(&s, &CFG_FIRST0, 16, st + 16, 8, NULL);
    assert_false(rg_seq_ready(&s));
    rg_seq_free(&s);
    free(st);
}

/* ---- window and ACK-driven gap skipping ---- */
static void test_window_right_edge(void **state)
{
    (void)state;
    uint8_t *st = make_stream(100);
    rg_seq s;
    rg_seq_init(&s);
    rg_seq_win w = {0, 30, 0, 0};
    rg_seq_res r = {0};
    rg_seq_insert(&s, &CFG_FIRST0, 20, st + 20, 20, 20, &w, 0, &r); /* [20,40): 10 outside */
    assert_true(r.flags & RG_SEQ_EV_OUT_OF_WINDOW);
    assert_int_equal(r.oow_bytes, 10);
    assert_int_equal(r.new_bytes, 10);
    memset(&r, 0, sizeof r);
    rg_seq_insert(&s, &CFG_FIRST0, 30, st + 30, 10, 10, &w, 0, &r); /* wholly outside */
    assert_int_equal(r.flags, RG_SEQ_EV_OUT_OF_WINDOW);
    assert_int_equal(rg_seq_buffered(&s), 10);
    /* (0,0) disables the window */
    rg_seq_win none = {0, 0, 0, 0};
    memset(&r, 0, sizeof r);
    rg_seq_insert(&s, &CFG_FIRST0, 30, st + 30, 10, 10, &none, 0, &r);
    assert_int_equal(r.flags, 0);
    rg_seq_free(&s);
    free(st);
}

static void test_gap_skipping(void **state)
{
    (void)state;
    uint8_t *st = make_stream(200);
    rg_seq s;
    rg_seq_init(&s);
    sink k = {0};
    ins(&s, &CFG_FIRST0, 0, st, 10, NULL);
    sink_put(&k, rg_seq_assemble(&s, &CFG_FIRST0, NULL));
    /* [10,20) lost; [20,30) and [40,50) buffered */
    ins(&s, &CFG_FIRST0, 20, st + 20, 10, NULL);
    ins(&s, &CFG_FIRST0, 40, st + 40, 10, NULL);
    assert_false(rg_seq_pending(&s));
    /* the receiver acknowledges up to 45: the holes below it are skipped */
    rg_seq_win w = {45, 1000, 0, 0};
    rg_seq_insert(&s, &CFG_FIRST0, 50, st + 50, 10, 10, &w, 0, NULL);
    assert_true(rg_seq_pending(&s));
    /* both holes are settled for a virtual condition already */
    assert_true(rg_seq_ready_upto(&s, 60));
    assert_false(rg_seq_ready_upto(&s, 61));
    rg_seq_res r = {0};
    rg_bytes b = rg_seq_assemble(&s, &CFG_FIRST0, &r);
    /* gap recovery: both holes in one call, the bytes around them joined */
    assert_true(r.flags & RG_SEQ_EV_GAP);
    assert_int_equal(r.gap_bytes, 20);
    assert_int_equal(r.ngaps, 2);
    assert_int_equal(r.gaps[0].start, 10);
    assert_int_equal(r.gaps[0].end, 20);
    assert_int_equal(r.gaps[1].start, 30);
    assert_int_equal(r.gaps[1].end, 40);
    assert_int_equal(b.len, 30);
    assert_memory_equal(b.ptr, st + 20, 10);
    assert_memory_equal(b.ptr + 10, st + 40, 20); /* [40,60) merged */
    assert_false(rg_seq_pending(&s));
    assert_false(s.flags & RG_SEQF_FLOOR);
    /* an acknowledgment beyond every byte seen is not trusted (bogus or
     * foreign ack): nothing is skipped */
    w.left = 100;
    w.right = 2000;
    rg_seq_insert(&s, &CFG_FIRST0, 60, NULL, 0, 0, &w, 0, NULL);
    assert_false(rg_seq_pending(&s));
    w.left = 0x40000000u;
    w.right = 0x40001000u;
    rg_seq_insert(&s, &CFG_FIRST0, 60, NULL, 0, 0, &w, 0, NULL);
    assert_false(rg_seq_pending(&s));
    assert_int_equal(rg_seq_next(&s), 60);
    /* ... until data past it shows the acknowledged bytes were real */
    w.left = 100;
    w.right = 2000;
    rg_seq_insert(&s, &CFG_FIRST0, 100, st + 100, 10, 10, &w, 0, NULL);
    memset(&r, 0, sizeof r);
    b = rg_seq_assemble(&s, &CFG_FIRST0, &r);
    assert_int_equal(r.gap_bytes, 40);
    assert_int_equal(b.len, 10);
    assert_memory_equal(b.ptr, st + 100, 10);
    assert_int_equal(rg_seq_next(&s), 110);
    /* a left edge behind next changes nothing */
    w.left = 90;
    memset(&r, 0, sizeof r);
    rg_seq_insert(&s, &CFG_FIRST0, 110, st + 110, 10, 10, &w, 0, &r);
    b = rg_seq_assemble(&s, &CFG_FIRST0, &r);
    assert_int_equal(r.gap_bytes, 0);
    assert_int_equal(b.len, 10);
    assert_int_equal(rg_seq_next(&s), 120);
    /* the end of an instance: rg_seq_flush skips every hole up to the last
     * byte seen, even with no acknowledgment past it */
    rg_seq_insert(&s, &CFG_FIRST0, 125, st + 125, 3, 3, NULL, 0, NULL);
    assert_false(rg_seq_pending(&s));
    assert_true(rg_seq_flush(&s));
    memset(&r, 0, sizeof r);
    b = rg_seq_assemble(&s, &CFG_FIRST0, &r);
    assert_int_equal(r.ngaps, 1);
    assert_int_equal(r.gaps[0].start, 120);
    assert_int_equal(r.gaps[0].end, 125);
    assert_int_equal(b.len, 3);
    assert_memory_equal(b.ptr, st + 125, 3);
    assert_false(rg_seq_flush(&s)); /* nothing left */
    /* skipping never passes the end marker */
    rg_seq_insert(&s, &CFG_FIRST0, 130, NULL, 0, 1, NULL, 0, NULL); /* FIN at 130 */
    w.left = 131;                                                   /* the FIN acknowledged */
    rg_seq_insert(&s, &CFG_FIRST0, 128, NULL, 0, 0, &w, 0, NULL);
    memset(&r, 0, sizeof r);
    while (rg_seq_pending(&s))
        (void)rg_seq_assemble(&s, &CFG_FIRST0, &r);
    assert_int_equal(r.gap_bytes, 2);
    assert_true(rg_seq_done(&s));
    assert_int_equal(rg_seq_next(&s), 131);
    free(k.buf);
    rg_seq_free(&s);
    free(st);
}

/* gap recovery: a hole that holds a full buffer is skipped (byte cap, then
 * block cap) */
static void test_gap_full_buffer(void **state)
{
    (void)state;
    uint8_t *st = make_stream(400);
    static const rg_seq_cfg small = {.policy = RG_SEQ_FIRST,
                                     .buffer_data = 1,
                                     .zero_based = 1,
                                     .max_bytes = 100,
                                     .max_blocks = 3};
    rg_seq s;
    rg_seq_init(&s);
    rg_seq_res r = {0};
    ins(&s, &small, 0, st, 10, NULL);
    (void)rg_seq_assemble(&s, &small, NULL);
    ins(&s, &small, 20, st + 20, 40, NULL); /* [10,20) lost */
    assert_false(rg_seq_pending(&s));
    ins(&s, &small, 60, st + 60, 70, &r); /* only [60,110) fits the 100-byte span */
    assert_true(r.flags & RG_SEQ_EV_BUFFER_FULL);
    assert_int_equal(r.cap_bytes, 20);
    assert_true(rg_seq_pending(&s));
    memset(&r, 0, sizeof r);
    rg_bytes b = rg_seq_assemble(&s, &small, &r);
    assert_int_equal(r.ngaps, 1);
    assert_int_equal(r.gaps[0].start, 10);
    assert_int_equal(r.gaps[0].end, 20);
    assert_int_equal(b.len, 90);
    assert_memory_equal(b.ptr, st + 20, 90);
    /* block cap: three blocks behind a hole, a fourth is refused */
    ins(&s, &small, 120, st + 120, 5, NULL);
    ins(&s, &small, 130, st + 130, 5, NULL);
    ins(&s, &small, 140, st + 140, 5, NULL);
    memset(&r, 0, sizeof r);
    ins(&s, &small, 150, st + 150, 5, &r);
    assert_true(r.flags & RG_SEQ_EV_BUFFER_FULL);
    memset(&r, 0, sizeof r);
    b = rg_seq_assemble(&s, &small, &r);
    assert_int_equal(r.ngaps, 3);
    assert_int_equal(r.gap_bytes, 20);
    assert_int_equal(b.len, 15);
    assert_memory_equal(b.ptr, st + 120, 5);
    assert_memory_equal(b.ptr + 5, st + 130, 5);
    assert_memory_equal(b.ptr + 10, st + 140, 5);
    assert_int_equal(rg_seq_next(&s), 145);
    rg_seq_free(&s);
    free(st);
}

/* ---- buffer_data = false ---- */
static void test_metadata_only(void **state)
{
    (void)state;
    uint8_t *st = make_stream(100);
    rg_seq s;
    rg_seq_init(&s);
    rg_seq_res r = {0};
    ins(&s, &CFG_META0, 30, st + 30, 30, &r);
    ins(&s, &CFG_META0, 10, st + 10, 10, &r);
    assert_int_equal(rg_seq_blocks(&s), 2);
    assert_int_equal(data_bytes(&s), 0); /* no data buffer */
    assert_null(s.st->blk[0].data);
    ins(&s, &CFG_META0, 0, st, 10, &r);
    rg_bytes b = rg_seq_assemble(&s, &CFG_META0, &r);
    assert_non_null(b.ptr);
    assert_int_equal(b.len, 0);
    assert_int_equal(r.adv_bytes, 20);
    assert_int_equal(rg_seq_next(&s), 20);
    memset(&r, 0, sizeof r);
    ins(&s, &CFG_META0, 25, st + 25, 10, &r);
    assert_true(r.flags & RG_SEQ_EV_OVERLAP);
    assert_int_equal(r.dup_bytes, 5);
    ins(&s, &CFG_META0, 20, st + 20, 5, &r);
    rg_seq_insert(&s, &CFG_META0, 60, NULL, 0, 1, NULL, 0, &r); /* end marker */
    assert_true(rg_seq_complete(&s));
    memset(&r, 0, sizeof r);
    b = rg_seq_assemble(&s, &CFG_META0, &r);
    assert_int_equal(b.len, 0);
    assert_int_equal(r.adv_bytes, 40);
    assert_true(rg_seq_done(&s));
    rg_seq_free(&s);
    free(st);
}

/* ---- differential: fast path vs insert + assemble ---- */
static void test_fast_equals_slow(void **state)
{
    (void)state;
    rg_rng rng = {42};
    const uint32_t N = 20000;
    uint8_t *st = make_stream(N);
    for (int round = 0; round < 50; round++) {
        rg_seq a, b;
        rg_seq_init(&a);
        rg_seq_init(&b);
        sink ka = {0}, kb = {0};
        uint32_t base = (uint32_t)rng_next(&rng);
        int fast_taken = 0;
        uint32_t first_off = 0;
        for (int i = 0; i < 200; i++) {
            uint32_t off = rng_below(&rng, N - 1);
            uint32_t len = 1 + rng_below(&rng, N - off < 800 ? N - off : 800);
            if (rng_below(&rng, 3)) { /* mostly in order */
                off = a.next - base;
                if (!(a.flags & RG_SEQF_INIT)) off = 0;
                if (off >= N) break;
                if (len > N - off) len = N - off;
            }
            if (i == 0) first_off = off;
            rg_seq_res ra = {0}, rb = {0};
            rg_bytes out;
            if (rg_seq_fast(&a, &CFG_LAST, base + off, st + off, len, len, NULL, &out, &ra)) {
                sink_put(&ka, out);
                fast_taken++;
            } else {
                rg_seq_insert(&a, &CFG_LAST, base + off, st + off, len, len, NULL, 0, &ra);
                sink_put(&ka, rg_seq_assemble(&a, &CFG_LAST, &ra));
            }
            rg_seq_insert(&b, &CFG_LAST, base + off, st + off, len, len, NULL, 0, &rb);
            sink_put(&kb, rg_seq_assemble(&b, &CFG_LAST, &rb));
            assert_int_equal(ra.flags, rb.flags);
            assert_int_equal(ra.new_bytes, rb.new_bytes);
            assert_int_equal(ra.adv_bytes, rb.adv_bytes);
            assert_int_equal(a.next, b.next);
        }
        assert_true(fast_taken > 0);
        assert_int_equal(ka.len, kb.len);
        assert_memory_equal(ka.buf, kb.buf, ka.len);
        assert_memory_equal(ka.buf, st + first_off, ka.len);
        free(ka.buf);
        free(kb.buf);
        rg_seq_free(&a);
        rg_seq_free(&b);
    }
    free(st);
}

/* ---- randomized model check ---- */
/* Reference: a byte map.  Segments carry content variants; FIRST keeps the
 * first accepted copy of each byte, LAST the latest; delivered bytes never
 * change. */
static void model_run(uint64_t seed, int policy, int meta)
{
    rg_rng rng = {seed};
    const uint32_t N = 60000;
    uint8_t *ref = calloc(N, 1), *has = calloc(N, 1);
    uint8_t *seg = malloc(N);
    rg_seq_cfg cfg = {.policy = (uint8_t)policy, .buffer_data = (uint8_t)!meta, .max_blocks = 4096};
    uint32_t base = (uint32_t)rng_next(&rng);
    rg_seq s;
    rg_seq_init(&s);
    rg_seq_set_base(&s, base);
    uint32_t rnext = 0; /* reference assembled offset */
    sink k = {0};
    uint64_t delivered = 0;
    uint32_t segs = 0, maxspan = 0, hi_has = 0;
    for (int step = 0; step < 1500 && rnext < N; step++) {
        /* mostly near the assembled offset, like a lossy, reordering stream */
        int32_t rel = (int32_t)rng_below(&rng, 3300) - 300;
        uint32_t a = (int64_t)rnext + rel < 0 ? 0 : rnext + (uint32_t)rel;
        if (rng_below(&rng, 10) == 0) a = rng_below(&rng, N);
        if (a >= N) a = N - 1;
        uint32_t len = 1 + rng_below(&rng, rng_below(&rng, 8) == 0 ? 1500 : 120);
        if (len > N - a) len = N - a;
        segs++;
        uint8_t variant = (uint8_t)rng_below(&rng, 3);
        for (uint32_t i = 0; i < len; i++)
            seg[i] = (uint8_t)(pat(a + i) + variant);
        /* reference */
        uint32_t exp_dup = 0, exp_new = 0;
        for (uint32_t i = a; i < a + len; i++) {
            if (i < rnext) {
                exp_dup++;
                continue;
            }
            if (has[i]) {
                exp_dup++;
                if (policy == RG_SEQ_LAST) ref[i] = seg[i - a];
            } else {
                exp_new++;
                has[i] = 1;
                ref[i] = seg[i - a];
            }
        }
        rg_seq_res r = {0};
        rg_seq_insert(&s, &cfg, base + a, seg, len, len, NULL, 0, &r);
        assert_int_equal(r.dup_bytes, exp_dup);
        assert_int_equal(r.new_bytes, exp_new);
        assert_int_equal(r.cap_bytes, 0);
        if (exp_dup && !exp_new) assert_true(r.flags & RG_SEQ_EV_REXMIT);
        if (exp_dup && exp_new) assert_true(r.flags & RG_SEQ_EV_OVERLAP);
        /* ready(): no hole between next and the last buffered byte */
        if (exp_new && a + len > hi_has) hi_has = a + len;
        uint32_t last = hi_has > rnext ? hi_has : rnext, first_hole = rnext;
        while (first_hole < N && has[first_hole])
            first_hole++;
        assert_int_equal(rg_seq_ready(&s), first_hole >= last);
        if (rng_below(&rng, 3) == 0) {
            rg_seq_res ar = {0};
            rg_bytes b = rg_seq_assemble(&s, &cfg, &ar);
            assert_int_equal(ar.adv_bytes, first_hole - rnext);
            if (!meta) {
                assert_int_equal(b.len, first_hole - rnext);
                if (b.len) assert_memory_equal(b.ptr, ref + rnext, b.len);
            } else {
                assert_int_equal(b.len, 0);
            }
            delivered += first_hole - rnext;
            if (!meta) sink_put(&k, b);
            rnext = first_hole;
            assert_int_equal(rg_seq_next(&s), base + rnext);
        }
        /* the buffer stays bounded by the span from next (compaction) */
        if (last - rnext > maxspan) maxspan = last - rnext;
        /* memory follows the bytes held (each block at most twice its size) */
        if (s.st) {
            assert_true(data_bytes(&s) - s.st->view_cap <=
                        2 * (size_t)rg_seq_buffered(&s) + 256u * s.nblk);
            assert_true(s.st->view_cap <= 2 * (size_t)maxspan + 256u);
        }
    }
    assert_true(segs > 100);
    assert_true(delivered > N / 4);
    if (!meta) {
        assert_int_equal(k.len, delivered);
        assert_memory_equal(k.buf, ref, k.len);
    }
    free(k.buf);
    free(ref);
    free(has);
    free(seg);
    rg_seq_free(&s);
}

static void test_random_model(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        model_run(seed, RG_SEQ_FIRST, 0);
        model_run(seed * 1000 + 7, RG_SEQ_LAST, 0);
        model_run(seed * 77 + 3, RG_SEQ_FIRST, 1);
    }
}

/* ---- randomized stress: every feature at once ---- */
/* Content is a function of the absolute sequence number, so any delivered
 * byte can be checked whatever the policy, window, caps or wraparound. */
static uint8_t abs_pat(uint32_t x)
{
    return (uint8_t)(x * 7u + (x >> 8) + (x >> 16));
}

/* gap recovery: an assembled view is the bytes from n0 on with the holes of
 * r->gaps cut out; the holes add up to r->gap_bytes. */
static void check_gapped(uint64_t seed, rg_bytes b, uint32_t n0, const rg_seq_res *r)
{
    uint32_t x = n0, g = 0, skipped = 0;
    for (uint32_t i = 0; i <= b.len; i++) {
        while (g < r->ngaps && x == r->gaps[g].start) {
            skipped += r->gaps[g].end - r->gaps[g].start;
            x = r->gaps[g++].end;
        }
        if (i == b.len) break;
        if (b.ptr[i] != abs_pat(x))
            fail_msg("seed %llu: byte %u of %zu", (unsigned long long)seed, i, b.len);
        x++;
    }
    assert_int_equal(g, r->ngaps);
    assert_int_equal(skipped, r->gap_bytes);
}

static void stress_run(uint64_t seed)
{
    rg_rng rng = {seed};
    rg_seq_cfg cfg = {.policy = (uint8_t)rng_below(&rng, 2),
                      .buffer_data = (uint8_t)(rng_below(&rng, 4) != 0),
                      .zero_based = 0,
                      .max_bytes = rng_below(&rng, 2) ? 0 : 2000 + rng_below(&rng, 20000),
                      .max_blocks = rng_below(&rng, 2) ? 0 : 1 + rng_below(&rng, 6)};
    uint32_t base =
        rng_below(&rng, 2) ? (uint32_t)rng_next(&rng) : 0xFFFFFFFFu - rng_below(&rng, 5000);
    rg_seq s;
    rg_seq_init(&s);
    uint8_t *buf = malloc(70000);
    uint32_t cursor = base; /* where the sender is */
    uint64_t delivered = 0;
    for (int step = 0; step < 3000; step++) {
        /* segment: mostly at the sender's cursor, sometimes old or far */
        uint32_t seq = cursor;
        int r = step ? (int)rng_below(&rng, 10) : 9; /* the first one sets the base */
        if (r == 0) seq = cursor - rng_below(&rng, 3000);
        if (r == 1) seq = cursor + rng_below(&rng, 6000);
        if (r == 2) seq = (uint32_t)rng_next(&rng);
        uint32_t len = rng_below(&rng, 8) == 0 ? rng_below(&rng, 66000) : rng_below(&rng, 1500);
        /* phantom bytes (a FIN) end the stream: only near the end of the run */
        uint32_t takeup =
            len + (step > 2700 && rng_below(&rng, 40) == 0 ? 1 + rng_below(&rng, 2) : 0);
        if (rng_below(&rng, 50) == 0) takeup = rng_below(&rng, len + 1); /* truncating */
        for (uint32_t i = 0; i < len; i++)
            buf[i] = abs_pat(seq + i);
        rg_seq_win w = {0, 0, 0, 0};
        int use_win = rng_below(&rng, 3) == 0;
        if (use_win) {
            w.left = ((s.flags & RG_SEQF_INIT) ? s.next : cursor) + rng_below(&rng, 3000) - 1000;
            w.right = w.left + rng_below(&rng, 70000);
        }
        unsigned fl = rng_below(&rng, 2) ? RG_SEQ_BORROW : 0;
        rg_seq_res res = {0};
        uint32_t before = s.next;
        int was_init = (s.flags & RG_SEQF_INIT) != 0;
        rg_bytes out;
        out.len = 0;
        int fast = rng_below(&rng, 2) &&
                   rg_seq_fast(&s, &cfg, seq, buf, len, takeup, use_win ? &w : NULL, &out, &res);
        if (fast) {
            if (cfg.buffer_data) {
                assert_ptr_equal(out.ptr, buf);
                assert_int_equal(out.len, len);
            }
            assert_int_equal(s.next, (was_init ? before : seq) + len);
            delivered += len;
        } else {
            rg_seq_insert(&s, &cfg, seq, buf, len, takeup, use_win ? &w : NULL, fl, &res);
        }
        if (r != 2 && rng_below(&rng, 2) == 0) cursor = seq + len;
        /* caps hold */
        assert_true(rg_seq_blocks(&s) <= (cfg.max_blocks ? cfg.max_blocks : 256u));
        if (cfg.buffer_data) assert_true(rg_seq_buffered(&s) <= rg_seq_cfg_max_bytes(&cfg));
        /* assemble (or settle) before the packet buffer is reused */
        int guard = 0;
        while (rng_below(&rng, 3) != 0 && rg_seq_pending(&s) && guard++ < 8) {
            rg_seq_res ar = {0};
            uint32_t n0 = s.next;
            int was_done = rg_seq_done(&s);
            rg_bytes b = rg_seq_assemble(&s, &cfg, &ar);
            assert_non_null(b.ptr);
            uint32_t start = n0 + ar.gap_bytes;
            if (cfg.buffer_data) {
                assert_int_equal(b.len, ar.adv_bytes);
                check_gapped(seed, b, n0, &ar);
            } else {
                assert_int_equal(b.len, 0);
            }
            delivered += ar.adv_bytes;
            uint32_t expect = start + ar.adv_bytes;
            if (!was_done && (ar.flags & RG_SEQ_EV_DONE)) expect = s.lend;
            assert_int_equal(s.next, expect);
        }
        rg_seq_settle(&s, &cfg);
        /* nothing points into the packet (without buffering a pending
         * region at next references no bytes) */
        if (cfg.buffer_data || !s.borrow_len)
            assert_null(s.borrow);
        else
            assert_ptr_equal(s.borrow, rg_empty_byte);
        memset(buf, 0xA5, len); /* the packet buffer is gone */
    }
    /* drain: what is left is consistent */
    while (rg_seq_pending(&s)) {
        rg_seq_res ar = {0};
        uint32_t n0 = s.next;
        rg_bytes b = rg_seq_assemble(&s, &cfg, &ar);
        check_gapped(seed, b, n0, &ar);
        delivered += ar.adv_bytes;
    }
    assert_true(delivered > 0);
    free(buf);
    rg_seq_free(&s);
}

static void test_random_stress(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 60; seed++)
        stress_run(seed * 7919);
}

/* ---- memory ---- */
/* A long stream with a persistent hole window: the buffer does not grow
 * with the stream, and a large burst is released once empty. */
static void test_memory_compaction(void **state)
{
    (void)state;
    const uint32_t N = 2000000, SEG = 1000;
    uint8_t *st = make_stream(N);
    rg_seq s;
    rg_seq_init(&s);
    rg_seq_set_base(&s, 0);
    uint64_t got = 0;
    uint32_t maxcap = 0;
    /* deliver pairs swapped: segment i+1 before segment i */
    for (uint32_t off = 0; off + 2 * SEG <= N; off += 2 * SEG) {
        ins(&s, &CFG_FIRST, off + SEG, st + off + SEG, SEG, NULL);
        ins(&s, &CFG_FIRST, off, st + off, SEG, NULL);
        rg_bytes b = rg_seq_assemble(&s, &CFG_FIRST, NULL);
        assert_int_equal(b.len, 2 * SEG);
        assert_memory_equal(b.ptr, st + off, 2 * SEG);
        got += b.len;
        if (data_bytes(&s) > maxcap) maxcap = (uint32_t)data_bytes(&s);
    }
    assert_int_equal(got, N);
    assert_true(maxcap <= 8192);
    /* a 500 KB out-of-order burst, then drained: buffer released on the next insert */
    ins(&s, &CFG_FIRST, N + 1000, st, 500000, NULL);
    assert_true(data_bytes(&s) >= 500000);
    ins(&s, &CFG_FIRST, N, st, 1000, NULL);
    (void)rg_seq_assemble(&s, &CFG_FIRST, NULL);
    ins(&s, &CFG_FIRST, N + 501000, st, 10, NULL);
    (void)rg_seq_assemble(&s, &CFG_FIRST, NULL);
    ins(&s, &CFG_FIRST, N + 501010, st, 10, NULL);
    assert_true(data_bytes(&s) <= 65536);
    rg_seq_free(&s);
    free(st);
}

/* Hostile traffic: one-byte segments far ahead of next cost their own bytes
 * plus a bounded overhead, not the span up to their offset (the old linear
 * buffer reserved up to the furthest offset: about 1 MiB here). */
static void test_far_ahead_costs_bytes(void **state)
{
    (void)state;
    const size_t heap0 = rg_seq_heap_stats().cur;
    uint8_t *d = make_stream(1u << 20);
    rg_seq s;
    rg_seq_init(&s);
    rg_seq_set_base(&s, 0);
    for (uint32_t k = 0; k < 8; k++) /* 8 one-byte segments near the end of the window */
        ins(&s, &CFG_FIRST, (1u << 20) - 1 - k * 4096, d + (1u << 20) - 1 - k * 4096, 1, NULL);
    assert_int_equal(rg_seq_blocks(&s), 8);
    assert_int_equal(rg_seq_buffered(&s), 8);
    const size_t held = rg_seq_heap_stats().cur - heap0;
    assert_int_equal(held, rg_seq_heap_bytes(&s));
    /* store + a block array of 8 + 8 bytes */
    assert_int_equal(held, sizeof(rg_seq_store) + 8 * sizeof(rg_seq_run) + 8);
    assert_true(held < 512);
    /* the data is all there: fill the stream and read it back */
    for (uint32_t a = 0; a < (1u << 20); a += 1000) {
        uint32_t n = (1u << 20) - a < 1000 ? (1u << 20) - a : 1000;
        ins(&s, &CFG_FIRST, a, d + a, n, NULL);
    }
    rg_bytes b = rg_seq_assemble(&s, &CFG_FIRST, NULL);
    assert_int_equal(b.len, 1u << 20);
    assert_memory_equal(b.ptr, d, 1u << 20);
    rg_seq_free(&s);
    assert_int_equal(rg_seq_heap_stats().cur, heap0);
    free(d);
}

/* Per-context accounting: a store is charged to the accountant bound when it
 * was created and credits it back when freed, whatever is bound then; the
 * default (unbound) accountant does not move. */
static void test_heap_contexts(void **state)
{
    (void)state;
    rg_seq_heap a = {0}, b = {0};
    const size_t dflt = rg_seq_heap_stats().cur;
    uint8_t d[100];
    memset(d, 7, sizeof d);
    rg_seq sa, sb;
    rg_seq_init(&sa);
    rg_seq_init(&sb);
    assert_null(rg_seq_heap_bind(&a));
    ins(&sa, &CFG_FIRST0, 50, d, 10, NULL); /* out of order: a store under a */
    assert_int_equal(a.cur, rg_seq_heap_bytes(&sa));
    assert_int_equal(rg_seq_heap_stats().cur, a.cur);
    assert_ptr_equal(rg_seq_heap_bind(&b), &a);
    ins(&sb, &CFG_FIRST0, 50, d, 20, NULL);
    ins(&sa, &CFG_FIRST0, 70, d, 10, NULL); /* sa's store grows: still charged to a */
    assert_int_equal(a.cur, rg_seq_heap_bytes(&sa));
    assert_int_equal(b.cur, rg_seq_heap_bytes(&sb));
    assert_true(b.peak >= b.cur && b.cur > 0);
    rg_seq_free(&sa); /* freed while b is bound: credited to a */
    assert_int_equal(a.cur, 0);
    assert_true(a.peak > 0);
    rg_seq_heap_unbind(&a); /* not bound: no change */
    assert_int_equal(rg_seq_heap_stats().cur, b.cur);
    rg_seq_heap_unbind(&b);
    assert_int_equal(rg_seq_heap_stats().cur, dflt);
    rg_seq_free(&sb);
    assert_int_equal(b.cur, 0);
    assert_int_equal(a.fails + b.fails, 0);
    assert_int_equal(rg_seq_heap_stats().cur, dflt);
}

/* ---- target-based overlap policies ----
 * Every relative position of a new segment to a buffered one (old = [10,
 * 20); new starts before / at / inside / at the end of / after it and ends
 * before / at / inside / at the end of / after it), with the same and with
 * different bytes, for every policy, against the table of rg_seq.h and
 * docs/spec-language.md written out here as data: per (start, end) class a
 * string over the policies first, last, linux, bsd, windows, solaris ('n':
 * the new copy wins the overlapped bytes, 'o': the old one stays). */
static const char *const OVERLAP_TABLE[3][3] = {
    /* new starts before old: ends before, at, after old's end */
    {"onnnno", "onnnnn", "onnnnn"},
    /* starts at old's start */
    {"onoooo", "onooon", "onnoon"},
    /* starts inside old */
    {"onoooo", "onoooo", "onooon"},
};

static uint8_t old_byte(uint32_t x)
{
    return (uint8_t)(0x10 + x);
}

static void test_overlap_policies(void **state)
{
    (void)state;
    static const uint8_t policies[6] = {RG_SEQ_FIRST, RG_SEQ_LAST,    RG_SEQ_LINUX,
                                        RG_SEQ_BSD,   RG_SEQ_WINDOWS, RG_SEQ_SOLARIS};
    static const uint32_t starts[] = {5, 10, 15, 20, 25};
    static const uint32_t ends[] = {8, 10, 15, 18, 20, 25, 30};
    unsigned checked = 0, conflicts = 0;
    for (unsigned pi = 0; pi < 6; pi++) {
        const rg_seq_cfg cfg = {.policy = policies[pi], .buffer_data = 1, .zero_based = 1};
        for (unsigned si = 0; si < 5; si++) {
            for (unsigned ei = 0; ei < 7; ei++) {
                const uint32_t ns = starts[si], ne = ends[ei];
                if (ne <= ns) continue;
                for (int same = 0; same < 2; same++) {
                    uint8_t od[10], nd[32];
                    for (uint32_t x = 10; x < 20; x++)
                        od[x - 10] = old_byte(x);
                    for (uint32_t x = ns; x < ne; x++)
                        nd[x - ns] = same ? old_byte(x) : (uint8_t)(0x80 + x);
                    rg_seq sq;
                    rg_seq_init(&sq);
                    rg_seq_res r = {0};
                    ins(&sq, &cfg, 10, od, 10, &r); /* buffered: next is 0 */
                    memset(&r, 0, sizeof r);
                    ins(&sq, &cfg, ns, nd, ne - ns, &r);
                    const int overlap = ns < 20 && ne > 10;
                    const uint32_t os = ns > 10 ? ns : 10, oe = ne < 20 ? ne : 20;
                    int win = 0;
                    if (overlap) {
                        const int sc = ns < 10 ? 0 : ns == 10 ? 1 : 2;
                        const int ec = ne < 20 ? 0 : ne == 20 ? 1 : 2;
                        win = OVERLAP_TABLE[sc][ec][pi] == 'n';
                        assert_int_equal(r.dup_bytes, oe - os);
                    } else {
                        assert_int_equal(r.dup_bytes, 0);
                    }
                    if (overlap && !same) {
                        conflicts++;
                        assert_true(r.flags & RG_SEQ_EV_CONFLICT);
                        assert_int_equal(r.ovl_seq, os);
                        assert_int_equal(r.ovl_bytes, oe - os);
                        assert_int_equal(r.ovl_new, win ? oe - os : 0);
                    } else {
                        assert_false(r.flags & RG_SEQ_EV_CONFLICT);
                        assert_int_equal(r.ovl_bytes, 0);
                    }
                    /* what the stream holds: the union, holes cut out */
                    uint8_t want[32];
                    uint32_t nw = 0;
                    for (uint32_t x = 0; x < 32; x++) {
                        const int in_old = x >= 10 && x < 20, in_new = x >= ns && x < ne;
                        if (in_old && in_new)
                            want[nw++] = win ? nd[x - ns] : od[x - 10];
                        else if (in_old)
                            want[nw++] = od[x - 10];
                        else if (in_new)
                            want[nw++] = nd[x - ns];
                    }
                    sink k = {0};
                    (void)rg_seq_flush(&sq);
                    drain(&sq, &cfg, &k, NULL);
                    assert_int_equal(k.len, nw);
                    assert_memory_equal(k.buf, want, nw);
                    free(k.buf);
                    rg_seq_free(&sq);
                    checked++;
                }
            }
        }
    }
    assert_int_equal(checked, 6 * 2 * 19); /* (start, end) pairs */
    assert_int_equal(conflicts, 6 * 14);   /* ... of them overlapping */
}

static void test_bad_inputs(void **state)
{
    (void)state;
    uint8_t d[16] = {0};
    rg_seq s;
    rg_seq_init(&s);
    rg_seq_res r = {0};
    /* NULL data with a length: treated as no data */
    rg_seq_insert(&s, &CFG_FIRST0, 0, NULL, 100, 0, NULL, 0, &r);
    assert_true(rg_seq_empty(&s));
    /* takeup below len truncates the data */
    rg_seq_insert(&s, &CFG_FIRST0, 0, d, 16, 4, NULL, 0, &r);
    assert_int_equal(rg_seq_buffered(&s), 4);
    /* absurd phantom length: ignored */
    rg_seq_insert(&s, &CFG_FIRST0, 4, d, 4, 0xFFFFFFF0u, NULL, 0, &r);
    assert_false(rg_seq_has_end(&s));
    /* zero-length segments anywhere */
    rg_seq_insert(&s, &CFG_FIRST0, 0x7FFFFFFFu, d, 0, 0, NULL, 0, &r);
    rg_seq_insert(&s, &CFG_FIRST0, 0x80000000u, d, 0, 0, NULL, 0, &r);
    /* a segment near the top of the half space is capped, not accepted */
    memset(&r, 0, sizeof r);
    rg_seq_insert(&s, &CFG_FIRST0, 0x7FFFFFF0u, d, 16, 16, NULL, 0, &r);
    assert_true(r.flags & RG_SEQ_EV_BUFFER_FULL);
    rg_seq_free(&s);
}

/* ---- inline fast paths vs the reference ---- */
/* The implementation before the inline fast paths (ref_seq.h) and the
 * current one, fed the same calls: every result a caller can see must be
 * identical (flags, every rg_seq_res field, the returned bytes, the
 * queries).  Calls go through the inline API or straight to the
 * out-of-line paths at random, so both are checked. */
static void same_queries(const rg_seq *s, ref_seq *r, uint32_t probe)
{
    assert_int_equal(s->next, r->next);
    assert_int_equal(rg_seq_empty(s), r->nblk == 0 && r->borrow_len == 0);
    assert_int_equal(rg_seq_blocks(s), r->nblk + (r->borrow_len ? 1u : 0u));
    assert_int_equal(rg_seq_buffered(s), ref_buffered(r));
    assert_int_equal(rg_seq_ready(s), ref_ready(r));
    assert_int_equal(rg_seq_pending(s), ref_pending(r));
    assert_int_equal(rg_seq_has_end(s), (r->flags & RG_SEQF_END) != 0);
    if (rg_seq_has_end(s)) assert_int_equal(rg_seq_end(s), r->end);
    assert_int_equal(rg_seq_done(s), (r->flags & RG_SEQF_DONE) != 0);
    assert_int_equal(rg_seq_ready_upto(s, probe), ref_ready_upto(r, probe));
    assert_int_equal(rg_seq__ready_upto(s, probe), ref_ready_upto(r, probe));
    assert_int_equal(rg_seq_ready_upto(s, s->next), ref_ready_upto(r, r->next));
}

static void same_res(const rg_seq_res *a, const rg_seq_res *b)
{
    assert_int_equal(a->flags, b->flags);
    assert_int_equal(a->new_bytes, b->new_bytes);
    assert_int_equal(a->dup_bytes, b->dup_bytes);
    if (a->dup_bytes) assert_int_equal(a->dup_seq, b->dup_seq);
    assert_int_equal(a->oow_bytes, b->oow_bytes);
    assert_int_equal(a->cap_bytes, b->cap_bytes);
    assert_int_equal(a->gap_bytes, b->gap_bytes);
    assert_int_equal(a->adv_bytes, b->adv_bytes);
}

static void same_stats(const rg_seq_stats *a, const rg_seq_stats *b)
{
    assert_memory_equal(a, b, sizeof *a);
}

/* One TCP-like direction: mostly in-order data (BORROW, as generated code
 * passes it), pure ACKs with a window at or behind next, a SYN first and a
 * FIN late; sometimes reordering, retransmissions, overlaps, gaps, windows
 * that trim or arm gap skipping, no result struct, settle without
 * assemble. */
static void ref_run(uint64_t seed, const rg_seq_cfg *cfg)
{
    rg_rng rng = {seed};
    rg_seq s;
    ref_seq r;
    rg_seq_init(&s);
    ref_seq_init(&r);
    rg_seq_stats st_s, st_r;
    memset(&st_s, 0, sizeof st_s);
    memset(&st_r, 0, sizeof st_r);
    uint8_t *pkt = malloc(4096);
    uint32_t isn =
        rng_below(&rng, 2) ? (uint32_t)rng_next(&rng) : 0xFFFFFFFFu - rng_below(&rng, 3000);
    if (cfg->zero_based) isn = 0;
    uint32_t cursor = isn;
    int syn = !cfg->zero_based && rng_below(&rng, 4) != 0;
    for (int step = 0; step < 1500; step++) {
        uint32_t seq = cursor, len = 0, takeup;
        unsigned kind = rng_below(&rng, 20);
        if (step == 0 && syn) {
            takeup = 1; /* SYN */
        } else if (kind < 9) {
            len = 1 + rng_below(&rng, 1460); /* in order */
            takeup = len;
        } else if (kind < 13) {
            takeup = 0; /* pure ACK */
        } else if (kind < 15) {
            seq = cursor + rng_below(&rng, 4000); /* ahead: a hole */
            len = 1 + rng_below(&rng, 1460);
            takeup = len;
        } else if (kind < 17) {
            seq = cursor - rng_below(&rng, 3000); /* retransmission / overlap */
            len = 1 + rng_below(&rng, 2000);
            takeup = len;
        } else if (kind < 18) {
            len = rng_below(&rng, 3) ? 0 : rng_below(&rng, 100); /* FIN (late: the stream ends) */
            takeup = step > 1300 ? len + 1 : len;
        } else if (kind < 19) {
            len = rng_below(&rng, 600); /* truncating takeup */
            takeup = rng_below(&rng, len + 1);
        } else {
            seq = (uint32_t)rng_next(&rng); /* garbage */
            len = rng_below(&rng, 300);
            takeup = len;
        }
        for (uint32_t i = 0; i < len; i++)
            pkt[i] = (uint8_t)((seq + i) * 7u + (rng_below(&rng, 50) == 0)); /* rare conflicts */
        rg_seq_win w = {0, 0, 0, 0};
        unsigned wk = rng_below(&rng, 4);
        uint32_t base = (s.flags & RG_SEQF_INIT) ? s.next : seq;
        if (wk == 1) { /* the usual TCP window: left at or behind next, a large right edge */
            w.left = base - rng_below(&rng, 2000);
            w.right = w.left + (1u << 30);
        } else if (wk == 2) { /* left ahead (gap skipping) or a tight right edge */
            w.left = base + rng_below(&rng, 3000) - 500;
            w.right = w.left + rng_below(&rng, 6000);
        } else if (wk == 3 && rng_below(&rng, 8) == 0) {
            w.left = w.right = 0; /* (0, 0): no window */
        }
        const rg_seq_win *wp = wk ? &w : NULL;
        unsigned fl = rng_below(&rng, 8) ? RG_SEQ_BORROW : 0;
        const uint8_t *data = len ? pkt : (rng_below(&rng, 2) ? pkt : NULL);
        int use_res = rng_below(&rng, 16) != 0;
        rg_seq_res a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        uint32_t fa =
            rng_below(&rng, 4)
                ? rg_seq_insert(&s, cfg, seq, data, len, takeup, wp, fl, use_res ? &a : NULL)
                : rg_seq__insert(&s, cfg, seq, data, len, takeup, wp, fl, use_res ? &a : NULL);
        uint32_t fb = ref_insert(&r, cfg, seq, data, len, takeup, wp, fl, use_res ? &b : NULL);
        assert_int_equal(fa, fb);
        if (seq == cursor || rng_below(&rng, 2)) cursor = seq + len;
        same_queries(&s, &r, cursor + rng_below(&rng, 3000) - 1500);
        /* assemble (mostly), or settle and assemble on a later packet */
        int nasm = rng_below(&rng, 6) ? 1 + (int)rng_below(&rng, 2) : 0;
        for (int k = 0; k < nasm; k++) {
            rg_bytes x = rng_below(&rng, 4) ? rg_seq_assemble(&s, cfg, use_res ? &a : NULL)
                                            : rg_seq__assemble(&s, cfg, use_res ? &a : NULL);
            rg_bytes y = ref_assemble(&r, cfg, use_res ? &b : NULL);
            assert_non_null(x.ptr);
            assert_int_equal(x.len, y.len);
            if (x.len) assert_memory_equal(x.ptr, y.ptr, x.len);
            same_queries(&s, &r, cursor);
        }
        same_res(&a, &b);
        rg_seq_stats_add(&st_s, &a);
        rg_seq_stats_add(&st_r, &b);
        same_stats(&st_s, &st_r);
        rg_seq_settle(&s, cfg);
        if (r.borrow) ref_unborrow(&r, cfg, NULL);
        memset(pkt, 0xEE, 4096); /* the packet is gone */
        same_queries(&s, &r, cursor);
        if (rng_below(&rng, 400) == 0) { /* an explicit base */
            uint32_t nb = cursor + rng_below(&rng, 100);
            rg_seq_set_base(&s, nb);
            ref_set_base(&r, nb);
            same_queries(&s, &r, nb);
        }
    }
    rg_seq_free(&s);
    ref_free(&r);
    free(pkt);
}

static void test_fast_vs_reference(void **state)
{
    (void)state;
    static const rg_seq_cfg cfgs[] = {
        {.policy = RG_SEQ_FIRST, .buffer_data = 1},
        {.policy = RG_SEQ_LAST, .buffer_data = 1},
        {.policy = RG_SEQ_FIRST, .buffer_data = 0},
        {.policy = RG_SEQ_LAST, .buffer_data = 1, .zero_based = 1},
        {.policy = RG_SEQ_FIRST, .buffer_data = 0, .zero_based = 1},
        {.policy = RG_SEQ_FIRST, .buffer_data = 1, .max_bytes = 3000, .max_blocks = 3},
        {.policy = RG_SEQ_LAST, .buffer_data = 0, .max_bytes = 3000, .max_blocks = 2},
    };
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++)
        for (uint64_t seed = 1; seed <= 12; seed++)
            ref_run(seed * 104729 + c, &cfgs[c]);
}

static int cfg_is_ft(const rg_seq_cfg *cfg)
{
    return !cfg->buffer_data;
}

/* The per-packet common cases, case by case: inline path, out-of-line path
 * and reference agree (flags, results, stats, bytes), and the in-order
 * ones neither copy nor allocate. */
typedef struct {
    uint32_t seq, len, takeup;
    int win; /* 0: none, 1: left = seq, right far */
} seg;

static void case_run(const rg_seq_cfg *cfg, const seg *segs, size_t n, unsigned fl,
                     int expect_no_store)
{
    rg_seq a, b;
    ref_seq r;
    rg_seq_init(&a);
    rg_seq_init(&b);
    ref_seq_init(&r);
    uint8_t *buf = malloc(70000);
    for (size_t i = 0; i < 70000; i++)
        buf[i] = pat((uint32_t)i);
    rg_seq_stats sa = {0}, sb = {0}, sr = {0};
    for (size_t i = 0; i < n; i++) {
        const uint8_t *d = buf + (segs[i].seq % 1000);
        rg_seq_win w = {segs[i].seq, segs[i].seq + (1u << 30), 0, 0};
        const rg_seq_win *wp = segs[i].win ? &w : NULL;
        rg_seq_res ra = {0}, rb = {0}, rr = {0};
        uint32_t fa =
            rg_seq_insert(&a, cfg, segs[i].seq, d, segs[i].len, segs[i].takeup, wp, fl, &ra);
        uint32_t fb =
            rg_seq__insert(&b, cfg, segs[i].seq, d, segs[i].len, segs[i].takeup, wp, fl, &rb);
        uint32_t fr = ref_insert(&r, cfg, segs[i].seq, d, segs[i].len, segs[i].takeup, wp, fl, &rr);
        assert_int_equal(fa, fr);
        assert_int_equal(fb, fr);
        if ((fl & RG_SEQ_BORROW) && cfg->buffer_data && a.borrow) /* zero-copy */
            assert_true(a.borrow >= d && a.borrow + a.borrow_len <= d + segs[i].len);
        rg_bytes xa = rg_seq_assemble(&a, cfg, &ra);
        rg_bytes xb = rg_seq__assemble(&b, cfg, &rb);
        rg_bytes xr = ref_assemble(&r, cfg, &rr);
        assert_int_equal(xa.len, xr.len);
        assert_int_equal(xb.len, xr.len);
        if (xr.len) {
            assert_memory_equal(xa.ptr, xr.ptr, xr.len);
            assert_memory_equal(xb.ptr, xr.ptr, xr.len);
        }
        same_res(&ra, &rr);
        same_res(&rb, &rr);
        rg_seq_stats_add(&sa, &ra);
        rg_seq_stats_add(&sb, &rb);
        rg_seq_stats_add(&sr, &rr);
        rg_seq_settle(&a, cfg);
        rg_seq_settle(&b, cfg);
        if (r.borrow) ref_unborrow(&r, cfg, NULL);
        same_queries(&a, &r, segs[i].seq + segs[i].takeup);
        same_queries(&b, &r, segs[i].seq + segs[i].takeup);
        if (expect_no_store) {
            assert_null(a.st);
            assert_null(b.st);
        }
    }
    same_stats(&sa, &sr);
    same_stats(&sb, &sr);
    rg_seq_free(&a);
    rg_seq_free(&b);
    ref_free(&r);
    free(buf);
}

static void test_fast_vs_slow_cases(void **state)
{
    (void)state;
    const uint32_t I = 0xFFFFF000u; /* wraps during the stream */
    /* SYN, in-order data, pure ACKs, FIN: the common connection */
    const seg conn[] = {{I, 0, 1, 1},
                        {I + 1, 0, 0, 1},
                        {I + 1, 100, 100, 1},
                        {I + 101, 0, 0, 1},
                        {I + 101, 1448, 1448, 1},
                        {I + 1549, 1448, 1448, 1},
                        {I + 2997, 1024, 1024, 0},
                        {I + 4021, 0, 1, 1},
                        {I + 4022, 0, 0, 1}};
    /* tcp.yaml's numbering: the SYN takes no number (takeup 0, first insert), FINs with and
     * without data (phantom byte) at next */
    const seg conn0[] = {
        {I, 0, 0, 1}, {I, 0, 0, 1}, {I, 100, 100, 1}, {I + 100, 50, 51, 1}, {I + 151, 0, 0, 1}};
    const seg conn1[] = {{I, 0, 0, 0}, {I, 200, 200, 1}, {I + 200, 0, 1, 1}, {I + 201, 0, 0, 0}};
    /* out of order, then the hole filled */
    const seg ooo[] = {{100, 10, 10, 0}, {120, 10, 10, 0}, {110, 10, 10, 0}, {130, 5, 5, 1}};
    /* retransmission and partial overlap of delivered data */
    const seg dup[] = {{100, 10, 10, 0}, {100, 10, 10, 0}, {105, 10, 10, 0}, {115, 5, 5, 1}};
    /* overlap with buffered data */
    const seg ovl[] = {
        {100, 10, 10, 0}, {120, 10, 10, 0}, {125, 10, 10, 0}, {118, 4, 4, 0}, {110, 30, 30, 0}};
    /* first insert sets next (zero-based: at 0) */
    const seg first0[] = {{0, 576, 576, 0}, {576, 100, 100, 0}};
    static const rg_seq_cfg C1 = {.policy = RG_SEQ_FIRST, .buffer_data = 1};
    static const rg_seq_cfg C2 = {.policy = RG_SEQ_LAST, .buffer_data = 1};
    static const rg_seq_cfg FT = {.policy = RG_SEQ_FIRST, .buffer_data = 0};
    static const rg_seq_cfg Z1 = {.policy = RG_SEQ_LAST, .buffer_data = 1, .zero_based = 1};
    static const rg_seq_cfg Z0 = {.buffer_data = 0, .zero_based = 1};
#define N(x) (sizeof(x) / sizeof((x)[0]))
    case_run(&C1, conn, N(conn), RG_SEQ_BORROW, 1);
    case_run(&C2, conn, N(conn), RG_SEQ_BORROW, 1);
    case_run(&C1, conn, N(conn), 0, 0); /* copying */
    case_run(&FT, conn, N(conn), RG_SEQ_BORROW, 1);
    case_run(&FT, conn, N(conn), 0, 1); /* offsets only: no store without the flag either */
    case_run(&C1, conn0, N(conn0), RG_SEQ_BORROW, 1);
    case_run(&FT, conn0, N(conn0), 0, 1);
    case_run(&C2, conn1, N(conn1), RG_SEQ_BORROW, 1);
    case_run(&FT, conn1, N(conn1), RG_SEQ_BORROW, 1);
    case_run(&Z1, first0, N(first0), RG_SEQ_BORROW, 1);
    case_run(&Z0, first0, N(first0), 0, 1);
    const rg_seq_cfg *all[] = {&C1, &C2, &FT};
    for (size_t c = 0; c < 3; c++)
        for (unsigned fl = 0; fl <= RG_SEQ_BORROW; fl++) {
            case_run(all[c], ooo, N(ooo), fl, 0);
            case_run(all[c], dup, N(dup), fl, cfg_is_ft(all[c]));
            case_run(all[c], ovl, N(ovl), fl, 0);
        }
#undef N
}

/* Without buffering, in-order traffic allocates nothing, whatever the insert
 * flags and even when a packet's region is settled instead of assembled;
 * out-of-order data keeps offsets only (no data buffer). */
static void test_ft_no_allocation(void **state)
{
    (void)state;
    static const rg_seq_cfg FT = {.policy = RG_SEQ_FIRST, .buffer_data = 0};
    size_t heap0 = rg_seq_heap_stats().cur;
    uint8_t pkt[1500];
    memset(pkt, 1, sizeof pkt);
    rg_seq s;
    rg_seq_init(&s);
    rg_seq_res r = {0};
    rg_seq_win w = {1000, 1000 + (1u << 30), 0, 0};
    rg_seq_insert(&s, &FT, 999, NULL, 0, 1, &w, RG_SEQ_BORROW, &r); /* SYN */
    (void)rg_seq_assemble(&s, &FT, &r);
    uint32_t seq = 1000;
    for (int i = 0; i < 1000; i++) {
        uint32_t len = 1 + (uint32_t)(i * 37) % 1400;
        w.left = seq - (uint32_t)(i % 3) * 10;
        rg_seq_insert(&s, &FT, seq, pkt, len, len, &w, i % 2 ? RG_SEQ_BORROW : 0, &r);
        rg_seq_insert(&s, &FT, seq + len, pkt, 0, 0, &w, RG_SEQ_BORROW, &r); /* ACK-like */
        if (i % 5 == 0) {
            rg_seq_settle(&s, &FT); /* no assemble on this packet */
        } else {
            rg_bytes b = rg_seq_assemble(&s, &FT, &r);
            assert_int_equal(b.len, 0);
            assert_non_null(b.ptr);
        }
        seq += len;
        assert_null(s.st);
    }
    (void)rg_seq_assemble(&s, &FT, &r);
    assert_int_equal(s.next, seq);
    rg_seq_insert(&s, &FT, seq, NULL, 0, 1, &w, 0, &r); /* FIN */
    (void)rg_seq_assemble(&s, &FT, &r);
    assert_true(rg_seq_done(&s));
    assert_null(s.st);
    assert_int_equal(rg_seq_heap_stats().cur, heap0);
    rg_seq_free(&s);

    /* out of order: offsets only */
    rg_seq_init(&s);
    rg_seq_insert(&s, &FT, 100, pkt, 10, 10, NULL, RG_SEQ_BORROW, &r);
    rg_seq_insert(&s, &FT, 120, pkt, 10, 10, NULL, RG_SEQ_BORROW, &r);
    assert_non_null(s.st);
    assert_int_equal(data_bytes(&s), 0);
    assert_true(rg_seq_heap_stats().cur > heap0);
    rg_seq_free(&s);
    assert_int_equal(rg_seq_heap_stats().cur, heap0);
}

/* Heap accounting of the reassembly buffers: grows with out-of-order data,
 * back to the start when freed; the peak stays until reset. */
static void test_heap_accounting(void **state)
{
    (void)state;
    size_t heap0 = rg_seq_heap_stats().cur;
    rg_seq_heap_reset_peak();
    assert_int_equal(rg_seq_heap_stats().peak, heap0);
    uint8_t *d = make_stream(100000);
    rg_seq s;
    rg_seq_init(&s);
    rg_seq_res r = {0};
    rg_seq_insert(&s, &CFG_FIRST, 0, d, 10, 10, NULL, RG_SEQ_BORROW, &r);
    (void)rg_seq_assemble(&s, &CFG_FIRST, &r);
    assert_int_equal(rg_seq_heap_stats().cur, heap0); /* borrowed: nothing held */
    ins(&s, &CFG_FIRST, 20000, d + 20000, 70000, &r); /* a hole at 10 */
    size_t held = rg_seq_heap_stats().cur - heap0;
    assert_true(held >= sizeof(rg_seq_store) + 70000);
    assert_int_equal(held, rg_seq_heap_bytes(&s));
    assert_int_equal(held,
                     sizeof(rg_seq_store) + data_bytes(&s) + s.st->blk_cap * sizeof(rg_seq_run));
    ins(&s, &CFG_FIRST, 10, d + 10, 19990, &r);
    rg_bytes b = rg_seq_assemble(&s, &CFG_FIRST, &r);
    assert_int_equal(b.len, 89990);
    assert_memory_equal(b.ptr, d + 10, 89990);
    /* the view's buffer: released by the next insert (even an in-order one,
     * which takes the out-of-line path for it) */
    rg_seq_insert(&s, &CFG_FIRST, 90000, d + 90000, 10, 10, NULL, RG_SEQ_BORROW, &r);
    assert_int_equal(data_bytes(&s), 0);
    assert_int_equal(rg_seq_heap_stats().cur - heap0,
                     sizeof(rg_seq_store) + s.st->blk_cap * sizeof(rg_seq_run));
    b = rg_seq_assemble(&s, &CFG_FIRST, &r);
    assert_ptr_equal(b.ptr, d + 90000);
    assert_true(rg_seq_heap_stats().peak >= heap0 + held);
    rg_seq_free(&s);
    assert_int_equal(rg_seq_heap_stats().cur, heap0);
    rg_seq_heap_reset_peak();
    assert_int_equal(rg_seq_heap_stats().peak, heap0);
    free(d);
}

/* ---- message units ---- */
static const rg_seq_cfg CFG_MSG0 = {.buffer_data = 1, .zero_based = 1, .unit = RG_SEQ_UNIT_MSG};
static const rg_seq_cfg CFG_MSG0_LAST = {
    .buffer_data = 1, .zero_based = 1, .policy = RG_SEQ_LAST, .unit = RG_SEQ_UNIT_MSG};

/* Message i: length (i * 37) % 300 (so some are empty), bytes pat(i * 1000 + j). */
static uint32_t mlen(uint32_t i)
{
    return (i * 37u) % 300u;
}

static void mfill(uint8_t *b, uint32_t i)
{
    for (uint32_t j = 0; j < mlen(i); j++)
        b[j] = pat(i * 1000u + j);
}

static uint32_t mins(rg_seq *s, const rg_seq_cfg *cfg, uint32_t unit, uint32_t variant,
                     rg_seq_res *res)
{
    uint8_t b[300];
    mfill(b, unit);
    if (variant && mlen(unit)) b[0] ^= 0xff;
    return rg_seq_minsert(s, cfg, unit, b, mlen(unit), 1, 0, NULL, res);
}

/* The expected concatenation of messages [a, b). */
static void mexpect(sink *k, uint32_t a, uint32_t b)
{
    uint8_t buf[300];
    for (uint32_t i = a; i < b; i++) {
        mfill(buf, i);
        sink_put(k, rg_bytes_make(buf, mlen(i)));
    }
}

static void test_msg_whole_in_order(void **state)
{
    (void)state;
    rg_seq s;
    rg_seq_init(&s);
    sink got = {0}, want = {0};
    for (uint32_t i = 0; i < 20; i++) {
        rg_seq_res res = {0};
        mins(&s, &CFG_MSG0, i, 0, &res);
        assert_int_equal(res.new_bytes, mlen(i));
        rg_bytes b = rg_seq_massemble(&s, &CFG_MSG0, &res);
        assert_int_equal(b.len, mlen(i)); /* the whole message, not one byte per unit */
        assert_int_equal(res.adv_bytes, mlen(i));
        sink_put(&got, b);
        assert_int_equal(rg_seq_next(&s), i + 1); /* next counts units */
    }
    mexpect(&want, 0, 20);
    assert_int_equal(got.len, want.len);
    assert_memory_equal(got.buf, want.buf, want.len);
    assert_int_equal(rg_seq_mcount(&s), 0);
    rg_seq_free(&s);
    free(got.buf);
    free(want.buf);
}

static void test_msg_reverse_then_one_assemble(void **state)
{
    (void)state;
    rg_seq s;
    rg_seq_init(&s);
    rg_seq_res res = {0};
    for (uint32_t i = 9; i >= 1; i--) {
        mins(&s, &CFG_MSG0, i, 0, &res);
        assert_int_equal(rg_seq_massemble(&s, &CFG_MSG0, &res).len, 0); /* hole at 0 */
    }
    assert_false(rg_seq_ready_upto(&s, 10));
    mins(&s, &CFG_MSG0, 0, 0, &res);
    assert_true(rg_seq_ready_upto(&s, 10));
    sink got = {0}, want = {0};
    sink_put(&got, rg_seq_massemble(&s, &CFG_MSG0, &res));
    mexpect(&want, 0, 10);
    assert_int_equal(got.len, want.len);
    assert_memory_equal(got.buf, want.buf, want.len);
    assert_int_equal(rg_seq_next(&s), 10);
    rg_seq_free(&s);
    free(got.buf);
    free(want.buf);
}

static void test_msg_duplicates_once(void **state)
{
    (void)state;
    for (int last = 0; last < 2; last++) {
        const rg_seq_cfg *cfg = last ? &CFG_MSG0_LAST : &CFG_MSG0;
        rg_seq s;
        rg_seq_init(&s);
        rg_seq_res res = {0};
        mins(&s, cfg, 1, 0, &res);
        memset(&res, 0, sizeof res);
        /* buffered duplicate with other content: conflict, policy picks the copy */
        uint32_t fl = mins(&s, cfg, 1, 1, &res);
        assert_true(fl & RG_SEQ_EV_REXMIT);
        assert_true(fl & RG_SEQ_EV_CONFLICT);
        assert_int_equal(res.dup_bytes, mlen(1));
        assert_int_equal(res.new_bytes, 0);
        mins(&s, cfg, 0, 0, &res);
        rg_bytes b = rg_seq_massemble(&s, cfg, &res);
        assert_int_equal(b.len, mlen(0) + mlen(1));
        uint8_t m1[300];
        mfill(m1, 1);
        if (last) m1[0] ^= 0xff;
        assert_memory_equal(b.ptr + mlen(0), m1, mlen(1));
        /* a delivered unit again: a retransmission, never delivered twice */
        memset(&res, 0, sizeof res);
        fl = mins(&s, cfg, 0, 0, &res);
        assert_true(fl & RG_SEQ_EV_REXMIT);
        assert_int_equal(rg_seq_massemble(&s, cfg, &res).len, 0);
        assert_int_equal(rg_seq_next(&s), 2);
        rg_seq_free(&s);
    }
}

static void test_msg_window_gap_and_ack(void **state)
{
    (void)state;
    rg_seq s;
    rg_seq_init(&s);
    rg_seq_res res = {0};
    mins(&s, &CFG_MSG0, 0, 0, &res);
    assert_int_equal(rg_seq_massemble(&s, &CFG_MSG0, &res).len, mlen(0));
    mins(&s, &CFG_MSG0, 3, 0, &res); /* units 1 and 2 missing */
    assert_int_equal(rg_seq_massemble(&s, &CFG_MSG0, &res).len, 0);
    /* an acknowledgment (no unit) moves the left edge to 3: the hole is skipped */
    rg_seq_win w = {3, 3 + 1000, 0, 0};
    memset(&res, 0, sizeof res);
    rg_seq_minsert(&s, &CFG_MSG0, 0, NULL, 0, 0, 0, &w, &res);
    rg_bytes b = rg_seq_massemble(&s, &CFG_MSG0, &res);
    assert_int_equal(b.len, mlen(3));
    assert_true(res.flags & RG_SEQ_EV_GAP);
    assert_int_equal(res.gap_bytes, 2); /* units, not bytes */
    /* right edge in units */
    rg_seq_win w2 = {4, 6, 0, 0};
    memset(&res, 0, sizeof res);
    assert_true(mins(&s, &CFG_MSG0, 7, 0, &res) == 0 ||
                (rg_seq_minsert(&s, &CFG_MSG0, 6, (const uint8_t *)"x", 1, 1, 0, &w2, &res) &
                 RG_SEQ_EV_OUT_OF_WINDOW));
    rg_seq_free(&s);
}

static void test_msg_caps(void **state)
{
    (void)state;
    const rg_seq_cfg cfg = {.buffer_data = 1,
                            .zero_based = 1,
                            .max_blocks = 3,
                            .max_bytes = 1000,
                            .unit = RG_SEQ_UNIT_MSG};
    rg_seq s;
    rg_seq_init(&s);
    rg_seq_res res = {0};
    uint8_t big[600] = {0};
    rg_seq_minsert(&s, &cfg, 1, big, 10, 1, 0, NULL, &res);
    rg_seq_minsert(&s, &cfg, 2, big, 10, 1, 0, NULL, &res);
    rg_seq_minsert(&s, &cfg, 3, big, 10, 1, 0, NULL, &res);
    assert_false(res.flags & RG_SEQ_EV_BUFFER_FULL);
    uint32_t fl = rg_seq_minsert(&s, &cfg, 4, big, 10, 1, 0, NULL, &res); /* 4th message */
    assert_true(fl & RG_SEQ_EV_BUFFER_FULL);
    rg_seq_minsert(&s, &cfg, 0, big, 10, 1, 0, NULL, &res); /* the 4th buffered: refused too */
    assert_int_equal(rg_seq_mcount(&s), 3);
    /* unit 0 is still a hole: nothing delivered, nothing lost from memory */
    assert_int_equal(rg_seq_massemble(&s, &cfg, &res).len, 0);
    rg_seq_free(&s);
    rg_seq_init(&s);
    memset(&res, 0, sizeof res);
    fl = rg_seq_minsert(&s, &cfg, 0, big, 600, 1, 0, NULL, &res);
    assert_false(fl & RG_SEQ_EV_BUFFER_FULL);
    fl = rg_seq_minsert(&s, &cfg, 1, big, 600, 1, 0, NULL, &res); /* 1200 bytes > max_bytes */
    assert_true(fl & RG_SEQ_EV_BUFFER_FULL);
    assert_int_equal(rg_seq_massemble(&s, &cfg, &res).len, 600);
    rg_seq_free(&s);
}

/* Random orders with duplicates, in any wrap position: every message once, in unit order. */
static void test_msg_random(void **state)
{
    (void)state;
    uint32_t rnd = 12345;
    for (int round = 0; round < 200; round++) {
        const uint32_t n = 1 + round % 40;
        const uint32_t base = round % 3 == 0 ? 0xfffffff0u : (uint32_t)round * 1000u;
        rg_seq_cfg cfg = {.buffer_data = 1, .unit = RG_SEQ_UNIT_MSG, .max_blocks = 1000};
        rg_seq s;
        rg_seq_init(&s);
        rg_seq_res res = {0};
        uint32_t order[120];
        uint32_t m = 0;
        order[m++] = 0; /* the first insert sets next (not zero-based) */
        for (uint32_t i = 1; i < n; i++)
            order[m++] = i;
        for (uint32_t i = 1; i < m; i++) { /* shuffle all but the first */
            rnd = rnd * 1103515245u + 12345u;
            uint32_t j = 1 + (rnd >> 8) % i;
            uint32_t t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (uint32_t i = 0; i < n / 3; i++) { /* duplicates */
            rnd = rnd * 1103515245u + 12345u;
            order[m++] = (rnd >> 8) % n;
        }
        sink got = {0}, want = {0};
        uint8_t buf[300];
        for (uint32_t i = 0; i < m; i++) {
            mfill(buf, order[i]);
            rg_seq_minsert(&s, &cfg, base + order[i], buf, mlen(order[i]), 1, 0, NULL, &res);
            if ((rnd >> 3) % 2) sink_put(&got, rg_seq_massemble(&s, &cfg, &res));
        }
        sink_put(&got, rg_seq_massemble(&s, &cfg, &res));
        mexpect(&want, 0, n);
        assert_int_equal(got.len, want.len);
        if (want.len) assert_memory_equal(got.buf, want.buf, want.len);
        assert_int_equal(rg_seq_next(&s), base + n);
        assert_int_equal(rg_seq_mcount(&s), 0);
        rg_seq_free(&s);
        free(got.buf);
        free(want.buf);
    }
    assert_int_equal(rg_seq_heap_stats().cur, 0);
}

static void test_msg_early(void **state)
{
    (void)state;
    rg_seq s;
    rg_seq_init(&s);
    rg_seq_res res = {0};
    uint8_t b[300];
    mins(&s, &CFG_MSG0, 0, 0, &res);
    assert_int_equal(rg_seq_massemble(&s, &CFG_MSG0, &res).len, mlen(0));
    mfill(b, 5);
    rg_seq_minsert(&s, &CFG_MSG0, 5, b, mlen(5), 1, RG_SEQ_EARLY, NULL, &res); /* holes 1..4 */
    rg_bytes o = rg_seq_massemble(&s, &CFG_MSG0, &res);
    assert_int_equal(o.len, mlen(5)); /* delivered at once, ahead of order */
    assert_memory_equal(o.ptr, b, mlen(5));
    for (uint32_t u = 1; u < 5; u++)
        mins(&s, &CFG_MSG0, u, 0, &res);
    mfill(b, 6);
    rg_seq_minsert(&s, &CFG_MSG0, 6, b, mlen(6), 1, RG_SEQ_EARLY, NULL, &res);
    sink got = {0}, want = {0};
    sink_put(&got, rg_seq_massemble(&s, &CFG_MSG0, &res));
    mexpect(&want, 6, 7); /* the early message first ... */
    mexpect(&want, 1, 5); /* ... then units 1-4; unit 5 is empty now */
    assert_int_equal(got.len, want.len);
    assert_memory_equal(got.buf, want.buf, want.len);
    assert_int_equal(rg_seq_next(&s), 7);
    /* a duplicate of an early unit is never delivered again */
    memset(&res, 0, sizeof res);
    uint32_t fl = rg_seq_minsert(&s, &CFG_MSG0, 5, b, 3, 1, RG_SEQ_EARLY, NULL, &res);
    assert_true(fl & RG_SEQ_EV_REXMIT);
    assert_int_equal(rg_seq_massemble(&s, &CFG_MSG0, &res).len, 0);
    rg_seq_free(&s);
    free(got.buf);
    free(want.buf);
}

/* ---- memcaps (issue 14) ---- */

static const rg_seq_cfg memcap_cfg = {
    .buffer_data = 1, .zero_based = 1, .max_blocks = 4096, .max_bytes = 1u << 24};

/* drop-flow / bypass: past the cap an allocation is refused, the insert says so (MEMCAP, the
 * bytes asked, the policy) and the accountant never passes the cap; ignore lets it pass */
static void test_memcap_refuses_and_reports(void **state)
{
    (void)state;
    static const uint8_t seg[100] = {7};
    for (int pol = RG_MEMCAP_DROP_FLOW; pol <= RG_MEMCAP_IGNORE; pol += 3) {
        rg_seq_heap h = {0};
        h.cap = 4000;
        h.policy = (uint8_t)pol;
        rg_seq_heap *old = rg_seq_heap_bind(&h);
        rg_seq s;
        rg_seq_init(&s);
        unsigned refused = 0, flagged = 0;
        for (uint32_t k = 1; k <= 100; k++) { /* far-apart blocks: one allocation each */
            rg_seq_res r = {0};
            uint32_t fl =
                rg_seq_insert(&s, &memcap_cfg, k * 1000, seg, sizeof seg, sizeof seg, NULL, 0, &r);
            if (fl & RG_SEQ_EV_MEMCAP) {
                flagged++;
                assert_true(r.mem_asked > 0);
                assert_int_equal(r.mem_policy, pol);
            }
            if (r.cap_bytes) refused++;
            if (pol != RG_MEMCAP_IGNORE) assert_true(h.cur <= h.cap);
        }
        assert_true(flagged > 0);
        assert_true(h.hits > 0);
        if (pol == RG_MEMCAP_IGNORE) {
            assert_int_equal(refused, 0);
            assert_true(h.cur > h.cap);
            assert_int_equal(h.act[RG_MEMCAP_IGNORE], h.hits);
            assert_int_equal(rg_seq_buffered(&s), 100 * sizeof seg);
        } else {
            assert_int_equal(refused, flagged);
            assert_true(rg_seq_buffered(&s) < 100 * sizeof seg);
        }
        rg_seq_free(&s);
        assert_int_equal(h.cur, 0);
        rg_seq_heap_unbind(&h); /* frees its pool */
        rg_seq_heap_bind(old);
    }
}

/* bypass: the held bytes go, offsets go on (next advances, holes close, the end is found),
 * no data is delivered and nothing more is buffered */
static void test_memcap_bypass_tracks_offsets(void **state)
{
    (void)state;
    rg_seq_heap h = {0};
    rg_seq_heap *old = rg_seq_heap_bind(&h);
    rg_seq s;
    rg_seq_init(&s);
    static const uint8_t a[10] = {1}, b[10] = {2};
    rg_seq_res r = {0};
    rg_seq_insert(&s, &memcap_cfg, 10, b, 10, 10, NULL, 0, &r); /* ahead: buffered */
    const size_t with_data = h.cur;
    assert_true(with_data > 0);
    rg_seq_bypass(&s);
    assert_true(rg_seq_bypassed(&s));
    assert_true(h.cur < with_data);
    const size_t after = h.cur;
    memset(&r, 0, sizeof r);
    rg_seq_insert(&s, &memcap_cfg, 0, a, 10, 10, NULL, RG_SEQ_BORROW, &r); /* fills the hole */
    rg_bytes v = rg_seq_assemble(&s, &memcap_cfg, &r);
    assert_int_equal(v.len, 0);
    assert_non_null(v.ptr);
    assert_int_equal(rg_seq_next(&s), 20);
    memset(&r, 0, sizeof r);
    rg_seq_insert(&s, &memcap_cfg, 20, a, 10, 11, NULL, 0, &r); /* data + FIN */
    v = rg_seq_assemble(&s, &memcap_cfg, &r);
    assert_int_equal(v.len, 0);
    assert_true(rg_seq_done(&s));
    assert_true(h.cur <= after);
    rg_seq_free(&s);
    assert_int_equal(h.cur, 0);
    rg_seq_heap_unbind(&h); /* frees its pool */
    rg_seq_heap_bind(old);
}

/* evict-oldest: the accountant's tables give up their least recently active instances (never
 * one touched at the current clock) until the allocation fits; the flow cap makes a table
 * reuse its oldest record instead of touching a new one */
typedef struct mc_inst {
    rg_seq s;
} mc_inst;

static void mc_remove(void *ctx, rg_flow *t, void *inst, int reason)
{
    (void)t;
    (*(unsigned *)ctx) += reason == RG_FLOW_EVICTED;
    rg_seq_free(&((mc_inst *)inst)->s);
}

static void test_memcap_evict_oldest(void **state)
{
    (void)state;
    static const uint8_t seg[200] = {3};
    rg_stats *st = rg_stats_new(1, NULL);
    assert_non_null(st);
    uint64_t now = 1;
    unsigned evicted = 0;
    rg_seq_heap h = {0};
    h.cap = 3000;
    h.policy = RG_MEMCAP_EVICT_OLDEST;
    h.now = &now;
    h.stats = st;
    rg_seq_heap *old = rg_seq_heap_bind(&h);
    rg_flow_cfg fc = {.key_len = 4,
                      .payload_size = sizeof(mc_inst),
                      .cap = 1000,
                      .on_remove = mc_remove,
                      .cb_ctx = &evicted,
                      .acct = &h,
                      .layer = 0};
    rg_flow *t = rg_flow_new(&fc);
    assert_non_null(t);
    mc_inst *last = NULL;
    for (uint32_t k = 0; k < 50; k++) { /* each instance buffers 200 bytes far ahead */
        now = 10 + k;
        rg_flow_set_time(t, now);
        mc_inst *in = rg_flow_create(t, &k, NULL);
        assert_non_null(in);
        rg_seq_res r = {0};
        rg_seq_insert(&in->s, &memcap_cfg, 5000, seg, sizeof seg, sizeof seg, NULL, 0, &r);
        assert_int_equal(r.cap_bytes, 0); /* room was made: nothing refused */
        assert_true(h.cur <= h.cap);
        last = in;
    }
    assert_true(evicted > 0);
    assert_int_equal(st->layer[0].mem.evicted, evicted);
    assert_int_equal(rg_flow_live(t), 50 - evicted);
    assert_int_equal(rg_seq_buffered(&last->s), sizeof seg); /* the newest is kept */
    /* everything touched at the current clock: nothing may go, the allocation is refused */
    uint32_t k = 999;
    h.cap = h.cur; /* full */
    mc_inst *in = rg_flow_create(t, &k, NULL);
    assert_non_null(in);
    rg_seq_res r = {0};
    now = 10; /* clock before every touch: all instances are "in use" */
    rg_seq_insert(&in->s, &memcap_cfg, 5000, seg, sizeof seg, sizeof seg, NULL, 0, &r);
    assert_int_equal(r.cap_bytes, sizeof seg);
    assert_true(r.flags & RG_SEQ_EV_MEMCAP);

    /* flow cap: a new record past it reuses the oldest instance's */
    rg_flow_flush(t);
    h.flow_cap = h.flow_cur; /* no new record may be touched */
    unsigned ev0 = evicted;
    for (uint32_t j = 2000; j < 2010; j++) {
        now = 100 + j;
        rg_flow_set_time(t, now);
        assert_non_null(rg_flow_create(t, &j, NULL)); /* free records first */
    }
    assert_true(h.flow_cur <= h.flow_cap);
    for (uint32_t j = 3000; j < 3100; j++) {
        now = 100 + j;
        rg_flow_set_time(t, now);
        assert_non_null(rg_flow_create(t, &j, NULL));
        assert_true(h.flow_cur <= h.flow_cap);
    }
    assert_true(evicted > ev0);
    assert_true(h.flow_hits > 0);
    rg_flow_flush(t);
    rg_flow_free(t);
    assert_int_equal(h.ntables, 0);
    assert_int_equal(h.cur, 0);
    rg_seq_heap_unbind(&h); /* frees its pool */
    rg_seq_heap_bind(old);
    rg_stats_free(st);
}

/* ---- gap recovery past the byte cap (cfg.recover), across wraps ---- */

/* The byte at 64-bit stream offset o: depends on the bits above 32, so a byte
 * delivered at the wrong wrap is seen. */
static uint8_t pat64(uint64_t o)
{
    return (uint8_t)((o * 2654435761u >> 13) ^ (o >> 32));
}

/* One insert + assemble of [o, o + n) (64-bit offsets from base); the bytes
 * delivered and the holes skipped are appended to the 64-bit model. */
typedef struct wrap_run {
    uint64_t off; /* 64-bit offset of next, extended from the window: off += next - next0 */
    uint64_t skipped, got;
} wrap_run;

static void wrap_take(const rg_seq *s, wrap_run *w, rg_bytes b, uint32_t n0, const rg_seq_res *r)
{
    uint64_t at = w->off; /* offset of n0 */
    uint32_t x = n0, g = 0, i = 0;
    for (;;) {
        while (g < r->ngaps && r->gaps[g].start == x) {
            w->skipped += r->gaps[g].end - r->gaps[g].start;
            at += r->gaps[g].end - r->gaps[g].start;
            x = r->gaps[g++].end;
        }
        if (i == b.len) break;
        assert_int_equal(b.ptr[i], pat64(at));
        i++;
        x++;
        at++;
    }
    assert_int_equal(g, r->ngaps);
    w->got += b.len;
    w->off += (uint32_t)(rg_seq_next(s) - n0); /* the 64-bit extension: a step under 2^31 */
}

static void test_recover_past_cap_across_wraps(void **state)
{
    (void)state;
    static const rg_seq_cfg cfg = {.buffer_data = 1, .max_bytes = 4096, .recover = 1};
    rg_rng rng = {27};
    const uint32_t base = 0xFFFFF000u; /* the first wrap 4 KiB in */
    uint8_t buf[1500];
    rg_seq s;
    rg_seq_init(&s);
    wrap_run w = {0};
    uint64_t o = 0, kept = 0, end = 0;
    while (o < (20ull << 30)) { /* 20 GiB: five wraps */
        uint32_t n = 1 + rng_below(&rng, 1500);
        for (uint32_t i = 0; i < n; i++)
            buf[i] = pat64(o + i);
        const uint32_t seq = base + (uint32_t)o;
        rg_seq_win win = {seq, seq + (1u << 30), 0, 0}; /* left: no ACK past this segment */
        rg_seq_res r = {0};
        rg_seq_insert(&s, &cfg, seq, buf, n, n, &win, RG_SEQ_BORROW, &r);
        assert_int_equal(r.flags & (RG_SEQ_EV_BUFFER_FULL | RG_SEQ_EV_OUT_OF_WINDOW), 0);
        assert_int_equal(r.new_bytes, n);
        kept += n;
        end = o + n;
        const uint32_t n0 = rg_seq_next(&s);
        rg_bytes b = rg_seq_assemble(&s, &cfg, &r);
        wrap_take(&s, &w, b, n0, &r);
        rg_seq_settle(&s, &cfg);
        /* next never lags more than the cap behind the newest byte held */
        assert_true(end - w.off <= 4096);
        /* mostly in-order runs, sometimes a hole of up to 600 MB */
        o = end + (rng_below(&rng, 4) ? 0 : (uint64_t)rng_below(&rng, 600u << 20));
    }
    rg_seq_flush(&s);
    const uint32_t n0 = rg_seq_next(&s);
    rg_seq_res r = {0};
    rg_bytes b = rg_seq_assemble(&s, &cfg, &r);
    wrap_take(&s, &w, b, n0, &r);
    assert_true(w.off == end);
    assert_true(w.got == kept);
    assert_true(w.skipped == end - kept); /* the holes: true byte counts */
    rg_seq_free(&s);
}

static void test_recover_cap_boundaries(void **state)
{
    (void)state;
    static const rg_seq_cfg cfg = {.buffer_data = 1, .max_bytes = 100, .recover = 1};
    static const rg_seq_cfg nocfg = {.buffer_data = 1, .max_bytes = 100};
    uint8_t d[60];
    memset(d, 7, sizeof d);
    rg_seq_win win = {0xFFFFFFF0u, 0xFFFFFFF0u + (1u << 30), 0, 0};
    for (int rec = 0; rec < 2; rec++) {
        const rg_seq_cfg *c = rec ? &cfg : &nocfg;
        rg_seq s;
        rg_seq_init(&s);
        rg_seq_res r = {0};
        rg_seq_insert(&s, c, 0xFFFFFFF0u, d, 16, 16, &win, 0, &r); /* next 0 after the wrap */
        (void)rg_seq_assemble(&s, c, &r);
        assert_int_equal(rg_seq_next(&s), 0);
        /* ends exactly at the cap: taken either way, nothing given up */
        memset(&r, 0, sizeof r);
        rg_seq_insert(&s, c, 40, d, 60, 60, &win, 0, &r);
        assert_int_equal(r.new_bytes, 60);
        assert_false(s.flags & RG_SEQF_FLOOR);
        /* one byte past the cap: the plain cap drops it; recover gives up one byte */
        memset(&r, 0, sizeof r);
        rg_seq_insert(&s, c, 100, d, 1, 1, &win, 0, &r);
        if (!rec) {
            assert_true(r.flags & RG_SEQ_EV_BUFFER_FULL);
        } else {
            assert_int_equal(r.new_bytes, 1);
            rg_seq_res a = {0};
            rg_bytes b = rg_seq_assemble(&s, c, &a);
            assert_int_equal(a.gap_bytes, 1); /* [0, 1): the one byte given up */
            assert_int_equal(a.ngaps, 1);
            assert_int_equal(a.gaps[0].start, 0);
            assert_int_equal(b.len, 0); /* [1, 40) is still a hole within the cap */
            assert_int_equal(rg_seq_next(&s), 1);
        }
        /* a segment over 1 GiB ahead is refused even with recover (2^31 stays far) */
        memset(&r, 0, sizeof r);
        rg_seq_win far = {0, 0, 0, 0};
        rg_seq_insert(&s, c, (1u << 30) + 200, d, 10, 10, &far, 0, &r);
        assert_true(r.flags & RG_SEQ_EV_BUFFER_FULL);
        rg_seq_free(&s);
    }
}

/* ---- retention of delivered, unacknowledged bytes (cfg.retain) ---- */

/* One segment in, then assemble; the result of both. */
static rg_seq_res ret_send(rg_seq *s, const rg_seq_cfg *cfg, uint32_t seq, const char *data,
                           uint32_t left)
{
    rg_seq_res r = {0};
    const uint32_t n = (uint32_t)strlen(data);
    rg_seq_win w = {left, left + (1u << 30), 0, 0};
    rg_seq_insert(s, cfg, seq, (const uint8_t *)data, n, n, &w, RG_SEQ_BORROW, &r);
    (void)rg_seq_assemble(s, cfg, &r);
    rg_seq_settle(s, cfg);
    return r;
}

static void test_retain_compares_unacked(void **state)
{
    (void)state;
    static const rg_seq_cfg keep = {.buffer_data = 1, .retain = 1};
    static const rg_seq_cfg nokeep = {.buffer_data = 1};
    for (int k = 0; k < 2; k++) {
        const rg_seq_cfg *c = k ? &nokeep : &keep;
        rg_seq s;
        rg_seq_init(&s);
        rg_seq_res r = ret_send(&s, c, 1, "GOOD", 1);
        assert_int_equal(r.adv_bytes, 4);
        /* the classic insertion: the same numbers, other bytes, before any ACK */
        r = ret_send(&s, c, 1, "EVIL", 1);
        assert_true(r.flags & RG_SEQ_EV_REXMIT);
        if (k) { /* without retention nothing is kept to compare with */
            assert_false(r.flags & RG_SEQ_EV_CONFLICT);
            rg_seq_free(&s);
            continue;
        }
        assert_true(r.flags & RG_SEQ_EV_CONFLICT);
        assert_int_equal(r.ovl_seq, 1);
        assert_int_equal(r.ovl_bytes, 4);
        assert_int_equal(r.ovl_new, 0); /* delivered bytes stay */
        /* the same bytes again: a plain retransmission */
        r = ret_send(&s, c, 1, "GOOD", 1);
        assert_true(r.flags & RG_SEQ_EV_REXMIT);
        assert_false(r.flags & RG_SEQ_EV_CONFLICT);
        /* partial: "OD" is old and the same, "XY" new */
        r = ret_send(&s, c, 3, "ODXY", 1);
        assert_true(r.flags & RG_SEQ_EV_OVERLAP);
        assert_false(r.flags & RG_SEQ_EV_CONFLICT);
        assert_int_equal(r.new_bytes, 2);
        /* partial and different: "DzQ" against "DXY" (one byte differs, the overlap
         * counted), "W" new */
        r = ret_send(&s, c, 4, "DzQW", 1);
        assert_true(r.flags & RG_SEQ_EV_CONFLICT);
        assert_int_equal(r.ovl_seq, 4);
        assert_int_equal(r.ovl_bytes, 3);
        assert_int_equal(r.new_bytes, 1);
        /* acknowledged up to 5: bytes before it are no longer kept, so not compared */
        r = ret_send(&s, c, 1, "EVIL", 5);
        assert_false(r.flags & RG_SEQ_EV_CONFLICT);
        r = ret_send(&s, c, 5, "Y", 5); /* kept: [5, 8) = "XYW" */
        assert_true(r.flags & RG_SEQ_EV_CONFLICT);
        assert_int_equal(r.ovl_bytes, 1);
        /* the acknowledgment apart from the left edge (TCP keeps left at the segment's
         * start): ack 8 releases [5, 8), so a repeat of them is not compared */
        memset(&r, 0, sizeof r);
        const rg_seq_win wa = {5, 5 + (1u << 30), 8, 1};
        rg_seq_insert(&s, c, 5, (const uint8_t *)"QQQ", 3, 3, &wa, 0, &r);
        assert_true(r.flags & RG_SEQ_EV_REXMIT);
        assert_false(r.flags & RG_SEQ_EV_CONFLICT);
        assert_int_equal(s.st->ret_len, 0);
        rg_seq_free(&s);
    }
}

static void test_retain_accounting(void **state)
{
    (void)state;
    static const rg_seq_cfg c = {.buffer_data = 1, .retain = 1, .max_bytes = 10000};
    rg_seq_heap h;
    memset(&h, 0, sizeof h);
    rg_seq_heap *old = rg_seq_heap_bind(&h);
    rg_seq s;
    rg_seq_init(&s);
    char seg[1001];
    memset(seg, 'a', 1000);
    seg[1000] = 0;
    uint32_t seq = 100;
    for (int i = 0; i < 30; i++, seq += 1000) /* no ACK: at most max_bytes kept */
        (void)ret_send(&s, &c, seq, seg, 100);
    assert_non_null(s.st);
    assert_int_equal(s.st->ret_len, 10000);
    assert_int_equal(s.st->ret_seq, seq - 10000);
    assert_true(s.st->ret_cap <= 10000);
    assert_int_equal(h.cur, rg_seq_heap_bytes(&s)); /* every kept byte is accounted */
    /* an ACK releases the bytes before it (the buffer stays, still accounted) */
    (void)ret_send(&s, &c, seq, "", seq - 100);
    assert_int_equal(s.st->ret_len, 100);
    assert_int_equal(h.cur, rg_seq_heap_bytes(&s));
    rg_seq_free(&s);
    assert_int_equal(h.cur, 0);
    /* a memcap that refuses the copy: data is still delivered, only not compared */
    h.cap = 1;
    h.policy = RG_MEMCAP_DROP_FLOW;
    rg_seq_init(&s);
    rg_seq_res r = ret_send(&s, &c, 1, "GOOD", 1);
    assert_int_equal(r.adv_bytes, 4);
    r = ret_send(&s, &c, 1, "EVIL", 1);
    assert_false(r.flags & RG_SEQ_EV_CONFLICT);
    rg_seq_free(&s);
    assert_int_equal(h.cur, 0);
    rg_seq_heap_unbind(&h);
    rg_seq_heap_bind(old);
}

/* The memory data never needs (the list of skipped holes, kept bytes) stays under a full
 * reassembly memcap: refused as a hit, and refused without one inside an eviction's drain
 * (busy, where the data's own allocations pass); the data and the hole are still given. */
static void test_extra_memory_under_full_cap(void **state)
{
    (void)state;
    static const rg_seq_cfg c = {.buffer_data = 1, .retain = 1, .max_bytes = 10000};
    for (int busy = 0; busy < 2; busy++) {
        rg_seq_heap h;
        memset(&h, 0, sizeof h);
        h.policy = RG_MEMCAP_DROP_FLOW;
        rg_seq_heap *old = rg_seq_heap_bind(&h);
        rg_seq s;
        rg_seq_init(&s);
        rg_seq_res r = ret_send(&s, &c, 1, "AB", 1); /* delivered and kept */
        assert_int_equal(s.st->ret_len, 2);
        r = ret_send(&s, &c, 5, "WXYZ", 1); /* buffered behind the hole [3, 5) */
        assert_int_equal(r.adv_bytes, 0);
        assert_true(h.cur > 0);
        h.cap = h.peak = h.cur; /* full */
        h.busy = (uint8_t)busy;
        (void)rg_seq_flush(&s); /* the instance ends: the hole is skipped */
        memset(&r, 0, sizeof r);
        rg_bytes b = rg_seq_assemble(&s, &c, &r);
        assert_int_equal(b.len, 4);
        assert_memory_equal(b.ptr, "WXYZ", 4);
        assert_int_equal(r.gap_bytes, 2);
        assert_int_equal(r.ngaps, 0); /* the list's growth was refused */
        /* the kept buffer has room, but the bytes after a hole the list lost have no known
         * place: none is kept (and "AB" no longer continues the run) */
        assert_int_equal(s.st->ret_len, 0);
        assert_true(h.peak <= h.cap);
        assert_int_equal(h.hits, busy ? 0 : 1); /* the list's hit (the copy asks nothing) */
        h.busy = 0;
        rg_seq_free(&s);
        assert_int_equal(h.cur, 0);
        rg_seq_heap_unbind(&h);
        rg_seq_heap_bind(old);
    }
}

/* The pool of a bound accountant: a flow's store and kept-bytes buffer go back to it at the
 * flow's end and the next flow reuses them (no malloc/free); reused memory is counted in cur
 * and under the memcap exactly as fresh memory; growth takes a larger pooled buffer; unbind
 * frees the pool (LeakSanitizer checks that nothing is lost). */
static void test_retain_pool(void **state)
{
    (void)state;
    static const rg_seq_cfg c = {.buffer_data = 1, .retain = 1, .max_bytes = 10000};
    rg_seq_heap h;
    memset(&h, 0, sizeof h);
    rg_seq_heap *old = rg_seq_heap_bind(&h);
    rg_seq s;
    rg_seq_init(&s);
    (void)ret_send(&s, &c, 1, "GOOD", 1);
    const rg_seq_store *st0 = s.st;
    const uint8_t *ret0 = s.st->ret;
    assert_int_equal(s.st->ret_cap, RG_SEQ_POOL_MIN);
    const size_t used = h.cur;
    assert_int_equal(used, sizeof(rg_seq_store) + RG_SEQ_POOL_MIN);
    rg_seq_free(&s); /* the flow ends: released to the pool, no longer counted */
    assert_int_equal(h.cur, 0);
    assert_int_equal(h.pool_bytes, used);
    rg_seq_init(&s); /* the next flow reuses both, counted as before */
    rg_seq_res r = ret_send(&s, &c, 7, "GOOD", 7);
    assert_ptr_equal(s.st, st0);
    assert_ptr_equal(s.st->ret, ret0);
    assert_int_equal(h.cur, used);
    assert_int_equal(h.pool_bytes, 0);
    r = ret_send(&s, &c, 7, "EVIL", 7); /* compared with the reused buffer's kept bytes */
    assert_true(r.flags & RG_SEQ_EV_CONFLICT);
    assert_int_equal(r.ovl_bytes, 4);
    /* growth past 512 bytes (no larger buffer pooled: realloc), the new size counted */
    char seg[601];
    memset(seg, 'x', 600);
    seg[600] = 0;
    (void)ret_send(&s, &c, 11, seg, 7);
    assert_int_equal(s.st->ret_len, 604);
    assert_int_equal(s.st->ret_cap, 2 * RG_SEQ_POOL_MIN);
    assert_int_equal(h.cur, sizeof(rg_seq_store) + 2 * RG_SEQ_POOL_MIN);
    assert_int_equal(h.pool_bytes, 0);
    rg_seq_free(&s);
    assert_int_equal(h.cur, 0);
    assert_int_equal(h.pool_bytes, sizeof(rg_seq_store) + 2 * RG_SEQ_POOL_MIN);
    /* the next flow's growth takes the pooled 1024-byte buffer and pools its 512 one */
    rg_seq_init(&s);
    (void)ret_send(&s, &c, 1, "GOOD", 1);
    assert_int_equal(h.pool_bytes, 2 * RG_SEQ_POOL_MIN); /* store and 512 taken */
    (void)ret_send(&s, &c, 5, seg, 1);
    assert_int_equal(s.st->ret_len, 604);
    assert_memory_equal(s.st->ret, "GOOD", 4); /* the kept bytes moved with it */
    assert_int_equal(s.st->ret_cap, 2 * RG_SEQ_POOL_MIN);
    assert_int_equal(h.pool_bytes, RG_SEQ_POOL_MIN);
    assert_int_equal(h.cur, sizeof(rg_seq_store) + 2 * RG_SEQ_POOL_MIN);
    r = ret_send(&s, &c, 1, "EVIL", 1);
    assert_true(r.flags & RG_SEQ_EV_CONFLICT);
    rg_seq_free(&s);
    assert_int_equal(h.pool_bytes, sizeof(rg_seq_store) + 3 * RG_SEQ_POOL_MIN);
    /* the memcap sees reused memory as new: a cap with room for the store only refuses the
     * copy although the pool holds a buffer */
    h.cap = sizeof(rg_seq_store) + RG_SEQ_POOL_MIN - 1;
    h.policy = RG_MEMCAP_DROP_FLOW;
    rg_seq_init(&s);
    r = ret_send(&s, &c, 1, "GOOD", 1);
    assert_int_equal(r.adv_bytes, 4);
    assert_int_equal(s.st->ret_cap, 0);
    assert_int_equal(h.cur, sizeof(rg_seq_store));
    assert_int_equal(h.hits, 1);
    rg_seq_free(&s);
    assert_int_equal(h.cur, 0);
    /* an accountant that is not bound pools nothing: what it frees goes to the C heap */
    h.cap = 0;
    rg_seq_init(&s);
    (void)ret_send(&s, &c, 1, "GOOD", 1);
    const size_t pooled = h.pool_bytes;
    rg_seq_heap other;
    memset(&other, 0, sizeof other);
    (void)rg_seq_heap_bind(&other);
    rg_seq_free(&s);
    assert_int_equal(h.cur, 0);
    assert_int_equal(h.pool_bytes, pooled);
    assert_int_equal(other.pool_bytes, 0);
    rg_seq_heap_unbind(&other);
    rg_seq_heap_unbind(&h); /* not bound, but its pool is freed */
    assert_int_equal(h.pool_bytes, 0);
    assert_null(h.pool_store);
    rg_seq_heap_bind(old);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_struct_is_empty),
        cmocka_unit_test(test_fast_path_no_copy),
        cmocka_unit_test(test_fast_path_metadata_only),
        cmocka_unit_test(test_borrow_zero_copy),
        cmocka_unit_test(test_borrow_then_insert_copies),
        cmocka_unit_test(test_in_order_copy_path),
        cmocka_unit_test(test_five_segments_all_orders),
        cmocka_unit_test(test_holes),
        cmocka_unit_test(test_ready_upto),
        cmocka_unit_test(test_overlap_shapes),
        cmocka_unit_test(test_overlap_spanning_blocks),
        cmocka_unit_test(test_overlap_same_content),
        cmocka_unit_test(test_below_next_keeps_new_bytes),
        cmocka_unit_test(test_wraparound),
        cmocka_unit_test(test_serial_halfspace),
        cmocka_unit_test(test_byte_cap),
        cmocka_unit_test(test_block_cap),
        cmocka_unit_test(test_large_segments),
        cmocka_unit_test(test_syn_and_fin_phantoms),
        cmocka_unit_test(test_bare_fin),
        cmocka_unit_test(test_end_below_data_ignored),
        cmocka_unit_test(test_fragments_end_marker),
        cmocka_unit_test(test_window_right_edge),
        cmocka_unit_test(test_gap_skipping),
        cmocka_unit_test(test_gap_full_buffer),
        cmocka_unit_test(test_metadata_only),
        cmocka_unit_test(test_fast_equals_slow),
        cmocka_unit_test(test_random_model),
        cmocka_unit_test(test_random_stress),
        cmocka_unit_test(test_memory_compaction),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_fast_vs_reference),
        cmocka_unit_test(test_fast_vs_slow_cases),
        cmocka_unit_test(test_ft_no_allocation),
        cmocka_unit_test(test_heap_accounting),
        cmocka_unit_test(test_far_ahead_costs_bytes),
        cmocka_unit_test(test_heap_contexts),
        cmocka_unit_test(test_overlap_policies),
        cmocka_unit_test(test_msg_whole_in_order),
        cmocka_unit_test(test_msg_reverse_then_one_assemble),
        cmocka_unit_test(test_msg_duplicates_once),
        cmocka_unit_test(test_msg_window_gap_and_ack),
        cmocka_unit_test(test_msg_caps),
        cmocka_unit_test(test_msg_random),
        cmocka_unit_test(test_msg_early),
        cmocka_unit_test(test_memcap_refuses_and_reports),
        cmocka_unit_test(test_memcap_bypass_tracks_offsets),
        cmocka_unit_test(test_memcap_evict_oldest),
        cmocka_unit_test(test_insert_fresh_equals_insert),
        cmocka_unit_test(test_insert_fresh_refuses),
        cmocka_unit_test(test_recover_past_cap_across_wraps),
        cmocka_unit_test(test_recover_cap_boundaries),
        cmocka_unit_test(test_retain_compares_unacked),
        cmocka_unit_test(test_retain_accounting),
        cmocka_unit_test(test_retain_pool),
        cmocka_unit_test(test_extra_memory_under_full_cap),
    };
    return cmocka_run_group_tests_name("rg_seq", tests, NULL, NULL);
}
