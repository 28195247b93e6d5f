"""The back-end LLM: one OpenAI-compatible streaming client for every server, and the embedded one."""
