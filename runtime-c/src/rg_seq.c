/* rg_seq.c - reassembly sequences (see rg_seq.h for the model). */
#include "rg/rg_seq.h"

#include <stdlib.h>

#include "rg/rg_flow.h"
#include <string.h>

/* Heap accounting.  Every store records the accountant it was created
 * under (st->heap), so its bytes are credited back to the same one whatever
 * context frees them.  Stores are created under the calling thread's bound
 * accountant: generated code binds its context's (rg_seq_heap_bind) at every
 * entry point, so contexts -- and the workers that own them -- share no
 * counter; without a binding a per-thread default is used (tests, tools).
 * The binding is a pointer, not the cfg: the cfg stays a static const that
 * the inline fast paths fold. */
static _Thread_local rg_seq_heap heap_default;
_Thread_local rg_seq_heap *rg_seq__heap_bound;

static rg_seq_heap *heap_cur(void)
{
    return rg_seq__heap_bound ? rg_seq__heap_bound : &heap_default;
}

/* ---- pool (rg_seq_heap.pool_*): a freed block's first bytes link it to the next ---- */

static void *pool_take(rg_seq_heap *h, void **list, size_t n)
{
    void *p = *list;
    if (!p) return NULL;
    memcpy(list, p, sizeof *list);
    h->pool_bytes -= n;
    return p;
}

/* Keep p (n bytes, malloc'd) for reuse, or free it: only the bound accountant pools, up to
 * RG_SEQ_POOL_MAX_BYTES. */
static void pool_put(rg_seq_heap *h, void **list, void *p, size_t n)
{
    if (!p) return;
    if (h != rg_seq__heap_bound || n > RG_SEQ_POOL_MAX_BYTES - h->pool_bytes) {
        free(p);
        return;
    }
    memcpy(p, list, sizeof *list);
    *list = p;
    h->pool_bytes += n;
}

/* The size class of a retention buffer of n bytes, or -1 (not pooled). */
static int pool_class(size_t n)
{
    if (n < RG_SEQ_POOL_MIN || n % RG_SEQ_POOL_MIN || (n & (n - 1))) return -1;
    const int k = __builtin_ctzll((unsigned long long)(n / RG_SEQ_POOL_MIN));
    return k < RG_SEQ_POOL_CLASSES ? k : -1;
}

static void pool_put_ret(rg_seq_heap *h, uint8_t *p, size_t n)
{
    const int k = pool_class(n);
    if (k < 0) {
        free(p);
        return;
    }
    pool_put(h, &h->pool_ret[k], p, n);
}

static void pool_drain(rg_seq_heap *h)
{
    for (int k = -1; k < RG_SEQ_POOL_CLASSES; k++) {
        void **list = k < 0 ? &h->pool_store : &h->pool_ret[k];
        const size_t n = k < 0 ? sizeof(rg_seq_store) : (size_t)RG_SEQ_POOL_MIN << k;
        void *p;
        while ((p = pool_take(h, list, n)) != NULL)
            free(p);
    }
}

void rg_seq_heap_unbind(rg_seq_heap *h)
{
    pool_drain(h);
    if (rg_seq__heap_bound == h) rg_seq__heap_bound = NULL;
}

/* The per-layer memory counters of a store's layer (NULL without stats). */
static rg_mem_stats *mem_of(const rg_seq_heap *h, unsigned layer)
{
    return h->stats && layer < h->stats->nlayers ? &h->stats->layer[layer].mem : NULL;
}

static void heap_add(rg_seq_store *st, size_t n)
{
    rg_seq_heap *h = st->heap;
    h->cur += n;
    if (h->cur > h->peak) {
        h->peak = h->cur;
        if (h->stats && h->peak > h->stats->mem_seq_peak) h->stats->mem_seq_peak = h->peak;
    }
    rg_mem_stats *m = mem_of(h, st->layer);
    if (m) {
        m->seq_bytes += n;
        if (m->seq_bytes > m->seq_peak) m->seq_peak = m->seq_bytes;
    }
}

static void heap_sub(rg_seq_store *st, size_t n)
{
    st->heap->cur -= n;
    rg_mem_stats *m = mem_of(st->heap, st->layer);
    if (m) m->seq_bytes -= n;
}

/* The reassembly memcap: may n more bytes be allocated under h for a
 * sequence of `layer`?  0: yes (under the cap, policy ignore, or room made
 * by evict-oldest), -1: no (the caller drops the new data as BUFFER_FULL).
 * A hit is remembered for the insert in progress (rg_seq_res.mem_*). */
static int admit(rg_seq_heap *h, unsigned layer, size_t n)
{
    if (RG_LIKELY(h->cap == 0 || h->cur + n <= h->cap || h->busy)) return 0;
    const unsigned pol = h->policy < RG_MEMCAP_POLICIES ? h->policy : RG_MEMCAP_DROP_FLOW;
    rg_mem_stats *m = mem_of(h, layer);
    h->hits++;
    if (m) m->cap_hits++;
    h->hit_pending = 1;
    h->hit_asked = n > UINT32_MAX - h->hit_asked ? UINT32_MAX : h->hit_asked + (uint32_t)n;
    int rc = -1;
    if (pol == RG_MEMCAP_IGNORE) {
        rc = 0;
    } else if (pol == RG_MEMCAP_EVICT_OLDEST) {
        rg_flow_reclaim(h, n);
        rc = h->cur + n <= h->cap ? 0 : -1;
    }
    if (pol == RG_MEMCAP_IGNORE || pol == RG_MEMCAP_EVICT_OLDEST) { /* allocations; the others
                                                                      count instances */
        h->act[pol]++;
        if (m) m->act[pol]++;
    }
    return rc;
}

static int st_admit(rg_seq_store *st, size_t n)
{
    return admit(st->heap, st->layer, n);
}

/* st_admit for memory the data never needs (kept bytes, the list of skipped holes): an
 * eviction's drain (busy) admits anything, but these are given up past the cap even there
 * (no hit of their own: the eviction is the hit's), so the cap holds exactly. */
static int st_admit_extra(rg_seq_store *st, size_t n)
{
    const rg_seq_heap *h = st->heap;
    if (h->busy && h->cap && h->cur + n > h->cap) return -1;
    return st_admit(st, n);
}

/* Hand a memcap hit of the insert that just ran to its caller. */
static void take_hit(const rg_seq *s, rg_seq_res *res)
{
    rg_seq_heap *h = s->st ? s->st->heap : heap_cur();
    if (RG_LIKELY(!h->hit_pending)) return;
    res->flags |= RG_SEQ_EV_MEMCAP;
    res->mem_asked = h->hit_asked;
    res->mem_policy = h->policy < RG_MEMCAP_POLICIES ? h->policy : RG_MEMCAP_DROP_FLOW;
    h->hit_pending = 0;
    h->hit_asked = 0;
}

/* An insert starts: a hit left by an allocation outside an insert is not its. */
static void clear_hit(const rg_seq *s)
{
    rg_seq_heap *h = s->st ? s->st->heap : heap_cur();
    h->hit_pending = 0;
    h->hit_asked = 0;
}

/* Bypassed sequences run as offsets-only ones. */
static const rg_seq_cfg *eff_cfg(const rg_seq *s, const rg_seq_cfg *cfg, rg_seq_cfg *tmp)
{
    if (RG_LIKELY(!(s->flags & RG_SEQF_BYPASS))) return cfg;
    *tmp = *cfg;
    tmp->buffer_data = 0;
    tmp->retain = 0;
    return tmp;
}

/* A failed allocation: counted (the data it was for is dropped and counted
 * by the caller as BUFFER_FULL, never data already held). */
static void heap_fail(rg_seq_heap *h)
{
    h->fails++;
}

