/* rg_live.h - a running binary's counters and flow table, asked while it runs (issue 30):
 * `rubikgen ctl SOCK stats|flows` (rg_control.c hands those requests here), --stats-interval
 * (OUT/stats.jsonl), --stats-fd (the same lines on a pipe: rubikgen run's progress) and
 * --metrics ADDR:PORT (Prometheus over HTTP, rg_metrics.c).
 *
 * Nothing is read across threads while the packet path writes it: whoever asks (the control,
 * stats or HTTP thread) posts a request and waits; each worker, between two bursts
 * (rg_live_poll: one atomic load when none is pending), copies its own counters into its
 * snapshot slot, or lists its own flow table, under the request's lock.  A snapshot so is one
 * worker's counters at one burst boundary: never torn, and never behind an earlier one.
 * Private to runtime-c/main/. */
#ifndef RG_LIVE_H
#define RG_LIVE_H

#include <stdint.h>
#include <stdio.h>

#include "rg_counter.h"

struct feeder;
struct opts;
typedef struct rg_flowtab rg_flowtab;
typedef struct rg_live rg_live;

/* What one worker (or the one context) shows. */
typedef struct rg_live_view {
    const rg_stack_desc *stack;
    const rg_counter *counter;
    const struct feeder *fd;
    void *ctx;
    rg_flowtab *ft;     /* the flow table (rg_flowdump.c); NULL: not tracked */
    struct rg_xdp *xdp; /* --xdp: the program's counters (rg_xdp.h); NULL: none */
} rg_live_view;

/* --stats-interval S, --stats-fd FD, --metrics ADDR:PORT; 0, or -1 with the reason in err. */
int rg_live_option(const char *name, const char *value, char *err, size_t errlen);
/* Does the run need a live object (any of those options, or --control)? */
int rg_live_wanted(const struct opts *o);

/* nw views (set before the workers start), or NULL (out of memory; message in err). The
 * threads of --stats-interval/--metrics start in rg_live_start. */
rg_live *rg_live_new(const struct opts *o, unsigned nw, char *err, size_t errlen);
void rg_live_set_view(rg_live *l, unsigned worker, rg_live_view v);
/* The reading thread of --workers decides the clock jumps: published after each burst. */
void rg_live_reader(rg_live *l, uint64_t fwd, uint64_t back, uint64_t resyncs, uint64_t lost);
/* 0, or -1 (message in err: the --metrics address). */
int rg_live_start(rg_live *l, char *err, size_t errlen);
/* Between two bursts of worker w: answer a pending request. */
void rg_live_poll(rg_live *l, unsigned worker);
/* After the final flush (the workers have stopped; their counters folded): the last snapshot,
 * the last line of stats.jsonl and of --stats-fd, then the threads stop. */
void rg_live_final(rg_live *l);
void rg_live_free(rg_live *l);

/* The process's live object (the control thread's), NULL: none. */
rg_live *rg_live_current(void);

/* A control request for this module? ("stats..." or "flows..."). */
int rg_live_handles(const char *req);
/* Answer control request req (n bytes) on fd: "ok\n" and the text, or "error: ...\n". */
void rg_live_control(rg_live *l, const char *req, size_t n, int fd);
/* A control reply's bytes, all of them (EINTR retried; a peer gone: the rest dropped), and an
 * error reply ("error: MSG\n"); shared by the requests answered here and rg_trace_ctl.c. */
void rg_ctl_write_all(int fd, const char *s, size_t n);
void rg_ctl_reply_error(int fd, const char *msg);

/* The Prometheus text exposition of a fresh snapshot into a malloc'ed string (*len bytes);
 * NULL with the reason in err. */
char *rg_live_prometheus(rg_live *l, size_t *len, char *err, size_t errlen);

/* ---- the flow table (rg_flowdump.c) ---- */

/* A table of worker's (of nworkers: the uids it shows are the run's) open instances, fed by an
 * observer around inner (the chain's). */
rg_flowtab *rg_flowtab_new(const rg_stack_desc *stack, unsigned worker, unsigned nworkers,
                           const rg_obs *inner);
/* The observer to give the stack (valid while ft lives). */
const rg_obs *rg_flowtab_obs(rg_flowtab *ft);
void rg_flowtab_free(rg_flowtab *ft);
/* The feeder's batch_end (after every packet) while ft lives: refreshes the copies of the
 * instances the packet touched, then runs end(self) (the chain's), given here. */
void rg_flowtab_packet_end(void *ft);
void rg_flowtab_chain_end(rg_flowtab *ft, void (*end)(void *self), void *self);

typedef struct rg_flowfilter rg_flowfilter;
/* A filter expression (docs/operating.md "Asking the flow table"); NULL with the reason in
 * err (and its column). */
rg_flowfilter *rg_flowfilter_parse(const char *expr, char *err, size_t errlen);
void rg_flowfilter_free(rg_flowfilter *f);

/* A growing string. */
typedef struct rg_sbuf {
    char *s;
    size_t n, cap;
    int oom;
} rg_sbuf;
void rg_sbuf_printf(rg_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Append ft's open instances of layer (NULL: any) that filter (NULL: all) takes, as JSON
 * lines, at most limit of them (in uid order); the number appended. */
uint64_t rg_flowtab_dump(const rg_flowtab *ft, const char *layer, const rg_flowfilter *filter,
                         uint64_t limit, rg_sbuf *out);

/* "src":...,"dst":...,"sport":...,"dport":...,"key":{...} of a key of layer l (side a first,
 * then side p), as rg_flowtab_dump writes them (the packet trace's instances). */
void rg_key_json(rg_sbuf *b, const rg_layer_desc *l, const uint8_t *key_a, const uint8_t *key_p);

/* ---- the packet trace (rg_trace_ctl.c) ---- */

/* Answer `trace N TIMEOUT` (fields checked by rg_trace_args): arm, wait, reply on fd. */
void rg_trace_request(const rg_stack_desc *stack, unsigned n, unsigned timeout_ms, int fd);
/* What a traced packet's record lists as its NFs (self: the thread's rg_chain). */
unsigned rg_trace_chain_nfs(const void *chain, char *buf, size_t n);

#endif /* RG_LIVE_H */
