"""``python -m openmrc.cli``: the ``openmrc`` command."""

import sys

from .main import main

sys.exit(main())