/* The store, created on first need under the bound accountant. */
static rg_seq_store *store_of(rg_seq *s, const rg_seq_cfg *cfg)
{
    if (s->st) return s->st;
    rg_seq_heap *h = heap_cur();
    const unsigned layer = cfg ? cfg->layer : 0;
    if (admit(h, layer, sizeof(rg_seq_store)) < 0) return NULL;
    rg_seq_store *st = h == rg_seq__heap_bound ? pool_take(h, &h->pool_store, sizeof *st) : NULL;
    if (st)
        memset(st, 0, sizeof *st);
    else
        st = calloc(1, sizeof *st);
    if (!st) {
        heap_fail(h);
        return NULL;
    }
    st->heap = h;
    st->layer = (uint16_t)layer;
    heap_add(st, sizeof *st);
    s->st = st;
    return st;
}

rg_seq_heap rg_seq_heap_stats(void)
{
    return *heap_cur();
}

void rg_seq_heap_reset_peak(void)
{
    rg_seq_heap *h = heap_cur();
    h->peak = h->cur;
}

/* The last assemble's view may live in a buffer of its own (a handed-over
 * block, or the blocks joined by gap skipping): it is valid until the next
 * call, which frees it.  Assemble sets RG_SEQF_SHRINK while one is held,
 * which keeps the next insert (and rg_seq_fast) off the inline path. */
static void maybe_shrink(rg_seq *s)
{
    rg_seq_store *st = s->st;
    s->flags &= (uint16_t)~RG_SEQF_SHRINK;
    if (st && st->view) {
        free(st->view);
        heap_sub(st, st->view_cap);
        st->view = NULL;
        st->view_cap = 0;
    }
}

static uint32_t cfg_max_blocks(const rg_seq_cfg *cfg)
{
    uint32_t m = cfg->max_blocks ? cfg->max_blocks : RG_SEQ_DEFAULT_MAX_BLOCKS;
    return m > 65535u ? 65535u : m;
}

static void add_dup(rg_seq_res *res, uint32_t seq, uint32_t n)
{
    if (!n) return;
    if (!res->dup_bytes) res->dup_seq = seq;
    res->dup_bytes += n;
}

static void drop_cap(rg_seq_res *res, uint32_t n)
{
    if (!n) return;
    res->cap_bytes += n;
    res->flags |= RG_SEQ_EV_BUFFER_FULL;
}

static void drop_oow(rg_seq_res *res, uint32_t n)
{
    if (!n) return;
    res->oow_bytes += n;
    res->flags |= RG_SEQ_EV_OUT_OF_WINDOW;
}

static int blk_reserve(rg_seq_store *st, uint32_t n)
{
    if (n <= st->blk_cap) return 0;
    uint32_t ncap = st->blk_cap ? st->blk_cap * 2 : 4;
    while (ncap < n)
        ncap *= 2;
    if (st_admit(st, (size_t)(ncap - st->blk_cap) * sizeof *st->blk) < 0) return -1;
    rg_seq_run *b = realloc(st->blk, (size_t)ncap * sizeof *b);
    if (!b) {
        heap_fail(st->heap);
        return -1;
    }
    heap_add(st, (size_t)(ncap - st->blk_cap) * sizeof *b);
    st->blk = b;
    st->blk_cap = ncap;
    return 0;
}

/* gap recovery: the buffer is full (byte or block cap) behind a hole at next,
 * so the hole would hold the sequence forever: skip it, and every hole up to
 * the last buffered byte, at the next assemble. */
static void stall_skip(rg_seq *s)
{
    if (!s->nblk || s->st->blk[0].start == s->next) return;
    uint32_t hi = s->st->blk[s->nblk - 1].end;
    if (!(s->flags & RG_SEQF_FLOOR) || rg_sdiff(hi, s->floor) > 0) {
        s->floor = hi;
        s->flags |= RG_SEQF_FLOOR;
    }
}

/* The overlap policy in force for a sequence: its context's run-time choice for the layer
 * (rg_ctx_cfg.overlap_policy), else the spec's. */
static unsigned policy_of(const rg_seq *s, const rg_seq_cfg *cfg)
{
    const rg_seq_heap *h = s->st ? s->st->heap : heap_cur();
    if (h->ovl_policy && cfg->layer < h->novl && h->ovl_policy[cfg->layer])
        return h->ovl_policy[cfg->layer] - 1u;
    return cfg->policy;
}

/* Whether the new copy wins the bytes a new segment [ra, rb) shares with a
 * buffered block [ks, ke) (offsets relative to next; they overlap): the
 * table in rg_seq.h. */
static int new_wins(unsigned policy, uint32_t ra, uint32_t rb, uint32_t ks, uint32_t ke)
{
    switch (policy) {
    case RG_SEQ_LAST:
        return 1;
    case RG_SEQ_LINUX:
        return ra < ks || (ra == ks && rb > ke);
    case RG_SEQ_BSD:
    case RG_SEQ_WINDOWS:
        return ra < ks;
    case RG_SEQ_SOLARIS:
        return rb > ke || (rb == ke && ra <= ks);
    default: /* RG_SEQ_FIRST (and unknown values) */
        return 0;
    }
}

/* Room for the merged block [ms, ms + size) in block i (which starts at or
 * after ms): grow its allocation geometrically (bounded by the byte cap).
 * On failure nothing changed. */
static int run_reserve(rg_seq_store *st, rg_seq_run *r, const rg_seq_cfg *cfg, uint32_t size)
{
    if (size <= r->cap) return 0;
    uint64_t ncap = (uint64_t)r->cap * 2;
    if (ncap < 256) ncap = 256;
    if (ncap > rg_seq_cfg_max_bytes(cfg)) ncap = rg_seq_cfg_max_bytes(cfg);
    if (ncap < size) ncap = size;
    if (st_admit(st, (size_t)ncap - r->cap) < 0) return -1;
    uint8_t *p = realloc(r->data, (size_t)ncap);
    if (!p) {
        heap_fail(st->heap);
        return -1;
    }
    heap_add(st, (size_t)ncap - r->cap);
    r->data = p;
    r->cap = (uint32_t)ncap;
    return 0;
}

/* Merge [seq, seq + len) (len > 0, seq at or after next, within the caps)
 * into the blocks, copying data per the overlap policy.  Adds duplicate and
 * new byte counts to res.  Returns 0, or -1 when dropped (caps / memory; the
 * sequence is then unchanged). */
