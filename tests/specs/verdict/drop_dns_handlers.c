/* tests/runtime/test_write.py: tcp_ip's handlers giving verdicts: udp_data/udp6_data drop every UDP
 * datagram to or from port 53 (DNS, both directions); the TCP handlers pass everything. */
#include "tcp_ip_gen.h"

void tcp_data(const struct tcp_data_args *args, rg_hctx *h)
{
    (void)args;
    (void)h;
}

void tcp6_data(const struct tcp6_data_args *args, rg_hctx *h)
{
    (void)args;
    (void)h;
}

void udp_data(const struct udp_data_args *args, rg_hctx *h)
{
    if (args->sport == 53 || args->dport == 53) rg_verdict_give(h->verdict, h->flow, RG_DROP);
}

void udp6_data(const struct udp6_data_args *args, rg_hctx *h)
{
    if (args->sport == 53 || args->dport == 53) rg_verdict_give(h->verdict, h->flow, RG_DROP);
}

/* tcp_ip.yaml:65, layer icmp: icmp_type (uint8_t), icmp_code (uint8_t) */
void icmp_flow(const struct icmp_flow_args *args, rg_hctx *h)
{
    (void)args;
    (void)h;
}

/* tcp_ip.yaml:66, layer icmp6: icmp_type (uint8_t), icmp_code (uint8_t) */
void icmp6_flow(const struct icmp6_flow_args *args, rg_hctx *h)
{
    (void)args;
    (void)h;
}

/* tcp_ip.yaml:69, layer icmp_tcp: type (uint8_t), code (uint8_t), reporter (rg_bytes), saddr (rg_bytes), daddr (rg_bytes), proto (uint8_t), sport (uint16_t), dport (uint16_t) */
void icmp_tcp_error(const struct icmp_tcp_error_args *args, rg_hctx *h)
{
    (void)args;
    (void)h;
}

/* tcp_ip.yaml:75, layer icmp_udp: type (uint8_t), code (uint8_t), reporter (rg_bytes), saddr (rg_bytes), daddr (rg_bytes), proto (uint8_t), sport (uint16_t), dport (uint16_t) */
void icmp_udp_error(const struct icmp_udp_error_args *args, rg_hctx *h)
{
    (void)args;
    (void)h;
}

/* tcp_ip.yaml:76, layer icmp6_tcp: type (uint8_t), code (uint8_t), reporter (rg_bytes), saddr (rg_bytes), daddr (rg_bytes), proto (uint8_t), sport (uint16_t), dport (uint16_t) */
void icmp6_tcp_error(const struct icmp6_tcp_error_args *args, rg_hctx *h)
{
    (void)args;
    (void)h;
}

/* tcp_ip.yaml:82, layer icmp6_udp: type (uint8_t), code (uint8_t), reporter (rg_bytes), saddr (rg_bytes), daddr (rg_bytes), proto (uint8_t), sport (uint16_t), dport (uint16_t) */
void icmp6_udp_error(const struct icmp6_udp_error_args *args, rg_hctx *h)
{
    (void)args;
    (void)h;
}

