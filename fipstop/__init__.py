"""fipstop: monitor, record and diagnose FIPS shared-memory logging rings.

The package also ships the ring itself: libfips (C, ``fipstop/lib/libfips.so``)
and its Python binding ``fipstop._fips``.
"""

__version__ = "0.1.0"
