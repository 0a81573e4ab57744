/* rg_opts.c - the driver's command line: usage and option parsing.  The
 * packet sources and the NFs come from their registries (rg_sources,
 * rg_nf_table): --help lists them and each NF's flag becomes an option. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rg/rg_community_id.h"
#include "rg/rg_obs.h"
#include "rg_ctlsec.h"
#include "rg_live.h"
#include "rg_driver.h"
#include "rg_rules_ctl.h"
#include "rg_out.h"

enum { MAX_NF_FLAGS = 32 };

/* The first declaration of source option `name` in the registry, NULL if none. */
static const rg_source_opt *source_opt_decl(const char *name)
{
    for (const rg_source_ops *const *s = rg_sources; *s; s++)
        for (const rg_source_opt *p = (*s)->opts; p && p->name; p++)
            if (!strcmp(p->name, name)) return p;
    return NULL;
}

/* The source's own declaration of option `name`, NULL if it takes none of that name. */
static const rg_source_opt *source_opt_of(const rg_source_ops *src, const char *name)
{
    for (const rg_source_opt *p = src->opts; p && p->name; p++)
        if (!strcmp(p->name, name)) return p;
    return NULL;
}

/* A byte size as the options take it (64M); 0 = none. */
static const char *size_text(uint64_t v, char *buf, size_t n)
{
    static const char unit[] = "KMGT";
    int u = -1;
    if (v == 0 || v == UINT64_MAX) return "none";
    while (u < 3 && v % 1024 == 0) {
        v /= 1024;
        u++;
    }
    snprintf(buf, n, "%llu%s", (unsigned long long)v, u < 0 ? "" : (char[]){unit[u], 0});
    return buf;
}

/* The options of every source, each name once (the first source declaring it), in the
 * registry's order: their --help lines. */
static void source_options_usage(FILE *out)
{
    for (const rg_source_ops *const *s = rg_sources; *s; s++)
        for (const rg_source_opt *p = (*s)->opts; p && p->name; p++) {
            if (source_opt_decl(p->name) != p) continue; /* listed with its first source */
            char head[64];
            snprintf(head, sizeof head, "--%s%s%s", p->name, p->arg ? " " : "",
                     p->arg ? p->arg : "");
            fprintf(out, "  %-16s %s%s: ", head, (*s)->name,
                    p->flags & RG_SOPT_INLINE ? ", --inline" : "");
            for (const char *h = p->help; *h; h++) {
                fputc(*h, out);
                if (*h == '\n') fputs("                   ", out);
            }
            fputc('\n', out);
        }
}

