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

from lsa_interp.evaluation.metrics import (
    ALTERNATE_RULES,
    Accuracy,
    AlternateRuleCounts,
    Table1,
    accuracy,
    alternate_rule_errors,
    by_transformation,
    copy_split,
    exact_match,
    in_paper_order,
    other_rule_answer,
    standard_alphabet_answer,
    table1,
)
from lsa_interp.evaluation.recall import (
    RecallCounts,
    recall_totals,
    seen_rule_answers,
    trained_answers,
    training_recall,
)
from lsa_interp.evaluation.report import (
    PAPER_TABLE1,
    REPORT_FILES,
    markdown_report,
    report_sections,
    rich_tables,
    transformation_figure,
    write_report,
)
from lsa_interp.evaluation.result import EvaluationResult, score_predictions
from lsa_interp.evaluation.rule_families import RULE_FAMILIES, FamilyCounts, family_answers, family_confusion
from lsa_interp.evaluation.run import evaluate_model, evaluation_dataset, predict, subsample
from lsa_interp.evaluation.stored import shipped_evaluation

__all__ = [
    "ALTERNATE_RULES",
    "PAPER_TABLE1",
    "REPORT_FILES",
    "RULE_FAMILIES",
    "Accuracy",
    "AlternateRuleCounts",
    "EvaluationResult",
    "FamilyCounts",
    "RecallCounts",
    "Table1",
    "accuracy",
    "alternate_rule_errors",
    "by_transformation",
    "copy_split",
    "evaluate_model",
    "evaluation_dataset",
    "exact_match",
    "family_answers",
    "family_confusion",
    "in_paper_order",
    "markdown_report",
    "other_rule_answer",
    "predict",
    "recall_totals",
    "report_sections",
    "rich_tables",
    "score_predictions",
    "seen_rule_answers",
    "shipped_evaluation",
    "standard_alphabet_answer",
    "subsample",
    "table1",
    "trained_answers",
    "training_recall",
    "transformation_figure",
    "write_report",
]
