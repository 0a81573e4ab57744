/* rg_summary.c - the driver's summary on stdout (text or JSON) and the
 * per-layer instance counts it shares with --bench. */
#include <inttypes.h>
#include <string.h>

#include "rg/rg_json.h"
#include "rg/rg_obs.h"
#include "rg_driver.h"
#include "rg_nfchain.h"
#include "rg_rules_out.h"

uint64_t rg_total_flows(const rg_stack_desc *stack, const rg_counts *n)
{
    uint64_t flows = 0;
    for (unsigned i = 0; i < stack->nlayers; i++)
        if (stack->layers[i].has_instance) flows += rg_layer_flows(&n->layer[i]);
    return flows;
}

void rg_live_before_flush(const rg_stack_desc *stack, rg_counts *n, uint64_t *live)
{
    n->uid_mark = n->uid_max; /* the flush closes nothing during a packet */
    for (unsigned i = 0; i < stack->nlayers; i++) {
        const rg_layer_counts *l = &n->layer[i];
        /* a lingering instance is closed (its close comes at the flush, as accept) */
        live[i] =
            l->opened - l->closed[0] - l->closed[1] - l->closed[2] - l->closed[3] - l->lingering;
    }
}

static uint64_t state_bytes(const rg_stats *st, unsigned i)
{
    return st && i < st->nlayers ? st->layer[i].inst.record_bytes : 0;
}

/* What the memcaps saw of layer i (issue 14: everything lost is said): peak accounted bytes,
 * cap hits, each policy's actions, instances evicted to make room, packets of dropped
 * instances, sequence-limit hits, overlaps with the same and with different data. */
static void layer_memory_json(const rg_stats *st, unsigned i)
{
    static const char *const pol[RG_MEMCAP_POLICIES] = RG_MEMCAP_POLICY_NAMES;
    if (!st || i >= st->nlayers) {
        fputs(",\"memory\":null", stdout);
        return;
    }
    const rg_mem_stats *m = &st->layer[i].mem;
    const rg_seq_stats *q = &st->layer[i].seq;
    const uint64_t ovl = q->rexmit + q->overlap;
    printf(",\"memory\":{\"peak_reassembly_bytes\":%" PRIu64 ",\"peak_flow_bytes\":%" PRIu64
           ",\"cap_hits\":%" PRIu64 ",\"actions\":{",
           m->seq_peak, m->flow_peak, m->cap_hits);
    for (int p = 0; p < RG_MEMCAP_POLICIES; p++)
        printf("%s\"%s\":%" PRIu64, p ? "," : "", pol[p], m->act[p]);
    printf("},\"evicted\":%" PRIu64 ",\"evicted_closed\":%" PRIu64 ",\"dropped_packets\":%" PRIu64
           ",\"seq_limit_hits\":%" PRIu64 ",\"seq_bytes_dropped\":%" PRIu64
           ",\"overlaps\":{\"same\":%" PRIu64 ",\"different\":%" PRIu64 "}}",
           m->evicted, m->evicted_closed, m->dropped_pkts, q->buffer_full, q->bytes_dropped,
           ovl > q->conflict ? ovl - q->conflict : 0, q->conflict);
}

void rg_memcap_json(const rg_stats *st)
{
    if (!st) {
        fputs("\"memcap\":null,", stdout);
        return;
    }
    fputs("\"memcap\":{\"reassembly\":", stdout);
    if (st->mem_cap_seq)
        printf("%" PRIu64, st->mem_cap_seq);
    else
        fputs("null", stdout);
    fputs(",\"flows\":", stdout);
    if (st->mem_cap_flows)
        printf("%" PRIu64, st->mem_cap_flows);
    else
        fputs("null", stdout);
    printf(",\"policy\":\"%s\",\"peak_reassembly_bytes\":%" PRIu64 ",\"peak_flow_bytes\":%" PRIu64
           "},",
           rg_memcap_policy_name(st->mem_policy), st->mem_seq_peak, st->mem_flow_peak);
}

