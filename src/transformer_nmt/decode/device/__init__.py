"""How decoding uses the device: the model made ready (precision, the layout of its
products), threads, and how much is decoded at once.
"""
