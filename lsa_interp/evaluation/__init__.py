"""Evaluation of a model on a dataset: greedy exact match, the paper's Table 1, accuracy by transformation,
copy vs non-copy, the alternate-rule error analysis, the confusions between rules whose queries look alike
(`family_confusion`), answers that repeat a training row's answer for the same alphabet and query
(`training_recall`), and JSON / markdown / HTML reports.

>>> result = evaluate_model(load_model("copy-200"), load_dataset("data/copy-200"), limit=2000)  # doctest: +SKIP
>>> write_report(result, "runs/eval/copy-200")                                                   # doctest: +SKIP

Seen-alphabet numbers come from the val split, new-alphabet numbers from ``test_new_alphabets``; the
``*_with_standard`` Table 1 cells add the val split's standard-alphabet rows to the new-alphabet rows, for
comparison with the paper. `score_predictions` computes every number from given predictions.
"""

from lsa_interp.utils import lazy_exports

_EXPORTS = {  # each public name -> the module that defines it, imported on first use
    "ALTERNATE_RULES": "metrics",
    "Accuracy": "metrics",
    "AlternateRuleCounts": "metrics",
    "Table1": "metrics",
    "accuracy": "metrics",
    "alternate_rule_errors": "metrics",
    "by_transformation": "metrics",
    "copy_split": "metrics",
    "exact_match": "metrics",
    "in_paper_order": "metrics",
    "other_rule_answer": "metrics",
    "standard_alphabet_answer": "metrics",
    "table1": "metrics",
    "RecallCounts": "recall",
    "recall_totals": "recall",
    "seen_rule_answers": "recall",
    "trained_answers": "recall",
    "training_recall": "recall",
    "PAPER_TABLE1": "report",
    "REPORT_FILES": "report",
    "markdown_report": "report",
    "report_sections": "report",
    "rich_tables": "report",
    "transformation_figure": "report",
    "write_report": "report",
    "EvaluationResult": "result",
    "score_predictions": "result",
    "RULE_FAMILIES": "rule_families",
    "FamilyCounts": "rule_families",
    "family_answers": "rule_families",
    "family_confusion": "rule_families",
    "evaluate_model": "run",
    "evaluation_dataset": "run",
    "predict": "run",
    "subsample": "run",
    "shipped_evaluation": "stored",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
