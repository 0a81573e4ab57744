/* rg_source_packet.c - the "packet" source: a network interface read through AF_PACKET
 * sockets with a TPACKET_V3 receive ring, and with --workers N one socket per worker joined
 * in one PACKET_FANOUT group, so each worker reads its own ring (see rg_source.h).
 *
 * TPACKET_V3: the kernel writes frames into blocks of a ring we mmap (--ring MB, split into
 * blocks of RG_PKT_BLOCK bytes), back to back, and hands a block over when it is full or
 * when its timeout (RG_PKT_BLOCK_TOV_MS) expires, so a quiet link still delivers; next_burst
 * polls the socket for at most RG_PKT_POLL_MS (cfg->stop is honoured within that time).
 * Frames point into the ring (no copy) until the next call, which gives back the blocks
 * read; a frame the kernel stripped a VLAN tag from (the tag is in tp_vlan_tci, the way the
 * NIC or the veth hands it over) is rebuilt with the tag in place, in an arena, so the
 * frames are the bytes libpcap delivers.  Timestamps are the kernel's, in nanoseconds.
 *
 * Fanout (--workers N, cfg->queues = N): the kernel picks the socket of every frame
 * (PACKET_FANOUT_HASH by default: the symmetric flow hash, both directions of a TCP or UDP
 * connection on one socket; cpu: the CPU that received it; lb: round robin).  The source
 * reports RG_SRCQ_HW: the driver's workers read their own queues and nobody distributes.
 * The kernel's hash is not the stack's RSS hash (rg_rss.h), see runtime-c/README.md
 * "The packet source and PACKET_FANOUT". */
#define _GNU_SOURCE /* struct tpacket_*, if_nametoindex */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <pcap/pcap.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rg/rg_source.h"

/* bytes per ring block: holds any frame whole (a 64 KB GSO frame too).  A block is handed
 * over full or after RG_PKT_BLOCK_TOV_MS: at a low rate every block holds 10 ms of traffic,
 * so the ring holds as many 10 ms as it has blocks (8 MB: 32 blocks, 320 ms) */
#define RG_PKT_BLOCK        (256u << 10)
#define RG_PKT_BLOCK_TOV_MS 10         /* a block not full is handed over after this */
#define RG_PKT_POLL_MS      100        /* next_burst waits this long for a block */
#define RG_PKT_MAX_Q        64         /* sockets in one fanout group (--workers) */
#define RG_PKT_ARENA        (4u << 20) /* a burst's VLAN-tagged frames, rebuilt */

/* One socket and its ring. */
typedef struct pkt_q {
    int fd;
    uint8_t *map;
    size_t maplen;
    unsigned nblocks;
    unsigned blk;     /* the block read next (or being read) */
    unsigned release; /* blocks read through by the last burst: given back by the next call */
    unsigned left;    /* frames of block blk not yet read (0: none taken from it yet) */
    int inblk;        /* block blk is being read */
    uint8_t *pkt;     /* its next frame */
    uint8_t *arena;   /* VLAN-tagged frames rebuilt */
    size_t arena_cap;
    uint64_t frames, bytes;
    uint64_t drops; /* PACKET_STATISTICS: the kernel resets them on every read */
    pthread_t th;
    int started;
} pkt_q;

typedef struct pkt_src {
    rg_source base;
    unsigned nq;
    pkt_q q[RG_PKT_MAX_Q];
    uint32_t snaplen;
    rg_linkinfo li;
    volatile sig_atomic_t *stop;
    int failed;
    char err[PCAP_ERRBUF_SIZE + 256];
    pthread_mutex_t mu; /* the statistics: read from any thread */
} pkt_src;

const rg_source_ops rg_source_packet;

/* The fanout modes --fanout names. */
static const struct {
    const char *name;
    int type;
} fanouts[] = {
    {"hash", PACKET_FANOUT_HASH},
    {"cpu", PACKET_FANOUT_CPU},
    {"lb", PACKET_FANOUT_LB},
    {"l3", PACKET_FANOUT_CBPF}, /* our program below */
};

