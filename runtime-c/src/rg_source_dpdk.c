/* rg_source_dpdk.c - the "dpdk" packet source: RX bursts from DPDK ethdev
 * ports (see rg_source.h).  Compiled only when pkg-config finds libdpdk
 * (the Makefile's RG_HAVE_DPDK), into its own archive, so builds without
 * DPDK neither need nor link it.
 *
 * cfg->argc/argv are the EAL arguments (hugepages, -l cores, --vdev ... or
 * PCI devices); cfg->name selects ports: NULL, "" or "all" for every port,
 * else a comma-separated list of port ids.  One RX queue per port, polled in
 * turn.  A burst's frames point into the mbufs' data (no copy); the mbufs are
 * freed at the next next_burst or close.  A frame in several segments (a
 * jumbo frame in small mbufs) is the one exception: it is copied into a
 * linear buffer.  Timestamps come from the TSC, calibrated against the wall
 * clock at open (the NIC gives none on most ports).
 *
 * Workers (cfg->queues = N > 1): where every port can do RSS over N queues
 * (dev_info.flow_type_rss_offloads covers IP), each port gets N RX queues
 * hashed on the IP addresses (RTE_ETH_RSS_IP: every packet between two
 * hosts, fragments included, on one queue, as rg_rss's RG_RSS_L3) with the
 * symmetric key, and worker q polls queue q of every port.  Elsewhere
 * (virtual devices: net_pcap, net_ring, net_null have no RSS) one RX queue
 * per port is read by pump() on the main lcore, which hashes each frame
 * with rg_rss and hands the mbuf (no copy) to worker q through an SP/SC
 * rte_ring; the frame's time is taken there, in the mbuf's RX timestamp
 * field, so all workers see the one clock of the input.
 *
 * Inline mode (cfg->inline_mode, one queue): the ports pair up in list order
 * (the 1st with the 2nd, the 3rd with the 4th...), each with one TX queue,
 * and forward sends a burst's mbufs out of the peer of the port they came
 * from with rte_eth_tx_burst: the same mbufs, no copy (edits made in place go
 * out; a multi-segment frame goes out as its original segments).  Frames the
 * verdict drops are freed. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include "rg/rg_rss.h"
#include "rg/rg_source.h"

#define RG_DPDK_MAX_PORTS 64
#define RG_DPDK_RX_DESC   1024
#define RG_DPDK_POOL      8191 /* mbufs: 2^n - 1 is the mempool's best size */
#define RG_DPDK_CACHE     256
#define RG_DPDK_RING      4096 /* mbufs per worker ring (software distribution) */
#define RG_DPDK_MAX_Q     64
#define RG_DPDK_TX_DESC   1024
#define RG_DPDK_TX_TRIES  64 /* rte_eth_tx_burst calls for one burst before giving up */

/* One queue: what one worker reads (queue 0 alone without workers). */
typedef struct dpdk_q {
    /* the current burst's mbufs, freed on the next call */
    struct rte_mbuf *held[RG_BURST];
    unsigned nheld, next_port;
    /* linear copies of multi-segment frames, one per burst slot */
    uint8_t *lin[RG_BURST];
    uint32_t lin_cap[RG_BURST];
    struct rte_ring *ring; /* RG_SRCQ_SW: the distributor's hand-off */
    uint64_t frames, bytes, dropped;
    uint64_t handed; /* RG_SRCQ_SW: frames the distributor gave it */
    /* inline: the port index (in ports[]) of the held burst, and each frame's mbuf */
    unsigned held_port;
    uint8_t frame_mbuf[RG_BURST];
    unsigned nframes;
    uint64_t tx_frames, tx_failed, tx_withheld;
    unsigned lcore;
    int launched;
} __rte_cache_aligned dpdk_q; /* workers write their own: no false sharing */

typedef struct dpdk_src {
    rg_source base;
    uint16_t ports[RG_DPDK_MAX_PORTS];
    unsigned nports, next_port;
    int eal_up;
    struct rte_mempool *pool;
    rg_linkinfo li;
    volatile sig_atomic_t *stop;
    dpdk_q *q;
    unsigned nq; /* queues (workers) */
    int mode;    /* RG_SRCQ_ONE, _HW, _SW */
    rg_rss_dist dist;
    int ts_off; /* RG_SRCQ_SW: the mbuf RX timestamp field */
    int inline_mode;
    /* TSC -> wall clock */
    uint64_t tsc0, hz, wall0_ns;
    char err[256];
} dpdk_src;

