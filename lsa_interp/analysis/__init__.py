"""The paper's interpretability findings as library functions (one module per finding).

Shared concepts live in `lsa_interp.analysis.types` (findings, results), heads and their labels in
`lsa_interp.model.heads`, and task construction in `lsa_interp.analysis.prompts`.
"""
