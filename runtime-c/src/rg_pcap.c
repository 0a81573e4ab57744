/* rg_pcap.c - capture input on libpcap (see rg_pcap.h). */
#include "rg/rg_pcap.h"

#include <errno.h>
#include <pcap/pcap.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rg/rg_pkt.h"

/* LINKTYPE_RAW in files (libpcap maps it to DLT_RAW), and the two values
 * DLT_RAW has on different systems (12; 14 on OpenBSD), which files carry
 * as they are: all raw IP. */
#define RG_LINKTYPE_RAW    101
#define RG_LINKTYPE_RAW_12 12
#define RG_LINKTYPE_RAW_14 14

int rg_link_info(int dlt, rg_linkinfo *li)
{
    li->dlt = dlt;
    li->entry = RG_ENTRY_UNKNOWN;
    li->net_off = 0;
    li->name = "unsupported";
    switch (dlt) {
    case DLT_EN10MB:
        li->entry = RG_ENTRY_ETHER;
        li->net_off = 14;
        li->name = "ether";
        return RG_OK;
    case RG_LINKTYPE_RAW_12:
    case RG_LINKTYPE_RAW_14:
    case RG_LINKTYPE_RAW:
        li->entry = RG_ENTRY_IP;
        li->name = "raw";
        return RG_OK;
    case DLT_IPV4:
        li->entry = RG_ENTRY_IPV4;
        li->name = "ipv4";
        return RG_OK;
    case DLT_IPV6:
        li->entry = RG_ENTRY_IPV6;
        li->name = "ipv6";
        return RG_OK;
    case DLT_LINUX_SLL:
        li->entry = RG_ENTRY_IP;
        li->net_off = 16;
        li->name = "sll";
        return RG_OK;
    case DLT_LINUX_SLL2:
        li->entry = RG_ENTRY_IP;
        li->net_off = 20;
        li->name = "sll2";
        return RG_OK;
    case DLT_NULL:
        li->entry = RG_ENTRY_IP;
        li->net_off = 4;
        li->name = "null";
        return RG_OK;
    case DLT_PPP:
    case RG_LINKTYPE_PPP_HDLC:
        /* the network header's offset depends on each frame's compressions (rg_link_locate) */
        li->entry = RG_ENTRY_IP;
        li->name = "ppp";
        return RG_OK;
    case DLT_LOOP:
        li->entry = RG_ENTRY_IP;
        li->net_off = 4;
        li->name = "loop";
        return RG_OK;
    default:
        return RG_EUNSUPPORTED;
    }
}

static void from_ethertype(rg_netpos *np, uint16_t et)
{
    np->ethertype = et;
    np->proto = et == 0x0800 ? RG_ENTRY_IPV4 : et == 0x86DD ? RG_ENTRY_IPV6 : RG_ENTRY_UNKNOWN;
}

/* BSD address families: AF_INET is 2 everywhere; AF_INET6 is 10 (Linux),
 * 24 (NetBSD/OpenBSD), 28 (FreeBSD), 30 (macOS), 23 (Windows). */
static void from_af(rg_netpos *np, uint32_t af)
{
    if (af == 2)
        from_ethertype(np, 0x0800);
    else if (af == 10 || af == 24 || af == 28 || af == 30 || af == 23)
        from_ethertype(np, 0x86DD);
    else {
        np->proto = RG_ENTRY_UNKNOWN;
        np->ethertype = 0;
    }
}

static void from_version(rg_netpos *np, const uint8_t *p, uint32_t caplen, uint32_t off)
{
    if (off >= caplen) {
        np->proto = RG_ENTRY_UNKNOWN;
        np->ethertype = 0;
        return;
    }
    unsigned v = p[off] >> 4;
    if (v == 4)
        from_ethertype(np, 0x0800);
    else if (v == 6)
        from_ethertype(np, 0x86DD);
    else {
        np->proto = RG_ENTRY_UNKNOWN;
        np->ethertype = 0;
    }
}

