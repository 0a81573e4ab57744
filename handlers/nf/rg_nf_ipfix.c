/* rg_nf_ipfix.c - the "ipfix" NF: IPFIX export (RFC 7011) of every ended transport flow (TCP,
 * UDP, SCTP: a layer whose key has both ports), one biflow data record each (RFC 5103), to a
 * collector over UDP or TCP.  The driver attaches it for `--ipfix [udp://|tcp://]HOST:PORT`;
 * in a chain file it is `nf: ipfix` with params `to` (required), `refresh_msgs`, `refresh_s`
 * and `domain`.
 *
 * Templates 256 (IPv4) and 257 (IPv6), each in this order:
 *   sourceIPv4Address (8) / sourceIPv6Address (27), destinationIPv4Address (12) /
 *   destinationIPv6Address (28), sourceTransportPort (7), destinationTransportPort (11),
 *   protocolIdentifier (4), transportOctetDeltaCount (401), packetDeltaCount (2), and the
 *   same two as reverse IEs (enterprise 29305, RFC 5103), flowStartMilliseconds (152),
 *   flowEndMilliseconds (153), flowEndReason (136).
 * The source is the client (rg_nf_client_side: the SYN sender, else the first packet's
 * sender).  Octets are what the transport layer parsed (its header and payload), hence
 * transportOctetDeltaCount rather than octetDeltaCount (1), which counts IP headers too.
 *
 * Messages stay within RG_IPFIX_MTU bytes (a 1500-byte link with IPv6 and UDP headers); one
 * goes out when full, when its first record waited a second (checked at each packet and flow
 * end) and at the end of the run.  Over UDP the template set is repeated in the first message
 * after every refresh_msgs messages (default 20) or refresh_s seconds (default 60) of wall
 * clock, whichever comes first (RFC 7011 8.4); over TCP it is sent once, in the first message
 * (8.1).  The header's sequence number counts the data records sent before the message; its
 * export time is the wall clock; its Observation Domain ID is `domain` (default 1) plus the
 * worker's number (--workers N: each worker exports on a session of its own). */
#include "rg_nf_int.h"

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RG_IPFIX_MTU 1400
#define IPFIX_HDR    16
#define TMPL_V4      256
#define TMPL_V6      257
#define REVERSE_PEN  29305u
#define ENTERPRISE   0x8000u

/* one field of a template: IE id (ENTERPRISE: reverse, PEN 29305), length; the address
 * fields (length 0: alen, 4 or 16) are IPv4's, 27 and 28 in the IPv6 template */
typedef struct ipfix_ie {
    uint16_t id, len;
} ipfix_ie;

static const ipfix_ie tmpl_fields[] = {
    {8, 0},
    {12, 0},
    {7, 2},
    {11, 2},
    {4, 1},
    {401, 8},
    {2, 8},
    {401 | ENTERPRISE, 8},
    {2 | ENTERPRISE, 8},
    {152, 8},
    {153, 8},
    {136, 1},
};
enum { NFIELDS = sizeof tmpl_fields / sizeof tmpl_fields[0] };

typedef struct nf_ipfix {
    rg_nf_flows f;
    int fd;
    int tcp;
    uint32_t domain;
    unsigned refresh_msgs, refresh_s;
    uint32_t seq;        /* data records sent before the message being built */
    unsigned msgs_since; /* messages since the last template set */
    time_t tmpl_at;      /* wall clock of the last template set (0: none yet) */
    time_t first_at;     /* when the message's first record was added (0: empty) */
    uint8_t msg[RG_IPFIX_MTU];
    size_t len;                              /* bytes of msg (0: no message begun) */
    size_t set_at;                           /* offset of the open data set's header (0: none) */
    uint16_t set_id;                         /* its template */
    uint32_t nrec;                           /* data records in msg */
    uint64_t records, messages, send_errors; /* totals, for the summary line */
    /* rg_nf_flows' own on_packet and finish, which these wrap */
    void (*flow_packet)(void *, const rg_flow_info *, int, uint32_t, uint64_t);
    int (*flow_finish)(rg_nf *);
} nf_ipfix;

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8), p[1] = (uint8_t)v;
}
static void put32(uint8_t *p, uint32_t v)
{
    put16(p, (uint16_t)(v >> 16)), put16(p + 2, (uint16_t)v);
}
static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32)), put32(p + 4, (uint32_t)v);
}

