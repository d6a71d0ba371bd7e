"""``python -m dsh_actors.cli``: the ``dsh-actors`` command."""

from __future__ import annotations

from .main import main

raise SystemExit(main())
