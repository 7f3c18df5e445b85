"""The message-family tests import their helpers as a sibling module (as tests/transcode does)."""
