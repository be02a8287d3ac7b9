"""``python -m lsa_interp`` runs the command-line interface."""

from lsa_interp.cli import main

main()
