"""`python -m steward.runner`: see `steward.runner.main`."""

from steward.runner.main import main

raise SystemExit(main())
