"""Stand-in torchvision: only the names `import streaming` needs (see ../README.md)."""
