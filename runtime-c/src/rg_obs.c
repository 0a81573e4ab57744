/* rg_obs.c - helpers for observers (see rg_obs.h). */
#include "rg/rg_obs.h"

#include <stdlib.h>
#include <string.h>

int16_t *rg_obs_data_args(const rg_stack_desc *stack)
{
    int16_t *a = malloc((stack->nhandlers ? stack->nhandlers : 1) * sizeof *a);
    if (!a) return NULL;
    for (unsigned h = 0; h < stack->nhandlers; h++) {
        const rg_handler_desc *d = &stack->handlers[h];
        a[h] = -1;
        for (unsigned i = 0; i < d->nargs && i < INT16_MAX; i++) {
            if (d->arg_kinds[i] == RG_VAL_BYTES && !strcmp(d->arg_names[i], "data")) {
                a[h] = (int16_t)i;
                break;
            }
        }
    }
    return a;
}

const char *rg_close_name(int reason)
{
    switch (reason) {
#define RG_CLOSE_CASE_(name, value, text)                                                          \
    case name:                                                                                     \
        return text;
        RG_CLOSE_REASONS(RG_CLOSE_CASE_)
#undef RG_CLOSE_CASE_
    default:
        return "unknown";
    }
}

static const char *const memcap_policy_names[RG_MEMCAP_POLICIES] = RG_MEMCAP_POLICY_NAMES;

const char *rg_memcap_policy_name(int policy)
{
    return policy >= 0 && policy < RG_MEMCAP_POLICIES ? memcap_policy_names[policy] : "unknown";
}

const char *rg_seq_policy_name(int policy)
{
    static const char *const names[] = {"first", "last", "linux", "bsd", "windows", "solaris"};
    return policy >= 0 && policy < (int)(sizeof names / sizeof *names) ? names[policy] : "unknown";
}

int rg_memcap_policy_parse(const char *name)
{
    for (int i = 0; i < RG_MEMCAP_POLICIES; i++)
        if (!strcmp(name, memcap_policy_names[i])) return i;
    return -1;
}
