/*
 * The binary query record of BIND's native FIPS query log.
 *
 * Why binary: with `querylog yes` most of a query line's cost is string
 * building inside libns (log_query formats the name, class and type;
 * ns_client_logv vsnprintf's the message and formats the name again and the
 * peer; isc_log_write formats the line a third time under a lock).  A named
 * built with contrib/bind/fips-native.patch copies the fields below out of
 * the query (addresses, the name in wire format, type, class, flags) and
 * hands them to libfips_bind.so, which writes them into the calling thread's
 * ring in one claim, flagged FIPSBQ_REC_FLAG.  The consumer formats them
 * (fips_bindq_fmt.c) into the very line BIND would have logged, so `fipstop
 * tail`, `fipstop ips` and the dashboard see the same text either way.
 *
 * This header is self-contained (stdint only): the build of the patched named
 * copies it into BIND's tree (lib/ns/include/ns/fips_bindq.h), so the
 * producer and the consumer share one definition.  Host byte order: a record
 * never leaves the machine that wrote it.  Any change to the layout bumps
 * FIPSBQ_VERSION; a consumer formats only the version it knows.
 *
 * A record in the ring is hostile input to its consumer (shared memory another
 * process writes): every length is checked against the record's size before
 * use (fips_bindq_format).
 */
#ifndef FIPS_BINDQ_H
#define FIPS_BINDQ_H

#include <stdint.h>

/* The record flag (an application bit of the ring format, FIPS_REC_USER_MASK,
 * docs/ring-format.md section 6) that marks a binary query record. */
#define FIPSBQ_REC_FLAG 0x10u

#define FIPSBQ_MAGIC0 'F'
#define FIPSBQ_MAGIC1 'Q'
#define FIPSBQ_MAGIC2 'B'
#define FIPSBQ_VERSION 1u

/* bits of fipsbq_head.qflags: what log_query() prints after the type */
#define FIPSBQ_RD          0x0001u /* "+" (recursion wanted), else "-" */
#define FIPSBQ_SIGNED      0x0002u /* "S", and "/key SIGNER" after the peer */
#define FIPSBQ_TCP         0x0004u /* "T" */
#define FIPSBQ_DO          0x0008u /* "D" */
#define FIPSBQ_CD          0x0010u /* "C" */
#define FIPSBQ_COOKIE_OK   0x0020u /* "V" (a valid server cookie) */
#define FIPSBQ_COOKIE_WANT 0x0040u /* "K" (a client cookie only) */
#define FIPSBQ_PEER_VALID  0x0080u /* else "(no-peer)" */
#define FIPSBQ_ECS         0x0100u /* " [ECS addr/source/scope]" at the end */
#define FIPSBQ_ORIGQ       0x0200u /* the "(name)" after the peer is origq, not qname */
#define FIPSBQ_KNOWN       0x03ffu

/* The fixed part; then, in this order, qname_len bytes of the query name
 * (uncompressed wire format, absolute), origq_len bytes of the original query
 * name (FIPSBQ_ORIGQ), signer_len bytes of the signer's name (FIPSBQ_SIGNED),
 * view_len bytes of the view's name (0: no ": view" part), ident_len bytes of
 * the syslog ident.  BIND fills everything but pri, ident_len and pid;
 * libfips_bind.so fills those and appends the ident. */
struct fipsbq_head {
    uint8_t magic[3];      /* 'F' 'Q' 'B' */
    uint8_t version;       /* FIPSBQ_VERSION */
    uint8_t pri;           /* syslog facility | severity of the line's "<PRI>" */
    uint8_t ident_len;     /* <= 64 */
    uint16_t qflags;       /* FIPSBQ_* */
    int32_t pid;           /* "[PID]" after the ident; -1: none (no LOG_PID) */
    uint16_t qtype;
    uint16_t qclass;
    int16_t edns_version;  /* "E(n)"; -1: no EDNS */
    uint16_t peer_port;    /* host order */
    uint8_t peer_family;   /* 4 or 6 */
    uint8_t dest_family;   /* 4 or 6 */
    uint8_t qname_len;     /* 1..255 */
    uint8_t origq_len;
    uint8_t signer_len;
    uint8_t view_len;
    uint8_t ecs_family;    /* 4 or 6 with FIPSBQ_ECS */
    uint8_t ecs_source;    /* source prefix length */
    uint8_t ecs_scope;     /* scope prefix length */
    uint8_t pad[3];
    uint32_t peer_zone;    /* IPv6 scope id, 0: none */
    uint32_t dest_zone;
    uint64_t client;       /* the ns_client_t's address: "client @0x..." */
    uint8_t peer_addr[16]; /* network order; IPv4 in the first 4 bytes */
    uint8_t dest_addr[16];
    uint8_t ecs_addr[16];
};

#define FIPSBQ_HEAD_SIZE 96u
#define FIPSBQ_IDENT_MAX 64u
/* the largest record: the fixed part, three names, a view name, an ident */
#define FIPSBQ_MAX (FIPSBQ_HEAD_SIZE + 3u * 255u + 255u + FIPSBQ_IDENT_MAX)

/* Defined in the patched libns (lib/ns/query.c), set by libfips_bind.so
 * when preloaded (found with dlsym: a stock libns has no such symbol).
 * Returns nonzero when the record was taken (logged, or dropped and counted),
 * 0 when BIND must log the line itself. */
extern int (*ns_fips_query_hook)(const void *rec, unsigned int len);

#ifdef __cplusplus
static_assert(sizeof(struct fipsbq_head) == FIPSBQ_HEAD_SIZE, "fipsbq_head layout");
#else
_Static_assert(sizeof(struct fipsbq_head) == FIPSBQ_HEAD_SIZE, "fipsbq_head layout");
#endif

#endif
