/* rg_source_live.c - the "live" packet source: one network interface through
 * libpcap (see rg_source.h).
 *
 * The handle is non-blocking and next_burst waits on its descriptor for at
 * most RG_LIVE_POLL_MS, so a caller sees 0 frames regularly (to run its
 * timers) and cfg->stop is honoured within that time even on an idle link.
 * Immediate mode: frames are delivered as they arrive, not when a kernel
 * buffer block fills.  libpcap's frame buffers are only valid until its next
 * read, so a burst's frames are copied into the source's own arena. */
#include <errno.h>
#include <limits.h>
#include <pcap/pcap.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rg/rg_source.h"

/* How long next_burst waits for a frame before returning 0. */
#define RG_LIVE_POLL_MS 100
/* Whole frames: what tcpdump uses by default. */
#define RG_LIVE_SNAPLEN 262144

typedef struct live_src {
    rg_source base;
    pcap_t *p;
    int fd; /* pcap_get_selectable_fd; -1 = none (poll by sleeping in pcap) */
    int nano; /* timestamps in nanoseconds (else microseconds) */
    rg_linkinfo li;
    volatile sig_atomic_t *stop;
    rg_source_stats st;
    /* the current burst, copied */
    rg_frame *out;
    unsigned n, max;
    uint8_t *arena;
    size_t used, cap;
    int failed;
    char err[PCAP_ERRBUF_SIZE + 256];
} live_src;

static void live_close(rg_source *s)
{
    live_src *l = (live_src *)s;
    if (!l) return;
    if (l->p) pcap_close(l->p);
    free(l->arena);
    free(l);
}

static rg_source *live_fail(live_src *l, char *err, size_t errlen)
{
    if (err && errlen) snprintf(err, errlen, "%s", l->err);
    live_close(&l->base);
    return NULL;
}

static rg_source *live_open(const rg_source_cfg *cfg, char *err, size_t errlen)
{
    live_src *l = calloc(1, sizeof *l);
    if (!l) {
        if (err && errlen) snprintf(err, errlen, "live: out of memory");
        return NULL;
    }
    l->base.ops = &rg_source_live;
    l->stop = cfg->stop;
    l->fd = -1;
    const char *ifname = cfg->name;
    if (!ifname || !*ifname) {
        snprintf(l->err, sizeof l->err, "live: no interface named (--iface)");
        return live_fail(l, err, errlen);
    }
    char ebuf[PCAP_ERRBUF_SIZE] = "";
    l->p = pcap_create(ifname, ebuf);
    if (!l->p) {
        snprintf(l->err, sizeof l->err, "live: %s: %s", ifname, ebuf);
        return live_fail(l, err, errlen);
    }
    uint32_t snap = cfg->snaplen ? cfg->snaplen : RG_LIVE_SNAPLEN;
    if (snap > INT_MAX) snap = RG_LIVE_SNAPLEN;
    pcap_set_snaplen(l->p, (int)snap);
    pcap_set_promisc(l->p, cfg->promisc ? 1 : 0);
    pcap_set_immediate_mode(l->p, 1);
    pcap_set_timeout(l->p, RG_LIVE_POLL_MS);
    /* the kernel buffer (4 MB, or --buffer): bursts wait there, not on the floor.  Each ring
     * slot holds a whole frame: at a 1,500-byte MTU 4 MB is about 2,600 frames, 50 ms of
     * 50,000 frames/s; a reader descheduled on a busy machine wants more (64 MB: 0.8 s), at
     * the price of a slower start (the ring is allocated while the socket is unhooked) */
    pcap_set_buffer_size(l->p, (int)((cfg->buffer_mb ? cfg->buffer_mb : 4) << 20));
    pcap_set_tstamp_precision(l->p, PCAP_TSTAMP_PRECISION_NANO); /* else micro: fine */
    int rc = pcap_activate(l->p);
    if (rc < 0) {
        const char *why = rc == PCAP_ERROR ? pcap_geterr(l->p) : pcap_statustostr(rc);
        /* "no such device", "permission denied": say which interface and why */
        snprintf(l->err, sizeof l->err, "live: cannot capture on %s: %s%s", ifname, why,
                 rc == PCAP_ERROR_PERM_DENIED ? " (capturing needs root or CAP_NET_RAW)" : "");
        return live_fail(l, err, errlen);
    }
    l->nano = pcap_get_tstamp_precision(l->p) == PCAP_TSTAMP_PRECISION_NANO;
    int dlt = pcap_datalink(l->p);
    if (rg_link_info(dlt, &l->li) != RG_OK) {
        const char *dn = pcap_datalink_val_to_name(dlt);
        snprintf(l->err, sizeof l->err, "live: %s: link type %s (%d) is not supported", ifname,
                 dn ? dn : "?", dlt);
        return live_fail(l, err, errlen);
    }
    if (cfg->filter && *cfg->filter) {
        struct bpf_program prog;
        if (pcap_compile(l->p, &prog, cfg->filter, 1, PCAP_NETMASK_UNKNOWN) < 0) {
            snprintf(l->err, sizeof l->err, "live: BPF filter \"%s\": %s", cfg->filter,
                     pcap_geterr(l->p));
            return live_fail(l, err, errlen);
        }
        rc = pcap_setfilter(l->p, &prog);
        pcap_freecode(&prog);
        if (rc < 0) {
            snprintf(l->err, sizeof l->err, "live: %s: setting the filter: %s", ifname,
                     pcap_geterr(l->p));
            return live_fail(l, err, errlen);
        }
    }
    if (pcap_setnonblock(l->p, 1, ebuf) < 0) {
        snprintf(l->err, sizeof l->err, "live: %s: %s", ifname, ebuf);
        return live_fail(l, err, errlen);
    }
    l->fd = pcap_get_selectable_fd(l->p);
    return &l->base;
}