/* One template record (id, alen) at p; returns its length. */
static size_t template_record(uint8_t *p, uint16_t id, uint16_t alen)
{
    size_t at = 4;
    put16(p, id), put16(p + 2, NFIELDS);
    for (unsigned i = 0; i < NFIELDS; i++) {
        uint16_t ie = tmpl_fields[i].id;
        if (alen == 16 && (ie == 8 || ie == 12)) ie = ie == 8 ? 27 : 28; /* IPv6 addresses */
        put16(p + at, ie);
        put16(p + at + 2, tmpl_fields[i].len ? tmpl_fields[i].len : alen);
        at += 4;
        if (tmpl_fields[i].id & ENTERPRISE) put32(p + at, REVERSE_PEN), at += 4;
    }
    return at;
}

/* The template set of both templates at p; returns its length. */
static size_t template_set(uint8_t *p)
{
    size_t at = 4;
    at += template_record(p + at, TMPL_V4, 4);
    at += template_record(p + at, TMPL_V6, 16);
    put16(p, 2), put16(p + 2, (uint16_t)at);
    return at;
}

static size_t record_len(uint16_t alen)
{
    size_t n = 0;
    for (unsigned i = 0; i < NFIELDS; i++)
        n += tmpl_fields[i].len ? tmpl_fields[i].len : alen;
    return n;
}

/* The data record of r (client: the side that is the source) at p; returns its length. */
static size_t data_record(uint8_t *p, const rg_nf_flowrec *r, int proto, int client, int reason)
{
    const uint8_t *src = client ? r->ep.daddr : r->ep.saddr;
    const uint8_t *dst = client ? r->ep.saddr : r->ep.daddr;
    const int s = client != 0;
    size_t at = 0;
    memcpy(p, src, r->ep.alen), at += r->ep.alen;
    memcpy(p + at, dst, r->ep.alen), at += r->ep.alen;
    put16(p + at, client ? r->ep.dport : r->ep.sport), at += 2;
    put16(p + at, client ? r->ep.sport : r->ep.dport), at += 2;
    p[at++] = (uint8_t)proto;
    put64(p + at, r->bytes[s]), at += 8;
    put64(p + at, r->packets[s]), at += 8;
    put64(p + at, r->bytes[!s]), at += 8;
    put64(p + at, r->packets[!s]), at += 8;
    put64(p + at, r->first_ts / 1000000u), at += 8;
    put64(p + at, r->last_ts / 1000000u), at += 8;
    p[at++] = (uint8_t)reason;
    return at;
}

