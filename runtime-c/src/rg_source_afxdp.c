/* rg_source_afxdp.c - the "afxdp" source: a network interface read through AF_XDP sockets
 * (libxdp's xsk API), one per RX queue: --queue Q alone, or with --workers N the queues
 * Q..Q+N-1, one socket and one worker each (see rg_source.h).
 *
 * Each socket has a UMEM of its own (--frames chunks of RG_XSK_CHUNK bytes) and its fill and
 * RX rings, as many descriptors each; it only receives (no TX ring, so nothing ever reaches the
 * completion ring, which libxdp creates with the UMEM).  At open every chunk goes on the fill ring;
 * the kernel copies (or, zero-copy, DMAs) a frame into a chunk and posts it on the RX ring;
 * next_burst hands out the frames in place and gives their chunks back to the fill ring at the next
 * call, so a chunk is always either on the fill ring, in the kernel, on the RX ring or in the
 * caller's last burst.  The fill ring has room for every chunk: giving back never waits.
 *
 * The XDP program that redirects frames to the sockets: if the interface already has one with
 * an XSKMAP named rg_xsks (the stack's own, rubikgen build --xdp: its "everything else" goes
 * there, its drops and bypasses do not), each socket is put in that map at its queue's index
 * and no program is loaded; otherwise libxdp loads its default program (every frame of a
 * queue with a socket to that socket) and removes it when the last socket closes.
 *
 * Modes (--xdp-mode): native (the driver's XDP) and then, if the driver or its settings refuse
 * (a veth whose MTU is above about 3,500 bytes), skb (generic XDP).  The socket is bound with
 * neither XDP_COPY nor XDP_ZEROCOPY, so the kernel takes zero-copy where the driver has it and
 * copy mode otherwise (veth has none; XDP_OPTIONS says which).  The summary's dropped line
 * says which were used (detail()).
 *
 * Timestamps: the kernel gives AF_XDP frames none, so a frame's is the CLOCK_REALTIME time,
 * in nanoseconds, at which next_burst took it off the RX ring (one reading per burst: the
 * frames of one burst share it); in order per socket, not the time the NIC received it.
 *
 * Frames longer than a chunk's room (RG_XSK_CHUNK less the kernel's headroom) cannot be
 * received without multi-buffer AF_XDP, which libxdp's default program does not enable: the
 * kernel drops them and counts them (rx_dropped), and they are in the summary's drops. */
#define _GNU_SOURCE /* if_nametoindex */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <linux/if_link.h>
#include <linux/if_xdp.h>
#include <net/if.h>
#include <pcap/dlt.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <xdp/libxdp.h>
#include <xdp/xsk.h>

#include "rg/rg_source.h"

#define RG_XSK_CHUNK      4096u  /* a UMEM chunk: one frame (a page, the largest aligned chunk) */
#define RG_XSK_FRAMES     "4096" /* chunks per socket by default (--frames: 16 MB) */
#define RG_XSK_POLL_MS    100    /* next_burst waits this long for frames */
#define RG_XSK_MAX_Q      64     /* sockets (--workers) */
#define RG_XSK_QUEUES_MAX 4096   /* the interface's queues, counted in /sys */

/* One socket, its UMEM and rings. */
typedef struct xsk_q {
    struct xsk_umem *umem;
    struct xsk_socket *xsk;
    struct xsk_ring_prod fill;
    struct xsk_ring_cons comp, rx;
    void *area;
    unsigned queue;              /* the interface's RX queue */
    unsigned nchunks;            /* chunks in the UMEM, descriptors of its fill and RX rings */
    uint64_t held[RG_BURST_MAX]; /* the last burst's chunks: back to the fill ring next call */
    unsigned nheld;
    uint64_t frames, bytes;
    pthread_t th;
    int started;
} xsk_q;

typedef struct xsk_src {
    rg_source base;
    unsigned nq;
    xsk_q q[RG_XSK_MAX_Q];
    uint32_t snaplen;
    rg_linkinfo li;
    volatile sig_atomic_t *stop;
    int failed;
    int map_fd;        /* the attached program's rg_xsks, or -1: libxdp's default program */
    unsigned ifqueues; /* the interface's RX queues (0: not known) */
    char mode[96];     /* what detail() says */
    char err[512];
} xsk_src;

const rg_source_ops rg_source_afxdp;

