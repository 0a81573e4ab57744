/* rg_nf_api.h - the network function (NF) ABI, version RG_NF_ABI_VERSION.
 *
 * An NF is a shared object (or an NF built into the driver) that exports one
 * descriptor, `const rg_nf_abi rg_nf_v1` (RG_NF_EXPORT below): its name, the
 * ABI version it was compiled against, the events it subscribes to (by layer
 * and event name), the size of its per-flow state, and init/fini.  Nothing in
 * it is specific to one generated stack: the driver resolves the
 * subscriptions against the stack's descriptor (rg_stack_desc) when it loads
 * the NF, and refuses the NF with an error naming the missing layer or event
 * and the NF's file.  So one compiled NF serves every stack that has the
 * events it needs.
 *
 * Build an out-of-tree NF with one line (see docs/nf.md):
 *
 *     cc -shared -fPIC -std=c11 -Iruntime-c/include my_nf.c -o my_nf.so
 *
 * and run it with `--nf ./my_nf.so` or in a chain file (`--chain`).
 *
 * Calls: the driver collects the events of a packet while the stack
 * processes it, then calls the NFs of the chain in chain order, each with
 * every event of the packet it subscribed to, in the order the stack raised
 * them (run to completion, one worker: no locking needed in an NF).  An NF's
 * callback returns a verdict (RG_PASS, RG_BYPASS_FLOW, RG_DROP,
 * RG_DROP_FLOW, and from ABI minor 1 RG_REJECT...; the strongest given during
 * a packet wins); RG_DROP, RG_DROP_FLOW or a reject stops the NFs after it in
 * the chain for the rest of that packet.  Events raised outside a packet (idle expiry, the final
 * flush) are dispatched the same way right after the stack raised them. */
#ifndef RG_NF_API_H
#define RG_NF_API_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rg_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when a change breaks NFs compiled against an older header: the
 * driver refuses an NF whose abi_version differs.  Fields appended at the
 * end of rg_nf_abi, rg_nf_ev or rg_nf_host do not bump it (their size
 * fields tell what each side knows). */
#define RG_NF_ABI_VERSION 1
/* Additions that old NFs need not know (an NF compiled against minor 0 works unchanged):
 * 1: the reject verdicts RG_REJECT, RG_REJECT_BOTH, RG_REJECT_ADMIN, RG_REJECT_MAX (rg_api.h);
 *    a driver older than that treats them as no verdict (RG_PASS).
 * 2: the line outputs rg_nf_host.out_open, out_write, out_close (appended: an NF checks
 *    host->size before using them, RG_NF_HAS_OUT).
 * 3: events between NFs: rg_nf_host.raise (RG_NF_HAS_RAISE), the event kind RG_NF_EV_NF and
 *    its members appended to rg_nf_ev (nf_event, field_names, fields, nfields, raiser).  The
 *    chain file declares the events and which NF raises or subscribes to which (docs/nf.md).
 *    Injection: rg_nf_host.inject (RG_NF_HAS_INJECT), a TCP RST to either side of the flow.
 * An NF may define RG_NF_ABI_TARGET_MINOR (to 2) before including this header to be built
 * against an older minor: the structures then end where they ended in that minor (what an NF
 * built against the older header sees), and RG_NF_ABI_MINOR is that minor. */
#ifndef RG_NF_ABI_TARGET_MINOR
#define RG_NF_ABI_TARGET_MINOR 3
#endif
#if RG_NF_ABI_TARGET_MINOR < 2 || RG_NF_ABI_TARGET_MINOR > 3
#error "RG_NF_ABI_TARGET_MINOR is 2 or 3 (minor 1 changed no structure: build it as 2)"
#endif
#define RG_NF_ABI_MINOR RG_NF_ABI_TARGET_MINOR
/* the descriptor's symbol in an NF's shared object */
#define RG_NF_SYMBOL "rg_nf_v1"

