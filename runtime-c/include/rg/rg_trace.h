/* rg_trace.h - the packet trace: what the stack did with the next N packets (`rubikgen ctl SOCK
 * trace N`, docs/operating.md "Tracing packets").
 *
 * The generated per-packet function calls the RG_TRACE_* hooks below at each step (a layer
 * entered, its header parsed, the instance found or created, a PSM transition, a sequence
 * insert, an event, a handler call, the verdict).  They compile to nothing unless the stack is
 * built with -DRG_TRACE (`rubikgen build|run --trace`): a build without it is the build without
 * any trace.  Compiled in, the first hook of a packet tests one global flag (rg_trace_armed, set
 * only while a trace request waits) and the others one thread-local pointer (rg_trace_cur, set
 * only while a traced packet runs): a load and a branch each when no trace is asked for.
 *
 * The recorder (rg_trace.c) writes fixed-size records, one per traced packet, and never
 * allocates on the packet path; the control thread formats them (runtime-c/main/rg_trace_ctl.c)
 * with the stack's descriptor (layer, state and handler names, key parts). */
#ifndef RG_TRACE_H
#define RG_TRACE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "rg_common.h"

enum rg_trace_kind {
    RG_TR_LAYER = 1, /* a: offset in the frame (UINT32_MAX: not in it: reassembled), b: length */
    RG_TR_PARSED,    /* a: 0 parsed, else 1 + the error reason (RG_REASON_*) */
    RG_TR_FOUND,     /* uid, dir; key bytes at koff */
    RG_TR_CREATED,   /* uid; key bytes at koff */
    RG_TR_NOINST,    /* no instance for the packet */
    RG_TR_PSM,       /* a: from state, b: to state, s: transition, t: its spec position */
    RG_TR_FAIL,      /* a: state, s: the on_fail policy */
    RG_TR_SEQ,       /* a: RG_SEQ_EV_* flags, b: 0 in order, 1 ahead (buffered), 2 behind; uid:
                        (seq << 32 | length) */
    RG_TR_ASM,       /* a: bytes delivered, b: holes skipped */
    RG_TR_EVENT,     /* s: the event */
    RG_TR_CALL,      /* a: handler index (rg_stack_desc.handlers) */
    RG_TR_DESTROY,   /* the instance reached an accept state and ends */
    RG_TR_NOTE       /* s: what happened (a late packet, a flow verdict's instance) */
};

typedef struct rg_trace_step {
    uint8_t kind, dir;
    uint16_t layer;
    uint32_t a, b;
    uint16_t koff, klen; /* key bytes (side a, then side p) in rg_trace_pkt.keys */
    uint64_t uid;
    const char *s, *t; /* static strings of the generated code */
} rg_trace_step;

enum { RG_TRACE_STEPS = 96, RG_TRACE_KEYS = 640, RG_TRACE_NFS = 192, RG_TRACE_MAX = 1000 };

typedef struct rg_trace_pkt {
    uint64_t pkt_no, ts_ns;
    uint32_t caplen;
    uint16_t entry, worker;
    int rc, verdict;
    uint32_t nsteps, lost; /* lost: steps past RG_TRACE_STEPS (or key bytes past the room) */
    uint32_t nkeys;
    uint64_t gen;           /* the request it belongs to */
    _Atomic int complete;   /* the packet ended */
    const uint8_t *frame;   /* while it runs: the layer offsets' base */
    char nfs[RG_TRACE_NFS]; /* the NF chain ("NAME\tSOURCE\n" lines) at the packet's end */
    rg_trace_step step[RG_TRACE_STEPS];
    uint8_t keys[RG_TRACE_KEYS];
} rg_trace_pkt;

extern _Atomic int rg_trace_armed;
extern _Thread_local rg_trace_pkt *rg_trace_cur;
extern int rg_trace_built; /* set by a stack built with -DRG_TRACE (its constructor) */

void rg_trace_begin(unsigned entry, const uint8_t *data, uint32_t caplen, uint64_t ts_ns,
                    uint64_t pkt_no);
void rg_trace_end(int rc, int verdict);
void rg_trace_layer(unsigned layer, const uint8_t *p, uint64_t len);
void rg_trace_step3(int kind, unsigned layer, uint32_t a, uint32_t b, const char *s, const char *t);
void rg_trace_inst(int kind, unsigned layer, const void *fi, int dir, unsigned key_len);
void rg_trace_seq(unsigned layer, int dir, uint32_t flags, uint32_t seq, uint32_t len,
                  uint32_t next);

/* The thread's worker number, and what lists its NF chain (NULL: none) into a record. */
void rg_trace_thread(unsigned worker, unsigned (*nfs)(const void *self, char *buf, size_t n),
                     const void *self);

/* ---- the control side (one request at a time) ---- */

/* Arm a trace of the next n packets (1..RG_TRACE_MAX) of any worker: 0, or -1 (out of memory). */
int rg_trace_arm(unsigned n);
/* Wait until the n packets are traced or timeout_ms passed, then disarm; the records
 * complete by then, in the order their packets started (valid until the next rg_trace_arm). */
unsigned rg_trace_collect(unsigned timeout_ms, const rg_trace_pkt **out, unsigned max);

