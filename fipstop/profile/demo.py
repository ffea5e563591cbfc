"""A fixed profile report of a simulated named (pid 4242 of the demo host):
UI tests and screenshots show the Profile screen without a live process.

Its worker threads spend most of their time waiting for syslog's lock, as
in the paper: bpf saw the lock and the waiting stacks, py-spy is not
available (named is not Python).
"""

from __future__ import annotations

from fipstop.probes.stacks import LockWait, ProfileSample, StackCount
from fipstop.probes.threads import ThreadSplit, ThreadsSample
from fipstop.profile.session import ProbeStatus, ProfileReport

DEMO_PID = 4242
LOCK_ADDR = 0x7F3A1C0040C0
SECOND = 1_000_000_000

_SYSLOG = ("start_thread", "isc__nm_async_run", "ns_query_start", "ns_client_log", "isc_log_write",
           "__syslog_chk", "__vsyslog_internal")


def demo_report(pid: int = DEMO_PID, *, taken_mono_ns: int = 60 * SECOND, hostile: bool = False) -> ProfileReport:
    name = "isc-net-\x1b[31m0000" if hostile else "isc-net-0000"
    threads = [ThreadSplit(pid, "named", SECOND, 0.2, 0.1, 0.0, 0.0, 99.7, 0.0, 99, 100,
                           (("rt_sigtimedwait", 99),))]
    for i in range(4):
        tid = pid + 8 + i  # the tids of the fixture's rings of pid 4242 (fipstop.fixtures): 4250...
        waits = (("futex FUTEX_WAIT", 70), ("sendto unix_wait_for_peer", 6))
        threads.append(ThreadSplit(tid, name if i == 0 else f"isc-net-{i:04d}", SECOND, 14.0 + i, 4.5, 71.0 - i,
                                   6.0, 4.5, 0.0, 81, 100, waits))
    threads.append(ThreadSplit(pid + 20, "isc-timer", SECOND, 0.5, 0.1, 0.0, 0.0, 99.4, 0.0, 99, 100,
                               (("futex wait (condvar/semaphore/join)", 99),)))
    tids = tuple(pid + 8 + i for i in range(4))
    th = ThreadsSample(pid=pid, comm="named", taken_mono_ns=taken_mono_ns, duration_ns=SECOND,
                       threads=tuple(threads),
                       locks=(LockWait(LOCK_ADDR, 2_790_000_000, 212, tids),),
                       hz=100.0, hz_achieved=99.0, sampler_cpu_pct=0.41, method="syscall+wchan")
    wait_stack = StackCount((*_SYSLOG, "__lll_lock_wait", "futex_wait"), 2_790_000_000, pid + 8, name)
    hold_stack = StackCount((*_SYSLOG, "__send", "unix_dgram_sendmsg"), 1, pid + 9, "isc-net-0001")
    oncpu = (
        StackCount((*_SYSLOG, "__vfprintf_internal"), 41, pid + 8, name),
        StackCount((*_SYSLOG, "__send"), 23, pid + 9, "isc-net-0001"),
        StackCount(("start_thread", "isc__nm_async_run", "ns_query_start", "dns_rdata_towire"), 30, pid + 10,
                   "isc-net-0002"),
        StackCount(("start_thread", "isc__nm_async_run", "isc__nm_udp_read_cb", "ns__client_request"), 19,
                   pid + 11, "isc-net-0003"),
    )
    offcpu = (
        wait_stack,
        StackCount((*_SYSLOG, "__send", "unix_wait_for_peer"), 240_000_000, pid + 10, "isc-net-0002"),
        StackCount(("start_thread", "isc__nm_async_run", "uv_run", "epoll_wait"), 180_000_000, pid + 11,
                   "isc-net-0003"),
    )
    bpf = ProfileSample(source="bpf", pid=pid, taken_mono_ns=taken_mono_ns, duration_ns=SECOND, oncpu=oncpu,
                        oncpu_unit="samples", oncpu_hz=49.0, offcpu=offcpu,
                        locks=(LockWait(LOCK_ADDR, 2_810_000_000, 5_310, tids, (wait_stack,), (hold_stack,)),))
    pyspy = ProfileSample.unavailable("py-spy", pid, "not a Python process: named is not a Python interpreter "
                                      "(no libpython mapped)", taken_mono_ns)
    probes = (ProbeStatus("threads", True), ProbeStatus("bpf", True), ProbeStatus("py-spy", False, pyspy.reason))
    return ProfileReport(pid=pid, comm="named", taken_mono_ns=taken_mono_ns, duration_ns=SECOND, threads=th,
                         profiles=(bpf, pyspy), probes=probes)
