/*
 * The offsets and sizes libfips_bind.so reads BIND's structures with
 * (fips_bind_layout.c fills them in from BIND's own headers).
 */
#ifndef FIPS_BIND_LAYOUT_H
#define FIPS_BIND_LAYOUT_H

#include <stddef.h>

struct fipsbind_layout {
    size_t client_signer;          /* dns_name_t *signer: NULL unless TSIG/SIG(0) signed */
    size_t client_origqname;       /* dns_name_t *query.origqname */
    size_t client_qname;           /* dns_name_t *query.qname */
    size_t client_view;            /* dns_view_t *view */
    size_t client_peeraddr;        /* isc_sockaddr_t peeraddr (a struct sockaddr first) */
    size_t client_peeraddr_valid;  /* bool peeraddr_valid */
    size_t view_name;              /* char *name of dns_view_t */
    size_t category_size;          /* sizeof(isc_logcategory_t) */
    size_t category_name;          /* const char *name of isc_logcategory_t */
    size_t sockaddr_formatsize;    /* ISC_SOCKADDR_FORMATSIZE */
    size_t name_formatsize;        /* DNS_NAME_FORMATSIZE */
    int log_info;                  /* ISC_LOG_INFO */
};

extern const struct fipsbind_layout fipsbind_layout;

#endif