int rg_link_locate(const rg_linkinfo *li, const uint8_t *p, uint32_t caplen, rg_netpos *np)
{
    np->proto = RG_ENTRY_UNKNOWN;
    np->ethertype = 0;
    np->vlans = 0;
    np->off = li->net_off;
    switch (li->entry) {
    case RG_ENTRY_ETHER: {
        uint16_t et;
        uint32_t off = 12;
        if (rg_get_be16(p, caplen, off, &et)) return RG_ETRUNC;
        while ((et == 0x8100 || et == 0x88A8 || et == 0x9100) && np->vlans < 8) {
            off += 4;
            np->vlans++;
            if (rg_get_be16(p, caplen, off, &et)) return RG_ETRUNC;
        }
        np->off = off + 2;
        from_ethertype(np, et);
        return RG_OK;
    }
    case RG_ENTRY_IPV4:
        if (caplen < 1) return RG_ETRUNC;
        from_ethertype(np, 0x0800);
        return RG_OK;
    case RG_ENTRY_IPV6:
        if (caplen < 1) return RG_ETRUNC;
        from_ethertype(np, 0x86DD);
        return RG_OK;
    case RG_ENTRY_IP:
        break;
    default:
        return RG_EUNSUPPORTED;
    }
    if (caplen < li->net_off) return RG_ETRUNC;
    if (li->dlt == DLT_LINUX_SLL) {
        from_ethertype(np, rg_load_be16(p + 14));
    } else if (li->dlt == DLT_LINUX_SLL2) {
        from_ethertype(np, rg_load_be16(p));
    } else if (li->dlt == DLT_NULL) {
        /* host byte order of the capturing machine: accept both */
        uint32_t le = rg_load_le32(p), be = rg_load_be32(p);
        from_af(np, le <= 0xffff ? le : be);
    } else if (li->dlt == DLT_LOOP) {
        from_af(np, rg_load_be32(p));
    } else if (li->dlt == DLT_PPP || li->dlt == RG_LINKTYPE_PPP_HDLC) {
        /* RFC 1662 address/control bytes unless compressed (ACFC), then a 1-byte protocol
         * field when its first byte is odd (PFC, RFC 1661 6.5), else 2 bytes */
        uint32_t off = caplen >= 2 && p[0] == 0xFF && p[1] == 0x03 ? 2 : 0;
        if (off >= caplen) return RG_ETRUNC;
        uint16_t proto = p[off];
        if (proto & 1) {
            off += 1;
        } else {
            if (off + 2 > caplen) return RG_ETRUNC;
            proto = rg_load_be16(p + off);
            off += 2;
        }
        np->off = off;
        from_ethertype(np, proto == 0x0021 ? 0x0800 : proto == 0x0057 ? 0x86DD : 0);
    } else {
        from_version(np, p, caplen, 0);
        return caplen ? RG_OK : RG_ETRUNC;
    }
    return RG_OK;
}

/* ---- reader ---- */

/* pcapng: one interface of the current section. */
typedef struct ng_if {
    int dlt;
    uint32_t snaplen;
    uint64_t units;   /* timestamp units per second */
    int bin_exp;      /* units = 2^bin_exp (-1: a power of ten) */
    int64_t tsoffset; /* seconds added to every timestamp */
} ng_if;

typedef struct ng_reader {
    FILE *f;
    int own_f; /* f is ours to close (not stdin) */
    int swap;  /* the section's byte order differs from ours */
    ng_if *ifs;
    uint32_t nifs, cap_ifs;
    uint8_t *buf; /* the current block's body */
    size_t buf_cap;
} ng_reader;

struct rg_pcap {
    pcap_t *p;     /* classic pcap (libpcap), or NULL */
    ng_reader *ng; /* pcapng, or NULL */
    rg_linkinfo link;
    uint32_t snaplen;
    int poll_fd; /* a pipe, FIFO or terminal (read unbuffered: rg_pcap_ready polls it), -1 */
    char err[PCAP_ERRBUF_SIZE];
};

enum {
    NG_SHB = 0x0A0D0D0A,
    NG_IDB = 1,
    NG_OPB = 2, /* obsolete Packet Block */
    NG_SPB = 3,
    NG_EPB = 6,
    NG_BOM = 0x1A2B3C4D,
    NG_MAX_BLOCK = 16 << 20, /* libpcap's limit, against absurd lengths */
    NG_MAX_IFS = 65536,
};

