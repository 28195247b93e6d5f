"""How many sessions one `tandem serve` holds at single-session quality on the machine it was measured on.

`make capacity` (`tandem loadtest --sessions 1,2,3,4,5,6,8,10`) measures it (docs/BENCHMARKS.md, "Capacity"):
every session asks its own question at the same moment, and a count passes when what every client hears
holds (first sound median <= 0.5 s and max <= 0.8 s, every answer heard within 4 s, no missed frame, no
error). The default of `--max-sessions` is the largest count that passed on 2 cores (4, in two sweeps of
2026-12-06; 5 and 6 missed answers and first-sound maxima); a session beyond it is told the server is busy
rather than making every reply worse. Each admitted session has an LLM slot of its own.
"""
DEFAULT_MAX_SESSIONS = 4
