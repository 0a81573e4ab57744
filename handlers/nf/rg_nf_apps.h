/* rg_nf_apps.h - the "apps" NF's application sources (not for users).
 *
 * The apps NF (rg_nf_apps.c) writes one line output per application protocol, OUT/NAME.jsonl,
 * each filled by one source: a file rg_nf_apps_NAME.c that defines `const rg_app rg_app_NAME`
 * and one X(NAME) in RG_APPS below.  A source says which of the stack's handlers it reads
 * (its `role` of each, by argument names, as the sni NF does: the NF works with any stack
 * whose handlers name their arguments so) and gets their calls and the closes of the
 * instances it asked to hear of; the NF gives it the output file and what every source
 * needs: argument lookup, the transport flow of the packet being processed, times. */
#ifndef RG_NF_APPS_H
#define RG_NF_APPS_H

#include "rg_nf_int.h"

typedef struct rg_nf_apps rg_nf_apps;

typedef struct rg_app {
    const char *name; /* the output is OUT/<name>.jsonl */
    /* the source's role for handler h (a number of its own), 0: not read */
    int (*role)(const rg_stack_desc *stack, const rg_handler_desc *h);
    /* its state, writing to out (owned by the NF); NULL with a message in err */
    void *(*create)(rg_nf_apps *nf, FILE *out, char *err, size_t errlen);
    /* a call of a handler whose role is role (> 0) */
    void (*on_call)(void *st, rg_nf_apps *nf, const rg_call *c, int role);
    /* an instance ended (every layer's: the source ignores those it does not track) */
    void (*on_close)(void *st, rg_nf_apps *nf, const rg_flow_info *f, int reason);
    /* the run ended: write what is still open and free the state */
    void (*finish)(void *st, rg_nf_apps *nf);
} rg_app;

/* The sources, in output order: one X(NAME) per rg_nf_apps_NAME.c. */
#define RG_APPS(X) X(dns)

/* The stack the NF runs on. */
const rg_stack_desc *rg_apps_stack(const rg_nf_apps *nf);
/* The argument of c named name of kind kind (RG_VAL_NUM, RG_VAL_BYTES), NULL: none. */
const rg_val *rg_apps_arg(const rg_nf_apps *nf, const rg_call *c, const char *name, int kind);
/* Whether handler h has an argument name of kind kind. */
int rg_apps_has_arg(const rg_handler_desc *h, const char *name, int kind);
/* The number argument name of c, dflt when it has none. */
uint64_t rg_apps_num(const rg_nf_apps *nf, const rg_call *c, const char *name, uint64_t dflt);
/* The transport instance (a TCP or UDP layer's) the packet being processed last reached, as
 * the flow a message belongs to: its uid (0: none) and, when ep is not NULL, its endpoints
 * (with its Community ID).  Valid during the calls of that packet. */
uint64_t rg_apps_transport(rg_nf_apps *nf, rg_nf_endpoints *ep);
/* A packet time as Zeek's logs write "ts": seconds since the epoch, with microseconds. */
void rg_apps_ts(FILE *out, uint64_t ts_ns);
/* Record the NF's first error (out of memory, ...). */
void rg_apps_fail(rg_nf_apps *nf, const char *what);

#define RG_APP_DECLARE(n) extern const rg_app rg_app_##n;
RG_APPS(RG_APP_DECLARE)
#undef RG_APP_DECLARE

#endif /* RG_NF_APPS_H */
