/* rg.h - the whole rubikgen C runtime (librgrt.a). */
#ifndef RG_H
#define RG_H

#include "rg_common.h"
#include "rg_csum.h"
#include "rg_flow.h"
#include "rg_framer.h"
#include "rg_pcap.h"
#include "rg_pkt.h"
#include "rg_seq.h"
#include "rg_stats.h"
#include "rg_quic.h"
#include "rg_timer.h"
#include "rg_trace.h"

#endif /* RG_H */
