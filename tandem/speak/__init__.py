"""What the user hears: the front-end interface and registry, the voice (TTS) and what it is given to say."""