void rg_layers_json(const rg_stack_desc *stack, const rg_counts *n, const uint64_t *live,
                    const rg_stats *st)
{
    fputs("\"layers\":{", stdout);
    int first = 1;
    for (unsigned i = 0; i < stack->nlayers; i++) {
        if (!stack->layers[i].has_instance) continue;
        const rg_layer_counts *l = &n->layer[i];
        if (!first) fputc(',', stdout);
        first = 0;
        rg_json_string(stdout, stack->layers[i].name);
        printf(":{\"opened\":%" PRIu64 ",\"closed\":{", l->opened);
        for (int r = 0; r < 4; r++)
            printf("%s\"%s\":%" PRIu64, r ? "," : "", rg_close_name(r), l->closed[r]);
        printf("},\"live_at_end\":%" PRIu64 ",\"evicted\":%" PRIu64 ",\"one_packet\":%" PRIu64
               ",\"flows\":%" PRIu64 ",\"state_bytes\":%" PRIu64,
               live[i], l->closed[RG_CLOSE_EVICTED], l->one_packet, rg_layer_flows(l),
               state_bytes(st, i));
        if (st && i < st->nlayers) /* packets stopped at the lookup by a flow verdict */
            printf(",\"dropped_by_verdict\":%" PRIu64 ",\"bypassed\":%" PRIu64,
                   st->layer[i].dropped_by_verdict, st->layer[i].bypassed);
        layer_memory_json(st, i);
        fputc('}', stdout);
    }
    fputc('}', stdout);
}

static void layers_text(const rg_stack_desc *stack, const rg_counts *n, const uint64_t *live,
                        const rg_stats *st)
{
    printf("instances per layer (live_at_end: before the final flush; one_packet: closed in the "
           "packet that opened them, not flows; state_bytes: per instance)\n"
           "  %-14s %10s %10s %10s %10s %10s %12s %10s %10s %12s\n",
           "layer", "opened", "accept", "expired", "evicted", "flushed", "live_at_end",
           "one_packet", "flows", "state_bytes");
    for (unsigned i = 0; i < stack->nlayers; i++) {
        if (!stack->layers[i].has_instance) continue;
        const rg_layer_counts *l = &n->layer[i];
        printf("  %-14s %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64
               " %12" PRIu64 " %10" PRIu64 " %10" PRIu64 " %12" PRIu64 "\n",
               stack->layers[i].name, l->opened, l->closed[RG_CLOSE_ACCEPT],
               l->closed[RG_CLOSE_EXPIRED], l->closed[RG_CLOSE_EVICTED],
               l->closed[RG_CLOSE_FLUSHED], live[i], l->one_packet, rg_layer_flows(l),
               state_bytes(st, i));
    }
}

/* The memcaps and what they did, per layer (the JSON's "memcap" and layers' "memory"). */
static void memory_text(const rg_stack_desc *stack, const rg_stats *st)
{
    char a[32], b[32];
    if (!st) return;
    if (st->mem_cap_seq) snprintf(a, sizeof a, "%" PRIu64, st->mem_cap_seq);
    if (st->mem_cap_flows) snprintf(b, sizeof b, "%" PRIu64, st->mem_cap_flows);
    printf("memcap         reassembly %s, flows %s bytes, policy %s  (peaks: %" PRIu64
           " reassembly, %" PRIu64 " flows)\n"
           "memory per layer (peak bytes; hits: allocations past a memcap; evicted: instances "
           "evicted to make room; dropped_pkts: packets of drop-flow instances; seq_limit: "
           "inserts past a sequence's caps; overlaps: same / different data)\n"
           "  %-14s %12s %12s %8s %10s %10s %10s %8s %8s %10s %10s %10s\n",
           st->mem_cap_seq ? a : "none", st->mem_cap_flows ? b : "none",
           rg_memcap_policy_name(st->mem_policy), st->mem_seq_peak, st->mem_flow_peak, "layer",
           "reassembly", "flows", "hits", "drop-flow", "evict", "bypass", "ignore", "evicted",
           "dropped_pkts", "seq_limit", "overlaps");
    for (unsigned i = 0; i < stack->nlayers && i < st->nlayers; i++) {
        if (!stack->layers[i].has_instance) continue;
        const rg_mem_stats *m = &st->layer[i].mem;
        const rg_seq_stats *q = &st->layer[i].seq;
        const uint64_t ovl = q->rexmit + q->overlap;
        char o[48];
        snprintf(o, sizeof o, "%" PRIu64 "/%" PRIu64, ovl > q->conflict ? ovl - q->conflict : 0,
                 q->conflict);
        printf("  %-14s %12" PRIu64 " %12" PRIu64 " %8" PRIu64 " %10" PRIu64 " %10" PRIu64
               " %10" PRIu64 " %8" PRIu64 " %8" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10s\n",
               stack->layers[i].name, m->seq_peak, m->flow_peak, m->cap_hits,
               m->act[RG_MEMCAP_DROP_FLOW], m->act[RG_MEMCAP_EVICT_OLDEST],
               m->act[RG_MEMCAP_BYPASS], m->act[RG_MEMCAP_IGNORE], m->evicted, m->dropped_pkts,
               q->buffer_full, o);
    }
}

