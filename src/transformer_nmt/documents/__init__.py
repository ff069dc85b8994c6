"""Whole documents translated in their own format: text, HTML, Markdown, subtitles, and
the office formats (docx, pptx, odt), with structure and formatting kept."""
