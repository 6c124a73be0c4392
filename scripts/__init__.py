"""Maintenance scripts (docs generators); run as ``python scripts/<name>.py``."""