static void summary_json(const opts *o, const rg_stack_desc *stack, const summary *s)
{
    fputs("{\"stack\":", stdout);
    rg_json_string(stdout, stack->name);
    fputs(",\"capture\":", stdout);
    rg_json_string(stdout, o->capture);
    fputs(",\"link\":", stdout);
    rg_json_string(stdout, s->link);
    fputs(",\"nf\":", stdout);
    rg_json_string(stdout, o->nf);
    printf(",\"packets\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"flows\":%" PRIu64, s->pkts, s->bytes,
           rg_total_flows(stack, s->n));
    printf(",\"flows_opened\":%" PRIu64 ",\"flows_closed\":%" PRIu64 ",\"live_at_end\":%" PRIu64
           ",\"calls\":%" PRIu64 ",\"payload_bytes\":%" PRIu64 ",\"errors\":%" PRIu64
           ",\"skipped\":%" PRIu64 ",",
           s->opened, s->closed, s->live, s->calls, s->payload, s->errors, s->skipped);
    printf("\"gaps\":%" PRIu64 ",\"gap_bytes\":%" PRIu64 ",", s->gaps, s->gap_bytes);
    if (s->has_dropped) printf("\"io\":\"%s\",\"dropped\":%" PRIu64 ",", o->io, s->dropped);
    if (s->io_detail[0]) {
        fputs("\"io_detail\":", stdout);
        rg_json_string(stdout, s->io_detail);
        fputc(',', stdout);
    }
    if (s->writer)
        printf("\"written\":%" PRIu64 ",\"not_written\":%" PRIu64 ",", s->writer->written,
               s->pkts - s->writer->written);
    if (s->tx)
        printf("\"forwarded\":%" PRIu64 ",\"withheld\":%" PRIu64 ",\"tx_failed\":%" PRIu64 ",",
               s->tx->tx_frames, s->tx->tx_withheld, s->tx->tx_failed);
    if (s->reject && s->reject->rejected)
        printf("\"reject\":{\"rejected\":%" PRIu64 ",\"answered\":%" PRIu64 ",\"replies\":%" PRIu64
               ",\"rate_limited\":%" PRIu64 ",\"unanswerable\":%" PRIu64 ",\"rate\":%" PRIu64 "},",
               s->reject->rejected, s->reject->answered, s->reject->replies, s->reject->limited,
               s->reject->unanswerable, o->reject_rate);
    if (s->reject && (s->reject->injected || s->reject->inject_none))
        printf("\"injected\":{\"frames\":%" PRIu64 ",\"unbuildable\":%" PRIu64 "},",
               s->reject->injected, s->reject->inject_none);
    if (s->nworkers) {
        fputs("\"workers\":[", stdout);
        for (unsigned w = 0; w < s->nworkers; w++)
            printf("%s%" PRIu64, w ? "," : "", s->worker_pkts[w]);
        fputs("],", stdout);
        if (s->worker_flows) {
            fputs("\"worker_flows\":[", stdout);
            for (unsigned w = 0; w < s->nworkers; w++)
                printf("%s%" PRIu64, w ? "," : "", s->worker_flows[w]);
            fputs("],", stdout);
        }
    }
    printf("\"clock_jumps\":{\"forward\":%" PRIu64 ",\"backward\":%" PRIu64 "},", s->clock_fwd,
           s->clock_back);
    printf("\"clock_resyncs\":%" PRIu64 ",", s->clock_resyncs);
    rg_memcap_json(s->st);
    printf("\"skipped_linktype\":%" PRIu64 ",\"link_type\":", s->skipped_linktype);
    rg_json_string(stdout, rg_link_type_name(s->li));
    fputs(",\"entries\":[", stdout);
    for (int k = 0, n = 0; k < RG_LINK_KINDS; k++)
        if (stack->entry[k] >= 0) printf("%s\"%s\"", n++ ? "," : "", rg_link_kind_names[k]);
    fputs("],", stdout);
    rg_rules_json(s->st);
    if (s->xdp) {
        static const char *const names[RG_XDP_NSTATS] = RG_XDP_STAT_NAMES;
        const rg_xdp_counts *x = s->xdp;
        printf("\"xdp\":{\"mode\":\"%s\"", x->mode);
        for (int i = 0; i < RG_XDP_NSTATS; i++)
            printf(",\"%s\":%" PRIu64, names[i], x->stat[i]);
        printf(",\"drop_flows\":%" PRIu64 ",\"bypass_flows\":%" PRIu64
               ",\"kernel_packets\":%" PRIu64 ",\"kernel_bytes\":%" PRIu64
               ",\"map_errors\":%" PRIu64 "},",
               x->drop_flows, x->bypass_flows, x->kernel_packets, x->kernel_bytes, x->map_errors);
    }
    rg_wrote_json();
    rg_layers_json(stack, s->n, s->live_per, s->st);
    if (o->checksums) rg_checksums_json(stack, s->st);
    fputs("}\n", stdout);
}

