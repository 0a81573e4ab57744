/* rg_pcap.h - capture input: classic pcap on libpcap, pcapng read here.
 *
 * rg_pcap_open reads pcap files (libpcap) and pcapng files (its own reader:
 * libpcap refuses interfaces of different link types and sections of
 * different byte orders in one file) with nanosecond timestamps.  Frames
 * expose the captured bytes (caplen), the original wire length and their
 * link type (pcapng: their interface's); nothing past caplen is ever read.
 *
 * Link types are mapped to an entry-protocol hint and the offset where the
 * network layer starts (rg_link_info, per capture), and per frame to the
 * network protocol actually present (rg_link_locate: reads the EtherType /
 * SLL protocol / BSD address family / IP version nibble, skipping 802.1Q and
 * 802.1ad tags on Ethernet).
 *
 * rg_capture_load reads a whole capture into one contiguous arena for
 * benchmarks (no I/O in the timed loop). */
#ifndef RG_PCAP_H
#define RG_PCAP_H

#include "rg_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Entry-protocol hints. */
typedef enum rg_entry {
    RG_ENTRY_UNKNOWN = 0,
    RG_ENTRY_ETHER, /* Ethernet header at offset 0 */
    RG_ENTRY_IPV4,  /* IPv4 header at net_off */
    RG_ENTRY_IPV6,  /* IPv6 header at net_off */
    RG_ENTRY_IP,    /* IPv4 or IPv6 at net_off: per frame, see rg_link_locate */
} rg_entry;

/* LINKTYPE_PPP_HDLC: PPP in HDLC-like framing (RFC 1662), parsed like DLT_PPP (9). */
#define RG_LINKTYPE_PPP_HDLC 50

typedef struct rg_linkinfo {
    int dlt;          /* pcap_datalink() value */
    rg_entry entry;   /* entry protocol hint for the capture */
    uint32_t net_off; /* fixed link-header length: where the network layer starts
                         (Ethernet: 14 without VLAN tags) */
    const char *
        name; /* short name: "ether", "raw", "ipv4", "ipv6", "sll", "sll2", "null", "loop", "ppp" */
} rg_linkinfo;

/* Per-frame result of rg_link_locate. */
typedef struct rg_netpos {
    rg_entry proto;     /* RG_ENTRY_IPV4, RG_ENTRY_IPV6 or RG_ENTRY_UNKNOWN (other) */
    uint16_t ethertype; /* EtherType-equivalent of the network protocol (0 if none) */
    uint16_t vlans;     /* 802.1Q / 802.1ad tags skipped (Ethernet) */
    uint32_t off;       /* offset of the network header */
} rg_netpos;

/* Fill *li for a DLT value; RG_EUNSUPPORTED (li->entry = RG_ENTRY_UNKNOWN) for
 * link types other than Ethernet, raw IP, IPv4, IPv6, SLL, SLL2, NULL, LOOP. */
int rg_link_info(int dlt, rg_linkinfo *li);

/* Find the network layer of one frame (caplen bytes at p).  RG_OK, RG_ETRUNC
 * when the link header is cut, RG_EUNSUPPORTED for an unknown link type. */
int rg_link_locate(const rg_linkinfo *li, const uint8_t *p, uint32_t caplen, rg_netpos *np);

/* One captured frame. */
typedef struct rg_frame {
    const uint8_t *data;
    uint32_t caplen; /* bytes available at data */
    uint32_t len;    /* original length on the wire */
    uint64_t ts_ns;  /* timestamp, nanoseconds since the epoch */
    int dlt;         /* link type of this frame (pcapng: of its interface) */
} rg_frame;

typedef struct rg_pcap rg_pcap;

/* Open a pcap or pcapng file ("-" is stdin).  NULL on error, with a message in
 * err (if given).
 *
 * pcapng: every section (either byte order) with its interfaces; Enhanced,
 * Simple (interface 0, no timestamp: 0) and obsolete Packet Blocks; per
 * interface the link type, snaplen, if_tsresol (10^-n or 2^-n s) and
 * if_tsoffset (seconds added); other blocks are skipped.  rg_pcap_link is the
 * first interface's link (frames carry their own dlt).  A block cut short at
 * the end of the file is an RG_EIO from rg_pcap_next after the frames before
 * it. */
rg_pcap *rg_pcap_open(const char *path, char *err, size_t errlen);
/* Next frame: 1 = a frame (valid until the next call), 0 = end of file,
 * RG_EIO on a read error (message from rg_pcap_error). */
int rg_pcap_next(rg_pcap *c, rg_frame *f);
/* 1 when rg_pcap_next would not wait for a writer (a regular file always; a FIFO, pipe or
 * stdin when bytes, the end or an error are waiting), 0 when it would. */
int rg_pcap_ready(const rg_pcap *c);
const rg_linkinfo *rg_pcap_link(const rg_pcap *c);
uint32_t rg_pcap_snaplen(const rg_pcap *c);
const char *rg_pcap_error(const rg_pcap *c);
void rg_pcap_close(rg_pcap *c);

/* A whole capture in memory. */
typedef struct rg_capture {
    rg_frame *frames; /* frames[i].data points into arena */
    size_t count;
    uint8_t *arena;
    size_t arena_len;
    uint64_t bytes;   /* sum of caplen */
    rg_linkinfo link; /* of the first interface (frames carry their dlt) */
    uint32_t snaplen;
} rg_capture;

/* Load every frame (each frame's data 8-byte aligned in the arena).  RG_OK or
 * an error code with a message in err. */
int rg_capture_load(const char *path, rg_capture *cap, char *err, size_t errlen);
void rg_capture_free(rg_capture *cap);

#ifdef __cplusplus
}
#endif
#endif /* RG_PCAP_H */
