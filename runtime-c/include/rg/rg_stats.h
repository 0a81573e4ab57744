/* rg_stats.h - runtime counters.
 *
 * One rg_stats per worker context (no globals), one rg_layer_stats per
 * layer.  Increments are plain inline adds; nothing here allocates after
 * rg_stats_new. */
#ifndef RG_STATS_H
#define RG_STATS_H

#include <stdio.h>

#include "rg_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Error reasons.  Generated code may use reasons from RG_REASON_USER up to
 * RG_REASON_MAX - 1 for its own, naming them with rg_stats_set_reason_name. */
enum rg_reason {
    RG_REASON_TRUNCATED = 0, /* header or field past the end of the packet */
    RG_REASON_MALFORMED,     /* a field has an impossible value */
    RG_REASON_UNSUPPORTED,   /* link type / protocol the stack does not handle */
    RG_REASON_NO_INSTANCE,   /* lookup missed and no instance may be created */
    RG_REASON_CAP,           /* instance pool or buffer cap reached */
    RG_REASON_PSM_FAIL,      /* no PSM transition matched */
    RG_REASON_CHECKSUM,      /* checksum mismatch */
    RG_REASON_OTHER,
    RG_REASON_USER, /* first reason free for generated code */
    RG_REASON_MAX = 16
};

/* Instance counters.  destroyed counts every removal (explicit delete,
 * eviction, expiry, flush); evicted and expired are subsets of it.
 * live == created - destroyed. */
typedef struct rg_inst_stats {
    uint64_t live;
    uint64_t peak_live;
    uint64_t created;
    uint64_t destroyed;
    uint64_t evicted;
    uint64_t expired;
    uint64_t create_failed; /* pool full and eviction disabled */
    uint64_t record_bytes;  /* bytes per instance record (set by rg_flow_new; not printed) */
} rg_inst_stats;

/* Sequence (reassembly) counters, in bytes unless noted. */
typedef struct rg_seq_stats {
    uint64_t inserts;       /* insert calls */
    uint64_t rexmit;        /* inserts flagged retransmission */
    uint64_t overlap;       /* inserts flagged partial overlap */
    uint64_t out_of_window; /* inserts flagged out-of-window / past end */
    uint64_t buffer_full;   /* inserts flagged cap exceeded */
    uint64_t conflict;      /* inserts whose overlap differed in content */
    uint64_t bytes_new;     /* accepted new bytes */
    uint64_t bytes_dup;     /* already-seen bytes */
    uint64_t bytes_dropped; /* dropped: window, end marker, caps */
    uint64_t bytes_skipped; /* holes skipped by ACK-driven gap skipping */
    uint64_t bytes_delivered;
} rg_seq_stats;

/* Memory caps (issue 14): what a context does when an allocation would pass
 * its reassembly or flow-table memcap (rg_seq_heap in rg_seq.h).  The
 * values are the order of RG_MEMCAP_POLICY_NAMES. */
enum rg_memcap_policy {
    RG_MEMCAP_DROP_FLOW = 0,    /* stop inspecting the instance (buffers freed) */
    RG_MEMCAP_EVICT_OLDEST = 1, /* evict least recently active instances first */
    RG_MEMCAP_BYPASS = 2,       /* stop reassembling, keep the instance's state */
    RG_MEMCAP_IGNORE = 3,       /* count only: the allocation proceeds */
    RG_MEMCAP_POLICIES = 4
};
#define RG_MEMCAP_POLICY_NAMES                                                                     \
    {                                                                                              \
        "drop-flow", "evict-oldest", "bypass", "ignore"                                            \
    }

/* Per-layer memory accounting and what the memcaps did (bytes unless noted). */
typedef struct rg_mem_stats {
    uint64_t seq_bytes, seq_peak;     /* reassembly buffers of the layer's sequences */
    uint64_t flow_bytes, flow_peak;   /* instance records touched + the key index */
    uint64_t cap_hits;                /* allocations that would have passed a memcap */
    uint64_t act[RG_MEMCAP_POLICIES]; /* policy actions (per policy; instances or allocations) */
    uint64_t evicted;                 /* instances of the layer evicted to make room */
    uint64_t dropped_pkts;            /* packets of dropped (drop-flow) instances */
    /* of evicted: records of closed instances whose linger ended (spec linger:; already
     * closed by their accept state, so not closed again as evicted; appended: issue 27) */
    uint64_t evicted_closed;
} rg_mem_stats;

