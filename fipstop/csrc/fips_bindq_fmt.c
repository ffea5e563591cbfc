/*
 * The consumer side of BIND's native FIPS query log: a binary query record
 * (fips_bindq.h) back into the line BIND 9.18 would have logged, byte for
 * byte: "<PRI>IDENT[PID]: client @PTR PEER[/key SIGNER] (QNAME)[: view V]:
 * query: QNAME CLASS TYPE FLAGS (DEST)[ [ECS A/S/S]]".
 *
 * Included (static functions) by the two readers of records: the binding
 * (_fips.c: fipstop tail, the dashboard's tap) and the IPS matcher
 * (ips_match.c: fipstop ips), so both show and match the same text.  Each
 * piece follows the BIND function that formats it for log_query() and
 * ns_client_logv(): dns_name_format (dns_name_totext2 with
 * DNS_NAME_MASTERFILE, so '@' and '$' are escaped too; final dot omitted),
 * dns_rdataclass_format,
 * dns_rdatatype_format (RDATATYPE_TOTEXT_SW of BIND 9.18.49's generated
 * lib/dns/code.h), isc_sockaddr_format / isc_netaddr_format (inet_ntop, "%zone"
 * for a scoped IPv6 address), dns_ecs_format, glibc's "%p".  The oracles: the
 * patched named in FIPS_BIND_VERIFY mode logs its own line after each record
 * (tests/integration/test_bind_preload.py), and BIND 9.18.49's own libdns
 * formats every type and class and random names (tests/unit/test_bindq_format.py).
 *
 * The record is hostile input (shared memory): it is copied out once, then
 * every length is checked against the record's size, names must be valid
 * uncompressed wire format, unknown versions and flags are refused.  A refused
 * record is not formatted (the caller shows it raw).  fips_bindq_parse reads
 * its argument in place: give it a private copy.
 */
#include <arpa/inet.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "fips_bindq.h"

/* the longest line fips_bindq_format writes, with its NUL: three names of
 * <= 1004 characters, a view name, the addresses and the fixed words */
#define FIPSBQ_TEXT_MAX 4608u

static const struct { uint16_t code; const char *name; } fipsbq_types[] = {
    {1, "A"}, {2, "NS"}, {3, "MD"}, {4, "MF"}, {5, "CNAME"}, {6, "SOA"}, {7, "MB"}, {8, "MG"}, {9,
    "MR"}, {10, "NULL"}, {11, "WKS"}, {12, "PTR"}, {13, "HINFO"}, {14, "MINFO"}, {15, "MX"}, {16,
    "TXT"}, {17, "RP"}, {18, "AFSDB"}, {19, "X25"}, {20, "ISDN"}, {21, "RT"}, {22, "NSAP"}, {23,
    "NSAP-PTR"}, {24, "SIG"}, {25, "KEY"}, {26, "PX"}, {27, "GPOS"}, {28, "AAAA"}, {29, "LOC"}, {30,
    "NXT"}, {31, "EID"}, {32, "NIMLOC"}, {33, "SRV"}, {34, "ATMA"}, {35, "NAPTR"}, {36, "KX"}, {37,
    "CERT"}, {38, "A6"}, {39, "DNAME"}, {40, "SINK"}, {41, "OPT"}, {42, "APL"}, {43, "DS"}, {44,
    "SSHFP"}, {45, "IPSECKEY"}, {46, "RRSIG"}, {47, "NSEC"}, {48, "DNSKEY"}, {49, "DHCID"}, {50,
    "NSEC3"}, {51, "NSEC3PARAM"}, {52, "TLSA"}, {53, "SMIMEA"}, {55, "HIP"}, {56, "NINFO"}, {57,
    "RKEY"}, {58, "TALINK"}, {59, "CDS"}, {60, "CDNSKEY"}, {61, "OPENPGPKEY"}, {62, "CSYNC"}, {63,
    "ZONEMD"}, {64, "SVCB"}, {65, "HTTPS"}, {66, "DSYNC"}, {67, "HHIT"}, {68, "BRID"}, {99, "SPF"},
    {100, "UINFO"}, {101, "UID"}, {102, "GID"}, {103, "UNSPEC"}, {104, "NID"}, {105, "L32"}, {106,
    "L64"}, {107, "LP"}, {108, "EUI48"}, {109, "EUI64"}, {249, "TKEY"}, {250, "TSIG"}, {251, "IXFR"},
    {252, "AXFR"}, {253, "MAILB"}, {254, "MAILA"}, {255, "ANY"}, {256, "URI"}, {257, "CAA"}, {258,
    "AVC"}, {259, "DOA"}, {260, "AMTRELAY"}, {261, "RESINFO"}, {262, "WALLET"}, {32768, "TA"}, {32769,
    "DLV"},
};

