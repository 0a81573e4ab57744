/* ref_seq.h - the reassembly sequence as it was before the inline fast paths
 * (a verbatim copy of src/rg_seq.c with renamed symbols and its own state
 * struct): the reference that test_seq compares the optimised
 * implementation with, call by call. */
#ifndef REF_SEQ_H
#define REF_SEQ_H

#include <stdlib.h>
#include <string.h>

#include "rg/rg_seq.h"

typedef struct ref_store {
    rg_seq_blk *blk;
    uint8_t *data;
    uint32_t blk_cap;
    uint32_t buf_seq;
    uint32_t buf_cap;
    uint32_t pad_;
} ref_store;

typedef struct ref_seq {
    uint32_t next;
    uint32_t end;
    uint32_t lend;
    uint32_t floor;
    uint16_t flags;
    uint16_t nblk;
    uint32_t borrow_len;
    const uint8_t *borrow;
    ref_store *st;
} ref_seq;

static void ref_seq_init(ref_seq *s)
{
    memset(s, 0, sizeof *s);
}

/* An empty sequence whose buffer grew beyond this releases it. */
#define RG_SEQ_SHRINK_BYTES (64u * 1024u)
#define RG_SEQ_MIN_BUF      2048u

static uint32_t ref__cfg_max_blocks(const rg_seq_cfg *cfg)
{
    uint32_t m = cfg->max_blocks ? cfg->max_blocks : RG_SEQ_DEFAULT_MAX_BLOCKS;
    return m > 65535u ? 65535u : m;
}

static void ref__add_dup(rg_seq_res *res, uint32_t seq, uint32_t n)
{
    if (!n) return;
    if (!res->dup_bytes) res->dup_seq = seq;
    res->dup_bytes += n;
}

static void ref__drop_cap(rg_seq_res *res, uint32_t n)
{
    if (!n) return;
    res->cap_bytes += n;
    res->flags |= RG_SEQ_EV_BUFFER_FULL;
}

static void ref__drop_oow(rg_seq_res *res, uint32_t n)
{
    if (!n) return;
    res->oow_bytes += n;
    res->flags |= RG_SEQ_EV_OUT_OF_WINDOW;
}

/* Room in the data buffer for every byte before sequence number `upto`
 * (upto - next <= max_bytes is guaranteed by the caller).  Compacts first
 * (drops the delivered prefix), then grows geometrically. */
static int ref__buf_reserve(ref_seq *s, const rg_seq_cfg *cfg, uint32_t upto)
{
    ref_store *st = s->st;
    if (s->nblk == 0) st->buf_seq = s->next; /* nothing live: re-anchor */
    uint32_t need = upto - st->buf_seq;
    if (need <= st->buf_cap) return 0;
    uint32_t dead = s->next - st->buf_seq;
    if (dead) {
        if (s->nblk) {
            uint32_t used = st->blk[s->nblk - 1].end - st->buf_seq;
            memmove(st->data, st->data + dead, used - dead);
        }
        st->buf_seq = s->next;
        need = upto - st->buf_seq;
        if (need <= st->buf_cap) return 0;
    }
    uint32_t maxb = rg_seq_cfg_max_bytes(cfg);
    uint64_t ncap = st->buf_cap ? (uint64_t)st->buf_cap * 2 : RG_SEQ_MIN_BUF;
    while (ncap < need)
        ncap *= 2;
    if (ncap > maxb) ncap = maxb;
    if (ncap < need) ncap = need;
    uint8_t *p = realloc(st->data, (size_t)ncap);
    if (!p) return -1;
    st->data = p;
    st->buf_cap = (uint32_t)ncap;
    return 0;
}

static int ref__blk_reserve(ref_store *st, uint32_t n)
{
    if (n <= st->blk_cap) return 0;
    uint32_t ncap = st->blk_cap ? st->blk_cap * 2 : 4;
    while (ncap < n)
        ncap *= 2;
    rg_seq_blk *b = realloc(st->blk, (size_t)ncap * sizeof *b);
    if (!b) return -1;
    st->blk = b;
    st->blk_cap = ncap;
    return 0;
}