/* The lines a source, a writer, inline forwarding and workers add (both text forms). */
static void io_text(const opts *o, const summary *s)
{
    if (s->has_dropped)
        printf("dropped        %" PRIu64 "  (frames the %s source lost before the stack: kernel, "
               "NIC%s%s)\n",
               s->dropped, o->io, s->io_detail[0] ? "; " : "", s->io_detail);
    if (s->writer)
        printf("written        %" PRIu64 "  (packets that passed, to %s; %" PRIu64
               " not written: dropped by a verdict or of another link type)\n",
               s->writer->written, s->writer->path, s->pkts - s->writer->written);
    if (s->tx)
        printf("forwarded      %" PRIu64 "  (withheld %" PRIu64 " by verdicts, %" PRIu64
               " failed: frames sent on to the peer, --inline)\n",
               s->tx->tx_frames, s->tx->tx_withheld, s->tx->tx_failed);
    if (s->reject && s->reject->rejected) {
        printf("rejected       %" PRIu64 "  (%" PRIu64 " answered with %" PRIu64
               " replies: TCP RSTs, ICMP unreachables",
               s->reject->rejected, s->reject->answered, s->reject->replies);
        if (s->reject->limited)
            printf("; %" PRIu64 " rate-limited by --reject-rate %" PRIu64, s->reject->limited,
                   o->reject_rate);
        if (s->reject->unanswerable)
            printf("; %" PRIu64 " unanswerable: ICMP errors, fragments, multicast...",
                   s->reject->unanswerable);
        fputs(")\n", stdout);
    }
    if (s->reject && (s->reject->injected || s->reject->inject_none))
        printf("injected       %" PRIu64
               "  (frames NFs injected: TCP RSTs, ICMP unreachables; %" PRIu64
               " asked for without a frame to build)\n",
               s->reject->injected, s->reject->inject_none);
    if (s->xdp) {
        const rg_xdp_counts *x = s->xdp;
        printf("xdp            %" PRIu64 " frames (%s): %" PRIu64 " dropped by rules, %" PRIu64
               " dropped and %" PRIu64 " bypassed by flow verdicts, %" PRIu64 " passed up\n",
               x->stat[0], x->mode, x->stat[1], x->stat[3], x->stat[4],
               x->stat[0] - x->stat[1] - x->stat[3] - x->stat[4]);
        printf("xdp flows      %" PRIu64 " dropped, %" PRIu64 " bypassed in the kernel  (%" PRIu64
               " of their frames read back into their records; %" PRIu64 " map updates "
               "refused)\n",
               x->drop_flows, x->bypass_flows, x->kernel_packets, x->map_errors);
    }
    if (s->nworkers) {
        printf("workers        %u  (frames per worker:", s->nworkers);
        for (unsigned w = 0; w < s->nworkers; w++)
            printf(" %" PRIu64, s->worker_pkts[w]);
        fputs(")\n", stdout);
        if (s->worker_flows) {
            fputs("workers flows ", stdout);
            for (unsigned w = 0; w < s->nworkers; w++)
                printf(" %" PRIu64, s->worker_flows[w]);
            fputs("  (instances each worker opened)\n", stdout);
        }
    }
}

