"""``fipstop ips --check FILE``: what each jail would count on the lines of a
file, without a domain (the ``fail2ban-regex`` of fipstop ips).  Lines go
through the same C matcher as records; a line that starts with ``<PRI>`` is
treated as a record of libfips_syslog.so."""

from __future__ import annotations

import sys
from collections import Counter

from fipstop.errors import FipsError
from fipstop.ips.jails import compile_jail, select_jails
from fipstop.textsafe import escape_text

TOP = 10


def check_lines(args) -> int:
    specs = select_jails(args)
    jails = [compile_jail(s) for s in specs]
    try:
        f = sys.stdin.buffer if args.check == "-" else open(args.check, "rb")
    except OSError as exc:
        raise FipsError(f"ips --check: cannot read {args.check}: {exc.strerror}") from None
    results = {j.name: Counter() for j in jails}
    addrs = {j.name: Counter() for j in jails}
    n = 0
    with f:
        for raw in f:
            n += 1
            line = raw.rstrip(b"\r\n")
            for j in jails:
                res, ip = j.match(line)
                results[j.name][res] += 1
                if ip:
                    addrs[j.name][ip] += 1
    print(f"{n} lines")
    for s in specs:
        r, a = results[s.name], addrs[s.name]
        print(f"jail {escape_text(s.name)}: {r['hit']} matched, {r['ignored']} ignored (ignoreregex), "
              f"{r['not_ip']} not an IP, {r['nomatch']} not matched; {len(a)} addresses, "
              f"{sum(1 for c in a.values() if c >= s.maxretry)} at or above maxretry {s.maxretry}")
        for ip, c in a.most_common(TOP):
            print(f"  {c:>8}  {ip}")
    return 0
