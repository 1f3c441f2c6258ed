"""Stand-in: see ../README.md."""
