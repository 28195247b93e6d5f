"""Whether the LLM is reachable now, as every request finds it: an outage is logged once, not once per request.

A conversation goes on without the LLM (the front-end speaks alone, the cascade says it cannot answer), so
a server whose LLM went away would otherwise log a warning for every partial transcript of every session.
`LLMOutage` turns that stream of failures into two lines, one when the LLM stops answering and one when
it answers again, and gives each outage a number, so that a session tells its client once per outage.
"""
from __future__ import annotations

import logging
import time

log = logging.getLogger(__name__)


class LLMOutage:
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.down_since: float | None = None
        self.count = 0  # outages so far; the current one's number while down
        self.last_error = ""

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def failed(self, error: str) -> bool:
        """A request found the LLM unreachable; True when that begins an outage."""
        self.last_error = error
        if self.down_since is not None:
            return False
        self.down_since = time.monotonic()
        self.count += 1
        log.warning("the LLM at %s stopped answering (%s); conversations go on with the front-end alone "
                    "until it answers again", self.endpoint, error)
        return True

    def answered(self) -> bool:
        """A request got a token; True when that ends an outage."""
        if self.down_since is None:
            return False
        took = time.monotonic() - self.down_since
        self.down_since = None
        log.warning("the LLM at %s answers again after %.1f s; oracles resume", self.endpoint, took)
        return True
