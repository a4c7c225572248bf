"""The ``fedplane`` command: composes the sub-commands every package provides (the only place that imports them all)."""
