/* rg_api.h - the contract between a generated stack, the capture driver and
 * network functions (NFs).
 *
 * A generated stack S (S_gen.c) exports one `const rg_stack_desc S_desc`
 * describing its layers, handlers and entry points, and the functions it
 * points to.  All mutable state lives in the per-core context the stack
 * creates (no globals), so one context per worker gives shared-nothing
 * run-to-completion.
 *
 * Observers (rg_obs) see a stack from outside without knowing its specs:
 * every handler call with its named arguments, and the life of every
 * instance ("flow") of layers with a selector.  The driver's counters and
 * the NFs (handlers/nf, registered through rg_nf_registry.h) are observers;
 * the driver (rg_main) attaches its counters and the NF chosen on its
 * command line.  Observer callbacks may be NULL. */
#ifndef RG_API_H
#define RG_API_H

#include <string.h>

#include "rg_common.h"
#include "rg_stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- values passed to observers ---- */

enum { RG_VAL_NUM = 0, RG_VAL_BYTES = 1 };

typedef struct rg_val {
    uint8_t kind; /* RG_VAL_NUM or RG_VAL_BYTES */
    uint64_t num;
    rg_bytes bytes; /* valid during the callback only */
} rg_val;

/* ---- static descriptions (const data in the generated code) ---- */

/* One item of a selector key.  Numbers are stored big-endian in `size`
 * bytes; byte slices as they are.  A bidirectional key is side a's items,
 * then side p's, then the common ones (the swapped key: p, a, common), so the
 * forward key alone names both ends of a flow. */
typedef struct rg_keypart {
    const char *name; /* the spec's name, e.g. "ip.header.saddr", "header.sport" */
    uint8_t kind;     /* RG_VAL_NUM or RG_VAL_BYTES */
    uint8_t common;   /* 0: side a, 1: a direction-independent part (selector
                         `common`), 2: side p */
    uint16_t off;     /* offset in the key */
    uint16_t size;    /* bytes */
} rg_keypart;

typedef struct rg_layer_desc {
    const char *name;     /* layer name in the stack */
    const char *protocol; /* protocol name ("tcp") */
    const char *spec;     /* protocol file, relative to the stack file */
    uint8_t has_instance; /* has a selector */
    uint8_t bidir;        /* selector with sides */
    uint8_t has_psm;
    uint8_t has_seq;
    uint16_t key_len; /* bytes of one key */
    uint16_t nparts;  /* parts of the forward key: side a, side p, common */
    const rg_keypart *parts;
    uint16_t nstates;
    const char *const *states; /* PSM state names by id */
    uint64_t timeout_ns;       /* idle timeout; 0 = none */
    /* closed instances linger this long (spec `linger:`; 0: none): see rg_flow_info.linger */
    uint64_t linger_ns;
    /* the perm variables the spec marks `record:`, which NFs add to the instance's record */
    uint16_t nrec;
    const struct rg_recfield *rec;
} rg_layer_desc;

/* A perm variable an NF writes in an instance's record (spec `record:`): record field k of an
 * instance is rg_flow_info.rec[k], set when the instance closes; with names, the record shows
 * names[value] (a value past them shows as the number). */
typedef struct rg_recfield {
    const char *name;
    uint32_t nnames;
    const char *const *names;
    /* or: the value is a string of letters, 4 bits each, the first in the low bits: code k
     * (1..15) is letters[k - 1], 0 ends it (TCP's history) */
    const char *letters;
} rg_recfield;
#define RG_REC_MAX 4 /* record fields per layer */

typedef struct rg_handler_desc {
    const char *name;
    uint16_t layer;
    uint16_t nargs;
    const char *const *arg_names;
    const uint8_t *arg_kinds; /* RG_VAL_* */
    /* the events the handler hooks (its `with`: built-in, protocol or
     * user-defined events of its layer), space-separated; "" for none.  An
     * NF tells a call made for a user-defined event (http_request) by it. */
    const char *events;
} rg_handler_desc;

/* ---- flows (instances) ---- */

