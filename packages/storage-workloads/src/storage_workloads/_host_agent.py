"""The agent of a multi-host object-storage run on one host; mpirun starts it for
:mod:`storage_workloads.s3.multihost`."""

import sys

from storage_workloads.s3.multihost import agent_main

if __name__ == "__main__":
    sys.exit(agent_main())