static int place(rg_seq *s, const rg_seq_cfg *cfg, uint32_t seq, const uint8_t *data, uint32_t len,
                 rg_seq_res *res)
{
    const uint32_t next = s->next;
    const uint32_t ra = seq - next, rb = ra + len;
    rg_seq_store *st = store_of(s, cfg);
    if (!st) {
        drop_cap(res, len);
        return -1;
    }
    uint32_t n = s->nblk;
    const unsigned policy = policy_of(s, cfg);

    /* blocks [i, j) overlap or touch [ra, rb] */
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (st->blk[mid].end - next < ra)
            lo = mid + 1;
        else
            hi = mid;
    }
    const uint32_t i = lo;
    hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (st->blk[mid].start - next <= rb)
            lo = mid + 1;
        else
            hi = mid;
    }
    const uint32_t j = lo;

    if (i == j) {
        if (n >= cfg_max_blocks(cfg) || blk_reserve(st, n + 1)) {
            drop_cap(res, len);
            stall_skip(s);
            return -1;
        }
    }
    rg_seq_run *b = st->blk;
    /* the merged block's range, relative to next */
    const uint32_t ms = i < j && b[i].start - next < ra ? b[i].start - next : ra;
    const uint32_t me = i < j && b[j - 1].end - next > rb ? b[j - 1].end - next : rb;

    /* memory first, so that a failure changes nothing */
    uint8_t *nd = NULL;
    if (cfg->buffer_data) {
        if (i == j) {
            if (st_admit(st, len) < 0) {
                drop_cap(res, len);
                return -1;
            }
            nd = malloc(len);
            if (!nd) {
                heap_fail(st->heap);
                drop_cap(res, len);
                return -1;
            }
            heap_add(st, len);
        } else if (run_reserve(st, &b[i], cfg, me - ms) < 0) {
            drop_cap(res, len);
            return -1;
        }
    }

    /* duplicates, content conflicts, and which copy each overlap keeps (from
     * the old blocks' bytes, before they move) */
    uint32_t dup = 0;
    for (uint32_t k = i; k < j; k++) {
        uint32_t ks = b[k].start - next, ke = b[k].end - next;
        uint32_t os = ks > ra ? ks : ra, oe = ke < rb ? ke : rb;
        if (oe <= os) continue;
        add_dup(res, next + os, oe - os);
        dup += oe - os;
        const int nw = new_wins(policy, ra, rb, ks, ke);
        if (!cfg->buffer_data) continue;
        res->ovl_old += oe - os;
        if (memcmp(data + (os - ra), b[k].data + (os - ks), oe - os) != 0) {
            if (!res->ovl_bytes) res->ovl_seq = next + os;
            res->ovl_bytes += oe - os;
            if (nw) res->ovl_new += oe - os;
            res->ovl_policy = (uint8_t)policy;
            res->flags |= RG_SEQ_EV_CONFLICT;
        }
    }

    /* data: gather the old blocks into block i's buffer, then the segment */
    if (cfg->buffer_data) {
        uint8_t *base = nd;
        if (i < j) {
            base = b[i].data;
            const uint32_t shift = (b[i].start - next) - ms;
            if (shift) memmove(base + shift, base, b[i].end - b[i].start);
            for (uint32_t k = i + 1; k < j; k++) {
                memcpy(base + (b[k].start - next - ms), b[k].data, b[k].end - b[k].start);
                free(b[k].data);
                heap_sub(st, b[k].cap);
            }
        }
        uint8_t *dst = base + (ra - ms);
        if (policy == RG_SEQ_LAST || i == j) {
            memcpy(dst, data, len);
        } else { /* fill the gaps between old blocks, and the overlaps the new copy wins */
            uint32_t cur = ra;
            for (uint32_t k = i; k < j; k++) {
                uint32_t ks = b[k].start - next, ke = b[k].end - next;
                if (ks > cur) memcpy(dst + (cur - ra), data + (cur - ra), ks - cur);
                if (ke > cur) {
                    uint32_t os = ks > cur ? ks : cur, oe = ke < rb ? ke : rb;
                    if (oe > os && new_wins(policy, ra, rb, ks, ke))
                        memcpy(dst + (os - ra), data + (os - ra), oe - os);
                    cur = ke;
                }
            }
            if (rb > cur) memcpy(dst + (cur - ra), data + (cur - ra), rb - cur);
        }
    }

    /* metadata */
    if (i == j) {
        memmove(&b[i + 1], &b[i], (size_t)(n - i) * sizeof *b);
        b[i].start = seq;
        b[i].end = seq + len;
        b[i].cap = nd ? len : 0;
        b[i].data = nd;
        s->nblk = (uint16_t)(n + 1);
    } else {
        b[i].start = next + ms;
        b[i].end = next + me;
        memmove(&b[i + 1], &b[j], (size_t)(n - j) * sizeof *b);
        s->nblk = (uint16_t)(n - (j - i - 1));
    }
    res->new_bytes += len - dup;
    return 0;
}

/* Where assemble's gap skipping would move next, if anywhere: the first
 * buffered block or the floor, whichever comes first, never past the end
 * marker; only when there is a hole at next. */
static int floor_target(const rg_seq *s, uint32_t *target)
{
    if (!(s->flags & RG_SEQF_FLOOR) || rg_sdiff(s->floor, s->next) <= 0) return 0;
    if (s->borrow_len || (s->nblk && s->st->blk[0].start == s->next)) return 0;
    uint32_t t = s->floor;
    if (s->nblk && rg_sdiff(s->st->blk[0].start, t) < 0) t = s->st->blk[0].start;
    if ((s->flags & RG_SEQF_END) && rg_sdiff(t, s->end) > 0) t = s->end;
    if (rg_sdiff(t, s->next) <= 0) return 0;
    *target = t;
    return 1;
}

void rg_seq__unborrow(rg_seq *s, const rg_seq_cfg *cfg, rg_seq_res *res)
{
    rg_seq_res tmp;
    if (s->flags & RG_SEQF_BYPASS) return; /* offsets only: no pointer into the packet */
    const uint8_t *p = s->borrow;
    uint32_t n = s->borrow_len;
    s->borrow = NULL;
    s->borrow_len = 0;
    if (!p || !n) return;
    memset(&tmp, 0, sizeof tmp);
    if (place(s, cfg, s->next, p, n, &tmp) < 0 && res) drop_cap(res, n);
}

/* The highest sequence number known to be used: next, the buffered blocks,
 * the end marker and the segment being inserted (if plausible).  A window
 * left edge beyond it is not trusted for gap skipping (a bogus or foreign
 * acknowledgment would otherwise skip up to 2 GiB of stream). */
static uint32_t highest_seen(const rg_seq *s, const rg_seq_cfg *cfg, uint32_t seq, uint32_t takeup)
{
    uint32_t hi = s->next;
    if (s->nblk && rg_sdiff(s->st->blk[s->nblk - 1].end, hi) > 0) hi = s->st->blk[s->nblk - 1].end;
    if (s->borrow_len && rg_sdiff(s->next + s->borrow_len, hi) > 0) hi = s->next + s->borrow_len;
    if ((s->flags & RG_SEQF_END) && rg_sdiff(s->lend, hi) > 0) hi = s->lend;
    uint32_t segend = seq + takeup;
    int32_t rel = rg_sdiff(segend, s->next);
    uint32_t span = cfg->buffer_data ? rg_seq_cfg_max_bytes(cfg) : RG_SEQ_MAX_SPAN;
    if (rel > 0 && (uint32_t)rel <= span && rg_sdiff(segend, hi) > 0) hi = segend;
    return hi;
}

static uint32_t insert_impl(rg_seq *s, const rg_seq_cfg *cfg, uint32_t seq, const uint8_t *data,
                            uint32_t len, uint32_t takeup, const rg_seq_win *win, unsigned iflags,
                            rg_seq_res *res);

/* ---- retention (cfg.retain; rg_seq.h) ---- */

/* The receiver acknowledged the bytes before left: they are no longer kept. */
static void ret_release(rg_seq_store *st, uint32_t left)
{
    if (!st->ret_len) return;
    const int32_t d = rg_sdiff(left, st->ret_seq);
    if (d <= 0) return;
    if ((uint32_t)d >= st->ret_len) {
        st->ret_len = 0;
        return;
    }
    memmove(st->ret, st->ret + d, st->ret_len - (uint32_t)d);
    st->ret_seq = left;
    st->ret_len -= (uint32_t)d;
}

/* Give up the kept bytes (and their buffer). */
static void ret_drop(rg_seq_store *st)
{
    pool_put_ret(st->heap, st->ret, st->ret_cap);
    heap_sub(st, st->ret_cap);
    st->ret = NULL;
    st->ret_cap = st->ret_len = 0;
}

/* Keep the delivered bytes [seq, seq + n): they continue the kept run, or start a new one;
 * at most max_bytes are kept (the oldest go).  Memory refused: nothing is kept. */
