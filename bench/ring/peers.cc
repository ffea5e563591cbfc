// The peers of `fipstop bench ring` (issue 21), one process per run: a producer
// thread on --cpu and the peer's consumer on --cons-cpu, the same record and
// timing as bench/ring/ringbench.c's fips_c case (a batch of --lat-batch
// records formatted and handed over, timed once per batch), one JSON line at
// the end.  Built by fipstop/bench/ring/peers.py with exactly one of:
//
//   -DPEER_BOOST   boost::lockfree::spsc_queue (libboost-dev): the plain SPSC
//                  queue of fixed-size records; the consumer pops batches of
//                  up to 4096 (a copy out) and backs off like libfips' consumer
//   -DPEER_SPDLOG  spdlog's async logger (libspdlog-dev), overrun_oldest, one
//                  pool thread, a sink that copies each payload out and counts
//   -DPEER_LTTNG   LTTng-UST (liblttng-ust-dev): one tracepoint per record
//                  into a session the bench set up with lttng-sessiond; the
//                  consumer is lttng-consumerd, so drops and deliveries are
//                  counted by the orchestrator from `lttng` afterwards
//
// --rate R paces the producer to R records/s (0: as fast as it can), for the
// highest rate one consumer keeps up with.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#if defined(PEER_BOOST)
#include <boost/lockfree/spsc_queue.hpp>
#define PEER_NAME "boost_spsc"
#elif defined(PEER_SPDLOG)
#include <spdlog/async.h>
#include <spdlog/async_logger.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#define PEER_NAME "spdlog_async"
#elif defined(PEER_LTTNG)
#define LTTNG_UST_TRACEPOINT_DEFINE
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#include "peers_tp.h"
#define PEER_NAME "lttng_ust"
#else
#error "build with one of -DPEER_BOOST, -DPEER_SPDLOG, -DPEER_LTTNG"
#endif

