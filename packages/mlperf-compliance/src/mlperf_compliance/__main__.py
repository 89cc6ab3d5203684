"""``python -m mlperf_compliance`` runs the ``mlperf-compliance`` command line."""

import sys

from mlperf_compliance.cli import main

sys.exit(main())
