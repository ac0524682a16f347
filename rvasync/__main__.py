"""``python -m rvasync`` runs the ``rvasync`` command."""

import sys

from rvasync.cli import main

sys.exit(main())