static void set_err(char *err, size_t errlen, const char *a, const char *b)
{
    if (err && errlen) snprintf(err, errlen, "%s%s%s", a, b ? ": " : "", b ? b : "");
}

static uint32_t ng32(const ng_reader *r, const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return r->swap ? __builtin_bswap32(v) : v;
}

static uint16_t ng16(const ng_reader *r, const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return r->swap ? __builtin_bswap16(v) : v;
}

/* ticks of interface i as nanoseconds since the epoch (clamped at 0) */
static uint64_t ng_ns(const ng_if *i, uint64_t ticks)
{
    uint64_t sec = ticks / i->units, frac = ticks % i->units, ns;
    if (i->bin_exp >= 0) {
        /* frac * 1e9 / 2^n without overflow: drop the bits below 2^-32 s first */
        int sh = i->bin_exp > 32 ? i->bin_exp - 32 : 0;
        ns = ((frac >> sh) * 1000000000u) >> (i->bin_exp - sh);
    } else if (i->units <= 1000000000u) {
        ns = frac * (1000000000u / i->units);
    } else {
        ns = frac / (i->units / 1000000000u);
    }
    /* 64-bit ticks: seconds past what nanoseconds in 64 bits hold (year 2554) saturate */
    const int64_t smax = (int64_t)(UINT64_MAX / 1000000000u) - 1;
    int64_t s = sec > (uint64_t)smax ? smax : (int64_t)sec;
    s = i->tsoffset > smax - s ? smax : s + i->tsoffset < 0 ? 0 : s + i->tsoffset;
    return (uint64_t)s * 1000000000u + ns;
}

/* Read a block: 1 with its type and body (r->buf, *len bytes), 0 at a clean
 * end of file, RG_EIO with a message. */
static int ng_block(rg_pcap *c, uint32_t *type, uint32_t *len)
{
    ng_reader *r = c->ng;
    uint8_t h[12];
    size_t n = fread(h, 1, 8, r->f);
    if (n == 0 && feof(r->f)) return 0;
    if (n != 8) goto cut;
    uint32_t raw_type;
    memcpy(&raw_type, h, 4);
    if (raw_type == NG_SHB) {
        /* a new section: its byte order is in the body, read it first */
        if (fread(h + 8, 1, 4, r->f) != 4) goto cut;
        uint32_t bom;
        memcpy(&bom, h + 8, 4);
        if (bom == NG_BOM)
            r->swap = 0;
        else if (bom == __builtin_bswap32(NG_BOM))
            r->swap = 1;
        else {
            snprintf(c->err, sizeof c->err, "pcapng section with a bad byte-order magic");
            return RG_EIO;
        }
        r->nifs = 0;
    }
    uint32_t total = ng32(r, h + 4);
    uint32_t done = raw_type == NG_SHB ? 12 : 8;
    if (total < 12 || total % 4 || total > NG_MAX_BLOCK) {
        snprintf(c->err, sizeof c->err, "pcapng block of bad length %u", total);
        return RG_EIO;
    }
    size_t rest = total - done; /* body (after what was read) + trailing length */
    if (rest + 4 > r->buf_cap) {
        size_t nc = r->buf_cap ? r->buf_cap : 4096;
        while (nc < rest + 4)
            nc *= 2;
        uint8_t *nb = realloc(r->buf, nc);
        if (!nb) {
            snprintf(c->err, sizeof c->err, "out of memory");
            return RG_EIO;
        }
        r->buf = nb;
        r->buf_cap = nc;
    }
    /* the body starts after type and length (the SHB's with the magic) */
    size_t pre = done - 8;
    memcpy(r->buf, h + 8, pre);
    if (fread(r->buf + pre, 1, rest, r->f) != rest) goto cut;
    if (ng32(r, r->buf + pre + rest - 4) != total) {
        snprintf(c->err, sizeof c->err, "pcapng block lengths differ");
        return RG_EIO;
    }
    *type = r->swap ? __builtin_bswap32(raw_type) : raw_type;
    if (raw_type == NG_SHB) *type = NG_SHB;
    *len = total - 12;
    return 1;
cut:
    if (ferror(r->f))
        snprintf(c->err, sizeof c->err, "read error");
    else
        snprintf(c->err, sizeof c->err, "truncated pcapng file: the last block is cut short");
    return RG_EIO;
}