/* rte_eal_init runs once per process: a second open fails clearly. */
static int eal_initialised;

static void dpdk_free_held(dpdk_q *q)
{
    if (q->nheld) rte_pktmbuf_free_bulk(q->held, q->nheld);
    q->nheld = 0;
}

static void dpdk_close(rg_source *s)
{
    dpdk_src *d = (dpdk_src *)s;
    if (!d) return;
    for (unsigned k = 0; d->q && k < d->nq; k++) {
        dpdk_q *q = &d->q[k];
        dpdk_free_held(q);
        if (q->ring) { /* what the workers did not take */
            void *m;
            while (rte_ring_sc_dequeue(q->ring, &m) == 0)
                rte_pktmbuf_free(m);
            rte_ring_free(q->ring);
        }
        for (unsigned i = 0; i < RG_BURST; i++)
            free(q->lin[i]);
    }
    for (unsigned i = 0; i < d->nports; i++) {
        rte_eth_dev_stop(d->ports[i]);
        rte_eth_dev_close(d->ports[i]);
    }
    if (d->pool) rte_mempool_free(d->pool);
    free(d->q);
    if (d->eal_up) rte_eal_cleanup();
    free(d);
}

static rg_source *dpdk_fail(dpdk_src *d, char *err, size_t errlen)
{
    if (err && errlen) snprintf(err, errlen, "%s", d->err);
    dpdk_close(&d->base);
    return NULL;
}

/* cfg->name: the ports to read. */
static int parse_ports(dpdk_src *d, const char *spec)
{
    if (!spec || !*spec || !strcmp(spec, "all")) {
        uint16_t pid;
        RTE_ETH_FOREACH_DEV(pid)
        {
            if (d->nports == RG_DPDK_MAX_PORTS) break;
            d->ports[d->nports++] = pid;
        }
        if (!d->nports) {
            snprintf(d->err, sizeof d->err,
                     "dpdk: no ports (no NIC bound to a DPDK driver and no --vdev in the EAL "
                     "arguments)");
            return -1;
        }
        return 0;
    }
    const char *p = spec;
    while (*p) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || errno || v >= RTE_MAX_ETHPORTS || (*end && *end != ',')) {
            snprintf(d->err, sizeof d->err, "dpdk: bad port list \"%s\" (want e.g. 0,1 or all)",
                     spec);
            return -1;
        }
        if (!rte_eth_dev_is_valid_port((uint16_t)v)) {
            snprintf(d->err, sizeof d->err, "dpdk: port %lu does not exist (%u ports available)", v,
                     (unsigned)rte_eth_dev_count_avail());
            return -1;
        }
        if (d->nports == RG_DPDK_MAX_PORTS) break;
        d->ports[d->nports++] = (uint16_t)v;
        p = *end ? end + 1 : end;
    }
    return 0;
}

/* Can the port spread frames over n RX queues by an IP-address hash? */
static int port_has_rss(uint16_t port, unsigned n)
{
    struct rte_eth_dev_info di;
    if (rte_eth_dev_info_get(port, &di) != 0) return 0;
    return (di.flow_type_rss_offloads & RTE_ETH_RSS_IP) && di.max_rx_queues >= n;
}

