/* recorder_nf.c - a test NF (tests/runtime/test_nf_chain.py): logs every event it
 * receives, one line each, to the file named by its "log" parameter
 * (appended, flushed per line, so several recorders in one chain interleave
 * in call order):
 *
 *     TAG KIND PKT HANDLER UID DIR SEQ HEX
 *
 * KIND: call, open, close; PKT: the call's packet number (0 otherwise);
 * HANDLER: the handler's name ("-"); UID: the flow's uid (0: none); SEQ: the
 * events of this flow this NF saw so far (per-flow state); HEX: the call's
 * "data" argument ("-": none).  Parameters: tag, log, drop (packet numbers,
 * comma-separated: the verdict RG_DROP on every call of those packets),
 * unsub_after (bytes: once the flow delivered that many data bytes, both
 * directions together, the NF unsubscribes from the handler events of this
 * flow), nobytes_after (bytes: once a direction delivered that many, the NF
 * asks for no more bytes of that direction; it stays subscribed).  With
 * --workers N > 1 each worker's instance logs to LOG.K (K: its worker). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rg/rg_nf_api.h"

typedef struct nf {
    const rg_stack_desc *stack;
    FILE *log;
    char tag[32];
    uint64_t drop[64];
    unsigned ndrop;
    uint64_t unsub_after, nobytes_after;
} nf;

typedef struct flow {
    uint64_t seq;
    uint64_t bytes[2];
} flow;

static int dropped(const nf *n, uint64_t pkt)
{
    for (unsigned i = 0; i < n->ndrop; i++)
        if (n->drop[i] == pkt) return 1;
    return 0;
}

static int on_event(void *self, const rg_nf_ev *ev, void *st)
{
    nf *n = self;
    flow *f = st;
    if (f) f->seq++;
    const char *kind = ev->kind == RG_NF_EV_CALL ? "call" : ev->kind == RG_NF_EV_OPEN ? "open"
                                                                                      : "close";
    const rg_val *data = NULL;
    if (ev->call) {
        data = rg_nf_call_arg(n->stack, ev->call, "data");
        if (data && data->kind != RG_VAL_BYTES) data = NULL;
    }
    fprintf(n->log, "%s %s %" PRIu64 " %s %" PRIu64 " %u %" PRIu64 " ", n->tag, kind,
            ev->call ? ev->pkt_no : 0,
            ev->call ? n->stack->handlers[ev->call->handler].name : "-",
            ev->flow ? ev->flow->uid : 0, (unsigned)ev->dir, f ? f->seq : 0);
    if (data && data->bytes.len) {
        for (size_t i = 0; i < data->bytes.len; i++)
            fprintf(n->log, "%02x", data->bytes.ptr[i]);
    } else {
        fputc('-', n->log);
    }
    fputc('\n', n->log);
    fflush(n->log);
    if (data && f) {
        f->bytes[ev->dir & 1] += data->bytes.len;
        if (n->unsub_after && f->bytes[0] + f->bytes[1] >= n->unsub_after)
            ev->host->subscribe(ev, ev->sub, 0);
        if (n->nobytes_after && f->bytes[ev->dir & 1] >= n->nobytes_after)
            ev->host->no_more_bytes(ev, ev->dir);
    }
    return ev->call && dropped(n, ev->pkt_no) ? RG_DROP : RG_PASS;
}

static const rg_nf_sub subs[] = {
    {"*", "*", on_event, 0},
    {"*", RG_NF_OPEN, on_event, 0},
    {"*", RG_NF_CLOSE, on_event, 0},
};

static void *init(const rg_stack_desc *stack, const rg_nf_kv *cfg, unsigned ncfg,
                  const rg_nf_host *host, char *err, size_t errlen)
{
    const char *log = rg_nf_cfg_get(cfg, ncfg, "log", NULL);
    if (!log) {
        snprintf(err, errlen, "the parameter 'log' is required");
        return NULL;
    }
    nf *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->stack = stack;
    snprintf(n->tag, sizeof n->tag, "%s", rg_nf_cfg_get(cfg, ncfg, "tag", "rec"));
    n->unsub_after = strtoull(rg_nf_cfg_get(cfg, ncfg, "unsub_after", "0"), NULL, 10);
    n->nobytes_after = strtoull(rg_nf_cfg_get(cfg, ncfg, "nobytes_after", "0"), NULL, 10);
    const char *d = rg_nf_cfg_get(cfg, ncfg, "drop", "");
    while (*d && n->ndrop < 64) {
        char *end;
        n->drop[n->ndrop++] = strtoull(d, &end, 10);
        d = *end == ',' ? end + 1 : end + strlen(end);
    }
    /* --workers N > 1: one instance per worker, each its own log (LOG.K) */
    char wlog[4096];
    if (host && host->size >= offsetof(rg_nf_host, nworkers) + sizeof host->nworkers &&
        host->nworkers > 1) {
        snprintf(wlog, sizeof wlog, "%s.%u", log, (unsigned)host->worker);
        log = wlog;
    }
    n->log = fopen(log, "a");
    if (!n->log) {
        snprintf(err, errlen, "cannot open %s", log);
        free(n);
        return NULL;
    }
    return n;
}

static int fini(void *self, char *err, size_t errlen)
{
    nf *n = self;
    fprintf(n->log, "%s fini\n", n->tag);
    int bad = fclose(n->log);
    free(n);
    if (bad) snprintf(err, errlen, "cannot write the log");
    return bad ? RG_EIO : RG_OK;
}

RG_NF_EXPORT = {RG_NF_ABI_VERSION,
                sizeof(rg_nf_abi),
                "recorder",
                "logs every event (tests)",
                subs,
                sizeof subs / sizeof subs[0],
                sizeof(flow),
                init,
                fini,
                NULL};