namespace {

uint64_t mono_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

inline void cpu_relax() { __builtin_ia32_pause(); }

int pin_cpu(int cpu)
{
    if (cpu < 0) return 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

[[noreturn]] void die(const char *msg)
{
    std::printf("{\"error\": \"%s\"}\n", msg);
    std::fflush(stdout);
    std::exit(3);
}

struct Opts {
    uint32_t size = 128, lat_batch = 64, min_batch = 64;
    double duration = 1.0, rate = 0.0, backoff_us = 20.0;
    uint64_t capacity = 1u << 20;
    int cpu = -1, cons_cpu = -1;
};

// the record of ringbench.c: "bench ring seq=<16 hex digits> " + 'x' filler + '\n'
constexpr unsigned SEQ_OFF = 15;
char hexpair[256][2];
void make_template(char *t, uint32_t size)
{
    static const char hexdig[] = "0123456789abcdef";
    for (int i = 0; i < 256; i++) {
        hexpair[i][0] = hexdig[i >> 4];
        hexpair[i][1] = hexdig[i & 15];
    }
    std::memset(t, 'x', size);
    std::memcpy(t, "bench ring seq=", SEQ_OFF);
    std::memset(t + SEQ_OFF, '0', 16);
    t[SEQ_OFF + 16] = ' ';
    t[size - 1] = '\n';
}
inline void format_record(char *dst, uint64_t seq)
{
    char *p = dst + SEQ_OFF + 16;
    for (int i = 0; i < 8; i++) {
        p -= 2;
        std::memcpy(p, hexpair[seq & 255], 2);
        seq >>= 8;
    }
}

struct Result {
    uint64_t attempted = 0, dropped = 0, elapsed_ns = 0;
    std::vector<float> lat;
    double cpu_share = 0, wait_share = -1;
};

uint64_t thread_cpu_ns()
{
    rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0) return 0;
    return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ull +
           (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
}
uint64_t thread_wait_ns()
{
    FILE *f = std::fopen("/proc/thread-self/schedstat", "r");
    unsigned long long run = 0, wait = UINT64_MAX;
    if (f) {
        if (std::fscanf(f, "%llu %llu", &run, &wait) != 2) wait = UINT64_MAX;
        std::fclose(f);
    }
    return wait;
}

// The timed producer loop; push(buf) returns false for a dropped record.
template <class Push> Result produce(const Opts &o, char *buf, Push push)
{
    Result r;
    r.lat.reserve((size_t)(o.duration * 4e6) + 1024);
    const uint64_t c0 = thread_cpu_ns(), w0 = thread_wait_ns();
    const uint64_t t_start = mono_ns(), t_end = t_start + (uint64_t)(o.duration * 1e9);
    const double ns_per_rec = o.rate > 0 ? 1e9 / o.rate : 0.0;
    uint64_t t0 = t_start, t1 = t_start, seq = 0;
    for (;;) {
        for (uint32_t i = 0; i < o.lat_batch; i++) {
            format_record(buf, seq++);
            if (__builtin_expect(!push(buf), 0)) r.dropped++;
        }
        r.attempted += o.lat_batch;
        t1 = mono_ns();
        r.lat.push_back((float)(t1 - t0) / (float)o.lat_batch);
        if (t1 >= t_end) break;
        if (ns_per_rec > 0) { // paced: wait for the schedule of the next batch
            const uint64_t due = t_start + (uint64_t)((double)r.attempted * ns_per_rec);
            while ((t1 = mono_ns()) < due) cpu_relax();
        }
        t0 = t1;
    }
    r.elapsed_ns = t1 - t_start;
    const uint64_t c1 = thread_cpu_ns(), w1 = thread_wait_ns();
    r.cpu_share = r.elapsed_ns ? (double)(c1 - c0) / (double)r.elapsed_ns : 0;
    if (w0 != UINT64_MAX && w1 != UINT64_MAX && r.elapsed_ns) r.wait_share = (double)(w1 - w0) / (double)r.elapsed_ns;
    return r;
}

double pct(std::vector<float> &v, double p)
{
    if (v.empty()) return -1;
    size_t i = (size_t)(p * (double)(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
}

void report(const Opts &o, Result &r, long long delivered, const char *consumer, int pin_rc)
{
    std::sort(r.lat.begin(), r.lat.end());
    std::printf("{\"case\": \"%s\", \"size\": %u, \"elapsed_ns\": %llu, \"attempted\": %llu, "
                "\"accepted\": %llu, \"dropped\": %llu, \"errors\": 0, \"eagain\": 0, \"last_error\": 0, ",
                PEER_NAME, o.size, (unsigned long long)r.elapsed_ns, (unsigned long long)r.attempted,
                (unsigned long long)(r.attempted - r.dropped), (unsigned long long)r.dropped);
    if (delivered >= 0) std::printf("\"delivered\": %lld, ", delivered);
    std::printf("\"lat_batch\": %u, \"lat_samples\": %zu, \"ns_p50\": %.3f, \"ns_p99\": %.3f, \"ns_p999\": %.3f, "
                "\"ns_max\": %.3f, \"cpu_share\": %.4f, \"runq_wait_share\": %.4f, \"pinned_cpu\": %d, "
                "\"pin_ok\": %s, \"rate_asked\": %.1f, \"consumer\": \"%s\"}\n",
                o.lat_batch, r.lat.size(), pct(r.lat, 0.5), pct(r.lat, 0.99), pct(r.lat, 0.999),
                r.lat.empty() ? -1.0 : (double)r.lat.back(), r.cpu_share, r.wait_share, o.cpu,
                pin_rc == 0 ? "true" : "false", o.rate, consumer);
    std::fflush(stdout);
}

#if defined(PEER_BOOST)
template <uint32_t Z> struct Rec {
    char b[Z];
};

template <uint32_t Z> void run(const Opts &o, int pin_rc)
{
    using R = Rec<Z>;
    boost::lockfree::spsc_queue<R> q(std::max<uint64_t>(o.capacity / Z, 2));
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> delivered{0};
    std::thread cons([&] {
        pin_cpu(o.cons_cpu);
        std::vector<R> out(4096);
        const uint64_t backoff_ns = (uint64_t)(o.backoff_us * 1000);
        uint64_t n_all = 0, sink = 0;
        for (;;) {
            const bool last = stop.load(std::memory_order_acquire);
            size_t n = q.pop(out.data(), out.size());
            for (size_t i = 0; i < n; i++) sink += (unsigned char)out[i].b[Z - 1];
            n_all += n;
            if (n == 0 && last) break;
            if (n < o.min_batch && !last) {
                const uint64_t until = mono_ns() + backoff_ns;
                while (mono_ns() < until) cpu_relax();
            }
        }
        delivered.store(n_all + (sink & 0), std::memory_order_relaxed);
    });
    R rec;
    make_template(rec.b, Z);
    Result r = produce(o, rec.b, [&](const char *) { return q.push(rec); });
    stop.store(true, std::memory_order_release);
    cons.join();
    report(o, r, (long long)delivered.load(), "thread in the producer's process: pop(batch of 4096) copies out", pin_rc);
}
#endif

#if defined(PEER_SPDLOG)
class CountSink : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
  public:
    std::atomic<uint64_t> n{0};
    char out[65536];

  protected:
    void sink_it_(const spdlog::details::log_msg &m) override
    {
        std::memcpy(out, m.payload.data(), std::min<size_t>(m.payload.size(), sizeof out));
        n.fetch_add(1, std::memory_order_relaxed);
    }
    void flush_() override {}
};
#endif

} // namespace

int main(int argc, char **argv)
{
    Opts o;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string k = argv[i];
        const char *v = argv[i + 1];
        if (k == "--size") o.size = (uint32_t)std::strtoul(v, nullptr, 10);
        else if (k == "--duration") o.duration = std::strtod(v, nullptr);
        else if (k == "--rate") o.rate = std::strtod(v, nullptr);
        else if (k == "--lat-batch") o.lat_batch = (uint32_t)std::strtoul(v, nullptr, 10);
        else if (k == "--min-batch") o.min_batch = (uint32_t)std::strtoul(v, nullptr, 10);
        else if (k == "--backoff-us") o.backoff_us = std::strtod(v, nullptr);
        else if (k == "--capacity") o.capacity = std::strtoull(v, nullptr, 10);
        else if (k == "--cpu") o.cpu = std::atoi(v);
        else if (k == "--cons-cpu") o.cons_cpu = std::atoi(v);
        else die("unknown option");
    }
    if (o.size < 32 || o.size > 4096) die("--size must be 32..4096");
    if (o.lat_batch < 1) o.lat_batch = 1;
    const int pin_rc = pin_cpu(o.cpu);
#if defined(PEER_BOOST)
    switch (o.size) {
    case 64: run<64>(o, pin_rc); break;
    case 128: run<128>(o, pin_rc); break;
    case 256: run<256>(o, pin_rc); break;
    case 512: run<512>(o, pin_rc); break;
    default: die("boost_spsc: --size must be 64, 128, 256 or 512 (fixed-size records)");
    }
#elif defined(PEER_SPDLOG)
    {
        const int cc = o.cons_cpu;
        spdlog::init_thread_pool(std::max<uint64_t>(o.capacity / o.size, 2), 1, [cc] { pin_cpu(cc); });
        auto sink = std::make_shared<CountSink>();
        auto lg = std::make_shared<spdlog::async_logger>("bench", sink, spdlog::thread_pool(),
                                                         spdlog::async_overflow_policy::overrun_oldest);
        std::vector<char> buf(o.size);
        make_template(buf.data(), o.size);
        Result r = produce(o, buf.data(), [&](const char *b) {
            lg->log(spdlog::level::info, spdlog::string_view_t(b, o.size));
            return true; // overrun_oldest never refuses: what it overwrote is counted below
        });
        // let the pool thread drain what is still queued (at most 10 s)
        const uint64_t deadline = mono_ns() + 10000000000ull;
        auto tp = spdlog::thread_pool();
        while (sink->n.load() + tp->overrun_counter() < r.attempted && mono_ns() < deadline) usleep(1000);
        r.dropped = tp->overrun_counter();
        const long long delivered = (long long)sink->n.load();
        report(o, r, delivered, "spdlog's pool thread: a sink that copies each payload out", pin_rc);
        spdlog::shutdown();
    }
#elif defined(PEER_LTTNG)
    {
        std::vector<char> buf(o.size);
        make_template(buf.data(), o.size);
        Result r = produce(o, buf.data(), [&](const char *b) {
            lttng_ust_tracepoint(fipsbench, rec, b, o.size);
            return true; // discarded events are counted by the session (lttng list)
        });
        report(o, r, -1, "lttng-consumerd (the session's, per-uid buffers)", pin_rc);
    }
#endif
    return 0;
}