static void ret_keep(rg_seq *s, const rg_seq_cfg *cfg, uint32_t seq, const uint8_t *p, uint32_t n)
{
    rg_seq_store *st = store_of(s, cfg);
    if (!st) return;
    if (st->ret_len && st->ret_seq + st->ret_len != seq) st->ret_len = 0;
    if (!n) return;
    const uint32_t maxb = rg_seq_cfg_max_bytes(cfg);
    if (n >= maxb) {
        p += n - maxb;
        seq += n - maxb;
        n = maxb;
        st->ret_len = 0;
    }
    if (!st->ret_len) {
        st->ret_seq = seq;
    } else if (st->ret_len > maxb - n) {
        const uint32_t drop = st->ret_len - (maxb - n);
        memmove(st->ret, st->ret + drop, st->ret_len - drop);
        st->ret_seq += drop;
        st->ret_len -= drop;
    }
    const uint32_t need = st->ret_len + n;
    if (need > st->ret_cap) {
        uint64_t ncap = (uint64_t)st->ret_cap * 2;
        if (ncap < 512) ncap = 512; /* small: most connections keep a few segments */
        if (ncap > maxb) ncap = maxb;
        if (ncap < need) ncap = need;
        if (st_admit_extra(st, (size_t)ncap - st->ret_cap) < 0) {
            ret_drop(st);
            return;
        }
        /* a pooled buffer of the new size takes the bytes, the old one goes back */
        const int k = st->heap == rg_seq__heap_bound ? pool_class((size_t)ncap) : -1;
        uint8_t *q = k >= 0 ? pool_take(st->heap, &st->heap->pool_ret[k], (size_t)ncap) : NULL;
        if (q) {
            if (st->ret_len) memcpy(q, st->ret, st->ret_len);
            pool_put_ret(st->heap, st->ret, st->ret_cap);
        } else {
            q = realloc(st->ret, (size_t)ncap);
        }
        if (!q) {
            heap_fail(st->heap);
            ret_drop(st);
            return;
        }
        heap_add(st, (size_t)ncap - st->ret_cap);
        st->ret = q;
        st->ret_cap = (uint32_t)ncap;
    }
    memcpy(st->ret + st->ret_len, p, n);
    st->ret_len += n;
}

/* A segment's bytes [seq, seq + n), all before next: compared with the kept ones. */
static void ret_compare(const rg_seq_store *st, uint32_t seq, const uint8_t *data, uint32_t n,
                        rg_seq_res *res)
{
    if (!st->ret_len || !n) return;
    const int32_t a = rg_sdiff(seq, st->ret_seq); /* segment start vs kept start */
    const uint32_t os = a > 0 ? (uint32_t)a : 0;  /* overlap, relative to ret_seq */
    const int64_t e = (int64_t)a + n;
    const uint32_t oe = e < (int64_t)st->ret_len ? (uint32_t)(e > 0 ? e : 0) : st->ret_len;
    if (oe <= os) return;
    res->ovl_old += oe - os;
    if (memcmp(data + ((int64_t)os - a), st->ret + os, oe - os) == 0) return;
    if (!res->ovl_bytes) res->ovl_seq = st->ret_seq + os;
    res->ovl_bytes += oe - os; /* delivered bytes are never replaced: ovl_new stays */
    res->flags |= RG_SEQ_EV_CONFLICT;
}

/* The byte cap's measure of a segment [seq, seq + len) at or after next
 * (rel = seq - next): its offset from next, or with cfg.recover from the
 * floor, which a segment past the cap first moves up to seq + len - maxspan
 * (the bytes before are given up: rg_seq.h, "byte cap").  Segments more
 * than RG_SEQ_MAX_SPAN ahead stay refused: offsets relative to next must
 * stay far from 2^31. */
static uint32_t recover_span(rg_seq *s, const rg_seq_cfg *cfg, uint32_t seq, uint32_t len,
                             uint32_t rel, uint32_t maxspan)
{
    if (!cfg->recover) return rel;
    if (rel < RG_SEQ_MAX_SPAN && len <= maxspan &&
        len > maxspan - (rel < maxspan ? rel : maxspan)) {
        const uint32_t f = seq + len - maxspan;
        if (rg_sdiff(f, s->next) > 0 &&
            (!(s->flags & RG_SEQF_FLOOR) || rg_sdiff(f, s->floor) > 0)) {
            s->floor = f;
            s->flags |= RG_SEQF_FLOOR;
        }
    }
    if ((s->flags & RG_SEQF_FLOOR) && rg_sdiff(s->floor, s->next) > 0) {
        const int32_t d = rg_sdiff(seq, s->floor);
        return d > 0 ? (uint32_t)d : 0;
    }
    return rel;
}

/* The common cases of a retaining sequence, which the inline paths leave to rg_seq__insert:
 * nothing buffered or borrowed, the window's left edge not past next, and either no sequence
 * space taken (a pure ACK: only the kept bytes are trimmed) or data exactly at next within the
 * byte cap and the window (borrowed, as the inline path does).  The same result as
 * insert_impl, which they skip (no allocation happens, so no memcap hit either); 0: not such a
 * case, nothing changed. */
static int insert_retain_fast(rg_seq *s, const rg_seq_cfg *cfg, uint32_t seq, const uint8_t *data,
                              uint32_t len, uint32_t takeup, const rg_seq_win *win, unsigned iflags,
                              rg_seq_res *res)
{
    const uint32_t f = s->flags;
    if (!cfg->retain || !cfg->buffer_data ||
        (f & (RG_SEQF_INIT | RG_SEQF_BYPASS)) != RG_SEQF_INIT || s->borrow || s->borrow_len ||
        s->nblk)
        return 0;
    const int nowin = !win || !(win->left | win->right);
    if (!nowin && rg_sdiff(win->left, s->next) > 0) return 0;
    if (takeup != 0) {
        if (takeup != len || data == NULL || seq != s->next || !(iflags & RG_SEQ_BORROW) ||
            (f & (RG_SEQF_END | RG_SEQF_FLOOR)) || len > rg_seq_cfg_max_bytes(cfg) ||
            (!nowin && (int64_t)rg_sdiff(win->right, seq) < (int64_t)len))
            return 0;
    }
    clear_hit(s);
    maybe_shrink(s);
    if (!nowin && s->st) ret_release(s->st, win->has_ack ? win->ack : win->left);
    if (takeup != 0) {
        s->borrow = data;
        s->borrow_len = len;
        s->flags |= RG_SEQF_STARTED;
        if (res) res->new_bytes += len;
    }
    return 1;
}

uint32_t rg_seq__insert(rg_seq *s, const rg_seq_cfg *cfg, uint32_t seq, const uint8_t *data,
                        uint32_t len, uint32_t takeup, const rg_seq_win *win, unsigned iflags,
                        rg_seq_res *res)
{
    rg_seq_res tmp;
    rg_seq_cfg bc;
    if (insert_retain_fast(s, cfg, seq, data, len, takeup, win, iflags, res))
        return res ? res->flags : 0;
    if (!res) {
        memset(&tmp, 0, sizeof tmp);
        res = &tmp;
    }
    clear_hit(s);
    insert_impl(s, eff_cfg(s, cfg, &bc), seq, data, len, takeup, win, iflags, res);
    take_hit(s, res);
    return res->flags;
}

