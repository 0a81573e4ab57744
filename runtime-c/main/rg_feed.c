/* rg_feed.c - the out-of-line parts of feeding frames to the stack (see
 * rg_driver.h): they keep rg_feed small enough to inline into the loops. */
#include <inttypes.h>
#include <string.h>

#include "rg_driver.h"

void rg_feeder_init(feeder *fd, const rg_stack_desc *stack, rg_entry_links *lm, void *ctx,
                    int no_timeouts, rg_counts *nc)
{
    memset(fd, 0, sizeof *fd);
    fd->linktype_what = "";
    fd->nc = nc; /* the counter owns its counts; the feeder writes only uid_mark */
    fd->stack = stack;
    fd->lm = lm;
    fd->ctx = ctx;
    fd->no_timeouts = no_timeouts;
}

#if defined(__GNUC__)
__attribute__((noinline, cold))
#endif
void rg_feed_new_link(feeder *fd, const rg_entry_map *em)
{
    if (fd->prog)
        fprintf(stderr, "%s: %s: frames of link type %s (%d) skipped: not supported\n", fd->prog,
                fd->capture, em->li.name, em->li.dlt);
}

#if defined(__GNUC__)
__attribute__((noinline, cold))
#endif
void rg_feed_skipped(feeder *fd, const rg_entry_map *em, const rg_frame *f)
{
    fd->skipped++;
    const char *what;
    if (em && rg_entry_skipped_for_linktype(em, f, &what) && !fd->skipped_linktype++ && fd->prog) {
        char entries[128];
        fd->linktype_what = what;
        fprintf(stderr,
                "%s: warning: %s: packet %" PRIu64 ": the stack %s has no entry for link "
                "type %s%s (its entries: %s): such packets are skipped (skipped_linktype)\n",
                fd->prog, fd->capture, fd->pkts, fd->stack->name, rg_link_type_name(&em->li), what,
                rg_entry_names(fd->stack, entries, sizeof entries));
    }
}
