"""The conversation's turns: the turn machine (machine.py, who holds the floor), one session's frame loop,
when the LLM is asked (the scheduler), talk-over (backchannel or interruption), the cascade baseline."""
