/* rg_entry.c - link types to a stack's entry layer (see rg_entry.h). */
#include "rg/rg_entry.h"

#include <pcap/pcap.h>
#include <stdio.h>

const char *const rg_link_kind_names[RG_LINK_KINDS] = {
#define RG_LINK_NAME_(name, value, text) [value] = text,
    RG_LINK_KIND_TABLE(RG_LINK_NAME_)
#undef RG_LINK_NAME_
};

/* The link kind of a link type that has one, -1 otherwise (raw IP). */
static int link_kind(int dlt)
{
    switch (dlt) {
    case DLT_EN10MB:
        return RG_LINK_ETHERNET;
    case DLT_NULL:
    case DLT_LOOP:
        return RG_LINK_NULL;
    case DLT_LINUX_SLL:
        return RG_LINK_SLL;
    case DLT_LINUX_SLL2:
        return RG_LINK_SLL2;
    case DLT_PPP:
    case RG_LINKTYPE_PPP_HDLC:
        return RG_LINK_PPP;
    default:
        return -1;
    }
}

int rg_entry_map_init(rg_entry_map *m, const rg_stack_desc *stack, const rg_linkinfo *li)
{
    m->li = *li;
    m->fixed = -1;
    m->v4 = m->v6 = -1;
    m->kind = link_kind(li->dlt);
    if (m->kind >= 0) {
        m->fixed = stack->entry[m->kind];
        return RG_OK;
    }
    /* raw IP link types: IPv4 or IPv6 at offset 0, decided per frame */
    if (li->entry == RG_ENTRY_UNKNOWN) return RG_EUNSUPPORTED;
    if (li->entry == RG_ENTRY_IP || li->entry == RG_ENTRY_IPV4)
        m->v4 = stack->entry[RG_LINK_RAW_IPV4];
    if (li->entry == RG_ENTRY_IP || li->entry == RG_ENTRY_IPV6)
        m->v6 = stack->entry[RG_LINK_RAW_IPV6];
    return RG_OK;
}

int rg_entry_skipped_for_linktype(const rg_entry_map *m, const rg_frame *f, const char **what)
{
    if (m->kind >= 0) {
        *what = "";
        return 1; /* rg_entry_pick refuses a fixed-kind frame only for want of an entry */
    }
    rg_netpos np;
    if (rg_link_locate(&m->li, f->data, f->caplen, &np)) return 0;
    *what = np.proto == RG_ENTRY_IPV4 ? ", IPv4 packets" : ", IPv6 packets";
    return (np.proto == RG_ENTRY_IPV4 && m->v4 < 0) || (np.proto == RG_ENTRY_IPV6 && m->v6 < 0);
}

int rg_entry_links_init(rg_entry_links *lm, const rg_stack_desc *stack, const rg_linkinfo *first)
{
    lm->n = 1;
    lm->stack = stack;
    return rg_entry_map_init(&lm->m[0], stack, first);
}

const rg_entry_map *rg_entry_links_get(rg_entry_links *lm, int dlt, int *added, int *unsupported)
{
    *added = 0;
    for (unsigned i = 0; i < lm->n; i++)
        if (lm->m[i].li.dlt == dlt) return &lm->m[i];
    if (lm->n == RG_ENTRY_MAX_LINKS) return NULL;
    rg_entry_map *m = &lm->m[lm->n++];
    rg_linkinfo li;
    (void)rg_link_info(dlt, &li);
    *added = 1;
    *unsupported = rg_entry_map_init(m, lm->stack, &li) != RG_OK;
    if (*unsupported) {
        m->fixed = -1; /* no layer takes these frames */
        m->v4 = m->v6 = -1;
        m->kind = -1;
    }
    return m;
}

const char *rg_entry_names(const rg_stack_desc *stack, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (int k = 0; k < RG_LINK_KINDS && n < len; k++)
        if (stack->entry[k] >= 0)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", rg_link_kind_names[k]);
    return buf[0] ? buf : "none";
}

const char *rg_link_type_name(const rg_linkinfo *li)
{
    const char *name = pcap_datalink_val_to_name(li->dlt);
    return name ? name : li->name;
}
