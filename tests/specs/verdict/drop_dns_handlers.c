/* tests/test_write.py: tcp_ip's handlers giving verdicts: udp_data/udp6_data drop every UDP
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