/* --fanout l3: a classic BPF program that picks the socket from the outer IP addresses only,
 * symmetric (the XOR of every 32-bit word of both addresses), as the stack's distributor
 * groups frames (rg_rss.h RG_RSS_L3): a datagram's fragments, its connection's other packets
 * and both directions on one worker.  Not the same worker numbers as rg_rss's Toeplitz hash.
 * It reads relative to the network header (SKF_NET_OFF): the kernel runs fanout programs
 * before it pushes the link header back, and it has taken the first VLAN tag off already
 * (the protocol is the tagged one's); one more tag in the frame is stepped over.  Frames of
 * other protocols (ARP, PPPoE, MPLS...) all go to socket 0. */
enum { L3_MAX = 96 }; /* l3_program writes 72 */
static unsigned l3_program(struct sock_filter *f)
{
    unsigned n = 0;
#define I(code, jt, jf, k) (f[n++] = (struct sock_filter){(code), (jt), (jf), (uint32_t)(k)})
    I(BPF_LD | BPF_IMM, 0, 0, 0);
    I(BPF_ST, 0, 0, 1); /* M[1]: the XOR so far */
    I(BPF_ST, 0, 0, 2); /* M[2]: the offset of the IP header past the network header */
    I(BPF_LD | BPF_W | BPF_ABS, 0, 0, SKF_AD_OFF + SKF_AD_PROTOCOL);
    I(BPF_JMP | BPF_JEQ | BPF_K, 1, 0, ETH_P_8021Q);
    I(BPF_JMP | BPF_JEQ | BPF_K, 0, 3, ETH_P_8021AD);
    I(BPF_LD | BPF_H | BPF_ABS, 0, 0, SKF_NET_OFF + 2); /* a tag in the frame: its type */
    I(BPF_LDX | BPF_IMM, 0, 0, 4);
    I(BPF_STX, 0, 0, 2);
    const unsigned v4 = n;
    I(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, ETH_P_IP);   /* jt: the IPv4 words, below */
    I(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, ETH_P_IPV6); /* jt: the IPv6 words */
    I(BPF_RET | BPF_K, 0, 0, 0);
    /* word at k past the IP header into the XOR; the words of IPv4 (12, 16), then IPv6's */
    const unsigned w4 = n;
    for (unsigned k = 12; k <= 16; k += 4) {
        I(BPF_LDX | BPF_MEM, 0, 0, 2);
        I(BPF_LD | BPF_W | BPF_IND, 0, 0, SKF_NET_OFF + (int)k);
        I(BPF_LDX | BPF_MEM, 0, 0, 1);
        I(BPF_ALU | BPF_XOR | BPF_X, 0, 0, 0);
        I(BPF_ST, 0, 0, 1);
    }
    const unsigned fold4 = n;
    I(BPF_JMP | BPF_JA, 0, 0, 0); /* to the fold, past IPv6's words */
    const unsigned w6 = n;
    for (unsigned k = 8; k <= 36; k += 4) {
        I(BPF_LDX | BPF_MEM, 0, 0, 2);
        I(BPF_LD | BPF_W | BPF_IND, 0, 0, SKF_NET_OFF + (int)k);
        I(BPF_LDX | BPF_MEM, 0, 0, 1);
        I(BPF_ALU | BPF_XOR | BPF_X, 0, 0, 0);
        I(BPF_ST, 0, 0, 1);
    }
    const unsigned fold = n; /* A ^= A >> 16; A ^= A >> 8: every byte counts (the kernel
                              * takes the result modulo the group's size) */
    for (unsigned sh = 16; sh >= 8; sh /= 2) {
        I(BPF_ST, 0, 0, 1);
        I(BPF_ALU | BPF_RSH | BPF_K, 0, 0, sh);
        I(BPF_LDX | BPF_MEM, 0, 0, 1);
        I(BPF_ALU | BPF_XOR | BPF_X, 0, 0, 0);
    }
    I(BPF_RET | BPF_A, 0, 0, 0);
#undef I
    f[v4].jt = (uint8_t)(w4 - v4 - 1);
    f[v4 + 1].jt = (uint8_t)(w6 - v4 - 2);
    f[fold4].k = fold - fold4 - 1;
    return n;
}

