"""python -m server: the same as `memory-server`."""

from server.cli import main

raise SystemExit(main())
