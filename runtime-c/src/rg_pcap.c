/* rg_pcap.c - capture input on libpcap (see rg_pcap.h). */
#include "rg/rg_pcap.h"

#include <pcap/pcap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rg/rg_pkt.h"

/* LINKTYPE_RAW in files; libpcap maps it to DLT_RAW, accept both. */
#define RG_LINKTYPE_RAW 101

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
    case DLT_RAW:
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
    } else {
        from_version(np, p, caplen, 0);
        return caplen ? RG_OK : RG_ETRUNC;
    }
    return RG_OK;
}

/* ---- reader ---- */
struct rg_pcap {
    pcap_t *p;
    rg_linkinfo link;
    char err[PCAP_ERRBUF_SIZE];
};

static void set_err(char *err, size_t errlen, const char *a, const char *b)
{
    if (err && errlen) snprintf(err, errlen, "%s%s%s", a, b ? ": " : "", b ? b : "");
}

rg_pcap *rg_pcap_open(const char *path, char *err, size_t errlen)
{
    rg_pcap *c = calloc(1, sizeof *c);
    if (!c) {
        set_err(err, errlen, "out of memory", NULL);
        return NULL;
    }
    c->p = pcap_open_offline_with_tstamp_precision(path, PCAP_TSTAMP_PRECISION_NANO, c->err);
    if (!c->p) {
        set_err(err, errlen, path, c->err);
        free(c);
        return NULL;
    }
    (void)rg_link_info(pcap_datalink(c->p), &c->link);
    return c;
}

static uint64_t ts_ns(const struct pcap_pkthdr *h)
{
    /* opened with nanosecond precision: tv_usec holds nanoseconds */
    if (h->ts.tv_sec < 0) return 0;
    return (uint64_t)h->ts.tv_sec * UINT64_C(1000000000) + (uint64_t)h->ts.tv_usec;
}

int rg_pcap_next(rg_pcap *c, rg_frame *f)
{
    struct pcap_pkthdr *h;
    const u_char *data;
    int rc = pcap_next_ex(c->p, &h, &data);
    if (rc == 1) {
        f->data = data;
        f->caplen = h->caplen;
        f->len = h->len;
        f->ts_ns = ts_ns(h);
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
    int s = pcap_snapshot(c->p);
    return s > 0 ? (uint32_t)s : 0;
}

const char *rg_pcap_error(const rg_pcap *c)
{
    return c->err;
}

void rg_pcap_close(rg_pcap *c)
{
    if (!c) return;
    if (c->p) pcap_close(c->p);
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
            set_err(err, errlen, path, rg_pcap_error(c));
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
