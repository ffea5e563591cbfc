/*
 * flood — a spoofed-source DNS flood for `fipstop bench attack`.
 *
 *   flood DST_IP PORT BASE_IP ATTACKERS RATE SECONDS QNAME
 *
 * Attacker i (0 <= i < ATTACKERS, up to 2^20) is the address BASE_IP + i.
 * The bench runs this in a client network namespace where BASE_IP's block is
 * a local route ("AnyIP": `ip route add local NET dev lo`), so sendmsg(2)
 * with IP_PKTINFO may put any of those addresses in the source field (one
 * socket for every attacker; dnsperf has one source address per process) and
 * the packets leave through the namespace's veth towards named.  Every
 * attacker is active from the first packet to the last: the sender cycles
 * through them in order (attacker i sends every ATTACKERS / RATE s), RATE
 * queries/s in all, in batches of BATCH packets (sendmmsg(2)), for SECONDS.
 * The answers are not read (the bench drops them in the client namespace).
 *
 * Prints one JSON line: queries sent, send errors (a full veth queue), the
 * realtime of the first and the last packet (ns), the wall time, and the
 * rate it reached.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64

static uint64_t now_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t build_query(uint8_t *buf, size_t cap, uint16_t id, const char *qname)
{
    size_t n = 0;
    if (cap < 12 + strlen(qname) + 6)
        return 0;
    buf[n++] = id >> 8; buf[n++] = id & 255;
    buf[n++] = 0x01; buf[n++] = 0x00;      /* RD */
    buf[n++] = 0; buf[n++] = 1;            /* QDCOUNT */
    memset(buf + n, 0, 6); n += 6;
    const char *p = qname;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (len == 0 || len > 63)
            return 0;
        buf[n++] = (uint8_t)len;
        memcpy(buf + n, p, len); n += len;
        p += len + (dot ? 1 : 0);
        if (!dot) break;
    }
    buf[n++] = 0;
    buf[n++] = 0; buf[n++] = 1;            /* A */
    buf[n++] = 0; buf[n++] = 1;            /* IN */
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 8) {
        fprintf(stderr, "usage: flood DST_IP PORT BASE_IP ATTACKERS RATE SECONDS QNAME\n");
        return 2;
    }
    struct in_addr dst_ip, base;
    int port = atoi(argv[2]);
    long attackers = atol(argv[4]);
    double rate = atof(argv[5]), seconds = atof(argv[6]);
    const char *qname = argv[7];
    if (inet_pton(AF_INET, argv[1], &dst_ip) != 1 || inet_pton(AF_INET, argv[3], &base) != 1 || port <= 0
        || port > 65535 || attackers < 1 || attackers > (1L << 20) || rate <= 0 || seconds <= 0) {
        fprintf(stderr, "flood: bad arguments\n");
        return 2;
    }
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    if (s < 0) { perror("socket"); return 1; }
    int small = 4096;
    setsockopt(s, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in any = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (bind(s, (struct sockaddr *)&any, sizeof any) < 0) { perror("bind"); return 1; }
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = dst_ip};

    static uint8_t pkt[BATCH][512];
    static char cbuf[BATCH][CMSG_SPACE(sizeof(struct in_pktinfo))];
    static struct iovec iov[BATCH];
    static struct mmsghdr msgs[BATCH];
    uint32_t base_h = ntohl(base.s_addr);
    uint64_t sent = 0, errors = 0, k = 0, batches = 0;
    uint64_t t0 = now_ns(CLOCK_MONOTONIC), first_rt = now_ns(CLOCK_REALTIME);
    uint64_t end = t0 + (uint64_t)(seconds * 1e9);
    uint32_t next = 0;
    for (;;) {
        /* batch b is due at t0 + b * BATCH / rate */
        uint64_t due = t0 + (uint64_t)((double)batches * BATCH / rate * 1e9);
        uint64_t now = now_ns(CLOCK_MONOTONIC);
        if (due >= end || now >= end)
            break;
        if (due > now + 20000) {
            struct timespec ts = {(time_t)((due - now) / 1000000000ull), (long)((due - now) % 1000000000ull)};
            nanosleep(&ts, NULL);
        }
        for (int m = 0; m < BATCH; m++, k++) {
            size_t n = build_query(pkt[m], sizeof pkt[m], (uint16_t)k, qname);
            iov[m] = (struct iovec){pkt[m], n};
            memset(cbuf[m], 0, sizeof cbuf[m]);
            msgs[m].msg_hdr = (struct msghdr){.msg_name = &dst, .msg_namelen = sizeof dst, .msg_iov = &iov[m],
                                              .msg_iovlen = 1, .msg_control = cbuf[m],
                                              .msg_controllen = sizeof cbuf[m]};
            struct cmsghdr *cm = CMSG_FIRSTHDR(&msgs[m].msg_hdr);
            cm->cmsg_level = IPPROTO_IP;
            cm->cmsg_type = IP_PKTINFO;
            cm->cmsg_len = CMSG_LEN(sizeof(struct in_pktinfo));
            struct in_pktinfo *pi = (struct in_pktinfo *)CMSG_DATA(cm);
            pi->ipi_spec_dst.s_addr = htonl(base_h + next);
            if (++next == (uint32_t)attackers)
                next = 0;
        }
        int off = 0;
        while (off < BATCH) {
            int r = sendmmsg(s, msgs + off, (unsigned)(BATCH - off), 0);
            if (r <= 0) {
                if (r < 0 && errno == EINTR)
                    continue;
                errors++; /* the message at off failed: count it, go on with the next */
                off++;
                continue;
            }
            sent += (uint64_t)r;
            off += r;
        }
        batches++;
        if ((batches & 15) == 0) { /* drop any answers that reached the socket */
            char sink[1024];
            while (recv(s, sink, sizeof sink, MSG_DONTWAIT) > 0) {}
        }
    }
    uint64_t last_rt = now_ns(CLOCK_REALTIME);
    double wall = (double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e9;
    printf("{\"sent\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"first_ns\":%" PRIu64 ",\"last_ns\":%" PRIu64
           ",\"seconds\":%.3f,\"rate_qps\":%.1f}\n", sent, errors, first_rt, last_rt, wall,
           wall > 0 ? (double)sent / wall : 0.0);
    return 0;
}
