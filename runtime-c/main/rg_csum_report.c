/* rg_csum_report.c - the bad-checksum counters of --checksums in the summary and --bench. */
#include <inttypes.h>
#include <stdio.h>

#include "rg/rg_json.h"
#include "rg_driver.h"

void rg_checksums_json(const rg_stack_desc *stack, const rg_stats *st)
{
    fputs(",\"checksum_bad\":{", stdout);
    for (unsigned i = 0; st && i < stack->nlayers && i < st->nlayers; i++) {
        if (i) fputc(',', stdout);
        rg_json_string(stdout, stack->layers[i].name);
        printf(":%" PRIu64, st->layer[i].checksum_bad);
    }
    fputc('}', stdout);
}

void rg_checksums_text(const rg_stack_desc *stack, const rg_stats *st)
{
    fputs("checksum_bad   ", stdout);
    int any = 0;
    for (unsigned i = 0; st && i < stack->nlayers && i < st->nlayers; i++) {
        if (!st->layer[i].checksum_bad) continue;
        printf("%s%s %" PRIu64, any++ ? ", " : "", stack->layers[i].name,
               st->layer[i].checksum_bad);
    }
    fputs(any ? "  (--checksums)\n" : "0  (--checksums)\n", stdout);
}