/* Kept inside every instance of a layer with a selector. */
typedef struct rg_flow_info {
    uint64_t uid;   /* unique within a context, in creation order (from 1) */
    uint16_t layer; /* index into rg_stack_desc.layers */
    uint16_t state; /* current PSM state (0 without a PSM) */
    /* bit d: no NF wants direction d's bytes any more (rg_nf_api.h
     * no_more_bytes): the stack stops inserting them into its sequence */
    uint8_t no_bytes;
    uint8_t flags;  /* RG_FI_*: flow verdicts */
    uint8_t memcap; /* RG_FLOW_MEMCAP_*: what a memcap policy did to the instance */
    /* RG_FL_*: the instance reached an accept state and lingers as a closed record (spec
     * `linger:`): later packets of its key are late packets, counted in `late` and shown to
     * observers (on_packet) but not processed; observers see on_close when the linger ends */
    uint8_t linger;
    uint32_t late;        /* late packets (after the accept state) */
    const uint8_t *key_a; /* forward key: the creator's side ("side a") first */
    const uint8_t *key_p; /* swapped key (== key_a for unidirectional layers) */
    void *user[2];        /* handler-owned pointers, per direction (0 = to_passive) */
    /* the layer's record fields (rg_layer_desc.rec), set from its perm variables when it
     * closes: a copy of the record travels with the close (NF chains queue copies) */
    uint64_t rec[RG_REC_MAX];
} rg_flow_info;

/* rg_flow_info.flags.  A flow verdict (rg_verdict_give) marks its instance:
 * every later packet of it, in both directions, stops at the instance lookup
 * (one flag test) and is dropped or passes uninspected, counted per layer
 * (rg_layer_stats.dropped_by_verdict, .bypassed).  A mark lasts as long as
 * the instance: once it ends (idle timeout, eviction), a new one starts
 * fresh. */
enum {
    RG_FI_DROP = 1u << 0,   /* RG_DROP_FLOW */
    RG_FI_BYPASS = 1u << 1, /* RG_BYPASS_FLOW */
    RG_FI_VERDICTS = RG_FI_DROP | RG_FI_BYPASS
};
/* rg_flow_info.memcap (issue 14): the instance's reassembly hit the memcap. */
#define RG_FLOW_MEMCAP_DROPPED  1u /* drop-flow: buffers freed, no more data, not inspected */
#define RG_FLOW_MEMCAP_BYPASSED 2u /* bypass: buffers freed, no more data, state kept */

/* rg_flow_info.linger */
#define RG_FL_CLOSED   1u /* lingering: closed by its accept state */
#define RG_FL_COMPLETE 2u /* ... and complete (the setup transitions fired) */

/* Why an instance ended: the one table of close reasons (enumerator, value,
 * name in NF output).  rubikgen/sema/builtins.py CLOSE_REASONS mirrors it (a
 * test compares them) and the generated code ties it to rg_flow's
 * RG_FLOW_* removal reasons with static asserts. */
#define RG_CLOSE_REASONS(X)                                                                        \
    X(RG_CLOSE_ACCEPT, 0, "accept")   /* the PSM reached an accept state */                        \
    X(RG_CLOSE_EVICTED, 1, "evicted") /* instance cap reached: least recently used */              \
    X(RG_CLOSE_EXPIRED, 2, "expired") /* idle longer than the layer's timeout */                   \
    X(RG_CLOSE_FLUSHED, 3, "flushed") /* end of capture / shutdown */

enum rg_close_reason {
#define RG_CLOSE_ENUM_(name, value, text) name = value,
    RG_CLOSE_REASONS(RG_CLOSE_ENUM_)
#undef RG_CLOSE_ENUM_
};

/* rg_call.end and rg_hctx.end: 0 for a call made while a packet is processed;
 * RG_END(reason) for a call made because its instance ended for that
 * RG_CLOSE_* reason: a lifecycle handler (with: timeout, evicted, destroyed),
 * or a data handler receiving what gap recovery drained from the instance's
 * sequences (`drain: true`; its arguments other than the sdu are 0).  (0 is
 * "in a packet" so that zero-initialised records mean the common case.) */