/* Verdicts: enum rg_verdict in rg_api.h (RG_PASS, RG_BYPASS_FLOW, RG_DROP,
 * RG_DROP_FLOW, RG_REJECT...; stronger = larger). */

/* ---- events ----
 * A handler event is a call of one of the stack's handlers (rg_handler_desc:
 * its name, e.g. "tcp_data", and its named arguments).  The built-in events
 * exist for every layer with a selector (an instance, "flow"): */
#define RG_NF_OPEN       "open"       /* an instance was created */
#define RG_NF_PACKET     "packet"     /* a packet reached an instance: ev->len bytes */
#define RG_NF_CLOSE      "close"      /* an instance ended: ev->reason, ev->complete */
#define RG_NF_GAP        "gap"        /* a reassembly hole was skipped: seq, len, at */
#define RG_NF_CLOCK_JUMP "clock_jump" /* a packet beyond the clock guard (no layer) */
#define RG_NF_MEMCAP                                                                               \
    "memcap" /* a memcap was hit: ev->reason = the policy applied                                  \
                (enum rg_memcap_policy), ev->asked bytes; ev->flow                                 \
                NULL when a new instance was asked for */
#define RG_NF_OVERLAP                                                                              \
    "overlap" /* overlapping bytes differed: dir, seq, len, new_bytes                              \
                 (how many now hold the new copy), old_len, new_len, reason                        \
                 (the overlap policy) */

enum rg_nf_ev_kind {
    RG_NF_EV_CALL = 0, /* a handler call: ev->call */
    RG_NF_EV_OPEN = 1,
    RG_NF_EV_PACKET = 2,
    RG_NF_EV_CLOSE = 3,
    RG_NF_EV_GAP = 4,
    RG_NF_EV_CLOCK_JUMP = 5,
    RG_NF_EV_MEMCAP = 6,
    RG_NF_EV_OVERLAP = 7,
    RG_NF_EV_NF = 8, /* minor 3: an event an NF of the chain raised (rg_nf_host.raise) */
    RG_NF_EV_KINDS
};

typedef struct rg_nf_host rg_nf_host;

/* One event as an NF receives it: valid during the callback only (copy what
 * you keep). */
typedef struct rg_nf_ev {
    uint16_t kind;            /* enum rg_nf_ev_kind */
    uint16_t sub;             /* the index in rg_nf_abi.subs of the subscription it matched */
    uint8_t dir;              /* 0 = to_passive (the creator's direction), 1 = to_active */
    uint8_t end;              /* CALL: rg_call.end (0 in a packet, RG_END(reason) at the end) */
    uint16_t layer;           /* index into rg_stack_desc.layers (CLOCK_JUMP: 0) */
    const rg_flow_info *flow; /* the instance; NULL: none (CLOCK_JUMP, calls without one) */
    uint64_t ts_ns;           /* packet time (CLOCK_JUMP: the flow clock) */
    uint64_t pkt_no;          /* 1-based packet number in this worker */
    const rg_call *call;      /* CALL: the handler and its arguments (args[i] is named
                                 stack->handlers[call->handler].arg_names[i]); else NULL */
    /* PACKET: len = bytes of the layer's input.  GAP: seq, len, at (rg_obs.on_gap). */
    uint32_t len, seq, at;
    /* CLOSE: reason (RG_CLOSE_*), complete (the PSM saw setup and reached accept) */
    int32_t reason, complete;
    /* CLOCK_JUMP: the packet's own time, 1 forward / 0 backward */
    uint64_t pkt_ts_ns;
    int32_t fwd;
    /* the driver's handle for this event (rg_nf_host functions take the event) */
    const rg_nf_host *host;
    void *host_ref;
    /* MEMCAP: the bytes the refused or forced allocation asked for (reason: the
     * policy).  OVERLAP: new_bytes of the len differing bytes hold the new copy; reason is
     * the overlap policy (enum rg_seq_policy). */
    uint64_t asked;
    uint32_t new_bytes;
    /* OVERLAP: both versions' lengths (rg_obs.on_overlap's old_len and new_len) */
    uint32_t old_len, new_len;
#if RG_NF_ABI_TARGET_MINOR >= 3
    /* NF (minor 3): an event raised by the NF at chain position `raiser` (rg_nf_host.raise)
     * for the flow, direction, layer and packet of the event it was handling: its name as
     * the chain file declares it, and its payload, nfields values in declaration order
     * (field_names[i] names fields[i]; kinds as declared: num is RG_VAL_NUM, bytes is
     * RG_VAL_BYTES); rg_nf_ev_field finds one by name.  Other kinds: NULL and 0. */
    const char *nf_event;
    const char *const *field_names;
    const rg_val *fields;
    uint32_t nfields;
    uint32_t raiser;
#endif
} rg_nf_ev;

