/* rg_ring.c - single-producer single-consumer frame ring (see rg_ring.h). */
#include "rg/rg_ring.h"

#include <stdlib.h>
#include <string.h>

enum { REC_FRAME = 1, REC_WRAP = 2 };

/* What precedes a frame's bytes in the ring. */
typedef struct rec {
    uint32_t caplen, len;
    uint64_t ts_ns;
    int32_t dlt;
    uint32_t kind;
    uint64_t seq; /* the producer's number for the frame (rg_ring_push_seq) */
} rec;

#define REC_HDR ((uint64_t)sizeof(rec))

_Static_assert(sizeof(rec) % 8 == 0, "records stay 8-byte aligned");

int rg_ring_init(rg_ring *r, size_t size)
{
    memset(r, 0, sizeof *r);
    uint64_t n = 65536;
    while (n < size)
        n <<= 1;
    r->buf = aligned_alloc(64, n);
    if (!r->buf) return RG_ENOMEM;
    r->size = n;
    atomic_init(&r->head, 0);
    atomic_init(&r->tail, 0);
    return RG_OK;
}

void rg_ring_free(rg_ring *r)
{
    free(r->buf);
    r->buf = NULL;
}

static uint64_t rec_size(uint32_t caplen)
{
    return REC_HDR + (((uint64_t)caplen + 7) & ~(uint64_t)7);
}

int rg_ring_push(rg_ring *r, const rg_frame *f)
{
    return rg_ring_push_seq(r, f, 0);
}

int rg_ring_push_seq(rg_ring *r, const rg_frame *f, uint64_t seq)
{
    uint64_t need = rec_size(f->caplen);
    if (need > r->size / 2) return RG_EINVAL;
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    uint64_t pos = head & (r->size - 1), to_end = r->size - pos;
    uint64_t skip = to_end < need ? to_end : 0; /* the record never straddles the end */
    if (head + skip + need - tail > r->size) return 0;
    if (skip) {
        if (skip >= REC_HDR) {
            rec w = {.kind = REC_WRAP};
            memcpy(r->buf + pos, &w, sizeof w);
        } /* shorter than a header: the consumer skips it without a marker */
        pos = 0;
    }
    rec h = {f->caplen, f->len, f->ts_ns, f->dlt, REC_FRAME, seq};
    memcpy(r->buf + pos, &h, sizeof h);
    memcpy(r->buf + pos + REC_HDR, f->data, f->caplen);
    atomic_store_explicit(&r->head, head + skip + need, memory_order_release);
    return 1;
}

int rg_ring_peek(rg_ring *r, rg_frame *f)
{
    uint64_t seq;
    return rg_ring_peek_seq(r, f, &seq);
}

int rg_ring_peek_seq(rg_ring *r, rg_frame *f, uint64_t *seq)
{
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    for (;;) {
        uint64_t at = tail + r->peeked;
        if (at == head) return 0;
        uint64_t pos = at & (r->size - 1), to_end = r->size - pos;
        if (to_end < REC_HDR) {
            r->peeked += to_end;
            continue;
        }
        rec h;
        memcpy(&h, r->buf + pos, sizeof h);
        if (h.kind == REC_WRAP) {
            r->peeked += to_end;
            continue;
        }
        f->data = r->buf + pos + REC_HDR;
        f->caplen = h.caplen;
        f->len = h.len;
        f->ts_ns = h.ts_ns;
        f->dlt = h.dlt;
        *seq = h.seq;
        r->peeked += rec_size(h.caplen);
        return 1;
    }
}

void rg_ring_release(rg_ring *r)
{
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    atomic_store_explicit(&r->tail, tail + r->peeked, memory_order_release);
    r->peeked = 0;
}
