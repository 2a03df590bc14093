"""``python -m partlog``: the ``partlog`` command line (:mod:`partlog.tools.cli`)."""

import sys

from partlog.tools.cli import main

sys.exit(main())