static size_t fipsbq_putu(char *b, unsigned long v)
{
    char t[24];
    size_t k = 0;
    do { t[k++] = (char)('0' + v % 10); v /= 10; } while (v);
    for (size_t i = 0; i < k; i++) b[i] = t[k - 1 - i];
    return k;
}

static size_t fipsbq_puts(char *b, const char *s)
{
    size_t n = strlen(s);
    memcpy(b, s, n);
    return n;
}

static const char *fipsbq_type_name(uint16_t t)
{
    size_t lo = 0, hi = sizeof fipsbq_types / sizeof fipsbq_types[0];
    while (lo < hi) { /* the table is sorted by code */
        size_t mid = (lo + hi) / 2;
        if (fipsbq_types[mid].code == t) return fipsbq_types[mid].name;
        if (fipsbq_types[mid].code < t) lo = mid + 1; else hi = mid;
    }
    return NULL;
}

static size_t fipsbq_put_type(char *b, uint16_t t)
{
    const char *s = fipsbq_type_name(t);
    if (s) return fipsbq_puts(b, s);
    size_t n = fipsbq_puts(b, "TYPE");
    return n + fipsbq_putu(b + n, t);
}

static size_t fipsbq_put_class(char *b, uint16_t c)
{
    switch (c) {
    case 0: return fipsbq_puts(b, "RESERVED0");
    case 1: return fipsbq_puts(b, "IN");
    case 3: return fipsbq_puts(b, "CH");
    case 4: return fipsbq_puts(b, "HS");
    case 254: return fipsbq_puts(b, "NONE");
    case 255: return fipsbq_puts(b, "ANY");
    default: break;
    }
    size_t n = fipsbq_puts(b, "CLASS");
    return n + fipsbq_putu(b + n, c);
}

/* 1 when w[0..n) is one whole uncompressed absolute name: labels < 64 bytes,
 * the root label exactly at the end, <= 255 bytes. */
static int fipsbq_name_ok(const uint8_t *w, size_t n)
{
    if (n == 0 || n > 255) return 0;
    size_t i = 0;
    while (i < n) {
        uint8_t l = w[i];
        if (l == 0) return i + 1 == n;
        if (l > 63 || i + 1 + l >= n) return 0;
        i += 1u + l;
    }
    return 0;
}

/* dns_name_format of a name fipsbq_name_ok accepted (at most 1003 characters);
 * bounded by n whatever the bytes say */
static size_t fipsbq_put_name(char *b, const uint8_t *w, size_t n)
{
    if (n == 1) { b[0] = '.'; return 1; } /* the root */
    size_t o = 0, i = 0;
    while (i < n && w[i] != 0) {
        uint8_t l = w[i++];
        if (l > 63 || i + l >= n) break;
        for (uint8_t k = 0; k < l; k++) {
            uint8_t c = w[i++];
            switch (c) {
            case 0x22: case 0x24: case 0x28: case 0x29: case 0x2E: case 0x3B: case 0x40: case 0x5C:
                b[o++] = '\\';
                b[o++] = (char)c;
                break;
            default:
                if (c > 0x20 && c < 0x7f) {
                    b[o++] = (char)c;
                } else {
                    b[o++] = '\\';
                    b[o++] = (char)('0' + (c / 100) % 10);
                    b[o++] = (char)('0' + (c / 10) % 10);
                    b[o++] = (char)('0' + c % 10);
                }
            }
        }
        b[o++] = '.';
    }
    return o ? o - 1 : 0; /* the final dot omitted */
}

