"""Text in, text out: the Translator, one call's settings and lines, batches and their
workers, output formats, target languages and word alignments.
"""
