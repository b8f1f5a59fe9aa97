"""``python -m ddrl ...`` is the ``ddrl`` command (ddrl/cli.py), for an environment whose
scripts folder is not on PATH."""
from ddrl.cli import main

main()