/* isc_netaddr_format of an IPv4 (family 4) or IPv6 address */
static size_t fipsbq_put_addr(char *b, uint8_t family, const uint8_t *a, uint32_t zone)
{
    char t[INET6_ADDRSTRLEN];
    if (!inet_ntop(family == 6 ? AF_INET6 : AF_INET, a, t, sizeof t)) return 0;
    size_t n = fipsbq_puts(b, t);
    if (family == 6 && zone != 0) {
        b[n++] = '%';
        n += fipsbq_putu(b + n, zone);
    }
    return n;
}

/* glibc's "%p" of a non-NULL pointer; "(nil)" for NULL */
static size_t fipsbq_put_ptr(char *b, uint64_t v)
{
    if (!v) return fipsbq_puts(b, "(nil)");
    char t[16];
    size_t k = 0;
    do { t[k++] = "0123456789abcdef"[v & 15]; v >>= 4; } while (v);
    b[0] = '0';
    b[1] = 'x';
    for (size_t i = 0; i < k; i++) b[2 + i] = t[k - 1 - i];
    return 2 + k;
}

/* Check record p[0..n) and copy its fixed part into *hp: 0 when it is a
 * valid binary query record of a version this file knows, else -1.  For a
 * consumer that matches the binary fields without formatting the line. */
static int fips_bindq_parse(const uint8_t *p, size_t n, struct fipsbq_head *hp)
{
    struct fipsbq_head h;
    if (n < FIPSBQ_HEAD_SIZE) return -1;
    memcpy(&h, p, sizeof h);
    if (h.magic[0] != FIPSBQ_MAGIC0 || h.magic[1] != FIPSBQ_MAGIC1 || h.magic[2] != FIPSBQ_MAGIC2 ||
        h.version != FIPSBQ_VERSION || (h.qflags & ~FIPSBQ_KNOWN) != 0 || h.ident_len > FIPSBQ_IDENT_MAX)
        return -1;
    if ((h.peer_family != 4 && h.peer_family != 6 && (h.qflags & FIPSBQ_PEER_VALID)) ||
        (h.dest_family != 4 && h.dest_family != 6) ||
        ((h.qflags & FIPSBQ_ECS) && h.ecs_family != 4 && h.ecs_family != 6))
        return -1;
    if (!(h.qflags & FIPSBQ_ORIGQ) != !h.origq_len || !(h.qflags & FIPSBQ_SIGNED) != !h.signer_len) return -1;
    size_t need = (size_t)FIPSBQ_HEAD_SIZE + h.qname_len + h.origq_len + h.signer_len + h.view_len + h.ident_len;
    if (need != n) return -1;
    const uint8_t *qn = p + FIPSBQ_HEAD_SIZE, *oq = qn + h.qname_len, *sg = oq + h.origq_len;
    const uint8_t *vw = sg + h.signer_len, *id = vw + h.view_len;
    if (!fipsbq_name_ok(qn, h.qname_len) || (h.origq_len && !fipsbq_name_ok(oq, h.origq_len)) ||
        (h.signer_len && !fipsbq_name_ok(sg, h.signer_len)))
        return -1;
    /* the view and the ident are bytes BIND prints with %s: a NUL inside would have ended them */
    if (memchr(vw, 0, h.view_len) || memchr(id, 0, h.ident_len)) return -1;
    *hp = h;
    return 0;
}

/* The line of record p[0..n) into out (cap >= FIPSBQ_TEXT_MAX), no NUL.
 * Returns its length, or -1 when the record is not a valid binary query
 * record of a version this file knows. */
