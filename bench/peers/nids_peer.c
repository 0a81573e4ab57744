/* nids_peer.c - the libnids peers (Debian libnids-dev, libnids 1.26).
 *
 *   nids_da  (NIDS_COLLECT=1)  data assembly: libnids reassembles both
 *            directions of every TCP connection and delivers every byte to
 *            the callback, which counts them (client.collect and
 *            server.collect are raised in NIDS_JUST_EST; NIDS_DATA adds
 *            client.count_new + server.count_new).
 *   nids_sf  (NIDS_SF=1, implies NIDS_COLLECT=1)  signature matching: nids_da
 *            plus a Hyperscan stream per half-connection (../nf/sf_hs.h: the
 *            same database, flags and counting as the rubikgen SF NF),
 *            opened on its first data, scanned with every chunk NIDS_DATA
 *            delivers, closed when the connection ends (NIDS_CLOSE,
 *            NIDS_RESET, NIDS_TIMED_OUT, and NIDS_EXITING after the loop);
 *            the counts are the "sf_*" fields of the JSON line.
 *   nids_ft  (NIDS_COLLECT=0)  flow tracking: no data is collected.  libnids
 *            frees a connection whose callbacks ask for nothing at
 *            NIDS_JUST_EST (it would then never report its close), so the
 *            callback asks for urgent data only (collect_urg): libnids keeps
 *            tracking sequence numbers and states and skips the data (it
 *            only advances half_stream.count), which is flow tracking.
 *
 * Both count closes: NIDS_CLOSE, NIDS_RESET and NIDS_TIMED_OUT during the
 * pass ("flows_closed", with the three kinds apart), connections libnids
 * established (NIDS_JUST_EST, "flows_opened"), and connections still open
 * at the end (NIDS_EXITING from nids_exit after the timed loop,
 * "flows_open_at_end").  libnids' warnings are counted per kind instead of
 * going to syslog ("warn_*").
 *
 * Frames are fed from memory with nids_pcap_handler.  libnids learns the
 * link type from nids_params.pcap_desc, a pcap_open_dead handle with the
 * capture's link type (nids_init does not read from it).  TCP checksums are
 * off (nids_register_chksum_ctl: every source address NIDS_DONT_CHKSUM;
 * libnids still verifies the IPv4 header checksum, it has no switch for it),
 * port-scan detection is off (scan_num_hosts = 0), n_tcp_streams is 1 << 20
 * (or --cap).  Every pass starts from a fresh libnids: nids_init() frees the
 * previous state (it calls nids_exit) and allocates new tables, and the
 * callback is registered again (nids_init clears the callback lists);
 * `--fork` runs each pass in a new process instead, for comparison. */
#include <nids.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer.h"

#ifndef NIDS_SF
#define NIDS_SF 0
#endif
#ifndef NIDS_COLLECT
#define NIDS_COLLECT 1
#endif
#if NIDS_SF && !NIDS_COLLECT
#error "NIDS_SF needs NIDS_COLLECT"
#endif

#if NIDS_SF
#include "sf_hs.h"

#ifndef SF_PATTERNS_DEFAULT
#define SF_PATTERNS_DEFAULT "bench/sf_patterns.txt"
#endif

static sf_db sf;                 /* compiled once (prepare) */
static sf_counts sf_c, sf_first; /* this pass; the first pass */
static int sf_passes, sf_consistent = 1;
static const char *sf_patterns;

/* A connection's streams: [0] the data sent to the server (c2s), [1] the
 * data sent to the client (s2c), as rubikgen's directions 0 and 1. */
typedef struct sf_conn {
    hs_stream_t *s[2];
} sf_conn;

/* The count_new bytes just added to a half-stream: libnids keeps
 * count - offset bytes in data, the new ones last. */
static void sf_half(struct half_stream *h, sf_conn **conn, int dir)
{
    if (h->count_new <= 0) return;
    if (!*conn && !(*conn = calloc(1, sizeof **conn))) {
        sf_c.errors++;
        return;
    }
    const char *p = h->data + (h->count - h->offset) - h->count_new;
    sf_scan(&sf, &(*conn)->s[dir], (const uint8_t *)p, (size_t)h->count_new, &sf_c);
}

