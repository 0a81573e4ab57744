/* rg_nfchain.h - NF chains (rg_nf_api.h): NFs loaded from shared objects or
 * built in, attached to one stack context in chain order.  Private to
 * runtime-c/main/.
 *
 * The chain is an observer (rg_obs): while the stack processes a packet it
 * collects the events some NF of the chain subscribed to (a deep copy: the
 * stack's bytes and keys are only valid during its callbacks).  At the end
 * of the packet (rg_chain_batch_end, called by the feeder after process and
 * after an expire call, and by the driver after the final flush) it calls
 * the NFs in chain order, each with the packet's events it subscribed to
 * (the Rubik paper's method 1: run to completion, no locks).  A verdict
 * RG_DROP or RG_DROP_FLOW stops the later NFs for that packet.
 *
 * Attach and detach happen between batches (the control socket's requests
 * are applied by the packet loop).  Per-flow state is allocated per NF when
 * the NF first needs it for a flow (so an NF attached mid-flow gets state
 * for existing flows at their next event) and freed after the flow's close
 * event was dispatched. */
#ifndef RG_NFCHAIN_H
#define RG_NFCHAIN_H

#include <stddef.h>
#include <stdint.h>

#include "rg/rg_api.h"
#include "rg/rg_nf_api.h"

enum { RG_CHAIN_MAX = 32 }; /* NFs in one chain */
/* events between NFs: declared by the chain file, at most this many, with this many fields */
enum { RG_CHAIN_EVENTS = 64, RG_CHAIN_EV_FIELDS = 16 };

typedef struct rg_chain rg_chain;

/* An empty chain for stack; outdir: the "out" given to NFs that name none.
 * NULL when out of memory. */
rg_chain *rg_chain_new(const rg_stack_desc *stack, const char *outdir);

/* Attach the NF nf (a stock NF's name, or a path to a shared object: one
 * containing a '/' or ending in ".so") at the end of the chain, under name
 * (NULL: the NF's own name) with its configuration.  RG_OK, or an error
 * with a message in err naming the NF and what is wrong (missing symbol,
 * ABI version, a subscription the stack cannot serve, init's error); the
 * chain is then unchanged. */
int rg_chain_attach(rg_chain *ch, const char *nf, const char *name, const rg_nf_kv *cfg,
                    unsigned ncfg, char *err, size_t errlen);

/* rg_chain_attach, for an NF of a chain file that may raise the chain's events of the bits
 * set in raises and subscribe to those in subscribes (bit = the event's id). */
int rg_chain_attach_ev(rg_chain *ch, const char *nf, const char *name, const rg_nf_kv *cfg,
                       unsigned ncfg, uint64_t raises, uint64_t subscribes, char *err,
                       size_t errlen);

/* Events between NFs: declare the chain file's event name with its payload fields (names and
 * RG_VAL_* kinds, in order), before attaching the NFs that use it; its id is the order of
 * declaration.  RG_OK, or RG_EINVAL (twice, too many) / RG_ENOMEM with err. */
int rg_chain_declare_event(rg_chain *ch, const char *name, unsigned nfields,
                           const char *const *fnames, const uint8_t *kinds, char *err,
                           size_t errlen);
/* The id of the chain's event name, or -1. */
int rg_chain_event_id(const rg_chain *ch, const char *name);
/* RG_OK when event id has a field called field of type ("num" or "bytes"), else RG_EINVAL. */
int rg_chain_event_field_check(const rg_chain *ch, int id, const char *field, const char *type);

/* Detach the NF called name: fini (its outputs written), its per-flow
 * states released.  RG_OK, RG_EINVAL (no such NF) or RG_EIO (fini failed:
 * the message in err; the NF is detached all the same). */
int rg_chain_detach(rg_chain *ch, const char *name, char *err, size_t errlen);

/* One line per NF, in chain order: "NAME\tSOURCE\n" into buf (truncated);
 * returns the NFs. */
unsigned rg_chain_list(const rg_chain *ch, char *buf, size_t n);
unsigned rg_chain_size(const rg_chain *ch);

/* The observer that collects events (self = ch). */
rg_obs rg_chain_obs(rg_chain *ch);

/* Dispatch the events collected since the last batch (void *: the feeder's
 * hook).  The verdict of the batch: rg_chain_verdict. */
void rg_chain_batch_end(void *ch);
int rg_chain_verdict(const rg_chain *ch);
/* The injections (RG_INJECT_*, rg_nf_host.inject) the NFs asked for since the last take, and
 * none after it (ch NULL: none).  The driver takes them after each frame. */
unsigned rg_chain_take_inject(rg_chain *ch);