#define RG_END(reason)     ((uint8_t)((reason) + 1))
#define RG_END_REASON(end) ((int)(end)-1)

/* ---- verdicts ----
 * What happens to the packet being processed, given by handlers (rg_hctx)
 * and observers/NFs (rg_call) through rg_verdict_give.  Larger is stronger:
 * the strongest verdict given during a packet is the packet's.  The driver
 * reads it after process (rg_stack_desc.verdict): inline mode forwards and
 * --write writes the packets that pass (RG_PASS, RG_BYPASS_FLOW). */
enum rg_verdict {
    RG_PASS = 0,        /* forward (the default) */
    RG_BYPASS_FLOW = 1, /* forward this packet and every later packet of the instance
                           without inspecting them */
    RG_DROP = 2,        /* drop this packet */
    RG_DROP_FLOW = 3,   /* drop this packet and every later packet of the instance */
    /* drop this packet and answer it (rg_reject.h): a TCP RST to its sender, an ICMP or
     * ICMPv6 port unreachable otherwise.  --write writes the replies where the packet was;
     * inline mode sends them out of the interface the packet came in on.  Rate-limited by
     * the driver (--reject-rate).  RG_REJECT + RG_REJECT_F_* (rg_reject.h: 1 also resets
     * the receiver, 2 answers "administratively prohibited"); NF ABI minor 1 */
    RG_REJECT = 4,
    RG_REJECT_BOTH = 5,  /* RG_REJECT | RG_REJECT_F_BOTH */
    RG_REJECT_ADMIN = 6, /* RG_REJECT | RG_REJECT_F_ADMIN */
    RG_REJECT_MAX = 7    /* both flags */
};
/* the RG_REJECT_F_* flags of a reject verdict */
#define RG_REJECT_FLAGS(v) ((unsigned)(v)-RG_REJECT)

/* The verdict of the packet being processed: one per context, reset to
 * RG_PASS when a packet starts.  flow: the instance a *_FLOW verdict applies
 * to (the instance of the call that gave the strongest verdict). */
typedef struct rg_verdict_slot {
    uint8_t v;                /* enum rg_verdict */
    const rg_flow_info *flow; /* NULL: the verdict names no instance */
} rg_verdict_slot;

/* Give verdict v (enum rg_verdict) about flow (may be NULL) for the packet
 * being processed; a weaker verdict than one given before changes nothing.
 * slot may be NULL (a call made outside a packet: no verdict to give). */
static inline void rg_verdict_give(rg_verdict_slot *slot, const rg_flow_info *flow, int v)
{
    /* a flow verdict marks its instance at once, while it is certainly alive (an instance
     * built lazily in a scratch record takes the mark into the table); the record is the
     * stack's, writable: only handlers and observers see it const */
    if (slot && flow && (v == RG_DROP_FLOW || v == RG_BYPASS_FLOW))
        ((rg_flow_info *)(uintptr_t)flow)->flags |= v == RG_DROP_FLOW ? RG_FI_DROP : RG_FI_BYPASS;
    if (slot && v > (int)slot->v) {
        slot->v = (uint8_t)v;
        slot->flow = flow;
    }
}

/* ---- handler calls ---- */

typedef struct rg_call {
    uint16_t handler;         /* index into rg_stack_desc.handlers */
    uint16_t layer;           /* the handler's layer */
    uint8_t dir;              /* 0 = to_passive (the creator's direction), 1 = to_active */
    const rg_flow_info *flow; /* the layer's instance; NULL if none */
    uint64_t ts_ns;           /* packet timestamp */
    uint64_t pkt_no;          /* 1-based packet number in this context */
    const rg_val *args;       /* rg_handler_desc.nargs values */
    uint8_t end;              /* 0 in a packet; RG_END(reason) when the instance ends */
    rg_verdict_slot *verdict; /* the packet's verdict (rg_verdict_give); NULL: none */
} rg_call;