static int port_start(dpdk_src *d, uint16_t port, int promisc)
{
    struct rte_eth_conf conf;
    memset(&conf, 0, sizeof conf);
    unsigned nrxq = d->mode == RG_SRCQ_HW ? d->nq : 1;
    uint8_t key[128];
    if (d->mode == RG_SRCQ_HW) {
        /* the symmetric key at the port's key length (40 bytes, 52 on some NICs): 0x6d5a
         * repeats every 16 bits, so the hash of (a, b) is that of (b, a) */
        struct rte_eth_dev_info di;
        rte_eth_dev_info_get(port, &di);
        unsigned klen = di.hash_key_size ? di.hash_key_size : RG_RSS_KEY_LEN;
        if (klen > sizeof key) klen = sizeof key;
        for (unsigned i = 0; i < klen; i++)
            key[i] = i % 2 ? 0x5a : 0x6d;
        conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
        conf.rx_adv_conf.rss_conf.rss_key = key;
        conf.rx_adv_conf.rss_conf.rss_key_len = (uint8_t)klen;
        /* addresses only: as rg_rss's RG_RSS_L3 (fragments with their connection) */
        conf.rx_adv_conf.rss_conf.rss_hf = RTE_ETH_RSS_IP & di.flow_type_rss_offloads;
    }
    /* inline: a TX queue per worker, so that each sends its own frames on (no lock) */
    const uint16_t ntxq = d->inline_mode ? (uint16_t)d->nq : 0;
    int rc = rte_eth_dev_configure(port, (uint16_t)nrxq, ntxq, &conf);
    if (rc < 0) {
        snprintf(d->err, sizeof d->err, "dpdk: port %u: configure: %s", port, rte_strerror(-rc));
        return -1;
    }
    uint16_t nrx = RG_DPDK_RX_DESC, ntx = ntxq ? RG_DPDK_TX_DESC : 0;
    rte_eth_dev_adjust_nb_rx_tx_desc(port, &nrx, &ntx);
    int socket = rte_eth_dev_socket_id(port);
    for (unsigned qi = 0; qi < nrxq; qi++) {
        rc = rte_eth_rx_queue_setup(port, (uint16_t)qi, nrx, socket < 0 ? 0 : (unsigned)socket,
                                    NULL, d->pool);
        if (rc < 0) {
            snprintf(d->err, sizeof d->err, "dpdk: port %u: RX queue %u: %s", port, qi,
                     rte_strerror(-rc));
            return -1;
        }
    }
    for (uint16_t qi = 0; qi < ntxq; qi++) {
        rc = rte_eth_tx_queue_setup(port, qi, ntx, socket < 0 ? 0 : (unsigned)socket, NULL);
        if (rc < 0) {
            snprintf(d->err, sizeof d->err, "dpdk: port %u: TX queue %u: %s", port, qi,
                     rte_strerror(-rc));
            return -1;
        }
    }
    rc = rte_eth_dev_start(port);
    if (rc < 0) {
        snprintf(d->err, sizeof d->err, "dpdk: port %u: start: %s", port, rte_strerror(-rc));
        return -1;
    }
    if (promisc) rte_eth_promiscuous_enable(port); /* -ENOTSUP on some vdevs: harmless */
    return 0;
}

static int sw_init(dpdk_src *d);

/* The queues: one, or one per worker, fed by RSS or by pump(). */
static int queues_init(dpdk_src *d, unsigned n)
{
    d->nq = n > 1 ? n : 1;
    if (d->nq > RG_DPDK_MAX_Q) {
        snprintf(d->err, sizeof d->err, "dpdk: at most %d queues (workers)", RG_DPDK_MAX_Q);
        return -1;
    }
    d->q = aligned_alloc(RTE_CACHE_LINE_SIZE, d->nq * sizeof *d->q);
    if (!d->q) {
        snprintf(d->err, sizeof d->err, "dpdk: out of memory");
        return -1;
    }
    memset(d->q, 0, d->nq * sizeof *d->q);
    if (d->nq == 1) return 0;
    d->mode = RG_SRCQ_HW;
    for (unsigned i = 0; i < d->nports; i++)
        if (!port_has_rss(d->ports[i], d->nq)) d->mode = RG_SRCQ_SW;
    return d->mode == RG_SRCQ_HW ? 0 : sw_init(d);
}

/* Software distribution: the hash, the mbufs' timestamp field, one ring per worker. */
static int sw_init(dpdk_src *d)
{
    d->mode = RG_SRCQ_SW;
    rg_rss_dist_init(&d->dist, d->nq, RG_RSS_L3);
    if (rte_mbuf_dyn_rx_timestamp_register(&d->ts_off, NULL) < 0) {
        snprintf(d->err, sizeof d->err, "dpdk: mbuf timestamp field: %s", rte_strerror(rte_errno));
        return -1;
    }
    for (unsigned k = 0; k < d->nq; k++) {
        char name[RTE_RING_NAMESIZE];
        snprintf(name, sizeof name, "rg_w%u", k);
        d->q[k].ring = rte_ring_create(name, RG_DPDK_RING, (int)rte_socket_id(),
                                       RING_F_SP_ENQ | RING_F_SC_DEQ);
        if (!d->q[k].ring) {
            snprintf(d->err, sizeof d->err, "dpdk: worker ring: %s", rte_strerror(rte_errno));
            return -1;
        }
    }
    return 0;
}

