/* rg_nf_int.h - internals shared by the stock NFs (not for users). */
#ifndef RG_NF_INT_H
#define RG_NF_INT_H

#include <stdio.h>

#include "rg/rg_json.h"
#include "rg/rg_nf_api.h"
#include "rg/rg_obs.h"
#include "rg/rg_uidmap.h"
#include "rg_nf.h"

/* Every NF starts with this, so an rg_obs * is an rg_nf *. */
typedef struct rg_nf rg_nf;
enum { RG_NF_LINES_MAX = 4 };
struct rg_nf {
    rg_obs obs; /* obs.self == this NF */
    const char *name;
    const rg_stack_desc *stack;
    /* write outputs and release everything but the struct; RG_OK or RG_EIO */
    int (*finish)(rg_nf *nf);
    char err[512]; /* first output error ("" if none), printed by rg_nf_finish */
    /* its line outputs (rg_nf_open_out through the host): fully buffered, flushed when a
     * callback returns, so each record reaches the file whole once it is written */
    FILE *lines[RG_NF_LINES_MAX];
    unsigned nlines;
};

/* Constructors (RG_STOCK_NF makes each an NF of the ABI).  Each fills in
 * base.obs callbacks and base.finish; the wrapper sets the rest. */
rg_nf *rg_nf_events_new(const rg_stack_desc *stack, const char *outdir, char *err, size_t errlen);
rg_nf *rg_nf_flowstats_new(const rg_stack_desc *stack, const char *outdir, char *err,
                           size_t errlen);
rg_nf *rg_nf_streams_new(const rg_stack_desc *stack, const char *outdir, char *err, size_t errlen);
rg_nf *rg_nf_sni_new(const rg_stack_desc *stack, const char *outdir, char *err, size_t errlen);
rg_nf *rg_nf_hostlog_new(const rg_stack_desc *stack, const char *outdir, char *err, size_t errlen);
rg_nf *rg_nf_signatures_new(const rg_stack_desc *stack, const char *outdir, char *err,
                            size_t errlen);
/* signatures with its rules file (NULL: $RG_SIGNATURES) */
rg_nf *rg_nf_signatures_open(const rg_stack_desc *stack, const char *outdir, const char *rules,
                             char *err, size_t errlen);
rg_nf *rg_nf_flowexport_new(const rg_stack_desc *stack, const char *outdir, char *err,
                            size_t errlen);

/* ---- a stock NF as an NF of the ABI (rg_nf_api.h) ----
 * It subscribes to every handler and built-in event of every layer (rg_nf_stock_subs) and
 * forwards each to its observer callbacks, in the order the stack raised them.
 * Configuration: "out" (the output directory, default rg-out). */
#define RG_NF_STOCK_NSUBS 8
extern const rg_nf_sub rg_nf_stock_subs[RG_NF_STOCK_NSUBS];
/* The NF ctor makes, named name, with cfg's "out": the ABI init of a stock NF.  host (NULL:
 * none, plain files) serves the line outputs ctor opens (rg_nf_open_out). */
void *rg_nf_stock_init(rg_nf *(*ctor)(const rg_stack_desc *, const char *, char *, size_t),
                       const char *name, const rg_stack_desc *stack, const rg_nf_kv *cfg,
                       unsigned ncfg, const rg_nf_host *host, char *err, size_t errlen);
/* The host whose line outputs rg_nf_open_out uses on this thread while a stock NF is made
 * (the constructors take no host): set around the constructor's call, NULL after. */
void rg_nf_use_host(const rg_nf_host *host);
/* Its ABI fini: rg_nf_finish. */
int rg_nf_stock_fini(void *self, char *err, size_t errlen);

/* The stock NF NAME made by ctor, with its --help line: defines rg_nf_desc_NAME, which the
 * registry (RG_STOCK_NFS, rg_nf.c) lists. */
