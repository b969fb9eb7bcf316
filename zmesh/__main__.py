"""``python -m zmesh``: the ``zmesh`` command line."""

from ._tools.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
