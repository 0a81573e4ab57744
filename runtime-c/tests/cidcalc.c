/* cidcalc: Community IDs of the flows read from stdin, one a line, for
 * tests/runtime/test_community_id.py, which compares them with the PyPI communityid package
 * (the reference implementation). Input lines:
 *   SEED PROTO SADDR DADDR SPORT DPORT (SPORT DPORT "-" for a protocol without ports)
 *   SEED icmp SADDR DADDR TYPE CODE (ICMP or ICMPv6 by the address family)
 * It prints the ID (or "error") per line. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rg/rg_community_id.h"

static size_t addr(const char *text, uint8_t *out)
{
    if (inet_pton(AF_INET, text, out) == 1) return 4;
    if (inet_pton(AF_INET6, text, out) == 1) return 16;
    return 0;
}

int main(void)
{
    char line[512], proto[16], sa[64], da[64], sp[16], dp[16];
    unsigned seed;
    while (fgets(line, sizeof line, stdin)) {
        uint8_t s[16], d[16];
        char id[RG_COMMUNITY_ID_LEN];
        if (sscanf(line, "%u %15s %63s %63s %15s %15s", &seed, proto, sa, da, sp, dp) != 6) {
            puts("error");
            continue;
        }
        const size_t alen = addr(sa, s);
        int rc = alen && addr(da, d) == alen ? 0 : -1;
        if (!rc && !strcmp(proto, "icmp"))
            rc = rg_community_id_icmp(id, (uint16_t)seed, s, d, alen, (uint8_t)atoi(sp),
                                      (uint8_t)atoi(dp));
        else if (!rc)
            rc = rg_community_id(id, (uint16_t)seed, s, d, alen, (uint8_t)atoi(proto),
                                 strcmp(sp, "-") != 0, (uint16_t)atoi(sp), (uint16_t)atoi(dp));
        puts(rc ? "error" : id);
    }
    return 0;
}
