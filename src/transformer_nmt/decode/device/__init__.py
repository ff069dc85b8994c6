"""How decoding uses the CPU: the layout of a model's products, threads, and how much is
decoded at once.
"""