static uint64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static rg_source *dpdk_open(const rg_source_cfg *cfg, char *err, size_t errlen)
{
    dpdk_src *d = calloc(1, sizeof *d);
    if (!d) {
        if (err && errlen) snprintf(err, errlen, "dpdk: out of memory");
        return NULL;
    }
    d->base.ops = &rg_source_dpdk;
    d->stop = cfg->stop;
    if (eal_initialised) {
        snprintf(d->err, sizeof d->err, "dpdk: the EAL can be initialised once per process");
        return dpdk_fail(d, err, errlen);
    }
    /* rte_eal_init wants argv[0] and may permute argv: a private copy */
    int argc = cfg->argc + 1;
    char **argv = calloc((size_t)argc + 1, sizeof *argv);
    if (!argv) {
        snprintf(d->err, sizeof d->err, "dpdk: out of memory");
        return dpdk_fail(d, err, errlen);
    }
    argv[0] = (char *)"rubikgen";
    for (int i = 0; i < cfg->argc; i++)
        argv[i + 1] = cfg->argv[i];
    eal_initialised = 1;
    int rc = rte_eal_init(argc, argv);
    free(argv);
    if (rc < 0) {
        snprintf(d->err, sizeof d->err,
                 "dpdk: EAL initialisation failed: %s (EAL arguments go after --; without "
                 "hugepages use --no-huge -m 256, without a NIC --no-pci --vdev ...)",
                 rte_strerror(rte_errno));
        return dpdk_fail(d, err, errlen);
    }
    d->eal_up = 1;
    if (parse_ports(d, cfg->name) < 0) return dpdk_fail(d, err, errlen);
    d->inline_mode = cfg->inline_mode;
    if (d->inline_mode && d->nports % 2) {
        snprintf(d->err, sizeof d->err,
                 "dpdk: --inline pairs the ports (0<->1, 2<->3...): %u ports is an odd number",
                 d->nports);
        return dpdk_fail(d, err, errlen);
    }
    if (queues_init(d, cfg->queues) < 0) return dpdk_fail(d, err, errlen);
    /* enough mbufs for every RX descriptor, every ring and every core's cache, under RSS or
     * (its fallback) software distribution */
    unsigned need = d->nports * d->nq * (RG_DPDK_RX_DESC + RG_BURST) +
                    (d->nq > 1 ? d->nq * RG_DPDK_RING : 0) +
                    (d->nq + 1) * (RG_DPDK_CACHE + RG_BURST) +
                    (d->inline_mode ? d->nports * RG_DPDK_TX_DESC : 0);
    unsigned pool = RG_DPDK_POOL;
    while (pool < need)
        pool = pool * 2 + 1;
    d->pool = rte_pktmbuf_pool_create("rg_rx", pool, RG_DPDK_CACHE, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                      (int)rte_socket_id());
    if (!d->pool) {
        snprintf(d->err, sizeof d->err, "dpdk: mbuf pool: %s", rte_strerror(rte_errno));
        return dpdk_fail(d, err, errlen);
    }
    for (unsigned i = 0; i < d->nports; i++)
        if (port_start(d, d->ports[i], cfg->promisc) < 0) {
            if (d->mode == RG_SRCQ_HW) {
                /* a port that reports RSS but refuses N RX queues alone (net_tap wants as
                 * many TX queues): every port back to one queue, distributed in software */
                for (unsigned k = 0; k < i; k++)
                    rte_eth_dev_stop(d->ports[k]);
                if (sw_init(d) < 0) return dpdk_fail(d, err, errlen);
                d->err[0] = 0;
                i = (unsigned)-1; /* start again from the first port */
                continue;
            }
            d->nports = i; /* close stops only the ports started */
            return dpdk_fail(d, err, errlen);
        }
    rg_link_info(1 /* DLT_EN10MB */, &d->li);
    d->hz = rte_get_tsc_hz();
    d->wall0_ns = wall_ns();
    d->tsc0 = rte_get_tsc_cycles();
    (void)cfg->snaplen; /* whole frames: the mbuf holds them */
    return &d->base;
}

