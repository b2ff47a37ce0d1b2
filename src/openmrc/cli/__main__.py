"""``python -m openmrc.cli``: the ``openmrc`` command."""

import sys

from .app import main

sys.exit(main())
