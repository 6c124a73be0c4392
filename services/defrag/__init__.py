"""Defragmentation: moving pods so that a waiting pod fits or whole cards become idle (docs/defrag.md)."""
