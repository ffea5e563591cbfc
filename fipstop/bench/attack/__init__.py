"""``fipstop bench attack``: the attack end to end (see :mod:`fipstop.bench.attack.run`)."""
