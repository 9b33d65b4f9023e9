"""layouts.py: the weight layout converters."""