/* What a user handler (S_handlers.c) receives besides its arguments. */
typedef struct rg_hctx {
    const rg_flow_info *flow; /* the layer's instance; NULL if none */
    void **user;              /* &flow->user[dir] (a per-direction slot), NULL if none */
    uint8_t dir;              /* 0 = to_passive, 1 = to_active */
    uint16_t layer;
    uint64_t ts_ns;
    void *ctx;                /* the stack context */
    uint8_t end;              /* 0 in a packet; RG_END(reason) when the instance ends */
    rg_verdict_slot *verdict; /* the packet's verdict (rg_verdict_give); NULL: none */
} rg_hctx;

/* ---- observers ---- */

#define RG_CLOCK_EV_RESYNC 2 /* on_clock_jump's fwd: a re-synchronisation (rg_clock) */

typedef struct rg_obs {
    void *self;
    /* every handler call, in order */
    void (*on_call)(void *self, const rg_call *c);
    /* Times: on_open and on_packet get the packet's own timestamp as captured (flow records
     * are dated by their own packets); the other callbacks the flow clock (rg_clock), the
     * guarded time expiry runs on. */
    /* an instance was created (f->key_* valid until on_close returns) */
    void (*on_open)(void *self, const rg_flow_info *f, uint64_t ts_ns);
    /* a packet reached an instance: dir, bytes of the layer's input */
    void (*on_packet)(void *self, const rg_flow_info *f, int dir, uint32_t len, uint64_t ts_ns);
    /* an instance ends; complete = its PSM saw the setup transitions and reached accept */
    void (*on_close)(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns);
    /* ---- gap recovery ----
     * direction dir of f skipped a hole of len bytes the capture lost, at
     * sequence number seq (the layer's `meta` numbering, modulo 2^32).  It
     * lies after the first `at` bytes of the data that the sequence delivers
     * next (the sdu of this assemble, which the handlers receive after the
     * gaps were reported; at == its length for a hole at its end).  Several
     * holes of one assemble come in order, each `at` counting data bytes
     * only.  Reported when delivery resumes after the hole: the receiver
     * acknowledged bytes past it, or the instance ended (then from inside the
     * close, before on_close). */
    void (*on_gap)(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                   uint32_t at, uint64_t ts_ns);
    /* ---- the clock guard (rg_clock in rg_timer.h) ----
     * packet pkt_no's timestamp pkt_ts_ns jumped forward (fwd = 1) or back
     * beyond --max-clock-jump from the flow clock: the packet was processed
     * at clock_ns (the clock did not move) and later packets follow on from
     * there.  fwd | RG_CLOCK_EV_RESYNC: not a jump but packet pkt_no
     * confirmed that the last jump's time base is the capture's new one (the
     * clock re-synchronised to it); pkt_ts_ns is then the base's first packet
     * timestamp, fwd & 1 that jump's direction. */
    void (*on_clock_jump)(void *self, uint64_t pkt_no, uint64_t pkt_ts_ns, uint64_t clock_ns,
                          int fwd);
    /* ---- memcaps (rg_seq_heap in rg_seq.h) ----
     * an allocation of `asked` bytes for layer `layer` would pass the
     * context's reassembly or flow-table memcap; policy (enum
     * rg_memcap_policy) is what was done.  f is the instance whose
     * reassembly asked (f->memcap says what happened to it), or NULL when
     * a new instance was asked for (none was created unless the policy made
     * room or ignored the cap). */
    void (*on_memcap)(void *self, const rg_flow_info *f, unsigned layer, int policy, uint64_t asked,
                      uint64_t ts_ns);
    /* ---- evasion: overlapping bytes that differ ----
     * direction dir of f received a segment overlapping bytes already held
     * with different content (buffered bytes, or with the sequence's retain
     * delivered bytes not yet acknowledged): len differing bytes from sequence
     * number seq (the first differing overlap), new_bytes of them now hold the
     * new copy (the overlap policy chose; 0: the old copy won, len: the new
     * one; always 0 for delivered bytes, which are never replaced).  Both
     * versions' lengths: old_len bytes of the held or kept copies were compared
     * with the packet's, equal or not; new_len bytes of the packet's data the
     * sequence took (seen before or new).  policy: the sequence's overlap policy
     * (enum rg_seq_policy, rg_seq_policy_name). */
    void (*on_overlap)(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                       uint32_t new_bytes, uint32_t old_len, uint32_t new_len, int policy,
                       uint64_t ts_ns);
    /* ---- one-packet instances (appended: issue 13) ----
     * bit i (layer index < 64) set: this observer need not be told of one-packet instances of
     * layer i, the instances of a fast-destroy layer (created lazily: an unfragmented IPv4
     * datagram) that the packet which created them also ends.  A stack may then leave out
     * their on_open, on_packet and on_close; it counts each one it left out in
     * rg_layer_stats.transient (and, as always, in inst.created and inst.destroyed), so an
     * observer that counts instances adds those (the driver's counter does: closed by
     * RG_CLOSE_ACCEPT, one packet).  Handler calls (on_call) still come, with c->flow
     * pointing to the instance, and so may on_gap, on_overlap and on_memcap.  An instance of
     * such a layer that outlives its first packet is still shown, but its on_open and first
     * on_packet come when it is committed to the table, at the end of the layer's work on
     * that packet: after the layer's handler calls (and those of the layers above it) for
     * that packet, before any later packet's.  Layers with lifecycle handlers, a draining
     * sequence or rules run at close show every instance whatever the mask.  0 (every
     * observer that does not set it) keeps the order described above: every instance opened,
     * shown each packet and closed. */
    uint64_t quiet_transient;
} rg_obs;