static void xsk_close(rg_source *s)
{
    xsk_src *p = (xsk_src *)s;
    if (!p) return;
    for (unsigned i = 0; i < RG_XSK_MAX_Q; i++) {
        xsk_q *q = &p->q[i];
        if (q->xsk) {
            if (p->map_fd >= 0) { /* the stack's program sends this queue up again */
                int k = (int)q->queue;
                bpf_map_delete_elem(p->map_fd, &k);
            }
            xsk_socket__delete(q->xsk);
        }
        if (q->umem) xsk_umem__delete(q->umem);
        if (q->area) munmap(q->area, (size_t)q->nchunks * RG_XSK_CHUNK);
    }
    if (p->map_fd >= 0) close(p->map_fd);
    free(p);
}

static rg_source *xsk_fail(xsk_src *p, char *err, size_t errlen)
{
    if (err && errlen) snprintf(err, errlen, "%s", p->err);
    xsk_close(&p->base);
    return NULL;
}

/* The XSKMAP rg_xsks of the XDP program attached to ifindex (*mode: XDP_FLAGS_DRV_MODE or
 * XDP_FLAGS_SKB_MODE, how it is attached): its fd, -1 when no program or one without that map
 * is attached. */
static int attached_xsks(int ifindex, unsigned *mode)
{
    LIBBPF_OPTS(bpf_xdp_query_opts, qo);
    if (bpf_xdp_query(ifindex, 0, &qo) || !qo.prog_id) return -1;
    *mode = qo.attach_mode == XDP_ATTACHED_SKB ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE;
    int pfd = bpf_prog_get_fd_by_id(qo.prog_id);
    if (pfd < 0) return -1;
    uint32_t ids[64];
    struct bpf_prog_info pi;
    memset(&pi, 0, sizeof pi);
    pi.nr_map_ids = sizeof ids / sizeof ids[0];
    pi.map_ids = (uint64_t)(uintptr_t)ids;
    uint32_t len = sizeof pi;
    int found = -1;
    if (!bpf_obj_get_info_by_fd(pfd, &pi, &len)) {
        unsigned n = pi.nr_map_ids < 64 ? pi.nr_map_ids : 64;
        for (unsigned i = 0; i < n && found < 0; i++) {
            int mfd = bpf_map_get_fd_by_id(ids[i]);
            if (mfd < 0) continue;
            struct bpf_map_info mi;
            memset(&mi, 0, sizeof mi);
            uint32_t ml = sizeof mi;
            if (!bpf_obj_get_info_by_fd(mfd, &mi, &ml) && mi.type == BPF_MAP_TYPE_XSKMAP &&
                !strcmp(mi.name, "rg_xsks"))
                found = mfd;
            else
                close(mfd);
        }
    }
    close(pfd);
    return found;
}

/* After a failed attempt, the XDP program libxdp attached for it and left (libxdp without a
 * bpffs cannot track it): detached, so the next mode can attach its own.  Only when the
 * interface had none before we started. */
static void detach_leftover(int ifindex)
{
    LIBBPF_OPTS(bpf_xdp_query_opts, qo);
    if (bpf_xdp_query(ifindex, 0, &qo) || !qo.prog_id) return;
    const unsigned mode = qo.attach_mode == XDP_ATTACHED_SKB  ? XDP_FLAGS_SKB_MODE
                          : qo.attach_mode == XDP_ATTACHED_HW ? XDP_FLAGS_HW_MODE
                                                              : XDP_FLAGS_DRV_MODE;
    bpf_xdp_detach(ifindex, mode, NULL);
}

/* Socket q on ifname's queue q->queue, the XDP program in mode xdp_flags; 0 or a negative
 * errno. */