static void sf_end(sf_conn **conn)
{
    if (!*conn) return;
    sf_close(&sf, &(*conn)->s[0], &sf_c);
    sf_close(&sf, &(*conn)->s[1], &sf_c);
    free(*conn);
    *conn = NULL;
}
#endif

typedef struct nids_counts {
    uint64_t opened, closes, resets, timeouts, exiting, payload, tracked, data_calls;
    uint64_t warn_ip_hdr, warn_ip_other, warn_tcp_hdr, warn_tcp_toomuch, warn_tcp_bigqueue,
        warn_other;
} nids_counts;

static nids_counts g;
static pcap_t *dead;
static struct pcap_pkthdr *hdrs; /* one pcap header per frame, built once */
static struct nids_chksum_ctl no_chksum[1] = {{0, 0, NIDS_DONT_CHKSUM, 0}};

static void on_warning(int type, int err, struct ip *iph, void *data)
{
    (void)iph;
    (void)data;
    if (type == NIDS_WARN_IP)
        err == NIDS_WARN_IP_HDR ? g.warn_ip_hdr++ : g.warn_ip_other++;
    else if (type == NIDS_WARN_TCP && err == NIDS_WARN_TCP_HDR)
        g.warn_tcp_hdr++;
    else if (type == NIDS_WARN_TCP && err == NIDS_WARN_TCP_TOOMUCH)
        g.warn_tcp_toomuch++;
    else if (type == NIDS_WARN_TCP && err == NIDS_WARN_TCP_BIGQUEUE)
        g.warn_tcp_bigqueue++;
    else
        g.warn_other++;
}

/* Bytes libnids took in order from both sides (counted whether or not it
 * collected them). */
static uint64_t stream_bytes(const struct tcp_stream *a)
{
    return (uint64_t)(unsigned)a->client.count + (uint64_t)(unsigned)a->server.count;
}

static void on_tcp(struct tcp_stream *a, void **param)
{
#if NIDS_SF
    sf_conn **conn = (sf_conn **)param; /* per connection */
    if (a->nids_state == NIDS_JUST_EST) {
        *conn = NULL; /* libnids hands an uninitialised pointer here */
    } else if (a->nids_state == NIDS_DATA) {
        sf_half(&a->server, conn, 0);
        sf_half(&a->client, conn, 1);
    } else {
        sf_end(conn);
    }
#else
    (void)param;
#endif
    switch (a->nids_state) {
    case NIDS_JUST_EST:
        g.opened++;
#if NIDS_COLLECT
        a->client.collect++;
        a->server.collect++;
#else
        a->client.collect_urg++;
        a->server.collect_urg++;
#endif
        break;
    case NIDS_DATA:
        g.data_calls++;
        g.payload += (uint64_t)(unsigned)(a->client.count_new + a->server.count_new);
        break;
    case NIDS_CLOSE:
        g.closes++;
        g.tracked += stream_bytes(a);
        break;
    case NIDS_RESET:
        g.resets++;
        g.tracked += stream_bytes(a);
        break;
    case NIDS_TIMED_OUT:
        g.timeouts++;
        g.tracked += stream_bytes(a);
        break;
    case NIDS_EXITING:
        g.exiting++;
        g.tracked += stream_bytes(a);
        break;
    default:
        break;
    }
}

