/* rg_rules_out.c - per-rule hit counters in the summary and the --bench JSON. */
#include "rg_rules_out.h"

#include <inttypes.h>
#include <stdio.h>

#include "rg/rg_json.h"

void rg_rules_json(const rg_stats *st)
{
    /* rule sets swapped in (rg_rules.h): the hits are the last set's, since its reload */
    if (st && st->rule_reloads) printf("\"rule_reloads\":%" PRIu64 ",", st->rule_reloads);
    if (st == NULL || st->nrules == 0 || st->rule_hits == NULL) return;
    fputs("\"rules\":[", stdout);
    for (uint32_t i = 0; i < st->nrules; i++) {
        fputs(i ? ",{\"name\":" : "{\"name\":", stdout);
        rg_json_string(stdout, st->rule_name[i]);
        fputs(",\"action\":", stdout);
        rg_json_string(stdout, st->rule_action[i]);
        printf(",\"hits\":%" PRIu64 "}", st->rule_hits[i]);
    }
    fputs("],", stdout);
}

void rg_rules_text(const rg_stats *st)
{
    if (st && st->rule_reloads)
        printf("rules reloaded %" PRIu64 " time(s): the hits below count from the last reload\n",
               st->rule_reloads);
    if (st == NULL || st->nrules == 0 || st->rule_hits == NULL) return;
    printf("rules (first match wins; hits: packets each rule decided)\n"
           "  %-24s %-10s %12s\n",
           "rule", "action", "hits");
    for (uint32_t i = 0; i < st->nrules; i++)
        printf("  %-24s %-10s %12" PRIu64 "\n", st->rule_name[i], st->rule_action[i],
               st->rule_hits[i]);
}

void rg_rules_add(const rg_stats *into, const rg_stats *from)
{
    if (into == NULL || from == NULL || into->rule_hits == NULL || from->rule_hits == NULL) return;
    for (uint32_t i = 0; i < into->nrules && i < from->nrules; i++)
        into->rule_hits[i] += from->rule_hits[i];
}
