"""fipstop.commands: one module per subcommand of ``fipstop``.

A command module parses its options (argparse), builds a plain config object,
calls the library and prints; its exit status is its return value.  Only
:mod:`fipstop.cli` imports command modules; the library never does.

``fipstop.cli`` imports every command module to build the parser, so a
command module imports at its top only what the parser needs (argparse,
:mod:`fipstop.commands.options`); the library, textual, numpy and the C
binding are imported inside ``run``, which keeps ``fipstop --help`` fast.
"""