/* A multi-segment frame as one linear buffer in slot i. */
static const uint8_t *linearise(dpdk_q *q, unsigned i, struct rte_mbuf *m)
{
    uint32_t n = rte_pktmbuf_pkt_len(m);
    if (q->lin_cap[i] < n) {
        uint8_t *b = realloc(q->lin[i], n);
        if (!b) return NULL;
        q->lin[i] = b;
        q->lin_cap[i] = n;
    }
    const void *p = rte_pktmbuf_read(m, 0, n, q->lin[i]);
    return p;
}

static uint64_t now_ns(const dpdk_src *d)
{
    uint64_t now = rte_get_tsc_cycles();
    return d->wall0_ns + (uint64_t)((unsigned __int128)(now - d->tsc0) * 1000000000u / d->hz);
}

/* q->held[0..n) as frames; their time: ts, or (ts_off >= 0) the mbuf's own. */
static int to_frames(const dpdk_src *d, dpdk_q *q, rg_frame *out, unsigned n, uint64_t ts,
                     int ts_off)
{
    unsigned k = 0;
    for (unsigned i = 0; i < n; i++) {
        struct rte_mbuf *m = q->held[i];
        const uint8_t *data = rte_pktmbuf_mtod(m, const uint8_t *);
        if (m->nb_segs > 1) data = linearise(q, k, m);
        if (!data) continue; /* out of memory for a jumbo frame: it is dropped, counted */
        q->frame_mbuf[k] = (uint8_t)i;
        rg_frame *f = &out[k++];
        f->data = data;
        f->caplen = m->nb_segs > 1 ? rte_pktmbuf_pkt_len(m) : rte_pktmbuf_data_len(m);
        f->len = rte_pktmbuf_pkt_len(m);
        f->ts_ns = ts_off >= 0 ? *RTE_MBUF_DYNFIELD(m, ts_off, uint64_t *) : ts;
        f->dlt = d->li.dlt;
        q->frames++;
        q->bytes += f->caplen;
    }
    q->dropped += n - k;
    q->nframes = k;
    return (int)k;
}

/* Up to max mbufs from RX queue `rxq` of every port in turn, starting after the last one
 * served (fairness). */
static uint16_t rx_ports(dpdk_src *d, unsigned *next_port, uint16_t rxq, struct rte_mbuf **m,
                         unsigned max, unsigned *from)
{
    uint16_t n = 0;
    for (unsigned k = 0; k < d->nports && !n; k++) {
        unsigned pi = (*next_port + k) % d->nports;
        n = rte_eth_rx_burst(d->ports[pi], rxq, m, (uint16_t)max);
        if (n) {
            *next_port = (pi + 1) % d->nports;
            if (from) *from = pi;
        }
    }
    return n;
}

static int dpdk_next_burst_q(rg_source *s, unsigned qi, rg_frame *out, unsigned max)
{
    dpdk_src *d = (dpdk_src *)s;
    if (qi >= d->nq) return RG_SRC_ERROR;
    dpdk_q *q = &d->q[qi];
    dpdk_free_held(q);
    if (max > RG_BURST) max = RG_BURST;
    unsigned n;
    if (d->mode == RG_SRCQ_SW) {
        /* the ring is drained even after a stop: the distributor stopped first */
        n = rte_ring_sc_dequeue_burst(q->ring, (void **)q->held, max, NULL);
        q->nheld = n;
        return n ? to_frames(d, q, out, n, 0, d->ts_off) : 0;
    }
    if (d->stop && *d->stop) return RG_SRC_END;
    q->nframes = 0;
    n = rx_ports(d, &q->next_port, (uint16_t)qi, q->held, max, &q->held_port);
    q->nheld = n;
    return n ? to_frames(d, q, out, n, now_ns(d), -1) : 0;
}

static int dpdk_next_burst(rg_source *s, rg_frame *out, unsigned max)
{
    dpdk_src *d = (dpdk_src *)s;
    if (d->nq > 1) {
        snprintf(d->err, sizeof d->err, "dpdk: opened with %u queues: read them with next_burst_q",
                 d->nq);
        return RG_SRC_ERROR;
    }
    return dpdk_next_burst_q(s, 0, out, max);
}

