# coding=utf-8
"""Models to and from Hugging Face transformers' format (convert_checkpoint.py)."""