static int open_q(xsk_src *p, xsk_q *q, const char *ifname, unsigned xdp_flags)
{
    const unsigned nf = q->nchunks;
    const size_t size = (size_t)nf * RG_XSK_CHUNK;
    if (!q->area) {
        void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return -errno;
        q->area = m;
    }
    const struct xsk_umem_config uc = {
        .fill_size = nf, /* room for every chunk: giving back never waits */
        .comp_size = XSK_RING_CONS__DEFAULT_NUM_DESCS,
        .frame_size = RG_XSK_CHUNK,
        .frame_headroom = 0,
        .flags = 0,
    };
    int rc = xsk_umem__create(&q->umem, q->area, size, &q->fill, &q->comp, &uc);
    if (rc) {
        q->umem = NULL;
        return rc;
    }
    const struct xsk_socket_config sc = {
        .rx_size = nf, /* room for every chunk too: the ring is full only when the UMEM is */
        .tx_size = 0,
        .libxdp_flags = p->map_fd >= 0 ? XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD : 0,
        .xdp_flags = xdp_flags,
        .bind_flags = XDP_USE_NEED_WAKEUP,
    };
    rc = xsk_socket__create(&q->xsk, ifname, q->queue, q->umem, &q->rx, NULL, &sc);
    if (rc) {
        q->xsk = NULL;
        xsk_umem__delete(q->umem);
        q->umem = NULL;
        return rc;
    }
    uint32_t idx = 0;
    if (xsk_ring_prod__reserve(&q->fill, nf, &idx) != nf) return -ENOBUFS;
    for (uint32_t i = 0; i < nf; i++)
        *xsk_ring_prod__fill_addr(&q->fill, idx + i) = (uint64_t)i * RG_XSK_CHUNK;
    xsk_ring_prod__submit(&q->fill, nf);
    if (p->map_fd >= 0) {
        rc = xsk_socket__update_xskmap(q->xsk, p->map_fd);
        if (rc) return rc;
    }
    return 0;
}

/* Every socket with one mode: 0 or the first failure's negative errno (the sockets opened
 * closed again). */
static int open_all(xsk_src *p, const char *ifname, unsigned xdp_flags)
{
    for (unsigned i = 0; i < p->nq; i++) {
        int rc = open_q(p, &p->q[i], ifname, xdp_flags);
        if (rc) {
            for (unsigned k = 0; k <= i; k++) {
                xsk_q *q = &p->q[k];
                if (q->xsk) xsk_socket__delete(q->xsk);
                if (q->umem) xsk_umem__delete(q->umem);
                q->xsk = NULL;
                q->umem = NULL;
            }
            return rc;
        }
    }
    return 0;
}

/* libbpf's and libxdp's own messages (a bpffs missing, libxdp falling back to one program
 * without its dispatcher, ELF sections skipped): not errors; ours say what failed */
static int quiet_bpf(enum libbpf_print_level l, const char *fmt, va_list ap)
{
    (void)l, (void)fmt, (void)ap;
    return 0;
}

static int quiet_xdp(enum libxdp_print_level l, const char *fmt, va_list ap)
{
    (void)l, (void)fmt, (void)ap;
    return 0;
}

