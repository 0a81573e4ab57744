/* rg_source_live.c - the "live" packet source: one network interface through
 * libpcap (see rg_source.h).
 *
 * The handle is non-blocking and next_burst waits on its descriptor for at
 * most RG_LIVE_POLL_MS, so a caller sees 0 frames regularly (to run its
 * timers) and cfg->stop is honoured within that time even on an idle link.
 * Immediate mode: frames are delivered as they arrive, not when a kernel
 * buffer block fills.  libpcap's frame buffers are only valid until its next
 * read, so a burst's frames are copied into the source's own arena.
 *
 * Inline mode (cfg->inline_mode, cfg->peer): a bump in the wire between two
 * interfaces.  Both are captured (incoming frames only: what we inject must
 * not come back to us), and forward sends each frame out of the other one
 * with pcap_inject, so both directions of a connection cross the stack. */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
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

/* One captured interface. */
typedef struct live_if {
    pcap_t *p;
    int fd;   /* pcap_get_selectable_fd; -1 = none (poll by sleeping in pcap) */
    int nano; /* timestamps in nanoseconds (else microseconds) */
} live_if;

typedef struct live_src {
    rg_source base;
    live_if ifs[2]; /* [1]: the inline peer */
    unsigned nifs;
    unsigned cur;  /* the interface live_take is reading */
    unsigned next; /* the interface read first by the next burst */
    rg_linkinfo li;
    volatile sig_atomic_t *stop;
    rg_source_stats st;
    /* the current burst, copied */
    rg_frame *out;
    unsigned n, max;
    uint8_t from[RG_BURST]; /* inline: the interface each frame of the burst came from */
    unsigned last_n;        /* frames of the last burst not yet forwarded */
    uint8_t *arena;
    size_t used, cap;
    int failed;
    char err[PCAP_ERRBUF_SIZE + 256];
} live_src;

static void live_close(rg_source *s)
{
    live_src *l = (live_src *)s;
    if (!l) return;
    for (unsigned i = 0; i < 2; i++)
        if (l->ifs[i].p) pcap_close(l->ifs[i].p);
    free(l->arena);
    free(l);
}

static rg_source *live_fail(live_src *l, char *err, size_t errlen)
{
    if (err && errlen) snprintf(err, errlen, "%s", l->err);
    live_close(&l->base);
    return NULL;
}

