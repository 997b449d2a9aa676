"""Pure protocol decisions: header syntax, offsets, producers, JSON mode, cursors (no I/O)."""