static void usage(FILE *out, const char *prog, const rg_stack_desc *stack)
{
    char ra[32], fl[32];
    fprintf(out,
            "usage: %s CAPTURE [options]\n"
            "       %s --io SOURCE [SOURCE-OPTIONS] [options] [-- SOURCE-ARGUMENTS]\n"
            "Run the %s stack on the frames of a packet source (the file source: a pcap or\n"
            "pcapng capture, CAPTURE '-' = stdin).\n"
            "  --io NAME        the packet source (default %s):\n",
            prog, prog, stack->name, rg_sources[0]->name);
    for (const rg_source_ops *const *s = rg_sources; *s; s++)
        fprintf(out, "                     %-12s %s\n", (*s)->name, (*s)->help);
    source_options_usage(out);
    fputs("  --count N        stop after N frames\n"
          "  --duration S     stop after S seconds (SIGINT and SIGTERM stop too: the\n"
          "                   instances are flushed and the summary printed)\n",
          out);
    const char *args_what;
    const char *args_src = rg_source_args_owner(&args_what);
    if (args_src) fprintf(out, "  -- ARGS          %s: %s\n", args_src, args_what);
    fputs("  --workers N      N stack contexts on N threads, frames split by the symmetric\n"
          "                   RSS hash of their outer addresses (default 1); dpdk: N RX\n"
          "                   queues per port with symmetric RSS, or (ports without RSS)\n"
          "                   a distributor on the main lcore, workers on N worker lcores\n"
          "                   --bench --workers N: the capture split by that hash before\n"
          "                   timing, N contexts on N threads (one JSON line); NFs:\n"
          "                   a chain per worker, outputs merged into one context's files\n"
          "  --pin            pin the reader and each worker to a core of their own,\n"
          "                   round-robin over the allowed cores (default: pinned when\n"
          "                   there are workers + 1 allowed cores; not for sources with\n"
          "                   cores of their own)\n"
          "  --inline         forward every frame to the peer unless a verdict drops it:\n"
          "                   live: between --iface and --peer, both ways; dpdk: between\n"
          "                   the ports paired in list order (0<->1, 2<->3...), same mbufs\n",
          out);
    fprintf(out,
            "  --nf NAME        what observes the stack (default " RG_NF_COUNT "):\n"
            "                     %-12s the summary's counters only\n"
            "                     %-12s the same without counting handler calls\n",
            RG_NF_COUNT, RG_NF_NONE);
    for (const rg_nf_desc *const *d = rg_nf_table; *d; d++)
        fprintf(out, "                     %-12s %s\n", rg_nf_desc_name(*d), rg_nf_desc_help(*d));
    fputs("  --nf PATH.so     an NF built as a shared object (rg_nf_api.h)\n"
          "  --chain FILE     a chain of NFs (YAML: docs/nf.md), run after --nf's in order\n"
          "  --control PATH   a UNIX socket: rubikgen ctl PATH attach|detach|list|rules\n"
          "                   (mode 0600: only this user and root may use it)\n"
          "  --control-mode M   the socket's mode (octal, e.g. 0660)\n"
          "  --control-group G  members of group G may use the socket too (and own it)\n"
          "  --nf-path DIR    ctl attach loads .so files under DIR only (repeatable;\n"
          "                   default: this binary's directory); each file and its\n"
          "                   parents must belong to root or this user, not be group- or\n"
          "                   world-writable\n"
          "  --rules-path DIR the same for ctl rules reload's rule sets\n"
          "  --rules-so PATH  (a --rules-reload build) run this rule set, reloaded on SIGHUP\n",
          out);
    fputs("  --ipfix [tcp://]HOST:PORT  export every ended flow as IPFIX (UDP, or TCP)\n", out);
    fputs("  --rotate SIZE|TIME  rename each NF's line output (OUT/flowstats.jsonl...) to\n"
          "                   NAME.YYYYmmddTHHMMSSZ and start a new one before it passes\n"
          "                   SIZE (100M, 10K, 1G) or once it is TIME old (30s, 10min, 1h,\n"
          "                   1d); one of each may be given.  SIGHUP and rubikgen ctl\n"
          "                   PATH reopen reopen them (logrotate)\n",
          out);
    fputs("  --stats-interval S  append the live counters (ctl stats's JSON) to\n"
          "                   OUT/stats.jsonl every S seconds, and once at the end\n"
          "  --stats-fd FD    write those lines to file descriptor FD too (every S\n"
          "                   seconds, default 0.5; rubikgen run's progress bar)\n"
          "  --metrics ADDR:PORT  serve the counters over HTTP, GET /metrics (Prometheus)\n",
          out);
    fputs("  --xdp OBJ        attach the stack's XDP program (rubikgen build --xdp) to the\n"
          "                   capture interface: its rules drop in the kernel, and the flows\n"
          "                   given drop-flow or bypass verdicts go into its flow maps (a\n"
          "                   bypassed frame is dropped there: it never reaches the capture);\n"
          "                   their kernel counts join their records when they end\n"
          "  --xdp-mode M     generic (or skb), native or auto (default: native where the\n"
          "                   driver has it) for --xdp and for --io afxdp's program\n"
          "  --xdp-flows L,.. the layers the program keys (STACK_xdp.json flow_layers)\n",
          out);
    fputs("  --out DIR        output directory of the NFs that write files (default rg-out)\n"
          "  --write FILE     write the packets that pass (the verdict of handlers and NFs:\n"
          "                   not drop), after the stack ran, to a pcap (nanosecond) file\n"
          "  --reject-rate N  answer at most N rejected packets a second (RSTs, ICMP\n"
          "                   unreachables; by packet time; default 100, 0: no limit)\n",
          out);
    for (const rg_nf_desc *const *d = rg_nf_table; *d; d++)
        if ((*d)->flag)
            fprintf(out, "  --%-14s %s: %s\n", (*d)->flag, rg_nf_desc_name(*d), (*d)->flag_help);
    fprintf(out,
            "  --cap N          live instances per layer (default 262144; the least\n"
            "                   recently used is evicted when a layer is full)\n"
            "  --cap LAYER=N    the same for one layer (repeatable)\n"
            "  --seed N         hash seed (default random)\n"
            "  --no-timeouts    never expire idle instances\n"
            "  --linger S       closed connections linger S seconds (decimals allowed; 0 =\n"
            "                   none): their late packets are counted on them (default:\n"
            "                   each layer's spec `linger:`, 5 s for TCP)\n"
            "  --max-clock-jump S  a packet dated more than S seconds from the flow clock\n"
            "                   (either way) is a clock jump: counted, processed at the\n"
            "                   clock, which it does not move, until 16 packets (or 60 s)\n"
            "                   agree on its new time base (default 300; 0 = no guard)\n"
            "  --community-id-seed N  the seed (0..65535, default 0) of the Community ID v1\n"
            "                   (community_id) on the stock NFs' flow records\n"
            "  --memcap SIZE    memory cap per worker (context) on reassembly buffers and\n"
            "                   flow records together (SIZE: bytes or 64K, 64M, 1G; 0 =\n"
            "                   none); default: the stack's (--memcap-* apart, see below)\n"
            "  --memcap-reassembly SIZE  the cap on reassembly buffers alone (default %s)\n"
            "  --memcap-flows SIZE  the cap on flow-table records alone (default %s)\n"
            "  --memcap-policy P  when a cap would be passed: drop-flow, evict-oldest,\n"
            "                   bypass or ignore (default %s)\n"
            "  --overlap-policy P  which copy of overlapping bytes a sequence keeps: first,\n"
            "                   last, linux, bsd, windows or solaris, for every layer, or\n"
            "                   LAYER=P[,LAYER=P...] (e.g. tcp=last); default: the specs'\n"
            "  --summary FMT    summary on stdout: text (a few lines), full (text with the\n"
            "                   per-layer tables; the default) or json\n"
            "  --stats          runtime counters on stderr\n"
            "  --checksums      verify the checksums the specs declare; bad ones are counted\n"
            "                   per layer (checksum_bad in the summary; default off)\n"
            "  --bench          time the processing of the capture loaded in memory; one JSON\n"
            "                   line on stdout (--nf " RG_NF_COUNT " or " RG_NF_NONE ")\n"
            "  --passes N       passes of --bench (default %d; the best one counts)\n"
            "  --burst N        frames per burst, 1 to 256 (default 32): the stack parses\n"
            "                   each frame of a burst to its flow-table keys and prefetches\n"
            "                   them, then processes the frames in order (1: no prefetch;\n"
            "                   only while a flow table exceeds 1 MiB, unless\n"
            "                   --prefetch-always; --prefetch-records: the flow records\n"
            "                   too, a second pass over the burst)\n"
            "  --help           this text\n",
            size_text(stack->memcap_reassembly, ra, sizeof ra),
            size_text(stack->memcap_flows, fl, sizeof fl),
            rg_memcap_policy_name(stack->memcap_policy), DEFAULT_PASSES);
}