/* An Interface Description Block: link type, snaplen, if_tsresol, if_tsoffset. */
static int ng_idb(rg_pcap *c, const uint8_t *b, uint32_t len)
{
    ng_reader *r = c->ng;
    if (len < 8) {
        snprintf(c->err, sizeof c->err, "pcapng interface block too short");
        return RG_EIO;
    }
    if (r->nifs == r->cap_ifs) {
        if (r->nifs >= NG_MAX_IFS) {
            snprintf(c->err, sizeof c->err, "more than %d pcapng interfaces", NG_MAX_IFS);
            return RG_EIO;
        }
        uint32_t nc = r->cap_ifs ? r->cap_ifs * 2 : 4;
        ng_if *n = realloc(r->ifs, nc * sizeof *n);
        if (!n) {
            snprintf(c->err, sizeof c->err, "out of memory");
            return RG_EIO;
        }
        r->ifs = n;
        r->cap_ifs = nc;
    }
    ng_if *i = &r->ifs[r->nifs];
    i->dlt = ng16(r, b);
    i->snaplen = ng32(r, b + 4);
    i->units = 1000000;
    i->bin_exp = -1;
    i->tsoffset = 0;
    for (uint32_t o = 8; o + 4 <= len;) {
        uint16_t code = ng16(r, b + o), olen = ng16(r, b + o + 2);
        if (code == 0 || o + 4 + olen > len) break; /* opt_endofopt */
        const uint8_t *v = b + o + 4;
        if (code == 9 && olen >= 1) { /* if_tsresol */
            unsigned e = v[0] & 0x7f;
            if (v[0] & 0x80 ? e > 63 : e > 19) {
                snprintf(c->err, sizeof c->err, "pcapng if_tsresol %u out of range", v[0]);
                return RG_EIO;
            }
            uint64_t u = 1;
            for (unsigned k = 0; k < e; k++)
                u *= v[0] & 0x80 ? 2 : 10;
            i->units = u;
            i->bin_exp = v[0] & 0x80 ? (int)e : -1;
        } else if (code == 14 && olen >= 8) { /* if_tsoffset */
            uint64_t u;
            memcpy(&u, v, 8);
            i->tsoffset = (int64_t)(r->swap ? __builtin_bswap64(u) : u);
        }
        o += 4 + ((olen + 3u) & ~3u);
    }
    if (!strcmp(c->link.name, "none")) { /* the file's first interface */
        (void)rg_link_info(i->dlt, &c->link);
        c->snaplen = i->snaplen;
    }
    r->nifs++;
    return RG_OK;
}

/* The next packet of a pcapng file (see rg_pcap_next). */
static int ng_next(rg_pcap *c, rg_frame *f)
{
    ng_reader *r = c->ng;
    for (;;) {
        uint32_t type, len;
        int rc = ng_block(c, &type, &len);
        if (rc <= 0) return rc;
        const uint8_t *b = c->ng->buf;
        uint32_t ifid, caplen, wire, hdr;
        uint64_t ticks = 0;
        switch (type) {
        case NG_IDB:
            if (ng_idb(c, b, len)) return RG_EIO;
            continue;
        case NG_EPB:
        case NG_OPB:
            if (len < 20) goto bad;
            ifid = type == NG_EPB ? ng32(r, b) : ng16(r, b);
            ticks = (uint64_t)ng32(r, b + 4) << 32 | ng32(r, b + 8);
            caplen = ng32(r, b + 12);
            wire = ng32(r, b + 16);
            hdr = 20;
            break;
        case NG_SPB:
            if (len < 4) goto bad;
            ifid = 0;
            wire = ng32(r, b);
            hdr = 4;
            caplen = wire;
            /* no captured length: the wire length cut to the snaplen and block */
            if (r->nifs && r->ifs[0].snaplen && caplen > r->ifs[0].snaplen)
                caplen = r->ifs[0].snaplen;
            if (caplen > len - 4) caplen = len - 4;
            break;
        default:
            continue; /* SHB (handled by ng_block), name resolution, statistics, ... */
        }
        if (ifid >= r->nifs) {
            snprintf(c->err, sizeof c->err, "pcapng packet of undefined interface %u", ifid);
            return RG_EIO;
        }
        if (caplen > len - hdr) goto bad;
        f->data = b + hdr;
        f->caplen = caplen;
        f->len = wire < caplen ? caplen : wire;
        f->ts_ns = type == NG_SPB ? 0 : ng_ns(&r->ifs[ifid], ticks);
        f->dlt = r->ifs[ifid].dlt;
        return 1;
    bad:
        snprintf(c->err, sizeof c->err, "pcapng packet block with a bad length");
        return RG_EIO;
    }
}

