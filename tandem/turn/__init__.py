"""The conversation's turns: one session's frame loop, when the LLM is asked (the scheduler), talk-over
(backchannel or interruption), the cascade baseline."""
