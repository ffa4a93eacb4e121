"""Sweeps and studies the server owns, and their statistics."""