/* What the memcaps and the cap took, added over the layers (the short summary's words). */
typedef struct {
    uint64_t evicted, cap_hits, dropped_pkts, seq_limit, seq_bytes, conflicts;
} losses;

static losses losses_of(const rg_stack_desc *stack, const summary *s)
{
    losses x = {0};
    for (unsigned i = 0; i < stack->nlayers; i++) {
        if (!stack->layers[i].has_instance) continue;
        x.evicted += s->n->layer[i].closed[RG_CLOSE_EVICTED];
        if (!s->st || i >= s->st->nlayers) continue;
        const rg_mem_stats *m = &s->st->layer[i].mem;
        const rg_seq_stats *q = &s->st->layer[i].seq;
        x.cap_hits += m->cap_hits;
        x.dropped_pkts += m->dropped_pkts;
        x.seq_limit += q->buffer_full;
        x.seq_bytes += q->bytes_dropped;
        x.conflicts += q->conflict;
    }
    return x;
}

/* The default human summary (issue 26): what was read, what came out, and everything lost or
 * skipped said in words, in a few lines; --summary full has the per-layer tables. */
static void summary_short(const opts *o, const rg_stack_desc *stack, const summary *s)
{
    char entries[128];
    printf("stack          %s\n"
           "capture        %s  (link type %s)\n"
           "nf             %s\n"
           "packets        %" PRIu64 "\n"
           "bytes          %" PRIu64 "\n"
           "flows          %" PRIu64,
           stack->name, o->capture, rg_link_type_name(s->li), o->nf, s->pkts, s->bytes,
           rg_total_flows(stack, s->n));
    const char *sep = "  (";
    for (unsigned i = 0; i < stack->nlayers; i++) {
        uint64_t f = stack->layers[i].has_instance ? rg_layer_flows(&s->n->layer[i]) : 0;
        if (!f) continue;
        printf("%s%s %" PRIu64, sep, stack->layers[i].name, f);
        sep = ", ";
    }
    fputs(*sep == ',' ? ")\n" : "\n", stdout);
    if (strcmp(o->nf, RG_NF_NONE))
        printf("delivered      %" PRIu64 " payload bytes in %" PRIu64 " handler calls\n",
               s->payload, s->calls);
    else
        fputs("delivered      not observed (--nf none)\n", stdout);
    const losses x = losses_of(stack, s);
    const uint64_t stack_err = s->errors > s->skipped ? s->errors - s->skipped : 0;
    int lost = 0;
    if (s->skipped_linktype) {
        printf("skipped        %" PRIu64 " frames of link type %s%s, which the stack has no "
               "entry for (its entries: %s)\n",
               s->skipped_linktype, rg_link_type_name(s->li), s->linktype_what,
               rg_entry_names(stack, entries, sizeof entries));
        lost = 1;
    }
    if (s->skipped > s->skipped_linktype) {
        printf("skipped        %" PRIu64 " frames whose link header is cut or that no entry "
               "layer takes\n",
               s->skipped - s->skipped_linktype);
        lost = 1;
    }
    if (stack_err) {
        printf("errors         %" PRIu64 " stack errors (--stats counts them by kind)\n",
               stack_err);
        lost = 1;
    }
    if (s->gaps) {
        printf("gaps           %" PRIu64 " holes in reassembled data: %" PRIu64
               " bytes the capture lost\n",
               s->gaps, s->gap_bytes);
        lost = 1;
    }
    if (s->clock_fwd || s->clock_back) {
        printf("clock_jumps    %" PRIu64 " forward, %" PRIu64 " backward: packets dated beyond "
               "--max-clock-jump, processed at the flow clock\n",
               s->clock_fwd, s->clock_back);
        if (s->clock_resyncs)
            printf("clock_resyncs  %" PRIu64 " new time bases the clock followed\n",
                   s->clock_resyncs);
        lost = 1;
    }
    if (x.evicted) {
        printf("evicted        %" PRIu64 " instances, to make room (--cap, memcaps)\n", x.evicted);
        lost = 1;
    }
    if (x.cap_hits || x.dropped_pkts || x.seq_limit) {
        printf("memcap         %" PRIu64 " allocations past a memory cap, %" PRIu64
               " packets of dropped instances, %" PRIu64 " inserts past a sequence's caps (%" PRIu64
               " bytes)\n",
               x.cap_hits, x.dropped_pkts, x.seq_limit, x.seq_bytes);
        lost = 1;
    }
    if (x.conflicts) {
        printf("overlaps       %" PRIu64 " retransmissions with different data\n", x.conflicts);
        lost = 1;
    }
    if (!lost)
        fputs("lost           nothing: no frame skipped, no stack error, no gap, no clock jump, "
              "no eviction\n",
              stdout);
    io_text(o, s);
    rg_rules_text(s->st);
    if (o->checksums) rg_checksums_text(stack, s->st);
    rg_wrote_text();
    fputs("(--summary full: instances and memory per layer; --summary json: everything)\n", stdout);
}