static rg_source *xsk_open(const rg_source_cfg *cfg, char *err, size_t errlen)
{
    libbpf_set_print(quiet_bpf);
    libxdp_set_print(quiet_xdp);
    xsk_src *p = calloc(1, sizeof *p);
    if (!p) {
        if (err && errlen) snprintf(err, errlen, "afxdp: out of memory");
        return NULL;
    }
    p->base.ops = &rg_source_afxdp;
    p->map_fd = -1;
    p->stop = cfg->stop;
    p->snaplen = cfg->snaplen;
    p->nq = cfg->queues > 1 ? cfg->queues : 1;
    const char *ifname = cfg->name;
    if (!ifname || !*ifname) {
        snprintf(p->err, sizeof p->err, "afxdp: no interface named (--iface)");
        return xsk_fail(p, err, errlen);
    }
    if (cfg->filter && *cfg->filter) {
        snprintf(p->err, sizeof p->err,
                 "afxdp: no BPF filter (--filter): filter in the XDP program "
                 "(rubikgen build --xdp --rules), or read with --io packet");
        return xsk_fail(p, err, errlen);
    }
    if (p->nq > RG_XSK_MAX_Q) {
        snprintf(p->err, sizeof p->err, "afxdp: at most %d sockets (--workers)", RG_XSK_MAX_Q);
        return xsk_fail(p, err, errlen);
    }
    const unsigned first = (unsigned)strtoul(rg_source_opt_get(cfg, "queue", "0"), NULL, 10);
    int ifindex = (int)if_nametoindex(ifname);
    if (!ifindex) {
        snprintf(p->err, sizeof p->err, "afxdp: cannot capture on %s: %s", ifname,
                 errno == ENODEV || errno == ENXIO ? "no such interface" : strerror(errno));
        return xsk_fail(p, err, errlen);
    }
    /* the queues there are: a socket on a queue the interface lacks fails with EINVAL */
    char path[128];
    unsigned have = 0;
    for (; have < RG_XSK_QUEUES_MAX; have++) {
        snprintf(path, sizeof path, "/sys/class/net/%s/queues/rx-%u", ifname, have);
        if (access(path, F_OK)) break;
    }
    p->ifqueues = have;
    if (have && first + p->nq > have) {
        if (p->nq > 1)
            snprintf(p->err, sizeof p->err,
                     "afxdp: %s has %u RX queue%s: queues %u to %u (--queue %u, --workers %u) "
                     "are not all there",
                     ifname, have, have == 1 ? "" : "s", first, first + p->nq - 1, first, p->nq);
        else
            snprintf(p->err, sizeof p->err, "afxdp: %s has %u RX queue%s: no queue %u", ifname,
                     have, have == 1 ? "" : "s", first);
        return xsk_fail(p, err, errlen);
    }
    const unsigned frames =
        (unsigned)strtoul(rg_source_opt_get(cfg, "frames", RG_XSK_FRAMES), NULL, 10);
    for (unsigned i = 0; i < p->nq; i++) {
        p->q[i].queue = first + i;
        p->q[i].nchunks = frames;
    }
    const char *want = cfg->xdp_mode ? cfg->xdp_mode : "auto";
    unsigned attached = 0;
    p->map_fd = attached_xsks(ifindex, &attached);
    uint32_t had_prog = 0;
    if (bpf_xdp_query_id(ifindex, 0, &had_prog)) had_prog = 0;
    /* native XDP, else generic (skb); bound without XDP_COPY or XDP_ZEROCOPY the kernel takes
     * zero-copy where the driver has it and copies otherwise (XDP_OPTIONS says which) */
    static const struct {
        unsigned xdp;
        const char *name;
    } modes[] = {
        {XDP_FLAGS_DRV_MODE, "native XDP"},
        {XDP_FLAGS_SKB_MODE, "generic (skb) XDP"},
    };
    int rc = -EINVAL, tried = 0;
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        const int skb = modes[m].xdp == XDP_FLAGS_SKB_MODE;
        if ((!strcmp(want, "native") && skb) || (!strcmp(want, "generic") && !skb)) continue;
        if (p->map_fd >= 0 && modes[m].xdp != attached) continue; /* the program's own mode */
        /* a socket of the attempt before is released by the kernel a little later: its
         * queue is busy until then (up to a second) */
        for (int wait = 0; wait < 50; wait++) {
            rc = open_all(p, ifname, modes[m].xdp);
            if (rc != -EBUSY || !tried) break;
            usleep(20000);
        }
        tried = 1;
        if (!rc) {
            struct xdp_options xo = {0};
            socklen_t len = sizeof xo;
            const int zc =
                !getsockopt(xsk_socket__fd(p->q[0].xsk), SOL_XDP, XDP_OPTIONS, &xo, &len) &&
                (xo.flags & XDP_OPTIONS_ZEROCOPY);
            snprintf(p->mode, sizeof p->mode, "%s, %s, %s", zc ? "zero-copy" : "copy mode",
                     modes[m].name,
                     p->map_fd >= 0 ? "the stack's XDP program (rg_xsks)" : "libxdp's XDP program");
            break;
        }
        if (p->map_fd < 0 && !had_prog) detach_leftover(ifindex);
        if (rc == -EPERM || rc == -EACCES) break; /* no other mode will do */
    }
    if (rc) {
        const int e = -rc;
        snprintf(p->err, sizeof p->err, "afxdp: cannot capture on %s queue %u: %s%s%s", ifname,
                 first, tried ? strerror(e) : "--xdp-mode does not match the attached program",
                 e == EPERM || e == EACCES ? " (AF_XDP needs root, or CAP_NET_ADMIN, CAP_BPF "
                                             "and CAP_NET_RAW)"
                 : e == EBUSY ? " (another AF_XDP socket or XDP program holds the queue)"
                              : "",
                 p->map_fd < 0 && e != EPERM && e != EACCES
                     ? " (an XDP program without an rg_xsks map may be attached: "
                       "ip link set dev IF xdp off)"
                     : "");
        return xsk_fail(p, err, errlen);
    }
    if (rg_link_info(DLT_EN10MB, &p->li) != RG_OK) {
        snprintf(p->err, sizeof p->err, "afxdp: no Ethernet link type");
        return xsk_fail(p, err, errlen);
    }
    return &p->base;
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The last burst's chunks back to the fill ring, then up to max frames off the RX ring. */
static int take(xsk_src *p, xsk_q *q, rg_frame *out, unsigned max)
{
    if (q->nheld) {
        uint32_t idx = 0;
        /* the fill ring holds every chunk: this reservation always succeeds */
        if (xsk_ring_prod__reserve(&q->fill, q->nheld, &idx) != q->nheld) {
            snprintf(p->err, sizeof p->err, "afxdp: the fill ring is full (a chunk lost)");
            p->failed = 1;
            return 0;
        }
        for (unsigned i = 0; i < q->nheld; i++)
            *xsk_ring_prod__fill_addr(&q->fill, idx + i) = q->held[i];
        xsk_ring_prod__submit(&q->fill, q->nheld);
        q->nheld = 0;
    }
    uint32_t idx = 0;
    unsigned n = xsk_ring_cons__peek(&q->rx, max, &idx);
    if (!n) return 0;
    const uint64_t ts = now_ns();
    for (unsigned i = 0; i < n; i++) {
        const struct xdp_desc *d = xsk_ring_cons__rx_desc(&q->rx, idx + i);
        rg_frame *f = &out[i];
        f->data = xsk_umem__get_data(q->area, d->addr);
        f->len = d->len;
        f->caplen = p->snaplen && d->len > p->snaplen ? p->snaplen : d->len;
        f->ts_ns = ts;
        f->dlt = p->li.dlt;
        q->held[i] = d->addr & ~(uint64_t)(RG_XSK_CHUNK - 1);
        q->frames++;
        q->bytes += f->caplen;
    }
    q->nheld = n;
    xsk_ring_cons__release(&q->rx, n);
    return (int)n;
}

