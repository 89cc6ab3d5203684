"""``python -m storage_workloads.cli``: the ``storage-workloads`` command line."""

import sys

from storage_workloads.cli import main

if __name__ == "__main__":
    sys.exit(main())
