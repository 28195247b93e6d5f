import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
os.environ.pop("TANDEM_LLM_URL", None)  # tests choose their own servers

import numpy as np
import pytest


@pytest.fixture(scope="session")
def spoken_question() -> np.ndarray:
    """A question in a Debian voice (not the assistant's), 0.5 s lead, 2 s tail, 24 kHz."""
    from tandem.audio.voices import speak

    return speak("What is the capital of France?", "festival", lead_s=0.5, tail_s=2.0)
