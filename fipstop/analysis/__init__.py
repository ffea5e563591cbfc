"""fipstop.analysis: judgements on derived snapshots - the bottleneck
diagnosis (a list of small rules) and the Nagios-style health check."""
