"""fipstop.outputs: derived and raw snapshots written for people and programs -
text, JSON, OpenMetrics, the node_exporter textfile and the /metrics server."""