static int prepare(const rg_capture *cap, const peer_opts *o)
{
    (void)o;
#if NIDS_SF
    char err[512];
    sf_patterns = o->patterns;
    if (sf_db_load(&sf, o->patterns, err, sizeof err)) {
        fprintf(stderr, "nids_sf: --patterns: %s\n", err);
        return -1;
    }
    if (sf_counts_init(&sf_c, sf.n) || sf_counts_init(&sf_first, sf.n)) {
        fprintf(stderr, "nids_sf: out of memory\n");
        return -1;
    }
#endif
    dead = pcap_open_dead(cap->link.dlt, cap->snaplen ? (int)cap->snaplen : 262144);
    hdrs = calloc(cap->count ? cap->count : 1, sizeof *hdrs);
    if (!dead || !hdrs) {
        fprintf(stderr, "nids: out of memory\n");
        return -1;
    }
    for (size_t i = 0; i < cap->count; i++) {
        const rg_frame *f = &cap->frames[i];
        hdrs[i].ts.tv_sec = (time_t)(f->ts_ns / 1000000000u);
        hdrs[i].ts.tv_usec = (suseconds_t)(f->ts_ns % 1000000000u / 1000u);
        hdrs[i].caplen = f->caplen;
        hdrs[i].len = f->len;
    }
    return 0;
}

static int setup(const rg_capture *cap, const peer_opts *o)
{
    (void)cap;
    memset(&g, 0, sizeof g);
#if NIDS_SF
    sf_counts_reset(&sf_c);
#endif
    nids_params.pcap_desc = dead;
    nids_params.filename = NULL;
    nids_params.device = NULL;
    nids_params.n_tcp_streams = o->cap ? (int)o->cap : 1 << 20;
    nids_params.scan_num_hosts = 0;
    nids_params.pcap_timeout = 0;
    nids_params.multiproc = 0;
    nids_params.syslog = on_warning;
    if (!nids_init()) {
        fprintf(stderr, "nids_init: %s\n", nids_errbuf);
        return -1;
    }
    nids_register_chksum_ctl(no_chksum, 1);
    nids_register_tcp(on_tcp);
    return 0;
}

static void run(const rg_capture *cap)
{
    for (size_t i = 0; i < cap->count; i++)
        nids_pcap_handler(NULL, &hdrs[i], (u_char *)(uintptr_t)cap->frames[i].data);
}

static void teardown(peer_counts *out)
{
    nids_exit(); /* the connections still open get NIDS_EXITING */
    peer_count_set(out, "payload_bytes", g.payload);
    peer_count_set(out, "flows_opened", g.opened);
    peer_count_set(out, "flows_closed", g.closes + g.resets + g.timeouts);
    peer_count_set(out, "close_fin", g.closes);
    peer_count_set(out, "close_rst", g.resets);
    peer_count_set(out, "close_timeout", g.timeouts);
    peer_count_set(out, "flows_open_at_end", g.exiting);
    peer_count_set(out, "tracked_bytes", g.tracked);
    peer_count_set(out, "data_calls", g.data_calls);
    peer_count_set(out, "warn_ip_hdr", g.warn_ip_hdr);
    peer_count_set(out, "warn_ip_other", g.warn_ip_other);
    peer_count_set(out, "warn_tcp_hdr", g.warn_tcp_hdr);
    peer_count_set(out, "warn_tcp_toomuch", g.warn_tcp_toomuch);
    peer_count_set(out, "warn_tcp_bigqueue", g.warn_tcp_bigqueue);
    peer_count_set(out, "warn_other", g.warn_other);
#if NIDS_SF
    if (sf_passes++ == 0)
        sf_counts_copy(&sf_first, &sf_c);
    else if (!sf_counts_equal(&sf_first, &sf_c))
        sf_consistent = 0;
#endif
}

#if NIDS_SF
static void sf_json(FILE *out)
{
    sf_counts_json(out, &sf_c, sf_consistent, sf_patterns);
}
#endif

int main(int argc, char **argv)
{
    static const peer_ops ops = {
        .name = NIDS_SF        ? "nids_sf"
                : NIDS_COLLECT ? "nids_da"
                               : "nids_ft",
        .prepare = prepare,
        .setup = setup,
        .run = run,
        .teardown = teardown,
#if NIDS_SF
        .extra_json = sf_json,
        .patterns_default = SF_PATTERNS_DEFAULT,
#endif
    };
    return peer_main(argc, argv, &ops);
}
