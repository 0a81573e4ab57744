/* block_nf.c - a sample blocker NF (rg_nf_api.h minor 3, events between NFs): it subscribes
 * to the chain's event `flagged` (raised by an NF before it, such as examples/nf/detect_nf.c)
 * and drops the flow it was raised for: the packet that raised it and every later packet of
 * the flow, both directions (RG_DROP_FLOW; or reject: `verdict: reject`, a TCP RST to the
 * sender or an ICMP unreachable, then the flow's later packets dropped).  One line per flow
 * it blocks in OUT/blocked.jsonl:
 *
 *     {"uid":U,"pkt":P,"dir":0|1,"reason":"...","raiser":K}
 *
 * (P: the packet number; reason: the event's `reason` field, printable ASCII else \u00XX;
 * raiser: the chain position of the NF that raised it.)  Parameters:
 * verdict (drop_flow, the default; drop: this packet only; reject), inject (none, the default;
 * sender, receiver or both: TCP RSTs built from the flagging packet sent to that side of the
 * flow with rg_nf_host.inject, so both ends learn at once that the connection is over; with
 * drop_flow the receiver's RST carries exactly its next expected sequence number), file
 * (default blocked.jsonl). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rg/rg_nf_api.h"

typedef struct nf {
    const rg_nf_host *host;
    void *out;
    int verdict;
    unsigned inject; /* RG_INJECT_* */
} nf;

static int on_flagged(void *self, const rg_nf_ev *ev, void *st)
{
    (void)st;
    nf *n = self;
    const rg_val *reason = rg_nf_ev_field(ev, "reason");
    char line[1024];
    size_t k = (size_t)snprintf(line, sizeof line,
                                "{\"uid\":%" PRIu64 ",\"pkt\":%" PRIu64 ",\"dir\":%u,\"reason\":\"",
                                ev->flow ? ev->flow->uid : 0, ev->pkt_no, (unsigned)ev->dir);
    for (size_t i = 0; reason && reason->kind == RG_VAL_BYTES && i < reason->bytes.len &&
                       k + 8 < sizeof line - 16;
         i++) {
        unsigned char c = reason->bytes.ptr[i];
        k += (size_t)(c >= 0x20 && c < 0x7f && c != '"' && c != '\\'
                          ? snprintf(line + k, sizeof line - k, "%c", c)
                          : snprintf(line + k, sizeof line - k, "\\u%04x", c));
    }
    k += (size_t)snprintf(line + k, sizeof line - k, "\",\"raiser\":%u}", (unsigned)ev->raiser);
    if (n->out) n->host->out_write(n->out, line, k < sizeof line ? k : sizeof line - 1);
    if (n->inject && n->host->inject(ev, n->inject))
        fprintf(stderr, "block: cannot inject for packet %llu\n", (unsigned long long)ev->pkt_no);
    return n->verdict;
}

static const rg_nf_sub subs[] = {{"*", "flagged", on_flagged, 0}};

static void *init(const rg_stack_desc *stack, const rg_nf_kv *cfg, unsigned ncfg,
                  const rg_nf_host *host, char *err, size_t errlen)
{
    (void)stack;
    const char *v = rg_nf_cfg_get(cfg, ncfg, "verdict", "drop_flow");
    int verdict = !strcmp(v, "drop_flow") ? RG_DROP_FLOW
                  : !strcmp(v, "drop")    ? RG_DROP
                  : !strcmp(v, "reject")  ? RG_REJECT
                                          : -1;
    if (verdict < 0) {
        snprintf(err, errlen, "block: verdict is drop_flow, drop or reject, not '%s'", v);
        return NULL;
    }
    const char *in = rg_nf_cfg_get(cfg, ncfg, "inject", "none");
    int inject = !strcmp(in, "none")       ? 0
                 : !strcmp(in, "sender")   ? RG_INJECT_RST_SENDER
                 : !strcmp(in, "receiver") ? RG_INJECT_RST_RECEIVER
                 : !strcmp(in, "both")     ? RG_INJECT_RST_SENDER | RG_INJECT_RST_RECEIVER
                                           : -1;
    if (inject < 0) {
        snprintf(err, errlen, "block: inject is none, sender, receiver or both, not '%s'", in);
        return NULL;
    }
    if (!RG_NF_HAS_RAISE(host) || (inject && !RG_NF_HAS_INJECT(host))) {
        snprintf(err, errlen, "block: this driver has no events between NFs (ABI minor 3)");
        return NULL;
    }
    nf *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->host = host;
    n->verdict = verdict;
    n->inject = (unsigned)inject;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", rg_nf_cfg_get(cfg, ncfg, "out", "."),
             rg_nf_cfg_get(cfg, ncfg, "file", "blocked.jsonl"));
    n->out = host->out_open(host, path, err, errlen);
    if (!n->out) {
        free(n);
        return NULL;
    }
    return n;
}

static int fini(void *self, char *err, size_t errlen)
{
    nf *n = self;
    int rc = n->host->out_close(n->out, err, errlen);
    free(n);
    return rc;
}

RG_NF_EXPORT = {RG_NF_ABI_VERSION,
                sizeof(rg_nf_abi),
                "block",
                "drops (or rejects) the flows an earlier NF raised `flagged` for",
                subs,
                sizeof subs / sizeof subs[0],
                0,
                init,
                fini,
                NULL};
