"""The ``partlog`` subcommands, one module each (``bench`` holds its five
benchmarks): ``add_parser(subparsers)`` declares the subcommand's flags,
``run(args)`` runs it and returns the exit status.  ``partlog.tools.cli``
builds the top-level parser from them and dispatches."""
