/* rg_reject.h - the replies that reject a packet (rule action `reject`, verdict RG_REJECT).
 *
 * Given the frame of the offending packet as captured (any link type rg_link_locate knows but
 * PPP), rg_reject_build writes the frames that answer it:
 *
 *  - TCP: a RST to the sender, as RFC 9293 section 3.10.7.1 says for a segment arriving on a
 *    connection that does not exist: SEG.ACK set: <SEQ=SEG.ACK><CTL=RST>; otherwise
 *    <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK> (SEG.LEN counts SYN and FIN).  Either is
 *    acceptable to the sender (RFC 5961 section 3.2: the sequence number is exactly its
 *    RCV.NXT; in SYN-SENT the ACK acknowledges its SYN).  With RG_REJECT_F_BOTH, when the
 *    segment has ACK set (a synchronised connection), also a RST to the receiver as if the
 *    sender had sent it: <SEQ=SEG.SEQ><ACK=SEG.ACK><CTL=RST,ACK>, which is the receiver's
 *    RCV.NXT as long as the dropped segment was the next in order.  No reply to a RST.
 *  - Anything else over IP: an ICMP destination unreachable (type 3) with code 3 (port
 *    unreachable) or, with RG_REJECT_F_ADMIN, 13 (communication administratively prohibited,
 *    RFC 1812), quoting the datagram's IP header and its first 64 bits of data (RFC 792); over
 *    IPv6 an ICMPv6 destination unreachable (type 1) with code 4 (port unreachable) or 1
 *    (administratively prohibited), quoting as much of the packet as fits in the minimum MTU
 *    of 1280 bytes (RFC 4443 section 3.1).
 *
 * No reply (RFC 1122 section 3.2.2, RFC 4443 section 2.4 e): to an ICMP error or an ICMPv6
 * error (or a packet whose ICMP type was not captured), to a non-initial fragment, to a
 * datagram sent to a multicast or broadcast address (link or IP) or from an address that is
 * not a single host (loopback addresses count as one for TCP only); nor to a first fragment
 * of a TCP segment without ACK (SEG.LEN is not known), nor to a packet that is cut before
 * what the reply needs.
 *
 * The replies keep the link header of the offending frame: on Ethernet the addresses are
 * swapped for the reply to the sender (and kept for the one to the receiver), 802.1Q tags
 * kept; on Linux cooked captures the packet type becomes "outgoing".  IPv4 replies carry TTL
 * 64, DF, identification 0; IPv6 replies hop limit 64. */
#ifndef RG_REJECT_H
#define RG_REJECT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* flags of a reject (the verdict's low bits: rg_api.h RG_REJECT) */
enum {
    RG_REJECT_F_BOTH = 1u << 0,  /* TCP: also reset the receiver */
    RG_REJECT_F_ADMIN = 1u << 1, /* ICMP: administratively prohibited, not port unreachable */
};

/* the largest reply: a link header of up to RG_REJECT_LINK_MAX bytes (Ethernet with 8 tags:
 * 46) and 1280 bytes of IPv6 */
#define RG_REJECT_LINK_MAX  64
#define RG_REJECT_FRAME_MAX (RG_REJECT_LINK_MAX + 1280)

/* why a reject got no reply (rg_reject_build's result when it wrote nothing) */
enum rg_reject_why {
    RG_REJECT_SENT = 0,     /* replies written */
    RG_REJECT_NOT_IP = 1,   /* link type or network protocol without replies */
    RG_REJECT_CUT = 2,      /* the frame ends before what a reply needs, or is malformed */
    RG_REJECT_NO_ERROR = 3, /* ICMP rules: an ICMP error, a fragment, multicast... */
    RG_REJECT_TCP_RST = 4,  /* a RST is never answered */
    RG_REJECT_WHY_COUNT = 5
};

typedef struct rg_reject_out {
    unsigned n;             /* frames written: 0, 1 or 2 */
    int why;                /* enum rg_reject_why (RG_REJECT_SENT when n > 0) */
    uint8_t to_receiver[2]; /* 0: goes back to the sender (out of the interface the frame came
                               in on); 1: on to the receiver (RG_REJECT_F_BOTH) */
    uint32_t len[2];
    uint8_t frame[2][RG_REJECT_FRAME_MAX];
} rg_reject_out;

/* The replies to the frame (caplen bytes at p, link type dlt) in *out; returns out->n.  Reads
 * no byte beyond p + caplen, whatever the bytes say. */
unsigned rg_reject_build(int dlt, const uint8_t *p, uint32_t caplen, unsigned flags,
                         rg_reject_out *out);

/* A token bucket of replies by packet time: at most rate rejects answered per second, one
 * second's worth in a burst (rate 0: no limit). */
typedef struct rg_reject_rate {
    uint64_t rate;   /* rejects per second; 0: unlimited */
    uint64_t credit; /* nanoseconds of credit, at most one second */
    uint64_t last;   /* the time of the last take; 0: none yet */
} rg_reject_rate;

void rg_reject_rate_init(rg_reject_rate *r, uint64_t rate);
/* 1: answer a reject at time now_ns (a token taken); 0: rate-limited.  A clock going back
 * adds no credit. */
int rg_reject_rate_take(rg_reject_rate *r, uint64_t now_ns);

#ifdef __cplusplus
}
#endif
#endif /* RG_REJECT_H */
