"""What the back-end thinks: the oracle stream the front-end reads, and the question as the LLM is asked it
(restated openings, follow-ups resolved, the same answer recognised)."""