static int send_all(nf_ipfix *nf, const uint8_t *p, size_t n)
{
    int refused = 0;
    while (n) {
        ssize_t w = send(nf->fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        /* UDP: an earlier datagram's ICMP error, reported instead of sending this one */
        if (w < 0 && !nf->tcp && errno == ECONNREFUSED && !refused++) continue;
        if (w < 0) return -1;
        p += w, n -= (size_t)w;
    }
    return 0;
}

/* Send the message being built (if any) and start none. */
static void flush_msg(nf_ipfix *nf)
{
    if (!nf->len) return;
    if (nf->set_at) put16(nf->msg + nf->set_at + 2, (uint16_t)(nf->len - nf->set_at));
    put16(nf->msg, 10);
    put16(nf->msg + 2, (uint16_t)nf->len);
    put32(nf->msg + 4, (uint32_t)time(NULL));
    put32(nf->msg + 8, nf->seq);
    put32(nf->msg + 12, nf->domain);
    if (nf->fd >= 0 && send_all(nf, nf->msg, nf->len)) {
        nf->send_errors++;
        /* UDP: a collector not (yet) listening answers with ICMP; the next message may pass.
         * TCP: the session is gone, and with it the templates: stop. */
        if (nf->tcp || (errno != ECONNREFUSED && errno != EHOSTUNREACH)) {
            rg_nf_fail(&nf->f.base, "cannot send IPFIX to", "the collector");
            close(nf->fd);
            nf->fd = -1;
        }
    }
    nf->seq += nf->nrec;
    nf->records += nf->nrec;
    nf->messages++;
    nf->msgs_since++;
    nf->len = nf->set_at = 0;
    nf->nrec = 0;
    nf->first_at = 0;
}

/* Begin a message: the header, and the template set when it is due. */
static void begin_msg(nf_ipfix *nf, time_t now)
{
    nf->len = IPFIX_HDR;
    int due = !nf->tmpl_at;
    if (!nf->tcp && nf->tmpl_at)
        due = nf->msgs_since >= nf->refresh_msgs || now - nf->tmpl_at >= (time_t)nf->refresh_s;
    if (due) {
        nf->len += template_set(nf->msg + nf->len);
        nf->tmpl_at = now;
        nf->msgs_since = 0;
    }
}

static void add_record(nf_ipfix *nf, const rg_nf_flowrec *r, int proto, int client, int reason)
{
    const uint16_t id = r->ep.alen == 16 ? TMPL_V6 : TMPL_V4;
    const size_t need = record_len(r->ep.alen);
    const time_t now = time(NULL);
    for (int tries = 0; tries < 2; tries++) {
        if (!nf->len) begin_msg(nf, now);
        const size_t set_hdr = nf->set_at && nf->set_id == id ? 0 : 4;
        if (nf->len + set_hdr + need <= RG_IPFIX_MTU) break;
        flush_msg(nf);
    }
    if (!(nf->set_at && nf->set_id == id)) {
        if (nf->set_at) put16(nf->msg + nf->set_at + 2, (uint16_t)(nf->len - nf->set_at));
        nf->set_at = nf->len;
        nf->set_id = id;
        put16(nf->msg + nf->len, id);
        nf->len += 4;
    }
    nf->len += data_record(nf->msg + nf->len, r, proto, client, reason);
    nf->nrec++;
    if (!nf->first_at) nf->first_at = now;
}

/* a message whose first record waited a second goes out */
static void flush_if_old(nf_ipfix *nf)
{
    if (nf->first_at && time(NULL) - nf->first_at >= 1) flush_msg(nf);
}

static void write_rec(rg_nf_flows *base, const rg_nf_flowrec *r, const rg_flow_info *f, int reason,
                      int complete)
{
    (void)complete;
    nf_ipfix *nf = (nf_ipfix *)base;
    const rg_layer_desc *l = rg_nf_layer(base->base.stack, r->layer);
    const int proto = rg_nf_proto_number(l ? l->protocol : NULL);
    if (!rg_nf_is_transport(r) || proto < 0 || (r->ep.alen != 4 && r->ep.alen != 16)) return;
    add_record(nf, r, proto, rg_nf_client_side(base->base.stack, f),
               f ? rg_nf_end_reason(reason) : 4);
    flush_if_old(nf);
}

static void on_packet(void *self, const rg_flow_info *f, int dir, uint32_t len, uint64_t ts_ns)
{
    nf_ipfix *nf = self;
    nf->flow_packet(self, f, dir, len, ts_ns);
    flush_if_old(nf);
}

static int finish(rg_nf *base)
{
    nf_ipfix *nf = (nf_ipfix *)base;
    int rc = nf->flow_finish(base); /* writes the flows still open */
    flush_msg(nf);
    if (nf->fd < 0) return rc; /* never connected, or the error is recorded */
    close(nf->fd);
    fprintf(stderr, "ipfix: %" PRIu64 " records in %" PRIu64 " messages (%" PRIu64 " not sent)\n",
            nf->records, nf->messages, nf->send_errors);
    return rc;
}

/* Connect to "[udp://|tcp://]HOST:PORT" (HOST: a name, an IPv4 address or [IPv6]). */
static int ipfix_connect(nf_ipfix *nf, const char *to, char *err, size_t errlen)
{
    const char *hp = to;
    if (!strncmp(to, "tcp://", 6)) nf->tcp = 1, hp = to + 6;
    if (!strncmp(to, "udp://", 6)) hp = to + 6;
    char host[256];
    const char *colon = strrchr(hp, ':');
    size_t hl = colon ? (size_t)(colon - hp) : 0;
    if (hl && hp[0] == '[' && hp[hl - 1] == ']') hp++, hl -= 2;
    if (!colon || !hl || hl >= sizeof host || !colon[1]) {
        snprintf(err, errlen, "'%s' is not [udp://|tcp://]HOST:PORT", to);
        return -1;
    }
    memcpy(host, hp, hl);
    host[hl] = 0;
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = nf->tcp ? SOCK_STREAM : SOCK_DGRAM;
    int g = getaddrinfo(host, colon + 1, &hints, &ai);
    if (g) {
        snprintf(err, errlen, "%s: %s", to, gai_strerror(g));
        return -1;
    }
    nf->fd = -1;
    int e = 0;
    for (struct addrinfo *a = ai; a && nf->fd < 0; a = a->ai_next) {
        nf->fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (nf->fd >= 0 && connect(nf->fd, a->ai_addr, a->ai_addrlen)) {
            e = errno;
            close(nf->fd);
            nf->fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (nf->fd < 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", to, strerror(e ? e : errno));
        return -1;
    }
    return 0;
}

static rg_nf *ipfix_new(const rg_stack_desc *stack, const char *outdir, char *err, size_t errlen)
{
    (void)stack;
    rg_nf_flows *f = rg_nf_flows_new(sizeof(nf_ipfix), outdir, NULL, write_rec, err, errlen);
    if (!f) return NULL;
    nf_ipfix *nf = (nf_ipfix *)f;
    nf->fd = -1;
    nf->flow_packet = f->base.obs.on_packet;
    f->base.obs.on_packet = on_packet;
    nf->flow_finish = f->base.finish;
    f->base.finish = finish;
    return &f->base;
}

/* A positive number parameter (or its default). */
static int cfg_uint(const rg_nf_kv *cfg, unsigned ncfg, const char *key, unsigned dflt,
                    unsigned *out, char *err, size_t errlen)
{
    const char *v = rg_nf_cfg_get(cfg, ncfg, key, NULL);
    char *end;
    unsigned long n = v ? strtoul(v, &end, 10) : dflt;
    if (v && (!*v || *end || n == 0 || n > 0xffffffffu)) {
        snprintf(err, errlen, "%s '%s' is not a positive number", key, v);
        return -1;
    }
    *out = (unsigned)n;
    return 0;
}

static void *init_ipfix(const rg_stack_desc *stack, const rg_nf_kv *cfg, unsigned ncfg,
                        const rg_nf_host *host, char *err, size_t errlen)
{
    const char *to = rg_nf_cfg_get(cfg, ncfg, "to", NULL);
    unsigned msgs, secs, domain;
    if (!to) {
        snprintf(err, errlen, "ipfix needs the collector: --ipfix HOST:PORT (params: to)");
        return NULL;
    }
    if (cfg_uint(cfg, ncfg, "refresh_msgs", 20, &msgs, err, errlen) ||
        cfg_uint(cfg, ncfg, "refresh_s", 60, &secs, err, errlen) ||
        cfg_uint(cfg, ncfg, "domain", 1, &domain, err, errlen))
        return NULL;
    rg_obs *o = rg_nf_stock_init(ipfix_new, "ipfix", stack, cfg, ncfg, host, err, errlen);
    if (!o) return NULL;
    nf_ipfix *nf = (nf_ipfix *)o;
    /* --workers: each worker exports on its own session, as an Observation Domain of its own
     * (collectors key templates and sequence numbers by exporter address and domain) */
    nf->refresh_msgs = msgs, nf->refresh_s = secs;
    nf->domain = domain + (host && host->worker < host->nworkers ? host->worker : 0);
    if (ipfix_connect(nf, to, err, errlen)) {
        rg_nf_finish(o);
        return NULL;
    }
    return o;
}

static const rg_nf_abi abi_ipfix = {RG_NF_ABI_VERSION,
                                    sizeof(rg_nf_abi),
                                    "ipfix",
                                    "IPFIX (RFC 7011) biflow records to a collector: --ipfix",
                                    rg_nf_stock_subs,
                                    RG_NF_STOCK_NSUBS,
                                    0,
                                    init_ipfix,
                                    rg_nf_stock_fini,
                                    NULL};
const rg_nf_desc rg_nf_desc_ipfix = {&abi_ipfix, NULL, NULL, NULL};