static long fips_bindq_format(const uint8_t *rec, size_t n, char *out, size_t cap)
{
    /* One copy out of the ring first: the record is shared memory, and a
     * writer that changed a length byte between the checks below and the
     * formatting would send it past the record and the line (review of the
     * first version: an ASan overflow with a thread flipping a label length). */
    uint8_t p[FIPSBQ_MAX];
    struct fipsbq_head h;
    if (cap < FIPSBQ_TEXT_MAX || n > sizeof p) return -1;
    memcpy(p, rec, n);
    if (fips_bindq_parse(p, n, &h) < 0) return -1;
    const uint8_t *qn = p + FIPSBQ_HEAD_SIZE, *oq = qn + h.qname_len, *sg = oq + h.origq_len;
    const uint8_t *vw = sg + h.signer_len, *id = vw + h.view_len;

    char *b = out;
    size_t o = 0;
    b[o++] = '<';
    o += fipsbq_putu(b + o, h.pri);
    b[o++] = '>';
    memcpy(b + o, id, h.ident_len);
    o += h.ident_len;
    if (h.pid >= 0) {
        b[o++] = '[';
        o += fipsbq_putu(b + o, (unsigned long)h.pid);
        b[o++] = ']';
    }
    o += fipsbq_puts(b + o, ": client @");
    o += fipsbq_put_ptr(b + o, h.client);
    b[o++] = ' ';
    if (h.qflags & FIPSBQ_PEER_VALID) {
        size_t a = fipsbq_put_addr(b + o, h.peer_family, h.peer_addr, h.peer_zone);
        if (!a) return -1;
        o += a;
        b[o++] = '#';
        o += fipsbq_putu(b + o, h.peer_port);
    } else {
        o += fipsbq_puts(b + o, "(no-peer)");
    }
    if (h.signer_len) {
        o += fipsbq_puts(b + o, "/key ");
        o += fipsbq_put_name(b + o, sg, h.signer_len);
    }
    o += fipsbq_puts(b + o, " (");
    if (h.origq_len) o += fipsbq_put_name(b + o, oq, h.origq_len);
    else o += fipsbq_put_name(b + o, qn, h.qname_len);
    b[o++] = ')';
    if (h.view_len) {
        o += fipsbq_puts(b + o, ": view ");
        memcpy(b + o, vw, h.view_len);
        o += h.view_len;
    }
    o += fipsbq_puts(b + o, ": query: ");
    o += fipsbq_put_name(b + o, qn, h.qname_len);
    b[o++] = ' ';
    o += fipsbq_put_class(b + o, h.qclass);
    b[o++] = ' ';
    o += fipsbq_put_type(b + o, h.qtype);
    b[o++] = ' ';
    b[o++] = (h.qflags & FIPSBQ_RD) ? '+' : '-';
    if (h.qflags & FIPSBQ_SIGNED) b[o++] = 'S';
    if (h.edns_version >= 0) {
        o += fipsbq_puts(b + o, "E(");
        o += fipsbq_putu(b + o, (unsigned long)h.edns_version);
        b[o++] = ')';
    }
    if (h.qflags & FIPSBQ_TCP) b[o++] = 'T';
    if (h.qflags & FIPSBQ_DO) b[o++] = 'D';
    if (h.qflags & FIPSBQ_CD) b[o++] = 'C';
    if (h.qflags & FIPSBQ_COOKIE_OK) b[o++] = 'V';
    else if (h.qflags & FIPSBQ_COOKIE_WANT) b[o++] = 'K';
    o += fipsbq_puts(b + o, " (");
    size_t a = fipsbq_put_addr(b + o, h.dest_family, h.dest_addr, h.dest_zone);
    if (!a) return -1;
    o += a;
    b[o++] = ')';
    if (h.qflags & FIPSBQ_ECS) {
        o += fipsbq_puts(b + o, " [ECS ");
        size_t e = fipsbq_put_addr(b + o, h.ecs_family, h.ecs_addr, 0);
        if (!e) return -1;
        o += e;
        b[o++] = '/';
        o += fipsbq_putu(b + o, h.ecs_source);
        b[o++] = '/';
        o += fipsbq_putu(b + o, h.ecs_scope);
        b[o++] = ']';
    }
    return (long)o;
}
