"""Defragmentation's I/O side, shared by the ``defrag plan`` command and the extender's ``--auto-defrag``: reading
the live state into the planner's terms (:mod:`.read`, :mod:`.reading`), and carrying a plan out (:mod:`.execute`
with its hold, waves and result). The planner itself is pure (``shared/domain/defrag*.py``)."""