static int dpdk_pump(rg_source *s, unsigned max)
{
    dpdk_src *d = (dpdk_src *)s;
    if (d->mode != RG_SRCQ_SW) return 0; /* the NIC distributes */
    if (d->stop && *d->stop) return RG_SRC_END;
    if (max > RG_BURST) max = RG_BURST;
    struct rte_mbuf *m[RG_BURST];
    uint16_t n = rx_ports(d, &d->next_port, 0, m, max, NULL);
    if (!n) return 0;
    uint64_t ts = now_ns(d);
    for (uint16_t i = 0; i < n; i++) {
        *RTE_MBUF_DYNFIELD(m[i], d->ts_off, uint64_t *) = ts;
        /* the headers are in the first segment (what rg_rss reads of it suffices) */
        rg_frame f = {.data = rte_pktmbuf_mtod(m[i], const uint8_t *),
                      .caplen = rte_pktmbuf_data_len(m[i]),
                      .len = rte_pktmbuf_pkt_len(m[i]),
                      .ts_ns = ts,
                      .dlt = d->li.dlt};
        dpdk_q *q = &d->q[rg_rss_dist_worker(&d->dist, &f)];
        /* a full ring: wait for its worker (lossless; the NIC's queue absorbs or counts
         * drops meanwhile), unless stopped */
        while (rte_ring_sp_enqueue(q->ring, m[i]) != 0) {
            if (d->stop && *d->stop) {
                rte_pktmbuf_free_bulk(m + i, n - i);
                q->dropped += n - i;
                return RG_SRC_END;
            }
            rte_pause();
        }
        q->handed++;
    }
    return n;
}

/* The peer of port id `port` (ports pair in list order: 0<->1, 2<->3...). */
static uint16_t peer_of(const dpdk_src *d, uint16_t port)
{
    for (unsigned i = 0; i < d->nports; i++)
        if (d->ports[i] == port) return d->ports[i ^ 1u];
    return d->ports[1];
}

/* Inline mode: queue qi's last burst out of the peer ports on TX queue qi, except dropped
 * frames.  One queue or NIC RSS: a burst came from one port; the software distributor's
 * rings mix ports, so there each mbuf's own port decides (runs of one peer sent in order). */
static void dpdk_forward_q(rg_source *s, unsigned qi, const uint8_t *drop, unsigned n)
{
    dpdk_src *d = (dpdk_src *)s;
    if (qi >= d->nq) return;
    dpdk_q *q = &d->q[qi];
    if (!d->inline_mode || !q->nheld) return;
    if (n > q->nframes) n = q->nframes;
    /* the burst's mbufs in frame order: passed ones to tx[], the others freed (an mbuf no
     * frame refers to, a jumbo frame not linearised, was counted as dropped on RX) */
    struct rte_mbuf *tx[RG_BURST];
    uint16_t to[RG_BURST];
    uint16_t ntx = 0;
    uint8_t sent[RG_BURST] = {0};
    const uint16_t burst_peer = d->ports[q->held_port ^ 1u];
    for (unsigned k = 0; k < n; k++) {
        const unsigned i = q->frame_mbuf[k];
        sent[i] = 1;
        if (drop[k]) {
            q->tx_withheld++;
            rte_pktmbuf_free(q->held[i]);
        } else {
            to[ntx] = d->mode == RG_SRCQ_SW ? peer_of(d, q->held[i]->port) : burst_peer;
            tx[ntx++] = q->held[i];
        }
    }
    for (unsigned i = 0; i < q->nheld; i++)
        if (!sent[i]) rte_pktmbuf_free(q->held[i]);
    q->nheld = 0; /* handed over: dpdk_free_held must not free them again */
    for (uint16_t a = 0, b; a < ntx; a = b) {
        for (b = a; b < ntx && to[b] == to[a]; b++) {
        }
        const uint16_t cnt = (uint16_t)(b - a);
        uint16_t done = 0;
        for (int tries = 0; done < cnt && tries < RG_DPDK_TX_TRIES; tries++)
            done += rte_eth_tx_burst(to[a], (uint16_t)qi, tx + a + done, (uint16_t)(cnt - done));
        q->tx_frames += done;
        q->tx_failed += (uint64_t)(cnt - done);
        if (done < cnt) rte_pktmbuf_free_bulk(tx + a + done, (unsigned)(cnt - done));
    }
}

/* Inline mode, one queue. */
static void dpdk_forward(rg_source *s, const uint8_t *drop, unsigned n)
{
    dpdk_forward_q(s, 0, drop, n);
}

