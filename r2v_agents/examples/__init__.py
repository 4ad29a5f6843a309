"""Runnable examples (each has a ``main()``)."""
