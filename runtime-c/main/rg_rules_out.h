/* rg_rules_out.h - per-rule hit counters of a stack built with --rules (docs/rules.md), in
 * the summary (text, JSON) and the --bench JSON. */
#ifndef RG_RULES_OUT_H
#define RG_RULES_OUT_H

#include "rg/rg_stats.h"

/* "rules":[{"name":...,"action":...,"hits":N},...], (with the comma) when the stack has
 * rules; nothing otherwise. */
void rg_rules_json(const rg_stats *st);
/* A table of the rules and their hits; nothing without rules. */
void rg_rules_text(const rg_stats *st);
/* --workers: add the hits of another worker's context into these (the same stack). */
void rg_rules_add(const rg_stats *into, const rg_stats *from);

#endif /* RG_RULES_OUT_H */
