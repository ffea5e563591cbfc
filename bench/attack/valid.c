/*
 * valid — the legitimate clients of `fipstop bench attack`: their response
 * rate every BIN_MS.
 *
 *   valid DST_IP PORT SRC_IPS RATE SECONDS BIN_MS TIMEOUT_MS NAMES
 *
 * One UDP socket per source address of SRC_IPS (comma-separated; addresses
 * of the client namespace that named allows and no IPS ever bans) sends A
 * queries for h<random below NAMES>.example.test in turn, RATE queries/s in
 * all, for SECONDS.  A query counts as answered when a NOERROR answer with
 * its id reaches its socket within TIMEOUT_MS; it is counted in the bin of
 * its send time (bin b: [b, b+1) * BIN_MS after the first query), so a bin's
 * answered / sent is the response rate of the queries sent then.  After the
 * last query it waits TIMEOUT_MS for the late answers.
 *
 * Prints one JSON line: the realtime of the first query (ns), the bin width,
 * and per bin the queries sent and answered.
 */
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

#define MAX_SRC 64
#define IDS 65536

static uint64_t now_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t build_query(uint8_t *buf, uint16_t id, unsigned host)
{
    char qname[64];
    snprintf(qname, sizeof qname, "h%u.example.test", host);
    size_t n = 0;
    buf[n++] = id >> 8; buf[n++] = id & 255;
    buf[n++] = 0x00; buf[n++] = 0x00;
    buf[n++] = 0; buf[n++] = 1;
    memset(buf + n, 0, 6); n += 6;
    const char *p = qname;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        buf[n++] = (uint8_t)len;
        memcpy(buf + n, p, len); n += len;
        p += len + (dot ? 1 : 0);
        if (!dot) break;
    }
    buf[n++] = 0;
    buf[n++] = 0; buf[n++] = 1;
    buf[n++] = 0; buf[n++] = 1;
    return n;
}

/* per socket and query id: the send time (0: nothing outstanding) */
static uint64_t sent_at[MAX_SRC][IDS];

int main(int argc, char **argv)
{
    if (argc != 9) {
        fprintf(stderr, "usage: valid DST_IP PORT SRC_IPS RATE SECONDS BIN_MS TIMEOUT_MS NAMES\n");
        return 2;
    }
    struct in_addr dst_ip;
    int port = atoi(argv[2]);
    double rate = atof(argv[4]), seconds = atof(argv[5]);
    long bin_ms = atol(argv[6]), timeout_ms = atol(argv[7]);
    long names = atol(argv[8]);
    if (inet_pton(AF_INET, argv[1], &dst_ip) != 1 || port <= 0 || port > 65535 || rate <= 0 || seconds <= 0
        || bin_ms <= 0 || timeout_ms <= 0 || names < 1) {
        fprintf(stderr, "valid: bad arguments\n");
        return 2;
    }
    struct pollfd fds[MAX_SRC];
    int nsrc = 0;
    char *list = strdup(argv[3]);
    for (char *tok = strtok(list, ","); tok && nsrc < MAX_SRC; tok = strtok(NULL, ",")) {
        struct sockaddr_in src = {.sin_family = AF_INET};
        if (inet_pton(AF_INET, tok, &src.sin_addr) != 1) {
            fprintf(stderr, "valid: bad source address %s\n", tok);
            return 2;
        }
        int s = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
        if (s < 0 || bind(s, (struct sockaddr *)&src, sizeof src) < 0) {
            fprintf(stderr, "valid: bind %s: %s\n", tok, strerror(errno));
            return 1;
        }
        int big = 1 << 20;
        setsockopt(s, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
        fds[nsrc++] = (struct pollfd){.fd = s, .events = POLLIN};
    }
    if (nsrc == 0) {
        fprintf(stderr, "valid: no source address\n");
        return 2;
    }
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = dst_ip};
    long nbins = (long)(seconds * 1000 / bin_ms) + 1;
    uint32_t *bsent = calloc((size_t)nbins, 4), *bans = calloc((size_t)nbins, 4);
    uint64_t timeout_ns = (uint64_t)timeout_ms * 1000000ull, bin_ns = (uint64_t)bin_ms * 1000000ull;
    uint64_t t0 = now_ns(CLOCK_MONOTONIC), t0_rt = now_ns(CLOCK_REALTIME);
    uint64_t send_end = t0 + (uint64_t)(seconds * 1e9), end = send_end + timeout_ns;
    uint64_t k = 0, late = 0, errors = 0;
    uint32_t rng = 12345;
    uint8_t pkt[512], in[1500];
    for (;;) {
        uint64_t now = now_ns(CLOCK_MONOTONIC);
        if (now >= end)
            break;
        uint64_t due = t0 + (uint64_t)((double)k / rate * 1e9);
        if (due < send_end && now >= due) {
            int si = (int)(k % (uint64_t)nsrc);
            uint16_t id = (uint16_t)(k / (uint64_t)nsrc);
            rng = rng * 1103515245u + 12345u;
            size_t n = build_query(pkt, id, (rng >> 8) % (uint32_t)names);
            long b = (long)((due - t0) / bin_ns);
            if (sendto(fds[si].fd, pkt, n, 0, (struct sockaddr *)&dst, sizeof dst) < 0)
                errors++;
            /* a query that cannot be sent is still a query not answered */
            sent_at[si][id] = due;
            if (b < nbins)
                bsent[b]++;
            k++;
            continue;
        }
        uint64_t wait = due < send_end ? (due > now ? due - now : 0) : end - now;
        if (wait > 1000000)
            wait = 1000000;
        struct timespec ts = {0, (long)wait};
        if (ppoll(fds, (nfds_t)nsrc, &ts, NULL) <= 0)
            continue;
        uint64_t rt = now_ns(CLOCK_MONOTONIC);
        for (int si = 0; si < nsrc; si++) {
            if (!(fds[si].revents & POLLIN))
                continue;
            ssize_t r;
            while ((r = recv(fds[si].fd, in, sizeof in, 0)) >= 12) {
                uint16_t id = (uint16_t)(in[0] << 8 | in[1]);
                uint64_t at = sent_at[si][id];
                if (!at || !(in[2] & 0x80) || (in[3] & 0x0f) != 0)
                    continue;
                sent_at[si][id] = 0;
                if (rt - at > timeout_ns) {
                    late++;
                    continue;
                }
                long b = (long)((at - t0) / bin_ns);
                if (b < nbins)
                    bans[b]++;
            }
        }
    }
    printf("{\"t0_ns\":%" PRIu64 ",\"bin_ms\":%ld,\"timeout_ms\":%ld,\"sources\":%d,\"sent_total\":%" PRIu64
           ",\"send_errors\":%" PRIu64 ",\"late\":%" PRIu64 ",\"sent\":[", t0_rt, bin_ms, timeout_ms, nsrc, k,
           errors, late);
    for (long b = 0; b < nbins; b++)
        printf("%s%u", b ? "," : "", bsent[b]);
    printf("],\"answered\":[");
    for (long b = 0; b < nbins; b++)
        printf("%s%u", b ? "," : "", bans[b]);
    printf("]}\n");
    return 0;
}