static int fanout_type(const char *name)
{
    for (size_t i = 0; i < sizeof fanouts / sizeof fanouts[0]; i++)
        if (!strcmp(fanouts[i].name, name)) return fanouts[i].type;
    return -1;
}

static struct tpacket_block_desc *block(const pkt_q *q, unsigned i)
{
    return (struct tpacket_block_desc *)(q->map + (size_t)i * RG_PKT_BLOCK);
}

/* The kernel's drop count since the last read, added to q->drops. */
static void read_drops(pkt_src *p, pkt_q *q)
{
    struct tpacket_stats_v3 st;
    socklen_t len = sizeof st;
    if (q->fd >= 0 && getsockopt(q->fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0) {
        pthread_mutex_lock(&p->mu);
        q->drops += st.tp_drops;
        pthread_mutex_unlock(&p->mu);
    }
}

static void pkt_close(rg_source *s)
{
    pkt_src *p = (pkt_src *)s;
    if (!p) return;
    for (unsigned i = 0; i < RG_PKT_MAX_Q; i++) {
        pkt_q *q = &p->q[i];
        if (q->map) munmap(q->map, q->maplen);
        if (q->fd >= 0) close(q->fd);
        free(q->arena);
    }
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static rg_source *pkt_fail(pkt_src *p, char *err, size_t errlen)
{
    if (err && errlen) snprintf(err, errlen, "%s", p->err);
    pkt_close(&p->base);
    return NULL;
}

/* The BPF program of cfg->filter, compiled for Ethernet frames as libpcap compiles it. */
static int compile_filter(pkt_src *p, const rg_source_cfg *cfg, struct bpf_program *prog)
{
    pcap_t *dead = pcap_open_dead(DLT_EN10MB, 262144);
    if (!dead) {
        snprintf(p->err, sizeof p->err, "packet: out of memory");
        return -1;
    }
    int rc = pcap_compile(dead, prog, cfg->filter, 1, PCAP_NETMASK_UNKNOWN);
    if (rc < 0)
        snprintf(p->err, sizeof p->err, "packet: BPF filter \"%s\": %s", cfg->filter,
                 pcap_geterr(dead));
    pcap_close(dead);
    return rc < 0 ? -1 : 0;
}

/* Socket q on interface ifindex with its ring, bound, in the fanout group *group if n > 1
 * (the first socket creates it and sets *group);
 * 0 or -1 (message in p->err). */
static int open_q(pkt_src *p, pkt_q *q, const rg_source_cfg *cfg, int ifindex,
                  const struct bpf_program *prog, int fanout, unsigned *group, unsigned mb)
{
    const char *ifname = cfg->name;
    /* protocol 0: nothing arrives before the bind below, after the filter and the ring */
    q->fd = socket(AF_PACKET, SOCK_RAW, 0);
    if (q->fd < 0) {
        snprintf(p->err, sizeof p->err, "packet: cannot capture on %s: %s%s", ifname,
                 strerror(errno),
                 errno == EPERM || errno == EACCES ? " (capturing needs root or CAP_NET_RAW)" : "");
        return -1;
    }
    int v = TPACKET_V3;
    if (setsockopt(q->fd, SOL_PACKET, PACKET_VERSION, &v, sizeof v) < 0) {
        snprintf(p->err, sizeof p->err, "packet: %s: TPACKET_V3: %s", ifname, strerror(errno));
        return -1;
    }
    if (prog) {
        struct sock_fprog fp = {.len = (unsigned short)prog->bf_len,
                                .filter = (struct sock_filter *)prog->bf_insns};
        if (setsockopt(q->fd, SOL_SOCKET, SO_ATTACH_FILTER, &fp, sizeof fp) < 0) {
            snprintf(p->err, sizeof p->err, "packet: %s: setting the filter: %s", ifname,
                     strerror(errno));
            return -1;
        }
    }
    struct tpacket_req3 req = {
        .tp_block_size = RG_PKT_BLOCK,
        .tp_block_nr = mb * ((1u << 20) / RG_PKT_BLOCK),
        .tp_frame_size = RG_PKT_BLOCK, /* V3 packs frames in a block: only a bound */
        .tp_frame_nr = mb * ((1u << 20) / RG_PKT_BLOCK),
        .tp_retire_blk_tov = RG_PKT_BLOCK_TOV_MS,
    };
    if (setsockopt(q->fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req) < 0) {
        snprintf(p->err, sizeof p->err, "packet: %s: a ring of %u MB: %s", ifname, mb,
                 strerror(errno));
        return -1;
    }
    q->nblocks = req.tp_block_nr;
    q->maplen = (size_t)req.tp_block_size * req.tp_block_nr;
    void *m = mmap(NULL, q->maplen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_LOCKED, q->fd, 0);
    if (m == MAP_FAILED) /* MAP_LOCKED may exceed RLIMIT_MEMLOCK: then unlocked */
        m = mmap(NULL, q->maplen, PROT_READ | PROT_WRITE, MAP_SHARED, q->fd, 0);
    if (m == MAP_FAILED) {
        snprintf(p->err, sizeof p->err, "packet: %s: mapping the ring: %s", ifname,
                 strerror(errno));
        return -1;
    }
    q->map = m;
    if (cfg->promisc) {
        struct packet_mreq mr = {.mr_ifindex = ifindex, .mr_type = PACKET_MR_PROMISC};
        if (setsockopt(q->fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr) < 0) {
            snprintf(p->err, sizeof p->err, "packet: %s: promiscuous mode: %s", ifname,
                     strerror(errno));
            return -1;
        }
    }
    struct sockaddr_ll sll = {
        .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL), .sll_ifindex = ifindex};
    if (bind(q->fd, (struct sockaddr *)&sll, sizeof sll) < 0) {
        snprintf(p->err, sizeof p->err, "packet: %s: bind: %s", ifname, strerror(errno));
        return -1;
    }
    if (p->nq > 1) {
        /* the first socket asks the kernel for a group id no other group in the namespace has
         * (PACKET_FANOUT_FLAG_UNIQUEID), the others join it */
        const int first = q == &p->q[0];
        unsigned type = (unsigned)fanout | (first ? PACKET_FANOUT_FLAG_UNIQUEID : 0);
        int arg = (int)((first ? 0 : *group) | (type << 16));
        if (setsockopt(q->fd, SOL_PACKET, PACKET_FANOUT, &arg, sizeof arg) < 0) {
            snprintf(p->err, sizeof p->err, "packet: %s: joining a fanout group: %s", ifname,
                     strerror(errno));
            return -1;
        }
        socklen_t len = sizeof arg;
        if (first && getsockopt(q->fd, SOL_PACKET, PACKET_FANOUT, &arg, &len) < 0) {
            snprintf(p->err, sizeof p->err, "packet: %s: the fanout group's id: %s", ifname,
                     strerror(errno));
            return -1;
        }
        if (first) *group = (unsigned)arg & 0xffffu;
        if (fanout == PACKET_FANOUT_CBPF && q == &p->q[0]) { /* the group's program */
            struct sock_filter f[L3_MAX];
            struct sock_fprog fp = {.len = (unsigned short)l3_program(f), .filter = f};
            if (setsockopt(q->fd, SOL_PACKET, PACKET_FANOUT_DATA, &fp, sizeof fp) < 0) {
                snprintf(p->err, sizeof p->err, "packet: %s: --fanout l3's program: %s", ifname,
                         strerror(errno));
                return -1;
            }
        }
    }
    return 0;
}

static rg_source *pkt_open(const rg_source_cfg *cfg, char *err, size_t errlen)
{
    pkt_src *p = calloc(1, sizeof *p);
    if (!p) {
        if (err && errlen) snprintf(err, errlen, "packet: out of memory");
        return NULL;
    }
    p->base.ops = &rg_source_packet;
    pthread_mutex_init(&p->mu, NULL);
    for (unsigned i = 0; i < RG_PKT_MAX_Q; i++)
        p->q[i].fd = -1;
    p->stop = cfg->stop;
    p->snaplen = cfg->snaplen;
    p->nq = cfg->queues > 1 ? cfg->queues : 1;
    const char *ifname = cfg->name;
    if (!ifname || !*ifname) {
        snprintf(p->err, sizeof p->err, "packet: no interface named (--iface)");
        return pkt_fail(p, err, errlen);
    }
    if (p->nq > RG_PKT_MAX_Q) {
        snprintf(p->err, sizeof p->err, "packet: at most %d sockets in a fanout group",
                 RG_PKT_MAX_Q);
        return pkt_fail(p, err, errlen);
    }
    const char *fo = rg_source_opt_get(cfg, "fanout", "hash");
    int fanout = fanout_type(fo);
    if (fanout < 0) {
        snprintf(p->err, sizeof p->err, "packet: --fanout %s: not hash, l3, cpu or lb", fo);
        return pkt_fail(p, err, errlen);
    }
    const char *ring = rg_source_opt_get(cfg, "ring", "8");
    unsigned mb = (unsigned)strtoul(ring, NULL, 10);
    /* the interface and its link: Ethernet framing (ARPHRD_ETHER, the loopback) only */
    int ifindex = (int)if_nametoindex(ifname);
    if (!ifindex) {
        snprintf(p->err, sizeof p->err, "packet: cannot capture on %s: %s", ifname,
                 errno == ENODEV || errno == ENXIO ? "no such interface" : strerror(errno));
        return pkt_fail(p, err, errlen);
    }
    struct bpf_program prog = {0};
    if (cfg->filter && *cfg->filter && compile_filter(p, cfg, &prog))
        return pkt_fail(p, err, errlen);
    unsigned group = 0; /* the fanout group's id: the kernel picks one */
    int rc = 0;
    for (unsigned i = 0; i < p->nq && !rc; i++)
        rc = open_q(p, &p->q[i], cfg, ifindex, prog.bf_insns ? &prog : NULL, fanout, &group, mb);
    if (prog.bf_insns) pcap_freecode(&prog);
    if (rc) return pkt_fail(p, err, errlen);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname);
    if (ioctl(p->q[0].fd, SIOCGIFHWADDR, &ifr) < 0) {
        snprintf(p->err, sizeof p->err, "packet: %s: %s", ifname, strerror(errno));
        return pkt_fail(p, err, errlen);
    }
    const int hw = ifr.ifr_hwaddr.sa_family;
    if ((hw != ARPHRD_ETHER && hw != ARPHRD_LOOPBACK) ||
        rg_link_info(DLT_EN10MB, &p->li) != RG_OK) {
        snprintf(p->err, sizeof p->err,
                 "packet: %s: hardware type %d is not Ethernet (--io live reads other links)",
                 ifname, hw);
        return pkt_fail(p, err, errlen);
    }
    return &p->base;
}