/* gap recovery: the buffer is full (byte or block cap) behind a hole at next,
 * so the hole would hold the sequence forever: skip it, and every hole up to
 * the last buffered byte, at the next assemble. */
static void ref__stall_skip(ref_seq *s)
{
    if (!s->nblk || s->st->blk[0].start == s->next) return;
    uint32_t hi = s->st->blk[s->nblk - 1].end;
    if (!(s->flags & RG_SEQF_FLOOR) || rg_sdiff(hi, s->floor) > 0) {
        s->floor = hi;
        s->flags |= RG_SEQF_FLOOR;
    }
}

/* Merge [seq, seq + len) (len > 0, seq at or after next, within the caps)
 * into the blocks, copying data per the overlap policy.  Adds duplicate and
 * new byte counts to res.  Returns 0, or -1 when dropped (caps / memory). */
static int ref__place(ref_seq *s, const rg_seq_cfg *cfg, uint32_t seq, const uint8_t *data,
                      uint32_t len, rg_seq_res *res)
{
    const uint32_t next = s->next;
    const uint32_t ra = seq - next, rb = ra + len;
    if (!s->st) {
        s->st = calloc(1, sizeof *s->st);
        if (!s->st) {
            ref__drop_cap(res, len);
            return -1;
        }
    }
    ref_store *st = s->st;
    uint32_t n = s->nblk;

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
        if (n >= ref__cfg_max_blocks(cfg) || ref__blk_reserve(st, n + 1)) {
            ref__drop_cap(res, len);
            ref__stall_skip(s);
            return -1;
        }
    }
    if (cfg->buffer_data && ref__buf_reserve(s, cfg, seq + len)) {
        ref__drop_cap(res, len);
        return -1;
    }
    rg_seq_blk *b = st->blk;

    /* duplicates and content conflicts */
    uint32_t dup = 0;
    for (uint32_t k = i; k < j; k++) {
        uint32_t ks = b[k].start - next, ke = b[k].end - next;
        uint32_t os = ks > ra ? ks : ra, oe = ke < rb ? ke : rb;
        if (oe <= os) continue;
        ref__add_dup(res, next + os, oe - os);
        dup += oe - os;
        if (cfg->buffer_data && !(res->flags & RG_SEQ_EV_CONFLICT) &&
            memcmp(data + (os - ra), st->data + (next + os - st->buf_seq), oe - os) != 0)
            res->flags |= RG_SEQ_EV_CONFLICT;
    }

    /* data */
    if (cfg->buffer_data) {
        uint8_t *dst = st->data + (seq - st->buf_seq);
        if (cfg->policy == RG_SEQ_LAST || i == j) {
            memcpy(dst, data, len);
        } else { /* first copy wins: fill only the gaps between existing blocks */
            uint32_t cur = ra;
            for (uint32_t k = i; k < j; k++) {
                uint32_t ks = b[k].start - next, ke = b[k].end - next;
                if (ks > cur) memcpy(dst + (cur - ra), data + (cur - ra), ks - cur);
                if (ke > cur) cur = ke;
            }
            if (rb > cur) memcpy(dst + (cur - ra), data + (cur - ra), rb - cur);
        }
    }

    /* metadata */
    if (i == j) {
        memmove(&b[i + 1], &b[i], (size_t)(n - i) * sizeof *b);
        b[i].start = seq;
        b[i].end = seq + len;
        s->nblk = (uint16_t)(n + 1);
    } else {
        uint32_t ns = (b[i].start - next) < ra ? b[i].start : seq;
        uint32_t ne = (b[j - 1].end - next) > rb ? b[j - 1].end : seq + len;
        b[i].start = ns;
        b[i].end = ne;
        memmove(&b[i + 1], &b[j], (size_t)(n - j) * sizeof *b);
        s->nblk = (uint16_t)(n - (j - i - 1));
    }
    res->new_bytes += len - dup;
    return 0;
}

/* Where assemble's gap skipping would move next, if anywhere: the first
 * buffered block or the floor, whichever comes first, never past the end
 * marker; only when there is a hole at next. */
static int ref__floor_target(const ref_seq *s, uint32_t *target)
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