/* An event callback.  nf: what init returned; fstate: this NF's state for
 * ev->flow (flow_state_size zeroed bytes, allocated when the NF first sees
 * the flow, freed after its close event; NULL without a flow or with
 * flow_state_size 0).  Returns a verdict (RG_PASS to let the packet on). */
typedef int (*rg_nf_fn)(void *nf, const rg_nf_ev *ev, void *fstate);

enum {
    /* no error when the subscription matches nothing in the stack (an NF
     * that uses an event where a stack has it) */
    RG_NF_SUB_OPTIONAL = 1u << 0,
};

/* One subscription.  layer: a layer name of the stack ("tcp", "tcp6"), or a
 * protocol name (every layer of that protocol), or "*" (every layer; NULL
 * for clock_jump).  event: a handler name (e.g. "tcp_data"), "*" (every
 * handler of the layer(s)), or a built-in (RG_NF_OPEN, ...).  A
 * subscription that matches nothing is an error unless RG_NF_SUB_OPTIONAL
 * or a "*" is in it. */
typedef struct rg_nf_sub {
    const char *layer;
    const char *event;
    rg_nf_fn fn;
    uint32_t flags;
} rg_nf_sub;

/* A configuration item (chain file `params`, or `rubikgen ctl attach NF
 * key=value`).  The driver adds "out" (its --out directory) unless given. */
typedef struct rg_nf_kv {
    const char *key;
    const char *value;
} rg_nf_kv;

/* What the driver offers an NF: functions taking the event being handled
 * (ev->host). */
