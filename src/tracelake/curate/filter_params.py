"""params.yaml `filter` (stage filter; export_sft and export_rl read keys of it): the keys no single
rule owns, and each rule's own key, built from its declaration (curate/filter_rules.py RULES). Its
own module, so that a new rule reruns the stages that read `filter`, not every stage of the curate
phase (a stage depends on the params code of the sections it reads: tracelake/params.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, create_model, model_validator

from tracelake.core.params import Invalid, Section
from tracelake.curate.filter_rules import RULES, Param


class _FilterShared(Section):
    """`filter:` keys no single rule owns; each rule's own key comes from its declaration
    (curate/filter_rules.py RULES), so FilterParams below is built from the registry."""

    tokenizer: str = "data/tokenizer"  # an HF tokenizer directory: n_tokens for max_tokens and reports
    count_tokens: bool = True  # false: n_tokens stays null (max_tokens must then be null)

    @model_validator(mode="after")
    def _rule_checks(self) -> _FilterShared:
        for rule in RULES:
            refused = rule.check(self)
            if refused:
                key, message = refused
                raise Invalid(message, at=(key,))
        return self


def _rule_field(param: Param) -> tuple[Any, Any]:
    default = param.default
    if isinstance(default, (list, tuple)):
        return param.type, Field(default_factory=lambda: list(default), description=param.help)
    return param.type, Field(default=default, description=param.help)


# `filter:`: the shared keys, and each rule's key with its type, default and help (filter_rules.py)
FilterParams = create_model(
    "FilterParams",
    __base__=_FilterShared,
    __module__=__name__,
    **{rule.param.name: _rule_field(rule.param) for rule in RULES if rule.param is not None},
)


SECTIONS: dict[str, tuple[Any, Any]] = {"filter": (FilterParams, Field(default_factory=FilterParams))}
