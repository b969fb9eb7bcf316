"""The wire format (internal): frames, the msgpack codec, names."""