/* pcap_dispatch callback: copy one frame into the arena. */
static void live_take(u_char *user, const struct pcap_pkthdr *h, const u_char *bytes)
{
    live_src *l = (live_src *)user;
    if (l->failed || l->n >= l->max) return;
    size_t need = l->used + ((h->caplen + 7u) & ~(size_t)7);
    if (need > l->cap) {
        size_t cap = l->cap ? l->cap : 65536;
        while (cap < need) cap *= 2;
        uint8_t *a = realloc(l->arena, cap);
        if (!a) {
            snprintf(l->err, sizeof l->err, "live: out of memory for a burst");
            l->failed = 1;
            return;
        }
        l->arena = a;
        l->cap = cap;
    }
    memcpy(l->arena + l->used, bytes, h->caplen);
    rg_frame *f = &l->out[l->n++];
    f->data = (const uint8_t *)(uintptr_t)l->used; /* an offset until the burst ends */
    f->caplen = h->caplen;
    f->len = h->len;
    f->ts_ns = (uint64_t)h->ts.tv_sec * 1000000000u +
               (uint64_t)h->ts.tv_usec * (l->nano ? 1u : 1000u);
    f->dlt = l->li.dlt;
    l->used = need;
}

static int live_next_burst(rg_source *s, rg_frame *out, unsigned max)
{
    live_src *l = (live_src *)s;
    if (l->stop && *l->stop) return RG_SRC_END;
    if (l->failed) return RG_SRC_ERROR;
    if (!max) return 0;
    l->out = out;
    l->n = 0;
    l->max = max;
    l->used = 0;
    int rc = pcap_dispatch(l->p, (int)max, live_take, (u_char *)l);
    if (rc == 0 && !l->n) {
        /* nothing buffered: wait for the descriptor, briefly */
        if (l->fd >= 0) {
            struct pollfd pfd = {.fd = l->fd, .events = POLLIN};
            int pr = poll(&pfd, 1, RG_LIVE_POLL_MS);
            if (pr < 0 && errno != EINTR) {
                snprintf(l->err, sizeof l->err, "live: poll: %s", strerror(errno));
                l->failed = 1;
                return RG_SRC_ERROR;
            }
            if (l->stop && *l->stop) return RG_SRC_END;
            if (pr > 0) rc = pcap_dispatch(l->p, (int)max, live_take, (u_char *)l);
        }
    }
    if (rc == PCAP_ERROR_BREAK) return l->n ? (int)l->n : RG_SRC_END;
    if (rc < 0 && !l->failed) {
        snprintf(l->err, sizeof l->err, "live: reading: %s", pcap_geterr(l->p));
        l->failed = 1;
    }
    for (unsigned i = 0; i < l->n; i++) {
        out[i].data = l->arena + (uintptr_t)out[i].data;
        l->st.frames++;
        l->st.bytes += out[i].caplen;
    }
    if (l->n) return (int)l->n; /* an error is reported on the next call */
    return l->failed ? RG_SRC_ERROR : 0;
}

static const rg_linkinfo *live_link(const rg_source *s)
{
    return &((const live_src *)s)->li;
}

static void live_stats(const rg_source *s, rg_source_stats *st)
{
    const live_src *l = (const live_src *)s;
    *st = l->st;
    struct pcap_stat ps;
    if (pcap_stats(l->p, &ps) == 0) st->dropped = (uint64_t)ps.ps_drop + ps.ps_ifdrop;
}

static const char *live_error(const rg_source *s)
{
    const live_src *l = (const live_src *)s;
    return l->err[0] ? l->err : "no error";
}

const rg_source_ops rg_source_live = {
    .name = "live",
    .help = "a network interface through libpcap (--iface IF)",
    .open = live_open,
    .next_burst = live_next_burst,
    .link = live_link,
    .stats = live_stats,
    .error = live_error,
    .close = live_close,
};
