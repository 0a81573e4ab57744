/* rg_rules_ctl.h - the control socket's `rules` requests (rg_rules_load.c).
 *     rules \t info          the stack, its fingerprint, the rules in force
 *     rules \t load \t SO    swap in the rule set of a shared object (rg_rules.h)
 * f: the request's fields (f[0] is "rules"); the reply ("ok\n..." or "error: ...\n") into
 * reply.  Returns 0. */
#ifndef RG_RULES_CTL_H
#define RG_RULES_CTL_H

#include <stddef.h>

struct rg_stats;
/* A control request `rules ...` for the context whose counters are st (NULL: every context;
 * with workers each worker applies it to its own, on its own thread, between packets). */
int rg_rules_control(char **f, unsigned n, char *reply, size_t size, const struct rg_stats *st);

/* --rules-so PATH: the contexts created from now on run the rule set of PATH instead of the
 * compiled-in one, and every context reloads PATH on SIGHUP (at its next packet; the outcome
 * on stderr, a set that does not load leaves the old one running). */
void rg_rules_so_option(const char *path);

#endif /* RG_RULES_CTL_H */
