/* rg_nf_hostlog.c - the "hostlog" NF: the server name of every TLS ClientHello (SNI) and HTTP
 * request (Host header) as JSON lines, on reassembled data.
 *
 * It reads two kinds of handler calls, by argument names, so it serves any stack that has them:
 * - TLS: a call with a byte argument "sni" (the stock tls_hello handlers, whose tls layer gets
 *   a whole ClientHello however many segments carried it; QUIC Initials too);
 * - HTTP: a call with a byte argument "data" made for a user-defined event whose name starts
 *   with "http_request" (rg_handler_desc.events; specs/stacks/tcp_tls_http.yaml raises it when
 *   TCP's in-order bytes start with a request method).  The Host header is looked up in the
 *   request head within those bytes (up to the blank line); a head cut by the end of the
 *   delivered bytes yields what it holds, and a request without Host gives "host": null.
 * Endpoints come from the optional arguments saddr, daddr (4 or 16 bytes), sport, dport.
 * Output: OUT/hostlog.jsonl, one line per record:
 *   {"pkt":N,"ts":NS,"proto":"tls"|"http","layer":L,"src":..,"dst":..,"sport":..,"dport":..,
 *    "community_id":ID|null,"host":STRING|null}  (for http also "method" and "uri";
 *    community_id: the Community ID v1 of the call's instance, rg_nf.h) */
#include "rg_nf_int.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct nf_hostlog {
    rg_nf base;
    FILE *out;
    uint8_t *http; /* per handler: 1 if it is made for an http_request* event */
    /* the instance the last packet reached (NULL once it closed): the flow of the calls of a
     * layer without instances above it (a ClientHello over TCP or QUIC), for its Community ID */
    const rg_flow_info *last;
} nf_hostlog;

static void on_packet(void *self, const rg_flow_info *f, int dir, uint32_t len, uint64_t ts_ns)
{
    (void)dir, (void)len, (void)ts_ns;
    ((nf_hostlog *)self)->last = f;
}

static void on_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns)
{
    (void)reason, (void)complete, (void)ts_ns;
    nf_hostlog *nf = self;
    if (nf->last == f) nf->last = NULL;
}

static const rg_val *arg(const rg_handler_desc *h, const rg_call *c, const char *name, int kind)
{
    for (unsigned i = 0; i < h->nargs; i++)
        if (h->arg_kinds[i] == kind && !strcmp(h->arg_names[i], name)) return &c->args[i];
    return NULL;
}

/* whether a space-separated event list names an event starting with "http_request" */
static int http_event(const char *events)
{
    static const char want[] = "http_request";
    for (const char *p = events; p && *p;) {
        while (*p == ' ')
            p++;
        if (!strncmp(p, want, sizeof want - 1)) return 1;
        while (*p && *p != ' ')
            p++;
    }
    return 0;
}

static void head(nf_hostlog *nf, const rg_call *c, const char *proto)
{
    const rg_handler_desc *h = &nf->base.stack->handlers[c->handler];
    const rg_layer_desc *l = rg_nf_layer(nf->base.stack, c->layer);
    const rg_val *sa = arg(h, c, "saddr", RG_VAL_BYTES), *da = arg(h, c, "daddr", RG_VAL_BYTES);
    const rg_val *sp = arg(h, c, "sport", RG_VAL_NUM), *dp = arg(h, c, "dport", RG_VAL_NUM);
    char src[48] = "", dst[48] = "";
    if (sa) rg_nf_addr_text(sa->bytes.ptr, sa->bytes.len, src, sizeof src);
    if (da) rg_nf_addr_text(da->bytes.ptr, da->bytes.len, dst, sizeof dst);
    fprintf(nf->out,
            "{\"pkt\":%llu,\"ts\":%llu,\"proto\":\"%s\",\"layer\":", (unsigned long long)c->pkt_no,
            (unsigned long long)c->ts_ns, proto);
    rg_json_string(nf->out, l ? l->name : NULL);
    fprintf(nf->out, ",\"src\":\"%s\",\"dst\":\"%s\",\"sport\":%llu,\"dport\":%llu", src, dst,
            sp ? (unsigned long long)sp->num : 0ull, dp ? (unsigned long long)dp->num : 0ull);
    /* the flow's Community ID: of the instance the call is on, or, for a layer without
     * instances, of the one the packet last reached when its ports are the call's */
    rg_nf_endpoints ep = {0};
    const rg_flow_info *f = c->flow ? c->flow : nf->last;
    const rg_layer_desc *fl = f ? rg_nf_layer(nf->base.stack, f->layer) : NULL;
    if (fl) rg_nf_endpoints_of(fl, f, &ep);
    if (!c->flow && !(sp && dp && ep.has_sport && ep.has_dport &&
                      ((ep.sport == sp->num && ep.dport == dp->num) ||
                       (ep.sport == dp->num && ep.dport == sp->num))))
        ep.community_id[0] = '\0';
    fputs(",\"community_id\":", nf->out);
    rg_json_string(nf->out, ep.community_id[0] ? ep.community_id : NULL);
}

