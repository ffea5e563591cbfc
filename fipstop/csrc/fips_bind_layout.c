/*
 * fips_bind_layout.c — where BIND 9's ns_client_t keeps what a query-log
 * line needs, taken from the BIND headers this preload is built against
 * (Debian's bind9-dev, the same version as the libns named loads).
 *
 * Why a file of its own: BIND's headers define many macros (LOCK, REQUIRE,
 * ISC_LIST, UNUSED, ...) that must not meet libfips or the syslog drop-in;
 * this translation unit includes them and exports plain offsets and sizes
 * (hidden: never seen outside libfips_bind.so), and fips_bind.c uses those.
 *
 * The offsets were checked against the disassembly of Debian's
 * ns_client_logv (libns-9.18.49-1~deb12u3-Debian.so: signer 0x8d8,
 * query.origqname 0xe0, query.qname 0xd8, view 0x40, peeraddr 0x8f0,
 * peeraddr_valid 0x920); the preload also refuses a libns whose file name
 * is not the one the headers came with (FIPS_BIND_LIBNS, set by the build).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
/* isc/stdatomic.h wants the configure result of BIND's own build */
#ifndef HAVE_STDATOMIC_H
#define HAVE_STDATOMIC_H 1
#endif
#include <stddef.h>

#include <dns/name.h>
#include <dns/view.h>
#include <isc/log.h>
#include <isc/sockaddr.h>
#include <ns/client.h>

#include "fips_bind_layout.h"

__attribute__((visibility("hidden"))) const struct fipsbind_layout fipsbind_layout = {
    .client_signer = offsetof(ns_client_t, signer),
    .client_origqname = offsetof(ns_client_t, query.origqname),
    .client_qname = offsetof(ns_client_t, query.qname),
    .client_view = offsetof(ns_client_t, view),
    .client_peeraddr = offsetof(ns_client_t, peeraddr),
    .client_peeraddr_valid = offsetof(ns_client_t, peeraddr_valid),
    .view_name = offsetof(dns_view_t, name),
    .category_size = sizeof(isc_logcategory_t),
    .category_name = offsetof(isc_logcategory_t, name),
    .sockaddr_formatsize = ISC_SOCKADDR_FORMATSIZE,
    .name_formatsize = DNS_NAME_FORMATSIZE,
    .log_info = ISC_LOG_INFO,
};