/* Open and activate interface ifname into *h; 0 or -1 (message in l->err). */
static int live_open_if(live_src *l, live_if *h, const char *ifname, const rg_source_cfg *cfg)
{
    char ebuf[PCAP_ERRBUF_SIZE] = "";
    h->fd = -1;
    h->p = pcap_create(ifname, ebuf);
    if (!h->p) {
        snprintf(l->err, sizeof l->err, "live: %s: %s", ifname, ebuf);
        return -1;
    }
    pcap_t *p = h->p;
    uint32_t snap = cfg->snaplen ? cfg->snaplen : RG_LIVE_SNAPLEN;
    if (snap > INT_MAX) snap = RG_LIVE_SNAPLEN;
    pcap_set_snaplen(p, (int)snap);
    pcap_set_promisc(p, cfg->promisc ? 1 : 0);
    pcap_set_immediate_mode(p, 1);
    pcap_set_timeout(p, RG_LIVE_POLL_MS);
    /* the kernel buffer (4 MB, or --buffer): bursts wait there, not on the floor.  Each ring
     * slot holds a whole frame: at a 1,500-byte MTU 4 MB is about 2,600 frames, 50 ms of
     * 50,000 frames/s; a reader descheduled on a busy machine wants more (64 MB: 0.8 s), at
     * the price of a slower start (the ring is allocated while the socket is unhooked) */
    pcap_set_buffer_size(p, (int)((cfg->buffer_mb ? cfg->buffer_mb : 4) << 20));
    pcap_set_tstamp_precision(p, PCAP_TSTAMP_PRECISION_NANO); /* else micro: fine */
    int rc = pcap_activate(p);
    if (rc < 0) {
        const char *why = rc == PCAP_ERROR ? pcap_geterr(p) : pcap_statustostr(rc);
        /* "no such device", "permission denied": say which interface and why */
        snprintf(l->err, sizeof l->err, "live: cannot capture on %s: %s%s", ifname, why,
                 rc == PCAP_ERROR_PERM_DENIED ? " (capturing needs root or CAP_NET_RAW)" : "");
        return -1;
    }
    h->nano = pcap_get_tstamp_precision(p) == PCAP_TSTAMP_PRECISION_NANO;
    int dlt = pcap_datalink(p);
    rg_linkinfo li;
    if (rg_link_info(dlt, &li) != RG_OK) {
        const char *dn = pcap_datalink_val_to_name(dlt);
        snprintf(l->err, sizeof l->err, "live: %s: link type %s (%d) is not supported", ifname,
                 dn ? dn : "?", dlt);
        return -1;
    }
    if (h == &l->ifs[0]) {
        l->li = li;
    } else if (li.dlt != l->li.dlt) {
        /* a frame is forwarded as it is: both ends must speak the same link */
        snprintf(l->err, sizeof l->err, "live: --peer %s: link type %s, not %s as on %s", ifname,
                 li.name, l->li.name, cfg->name);
        return -1;
    }
    /* inline: only what arrives, not what we inject out of this interface */
    if (cfg->inline_mode && pcap_setdirection(p, PCAP_D_IN) < 0) {
        snprintf(l->err, sizeof l->err, "live: %s: capturing incoming frames only: %s", ifname,
                 pcap_geterr(p));
        return -1;
    }
    if (cfg->filter && *cfg->filter) {
        struct bpf_program prog;
        if (pcap_compile(p, &prog, cfg->filter, 1, PCAP_NETMASK_UNKNOWN) < 0) {
            snprintf(l->err, sizeof l->err, "live: BPF filter \"%s\": %s", cfg->filter,
                     pcap_geterr(p));
            return -1;
        }
        rc = pcap_setfilter(p, &prog);
        pcap_freecode(&prog);
        if (rc < 0) {
            snprintf(l->err, sizeof l->err, "live: %s: setting the filter: %s", ifname,
                     pcap_geterr(p));
            return -1;
        }
    }
    if (pcap_setnonblock(p, 1, ebuf) < 0) {
        snprintf(l->err, sizeof l->err, "live: %s: %s", ifname, ebuf);
        return -1;
    }
    h->fd = pcap_get_selectable_fd(p);
    return 0;
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
    const char *ifname = cfg->name;
    if (!ifname || !*ifname) {
        snprintf(l->err, sizeof l->err, "live: no interface named (--iface)");
        return live_fail(l, err, errlen);
    }
    if (cfg->inline_mode && (!cfg->peer || !*cfg->peer || !strcmp(cfg->peer, ifname))) {
        snprintf(l->err, sizeof l->err,
                 "live: --inline needs --peer IF, an interface other than %s", ifname);
        return live_fail(l, err, errlen);
    }
    l->nifs = cfg->inline_mode ? 2 : 1;
    if (live_open_if(l, &l->ifs[0], ifname, cfg) < 0) return live_fail(l, err, errlen);
    if (l->nifs == 2 && live_open_if(l, &l->ifs[1], cfg->peer, cfg) < 0)
        return live_fail(l, err, errlen);
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
        while (cap < need)
            cap *= 2;
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
    l->from[l->n < RG_BURST ? l->n : 0] = (uint8_t)l->cur;
    rg_frame *f = &l->out[l->n++];
    f->data = (const uint8_t *)(uintptr_t)l->used; /* an offset until the burst ends */
    f->caplen = h->caplen;
    f->len = h->len;
    f->ts_ns = (uint64_t)h->ts.tv_sec * 1000000000u +
               (uint64_t)h->ts.tv_usec * (l->ifs[l->cur].nano ? 1u : 1000u);
    f->dlt = l->li.dlt;
    l->used = need;
}

/* What interface i has buffered, up to the burst's room: pcap_dispatch's result. */
static int live_read(live_src *l, unsigned i)
{
    l->cur = i;
    return pcap_dispatch(l->ifs[i].p, (int)(l->max - l->n), live_take, (u_char *)l);
}

/* Every interface once, from l->next on (two interfaces take turns at being first);
 * the first error or break, else 0.  *bad: the interface that failed. */
static int live_read_all(live_src *l, unsigned *bad)
{
    int rc = 0;
    for (unsigned k = 0; k < l->nifs && l->n < l->max && !l->failed; k++) {
        unsigned i = (l->next + k) % l->nifs;
        int r = live_read(l, i);
        if (r < 0 && !rc) {
            rc = r;
            *bad = i;
        }
    }
    l->next = (l->next + 1) % l->nifs;
    return rc;
}

static int live_next_burst(rg_source *s, rg_frame *out, unsigned max)
{
    live_src *l = (live_src *)s;
    if (l->stop && *l->stop) return RG_SRC_END;
    if (l->failed) return RG_SRC_ERROR;
    if (!max) return 0;
    if (l->nifs > 1 && max > RG_BURST) max = RG_BURST; /* from[] */
    l->out = out;
    l->n = 0;
    l->max = max;
    l->used = 0;
    unsigned bad = 0;
    int rc = live_read_all(l, &bad);
    if (rc == 0 && !l->n) {
        /* nothing buffered: wait for the descriptors, briefly */
        struct pollfd pfd[2];
        nfds_t np = 0;
        for (unsigned i = 0; i < l->nifs; i++)
            if (l->ifs[i].fd >= 0)
                pfd[np++] = (struct pollfd){.fd = l->ifs[i].fd, .events = POLLIN};
        if (np) {
            int pr = poll(pfd, np, RG_LIVE_POLL_MS);
            if (pr < 0 && errno != EINTR) {
                snprintf(l->err, sizeof l->err, "live: poll: %s", strerror(errno));
                l->failed = 1;
                return RG_SRC_ERROR;
            }
            if (l->stop && *l->stop) return RG_SRC_END;
            if (pr > 0) rc = live_read_all(l, &bad);
        }
    }
    if (rc == PCAP_ERROR_BREAK) return l->n ? (int)l->n : RG_SRC_END;
    if (rc < 0 && !l->failed) {
        snprintf(l->err, sizeof l->err, "live: reading: %s", pcap_geterr(l->ifs[bad].p));
        l->failed = 1;
    }
    for (unsigned i = 0; i < l->n; i++) {
        out[i].data = l->arena + (uintptr_t)out[i].data;
        l->st.frames++;
        l->st.bytes += out[i].caplen;
    }
    l->last_n = l->n;
    if (l->n) return (int)l->n; /* an error is reported on the next call */
    return l->failed ? RG_SRC_ERROR : 0;
}