typedef struct rg_layer_stats {
    const char *name;
    uint64_t packets; /* packets that reached this layer */
    uint64_t bytes;   /* bytes (of the layer's input) that reached it */
    uint64_t errors;  /* sum of errors[] */
    uint64_t error[RG_REASON_MAX];
    uint64_t events; /* events raised */
    rg_inst_stats inst;
    rg_seq_stats seq;
    /* packets of instances a flow verdict marked, stopped at the lookup */
    uint64_t dropped_by_verdict; /* RG_DROP_FLOW: dropped */
    uint64_t bypassed;           /* RG_BYPASS_FLOW: passed without inspection */
    uint64_t checksum_bad;       /* checksums that did not verify (--checksums; rg_csum.h) */
    rg_mem_stats mem;            /* memcaps (appended: issue 14) */
    /* one-packet instances the observer was not shown (rg_obs.quiet_transient; appended:
     * issue 13): created and ended (RG_CLOSE_ACCEPT) by one packet, also in inst */
    uint64_t transient;
    /* late packets: packets of a closed instance that lingers (spec linger:), counted on it */
    uint64_t late;
    uint64_t lingering; /* closed instances lingering now (a gauge) */
} rg_layer_stats;

typedef struct rg_stats {
    uint64_t packets; /* packets given to the stack */
    uint64_t bytes;   /* captured bytes given to the stack */
    /* packets whose timestamp jumped beyond the clock guard (rg_clock) */
    uint64_t clock_jumps_fwd, clock_jumps_back;
    uint64_t clock_resyncs; /* new time bases the clock re-synchronised to */
    uint32_t nlayers;
    const char *reason_name[RG_REASON_MAX];
    rg_layer_stats *layer; /* nlayers entries */
    /* rules compiled into the stack (docs/rules.md): hits per rule, owned by the context */
    uint32_t nrules;
    const char *const *rule_name;
    const char *const *rule_action;
    uint64_t *rule_hits;
    /* memcaps (rg_seq_heap; appended: issue 14): the caps in force (bytes, 0 = none), the
     * policy, and the context's peaks of accounted bytes */
    uint64_t mem_cap_seq, mem_cap_flows;
    int mem_policy;
    uint64_t mem_seq_peak, mem_flow_peak;
    uint64_t rule_reloads; /* rule sets swapped in since the start (rg_rules.h; appended) */
} rg_stats;

/* Allocate counters for nlayers layers; names may be NULL (layers then print
 * as "layerN").  The name pointers are kept, not copied. */
rg_stats *rg_stats_new(uint32_t nlayers, const char *const *names);
void rg_stats_free(rg_stats *s);
/* Add from's per-layer counters and memory peaks to into's (both of the same stack): the
 * totals of several workers' contexts.  Names, record sizes, caps and rules are into's; peaks
 * (live instances, accounted bytes) add up to a bound of the workers' peak together. */
void rg_stats_add(rg_stats *into, const rg_stats *from);
void rg_stats_reset(rg_stats *s);
void rg_stats_set_reason_name(rg_stats *s, unsigned reason, const char *name);
const char *rg_stats_reason_name(const rg_stats *s, unsigned reason);

RG_INLINE void rg_stats_packet(rg_stats *s, size_t bytes)
{
    s->packets++;
    s->bytes += bytes;
}
RG_INLINE void rg_stats_layer_packet(rg_layer_stats *l, size_t bytes)
{
    l->packets++;
    l->bytes += bytes;
}
RG_INLINE void rg_stats_error(rg_layer_stats *l, unsigned reason)
{
    if (reason >= RG_REASON_MAX) reason = RG_REASON_OTHER;
    l->error[reason]++;
    l->errors++;
}

/* Totals over all layers. */
void rg_stats_sum_inst(const rg_stats *s, rg_inst_stats *out);
uint64_t rg_stats_total_errors(const rg_stats *s);

/* Human-readable table (non-zero counters only). */
void rg_stats_print(const rg_stats *s, FILE *out);
/* One JSON object, no trailing newline. */
void rg_stats_json(const rg_stats *s, FILE *out);

#ifdef __cplusplus
}
#endif
#endif /* RG_STATS_H */