/* A frame's verdict: the stack's (fed: an entry layer took it; a frame none takes passes),
 * raised to the chain's (ch NULL: none), which the stack's verdict has seen once it saw a
 * call.  What one context, the workers and --inline forward or write by. */
static inline int rg_frame_verdict(const rg_stack_desc *stack, void *ctx, const rg_chain *ch,
                                   int fed)
{
    if (!fed) return RG_PASS;
    int v = stack->verdict ? stack->verdict(ctx) : RG_PASS;
    if (ch && rg_chain_verdict(ch) > v) v = rg_chain_verdict(ch);
    return v;
}

/* Detach every NF (in chain order) and free the chain: RG_OK, or RG_EIO
 * when an NF's fini failed (printed on stderr with prog). */
int rg_chain_free(rg_chain *ch, const char *prog);

/* ---- --workers (every worker its own chain) ----
 * Each worker's NFs write into OUT/.rg-worker-K of every output directory OUT (the chain's,
 * and every "out" an NF is given); rg_wmerge (rg_wmerge.c) merges them into OUT at the end. */
#define RG_WORKER_DIR ".rg-worker-"

/* Notes a folder an NF writes into, for the summary's list of files written (rg_wrote.c). */
void rg_wrote_dir(const char *dir);
enum { RG_WDIRS_MAX = 64 };
typedef struct rg_wdirs {
    void *mu; /* a pthread_mutex_t: attach runs on the workers' threads */
    char *dir[RG_WDIRS_MAX];
    unsigned n;
} rg_wdirs;
/* Remember dir (once); RG_OK or RG_ENOMEM (full or out of memory). */
int rg_wdirs_add(rg_wdirs *d, const char *dir);
/* rm -r (what a run that did not end left), quietly. */
void rg_rmtree(const char *dir);
/* mkdir -p: rg_mkdirs (rg/rg_common.h) */

/* Make ch worker `worker` of nworkers: its NFs get the numbers (rg_nf_host) and write into
 * their out directories' worker part (created), the directories remembered in dirs. */
int rg_chain_set_worker(rg_chain *ch, unsigned worker, unsigned nworkers, rg_wdirs *dirs, char *err,
                        size_t errlen);
/* uids: each context numbers its instances 1, 2, 3... in creation order; worker K of N
 * (--workers) gives its i-th instance the uid (i - 1) * N + K + 1, so a uid is unique in the
 * whole run when it is written (one context and --workers 1: 1, 2, 3...).  What the NFs'
 * records and ctl flows show. */
static inline uint64_t rg_uid_global(uint64_t uid, unsigned worker, unsigned nworkers)
{
    return nworkers > 1 && uid ? (uid - 1) * nworkers + worker + 1 : uid;
}
/* ch's NFs' uid of its context's instance uid */
uint64_t rg_chain_uid(const rg_chain *ch, uint64_t uid);
/* The input's frame number of the packet about to be processed (events carry it as pkt_no
 * instead of the context's own count: the same numbers with 1 or N workers). */
void rg_chain_set_pkt(rg_chain *ch, uint64_t pkt_no);

/* ---- the driver's parts ---- */

struct opts;
/* The run's chain: --nf (a stock NF or PATH.so, with its flag), then --chain's NFs, writing
 * into o->out; worker: of o->workers, with the output folders in dirs (NULL: one context).
 * NULL with the message in err ("--nf X: why" or the chain file's "FILE:LINE:COL: ..."). */
rg_chain *rg_chain_open(const struct opts *o, const rg_stack_desc *stack, unsigned worker,
                        rg_wdirs *dirs, char *err, size_t errlen);

/* Attach the NFs of a chain file (rg_chainfile.c), in order.  RG_OK, or an
 * error "FILE:LINE:COL: error: ..." in err. */
int rg_chainfile_load(rg_chain *ch, const char *path, char *err, size_t errlen);

/* ---- the control socket (rg_control.c) ----
 * A thread accepts connections on a UNIX socket and reads one request per
 * connection ("attach NF [NAME=]... ", "detach NAME", "list"); the packet
 * loop applies pending requests between packets (rg_control_poll: an atomic
 * load when none is pending) and the thread writes the reply. */
typedef struct rg_control rg_control;
rg_control *rg_control_open(const char *path, char *err, size_t errlen);
void rg_control_poll(rg_control *c, rg_chain *ch);
/* --workers N: nw workers apply every request, each to its own chain (and `rules` requests
 * to the rule sets of its own context, the one whose counters are st); a request is answered
 * when all have applied it. */
rg_control *rg_control_open_workers(const char *path, unsigned nw, char *err, size_t errlen);
struct rg_stats;
void rg_control_poll_worker(rg_control *c, rg_chain *ch, unsigned worker,
                            const struct rg_stats *st);
void rg_control_close(rg_control *c);

#endif /* RG_NFCHAIN_H */
