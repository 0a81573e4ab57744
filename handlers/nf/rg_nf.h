/* rg_nf.h - the stock network functions (NFs) of rubikgen.
 *
 * An NF is an observer (rg_obs, see rg_api.h) whose `self` holds its state.
 * It works with any generated stack: everything it knows about the stack
 * comes from the rg_stack_desc descriptors.  The NFs are registered with the
 * capture driver through rg_nf_table (rg/rg_nf_registry.h): the driver
 * (rg_main, `--nf NAME`) creates one, attaches it to the stack context after
 * its own counters (`--nf count`, the default, is those counters alone), and
 * finishes it after flushing the context (so every instance has closed).
 *
 *   events     OUT/events.jsonl: one line per handler call, in call order:
 *              {"pkt","ts","handler","layer","flow": uid|null,"dir": "c2s"|"s2c",
 *               ["end": close reason,] "args": {name: number | {"len","hex","sha256"}}}
 *              ("hex": the first 64 bytes; "sha256": of all the bytes).  "end"
 *              marks the call of a lifecycle handler (with: timeout, evicted,
 *              destroyed): the reason its instance ended ("accept", "evicted",
 *              "expired", "flushed"); such a call comes right before the
 *              instance's close (on_close), with "pkt" the packets processed
 *              so far and "ts" the context's clock; a data handler's call
 *              with the bytes gap recovery drained at the end (drain: true)
 *              carries "end" too.  And one line per hole a
 *              sequence skipped (gap recovery):
 *              {"ts","event":"gap","layer","flow","dir","seq","len","at"}
 *              (rg_obs.on_gap's arguments).  And one line per packet dated
 *              beyond the clock guard (--max-clock-jump, rg_obs.on_clock_jump):
 *              {"pkt","ts": the flow clock it was processed at,"event":
 *               "clock_jump","pkt_ts": its own timestamp,"dir":"forward"|"backward"}
 *              and one with "resync":true when the clock followed a new time
 *              base (pkt_ts: its first timestamp)
 *              And one line per memcap hit (rg_obs.on_memcap):
 *              {"ts","event":"memcap","layer","flow": null for a new
 *               instance,"policy","asked","flow_state":"dropped"|"bypassed"|null}
 *              and one per overlap with differing bytes (rg_obs.on_overlap):
 *              {"ts","event":"overlap","layer","flow","dir","seq","len",
 *               "new_bytes","won":"old"|"new"|"both","old_len","new_len","policy"}
 *              (won: the policy's choice; old_len, new_len: both versions' lengths;
 *              policy: the overlap policy's name, rg_seq_policy_name)
 *              and one per flow (an instance of a layer with two sides: TCP,
 *              UDP, SCTP, an ICMP conversation; not an IP datagram) at its close:
 *              {"ts": its last packet's own time,"event":"close","layer","proto",
 *               "flow","src","dst","sport",
 *               "dport","community_id","state","close","complete": bool | null
 *               (no PSM), then "reason", "late_packets", the record fields and the
 *               ICMP fields as flowstats writes them}
 *   flowstats  OUT/flowstats.jsonl: one line per instance when it closes,
 *              for instances that outlive a packet (all of them after
 *              rg_nf_flowstats_all; the driver's --flowstats-all):
 *              {"layer","proto","uid","src","dst","sport","dport","community_id",
 *               "packets":[c2s,s2c],"bytes":[c2s,s2c],"first_ts","last_ts",
 *               "state": final PSM state name | null,
 *               "close": "accept"|"evicted"|"expired"|"flushed","complete": bool,
 *               then how it ended (rg_nf_end_fields): "reason", "late_packets" and
 *               the layer's record fields (spec record:, e.g. TCP's "originator"),
 *               "icmp_type","icmp_code": when a handler with numeric arguments of
 *               these names was called for the instance (its first call: an ICMP
 *               conversation's first packet),
 *               "icmp_errors":[{"type","code","reporter","ts"}]: when handlers
 *               hooked on an `icmp_error` event (icmp_quote.yaml) named the
 *               instance as the flow an ICMP error quoted, in order}
 *              An instance that does not outlive a packet is one the packet
 *              that created it also destroyed ("accept" after at most one
 *              packet: a whole IPv4 datagram, a lone SYN+RST does not). packets:
 *              the layer's packets that reached the instance, per direction
 *              (IP fragments: each; a reassembled datagram is one packet of
 *              the layer above); bytes: the lengths of those packets' input
 *              to the layer, as captured (TCP/UDP: header + payload, without
 *              link padding); first_ts: the creating packet's own timestamp
 *              (as captured, not the guarded flow clock); last_ts: the last
 *              packet's.  sport/dport are omitted for layers whose
 *              selector has no sides (see rg_nf_endpoints_of).
 *   streams    the delivered payload of every flow direction: the
 *              concatenation, in call order, of the "data" argument of every
 *              handler call on that instance in that direction, written to
 *              OUT/streams/<uid>-<c2s|s2c>.bin (created on the first byte);
 *              at close, two lines (c2s then s2c, even with 0 bytes) in
 *              OUT/flows.jsonl:
 *              {"layer","proto","src","dst","sport","dport","community_id","dir","bytes",
 *               "sha256","file": "streams/<uid>-<dir>.bin" | null,
 *               "complete": bool | null (no PSM),"uid","close",
 *               "gaps": [[offset, length], ...], then "reason", "late_packets",
 *               the record fields and "icmp_errors" as flowstats}
 *              (gaps: the holes skipped in that direction, in order,
 *              adjacent ones merged; offset counts delivered and missing
 *              bytes from the direction's start, so the bytes of the .bin
 *              file before a hole are offset minus the lengths of the
 *              holes before it)
 *              (src/sport: the sender of that line's direction, so the s2c
 *              line has the c2s line's dst/dport as its src/sport).  Only
 *              flows of layers with a handler that has a "data" argument are
 *              streams (a TCP stack's IPv4 datagram instances are not).
 *              Split flows: when a handler of the layer that has a "data"
 *              argument also has a numeric argument named "sid" (a stream
 *              id, as SCTP's), each (direction, sid) of the flow is its own
 *              record: OUT/streams/<uid>-<dir>-sid<N>.bin, and one line per
 *              direction and stream id that delivered data (c2s first, by
 *              sid) with "sid": N after "dir"; a split flow that delivered
 *              nothing has the two lines, with "sid": null.  Other flows'
 *              lines have no "sid".
 *              Data of calls without an instance goes to
 *              OUT/streams/noflow.bin; OUT/streams.json sums it all up:
 *              {"flows","directions","bytes","noflow_calls","noflow_bytes",
 *               "noflow_file","gaps","gap_bytes"} ("directions": the lines of flows.jsonl).  At
 * most 256 stream files are open at once (least recently written closed, reopened to append).
 *
 *   sni        one line per TLS ClientHello in OUT/sni.jsonl, and on stdout: the
 *              calls of handlers with a byte argument named "sni" (the stock
 *              stacks' tls_hello handlers, layer tls_client_hello, over TCP or
 *              QUIC), read by argument name:
 *              {"pkt","layer","src","dst","sport","dport","sni": string | null,
 *               "alpn": [names],"versions": [numbers],"ja3_full","ja3"}
 *              (src/dst from "saddr"/"daddr", ports from "sport"/"dport",
 *              "alpn" from the ALPN protocol_name_list, "versions" from
 *              "supported_versions"; bytes outside printable ASCII as \u00XX;
 *              "ja3_full"/"ja3": the JA3 string and its MD5 hex, as Wireshark's
 *              tls.handshake.ja3_full/ja3, GREASE left out, from "version",
 *              "cipher_suites" and "extensions", when the call has "version").
 *              stdout: "sni LAYER SRC:SPORT -> DST:DPORT NAME alpn=A,B ja3=MD5".
 *              Calls with a numeric "cipher" and no "sni" (tcp_tls's tls_server) are
 *              ServerHellos: {"pkt","layer","server":true,"src","dst","sport","dport",
 *              "version","cipher","selected_version","alpn"}; stdout "server ...".
 *
 * "data": a handler call's payload is its first argument of kind
 * RG_VAL_BYTES named "data" (none: the call carries no payload).
 *
 * Times are packet times in nanoseconds; "c2s" is direction 0 (to_passive,
 * the direction of the instance's first packet), "s2c" direction 1.
 * Instances that never closed by rg_nf_finish are reported with
 * "close": "open". */