#define RG_STOCK_NF(NAME, ctor, help_)                                                             \
    static void *init_##NAME(const rg_stack_desc *stack, const rg_nf_kv *cfg, unsigned ncfg,       \
                             const rg_nf_host *host, char *err, size_t errlen)                     \
    {                                                                                              \
        return rg_nf_stock_init(ctor, #NAME, stack, cfg, ncfg, host, err, errlen);                 \
    }                                                                                              \
    static const rg_nf_abi abi_##NAME = {RG_NF_ABI_VERSION,                                        \
                                         sizeof(rg_nf_abi),                                        \
                                         #NAME,                                                    \
                                         help_,                                                    \
                                         rg_nf_stock_subs,                                         \
                                         RG_NF_STOCK_NSUBS,                                        \
                                         0,                                                        \
                                         init_##NAME,                                              \
                                         rg_nf_stock_fini,                                         \
                                         NULL};                                                    \
    const rg_nf_desc rg_nf_desc_##NAME = {&abi_##NAME, NULL, NULL, NULL}

/* Record the first output error of an NF: "what [path]: strerror(errno)"
 * (later ones add nothing new). */
void rg_nf_fail(rg_nf *nf, const char *what, const char *path);

/* A line output outdir/name (records: JSON lines): through the host's out_open when the NF is
 * made with one (rg_nf_use_host: one file whatever the number of workers, each line written
 * whole when its newline is written, rotated and reopened by the driver), else a plain file
 * (truncated).  NULL with a message in err. */
FILE *rg_nf_open_out(const char *outdir, const char *name, char *err, size_t errlen);
/* A plain file outdir/name (truncated), for what is no line output (streams.json, a
 * summary each worker writes into its own part, added up at the end). */
FILE *rg_nf_open_file(const char *outdir, const char *name, char *err, size_t errlen);

/* fclose, recording a write error (full disk, ...) in nf. */
void rg_nf_close_out(rg_nf *nf, FILE *f, const char *what);

/* The layer of an instance, or NULL if its index is out of range. */
static inline const rg_layer_desc *rg_nf_layer(const rg_stack_desc *stack, unsigned layer)
{
    return layer < stack->nlayers ? &stack->layers[layer] : NULL;
}

/* The endpoints as the other direction's sender sees them: src/sport and
 * dst/dport swapped. */
void rg_nf_endpoints_reverse(const rg_nf_endpoints *ep, rg_nf_endpoints *out);

/* A 4-byte (IPv4, dotted quad) or 16-byte (IPv6, RFC 5952) address as text
 * into out; "" for another length. */
void rg_nf_addr_text(const uint8_t *p, size_t len, char *out, size_t n);

/* The JSON fields "src":..,"dst":..,"sport":..,"dport":.. (ports omitted
 * when absent), each preceded by a comma. */
void rg_nf_json_endpoints(FILE *out, const rg_nf_endpoints *ep);

/* How instance f ended, as the JSON fields of its record, each preceded by a comma, into buf
 * (NUL-terminated, cut at n): "reason" (an accept state: the layer's record field `reason`,
 * else "accept"; "timeout", "evicted", "flushed" for the other close reasons), "late_packets"
 * (after the accept state: spec linger:) and the layer's other record fields (spec record:). */
void rg_nf_end_fields(char *buf, size_t n, const rg_stack_desc *stack, const rg_flow_info *f,
                      int reason);

/* The close reason's name in records ("reason", as rg_nf_end_fields writes it). */
const char *rg_nf_reason(const rg_stack_desc *stack, const rg_flow_info *f, int reason);

/* The record of instance f in m: the one made at its first sighting, or a
 * new one (size bytes, zeroed; *created = 1) whose endpoints
 * (rg_nf_endpoints_of, read now: the keys are gone after on_close) are at
 * byte offset ep_off.  NULL when out of memory (recorded in nf). */
void *rg_nf_flow_of(rg_nf *nf, rg_nf_map *m, const rg_flow_info *f, size_t size, size_t ep_off,
                    int *created);

/* ---- ICMP on flow records (rg_nf_icmp.c) ---- */

/* An ICMP/ICMPv6 error that quoted a datagram of a flow (a handler hooked on the
 * `icmp_error` event, rg_call.flow the flow: specs/protocols/icmp_quote.yaml). */
typedef struct rg_nf_icmp_err {
    uint8_t type, code;
    char reporter[48]; /* the error's source address, as text */
    uint64_t ts;
} rg_nf_icmp_err;

/* What a flow record keeps of ICMP: an ICMP conversation's first packet's type and code (-1:
 * not one) and the errors quoting the flow's datagrams, in order.  Start with type = code =
 * -1 and the rest zeroed; free errors. */