/* ---- contexts ---- */

typedef struct rg_ctx_cfg {
    uint32_t inst_cap; /* live instances per layer; 0 = default (1 << 18) */
    uint64_t seed;     /* hash seed; 0 = random */
    const rg_obs *obs; /* may be NULL */
    int no_timeouts;   /* 1: never expire idle instances */
    /* per layer index: live instances, 0 = inst_cap; NULL = none */
    const uint32_t *layer_cap;
    /* the clock guard: a packet more than this far (ns) from the flow clock
     * does not move it (rg_clock); 0 = RG_CLOCK_DEFAULT_MAX_JUMP (300 s),
     * UINT64_MAX = no guard */
    uint64_t max_clock_jump_ns;
    /* 1: verify the checksums the specs declare on input, counting bad ones per layer
     * (rg_layer_stats.checksum_bad) */
    int checksums;
    /* memcaps per context (rg_seq_heap): bytes of reassembly buffers and of
     * flow-table records; 0 = the stack's default (rg_stack_desc),
     * UINT64_MAX = none.  memcap_policy: enum rg_memcap_policy + 1, 0 = the
     * stack's default */
    uint64_t memcap_reassembly, memcap_flows;
    int memcap_policy;
    /* 1: burst stage 1 (rg_stack_desc.prefetch) runs whatever the tables' sizes (tests) */
    int prefetch_always;
    /* 1: burst stage 1 also prefetches the flow records (pass B, rg_stack_desc.prefetch_recs;
     * off by default: it did not pay where measured, BENCHMARKS.md) */
    int prefetch_records;
    /* per layer index: the overlap policy of the layer's sequences (enum rg_seq_policy + 1;
     * 0 = the spec's); NULL = the specs' everywhere.  Read while the context lives. */
    const uint8_t *overlap_policy;
    /* closed instances linger (spec `linger:`): 0 = each layer's spec value, RG_LINGER_NONE =
     * no linger, else this many ns for every layer that lingers */
    uint64_t linger_ns;
} rg_ctx_cfg;
#define RG_LINGER_NONE UINT64_MAX

/* Link kinds a stack may name an entry for (rubikgen stack `entry:`): the one
 * table of them (enumerator, value, name in the stack spec and the driver's
 * summary). */
