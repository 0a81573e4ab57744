/* tests/backend/test_verdicts.py: tcp_ip's handlers giving flow verdicts, each on other flows:
 * - UDP to port 123 (NTP): RG_DROP_FLOW, so the server's answer is dropped at the instance
 *   lookup without a handler call;
 * - TCP with port 80 (HTTP) on either side: RG_DROP_FLOW at the first data delivered;
 * - TCP with port 443 (TLS) on either side: RG_BYPASS_FLOW at the first data delivered;
 * - UDP from port 53 (DNS answers): RG_DROP, each on its own (the queries pass).
 * Every call is printed on stderr ("call HANDLER SPORT DPORT LEN") for the test to count. */
#include <stdio.h>

#include "tcp_ip_gen.h"

static void report(const char *name, unsigned sport, unsigned dport, size_t len)
{
    fprintf(stderr, "call %s %u %u %zu\n", name, sport, dport, len);
}

static void tcp_verdict(unsigned sport, unsigned dport, rg_hctx *h)
{
    if (sport == 80 || dport == 80) rg_verdict_give(h->verdict, h->flow, RG_DROP_FLOW);
    if (sport == 443 || dport == 443) rg_verdict_give(h->verdict, h->flow, RG_BYPASS_FLOW);
}

void tcp_data(const struct tcp_data_args *args, rg_hctx *h)
{
    report("tcp_data", args->sport, args->dport, args->data.len);
    tcp_verdict(args->sport, args->dport, h);
}

void tcp6_data(const struct tcp6_data_args *args, rg_hctx *h)
{
    report("tcp6_data", args->sport, args->dport, args->data.len);
    tcp_verdict(args->sport, args->dport, h);
}

void udp_data(const struct udp_data_args *args, rg_hctx *h)
{
    report("udp_data", args->sport, args->dport, args->data.len);
    if (args->dport == 123) rg_verdict_give(h->verdict, h->flow, RG_DROP_FLOW);
    if (args->sport == 53) rg_verdict_give(h->verdict, h->flow, RG_DROP);
}

void udp6_data(const struct udp6_data_args *args, rg_hctx *h)
{
    report("udp6_data", args->sport, args->dport, args->data.len);
    if (args->dport == 123) rg_verdict_give(h->verdict, h->flow, RG_DROP_FLOW);
    if (args->sport == 53) rg_verdict_give(h->verdict, h->flow, RG_DROP);
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

