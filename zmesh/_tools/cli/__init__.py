"""The ``zmesh`` command line (internal)."""