#ifdef RG_TRACE
/* The per-packet function is compiled twice, from one text: RG_TRACE_FN(f) is an always-inlined
 * body taking rg__traced, RG_TRACE_DISPATCH(f) the function itself, which calls the body with
 * rg__traced = 1 only while a trace is armed.  In the copy with 0 every hook folds away, so a
 * build that can trace costs one test per packet while no trace is asked for. */
#define RG_TRACE_COPY  inline __attribute__((always_inline))
#define RG_TRACE_FN(f) f##__traced_or_not
#define RG_TRACE_PARAM , const int rg__traced
#define RG_TRACE_DISPATCH(f)                                                                       \
    static int f(void *vctx, unsigned entry, const uint8_t *data, uint32_t caplen, uint64_t ts_ns) \
    {                                                                                              \
        if (RG_UNLIKELY(atomic_load_explicit(&rg_trace_armed, memory_order_relaxed)))              \
            return f##__traced_or_not(vctx, entry, data, caplen, ts_ns, 1);                        \
        return f##__traced_or_not(vctx, entry, data, caplen, ts_ns, 0);                            \
    }
#define RG_TRACE_ON_ RG_UNLIKELY(rg__traced &&rg_trace_cur != NULL)
#define RG_TRACE_BUILT                                                                             \
    __attribute__((constructor)) static void rg__trace_built(void)                                 \
    {                                                                                              \
        rg_trace_built = 1;                                                                        \
    }                                                                                              \
    extern int rg_trace_built
#define RG_TRACE_BEGIN(entry, data, caplen, ts, pkt)                                               \
    do {                                                                                           \
        if (rg__traced) rg_trace_begin(entry, data, caplen, ts, pkt);                              \
    } while (0)
#define RG_TRACE_END(rc, v)                                                                        \
    do {                                                                                           \
        if (RG_TRACE_ON_) rg_trace_end(rc, v);                                                     \
    } while (0)
#define RG_TRACE_LAYER(l, p, len)                                                                  \
    do {                                                                                           \
        if (RG_TRACE_ON_) rg_trace_layer(l, p, len);                                               \
    } while (0)
#define RG_TRACE_STEP(kind, l, a, b, s, t)                                                         \
    do {                                                                                           \
        if (RG_TRACE_ON_) rg_trace_step3(kind, l, a, b, s, t);                                     \
    } while (0)
#define RG_TRACE_INST(kind, l, fi, dir, klen)                                                      \
    do {                                                                                           \
        if (RG_TRACE_ON_) rg_trace_inst(kind, l, fi, dir, klen);                                   \
    } while (0)
#define RG_TRACE_SEQ(l, dir, fl, seq, len, next)                                                   \
    do {                                                                                           \
        if (RG_TRACE_ON_) rg_trace_seq(l, dir, fl, seq, len, next);                                \
    } while (0)
#else
#define RG_TRACE_COPY
#define RG_TRACE_FN(f) f
#define RG_TRACE_PARAM
#define RG_TRACE_DISPATCH(f)
#define RG_TRACE_BUILT                               extern int rg_trace_built
#define RG_TRACE_BEGIN(entry, data, caplen, ts, pkt) ((void)0)
#define RG_TRACE_END(rc, v)                          ((void)0)
#define RG_TRACE_LAYER(l, p, len)                    ((void)0)
#define RG_TRACE_STEP(kind, l, a, b, s, t)           ((void)0)
#define RG_TRACE_INST(kind, l, fi, dir, klen)        ((void)0)
#define RG_TRACE_SEQ(l, dir, fl, seq, len, next)     ((void)0)
#endif

/* The hooks the back-end writes (one per step). */
#define RG_TRACE_PARSED(l, err)          RG_TRACE_STEP(RG_TR_PARSED, l, (uint32_t)(err), 0, NULL, NULL)
#define RG_TRACE_FOUND(l, fi, dir, klen) RG_TRACE_INST(RG_TR_FOUND, l, fi, dir, klen)
#define RG_TRACE_CREATED(l, fi, klen)    RG_TRACE_INST(RG_TR_CREATED, l, fi, 0, klen)
#define RG_TRACE_NOINST(l)               RG_TRACE_STEP(RG_TR_NOINST, l, 0, 0, NULL, NULL)
#define RG_TRACE_PSM(l, from, to, name, where)                                                     \
    RG_TRACE_STEP(RG_TR_PSM, l, (uint32_t)(from), (uint32_t)(to), name, where)
#define RG_TRACE_FAIL(l, state, policy)                                                            \
    RG_TRACE_STEP(RG_TR_FAIL, l, (uint32_t)(state), 0, policy, NULL)
#define RG_TRACE_ASM(l, n, gaps)                                                                   \
    RG_TRACE_STEP(RG_TR_ASM, l, (uint32_t)(n), (uint32_t)(gaps), NULL, NULL)
#define RG_TRACE_EVENT(l, name) RG_TRACE_STEP(RG_TR_EVENT, l, 0, 0, name, NULL)
#define RG_TRACE_CALL(l, h)     RG_TRACE_STEP(RG_TR_CALL, l, (uint32_t)(h), 0, NULL, NULL)
#define RG_TRACE_DESTROY(l)     RG_TRACE_STEP(RG_TR_DESTROY, l, 0, 0, NULL, NULL)
#define RG_TRACE_NOTE(l, what)  RG_TRACE_STEP(RG_TR_NOTE, l, 0, 0, what, NULL)

#endif /* RG_TRACE_H */
