"""Benchmarks shipped with fipstop (``fipstop bench ...``).

Each benchmark compares its variants side by side in one run and reports
ratios; results go to bench/results/ as JSON with the command that made them.
"""