/* the next line of [p, end): its length without CR LF; *next after it */
static size_t line_of(const uint8_t *p, const uint8_t *end, const uint8_t **next)
{
    const uint8_t *q = memchr(p, '\n', (size_t)(end - p));
    if (!q) {
        *next = end;
        return (size_t)(end - p);
    }
    *next = q + 1;
    return (size_t)(q - p) - (q > p && q[-1] == '\r');
}

static void http(nf_hostlog *nf, const rg_call *c, const rg_val *data)
{
    const uint8_t *p = data->bytes.ptr, *end = p + data->bytes.len, *next;
    size_t n = line_of(p, end, &next);
    const uint8_t *sp1 = memchr(p, ' ', n);
    if (!sp1) return; /* not a request line */
    const uint8_t *uri = sp1 + 1;
    const uint8_t *sp2 = memchr(uri, ' ', (size_t)(p + n - uri));
    size_t ulen = sp2 ? (size_t)(sp2 - uri) : (size_t)(p + n - uri);
    head(nf, c, "http");
    fputs(",\"method\":", nf->out);
    rg_json_bytes(nf->out, p, (size_t)(sp1 - p));
    fputs(",\"uri\":", nf->out);
    rg_json_bytes(nf->out, uri, ulen);
    fputs(",\"host\":", nf->out);
    for (p = next; p < end; p = next) {
        n = line_of(p, end, &next);
        if (n == 0) break; /* end of the head */
        if (n >= 5 && !strncasecmp((const char *)p, "host:", 5)) {
            const uint8_t *v = p + 5, *e = p + n;
            while (v < e && (*v == ' ' || *v == '\t'))
                v++;
            while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
                e--;
            rg_json_bytes(nf->out, v, (size_t)(e - v));
            fputs("}\n", nf->out);
            return;
        }
    }
    fputs("null}\n", nf->out);
}

static void on_call(void *self, const rg_call *c)
{
    nf_hostlog *nf = self;
    const rg_stack_desc *s = nf->base.stack;
    if (c->handler >= s->nhandlers || c->end) return;
    const rg_handler_desc *h = &s->handlers[c->handler];
    const rg_val *sni = arg(h, c, "sni", RG_VAL_BYTES);
    if (sni) {
        head(nf, c, "tls");
        fputs(",\"host\":", nf->out);
        if (sni->bytes.len)
            rg_json_bytes(nf->out, sni->bytes.ptr, sni->bytes.len);
        else
            fputs("null", nf->out);
        fputs("}\n", nf->out);
        return;
    }
    const rg_val *data = nf->http[c->handler] ? arg(h, c, "data", RG_VAL_BYTES) : NULL;
    if (data && data->bytes.len) http(nf, c, data);
}

static int finish(rg_nf *base)
{
    nf_hostlog *nf = (nf_hostlog *)base;
    rg_nf_close_out(base, nf->out, "hostlog.jsonl");
    free(nf->http);
    return RG_OK;
}

rg_nf *rg_nf_hostlog_new(const rg_stack_desc *stack, const char *outdir, char *err, size_t errlen)
{
    if (rg_mkdirs(outdir, err, errlen) != RG_OK) return NULL;
    nf_hostlog *nf = calloc(1, sizeof *nf);
    if (nf) nf->http = calloc(stack->nhandlers + 1u, 1);
    if (!nf || !nf->http) {
        if (nf) free(nf);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (unsigned i = 0; i < stack->nhandlers; i++)
        nf->http[i] = (uint8_t)http_event(stack->handlers[i].events);
    nf->out = rg_nf_open_out(outdir, "hostlog.jsonl", err, errlen);
    if (!nf->out) {
        free(nf->http);
        free(nf);
        return NULL;
    }
    nf->base.obs.on_call = on_call;
    nf->base.obs.on_packet = on_packet;
    nf->base.obs.on_close = on_close;
    nf->base.finish = finish;
    return &nf->base;
}
