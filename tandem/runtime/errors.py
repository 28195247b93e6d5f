"""Errors a user can act on. The CLI prints them as one line, without a traceback."""


class TandemError(Exception):
    """Base class for errors whose message is meant for the user."""


class InputAudioError(TandemError):
    """The input audio cannot be used (unreadable, empty, silent, too long, wrong format)."""


class BackendUnavailable(TandemError):
    """A back-end server (LLM) could not be started or reached."""


class FrontEndUnavailable(TandemError):
    """The requested front-end is not available in this installation."""
