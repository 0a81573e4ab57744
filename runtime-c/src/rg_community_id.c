/* rg_community_id.c - Community ID v1 (see rg_community_id.h). */
#include "rg/rg_community_id.h"

#include "rg/rg_api.h"

#include <openssl/evp.h>
#include <string.h>

uint16_t rg_community_id_seed;

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* one_way: the endpoints are hashed as given (ICMP types without an answer type) */
static int hash(char *out, uint16_t seed, const uint8_t *saddr, const uint8_t *daddr, size_t alen,
                uint8_t proto, int has_ports, uint16_t sport, uint16_t dport, int one_way)
{
    out[0] = '\0';
    if (alen != 4 && alen != 16) return -1;
    if (!one_way) {
        const int c = memcmp(saddr, daddr, alen);
        if (c > 0 || (c == 0 && has_ports && sport > dport)) { /* the smaller endpoint first */
            const uint8_t *a = saddr;
            saddr = daddr;
            daddr = a;
            const uint16_t p = sport;
            sport = dport;
            dport = p;
        }
    }
    uint8_t buf[2 + 16 + 16 + 2 + 4], *p = buf;
    *p++ = (uint8_t)(seed >> 8);
    *p++ = (uint8_t)seed;
    memcpy(p, saddr, alen);
    p += alen;
    memcpy(p, daddr, alen);
    p += alen;
    *p++ = proto;
    *p++ = 0; /* padding */
    if (has_ports) {
        *p++ = (uint8_t)(sport >> 8);
        *p++ = (uint8_t)sport;
        *p++ = (uint8_t)(dport >> 8);
        *p++ = (uint8_t)dport;
    }
    uint8_t md[20 + 1] = {0}; /* one zero byte past the digest: the last base64 group reads it */
    unsigned mdlen = 0;
    if (!EVP_Digest(buf, (size_t)(p - buf), md, &mdlen, EVP_sha1(), NULL) || mdlen != 20) return -1;
    char *o = out;
    *o++ = '1';
    *o++ = ':';
    for (unsigned i = 0; i < 20; i += 3) { /* 20 bytes: six whole groups and one of two bytes */
        const uint32_t v = (uint32_t)md[i] << 16 | (uint32_t)md[i + 1] << 8 |
                           (i + 2 < 20 ? (uint32_t)md[i + 2] : 0u);
        *o++ = b64[v >> 18 & 63];
        *o++ = b64[v >> 12 & 63];
        *o++ = b64[v >> 6 & 63];
        *o++ = i + 2 < 20 ? b64[v & 63] : '=';
    }
    *o = '\0';
    return 0;
}

int rg_community_id(char *out, uint16_t seed, const uint8_t *saddr, const uint8_t *daddr,
                    size_t alen, uint8_t proto, int has_ports, uint16_t sport, uint16_t dport)
{
    return hash(out, seed, saddr, daddr, alen, proto, has_ports, sport, dport, 0);
}

/* The answer type of a request/response ICMP type (the spec's mapping, which mirrors Zeek's),
 * -1 for a one-way type. */
static int icmp_answer(int v6, uint8_t type)
{
    static const uint8_t v4[][2] = {{8, 0}, {13, 14}, {15, 16}, {10, 9}, {17, 18}};
    static const uint8_t v6p[][2] = {{128, 129}, {130, 131}, {133, 134},
                                     {135, 136}, {139, 140}, {144, 145}};
    const uint8_t(*t)[2] = v6 ? v6p : v4;
    const size_t n = v6 ? sizeof v6p / sizeof v6p[0] : sizeof v4 / sizeof v4[0];
    for (size_t i = 0; i < n; i++) {
        if (t[i][0] == type) return t[i][1];
        if (t[i][1] == type) return t[i][0];
    }
    return -1;
}

int rg_community_id_icmp(char *out, uint16_t seed, const uint8_t *saddr, const uint8_t *daddr,
                         size_t alen, uint8_t type, uint8_t code)
{
    const int v6 = alen == 16;
    const int answer = icmp_answer(v6, type);
    return hash(out, seed, saddr, daddr, alen, v6 ? RG_IPPROTO_ICMPV6 : RG_IPPROTO_ICMP, 1, type,
                answer < 0 ? code : (uint16_t)answer, answer < 0);
}

int rg_ip_proto_of(const char *protocol)
{
    static const struct {
        const char *name;
        int num;
    } t[] = {{"tcp", RG_IPPROTO_TCP},
             {"udp", RG_IPPROTO_UDP},
             {"sctp", RG_IPPROTO_SCTP},
             {"icmp", RG_IPPROTO_ICMP},
             {"icmpv6", RG_IPPROTO_ICMPV6},
             {"gre", 47},
             {"esp", 50},
             {"ah", 51},
             /* the stock QUIC stack's UDP layer */
             {"quic_udp", RG_IPPROTO_UDP}};
    if (!protocol) return -1;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(protocol, t[i].name)) return t[i].num;
    return -1;
}

int rg_flow_ipproto(const rg_layer_desc *layer, const uint8_t *key)
{
    const rg_keypart *port = NULL, *proto = NULL;
    for (unsigned i = 0; i < layer->nparts; i++) {
        const rg_keypart *p = &layer->parts[i];
        if (p->common || (uint32_t)p->off + p->size > layer->key_len || p->kind != RG_VAL_NUM)
            continue;
        if (p->size == 2 && layer->bidir && !port) port = p;
        if (p->size == 1 && !strcmp(p->name, "header.protocol")) proto = p;
    }
    if (port) { /* "tcp.header.sport": the parameter tcp; "header.sport": the layer's own */
        const char *dot = strstr(port->name, ".header.");
        if (!dot) return rg_ip_proto_of(layer->protocol);
        char name[32];
        const size_t n = (size_t)(dot - port->name);
        if (n >= sizeof name) return -1;
        memcpy(name, port->name, n);
        name[n] = 0;
        return rg_ip_proto_of(name);
    }
    const int own = rg_ip_proto_of(layer->protocol);
    if (own >= 0 || !layer->protocol || strncmp(layer->protocol, "ip", 2)) return own;
    return proto ? key[proto->off] : -1; /* an IP datagram's own protocol number */
}

int rg_community_id_flow(char *out, uint16_t seed, const rg_layer_desc *layer, const uint8_t *key,
                         const uint8_t *saddr, const uint8_t *daddr, size_t alen, int has_ports,
                         uint16_t sport, uint16_t dport)
{
    out[0] = '\0';
    const int proto = rg_flow_ipproto(layer, key);
    /* ICMP: by type and code (rg_community_id_icmp), which the key does not hold */
    if (proto < 0 || proto == RG_IPPROTO_ICMP || proto == RG_IPPROTO_ICMPV6) return -1;
    const int ports =
        proto == RG_IPPROTO_TCP || proto == RG_IPPROTO_UDP || proto == RG_IPPROTO_SCTP;
    if (ports && !has_ports) return -1;
    return rg_community_id(out, seed, saddr, daddr, alen, (uint8_t)proto, ports, sport, dport);
}
