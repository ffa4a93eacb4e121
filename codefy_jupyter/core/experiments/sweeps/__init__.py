"""Sweeps: one graph run over a grid or a random draw of parameter values, ranked by a metric."""