struct rg_nf_host {
    uint32_t abi_version; /* RG_NF_ABI_VERSION */
    uint32_t size;        /* sizeof(rg_nf_host): newer drivers append functions */
    /* Dynamic subscription, for ev's flow only: this NF stops (on = 0) or
     * resumes (on = 1) receiving subscription `sub` (an index into its
     * subs) for this instance.  RG_OK or RG_EINVAL. */
    int (*subscribe)(const rg_nf_ev *ev, unsigned sub, int on);
    /* This NF wants no more bytes of direction dir of ev's flow: it gets no
     * more calls with a "data" argument for that direction of the flow, and
     * when no NF of the chain wants them (each said so, or has no handler
     * subscription left for the flow), the stack stops reassembling that
     * direction (no buffering, no copy; what it held is dropped).  Final for
     * the flow.  RG_OK, or RG_EINVAL (no flow, or a layer without
     * reassembly). */
    int (*no_more_bytes)(const rg_nf_ev *ev, int dir);
    /* --workers N: every worker runs its own instance of every NF (init once per worker,
     * per-flow state in that worker's context): this instance's worker (0..nworkers-1).
     * One context: worker 0 of 1.  An NF that wants state shared by its instances keeps it
     * itself, with its own locking.  (Appended: read them when size covers them.) */
    uint32_t worker, nworkers;
    /* Line outputs (minor 2; read them when size covers them, see RG_NF_HAS_OUT): what a
     * Suricata or Zeek operator expects of a log, whatever the number of workers.
     * out_open(host, path): the file path (under the NF's "out" directory as given); every
     * worker's instance that opens the same path writes the one file, created (truncated)
     * by the first open.  out_write(out, rec, len): one record, one or more whole lines (a
     * newline is added to a last line without one), written at once with one write(): a
     * reader (tail -f, a log shipper) sees each line complete when it appears, lines of
     * several workers never interleave, and a crash (even SIGKILL) leaves whole lines only.
     * With --workers a line that is a JSON object with a top-level numeric "uid" or "flow"
     * member gets ",\"worker\":K" as its last member.  The files are rotated by --rotate and
     * reopened on SIGHUP and `rubikgen ctl SOCK reopen` (logrotate).  out_close: the last
     * close of a path closes the file.  out_open returns NULL with a message in err;
     * out_write and out_close return RG_OK or RG_EIO (out_close: the first write error, in
     * err).  Call them from the NF's own callbacks, init and fini (the host given to init
     * stays valid until fini). */
    void *(*out_open)(const rg_nf_host *host, const char *path, char *err, size_t errlen);
    int (*out_write)(void *out, const char *rec, size_t len);
    int (*out_close)(void *out, char *err, size_t errlen);
#if RG_NF_ABI_TARGET_MINOR >= 3
    /* Events between NFs (minor 3; RG_NF_HAS_RAISE): raise the chain file's event `event`
     * for ev's flow (its direction, layer and packet), with its payload: nfields values in
     * the order the chain file declares its fields, each of the declared kind (bytes are
     * copied: the NF's buffer may go after the call).  The NFs after this one in the chain
     * that subscribed to it get it in this packet's run, after the packet's other events
     * and before the packet's verdict is final (a verdict they return counts as the
     * packet's).  RG_OK; RG_EINVAL when the chain file declares no such event, does not
     * list it under this NF's `raises`, or the payload does not match the declaration;
     * RG_ENOMEM. */
    int (*raise)(const rg_nf_ev *ev, const char *event, const rg_val *fields, unsigned nfields);
    /* Injection (minor 3; RG_NF_HAS_INJECT): frames built from the packet ev came with, sent
     * with --inline right after the packet (out of the interface each side is behind) and
     * written with --write right after its place, whatever the packet's verdict.  what:
     * RG_INJECT_RST_SENDER, a RST to the packet's sender (<SEQ=SEG.ACK><CTL=RST>, exactly
     * its RCV.NXT: RFC 5961 3.2; a packet without ACK gets <SEQ=0><ACK=SEG.SEQ+SEG.LEN>
     * <CTL=RST,ACK>; over UDP and others, an ICMP port unreachable), and/or
     * RG_INJECT_RST_RECEIVER, a RST to its receiver as if from the sender
     * (<SEQ=SEG.SEQ><ACK=SEG.ACK><CTL=RST,ACK>, the receiver's RCV.NXT when the packet is
     * dropped: return RG_DROP_FLOW with it; a packet with ACK only).  The replies a reject
     * gives (rg_reject.h), without its rate limit.  Several calls in a packet's run: one
     * injection of their union.  RG_OK; RG_EINVAL for an event that came with no packet (a
     * lifecycle call, close, clock_jump, events at the final flush) or unknown bits. */
    int (*inject)(const rg_nf_ev *ev, unsigned what);
#endif
};

/* Does host offer the line outputs (an older driver's does not: write the file yourself)? */
#define RG_NF_HAS_OUT(host)                                                                        \
    ((host) && (host)->size >= offsetof(rg_nf_host, out_close) + sizeof(void *) && (host)->out_open)

#if RG_NF_ABI_TARGET_MINOR >= 3
/* Does host offer events between NFs (minor 3)? */
#define RG_NF_HAS_RAISE(host)                                                                      \
    ((host) && (host)->size >= offsetof(rg_nf_host, raise) + sizeof(void *) && (host)->raise)
/* Does host offer injection (minor 3)? */
#define RG_NF_HAS_INJECT(host)                                                                     \
    ((host) && (host)->size >= offsetof(rg_nf_host, inject) + sizeof(void *) && (host)->inject)