#ifndef RG_NF_H
#define RG_NF_H

#include <stdio.h>

#include "rg/rg_api.h"
#include "rg/rg_nf_registry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Create the NF `name` ("events", "flowstats", "streams", "sni": the
 * entries of rg_nf_table) for `stack`.  outdir: where it writes its files
 * (created with its parents).  NULL on error, with a message in err. */
rg_obs *rg_nf_create(const char *name, const rg_stack_desc *stack, const char *outdir, char *err,
                     size_t errlen);

/* Write the NF's outputs, close its files and free it.  RG_OK, or RG_EIO
 * when an output could not be written (the reason is printed on stderr). */
int rg_nf_finish(rg_obs *nf);

/* flowstats: write every instance (all = 1), also those that do not outlive
 * the packet that created them; no effect on other NFs. */
void rg_nf_flowstats_all(rg_obs *nf, int all);
/* Addresses and ports of an instance, read from its keys with the layer's
 * rg_keypart list (side a parts, then common parts):
 *   src   = side a's first non-common RG_VAL_BYTES part of size 4 (IPv4,
 *           dotted quad) or 16 (IPv6, RFC 5952 text), read from key_a;
 *   dst   = the same part read from key_p (the swapped key holds side p's
 *           values at the same offsets);
 *   sport = the first non-common RG_VAL_NUM part of size 2 (big-endian)
 *           from key_a, dport the same part from key_p.
 * A unidirectional layer (bidir = 0, key_p == key_a) has no swapped key:
 * dst comes from the second address part of key_a, if any, and there are no
 * ports (a selector without sides names no endpoints: its numbers are
 * identifiers such as an IPv4 id or a protocol). */
typedef struct rg_nf_endpoints {
    char src[48]; /* "" when the key has no address */
    char dst[48];
    uint16_t sport, dport;
    uint8_t has_sport, has_dport;
    /* Community ID v1 of the flow (rg_community_id.h, seed rg_community_id_seed), "" when the
     * layer is no IP flow: both addresses and an IP protocol are needed (rg_nf_endpoints_of);
     * written as "community_id" (null for "") after the ports by rg_nf_json_endpoints */
    char community_id[32];
    /* the addresses as in the key (alen 4 or 16; 0: none), for the ICMP Community ID, which
     * needs the conversation's first type and code as well (rg_nf_endpoints_icmp) */
    uint8_t saddr[16], daddr[16];
    uint8_t alen;
} rg_nf_endpoints;

void rg_nf_endpoints_of(const rg_layer_desc *layer, const rg_flow_info *f, rg_nf_endpoints *ep);

/* Sets ep's community_id of an ICMP/ICMPv6 conversation of layer from the type and code of its
 * first packet (sent by side a, ep's src); nothing for a layer of another protocol. */
void rg_nf_endpoints_icmp(const rg_layer_desc *layer, rg_nf_endpoints *ep, uint8_t type,
                          uint8_t code);

#ifdef __cplusplus
}
#endif
#endif /* RG_NF_H */
