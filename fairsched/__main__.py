"""``python -m fairsched`` runs the command line."""

from fairsched.cli import main

main()