static int dpdk_queues(const rg_source *s)
{
    return ((const dpdk_src *)s)->mode;
}

static int dpdk_launch(rg_source *s, unsigned i, int (*fn)(void *), void *arg, char *err,
                       size_t errlen)
{
    dpdk_src *d = (dpdk_src *)s;
    unsigned k = 0, lc, nworkers = rte_lcore_count() - 1;
    RTE_LCORE_FOREACH_WORKER(lc)
    {
        if (k++ != i) continue;
        int rc = rte_eal_remote_launch(fn, arg, lc);
        if (rc == 0 && i < d->nq) {
            d->q[i].lcore = lc;
            d->q[i].launched = 1;
        }
        if (rc < 0) {
            snprintf(err, errlen, "dpdk: cannot start worker %u on lcore %u: %s", i, lc,
                     rte_strerror(-rc));
            return -1;
        }
        return 0;
    }
    snprintf(err, errlen,
             "dpdk: worker %u has no lcore: the EAL has %u worker lcores besides the main one; "
             "%u workers want %u lcores in all (e.g. -l 0-%u, or --lcores '(0-%u)@(0-1)' on two "
             "cores)",
             i, nworkers, d->nq, d->nq + 1, d->nq, d->nq);
    return -1;
}

static void dpdk_join(rg_source *s, unsigned i)
{
    dpdk_src *d = (dpdk_src *)s;
    if (i < d->nq && d->q[i].launched) rte_eal_wait_lcore(d->q[i].lcore);
}

static uint64_t dpdk_queue_frames(const rg_source *s, unsigned i)
{
    const dpdk_src *d = (const dpdk_src *)s;
    return i < d->nq ? d->q[i].frames : 0;
}

static const rg_linkinfo *dpdk_link(const rg_source *s)
{
    return &((const dpdk_src *)s)->li;
}

static void dpdk_stats(const rg_source *s, rg_source_stats *st)
{
    const dpdk_src *d = (const dpdk_src *)s;
    memset(st, 0, sizeof *st);
    for (unsigned k = 0; k < d->nq; k++) {
        st->frames += d->q[k].frames;
        st->bytes += d->q[k].bytes;
        st->dropped += d->q[k].dropped;
        st->tx_frames += d->q[k].tx_frames;
        st->tx_failed += d->q[k].tx_failed;
        st->tx_withheld += d->q[k].tx_withheld;
    }
    for (unsigned i = 0; i < d->nports; i++) {
        struct rte_eth_stats es;
        if (rte_eth_stats_get(d->ports[i], &es) == 0) st->dropped += es.imissed + es.rx_nombuf;
    }
}

static const char *dpdk_error(const rg_source *s)
{
    const dpdk_src *d = (const dpdk_src *)s;
    return d->err[0] ? d->err : "no error";
}

static const rg_source_opt dpdk_opts[] = {
    {"port", "LIST", "the ports, e.g. 0,1 (default all)", RG_SOPT_STR, 0, 0,
     offsetof(rg_source_cfg, name), RG_SOPT_NAME},
    {NULL, NULL, NULL, 0, 0, 0, 0, 0},
};

const rg_source_ops rg_source_dpdk = {
    .name = "dpdk",
    .help = "DPDK ports (--port LIST, EAL arguments after --; --inline: pairs 0<->1...)",
    .caps = RG_SRC_CAP_INLINE | RG_SRC_CAP_QUEUES | RG_SRC_CAP_ARRIVAL_TS | RG_SRC_CAP_ARGS,
    .opts = dpdk_opts,
    .default_name = "all",
    .cores_what = "DPDK workers run on the EAL's lcores (-l, --lcores)",
    .args_what = "DPDK's EAL arguments",
    .open = dpdk_open,
    .next_burst = dpdk_next_burst,
    .link = dpdk_link,
    .stats = dpdk_stats,
    .error = dpdk_error,
    .close = dpdk_close,
    .queues = dpdk_queues,
    .next_burst_q = dpdk_next_burst_q,
    .pump = dpdk_pump,
    .launch = dpdk_launch,
    .join = dpdk_join,
    .queue_frames = dpdk_queue_frames,
    .forward = dpdk_forward,
    .forward_q = dpdk_forward_q,
};
