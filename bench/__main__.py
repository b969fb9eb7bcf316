"""``python -m bench``: see :mod:`bench.cli` and ``bench/README.md``."""

import sys

from .cli import main

sys.exit(main())
