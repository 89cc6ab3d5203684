"""``python -m yambda_data`` runs the ``yambda-data`` command line."""

from yambda_data.cli import run

run()
