/*
 * clients — DNS queries from many loopback source addresses, answers
 * counted, for the client scaling of `fipstop bench bind --scaling`.
 *
 *   clients PORT CLIENTS SECONDS OUTSTANDING ZONE
 *
 * Client i (0 <= i < CLIENTS, up to 2^20) is the address 127.16.0.0 + i
 * (all of 127.0.0.0/8 is local).  Queries go round-robin over the clients,
 * so after CLIENTS queries every address has asked once; each asks
 * hN.ZONE A (N random below 5000) or, one query in ten, a name that does not
 * exist.  One UDP socket sends them all: sendmsg(2) with IP_PKTINFO picks
 * the source address of each packet (the sender of bench/ban/attack.c), and
 * the answers, addressed to 127.16.x.y at the socket's port, come back to it.
 * A window of OUTSTANDING queries is kept in flight (closed loop, like
 * dnsperf -q): a query is answered (its id and the client address match a
 * slot in flight), or lost after 1 s and its slot reused.  It runs SECONDS,
 * and on until every client has asked once (at most 4 x SECONDS).
 *
 * Prints one JSON line: queries sent, answered, lost, unmatched answers,
 * send errors, answers by rcode (NOERROR, NXDOMAIN, other), the clients
 * that asked, the seconds of sending and the answered queries per second.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_OUT 4096
#define LOST_NS 1000000000ull

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t put_name(uint8_t *b, const char *name)
{
    size_t n = 0;
    const char *p = name;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (len == 0 || len > 63) return 0;
        b[n++] = (uint8_t)len;
        memcpy(b + n, p, len);
        n += len;
        p += len + (dot ? 1 : 0);
    }
    b[n++] = 0;
    return n;
}

struct slot {
    uint64_t sent_ns; /* 0: free */
    uint32_t client;
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: clients PORT CLIENTS SECONDS OUTSTANDING ZONE\n");
        return 2;
    }
    int port = atoi(argv[1]);
    long clients = atol(argv[2]), outstanding = atol(argv[4]);
    double seconds = atof(argv[3]);
    const char *zone = argv[5];
    if (port <= 0 || port > 65535 || clients < 1 || clients > (1L << 20) || seconds <= 0 || outstanding < 1 ||
        outstanding > MAX_OUT || strlen(zone) > 200) {
        fprintf(stderr, "clients: bad arguments\n");
        return 2;
    }
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    if (s < 0) { perror("socket"); return 1; }
    int big = 4 << 20;
    setsockopt(s, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    setsockopt(s, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    struct sockaddr_in any = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (bind(s, (struct sockaddr *)&any, sizeof any) < 0) { perror("bind"); return 1; }
    int on = 1;
    setsockopt(s, IPPROTO_IP, IP_PKTINFO, &on, sizeof on); /* the answer's destination: which client */
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    static struct slot slots[MAX_OUT];
    uint32_t free_list[MAX_OUT], nfree = 0;
    for (long i = outstanding - 1; i >= 0; i--) free_list[nfree++] = (uint32_t)i;
    uint64_t sent = 0, answered = 0, lost = 0, unmatched = 0, errors = 0, noerror = 0, nxdomain = 0, other = 0;
    uint64_t next_client = 0, asked = 0;
    uint16_t gen = 0; /* high bits of the id: an old answer to a reused slot does not match */
    uint16_t slot_gen[MAX_OUT] = {0};
    const uint64_t t0 = now_ns(), want = (uint64_t)(seconds * 1e9), cap = 4 * want;
    uint64_t last_sweep = t0;
    uint8_t pkt[512];
    for (;;) {
        uint64_t now = now_ns();
        uint64_t el = now - t0;
        int done = (el >= want && (long)asked >= clients) || el >= cap;
        if (done) break;
        /* send while there is a free slot */
        while (nfree) {
            uint32_t sl = free_list[--nfree];
            uint32_t c = (uint32_t)(next_client % (uint64_t)clients);
            gen++;
            slot_gen[sl] = (uint16_t)(gen & 0xf);
            uint16_t id = (uint16_t)(sl | ((unsigned)slot_gen[sl] << 12));
            char name[256];
            uint32_t r = rnd();
            if (r % 10 == 9) snprintf(name, sizeof name, "nx%u.%s", rnd(), zone);
            else snprintf(name, sizeof name, "h%u.%s", r % 5000, zone);
            size_t n = 0;
            pkt[n++] = (uint8_t)(id >> 8); pkt[n++] = (uint8_t)id;
            pkt[n++] = 0x01; pkt[n++] = 0x00; /* RD */
            pkt[n++] = 0; pkt[n++] = 1;
            memset(pkt + n, 0, 6); n += 6;
            size_t qn = put_name(pkt + n, name);
            if (!qn) { errors++; free_list[nfree++] = sl; break; }
            n += qn;
            pkt[n++] = 0; pkt[n++] = 1; /* A */
            pkt[n++] = 0; pkt[n++] = 1; /* IN */
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
            pi->ipi_spec_dst.s_addr = htonl((127u << 24) | (16u << 16) | c);
            if (sendmsg(s, &msg, 0) < 0) {
                if (errno != EAGAIN && errno != ENOBUFS) errors++;
                free_list[nfree++] = sl;
                break; /* wait for answers, then try again */
            }
            sent++;
            next_client++;
            if ((long)asked < clients) asked++;
            slots[sl].sent_ns = now;
            slots[sl].client = c;
        }
        struct pollfd pfd = {s, POLLIN, 0};
        poll(&pfd, 1, 10);
        for (;;) {
            uint8_t ans[1024];
            char cbuf[CMSG_SPACE(sizeof(struct in_pktinfo))];
            struct iovec iov = {ans, sizeof ans};
            struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                                 .msg_controllen = sizeof cbuf};
            ssize_t got = recvmsg(s, &msg, MSG_DONTWAIT);
            if (got < 0) break;
            if (got < 12) { unmatched++; continue; }
            uint32_t to = 0;
            for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
                if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_PKTINFO)
                    to = ntohl(((struct in_pktinfo *)CMSG_DATA(cm))->ipi_addr.s_addr);
            uint16_t id = (uint16_t)(ans[0] << 8 | ans[1]);
            uint32_t sl = id & 0xfff;
            if (sl >= (uint32_t)outstanding || !slots[sl].sent_ns || (id >> 12) != slot_gen[sl] ||
                to != ((127u << 24) | (16u << 16) | slots[sl].client)) {
                unmatched++;
                continue;
            }
            int rcode = ans[3] & 15;
            if (rcode == 0) noerror++;
            else if (rcode == 3) nxdomain++;
            else other++;
            answered++;
            slots[sl].sent_ns = 0;
            free_list[nfree++] = sl;
        }
        now = now_ns();
        if (now - last_sweep > 100000000ull) {
            last_sweep = now;
            for (long i = 0; i < outstanding; i++)
                if (slots[i].sent_ns && now - slots[i].sent_ns > LOST_NS) {
                    slots[i].sent_ns = 0;
                    lost++;
                    free_list[nfree++] = (uint32_t)i;
                }
        }
    }
    double el = (double)(now_ns() - t0) / 1e9;
    /* answers to the queries still in flight: wait up to 1 s for them */
    uint64_t inflight = 0;
    for (long i = 0; i < outstanding; i++) inflight += slots[i].sent_ns != 0;
    uint64_t tail_end = now_ns() + LOST_NS;
    while (inflight && now_ns() < tail_end) {
        struct pollfd pfd = {s, POLLIN, 0};
        poll(&pfd, 1, 20);
        for (;;) {
            uint8_t ans[1024];
            char cbuf[CMSG_SPACE(sizeof(struct in_pktinfo))];
            struct iovec iov = {ans, sizeof ans};
            struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                                 .msg_controllen = sizeof cbuf};
            ssize_t got = recvmsg(s, &msg, MSG_DONTWAIT);
            if (got < 0) break;
            if (got < 12) { unmatched++; continue; }
            uint16_t id = (uint16_t)(ans[0] << 8 | ans[1]);
            uint32_t sl = id & 0xfff;
            if (sl >= (uint32_t)outstanding || !slots[sl].sent_ns || (id >> 12) != slot_gen[sl]) {
                unmatched++;
                continue;
            }
            int rcode = ans[3] & 15;
            if (rcode == 0) noerror++;
            else if (rcode == 3) nxdomain++;
            else other++;
            answered++;
            slots[sl].sent_ns = 0;
            inflight--;
        }
    }
    lost += inflight;
    printf("{\"queries_sent\":%" PRIu64 ",\"queries_completed\":%" PRIu64 ",\"queries_lost\":%" PRIu64
           ",\"unmatched\":%" PRIu64 ",\"send_errors\":%" PRIu64 ",\"rcodes\":{\"NOERROR\":%" PRIu64
           ",\"NXDOMAIN\":%" PRIu64 ",\"other\":%" PRIu64 "},\"clients\":%ld,\"clients_asked\":%" PRIu64
           ",\"run_time_s\":%.3f,\"qps\":%.1f}\n",
           sent, answered, lost, unmatched, errors, noerror, nxdomain, other, clients, asked, el,
           el > 0 ? (double)answered / el : 0.0);
    return 0;
}
