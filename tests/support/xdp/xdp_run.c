/* xdp_run: load an XDP object built by `rubikgen build --xdp` and run its program on every
 * frame of a capture with BPF_PROG_TEST_RUN (the kernel's verifier and interpreter/JIT, no
 * interface). Before the run, keys given with --drop/--bypass (hex of struct rgx_key) are
 * inserted into those maps; after it, their counters, the rules' and the stats are printed.
 *   xdp_run OBJ CAPTURE [--drop HEX]... [--bypass HEX]...
 *   xdp_run OBJ --attach IFACE generic|native [--hold]   (libbpf fills rg_progs, which
 *       `ip link ... obj` does not: it loads one program of the file).  --hold: stays until
 *       its standard input closes, then detaches: the kernel empties a program array once no
 *       file descriptor of it is left (so without --hold every tail call fails after we exit
 *       and the attached program defers every packet)
 * Output: "frame N VERDICT" per frame (1-based, XDP_* numbers), then "drop HEX P B",
 * "bypass HEX P B", "rule I P B", "stat I V". Exit 3 when the kernel refuses BPF.
 * CAPTURE is a classic pcap file (the test converts pcapng with editcap): libpcap's headers
 * clash with the kernel's (struct bpf_insn), so the few lines of its format are read here. */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_SIZE 48 /* struct rgx_key: layer, len, 40 bytes */
#define MAX_KEYS 16

struct count {
    uint64_t packets, bytes;
};
/* a flow map's value (struct rgx_fcount): the totals first */
struct fcount {
    uint64_t packets, bytes, dir_packets[2], dir_bytes[2];
};

static int unhex(const char *s, unsigned char *out)
{
    memset(out, 0, KEY_SIZE);
    size_t n = strlen(s);
    if (n > 2 * KEY_SIZE || n % 2) return -1;
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
        out[i] = (unsigned char)v;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: xdp_run OBJ CAPTURE [--drop HEX]... [--bypass HEX]...\n");
        return 2;
    }
    struct bpf_object *obj = bpf_object__open_file(argv[1], NULL);
    if (!obj) {
        fprintf(stderr, "xdp_run: cannot open %s\n", argv[1]);
        return 2;
    }
    if (bpf_object__load(obj)) {
        fprintf(stderr, "xdp_run: the kernel refused the program: %s\n", strerror(errno));
        return errno == EPERM ? 3 : 1;
    }
    struct bpf_program *prog = bpf_object__find_program_by_name(obj, "rg_xdp");
    int pfd = bpf_program__fd(prog);
    if (strcmp(argv[2], "--attach") == 0 && (argc == 5 || argc == 6)) {
        unsigned ifx = if_nametoindex(argv[3]);
        int native = strcmp(argv[4], "native") == 0;
        __u32 flags = native ? XDP_FLAGS_DRV_MODE : XDP_FLAGS_SKB_MODE;
        if (!ifx || bpf_xdp_attach((int)ifx, pfd, flags, NULL)) {
            fprintf(stderr, "xdp_run: attach to %s (%s): %s\n", argv[3], argv[4], strerror(errno));
            return 1;
        }
        printf("attached %s %s\n", argv[3], argv[4]);
        if (argc == 6 && strcmp(argv[5], "--hold") == 0) { /* rg_progs stays filled meanwhile */
            fflush(stdout);
            while (fgetc(stdin) != EOF) {
            }
            bpf_xdp_detach((int)ifx, flags, NULL);
        }
        return 0; /* the attachment holds the programs (rg_progs is emptied, see above) */
    }
    const char *names[2] = {"rg_drop", "rg_bypass"};
    unsigned char keys[MAX_KEYS][KEY_SIZE];
    const char *hex[MAX_KEYS];
    int which[MAX_KEYS], nkeys = 0;
    for (int i = 3; i + 1 < argc && nkeys < MAX_KEYS; i += 2) {
        int w = strcmp(argv[i], "--drop") == 0 ? 0 : strcmp(argv[i], "--bypass") == 0 ? 1 : -1;
        if (w < 0 || unhex(argv[i + 1], keys[nkeys])) {
            fprintf(stderr, "xdp_run: bad argument %s %s\n", argv[i], argv[i + 1]);
            return 2;
        }
        struct fcount zero = {0};
        int mfd = bpf_object__find_map_fd_by_name(obj, names[w]);
        if (bpf_map_update_elem(mfd, keys[nkeys], &zero, BPF_ANY)) {
            fprintf(stderr, "xdp_run: map update: %s\n", strerror(errno));
            return 1;
        }
        hex[nkeys] = argv[i + 1];
        which[nkeys++] = w;
    }
    FILE *pc = fopen(argv[2], "rb");
    uint32_t gh[6];
    if (!pc || fread(gh, 4, 6, pc) != 6 ||
        (gh[0] != 0xa1b2c3d4u && gh[0] != 0xa1b23c4du)) {
        fprintf(stderr, "xdp_run: %s: not a classic pcap file (native byte order)\n", argv[2]);
        return 2;
    }
    static unsigned char buf[262144];
    uint32_t rh[4];
    long n = 0;
    while (fread(rh, 4, 4, pc) == 4) {
        uint32_t caplen = rh[2];
        if (caplen > sizeof buf || fread(buf, 1, caplen, pc) != caplen) {
            fprintf(stderr, "xdp_run: truncated record %ld\n", n + 1);
            return 2;
        }
        n++;
        LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = buf, .data_size_in = caplen,
                    .repeat = 1);
        if (bpf_prog_test_run_opts(pfd, &o)) {
            fprintf(stderr, "xdp_run: test run of frame %ld: %s\n", n, strerror(errno));
            return errno == EPERM ? 3 : 1;
        }
        printf("frame %ld %u\n", n, o.retval);
    }
    fclose(pc);
    for (int k = 0; k < nkeys; k++) {
        struct fcount c = {0};
        int mfd = bpf_object__find_map_fd_by_name(obj, names[which[k]]);
        bpf_map_lookup_elem(mfd, keys[k], &c);
        printf("%s %s %llu %llu\n", which[k] ? "bypass" : "drop", hex[k],
               (unsigned long long)c.packets, (unsigned long long)c.bytes);
    }
    int rfd = bpf_object__find_map_fd_by_name(obj, "rg_rules");
    struct bpf_map *rm = bpf_object__find_map_by_name(obj, "rg_rules");
    for (uint32_t i = 0; i < bpf_map__max_entries(rm); i++) {
        struct count c = {0, 0};
        bpf_map_lookup_elem(rfd, &i, &c);
        printf("rule %u %llu %llu\n", i, (unsigned long long)c.packets,
               (unsigned long long)c.bytes);
    }
    int sfd = bpf_object__find_map_fd_by_name(obj, "rg_stats");
    for (uint32_t i = 0; i < 7; i++) {
        uint64_t v = 0;
        bpf_map_lookup_elem(sfd, &i, &v);
        printf("stat %u %llu\n", i, (unsigned long long)v);
    }
    bpf_object__close(obj);
    return 0;
}
