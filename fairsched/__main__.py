"""``python -m fairsched`` runs the command line."""

from fairsched.cli.main import main

main()
