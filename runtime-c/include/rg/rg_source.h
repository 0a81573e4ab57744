/* rg_source.h - packet sources: where a stack's frames come from.
 *
 * A source is an ops table (rg_source_ops) plus its state.  The driver opens
 * the one the command line names (a capture file, a live interface, DPDK
 * ports...), asks it for bursts of frames and feeds them to the stack; it
 * knows nothing else about the source.  The ops table also declares the
 * source's command-line options (rg_source_opt: the model is DPDK's
 * RTE_PMD_REGISTER_PARAM_STRING) and what it can do (RG_SRC_CAP_*): the
 * driver's option parser and --help read them from there.  Adding a source is
 * one new file with one `const rg_source_ops` and one line in the registry
 * (rg_source.c).
 *
 * Frames (rg_frame, rg_pcap.h) returned by next_burst stay valid until the
 * next call of next_burst or close on the same source: a source may hand out
 * its own buffers (libpcap's, a DPDK mbuf's data) without copying. */
#ifndef RG_SOURCE_H
#define RG_SOURCE_H

#include <pthread.h>
#include <signal.h>

#include "rg_common.h"
#include "rg_pcap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The default burst: what one next_burst call returns at most unless the
 * caller asks for less (DPDK's customary RX burst). */
#define RG_BURST 32
/* The most frames a file or live source returns at once (--burst N): a
 * caller's out array holds min(max, RG_BURST_MAX) frames (DPDK and a live
 * source on several interfaces return at most RG_BURST). */
#define RG_BURST_MAX 256

/* What a source is asked to open. */
typedef struct rg_source_cfg {
    const char *name;   /* what to read: a file ("-" = stdin), an interface, a port list */
    const char *filter; /* BPF filter expression (sources that support one), NULL = none */
    uint32_t snaplen;   /* 0 = the source's default (whole frames) */
    int promisc;        /* live: promiscuous mode */
    int argc;           /* source-specific arguments (DPDK: EAL arguments) */
    char **argv;
    /* set asynchronously (SIGINT, --duration) to make a blocking next_burst
     * return soon; a source polls it */
    volatile sig_atomic_t *stop;
    /* RX queues wanted per port, one per worker (0 or 1: one).  A source that
     * cannot spread a port's frames over queues in hardware distributes them
     * in software (see the queue ops below); rg_source_ops.queues says how. */
    unsigned queues;
    uint32_t buffer_mb; /* live: the kernel's capture buffer in MB (0 = the source's default) */
    /* inline mode (rg_source_ops.forward): the frames go on to a peer.  live:
     * peer names the second interface (frames of each go out of the other);
     * dpdk: the ports pair up in list order (0<->1, 2<->3...), peer unused */
    int inline_mode;
    const char *peer;
    /* --xdp-mode, for a source that attaches an XDP program (afxdp): "auto", "native" or
     * "generic"; the driver owns the flag because --xdp (the stack's program) takes it too */
    const char *xdp_mode;
    /* every option of the source's table given on the command line (rg_source_opt),
     * by name, in order: rg_source_opt_get reads them */
    const struct rg_source_kv *kv;
    unsigned nkv;
} rg_source_cfg;

/* One source option as given: its name (without --) and value ("1" for a flag). */
typedef struct rg_source_kv {
    const char *name, *value;
} rg_source_kv;

/* The value of source option `name` (the last one given), or dflt. */
const char *rg_source_opt_get(const rg_source_cfg *cfg, const char *name, const char *dflt);

/* How a source option's value is checked and stored. */
enum {
    RG_SOPT_STR,  /* any string (a const char * member) */
    RG_SOPT_NUM,  /* a decimal number in [min, max] (a uint32_t member) */
    RG_SOPT_FLAG, /* no value (an int member, set to 1) */
};
/* rg_source_opt.flags */
enum {
    RG_SOPT_NAME = 1, /* names what to read, instead of the CAPTURE argument (--iface) */
    /* with --inline only (--peer); help says what it names: "--peer names HELP of --inline" */
    RG_SOPT_INLINE = 2,
};
/* rg_source_opt.off: the value is only in rg_source_cfg.kv (a source's own option) */
#define RG_SOPT_KV_ONLY ((size_t)-1)

/* An option a source takes: the driver adds --NAME to its command line and --help, checks
 * the value (a number's range) and hands it to the source in rg_source_cfg: in the member at
 * `off` (offsetof(rg_source_cfg, ...), of the kind's type) and always in cfg->kv.  Two
 * sources may declare the same name (the same kind); an option of a source other than the
 * chosen one is a usage error. */
typedef struct rg_source_opt {
    const char *name;  /* --NAME */
    const char *arg;   /* the value's placeholder in --help ("BPF", "N"); NULL for a flag */
    const char *help;  /* --help's text (may hold newlines: each line is indented) */
    int kind;          /* RG_SOPT_STR / NUM / FLAG */
    uint64_t min, max; /* RG_SOPT_NUM: the range */
    size_t off;        /* the rg_source_cfg member, or RG_SOPT_KV_ONLY */
    unsigned flags;    /* RG_SOPT_NAME, RG_SOPT_INLINE */
} rg_source_opt;

/* The options of a source capturing on an interface (live, packet): the interface, a BPF
 * filter, the snap length and promiscuous mode, the same words and meaning in each. */
#define RG_SOPTS_CAPTURE                                                                           \
    {"iface", "IF", "the interface (the same as CAPTURE)", RG_SOPT_STR,                            \
     0,       0,    offsetof(rg_source_cfg, name),         RG_SOPT_NAME},                          \
        {"filter",                                                                                 \
         "BPF",                                                                                    \
         "capture only what this BPF expression matches",                                          \
         RG_SOPT_STR,                                                                              \
         0,                                                                                        \
         0,                                                                                        \
         offsetof(rg_source_cfg, filter),                                                          \
         0},                                                                                       \
        {"snaplen",                                                                                \
         "N",                                                                                      \
         "bytes captured per frame (default: whole frames)",                                       \
         RG_SOPT_NUM,                                                                              \
         1,                                                                                        \
         INT32_MAX,                                                                                \
         offsetof(rg_source_cfg, snaplen),                                                         \
         0},                                                                                       \
    {                                                                                              \
        "promisc", NULL, "promiscuous mode", RG_SOPT_FLAG, 0, 0, offsetof(rg_source_cfg, promisc), \
            0                                                                                      \
    }

/* What a source can do (rg_source_ops.caps); the driver tests these, never a source's name. */
enum {
    /* --inline: it forwards frames to a peer (forward, and origin/forward_one for workers) */
    RG_SRC_CAP_INLINE = 1,
    /* its frames come on queues it feeds on cores of its own (next_burst_q, launch: DPDK's
     * lcores): --pin does not apply, and no reader sees the input order (--write --workers) */
    RG_SRC_CAP_QUEUES = 2,
    /* timestamps taken at arrival (live traffic): frames can be lost before the stack, and
     * the summary reports the source's drop count; without it, the frames carry recorded
     * timestamps (a capture) */
    RG_SRC_CAP_ARRIVAL_TS = 4,
    /* it reads a capture file that --bench can load in memory (rg_capture_load) */
    RG_SRC_CAP_BENCH = 8,
    /* it takes the arguments after -- (cfg->argc/argv: DPDK's EAL arguments) */
    RG_SRC_CAP_ARGS = 16,
};

/* Counters a source keeps (what it saw; drops by the kernel or the NIC). */
typedef struct rg_source_stats {
    uint64_t frames;  /* frames returned */
    uint64_t bytes;   /* their caplen */
    uint64_t dropped; /* frames the source knows were lost before us (kernel, NIC queues) */
    /* inline mode */
    uint64_t tx_frames;   /* frames forwarded to the peer */
    uint64_t tx_failed;   /* frames the peer would not take (queue full, send error) */
    uint64_t tx_withheld; /* frames not forwarded: the verdict dropped them */
} rg_source_stats;

typedef struct rg_source rg_source;

/* Return values of next_burst besides n >= 0 frames (0 = none right now: a
 * live source's timeout; the caller may run timers and ask again). */
enum { RG_SRC_END = -1, RG_SRC_ERROR = -2 };

typedef struct rg_source_ops {
    const char *name; /* "file", "live", "dpdk": what --io names */
    const char *help; /* one line for --help */
    unsigned caps;    /* RG_SRC_CAP_* */
    /* its options, terminated by a NULL name (NULL: none) */
    const rg_source_opt *opts;
    /* what to read when neither CAPTURE nor a RG_SOPT_NAME option names it (dpdk: "all");
     * NULL: it must be named */
    const char *default_name;
    /* what names it, for the usage error when nothing does ("the interface (--iface IF)") */
    const char *name_what;
    /* RG_SRC_CAP_QUEUES: where its workers run, for --pin's usage error */
    const char *cores_what;
    /* RG_SRC_CAP_ARGS: what the arguments after -- are ("DPDK's EAL arguments") */
    const char *args_what;
    /* Checks the options given (cfg: name, options, inline_mode; no stop, no queues) before
     * anything opens: NULL or a usage error's text.  NULL: nothing to check. */
    const char *(*check)(const rg_source_cfg *cfg);
    /* Open; NULL with a message in err on failure. */
    rg_source *(*open)(const rg_source_cfg *cfg, char *err, size_t errlen);
    /* Up to max frames into out[]: n >= 0, RG_SRC_END (no more frames ever),
     * RG_SRC_ERROR (message from error; frames returned before stay valid
     * for the caller's flush and summary). */
    int (*next_burst)(rg_source *s, rg_frame *out, unsigned max);
    /* The link of the source's first interface (frames carry their own dlt). */
    const rg_linkinfo *(*link)(const rg_source *s);
    void (*stats)(const rg_source *s, rg_source_stats *st);
    const char *(*error)(const rg_source *s);
    void (*close)(rg_source *s);
    /* ---- multi-queue sources (DPDK, packet); NULL elsewhere ----
     * Opened with cfg->queues = N > 1, the source delivers frames on N
     * queues, one per worker, with next_burst_q (safe to call concurrently
     * for different q; frames valid until the next call for the same q).
     * queues() says how they are fed: RG_SRCQ_HW (the NIC spreads frames
     * over N RX queues by symmetric RSS) or RG_SRCQ_SW (one RX queue per
     * port; pump(), called by one thread, reads up to max frames, hashes
     * them with rg_rss (RG_RSS_L3) and hands them to the queues; it returns
     * the frames handed over, 0 when none came, or RG_SRC_END/ERROR).
     * launch() starts fn(arg) on the source's own core for worker i (DPDK:
     * a worker lcore; packet: a thread of its own), join() waits for it. */
    int (*queues)(const rg_source *s);
    int (*next_burst_q)(rg_source *s, unsigned q, rg_frame *out, unsigned max);
    int (*pump)(rg_source *s, unsigned max);
    int (*launch)(rg_source *s, unsigned i, int (*fn)(void *), void *arg, char *err, size_t errlen);
    void (*join)(rg_source *s, unsigned i);
    /* frames handed to queue q so far (the per-worker counts) */
    uint64_t (*queue_frames)(const rg_source *s, unsigned q);
    /* Inline mode (opened with cfg->inline_mode): the last burst's frames
     * out[0..n) go to their peer, in order, except those with drop[i] != 0
     * (released).  Called once per burst, after the stack ran on it and
     * before the next next_burst: a frame's edits in place are sent.  The
     * sources that forward without copying (DPDK: the same mbufs) hand the
     * frames over here.  NULL: the source cannot forward. */
    void (*forward)(rg_source *s, const uint8_t *drop, unsigned n);
    /* Inline mode with workers (the verdicts come after the next bursts): the
     * interface frame i of the last burst came from, and one frame, kept by the
     * caller, sent on to the peer of interface `from` (drop: counted withheld).
     * Called by the thread that reads.  NULL: not supported. */
    unsigned (*origin)(const rg_source *s, unsigned i);
    void (*forward_one)(rg_source *s, const rg_frame *f, unsigned from, int drop);
    /* Inline mode on a multi-queue source: as forward, for the last burst of
     * queue q (next_burst_q), called by that queue's worker (DPDK: TX queue q
     * of the peer ports).  NULL: not supported. */
    void (*forward_q)(rg_source *s, unsigned q, const uint8_t *drop, unsigned n);
    /* How it reads, for the summary's dropped line (afxdp: the XDP mode, zero-copy or copy,
     * the queues and the kernel's counters), into buf.  NULL: nothing to say. */
    void (*detail)(const rg_source *s, char *buf, size_t n);
} rg_source_ops;

enum { RG_SRCQ_ONE = 0, RG_SRCQ_HW = 1, RG_SRCQ_SW = 2 };

/* A source: its ops first, then the implementation's own state (sources
 * embed this as their first member). */
struct rg_source {
    const rg_source_ops *ops;
};

/* The registered sources linked into this binary, NULL-terminated, in --help order. */
extern const rg_source_ops *rg_sources[];

/* The source named `name`, NULL if none is compiled in. */
const rg_source_ops *rg_source_find(const char *name);
/* For a source linked only into some binaries and missing from this one: how to get it;
 * else NULL. */
const char *rg_source_absent(const char *name);
/* The source that takes the arguments after -- (RG_SRC_CAP_ARGS), in this binary or one
 * linked on request, and what they are (*what); NULL if none. */
const char *rg_source_args_owner(const char **what);
/* The names of the sources with capability cap (this binary's, then those linked on
 * request), "a, b or c", into buf. */
void rg_source_names_with(unsigned cap, char *buf, size_t n);

/* For a source's launch/join (RG_SRC_CAP_QUEUES on threads of its own): fn(arg) on a new
 * thread *th, *started set; 0, or -1 with "WHO: cannot start worker I" in err. */
int rg_source_thread_start(pthread_t *th, int *started, int (*fn)(void *), void *arg,
                           const char *who, unsigned i, char *err, size_t errlen);
/* Waits for the thread rg_source_thread_start started, if it did. */
void rg_source_thread_join(pthread_t *th, int *started);
/* Waits up to ms for fd to be readable (a socket a source reads): 1 readable, 0 not yet (or
 * a signal), -1 with "WHO: poll: ..." or "WHO: the socket reports an error ..." in err. */
int rg_source_poll(int fd, int ms, const char *who, char *err, size_t errlen);

/* The capture-file source (pcap and pcapng, rg_pcap.h). */
extern const rg_source_ops rg_source_file;
/* A live interface through libpcap (rg_source_live.c). */
extern const rg_source_ops rg_source_live;
/* A live interface through AF_PACKET TPACKET_V3 rings and PACKET_FANOUT
 * (rg_source_packet.c). */
extern const rg_source_ops rg_source_packet;
/* A live interface through AF_XDP sockets (rg_source_afxdp.c, build/librgafxdp.a: built
 * only when pkg-config finds libxdp and libbpf, linked only with --io afxdp, referred to
 * weakly as DPDK's is). */
extern const rg_source_ops rg_source_afxdp;
/* DPDK ports (rg_source_dpdk.c, build/librgdpdk.a: built only when
 * pkg-config finds libdpdk, linked only with --io dpdk; rg_source.c refers
 * to it weakly, see there). */
extern const rg_source_ops rg_source_dpdk;

#ifdef __cplusplus
}
#endif
#endif /* RG_SOURCE_H */
