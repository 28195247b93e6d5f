"""Training data and recipes shared by the front-ends (synthetic dialogues, simulated oracles)."""
