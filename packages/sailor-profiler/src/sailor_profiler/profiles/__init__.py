"""Profile folders: the store and its provenance, `merge`, `import-sailor`."""