static int xsk_next_burst_q(rg_source *s, unsigned qi, rg_frame *out, unsigned max)
{
    xsk_src *p = (xsk_src *)s;
    if (p->stop && *p->stop) return RG_SRC_END;
    if (p->failed) return RG_SRC_ERROR;
    if (qi >= p->nq) return RG_SRC_END;
    xsk_q *q = &p->q[qi];
    if (max > RG_BURST_MAX) max = RG_BURST_MAX;
    int n = take(p, q, out, max);
    if (n == 0 && !p->failed) {
        /* poll also wakes the kernel up to fill the RX ring (XDP_USE_NEED_WAKEUP) */
        if (rg_source_poll(xsk_socket__fd(q->xsk), RG_XSK_POLL_MS, "afxdp", p->err, sizeof p->err) <
            0) {
            p->failed = 1;
            return RG_SRC_ERROR;
        }
        if (p->stop && *p->stop) return RG_SRC_END;
        n = take(p, q, out, max);
    }
    return n ? n : p->failed ? RG_SRC_ERROR : 0;
}

static int xsk_next_burst(rg_source *s, rg_frame *out, unsigned max)
{
    return xsk_next_burst_q(s, 0, out, max);
}

static int xsk_queues(const rg_source *s)
{
    return ((const xsk_src *)s)->nq > 1 ? RG_SRCQ_HW : RG_SRCQ_ONE;
}

static int xsk_launch(rg_source *s, unsigned i, int (*fn)(void *), void *arg, char *err,
                      size_t errlen)
{
    xsk_src *p = (xsk_src *)s;
    if (i >= p->nq) {
        snprintf(err, errlen, "afxdp: no socket for worker %u", i);
        return -1;
    }
    return rg_source_thread_start(&p->q[i].th, &p->q[i].started, fn, arg, "afxdp", i, err, errlen);
}

static void xsk_join(rg_source *s, unsigned i)
{
    xsk_src *p = (xsk_src *)s;
    if (i < p->nq) rg_source_thread_join(&p->q[i].th, &p->q[i].started);
}

static uint64_t xsk_queue_frames(const rg_source *s, unsigned q)
{
    const xsk_src *p = (const xsk_src *)s;
    return q < p->nq ? p->q[q].frames : 0;
}

static const rg_linkinfo *xsk_link(const rg_source *s)
{
    return &((const xsk_src *)s)->li;
}

/* The kernel's counters of every socket (cumulative: never reset). */
static void kernel_stats(const xsk_src *p, struct xdp_statistics *sum)
{
    memset(sum, 0, sizeof *sum);
    for (unsigned i = 0; i < p->nq; i++) {
        struct xdp_statistics st;
        socklen_t len = sizeof st;
        if (!p->q[i].xsk ||
            getsockopt(xsk_socket__fd(p->q[i].xsk), SOL_XDP, XDP_STATISTICS, &st, &len))
            continue;
        sum->rx_dropped += st.rx_dropped;
        sum->rx_ring_full += st.rx_ring_full;
        sum->rx_fill_ring_empty_descs += st.rx_fill_ring_empty_descs;
        sum->rx_invalid_descs += st.rx_invalid_descs;
    }
}

