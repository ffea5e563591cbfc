"""``python -m fipstop`` runs the command line, the same as ``fipstop``."""

from fipstop.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
