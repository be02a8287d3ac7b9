"""The paper's interpretability findings as library functions (one module per finding).

Shared concepts live in `lsa_interp.analysis.types` (heads, findings, results) and task construction in
`lsa_interp.analysis.prompts`.
"""