static void ng_free(ng_reader *r)
{
    if (!r) return;
    if (r->own_f && r->f) fclose(r->f);
    free(r->ifs);
    free(r->buf);
    free(r);
}

/* pcapng: read up to the first interface, so that rg_pcap_link knows it.
 * Blocks before it carry no packets (a packet needs an interface), so
 * nothing is lost and nothing needs re-reading (stdin cannot seek). */
static int ng_open(rg_pcap *c, FILE *f, int own)
{
    ng_reader *r = calloc(1, sizeof *r);
    if (!r) {
        if (own) fclose(f);
        snprintf(c->err, sizeof c->err, "out of memory");
        return RG_ENOMEM;
    }
    r->f = f;
    r->own_f = own;
    c->ng = r;
    uint32_t type, len;
    int rc;
    while ((rc = ng_block(c, &type, &len)) == 1) {
        if (type == NG_IDB) return ng_idb(c, r->buf, len);
        if (type == NG_EPB || type == NG_SPB || type == NG_OPB) {
            snprintf(c->err, sizeof c->err, "pcapng packet before any interface");
            return RG_EIO;
        }
    }
    if (rc == 0) snprintf(c->err, sizeof c->err, "pcapng file without an interface");
    return RG_EIO;
}

rg_pcap *rg_pcap_open(const char *path, char *err, size_t errlen)
{
    rg_pcap *c = calloc(1, sizeof *c);
    if (!c) {
        set_err(err, errlen, "out of memory", NULL);
        return NULL;
    }
    c->link.name = "none";
    int is_stdin = !strcmp(path, "-");
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        set_err(err, errlen, path, strerror(errno));
        free(c);
        return NULL;
    }
    struct stat st; /* fopen opens a directory; reading it fails with a less clear message */
    if (!is_stdin && fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        set_err(err, errlen, path, "is a directory, not a capture file");
        fclose(f);
        free(c);
        return NULL;
    }
    /* Paced input (a FIFO, a pipe, stdin): read without stdio's buffer, so that whether the
     * next frame is there is a poll of the descriptor (rg_pcap_ready: a burst is not held
     * back waiting for frames the writer has not written yet). */
    c->poll_fd = -1;
    if (fstat(fileno(f), &st) == 0 && !S_ISREG(st.st_mode)) {
        setvbuf(f, NULL, _IONBF, 0);
        c->poll_fd = fileno(f);
    }
    /* pcapng starts with 0x0A (the SHB type), classic pcap never does */
    int first = getc(f);
    if (first != EOF) ungetc(first, f);
    if (first == 0x0A) {
        if (ng_open(c, f, !is_stdin)) {
            set_err(err, errlen, path, c->err);
            ng_free(c->ng);
            free(c);
            return NULL;
        }
        return c;
    }
    c->p = pcap_fopen_offline_with_tstamp_precision(f, PCAP_TSTAMP_PRECISION_NANO, c->err);
    if (!c->p) {
        if (!is_stdin) fclose(f);
        set_err(err, errlen, path, c->err);
        free(c);
        return NULL;
    }
    (void)rg_link_info(pcap_datalink(c->p), &c->link);
    int s = pcap_snapshot(c->p);
    c->snaplen = s > 0 ? (uint32_t)s : 0;
    return c;
}

static uint64_t ts_ns(const struct pcap_pkthdr *h)
{
    /* opened with nanosecond precision: tv_usec holds nanoseconds.  The file's seconds are an
     * unsigned 32-bit field (valid until 2106) that libpcap reads as signed 32 bits: the low 32
     * bits of tv_sec are the file's value either way. */
    return (uint64_t)(uint32_t)h->ts.tv_sec * UINT64_C(1000000000) + (uint64_t)h->ts.tv_usec;
}