typedef struct rg_nf_icmp {
    int16_t type, code;
    rg_nf_icmp_err *errors;
    uint32_t nerrors, cap;
} rg_nf_icmp;

/* Per handler: RG_NF_ICMP_FIRST the first packet of an ICMP conversation (numeric arguments
 * icmp_type and icmp_code), RG_NF_ICMP_ERROR an ICMP error naming the flow it answers (hooked
 * on icmp_error, with type, code, reporter); 0 neither.  Zeroed at first; built at the first
 * call; then the argument indexes.  Free with rg_nf_icmp_cls_free. */
enum { RG_NF_ICMP_FIRST = 1, RG_NF_ICMP_ERROR = 2 };
typedef struct rg_nf_icmp_cls {
    uint8_t *hkind;
    int16_t (*hargs)[3];
} rg_nf_icmp_cls;

/* What call c tells of its flow's ICMP (0: nothing, or no flow, or a lifecycle call). */
int rg_nf_icmp_kind(rg_nf *nf, rg_nf_icmp_cls *cls, const rg_call *c);
/* Keep in r what c tells (rg_nf_icmp_kind(c) != 0), ep the flow's endpoints: the first
 * packet's type and code also set its ICMP Community ID. */
void rg_nf_icmp_note(rg_nf *nf, const rg_nf_icmp_cls *cls, const rg_call *c, rg_nf_icmp *r,
                     rg_nf_endpoints *ep);
/* Writes r's "icmp_type"/"icmp_code" and "icmp_errors" fields (each preceded by a comma)
 * when it has them. */
void rg_nf_icmp_json(FILE *out, const rg_nf_icmp *r);
void rg_nf_icmp_cls_free(rg_nf_icmp_cls *cls);

/* ---- flow records (flowstats, flowexport: rg_nf_flows.c) ---- */

/* One instance's counters, by direction (0: from the side that created it). */
typedef struct rg_nf_flowrec {
    uint64_t uid;
    uint16_t layer;
    uint64_t packets[2], bytes[2]; /* bytes: the layer's length argument of on_packet */
    uint64_t first_ts, last_ts;
    rg_nf_endpoints ep; /* read at open: the keys are gone after on_close */
    rg_nf_icmp icmp;
} rg_nf_flowrec;

typedef struct rg_nf_flows rg_nf_flows;
/* Write r's line (or not): at its close (f: the instance, with reason and complete) or, f
 * NULL, still open when the run ends. */
typedef void (*rg_nf_flows_write)(rg_nf_flows *nf, const rg_nf_flowrec *r, const rg_flow_info *f,
                                  int reason, int complete);
struct rg_nf_flows {
    rg_nf base;
    FILE *out;
    const char *file; /* its name in outdir */
    rg_nf_map flows;  /* uid -> rg_nf_flowrec */
    rg_nf_flows_write write;
    rg_nf_icmp_cls icmp;
};

/* A flow-record NF of size bytes (a struct starting with rg_nf_flows) writing outdir/file
 * with write (file NULL: no file, write sends its records elsewhere); NULL with a message in
 * err. */
rg_nf_flows *rg_nf_flows_new(size_t size, const char *outdir, const char *file,
                             rg_nf_flows_write write, char *err, size_t errlen);

/* The IANA protocolIdentifier of a layer's protocol name (6 tcp, 17 udp, 132 sctp), -1 for
 * another. */
int rg_nf_proto_number(const char *protocol);
/* RFC 7012 flowEndReason (5.11.3) of a close reason: 1 idle timeout, 3 end of flow detected,
 * 4 forced end (end of capture, shutdown, still open), 5 lack of resources. */
int rg_nf_end_reason(int reason);
/* Whether r is a transport flow: both addresses and both ports in its key (TCP, UDP, SCTP). */
int rg_nf_is_transport(const rg_nf_flowrec *r);
/* The side of closed instance f that is the client (the SYN sender): 1 when the layer's record
 * field "originator" names side p and its "history" letters show a SYN or SYN-ACK (S, H, s, h:
 * the handshake was seen), else 0: side a, the sender of its first packet (also for a flow
 * picked up mid-stream, and for a layer without these record fields: UDP). */
int rg_nf_client_side(const rg_stack_desc *stack, const rg_flow_info *f);

#endif /* RG_NF_INT_H */
