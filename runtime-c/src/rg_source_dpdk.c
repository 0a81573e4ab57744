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
 * Inline mode (cfg->inline_mode): the ports pair up in list order (the 1st
 * with the 2nd, the 3rd with the 4th...), each with one TX queue, and
 * forward sends a burst's mbufs out of the peer of the port they came from
 * with rte_eth_tx_burst: the same mbufs, no copy (edits made in place go
 * out; a multi-segment frame goes out as its original segments).  Frames the
 * verdict drops are freed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "rg/rg_source.h"

#define RG_DPDK_MAX_PORTS 64
#define RG_DPDK_RX_DESC   1024
#define RG_DPDK_POOL      8191 /* mbufs: 2^n - 1 is the mempool's best size */
#define RG_DPDK_CACHE     256
#define RG_DPDK_TX_DESC   1024
#define RG_DPDK_TX_TRIES  64 /* rte_eth_tx_burst calls for one burst before giving up */

typedef struct dpdk_src {
    rg_source base;
    uint16_t ports[RG_DPDK_MAX_PORTS];
    unsigned nports, next_port;
    int eal_up;
    struct rte_mempool *pool;
    rg_linkinfo li;
    volatile sig_atomic_t *stop;
    /* the current burst's mbufs, freed on the next call */
    struct rte_mbuf *held[RG_BURST];
    unsigned nheld;
    /* inline: the port index (in ports[]) of the held burst, and each frame's mbuf */
    int inline_mode;
    unsigned held_port;
    uint8_t frame_mbuf[RG_BURST];
    unsigned nframes;
    /* linear copies of multi-segment frames, one per burst slot */
    uint8_t *lin[RG_BURST];
    uint32_t lin_cap[RG_BURST];
    /* TSC -> wall clock */
    uint64_t tsc0, hz, wall0_ns;
    rg_source_stats st;
    char err[256];
} dpdk_src;

/* rte_eal_init runs once per process: a second open fails clearly. */
static int eal_initialised;

static void dpdk_free_held(dpdk_src *d)
{
    if (d->nheld) rte_pktmbuf_free_bulk(d->held, d->nheld);
    d->nheld = 0;
}

static void dpdk_close(rg_source *s)
{
    dpdk_src *d = (dpdk_src *)s;
    if (!d) return;
    dpdk_free_held(d);
    for (unsigned i = 0; i < d->nports; i++) {
        rte_eth_dev_stop(d->ports[i]);
        rte_eth_dev_close(d->ports[i]);
    }
    if (d->pool) rte_mempool_free(d->pool);
    for (unsigned i = 0; i < RG_BURST; i++) free(d->lin[i]);
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
            snprintf(d->err, sizeof d->err, "dpdk: port %lu does not exist (%u ports available)",
                     v, (unsigned)rte_eth_dev_count_avail());
            return -1;
        }
        if (d->nports == RG_DPDK_MAX_PORTS) break;
        d->ports[d->nports++] = (uint16_t)v;
        p = *end ? end + 1 : end;
    }
    return 0;
}