/* rg_nf_host.inject's what */
enum { RG_INJECT_RST_SENDER = 1u << 0, RG_INJECT_RST_RECEIVER = 1u << 1 };
#endif

/* The descriptor (RG_NF_EXPORT). */
typedef struct rg_nf_abi {
    uint32_t abi_version; /* RG_NF_ABI_VERSION when compiled */
    uint32_t size;        /* sizeof(rg_nf_abi) when compiled */
    const char *name;     /* a default instance name: letters, digits, '_', '-' */
    const char *help;     /* one line */
    const rg_nf_sub *subs;
    uint32_t nsubs;
    uint32_t flow_state_size; /* bytes of per-flow state (0: none) */
    /* Create the NF for stack with its configuration (ncfg items); NULL on
     * error with a message in err (then fini is not called).  The stack
     * descriptor stays valid until fini: resolve handler and argument
     * indices here (rg_nf_handler, rg_nf_arg). */
    void *(*init)(const rg_stack_desc *stack, const rg_nf_kv *cfg, unsigned ncfg,
                  const rg_nf_host *host, char *err, size_t errlen);
    /* Write outputs and free the NF: every instance has closed (the stack
     * was flushed) or the NF was detached.  RG_OK, or RG_EIO with a message
     * in err. */
    int (*fini)(void *nf, char *err, size_t errlen);
    /* Optional: release what the NF put in fstate; called for every state
     * still held when the NF is detached or when the flow's close event was
     * not subscribed.  NULL: nothing to release. */
    void (*flow_free)(void *nf, void *fstate);
} rg_nf_abi;

/* In an NF's .c file: RG_NF_EXPORT = { RG_NF_ABI_VERSION, sizeof(rg_nf_abi), ... }; */
#define RG_NF_EXPORT __attribute__((visibility("default"))) const rg_nf_abi rg_nf_v1

/* ---- helpers for NFs (header only: an NF links nothing of rubikgen) ---- */

/* The value of key in cfg, or dflt. */
static inline const char *rg_nf_cfg_get(const rg_nf_kv *cfg, unsigned ncfg, const char *key,
                                        const char *dflt)
{
    for (unsigned i = ncfg; i-- > 0;) /* the last one given wins */
        if (cfg[i].key && !strcmp(cfg[i].key, key)) return cfg[i].value;
    return dflt;
}

/* The index of the handler called name, or -1. */
static inline int rg_nf_handler(const rg_stack_desc *stack, const char *name)
{
    for (unsigned i = 0; i < stack->nhandlers; i++)
        if (!strcmp(stack->handlers[i].name, name)) return (int)i;
    return -1;
}

/* The index of handler h's argument called name, or -1. */
static inline int rg_nf_arg(const rg_stack_desc *stack, unsigned h, const char *name)
{
    if (h >= stack->nhandlers) return -1;
    const rg_handler_desc *d = &stack->handlers[h];
    for (unsigned i = 0; i < d->nargs; i++)
        if (!strcmp(d->arg_names[i], name)) return (int)i;
    return -1;
}

/* The argument of a call named name (NULL: the handler has none). */
static inline const rg_val *rg_nf_call_arg(const rg_stack_desc *stack, const rg_call *c,
                                           const char *name)
{
    int i = rg_nf_arg(stack, c->handler, name);
    return i < 0 ? NULL : &c->args[i];
}

#if RG_NF_ABI_TARGET_MINOR >= 3
/* The payload field called name of an event raised by an NF (RG_NF_EV_NF), or NULL. */
static inline const rg_val *rg_nf_ev_field(const rg_nf_ev *ev, const char *name)
{
    if (ev->kind != RG_NF_EV_NF) return NULL;
    for (uint32_t i = 0; i < ev->nfields; i++)
        if (!strcmp(ev->field_names[i], name)) return &ev->fields[i];
    return NULL;
}
#endif

#ifdef __cplusplus
}
#endif
#endif /* RG_NF_API_H */
