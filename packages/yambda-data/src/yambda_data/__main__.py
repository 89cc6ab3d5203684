"""``python -m yambda_data`` runs the ``yambda-data`` command line."""

import sys

from yambda_data.cli import main

sys.exit(main())