static int port_start(dpdk_src *d, uint16_t port, int promisc)
{
    struct rte_eth_conf conf;
    memset(&conf, 0, sizeof conf);
    const uint16_t ntxq = d->inline_mode ? 1 : 0;
    int rc = rte_eth_dev_configure(port, 1, ntxq, &conf);
    if (rc < 0) {
        snprintf(d->err, sizeof d->err, "dpdk: port %u: configure: %s", port, rte_strerror(-rc));
        return -1;
    }
    uint16_t nrx = RG_DPDK_RX_DESC, ntx = ntxq ? RG_DPDK_TX_DESC : 0;
    rte_eth_dev_adjust_nb_rx_tx_desc(port, &nrx, &ntx);
    int socket = rte_eth_dev_socket_id(port);
    rc = rte_eth_rx_queue_setup(port, 0, nrx, socket < 0 ? 0 : (unsigned)socket, NULL, d->pool);
    if (rc < 0) {
        snprintf(d->err, sizeof d->err, "dpdk: port %u: RX queue: %s", port, rte_strerror(-rc));
        return -1;
    }
    if (ntxq) {
        rc = rte_eth_tx_queue_setup(port, 0, ntx, socket < 0 ? 0 : (unsigned)socket, NULL);
        if (rc < 0) {
            snprintf(d->err, sizeof d->err, "dpdk: port %u: TX queue: %s", port,
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
    for (int i = 0; i < cfg->argc; i++) argv[i + 1] = cfg->argv[i];
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
    d->pool = rte_pktmbuf_pool_create("rg_rx", RG_DPDK_POOL, RG_DPDK_CACHE, 0,
                                      RTE_MBUF_DEFAULT_BUF_SIZE, (int)rte_socket_id());
    if (!d->pool) {
        snprintf(d->err, sizeof d->err, "dpdk: mbuf pool: %s", rte_strerror(rte_errno));
        return dpdk_fail(d, err, errlen);
    }
    for (unsigned i = 0; i < d->nports; i++)
        if (port_start(d, d->ports[i], cfg->promisc) < 0) {
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
static const uint8_t *linearise(dpdk_src *d, unsigned i, struct rte_mbuf *m)
{
    uint32_t n = rte_pktmbuf_pkt_len(m);
    if (d->lin_cap[i] < n) {
        uint8_t *b = realloc(d->lin[i], n);
        if (!b) return NULL;
        d->lin[i] = b;
        d->lin_cap[i] = n;
    }
    const void *p = rte_pktmbuf_read(m, 0, n, d->lin[i]);
    return p;
}

static int dpdk_next_burst(rg_source *s, rg_frame *out, unsigned max)
{
    dpdk_src *d = (dpdk_src *)s;
    dpdk_free_held(d);
    if (d->stop && *d->stop) return RG_SRC_END;
    if (max > RG_BURST) max = RG_BURST;
    /* every port in turn, starting after the last one served (fairness) */
    uint16_t n = 0;
    for (unsigned k = 0; k < d->nports && !n; k++) {
        unsigned pi = (d->next_port + k) % d->nports;
        n = rte_eth_rx_burst(d->ports[pi], 0, d->held, (uint16_t)max);
        if (n) {
            d->next_port = (pi + 1) % d->nports;
            d->held_port = pi;
        }
    }
    d->nheld = n;
    d->nframes = 0;
    if (!n) return 0;
    uint64_t now = rte_get_tsc_cycles();
    uint64_t ts = d->wall0_ns + (uint64_t)((unsigned __int128)(now - d->tsc0) * 1000000000u / d->hz);
    unsigned k = 0;
    for (unsigned i = 0; i < n; i++) {
        struct rte_mbuf *m = d->held[i];
        const uint8_t *data = rte_pktmbuf_mtod(m, const uint8_t *);
        if (m->nb_segs > 1) data = linearise(d, k, m);
        if (!data) continue; /* out of memory for a jumbo frame: it is dropped, counted */
        d->frame_mbuf[k] = (uint8_t)i;
        rg_frame *f = &out[k++];
        f->data = data;
        f->caplen = m->nb_segs > 1 ? rte_pktmbuf_pkt_len(m) : rte_pktmbuf_data_len(m);
        f->len = rte_pktmbuf_pkt_len(m);
        f->ts_ns = ts;
        f->dlt = d->li.dlt;
        d->st.frames++;
        d->st.bytes += f->caplen;
    }
    d->st.dropped += n - k;
    d->nframes = k;
    return (int)k;
}

static void dpdk_forward(rg_source *s, const uint8_t *drop, unsigned n)
{
    dpdk_src *d = (dpdk_src *)s;
    if (!d->inline_mode || !d->nheld) return;
    if (n > d->nframes) n = d->nframes;
    /* the burst's mbufs in frame order: passed ones to tx[], the others freed (an mbuf no
     * frame refers to, a jumbo frame not linearised, was counted as dropped on RX) */
    struct rte_mbuf *tx[RG_BURST];
    uint16_t ntx = 0;
    uint8_t sent[RG_BURST] = {0};
    for (unsigned k = 0; k < n; k++) {
        const unsigned i = d->frame_mbuf[k];
        sent[i] = 1;
        if (drop[k]) {
            d->st.tx_withheld++;
            rte_pktmbuf_free(d->held[i]);
        } else {
            tx[ntx++] = d->held[i];
        }
    }
    for (unsigned i = 0; i < d->nheld; i++)
        if (!sent[i]) rte_pktmbuf_free(d->held[i]);
    d->nheld = 0; /* handed over: dpdk_free_held must not free them again */
    const uint16_t peer = d->ports[d->held_port ^ 1u];
    uint16_t done = 0;
    for (int tries = 0; done < ntx && tries < RG_DPDK_TX_TRIES; tries++)
        done += rte_eth_tx_burst(peer, 0, tx + done, (uint16_t)(ntx - done));
    d->st.tx_frames += done;
    d->st.tx_failed += (uint64_t)(ntx - done);
    if (done < ntx) rte_pktmbuf_free_bulk(tx + done, (unsigned)(ntx - done));
}

static const rg_linkinfo *dpdk_link(const rg_source *s)
{
    return &((const dpdk_src *)s)->li;
}

static void dpdk_stats(const rg_source *s, rg_source_stats *st)
{
    const dpdk_src *d = (const dpdk_src *)s;
    *st = d->st;
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

const rg_source_ops rg_source_dpdk = {
    .name = "dpdk",
    .help = "DPDK ports (--port LIST, EAL arguments after --; --inline: pairs 0<->1...)",
    .open = dpdk_open,
    .next_burst = dpdk_next_burst,
    .link = dpdk_link,
    .stats = dpdk_stats,
    .error = dpdk_error,
    .close = dpdk_close,
    .forward = dpdk_forward,
};
