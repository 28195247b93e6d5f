"""`tandem bench`: spoken questions (questions.py) and dialogues (dialogues.py) through the modes on the
same audio, at LLM delays (delay.py), with what they share in common.py."""
