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
    const int inl = in_if >= 0;
    if (inl && !r->q) {
        r->q = malloc(sizeof *r->q * 2u * RG_BURST_MAX);
        if (!r->q) return;
    }
    for (unsigned k = 0; k < r->out.n; k++) {
        rg_frame rf = {r->out.frame[k], r->out.len[k], r->out.len[k], f->ts_ns, f->dlt};
        r->replies++;
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
