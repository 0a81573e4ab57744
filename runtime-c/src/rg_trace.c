/* rg_trace.c - the packet trace's recorder (rg_trace.h).
 *
 * One request at a time.  Arming resets a claim counter; each packet that starts while armed
 * claims the next record (an atomic add); a claim past n, or after the request closed (the
 * counter raised by CLOSED), records nothing.  The records live in one buffer kept for the
 * process's life: a packet still running when its request gave up writes into a record nobody
 * reads any more, never into freed memory. */
#include "rg/rg_trace.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rg/rg_api.h"
#include "rg/rg_seq.h"

_Atomic int rg_trace_armed;
_Thread_local rg_trace_pkt *rg_trace_cur;
int rg_trace_built;

static _Thread_local unsigned tl_worker;
static _Thread_local unsigned (*tl_nfs)(const void *, char *, size_t);
static _Thread_local const void *tl_nfs_self;

enum { CLOSED = 1u << 30 };

static struct {
    rg_trace_pkt *recs; /* RG_TRACE_MAX, allocated at the first request */
    unsigned want;
    uint64_t gen;
    _Atomic unsigned claimed;
    _Atomic unsigned done;
} T;

void rg_trace_thread(unsigned worker, unsigned (*nfs)(const void *self, char *buf, size_t n),
                     const void *self)
{
    tl_worker = worker;
    tl_nfs = nfs;
    tl_nfs_self = self;
}

void rg_trace_begin(unsigned entry, const uint8_t *data, uint32_t caplen, uint64_t ts_ns,
                    uint64_t pkt_no)
{
    rg_trace_cur = NULL; /* a packet left without its end (an unknown entry) is not finished */
    const unsigned i = atomic_fetch_add_explicit(&T.claimed, 1, memory_order_acq_rel);
    if (i >= T.want) return;
    rg_trace_pkt *r = &T.recs[i];
    r->pkt_no = pkt_no;
    r->ts_ns = ts_ns;
    r->caplen = caplen;
    r->entry = (uint16_t)entry;
    r->worker = (uint16_t)tl_worker;
    r->rc = 0;
    r->verdict = 0;
    r->nsteps = r->lost = r->nkeys = 0;
    r->gen = T.gen;
    r->frame = data;
    r->nfs[0] = 0;
    rg_trace_cur = r;
}

void rg_trace_end(int rc, int verdict)
{
    rg_trace_pkt *r = rg_trace_cur;
    rg_trace_cur = NULL;
    r->rc = rc;
    r->verdict = verdict;
    r->frame = NULL;
    if (tl_nfs) tl_nfs(tl_nfs_self, r->nfs, sizeof r->nfs);
    atomic_store_explicit(&r->complete, 1, memory_order_release);
    atomic_fetch_add_explicit(&T.done, 1, memory_order_acq_rel);
}

static rg_trace_step *step(int kind, unsigned layer)
{
    rg_trace_pkt *r = rg_trace_cur;
    if (r->nsteps == RG_TRACE_STEPS) {
        r->lost++;
        return NULL;
    }
    rg_trace_step *s = &r->step[r->nsteps++];
    memset(s, 0, sizeof *s);
    s->kind = (uint8_t)kind;
    s->layer = (uint16_t)layer;
    return s;
}

void rg_trace_layer(unsigned layer, const uint8_t *p, uint64_t len)
{
    rg_trace_step *s = step(RG_TR_LAYER, layer);
    if (!s) return;
    const uint8_t *f = rg_trace_cur->frame;
    /* a layer reading a reassembly buffer (IP fragments, a stream) is in no frame offset */
    s->a = f && p >= f && p <= f + rg_trace_cur->caplen ? (uint32_t)(p - f) : UINT32_MAX;
    s->b = len > UINT32_MAX ? UINT32_MAX : (uint32_t)len;
}

void rg_trace_step3(int kind, unsigned layer, uint32_t a, uint32_t b, const char *str,
                    const char *t)
{
    rg_trace_step *s = step(kind, layer);
    if (!s) return;
    s->a = a;
    s->b = b;
    s->s = str;
    s->t = t;
}

void rg_trace_inst(int kind, unsigned layer, const void *vfi, int dir, unsigned key_len)
{
    const rg_flow_info *fi = vfi;
    if (!fi) return; /* a lookup that missed: the create or no-instance step follows */
    rg_trace_step *s = step(kind, layer);
    if (!s) return;
    rg_trace_pkt *r = rg_trace_cur;
    s->uid = fi->uid;
    s->dir = (uint8_t)dir;
    if (fi->key_a && fi->key_p && r->nkeys + 2 * key_len <= sizeof r->keys) {
        s->koff = (uint16_t)r->nkeys;
        s->klen = (uint16_t)key_len;
        memcpy(r->keys + r->nkeys, fi->key_a, key_len);
        memcpy(r->keys + r->nkeys + key_len, fi->key_p, key_len);
        r->nkeys += 2 * key_len;
    } else if (fi->key_a) {
        r->lost++;
    }
}

void rg_trace_seq(unsigned layer, int dir, uint32_t flags, uint32_t seq, uint32_t len,
                  uint32_t next)
{
    rg_trace_step *s = step(RG_TR_SEQ, layer);
    if (!s) return;
    const int32_t d = (int32_t)(seq - next); /* sequence numbers wrap (RFC 1982) */
    s->dir = (uint8_t)dir;
    s->a = flags;
    s->b = d == 0 ? 0 : d > 0 ? 1 : 2;
    s->uid = (uint64_t)seq << 32 | len;
}

int rg_trace_arm(unsigned n)
{
    if (n == 0 || n > RG_TRACE_MAX) return -1;
    if (!T.recs && !(T.recs = calloc(RG_TRACE_MAX, sizeof *T.recs))) return -1;
    for (unsigned i = 0; i < n; i++)
        atomic_store_explicit(&T.recs[i].complete, 0, memory_order_relaxed);
    T.want = n;
    T.gen++;
    atomic_store_explicit(&T.done, 0, memory_order_relaxed);
    /* the records and want are published by the claim counter's reset */
    atomic_store_explicit(&T.claimed, 0, memory_order_release);
    atomic_store_explicit(&rg_trace_armed, 1, memory_order_release);
    return 0;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Until done reaches n or ms milliseconds passed, in naps of 2 ms: the asker waits, the
 * packet path never does. */
static void wait_done(unsigned n, unsigned ms)
{
    const uint64_t end = now_ms() + ms;
    while (atomic_load(&T.done) < n && now_ms() < end) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
}

unsigned rg_trace_collect(unsigned timeout_ms, const rg_trace_pkt **out, unsigned max)
{
    wait_done(T.want, timeout_ms);
    atomic_store(&rg_trace_armed, 0);
    /* no claim after this one counts: the packets that claimed before it finish (a packet
     * takes microseconds; a second at most, or their records are left out) */
    unsigned claimed = atomic_fetch_add(&T.claimed, CLOSED);
    if (claimed > T.want) claimed = T.want;
    wait_done(claimed, 1000);
    unsigned k = 0;
    for (unsigned i = 0; i < claimed && k < max; i++)
        if (atomic_load_explicit(&T.recs[i].complete, memory_order_acquire) &&
            T.recs[i].gen == T.gen)
            out[k++] = &T.recs[i];
    return k;
}