static void xsk_stats(const rg_source *s, rg_source_stats *st)
{
    const xsk_src *p = (const xsk_src *)s;
    memset(st, 0, sizeof *st);
    struct xdp_statistics k;
    kernel_stats(p, &k);
    /* rx_dropped: no chunk to copy into, or a frame larger than a chunk; rx_ring_full: the
     * RX ring had no room */
    st->dropped = k.rx_dropped + k.rx_ring_full;
    for (unsigned i = 0; i < p->nq; i++) {
        st->frames += p->q[i].frames;
        st->bytes += p->q[i].bytes;
    }
}

static void xsk_detail(const rg_source *s, char *buf, size_t n)
{
    const xsk_src *p = (const xsk_src *)s;
    struct xdp_statistics k;
    kernel_stats(p, &k);
    char qs[32];
    if (p->nq > 1)
        snprintf(qs, sizeof qs, "queues %u-%u", p->q[0].queue, p->q[p->nq - 1].queue);
    else
        snprintf(qs, sizeof qs, "queue %u", p->q[0].queue);
    if (p->ifqueues > p->nq) /* the other queues' frames go up the kernel's stack */
        snprintf(qs + strlen(qs), sizeof qs - strlen(qs), " of %u", p->ifqueues);
    snprintf(buf, n, "%s, %s; the kernel's: %llu dropped, %llu RX ring full, %llu fill ring empty",
             p->mode, qs, (unsigned long long)k.rx_dropped, (unsigned long long)k.rx_ring_full,
             (unsigned long long)k.rx_fill_ring_empty_descs);
}

static const char *xsk_error(const rg_source *s)
{
    const xsk_src *p = (const xsk_src *)s;
    return p->err[0] ? p->err : "no error";
}

static const rg_source_opt xsk_opts[] = {
    {"iface", "IF", "the interface (the same as CAPTURE)", RG_SOPT_STR, 0, 0,
     offsetof(rg_source_cfg, name), RG_SOPT_NAME},
    {"snaplen", "N", "bytes captured per frame (default: whole frames)", RG_SOPT_NUM, 1, INT32_MAX,
     offsetof(rg_source_cfg, snaplen), 0},
    {"queue", "Q",
     "the first RX queue read (default 0); --workers N:\n"
     "queues Q to Q+N-1, a socket and a worker each",
     RG_SOPT_NUM, 0, 4095, RG_SOPT_KV_ONLY, 0},
    {"frames", "N",
     "each socket's UMEM in 4 KB chunks, and its fill and RX\n"
     "rings' descriptors: a power of 2 (default 4096: 16 MB)",
     RG_SOPT_NUM, 64, 1u << 20, RG_SOPT_KV_ONLY, 0},
    {NULL, NULL, NULL, 0, 0, 0, 0, 0},
};

static const char *xsk_check(const rg_source_cfg *cfg)
{
    static _Thread_local char why[160];
    const char *fs = rg_source_opt_get(cfg, "frames", RG_XSK_FRAMES);
    char *fend;
    unsigned long f = strtoul(fs, &fend, 10);
    if (!*fs || *fend || f < 64 || f > (1u << 20) || (f & (f - 1))) {
        snprintf(why, sizeof why, "--frames %.64s: a power of 2, 64 to 1048576", fs);
        return why;
    }
    const char *qs = rg_source_opt_get(cfg, "queue", "0");
    char *end;
    unsigned long q = strtoul(qs, &end, 10);
    if (!*qs || *end || q > 4095) {
        snprintf(why, sizeof why, "--queue %.64s: a queue number, 0 to 4095", qs);
        return why;
    }
    return NULL;
}

const rg_source_ops rg_source_afxdp = {
    .name = "afxdp",
    .help = "an interface through AF_XDP sockets, one per queue and worker (--iface IF)",
    .caps = RG_SRC_CAP_QUEUES | RG_SRC_CAP_ARRIVAL_TS,
    .opts = xsk_opts,
    .name_what = "the interface (--iface IF)",
    .cores_what = "each worker reads its socket on a thread of the afxdp source's",
    .check = xsk_check,
    .open = xsk_open,
    .next_burst = xsk_next_burst,
    .link = xsk_link,
    .stats = xsk_stats,
    .error = xsk_error,
    .close = xsk_close,
    .queues = xsk_queues,
    .next_burst_q = xsk_next_burst_q,
    .launch = xsk_launch,
    .join = xsk_join,
    .queue_frames = xsk_queue_frames,
    .detail = xsk_detail,
};
