/* rg_rss.h - receive-side scaling in software: the Toeplitz hash with the
 * symmetric key, over a frame's outer 5-tuple, and the worker it maps to.
 *
 * The Toeplitz hash is the one NICs compute for RSS (Microsoft's RSS
 * specification): with the key of repeating 0x6d5a bytes the key repeats
 * every 16 bits, so swapping source and destination (addresses: 32 or 128
 * bits, ports: 16 bits) gives the same hash and both directions of a
 * connection reach the same worker.  The software distributor hashes the same
 * way a symmetric-RSS NIC does, so a run split here and a run split by the
 * NIC put the same flows together.
 *
 * What is hashed (the *outer* header: tunnels are not looked into, so every
 * flow carried in one GTP-U / GRE / IP-in-IP tunnel between two endpoints
 * lands on the same worker):
 *   - IPv4 / IPv6 with TCP, UDP or SCTP: addresses and ports (RG_RSS_L4), or
 *     addresses only (RG_RSS_L3);
 *   - IPv4 fragments (MF set or offset != 0) and IPv6 fragments (a Fragment
 *     header with M set or offset != 0): addresses only, so every fragment of
 *     a datagram lands on one worker;
 *   - other IP protocols: addresses only;
 *   - anything else (ARP, truncated headers...): hash 0 (worker 0).
 * The link layer is skipped with rg_link_locate (Ethernet with VLAN tags,
 * SLL, NULL/LOOP, raw IP), then PPPoE sessions and MPLS label stacks.
 *
 * Under RG_RSS_L4, a connection some of whose segments are IP-fragmented is
 * split: its fragments hash on addresses, its other segments on the 5-tuple.
 * RG_RSS_L3 keeps every packet between two hosts together (what a stack that
 * reassembles IP fragments needs for exact results), at the price of
 * coarser balancing. */
#ifndef RG_RSS_H
#define RG_RSS_H

#include "rg_common.h"
#include "rg_pcap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Key length: enough for the longest input (IPv6 5-tuple, 36 bytes) + 4. */
#define RG_RSS_KEY_LEN 40
/* Longest hashed input: two IPv6 addresses and two ports. */
#define RG_RSS_TUPLE_MAX 36

/* 0x6d, 0x5a repeated: the symmetric key. */
extern const uint8_t rg_rss_key_symmetric[RG_RSS_KEY_LEN];

/* What the hash covers (see above). */
typedef enum rg_rss_mode { RG_RSS_L4 = 0, RG_RSS_L3 = 1 } rg_rss_mode;

/* Toeplitz hash of len bytes under key (keylen >= len + 4; bits past the
 * key are taken as 0). */
uint32_t rg_toeplitz(const uint8_t *key, size_t keylen, const uint8_t *data, size_t len);

/* The hashed input of one frame, in RSS order (source address, destination
 * address, then source port, destination port): its length (8, 12, 32 or
 * 36), 0 when the frame has no IP header the hash covers. */
size_t rg_rss_tuple(const rg_linkinfo *li, const uint8_t *p, uint32_t caplen, rg_rss_mode mode,
                    uint8_t out[RG_RSS_TUPLE_MAX]);

/* The symmetric hash of one frame (0 when rg_rss_tuple finds nothing). */
uint32_t rg_rss_hash(const rg_linkinfo *li, const uint8_t *p, uint32_t caplen, rg_rss_mode mode);

/* The worker of a hash among n (n >= 1): a 128-entry redirection table
 * filled round-robin, as NICs and DPDK's default RETA do: (hash & 127) % n. */
static inline unsigned rg_rss_worker(uint32_t hash, unsigned n)
{
    return n > 1 ? (hash & 127u) % n : 0;
}

/* A software distributor: the link of each dlt met is looked up once. */
typedef struct rg_rss_dist {
    unsigned nworkers;
    rg_rss_mode mode;
    int dlt;        /* link of the last frame (-1: none yet) */
    rg_linkinfo li; /* rg_link_info(dlt) */
} rg_rss_dist;

void rg_rss_dist_init(rg_rss_dist *d, unsigned nworkers, rg_rss_mode mode);
/* The worker of one frame. */
unsigned rg_rss_dist_worker(rg_rss_dist *d, const rg_frame *f);

#ifdef __cplusplus
}
#endif
#endif /* RG_RSS_H */