static uint32_t insert_impl(rg_seq *s, const rg_seq_cfg *cfg, uint32_t seq, const uint8_t *data,
                            uint32_t len, uint32_t takeup, const rg_seq_win *win, unsigned iflags,
                            rg_seq_res *res)
{
    rg_seq_res tmp;
    if (!res) {
        memset(&tmp, 0, sizeof tmp);
        res = &tmp;
    }
    if (!data) len = 0;
    if (takeup < len) len = takeup;
    if (takeup - len > RG_SEQ_MAX_SPAN) takeup = len; /* absurd phantom length: ignore */
    if (!(s->flags & RG_SEQF_INIT)) {
        if (!cfg->zero_based) s->next = seq;
        s->flags |= RG_SEQF_INIT;
    }
    /* Borrowed bytes into the own buffer before anything moves.  Without
     * buffering a pending region at next is kept as it is (the same as a
     * block there for every step below) and extended by the next in-order
     * segment; it becomes a block only if a segment needs one. */
    if (s->borrow && cfg->buffer_data) rg_seq__unborrow(s, cfg, res);
    maybe_shrink(s);
    const uint32_t dup0 = res->dup_bytes, new0 = res->new_bytes;
    if (cfg->retain && s->st && win && (win->left | win->right))
        ret_release(s->st, win->has_ack ? win->ack : win->left);

    /* window: right edge trims, left edge past next arms gap skipping */
    if (win && (win->left | win->right)) {
        if (rg_sdiff(win->left, s->next) > 0 &&
            (!(s->flags & RG_SEQF_FLOOR) || rg_sdiff(win->left, s->floor) > 0) &&
            rg_sdiff(win->left, highest_seen(s, cfg, seq, takeup)) <= 0) {
            s->floor = win->left;
            s->flags |= RG_SEQF_FLOOR;
        }
        int32_t room = rg_sdiff(win->right, seq);
        if (room <= 0) {
            drop_oow(res, len);
            return res->flags;
        }
        if ((uint32_t)room < takeup) {
            takeup = (uint32_t)room;
            if (len > takeup) {
                drop_oow(res, len - takeup);
                len = takeup;
            }
        }
    }

    /* a data-less phantom at next before anything else (SYN): skip it */
    if (len == 0 && takeup > 0 && !(s->flags & RG_SEQF_STARTED) && seq == s->next && s->nblk == 0) {
        s->next = seq + takeup;
        s->flags |= RG_SEQF_STARTED;
        return res->flags;
    }
    if (takeup > 0) s->flags |= RG_SEQF_STARTED;

    /* bytes before next were delivered: keep only what is new */
    int32_t d = rg_sdiff(seq, s->next);
    if (d < 0) {
        uint32_t below = 0u - (uint32_t)d;
        if (cfg->retain && s->st) {
            ret_compare(s->st, seq, data, below < len ? below : len, res);
            if (res->flags & RG_SEQ_EV_CONFLICT) res->ovl_policy = (uint8_t)policy_of(s, cfg);
        }
        if (below >= takeup) {
            if (takeup) {
                add_dup(res, seq, len);
                res->flags |= RG_SEQ_EV_REXMIT;
            }
            return res->flags;
        }
        uint32_t cut = below < len ? below : len;
        add_dup(res, seq, cut);
        if (cut) data += cut;
        len -= cut;
        takeup -= below;
        seq = s->next;
    }
    const int phantom = takeup > len;

    /* end marker: drop data past it, or set it */
    if (s->flags & RG_SEQF_END) {
        if (phantom && seq + len != s->end) res->flags |= RG_SEQ_EV_END_MISMATCH;
        int32_t de = rg_sdiff(s->end, seq);
        if (de <= 0) {
            drop_oow(res, len);
            len = 0;
        } else if ((uint32_t)de < len) {
            drop_oow(res, len - (uint32_t)de);
            len = (uint32_t)de;
        }
    } else if (phantom) {
        uint32_t highest = s->nblk ? s->st->blk[s->nblk - 1].end : s->next + s->borrow_len;
        uint32_t cand = seq + len;
        if (rg_sdiff(cand, highest) >= 0) {
            s->end = cand;
            s->lend = seq + takeup;
            s->flags |= RG_SEQF_END;
            res->flags |= RG_SEQ_EV_END;
        } else {
            res->flags |= RG_SEQ_EV_END_MISMATCH;
        }
    }

    if (len) {
        /* byte cap: the span from next */
        const uint32_t rel = seq - s->next;
        const uint32_t maxspan = cfg->buffer_data ? rg_seq_cfg_max_bytes(cfg) : RG_SEQ_MAX_SPAN;
        const uint32_t span = recover_span(s, cfg, seq, len, rel, maxspan);
        if (span >= maxspan) {
            drop_cap(res, len);
            stall_skip(s);
            len = 0;
        } else if (len > maxspan - span) {
            drop_cap(res, len - (maxspan - span));
            stall_skip(s);
            len = maxspan - span;
        }
        if (len && s->borrow_len) { /* without buffering: a pending region at next */
            if (s->nblk == 0 && rel == s->borrow_len) {
                s->borrow_len += len; /* continues it, as a block would be merged */
                res->new_bytes += len;
                len = 0;
            } else {
                rg_seq__unborrow(s, cfg, res);
            }
        }
        if (len) {
            /* aligned into an empty sequence: reference the bytes (without
             * buffering there is nothing to reference: a pending region at
             * next, the same as a block there, without allocating one) */
            if (((iflags & RG_SEQ_BORROW) || !cfg->buffer_data) && s->nblk == 0 && rel == 0) {
                s->borrow = cfg->buffer_data ? data : rg_empty_byte;
                s->borrow_len = len;
                res->new_bytes += len;
            } else {
                (void)place(s, cfg, seq, data, len, res);
            }
        }
    }

    uint32_t dd = res->dup_bytes - dup0, nn = res->new_bytes - new0;
    if (dd) res->flags |= nn ? RG_SEQ_EV_OVERLAP : RG_SEQ_EV_REXMIT;
    return res->flags;
}

/* ---- gap recovery: skipping holes ----------------------------------------
 * A hole is skipped when the receiver acknowledged bytes past it (the window
 * left edge, the floor) or the instance ends (rg_seq_flush).  Every hole
 * before the floor goes in one assemble: the blocks between them are moved
 * together in the buffer, so the view is the captured bytes without the
 * holes (what tshark's follow prints), and res.gaps says where they were. */

/* Record the skipped hole [a, b) in res (the list lives in the store). */
static void note_gap(rg_seq *s, rg_seq_res *res, uint32_t a, uint32_t b)
{
    res->gap_bytes += b - a;
    res->flags |= RG_SEQ_EV_GAP;
    rg_seq_store *st = store_of(s, NULL);
    if (!st) return;                   /* the bytes are counted, the list stays short */
    if (res->ngaps == 0) st->ngap = 0; /* a new packet's list */
    if (st->ngap == st->gap_cap) {
        uint32_t ncap = st->gap_cap ? st->gap_cap * 2 : 4;
        if (st_admit_extra(st, (size_t)(ncap - st->gap_cap) * sizeof *st->gap) < 0) return;
        rg_seq_blk *g = realloc(st->gap, (size_t)ncap * sizeof *g);
        if (!g) {
            heap_fail(st->heap);
            return;
        }
        heap_add(st, (size_t)(ncap - st->gap_cap) * sizeof *g);
        st->gap = g;
        st->gap_cap = ncap;
    }
    st->gap[st->ngap].start = a;
    st->gap[st->ngap].end = b;
    st->ngap++;
    res->ngaps = st->ngap;
    res->gaps = st->gap;
}

/* Did the list since entry ng0 record every hole skipped since gap_bytes was gb0? */
static int gaps_listed(const rg_seq_res *res, uint32_t ng0, uint32_t gb0)
{
    uint32_t listed = 0; /* (modulo 2^32, as gap_bytes) */
    for (uint32_t k = ng0; k < res->ngaps; k++)
        listed += res->gaps[k].end - res->gaps[k].start;
    return listed == res->gap_bytes - gb0;
}

int rg_seq_flush(rg_seq *s)
{
    if (s->flags & RG_SEQF_INIT) {
        uint32_t hi = s->next + s->borrow_len;
        if (s->nblk && rg_sdiff(s->st->blk[s->nblk - 1].end, hi) > 0)
            hi = s->st->blk[s->nblk - 1].end;
        if ((s->flags & RG_SEQF_END) && rg_sdiff(s->lend, hi) > 0) hi = s->lend;
        if (rg_sdiff(hi, s->next) > 0 &&
            (!(s->flags & RG_SEQF_FLOOR) || rg_sdiff(hi, s->floor) > 0)) {
            s->floor = hi;
            s->flags |= RG_SEQF_FLOOR;
        }
    }
    return rg_seq_pending(s);
}
/* ---- end of gap recovery ---- */

