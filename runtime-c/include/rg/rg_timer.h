/* rg_timer.h - idle timeouts driven by packet timestamps.
 *
 * One intrusive LRU list per timeout class (e.g. one class per layer, or per
 * PSM state group such as TCP "established" vs "closing").  Because every
 * node of a class has the same timeout, the list ordered by last touch is
 * also ordered by deadline, so:
 *   touch   O(1): stamp the node and move it to the head of its class;
 *   remove  O(1), idempotent (a zeroed or removed node is simply unlinked);
 *   expire  O(expired + classes), O(1) when nothing is due (cached minimum).
 *
 * Nodes are embedded in instance payloads; an all-zero node is a valid
 * unlinked node, so a zero-initialised instance needs no set-up.  Expiry
 * unlinks a node *before* calling back, so the callback may destroy the
 * instance (and call rg_timer_remove on it again) safely.
 *
 * The clock is the maximum packet timestamp seen (nanoseconds); timestamps
 * that go backwards do not move it back.  No system calls. */
#ifndef RG_TIMER_H
#define RG_TIMER_H

#include "rg_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RG_TIMER_MAX_CLASSES 16

typedef struct rg_tnode {
    struct rg_tnode *prev, *next; /* NULL when unlinked */
    uint64_t t;                   /* last touch */
    uint32_t cls;
    uint32_t pad_;
} rg_tnode;

typedef struct rg_tclass {
    uint64_t timeout; /* ns; 0 = never expires */
    rg_tnode head;    /* sentinel: head.next = most recent, head.prev = oldest */
    uint64_t count;
} rg_tclass;

typedef struct rg_timer {
    uint64_t now;
    uint64_t next_due; /* lower bound of the earliest deadline */
    uint32_t ncls;
    rg_tclass cls[RG_TIMER_MAX_CLASSES];
} rg_timer;

/* Set up n classes (n <= RG_TIMER_MAX_CLASSES) with the given timeouts.  The
 * timer holds self-pointers: do not copy or move it after init. */
int rg_timer_init(rg_timer *tm, const uint64_t *timeouts_ns, uint32_t n);
/* Change a class's timeout (applies to the next expire). */
void rg_timer_set_timeout(rg_timer *tm, uint32_t cls, uint64_t timeout_ns);

RG_INLINE void rg_timer_set_time(rg_timer *tm, uint64_t now_ns)
{
    if (now_ns > tm->now) tm->now = now_ns;
}

RG_INLINE int rg_timer_linked(const rg_tnode *n)
{
    return n->next != NULL;
}

RG_INLINE void rg_timer__unlink(rg_timer *tm, rg_tnode *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = NULL;
    tm->cls[n->cls].count--;
}

/* Stamp n with the current clock and make it the most recent node of class
 * cls (moving it from its old class if different).  Out-of-range classes
 * are ignored. */
RG_INLINE void rg_timer_touch(rg_timer *tm, rg_tnode *n, uint32_t cls)
{
    if (RG_UNLIKELY(cls >= tm->ncls)) return;
    rg_tclass *c = &tm->cls[cls];
    n->t = tm->now;
    if (n->next) {
        if (n->cls == cls && c->head.next == n) return; /* already most recent */
        rg_timer__unlink(tm, n);
    }
    n->cls = cls;
    n->prev = &c->head;
    n->next = c->head.next;
    c->head.next->prev = n;
    c->head.next = n;
    c->count++;
    if (c->timeout) {
        uint64_t due = tm->now + c->timeout;
        if (due < tm->next_due) tm->next_due = due;
    }
}

/* Unlink n (no-op when it is not linked). */
RG_INLINE void rg_timer_remove(rg_timer *tm, rg_tnode *n)
{
    if (n->next) rg_timer__unlink(tm, n);
}

typedef void (*rg_timer_cb)(void *ctx, rg_tnode *n, uint32_t cls);

/* Advance the clock to now and expire every node idle for at least its class
 * timeout, earliest deadline first (ties: lower class first), calling cb for
 * each after unlinking it.  At most max nodes (0 = no limit).  Returns the
 * number expired. */
size_t rg_timer_expire(rg_timer *tm, uint64_t now, rg_timer_cb cb, void *ctx, size_t max);

/* True when rg_timer_expire(now) might expire something (cheap check). */
RG_INLINE int rg_timer_due(const rg_timer *tm, uint64_t now)
{
    return now >= tm->next_due;
}

/* Expire everything regardless of time (shutdown), class order. */
size_t rg_timer_flush(rg_timer *tm, rg_timer_cb cb, void *ctx);

/* Nodes linked in a class / in total. */
RG_INLINE uint64_t rg_timer_count(const rg_timer *tm, uint32_t cls)
{
    return cls < tm->ncls ? tm->cls[cls].count : 0;
}
uint64_t rg_timer_total(const rg_timer *tm);

/* Earliest deadline of any linked node, UINT64_MAX when none. */
uint64_t rg_timer_next_deadline(const rg_timer *tm);

