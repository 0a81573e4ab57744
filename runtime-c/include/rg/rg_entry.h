/* rg_entry.h - the entry map: which layer of a stack takes a captured frame,
 * and where in the frame that layer's input starts.
 *
 * The one place that maps link types to a stack's entries (rg_stack_desc
 * .entry, by link kind): Ethernet, BSD loopback, Linux cooked v1/v2 frames go
 * whole to the layer the stack names for their kind; raw IP link types go,
 * per frame, to the raw_ipv4 or raw_ipv6 entry at the network header.  The
 * capture driver and the benchmark's flow checker both use it. */
#ifndef RG_ENTRY_H
#define RG_ENTRY_H

#include <stddef.h>

#include "rg_api.h"
#include "rg_pcap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Link kind names by RG_LINK_* (RG_LINK_KIND_TABLE). */
extern const char *const rg_link_kind_names[RG_LINK_KINDS];

/* The entry of one link type. */
typedef struct rg_entry_map {
    int fixed;      /* entry layer of every frame, or -1: by IP version (raw IP) */
    int16_t v4, v6; /* raw IP: the entry layers (-1 = none) */
    rg_linkinfo li;
    int kind; /* the link kind of a fixed-kind link type, -1 for raw IP */
} rg_entry_map;

/* RG_OK, or RG_EUNSUPPORTED when the runtime cannot locate IP in frames of
 * this link type (the map then takes no frame).  A link type the stack has
 * no entry for is RG_OK: its frames are refused by rg_entry_pick, so that
 * the caller counts and reports them (an empty output never goes
 * unexplained). */
int rg_entry_map_init(rg_entry_map *m, const rg_stack_desc *stack, const rg_linkinfo *li);

/* The entry layer and the offset of its input in f; 0 if the frame cannot be
 * given to the stack (no map, link header cut, no entry for its network
 * protocol). */
RG_INLINE int rg_entry_pick(const rg_entry_map *m, const rg_frame *f, unsigned *layer,
                            uint32_t *off)
{
    if (!m) return 0;
    if (m->fixed >= 0) {
        *layer = (unsigned)m->fixed;
        *off = 0;
        return 1;
    }
    rg_netpos np;
    if (rg_link_locate(&m->li, f->data, f->caplen, &np)) return 0;
    int e = np.proto == RG_ENTRY_IPV4 ? m->v4 : np.proto == RG_ENTRY_IPV6 ? m->v6 : -1;
    if (e < 0 || np.off > f->caplen) return 0;
    *layer = (unsigned)e;
    *off = np.off;
    return 1;
}

/* 1 if rg_entry_pick refused f because the stack has no entry for its link
 * type (or, on a raw IP link, for its IP version); *what is then "" or
 * ", IPv4 packets" / ", IPv6 packets". */
int rg_entry_skipped_for_linktype(const rg_entry_map *m, const rg_frame *f, const char **what);

/* The maps of the link types a capture has (pcapng: one per interface link
 * type; m[0] is the capture's first). */
enum { RG_ENTRY_MAX_LINKS = 16 };
typedef struct rg_entry_links {
    rg_entry_map m[RG_ENTRY_MAX_LINKS];
    unsigned n;
    const rg_stack_desc *stack;
} rg_entry_links;

/* m[0] for the first link; the result of its rg_entry_map_init. */
int rg_entry_links_init(rg_entry_links *lm, const rg_stack_desc *stack, const rg_linkinfo *first);

/* The map of link type dlt, made on its first frame (*added = 1 then, and
 * *unsupported = 1 if it takes no frame); NULL when RG_ENTRY_MAX_LINKS link
 * types are known already. */
const rg_entry_map *rg_entry_links_get(rg_entry_links *lm, int dlt, int *added, int *unsupported);

/* The map of frame f's link type: the first link's without a lookup. */
RG_INLINE const rg_entry_map *rg_entry_of(rg_entry_links *lm, const rg_frame *f, int *added,
                                          int *unsupported)
{
    *added = 0;
    if (RG_LIKELY(f->dlt == lm->m[0].li.dlt)) return &lm->m[0];
    return rg_entry_links_get(lm, f->dlt, added, unsupported);
}

/* The link kinds the stack has an entry for, ", "-separated, into buf
 * ("none" if it has none). */
const char *rg_entry_names(const rg_stack_desc *stack, char *buf, size_t len);

/* libpcap's name of the link type ("EN10MB"), else the runtime's. */
const char *rg_link_type_name(const rg_linkinfo *li);

#ifdef __cplusplus
}
#endif
#endif /* RG_ENTRY_H */
