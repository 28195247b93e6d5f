"""Audio at the edges: reading and writing wav files, the 80 ms frame clock, the test voices."""
