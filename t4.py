import time, bcc, sys
from fipstop.probes.bpf_program import program_text
txt = program_text(int(sys.argv[1]), min_ns=1000, stacks=8192, threads=4096, keys=16384)
txt = txt.replace("TRACEPOINT_PROBE(sched, sched_switch) {", "BPF_ARRAY(dbg, u64, 4);\nTRACEPOINT_PROBE(sched, sched_switch) {\n int z=0; u64 *d = dbg.lookup(&z); if (d) { __sync_fetch_and_add(d, 1); }  int o=1; d = dbg.lookup(&o); if (d) *d = bpf_get_current_pid_tgid() >> 32;")
b = bcc.BPF(text=txt)
time.sleep(1)
print([v.value for v in b["dbg"].values()], b.num_open_tracepoints() if hasattr(b,'num_open_tracepoints') else '')
print(b.tracepoint_fds if hasattr(b,'tracepoint_fds') else '', getattr(b, 'tp_fds', None))
