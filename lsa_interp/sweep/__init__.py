"""Grids of training runs: a TOML grid file, its runs packed into stacks, trained in-process or with Ray."""
