/* rg_community_id.h - Community ID v1 flow hashes (corelight/community-id-spec), the flow
 * identifier Zeek, Suricata, Arkime and SIEMs join records on.
 *
 *   "1:" + base64(SHA-1(seed:16 | saddr | daddr | proto:8 | 0:8 [| sport:16 | dport:16]))
 *
 * all in network byte order, with the endpoints ordered (the smaller address first; equal
 * addresses: the smaller port first) so that both directions of a flow hash alike.  Ports
 * only for TCP, UDP, SCTP and ICMP/ICMPv6; ICMP's "ports" are its type and the type of the
 * answer (echo request/reply and the other request/response pairs of the spec), or type and
 * code for one-way types, which are not reordered.  SHA-1 is OpenSSL's libcrypto. */
#ifndef RG_COMMUNITY_ID_H
#define RG_COMMUNITY_ID_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "1:" + 28 base64 characters + NUL */
#define RG_COMMUNITY_ID_LEN 31

#define RG_IPPROTO_ICMP   1
#define RG_IPPROTO_TCP    6
#define RG_IPPROTO_UDP    17
#define RG_IPPROTO_ICMPV6 58
#define RG_IPPROTO_SCTP   132

/* The seed of the records the stock NFs write (the driver's --community-id-seed; 0 default). */
extern uint16_t rg_community_id_seed;

/* The Community ID of a flow between saddr and daddr (alen bytes each: 4 for IPv4, 16 for
 * IPv6) of IP protocol proto into out (RG_COMMUNITY_ID_LEN bytes).  has_ports: sport and
 * dport are the flow's ports (TCP, UDP, SCTP); 0 for protocols without (they are not
 * hashed).  ICMP and ICMPv6 go through rg_community_id_icmp.  0, or -1 (out "") for another
 * address length or a SHA-1 failure. */
int rg_community_id(char *out, uint16_t seed, const uint8_t *saddr, const uint8_t *daddr,
                    size_t alen, uint8_t proto, int has_ports, uint16_t sport, uint16_t dport);

/* The Community ID of an ICMP (alen 4) or ICMPv6 (alen 16) message of type and code from saddr
 * to daddr, with the spec's type/code mapping. */
int rg_community_id_icmp(char *out, uint16_t seed, const uint8_t *saddr, const uint8_t *daddr,
                         size_t alen, uint8_t type, uint8_t code);

/* The IP protocol number of a stock protocol spec's name ("tcp" 6, "udp" 17, "sctp" 132,
 * "icmp" 1, "icmpv6" 58, "gre" 47, "esp" 50, "ah" 51), -1 for another. */
int rg_ip_proto_of(const char *protocol);

typedef struct rg_layer_desc rg_layer_desc;

/* The IP protocol of a layer's instances: that of the protocol its ports' key part belongs to
 * ("tcp.header.sport": the parameter tcp; "header.sport": the layer's own protocol), the
 * layer's own protocol without ports (gre), or an IP datagram's protocol number in its key
 * (key: the forward key; ip: saddr, daddr, id, header.protocol).  -1 when none is known. */
int rg_flow_ipproto(const rg_layer_desc *layer, const uint8_t *key);

/* The Community ID of an instance of layer with forward key key, between saddr and daddr
 * (its key's addresses) and, has_ports, sport and dport (its sides' ports): what the stock
 * NFs and the Python bindings write.  -1 (out "") when the layer is no IP flow, or an ICMP one
 * (whose type and code the key does not hold: rg_community_id_icmp). */
int rg_community_id_flow(char *out, uint16_t seed, const rg_layer_desc *layer, const uint8_t *key,
                         const uint8_t *saddr, const uint8_t *daddr, size_t alen, int has_ports,
                         uint16_t sport, uint16_t dport);

#ifdef __cplusplus
}
#endif
#endif /* RG_COMMUNITY_ID_H */