static void ref_unborrow(ref_seq *s, const rg_seq_cfg *cfg, rg_seq_res *res)
{
    rg_seq_res tmp;
    const uint8_t *p = s->borrow;
    uint32_t n = s->borrow_len;
    s->borrow = NULL;
    s->borrow_len = 0;
    if (!p || !n) return;
    memset(&tmp, 0, sizeof tmp);
    if (ref__place(s, cfg, s->next, p, n, &tmp) < 0 && res) ref__drop_cap(res, n);
}

/* The highest sequence number known to be used: next, the buffered blocks,
 * the end marker and the segment being inserted (if plausible).  A window
 * left edge beyond it is not trusted for gap skipping (a bogus or foreign
 * acknowledgment would otherwise skip up to 2 GiB of stream). */
static uint32_t ref__highest_seen(const ref_seq *s, const rg_seq_cfg *cfg, uint32_t seq,
                                  uint32_t takeup)
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

static uint32_t ref_insert(ref_seq *s, const rg_seq_cfg *cfg, uint32_t seq, const uint8_t *data,
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
    if (s->borrow) ref_unborrow(s, cfg, res);
    if (s->st && s->nblk == 0 && s->st->buf_cap > RG_SEQ_SHRINK_BYTES) {
        free(s->st->data);
        s->st->data = NULL;
        s->st->buf_cap = 0;
    }
    const uint32_t dup0 = res->dup_bytes, new0 = res->new_bytes;

    /* window: right edge trims, left edge past next arms gap skipping */
    if (win && (win->left | win->right)) {
        if (rg_sdiff(win->left, s->next) > 0 &&
            (!(s->flags & RG_SEQF_FLOOR) || rg_sdiff(win->left, s->floor) > 0) &&
            rg_sdiff(win->left, ref__highest_seen(s, cfg, seq, takeup)) <= 0) {
            s->floor = win->left;
            s->flags |= RG_SEQF_FLOOR;
        }
        int32_t room = rg_sdiff(win->right, seq);
        if (room <= 0) {
            ref__drop_oow(res, len);
            return res->flags;
        }
        if ((uint32_t)room < takeup) {
            takeup = (uint32_t)room;
            if (len > takeup) {
                ref__drop_oow(res, len - takeup);
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
        if (below >= takeup) {
            if (takeup) {
                ref__add_dup(res, seq, len);
                res->flags |= RG_SEQ_EV_REXMIT;
            }
            return res->flags;
        }
        uint32_t cut = below < len ? below : len;
        ref__add_dup(res, seq, cut);
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
            ref__drop_oow(res, len);
            len = 0;
        } else if ((uint32_t)de < len) {
            ref__drop_oow(res, len - (uint32_t)de);
            len = (uint32_t)de;
        }
    } else if (phantom) {
        uint32_t highest = s->nblk ? s->st->blk[s->nblk - 1].end : s->next;
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
        if (rel >= maxspan) {
            ref__drop_cap(res, len);
            ref__stall_skip(s);
            len = 0;
        } else if (len > maxspan - rel) {
            ref__drop_cap(res, len - (maxspan - rel));
            ref__stall_skip(s);
            len = maxspan - rel;
        }
        if (len) {
            if ((iflags & RG_SEQ_BORROW) && cfg->buffer_data && s->nblk == 0 && rel == 0) {
                s->borrow = data;
                s->borrow_len = len;
                res->new_bytes += len;
            } else {
                (void)ref__place(s, cfg, seq, data, len, res);
            }
        }
    }

    uint32_t dd = res->dup_bytes - dup0, nn = res->new_bytes - new0;
    if (dd) res->flags |= nn ? RG_SEQ_EV_OVERLAP : RG_SEQ_EV_REXMIT;
    return res->flags;
}

static rg_bytes ref_assemble(ref_seq *s, const rg_seq_cfg *cfg, rg_seq_res *res)
{
    rg_seq_res tmp;
    rg_bytes out;
    out.ptr = rg_empty_byte;
    out.len = 0;
    if (!res) {
        memset(&tmp, 0, sizeof tmp);
        res = &tmp;
    }
    int borrowed = s->borrow != NULL;
    if (borrowed) { /* zero-copy: the caller's bytes, nothing else is buffered */
        out.ptr = s->borrow;
        out.len = s->borrow_len;
        s->next += s->borrow_len;
        res->adv_bytes += s->borrow_len;
        s->borrow = NULL;
        s->borrow_len = 0;
    }
    if (!borrowed || ((s->flags & RG_SEQF_FLOOR) && rg_sdiff(s->floor, s->next) > 0)) {
        /* gap recovery: every hole before the floor in one call, the blocks
         * between them moved together */
        uint32_t target;
        uint8_t *base = NULL;
        uint32_t have = 0;
        for (;;) {
            if (ref__floor_target(s, &target)) {
                res->gap_bytes += target - s->next;
                res->flags |= RG_SEQ_EV_GAP;
                s->next = target;
            }
            if (!(s->nblk && s->st->blk[0].start == s->next)) break;
            ref_store *st = s->st;
            uint32_t n = st->blk[0].end - s->next;
            if (cfg->buffer_data && st->data) {
                uint8_t *p = st->data + (s->next - st->buf_seq);
                if (!base)
                    base = p;
                else if (base + have != p)
                    memmove(base + have, p, n);
                have += n;
            }
            s->next = st->blk[0].end;
            s->nblk--;
            memmove(&st->blk[0], &st->blk[1], (size_t)s->nblk * sizeof st->blk[0]);
            res->adv_bytes += n;
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
    if ((s->flags & (RG_SEQF_END | RG_SEQF_DONE)) == RG_SEQF_END && s->next == s->end) {
        s->next = s->lend;
        s->flags |= RG_SEQF_DONE;
        res->flags |= RG_SEQ_EV_DONE;
    }
    return out;
}

static void ref_free(ref_seq *s)
{
    if (s->st) {
        free(s->st->blk);
        free(s->st->data);
        free(s->st);
    }
    ref_seq_init(s);
}

static void ref_set_base(ref_seq *s, uint32_t next)
{
    s->nblk = 0;
    s->borrow = NULL;
    s->borrow_len = 0;
    s->next = next;
    s->end = s->lend = s->floor = 0;
    s->flags = RG_SEQF_INIT;
}

static uint32_t ref_buffered(const ref_seq *s)
{
    uint32_t n = s->borrow_len;
    for (uint32_t k = 0; k < s->nblk; k++)
        n += s->st->blk[k].end - s->st->blk[k].start;
    return n;
}

static int ref_ready(const ref_seq *s)
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

static int ref_ready_upto(const ref_seq *s, uint32_t upto)
{
    if (!(s->flags & RG_SEQF_INIT)) return 0;
    /* Phantom bytes (a FIN) are never present: the data ends at the marker. */
    if ((s->flags & RG_SEQF_END) && rg_sdiff(upto, s->end) > 0) upto = s->end;
    uint32_t cov = s->next;
    if (s->borrow_len) {
        cov = s->next + s->borrow_len;
    } else if (s->nblk && s->st->blk[0].start == s->next) {
        cov = s->st->blk[0].end;
    }
    /* gap recovery: holes before the floor are settled (they will be skipped) */
    if (s->flags & RG_SEQF_FLOOR) {
        for (uint32_t k = 0; k < s->nblk; k++)
            if (rg_sdiff(s->st->blk[k].start, s->floor) <= 0 &&
                rg_sdiff(s->st->blk[k].end, cov) > 0)
                cov = s->st->blk[k].end;
        if (rg_sdiff(s->floor, cov) > 0) cov = s->floor;
    }
    return rg_sdiff(cov, upto) >= 0;
}

static int ref_pending(const ref_seq *s)
{
    if (s->borrow_len) return 1;
    if (s->nblk && s->st->blk[0].start == s->next) return 1;
    uint32_t target;
    if (ref__floor_target(s, &target)) return 1;
    if ((s->flags & (RG_SEQF_END | RG_SEQF_DONE)) == RG_SEQF_END && s->next == s->end) return 1;
    return 0;
}

#endif
