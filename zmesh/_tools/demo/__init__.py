"""``zmesh demo`` (internal)."""