/* Decimal number in [min, max]. */
static int parse_num(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (*s < '0' || *s > '9') return -1; /* strtoull would accept "-1" and spaces */
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max) return -1;
    *out = v;
    return 0;
}

/* A size: digits with an optional K, M, G or T suffix (powers of 1024, an
 * optional trailing B: 64M, 64MB, 1G); 0 means no cap (UINT64_MAX). */
static int parse_size(const char *s, uint64_t *out)
{
    if (*s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        end++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        end++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        end++;
        break;
    case 't':
    case 'T':
        shift = 40;
        end++;
        break;
    default:
        break;
    }
    if (*end == 'b' || *end == 'B') end++;
    if (*end || (shift && v > (UINT64_MAX >> shift))) return -1;
    v <<= shift;
    *out = v ? v : UINT64_MAX;
    return 0;
}

/* --cap N for every layer, or LAYER=N for one; 0 or -1 (bad value). */
static int parse_cap(const char *arg, const rg_stack_desc *stack, opts *o)
{
    const char *eq = strchr(arg, '=');
    uint64_t v;
    if (!eq) return parse_num(arg, 1, UINT32_MAX, &o->cap);
    size_t len = (size_t)(eq - arg);
    unsigned i = 0;
    while (i < stack->nlayers && i < RG_DRIVER_MAX_LAYERS &&
           (strlen(stack->layers[i].name) != len || strncmp(stack->layers[i].name, arg, len)))
        i++;
    if (i == stack->nlayers || i == RG_DRIVER_MAX_LAYERS || parse_num(eq + 1, 1, UINT32_MAX, &v))
        return -1;
    o->layer_cap[i] = (uint32_t)v;
    return 0;
}

/* --overlap-policy P for every layer with a sequence, or LAYER=P[,LAYER=P...]; 0 or -1. */
static int parse_overlap(const char *arg, const rg_stack_desc *stack, opts *o)
{
    static const char *const names[] = {"first", "last", "linux", "bsd", "windows", "solaris"};
    const char *p = arg;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        const char *val = eq ? eq + 1 : p;
        const size_t vlen = n - (size_t)(val - p);
        unsigned pol = 0;
        while (pol < 6 && (strlen(names[pol]) != vlen || strncmp(names[pol], val, vlen)))
            pol++;
        if (pol == 6) return -1;
        if (!eq) { /* every layer */
            for (unsigned i = 0; i < stack->nlayers && i < RG_DRIVER_MAX_LAYERS; i++)
                o->overlap_policy[i] = (uint8_t)(pol + 1);
        } else {
            const size_t len = (size_t)(eq - p);
            unsigned i = 0;
            while (i < stack->nlayers && i < RG_DRIVER_MAX_LAYERS &&
                   (strlen(stack->layers[i].name) != len || strncmp(stack->layers[i].name, p, len)))
                i++;
            if (i == stack->nlayers || i == RG_DRIVER_MAX_LAYERS) return -1;
            o->overlap_policy[i] = (uint8_t)(pol + 1);
        }
        o->overlap_set = 1;
        p += n;
        if (*p == ',') p++;
    }
    return o->overlap_set ? 0 : -1;
}

