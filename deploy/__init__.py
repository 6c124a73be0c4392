"""Deployment artefacts: the Helm chart renderer (``render.py``) and its Go-template subset engine."""