rg_bytes rg_seq__assemble(rg_seq *s, const rg_seq_cfg *cfg, rg_seq_res *res)
{
    rg_seq_res tmp;
    rg_seq_cfg bc;
    cfg = eff_cfg(s, cfg, &bc);
    rg_bytes out;
    out.ptr = rg_empty_byte;
    out.len = 0;
    if (!res) {
        memset(&tmp, 0, sizeof tmp);
        res = &tmp;
    }
    if (cfg->retain && cfg->buffer_data && !(s->flags & (RG_SEQF_FLOOR | RG_SEQF_BYPASS)) &&
        s->nblk == 0) {
        /* the common retaining case: at most the borrowed bytes to deliver and keep (what the
         * general path below does then, without its block and gap steps) */
        maybe_shrink(s);
        if (s->borrow) {
            const uint32_t n = s->borrow_len;
            out.ptr = s->borrow;
            out.len = n;
            s->next += n;
            res->adv_bytes += n;
            s->borrow = NULL;
            s->borrow_len = 0;
            if (n) ret_keep(s, cfg, s->next - n, out.ptr, n);
        }
        if ((s->flags & (RG_SEQF_END | RG_SEQF_DONE)) == RG_SEQF_END && s->next == s->end) {
            s->next = s->lend;
            s->flags |= RG_SEQF_DONE;
            res->flags |= RG_SEQ_EV_DONE;
        }
        return out;
    }
    maybe_shrink(s); /* the previous view is no longer valid */
    const uint32_t ng0 = res->ngaps;
    const uint32_t gb0 = res->gap_bytes;
    int borrowed = s->borrow != NULL;
    if (borrowed) { /* zero-copy: the caller's bytes, nothing else is buffered */
        if (cfg->buffer_data) {
            out.ptr = s->borrow;
            out.len = s->borrow_len;
        }
        s->next += s->borrow_len;
        res->adv_bytes += s->borrow_len;
        s->borrow = NULL;
        s->borrow_len = 0;
    }
    if (!borrowed || ((s->flags & RG_SEQF_FLOOR) && rg_sdiff(s->floor, s->next) > 0)) {
        /* (after borrowed bytes, nothing is buffered: at most a last hole to skip) */
        uint32_t target;
        uint8_t *base = NULL; /* the view: the first block's own buffer, or st->view */
        uint32_t have = 0;
        for (;;) {
            if (floor_target(s, &target)) {
                note_gap(s, res, s->next, target);
                s->next = target;
            }
            if (!(s->nblk && s->st->blk[0].start == s->next)) break;
            rg_seq_store *st = s->st;
            rg_seq_run *r0 = &st->blk[0];
            uint32_t n = r0->end - s->next;
            if (cfg->buffer_data && r0->data) {
                if (!base) { /* hand the block's buffer over as the view */
                    st->view = base = r0->data;
                    st->view_cap = r0->cap;
                } else { /* gap skipping joins blocks: append to the view */
                    if ((uint64_t)have + n > st->view_cap) {
                        uint64_t nc = (uint64_t)st->view_cap * 2;
                        if (nc < (uint64_t)have + n) nc = (uint64_t)have + n;
                        uint8_t *p = realloc(st->view, (size_t)nc);
                        if (!p) { /* out of memory: the block stays for the next call */
                            heap_fail(st->heap);
                            break;
                        }
                        heap_add(st, (size_t)nc - st->view_cap);
                        st->view = base = p;
                        st->view_cap = (uint32_t)nc;
                    }
                    memcpy(base + have, r0->data, n);
                    free(r0->data);
                    heap_sub(st, r0->cap);
                }
                have += n;
                s->flags |= RG_SEQF_SHRINK;
            }
            s->next = st->blk[0].end;
            s->nblk--;
            memmove(&st->blk[0], &st->blk[1], (size_t)s->nblk * sizeof st->blk[0]);
            res->adv_bytes += n;
            /* more holes to skip only while the floor is ahead */
            if (!(s->flags & RG_SEQF_FLOOR) || rg_sdiff(s->floor, s->next) <= 0) break;
        }
        if (base) {
            out.ptr = base;
            out.len = have;
        }
    }
    if ((s->flags & RG_SEQF_FLOOR) &&
        (rg_sdiff(s->floor, s->next) <= 0 ||
         ((s->flags & RG_SEQF_END) && rg_sdiff(s->next, s->end) >= 0)))
        s->flags &= (uint16_t)~RG_SEQF_FLOOR; /* reached, or nothing left to skip to */
    if (cfg->retain && cfg->buffer_data && (out.len || res->ngaps != ng0)) {
        /* the bytes after this call's last hole continue (or start) the kept run */
        uint32_t tail = out.len;
        if (!gaps_listed(res, ng0, gb0)) {
            tail = 0; /* a hole the list lost (memory refused): where the bytes after it
                         start is unknown, so none is kept */
        } else if (res->ngaps != ng0) {
            const uint32_t after = s->next - res->gaps[res->ngaps - 1].end;
            if (after < tail) tail = after;
        }
        ret_keep(s, cfg, s->next - tail, out.ptr + (out.len - tail), tail);
    }
    if ((s->flags & (RG_SEQF_END | RG_SEQF_DONE)) == RG_SEQF_END && s->next == s->end) {
        s->next = s->lend;
        s->flags |= RG_SEQF_DONE;
        res->flags |= RG_SEQ_EV_DONE;
    }
    return out;
}

static void msgs_free(rg_seq_store *st);
static size_t msgs_heap(const rg_seq_store *st);

void rg_seq__release(rg_seq *s)
{
    rg_seq_store *st = s->st;
    if (st) {
        msgs_free(st);
        for (uint32_t k = 0; k < s->nblk; k++)
            free(st->blk[k].data);
        heap_sub(st, rg_seq_heap_bytes(s));
        rg_seq_heap *h = st->heap;
        pool_put_ret(h, st->ret, st->ret_cap);
        free(st->view);
        free(st->gap);
        free(st->blk);
        pool_put(h, &h->pool_store, st, sizeof *st);
    }
    rg_seq_init(s);
}

void rg_seq_bypass(rg_seq *s)
{
    rg_seq_store *st = s->st;
    if (st) { /* ranges stay (offsets are still tracked), their bytes go */
        ret_drop(st);
        for (uint32_t k = 0; k < s->nblk; k++) {
            free(st->blk[k].data);
            heap_sub(st, st->blk[k].cap);
            st->blk[k].data = NULL;
            st->blk[k].cap = 0;
        }
    }
    if (s->borrow_len) s->borrow = rg_empty_byte; /* offsets of the pending segment only */
    s->flags |= RG_SEQF_BYPASS;
}

void rg_seq_set_base(rg_seq *s, uint32_t next)
{
    if (s->st) {
        msgs_free(s->st); /* message units: the buffered messages go too */
        s->st->ret_len = 0;
        for (uint32_t k = 0; k < s->nblk; k++) {
            free(s->st->blk[k].data);
            heap_sub(s->st, s->st->blk[k].cap);
        }
    }
    s->nblk = 0;
    s->borrow = NULL;
    s->borrow_len = 0;
    s->next = next;
    s->end = s->lend = s->floor = 0;
    s->flags = RG_SEQF_INIT;
    maybe_shrink(s);
}

uint32_t rg_seq_buffered(const rg_seq *s)
{
    uint32_t n = s->borrow_len;
    for (uint32_t k = 0; k < s->nblk; k++)
        n += s->st->blk[k].end - s->st->blk[k].start;
    return n;
}

size_t rg_seq_heap_bytes(const rg_seq *s)
{
    const rg_seq_store *st = s->st;
    if (!st) return 0;
    size_t n = sizeof *st + (size_t)st->blk_cap * sizeof *st->blk + st->view_cap +
               (size_t)st->gap_cap * sizeof *st->gap + st->ret_cap;
    for (uint32_t k = 0; k < s->nblk; k++)
        n += st->blk[k].cap;
    return n + msgs_heap(st);
}

