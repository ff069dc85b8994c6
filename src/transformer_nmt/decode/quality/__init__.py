"""How far to trust a translation: its confidence, degenerate outputs and the guard that
decodes them again, and sources the model's vocabulary cannot read.
"""
