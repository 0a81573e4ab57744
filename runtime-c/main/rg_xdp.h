/* rg_xdp.h - --xdp OBJ (rg_xdp.c, its own archive build/librgxdp.a linked with libbpf only
 * into binaries built for it: rubikgen run --xdp): the stack's XDP program (rubikgen build
 * --xdp, docs/xdp.md) attached to the capture interface, its flow maps filled with the flows
 * user space gave RG_DROP_FLOW or RG_BYPASS_FLOW, their kernel counts given back to the
 * records when the flows end.  Free of libbpf's and libpcap's headers (they clash). */
#ifndef RG_XDP_H
#define RG_XDP_H

#include <stddef.h>
#include <stdint.h>

#include "rg/rg_api.h"

enum { RG_XDP_AUTO = 0, RG_XDP_GENERIC = 1, RG_XDP_NATIVE = 2 };
/* rg_stats of the program (backend/ebpf/prelude.py RGX_ST_*) */
enum { RG_XDP_NSTATS = 7 };
/* their names in the summary, stats.jsonl and /metrics (STACK_xdp.json "stats") */
#define RG_XDP_STAT_NAMES                                                                          \
    {                                                                                              \
        "packets", "rule_drop", "rule_pass", "flow_drop", "bypass", "deferred", "no_rule"          \
    }

typedef struct rg_xdp_cfg {
    const char *obj;   /* STACK_xdp.o */
    const char *iface; /* the capture interface */
    int mode;          /* RG_XDP_* */
    const char *flows; /* --xdp-flows: the layers the program keys (comma-separated names);
                          NULL: every layer with a selector of at most 40 bytes */
    int bypass_drop;   /* a bypassed frame is dropped at XDP (the source reads what XDP
                          passes: libpcap, AF_PACKET) */
} rg_xdp_cfg;

/* What the run's summary shows (rg_summary.c). */
typedef struct rg_xdp_counts {
    uint64_t stat[RG_XDP_NSTATS];          /* packets, rule_drop, rule_pass, flow_drop, bypass,
                                              deferred, no_rule */
    uint64_t drop_flows, bypass_flows;     /* flows put into rg_drop / rg_bypass */
    uint64_t kernel_packets, kernel_bytes; /* their frames the kernel handled (read back) */
    uint64_t map_errors;                   /* updates the kernel refused (map full...) */
    const char *mode;                      /* "generic" or "native" */
} rg_xdp_counts;

typedef struct rg_xdp rg_xdp;

typedef struct rg_xdp_ops {
    /* load and attach; inner: the observer to wrap.  NULL with the reason in err */
    rg_xdp *(*open)(const rg_xdp_cfg *cfg, const rg_stack_desc *stack, const rg_obs *inner,
                    char *err, size_t errlen);
    const rg_obs *(*obs)(rg_xdp *x); /* what the stack calls */
    /* the feeder's batch_end: after each packet (runs `end` first: the chain's verdicts) */
    void (*packet_end)(void *self);
    void (*chain_end)(rg_xdp *x, void (*end)(void *self), void *self);
    void (*counts)(rg_xdp *x, rg_xdp_counts *out); /* reads rg_stats now */
    void (*close)(rg_xdp *x);                      /* detach, free; NULL is fine */
} rg_xdp_ops;

/* rg_xdp.c's; absent (NULL) from a binary built without it */
extern const rg_xdp_ops rg_xdp_impl __attribute__((weak));

#endif /* RG_XDP_H */
