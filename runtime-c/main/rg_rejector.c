/* rg_rejector.c - the driver's side of reject verdicts (rg_driver.h, rg_reject.h): replies
 * built, rate-limited by packet time, written in order with --write and sent back inline. */
#include <stdlib.h>
#include <string.h>

#include "rg_driver.h"

void rg_rejector_init(rg_rejector *r, uint64_t rate)
{
    memset(r, 0, sizeof *r);
    rg_reject_rate_init(&r->rate, rate);
}

void rg_rejector_free(rg_rejector *r)
{
    free(r->q);
    r->q = NULL;
    r->nq = 0;
}

/* r->out's frames that go to the sides in mask (bit 0: the sender, bit 1: the receiver),
 * written and queued; how many. */
static unsigned emit(rg_rejector *r, const rg_frame *f, rg_writer *w, int in_if, unsigned mask)
{
    unsigned sent = 0;
    const int inl = in_if >= 0;
    if (inl && !r->q) {
        r->q = malloc(sizeof *r->q * 2u * RG_BURST_MAX);
        if (!r->q) return 0;
    }
    for (unsigned k = 0; k < r->out.n; k++) {
        if (!(mask >> (r->out.to_receiver[k] ? 1 : 0) & 1)) continue;
        rg_frame rf = {r->out.frame[k], r->out.len[k], r->out.len[k], f->ts_ns, f->dlt};
        sent++;
        if (w) rg_writer_put_reply(w, &rf);
        if (inl && r->nq < 2u * RG_BURST_MAX) {
            struct rg_reject_q *x = &r->q[r->nq++];
            /* forward_one sends to the peer of `from`: the sender's interface is the peer of
             * the other one */
            x->from = r->out.to_receiver[k] ? (unsigned)in_if : 1u - (unsigned)in_if;
            x->len = rf.len;
            x->ts_ns = rf.ts_ns;
            x->dlt = rf.dlt;
            memcpy(x->data, rf.data, rf.len);
        }
    }
    return sent;
}

void rg_rejector_inject(rg_rejector *r, const rg_frame *f, unsigned what, rg_writer *w, int in_if)
{
    /* the receiver's RST comes with the sender's (RG_REJECT_F_BOTH): keep the sides asked */
    unsigned flags = what & 2u ? RG_REJECT_F_BOTH : 0;
    if (!rg_reject_build(f->dlt, f->data, f->caplen, flags, &r->out)) {
        r->inject_none++;
        return;
    }
    r->injected += emit(r, f, w, in_if, what & 3u);
}

void rg_rejector_answer(rg_rejector *r, const rg_frame *f, int v, rg_writer *w, int in_if)
{
    r->rejected++;
    /* the bucket is asked only for packets that have an answer: a flood of ICMP errors
     * (never answered) takes no token from the rejects that are */
    if (!rg_reject_build(f->dlt, f->data, f->caplen, RG_REJECT_FLAGS(v) & 3u, &r->out)) {
        r->unanswerable++;
        return;
    }
    if (!rg_reject_rate_take(&r->rate, f->ts_ns)) {
        r->limited++;
        return;
    }
    r->answered++;
    r->replies += emit(r, f, w, in_if, 3u);
}

void rg_rejector_flush(rg_rejector *r, rg_source *src, const rg_source_ops *ops)
{
    for (unsigned k = 0; k < r->nq; k++) {
        const struct rg_reject_q *x = &r->q[k];
        rg_frame rf = {x->data, x->len, x->len, x->ts_ns, x->dlt};
        ops->forward_one(src, &rf, x->from, 0);
        r->sent_inline++;
    }
    r->nq = 0;
}
