/* rg_obs.h - helpers for observers (rg_obs, rg_api.h): what the driver's
 * counters and every NF read from a stack's descriptors the same way. */
#ifndef RG_OBS_H
#define RG_OBS_H

#include "rg_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per handler, the index of its payload argument: the first argument of
 * kind RG_VAL_BYTES named "data" (-1: the handler carries no payload).
 * malloc'ed (at least one entry); NULL when out of memory. */
int16_t *rg_obs_data_args(const rg_stack_desc *stack);

/* The "data" bytes of a call, or NULL if it has none. */
static inline const rg_bytes *rg_obs_call_data(const int16_t *data_arg, const rg_stack_desc *stack,
                                               const rg_call *c)
{
    if (c->handler >= stack->nhandlers) return NULL;
    int i = data_arg[c->handler];
    if (i < 0 || c->args[i].kind != RG_VAL_BYTES) return NULL;
    return &c->args[i].bytes;
}

/* "accept", "evicted", "expired", "flushed" (RG_CLOSE_REASONS); "unknown"
 * otherwise. */
const char *rg_close_name(int reason);

/* "drop-flow", "evict-oldest", "bypass", "ignore" (enum rg_memcap_policy);
 * "unknown" otherwise.  parse: the policy of a name, -1 if none. */
const char *rg_memcap_policy_name(int policy);
int rg_memcap_policy_parse(const char *name);

/* "first", "last", "linux", "bsd", "windows", "solaris" (enum rg_seq_policy: the overlap
 * policies); "unknown" otherwise. */
const char *rg_seq_policy_name(int policy);

#ifdef __cplusplus
}
#endif
#endif /* RG_OBS_H */
