/* rg_nf_sni.c - the "sni" NF: one line per TLS ClientHello, whatever carried it (TLS over TCP,
 * QUIC Initials).  It listens to handler calls that have a byte argument named "sni" (the
 * stock stacks' tls_hello handlers on the tls_client_hello layer) and reads, by name, the
 * optional arguments saddr, daddr (4 or 16 bytes), sport, dport, alpn (the ALPN
 * protocol_name_list without its length: length-prefixed names) and supported_versions. */
#include "rg_nf_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct nf_sni {
    rg_nf base;
    FILE *out;
    uint64_t hellos;
} nf_sni;

static const rg_val *arg(const rg_stack_desc *s, const rg_call *c, const char *name, int kind)
{
    const rg_handler_desc *h = &s->handlers[c->handler];
    for (unsigned i = 0; i < h->nargs; i++)
        if (h->arg_kinds[i] == kind && !strcmp(h->arg_names[i], name)) return &c->args[i];
    return NULL;
}

static void addr(const rg_val *v, char *out, size_t n)
{
    out[0] = 0;
    if (v) rg_nf_addr_text(v->bytes.ptr, v->bytes.len, out, n);
}

/* the ALPN names (RFC 7301 3.1: each a length byte and the name), as a JSON list and, on
 * stdout, comma-separated; a name running past the end ends the list */
static void alpn_list(FILE *json, FILE *text, const rg_val *v)
{
    fputc('[', json);
    size_t i = 0, k = 0;
    while (v && i < v->bytes.len) {
        size_t n = v->bytes.ptr[i];
        if (n == 0 || i + 1 + n > v->bytes.len) break;
        if (k++) {
            fputc(',', json);
            fputc(',', text);
        }
        rg_json_bytes(json, v->bytes.ptr + i + 1, n);
        for (size_t j = 0; j < n; j++) {
            uint8_t b = v->bytes.ptr[i + 1 + j];
            fputc(b >= 0x20 && b < 0x7f && b != ',' ? b : '?', text);
        }
        i += 1 + n;
    }
    fputc(']', json);
    if (!k) fputc('-', text);
}

static void on_call(void *self, const rg_call *c)
{
    nf_sni *nf = self;
    const rg_stack_desc *s = nf->base.stack;
    if (c->handler >= s->nhandlers) return;
    const rg_val *sni = arg(s, c, "sni", RG_VAL_BYTES);
    if (!sni) return;
    nf->hellos++;
    char src[48], dst[48];
    addr(arg(s, c, "saddr", RG_VAL_BYTES), src, sizeof src);
    addr(arg(s, c, "daddr", RG_VAL_BYTES), dst, sizeof dst);
    const rg_val *sp = arg(s, c, "sport", RG_VAL_NUM), *dp = arg(s, c, "dport", RG_VAL_NUM);
    const rg_val *alpn = arg(s, c, "alpn", RG_VAL_BYTES);
    const rg_val *sv = arg(s, c, "supported_versions", RG_VAL_BYTES);
    const rg_layer_desc *l = rg_nf_layer(s, c->layer);

    fprintf(nf->out, "{\"pkt\":%llu,\"layer\":", (unsigned long long)c->pkt_no);
    rg_json_string(nf->out, l ? l->name : NULL);
    fprintf(nf->out, ",\"src\":\"%s\",\"dst\":\"%s\",\"sport\":%llu,\"dport\":%llu,\"sni\":", src,
            dst, sp ? (unsigned long long)sp->num : 0ull, dp ? (unsigned long long)dp->num : 0ull);
    if (sni->bytes.len)
        rg_json_bytes(nf->out, sni->bytes.ptr, sni->bytes.len);
    else
        fputs("null", nf->out);
    fputs(",\"alpn\":", nf->out);
    printf("sni %s %s:%llu -> %s:%llu %.*s alpn=", l ? l->name : "?", src,
           sp ? (unsigned long long)sp->num : 0ull, dst, dp ? (unsigned long long)dp->num : 0ull,
           sni->bytes.len ? (int)sni->bytes.len : 1,
           sni->bytes.len ? (const char *)sni->bytes.ptr : "-");
    alpn_list(nf->out, stdout, alpn);
    fputs(",\"versions\":[", nf->out);
    for (size_t i = 0; sv && i + 1 < sv->bytes.len; i += 2) {
        unsigned v = (unsigned)(sv->bytes.ptr[i] << 8 | sv->bytes.ptr[i + 1]);
        fprintf(nf->out, "%s%u", i ? "," : "", v);
    }
    fputs("]}\n", nf->out);
    putchar('\n');
}

static int finish(rg_nf *base)
{
    nf_sni *nf = (nf_sni *)base;
    rg_nf_close_out(base, nf->out, "sni.jsonl");
    return RG_OK;
}

rg_nf *rg_nf_sni_new(const rg_stack_desc *stack, const char *outdir, char *err, size_t errlen)
{
    (void)stack;
    if (rg_mkdirs(outdir, err, errlen) != RG_OK) return NULL;
    nf_sni *nf = calloc(1, sizeof *nf);
    if (!nf) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    nf->out = rg_nf_open_out(outdir, "sni.jsonl", err, errlen);
    if (!nf->out) {
        free(nf);
        return NULL;
    }
    nf->base.obs.on_call = on_call;
    nf->base.finish = finish;
    return &nf->base;
}
