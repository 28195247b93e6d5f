"""The compact CPU front-end: registers itself as "compact"."""
from ...speak.frontend import register


def _factory(**kwargs):
    from .frontend import CompactFrontEnd

    return CompactFrontEnd(**kwargs)


register("compact", _factory)
