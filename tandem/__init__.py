"""tandem: a fast front-end that never waits, fed by a slow back-end that thinks (KAME-style)."""

__version__ = "0.1.0"