int rg_pcap_ready(const rg_pcap *c)
{
    if (c->poll_fd < 0) return 1;
    struct pollfd p = {.fd = c->poll_fd, .events = POLLIN};
    return poll(&p, 1, 0) != 0; /* data, the writer gone (EOF) or an error: no wait */
}

int rg_pcap_next(rg_pcap *c, rg_frame *f)
{
    if (c->ng) return ng_next(c, f);
    struct pcap_pkthdr *h;
    const u_char *data;
    int rc = pcap_next_ex(c->p, &h, &data);
    if (rc == 1) {
        f->data = data;
        f->caplen = h->caplen;
        f->len = h->len;
        f->ts_ns = ts_ns(h);
        f->dlt = c->link.dlt;
        return 1;
    }
    if (rc == PCAP_ERROR_BREAK) return 0; /* end of file */
    snprintf(c->err, sizeof c->err, "%s", pcap_geterr(c->p));
    return RG_EIO;
}

const rg_linkinfo *rg_pcap_link(const rg_pcap *c)
{
    return &c->link;
}

uint32_t rg_pcap_snaplen(const rg_pcap *c)
{
    return c->snaplen;
}

const char *rg_pcap_error(const rg_pcap *c)
{
    return c->err;
}

void rg_pcap_close(rg_pcap *c)
{
    if (!c) return;
    if (c->p) pcap_close(c->p);
    ng_free(c->ng);
    free(c);
}

/* ---- whole capture in memory ---- */
int rg_capture_load(const char *path, rg_capture *cap, char *err, size_t errlen)
{
    memset(cap, 0, sizeof *cap);
    rg_pcap *c = rg_pcap_open(path, err, errlen);
    if (!c) return RG_EIO;
    size_t fcap = 1024, acap = 1 << 20;
    rg_frame *frames = malloc(fcap * sizeof *frames);
    uint8_t *arena = malloc(acap);
    size_t n = 0, used = 0;
    int rc = RG_OK;
    if (!frames || !arena) {
        rc = RG_ENOMEM;
        goto fail;
    }
    for (;;) {
        rg_frame f;
        int r = rg_pcap_next(c, &f);
        if (r == 0) break;
        if (r < 0) {
            if (err && errlen) /* the file and the record that could not be read */
                snprintf(err, errlen, "%s: packet %zu: %s", path, n + 1, rg_pcap_error(c));
            rc = r;
            goto fail;
        }
        size_t need = used + (((size_t)f.caplen + 7) & ~(size_t)7);
        if (need > acap) {
            while (acap < need)
                acap *= 2;
            uint8_t *na = realloc(arena, acap);
            if (!na) {
                rc = RG_ENOMEM;
                goto fail;
            }
            arena = na;
        }
        if (n == fcap) {
            fcap *= 2;
            rg_frame *nf = realloc(frames, fcap * sizeof *nf);
            if (!nf) {
                rc = RG_ENOMEM;
                goto fail;
            }
            frames = nf;
        }
        if (f.caplen) memcpy(arena + used, f.data, f.caplen);
        frames[n] = f;
        frames[n].data = NULL; /* set below, once the arena stops moving */
        n++;
        used = need;
        cap->bytes += f.caplen;
    }
    for (size_t i = 0, off = 0; i < n; i++) {
        frames[i].data = arena + off;
        off += ((size_t)frames[i].caplen + 7) & ~(size_t)7;
    }
    cap->frames = frames;
    cap->count = n;
    cap->arena = arena;
    cap->arena_len = used;
    cap->link = *rg_pcap_link(c);
    cap->snaplen = rg_pcap_snaplen(c);
    rg_pcap_close(c);
    return RG_OK;
fail:
    if (rc == RG_ENOMEM) set_err(err, errlen, "out of memory", NULL);
    free(frames);
    free(arena);
    rg_pcap_close(c);
    memset(cap, 0, sizeof *cap);
    return rc;
}

void rg_capture_free(rg_capture *cap)
{
    free(cap->frames);
    free(cap->arena);
    memset(cap, 0, sizeof *cap);
}
