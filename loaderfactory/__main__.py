"""``python -m loaderfactory ...`` runs the command-line app."""

from loaderfactory.hydra.cli import main

if __name__ == "__main__":
    main()
