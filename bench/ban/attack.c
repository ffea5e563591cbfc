/*
 * attack — refused DNS queries from many loopback source addresses, for
 * `fipstop bench ban`.
 *
 *   attack PORT ATTACKERS BURST RATE_START RATE_END QNAME
 *
 * Attacker i (0 <= i < ATTACKERS, up to 2^20) is the address 127.16.0.0 + i
 * (all of 127.0.0.0/8 is local; named's `allow-query { 127.0.0.1; }` refuses
 * and logs every one of them).  Attackers arrive in groups of WINDOW (64)
 * addresses; each of a group sends BURST queries for QNAME, interleaved
 * with the others of its group (a run of packets the kernel drops under load
 * then takes a few queries from many attackers, not a whole burst from one);
 * the total rate ramps linearly (in queries sent) from RATE_START to
 * RATE_END queries/s.  One UDP
 * socket sends them all: sendmsg(2) with IP_PKTINFO picks the source address
 * of each packet (dnsperf has one source address per process, -a).
 *
 * Prints one JSON line: queries sent, send errors, the realtime of the first
 * and the last packet (ns) and the wall time.
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
    if (argc != 7) {
        fprintf(stderr, "usage: attack PORT ATTACKERS BURST RATE_START RATE_END QNAME\n");
        return 2;
    }
    int port = atoi(argv[1]);
    long attackers = atol(argv[2]), burst = atol(argv[3]);
    double r0 = atof(argv[4]), r1 = atof(argv[5]);
    const char *qname = argv[6];
    if (port <= 0 || port > 65535 || attackers < 1 || attackers > (1L << 20) || burst < 1 || r0 <= 0 || r1 <= 0) {
        fprintf(stderr, "attack: bad arguments\n");
        return 2;
    }
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    if (s < 0) { perror("socket"); return 1; }
    int small = 4096;
    setsockopt(s, SOL_SOCKET, SO_RCVBUF, &small, sizeof small); /* answers are not read */
    struct sockaddr_in any = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (bind(s, (struct sockaddr *)&any, sizeof any) < 0) { perror("bind"); return 1; }
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    uint8_t pkt[512];
    uint64_t total = (uint64_t)attackers * (uint64_t)burst, sent = 0, errors = 0;
    uint64_t t0 = now_ns(CLOCK_MONOTONIC), first_rt = now_ns(CLOCK_REALTIME);
    /* the rate ramps linearly with the queries sent: query k is sent 1/r_k
     * after query k-1, r_k = r0 + (r1 - r0) k / total */
    double due = 0;
    const uint32_t window = 64;
    uint64_t k = 0;
    for (uint32_t g0 = 0; g0 < (uint32_t)attackers; g0 += window)
    for (long r = 0; r < burst; r++)
    for (uint32_t a = 0; a < window && g0 + a < (uint32_t)attackers; a++, k++) {
        if (k)
            due += 1.0 / (r0 + (r1 - r0) * (double)k / (double)total);
        uint64_t due_ns = t0 + (uint64_t)(due * 1e9);
        uint64_t now = now_ns(CLOCK_MONOTONIC);
        if (due_ns > now + 50000) {
            struct timespec ts = {0, (long)(due_ns - now)};
            nanosleep(&ts, NULL);
        }
        uint32_t i = g0 + a;
        size_t n = build_query(pkt, sizeof pkt, (uint16_t)k, qname);
        struct iovec iov = {pkt, n};
        char cbuf[CMSG_SPACE(sizeof(struct in_pktinfo))];
        memset(cbuf, 0, sizeof cbuf);
        struct msghdr msg = {.msg_name = &dst, .msg_namelen = sizeof dst, .msg_iov = &iov, .msg_iovlen = 1,
                             .msg_control = cbuf, .msg_controllen = sizeof cbuf};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = IPPROTO_IP;
        cm->cmsg_type = IP_PKTINFO;
        cm->cmsg_len = CMSG_LEN(sizeof(struct in_pktinfo));
        struct in_pktinfo *pi = (struct in_pktinfo *)CMSG_DATA(cm);
        pi->ipi_spec_dst.s_addr = htonl((127u << 24) | (16u << 16) | i);
        if (sendmsg(s, &msg, 0) < 0)
            errors++;
        else
            sent++;
        if ((k & 255) == 0) { /* drop the answers */
            char sink[1024];
            while (recv(s, sink, sizeof sink, MSG_DONTWAIT) > 0) {}
        }
    }
    uint64_t last_rt = now_ns(CLOCK_REALTIME);
    printf("{\"sent\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"first_ns\":%" PRIu64 ",\"last_ns\":%" PRIu64
           ",\"seconds\":%.3f}\n", sent, errors, first_rt, last_rt, (double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e9);
    return 0;
}