/* Frame f (the ring's header h) with its VLAN tag put back after the MAC addresses, as
 * libpcap does, into the arena at *used; 0 or -1 (no room). */
static int untag(pkt_q *q, const struct tpacket3_hdr *h, rg_frame *f, size_t *used)
{
    const uint32_t cap = h->tp_snaplen;
    const size_t need = *used + cap + 4;
    if (need > q->arena_cap) return -1; /* the burst ends here: the frame comes next time */
    uint8_t *dst = q->arena + *used;
    const uint8_t *src = (const uint8_t *)h + h->tp_mac;
    const uint16_t tpid = (h->tp_status & TP_STATUS_VLAN_TPID_VALID) && h->hv1.tp_vlan_tpid
                              ? h->hv1.tp_vlan_tpid
                              : ETH_P_8021Q;
    const uint8_t tag[4] = {(uint8_t)(tpid >> 8), (uint8_t)tpid, (uint8_t)(h->hv1.tp_vlan_tci >> 8),
                            (uint8_t)h->hv1.tp_vlan_tci};
    memcpy(dst, src, 12);
    memcpy(dst + 12, tag, 4);
    memcpy(dst + 16, src + 12, cap - 12);
    f->data = dst;
    f->caplen = cap + 4;
    f->len = h->tp_len + 4;
    *used = (need + 7) & ~(size_t)7;
    return 0;
}

