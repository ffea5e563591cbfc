/* The LTTng-UST tracepoint of bench/ring/peers.cc (-DPEER_LTTNG): one event a
 * record, its payload as a byte sequence, as a user would trace a log line. */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER fipsbench

#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./peers_tp.h"

#if !defined(PEERS_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define PEERS_TP_H

#include <lttng/tracepoint.h>

LTTNG_UST_TRACEPOINT_EVENT(fipsbench, rec,
    LTTNG_UST_TP_ARGS(const char *, buf, unsigned int, len),
    LTTNG_UST_TP_FIELDS(lttng_ust_field_sequence(char, msg, buf, unsigned int, len)))

#endif

#include <lttng/tracepoint-event.h>
