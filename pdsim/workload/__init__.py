"""Request sources: synthetic generators and trace loaders (see sources.py)."""
