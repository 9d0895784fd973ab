"""`python -m steward.runner`: the runtime's entry point (the placeholder until the tool loop
lands; see `steward.runner.placeholder`)."""

from steward.runner.placeholder import main

raise SystemExit(main())