void rg_print_summary(const opts *o, const rg_stack_desc *stack, const summary *s)
{
    /* --out is where the NFs write unless given another folder (noted as they attach) */
    if ((strcmp(o->nf, RG_NF_COUNT) && strcmp(o->nf, RG_NF_NONE)) || o->chain_file || o->control)
        rg_wrote_dir(o->out);
    if (o->json) {
        summary_json(o, stack, s);
        return;
    }
    if (!o->full) {
        summary_short(o, stack, s);
        return;
    }
    char entries[128];
    printf("stack          %s\n"
           "capture        %s\n"
           "link           %s\n"
           "nf             %s\n"
           "packets        %" PRIu64 "\n"
           "bytes          %" PRIu64 "\n"
           "flows          %" PRIu64 "  (instances that outlived the packet that opened them: "
           "connections, conversations)\n"
           "flows_opened   %" PRIu64 "  (all instances, per-packet ones such as IP datagrams "
           "included)\n"
           "flows_closed   %" PRIu64 "\n"
           "live_at_end    %" PRIu64 "  (before the final flush)\n"
           "calls          %" PRIu64 "%s\n"
           "payload_bytes  %" PRIu64 "\n"
           "errors         %" PRIu64 "  (stack errors + frames skipped)\n"
           "skipped        %" PRIu64 "  (link header cut or no entry layer)\n"
           "skipped_linktype %" PRIu64 "  (of skipped: capture link type %s%s; the stack's "
           "entries: %s)\n"
           "gaps           %" PRIu64 "  (holes skipped: %" PRIu64 " bytes the capture lost)\n"
           "clock_jumps    %" PRIu64 " forward, %" PRIu64 " backward  (packets dated beyond "
           "--max-clock-jump)\n",
           stack->name, o->capture, s->link, o->nf, s->pkts, s->bytes, rg_total_flows(stack, s->n),
           s->opened, s->closed, s->live, s->calls,
           strcmp(o->nf, RG_NF_NONE) ? "" : "  (--nf none observes no calls)", s->payload,
           s->errors, s->skipped, s->skipped_linktype, rg_link_type_name(s->li), s->linktype_what,
           rg_entry_names(stack, entries, sizeof entries), s->gaps, s->gap_bytes, s->clock_fwd,
           s->clock_back);
    if (s->clock_resyncs)
        printf("clock_resyncs  %" PRIu64 "  (new time bases the clock followed)\n",
               s->clock_resyncs);
    io_text(o, s);
    layers_text(stack, s->n, s->live_per, s->st);
    rg_rules_text(s->st);
    if (o->checksums) rg_checksums_text(stack, s->st);
    memory_text(stack, s->st);
    rg_wrote_text();
}
