"""Stage after compile: measure the model the target's compiler produced, and hold it to budgets.

`measure_model` turns the generator's plan (NAME.plan.json) and the model's object file into
the final report (NAME.json): code, constant and static bytes by section and function, and
the worst-case stack of the entry points from the compiler's frame sizes and the call graph
in the machine code. `check_budgets` fails a model that needs more RAM or flash than allowed;
`summary` is the line a build prints.
"""
from tinsmith.measure.binutils import MeasureError
from tinsmith.measure.budgets import BudgetError, check_budgets
from tinsmith.measure.report import measure_model
from tinsmith.measure.stack import HOSTED_EXTERNAL_CALL_BYTES
from tinsmith.measure.summary import summary

__all__ = ["BudgetError", "HOSTED_EXTERNAL_CALL_BYTES", "MeasureError", "check_budgets", "measure_model", "summary"]
