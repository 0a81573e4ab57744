/* rg_timer.c - idle timeouts (see rg_timer.h). */
#include "rg/rg_timer.h"

#include <string.h>

int rg_timer_init(rg_timer *tm, const uint64_t *timeouts_ns, uint32_t n)
{
    if (n > RG_TIMER_MAX_CLASSES) return RG_EINVAL;
    memset(tm, 0, sizeof *tm);
    tm->ncls = n;
    tm->next_due = UINT64_MAX;
    for (uint32_t i = 0; i < n; i++) {
        tm->cls[i].timeout = timeouts_ns ? timeouts_ns[i] : 0;
        tm->cls[i].head.prev = tm->cls[i].head.next = &tm->cls[i].head;
        tm->cls[i].head.cls = i;
    }
    return RG_OK;
}

void rg_timer_set_timeout(rg_timer *tm, uint32_t cls, uint64_t timeout_ns)
{
    if (cls >= tm->ncls) return;
    tm->cls[cls].timeout = timeout_ns;
    tm->next_due = 0; /* recomputed by the next expire */
}

static uint64_t class_due(const rg_tclass *c)
{
    if (!c->timeout || c->head.prev == &c->head) return UINT64_MAX;
    uint64_t t = c->head.prev->t;
    return t > UINT64_MAX - c->timeout ? UINT64_MAX : t + c->timeout;
}

uint64_t rg_timer_next_deadline(const rg_timer *tm)
{
    uint64_t best = UINT64_MAX;
    for (uint32_t i = 0; i < tm->ncls; i++) {
        uint64_t d = class_due(&tm->cls[i]);
        if (d < best) best = d;
    }
    return best;
}

size_t rg_timer_expire(rg_timer *tm, uint64_t now, rg_timer_cb cb, void *ctx, size_t max)
{
    size_t n = 0;
    rg_timer_set_time(tm, now);
    if (tm->now < tm->next_due) return 0;
    for (;;) {
        if (max && n >= max) break;
        uint32_t best = UINT32_MAX;
        uint64_t best_due = UINT64_MAX;
        for (uint32_t i = 0; i < tm->ncls; i++) {
            uint64_t d = class_due(&tm->cls[i]);
            if (d < best_due) {
                best_due = d;
                best = i;
            }
        }
        if (best == UINT32_MAX || best_due > tm->now) break;
        rg_tnode *victim = tm->cls[best].head.prev;
        rg_timer__unlink(tm, victim);
        n++;
        if (cb) cb(ctx, victim, best);
    }
    tm->next_due = rg_timer_next_deadline(tm);
    return n;
}

size_t rg_timer_flush(rg_timer *tm, rg_timer_cb cb, void *ctx)
{
    size_t n = 0;
    for (uint32_t i = 0; i < tm->ncls; i++) {
        rg_tclass *c = &tm->cls[i];
        while (c->head.prev != &c->head) {
            rg_tnode *victim = c->head.prev;
            rg_timer__unlink(tm, victim);
            n++;
            if (cb) cb(ctx, victim, i);
        }
    }
    tm->next_due = UINT64_MAX;
    return n;
}

uint64_t rg_timer_total(const rg_timer *tm)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < tm->ncls; i++)
        n += tm->cls[i].count;
    return n;
}

void rg_clock_init(rg_clock *c, uint64_t max_jump_ns)
{
    memset(c, 0, sizeof *c);
    c->max_jump = max_jump_ns ? max_jump_ns : RG_CLOCK_DEFAULT_MAX_JUMP;
}

/* t (a packet's time by some offset) within max_jump of the clock: advance to it if later. */
static int clock_fits(rg_clock *c, uint64_t t)
{
    if (t - c->now <= c->max_jump) {
        c->now = t;
        return 1;
    }
    return c->now - t <= c->max_jump;
}

int rg_clock__slow(rg_clock *c, uint64_t ts_ns)
{
    if (!c->started) { /* the first packet sets the clock, whatever its date */
        c->started = c->steady = 1;
        c->now = ts_ns + c->off; /* off: 0, or one set from outside (rg_stack_desc.clock_offset) */
        return 0;
    }
    if (!c->steady) { /* a jump is pending */
        /* the offset from before it fits: that jump was a lone packet dated far off */
        if (clock_fits(c, ts_ns + c->off_prev)) {
            c->off = c->off_prev;
            c->steady = 1;
            return 0;
        }
        if (clock_fits(c, ts_ns + c->off)) { /* agrees with the new base */
            if (++c->pend_n < RG_CLOCK_RESYNC_PKTS && c->now - c->pend_t0 < RG_CLOCK_RESYNC_NS)
                return 0;
            c->off_prev = c->off; /* the old base is forgotten */
            c->base = c->last_ts;
            c->resyncs++;
            c->steady = 1;
            return RG_CLOCK_RESYNC;
        }
    }
    const uint64_t t = ts_ns + c->off;
    /* the direction modulo 2^64: the offset may make small timestamps wrap */
    c->last_fwd = t - c->now < UINT64_C(1) << 63;
    if (c->last_fwd)
        c->jumps_fwd++;
    else
        c->jumps_back++;
    c->last_ts = ts_ns;
    if (c->steady) c->off_prev = c->off; /* a jump on a pending one keeps the base before both */
    c->off = c->now - ts_ns;             /* this packet maps to now; the next ones follow it */
    c->steady = 0;
    c->pend_n = 0;
    c->pend_t0 = c->now;
    return RG_CLOCK_JUMP;
}
