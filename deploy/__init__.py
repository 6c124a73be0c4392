"""Deployment artefacts: the Helm chart and ``render.py``, which renders it with Helm's SDK into the plain manifests."""
