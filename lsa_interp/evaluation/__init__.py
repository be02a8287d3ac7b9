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

from typing import TYPE_CHECKING

from lsa_interp.utils import lazy_exports

if TYPE_CHECKING:  # what type checkers and editors read; at run time `_EXPORTS` imports each name on first use
    from lsa_interp.evaluation.metrics import (
        ALTERNATE_RULES as ALTERNATE_RULES,
        Accuracy as Accuracy,
        AlternateRuleCounts as AlternateRuleCounts,
        Table1 as Table1,
        accuracy as accuracy,
        alternate_rule_errors as alternate_rule_errors,
        by_transformation as by_transformation,
        copy_split as copy_split,
        exact_match as exact_match,
        in_paper_order as in_paper_order,
        other_rule_answer as other_rule_answer,
        standard_alphabet_answer as standard_alphabet_answer,
        table1 as table1,
    )
    from lsa_interp.evaluation.recall import (
        RecallCounts as RecallCounts,
        recall_totals as recall_totals,
        seen_rule_answers as seen_rule_answers,
        trained_answers as trained_answers,
        training_recall as training_recall,
    )
    from lsa_interp.evaluation.report import (
        PAPER_TABLE1 as PAPER_TABLE1,
        REPORT_FILES as REPORT_FILES,
        markdown_report as markdown_report,
        report_sections as report_sections,
        rich_tables as rich_tables,
        transformation_figure as transformation_figure,
        write_report as write_report,
    )
    from lsa_interp.evaluation.result import (
        EvaluationResult as EvaluationResult,
        score_predictions as score_predictions,
    )
    from lsa_interp.evaluation.rule_families import (
        RULE_FAMILIES as RULE_FAMILIES,
        FamilyCounts as FamilyCounts,
        family_answers as family_answers,
        family_confusion as family_confusion,
    )
    from lsa_interp.evaluation.run import (
        evaluate_model as evaluate_model,
        evaluation_dataset as evaluation_dataset,
        predict as predict,
        subsample as subsample,
    )
    from lsa_interp.evaluation.stored import shipped_evaluation as shipped_evaluation


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