enum {
    O_NF = 256,
    O_IO,
    O_OUT,
    O_CAP,
    O_SEED,
    O_NOTO,
    O_CLOCK,
    O_CIDSEED,
    O_LINGER,
    O_SUMMARY,
    O_STATS,
    O_BENCH,
    O_PASSES,
    O_COUNT,
    O_DURATION,
    O_WORKERS,
    O_CHAIN,
    O_CONTROL,
    O_WRITE,
    O_PIN,
    O_INLINE,
    O_CHECKSUMS,
    O_MEMCAP,
    O_MEMCAP_RA,
    O_MEMCAP_FL,
    O_MEMCAP_POL,
    O_OVERLAP,
    O_RULES_SO, /* rg_rules_ctl.h */
    O_CTLSEC,   /* rg_ctlsec.h: --control-mode, --control-group, --nf-path, --rules-path */
    O_LIVE,     /* rg_live.h: --stats-interval, --stats-fd, --metrics */
    O_ROTATE,   /* --rotate SIZE|TIME (rg_out.h) */
    O_BURST,
    O_PREFETCH_ALWAYS,
    O_PREFETCH_RECORDS,
    O_IPFIX, /* --ipfix: the ipfix NF after --nf's (rg_chain.c) */
    O_REJECT_RATE,
    O_XDP,
    O_XDP_MODE,
    O_XDP_FLOWS,
    O_NF_FLAG,                           /* O_NF_FLAG + i: the flag of rg_nf_table[i] */
    O_SRC_OPT = O_NF_FLAG + MAX_NF_FLAGS /* O_SRC_OPT + i: srcopt[i] */
};

enum { MAX_SRC_DECLS = 64 };
/* The source options, each name once (its first declaration): they are the long options
 * O_SRC_OPT + i. */
static const rg_source_opt *srcopt[MAX_SRC_DECLS];

/* The options: the fixed ones, then one per NF flag, then the sources' options. */
static void build_longopts(struct option *lo, size_t n)
{
    static const struct option fixed[] = {
        {"nf", required_argument, NULL, O_NF},
        {"io", required_argument, NULL, O_IO},
        {"out", required_argument, NULL, O_OUT},
        {"cap", required_argument, NULL, O_CAP},
        {"seed", required_argument, NULL, O_SEED},
        {"no-timeouts", no_argument, NULL, O_NOTO},
        {"max-clock-jump", required_argument, NULL, O_CLOCK},
        {"community-id-seed", required_argument, NULL, O_CIDSEED},
        {"linger", required_argument, NULL, O_LINGER},
        {"summary", required_argument, NULL, O_SUMMARY},
        {"stats", no_argument, NULL, O_STATS},
        {"bench", no_argument, NULL, O_BENCH},
        {"passes", required_argument, NULL, O_PASSES},
        {"count", required_argument, NULL, O_COUNT},
        {"duration", required_argument, NULL, O_DURATION},
        {"workers", required_argument, NULL, O_WORKERS},
        {"chain", required_argument, NULL, O_CHAIN},
        {"control", required_argument, NULL, O_CONTROL},
        {"write", required_argument, NULL, O_WRITE},
        {"pin", no_argument, NULL, O_PIN},
        {"inline", no_argument, NULL, O_INLINE},
        {"checksums", no_argument, NULL, O_CHECKSUMS},
        {"memcap", required_argument, NULL, O_MEMCAP},
        {"memcap-reassembly", required_argument, NULL, O_MEMCAP_RA},
        {"memcap-flows", required_argument, NULL, O_MEMCAP_FL},
        {"memcap-policy", required_argument, NULL, O_MEMCAP_POL},
        {"overlap-policy", required_argument, NULL, O_OVERLAP},
        {"rules-so", required_argument, NULL, O_RULES_SO},
        {"control-mode", required_argument, NULL, O_CTLSEC},
        {"control-group", required_argument, NULL, O_CTLSEC},
        {"nf-path", required_argument, NULL, O_CTLSEC},
        {"rules-path", required_argument, NULL, O_CTLSEC},
        {"stats-interval", required_argument, NULL, O_LIVE},
        {"stats-fd", required_argument, NULL, O_LIVE},
        {"metrics", required_argument, NULL, O_LIVE},
        {"burst", required_argument, NULL, O_BURST},
        {"reject-rate", required_argument, NULL, O_REJECT_RATE},
        {"prefetch-always", no_argument, NULL, O_PREFETCH_ALWAYS},
        {"prefetch-records", no_argument, NULL, O_PREFETCH_RECORDS},
        {"ipfix", required_argument, NULL, O_IPFIX},
        {"xdp", required_argument, NULL, O_XDP},
        {"xdp-mode", required_argument, NULL, O_XDP_MODE},
        {"xdp-flows", required_argument, NULL, O_XDP_FLOWS},
        {"rotate", required_argument, NULL, O_ROTATE},
        {"help", no_argument, NULL, 'h'},
    };
    size_t k = 0;
    for (; k < sizeof fixed / sizeof fixed[0]; k++)
        lo[k] = fixed[k];
    for (size_t i = 0; rg_nf_table[i] && i < MAX_NF_FLAGS && k + 1 < n; i++)
        if (rg_nf_table[i]->flag)
            lo[k++] = (struct option){rg_nf_table[i]->flag, no_argument, NULL, O_NF_FLAG + (int)i};
    size_t j = 0;
    for (const rg_source_ops *const *s = rg_sources; *s; s++)
        for (const rg_source_opt *p = (*s)->opts; p && p->name && j < MAX_SRC_DECLS; p++)
            if (source_opt_decl(p->name) == p && k + 1 < n) {
                srcopt[j] = p;
                lo[k++] = (struct option){p->name,
                                          p->kind == RG_SOPT_FLAG ? no_argument : required_argument,
                                          NULL, O_SRC_OPT + (int)j++};
            }
    lo[k] = (struct option){NULL, 0, NULL, 0};
}

