/* rg_chain.c - the driver's observer: its counters, then the chosen NF. */
#include "rg_driver.h"
#include "rg_nfchain.h"

static void chain_call(void *self, const rg_call *c)
{
    const obs_chain *ch = self;
    if (ch->a.on_call) ch->a.on_call(ch->a.self, c); /* none with --nf none */
    if (ch->b.on_call) ch->b.on_call(ch->b.self, c);
}

static void chain_open(void *self, const rg_flow_info *f, uint64_t ts_ns)
{
    const obs_chain *ch = self;
    ch->a.on_open(ch->a.self, f, ts_ns);
    if (ch->b.on_open) ch->b.on_open(ch->b.self, f, ts_ns);
}

static void chain_packet(void *self, const rg_flow_info *f, int dir, uint32_t len, uint64_t ts_ns)
{
    const obs_chain *ch = self;
    ch->b.on_packet(ch->b.self, f, dir, len, ts_ns); /* the counters have none */
}

static void chain_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns)
{
    const obs_chain *ch = self;
    ch->a.on_close(ch->a.self, f, reason, complete, ts_ns);
    if (ch->b.on_close) ch->b.on_close(ch->b.self, f, reason, complete, ts_ns);
}

static void chain_gap(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                      uint32_t at, uint64_t ts_ns)
{
    const obs_chain *ch = self;
    ch->a.on_gap(ch->a.self, f, dir, seq, len, at, ts_ns);
    if (ch->b.on_gap) ch->b.on_gap(ch->b.self, f, dir, seq, len, at, ts_ns);
}

static void chain_clock_jump(void *self, uint64_t pkt_no, uint64_t pkt_ts_ns, uint64_t clock_ns,
                             int fwd)
{
    const obs_chain *ch = self;
    ch->b.on_clock_jump(ch->b.self, pkt_no, pkt_ts_ns, clock_ns, fwd); /* the counters have none */
}

static void chain_memcap(void *self, const rg_flow_info *f, unsigned layer, int policy,
                         uint64_t asked, uint64_t ts_ns)
{
    const obs_chain *ch = self;
    ch->b.on_memcap(ch->b.self, f, layer, policy, asked, ts_ns); /* the counters have none */
}

static void chain_overlap(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                          uint32_t new_bytes, uint32_t old_len, uint32_t new_len, int policy,
                          uint64_t ts_ns)
{
    const obs_chain *ch = self;
    ch->b.on_overlap(ch->b.self, f, dir, seq, len, new_bytes, old_len, new_len, policy, ts_ns);
}

rg_obs rg_make_observer(rg_counter *counter, const rg_obs *nf, int count_calls, obs_chain *ch)
{
    rg_obs obs = rg_counter_obs(counter, count_calls);
    if (!nf) return obs;
    ch->a = obs;
    ch->b = *nf;
    obs.self = ch;
    obs.on_call = chain_call;
    obs.on_open = chain_open;
    obs.on_packet = nf->on_packet ? chain_packet : NULL;
    obs.on_close = chain_close;
    obs.on_gap = chain_gap;
    obs.on_clock_jump = nf->on_clock_jump ? chain_clock_jump : NULL;
    obs.on_memcap = nf->on_memcap ? chain_memcap : NULL;
    obs.on_overlap = nf->on_overlap ? chain_overlap : NULL;
    /* one-packet instances left out only where neither wants them */
    obs.quiet_transient = ch->a.quiet_transient & nf->quiet_transient;
    return obs;
}

rg_chain *rg_chain_open(const opts *o, const rg_stack_desc *stack, unsigned worker, rg_wdirs *dirs,
                        char *err, size_t errlen)
{
    char why[1024];
    rg_chain *ch = rg_chain_new(stack, o->out);
    if (!ch) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (dirs && rg_chain_set_worker(ch, worker, o->workers, dirs, why, sizeof why)) {
        snprintf(err, errlen, "--out: %s", why);
        goto fail;
    }
    if (o->nfd || o->nf_is_path) {
        /* a stock NF's flag (--flowstats-all) is a key of its configuration */
        rg_nf_kv flag = {o->nfd ? o->nfd->flag_key : NULL, "1"};
        if (rg_chain_attach(ch, o->nf, NULL, &flag, o->nf_flag && flag.key ? 1 : 0, why,
                            sizeof why)) {
            snprintf(err, errlen, "--nf %s: %s", o->nf, why);
            goto fail;
        }
    }
    if (o->ipfix) {
        rg_nf_kv to = {"to", o->ipfix};
        if (rg_chain_attach(ch, "ipfix", NULL, &to, 1, why, sizeof why)) {
            snprintf(err, errlen, "--ipfix %s: %s", o->ipfix, why);
            goto fail;
        }
    }
    if (o->chain_file && rg_chainfile_load(ch, o->chain_file, err, errlen)) goto fail;
    return ch;
fail:
    rg_chain_free(ch, o->prog);
    return NULL;
}
