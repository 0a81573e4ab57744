/* rg_nf_apps_dns.c - the apps NF's DNS source: one line per DNS transaction in OUT/dns.jsonl,
 * as Zeek's dns.log has one per query and its response (docs/nf.md, "apps", maps the fields
 * to Zeek's and Suricata's).
 *
 * It reads two handlers by their arguments (the stock tcp_ip_apps stack's dns_message and
 * dns_record, over specs/protocols/dns.yaml and dns_rr.yaml):
 *   a message: numbers trans_id and qr (and opcode, aa, tc, rd, ra, z, ad, cd, rcode), on the
 *     layer whose instance is the transaction (tuple + id): rg_call.flow;
 *   a question or record of the message just announced: bytes dns_msg (the whole message)
 *     and numbers rr_section (0 question, 1 answer, 2 authority, 3 additional), rr_name (the
 *     owner name's offset in dns_msg), rr_type, rr_class, rr_ttl, bytes rr_rdata, and
 *     rr_target (the offset of the name the RDATA holds, 0: none);
 *   a malformed name: bytes dns_msg and number rr_bad_name.
 * Names are read with the runtime's rg_name_read, the reader the spec's name_len() uses.  A
 * transaction's line is written when its instance ends: at the response (accept), at its
 * timeout when no response came, or at the end of the run. */
#include "rg_nf_apps.h"

#include "rg/rg_pkt.h"

#include <stdlib.h>
#include <string.h>

enum { ROLE_MSG = 1, ROLE_RR = 2, ROLE_BAD = 3 };
enum { MAX_RRS = 1024 }; /* per message: the stock stack's dns_rr self-loop bound */

typedef struct dns_rr {
    uint8_t section;
    uint16_t type, klass;
    uint32_t ttl;
    char *name;     /* owner name, text */
    char *target;   /* the RDATA's name as text (NULL: none or unreadable) */
    uint8_t *rdata; /* a copy */
    uint16_t rdlen;
} dns_rr;

typedef struct dns_part {
    uint8_t seen, opcode, rcode, aa, tc, rd, ra, z, ad, cd;
    uint64_t ts;
    char *qname; /* the first question (NULL: none yet) */
    uint16_t qtype, qclass;
    dns_rr *rrs;
    unsigned nrrs, cap;
} dns_part;

typedef struct dns_txn {
    rg_nf_endpoints ep; /* the transaction instance's sides: the first message's sender first */
    uint64_t l4_uid;
    char community_id[32];
    uint16_t trans_id;
    uint8_t first_qr; /* what its first message was: 1 a response, no query seen */
    uint8_t malformed;
    uint32_t queries, responses;
    dns_part q, r; /* the first query and the response */
} dns_txn;

typedef struct dns_src {
    FILE *out;
    rg_nf_map txns; /* transaction instance uid -> dns_txn */
    dns_txn *cur;   /* the transaction of the message being parsed */
    dns_part *part; /* its part that the message's entries go to (NULL: a repeated query) */
} dns_src;

static int role(const rg_stack_desc *stack, const rg_handler_desc *h)
{
    (void)stack;
    if (rg_apps_has_arg(h, "trans_id", RG_VAL_NUM) && rg_apps_has_arg(h, "qr", RG_VAL_NUM))
        return ROLE_MSG;
    if (!rg_apps_has_arg(h, "dns_msg", RG_VAL_BYTES)) return 0;
    if (rg_apps_has_arg(h, "rr_section", RG_VAL_NUM) && rg_apps_has_arg(h, "rr_name", RG_VAL_NUM))
        return ROLE_RR;
    return rg_apps_has_arg(h, "rr_bad_name", RG_VAL_NUM) ? ROLE_BAD : 0;
}

