"""How decoding stores and attends keys and values: the caches that plug into the model,
the kernels decoding installs, the probe that records one layer's attention.
"""
