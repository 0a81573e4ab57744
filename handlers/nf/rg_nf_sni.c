/* rg_nf_sni.c - the "sni" NF: one line per TLS ClientHello, whatever carried it (TLS over TCP,
 * QUIC Initials), and one per ServerHello.  It listens to handler calls that have a byte
 * argument named "sni" (the stock stacks' tls_hello handlers on the tls_client_hello layer) and
 * reads, by name, the optional arguments saddr, daddr (4 or 16 bytes), sport, dport, alpn (the
 * ALPN protocol_name_list without its length: length-prefixed names), supported_versions, and
 * version, cipher_suites and extensions (the extension block's bytes), from which it computes
 * JA3 (the string and its MD5, as Wireshark's tls.handshake.ja3_full and tls.handshake.ja3:
 * GREASE values left out).  Calls with a numeric argument "cipher" and no "sni" (tcp_tls's
 * tls_server handlers) are ServerHellos: "server" lines with version, cipher, selected_version
 * and alpn. */
#include "rg_nf_int.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

typedef struct nf_sni {
    rg_nf base;
    FILE *out;
    uint64_t hellos;
    uint64_t servers;
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

/* GREASE (RFC 8701): 0x?a?a with both bytes equal; JA3 leaves these values out */
static int grease(unsigned v)
{
    return (v & 0x0f0f) == 0x0a0a && (v >> 8) == (v & 0xff);
}

typedef struct ja3_buf {
    char s[4096];
    size_t n;
    int cut;
} ja3_buf;

static void ja3_put(ja3_buf *b, const char *fmt, unsigned v)
{
    int k = snprintf(b->s + b->n, sizeof b->s - b->n, fmt, v);
    if (k < 0 || (size_t)k >= sizeof b->s - b->n) {
        b->cut = 1;
        return;
    }
    b->n += (size_t)k;
}

/* a list of 16-bit (w 2) or 8-bit (w 1) values, '-'-separated, GREASE out (16-bit only) */
static void ja3_list(ja3_buf *b, const uint8_t *p, size_t len, unsigned w)
{
    int first = 1;
    for (size_t i = 0; i + w <= len; i += w) {
        unsigned v = w == 2 ? (unsigned)(p[i] << 8 | p[i + 1]) : p[i];
        if (w == 2 && grease(v)) continue;
        ja3_put(b, first ? "%u" : "-%u", v);
        first = 0;
    }
}

/* JA3: version,ciphers,extensions,groups,point formats, from the extension block's bytes */
static void ja3(ja3_buf *b, unsigned version, const rg_val *cs, const rg_val *ext)
{
    const uint8_t *groups = NULL, *formats = NULL;
    size_t ngroups = 0, nformats = 0;
    ja3_put(b, "%u,", version);
    if (cs) ja3_list(b, cs->bytes.ptr, cs->bytes.len, 2);
    ja3_put(b, ",", 0);
    int first = 1;
    for (size_t i = 0; ext && i + 4 <= ext->bytes.len;) {
        const uint8_t *e = ext->bytes.ptr + i;
        unsigned type = (unsigned)(e[0] << 8 | e[1]), len = (unsigned)(e[2] << 8 | e[3]);
        if (i + 4 + len > ext->bytes.len) break;
        if (!grease(type)) {
            ja3_put(b, first ? "%u" : "-%u", type);
            first = 0;
        }
        if (type == 10 && len >= 2) { /* supported_groups: a 16-bit length, then the groups */
            size_t l = (size_t)(e[4] << 8 | e[5]);
            groups = e + 6;
            ngroups = l <= len - 2u ? l : len - 2u;
        }
        if (type == 11 && len >= 1) { /* ec_point_formats: an 8-bit length, then the formats */
            size_t l = e[4];
            formats = e + 5;
            nformats = l <= len - 1u ? l : len - 1u;
        }
        i += 4 + len;
    }
    ja3_put(b, ",", 0);
    if (groups) ja3_list(b, groups, ngroups, 2);
    ja3_put(b, ",", 0);
    if (formats) ja3_list(b, formats, nformats, 1);
}

/* a hello's endpoints and layer, from the arguments saddr, daddr, sport, dport */
typedef struct ends {
    char src[48], dst[48];
    unsigned long long sport, dport;
    const rg_layer_desc *l;
} ends;

static void ends_of(const rg_stack_desc *s, const rg_call *c, ends *e)
{
    addr(arg(s, c, "saddr", RG_VAL_BYTES), e->src, sizeof e->src);
    addr(arg(s, c, "daddr", RG_VAL_BYTES), e->dst, sizeof e->dst);
    const rg_val *sp = arg(s, c, "sport", RG_VAL_NUM), *dp = arg(s, c, "dport", RG_VAL_NUM);
    e->sport = sp ? (unsigned long long)sp->num : 0ull;
    e->dport = dp ? (unsigned long long)dp->num : 0ull;
    e->l = rg_nf_layer(s, c->layer);
}

static void on_server(nf_sni *nf, const rg_call *c, const rg_val *cipher)
{
    const rg_stack_desc *s = nf->base.stack;
    ends e;
    ends_of(s, c, &e);
    const rg_val *ver = arg(s, c, "version", RG_VAL_NUM);
    const rg_val *sel = arg(s, c, "selected_version", RG_VAL_NUM);
    const rg_val *alpn = arg(s, c, "alpn", RG_VAL_BYTES);
    const unsigned long long v = ver ? (unsigned long long)ver->num : 0ull;
    nf->servers++;
    fprintf(nf->out, "{\"pkt\":%llu,\"layer\":", (unsigned long long)c->pkt_no);
    rg_json_string(nf->out, e.l ? e.l->name : NULL);
    fprintf(nf->out,
            ",\"server\":true,\"src\":\"%s\",\"dst\":\"%s\",\"sport\":%llu,\"dport\":%llu,"
            "\"version\":%llu,\"cipher\":%llu,\"selected_version\":%llu,\"alpn\":",
            e.src, e.dst, e.sport, e.dport, v, (unsigned long long)cipher->num,
            sel ? (unsigned long long)sel->num : 0ull);
    printf("server %s %s:%llu -> %s:%llu version=%llu cipher=0x%04llx alpn=", e.l ? e.l->name : "?",
           e.src, e.sport, e.dst, e.dport, v, (unsigned long long)cipher->num);
    alpn_list(nf->out, stdout, alpn);
    fputs("}\n", nf->out);
    putchar('\n');
}

static void on_call(void *self, const rg_call *c)
{
    nf_sni *nf = self;
    const rg_stack_desc *s = nf->base.stack;
    if (c->handler >= s->nhandlers) return;
    const rg_val *sni = arg(s, c, "sni", RG_VAL_BYTES);
    if (!sni) {
        const rg_val *cipher = arg(s, c, "cipher", RG_VAL_NUM);
        if (cipher) on_server(nf, c, cipher);
        return;
    }
    nf->hellos++;
    ends e;
    ends_of(s, c, &e);
    const rg_val *alpn = arg(s, c, "alpn", RG_VAL_BYTES);
    const rg_val *sv = arg(s, c, "supported_versions", RG_VAL_BYTES);

    fprintf(nf->out, "{\"pkt\":%llu,\"layer\":", (unsigned long long)c->pkt_no);
    rg_json_string(nf->out, e.l ? e.l->name : NULL);
    fprintf(nf->out, ",\"src\":\"%s\",\"dst\":\"%s\",\"sport\":%llu,\"dport\":%llu,\"sni\":", e.src,
            e.dst, e.sport, e.dport);
    if (sni->bytes.len)
        rg_json_bytes(nf->out, sni->bytes.ptr, sni->bytes.len);
    else
        fputs("null", nf->out);
    fputs(",\"alpn\":", nf->out);
    printf("sni %s %s:%llu -> %s:%llu %.*s alpn=", e.l ? e.l->name : "?", e.src, e.sport, e.dst,
           e.dport, sni->bytes.len ? (int)sni->bytes.len : 1,
           sni->bytes.len ? (const char *)sni->bytes.ptr : "-");
    alpn_list(nf->out, stdout, alpn);
    fputs(",\"versions\":[", nf->out);
    for (size_t i = 0; sv && i + 1 < sv->bytes.len; i += 2) {
        unsigned v = (unsigned)(sv->bytes.ptr[i] << 8 | sv->bytes.ptr[i + 1]);
        fprintf(nf->out, "%s%u", i ? "," : "", v);
    }
    fputs("]", nf->out);
    const rg_val *ver = arg(s, c, "version", RG_VAL_NUM);
    const rg_val *ext = arg(s, c, "extensions", RG_VAL_BYTES);
    if (ver) {
        static ja3_buf b;
        b.n = 0;
        b.cut = 0;
        ja3(&b, (unsigned)ver->num, arg(s, c, "cipher_suites", RG_VAL_BYTES), ext);
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned mdlen = 0;
        fputs(",\"ja3_full\":", nf->out);
        rg_json_bytes(nf->out, (const uint8_t *)b.s, b.n);
        if (!b.cut && EVP_Digest(b.s, b.n, md, &mdlen, EVP_md5(), NULL) && mdlen == 16) {
            fputs(",\"ja3\":\"", nf->out);
            for (unsigned i = 0; i < 16; i++)
                fprintf(nf->out, "%02x", md[i]);
            fputc('"', nf->out);
            printf(" ja3=");
            for (unsigned i = 0; i < 16; i++)
                printf("%02x", md[i]);
        }
    }
    fputs("}\n", nf->out);
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