/* --xdp's conditions; RG_OK or 1 (message printed). */
static int check_xdp(const opts *o)
{
    const char *why = NULL;
    if (!&rg_xdp_impl)
        why = "this binary has no XDP support (build it with rubikgen run --xdp, which links "
              "libbpf)";
    else if (strcmp(o->io, "live") && strcmp(o->io, "packet"))
        why = "it attaches to the capture interface: --io live or --io packet with --iface";
    else if (o->bench)
        why = "it needs a capture run, not --bench";
    else if (o->workers > 1 || o->workers_set)
        why = "it runs with one stack context (no --workers)";
    else if (o->inline_mode)
        why = "a bypassed frame would not be forwarded (no --inline)";
    if (!why) return RG_OK;
    fprintf(stderr, "%s: --xdp: %s\n", o->prog, why);
    return 1;
}

/* The first source other than src that declares option `name`. */
static const rg_source_ops *source_opt_owner(const rg_source_ops *src, const char *name)
{
    for (const rg_source_ops *const *s = rg_sources; *s; s++)
        if (*s != src && source_opt_of(*s, name)) return *s;
    return NULL;
}

/* The source options given, checked against o->src's table and stored in o->scfg (the
 * members they declare); RG_OK or 1 (message printed). */
static int apply_source_opts(opts *o)
{
    for (unsigned i = 0; i < o->scfg.nkv; i++) {
        const rg_source_kv *kv = &o->skv[i];
        const rg_source_opt *p = source_opt_of(o->src, kv->name);
        const rg_source_opt *d = source_opt_decl(kv->name);
        if (d && (d->flags & RG_SOPT_INLINE) && !o->inline_mode) {
            fprintf(stderr, "%s: --%s names %s of --inline\n", o->prog, d->name, d->help);
            return 1;
        }
        if (!p) { /* another source's: name what it applies to */
            const rg_source_ops *owner = source_opt_owner(o->src, kv->name);
            const rg_source_opt *q = owner ? source_opt_of(owner, kv->name) : NULL;
            if (!owner || !q) { /* getopt knows only declared names: not reached */
                fprintf(stderr, "%s: --%s: no source takes it\n", o->prog, kv->name);
                return 1;
            }
            char list[256] = "";
            size_t used = 0, k = 0, total = 0;
            const rg_source_opt *r;
            /* its plain options together (--filter, --snaplen...), a name or inline one alone */
            for (r = owner->opts; !(q->flags) && r->name; r++)
                total += !r->flags;
            for (r = owner->opts; r->name && used < sizeof list; r++) {
                if (q->flags ? r != q : r->flags != 0) continue;
                k++;
                const char *sep = k == 1 ? "" : k == total ? " and " : ", ";
                int w = snprintf(list + used, sizeof list - used, "%s--%s", sep, r->name);
                if (w < 0) break;
                used += (size_t)w;
            }
            fprintf(stderr, "%s: %s appl%s to --io %s\n", o->prog, list, k > 1 ? "y" : "ies",
                    owner->name);
            return 1;
        }
        if (p->off == RG_SOPT_KV_ONLY) continue;
        char *field = (char *)&o->scfg + p->off;
        if (p->kind == RG_SOPT_STR) {
            memcpy(field, &kv->value, sizeof kv->value);
        } else if (p->kind == RG_SOPT_FLAG) {
            const int one = 1;
            memcpy(field, &one, sizeof one);
        } else { /* the chosen source's range (another source's may differ) */
            uint64_t v = 0;
            if (parse_num(kv->value, p->min, p->max > UINT32_MAX ? UINT32_MAX : p->max, &v)) {
                fprintf(stderr, "%s: invalid value '%s' for --%s (see --help)\n", o->prog,
                        kv->value, p->name);
                return 1;
            }
            const uint32_t u = (uint32_t)v;
            memcpy(field, &u, sizeof u);
        }
    }
    return RG_OK;
}

