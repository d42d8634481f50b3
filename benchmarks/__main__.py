"""`python -m benchmarks`: the one command that runs every contender."""

from .run import main

raise SystemExit(main())
