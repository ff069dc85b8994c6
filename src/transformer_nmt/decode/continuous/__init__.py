"""Continuous batching: sentences that join and leave a beam search between steps, each row
at its own position, and the caches of such rows.
"""
