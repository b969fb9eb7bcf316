"""Side-by-side benchmark of zmesh's transport options: ``python -m bench``.

See ``bench/README.md``. Everything here talks to 127.0.0.1 only.
"""
