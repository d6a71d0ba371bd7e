"""``python -m dsh_actors``: the ``dsh-actors`` command (as ``python -m dsh_actors.cli``)."""

from __future__ import annotations

from .cli.main import main

raise SystemExit(main())