int rg_seq_ready(const rg_seq *s)
{
    uint32_t cov;
    if (s->borrow_len) {
        cov = s->next + s->borrow_len;
    } else if (s->nblk == 0) {
        cov = s->next;
    } else {
        if (s->nblk > 1 || s->st->blk[0].start != s->next) return 0;
        cov = s->st->blk[0].end;
    }
    if (s->flags & RG_SEQF_END) return (s->flags & RG_SEQF_DONE) || rg_sdiff(cov, s->end) >= 0;
    return 1;
}

int rg_seq__ready_upto(const rg_seq *s, uint32_t upto)
{
    if (!(s->flags & RG_SEQF_INIT)) return 0;
    /* Phantom bytes (a FIN) are never present: the data ends at the marker. */
    if ((s->flags & RG_SEQF_END) && rg_sdiff(upto, s->end) > 0) upto = s->end;
    uint32_t cov = s->next + s->borrow_len;
    /* gap recovery: a hole before the floor will be skipped, so it is settled */
    const int fl = (s->flags & RG_SEQF_FLOOR) != 0;
    for (uint32_t k = 0; k < s->nblk; k++) {
        const rg_seq_run *b = &s->st->blk[k];
        if (rg_sdiff(b->start, cov) > 0 && (!fl || rg_sdiff(b->start, s->floor) > 0)) break;
        if (rg_sdiff(b->end, cov) > 0) cov = b->end;
    }
    if (fl && rg_sdiff(s->floor, cov) > 0) cov = s->floor;
    return rg_sdiff(cov, upto) >= 0;
}

int rg_seq_pending(const rg_seq *s)
{
    if (s->borrow_len) return 1;
    if (s->nblk && s->st->blk[0].start == s->next) return 1;
    uint32_t target;
    if (floor_target(s, &target)) return 1;
    if ((s->flags & (RG_SEQF_END | RG_SEQF_DONE)) == RG_SEQF_END && s->next == s->end) return 1;
    return 0;
}

/* ======================================================================
 * Message units (cfg.unit == RG_SEQ_UNIT_MSG; model in rg_seq.h).
 *
 * The unit numbers live in the sequence itself, driven through the byte
 * code with an offsets-only "shadow" configuration (one unit = one
 * "byte"), so duplicates, holes, the window and gap skipping behave
 * exactly as for bytes.  The messages live in st->msgs, sorted by unit
 * number relative to next; every buffered message's unit is at or after
 * next (gap skipping only skips units without a message).
 * ====================================================================== */

typedef struct rg_seq_msg {
    uint32_t unit, len;
    uint8_t *data; /* NULL when len == 0 */
} rg_seq_msg;

typedef struct rg_seq_msgs {
    rg_seq_msg *m;
    uint32_t n, cap;
    uint64_t bytes; /* message bytes buffered */
    uint8_t *out;   /* the last massemble's view when it concatenated */
    uint32_t out_cap;
    uint32_t early_len, early_cap; /* RG_SEQ_EARLY messages since the last massemble */
    uint8_t *early;
} rg_seq_msgs;

static void msgs_free(rg_seq_store *st)
{
    rg_seq_msgs *ms = st->msgs;
    if (!ms) return;
    for (uint32_t i = 0; i < ms->n; i++)
        free(ms->m[i].data);
    heap_sub(st, (size_t)ms->bytes + ms->out_cap + ms->early_cap + (size_t)ms->cap * sizeof *ms->m +
                     sizeof *ms);
    free(ms->m);
    free(ms->out);
    free(ms->early);
    free(ms);
    st->msgs = NULL;
}

static size_t msgs_heap(const rg_seq_store *st)
{
    const rg_seq_msgs *ms = st->msgs;
    if (!ms) return 0;
    return sizeof *ms + (size_t)ms->bytes + ms->out_cap + ms->early_cap +
           (size_t)ms->cap * sizeof *ms->m;
}

static rg_seq_cfg shadow_cfg(const rg_seq_cfg *cfg)
{
    rg_seq_cfg sh = *cfg;
    sh.buffer_data = 0;
    sh.unit = RG_SEQ_UNIT_BYTE;
    return sh;
}

static rg_seq_msgs *msgs_of(rg_seq *s, const rg_seq_cfg *cfg)
{
    if (!store_of(s, cfg)) return NULL;
    if (!s->st->msgs) {
        s->st->msgs = calloc(1, sizeof *s->st->msgs);
        if (!s->st->msgs) {
            heap_fail(s->st->heap);
            return NULL;
        }
        heap_add(s->st, sizeof *s->st->msgs);
    }
    return s->st->msgs;
}