int rg_parse_opts(int argc, char **argv, const rg_stack_desc *stack, opts *o)
{
    struct option longopts[64 + MAX_NF_FLAGS + MAX_SRC_DECLS]; /* fixed, NF flags, sources' */
    build_longopts(longopts, sizeof longopts / sizeof longopts[0]);
    int flags[MAX_NF_FLAGS] = {0};
    memset(o, 0, sizeof *o);
    o->prog = argc > 0 && argv[0] ? argv[0] : "rg";
    o->io = rg_sources[0]->name; /* the registry's first: the file source */
    o->scfg.kv = o->skv;
    o->nf = RG_NF_COUNT;
    o->out = "rg-out";
    o->full = 1; /* run directly, the whole summary (rubikgen run asks for text) */
    o->passes = DEFAULT_PASSES;
    o->burst = RG_BURST;
    o->reject_rate = 100;
    optind = 0; /* full reset: rg_main may run more than once in a process */
    /* everything after a "--" is the source's (DPDK's EAL arguments): getopt
     * would mix it with CAPTURE */
    for (int i = 1; i < argc; i++)
        if (argv[i] && !strcmp(argv[i], "--")) {
            o->scfg.argc = argc - i - 1;
            o->scfg.argv = argv + i + 1;
            argc = i;
            break;
        }
    int c;
    int li = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, &li)) != -1) {
        const char *bad = NULL;
        switch (c) {
        case 'h':
            usage(stdout, o->prog, stack);
            return 1;
        case O_NF:
            o->nf = optarg;
            o->nfd = rg_nf_find(rg_nf_table, optarg);
            /* a shared object: a path (a '/' or a .so name), loaded when the run starts */
            o->nf_is_path =
                !o->nfd && (strchr(optarg, '/') ||
                            (strlen(optarg) > 3 && !strcmp(optarg + strlen(optarg) - 3, ".so")));
            if (!o->nfd && !o->nf_is_path && strcmp(optarg, RG_NF_COUNT) &&
                strcmp(optarg, RG_NF_NONE))
                bad = "--nf";
            break;
        case O_CHAIN:
            o->chain_file = optarg;
            break;
        case O_IPFIX:
            o->ipfix = optarg;
            break;
        case O_ROTATE: {
            char err[256];
            if (rg_out_rotate_option(optarg, err, sizeof err)) {
                fprintf(stderr, "%s: %s\n", o->prog, err);
                return EXIT_USAGE;
            }
            break;
        }
        case O_CONTROL:
            o->control = optarg;
            break;
        case O_RULES_SO:
            rg_rules_so_option(optarg);
            break;
        case O_CTLSEC: {
            char err[512];
            if (rg_ctlsec_option(longopts[li].name, optarg, err, sizeof err)) {
                fprintf(stderr, "%s: %s\n", o->prog, err);
                return EXIT_USAGE;
            }
            break;
        }
        case O_LIVE: {
            char err[512];
            if (rg_live_option(longopts[li].name, optarg, err, sizeof err)) {
                fprintf(stderr, "%s: %s\n", o->prog, err);
                return EXIT_USAGE;
            }
            break;
        }
        case O_IO:
            o->io = optarg;
            if (!rg_source_find(optarg)) {
                const char *how = rg_source_absent(optarg);
                if (how) {
                    fprintf(stderr, "%s: --io %s: %s\n", o->prog, optarg, how);
                    return EXIT_USAGE;
                }
                bad = "--io";
            }
            break;
        case O_INLINE:
            o->inline_mode = 1;
            break;
        case O_COUNT:
            if (parse_num(optarg, 1, UINT64_MAX, &o->count)) bad = "--count";
            break;
        case O_WORKERS: {
            uint64_t v;
            if (parse_num(optarg, 1, 64, &v)) bad = "--workers";
            o->workers = (unsigned)v;
            o->workers_set = 1;
            break;
        }
        case O_PIN:
            o->pin = 1;
            break;
        case O_DURATION: {
            uint64_t v;
            if (parse_num(optarg, 1, UINT64_MAX / NS_PER_S, &v)) bad = "--duration";
            o->duration_ns = v * NS_PER_S;
            break;
        }
        case O_OUT:
            o->out = optarg;
            break;
        case O_WRITE:
            o->write = optarg;
            break;
        case O_CAP:
            if (parse_cap(optarg, stack, o)) bad = "--cap";
            break;
        case O_SEED:
            if (parse_num(optarg, 0, UINT64_MAX, &o->seed)) bad = "--seed";
            break;
        case O_NOTO:
            o->no_timeouts = 1;
            break;
        case O_LINGER: {
            char *end = NULL;
            const double sec = strtod(optarg, &end);
            if (end == optarg || *end || !(sec >= 0 && sec <= 86400))
                bad = "--linger";
            else
                o->linger_ns = sec > 0 ? (uint64_t)(sec * 1e9 + 0.5) | 1u : RG_LINGER_NONE;
            break;
        }
        case O_CLOCK: {
            uint64_t sec;
            if (parse_num(optarg, 0, UINT64_MAX / NS_PER_S, &sec))
                bad = "--max-clock-jump";
            else
                o->max_clock_jump_ns = sec ? sec * NS_PER_S : UINT64_MAX;
            break;
        }
        case O_CIDSEED: { /* the NFs read it when they make a record (rg_nf_endpoints_of) */
            uint64_t seed;
            if (parse_num(optarg, 0, UINT16_MAX, &seed))
                bad = "--community-id-seed";
            else
                rg_community_id_seed = (uint16_t)seed;
            break;
        }
        case O_MEMCAP: { /* one budget: split as the stack's defaults are (half each if none) */
            uint64_t v;
            if (parse_size(optarg, &v)) {
                bad = "--memcap";
                break;
            }
            if (v == UINT64_MAX) {
                o->memcap_reassembly = o->memcap_flows = UINT64_MAX;
                break;
            }
            uint64_t ra = stack->memcap_reassembly, fl = stack->memcap_flows;
            if (!ra || !fl) ra = fl = 1;
            o->memcap_reassembly = (uint64_t)((double)v * (double)ra / ((double)ra + (double)fl));
            if (!o->memcap_reassembly) o->memcap_reassembly = 1;
            o->memcap_flows = v - o->memcap_reassembly ? v - o->memcap_reassembly : 1;
            break;
        }
        case O_MEMCAP_RA:
            if (parse_size(optarg, &o->memcap_reassembly)) bad = "--memcap-reassembly";
            break;
        case O_MEMCAP_FL:
            if (parse_size(optarg, &o->memcap_flows)) bad = "--memcap-flows";
            break;
        case O_OVERLAP:
            if (parse_overlap(optarg, stack, o)) bad = "--overlap-policy";
            break;
        case O_MEMCAP_POL: {
            int p = rg_memcap_policy_parse(optarg);
            if (p < 0)
                bad = "--memcap-policy";
            else
                o->memcap_policy = p + 1;
            break;
        }
        case O_SUMMARY:
            o->json = !strcmp(optarg, "json");
            o->full = !strcmp(optarg, "full");
            if (!o->json && !o->full && strcmp(optarg, "text")) bad = "--summary";
            break;
        case O_STATS:
            o->stats = 1;
            break;
        case O_BENCH:
            o->bench = 1;
            break;
        case O_CHECKSUMS:
            o->checksums = 1;
            break;
        case O_PASSES:
            if (parse_num(optarg, 1, 1000000, &o->passes)) bad = "--passes";
            o->passes_set = 1;
            break;
        case O_REJECT_RATE:
            if (parse_num(optarg, 0, 1000000000, &o->reject_rate)) bad = "--reject-rate";
            break;
        case O_BURST:
            if (parse_num(optarg, 1, RG_BURST_MAX, &o->burst)) bad = "--burst";
            break;
        case O_PREFETCH_ALWAYS:
            o->prefetch_always = 1;
            break;
        case O_PREFETCH_RECORDS:
            o->prefetch_records = 1;
            break;
        case O_XDP:
            o->xdp = optarg;
            break;
        case O_XDP_MODE:
            o->xdp_mode = !strcmp(optarg, "generic") || !strcmp(optarg, "skb") ? RG_XDP_GENERIC
                          : !strcmp(optarg, "native")                          ? RG_XDP_NATIVE
                          : !strcmp(optarg, "auto")                            ? RG_XDP_AUTO
                                                                               : -1;
            if (o->xdp_mode < 0) bad = "--xdp-mode";
            /* the same mode for a source that attaches a program of its own (afxdp) */
            o->scfg.xdp_mode = o->xdp_mode == RG_XDP_GENERIC  ? "generic"
                               : o->xdp_mode == RG_XDP_NATIVE ? "native"
                                                              : "auto";
            break;
        case O_XDP_FLOWS:
            o->xdp_flows = optarg;
            break;
        default:
            if (c >= O_NF_FLAG && c < O_NF_FLAG + MAX_NF_FLAGS) {
                flags[c - O_NF_FLAG] = 1;
                break;
            }
            if (c >= O_SRC_OPT && c < O_SRC_OPT + MAX_SRC_DECLS && srcopt[c - O_SRC_OPT]) {
                const rg_source_opt *p = srcopt[c - O_SRC_OPT];
                if (o->scfg.nkv == RG_DRIVER_MAX_SRC_OPTS) {
                    fprintf(stderr, "%s: too many source options\n", o->prog);
                    return EXIT_USAGE;
                }
                /* a number is checked once the source is known (apply_source_opts) */
                o->skv[o->scfg.nkv++] =
                    (rg_source_kv){p->name, p->kind == RG_SOPT_FLAG ? "1" : optarg};
                break;
            }
            /* getopt_long printed the reason */
            fprintf(stderr, "Try '%s --help'.\n", o->prog);
            return EXIT_USAGE;
        }
        if (bad) {
            fprintf(stderr, "%s: invalid value '%s' for %s (see --help)\n", o->prog, optarg, bad);
            return EXIT_USAGE;
        }
    }
    o->src = rg_source_find(o->io);
    if (apply_source_opts(o)) return EXIT_USAGE;
    const int named = o->scfg.name != NULL; /* by the source's name option (--iface) */
    if (argc - optind > 1 || (argc - optind == 1 && named)) {
        fprintf(stderr, "%s: expected one CAPTURE argument (see --help)\n", o->prog);
        return EXIT_USAGE;
    }
    if (argc - optind == 1) o->scfg.name = argv[optind];
    if (!o->scfg.name) o->scfg.name = o->src->default_name;
    o->capture = o->scfg.name;
    if (!o->capture) {
        if (o->src->name_what)
            fprintf(stderr, "%s: --io %s: name %s\n", o->prog, o->io, o->src->name_what);
        else
            fprintf(stderr, "%s: expected one CAPTURE argument (see --help)\n", o->prog);
        return EXIT_USAGE;
    }
    o->scfg.inline_mode = o->inline_mode;
    const unsigned caps = o->src->caps;
    char names[128];
    if (o->bench && !(caps & RG_SRC_CAP_BENCH)) {
        rg_source_names_with(RG_SRC_CAP_BENCH, names, sizeof names);
        fprintf(stderr, "%s: --bench reads a capture file (--io %s)\n", o->prog, names);
        return EXIT_USAGE;
    }
    if (o->pin && (caps & RG_SRC_CAP_QUEUES)) {
        fprintf(stderr, "%s: --pin: %s, pinned already\n", o->prog,
                o->src->cores_what ? o->src->cores_what : "the source's workers run on its cores");
        return EXIT_USAGE;
    }
    if (o->write && o->bench) {
        fprintf(stderr, "%s: --write runs on a capture run, not with --bench\n", o->prog);
        return EXIT_USAGE;
    }
    if (o->write && o->workers > 1 && (caps & RG_SRC_CAP_QUEUES)) {
        /* the workers read their own queues: no reader sees the input's order */
        fprintf(stderr,
                "%s: --write with --workers reads files and interfaces, not %s "
                "queues (no input order)\n",
                o->prog, o->io);
        return EXIT_USAGE;
    }
    if (o->inline_mode && !(caps & RG_SRC_CAP_INLINE)) {
        rg_source_names_with(RG_SRC_CAP_INLINE, names, sizeof names);
        fprintf(stderr,
                "%s: --inline forwards frames between interfaces or ports: --io %s "
                "(a capture file's passed frames: --write)\n",
                o->prog, names);
        return EXIT_USAGE;
    }
    const char *why = o->src->check ? o->src->check(&o->scfg) : NULL;
    if (why) {
        fprintf(stderr, "%s: %s\n", o->prog, why);
        return EXIT_USAGE;
    }
    if (!(caps & RG_SRC_CAP_ARGS) && o->scfg.argc) {
        const char *what = NULL;
        const char *owner = rg_source_args_owner(&what);
        if (owner)
            fprintf(stderr, "%s: arguments after -- are %s (--io %s)\n", o->prog, what, owner);
        else
            fprintf(stderr, "%s: no source takes arguments after --\n", o->prog);
        return EXIT_USAGE;
    }
    if (o->passes_set && !o->bench) {
        fprintf(stderr, "%s: --passes needs --bench\n", o->prog);
        return EXIT_USAGE;
    }
    if ((o->nf_is_path || o->chain_file) && o->bench && o->workers_set) {
        fprintf(stderr, "%s: --bench --workers runs without NFs (--nf PATH.so, --chain)\n",
                o->prog);
        return EXIT_USAGE;
    }
    if (o->control && o->bench) {
        fprintf(stderr, "%s: --control needs a capture run, not --bench\n", o->prog);
        return EXIT_USAGE;
    }
    if (o->bench && o->nfd) {
        fprintf(stderr, "%s: --bench runs with --nf " RG_NF_COUNT " or " RG_NF_NONE ", not %s\n",
                o->prog, o->nf);
        return EXIT_USAGE;
    }
    if (o->xdp && check_xdp(o)) return EXIT_USAGE;
    /* an NF's flag given with another NF is ignored */
    for (size_t i = 0; o->nfd && rg_nf_table[i] && i < MAX_NF_FLAGS; i++)
        if (rg_nf_table[i] == o->nfd) o->nf_flag = flags[i];
    return 0;
}

int rg_memcap_room(const rg_stack_desc *stack, const void *ctx, char *err, size_t errlen)
{
    const rg_stats *st = stack->stats ? stack->stats(ctx) : NULL;
    if (!st || !st->mem_cap_flows || st->mem_policy == RG_MEMCAP_IGNORE) return RG_OK;
    uint64_t fixed = 0;
    unsigned tables = 0;
    for (unsigned i = 0; i < stack->nlayers; i++) {
        fixed += st->layer[i].mem.flow_bytes;
        tables += st->layer[i].mem.flow_bytes != 0;
    }
    if (fixed < st->mem_cap_flows) return RG_OK;
    snprintf(err, errlen,
             "the flow memcap (%" PRIu64 " bytes) leaves no room for instances: the key indexes "
             "of the %u flow tables alone take %" PRIu64 " bytes (give --memcap-flows or "
             "--memcap more, or 0 for no cap)",
             st->mem_cap_flows, tables, fixed);
    return 1;
}
