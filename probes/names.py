"""The names under which each probe's raw sample is found in a frame.

A frame holds the ring probe's sample and the others' keyed by these names
(``RawFrame.aux``); recordings store them under the same keys, so a name
never changes once released.
"""

RING = "ring"
CPU = "cpu"
BACKENDS = "backends"
BANS = "bans"
FAIL2BAN = "fail2ban"
CROWDSEC = "crowdsec"
FIPSIPC = "fipsipc"  # the FIPS paper's prototype rings (System V segments)

#: the probes whose samples carry ban events, in the order they are folded
BAN_SOURCES = (BANS, FAIL2BAN, CROWDSEC)