#define RG_LINK_KIND_TABLE(X)                                                                      \
    X(RG_LINK_ETHERNET, 0, "ethernet")                                                             \
    X(RG_LINK_NULL, 1, "null")                                                                     \
    X(RG_LINK_RAW_IPV4, 2, "raw_ipv4")                                                             \
    X(RG_LINK_RAW_IPV6, 3, "raw_ipv6")                                                             \
    X(RG_LINK_SLL, 4, "sll")                                                                       \
    X(RG_LINK_SLL2, 5, "sll2")                                                                     \
    X(RG_LINK_PPP, 6, "ppp")

enum rg_link_kind {
#define RG_LINK_ENUM_(name, value, text) name = value,
    RG_LINK_KIND_TABLE(RG_LINK_ENUM_)
#undef RG_LINK_ENUM_
        RG_LINK_KINDS
};

/* Return values of process. */
enum { RG_PKT_OK = 0, RG_PKT_ERROR = 1, RG_PKT_DROPPED = 2 };

typedef struct rg_stack_desc {
    const char *name;
    const char *spec_hash; /* hash of the spec files the code was generated from */
    uint16_t nlayers;
    const rg_layer_desc *layers;
    uint16_t nhandlers;
    const rg_handler_desc *handlers;
    int16_t entry[RG_LINK_KINDS]; /* entry layer per link kind, -1 = none */
    void *(*ctx_new)(const rg_ctx_cfg *cfg);
    void (*ctx_free)(void *ctx);
    /* one packet: the layer's input starts at data (caplen bytes available) */
    int (*process)(void *ctx, unsigned entry_layer, const uint8_t *data, uint32_t caplen,
                   uint64_t ts_ns);
    /* destroy instances idle at time now (packet time) */
    size_t (*expire)(void *ctx, uint64_t now_ns);
    /* destroy every instance (RG_CLOSE_FLUSHED) */
    void (*flush)(void *ctx);
    const rg_stats *(*stats)(const void *ctx);
    /* the verdict (enum rg_verdict) of the last packet process handled */
    int (*verdict)(const void *ctx);
    /* the stack's memcap defaults (spec `limits:`, else RG_MEMCAP_DEFAULT_*): bytes,
     * UINT64_MAX = none */
    uint64_t memcap_reassembly, memcap_flows;
    int memcap_policy; /* enum rg_memcap_policy */
    /* burst stage 1 (NULL: none): parse one packet up to its flow-table keys and prefetch
     * their index slots, changing nothing; the driver calls it on every packet of a burst,
     * then process on each in order.  Returns 0 when no table is big enough for prefetching
     * to pay (rg_flow_cold; unless rg_ctx_cfg.prefetch_always): the rest of the burst skips
     * stage 1 */
    int (*prefetch)(void *ctx, unsigned entry_layer, const uint8_t *data, uint32_t caplen);
    /* burst stage 1, pass B (NULL: none): after prefetch ran on every packet of the burst,
     * read the index slots it prefetched and prefetch the flow records they lead to
     * (rg_flow_prefetch_hints); changes nothing */
    void (*prefetch_recs)(void *ctx);
    /* workers (NULL: none): the offset (rg_clock.off) of the reading thread's flow clock,
     * which a context made with max_clock_jump_ns = UINT64_MAX then adds to the packets' own
     * timestamps (frames keep their own times for the records; the jumps are decided once) */
    void (*clock_offset)(void *ctx, uint64_t off);
} rg_stack_desc;

/* Built-in memcap defaults per context (worker): see docs/reliability.md. */
#define RG_MEMCAP_DEFAULT_REASSEMBLY (UINT64_C(256) << 20)
#define RG_MEMCAP_DEFAULT_FLOWS      (UINT64_C(256) << 20)

/* The capture driver (runtime-c/main/, build/librgmain.a: not part of
 * librgrt.a): a generated binary's main calls it.  Options: see
 * `BINARY --help`. */
int rg_main(int argc, char **argv, const rg_stack_desc *stack);

#ifdef __cplusplus
}
#endif
#endif /* RG_API_H */