/* One frame out of interface h: pcap_inject, retried briefly while the socket's send
 * buffer is full (a non-blocking handle says so instead of waiting).  0 or -1. */
static int live_inject(live_if *h, const rg_frame *f)
{
    for (int tries = 0; tries < 50; tries++) {
        if (pcap_inject(h->p, f->data, f->caplen) == (int)f->caplen) return 0;
        if (h->fd < 0) break;
        struct pollfd pfd = {.fd = h->fd, .events = POLLOUT};
        if (poll(&pfd, 1, 10) < 0 && errno != EINTR) break;
    }
    return -1;
}

static void live_forward(rg_source *s, const uint8_t *drop, unsigned n)
{
    live_src *l = (live_src *)s;
    if (l->nifs < 2) return;
    if (n > l->last_n) n = l->last_n;
    for (unsigned i = 0; i < n; i++) {
        const rg_frame *f = &l->out[i];
        if (drop[i]) {
            l->st.tx_withheld++;
        } else if (f->caplen == f->len && live_inject(&l->ifs[1 - l->from[i]], f) == 0) {
            l->st.tx_frames++;
        } else {
            l->st.tx_failed++; /* a frame cut by the snap length cannot go on whole */
        }
    }
    l->last_n = 0;
}

static unsigned live_origin(const rg_source *s, unsigned i)
{
    const live_src *l = (const live_src *)s;
    return l->nifs > 1 && i < RG_BURST ? l->from[i] : 0;
}

static void live_forward_one(rg_source *s, const rg_frame *f, unsigned from, int drop)
{
    live_src *l = (live_src *)s;
    if (l->nifs < 2) return;
    if (drop)
        l->st.tx_withheld++;
    else if (f->caplen == f->len && live_inject(&l->ifs[1 - (from & 1)], f) == 0)
        l->st.tx_frames++;
    else
        l->st.tx_failed++;
}

static const rg_linkinfo *live_link(const rg_source *s)
{
    return &((const live_src *)s)->li;
}

static void live_stats(const rg_source *s, rg_source_stats *st)
{
    const live_src *l = (const live_src *)s;
    *st = l->st;
    for (unsigned i = 0; i < l->nifs; i++) {
        struct pcap_stat ps;
        if (pcap_stats(l->ifs[i].p, &ps) == 0) st->dropped += (uint64_t)ps.ps_drop + ps.ps_ifdrop;
    }
}

static const char *live_error(const rg_source *s)
{
    const live_src *l = (const live_src *)s;
    return l->err[0] ? l->err : "no error";
}

/* Its options (rg_source_opt): the interface, libpcap's settings, the inline peer. */
static const rg_source_opt live_opts[] = {
    RG_SOPTS_CAPTURE,
    {"buffer", "MB",
     "the kernel's capture buffer (default 4; more rides out\n"
     "a reader descheduled on a busy machine)",
     RG_SOPT_NUM, 1, 4095, offsetof(rg_source_cfg, buffer_mb), 0},
    {"peer", "IF", "the second interface", RG_SOPT_STR, 0, 0, offsetof(rg_source_cfg, peer),
     RG_SOPT_INLINE},
    {NULL, NULL, NULL, 0, 0, 0, 0, 0},
};

static const char *live_check(const rg_source_cfg *cfg)
{
    if (cfg->inline_mode && !cfg->peer)
        return "--inline --io live needs --peer IF (frames go from --iface to --peer and back)";
    if (cfg->inline_mode && cfg->snaplen) return "--inline forwards whole frames: no --snaplen";
    return NULL;
}

const rg_source_ops rg_source_live = {
    .name = "live",
    .help = "a network interface through libpcap (--iface IF [--inline --peer IF2])",
    .caps = RG_SRC_CAP_INLINE | RG_SRC_CAP_ARRIVAL_TS,
    .opts = live_opts,
    .name_what = "the interface (--iface IF)",
    .check = live_check,
    .open = live_open,
    .next_burst = live_next_burst,
    .link = live_link,
    .stats = live_stats,
    .error = live_error,
    .close = live_close,
    .forward = live_forward,
    .origin = live_origin,
    .forward_one = live_forward_one,
};
