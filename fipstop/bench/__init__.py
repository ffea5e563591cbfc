"""Benchmarks shipped with fipstop (``fipstop bench ring|ui|bind|record|ips|ban|attack|nft|profile``).

Each benchmark compares its variants side by side in one run and reports
ratios; results go to bench/results/ as JSON with the command that made them
(:mod:`fipstop.bench.results`).  The C helpers they compile ship with the
package (``csrc/``, symlinks to the repository's ``bench/*/``; see
:mod:`fipstop.bench.cbuild`), so they run from an installed package as from
a checkout.  Every bench takes a config object; the command line is
:mod:`fipstop.commands.bench`.
"""
