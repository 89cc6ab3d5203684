"""One client process of the object-storage runner; started by :mod:`storage_workloads.s3`."""

import sys

from storage_workloads.s3 import client_main

if __name__ == "__main__":
    sys.exit(client_main())
