"""The operator commands ``explain`` and ``usage``: read-only views of the store through the scheduling core."""
