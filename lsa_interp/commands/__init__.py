"""CLI commands of the analyses, one module per group; each module's ``register(app)`` adds its commands."""
