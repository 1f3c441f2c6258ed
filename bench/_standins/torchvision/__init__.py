"""A stand-in torchvision for bench/read.py's peers venv only (see ../README.md)."""
