"""`python -m evalbot`: the same as the `evalbot` console script."""

from evalbot.cli import main

main()