/* Index of the first message whose unit is at or after `unit` (relative to next). */
static uint32_t msg_lower(const rg_seq_msgs *ms, uint32_t next, uint32_t unit)
{
    uint32_t lo = 0, hi = ms->n, r = unit - next;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (ms->m[mid].unit - next < r)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int msg_copy(rg_seq_store *st, rg_seq_msg *m, const uint8_t *data, uint32_t len)
{
    uint8_t *p = NULL;
    if (len) {
        if (st_admit(st, len) < 0) return -1;
        p = malloc(len);
        if (!p) {
            heap_fail(st->heap);
            return -1;
        }
        memcpy(p, data, len);
        heap_add(st, len);
    }
    m->data = p;
    m->len = len;
    return 0;
}

uint32_t rg_seq_mcount(const rg_seq *s)
{
    return s->st && s->st->msgs ? s->st->msgs->n : 0;
}

/* Append an early message (kept until the next massemble). */
static int early_put(rg_seq_store *st, rg_seq_msgs *ms, const uint8_t *data, uint32_t len)
{
    if (len > ms->early_cap - ms->early_len) {
        uint64_t ncap = ms->early_cap ? (uint64_t)ms->early_cap * 2 : 256;
        while (ncap < (uint64_t)ms->early_len + len)
            ncap *= 2;
        if (ncap > RG_SEQ_MAX_SPAN) return -1;
        uint8_t *p = realloc(ms->early, (size_t)ncap);
        if (!p) {
            heap_fail(st->heap);
            return -1;
        }
        heap_add(st, (size_t)ncap - ms->early_cap);
        ms->early = p;
        ms->early_cap = (uint32_t)ncap;
    }
    if (len) memcpy(ms->early + ms->early_len, data, len);
    ms->early_len += len;
    return 0;
}

static uint32_t minsert_impl(rg_seq *s, const rg_seq_cfg *cfg, uint32_t unit, const uint8_t *data,
                             uint32_t len, uint32_t take, unsigned mflags, const rg_seq_win *win,
                             rg_seq_res *res);

uint32_t rg_seq_minsert(rg_seq *s, const rg_seq_cfg *cfg, uint32_t unit, const uint8_t *data,
                        uint32_t len, uint32_t take, unsigned mflags, const rg_seq_win *win,
                        rg_seq_res *res)
{
    rg_seq_res tmp;
    if (!res) {
        memset(&tmp, 0, sizeof tmp);
        res = &tmp;
    }
    clear_hit(s);
    minsert_impl(s, cfg, unit, data, len, take, mflags, win, res);
    take_hit(s, res);
    return res->flags;
}

static uint32_t minsert_impl(rg_seq *s, const rg_seq_cfg *cfg, uint32_t unit, const uint8_t *data,
                             uint32_t len, uint32_t take, unsigned mflags, const rg_seq_win *win,
                             rg_seq_res *res)
{
    rg_seq_res tmp, r;
    rg_seq_cfg bc;
    cfg = eff_cfg(s, cfg, &bc);
    if (!res) {
        memset(&tmp, 0, sizeof tmp);
        res = &tmp;
    }
    memset(&r, 0, sizeof r);
    const rg_seq_cfg sh = shadow_cfg(cfg);
    if (!data) len = 0;
    take = take ? 1u : 0u;
    rg_seq_msgs *ms = s->st ? s->st->msgs : NULL;

    if (take && cfg->buffer_data) {
        /* a message that would be new but does not fit is dropped before its
         * unit is recorded: its unit stays a hole (skippable by the window) */
        const uint32_t next = (s->flags & RG_SEQF_INIT) ? s->next : (cfg->zero_based ? 0 : unit);
        const uint32_t rel = unit - next;
        int known = rg_sdiff(unit, next) < 0 || rel < s->borrow_len;
        for (uint32_t k = 0; !known && k < s->nblk; k++)
            known =
                rg_sdiff(unit, s->st->blk[k].start) >= 0 && rg_sdiff(unit, s->st->blk[k].end) < 0;
        const uint32_t maxm = cfg->max_blocks ? cfg->max_blocks : RG_SEQ_DEFAULT_MAX_BLOCKS;
        const uint64_t held = ms ? ms->bytes + ms->early_len : 0;
        if (!known && ((ms ? ms->n : 0) >= maxm || held + len > rg_seq_cfg_max_bytes(cfg))) {
            drop_cap(res, len);
            res->flags |= RG_SEQ_EV_BUFFER_FULL; /* also for an empty message */
            take = 0;                            /* still apply the window's left edge below */
        }
    }
    (void)rg_seq__insert(s, &sh, unit, take ? rg_empty_byte : NULL, take, take, win, 0, &r);
    res->flags |= r.flags;
    res->gap_bytes += r.gap_bytes;
    if (r.oow_bytes) res->oow_bytes += len;
    if (r.cap_bytes) res->cap_bytes += len;
    if (r.new_bytes) {
        res->new_bytes += len;
        if (!cfg->buffer_data) return res->flags;
        ms = msgs_of(s, cfg);
        if (mflags & RG_SEQ_EARLY) { /* delivered ahead of order; the unit stays empty */
            if (!ms || early_put(s->st, ms, data, len) < 0) drop_cap(res, len);
            return res->flags;
        }
        rg_seq_msg m;
        if (!ms || msg_copy(s->st, &m, data, len) < 0) {
            drop_cap(res, len); /* out of memory: the unit is kept, its message lost */
            return res->flags;
        }
        m.unit = unit;
        if (ms->n == ms->cap) {
            uint32_t ncap = ms->cap ? ms->cap * 2 : 8;
            rg_seq_msg *p = realloc(ms->m, (size_t)ncap * sizeof *p);
            if (!p) {
                free(m.data);
                heap_sub(s->st, len);
                drop_cap(res, len);
                return res->flags;
            }
            heap_add(s->st, (size_t)(ncap - ms->cap) * sizeof *p);
            ms->m = p;
            ms->cap = ncap;
        }
        uint32_t i = msg_lower(ms, s->next, unit);
        memmove(&ms->m[i + 1], &ms->m[i], (size_t)(ms->n - i) * sizeof *ms->m);
        ms->m[i] = m;
        ms->n++;
        ms->bytes += len;
    } else if (r.dup_bytes) {
        if (!res->dup_bytes) res->dup_seq = unit;
        res->dup_bytes += len;
        /* a buffered copy: compare, and keep the last one if asked */
        uint32_t i = ms ? msg_lower(ms, s->next, unit) : 0;
        if (ms && i < ms->n && ms->m[i].unit == unit) {
            rg_seq_msg *m = &ms->m[i];
            res->ovl_old += m->len;
            if (m->len != len || (len && memcmp(m->data, data, len) != 0)) {
                res->flags |= RG_SEQ_EV_CONFLICT;
                res->ovl_policy = (uint8_t)policy_of(s, cfg);
                if (!res->ovl_bytes) res->ovl_seq = unit;
                res->ovl_bytes += len; /* message bytes, like every message counter */
                rg_seq_msg nm;
                if (policy_of(s, cfg) == RG_SEQ_LAST && msg_copy(s->st, &nm, data, len) == 0) {
                    res->ovl_new += len;
                    heap_sub(s->st, m->len);
                    free(m->data);
                    ms->bytes = ms->bytes - m->len + len;
                    nm.unit = unit;
                    *m = nm;
                }
            }
        }
    }
    return res->flags;
}

rg_bytes rg_seq_massemble(rg_seq *s, const rg_seq_cfg *cfg, rg_seq_res *res)
{
    rg_seq_res tmp, r;
    rg_seq_cfg bc;
    cfg = eff_cfg(s, cfg, &bc);
    rg_bytes out = rg_bytes_empty();
    if (!res) {
        memset(&tmp, 0, sizeof tmp);
        res = &tmp;
    }
    memset(&r, 0, sizeof r);
    const rg_seq_cfg sh = shadow_cfg(cfg);
    (void)rg_seq__assemble(s, &sh, &r);
    res->flags |= r.flags;
    res->gap_bytes += r.gap_bytes;
    rg_seq_msgs *ms = s->st ? s->st->msgs : NULL;
    if (!ms) return out;
    /* the delivered units are [first, next); their messages lead the list */
    const uint32_t first = s->next - r.adv_bytes;
    const uint32_t early = ms->early_len;
    uint32_t k = 0;
    uint64_t total = 0;
    while (r.adv_bytes && k < ms->n && ms->m[k].unit - first < r.adv_bytes)
        total += ms->m[k++].len;
    if (k == 0 && early == 0) return out;
    total += early;
    if (total > UINT32_MAX) total = UINT32_MAX; /* cannot happen: max_bytes <= 1 GiB */
    if (early == 0 && k == 1 && ms->m[0].data) {
        /* one message: hand over its own buffer as the view */
        heap_sub(s->st, ms->out_cap);
        free(ms->out);
        ms->out = ms->m[0].data;
        ms->out_cap = ms->m[0].len;
        out.ptr = ms->out;
        out.len = ms->m[0].len;
    } else if (total) {
        if (total > ms->out_cap) {
            uint8_t *p = malloc((size_t)total);
            if (!p) { /* out of memory: the messages are lost, counted as dropped */
                heap_fail(s->st->heap);
                for (uint32_t i = 0; i < k; i++)
                    free(ms->m[i].data);
                heap_sub(s->st, (size_t)(total - early));
                drop_cap(res, (uint32_t)total);
                ms->bytes -= total - early;
                ms->early_len = 0;
                memmove(&ms->m[0], &ms->m[k], (size_t)(ms->n - k) * sizeof *ms->m);
                ms->n -= k;
                return out;
            }
            heap_sub(s->st, ms->out_cap);
            heap_add(s->st, (size_t)total);
            free(ms->out);
            ms->out = p;
            ms->out_cap = (uint32_t)total;
        }
        if (early) memcpy(ms->out, ms->early, early);
        uint32_t at = early;
        for (uint32_t i = 0; i < k; i++) {
            if (ms->m[i].len) memcpy(ms->out + at, ms->m[i].data, ms->m[i].len);
            at += ms->m[i].len;
            free(ms->m[i].data);
        }
        heap_sub(s->st, (size_t)(total - early));
        out.ptr = ms->out;
        out.len = (uint32_t)total;
    } else {
        for (uint32_t i = 0; i < k; i++)
            free(ms->m[i].data);
    }
    ms->bytes -= total - early;
    ms->early_len = 0;
    /* no message store yet (m == NULL) when nothing was ever buffered: no pointer arithmetic */
    if (ms->n > k) memmove(&ms->m[0], &ms->m[k], (size_t)(ms->n - k) * sizeof *ms->m);
    ms->n -= k;
    res->adv_bytes += (uint32_t)total;
    if (!cfg->buffer_data) out = rg_bytes_empty();
    return out;
}