/* ---- the flow clock: packet time that one packet cannot push around ----
 *
 * Packet timestamps come from the traffic (or a capture file), so one packet
 * dated a year ahead would expire every instance at once and, time being
 * monotonic, leave every later (correct) packet "in the past" so that nothing
 * expires again.  The clock follows packet time through an offset: a packet
 * maps to ts + off.  Within max_jump of the clock (either way) nothing special
 * happens: later times advance it, earlier ones (reordering between
 * interfaces) leave it.  A packet beyond max_jump is a jump: it is counted,
 * placed at the current clock (the clock does not move: a date that far off
 * cannot be trusted) and the offset is rebased so that the packets after it
 * advance the clock from there, at their own pace.  A packet after a jump
 * that is within max_jump of the clock by the offset from before the jump
 * puts that offset back, uncounted: one packet dated far off in normal
 * traffic is then one jump and changes nothing else.  A genuine pause in a
 * capture longer than max_jump therefore delays expiry by the pause instead
 * of expiring every instance alive across it.  max_jump = UINT64_MAX turns
 * the guard off (the clock is then the maximum timestamp seen).
 *
 * Re-synchronisation: a jump is pending until either a packet fits the
 * offset from before it (a lone outlier: dismissed, as above) or
 * RG_CLOCK_RESYNC_PKTS packets, or RG_CLOCK_RESYNC_NS of clock time, agree
 * with the new offset without one fitting the old: the capture's time base
 * changed for good.  The clock then re-synchronises to that base (counted in
 * resyncs; base: the first packet timestamp of it): the old offset is
 * forgotten, so a later packet dated in the old base is a jump of its own,
 * and the clock keeps advancing at the new base's pace (instances idle
 * across the shift keep their idle time: no mass expiry).  While a jump is
 * pending every packet takes the out-of-line path (steady = 0); in steady
 * state the inline path is as before. */
#define RG_CLOCK_DEFAULT_MAX_JUMP (UINT64_C(300) * 1000000000u) /* 300 s */
#define RG_CLOCK_RESYNC_PKTS      16u                           /* packets agreeing */
#define RG_CLOCK_RESYNC_NS        (UINT64_C(60) * 1000000000u)  /* or 60 s of them */

/* rg_clock_packet's results */
#define RG_CLOCK_JUMP   1 /* this packet jumped (counted in jumps_fwd / jumps_back) */
#define RG_CLOCK_RESYNC 2 /* this packet confirmed a new time base (counted in resyncs) */

typedef struct rg_clock {
    uint64_t now;      /* the flow clock (ns) */
    uint64_t off;      /* added to packet timestamps, modulo 2^64 */
    uint64_t off_prev; /* the offset before the last jump */
    uint64_t max_jump; /* ns; UINT64_MAX = no guard */
    uint64_t jumps_fwd, jumps_back;
    uint64_t last_ts; /* the packet timestamp of the last jump */
    uint64_t resyncs; /* new time bases followed */
    uint64_t base;    /* the first packet timestamp of the last base followed (last_ts then) */
    uint64_t pend_t0; /* the clock when the pending jump came */
    uint32_t pend_n;  /* packets that agreed with the pending jump's offset */
    uint8_t started;  /* a first packet has set the clock */
    uint8_t steady;   /* started, and no jump pending: the inline path decides */
    uint8_t last_fwd; /* the last jump went forward */
} rg_clock;

/* max_jump_ns 0 = RG_CLOCK_DEFAULT_MAX_JUMP. */
void rg_clock_init(rg_clock *c, uint64_t max_jump_ns);
/* Out of line: the first packet, jumps and pending jumps (rg_clock_packet's result). */
int rg_clock__slow(rg_clock *c, uint64_t ts_ns);

/* One packet's timestamp: RG_CLOCK_JUMP when it was a jump, RG_CLOCK_RESYNC
 * when it confirmed a new time base, else 0.  The clock is c->now
 * afterwards. */
RG_INLINE int rg_clock_packet(rg_clock *c, uint64_t ts_ns)
{
    const uint64_t t = ts_ns + c->off;
    if (RG_LIKELY(c->steady)) {
        if (t >= c->now) {
            if (RG_LIKELY(t - c->now <= c->max_jump)) {
                c->now = t;
                return 0;
            }
        } else if (RG_LIKELY(c->now - t <= c->max_jump)) {
            return 0;
        }
    }
    return rg_clock__slow(c, ts_ns);
}

/* Advance to a time that is not a packet's (an expiry tick): like a packet
 * within max_jump, ignored beyond it (the packets decide about jumps). */
RG_INLINE void rg_clock_tick(rg_clock *c, uint64_t ts_ns)
{
    const uint64_t t = ts_ns + c->off;
    if (c->started && t > c->now && t - c->now <= c->max_jump) c->now = t;
}

/* Convenience: the struct containing a node. */
#define RG_TIMER_CONTAINER(ptr, type, member)                                                      \
    ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

#ifdef __cplusplus
}
#endif
#endif /* RG_TIMER_H */