static void *create(rg_nf_apps *nf, FILE *out, char *err, size_t errlen)
{
    (void)nf;
    dns_src *s = calloc(1, sizeof *s);
    if (!s || rg_nf_map_init(&s->txns)) {
        free(s);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->out = out;
    return s;
}

/* The name at off of msg as text (malloc'd), NULL when it cannot be read. */
static char *name_text(const rg_val *msg, uint64_t off)
{
    char buf[RG_NAME_TEXT_MAX];
    size_t n;
    if (!msg || off >= msg->bytes.len ||
        !rg_name_read(msg->bytes.ptr, msg->bytes.len, (size_t)off, buf, sizeof buf, &n))
        return NULL;
    char *t = malloc(n + 1);
    if (t) memcpy(t, buf, n + 1);
    return t;
}

static void part_free(dns_part *p)
{
    for (unsigned i = 0; i < p->nrrs; i++) {
        free(p->rrs[i].name);
        free(p->rrs[i].target);
        free(p->rrs[i].rdata);
    }
    free(p->rrs);
    free(p->qname);
}

static void msg_call(dns_src *s, rg_nf_apps *nf, const rg_call *c)
{
    s->cur = NULL, s->part = NULL;
    if (!c->flow) return;
    int created;
    dns_txn *t = rg_nf_flow_of((rg_nf *)nf, &s->txns, c->flow, sizeof *t, 0, &created);
    if (!t) return;
    uint64_t qr = rg_apps_num(nf, c, "qr", 0);
    if (created) {
        rg_nf_endpoints l4;
        t->l4_uid = rg_apps_transport(nf, &l4);
        if (t->l4_uid) memcpy(t->community_id, l4.community_id, sizeof t->community_id);
        t->trans_id = (uint16_t)rg_apps_num(nf, c, "trans_id", 0);
        t->first_qr = qr != 0;
    }
    dns_part *p = qr ? &t->r : &t->q;
    qr ? t->responses++ : t->queries++;
    s->cur = t;
    if (p->seen) return; /* a repeated query: counted, the first one is kept */
    p->seen = 1;
    p->ts = c->ts_ns;
    p->opcode = (uint8_t)rg_apps_num(nf, c, "opcode", 0);
    p->rcode = (uint8_t)rg_apps_num(nf, c, "rcode", 0);
    p->aa = !!rg_apps_num(nf, c, "aa", 0), p->tc = !!rg_apps_num(nf, c, "tc", 0);
    p->rd = !!rg_apps_num(nf, c, "rd", 0), p->ra = !!rg_apps_num(nf, c, "ra", 0);
    p->z = !!rg_apps_num(nf, c, "z", 0), p->ad = !!rg_apps_num(nf, c, "ad", 0);
    p->cd = !!rg_apps_num(nf, c, "cd", 0);
    s->part = p;
}

static void rr_call(dns_src *s, rg_nf_apps *nf, const rg_call *c)
{
    dns_part *p = s->part;
    if (!p) return;
    const rg_val *msg = rg_apps_arg(nf, c, "dns_msg", RG_VAL_BYTES);
    uint64_t section = rg_apps_num(nf, c, "rr_section", 0);
    uint16_t type = (uint16_t)rg_apps_num(nf, c, "rr_type", 0);
    uint16_t klass = (uint16_t)rg_apps_num(nf, c, "rr_class", 0);
    if (section == 0) {
        if (!p->qname) {
            p->qname = name_text(msg, rg_apps_num(nf, c, "rr_name", 0));
            p->qtype = type, p->qclass = klass;
        }
        return;
    }
    if (p->nrrs == MAX_RRS) return;
    if (p->nrrs == p->cap) {
        unsigned cap = p->cap ? 2 * p->cap : 8;
        dns_rr *rrs = realloc(p->rrs, cap * sizeof *rrs);
        if (!rrs) {
            rg_apps_fail(nf, "cannot keep DNS records");
            return;
        }
        p->rrs = rrs, p->cap = cap;
    }
    dns_rr *r = &p->rrs[p->nrrs++];
    memset(r, 0, sizeof *r);
    r->section = (uint8_t)section, r->type = type, r->klass = klass;
    r->ttl = (uint32_t)rg_apps_num(nf, c, "rr_ttl", 0);
    r->name = name_text(msg, rg_apps_num(nf, c, "rr_name", 0));
    uint64_t target = rg_apps_num(nf, c, "rr_target", 0);
    if (target) r->target = name_text(msg, target);
    const rg_val *rd = rg_apps_arg(nf, c, "rr_rdata", RG_VAL_BYTES);
    if (rd && rd->bytes.len && rd->bytes.len <= 0xffff) {
        r->rdata = malloc(rd->bytes.len);
        if (r->rdata) {
            memcpy(r->rdata, rd->bytes.ptr, rd->bytes.len);
            r->rdlen = (uint16_t)rd->bytes.len;
        }
    }
}

static void on_call(void *st, rg_nf_apps *nf, const rg_call *c, int role)
{
    dns_src *s = st;
    if (role == ROLE_MSG)
        msg_call(s, nf, c);
    else if (role == ROLE_RR)
        rr_call(s, nf, c);
    else if (s->cur)
        s->cur->malformed = 1;
}

/* ---- the line ---- */

static const char *type_name(unsigned t)
{
    static const struct {
        unsigned short n;
        const char *name;
    } names[] = {
        {1, "A"},       {2, "NS"},        {3, "MD"},          {4, "MF"},          {5, "CNAME"},
        {6, "SOA"},     {7, "MB"},        {8, "MG"},          {9, "MR"},          {10, "NULL"},
        {11, "WKS"},    {12, "PTR"},      {13, "HINFO"},      {14, "MINFO"},      {15, "MX"},
        {16, "TXT"},    {17, "RP"},       {18, "AFSDB"},      {24, "SIG"},        {25, "KEY"},
        {28, "AAAA"},   {29, "LOC"},      {33, "SRV"},        {35, "NAPTR"},      {36, "KX"},
        {37, "CERT"},   {39, "DNAME"},    {41, "OPT"},        {42, "APL"},        {43, "DS"},
        {44, "SSHFP"},  {45, "IPSECKEY"}, {46, "RRSIG"},      {47, "NSEC"},       {48, "DNSKEY"},
        {49, "DHCID"},  {50, "NSEC3"},    {51, "NSEC3PARAM"}, {52, "TLSA"},       {53, "SMIMEA"},
        {55, "HIP"},    {59, "CDS"},      {60, "CDNSKEY"},    {61, "OPENPGPKEY"}, {62, "CSYNC"},
        {63, "ZONEMD"}, {64, "SVCB"},     {65, "HTTPS"},      {99, "SPF"},        {249, "TKEY"},
        {250, "TSIG"},  {251, "IXFR"},    {252, "AXFR"},      {253, "MAILB"},     {254, "MAILA"},
        {255, "*"},     {256, "URI"},     {257, "CAA"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].n == t) return names[i].name;
    return NULL;
}

/* RFC 1035 4.1.1, RFC 2136, RFC 6895 2.3 */
static const char *rcode_name(unsigned r)
{
    static const char *const names[] = {"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN",
                                        "NOTIMP",  "REFUSED", "YXDOMAIN", "YXRRSET",
                                        "NXRRSET", "NOTAUTH", "NOTZONE"};
    return r < sizeof names / sizeof names[0] ? names[r] : NULL;
}

/* Zeek's qclass_name words */
static const char *class_name(unsigned c)
{
    switch (c) {
    case 1:
        return "C_INTERNET";
    case 3:
        return "C_CHAOS";
    case 4:
        return "C_HESIOD";
    case 254:
        return "C_NONE";
    case 255:
        return "C_ANY";
    default:
        return NULL;
    }
}

/* a name of one of the tables, or PREFIX<number> (RFC 3597 5: TYPE123, CLASS123) */
static void json_name(FILE *out, const char *name, const char *prefix, unsigned n)
{
    if (name)
        rg_json_string(out, name);
    else
        fprintf(out, "\"%s%u\"", prefix, n);
}

/* The RDATA as text: an address, the name it holds, the TXT strings separated by spaces
 * (each as its bytes), else RFC 3597's generic "\# LEN HEX". */
static void json_rdata(FILE *out, const dns_rr *r)
{
    char a[48];
    if ((r->type == 1 && r->rdlen == 4) || (r->type == 28 && r->rdlen == 16)) {
        rg_nf_addr_text(r->rdata, r->rdlen, a, sizeof a);
        rg_json_string(out, a);
    } else if (r->target) {
        rg_json_string(out, r->target);
    } else if (r->type == 16 || r->type == 99) {
        char *buf = malloc(r->rdlen ? r->rdlen : 1);
        size_t n = 0;
        for (size_t i = 0; buf && i < r->rdlen;) {
            size_t l = r->rdata[i];
            if (i + 1 + l > r->rdlen) break;
            if (i) buf[n++] = ' '; /* after each string, empty ones too */
            memcpy(buf + n, r->rdata + i + 1, l);
            n += l, i += 1 + l;
        }
        rg_json_bytes(out, buf ? (const uint8_t *)buf : (const uint8_t *)"", buf ? n : 0);
        free(buf);
    } else {
        fprintf(out, "\"\\\\# %u", (unsigned)r->rdlen);
        if (r->rdlen) fputc(' ', out);
        for (unsigned i = 0; i < r->rdlen; i++)
            fprintf(out, "%02x", r->rdata[i]);
        fputc('"', out);
    }
}

/* TXT: the character-strings (RFC 1035 3.3.14) as a list */
static void json_txt(FILE *out, const dns_rr *r)
{
    fputc('[', out);
    for (size_t i = 0, k = 0; i < r->rdlen; k++) {
        size_t l = r->rdata[i];
        if (i + 1 + l > r->rdlen) break;
        if (k) fputc(',', out);
        rg_json_bytes(out, r->rdata + i + 1, l);
        i += 1 + l;
    }
    fputc(']', out);
}

static int is_answer(const dns_rr *r, int section)
{
    return r->section == section && r->type != 41; /* OPT is no record (RFC 6891 6.1.1) */
}

static void json_list(FILE *out, const dns_part *p, const char *key, int section)
{
    fprintf(out, ",\"%s\":[", key);
    for (unsigned i = 0, k = 0; i < p->nrrs; i++)
        if (is_answer(&p->rrs[i], section)) {
            if (k++) fputc(',', out);
            json_rdata(out, &p->rrs[i]);
        }
    fputc(']', out);
}

static void bool_field(FILE *out, const char *key, int v)
{
    fprintf(out, ",\"%s\":%s", key, v ? "true" : "false");
}

static void write_txn(dns_src *s, const dns_txn *t)
{
    FILE *out = s->out;
    const dns_part *q = t->q.seen ? &t->q : &t->r; /* the query, else the response's question */
    const dns_part *r = t->r.seen ? &t->r : NULL;
    rg_nf_endpoints ep;
    if (t->first_qr) /* the instance began with a response: its receiver is the client */
        rg_nf_endpoints_reverse(&t->ep, &ep);
    else
        ep = t->ep;
    fputs("{\"ts\":", out);
    rg_apps_ts(out, q->ts);
    if (t->l4_uid) fprintf(out, ",\"uid\":%llu", (unsigned long long)t->l4_uid);
    fputs(",\"community_id\":", out);
    rg_json_string(out, t->community_id[0] ? t->community_id : NULL);
    fputs(",\"id.orig_h\":", out);
    rg_json_string(out, ep.src[0] ? ep.src : NULL);
    fprintf(out, ",\"id.orig_p\":%u,\"id.resp_h\":", (unsigned)ep.sport);
    rg_json_string(out, ep.dst[0] ? ep.dst : NULL);
    fprintf(out, ",\"id.resp_p\":%u,\"proto\":\"udp\",\"trans_id\":%u", (unsigned)ep.dport,
            (unsigned)t->trans_id);
    if (t->q.seen && r) {
        uint64_t d = r->ts > t->q.ts ? r->ts - t->q.ts : 0;
        fprintf(out, ",\"rtt\":%llu.%06llu", (unsigned long long)(d / 1000000000u),
                (unsigned long long)(d % 1000000000u / 1000u));
    }
    fputs(",\"query\":", out);
    rg_json_string(out, q->qname);
    if (q->qname) {
        fprintf(out, ",\"qclass\":%u,\"qclass_name\":", (unsigned)q->qclass);
        json_name(out, class_name(q->qclass), "CLASS", q->qclass);
        fprintf(out, ",\"qtype\":%u,\"qtype_name\":", (unsigned)q->qtype);
        json_name(out, type_name(q->qtype), "TYPE", q->qtype);
    }
    fprintf(out, ",\"opcode\":%u", (unsigned)q->opcode);
    if (r) {
        fprintf(out, ",\"rcode\":%u,\"rcode_name\":", (unsigned)r->rcode);
        json_name(out, rcode_name(r->rcode), "RCODE", r->rcode);
    }
    /* Zeek's flags: AA, TC, RA from the response, RD from the query */
    bool_field(out, "AA", r && r->aa);
    bool_field(out, "TC", r ? r->tc : q->tc);
    bool_field(out, "RD", q->rd);
    bool_field(out, "RA", r && r->ra);
    fprintf(out, ",\"Z\":%u", (unsigned)(r ? r->z : q->z));
    bool_field(out, "AD", r && r->ad);
    bool_field(out, "CD", q->cd);
    if (r) {
        json_list(out, r, "answers", 1);
        fputs(",\"TTLs\":[", out);
        for (unsigned i = 0, k = 0; i < r->nrrs; i++)
            if (is_answer(&r->rrs[i], 1)) fprintf(out, "%s%u", k++ ? "," : "", r->rrs[i].ttl);
        fputc(']', out);
        json_list(out, r, "auth", 2);
        json_list(out, r, "addl", 3);
        bool_field(out, "rejected", r->rcode != 0 && !r->nrrs);
        /* every record, Suricata's answer objects, with the section */
        fputs(",\"rrs\":[", out);
        for (unsigned i = 0; i < r->nrrs; i++) {
            const dns_rr *x = &r->rrs[i];
            static const char *const sections[] = {"question", "answer", "authority", "additional"};
            fprintf(out, "%s{\"section\":\"%s\",\"rrname\":", i ? "," : "",
                    sections[x->section & 3]);
            rg_json_string(out, x->name);
            fputs(",\"rrtype\":", out);
            json_name(out, type_name(x->type), "TYPE", x->type);
            fprintf(out, ",\"type\":%u,\"class\":%u,\"ttl\":%u,\"rdata\":", (unsigned)x->type,
                    (unsigned)x->klass, (unsigned)x->ttl);
            json_rdata(out, x);
            if (x->type == 16 || x->type == 99) {
                fputs(",\"txt\":", out);
                json_txt(out, x);
            }
            fputc('}', out);
        }
        fputc(']', out);
    }
    fprintf(out, ",\"queries\":%u,\"responses\":%u", (unsigned)t->queries, (unsigned)t->responses);
    bool_field(out, "malformed", t->malformed);
    fputs("}\n", out);
}

static void txn_end(dns_src *s, dns_txn *t)
{
    if (t->q.seen || t->r.seen) write_txn(s, t);
    if (s->cur == t) s->cur = NULL, s->part = NULL;
    part_free(&t->q);
    part_free(&t->r);
    free(t);
}

static void on_close(void *st, rg_nf_apps *nf, const rg_flow_info *f, int reason)
{
    (void)nf, (void)reason;
    dns_src *s = st;
    dns_txn *t = rg_nf_map_del(&s->txns, f->uid);
    if (t) txn_end(s, t);
}

static void drain_one(void *ctx, void *val)
{
    txn_end(ctx, val);
}

static void finish(void *st, rg_nf_apps *nf)
{
    (void)nf;
    dns_src *s = st;
    rg_nf_map_drain(&s->txns, drain_one, s);
    rg_nf_map_free(&s->txns);
    free(s);
}

const rg_app rg_app_dns = {"dns", role, create, on_call, on_close, finish};
