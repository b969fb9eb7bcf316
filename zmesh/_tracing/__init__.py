"""Tracing (internal): the OpenTelemetry dispatch, imported only when enabled."""
