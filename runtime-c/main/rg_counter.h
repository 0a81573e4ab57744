/* rg_counter.h - the driver's own observer: the numbers of its summary and
 * of --bench (handler calls, instances per layer by close reason, payload
 * bytes, gaps).  It is always attached, alone (--nf count), without its
 * per-call callback (--nf none) or chained before the chosen NF. */
#ifndef RG_COUNTER_H
#define RG_COUNTER_H

#include "rg/rg_api.h"

/* Instances of one layer. */
typedef struct rg_layer_counts {
    uint64_t opened;
    uint64_t closed[4];  /* by close reason: RG_CLOSE_ACCEPT, _EVICTED, _EXPIRED, _FLUSHED */
    uint64_t one_packet; /* closed while the packet that opened them was processed (an
                            unfragmented IP datagram): not flows */
    uint64_t lingering;  /* closed by their accept state, lingering (spec linger:) when the
                            counts were folded: closed, though observers see it at the flush */
} rg_layer_counts;

typedef struct rg_counts {
    uint64_t calls;         /* handler calls */
    uint64_t opened;        /* instances created */
    uint64_t closed;        /* instances ended, for any reason */
    uint64_t payload_bytes; /* total length of the calls' "data" arguments (rg_obs.h) */
    uint64_t gaps;          /* holes skipped (on_gap) */
    uint64_t gap_bytes;     /* bytes in them */
    rg_layer_counts *layer; /* per layer, by index (rg_stack_desc.nlayers entries) */
    /* Instances that close with a uid above uid_mark count as one_packet: the
     * driver sets uid_mark = uid_max before each packet (uids grow in
     * creation order within a context). */
    uint64_t uid_max; /* the highest uid opened */
    uint64_t uid_mark;
} rg_counts;

typedef struct rg_counter {
    rg_counts n;
    const rg_stack_desc *stack;
    int16_t *data_arg; /* per handler: index of its "data" argument or -1 */
} rg_counter;

/* RG_OK or RG_ENOMEM. */
int rg_counter_init(rg_counter *c, const rg_stack_desc *stack);
void rg_counter_free(rg_counter *c);
/* The observer of c (self = c); calls = 0: without on_call (--nf none). */
rg_obs rg_counter_obs(rg_counter *c, int calls);

/* Once per context, after its last packet (before reading c's counts): add the one-packet
 * instances its stack did not show the counter (rg_obs.quiet_transient) from the context's
 * stats st (NULL: none).  Each is opened, closed by RG_CLOSE_ACCEPT and one_packet. */
void rg_counter_fold(rg_counter *c, const rg_stats *st);

/* Flows: instances that outlived the packet that opened them. */
static inline uint64_t rg_layer_flows(const rg_layer_counts *l)
{
    return l->opened - l->one_packet;
}

#endif /* RG_COUNTER_H */