static int take(pkt_src *p, pkt_q *q, rg_frame *out, unsigned max)
{
    /* the blocks read through by the last burst go back to the kernel */
    for (; q->release; q->release--) {
        unsigned b = (q->blk + q->nblocks - q->release) % q->nblocks;
        __atomic_store_n(&block(q, b)->hdr.bh1.block_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
    }
    unsigned n = 0;
    size_t used = 0;
    while (n < max) {
        if (!q->inblk) {
            struct tpacket_block_desc *bd = block(q, q->blk);
            if (!(__atomic_load_n(&bd->hdr.bh1.block_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER))
                break;
            q->inblk = 1;
            q->left = bd->hdr.bh1.num_pkts;
            q->pkt = (uint8_t *)bd + bd->hdr.bh1.offset_to_first_pkt;
        }
        if (q->left) {
            const struct tpacket3_hdr *h = (const struct tpacket3_hdr *)q->pkt;
            rg_frame *f = &out[n];
            /* libpcap's test: a tag of VLAN 0 (priority only) is valid too */
            const int tagged = ((h->tp_status & TP_STATUS_VLAN_VALID) || h->hv1.tp_vlan_tci) &&
                               h->tp_snaplen >= 12;
            if (tagged) {
                if (!q->arena) {
                    q->arena_cap = RG_PKT_ARENA;
                    q->arena = malloc(q->arena_cap);
                    if (!q->arena) {
                        snprintf(p->err, sizeof p->err, "packet: out of memory for a burst");
                        p->failed = 1;
                        break;
                    }
                }
                if (untag(q, h, f, &used)) break;
            } else {
                f->data = (const uint8_t *)h + h->tp_mac;
                f->caplen = h->tp_snaplen;
                f->len = h->tp_len;
            }
            if (p->snaplen && f->caplen > p->snaplen) f->caplen = p->snaplen;
            f->ts_ns = (uint64_t)h->tp_sec * 1000000000u + h->tp_nsec;
            f->dlt = p->li.dlt;
            q->frames++;
            q->bytes += f->caplen;
            n++;
            q->left--;
            q->pkt += h->tp_next_offset;
        }
        if (!q->left) { /* read through: given back at the next call (its frames are out) */
            q->inblk = 0;
            q->release++;
            q->blk = (q->blk + 1) % q->nblocks;
        }
    }
    return (int)n;
}

static int pkt_next_burst_q(rg_source *s, unsigned qi, rg_frame *out, unsigned max)
{
    pkt_src *p = (pkt_src *)s;
    if (p->stop && *p->stop) return RG_SRC_END;
    if (p->failed) return RG_SRC_ERROR;
    if (qi >= p->nq) return RG_SRC_END;
    pkt_q *q = &p->q[qi];
    if (max > RG_BURST_MAX) max = RG_BURST_MAX;
    int n = take(p, q, out, max);
    if (n == 0 && !p->failed) {
        if (rg_source_poll(q->fd, RG_PKT_POLL_MS, "packet", p->err, sizeof p->err) < 0) {
            p->failed = 1;
            return RG_SRC_ERROR;
        }
        if (p->stop && *p->stop) return RG_SRC_END;
        n = take(p, q, out, max);
    }
    return n ? n : p->failed ? RG_SRC_ERROR : 0;
}

static int pkt_next_burst(rg_source *s, rg_frame *out, unsigned max)
{
    return pkt_next_burst_q(s, 0, out, max);
}

static int pkt_queues(const rg_source *s)
{
    return ((const pkt_src *)s)->nq > 1 ? RG_SRCQ_HW : RG_SRCQ_ONE;
}

/* The workers run on threads of the source's own (the driver's --pin does not apply). */
static int pkt_launch(rg_source *s, unsigned i, int (*fn)(void *), void *arg, char *err,
                      size_t errlen)
{
    pkt_src *p = (pkt_src *)s;
    if (i >= p->nq) {
        snprintf(err, errlen, "packet: no socket for worker %u", i);
        return -1;
    }
    return rg_source_thread_start(&p->q[i].th, &p->q[i].started, fn, arg, "packet", i, err, errlen);
}

static void pkt_join(rg_source *s, unsigned i)
{
    pkt_src *p = (pkt_src *)s;
    if (i < p->nq) rg_source_thread_join(&p->q[i].th, &p->q[i].started);
}

static uint64_t pkt_queue_frames(const rg_source *s, unsigned q)
{
    const pkt_src *p = (const pkt_src *)s;
    return q < p->nq ? p->q[q].frames : 0;
}

static const rg_linkinfo *pkt_link(const rg_source *s)
{
    return &((const pkt_src *)s)->li;
}

static void pkt_stats(const rg_source *s, rg_source_stats *st)
{
    /* the kernel's counters are read (and reset) through the socket: state of our own */
    pkt_src *p = (pkt_src *)(uintptr_t)s;
    memset(st, 0, sizeof *st);
    for (unsigned i = 0; i < p->nq; i++) {
        read_drops(p, &p->q[i]);
        pthread_mutex_lock(&p->mu);
        st->dropped += p->q[i].drops;
        pthread_mutex_unlock(&p->mu);
        st->frames += p->q[i].frames;
        st->bytes += p->q[i].bytes;
    }
}

static const char *pkt_error(const rg_source *s)
{
    const pkt_src *p = (const pkt_src *)s;
    return p->err[0] ? p->err : "no error";
}

static const rg_source_opt pkt_opts[] = {
    RG_SOPTS_CAPTURE,
    {"fanout", "MODE",
     "--workers N: how the kernel spreads frames over the\n"
     "workers' sockets: hash (default: the kernel's symmetric\n"
     "flow hash), l3 (the IP addresses only, as the stack's\n"
     "distributor: exact with IP fragments), cpu (the\n"
     "receiving CPU) or lb (round robin)",
     RG_SOPT_STR, 0, 0, RG_SOPT_KV_ONLY, 0},
    {"ring", "MB", "each socket's TPACKET_V3 ring (default 8)", RG_SOPT_NUM, 1, 4095,
     RG_SOPT_KV_ONLY, 0},
    {NULL, NULL, NULL, 0, 0, 0, 0, 0},
};

static const char *pkt_check(const rg_source_cfg *cfg)
{
    static _Thread_local char why[160];
    const char *fo = rg_source_opt_get(cfg, "fanout", "hash");
    if (fanout_type(fo) < 0) {
        snprintf(why, sizeof why, "--fanout %.64s: the modes are hash, l3, cpu and lb", fo);
        return why;
    }
    /* an option of our own is not range-checked by the driver */
    const char *ring = rg_source_opt_get(cfg, "ring", "8");
    char *end;
    unsigned long mb = strtoul(ring, &end, 10);
    if (!*ring || *end || mb < 1 || mb > 4095) {
        snprintf(why, sizeof why, "--ring %.64s: a size in MB, 1 to 4095", ring);
        return why;
    }
    return NULL;
}

const rg_source_ops rg_source_packet = {
    .name = "packet",
    .help = "an interface through TPACKET_V3 rings, one per worker (--iface IF)",
    .caps = RG_SRC_CAP_QUEUES | RG_SRC_CAP_ARRIVAL_TS,
    .opts = pkt_opts,
    .name_what = "the interface (--iface IF)",
    .cores_what = "each worker reads its socket on a thread of the packet source's",
    .check = pkt_check,
    .open = pkt_open,
    .next_burst = pkt_next_burst,
    .link = pkt_link,
    .stats = pkt_stats,
    .error = pkt_error,
    .close = pkt_close,
    .queues = pkt_queues,
    .next_burst_q = pkt_next_burst_q,
    .launch = pkt_launch,
    .join = pkt_join,
    .queue_frames = pkt_queue_frames,
};
