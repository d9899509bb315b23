"""``python -m fairsched`` runs the command line."""

from fairsched.cli.main import main

if __name__ == "__main__":
    main()
