"""The command-line tools (internal), built on the public API: cli, top, demo."""
