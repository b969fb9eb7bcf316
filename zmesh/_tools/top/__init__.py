"""``zmesh top``, a live view of a mesh (internal)."""
