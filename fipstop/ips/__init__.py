"""fipstop ips: a reference IPS consumer of FIPS rings that bans (jails, actions, ban events)."""
