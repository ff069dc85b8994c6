"""How far to trust a translation: its confidence and features, degenerate outputs and the
guard that decodes them again.
"""
